/*
 * attention_avx512.c - the avx512 attention table's exp_sum and axpy_rows
 * (attention_simd.h), bit-identical to attention_impl.h's attn_exp_sum and
 * row-by-row attn_axpy.
 *
 * attn_exp16 (exp_avx512.h) is attn_exp's operation sequence lane by lane (separate multiplies
 * and adds, no FMA; the clamp as maxps/minps with x second, which passes a
 * NaN through like the reference's compare-and-select; below ATTN_EXP_FLUSH
 * a zeroing mask, NaN kept by the unordered compare).  The sum keeps the
 * reference's 8 lanes: of each 16 values the low 8 are added to the 8-lane
 * accumulator, then the high 8, so element k still lands in lane k % 8 in
 * ascending k; the n % 8 tail is summed one by one after, then
 * ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) + tail.  axpy_rows is element-wise
 * (each y[c] gets w[r] * x[r][c] added for r in order, a separate multiply
 * and add), so 16 columns per register and a masked last block of columns
 * change nothing; rows shorter than 16 columns take the avx2 version.
 * axpy_rows_multi (FlashAttention's score and V sums) runs groups of query
 * rows over the rows of x they all use, one load of x for the group:
 * 4 query rows x 64 columns (16 add chains), then 8 rows x 16 columns; per
 * query row and column the adds are axpy_rows's, in ascending j.  The other
 * entries of the table are the avx2 ones.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#include "kernels/attention_impl.h"
#include "kernels/x86_avx2/attention_avx2.h"
#include "kernels/x86_avx512/exp_avx512.h"


/* ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), as attention_avx2.c's hsum8 */
static inline float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

float attn_exp_sum_avx512(float *x, float sub, int32_t n) {
    const __m512 sv = _mm512_set1_ps(sub);
    __m256 acc = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = attn_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), sv));
        _mm512_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
        acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(e, 1));
    }
    float tail = 0.0f;
    if (i < n) { /* the last n - i < 16 values in one masked vector; 8 of them into acc if there are 8 */
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 e = attn_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
        _mm512_mask_storeu_ps(x + i, m, e);
        if (i + 8 <= n) {
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
            i += 8;
        }
        for (; i < n; i++) tail += x[i];
    }
    return hsum8(acc) + tail;
}

void attn_axpy_rows_avx512(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n) {
    if (n < 16) {
        attn_axpy_rows_avx2(y, w, x, ldx, n_rows, n);
        return;
    }
    int32_t c = 0;
    for (; c + 64 <= n; c += 64) { /* 64 columns: 4 add chains held in registers over all rows */
        __m512 y0 = _mm512_loadu_ps(y + c), y1 = _mm512_loadu_ps(y + c + 16);
        __m512 y2 = _mm512_loadu_ps(y + c + 32), y3 = _mm512_loadu_ps(y + c + 48);
        const float *xr = x + c;
        for (int32_t r = 0; r < n_rows; r++, xr += ldx) {
            const __m512 wv = _mm512_set1_ps(w[r]);
            y0 = _mm512_add_ps(y0, _mm512_mul_ps(wv, _mm512_loadu_ps(xr)));
            y1 = _mm512_add_ps(y1, _mm512_mul_ps(wv, _mm512_loadu_ps(xr + 16)));
            y2 = _mm512_add_ps(y2, _mm512_mul_ps(wv, _mm512_loadu_ps(xr + 32)));
            y3 = _mm512_add_ps(y3, _mm512_mul_ps(wv, _mm512_loadu_ps(xr + 48)));
        }
        _mm512_storeu_ps(y + c, y0);
        _mm512_storeu_ps(y + c + 16, y1);
        _mm512_storeu_ps(y + c + 32, y2);
        _mm512_storeu_ps(y + c + 48, y3);
    }
    for (; c < n; c += 16) { /* 16 columns at a time, the last block masked */
        const __mmask16 m = c + 16 <= n ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1u);
        __m512 y0 = _mm512_maskz_loadu_ps(m, y + c);
        const float *xr = x + c;
        for (int32_t r = 0; r < n_rows; r++, xr += ldx)
            y0 = _mm512_add_ps(y0, _mm512_mul_ps(_mm512_set1_ps(w[r]), _mm512_maskz_loadu_ps(m, xr)));
        _mm512_mask_storeu_ps(y + c, m, y0);
    }
}


#define ALWAYS_INLINE inline __attribute__((always_inline))

/* y[0 .. 16*NV) of one query row += w[j] * x[j][...] for j in [j0, j1): NV
 * vectors of 16 columns, the last one masked by m. */
static ALWAYS_INLINE void pv_solo(float *y, const float *w, const float *x, size_t ldx, int32_t j0, int32_t j1,
                                  const int NV, __mmask16 m) {
    __m512 acc[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) acc[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? m : 0xffff, y + 16 * v);
    for (int32_t j = j0; j < j1; j++) {
        const __m512 wv = _mm512_set1_ps(w[j]);
        const float *xr = x + (size_t)j * ldx;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(wv, _mm512_maskz_loadu_ps(v == NV - 1 ? m : 0xffff, xr + 16 * v)));
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(y + 16 * v, v == NV - 1 ? m : 0xffff, acc[v]);
}

/* G query rows x NV vectors of columns.  The rows share [c0, c1), the range
 * common to all of them; each row's own prefix [lo, c0) runs before it and
 * its suffix [c1, hi) after it, so every row sees its j in ascending order. */
static ALWAYS_INLINE void pv_group(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo,
                                   const int32_t *hi, const float *x, size_t ldx, const int G, const int NV,
                                   __mmask16 m) {
    int32_t c0 = lo[0], c1 = hi[0];
    for (int g = 1; g < G; g++) {
        c0 = lo[g] > c0 ? lo[g] : c0;
        c1 = hi[g] < c1 ? hi[g] : c1;
    }
    if (G == 1 || c1 <= c0) { /* no common range (or an empty row): each row alone */
        for (int g = 0; g < G; g++)
            if (hi[g] > lo[g]) pv_solo(y + (size_t)g * ldy, w + (size_t)g * ldw, x, ldx, lo[g], hi[g], NV, m);
        return;
    }
    for (int g = 0; g < G; g++) /* prefixes, stored and reloaded unchanged */
        if (c0 > lo[g]) pv_solo(y + (size_t)g * ldy, w + (size_t)g * ldw, x, ldx, lo[g], c0, NV, m);
    __m512 acc[8][4];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[g][v] = _mm512_maskz_loadu_ps(v == NV - 1 ? m : 0xffff, y + (size_t)g * ldy + 16 * v);
    for (int32_t j = c0; j < c1; j++) {
        __m512 xv[4];
        const float *xr = x + (size_t)j * ldx;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) xv[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? m : 0xffff, xr + 16 * v);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            const __m512 wv = _mm512_set1_ps(w[(size_t)g * ldw + (size_t)j]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[g][v] = _mm512_add_ps(acc[g][v], _mm512_mul_ps(wv, xv[v]));
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(y + (size_t)g * ldy + 16 * v, v == NV - 1 ? m : 0xffff, acc[g][v]);
    for (int g = 0; g < G; g++) /* suffixes */
        if (hi[g] > c1) pv_solo(y + (size_t)g * ldy, w + (size_t)g * ldw, x, ldx, c1, hi[g], NV, m);
}

void attn_axpy_rows_multi_avx512(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo,
                                 const int32_t *hi, int32_t n_q, const float *x, size_t ldx, int32_t n) {
    if (n < 16) {
        attn_axpy_rows_multi_avx2(y, ldy, w, ldw, lo, hi, n_q, x, ldx, n);
        return;
    }
    int32_t c = 0;
    for (; c + 64 <= n; c += 64) {
        int32_t i = 0;
        for (; i + 4 <= n_q; i += 4)
            pv_group(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx, 4, 4, 0xffff);
        for (; i < n_q; i++)
            pv_group(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx, 1, 4, 0xffff);
    }
    for (; c < n; c += 16) { /* 16 columns at a time, the last block masked */
        const __mmask16 m = c + 16 <= n ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1u);
        int32_t i = 0;
        for (; i + 8 <= n_q; i += 8)
            pv_group(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx, 8, 1, m);
        for (; i < n_q; i++)
            pv_group(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx, 1, 1, m);
    }
}

#endif
