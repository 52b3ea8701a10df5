/*
 * llama.c - the forward pass of every supported architecture (embedding,
 * RMSNorm or LayerNorm, RoPE or learned positions, grouped-query attention
 * with KV cache and optional sliding window, SwiGLU / GELU / mixture-of-
 * experts FFN, final norm, output head).  The graph is LLaMA's; the other
 * architectures are switches on the hyperparameters and on which optional
 * tensors the model has (model.h, arch.c):
 *   qwen2     q/k/v biases, NEOX rope;      qwen3(moe)  per-head q/k RMSNorm before rope;
 *   mistral   attention window (attn_args.window) on every layer, or on the local layers of
 *             an interleaved model (layer_weights.full_attn); their KV rows sit in rings;
 *   gpt2      LayerNorm with bias, learned position embeddings, fused QKV and
 *             output/FFN biases, GELU FFN without gate;
 *   phi3      fused QKV and gate/up (row views, loader.c), NEOX rope with
 *             LongRoPE factors and attn_factor (context.c, rope_table), window;
 *   gemma2    embeddings x sqrt(n_embd), RMSNorm after attention and FFN too
 *             (attn_post_norm, ffn_post_norm), GeGLU FFN, attention soft cap
 *             (attn_args.softcap, every attention path), final soft cap on the
 *             logits, window on the even layers;
 *   MoE       (Mixtral, qwen3moe) router + top-k experts, moe.c.
 * With none of them (a plain llama) the arithmetic is exactly the original
 * llama path: the extra steps are skipped, not run as no-ops.
 *
 * DESIGN
 *   llama_forward_batch is a short driver over blocks, each one screen:
 *   embed, rope_table, then per layer attn_block and ffn_block (ffn_swiglu,
 *   ffn_gelu or ffn_moe), whose outputs residual_add adds to the residual
 *   stream x, and head.  A block reads its input from the context's buffers
 *   and returns its branch output; splitting a layer over devices or
 *   offloading it is a change inside one block.
 *
 *   The same code is prefill (every linear layer is one matrix-matrix
 *   product over all tokens of the batch, attention is causal within each
 *   sequence), decode (one token) and the serving engine's mixed batches
 *   (one decode token per running sequence plus prompt chunks).  K and V of
 *   the batch are computed into kb/vb and stored (ctx_kv_store, kv_cache.h)
 *   in the cache rows of their positions, so attention reads the cache only.
 *   Per-token element-wise work is cheap and stays on the calling thread;
 *   matmuls and attention run on the pool, and the matmuls that share an
 *   input (q/k/v; gate/up, with SwiGLU as the epilogue) are one pool round
 *   trip each (kern_matmul_fused).  A sequence's result does not depend on
 *   the other sequences in the batch: matmul rows are independent and
 *   attention is per sequence.  Every buffer is the context's: nothing is
 *   allocated here.
 *
 * INSTRUMENTATION
 *   Kept out of the arithmetic, in fwd_pass: mark(op) charges the time since
 *   the previous mark to profile op `op` (kite_ctx_set_profiling), so the
 *   marks tile the whole pass; with profiling off each mark is one untaken
 *   branch and no clock is read.  Shared-input matmuls go through p->mm,
 *   chosen once per pass: kern_matmul_fused itself, or with profiling
 *   mm_timed, one call per item so that each op gets its own time (the
 *   results are bit-identical, kernels.h).  tap() hands a linear layer's
 *   input to the calibration hook (ctx_set_tap) at the TAP_* points.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "dist/dist.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/moe.h"
#include "model/offload.h"

typedef struct fwd_pass fwd_pass;

/* Matmuls of items[0..n_items) on the pass's input x (p->n rows); item i is
 * charged to profile op ops[i]; epilogue as in kern_matmul_fused. */
typedef void (*fwd_mm_fn)(fwd_pass *p, const kern_mm_item *items, const int *ops, int n_items, const float *x,
                          kern_rows_fn epilogue, void *epilogue_arg);

/* One forward pass: the batch and the instrumentation chosen for it. */
struct fwd_pass {
    kite_ctx *ctx;
    const kite_model *m;
    const model_hparams *hp;
    const fwd_seq *seqs;  /* [n_seq] */
    int32_t n_seq;
    int32_t n;            /* tokens of the batch (sum of n_tok) */
    int32_t n_out;        /* logit rows (sum of n_out) */
    fwd_mm_fn mm;         /* mm_fused, or mm_timed when profiling */
    bool prof;            /* ctx->profiling at the start of the pass */
    double t_mark;        /* time of the last mark (profiling only) */
    const layer_weights *L; /* the current layer's weights: m->layers[l], or its streamed slot (offload.h) */
};

/* ---- instrumentation ---------------------------------------------------- */

/* Charges the time since the last mark to op (enum ctx_prof_op). */
static inline void mark(fwd_pass *p, int op) {
    if (!p->prof) return;
    const double now = time_now_s();
    p->ctx->prof_s[op] += now - p->t_mark;
    p->t_mark = now;
}

/* Hands n_tok rows of x (width floats each) to the calibration tap. */
static inline void tap(const fwd_pass *p, int32_t layer, int point, const float *x, int32_t n_tok, int32_t width) {
    if (p->ctx->tap) p->ctx->tap(p->ctx->tap_user, layer, point, x, n_tok, width);
}

/* Not profiling: the fused call itself, one pool round trip. */
static void mm_fused(fwd_pass *p, const kern_mm_item *items, const int *ops, int n_items, const float *x,
                     kern_rows_fn epilogue, void *epilogue_arg) {
    (void)ops;
    kern_matmul_fused(p->ctx->tp, items, n_items, x, p->n, p->ctx->mm_scratch, epilogue, epilogue_arg);
}

/* Profiling: one call per item, each charged to its op; the epilogue then
 * runs once over all rows (as kern_matmul_fused does when it cannot fuse),
 * charged by the caller's next mark. */
static void mm_timed(fwd_pass *p, const kern_mm_item *items, const int *ops, int n_items, const float *x,
                     kern_rows_fn epilogue, void *epilogue_arg) {
    for (int i = 0; i < n_items; i++) {
        kern_matmul_fused(p->ctx->tp, &items[i], 1, x, p->n, p->ctx->mm_scratch, NULL, NULL);
        mark(p, ops[i]);
    }
    if (epilogue) epilogue(epilogue_arg, 0, items[0].w->ne[1]);
}

static const int qkv_ops[3] = {PROF_Q_PROJ, PROF_K_PROJ, PROF_V_PROJ};
static const int gate_up_ops[2] = {PROF_FFN_GATE, PROF_FFN_UP};

/* ---- element-wise helpers ------------------------------------------------ */

/* RMSNorm, or LayerNorm (bias may be NULL) for NORM_LAYER models. */
static inline void norm_row(const model_hparams *hp, float *out, const float *x, const float *gain, const float *bias) {
    if (hp->norm_type == NORM_LAYER)
        kern_layernorm(out, x, gain, bias, hp->n_embd, hp->rms_eps);
    else
        kern_rmsnorm(out, x, gain, hp->n_embd, hp->rms_eps);
}

/* out[t] = norm(x[t]) for the batch's n rows of width n_embd. */
static void norm_rows(const fwd_pass *p, float *out, const float *x, const float *gain, const float *bias) {
    const size_t E = (size_t)p->hp->n_embd;
    for (int32_t t = 0; t < p->n; t++) norm_row(p->hp, out + (size_t)t * E, x + (size_t)t * E, gain, bias);
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

/* ---- tensor parallelism (shard.c, docs/distributed.md) -------------------- */

/* Tensor split: y [n][n_embd] holds this rank's partial sum of a row-split
 * matmul (o or down); after the all-reduce every rank holds the full sum.
 * Charged to PROF_OTHER.  One rank: nothing. */
static void tp_reduce(fwd_pass *p, float *y) {
    if (p->m->tp_size <= 1) return;
    dist_allreduce_sum_f32(y, (size_t)p->n * (size_t)p->hp->n_embd);
    mark(p, PROF_OTHER);
}

/* What rank 0 broadcasts before each pass of a tensor-split model, so that
 * the other ranks (llama_follow) run the same pass: one sequence in the
 * context's own cache (the CLI refuses the rest under --split-mode). */
typedef struct tp_header {
    int32_t op; /* TP_OP_* */
    int32_t pos0, n_tok, attn_path;
} tp_header;

enum { TP_OP_QUIT = 0, TP_OP_PASS = 1 };

void llama_follow_quit(kite_ctx *ctx) {
    if (ctx->model->tp_size <= 1 || ctx->model->tp_rank != 0) return;
    tp_header h = {.op = TP_OP_QUIT};
    dist_bcast(&h, sizeof h, 0);
}

/* Rank 0: tells the others which pass to run, and its tokens. */
static void tp_lead(fwd_pass *p, const kite_token *tokens) {
    KITE_ASSERT(p->n_seq == 1 && !p->seqs[0].block_table && !p->ctx->skip_layers);
    tp_header h = {.op = TP_OP_PASS, .pos0 = p->seqs[0].pos0, .n_tok = p->n, .attn_path = p->seqs[0].attn_path};
    dist_bcast(&h, sizeof h, 0);
    dist_bcast((void *)(uintptr_t)tokens, sizeof *tokens * (size_t)p->n, 0);
}

/* ---- blocks -------------------------------------------------------------- */

/* x = token embeddings (+ learned position embeddings, gpt2). */
static void embed(fwd_pass *p, const kite_token *tokens) {
    kite_ctx *ctx = p->ctx;
    const kite_model *m = p->m;
    const int32_t E = p->hp->n_embd;
    for (int32_t t = 0; t < p->n; t++) kern_get_row(&m->tok_embd, tokens[t], ctx->x + (size_t)t * E);
    if (p->hp->embd_scale != 1.0f) /* gemma2: x sqrt(n_embd) */
        for (size_t i = 0; i < (size_t)p->n * (size_t)E; i++) ctx->x[i] *= p->hp->embd_scale;
    if (m->pos_embd.data) { /* x += position_embd[pos] */
        for (int32_t s = 0; s < p->n_seq; s++) KITE_ASSERT(p->seqs[s].pos0 + p->seqs[s].n_tok <= p->hp->n_ctx_train);
        for (int32_t s = 0, t = 0; s < p->n_seq; s++)
            for (int32_t i = 0; i < p->seqs[s].n_tok; i++, t++) {
                kern_get_row(&m->pos_embd, p->seqs[s].pos0 + i, ctx->xb);
                kern_add(ctx->x + (size_t)t * E, ctx->xb, E);
            }
    }
    mark(p, PROF_EMBED);
}

/* Rotary (cos, sin) per token from its position, shared by all layers and heads. */
static void rope_table(fwd_pass *p) {
    const int32_t n_rot = p->hp->n_rot, half = n_rot / 2;
    for (int32_t s = 0, t = 0; s < p->n_seq; s++) {
        for (int32_t i = 0; i < p->seqs[s].n_tok; i++, t++) {
            float *cs = p->ctx->rope_cs + (size_t)t * n_rot;
            for (int32_t r = 0; r < half; r++) {
                const float theta = (float)(p->seqs[s].pos0 + i) * p->ctx->inv_freq[r];
                cs[2 * r] = cosf(theta) * p->ctx->rope_mscale; /* x 1.0f is exact: no change without it */
                cs[2 * r + 1] = sinf(theta) * p->ctx->rope_mscale;
            }
        }
    }
    mark(p, PROF_OTHER);
}

/* q and k heads of the batch: per-head RMSNorm (qwen3), then rope (none
 * for learned positions, gpt2); both charged to rope. */
static void qk_rope(fwd_pass *p, const layer_weights *L) {
    kite_ctx *ctx = p->ctx;
    const model_hparams *hp = p->hp;
    const int32_t HD = hp->head_dim, Q = hp->n_head * HD, KV = hp->n_head_kv * HD;
    if (L->q_norm) {
        for (int32_t t = 0; t < p->n; t++) {
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
    if (hp->n_rot > 0) {
        for (int32_t t = 0; t < p->n; t++) {
            const float *cs = ctx->rope_cs + (size_t)t * hp->n_rot;
            kern_rope_heads(ctx->q + (size_t)t * Q, hp->n_head, HD, cs, hp->n_rot, hp->rope_type);
            kern_rope_heads(ctx->kb + (size_t)t * KV, hp->n_head_kv, HD, cs, hp->n_rot, hp->rope_type);
        }
    }
    mark(p, PROF_ROPE);
}

/* Stores every sequence's k/v rows in layer l's cache, then runs each
 * sequence's attention over its cached positions into att. */
static void attention(fwd_pass *p, int32_t l) {
    kite_ctx *ctx = p->ctx;
    const model_hparams *hp = p->hp;
    const int32_t HD = hp->head_dim, Q = hp->n_head * HD, KV = hp->n_head_kv * HD;
    const size_t layer_off = ctx_kv_layer_offset(ctx, l); /* bytes */
    const int32_t window = p->m->layers[l].full_attn ? 0 : hp->sliding_window;
    for (int32_t s = 0, t = 0; s < p->n_seq; t += p->seqs[s].n_tok, s++)
        ctx_kv_store(ctx, l, p->seqs[s].block_table, p->seqs[s].pos0, p->seqs[s].n_tok, ctx->kb + (size_t)t * KV,
                     ctx->vb + (size_t)t * KV);
    for (int32_t s = 0, t = 0; s < p->n_seq; t += p->seqs[s].n_tok, s++) {
        const fwd_seq *sq = &p->seqs[s];
        int32_t bs; /* the sequence's block table, or a windowed layer's ring (kv_cache.h) */
        const int32_t *table = ctx_kv_layer_table(ctx, l, sq->block_table, &bs);
        attn_args aa = {
            .q = ctx->q + (size_t)t * Q, .k_cache = ctx->k_cache + layer_off, .v_cache = ctx->v_cache + layer_off,
            .block_table = table, .block_size = bs,
            .out = ctx->att + (size_t)t * Q, .scratch = ctx->att_scratch, .n_tok = sq->n_tok,
            .pos0 = sq->pos0, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = HD,
            .n_ctx = ctx->n_ctx, .scale = hp->attn_scale, .softcap = hp->attn_softcap, .phi = ctx->attn_phi,
            .phi_head = ctx->attn_phi_head ? ctx->attn_phi_head + (size_t)l * hp->n_head : NULL,
            .phi_mode = ctx->attn_phi_mode, .stats = ctx->attn_stats,
            .chunk_max = ctx->attn_tap ? ctx->attn_chunk_max + (size_t)t * hp->n_head * 2 : NULL,
            /* the calibration hook reads split-KV's chunk statistics, so its passes run split-KV */
            .path = ctx->attn_tap ? ATTN_PATH_SPLITKV : sq->attn_path, .window = window, .kv_type = ctx->kv_type,
        };
        kern_attention(ctx->tp, &aa);
    }
    mark(p, PROF_ATTENTION);
    if (ctx->attn_tap) ctx->attn_tap(ctx->attn_tap_user, l, ctx->attn_chunk_max, p->n, hp->n_head);
}

/* Attention block of layer l: norm, q/k/v, rope, attention, wo.  Returns
 * the branch output, xb [n][n_embd]. */
static const float *attn_block(fwd_pass *p, int32_t l) {
    kite_ctx *ctx = p->ctx;
    const model_hparams *hp = p->hp;
    const layer_weights *L = p->L;
    const int32_t n = p->n, E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
    norm_rows(p, ctx->xb, ctx->x, L->attn_norm, L->attn_norm_b);
    tap(p, l, TAP_ATTN_IN, ctx->xb, n, E);
    mark(p, PROF_ATTN_NORM);
    const kern_mm_item qkv[3] = {{&L->wq, ctx->q, Q}, {&L->wk, ctx->kb, KV}, {&L->wv, ctx->vb, KV}};
    p->mm(p, qkv, qkv_ops, 3, ctx->xb, NULL, NULL);
    add_bias(ctx->q, L->bq, n, Q);
    add_bias(ctx->kb, L->bk, n, KV);
    add_bias(ctx->vb, L->bv, n, KV);
    mark(p, PROF_V_PROJ);
    qk_rope(p, L);
    attention(p, l);
    tap(p, l, TAP_WO_IN, ctx->att, n, Q);
    kern_matmul(ctx->tp, &L->wo, ctx->att, n, ctx->xb, E, ctx->mm_scratch);
    mark(p, PROF_O_PROJ);
    tp_reduce(p, ctx->xb);
    add_bias(ctx->xb, L->bo, n, E);
    if (L->attn_post_norm) { /* gemma2: the branch is normed before the residual add */
        norm_rows(p, ctx->xb, ctx->xb, L->attn_post_norm, NULL);
        mark(p, PROF_ATTN_NORM);
    }
    return ctx->xb;
}

/* A gated FFN on xb: gate and up in one pool round trip with the activation
 * part (swiglu_part or geglu_part) on each thread's own rows, then down.
 * Returns xb. */
static const float *ffn_gated(fwd_pass *p, const layer_weights *L, int32_t l, void (*part)(void *, int64_t, int64_t)) {
    kite_ctx *ctx = p->ctx;
    const int32_t n = p->n, E = p->hp->n_embd, F = p->hp->n_ff;
    swiglu_rows sw = {.gate = ctx->hb, .up = ctx->hb2, .n_tok = n, .width = F};
    const kern_mm_item gate_up[2] = {{&L->w_gate, ctx->hb, F}, {&L->w_up, ctx->hb2, F}};
    p->mm(p, gate_up, gate_up_ops, 2, ctx->xb, part, &sw);
    tap(p, l, TAP_DOWN_IN, ctx->hb, n, F);
    mark(p, PROF_FFN_ACT);
    kern_matmul(ctx->tp, &L->w_down, ctx->hb, n, ctx->xb, E, ctx->mm_scratch);
    mark(p, PROF_FFN_DOWN);
    tp_reduce(p, ctx->xb);
    return ctx->xb;
}

/* SwiGLU FFN on xb.  Returns xb. */
static const float *ffn_swiglu(fwd_pass *p, const layer_weights *L, int32_t l) {
    return ffn_gated(p, L, l, swiglu_part);
}

/* GELU(gate) * up over columns [r0, r1) of every token's gate/up rows
 * (gemma2's GeGLU; tanh GELU, as ggml's and Gemma's gelu_pytorch_tanh). */
static void geglu_part(void *arg, int64_t r0, int64_t r1) {
    const swiglu_rows *s = arg;
    for (int32_t t = 0; t < s->n_tok; t++) {
        float *g = s->gate + (size_t)t * s->width + r0;
        const float *u = s->up + (size_t)t * s->width + r0;
        kern_gelu(g, r1 - r0);
        for (int64_t i = 0; i < r1 - r0; i++) g[i] *= u[i];
    }
}

/* GeGLU FFN on xb (gemma2): as ffn_swiglu with GELU in place of SiLU.
 * Returns xb. */
static const float *ffn_geglu(fwd_pass *p, const layer_weights *L, int32_t l) {
    return ffn_gated(p, L, l, geglu_part);
}

/* GELU FFN on xb (gpt2): up (+ bias), GELU, down (+ bias).  Returns xb. */
static const float *ffn_gelu(fwd_pass *p, const layer_weights *L, int32_t l) {
    kite_ctx *ctx = p->ctx;
    const int32_t n = p->n, E = p->hp->n_embd, F = p->hp->n_ff;
    kern_matmul(ctx->tp, &L->w_up, ctx->xb, n, ctx->hb, F, ctx->mm_scratch);
    add_bias(ctx->hb, L->b_up, n, F);
    mark(p, PROF_FFN_UP);
    kern_gelu(ctx->hb, (int64_t)n * F);
    tap(p, l, TAP_DOWN_IN, ctx->hb, n, F);
    mark(p, PROF_FFN_ACT);
    kern_matmul(ctx->tp, &L->w_down, ctx->hb, n, ctx->xb, E, ctx->mm_scratch);
    mark(p, PROF_FFN_DOWN);
    tp_reduce(p, ctx->xb);
    add_bias(ctx->xb, L->b_down, n, E);
    return ctx->xb;
}

/* Mixture of experts on xb (moe.c): the router is charged to ffn_gate, the
 * experts to ffn_down; no TAP_DOWN_IN (each expert has its own input).
 * Returns moe_acc. */
static const float *ffn_moe(fwd_pass *p, const layer_weights *L, int32_t l) {
    kite_ctx *ctx = p->ctx;
    moe_route(ctx, L, ctx->xb, p->n);
    mark(p, PROF_FFN_GATE);
    moe_experts(ctx, L, l, ctx->xb, p->n, ctx->moe_acc);
    mark(p, PROF_FFN_DOWN);
    return ctx->moe_acc;
}

/* Feed-forward block of layer l: norm, then the model's FFN.  Returns the
 * branch output [n][n_embd]. */
static const float *ffn_block(fwd_pass *p, int32_t l) {
    kite_ctx *ctx = p->ctx;
    const layer_weights *L = p->L;
    norm_rows(p, ctx->xb, ctx->x, L->ffn_norm, L->ffn_norm_b);
    tap(p, l, TAP_FFN_IN, ctx->xb, p->n, p->hp->n_embd);
    mark(p, PROF_FFN_NORM);
    const float *y = p->hp->n_expert > 0            ? ffn_moe(p, L, l)
                     : p->hp->ffn_type == FFN_GELU  ? ffn_gelu(p, L, l)
                     : p->hp->ffn_type == FFN_GEGLU ? ffn_geglu(p, L, l)
                                                    : ffn_swiglu(p, L, l);
    if (L->ffn_post_norm) { /* gemma2: the branch is normed before the residual add (y is a context buffer) */
        norm_rows(p, (float *)y, y, L->ffn_post_norm, NULL);
        mark(p, PROF_FFN_NORM);
    }
    return y;
}

/* x += y over the batch's n rows of width n_embd. */
static void residual_add(fwd_pass *p, const float *y) {
    float *x = p->ctx->x;
    const size_t n = (size_t)p->n * (size_t)p->hp->n_embd;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
    mark(p, PROF_OTHER);
}

/* Final norm and output head, only for the rows wanted: each sequence's
 * last n_out tokens, packed into xb rows 0..n_out-1; logits to out_logits. */
static void head(fwd_pass *p, float *out_logits) {
    kite_ctx *ctx = p->ctx;
    const kite_model *m = p->m;
    const int32_t E = p->hp->n_embd;
    if (p->n_out == 0) return;
    int32_t k = 0;
    for (int32_t s = 0, t = 0; s < p->n_seq; t += p->seqs[s].n_tok, s++)
        for (int32_t i = p->seqs[s].n_tok - p->seqs[s].n_out; i < p->seqs[s].n_tok; i++, k++)
            norm_row(p->hp, ctx->xb + (size_t)k * E, ctx->x + (size_t)(t + i) * E, m->output_norm, m->output_norm_b);
    tap(p, p->hp->n_layer, TAP_OUTPUT_IN, ctx->xb, p->n_out, E);
    mark(p, PROF_OUT_NORM);
    kern_matmul(ctx->tp, &m->output, ctx->xb, p->n_out, out_logits, p->hp->n_vocab, ctx->mm_scratch);
    const float cap = p->hp->final_softcap;
    if (cap > 0.0f) /* gemma2: z = cap * tanh(z / cap), as llama.cpp's scale, tanh, scale */
        for (size_t i = 0; i < (size_t)p->n_out * (size_t)p->hp->n_vocab; i++)
            out_logits[i] = tanhf(out_logits[i] * (1.0f / cap)) * cap;
    mark(p, PROF_OUTPUT);
}

/* ---- the pass -------------------------------------------------------------- */

void llama_forward_batch(kite_ctx *ctx, const kite_token *tokens, const fwd_seq *seqs, int32_t n_seq,
                         float *out_logits) {
    fwd_pass p = {.ctx = ctx, .m = ctx->model, .hp = &ctx->model->hp, .seqs = seqs, .n_seq = n_seq,
                  .prof = ctx->profiling, .mm = ctx->profiling ? mm_timed : mm_fused};
    p.t_mark = p.prof ? time_now_s() : 0.0;
    for (int32_t s = 0; s < n_seq; s++) {
        KITE_ASSERT(seqs[s].n_tok >= 1 && seqs[s].n_out >= 0 && seqs[s].n_out <= seqs[s].n_tok);
        KITE_ASSERT(seqs[s].block_table ? ctx->kv_block > 0 : n_seq == 1);
        p.n += seqs[s].n_tok;
        p.n_out += seqs[s].n_out;
    }
    KITE_ASSERT(p.n >= 1 && p.n <= ctx->n_batch);
    if (p.m->tp_size > 1 && p.m->tp_rank == 0) tp_lead(&p, tokens);

    embed(&p, tokens);
    const size_t stream_bytes = (size_t)p.n * (size_t)p.hp->n_embd * sizeof(float);
    if (ctx->lr_x_in || ctx->lr_x_out) KITE_ASSERT(p.n == ctx->lr_rows);
    if (ctx->lr_x_in) memcpy(ctx->x, ctx->lr_x_in, stream_bytes); /* calibration: resume at layer lr_from */
    rope_table(&p);
    offload *ol = p.m->offload;
    if (ol) offload_pass_begin(ol);
    for (int32_t l = 0; l < p.hp->n_layer; l++) {
        /* a streamed layer is taken even when skipped: the I/O thread reads them in order */
        p.L = ol ? offload_layer(ol, l) : &p.m->layers[l];
        if (!p.L) break; /* read error: the caller reports offload_error (llama_forward_failed) */
        /* skipped: a self-speculative draft's layers, or those outside a calibration range (the residual passes
         * through) */
        if (!(ctx->skip_layers && ctx->skip_layers[l]) && l >= ctx->lr_from && l < ctx->lr_to) {
            residual_add(&p, attn_block(&p, l));
            residual_add(&p, ffn_block(&p, l));
        }
        if (ctx->lr_x_out && l == ctx->lr_to - 1) memcpy(ctx->lr_x_out, ctx->x, stream_bytes);
        if (ol) offload_done(ol, l);
    }
    if (ol) offload_pass_end(ol);
    head(&p, out_logits);
}

void llama_forward(kite_ctx *ctx, const kite_token *tokens, int32_t n, int32_t first_out, int32_t attn_path,
                   float *out_logits) {
    const fwd_seq one = {.block_table = NULL, .pos0 = ctx->n_past, .n_tok = n, .n_out = n - first_out,
                         .attn_path = attn_path};
    llama_forward_batch(ctx, tokens, &one, 1, out_logits);
}

int llama_forward_failed(const kite_model *m) {
    const char *e = m->offload ? offload_error(m->offload) : NULL;
    return e ? err_set(KITE_E_IO, "%s", e) : KITE_OK;
}

int llama_follow(kite_ctx *ctx) {
    const kite_model *m = ctx->model;
    if (m->tp_size <= 1 || m->tp_rank == 0) return KITE_OK;
    for (;;) {
        tp_header h;
        dist_bcast_idle(&h, sizeof h, 0); /* rank 0 samples, prints, or waits between passes: not watched */
        if (h.op == TP_OP_QUIT) return KITE_OK;
        if (h.op != TP_OP_PASS || h.n_tok < 1 || h.n_tok > ctx->n_batch || h.pos0 < 0 || h.pos0 + h.n_tok > ctx->n_ctx)
            return err_set(KITE_E_STATE, "rank %d: rank 0 asked for a pass of %d tokens at position %d (op %d), "
                           "which this rank's context (n_ctx %d, n_batch %d) cannot run", m->tp_rank, h.n_tok,
                           h.pos0, h.op, ctx->n_ctx, ctx->n_batch);
        /* rank 0 sends at most n_batch tokens; the context's token scratch holds them */
        dist_bcast(ctx->follow_tok, sizeof *ctx->follow_tok * (size_t)h.n_tok, 0);
        /* only rank 0 computes logits (the classifier is replicated, not split) */
        const fwd_seq one = {.block_table = NULL, .pos0 = h.pos0, .n_tok = h.n_tok, .n_out = 0,
                             .attn_path = h.attn_path};
        llama_forward_batch(ctx, ctx->follow_tok, &one, 1, NULL);
    }
}
