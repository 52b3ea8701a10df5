/*
 * attention_ref.c - the scalar attention loops of attention_simd.h: thin
 * wrappers of attention_impl.h's inline loops (the specification), for the
 * scalar level's entries of the registry (ref/register.c).
 * Thread safety: pure functions.
 */
#include "kernels/attention_impl.h"
#include "kernels/attention_simd.h"

float attn_dot_ref(const float *a, const float *b, int32_t n) { return attn_dot(a, b, n); }

void attn_dot_rows_ref(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s) {
    for (int32_t r = 0; r < n_rows; r++) s[r] = attn_dot(q, k + (size_t)r * ldk, n);
}

void attn_axpy_ref(float *y, float w, const float *x, int32_t n) { attn_axpy(y, w, x, n); }

void attn_axpy_rows_ref(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n) {
    for (int32_t r = 0; r < n_rows; r++) attn_axpy(y, w[r], x + (size_t)r * ldx, n);
}

void attn_axpy_rows_multi_ref(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo, const int32_t *hi,
                              int32_t n_q, const float *x, size_t ldx, int32_t n) {
    for (int32_t i = 0; i < n_q; i++)
        if (hi[i] > lo[i])
            attn_axpy_rows_ref(y + (size_t)i * ldy, w + (size_t)i * ldw + lo[i], x + (size_t)lo[i] * ldx, ldx,
                               hi[i] - lo[i], n);
}

void attn_scale_ref(float *y, float w, int32_t n) { attn_scale(y, w, n); }
float attn_exp_sum_ref(float *x, float sub, int32_t n) { return attn_exp_sum(x, sub, n); }
float attn_max_ref(const float *x, int32_t n) { return attn_max(x, n); }
void attn_transpose_ref(const float *x, size_t ldx, int32_t n_rows, int32_t n, float *t, size_t ldt) {
    attn_transpose(x, ldx, n_rows, n, t, ldt);
}
void attn_deq_f16_ref(const uint16_t *x, float *y, int32_t n) { attn_deq_f16(x, y, n); }
void attn_deq_q8_0_ref(const unsigned char *x, float *y, int32_t n) { attn_deq_q8_0(x, y, n); }
void attn_deq_q4_0_ref(const unsigned char *x, float *y, int32_t n) { attn_deq_q4_0(x, y, n); }
