/*
 * ops_simd.h - the element-wise / per-row kernels of kernels.h (RMSNorm,
 * LayerNorm, softmax, SwiGLU, GELU, bias add) as a table of function
 * pointers per CPU level, and their reference and ISA versions.
 *
 * DESIGN
 *   kern_rmsnorm, kern_swiglu, ... (ops.c) call the active table
 *   (kern_elt_ops_active(): kern_table()->elt, so the level cap of kern_config caps it
 *   too).  Tables (the registry, dispatch.h; each ISA folder's register.c):
 *     scalar        the *_ref functions (src/kernels/ref/ops_ref.c): the
 *                   specification, libm expf/tanhf, sequential sums;
 *     avx2          src/kernels/x86_avx2/ops_avx2.c (levels avx2 and up to
 *                   but not including avx512);
 *     avx512 and up src/kernels/x86_avx512/ops_avx512.c;
 *     neon, dotprod src/kernels/arm_neon/ops_neon.c (AArch64: four float32x4
 *                   as the 16 lanes, the same bits as avx512).
 *   Building with -DKITE_ELT_OPS_REF pins every level to the references
 *   (A/B benchmarks of docs/kernels.md, "Element-wise ops").
 *   The avx2, avx512 and neon versions compute the same bits as each other (same
 *   operations in the same order; the avx2 file keeps 16 virtual lanes as two
 *   ymm halves where an order matters), and differ from the references only
 *   by rounding (tests/unit/test_ops.c states the budgets):
 *     - exp is ops_exp (kernels/exp_poly.h), not libm expf: <= 2 ulp from expf;
 *     - silu(g) = g * (1 / (1 + exp(-g))) as in the reference;
 *     - gelu(v) = v / (1 + exp(-2u)), u = sqrt(2/pi) v (1 + 0.044715 v^2),
 *       which equals 0.5 v (1 + tanh u) in real arithmetic without the
 *       reference's cancellation of 1 + tanh(u) for u << 0;
 *     - sums (sum of squares, mean, softmax denominator) are kept in 16 lanes
 *       (element i in lane i % 16, products fused: FMA), reduced in the fixed
 *       tree (l_j + l_{j+8}), then (j, j+4), (j, j+2), (0, 1).
 *   Invariants the callers rely on:
 *     - element-wise ops (swiglu, gelu, add): an element's result depends on
 *       its inputs only, never on its index nor on n (the tail runs the same
 *       vector code under a mask), so any split of a row into slices
 *       (per-thread row ranges) gives the same bits;
 *     - per-row ops (rmsnorm, layernorm, softmax): the summation order depends
 *       on n alone, so a given row always gives the same result.
 *
 * THREAD SAFETY
 *   Tables are constant; every function is reentrant and allocates nothing.
 */
#ifndef KITE_KERNELS_OPS_SIMD_H
#define KITE_KERNELS_OPS_SIMD_H

#include <stdint.h>

#include "kernels/dispatch.h"
#include "kernels/exp_poly.h"

typedef struct kern_elt_ops {
    const char *name; /* "scalar", "avx2", "avx512" or "neon" */
    void (*rmsnorm)(float *out, const float *x, const float *gain, int64_t n, float eps);
    void (*layernorm)(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps);
    void (*softmax)(float *x, int64_t n);
    void (*swiglu)(float *gate, const float *up, int64_t n);
    void (*gelu)(float *x, int64_t n);
    void (*add)(float *x, const float *b, int64_t n);
    /* y[i] = exp(x[i]), i < n (y may be x): the exp the other entries use
     * (the reference: expf).  For tests and benchmarks. */
    void (*exp)(float *y, const float *x, int64_t n);
} kern_elt_ops;

/* The table of the active kernel level (cached after the first call). */
const kern_elt_ops *kern_elt_ops_active(void);
/* The table of a level (kern_table_for_level(level)->elt), or NULL if this
 * CPU/build cannot run that level. */
const kern_elt_ops *kern_elt_ops_for_level(kern_level level);

/* ops_exp's range OPS_EXP_LO, OPS_EXP_HI and its polynomial: kernels/exp_poly.h */

/* References (src/kernels/ref/ops_ref.c): the contracts of kernels.h. */
void kern_rmsnorm_ref(float *out, const float *x, const float *gain, int64_t n, float eps);
void kern_layernorm_ref(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps);
void kern_softmax_ref(float *x, int64_t n);
void kern_swiglu_ref(float *gate, const float *up, int64_t n);
void kern_gelu_ref(float *x, int64_t n);
void kern_add_ref(float *x, const float *b, int64_t n);
void kern_exp_ref(float *y, const float *x, int64_t n);

/* x86 versions (compiled with ISA flags; called only at their levels). */
void kern_rmsnorm_avx2(float *out, const float *x, const float *gain, int64_t n, float eps);
void kern_layernorm_avx2(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps);
void kern_softmax_avx2(float *x, int64_t n);
void kern_swiglu_avx2(float *gate, const float *up, int64_t n);
void kern_gelu_avx2(float *x, int64_t n);
void kern_add_avx2(float *x, const float *b, int64_t n);
void kern_exp_avx2(float *y, const float *x, int64_t n);

void kern_rmsnorm_avx512(float *out, const float *x, const float *gain, int64_t n, float eps);
void kern_layernorm_avx512(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps);
void kern_softmax_avx512(float *x, int64_t n);
void kern_swiglu_avx512(float *gate, const float *up, int64_t n);
void kern_gelu_avx512(float *x, int64_t n);
void kern_add_avx512(float *x, const float *b, int64_t n);
void kern_exp_avx512(float *y, const float *x, int64_t n);

#endif
