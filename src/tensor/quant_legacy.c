/*
 * quant_legacy.c - reference quantizers and dequantizers of the 32-element
 * "legacy" block types: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1.
 *
 * DESIGN
 *   Each block holds 32 weights and one or two fp16 numbers:
 *     q4_0, q5_0, q8_0   w = d * q                 q signed (offset 8 / 16 removed)
 *     q4_1, q5_1         w = d * q + m             q unsigned
 *   The 4-bit types pack element j (0..15) in the low nibble of qs[j] and
 *   element j+16 in the high nibble; the 5-bit types keep the fifth bit of
 *   element i in bit i of the little-endian 32-bit qh.
 *
 *   Encoding is ggml's round-to-nearest reference: the symmetric types take
 *   the element of largest magnitude, keep its sign, and map it to the most
 *   negative code (-8 or -16) so the full code range is used; the asymmetric
 *   types spread [min, max] over the codes.  The float -> code step is done
 *   exactly as ggml does (add 8.5 / 16.5 / 0.5 and truncate, or roundf for
 *   q8), and decoding evaluates the same products in the same order, so
 *   bytes and floats are bit-identical with ggml (tests/unit/test_quant.c).
 *
 * INVARIANTS
 *   n is a multiple of 32 (asserted).  No allocation, no shared state:
 *   every function is thread-safe.
 */
#include "tensor/quants.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* bit-exactness with ggml: no fused multiply-add */
#endif

/* Largest-magnitude element of x[0..n), with its sign (0 if all zero).
 * Ties keep the first such element. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *lo, float *hi) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    *lo = mn;
    *hi = mx;
}

static int min_int(int a, int b) { return a < b ? a : b; }

/* ---- q4_0 --------------------------------------------------------------- */

void quantize_row_q4_0_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK4_0 == 0);
    block_q4_0 *blk = dst;
    for (int64_t b = 0; b < n / QK4_0; b++, src += QK4_0) {
        const float d = signed_absmax(src, QK4_0) / -8; /* max element -> code 0 (= -8) */
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            /* x*id lies in [-8, 8]; +8.5 and truncation round to nearest */
            int lo = min_int(15, (int)(src[j] * id + 8.5f));
            int hi = min_int(15, (int)(src[j + QK4_0 / 2] * id + 8.5f));
            blk[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK4_0 == 0);
    const block_q4_0 *blk = src;
    for (int64_t b = 0; b < n / QK4_0; b++, dst += QK4_0) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)((blk[b].qs[j] & 0x0f) - 8) * d;
            dst[j + QK4_0 / 2] = (float)((blk[b].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- q4_1 --------------------------------------------------------------- */

void quantize_row_q4_1_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK4_1 == 0);
    block_q4_1 *blk = dst;
    for (int64_t b = 0; b < n / QK4_1; b++, src += QK4_1) {
        float mn, mx;
        min_max(src, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk[b].d = fp32_to_fp16(d);
        blk[b].m = fp32_to_fp16(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int lo = min_int(15, (int)((src[j] - mn) * id + 0.5f));
            int hi = min_int(15, (int)((src[j + QK4_1 / 2] - mn) * id + 0.5f));
            blk[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK4_1 == 0);
    const block_q4_1 *blk = src;
    for (int64_t b = 0; b < n / QK4_1; b++, dst += QK4_1) {
        const float d = fp16_to_fp32(blk[b].d);
        const float m = fp16_to_fp32(blk[b].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (float)(blk[b].qs[j] & 0x0f) * d + m;
            dst[j + QK4_1 / 2] = (float)(blk[b].qs[j] >> 4) * d + m;
        }
    }
}

/* ---- q5_0 --------------------------------------------------------------- */

/* Stores 5-bit codes q[0..32) into the nibbles and the qh bit mask. */
static void pack5(const uint8_t *q, uint8_t *qs, uint8_t *qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh_bytes[k] = (uint8_t)(qh >> (8 * k)); /* little-endian */
}

/* 5-bit code of element j (0..31) of a q5 block. */
static inline int code5(const uint8_t *qs, uint32_t qh, int j) {
    int low = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    return low | (int)(((qh >> j) & 1) << 4);
}

static uint32_t load_qh(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void quantize_row_q5_0_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK5_0 == 0);
    block_q5_0 *blk = dst;
    for (int64_t b = 0; b < n / QK5_0; b++, src += QK5_0) {
        const float d = signed_absmax(src, QK5_0) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk[b].d = fp32_to_fp16(d);
        uint8_t q[QK5_0];
        for (int j = 0; j < QK5_0; j++) q[j] = (uint8_t)min_int(31, (int)(src[j] * id + 16.5f));
        pack5(q, blk[b].qs, blk[b].qh);
    }
}

void dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK5_0 == 0);
    const block_q5_0 *blk = src;
    for (int64_t b = 0; b < n / QK5_0; b++, dst += QK5_0) {
        const float d = fp16_to_fp32(blk[b].d);
        const uint32_t qh = load_qh(blk[b].qh);
        for (int j = 0; j < QK5_0; j++) dst[j] = (float)(code5(blk[b].qs, qh, j) - 16) * d;
    }
}

/* ---- q5_1 --------------------------------------------------------------- */

void quantize_row_q5_1_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK5_1 == 0);
    block_q5_1 *blk = dst;
    for (int64_t b = 0; b < n / QK5_1; b++, src += QK5_1) {
        float mn, mx;
        min_max(src, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk[b].d = fp32_to_fp16(d);
        blk[b].m = fp32_to_fp16(mn);
        uint8_t q[QK5_1];
        /* (x - min) * id lies in [0, 31]; like ggml there is no clamp */
        for (int j = 0; j < QK5_1; j++) q[j] = (uint8_t)(int)((src[j] - mn) * id + 0.5f);
        pack5(q, blk[b].qs, blk[b].qh);
    }
}

void dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK5_1 == 0);
    const block_q5_1 *blk = src;
    for (int64_t b = 0; b < n / QK5_1; b++, dst += QK5_1) {
        const float d = fp16_to_fp32(blk[b].d);
        const float m = fp16_to_fp32(blk[b].m);
        const uint32_t qh = load_qh(blk[b].qh);
        for (int j = 0; j < QK5_1; j++) dst[j] = (float)code5(blk[b].qs, qh, j) * d + m;
    }
}

/* ---- importance-weighted (llama-quantize --imatrix) ------------------------
 * One row of n elements with the importance qw[0..n): each element's weight
 * is qw * sqrt(sigma2 + x^2), sigma2 the row's mean square; the symmetric
 * types take the weighted make_qx search (quant_search_symmetric), the
 * offset types the weighted affine one, as ggml's quantize_row_*_impl. */

static float row_mean_square(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / (float)n;
}

/* One row of a legacy type (t: KITE_DTYPE_Q4_0, _Q4_1, _Q5_0, _Q5_1) with the
 * importance qw: per block of 32 the weighted search gives the codes and d
 * (and m), then the type's packing. */
static void legacy_imat_row(const float *src, void *dst, int64_t n, const float *qw, uint32_t t) {
    KITE_ASSERT(n % 32 == 0);
    const bool affine = t == KITE_DTYPE_Q4_1 || t == KITE_DTYPE_Q5_1;
    const bool five = t == KITE_DTYPE_Q5_0 || t == KITE_DTYPE_Q5_1;
    const int nmax = affine ? (five ? 31 : 15) : (five ? 16 : 8);
    const float sigma2 = row_mean_square(src, n);
    float w[32];
    uint8_t L[32], Laux[32];
    int8_t Ls[32];
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = src + 32 * b;
        for (int j = 0; j < 32; j++) w[j] = qw[32 * b + j] * sqrtf(sigma2 + xb[j] * xb[j]);
        kite_half d, m = 0;
        if (affine) {
            float min;
            d = fp32_to_fp16(quant_search_affine(32, nmax, xb, w, L, &min, Laux, -0.9f, 0.05f, 36, false));
            m = fp32_to_fp16(-min);
        } else {
            d = fp32_to_fp16(quant_search_symmetric(32, nmax, xb, Ls, w));
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)Ls[j];
        }
        switch (t) {
        case KITE_DTYPE_Q4_0: {
            block_q4_0 *y = (block_q4_0 *)dst + b;
            y->d = d;
            for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
            break;
        }
        case KITE_DTYPE_Q4_1: {
            block_q4_1 *y = (block_q4_1 *)dst + b;
            y->d = d, y->m = m;
            for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
            break;
        }
        case KITE_DTYPE_Q5_0: {
            block_q5_0 *y = (block_q5_0 *)dst + b;
            y->d = d;
            pack5(L, y->qs, y->qh);
            break;
        }
        default: {
            block_q5_1 *y = (block_q5_1 *)dst + b;
            y->d = d, y->m = m;
            pack5(L, y->qs, y->qh);
            break;
        }
        }
    }
}

void quantize_row_q4_0_imat(const float *src, void *dst, int64_t n, const float *qw) {
    legacy_imat_row(src, dst, n, qw, KITE_DTYPE_Q4_0);
}
void quantize_row_q4_1_imat(const float *src, void *dst, int64_t n, const float *qw) {
    legacy_imat_row(src, dst, n, qw, KITE_DTYPE_Q4_1);
}
void quantize_row_q5_0_imat(const float *src, void *dst, int64_t n, const float *qw) {
    legacy_imat_row(src, dst, n, qw, KITE_DTYPE_Q5_0);
}
void quantize_row_q5_1_imat(const float *src, void *dst, int64_t n, const float *qw) {
    legacy_imat_row(src, dst, n, qw, KITE_DTYPE_Q5_1);
}

/* ---- q8_0 / q8_1 -------------------------------------------------------- */

/* Scale of a symmetric 8-bit block: absmax / 127; codes roundf(x / d). */
static float q8_block(const float *x, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) qs[j] = (int8_t)roundf(x[j] * id); /* half away from zero */
    return d;
}

void quantize_row_q8_0_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK8_0 == 0);
    block_q8_0 *blk = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, src += QK8_0) blk[b].d = fp32_to_fp16(q8_block(src, blk[b].qs));
}

void dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK8_0 == 0);
    const block_q8_0 *blk = src;
    for (int64_t b = 0; b < n / QK8_0; b++, dst += QK8_0) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)blk[b].qs[j] * d;
    }
}

void quantize_row_q8_1_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK8_1 == 0);
    block_q8_1 *blk = dst;
    for (int64_t b = 0; b < n / QK8_1; b++, src += QK8_1) {
        const float d = q8_block(src, blk[b].qs);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) sum += blk[b].qs[j];
        blk[b].d = fp32_to_fp16(d);
        blk[b].s = fp32_to_fp16((float)sum * d); /* unrounded d, as ggml */
    }
}

void dequantize_row_q8_1(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK8_1 == 0);
    const block_q8_1 *blk = src;
    for (int64_t b = 0; b < n / QK8_1; b++, dst += QK8_1) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = (float)blk[b].qs[j] * d;
    }
}
