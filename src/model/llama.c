/*
 * llama.c - the LLaMA forward pass (embedding, RMSNorm, RoPE, grouped-query
 * attention with KV cache, SwiGLU FFN, final norm, output head).
 *
 * Reads top to bottom for a batch of tokens from one or more sequences: the
 * same code is prefill (every linear layer is one matrix-matrix product over
 * all tokens of the batch, attention is causal within each sequence), decode
 * (one token) and the serving engine's mixed batches (one decode token per
 * running sequence plus prompt chunks).  K and V of the batch are computed
 * into kb/vb and copied to the cache rows of their positions (contiguous for
 * kite_ctx_eval's single sequence, through a block table for the engine), so
 * attention reads the cache only.  Per-token element-wise work is cheap and
 * stays on the calling thread; matmuls and attention run on the pool.
 * A sequence's result does not depend on the other sequences in the batch:
 * matmul rows are independent and attention is per sequence.
 *
 * Profiling (kite_ctx_set_profiling): when ctx->profiling is set, PROF(op)
 * charges the time since the previous mark to op, so the marks tile the
 * whole pass; when it is clear, each mark is one untaken branch and no
 * clock is read.  The arithmetic is the same either way.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
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

/* Cache row of position p of a sequence (see attn_args.block_table). */
static size_t kv_row(const kite_ctx *ctx, const fwd_seq *sq, int32_t p) {
    if (!sq->block_table) return (size_t)p;
    const int32_t b = p / ctx->kv_block;
    return (size_t)sq->block_table[b] * (size_t)ctx->kv_block + (size_t)(p - b * ctx->kv_block);
}

#define TAP(layer, point, x, width)                                                   \
    do {                                                                              \
        if (ctx->tap) ctx->tap(ctx->tap_user, (layer), (point), (x), n, (width));     \
    } while (0)

void llama_forward_batch(kite_ctx *ctx, const kite_token *tokens, const fwd_seq *seqs, int32_t n_seq,
                         float *out_logits) {
    const kite_model *m = ctx->model;
    const model_hparams *hp = &m->hp;
    const int32_t E = hp->n_embd, HD = hp->head_dim;
    const int32_t Q = hp->n_head * HD, KV = hp->n_head_kv * HD, F = hp->n_ff;
    threadpool *tp = ctx->tp;
    const bool prof = ctx->profiling;
    double t_mark = prof ? time_now_s() : 0.0;
    int32_t n = 0, n_out = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        KITE_ASSERT(seqs[s].n_tok >= 1 && seqs[s].n_out >= 0 && seqs[s].n_out <= seqs[s].n_tok);
        KITE_ASSERT(seqs[s].block_table ? ctx->kv_block > 0 : n_seq == 1);
        n += seqs[s].n_tok;
        n_out += seqs[s].n_out;
    }
    KITE_ASSERT(n >= 1 && n <= ctx->n_batch);

    /* token embeddings */
    for (int32_t t = 0; t < n; t++) kern_get_row(&m->tok_embd, tokens[t], ctx->x + (size_t)t * E);
    PROF(PROF_EMBED);

    /* rotary (cos, sin) per token from its position, shared by all layers and heads */
    const int32_t half = hp->n_rot / 2;
    for (int32_t s = 0, t = 0; s < n_seq; s++) {
        for (int32_t i = 0; i < seqs[s].n_tok; i++, t++) {
            float *cs = ctx->rope_cs + (size_t)t * hp->n_rot;
            for (int32_t r = 0; r < half; r++) {
                const float theta = (float)(seqs[s].pos0 + i) * ctx->inv_freq[r];
                cs[2 * r] = cosf(theta);
                cs[2 * r + 1] = sinf(theta);
            }
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
        TAP(l, TAP_ATTN_IN, ctx->xb, E);
        PROF(PROF_ATTN_NORM);
        kern_matmul(tp, &L->wq, ctx->xb, n, ctx->q, Q, ctx->mm_scratch);
        PROF(PROF_Q_PROJ);
        kern_matmul(tp, &L->wk, ctx->xb, n, ctx->kb, KV, ctx->mm_scratch);
        PROF(PROF_K_PROJ);
        kern_matmul(tp, &L->wv, ctx->xb, n, ctx->vb, KV, ctx->mm_scratch);
        PROF(PROF_V_PROJ);
        for (int32_t t = 0; t < n; t++) {
            const float *cs = ctx->rope_cs + (size_t)t * hp->n_rot;
            for (int32_t h = 0; h < hp->n_head; h++)
                kern_rope(ctx->q + (size_t)t * Q + (size_t)h * HD, cs, hp->n_rot, hp->rope_type);
            for (int32_t h = 0; h < hp->n_head_kv; h++)
                kern_rope(ctx->kb + (size_t)t * KV + (size_t)h * HD, cs, hp->n_rot, hp->rope_type);
        }
        PROF(PROF_ROPE);
        for (int32_t s = 0, t = 0; s < n_seq; s++) {
            for (int32_t i = 0; i < seqs[s].n_tok; i++, t++) {
                const size_t row = kv_row(ctx, &seqs[s], seqs[s].pos0 + i);
                memcpy(k_cache + row * KV, ctx->kb + (size_t)t * KV, sizeof(float) * (size_t)KV);
                memcpy(v_cache + row * KV, ctx->vb + (size_t)t * KV, sizeof(float) * (size_t)KV);
            }
        }
        for (int32_t s = 0, t = 0; s < n_seq; t += seqs[s].n_tok, s++) {
            attn_args aa = {
                .q = ctx->q + (size_t)t * Q, .k_cache = k_cache, .v_cache = v_cache,
                .block_table = seqs[s].block_table, .block_size = ctx->kv_block,
                .out = ctx->att + (size_t)t * Q, .scratch = ctx->att_scratch, .n_tok = seqs[s].n_tok,
                .pos0 = seqs[s].pos0, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = HD,
                .n_ctx = ctx->n_ctx, .scale = 1.0f / sqrtf((float)HD), .phi = ctx->attn_phi,
                .path = seqs[s].attn_path,
            };
            kern_attention(tp, &aa);
        }
        PROF(PROF_ATTENTION);
        TAP(l, TAP_WO_IN, ctx->att, Q);
        kern_matmul(tp, &L->wo, ctx->att, n, ctx->xb, E, ctx->mm_scratch);
        PROF(PROF_O_PROJ);
        for (size_t i = 0; i < (size_t)n * E; i++) ctx->x[i] += ctx->xb[i];
        PROF(PROF_OTHER);

        /* feed-forward block */
        for (int32_t t = 0; t < n; t++)
            kern_rmsnorm(ctx->xb + (size_t)t * E, ctx->x + (size_t)t * E, L->ffn_norm, E, hp->rms_eps);
        TAP(l, TAP_FFN_IN, ctx->xb, E);
        PROF(PROF_FFN_NORM);
        kern_matmul(tp, &L->w_gate, ctx->xb, n, ctx->hb, F, ctx->mm_scratch);
        PROF(PROF_FFN_GATE);
        kern_matmul(tp, &L->w_up, ctx->xb, n, ctx->hb2, F, ctx->mm_scratch);
        PROF(PROF_FFN_UP);
        kern_swiglu(ctx->hb, ctx->hb2, (int64_t)n * F);
        TAP(l, TAP_DOWN_IN, ctx->hb, F);
        PROF(PROF_FFN_ACT);
        kern_matmul(tp, &L->w_down, ctx->hb, n, ctx->xb, E, ctx->mm_scratch);
        PROF(PROF_FFN_DOWN);
        for (size_t i = 0; i < (size_t)n * E; i++) ctx->x[i] += ctx->xb[i];
        PROF(PROF_OTHER);
    }

    /* final norm and output head, only for the rows wanted: each sequence's
     * last n_out tokens, packed into xb rows 0..n_out-1 */
    if (n_out == 0) return;
    int32_t k = 0;
    for (int32_t s = 0, t = 0; s < n_seq; t += seqs[s].n_tok, s++)
        for (int32_t i = seqs[s].n_tok - seqs[s].n_out; i < seqs[s].n_tok; i++, k++)
            kern_rmsnorm(ctx->xb + (size_t)k * E, ctx->x + (size_t)(t + i) * E, m->output_norm, E, hp->rms_eps);
    if (ctx->tap) ctx->tap(ctx->tap_user, hp->n_layer, TAP_OUTPUT_IN, ctx->xb, n_out, E);
    PROF(PROF_OUT_NORM);
    kern_matmul(tp, &m->output, ctx->xb, n_out, out_logits, hp->n_vocab, ctx->mm_scratch);
    PROF(PROF_OUTPUT);
}

void llama_forward(kite_ctx *ctx, const kite_token *tokens, int32_t n, int32_t first_out, float *out_logits) {
    const fwd_seq one = {.block_table = NULL, .pos0 = ctx->n_past, .n_tok = n, .n_out = n - first_out};
    llama_forward_batch(ctx, tokens, &one, 1, out_logits);
}
