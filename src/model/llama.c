/*
 * llama.c - the LLaMA forward pass (embedding, RMSNorm, RoPE, grouped-query
 * attention with KV cache, SwiGLU FFN, final norm, output head).
 *
 * Reads top to bottom for a batch of n tokens at positions pos0..pos0+n-1:
 * the same code is prefill (n > 1: every linear layer is one matrix-matrix
 * product over the batch, attention is causal within the batch) and decode
 * (n == 1).  K and V of the batch are written straight into the cache rows
 * of their positions, so attention reads one contiguous cache.  Per-token
 * element-wise work is cheap and stays on the calling thread; matmuls and
 * attention run on the pool.
 *
 * Profiling (kite_ctx_set_profiling): when ctx->profiling is set, PROF(op)
 * charges the time since the previous mark to op, so the marks tile the
 * whole pass; when it is clear, each mark is one untaken branch and no
 * clock is read.  The arithmetic is the same either way.
 */
#include <math.h>
#include <string.h>

#include "core/timing.h"
#include "kernels/kernels.h"
#include "model/context.h"

/* Charges the time since the last mark to op type `op` (profiling only). */
#define PROF(op)                                  \
    do {                                          \
        if (prof) {                               \
            const double now_ = time_now_s();     \
            ctx->prof_s[(op)] += now_ - t_mark;   \
            t_mark = now_;                        \
        }                                         \
    } while (0)

void llama_forward(kite_ctx *ctx, const kite_token *tokens, int32_t n, int32_t first_out, float *out_logits) {
    const kite_model *m = ctx->model;
    const model_hparams *hp = &m->hp;
    const int32_t E = hp->n_embd, HD = hp->head_dim;
    const int32_t Q = hp->n_head * HD, KV = hp->n_head_kv * HD, F = hp->n_ff;
    const int32_t pos0 = ctx->n_past;
    threadpool *tp = ctx->tp;
    const bool prof = ctx->profiling;
    double t_mark = prof ? time_now_s() : 0.0;

    /* token embeddings */
    for (int32_t t = 0; t < n; t++) kern_get_row(&m->tok_embd, tokens[t], ctx->x + (size_t)t * E);
    PROF(PROF_EMBED);

    /* rotary (cos, sin) per position, shared by all layers and heads */
    const int32_t half = hp->n_rot / 2;
    for (int32_t t = 0; t < n; t++) {
        float *cs = ctx->rope_cs + (size_t)t * hp->n_rot;
        for (int32_t i = 0; i < half; i++) {
            const float theta = (float)(pos0 + t) * ctx->inv_freq[i];
            cs[2 * i] = cosf(theta);
            cs[2 * i + 1] = sinf(theta);
        }
    }
    PROF(PROF_OTHER);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        if (ctx->skip_layers && ctx->skip_layers[l]) continue; /* self-speculative draft: residual passes through */
        const layer_weights *L = &m->layers[l];
        float *k_cache = ctx->k_cache + (size_t)l * ctx->n_ctx * KV;
        float *v_cache = ctx->v_cache + (size_t)l * ctx->n_ctx * KV;

        /* attention block */
        for (int32_t t = 0; t < n; t++)
            kern_rmsnorm(ctx->xb + (size_t)t * E, ctx->x + (size_t)t * E, L->attn_norm, E, hp->rms_eps);
        PROF(PROF_ATTN_NORM);
        kern_matmul(tp, &L->wq, ctx->xb, n, ctx->q, Q, ctx->mm_scratch);
        PROF(PROF_Q_PROJ);
        kern_matmul(tp, &L->wk, ctx->xb, n, k_cache + (size_t)pos0 * KV, KV, ctx->mm_scratch);
        PROF(PROF_K_PROJ);
        kern_matmul(tp, &L->wv, ctx->xb, n, v_cache + (size_t)pos0 * KV, KV, ctx->mm_scratch);
        PROF(PROF_V_PROJ);
        for (int32_t t = 0; t < n; t++) {
            const float *cs = ctx->rope_cs + (size_t)t * hp->n_rot;
            for (int32_t h = 0; h < hp->n_head; h++)
                kern_rope(ctx->q + (size_t)t * Q + (size_t)h * HD, cs, hp->n_rot, hp->rope_type);
            for (int32_t h = 0; h < hp->n_head_kv; h++)
                kern_rope(k_cache + (size_t)(pos0 + t) * KV + (size_t)h * HD, cs, hp->n_rot, hp->rope_type);
        }
        PROF(PROF_ROPE);
        attn_args aa = {
            .q = ctx->q, .k_cache = k_cache, .v_cache = v_cache, .out = ctx->att, .scratch = ctx->att_scratch,
            .n_tok = n, .pos0 = pos0, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = HD,
            .n_ctx = ctx->n_ctx, .scale = 1.0f / sqrtf((float)HD), .phi = ctx->attn_phi,
        };
        kern_attention(tp, &aa);
        PROF(PROF_ATTENTION);
        kern_matmul(tp, &L->wo, ctx->att, n, ctx->xb, E, ctx->mm_scratch);
        PROF(PROF_O_PROJ);
        for (size_t i = 0; i < (size_t)n * E; i++) ctx->x[i] += ctx->xb[i];
        PROF(PROF_OTHER);

        /* feed-forward block */
        for (int32_t t = 0; t < n; t++)
            kern_rmsnorm(ctx->xb + (size_t)t * E, ctx->x + (size_t)t * E, L->ffn_norm, E, hp->rms_eps);
        PROF(PROF_FFN_NORM);
        kern_matmul(tp, &L->w_gate, ctx->xb, n, ctx->hb, F, ctx->mm_scratch);
        PROF(PROF_FFN_GATE);
        kern_matmul(tp, &L->w_up, ctx->xb, n, ctx->hb2, F, ctx->mm_scratch);
        PROF(PROF_FFN_UP);
        kern_swiglu(ctx->hb, ctx->hb2, (int64_t)n * F);
        PROF(PROF_FFN_ACT);
        kern_matmul(tp, &L->w_down, ctx->hb, n, ctx->xb, E, ctx->mm_scratch);
        PROF(PROF_FFN_DOWN);
        for (size_t i = 0; i < (size_t)n * E; i++) ctx->x[i] += ctx->xb[i];
        PROF(PROF_OTHER);
    }

    /* final norm and output head, only for the rows the caller wants */
    const int32_t n_out = n - first_out;
    if (n_out <= 0) return;
    float *xo = ctx->xb + (size_t)first_out * E;
    for (int32_t t = first_out; t < n; t++)
        kern_rmsnorm(ctx->xb + (size_t)t * E, ctx->x + (size_t)t * E, m->output_norm, E, hp->rms_eps);
    PROF(PROF_OUT_NORM);
    kern_matmul(tp, &m->output, xo, n_out, out_logits, hp->n_vocab, ctx->mm_scratch);
    PROF(PROF_OUTPUT);
}
