/*
 * llama.c - the forward pass of every supported architecture (embedding,
 * RMSNorm or LayerNorm, RoPE or learned positions, grouped-query attention
 * with KV cache and optional sliding window, SwiGLU / GELU / mixture-of-
 * experts FFN, final norm, output head).  The graph is LLaMA's; the other
 * architectures are switches on the hyperparameters and on which optional
 * tensors the model has (model.h, arch.c):
 *   qwen2     q/k/v biases, NEOX rope;      qwen3(moe)  per-head q/k RMSNorm before rope;
 *   mistral   attention window (attn_args.window); the cache keeps every position;
 *   gpt2      LayerNorm with bias, learned position embeddings, fused QKV and
 *             output/FFN biases, GELU FFN without gate;
 *   MoE       (Mixtral, qwen3moe) router + top-k experts, moe.c.
 * With none of them (a plain llama) the arithmetic is exactly the original
 * llama path: the extra steps are skipped, not run as no-ops.
 *
 * Reads top to bottom for a batch of tokens from one or more sequences: the
 * same code is prefill (every linear layer is one matrix-matrix product over
 * all tokens of the batch, attention is causal within each sequence), decode
 * (one token) and the serving engine's mixed batches (one decode token per
 * running sequence plus prompt chunks).  K and V of the batch are computed
 * into kb/vb and stored (ctx_kv_store: converted to the cache's kv_type,
 * a copy for f32) in the cache rows of their positions (contiguous for
 * kite_ctx_eval's single sequence, through a block table for the engine), so
 * attention reads the cache only.  Per-token element-wise work is cheap and
 * stays on the calling thread; matmuls and attention run on the pool, and
 * the matmuls that share an input (q/k/v; gate/up, with SwiGLU as the
 * epilogue) are one pool round trip each (kern_matmul_fused).
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
#include "model/moe.h"

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

/* RMSNorm, or LayerNorm (bias may be NULL) for NORM_LAYER models. */
static inline void norm_row(const model_hparams *hp, float *out, const float *x, const float *gain, const float *bias) {
    if (hp->norm_type == NORM_LAYER)
        kern_layernorm(out, x, gain, bias, hp->n_embd, hp->rms_eps);
    else
        kern_rmsnorm(out, x, gain, hp->n_embd, hp->rms_eps);
}

/* Adds a bias vector (width w) to each of n rows (no-op for NULL). */
static void add_bias(float *y, const float *b, int32_t n, int32_t w) {
    if (!b) return;
    for (int32_t t = 0; t < n; t++) kern_add(y + (size_t)t * w, b, w);
}

/* SwiGLU over columns [r0, r1) of every token's gate/up rows: the epilogue
 * of the fused gate/up matmul, run by each thread on the rows it computed. */
typedef struct swiglu_rows {
    float *gate;        /* [n_tok][width], becomes silu(gate) * up */
    const float *up;    /* [n_tok][width] */
    int32_t n_tok, width;
} swiglu_rows;

static void swiglu_part(void *arg, int64_t r0, int64_t r1) {
    const swiglu_rows *s = arg;
    for (int32_t t = 0; t < s->n_tok; t++)
        kern_swiglu(s->gate + (size_t)t * s->width + r0, s->up + (size_t)t * s->width + r0, r1 - r0);
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
    if (m->pos_embd.data) { /* learned positions (gpt2): x += position_embd[pos] */
        for (int32_t s = 0; s < n_seq; s++) KITE_ASSERT(seqs[s].pos0 + seqs[s].n_tok <= hp->n_ctx_train);
        for (int32_t s = 0, t = 0; s < n_seq; s++)
            for (int32_t i = 0; i < seqs[s].n_tok; i++, t++) {
                kern_get_row(&m->pos_embd, seqs[s].pos0 + i, ctx->xb);
                kern_add(ctx->x + (size_t)t * E, ctx->xb, E);
            }
    }
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
        const size_t layer_off = (size_t)l * (size_t)ctx->n_ctx * ctx->kv_row_bytes; /* bytes */

        /* attention block */
        for (int32_t t = 0; t < n; t++)
            norm_row(hp, ctx->xb + (size_t)t * E, ctx->x + (size_t)t * E, L->attn_norm, L->attn_norm_b);
        TAP(l, TAP_ATTN_IN, ctx->xb, E);
        PROF(PROF_ATTN_NORM);
        /* q, k and v in one pool round trip; when profiling, one call each so
         * that every op gets its own time (the results are bit-identical) */
        const kern_mm_item qkv[3] = {{&L->wq, ctx->q, Q}, {&L->wk, ctx->kb, KV}, {&L->wv, ctx->vb, KV}};
        if (prof) {
            kern_matmul_fused(tp, &qkv[0], 1, ctx->xb, n, ctx->mm_scratch, NULL, NULL);
            PROF(PROF_Q_PROJ);
            kern_matmul_fused(tp, &qkv[1], 1, ctx->xb, n, ctx->mm_scratch, NULL, NULL);
            PROF(PROF_K_PROJ);
            kern_matmul_fused(tp, &qkv[2], 1, ctx->xb, n, ctx->mm_scratch, NULL, NULL);
        } else {
            kern_matmul_fused(tp, qkv, 3, ctx->xb, n, ctx->mm_scratch, NULL, NULL);
        }
        add_bias(ctx->q, L->bq, n, Q);
        add_bias(ctx->kb, L->bk, n, KV);
        add_bias(ctx->vb, L->bv, n, KV);
        PROF(PROF_V_PROJ);
        if (L->q_norm) { /* qwen3: RMSNorm of every q and k head before rope (charged to rope) */
            for (int32_t t = 0; t < n; t++) {
                for (int32_t h = 0; h < hp->n_head; h++) {
                    float *qh = ctx->q + (size_t)t * Q + (size_t)h * HD;
                    kern_rmsnorm(qh, qh, L->q_norm, HD, hp->rms_eps);
                }
                for (int32_t h = 0; h < hp->n_head_kv; h++) {
                    float *kh = ctx->kb + (size_t)t * KV + (size_t)h * HD;
                    kern_rmsnorm(kh, kh, L->k_norm, HD, hp->rms_eps);
                }
            }
        }
        if (hp->n_rot > 0) { /* gpt2 has learned positions instead */
            for (int32_t t = 0; t < n; t++) {
                const float *cs = ctx->rope_cs + (size_t)t * hp->n_rot;
                kern_rope_heads(ctx->q + (size_t)t * Q, hp->n_head, HD, cs, hp->n_rot, hp->rope_type);
                kern_rope_heads(ctx->kb + (size_t)t * KV, hp->n_head_kv, HD, cs, hp->n_rot, hp->rope_type);
            }
        }
        PROF(PROF_ROPE);
        for (int32_t s = 0, t = 0; s < n_seq; s++) {
            for (int32_t i = 0; i < seqs[s].n_tok; i++, t++) {
                const size_t row = kv_row(ctx, &seqs[s], seqs[s].pos0 + i);
                ctx_kv_store(ctx, l, row, ctx->kb + (size_t)t * KV, ctx->vb + (size_t)t * KV);
            }
        }
        for (int32_t s = 0, t = 0; s < n_seq; t += seqs[s].n_tok, s++) {
            attn_args aa = {
                .q = ctx->q + (size_t)t * Q, .k_cache = ctx->k_cache + layer_off, .v_cache = ctx->v_cache + layer_off,
                .block_table = seqs[s].block_table, .block_size = ctx->kv_block,
                .out = ctx->att + (size_t)t * Q, .scratch = ctx->att_scratch, .n_tok = seqs[s].n_tok,
                .pos0 = seqs[s].pos0, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = HD,
                .n_ctx = ctx->n_ctx, .scale = 1.0f / sqrtf((float)HD), .phi = ctx->attn_phi,
                .path = seqs[s].attn_path, .window = hp->sliding_window, .kv_type = ctx->kv_type,
            };
            kern_attention(tp, &aa);
        }
        PROF(PROF_ATTENTION);
        TAP(l, TAP_WO_IN, ctx->att, Q);
        kern_matmul(tp, &L->wo, ctx->att, n, ctx->xb, E, ctx->mm_scratch);
        add_bias(ctx->xb, L->bo, n, E);
        PROF(PROF_O_PROJ);
        for (size_t i = 0; i < (size_t)n * E; i++) ctx->x[i] += ctx->xb[i];
        PROF(PROF_OTHER);

        /* feed-forward block */
        for (int32_t t = 0; t < n; t++)
            norm_row(hp, ctx->xb + (size_t)t * E, ctx->x + (size_t)t * E, L->ffn_norm, L->ffn_norm_b);
        TAP(l, TAP_FFN_IN, ctx->xb, E);
        PROF(PROF_FFN_NORM);
        float *ffn_out = ctx->xb;
        if (hp->n_expert > 0) {
            /* mixture of experts: the router is charged to ffn_gate, the experts
             * to ffn_down; no TAP_DOWN_IN (each expert has its own input) */
            moe_route(ctx, L, ctx->xb, n);
            PROF(PROF_FFN_GATE);
            moe_experts(ctx, L, ctx->xb, n, ctx->moe_acc);
            ffn_out = ctx->moe_acc;
            PROF(PROF_FFN_DOWN);
        } else if (hp->ffn_type == FFN_GELU) {
            kern_matmul(tp, &L->w_up, ctx->xb, n, ctx->hb, F, ctx->mm_scratch);
            add_bias(ctx->hb, L->b_up, n, F);
            PROF(PROF_FFN_UP);
            kern_gelu(ctx->hb, (int64_t)n * F);
            TAP(l, TAP_DOWN_IN, ctx->hb, F);
            PROF(PROF_FFN_ACT);
            kern_matmul(tp, &L->w_down, ctx->hb, n, ctx->xb, E, ctx->mm_scratch);
            add_bias(ctx->xb, L->b_down, n, E);
            PROF(PROF_FFN_DOWN);
        } else {
            /* gate and up in one pool round trip, SwiGLU on each thread's own
             * rows; when profiling, three separate steps (bit-identical) */
            swiglu_rows sw = {.gate = ctx->hb, .up = ctx->hb2, .n_tok = n, .width = F};
            const kern_mm_item gate_up[2] = {{&L->w_gate, ctx->hb, F}, {&L->w_up, ctx->hb2, F}};
            if (prof) {
                kern_matmul_fused(tp, &gate_up[0], 1, ctx->xb, n, ctx->mm_scratch, NULL, NULL);
                PROF(PROF_FFN_GATE);
                kern_matmul_fused(tp, &gate_up[1], 1, ctx->xb, n, ctx->mm_scratch, NULL, NULL);
                PROF(PROF_FFN_UP);
                swiglu_part(&sw, 0, F);
            } else {
                kern_matmul_fused(tp, gate_up, 2, ctx->xb, n, ctx->mm_scratch, swiglu_part, &sw);
            }
            TAP(l, TAP_DOWN_IN, ctx->hb, F);
            PROF(PROF_FFN_ACT);
            kern_matmul(tp, &L->w_down, ctx->hb, n, ctx->xb, E, ctx->mm_scratch);
            PROF(PROF_FFN_DOWN);
        }
        for (size_t i = 0; i < (size_t)n * E; i++) ctx->x[i] += ffn_out[i];
        PROF(PROF_OTHER);
    }

    /* final norm and output head, only for the rows wanted: each sequence's
     * last n_out tokens, packed into xb rows 0..n_out-1 */
    if (n_out == 0) return;
    int32_t k = 0;
    for (int32_t s = 0, t = 0; s < n_seq; t += seqs[s].n_tok, s++)
        for (int32_t i = seqs[s].n_tok - seqs[s].n_out; i < seqs[s].n_tok; i++, k++)
            norm_row(hp, ctx->xb + (size_t)k * E, ctx->x + (size_t)(t + i) * E, m->output_norm, m->output_norm_b);
    if (ctx->tap) ctx->tap(ctx->tap_user, hp->n_layer, TAP_OUTPUT_IN, ctx->xb, n_out, E);
    PROF(PROF_OUT_NORM);
    kern_matmul(tp, &m->output, ctx->xb, n_out, out_logits, hp->n_vocab, ctx->mm_scratch);
    PROF(PROF_OUTPUT);
}

void llama_forward(kite_ctx *ctx, const kite_token *tokens, int32_t n, int32_t first_out, float *out_logits) {
    const fwd_seq one = {.block_table = NULL, .pos0 = ctx->n_past, .n_tok = n, .n_out = n - first_out};
    llama_forward_batch(ctx, tokens, &one, 1, out_logits);
}
