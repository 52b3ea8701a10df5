/*
 * la_gemm_avx2.c - la_gemm.h's register tiles on AVX2 + FMA: float 6 x 16
 * and double 6 x 8 (12 ymm accumulators), and the 8-lane axpy_neg.  Same
 * bits as ref/la_gemm_ref.c.
 */
#include <immintrin.h>

#include "kernels/la_gemm.h"

enum { SMR = 6, SNR = 16, DMR = 6, DNR = 8 };

#define ADD_TILE(tile, NRC, c, ldc, mv, nv)                                                                      \
    for (int i_ = 0; i_ < (mv); i_++)                                                                          \
        for (int j_ = 0; j_ < (nv); j_++) (c)[i_ * (ldc) + j_] += (tile)[i_ * (NRC) + j_]

/* fetch the C tile's lines before the kc steps (see la_gemm_avx512.c) */
#define PREFETCH_C(c, ldc, mv, rowbytes)                                                                         \
    for (int i_ = 0; i_ < (mv); i_++)                                                                          \
        for (int b_ = 0; b_ < (rowbytes); b_ += 64) _mm_prefetch((const char *)((c) + i_ * (ldc)) + b_, _MM_HINT_T0)

static void sgemm_avx2(int kc, const float *ap, const float *bp, float *c, int64_t ldc, int mv, int nv) {
    PREFETCH_C(c, ldc, mv, nv * 4);
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_loadu_ps(bp + k * SNR), b1 = _mm256_loadu_ps(bp + k * SNR + 8);
        const float *a = ap + k * SMR;
        __m256 t;
#define ROW(i, x0, x1)                                                                                           \
    t = _mm256_broadcast_ss(a + i);                                                                            \
    x0 = _mm256_fmadd_ps(t, b0, x0);                                                                           \
    x1 = _mm256_fmadd_ps(t, b1, x1)
        ROW(0, c00, c01); ROW(1, c10, c11); ROW(2, c20, c21); ROW(3, c30, c31); ROW(4, c40, c41); ROW(5, c50, c51);
#undef ROW
    }
    float tile[SMR * SNR];
    _mm256_storeu_ps(tile + 0 * SNR, c00); _mm256_storeu_ps(tile + 0 * SNR + 8, c01);
    _mm256_storeu_ps(tile + 1 * SNR, c10); _mm256_storeu_ps(tile + 1 * SNR + 8, c11);
    _mm256_storeu_ps(tile + 2 * SNR, c20); _mm256_storeu_ps(tile + 2 * SNR + 8, c21);
    _mm256_storeu_ps(tile + 3 * SNR, c30); _mm256_storeu_ps(tile + 3 * SNR + 8, c31);
    _mm256_storeu_ps(tile + 4 * SNR, c40); _mm256_storeu_ps(tile + 4 * SNR + 8, c41);
    _mm256_storeu_ps(tile + 5 * SNR, c50); _mm256_storeu_ps(tile + 5 * SNR + 8, c51);
    if (mv == SMR && nv == SNR) {
        for (int i = 0; i < SMR; i++)
            for (int h = 0; h < SNR; h += 8)
                _mm256_storeu_ps(c + i * ldc + h,
                                 _mm256_add_ps(_mm256_loadu_ps(c + i * ldc + h), _mm256_loadu_ps(tile + i * SNR + h)));
        return;
    }
    ADD_TILE(tile, SNR, c, ldc, mv, nv);
}

static void dgemm_avx2(int kc, const double *ap, const double *bp, double *c, int64_t ldc, int mv, int nv) {
    PREFETCH_C(c, ldc, mv, nv * 8);
    __m256d c00 = _mm256_setzero_pd(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256d c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int k = 0; k < kc; k++) {
        const __m256d b0 = _mm256_loadu_pd(bp + k * DNR), b1 = _mm256_loadu_pd(bp + k * DNR + 4);
        const double *a = ap + k * DMR;
        __m256d t;
#define ROW(i, x0, x1)                                                                                           \
    t = _mm256_broadcast_sd(a + i);                                                                            \
    x0 = _mm256_fmadd_pd(t, b0, x0);                                                                           \
    x1 = _mm256_fmadd_pd(t, b1, x1)
        ROW(0, c00, c01); ROW(1, c10, c11); ROW(2, c20, c21); ROW(3, c30, c31); ROW(4, c40, c41); ROW(5, c50, c51);
#undef ROW
    }
    double tile[DMR * DNR];
    _mm256_storeu_pd(tile + 0 * DNR, c00); _mm256_storeu_pd(tile + 0 * DNR + 4, c01);
    _mm256_storeu_pd(tile + 1 * DNR, c10); _mm256_storeu_pd(tile + 1 * DNR + 4, c11);
    _mm256_storeu_pd(tile + 2 * DNR, c20); _mm256_storeu_pd(tile + 2 * DNR + 4, c21);
    _mm256_storeu_pd(tile + 3 * DNR, c30); _mm256_storeu_pd(tile + 3 * DNR + 4, c31);
    _mm256_storeu_pd(tile + 4 * DNR, c40); _mm256_storeu_pd(tile + 4 * DNR + 4, c41);
    _mm256_storeu_pd(tile + 5 * DNR, c50); _mm256_storeu_pd(tile + 5 * DNR + 4, c51);
    if (mv == DMR && nv == DNR) {
        for (int i = 0; i < DMR; i++)
            for (int h = 0; h < DNR; h += 4)
                _mm256_storeu_pd(c + i * ldc + h,
                                 _mm256_add_pd(_mm256_loadu_pd(c + i * ldc + h), _mm256_loadu_pd(tile + i * DNR + h)));
        return;
    }
    ADD_TILE(tile, DNR, c, ldc, mv, nv);
}

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

const kern_la_ops kern_la_avx2 = {.name = "avx2", .s_mr = SMR, .s_nr = SNR, .sgemm = sgemm_avx2,
                                  .d_mr = DMR, .d_nr = DNR, .dgemm = dgemm_avx2, .saxpy_neg = saxpy_neg_avx2};
