/*
 * la_gemm_ref.c - the scalar register-tile kernels of la_gemm.h: the
 * specification every SIMD level matches bit for bit.
 */
#include <math.h>

#include "kernels/la_gemm.h"

enum { MR = 4, NR = 4 };

/* NAME for element T with the single-rounding multiply-add FMA (fmaf / fma) */
#define LA_REF_TILE(NAME, T, FMA)                                                                                \
    static void NAME(int kc, const T *ap, const T *bp, T *c, int64_t ldc, int mv, int nv) {                     \
        T acc[MR][NR] = {{0}};                                                                                 \
        for (int k = 0; k < kc; k++)                                                                           \
            for (int i = 0; i < MR; i++)                                                                       \
                for (int j = 0; j < NR; j++) acc[i][j] = FMA(ap[k * MR + i], bp[k * NR + j], acc[i][j]);     \
        for (int i = 0; i < mv; i++)                                                                           \
            for (int j = 0; j < nv; j++) c[i * ldc + j] += acc[i][j];                                          \
    }

LA_REF_TILE(sgemm_ref, float, fmaf)
LA_REF_TILE(dgemm_ref, double, fma)

static void saxpy_neg_ref(int n, float a, const float *x, float *y) {
    for (int j = 0; j < n; j++) {
        const float t = a * x[j];
        y[j] = y[j] - t;
    }
}

const kern_la_ops kern_la_scalar = {.name = "scalar", .s_mr = MR, .s_nr = NR, .sgemm = sgemm_ref,
                                    .d_mr = MR, .d_nr = NR, .dgemm = dgemm_ref, .saxpy_neg = saxpy_neg_ref};
