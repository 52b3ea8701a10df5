/*
 * vec_dot_quant.c - scalar integer dot products of quantized weight rows with
 * 8-bit activation rows (q8_0 for q4_0/q4_1/q5_0/q5_1/q8_0/iq4_nl, q8_K for
 * the K-quants and iq4_xs).
 *
 * Each block's sum of products is exact in int32; it is then scaled in float
 * (weight scale * activation scale, multiplied in that order) and added to a
 * float sum block by block (q5_K as q4_K, iq4_xs as q6_K, iq4_nl and q5_0 as q4_0:
 * the same float expressions).  Blocks are addressed by byte offset and fields
 * read with memcpy, so rows may sit at any address.
 *
 * Range: q4_0 |sumi| <= 32*8*128; q8_0 <= 32*128*128; q4_K per super-block
 * <= 8*63*(32*15*128) + 8*63*(32*128); q5_K <= 8*63*(32*31*128);
 * q6_K <= 16*128*(16*32*128); iq4_xs <= 8*32*(32*127*128); q3_K <= 16*32*(16*4*128);
 * q2_K <= 16*15*(16*3*128): all far inside int32.
 * q3_K takes q6_K's float expression, q2_K q4_K's.
 */
#include <stddef.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

static inline float ld_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}
static inline float ld_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline int16_t ld_i16(const unsigned char *p) {
    int16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

void vec_dot_q4_0_q8_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q4_0), y += sizeof(block_q8_0)) {
        const unsigned char *qs = x + offsetof(block_q4_0, qs);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_0, qs));
        int32_t sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((qs[j] & 0xF) - 8) * q8[j];
            sumi += ((qs[j] >> 4) - 8) * q8[j + QK4_0 / 2];
        }
        sum += (float)sumi * (ld_half(x + offsetof(block_q4_0, d)) * ld_half(y + offsetof(block_q8_0, d)));
    }
    *out = sum;
}

void vec_dot_q8_0_q8_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q8_0), y += sizeof(block_q8_0)) {
        const int8_t *qx = (const int8_t *)(x + offsetof(block_q8_0, qs));
        const int8_t *qy = (const int8_t *)(y + offsetof(block_q8_0, qs));
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += qx[j] * qy[j];
        sum += (float)sumi * (ld_half(x + offsetof(block_q8_0, d)) * ld_half(y + offsetof(block_q8_0, d)));
    }
    *out = sum;
}

/* q5_0: w = (nibble | bit e of qh << 4) - 16 for element e; q4_0's float
 * expression. */
void vec_dot_q5_0_q8_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q5_0), y += sizeof(block_q8_0)) {
        const unsigned char *qs = x + offsetof(block_q5_0, qs);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_0, qs));
        uint32_t qh;
        memcpy(&qh, x + offsetof(block_q5_0, qh), sizeof qh);
        int32_t sumi = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            sumi += (int32_t)(((qs[j] & 0xF) | ((qh >> j) & 1) << 4) - 16) * q8[j];
            sumi += (int32_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16) * q8[j + QK5_0 / 2];
        }
        sum += (float)sumi * (ld_half(x + offsetof(block_q5_0, d)) * ld_half(y + offsetof(block_q8_0, d)));
    }
    *out = sum;
}

/* q4_1 / q5_1: w = d*q + m with q in 0..15 (0..31 for q5_1, the fifth bit
 * from qh as in q5_0).  Against a q8_0 row a = da*qa the block's dot is
 * (d*da)*sum(q*qa) + (m*da)*sum(qa): two exact integer sums, then this float
 * expression (the SIMD kernels sum in vector lanes: within a budget). */
static inline void dot_q41_ref(const int Q5, int64_t n, float *out, const void *w, const void *a) {
    const size_t qb = Q5 ? sizeof(block_q5_1) : sizeof(block_q4_1);
    const size_t qs_off = Q5 ? offsetof(block_q5_1, qs) : offsetof(block_q4_1, qs);
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += qb, y += sizeof(block_q8_0)) {
        const unsigned char *qs = x + qs_off;
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_0, qs));
        uint32_t qh = 0;
        if (Q5) memcpy(&qh, x + offsetof(block_q5_1, qh), sizeof qh);
        int32_t sumi = 0, suma = 0;
        for (int j = 0; j < QK4_1 / 2; j++) {
            sumi += (int32_t)((qs[j] & 0xF) | ((qh >> j) & 1) << 4) * q8[j];
            sumi += (int32_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) * q8[j + QK4_1 / 2];
            suma += q8[j] + q8[j + QK4_1 / 2];
        }
        const float da = ld_half(y + offsetof(block_q8_0, d));
        /* d then m open both blocks */
        sum += (float)sumi * (ld_half(x) * da) + (float)suma * (ld_half(x + 2) * da);
    }
    *out = sum;
}

void vec_dot_q4_1_q8_0_ref(int64_t n, float *out, const void *w, const void *a) { dot_q41_ref(0, n, out, w, a); }

void vec_dot_q5_1_q8_0_ref(int64_t n, float *out, const void *w, const void *a) { dot_q41_ref(1, n, out, w, a); }

/* iq4_nl: q4_0's block with the nibbles indexing the codebook
 * (kite_iq4nl_values); q4_0's float expression. */
void vec_dot_iq4_nl_q8_0_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_iq4_nl), y += sizeof(block_q8_0)) {
        const unsigned char *qs = x + offsetof(block_iq4_nl, qs);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_0, qs));
        int32_t sumi = 0;
        for (int j = 0; j < QK4_NL / 2; j++) {
            sumi += kite_iq4nl_values[qs[j] & 0xF] * q8[j];
            sumi += kite_iq4nl_values[qs[j] >> 4] * q8[j + QK4_NL / 2];
        }
        sum += (float)sumi * (ld_half(x + offsetof(block_iq4_nl, d)) * ld_half(y + offsetof(block_q8_0, d)));
    }
    *out = sum;
}

/* q4_K (q5 = 0): x = d*sc_j*q - dmin*m_j per 32-element sub-block j, q in
 * 0..15.  sum_i x_i*a_i = dy*(d*sum_j sc_j*sum(q*a8) - dmin*sum_j m_j*sum(a8)).
 * q5_K (q5 = 1): the same with a fifth bit, q = nibble | bit j of qh[k] << 4
 * for element k of sub-block j (0..31); d, dmin and the scales sit where
 * q4_K has them, qh before qs. */
static void dot_q45_K(int q5, int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const size_t bb = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += bb, y += sizeof(block_q8_K)) {
        const uint8_t *scales = x + offsetof(block_q4_K, scales);
        const uint8_t *qs = x + (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
        const uint8_t *qh = x + offsetof(block_q5_K, qh);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        const unsigned char *bsums = y + offsetof(block_q8_K, bsums);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            int sc, m;
            ref_scale_min_k4(j, scales, &sc, &m);
            const uint8_t *q = qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            int32_t s = 0;
            for (int k = 0; k < 32; k++)
                s += (((q[k] >> shift) & 0xF) | (q5 ? ((qh[k] >> j) & 1) << 4 : 0)) * q8[32 * j + k];
            isum += sc * s;
            msum += m * (ld_i16(bsums + 2 * (2 * j)) + ld_i16(bsums + 2 * (2 * j + 1)));
        }
        const float dy = ld_f32(y + offsetof(block_q8_K, d));
        const float d = ld_half(x + offsetof(block_q4_K, d)) * dy;
        const float dmin = ld_half(x + offsetof(block_q4_K, dmin)) * dy;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *out = sum;
}

_Static_assert(offsetof(block_q5_K, d) == offsetof(block_q4_K, d) &&
                   offsetof(block_q5_K, dmin) == offsetof(block_q4_K, dmin) &&
                   offsetof(block_q5_K, scales) == offsetof(block_q4_K, scales),
               "q5_K keeps q4_K's header");

void vec_dot_q4_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a) { dot_q45_K(0, n, out, w, a); }

void vec_dot_q5_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a) { dot_q45_K(1, n, out, w, a); }

/* q6_K: x = d*sc_g*(u - 32) per 16-element group g, u in 0..63 from 4 low
 * bits (ql) and 2 high bits (qh), in 128-element halves as ggml lays out. */
void vec_dot_q6_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q6_K), y += sizeof(block_q8_K)) {
        const uint8_t *ql = x + offsetof(block_q6_K, ql);
        const uint8_t *qh = x + offsetof(block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(x + offsetof(block_q6_K, scales));
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        int8_t u[QK_K];
        for (int h = 0; h < 2; h++) {
            const uint8_t *l = ql + 64 * h, *hh = qh + 32 * h;
            int8_t *o = u + 128 * h;
            for (int k = 0; k < 32; k++) {
                o[k] = (int8_t)((l[k] & 0xF) | ((hh[k] & 3) << 4));
                o[k + 32] = (int8_t)((l[k + 32] & 0xF) | (((hh[k] >> 2) & 3) << 4));
                o[k + 64] = (int8_t)((l[k] >> 4) | (((hh[k] >> 4) & 3) << 4));
                o[k + 96] = (int8_t)((l[k + 32] >> 4) | (((hh[k] >> 6) & 3) << 4));
            }
        }
        int32_t isum = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t s = 0;
            for (int k = 0; k < 16; k++) s += (u[16 * g + k] - 32) * q8[16 * g + k];
            isum += sc[g] * s;
        }
        sum += ld_half(x + offsetof(block_q6_K, d)) * ld_f32(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* iq4_xs: x = d*(ls_j - 32)*v[q] per 32-element sub-block j, v the iq4_nl
 * codebook (kite_iq4nl_values), ls_j the 6-bit scale from scales_l (low 4
 * bits) and scales_h (high 2); elements 0..15 in the low nibbles of
 * qs[16j..16j+15], 16..31 in the high ones.  The float expression is
 * q6_K's: d * dy * isum. */
void vec_dot_iq4_xs_q8_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_iq4_xs), y += sizeof(block_q8_K)) {
        const uint8_t *qs = x + offsetof(block_iq4_xs, qs), *sl = x + offsetof(block_iq4_xs, scales_l);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        const int sh = (uint16_t)ld_i16(x + offsetof(block_iq4_xs, scales_h));
        int32_t isum = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            const int ls = ((sl[j / 2] >> (4 * (j & 1))) & 0xF) | ((sh >> (2 * j)) & 3) << 4;
            int32_t s = 0;
            for (int k = 0; k < 16; k++) {
                s += kite_iq4nl_values[qs[16 * j + k] & 0xF] * q8[32 * j + k];
                s += kite_iq4nl_values[qs[16 * j + k] >> 4] * q8[32 * j + 16 + k];
            }
            isum += (ls - 32) * s;
        }
        sum += ld_half(x + offsetof(block_iq4_xs, d)) * ld_f32(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* q3_K: x = d*sc_g*q per 16-element group g, sc_g signed (ref_q3_K_scales), q in -4..3:
 * its low 2 bits from qs, minus 4 where its hmask bit is clear.  Element e = 128h + 32k + r
 * sits in qs[32h + r] at bits 2k and in hmask[r] at bit 4h + k (dequantize_row_q3_K). */
void vec_dot_q3_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q3_K), y += sizeof(block_q8_K)) {
        const uint8_t *qs = x + offsetof(block_q3_K, qs), *hm = x + offsetof(block_q3_K, hmask);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        int8_t sc[16];
        ref_q3_K_scales(x + offsetof(block_q3_K, scales), sc);
        int32_t isum = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t s = 0;
            for (int i = 0; i < 16; i++) {
                const int e = 16 * g + i, h = e / 128, k = (e / 32) % 4, r = e % 32;
                const int q = ((qs[32 * h + r] >> (2 * k)) & 3) - (((hm[r] >> (4 * h + k)) & 1) ? 0 : 4);
                s += q * q8[e];
            }
            isum += sc[g] * s;
        }
        sum += ld_half(x + offsetof(block_q3_K, d)) * ld_f32(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* q2_K: x = d*(sc_g & 15)*q - dmin*(sc_g >> 4) per 16-element group g, q in 0..3 at
 * q3_K's low-bit positions; the mins act through the q8_K bsums (one per group). */
void vec_dot_q2_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q2_K), y += sizeof(block_q8_K)) {
        const uint8_t *qs = x + offsetof(block_q2_K, qs), *sc = x + offsetof(block_q2_K, scales);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        const unsigned char *bsums = y + offsetof(block_q8_K, bsums);
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t s = 0;
            for (int i = 0; i < 16; i++) {
                const int e = 16 * g + i, h = e / 128, k = (e / 32) % 4, r = e % 32;
                s += ((qs[32 * h + r] >> (2 * k)) & 3) * q8[e];
            }
            isum += (sc[g] & 15) * s;
            msum += (sc[g] >> 4) * ld_i16(bsums + 2 * g);
        }
        const float dy = ld_f32(y + offsetof(block_q8_K, d));
        const float d = ld_half(x + offsetof(block_q2_K, d)) * dy;
        const float dmin = ld_half(x + offsetof(block_q2_K, dmin)) * dy;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *out = sum;
}

/* tq2_0: x = d*(q - 1), q in 0..2 at q2_K's positions (element 128g + 32k + m
 * is bits 2k of qs[32g + m]); q3_K's float expression. */
void vec_dot_tq2_0_q8_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_tq2_0), y += sizeof(block_q8_K)) {
        const uint8_t *qs = x + offsetof(block_tq2_0, qs);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        int32_t isum = 0;
        for (int e = 0; e < QK_K; e++) isum += (((qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3) - 1) * q8[e];
        sum += ld_half(x + offsetof(block_tq2_0, d)) * ld_f32(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* Trit k (0 = most significant) of a tq1_0 byte: the byte times 3^k mod 256
 * keeps trits k.. as a fraction of 256; times 3, the integer part is trit k. */
static inline int tq1_trit(uint8_t byte, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (((uint8_t)(byte * pow3[k])) * 3) >> 8;
}

/* tq1_0: x = d*(t - 1), t the base-3 digits in dequantize_row_tq1_0's order
 * (element 32k + m: trit k of qs[m]; 160 + 16k + m: of qs[32 + m]; 240 + 4k +
 * m: of qh[m]); q3_K's float expression. */
void vec_dot_tq1_0_q8_K_ref(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_tq1_0), y += sizeof(block_q8_K)) {
        const uint8_t *qs = x + offsetof(block_tq1_0, qs), *qh = x + offsetof(block_tq1_0, qh);
        const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));
        int32_t isum = 0;
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) isum += (tq1_trit(qs[m], k) - 1) * q8[32 * k + m];
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) isum += (tq1_trit(qs[32 + m], k) - 1) * q8[160 + 16 * k + m];
        for (int k = 0; k < 4; k++)
            for (int m = 0; m < 4; m++) isum += (tq1_trit(qh[m], k) - 1) * q8[240 + 4 * k + m];
        sum += ld_half(x + offsetof(block_tq1_0, d)) * ld_f32(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

KERN_DEFINE_GEMM(gemm_q4_0_q8_0_ref, vec_dot_q4_0_q8_0_ref)
KERN_DEFINE_GEMM(gemm_q8_0_q8_0_ref, vec_dot_q8_0_q8_0_ref)
KERN_DEFINE_GEMM(gemm_q4_K_q8_K_ref, vec_dot_q4_K_q8_K_ref)
KERN_DEFINE_GEMM(gemm_q6_K_q8_K_ref, vec_dot_q6_K_q8_K_ref)
KERN_DEFINE_GEMM(gemm_q5_K_q8_K_ref, vec_dot_q5_K_q8_K_ref)
KERN_DEFINE_GEMM(gemm_iq4_xs_q8_K_ref, vec_dot_iq4_xs_q8_K_ref)
KERN_DEFINE_GEMM(gemm_iq4_nl_q8_0_ref, vec_dot_iq4_nl_q8_0_ref)
KERN_DEFINE_GEMM(gemm_q5_0_q8_0_ref, vec_dot_q5_0_q8_0_ref)
KERN_DEFINE_GEMM(gemm_q4_1_q8_0_ref, vec_dot_q4_1_q8_0_ref)
KERN_DEFINE_GEMM(gemm_q5_1_q8_0_ref, vec_dot_q5_1_q8_0_ref)
KERN_DEFINE_GEMM(gemm_q3_K_q8_K_ref, vec_dot_q3_K_q8_K_ref)
KERN_DEFINE_GEMM(gemm_q2_K_q8_K_ref, vec_dot_q2_K_q8_K_ref)
KERN_DEFINE_GEMM(gemm_tq1_0_q8_K_ref, vec_dot_tq1_0_q8_K_ref)
KERN_DEFINE_GEMM(gemm_tq2_0_q8_K_ref, vec_dot_tq2_0_q8_K_ref)
