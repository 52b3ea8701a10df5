/*
 * la_gemm_ref.c - the scalar register-tile kernels of la_gemm.h: the
 * specification every SIMD level matches bit for bit.
 */
#include <math.h>

#include "kernels/la_gemm.h"

enum { MR = 4, NR = 4 };

static void sgemm_ref(int kc, const float *ap, const float *bp, float *c, int64_t ldc, int mv, int nv) {
    float acc[MR][NR] = {{0}};
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = fmaf(ap[k * MR + i], bp[k * NR + j], acc[i][j]);
    for (int i = 0; i < mv; i++)
        for (int j = 0; j < nv; j++) c[i * ldc + j] += acc[i][j];
}

static void dgemm_ref(int kc, const double *ap, const double *bp, double *c, int64_t ldc, int mv, int nv) {
    double acc[MR][NR] = {{0}};
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] = fma(ap[k * MR + i], bp[k * NR + j], acc[i][j]);
    for (int i = 0; i < mv; i++)
        for (int j = 0; j < nv; j++) c[i * ldc + j] += acc[i][j];
}

static void saxpy_neg_ref(int n, float a, const float *x, float *y) {
    for (int j = 0; j < n; j++) {
        const float t = a * x[j];
        y[j] = y[j] - t;
    }
}

const kern_la_ops kern_la_scalar = {.name = "scalar", .s_mr = MR, .s_nr = NR, .sgemm = sgemm_ref,
                                    .d_mr = MR, .d_nr = NR, .dgemm = dgemm_ref, .saxpy_neg = saxpy_neg_ref};
