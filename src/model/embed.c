/*
 * embed.c - kite_ctx_embed: pooled final hidden states (embeddings).
 *
 * DESIGN
 *   An input is evaluated like a prompt (kite_ctx_eval) from an empty KV
 *   cache, in chunks of at most n_batch tokens, every chunk on the path one
 *   eval of the whole input would take (context.h, n_path), but with no
 *   logit rows asked for: the forward pass then stops before the final norm
 *   and the classifier (llama.c, head), which at a 128k vocabulary is the
 *   largest matmul of a pass.  After each chunk the residual stream of its
 *   tokens (ctx->x) is normed here with the model's final norm (the same
 *   RMSNorm / LayerNorm the head applies) and pooled: summed in double for
 *   the mean, or kept for the last / first token.
 *
 *   Inputs of a batch run one after the other, each from position 0 of the
 *   same cache: an input's vector depends on its tokens only, so a batch
 *   equals the inputs one by one bit for bit.  Packing several inputs into
 *   one pass needs block tables: the serving engine does that (engine_req
 *   .embed), pooling with the same embed_pool_rows / embed_pool_end.
 *
 * MEMORY / THREADS
 *   The context's buffers; one n_embd array of doubles per call for the sum.
 *   One thread drives the context, as for kite_ctx_eval.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/forward.h"

kite_embed_params kite_embed_default_params(void) {
    return (kite_embed_params){.pooling = KITE_POOLING_MEAN, .normalize = true};
}

/* The final norm of one row (llama.c's head uses the same kernels). */
static void final_norm(const kite_model *m, float *out, const float *x) {
    if (m->hp.norm_type == NORM_LAYER)
        kern_layernorm(out, x, m->output_norm, m->output_norm_b, m->hp.n_embd, m->hp.rms_eps);
    else
        kern_rmsnorm(out, x, m->output_norm, m->hp.n_embd, m->hp.rms_eps);
}

void embed_pool_rows(const kite_model *m, const float *x, int32_t n_rows, int32_t pos0, int32_t n, int32_t pooling,
                     double *sum, float *out, float *scratch) {
    const int32_t E = m->hp.n_embd;
    for (int32_t t = 0; t < n_rows; t++) {
        const int32_t pos = pos0 + t;
        if (pooling == KITE_POOLING_MEAN) {
            final_norm(m, scratch, x + (size_t)t * E);
            for (int32_t i = 0; i < E; i++) sum[i] += scratch[i];
        } else if ((pooling == KITE_POOLING_CLS && pos == 0) || (pooling == KITE_POOLING_LAST && pos == n - 1)) {
            final_norm(m, out, x + (size_t)t * E);
        }
    }
}

static void l2_normalize(float *v, int32_t n) {
    double ss = 0.0;
    for (int32_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    if (ss <= 0.0) return;
    const double inv = 1.0 / sqrt(ss);
    for (int32_t i = 0; i < n; i++) v[i] = (float)(v[i] * inv);
}

void embed_pool_end(int32_t n_embd, int32_t n, int32_t pooling, bool normalize, const double *sum, float *out) {
    if (pooling == KITE_POOLING_MEAN)
        for (int32_t i = 0; i < n_embd; i++) out[i] = (float)(sum[i] / n);
    if (normalize) l2_normalize(out, n_embd);
}

/* Evaluates one input of n tokens from an empty cache and pools it into out. */
static int embed_one(kite_ctx *ctx, const kite_token *tokens, int32_t n, const kite_embed_params *p, double *sum,
                     float *out) {
    const int32_t E = ctx->model->hp.n_embd;
    kite_ctx_truncate(ctx, 0); /* to 0 always succeeds */
    const int32_t path = n > ATTN_SPLITKV_MAX_TOK ? ATTN_PATH_FLASH : ATTN_PATH_SPLITKV;
    if (p->pooling == KITE_POOLING_MEAN) memset(sum, 0, sizeof *sum * (size_t)E);
    for (int32_t start = 0; start < n;) {
        const int32_t len = n - start < ctx->n_batch ? n - start : ctx->n_batch;
        llama_forward(ctx, tokens + start, len, len /* no logits */, path, NULL);
        int rc = llama_forward_failed(ctx->model);
        if (rc) return rc;
        ctx->n_past += len;
        if (ctx->n_past - 1 > ctx->ring_hi) ctx->ring_hi = ctx->n_past - 1;
        /* xb is free after the pass: the scratch row */
        embed_pool_rows(ctx->model, ctx->x, len, start, n, p->pooling, sum, out, ctx->xb);
        start += len;
    }
    embed_pool_end(E, n, p->pooling, p->normalize, sum, out);
    return KITE_OK;
}

int kite_ctx_embed_batch(kite_ctx *ctx, const kite_token *tokens, const int32_t *n_tok, int32_t n_seq,
                         const kite_embed_params *params, float *out) {
    if (!ctx || !tokens || !n_tok || !out) return err_set(KITE_E_ARG, "kite_ctx_embed: ctx, tokens, n_tok and out are required");
    if (ctx->kv_block) return err_set(KITE_E_STATE, "kite_ctx_embed: this context is a paged pool (serving engine)");
    if (n_seq < 1) return err_set(KITE_E_ARG, "kite_ctx_embed: n_seq must be positive (got %d)", n_seq);
    const kite_embed_params p = params ? *params : kite_embed_default_params();
    if (p.pooling != KITE_POOLING_MEAN && p.pooling != KITE_POOLING_LAST && p.pooling != KITE_POOLING_CLS)
        return err_set(KITE_E_ARG, "kite_ctx_embed: unknown pooling %d", p.pooling);
    const int32_t n_vocab = ctx->model->hp.n_vocab, E = ctx->model->hp.n_embd;
    size_t off = 0;
    for (int32_t s = 0; s < n_seq; s++) { /* every input checked before any runs */
        if (n_tok[s] < 1) return err_set(KITE_E_ARG, "kite_ctx_embed: input %d is empty", s);
        if (n_tok[s] > ctx->n_ctx)
            return err_set(KITE_E_RANGE, "kite_ctx_embed: input %d has %d tokens, more than n_ctx %d", s, n_tok[s],
                           ctx->n_ctx);
        if (ctx->model->pos_embd.data && n_tok[s] > ctx->model->hp.n_ctx_train)
            return err_set(KITE_E_RANGE, "kite_ctx_embed: input %d has %d tokens, more than the model's %d positions",
                           s, n_tok[s], ctx->model->hp.n_ctx_train);
        for (int32_t i = 0; i < n_tok[s]; i++)
            if (tokens[off + (size_t)i] < 0 || tokens[off + (size_t)i] >= n_vocab)
                return err_set(KITE_E_RANGE, "token %d (input %d, index %d) is outside the vocabulary [0, %d)",
                               tokens[off + (size_t)i], s, i, n_vocab);
        off += (size_t)n_tok[s];
    }
    double *sum = p.pooling == KITE_POOLING_MEAN ? malloc(sizeof *sum * (size_t)E) : NULL;
    if (p.pooling == KITE_POOLING_MEAN && !sum) return err_set(KITE_E_NOMEM, "kite_ctx_embed: out of memory");
    int rc = KITE_OK;
    off = 0;
    for (int32_t s = 0; s < n_seq && rc == KITE_OK; s++) {
        float *v = out + (size_t)s * (size_t)E;
        rc = embed_one(ctx, tokens + off, n_tok[s], &p, sum, v);
        off += (size_t)n_tok[s];
    }
    kite_ctx_truncate(ctx, 0);
    free(sum);
    return rc;
}

int kite_ctx_embed(kite_ctx *ctx, const kite_token *tokens, int32_t n, const kite_embed_params *params, float *out) {
    return kite_ctx_embed_batch(ctx, tokens, &n, 1, params, out);
}
