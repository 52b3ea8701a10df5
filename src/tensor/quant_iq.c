/*
 * quant_iq.c - reference quantizers and dequantizers of the non-linear
 * 4-bit types (iq4_nl, iq4_xs) and the ternary types (tq1_0, tq2_0).
 *
 * DESIGN
 *   iq4_nl / iq4_xs: a 4-bit code indexes a fixed, non-uniform 16-entry
 *   codebook (kite_iq4nl_values, denser near zero, like a weight histogram):
 *     iq4_nl  w = d * value[q]                  blocks of 32, fp16 d
 *     iq4_xs  w = d * (ls - 32) * value[q]      256 = 8 x 32, 6-bit ls per 32
 *   Nibble packing is q4_0's (element j low, j+16 high, per 32).
 *   The encoder is ggml's (without importance matrix): for each block of 32,
 *   nearest codebook entry for a start scale, then 15 trial scales around
 *   it with a weighted (x^2) least-squares scale per trial; the best fit
 *   wins and the codes are recomputed with it.  iq4_xs then quantizes the 8
 *   block scales to 6 bits against the largest one and re-picks the codes.
 *   This is the encoder llama-quantize uses for model files (ggml's
 *   quantize_iq4_nl, 7 trials each way), not ggml's degenerate
 *   quantize_row_iq4_nl_ref (no trials), so kite's bytes match the files.
 *
 *   tq1_0 / tq2_0: ternary weights w = d * t, t in {-1, 0, 1}, d = absmax
 *   of the 256-element block.  tq2_0 stores t+1 in 2 bits (element 128g +
 *   32k + m in byte 32g + m, bits 2k); tq1_0 stores 5 trits per byte as a
 *   fixed-point fraction byte = ceil(243-ary number * 256 / 243), so trit n
 *   is recovered as the integer part of 3 * (byte * 3^n mod 256) / 256.
 *
 * INVARIANTS
 *   n is a multiple of the block size (asserted).  Stack scratch only;
 *   thread-safe.
 */
#include "tensor/quants.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* bit-exactness with ggml: no fused multiply-add */
#endif

#define GROUP_EPS 1e-15f
#define IQ4_NTRY 7 /* trial scales each side of the start, as llama-quantize */

const int8_t kite_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* Index of the codebook entry nearest to x (ties to the lower entry). */
static int iq4_nearest(float x) {
    const int8_t *v = kite_iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15; /* v[lo] <= x < v[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

/* Best scale of one block of 32 for the codebook (0 for an all-zero block);
 * L gets the codes of the start scale (overwritten by callers).  Weights
 * x^2, or with an importance matrix qw * sqrt(sigma2 + x^2) (sigma2: twice
 * the mean square of the super-block, as llama-quantize --imatrix). */
static float iq4_block_scale(const float *x, uint8_t *L, const float *qw, float sigma2) {
    const int8_t *v = kite_iq4nl_values;
    float weight[32];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        weight[j] = qw ? qw[j] * sqrtf(sigma2 + x[j] * x[j]) : x[j] * x[j];
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax < GROUP_EPS) return 0.0f;
    float d = -max / (float)v[0]; /* maps the extreme element to the widest entry */
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = iq4_nearest(id * x[j]);
        L[j] = (uint8_t)l;
        float q = v[l], w = weight[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int t = -IQ4_NTRY; t <= IQ4_NTRY; t++) {
        id = (float)(t + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = v[iq4_nearest(id * x[j])], w = weight[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Packs 32 codes into 16 bytes (j low nibble, j+16 high). */
static void pack_nibbles(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

/* Twice the mean square of n elements (the sigma2 of the imatrix weights). */
static float sigma2_of(const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s * (2.f / (float)n);
}

static void iq4_nl_row(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK4_NL == 0);
    block_iq4_nl *blk = dst;
    uint8_t L[32];
    for (int64_t b = 0; b < n / QK4_NL; b++, src += QK4_NL) {
        const float d = iq4_block_scale(src, L, qw ? qw + b * QK4_NL : NULL, qw ? sigma2_of(src, QK4_NL) : 0.f);
        blk[b].d = fp32_to_fp16(d);
        const float id = d != 0.0f ? 1 / d : 0.0f; /* unrounded d, as ggml */
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_nearest(id * src[j]);
        pack_nibbles(L, blk[b].qs);
    }
}

void quantize_row_iq4_nl_ref(const float *src, void *dst, int64_t n) { iq4_nl_row(src, dst, n, NULL); }
void quantize_row_iq4_nl_imat(const float *src, void *dst, int64_t n, const float *qw) { iq4_nl_row(src, dst, n, qw); }

void dequantize_row_iq4_nl(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK4_NL == 0);
    const block_iq4_nl *blk = src;
    for (int64_t b = 0; b < n / QK4_NL; b++, dst += QK4_NL) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)kite_iq4nl_values[blk[b].qs[j] & 0x0f];
            dst[j + 16] = d * (float)kite_iq4nl_values[blk[b].qs[j] >> 4];
        }
    }
}

static void iq4_xs_row(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK_K == 0);
    block_iq4_xs *blk = dst;
    uint8_t L[32];
    float scales[QK_K / 32];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_iq4_xs *y = &blk[b];
        float max_scale = 0, amax_scale = 0;
        const float sigma2 = qw ? sigma2_of(src, QK_K) : 0.f;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            scales[ib] = iq4_block_scale(src + 32 * ib, L, qw ? qw + b * QK_K + 32 * ib : NULL, sigma2);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        const float d = -max_scale / 32; /* block scales become integers -32..31 */
        const float id = d != 0.0f ? 1 / d : 0.f;
        y->d = fp32_to_fp16(d);
        uint16_t sh = 0;
        memset(y->scales_l, 0, sizeof y->scales_l);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int l = quant_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * (float)l;
            const float idl = dl != 0.0f ? 1 / dl : 0.f;
            const float *xb = src + 32 * ib;
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_nearest(idl * xb[j]);
            pack_nibbles(L, y->qs + 16 * ib);
            l += 32;
            y->scales_l[ib / 2] |= (uint8_t)((l & 0x0f) << (4 * (ib % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * ib));
        }
        y->scales_h = sh;
    }
}

void quantize_row_iq4_xs_ref(const float *src, void *dst, int64_t n) { iq4_xs_row(src, dst, n, NULL); }
void quantize_row_iq4_xs_imat(const float *src, void *dst, int64_t n, const float *qw) { iq4_xs_row(src, dst, n, qw); }

void dequantize_row_iq4_xs(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_iq4_xs *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int ib = 0; ib < QK_K / 32; ib++, dst += 32) {
            const int ls = ((blk[b].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                           (((blk[b].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *qs = blk[b].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)kite_iq4nl_values[qs[j] & 0x0f];
                dst[j + 16] = dl * (float)kite_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* ---- ternary --------------------------------------------------------------- */

/* Absmax of a 256-element block; the ternary scale. */
static float absmax256(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* Trit code 0..2 of x (x/d rounded half away from zero, plus 1). */
static int trit(float x, float id) { return (int)lroundf(x * id) + 1; }

/* ceil(v * 256 / 243): v (a base-3 number of 5 digits) as a byte fraction. */
static uint8_t trits_to_byte(unsigned v) { return (uint8_t)((v * 256 + 242) / 243); }

/* Trit n (0 = most significant) of a tq1_0 byte, minus 1. */
static int byte_trit(uint8_t byte, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t q = (uint8_t)(byte * pow3[n]); /* mod 256 drops the higher trits */
    return ((q * 3) >> 8) - 1;
}

void quantize_row_tq1_0_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    block_tq1_0 *blk = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        block_tq1_0 *y = &blk[b];
        const float d = absmax256(src);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y->d = fp32_to_fp16(d);
        /* qs[0..32): elements 0..160, 5 per byte (stride 32); qs[32..48):
         * elements 160..240 (stride 16); qh[0..4): elements 240..256, 4 per
         * byte (stride 4) plus a zero trit. */
        for (int m = 0; m < 32; m++) {
            unsigned v = 0;
            for (int k = 0; k < 5; k++) v = v * 3 + (unsigned)trit(src[m + 32 * k], id);
            y->qs[m] = trits_to_byte(v);
        }
        for (int m = 0; m < 16; m++) {
            unsigned v = 0;
            for (int k = 0; k < 5; k++) v = v * 3 + (unsigned)trit(src[160 + m + 16 * k], id);
            y->qs[32 + m] = trits_to_byte(v);
        }
        for (int m = 0; m < 4; m++) {
            unsigned v = 0;
            for (int k = 0; k < 4; k++) v = v * 3 + (unsigned)trit(src[240 + m + 4 * k], id);
            y->qh[m] = trits_to_byte(v * 3);
        }
        src += QK_K;
    }
}

void dequantize_row_tq1_0(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_tq1_0 *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) *dst++ = (float)byte_trit(blk[b].qs[m], k) * d;
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) *dst++ = (float)byte_trit(blk[b].qs[32 + m], k) * d;
        for (int k = 0; k < 4; k++)
            for (int m = 0; m < 4; m++) *dst++ = (float)byte_trit(blk[b].qh[m], k) * d;
    }
}

void quantize_row_tq2_0_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    block_tq2_0 *blk = dst;
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_tq2_0 *y = &blk[b];
        const float d = absmax256(src);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y->d = fp32_to_fp16(d);
        for (int g = 0; g < 2; g++)
            for (int m = 0; m < 32; m++) {
                unsigned q = 0;
                for (int k = 0; k < 4; k++) q |= (unsigned)(trit(src[128 * g + m + 32 * k], id) & 3) << (2 * k);
                y->qs[32 * g + m] = (uint8_t)q;
            }
    }
}

void dequantize_row_tq2_0(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_tq2_0 *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int g = 0; g < 2; g++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++) *dst++ = (float)(((blk[b].qs[32 * g + m] >> (2 * k)) & 3) - 1) * d;
    }
}
