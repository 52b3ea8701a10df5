/*
 * kernels.h - compute kernels of the forward pass.
 *
 * DESIGN
 *   These are the reference (portable C) kernels.  They take weights of any
 *   dtype that has a to_float in the traits table: a row is converted to
 *   float once into per-thread scratch and reused for every token of the
 *   batch, so a weight byte is read once per call whatever the batch size.
 *   Multi-threaded kernels split their output statically over the pool's
 *   threads (ith/nth); they allocate nothing.  The SIMD kernels of the
 *   kernels issue will sit behind the same entry points.
 *
 * SHAPES
 *   Activations are row-major [n_tok][width] float arrays.
 */
#ifndef KITE_KERNELS_H
#define KITE_KERNELS_H

#include <stdint.h>

#include "core/threadpool.h"
#include "tensor/weight.h"

/* y[t*ldy + r] = sum_c W[r][c] * x[t*W.ne[0] + c], for rows r < W.ne[1] and
 * t < n_tok.  scratch: tp_n_threads(tp) * W.ne[0] floats. */
void kern_matmul(threadpool *tp, const weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                 float *scratch);

/* dst[0..ne0) = row `row` of w as floats. */
void kern_get_row(const weight *w, int64_t row, float *dst);

/* Dot product in float with a fixed, size-independent summation order. */
float kern_dot_f32(const float *a, const float *b, int64_t n);

/* out = x / sqrt(mean(x^2) + eps) * gain, over n elements (out may be x). */
void kern_rmsnorm(float *out, const float *x, const float *gain, int64_t n, float eps);

/* In-place softmax of x[0..n). */
void kern_softmax(float *x, int64_t n);

/* gate[i] = silu(gate[i]) * up[i], silu(v) = v / (1 + exp(-v)). */
void kern_swiglu(float *gate, const float *up, int64_t n);

/* Rotary embedding of one head vector x[0..head_dim) in place, using the
 * (cos, sin) pairs of its position: cs[2*i], cs[2*i+1] for pair i < n_rot/2.
 * rope_type 0 (NORM) rotates (x[2i], x[2i+1]); 2 (NEOX) rotates (x[i], x[i + n_rot/2]). */
void kern_rope(float *x, const float *cs, int32_t n_rot, int rope_type);

typedef struct attn_args {
    const float *q;       /* [n_tok][n_head * head_dim] */
    const float *k_cache; /* [n_ctx][n_head_kv * head_dim], positions 0..pos0+n_tok-1 valid */
    const float *v_cache; /* same layout */
    float *out;           /* [n_tok][n_head * head_dim] */
    float *scratch;       /* n_threads * n_ctx floats (scores) */
    int32_t n_tok;
    int32_t pos0;         /* position of the first query */
    int32_t n_head;
    int32_t n_head_kv;    /* divides n_head; query head h reads kv head h / (n_head / n_head_kv) */
    int32_t head_dim;
    int32_t n_ctx;        /* scratch stride */
    float scale;          /* usually 1/sqrt(head_dim) */
} attn_args;

/* Causal scaled dot-product attention: query t attends to positions 0..pos0+t. */
void kern_attention(threadpool *tp, const attn_args *a);

#endif
