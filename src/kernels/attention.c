/*
 * attention.c - reference causal attention over a contiguous KV cache.
 *
 * Work is split over (token, head) pairs; each thread keeps its scores in
 * its own n_ctx-float slice of scratch.  Scores are materialised per query
 * row (not per n x n matrix); the fused tiled FlashAttention of the kernels
 * issue replaces this behind the same entry point.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

static void attention_part(void *arg, int ith, int nth) {
    const attn_args *a = arg;
    const int32_t kv_dim = a->n_head_kv * a->head_dim;
    const int32_t q_dim = a->n_head * a->head_dim;
    const int32_t group = a->n_head / a->n_head_kv;
    float *score = a->scratch + (size_t)ith * (size_t)a->n_ctx;
    long lo, hi;
    tp_split((long)a->n_tok * a->n_head, ith, nth, &lo, &hi);
    for (long job = lo; job < hi; job++) {
        const int32_t t = (int32_t)(job / a->n_head), h = (int32_t)(job % a->n_head);
        const int32_t n_kv = a->pos0 + t + 1; /* causal: positions 0..pos0+t */
        const float *q = a->q + (size_t)t * q_dim + (size_t)h * a->head_dim;
        const int32_t kvh = h / group;
        for (int32_t p = 0; p < n_kv; p++) {
            const float *k = a->k_cache + (size_t)p * kv_dim + (size_t)kvh * a->head_dim;
            score[p] = kern_dot_f32(q, k, a->head_dim) * a->scale;
        }
        kern_softmax(score, n_kv);
        float *out = a->out + (size_t)t * q_dim + (size_t)h * a->head_dim;
        memset(out, 0, sizeof(float) * (size_t)a->head_dim);
        for (int32_t p = 0; p < n_kv; p++) {
            const float *v = a->v_cache + (size_t)p * kv_dim + (size_t)kvh * a->head_dim;
            const float w = score[p];
            for (int32_t i = 0; i < a->head_dim; i++) out[i] += w * v[i];
        }
    }
}

void kern_attention(threadpool *tp, const attn_args *a) { tp_run(tp, attention_part, (void *)a); }
