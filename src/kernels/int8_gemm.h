/*
 * int8_gemm.h - INT8 x INT8 -> INT32 matmul kernels of the W8A8 type
 * (per-output-channel int8 weights, per-token dynamic int8 activations) and
 * the LLM.int8() mixed-precision matmul.
 *
 * DESIGN
 *   A W8A8 weight row and a W8A8 activation row share one layout (dtype.h:
 *   f32 scale d, i32 sum(q), int8 q[n]); every kernel computes
 *     acc = sum_i qw[i] * qa[i]   exactly (int32 per chunk of W8_MAX_COLS
 *                                  elements, int64 across chunks)
 *     y   = (float)acc * d_a * d_w
 *   so all levels return the same bits:
 *     scalar      portable C (ref/int8_gemm_ref.c): the specification;
 *     avx2        int8 -> int16 sign extension + vpmaddwd (products and pair
 *                 sums fit int16 x int16 -> int32 exactly);
 *     avx512vnni  vpdpbusd on (qa + 128) as u8 times qw as s8, minus
 *                 128 * sum(qw) (the weight row's header): exact because
 *                 q is never -128 and n <= W8_MAX_COLS per chunk (longer rows
 *                 take the reference); 4 rows x 1..4 tokens per micro-kernel.
 *   They plug into the kernel table (dispatch.h) with act_type = W8A8: the
 *   matmul quantizes each token row once with w8_quantize_row.
 *
 *   LLM.int8() (int8_mix.c, weight type LLM_INT8): kern_llm_int8_matmul
 *   finds the input columns whose |x| exceeds the threshold in any token of
 *   the batch, quantizes the tokens without them (W8A8 rows) and runs the
 *   W8A8 GEMM on the int8 half of the weight rows, then adds the outlier
 *   columns' products with the rows' f16 copies in float, column by column.
 *
 * THREAD SAFETY
 *   Kernels are reentrant.  The LLM.int8() threshold is process-wide
 *   (kern_config.int8_threshold, or kern_llm_int8_set_threshold before
 *   matmuls).
 */
#ifndef KITE_KERNELS_INT8_GEMM_H
#define KITE_KERNELS_INT8_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "kernels/dispatch.h"
#include "tensor/weight.h"

/* vec_dot / gemm of W8A8 weights with W8A8 activation rows (dispatch.h
 * signatures). */
void vec_dot_w8a8_ref(int64_t n, float *out, const void *w, const void *a);
void gemm_w8a8_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                   size_t a_stride, int nt);
/* The exact integer sum of a W8A8 weight row and activation row (int64). */
int64_t w8a8_dot_i64(int64_t n, const void *w, const void *a);
/* Activation quantizer of the W8A8 act_type (kern_act_fn). */
void act_quantize_w8a8(const float *x, void *dst, int64_t n);

#if defined(__x86_64__) || defined(__i386__)
void vec_dot_w8a8_avx2(int64_t n, float *out, const void *w, const void *a);
void gemm_w8a8_avx2(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                    size_t a_stride, int nt);
void vec_dot_w8a8_vnni(int64_t n, float *out, const void *w, const void *a);
void gemm_w8a8_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                    size_t a_stride, int nt);
#endif

#define LLM_INT8_THRESHOLD_DEFAULT 6.0f

/* The LLM.int8() outlier threshold: |x| > threshold in any token of a batch
 * sends that input column to the f16 path (+inf disables the decomposition).
 * Initially LLM_INT8_THRESHOLD_DEFAULT; kern_configure sets it from
 * kern_config.int8_threshold (the kite CLI from KITE_INT8_THRESHOLD).  The
 * setter is for tools and tests; call it while no matmul runs. */
float kern_llm_int8_threshold(void);
void kern_llm_int8_set_threshold(float t);

/* kern_matmul of an LLM_INT8 weight (called by kern_matmul_with; same
 * contract and scratch).  Results depend on the batch (which columns are
 * outliers), not on the thread count. */
void kern_llm_int8_matmul(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                          float *y, int64_t ldy, void *scratch);
/* Scratch bytes it needs besides n_tok W8A8 activation rows (outlier mask
 * and column list); kern_matmul_scratch_bytes includes them. */
size_t kern_llm_int8_extra_scratch(int64_t max_cols);

#endif
