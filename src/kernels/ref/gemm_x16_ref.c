/*
 * gemm_x16_ref.c - scalar reference of the 16-row interleaved q4_0 / q8_0 /
 * q4_K / q5_K / q6_K / iq4_xs kernels (gemm_x16.h): the specification the SIMD kernels equal bit
 * for bit.
 * Block sums are exact in int32 (|s| <= 32*15*128 + 8*32*128 for q4_0,
 * 32*255*128 + 128*32*128 for q8_0); the float steps are a product rounded
 * to float and one fused multiply-add, as the SIMD kernel does them.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "kernels/gemm_x16.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

/* One token's 16 outputs.  Weights as unsigned u (q4_0 nibble, q8_0 w+128,
 * iq4_nl codebook value + 128: is_q4 == 2, q5_0 nibble | fifth bit << 4:
 * is_q4 == 3; q4_1: is_q4 == 4, q5_1: 5, as q4_0 / q5_0 with a min),
 * element order of the block. */
static void x16_ref(int is_q4, int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a,
                    const int32_t *corr, const float *da) {
    const bool q1 = is_q4 >= 4;
    const size_t qb = is_q4 == 3 || is_q4 == 5 ? 320 : is_q4 ? 256 : 512, q1b = is_q4 == 5 ? 384 : 320;
    for (int i = 0; i < X16_ROWS; i++) {
        float f = acc ? y[i] : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *q = q1 ? g + (size_t)b * q1b + X16Q1_QS : g + kern_x16_quant_offset(qb, nb, b), *qh = q;
            if (is_q4 == 3 || is_q4 == 5) q += 64; /* the transposed fifth bits first */
            const signed char *qa = (const signed char *)(a + (size_t)b * 34 + 2); /* q8_0: d, then qs */
            int32_t s = q1 ? 0 : corr[b];
            if (is_q4) {
                for (int j = 0; j < 4; j++)
                    for (int k = 0; k < 4; k++) {
                        const unsigned v = q[64 * j + 4 * i + k];
                        int32_t u0 = is_q4 == 2 ? kite_iq4nl_values[v & 15] + 128 : (int32_t)(v & 15);
                        int32_t u1 = is_q4 == 2 ? kite_iq4nl_values[v >> 4] + 128 : (int32_t)(v >> 4);
                        if (is_q4 == 3 || is_q4 == 5) { /* bits j and 4 + j of byte k */
                            u0 |= ((qh[4 * i + k] >> j) & 1) << 4;
                            u1 |= ((qh[4 * i + k] >> (4 + j)) & 1) << 4;
                        }
                        s += u0 * qa[4 * j + k] + u1 * qa[16 + 4 * j + k];
                    }
            } else {
                for (int j = 0; j < 8; j++)
                    for (int k = 0; k < 4; k++) s += (int32_t)q[64 * j + 4 * i + k] * qa[4 * j + k];
            }
            uint16_t h;
            memcpy(&h, (q1 ? g + (size_t)b * q1b + X16Q1_D : g + kern_x16_scale_offset(qb, nb, b)) + 2 * (size_t)i, 2);
            const float d = fp16_to_fp32(h) * da[b];
            f = fmaf((float)s, d, f);
            if (q1) { /* the min term: m_w * (d_a * sum_a), corr = sum_a */
                memcpy(&h, g + (size_t)b * q1b + X16Q1_M + 2 * (size_t)i, 2);
                f = fmaf(fp16_to_fp32(h), da[b] * (float)corr[b], f);
            }
        }
        y[i] = f;
    }
}

static void x16_ref_tokens(int is_q4, int acc, int64_t nb, float *y, int64_t ldy, const void *grp, const void *a,
                           size_t a_stride, const int32_t *corr, const float *da, int64_t c_stride, int nt) {
    for (int t = 0; t < nt; t++)
        x16_ref(is_q4, acc, nb, y + (int64_t)t * ldy, grp, (const unsigned char *)a + (size_t)t * a_stride,
                corr + (int64_t)t * c_stride, da + (int64_t)t * c_stride);
}

KERN_GEMM_X16_DECL(gemm_x16_q4_0_ref) {
    x16_ref_tokens(1, acc, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt);
}

KERN_GEMM_X16_DECL(gemm_x16_q8_0_ref) {
    x16_ref_tokens(0, acc, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt);
}

KERN_GEMM_X16_DECL(gemm_x16_q5_0_ref) {
    x16_ref_tokens(3, acc, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt);
}

KERN_GEMM_X16_DECL(gemm_x16_q4_1_ref) {
    x16_ref_tokens(4, acc, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt);
}

KERN_GEMM_X16_DECL(gemm_x16_q5_1_ref) {
    x16_ref_tokens(5, acc, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt);
}

KERN_GEMM_X16_DECL(gemm_x16_iq4_nl_ref) {
    x16_ref_tokens(2, acc, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt);
}

/* A k-quant reference (one token) for nt tokens: q8_K rows a_stride apart. */
typedef void (*kquant_ref_fn)(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a);
static void kquant_ref_tokens(kquant_ref_fn one, int acc, int64_t nb, float *y, int64_t ldy, const void *grp,
                              const void *a, size_t a_stride, int nt) {
    for (int t = 0; t < nt; t++)
        one(acc, nb, y + (int64_t)t * ldy, grp, (const unsigned char *)a + (size_t)t * a_stride);
}

/* The registry entry of a k-quant reference: one token at a time (q8_K rows carry their own
 * scales and sums: corr and da are not used). */
#define KQUANT_REF_X16(NAME, ONE)                                                \
    KERN_GEMM_X16_DECL(NAME) {                                                  \
        (void)corr;                                                              \
        (void)da;                                                                \
        (void)c_stride;                                                          \
        kquant_ref_tokens(ONE, acc, nb, y, ldy, grp, a, a_stride, nt);           \
    }

/* isum += sum_k s[k] * gsum[k], csum += sum_k s[k] * bsums[k] over the 16 scale groups of the q8_K
 * block at qa (q6_K, q3_K). */
static void group_sums(const int s[16], const int32_t gsum[16], const unsigned char *qa, int32_t *isum,
                       int32_t *csum) {
    for (int k = 0; k < 16; k++) {
        int16_t bs;
        memcpy(&bs, qa + offsetof(block_q8_K, bsums) + 2 * k, 2);
        *isum += s[k] * gsum[k];
        *csum += s[k] * bs;
    }
}

/* q4_K (q5 = 0) or q5_K (q5 = 1), one token: the arithmetic of gemm_x16.h
 * on the X16K_* (and X16Q5_QH) block format; a: the token's q8_K row (float
 * d, 256 qs, 16 int16 bsums per block). */
static void x16_q45_K_ref(int q5, int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    const size_t bb = q5 ? X16Q5_BLOCK_BYTES : X16K_BLOCK_BYTES;
    for (int i = 0; i < X16_ROWS; i++) {
        float f = acc ? y[i] : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *x = g + (size_t)b * bb, *qa = a + (size_t)b * sizeof(block_q8_K);
            const signed char *q8 = (const signed char *)(qa + offsetof(block_q8_K, qs));
            int32_t isum = 0, msum = 0;
            for (int j = 0; j < 8; j++) {
                const int s = x[X16K_SC + 16 * j + i], n = x[X16K_ML + 16 * (j / 2) + i];
                const int sc = s & 63, m = ((n >> (4 * (j & 1))) & 15) | (s >> 6) << 4;
                int32_t sj = 0;
                for (int c = 8 * (j / 2); c < 8 * (j / 2) + 8; c++)
                    for (int k = 0; k < 4; k++) {
                        int u = (x[X16K_QS + 64 * c + 4 * i + k] >> (4 * (j & 1))) & 15;
                        if (q5) u |= ((x[X16Q5_QH + 64 * (c % 8) + 4 * i + k] >> j) & 1) << 4;
                        sj += u * q8[64 * (j / 2) + 32 * (j & 1) + 4 * (c % 8) + k];
                    }
                isum += sc * sj;
                int16_t b0, b1;
                memcpy(&b0, qa + offsetof(block_q8_K, bsums) + 4 * j, 2);
                memcpy(&b1, qa + offsetof(block_q8_K, bsums) + 4 * j + 2, 2);
                msum += m * (b0 + b1);
            }
            uint16_t hd, hm;
            float dy;
            memcpy(&hd, x + X16K_D + 2 * i, 2);
            memcpy(&hm, x + X16K_DMIN + 2 * i, 2);
            memcpy(&dy, qa + offsetof(block_q8_K, d), sizeof dy);
            f = fmaf(-(float)msum, fp16_to_fp32(hm) * dy, f);
            f = fmaf((float)isum, fp16_to_fp32(hd) * dy, f);
        }
        y[i] = f;
    }
}

static void x16_q4_K_ref(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    x16_q45_K_ref(0, acc, nb, y, g, a);
}
static void x16_q5_K_ref(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    x16_q45_K_ref(1, acc, nb, y, g, a);
}

KQUANT_REF_X16(gemm_x16_q5_K_ref, x16_q5_K_ref)

/* iq4_xs, one token (gemm_x16.h): codebook values + 128 per nibble, sub-block
 * sums times ls_j - 32, then isum - 128 * csum. */
static void x16_iq4_xs_ref(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    for (int i = 0; i < X16_ROWS; i++) {
        float f = acc ? y[i] : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *x = g + (size_t)b * X16I4_BLOCK_BYTES, *qa = a + (size_t)b * sizeof(block_q8_K);
            const signed char *q8 = (const signed char *)(qa + offsetof(block_q8_K, qs));
            uint16_t sh;
            memcpy(&sh, x + X16I4_SH + 2 * i, 2);
            int32_t isum = 0, csum = 0;
            for (int j = 0; j < 8; j++) {
                const int ls = (((x[X16I4_SL + 16 * (j / 2) + i] >> (4 * (j & 1))) & 15) | ((sh >> (2 * j)) & 3) << 4) - 32;
                int32_t sj = 0;
                for (int c = 4 * j; c < 4 * j + 4; c++)
                    for (int k = 0; k < 4; k++) {
                        const int q = x[X16I4_QS + 64 * c + 4 * i + k];
                        sj += (kite_iq4nl_values[q & 15] + 128) * q8[32 * j + 4 * (c % 4) + k];
                        sj += (kite_iq4nl_values[q >> 4] + 128) * q8[32 * j + 16 + 4 * (c % 4) + k];
                    }
                int16_t b0, b1;
                memcpy(&b0, qa + offsetof(block_q8_K, bsums) + 4 * j, 2);
                memcpy(&b1, qa + offsetof(block_q8_K, bsums) + 4 * j + 2, 2);
                isum += ls * sj;
                csum += ls * (b0 + b1);
            }
            uint16_t hd;
            float dy;
            memcpy(&hd, x + X16I4_D + 2 * i, 2);
            memcpy(&dy, qa + offsetof(block_q8_K, d), sizeof dy);
            f = fmaf((float)(isum - 128 * csum), fp16_to_fp32(hd) * dy, f);
        }
        y[i] = f;
    }
}

KQUANT_REF_X16(gemm_x16_iq4_xs_ref, x16_iq4_xs_ref)

KQUANT_REF_X16(gemm_x16_q4_K_ref, x16_q4_K_ref)

/* q6_K, one token (gemm_x16.h): element values u from the step layout,
 * scale group sums, then isum - 32 * csum. */
static void x16_q6_K_ref(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    for (int i = 0; i < X16_ROWS; i++) {
        float f = acc ? y[i] : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *qs = g + kern_x16q6_offset(b, X16Q6_QS), *qa = a + (size_t)b * sizeof(block_q8_K);
            const signed char *sc = (const signed char *)(g + kern_x16q6_offset(b, X16Q6_SC));
            const signed char *q8 = (const signed char *)(qa + offsetof(block_q8_K, qs));
            int32_t gsum[16] = {0};
            for (int s = 0; s < 4; s++)
                for (int kq = 0; kq < 4; kq++)
                    for (int j = 0; j < 4; j++) {
                        const int h = s / 2, k = 4 * (s % 2) + kq, e = 128 * h + 4 * k + j;
                        const int A = qs[768 * s + 64 * kq + 4 * i + j], H = qs[768 * s + 256 + 64 * kq + 4 * i + j],
                                  B = qs[768 * s + 512 + 64 * kq + 4 * i + j];
                        const int u[4] = {(A & 15) | (H & 3) << 4, (B & 15) | (H >> 2 & 3) << 4,
                                          (A >> 4) | (H >> 4 & 3) << 4, (B >> 4) | (H >> 6 & 3) << 4};
                        for (int q = 0; q < 4; q++) gsum[(e + 32 * q) / 16] += u[q] * q8[e + 32 * q];
                    }
            int32_t isum = 0, csum = 0;
            int sk[16];
            for (int k = 0; k < 16; k++) sk[k] = sc[16 * k + i];
            group_sums(sk, gsum, qa, &isum, &csum);
            uint16_t hd;
            float dy;
            memcpy(&hd, g + kern_x16q6_offset(b, X16Q6_D) + 2 * i, 2);
            memcpy(&dy, qa + offsetof(block_q8_K, d), sizeof dy);
            f = fmaf((float)(isum - 32 * csum), fp16_to_fp32(hd) * dy, f);
        }
        y[i] = f;
    }
}

KQUANT_REF_X16(gemm_x16_q6_K_ref, x16_q6_K_ref)

/* The unsigned value of element e (< 256) of row i in a q3_K (q3 = 1) or q2_K group block's QS
 * (and HM) chunks (gemm_x16.h): the 2-bit field, with q3_K's third bit as bit 2. */
static int x16_q23_u(const unsigned char *qs, const unsigned char *hm, int i, int e) {
    const int h = e / 128, j = e % 128 / 32, l = e % 32, c = l / 4, k = l % 4;
    int u = (qs[64 * (8 * h + c) + 4 * i + k] >> (2 * j)) & 3;
    if (hm) u |= ((hm[64 * c + 4 * i + k] >> (4 * h + j)) & 1) << 2;
    return u;
}

/* q3_K, one token (gemm_x16.h): u = low | third << 2, scale group sums times s_g, then
 * isum - 4 * csum. */
static void x16_q3_K_ref(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    for (int i = 0; i < X16_ROWS; i++) {
        float f = acc ? y[i] : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *sc = g + kern_x16q3_offset(b, X16Q3_SC), *qa = a + (size_t)b * sizeof(block_q8_K);
            const signed char *q8 = (const signed char *)(qa + offsetof(block_q8_K, qs));
            int32_t gsum[16] = {0};
            for (int e = 0; e < QK_K; e++)
                gsum[e / 16] += x16_q23_u(g + kern_x16q3_offset(b, X16Q3_QS), g + kern_x16q3_offset(b, X16Q3_HM), i, e) *
                                q8[e];
            int32_t isum = 0, csum = 0;
            int sk[16]; /* the 6-bit scales as the file packs them (gemm_x16.h), minus 32 */
            for (int k = 0; k < 16; k++)
                sk[k] = (((sc[16 * (k % 8) + i] >> (4 * (k / 8))) & 15) | ((sc[16 * (8 + k % 4) + i] >> (2 * (k / 4))) & 3) << 4) - 32;
            group_sums(sk, gsum, qa, &isum, &csum);
            uint16_t hd;
            float dy;
            memcpy(&hd, g + kern_x16q3_offset(b, X16Q3_D) + 2 * i, 2);
            memcpy(&dy, qa + offsetof(block_q8_K, d), sizeof dy);
            f = fmaf((float)(isum - 4 * csum), fp16_to_fp32(hd) * dy, f);
        }
        y[i] = f;
    }
}

KQUANT_REF_X16(gemm_x16_q3_K_ref, x16_q3_K_ref)

/* q2_K, one token (gemm_x16.h): the mins term first, then the scaled sums (q4_K's order). */
static void x16_q2_K_ref(int acc, int64_t nb, float *y, const unsigned char *g, const unsigned char *a) {
    for (int i = 0; i < X16_ROWS; i++) {
        float f = acc ? y[i] : 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *x = g + (size_t)b * X16Q2_BLOCK_BYTES, *qa = a + (size_t)b * sizeof(block_q8_K);
            const signed char *q8 = (const signed char *)(qa + offsetof(block_q8_K, qs));
            int32_t gsum[16] = {0};
            for (int e = 0; e < QK_K; e++) gsum[e / 16] += x16_q23_u(x + X16Q2_QS, NULL, i, e) * q8[e];
            int32_t isum = 0, msum = 0;
            for (int k = 0; k < 16; k++) {
                const int s = x[X16Q2_SC + 16 * k + i];
                int16_t bs;
                memcpy(&bs, qa + offsetof(block_q8_K, bsums) + 2 * k, 2);
                isum += (s & 15) * gsum[k];
                msum += (s >> 4) * bs;
            }
            uint16_t hd, hm;
            float dy;
            memcpy(&hd, x + X16Q2_D + 2 * i, 2);
            memcpy(&hm, x + X16Q2_DMIN + 2 * i, 2);
            memcpy(&dy, qa + offsetof(block_q8_K, d), sizeof dy);
            f = fmaf(-(float)msum, fp16_to_fp32(hm) * dy, f);
            f = fmaf((float)isum, fp16_to_fp32(hd) * dy, f);
        }
        y[i] = f;
    }
}

KQUANT_REF_X16(gemm_x16_q2_K_ref, x16_q2_K_ref)
