/* ops.c - the element-wise and per-row kernels of kernels.h (RMSNorm,
 * LayerNorm, softmax, SwiGLU, GELU, bias add) through the active level's
 * table of ops_simd.h (the registry's elt entry) (references in ref/ops_ref.c, SIMD versions in the
 * x86_* folders), and RoPE (scalar: one head vector per call). */
#include <math.h>
#include <stdatomic.h>

#include "kernels/kernels.h"
#include "kernels/ops_simd.h"

/* kern_table()->elt, cached in an atomic pointer after the first call (every
 * thread computes the same value, so a race only repeats the lookup): these
 * kernels run once per row. */
static _Atomic(const kern_elt_ops *) g_active;

const kern_elt_ops *kern_elt_ops_active(void) {
    const kern_elt_ops *o = atomic_load_explicit(&g_active, memory_order_acquire);
    if (o) return o;
    o = kern_table()->elt;
    atomic_store_explicit(&g_active, o, memory_order_release);
    return o;
}

void kern_rmsnorm(float *out, const float *x, const float *gain, int64_t n, float eps) {
    kern_elt_ops_active()->rmsnorm(out, x, gain, n, eps);
}

void kern_softmax(float *x, int64_t n) { kern_elt_ops_active()->softmax(x, n); }

void kern_swiglu(float *gate, const float *up, int64_t n) { kern_elt_ops_active()->swiglu(gate, up, n); }

void kern_layernorm(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps) {
    kern_elt_ops_active()->layernorm(out, x, gain, bias, n, eps);
}

void kern_gelu(float *x, int64_t n) { kern_elt_ops_active()->gelu(x, n); }

void kern_add(float *x, const float *b, int64_t n) { kern_elt_ops_active()->add(x, b, n); }

/* Rotates pair (a, b) of x by (c, s). */
static inline void rotate(float *x, int32_t a, int32_t b, float c, float s) {
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
}

void kern_rope_heads(float *x, int32_t n_heads, int32_t head_dim, const float *cs, int32_t n_rot, int rope_type) {
    const int32_t half = n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++, x += head_dim) {
        if (rope_type == 2)
            for (int32_t i = 0; i < half; i++) rotate(x, i, i + half, cs[2 * i], cs[2 * i + 1]);
        else
            for (int32_t i = 0; i < half; i++) rotate(x, 2 * i, 2 * i + 1, cs[2 * i], cs[2 * i + 1]);
    }
}

void kern_rope(float *x, const float *cs, int32_t n_rot, int rope_type) {
    kern_rope_heads(x, 1, n_rot, cs, n_rot, rope_type);
}
