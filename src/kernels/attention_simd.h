/*
 * attention_simd.h - the attention kernels' inner loops as a small table of
 * function pointers, one per CPU level in the registry (kern_ops_table.attn,
 * dispatch.h), read once per kern_attention call.
 *
 * DESIGN
 *   The scalar table (ref/register.c over ref/attention_ref.c) wraps the
 *   inline loops of attention_impl.h, which are the specification.  The avx2
 *   table (x86_avx2/register.c over attention_avx2.c; at the avx512 levels
 *   the same table with exp_sum and the axpy_rows entries from
 *   x86_avx512/attention_avx512.c, x86_avx512/register.c)
 *   computes the same operations in the same order: every 8-lane partial
 *   sum lives in its own vector lane, products and sums are separate
 *   instructions (no FMA; the Makefile builds with -ffp-contract=off), the
 *   horizontal reductions keep ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) + tail,
 *   attn_exp is the same sequence of float operations, and the dequantizers
 *   use the same integer bit manipulation.  Results are therefore bit-identical
 *   at every level (tests/unit/test_attention.c, test_simd_bit_identical).
 *
 *   The _rows entries exist so a whole run of cache rows costs one call and
 *   the accumulators stay in registers across rows; per element they do
 *   exactly what the single-row entry would do, row after row.
 *   axpy_rows_multi does the same for several query rows over the same K/V
 *   rows, interleaving their add chains (small head_dim); max and transpose
 *   are exact (a vector max that defers NaN and zero maxima to the
 *   sequential rule; a copy).
 *
 * THREAD SAFETY
 *   Tables are immutable; the functions are reentrant.
 */
#ifndef KITE_KERNELS_ATTENTION_SIMD_H
#define KITE_KERNELS_ATTENTION_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"

typedef struct attn_ops {
    const char *name; /* "scalar", "avx2" or "avx512" */
    /* attn_dot: sum_i a[i]*b[i], 8 lanes + tail */
    float (*dot)(const float *a, const float *b, int32_t n);
    /* s[r] = dot(q, k + r*ldk, n) for r < n_rows (ldk in floats) */
    void (*dot_rows)(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s);
    /* attn_axpy: y[i] += w * x[i] (y, x disjoint) */
    void (*axpy)(float *y, float w, const float *x, int32_t n);
    /* for r = 0 .. n_rows-1 in order: axpy(y, w[r], x + r*ldx, n) (y disjoint from w and x) */
    void (*axpy_rows)(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n);
    /* for each query row i < n_q: axpy_rows(y + i*ldy, w + i*ldw + lo[i], x + lo[i]*ldx, ldx,
     * hi[i] - lo[i], n) (nothing where hi[i] <= lo[i]); the rows' y are disjoint from each other and
     * from w and x.  Several query rows over the same K/V rows (FlashAttention's tile): per row the
     * same sums in the same order as axpy_rows, but the rows' add chains interleave, which is what
     * makes a small head_dim fast (one 8-lane chain per row would be latency-bound). */
    void (*axpy_rows_multi)(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo, const int32_t *hi,
                            int32_t n_q, const float *x, size_t ldx, int32_t n);
    /* attn_scale: y[i] *= w */
    void (*scale)(float *y, float w, int32_t n);
    /* attn_exp_sum: x[i] = attn_exp(x[i] - sub), returns their 8-lane sum */
    /* attn_max: the sequential max of x[0..n), n >= 1 */
    float (*max)(const float *x, int32_t n);
    /* attn_transpose: t[d*ldt + j] = x[j*ldx + d], j < n_rows, d < n */
    void (*transpose)(const float *x, size_t ldx, int32_t n_rows, int32_t n, float *t, size_t ldt);
    float (*exp_sum)(float *x, float sub, int32_t n);
    /* attn_deq_f16 / _q8_0 / _q4_0: one row of n values to floats */
    void (*deq_f16)(const uint16_t *x, float *y, int32_t n);
    void (*deq_q8_0)(const unsigned char *x, float *y, int32_t n);
    void (*deq_q4_0)(const unsigned char *x, float *y, int32_t n);
} attn_ops;

/* The active level's table (kern_table()->attn, so the level cap of kern_config caps it
 * too). */
const attn_ops *attn_ops_active(void);
/* A level's table (kern_table_for_level(level)->attn), or NULL if this
 * CPU/build cannot run that level. */
const attn_ops *attn_ops_for_level(kern_level level);

/* The scalar entries (ref/attention_ref.c): attention_impl.h's loops. */
float attn_dot_ref(const float *a, const float *b, int32_t n);
void attn_dot_rows_ref(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s);
void attn_axpy_ref(float *y, float w, const float *x, int32_t n);
void attn_axpy_rows_ref(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n);
void attn_axpy_rows_multi_ref(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo, const int32_t *hi,
                              int32_t n_q, const float *x, size_t ldx, int32_t n);
void attn_scale_ref(float *y, float w, int32_t n);
float attn_exp_sum_ref(float *x, float sub, int32_t n);
float attn_max_ref(const float *x, int32_t n);
void attn_transpose_ref(const float *x, size_t ldx, int32_t n_rows, int32_t n, float *t, size_t ldt);
void attn_deq_f16_ref(const uint16_t *x, float *y, int32_t n);
void attn_deq_q8_0_ref(const unsigned char *x, float *y, int32_t n);
void attn_deq_q4_0_ref(const unsigned char *x, float *y, int32_t n);

/* kern_attention with an explicit table (tests compare levels bit for bit). */
void kern_attention_with(const attn_ops *ops, threadpool *tp, const attn_args *a);

#endif
