/*
 * la_gemm.h - the register-tile kernels of the dense linear algebra the
 * quantizer runs (src/quant/linalg.c: Hessians, blocked Cholesky and
 * triangular inverse, GPTQ's lazy updates).
 *
 * DESIGN
 *   The kernel is the inner block of a BLIS-style GEMM: C[mr][nr] +=
 *   A_p * B_p over kc steps, where A_p holds kc columns of an MR-row panel
 *   (ap[k * MR + i]) and B_p kc rows of an NR-column panel (bp[k * NR + j]),
 *   both packed by the driver (zero-padded past the matrix edge; signs and
 *   transposes are applied while packing).  MR and NR are per level (the
 *   struct below); the driver packs to whatever the table says.
 *
 *   Every element is computed the same way at every level, whatever MR/NR:
 *   acc = 0; for k in 0..kc: acc = fma(ap[k][i], bp[k][j], acc); then
 *   C += acc (one rounding per fma, one per add).  The scalar reference uses
 *   C99 fmaf/fma, which round once exactly as the vector FMAs do, so results
 *   are bit-identical across levels; the driver fixes kc blocking, so they
 *   are identical across thread counts too.
 *
 *   mv, nv (1..MR, 1..NR): the valid part of the tile; only those elements
 *   of C are read or written.
 *
 *   axpy_neg: y[j] = y[j] - a * x[j] with a separate multiply and subtract
 *   (no FMA), so every level gives the scalar loop's bits (GPTQ's in-block
 *   error propagation).
 *
 * THREAD SAFETY
 *   Pure functions.
 */
#ifndef KITE_KERNELS_LA_GEMM_H
#define KITE_KERNELS_LA_GEMM_H

#include <stdint.h>

typedef void (*kern_la_sgemm_fn)(int kc, const float *ap, const float *bp, float *c, int64_t ldc, int mv, int nv);
typedef void (*kern_la_dgemm_fn)(int kc, const double *ap, const double *bp, double *c, int64_t ldc, int mv,
                                 int nv);
typedef void (*kern_la_saxpy_neg_fn)(int n, float a, const float *x, float *y);

typedef struct kern_la_ops {
    const char *name;
    int s_mr, s_nr;           /* float tile: rows, columns */
    kern_la_sgemm_fn sgemm;
    int d_mr, d_nr;           /* double tile */
    kern_la_dgemm_fn dgemm;
    kern_la_saxpy_neg_fn saxpy_neg;
} kern_la_ops;

#define KERN_LA_MR_MAX 8  /* largest MR / NR of any level (packing buffers) */
#define KERN_LA_NR_MAX 32

extern const kern_la_ops kern_la_scalar;  /* ref/la_gemm_ref.c: 4 x 4, fmaf / fma */
extern const kern_la_ops kern_la_avx2;    /* x86_avx2/la_gemm_avx2.c: float 6 x 16, double 6 x 8 */
extern const kern_la_ops kern_la_avx512;  /* x86_avx512/la_gemm_avx512.c: float 8 x 32, double 8 x 16 */

#endif
