/*
 * la_gemm_avx2.c - la_gemm.h's register tiles on AVX2 + FMA: float 6 x 16
 * and double 6 x 8 (12 ymm accumulators), and the 8-lane axpy_neg.  Same
 * bits as ref/la_gemm_ref.c.  One template (LA256_TILE) makes both tiles.
 */
#include <immintrin.h>

#include "kernels/la_gemm.h"
#include "kernels/la_tile.h"

enum { MR = 6 };

/* NAME for element T in vectors V of W lanes (NR = 2W); S: ps / pd; B: the
 * broadcast's element suffix (ss / sd). */
#define LA256_TILE(NAME, T, V, W, S, B)                                                                          \
    static void NAME(int kc, const T *ap, const T *bp, T *c, int64_t ldc, int mv, int nv) {                     \
        enum { NR = 2 * (W) };                                                                                 \
        LA_PREFETCH_C(c, ldc, mv, nv * (int)sizeof(T));                                                        \
        V acc[MR][2];                                                                                          \
        for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_##S();                            \
        for (int k = 0; k < kc; k++) {                                                                         \
            const V b0 = _mm256_loadu_##S(bp + k * NR), b1 = _mm256_loadu_##S(bp + k * NR + (W));            \
            const T *a = ap + k * MR;                                                                          \
            _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {                                             \
                const V t = _mm256_broadcast_##B(a + i);                                                       \
                acc[i][0] = _mm256_fmadd_##S(t, b0, acc[i][0]);                                                \
                acc[i][1] = _mm256_fmadd_##S(t, b1, acc[i][1]);                                                \
            }                                                                                                  \
        }                                                                                                      \
        if (mv == MR && nv == NR) {                                                                            \
            _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {                                             \
                _mm256_storeu_##S(c + i * ldc, _mm256_add_##S(_mm256_loadu_##S(c + i * ldc), acc[i][0]));     \
                _mm256_storeu_##S(c + i * ldc + (W),                                                           \
                                  _mm256_add_##S(_mm256_loadu_##S(c + i * ldc + (W)), acc[i][1]));              \
            }                                                                                                  \
            return;                                                                                            \
        }                                                                                                      \
        T tile[MR * NR];                                                                                       \
        for (int i = 0; i < MR; i++) {                                                                         \
            _mm256_storeu_##S(tile + i * NR, acc[i][0]);                                                       \
            _mm256_storeu_##S(tile + i * NR + (W), acc[i][1]);                                                 \
        }                                                                                                      \
        LA_ADD_TILE(tile, NR, c, ldc, mv, nv);                                                                 \
    }

LA256_TILE(sgemm_avx2, float, __m256, 8, ps, ss)
LA256_TILE(dgemm_avx2, double, __m256d, 4, pd, sd)

static void saxpy_neg_avx2(int n, float a, const float *x, float *y) {
    const __m256 va = _mm256_set1_ps(a);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_sub_ps(_mm256_loadu_ps(y + j), _mm256_mul_ps(va, _mm256_loadu_ps(x + j))));
    for (; j < n; j++) {
        const float t = a * x[j];
        y[j] = y[j] - t;
    }
}

const kern_la_ops kern_la_avx2 = {.name = "avx2", .s_mr = MR, .s_nr = 16, .sgemm = sgemm_avx2,
                                  .d_mr = MR, .d_nr = 8, .dgemm = dgemm_avx2, .saxpy_neg = saxpy_neg_avx2};
