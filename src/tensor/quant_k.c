/*
 * quant_k.c - reference quantizers and dequantizers of the k-quants: q2_K,
 * q3_K, q4_K, q5_K, q6_K (weights) and q8_K (activations of the k-quant dot
 * products).
 *
 * DESIGN
 *   A super-block holds QK_K = 256 weights split into sub-blocks (16 of 16
 *   elements for q2_K/q3_K/q6_K, 8 of 32 for q4_K/q5_K).  Each sub-block has
 *   its own small integer scale (and for q2/q4/q5 a min), and those integers
 *   are themselves scaled by the fp16 super-block numbers d (and dmin):
 *     q2_K  w = d*sc * q - dmin*m     sc, m 4 bit;  q 0..3
 *     q3_K  w = d*(sc-32) * (q-4)     sc 6 bit;     q 0..7 (2 bits + hmask bit)
 *     q4_K  w = d*sc * q - dmin*m     sc, m 6 bit;  q 0..15
 *     q5_K  w = d*sc * q - dmin*m     sc, m 6 bit;  q 0..31 (4 bits + qh bit)
 *     q6_K  w = d*sc * (q-32)         sc int8;      q 0..63 (4 bits + 2 in qh)
 *     q8_K  w = d * q                 d float32;    q int8, plus bsums
 *
 *   Encoding follows ggml's reference (no importance matrix) step by step,
 *   because the k-quant encoders are searches whose result depends on every
 *   float operation:
 *     1. per sub-block, a scale (and min) search: make_qx (q6_K: rescaling
 *        trials around nmax, weighted by x^2), make_q3 (q3_K: coordinate
 *        descent on the codes), make_qkx2 (q2/q4/q5_K: trials of the scale
 *        with a least-squares fit of scale and min per trial);
 *     2. the sub-block scales (mins) are quantized against the largest one;
 *     3. every element is re-quantized with the scale as it will be decoded.
 *   Sums accumulate in float in index order and each product is written in
 *   ggml's association order ((w*x)*l, not w*(x*l)); rounding uses
 *   quant_nearest_int (ties to even).  This reproduces ggml's bytes exactly
 *   (tests/unit/test_quant.c against tests/data/quant).
 *
 * INVARIANTS
 *   n is a multiple of QK_K (asserted).  Scratch is on the stack (< 1 KiB);
 *   no allocation, no shared state: thread-safe.
 */
#include "tensor/quants.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* bit-exactness with ggml: no fused multiply-add */
#endif

#define GROUP_EPS 1e-15f /* a group whose absmax is below this is all zero */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- scale searches ------------------------------------------------------- */

/*
 * Symmetric codes L[i] in [0, 2*nmax) for x[0..n), code nmax meaning 0.
 * Returns the scale s with x ~ s * (L - nmax).  The start maps the largest
 * magnitude element to -nmax; then 18 trial inverse scales (nmax +- 0.1k)
 * are tried and the one with the best weighted least-squares fit (weights
 * qw, or x^2 when qw is NULL) is kept.
 */
float quant_search_symmetric(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Signed 3-bit codes for q3_K: start from the absmax mapping, then up to 5
 * sweeps of coordinate descent, each code moved to the value that is best
 * given all others, kept when the weighted (x^2) fit improves.  Returns the
 * scale; L[i] in [0, 2*nmax), code nmax meaning 0.
 */
static float search_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int nl = clampi(quant_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/*
 * Asymmetric codes L[i] in [0, nmax] with x ~ scale * L - min_out, min_out
 * >= 0.  After the plain [min, max] mapping, nstep+1 trial inverse scales
 * (nmax + rmin + rdelta*k) / (max - min) are each followed by a weighted
 * least-squares fit of scale and min; the trial with the smallest weighted
 * error (|err| if use_mad, else err^2) wins.  Laux is scratch of n codes.
 */
float quant_search_affine(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *min_out,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += weights[i] * diff;
    }
    if (nstep < 1) {
        *min_out = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += weights[i] * diff;
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *min_out = -min;
    return scale;
}

/*
 * Non-negative codes L[i] in [0, nmax] for x[0..n) (the sub-block scales or
 * mins of the importance-weighted k-quants), x ~ s * L.  The absmax start
 * and 8 trial inverse scales around it keep the one with the least weighted
 * squared error; then up to 5 sweeps of coordinate descent on the codes
 * under the weighted least-squares scale.  Returns that scale.  L is
 * uint8_t and the first assignment is not clamped, as in ggml, so a
 * negative x wraps there exactly as it does in llama-quantize.
 */
float quant_search_positive(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max == 0.0f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)quant_nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * (float)l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int nl = quant_nearest_int(x[i] * sl2 / slx);
                nl = nl < nmax ? nl : nmax;
                if (nl != L[i]) {
                    slx += w[i] * x[i] * (float)nl;
                    sl2 += w[i] * (float)nl * (float)nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return sumlx / suml2;
}

/* ---- shared packing helpers ------------------------------------------------ */

/* Packs 8 6-bit scales and mins (q4_K/q5_K layout; inverse of kite_get_scale_min_k4, quants.h). */
static void pack_scale_min_k4(const uint8_t *ls, const uint8_t *lm, uint8_t *q) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (uint8_t)((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
            q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            q[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* 2-bit codes L[256] -> qs[64]: byte l of each 32-byte group g holds
 * elements 128g + l + 32k in bits 2k..2k+1 (k = 0..3). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

/* Float scales of n sub-blocks (and optional mins): the largest of each. */
static float max_of(const float *v, int n) {
    float m = 0;
    for (int j = 0; j < n; j++)
        if (v[j] > m) m = v[j];
    return m;
}

/* ---- q2_K ------------------------------------------------------------------ */

/* Re-quantizes the codes of a q2_K block against its scales as they decode
 * and packs them (the last step of both encoders). */
static void q2_K_finish(const float *src, block_q2_K *y, uint8_t *L) {
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = fp16_to_fp32(y->d) * (float)(y->scales[j] & 0x0f);
        if (d == 0.0f) continue;
        const float dm = fp16_to_fp32(y->dmin) * (float)(y->scales[j] >> 4);
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (uint8_t)clampi(quant_nearest_int((src[16 * j + i] + dm) / d), 0, 3);
    }
    pack_2bit(L, y->qs);
}

void quantize_row_q2_K_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    block_q2_K *blk = dst;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_q2_K *y = &blk[b];
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(src[16 * j + l]);
            scales[j] = quant_search_affine(16, 3, src + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                            0.1f, 15, true);
        }
        const float max_scale = max_of(scales, QK_K / 16);
        const float max_min = max_of(mins, QK_K / 16);
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) y->scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            y->d = fp32_to_fp16(max_scale / 15.f);
        } else {
            memset(y->scales, 0, sizeof y->scales);
            y->d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < QK_K / 16; j++)
                y->scales[j] |= (uint8_t)((unsigned)quant_nearest_int(iscale * mins[j]) << 4);
            y->dmin = fp32_to_fp16(max_min / 15.f);
        } else {
            y->dmin = fp32_to_fp16(0.f);
        }
        q2_K_finish(src, y, L);
    }
}

void quantize_row_q2_K_imat(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK_K == 0);
    block_q2_K *blk = dst;
    uint8_t L[QK_K], Laux[16], ls[QK_K / 16], lm[QK_K / 16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K, qw += QK_K) {
        block_q2_K *y = &blk[b];
        float sum_x2 = 0;
        for (int j = 0; j < QK_K; j++) sum_x2 += src[j] * src[j];
        const float sigma2 = sum_x2 / QK_K; /* no factor 2 here, unlike q3_K..q5_K (ggml) */
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = qw[16 * j + l] * sqrtf(sigma2 + src[16 * j + l] * src[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; l++) sumw += weights[l];
            sw[j] = sumw;
            scales[j] = quant_search_affine(16, 3, src + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f,
                                            36, false);
        }
        const float dm = quant_search_positive(QK_K / 16, 15, scales, ls, sw);
        const float mm = quant_search_positive(QK_K / 16, 15, mins, lm, sw);
        y->d = fp32_to_fp16(dm);
        y->dmin = fp32_to_fp16(mm);
        for (int j = 0; j < QK_K / 16; j++) y->scales[j] = (uint8_t)(ls[j] | (lm[j] << 4));
        q2_K_finish(src, y, L);
    }
}

void dequantize_row_q2_K(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_q2_K *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        const float dmin = fp16_to_fp32(blk[b].dmin);
        /* element e = 128h + 32k + 16s + l: byte (32h + 16s + l), bits 2k; scale index e / 16 */
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e / 32) % 4, r = e % 32;
            const uint8_t sc = blk[b].scales[e / 16];
            const float dl = d * (float)(sc & 0x0f);
            const float ml = dmin * (float)(sc >> 4);
            const int q = (blk[b].qs[32 * h + r] >> (2 * k)) & 3;
            *dst++ = dl * (float)q - ml;
        }
    }
}

/* ---- q3_K ------------------------------------------------------------------ */

/* 6-bit scale j (0..15) of a q3_K block, minus 32. */
static int q3_scale(const uint8_t *s, int j) {
    int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

/* Re-quantizes the codes of a q3_K block against its scales as they decode
 * (codes of a sub-block whose scale decodes to 0 are kept) and packs them:
 * bit 2 of element e goes to hmask[e % 32], bit e / 32. */
static void q3_K_finish(const float *src, block_q3_K *y, int8_t *L) {
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = fp16_to_fp32(y->d) * (float)q3_scale(y->scales, j);
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(clampi(quant_nearest_int(src[16 * j + i] / d), -4, 3) + 4);
    }
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t low[QK_K];
    for (int e = 0; e < QK_K; e++) {
        int l = L[e];
        if (l > 3) {
            y->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            l -= 4;
        }
        low[e] = (uint8_t)l;
    }
    pack_2bit(low, y->qs);
}

void quantize_row_q3_K_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    block_q3_K *blk = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_q3_K *y = &blk[b];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = search_q3(16, 4, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y->scales, 0, sizeof y->scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                /* ggml stores the rounded value in an int8 before clamping */
                int l = clampi((int8_t)quant_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    y->scales[j] = (uint8_t)(l & 0x0f);
                else
                    y->scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
                y->scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y->d = fp32_to_fp16(1 / iscale);
        } else {
            y->d = fp32_to_fp16(0.f);
        }
        q3_K_finish(src, y, L);
    }
}

void quantize_row_q3_K_imat(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK_K == 0);
    block_q3_K *blk = dst;
    int8_t L[QK_K], ls[QK_K / 16];
    float weights[16], scales[QK_K / 16], sw[QK_K / 16];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K, qw += QK_K) {
        block_q3_K *y = &blk[b];
        float sum_x2 = 0;
        for (int j = 0; j < QK_K; j++) sum_x2 += src[j] * src[j];
        const float sigma2 = 2 * sum_x2 / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = qw[16 * j + l] * sqrtf(sigma2 + src[16 * j + l] * src[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; l++) sumw += weights[l];
            sw[j] = sumw;
            scales[j] = quant_search_symmetric(16, 4, src + 16 * j, L + 16 * j, weights);
        }
        /* the 16 scales as 6-bit codes 0..63 (32 meaning 0) under their weight sums */
        const float d_block = quant_search_symmetric(QK_K / 16, 32, scales, ls, sw);
        memset(y->scales, 0, sizeof y->scales);
        for (int j = 0; j < QK_K / 16; j++) {
            const int l = ls[j];
            if (j < 8)
                y->scales[j] = (uint8_t)(l & 0x0f);
            else
                y->scales[j - 8] |= (uint8_t)((l & 0x0f) << 4);
            y->scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        y->d = fp32_to_fp16(d_block);
        q3_K_finish(src, y, L);
    }
}

void dequantize_row_q3_K(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_q3_K *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d_all = fp16_to_fp32(blk[b].d);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e / 32) % 4, r = e % 32;
            const float dl = d_all * (float)q3_scale(blk[b].scales, e / 16);
            const int q2 = (blk[b].qs[32 * h + r] >> (2 * k)) & 3;
            const int hi = (blk[b].hmask[r] >> (e / 32)) & 1;
            *dst++ = dl * (float)(q2 - (hi ? 0 : 4));
        }
    }
}

/* ---- q4_K / q5_K (shared scale search) ------------------------------------ */

/* Scale/min search of the 8 sub-blocks of 32 and their 6-bit packing; then
 * the codes (0..nmax) re-quantized against the decoded scales.
 * qw NULL: the reference (weights |x| + rms of the sub-block, rmin/nstep
 * trials, scales against the largest).  qw (the importance matrix of this
 * super-block): llama-quantize's imatrix path -- weights qw * sqrt(sigma2 +
 * x^2) with sigma2 twice the mean square of the super-block, 37 trials
 * from -0.9 in steps of 0.05, the scales and mins themselves fitted with
 * quant_search_positive under the sub-blocks' weight sums. */
static void quantize_k4_common(const float *x, const float *qw, int nmax, float rmin, int nstep, kite_half *dh,
                               kite_half *dmin, uint8_t *packed, uint8_t *L) {
    uint8_t Laux[32], ls[8], lm[8];
    float weights[32], mins[8], scales[8], sw[8];
    if (qw) {
        float sum_x2 = 0;
        for (int l = 0; l < QK_K; l++) sum_x2 += x[l] * x[l];
        const float sigma2 = 2 * sum_x2 / QK_K;
        for (int j = 0; j < 8; j++) {
            const float *xb = x + 32 * j;
            for (int l = 0; l < 32; l++) weights[l] = qw[32 * j + l] * sqrtf(sigma2 + xb[l] * xb[l]);
            float sumw = 0;
            for (int l = 0; l < 32; l++) sumw += weights[l];
            sw[j] = sumw;
            scales[j] = quant_search_affine(32, nmax, xb, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        const float d_block = quant_search_positive(8, 63, scales, ls, sw);
        const float m_block = quant_search_positive(8, 63, mins, lm, sw);
        if (nmax == 31) /* q5_K clamps the 6-bit codes, q4_K does not (ggml) */
            for (int j = 0; j < 8; j++) {
                ls[j] = ls[j] < 63 ? ls[j] : 63;
                lm[j] = lm[j] < 63 ? lm[j] : 63;
            }
        memset(packed, 0, K_SCALE_SIZE);
        pack_scale_min_k4(ls, lm, packed);
        *dh = fp32_to_fp16(d_block);
        *dmin = fp32_to_fp16(m_block);
    } else {
        for (int j = 0; j < 8; j++) {
            const float *xb = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += xb[l] * xb[l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xb[l]);
            scales[j] = quant_search_affine(32, nmax, xb, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        }
        const float max_scale = max_of(scales, 8);
        const float max_min = max_of(mins, 8);
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; j++) {
            uint8_t s = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
            uint8_t m = (uint8_t)quant_nearest_int(inv_min * mins[j]);
            ls[j] = s < 63 ? s : 63;
            lm[j] = m < 63 ? m : 63;
        }
        memset(packed, 0, K_SCALE_SIZE);
        pack_scale_min_k4(ls, lm, packed);
        *dh = fp32_to_fp16(max_scale / 63.f);
        *dmin = fp32_to_fp16(max_min / 63.f);
    }
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kite_get_scale_min_k4(j, packed, &sc, &m);
        const float d = fp16_to_fp32(*dh) * (float)sc;
        if (d == 0.0f) continue;
        const float dm = fp16_to_fp32(*dmin) * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)clampi(quant_nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

/* q4_K blocks of n elements; qw: importance of each element, or NULL. */
static void q4_K_row(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK_K == 0);
    block_q4_K *blk = dst;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_q4_K *y = &blk[b];
        quantize_k4_common(src, qw ? qw + b * QK_K : NULL, 15, -1.f, 20, &y->d, &y->dmin, y->scales, L);
        /* 64 elements per 32 bytes: first 32 in the low nibbles, next 32 high */
        for (int g = 0; g < QK_K / 64; g++)
            for (int l = 0; l < 32; l++)
                y->qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + l + 32] << 4));
    }
}

void quantize_row_q4_K_ref(const float *src, void *dst, int64_t n) { q4_K_row(src, dst, n, NULL); }
void quantize_row_q4_K_imat(const float *src, void *dst, int64_t n, const float *qw) { q4_K_row(src, dst, n, qw); }

void dequantize_row_q4_K(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_q4_K *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        const float dmin = fp16_to_fp32(blk[b].dmin);
        for (int j = 0; j < 8; j++) { /* sub-block j: group j/2, low nibble if j even */
            uint8_t sc, m;
            kite_get_scale_min_k4(j, blk[b].scales, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = blk[b].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) *dst++ = dl * (float)((q[l] >> shift) & 0x0f) - ml;
        }
    }
}

/* q5_K blocks of n elements; qw: importance of each element, or NULL. */
static void q5_K_row(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK_K == 0);
    block_q5_K *blk = dst;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_q5_K *y = &blk[b];
        quantize_k4_common(src, qw ? qw + b * QK_K : NULL, 31, -0.5f, 15, &y->d, &y->dmin, y->scales, L);
        /* sub-block j: low 4 bits as in q4_K, bit 4 in qh[l] bit j */
        memset(y->qh, 0, sizeof y->qh);
        for (int g = 0; g < QK_K / 64; g++) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * g + l], hi = L[64 * g + l + 32];
                if (lo > 15) {
                    lo -= 16;
                    y->qh[l] |= (uint8_t)(1u << (2 * g));
                }
                if (hi > 15) {
                    hi -= 16;
                    y->qh[l] |= (uint8_t)(2u << (2 * g));
                }
                y->qs[32 * g + l] = (uint8_t)(lo | (hi << 4));
            }
        }
    }
}

void quantize_row_q5_K_ref(const float *src, void *dst, int64_t n) { q5_K_row(src, dst, n, NULL); }
void quantize_row_q5_K_imat(const float *src, void *dst, int64_t n, const float *qw) { q5_K_row(src, dst, n, qw); }

void dequantize_row_q5_K(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_q5_K *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        const float dmin = fp16_to_fp32(blk[b].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kite_get_scale_min_k4(j, blk[b].scales, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = blk[b].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0x0f) + (((blk[b].qh[l] >> j) & 1) ? 16 : 0);
                *dst++ = dl * (float)v - ml;
            }
        }
    }
}

/* ---- q6_K ------------------------------------------------------------------ */

/* q6_K blocks of n elements; qw: importance of each element, or NULL.  With
 * qw, llama-quantize fits the sub-block scales under qw itself (no sigma
 * term, unlike the other types). */
static void q6_K_row(const float *src, void *dst, int64_t n, const float *qw) {
    KITE_ASSERT(n % QK_K == 0);
    block_q6_K *blk = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_q6_K *y = &blk[b];
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = quant_search_symmetric(16, 32, src + 16 * j, L + 16 * j,
                                               qw ? qw + b * QK_K + 16 * j : NULL);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < GROUP_EPS) {
            memset(y, 0, sizeof *y);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y->d = fp32_to_fp16(1 / iscale);
        for (int j = 0; j < QK_K / 16; j++) {
            int s = quant_nearest_int(iscale * scales[j]);
            y->scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = fp16_to_fp32(y->d) * (float)y->scales[j];
            if (d == 0.0f) continue;
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (int8_t)(clampi(quant_nearest_int(src[16 * j + i] / d), -32, 31) + 32);
        }
        /* per half h (128 elements): element 128h + 32k + l has its low nibble
         * in ql[64h + l + 32*(k%2)] (low if k < 2, else high), its 2 high bits
         * in qh[32h + l] bits 2k..2k+1 */
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0f) | ((Lh[l + 64] & 0x0f) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0f) | ((Lh[l + 96] & 0x0f) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

void quantize_row_q6_K_ref(const float *src, void *dst, int64_t n) { q6_K_row(src, dst, n, NULL); }
void quantize_row_q6_K_imat(const float *src, void *dst, int64_t n, const float *qw) { q6_K_row(src, dst, n, qw); }

void dequantize_row_q6_K(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_q6_K *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = fp16_to_fp32(blk[b].d);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e / 32) % 4, l = e % 32;
            const uint8_t lq = blk[b].ql[64 * h + l + 32 * (k % 2)];
            const int lo = k < 2 ? (lq & 0x0f) : (lq >> 4);
            const int hi = (blk[b].qh[32 * h + l] >> (2 * k)) & 3;
            const int q = (lo | (hi << 4)) - 32;
            *dst++ = d * (float)blk[b].scales[e / 16] * (float)q;
        }
    }
}

/* ---- q8_K ------------------------------------------------------------------ */

void quantize_row_q8_K_ref(const float *src, void *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    block_q8_K *blk = dst;
    for (int64_t b = 0; b < n / QK_K; b++, src += QK_K) {
        block_q8_K *y = &blk[b];
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            y->d = 0;
            memset(y->qs, 0, sizeof y->qs);
            memset(y->bsums, 0, sizeof y->bsums); /* ggml leaves them unset */
            continue;
        }
        /* -127, not -128: codes stay symmetric (ggml's choice for its SIMD dots) */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = quant_nearest_int(iscale * src[j]);
            y->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y->qs[16 * j + i];
            y->bsums[j] = (int16_t)sum;
        }
        y->d = 1 / iscale;
    }
}

void dequantize_row_q8_K(const void *src, float *dst, int64_t n) {
    KITE_ASSERT(n % QK_K == 0);
    const block_q8_K *blk = src;
    for (int64_t b = 0; b < n / QK_K; b++)
        for (int j = 0; j < QK_K; j++) *dst++ = blk[b].d * (float)blk[b].qs[j];
}
