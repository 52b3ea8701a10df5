/*
 * la_gemm_avx512.c - la_gemm.h's register tiles on AVX-512: float 8 x 32
 * and double 8 x 16 (16 zmm accumulators, two B loads and eight broadcasts
 * per step), and the 16-lane axpy_neg.  Same bits as ref/la_gemm_ref.c.
 * One template (LA512_TILE) makes both tiles: only the element type and the
 * intrinsics' suffix differ.
 */
#include <immintrin.h>

#include "kernels/la_gemm.h"
#include "kernels/la_tile.h"

enum { MR = 8 };

/* NAME(kc, ap, bp, c, ldc, mv, nv) for element T in vectors V of W lanes
 * (NR = 2W); S is the intrinsic suffix (ps / pd). */
#define LA512_TILE(NAME, T, V, W, S)                                                                             \
    static void NAME(int kc, const T *ap, const T *bp, T *c, int64_t ldc, int mv, int nv) {                     \
        enum { NR = 2 * (W) };                                                                                 \
        LA_PREFETCH_C(c, ldc, mv, nv * (int)sizeof(T));                                                        \
        V acc[MR][2];                                                                                          \
        for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_##S();                            \
        for (int k = 0; k < kc; k++) {                                                                         \
            const V b0 = _mm512_loadu_##S(bp + k * NR), b1 = _mm512_loadu_##S(bp + k * NR + (W));            \
            const T *a = ap + k * MR;                                                                          \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                             \
                const V t = _mm512_set1_##S(a[i]);                                                             \
                acc[i][0] = _mm512_fmadd_##S(t, b0, acc[i][0]);                                                \
                acc[i][1] = _mm512_fmadd_##S(t, b1, acc[i][1]);                                                \
            }                                                                                                  \
        }                                                                                                      \
        if (mv == MR && nv == NR) {                                                                            \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                             \
                _mm512_storeu_##S(c + i * ldc, _mm512_add_##S(_mm512_loadu_##S(c + i * ldc), acc[i][0]));     \
                _mm512_storeu_##S(c + i * ldc + (W),                                                           \
                                  _mm512_add_##S(_mm512_loadu_##S(c + i * ldc + (W)), acc[i][1]));              \
            }                                                                                                  \
            return;                                                                                            \
        }                                                                                                      \
        T tile[MR * NR];                                                                                       \
        for (int i = 0; i < MR; i++) {                                                                         \
            _mm512_storeu_##S(tile + i * NR, acc[i][0]);                                                       \
            _mm512_storeu_##S(tile + i * NR + (W), acc[i][1]);                                                 \
        }                                                                                                      \
        LA_ADD_TILE(tile, NR, c, ldc, mv, nv);                                                                 \
    }

LA512_TILE(sgemm_avx512, float, __m512, 16, ps)
LA512_TILE(dgemm_avx512, double, __m512d, 8, pd)

static void saxpy_neg_avx512(int n, float a, const float *x, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(y + j, _mm512_sub_ps(_mm512_loadu_ps(y + j), _mm512_mul_ps(va, _mm512_loadu_ps(x + j))));
    if (j < n) {
        const __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
        const __m512 t = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + j));
        _mm512_mask_storeu_ps(y + j, m, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, y + j), t));
    }
}

const kern_la_ops kern_la_avx512 = {.name = "avx512", .s_mr = MR, .s_nr = 32, .sgemm = sgemm_avx512,
                                    .d_mr = MR, .d_nr = 16, .dgemm = dgemm_avx512,
                                    .saxpy_neg = saxpy_neg_avx512};
