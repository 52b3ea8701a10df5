/* context.c - kite_ctx: creation, evaluation in batches (over the forward
 * pass, forward.h), logits access, skip layers, profiling.  The KV cache
 * rows are kv_cache.c's. */
#include "model/context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "tensor/dtype.h"

/* Largest batch of one forward pass; longer prompts run in chunks.  Bounds the
 * activation buffers (n_batch * n_ff floats). */
#define KITE_MAX_BATCH 512
/* Sanity limit on n_ctx; the KV cache size is checked separately. */
#define KITE_MAX_CTX (1 << 20)

kite_ctx_params kite_ctx_default_params(void) {
    kite_ctx_params p = {.n_ctx = 0, .n_threads = 0, .kv_type = KITE_KV_F32};
    return p;
}

void kite_ctx_free(kite_ctx *ctx) {
    if (!ctx) return;
    llama_follow_quit(ctx); /* tensor split, rank 0: the other ranks stop following */
    tp_free(ctx->tp);
    free(ctx->k_cache);
    free(ctx->v_cache);
    free(ctx->kv_row0);
    free(ctx->ring_table);
    free(ctx->x);
    free(ctx->xb);
    free(ctx->q);
    free(ctx->kb);
    free(ctx->vb);
    free(ctx->att);
    free(ctx->hb);
    free(ctx->hb2);
    free(ctx->rope_cs);
    free(ctx->inv_freq);
    free(ctx->mm_scratch);
    free(ctx->att_scratch);
    free(ctx->logits);
    free(ctx->skip_layers);
    free(ctx->attn_phi_own);
    free(ctx->attn_chunk_max);
    free(ctx->moe_logits);
    free(ctx->moe_sel);
    free(ctx->moe_w);
    free(ctx->moe_x);
    free(ctx->moe_acc);
    free(ctx->moe_tok);
    free(ctx->moe_tw);
    free(ctx->follow_tok);
    free(ctx);
}

static float *alloc_floats(size_t n) {
    /* 64-byte aligned for vector loads; rounded up as aligned_alloc requires */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static uint8_t *alloc_bytes(size_t n) {
    return aligned_alloc(64, n ? (n + 63) & ~(size_t)63 : 64);
}

/* Rows of a windowed layer's ring in a contiguous context of n_ctx positions
 * and batches of n_batch, or 0 for none.  A batch stores all its K/V rows
 * before its attention runs, and its first query still reads window - 1
 * positions before it, so a ring holds window + n_batch - 1 positions; it
 * saves memory only when that is less than n_ctx. */
static int32_t ring_rows(const kite_model *model, int32_t n_ctx, int32_t n_batch, int32_t kv_block, bool swa_full) {
    const model_hparams *hp = &model->hp;
    if (kv_block > 0 || swa_full || hp->sliding_window <= 0 || hp->n_swa_layers == 0) return 0;
    const int64_t r = (int64_t)hp->sliding_window + n_batch - 1;
    return r < n_ctx ? (int32_t)r : 0;
}

/* Allocates a context of n_ctx cache positions and batches of n_batch tokens
 * (kv_block > 0: addressed through block tables) with a KV cache of kv_type
 * (windowed layers in rings unless swa_full). */
static int ctx_create(kite_model *model, int32_t n_ctx, int32_t n_batch, int32_t kv_block, int32_t n_threads,
                      int32_t kv_type, bool swa_full, kite_ctx **out) {
    const model_hparams *hp = &model->hp;
    int rc = ctx_kv_type_check(model, kv_type);
    if (rc != KITE_OK) return rc;
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int32_t)(n > 1024 ? 1024 : n) : 1;
    }
    const size_t E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim,
                 KV = (size_t)hp->n_head_kv * hp->head_dim, F = (size_t)hp->n_ff;
    const size_t FE = (size_t)hp->n_ff_exp, NE = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used;
    const size_t F_max = F > FE ? F : FE; /* hb/hb2 hold a dense or an expert FFN's hidden rows */
    if (model->pos_embd.data && kv_block == 0 && n_ctx > hp->n_ctx_train) /* pools: per-sequence limit, llama.c */
        return err_set(KITE_E_ARG, "n_ctx %d exceeds the %d learned positions of %s", n_ctx, hp->n_ctx_train,
                       model->path);
    const size_t kv_floats = (size_t)hp->n_layer * (size_t)n_ctx * KV;
    if (kv_floats / (size_t)n_ctx / KV != (size_t)hp->n_layer || kv_floats > ((size_t)1 << 40))
        return err_set(KITE_E_NOMEM, "KV cache for n_ctx %d is too large", n_ctx);
    const size_t kv_row_bytes = dtype_row_size((uint32_t)kv_type, (int64_t)KV); /* KV % 32 == 0 when blocked */
    const int32_t ring = ring_rows(model, n_ctx, n_batch, kv_block, swa_full);
    size_t kv_rows = 0; /* per cache, all layers */
    for (int32_t l = 0; l < hp->n_layer; l++)
        kv_rows += ring > 0 && !model->layers[l].full_attn ? (size_t)ring : (size_t)n_ctx;
    const size_t kv_bytes = kv_rows * kv_row_bytes; /* <= 4 * kv_floats */

    kite_ctx *c = calloc(1, sizeof *c);
    if (!c) return err_set(KITE_E_NOMEM, "out of memory");
    c->model = model;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->lr_to = INT32_MAX; /* every layer runs (ctx_set_layer_range) */
    c->kv_block = kv_block;
    c->kv_type = kv_type;
    c->kv_row_bytes = kv_row_bytes;
    c->kv_ring = ring;
    c->ring_hi = -1;
    c->kv_bytes = (int64_t)(2 * kv_bytes);
    c->n_threads = n_threads;
    const size_t B = (size_t)c->n_batch;
    size_t max_row = E > Q ? E : Q;
    if (F_max > max_row) max_row = F_max;

    c->tp = tp_new(n_threads);
    if (!c->tp) goto fail;
    c->k_cache = alloc_bytes(kv_bytes);
    c->v_cache = alloc_bytes(kv_bytes);
    c->kv_row0 = malloc(sizeof *c->kv_row0 * (size_t)hp->n_layer);
    if (!c->kv_row0) goto oom;
    size_t row = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        c->kv_row0[l] = row;
        row += ring > 0 && !model->layers[l].full_attn ? (size_t)ring : (size_t)n_ctx;
    }
    if (ring > 0) {
        c->ring_table = calloc((size_t)(n_ctx / ring + 1), sizeof *c->ring_table);
        if (!c->ring_table) goto oom;
    }
    c->x = alloc_floats(B * E);
    c->xb = alloc_floats(B * E);
    c->q = alloc_floats(B * Q);
    c->kb = alloc_floats(B * KV);
    c->vb = alloc_floats(B * KV);
    c->att = alloc_floats(B * Q);
    c->hb = alloc_floats(B * F_max);
    c->hb2 = alloc_floats(B * F_max);
    c->rope_cs = alloc_floats(B * (size_t)hp->n_rot);
    c->inv_freq = alloc_floats((size_t)hp->n_rot / 2 + 1);
    c->mm_scratch = alloc_floats(kern_matmul_scratch_bytes(n_threads, c->n_batch, (int64_t)max_row) / sizeof(float) + 1);
    const attn_args att_shape = {.n_tok = c->n_batch, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                                 .head_dim = hp->head_dim, .n_ctx = n_ctx};
    c->att_scratch = alloc_floats(kern_attention_scratch_floats(&att_shape, n_threads));
    c->attn_phi = ATTN_PHI_DEFAULT;
    c->attn_phi_head = model->attn_phi;
    c->logits_cap = 1;
    c->logits = alloc_floats((size_t)hp->n_vocab);
    if (!c->k_cache || !c->v_cache || !c->x || !c->xb || !c->q || !c->kb || !c->vb || !c->att || !c->hb ||
        !c->hb2 || !c->rope_cs || !c->inv_freq || !c->mm_scratch || !c->att_scratch || !c->logits)
        goto oom;
    if (model->tp_size > 1 && model->tp_rank > 0 && !(c->follow_tok = malloc(sizeof *c->follow_tok * B))) goto oom;
    if (NE > 0) {
        c->moe_logits = alloc_floats(B * NE);
        c->moe_sel = malloc(sizeof(int32_t) * B * K);
        c->moe_w = alloc_floats(B * K);
        c->moe_x = alloc_floats(B * E);
        c->moe_acc = alloc_floats(B * E);
        c->moe_tok = malloc(sizeof(int32_t) * B * K);
        c->moe_tw = alloc_floats(B * K);
        if (!c->moe_logits || !c->moe_sel || !c->moe_w || !c->moe_x || !c->moe_acc || !c->moe_tok || !c->moe_tw)
            goto oom;
    }
    ctx_set_rope_n_ctx(c, n_ctx);
    *out = c;
    return KITE_OK;
oom:
    err_set(KITE_E_NOMEM, "out of memory for a context of %d positions (KV cache %.1f MiB)", n_ctx,
            2.0 * (double)kv_bytes / (1 << 20));
fail:
    kite_ctx_free(c);
    return KITE_E_NOMEM;
}

static int check_model(const kite_model *model) {
    if (model->vocab_only)
        return model_err_vocab_only(model->path); /* loaded with vocab_only */
    return KITE_OK;
}

int kite_ctx_new(kite_model *model, const kite_ctx_params *params, kite_ctx **out) {
    if (!model || !out) return err_set(KITE_E_ARG, "kite_ctx_new: model and out are required");
    int rc = check_model(model);
    if (rc != KITE_OK) return rc;
    kite_ctx_params p = params ? *params : kite_ctx_default_params();
    if (p.n_ctx < 0 || p.n_ctx > KITE_MAX_CTX)
        return err_set(KITE_E_ARG, "n_ctx %d out of range [0, %d]", p.n_ctx, KITE_MAX_CTX);
    if (p.n_threads < 0 || p.n_threads > 1024)
        return err_set(KITE_E_ARG, "n_threads %d out of range [0, 1024]", p.n_threads);
    rc = ctx_kv_type_check(model, p.kv_type);
    if (rc != KITE_OK) return rc;
    const int32_t n_ctx = p.n_ctx ? p.n_ctx : model->hp.n_ctx_train;
    return ctx_create(model, n_ctx, n_ctx < KITE_MAX_BATCH ? n_ctx : KITE_MAX_BATCH, 0, p.n_threads, p.kv_type,
                      p.swa_full, out);
}

void ctx_set_rope_n_ctx(kite_ctx *c, int32_t n_ctx) {
    const kite_model *model = c->model;
    const model_hparams *hp = &model->hp;
    /* theta_i = pos * scale / base^(2i / n_rot), evaluated like llama2.c; Llama 3
     * rope scaling divides pair i's frequency by its factor (rope_freqs.weight,
     * as llama.cpp's ggml_rope_ext freq_factors) */
    for (int32_t i = 0; i < hp->n_rot / 2; i++) {
        c->inv_freq[i] = hp->rope_freq_scale / powf(hp->rope_freq_base, (float)(2 * i) / (float)hp->n_rot);
        if (model->rope_freqs) c->inv_freq[i] /= model->rope_freqs[i];
    }
    /* Phi-3 LongRoPE: the long factors when the context exceeds the original
     * one (llama.cpp's choice, per context), and cos/sin scaled by attn_factor */
    const float *factors = n_ctx > hp->n_ctx_orig ? model->rope_long : model->rope_short;
    if (factors)
        for (int32_t i = 0; i < hp->n_rot / 2; i++) c->inv_freq[i] /= factors[i];
    c->rope_mscale = hp->rope_attn_factor;
}

int ctx_new_sized(kite_model *model, int32_t n_ctx, int32_t n_batch, int32_t kv_block, int32_t n_threads,
                  kite_ctx **out) {
    return ctx_new_sized_kv(model, n_ctx, n_batch, kv_block, n_threads, KITE_DTYPE_F32, out);
}

int ctx_new_sized_kv(kite_model *model, int32_t n_ctx, int32_t n_batch, int32_t kv_block, int32_t n_threads,
                     int32_t kv_type, kite_ctx **out) {
    if (!model || !out) return err_set(KITE_E_ARG, "ctx_new_sized: model and out are required");
    int rc = check_model(model);
    if (rc != KITE_OK) return rc;
    if (kv_block < 1 || n_ctx < kv_block || n_ctx > KITE_MAX_CTX || n_ctx % kv_block != 0)
        return err_set(KITE_E_ARG, "ctx_new_sized: n_ctx %d must be a positive multiple of kv_block %d (<= %d)",
                       n_ctx, kv_block, KITE_MAX_CTX);
    if (n_batch < 1 || n_batch > 65536)
        return err_set(KITE_E_ARG, "ctx_new_sized: n_batch %d out of range [1, 65536]", n_batch);
    if (n_threads < 0 || n_threads > 1024)
        return err_set(KITE_E_ARG, "n_threads %d out of range [0, 1024]", n_threads);
    return ctx_create(model, n_ctx, n_batch, kv_block, n_threads, kv_type, false, out);
}

void ctx_set_tap(kite_ctx *ctx, ctx_tap_fn fn, void *user) {
    ctx->tap = fn;
    ctx->tap_user = fn ? user : NULL;
}

void ctx_set_layer_range(kite_ctx *ctx, int32_t from, int32_t to, int32_t rows, const float *x_in, float *x_out) {
    ctx->lr_from = from;
    ctx->lr_to = to;
    ctx->lr_rows = rows;
    ctx->lr_x_in = from > 0 ? x_in : NULL;
    ctx->lr_x_out = x_out;
}

void ctx_set_expert_tap(kite_ctx *ctx, ctx_expert_tap_fn fn, void *user) {
    ctx->expert_tap = fn;
    ctx->expert_tap_user = fn ? user : NULL;
}

int ctx_set_attn_phi(kite_ctx *ctx, const float *phi, int32_t n, int32_t mode) {
    const model_hparams *hp = &ctx->model->hp;
    const int32_t want = hp->n_layer * hp->n_head;
    if (mode != ATTN_PHI_UNIFIED && mode != ATTN_PHI_EXACT)
        return err_set(KITE_E_ARG, "ctx_set_attn_phi: unknown mode %d", mode);
    if (phi ? n != want : n != 0)
        return err_set(KITE_E_ARG, "ctx_set_attn_phi: %d values given, the model needs %d (layers x heads)", n, want);
    float *copy = NULL;
    if (phi) {
        copy = malloc(sizeof(float) * (size_t)want);
        if (!copy) return err_set(KITE_E_NOMEM, "ctx_set_attn_phi: out of memory");
        memcpy(copy, phi, sizeof(float) * (size_t)want);
    }
    free(ctx->attn_phi_own);
    ctx->attn_phi_own = copy;
    ctx->attn_phi_head = copy ? copy : ctx->model->attn_phi;
    ctx->attn_phi_mode = mode;
    return KITE_OK;
}

void ctx_set_attn_stats(kite_ctx *ctx, struct attn_stats *stats) { ctx->attn_stats = stats; }

int ctx_set_attn_tap(kite_ctx *ctx, ctx_attn_tap_fn fn, void *user) {
    if (fn && !ctx->attn_chunk_max) {
        ctx->attn_chunk_max = malloc(sizeof(float) * 2 * (size_t)ctx->n_batch * (size_t)ctx->model->hp.n_head);
        if (!ctx->attn_chunk_max) return err_set(KITE_E_NOMEM, "ctx_set_attn_tap: out of memory");
    }
    ctx->attn_tap = fn;
    ctx->attn_tap_user = fn ? user : NULL;
    return KITE_OK;
}

int kite_ctx_eval(kite_ctx *ctx, const kite_token *tokens, int32_t n, bool all_logits) {
    if (!ctx || (!tokens && n > 0)) return err_set(KITE_E_ARG, "kite_ctx_eval: ctx and tokens are required");
    if (ctx->kv_block) return err_set(KITE_E_STATE, "kite_ctx_eval: this context is a paged pool (serving engine)");
    if (n <= 0) return err_set(KITE_E_ARG, "kite_ctx_eval: n_tokens must be positive (got %d)", n);
    const int32_t n_vocab = ctx->model->hp.n_vocab;
    if (n > ctx->n_ctx - ctx->n_past)
        return err_set(KITE_E_RANGE, "context full: %d cached + %d new tokens > n_ctx %d", ctx->n_past, n,
                       ctx->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return err_set(KITE_E_RANGE, "token %d (index %d) is outside the vocabulary [0, %d)", tokens[i], i,
                           n_vocab);
    const int32_t rows = all_logits ? n : 1;
    if (rows > ctx->logits_cap) {
        float *l = alloc_floats((size_t)rows * (size_t)n_vocab);
        if (!l) return err_set(KITE_E_NOMEM, "out of memory for %d rows of logits", rows);
        free(ctx->logits);
        ctx->logits = l;
        ctx->logits_cap = rows;
    }
    if (ctx->n_past == 0 && !ctx->path_fixed) ctx->n_path = n > ATTN_SPLITKV_MAX_TOK ? n : 0;
    ctx->path_fixed = false;
    /* chunks of at most n_batch tokens, none straddling n_path: prompt positions on the prefill path, the
     * others on the decode path, whatever the batching (context.h, n_path) */
    for (int32_t start = 0; start < n;) {
        const int32_t pos = ctx->n_past;
        int32_t len = n - start < ctx->n_batch ? n - start : ctx->n_batch;
        if (!ctx->attn_by_size && pos < ctx->n_path && pos + len > ctx->n_path) len = ctx->n_path - pos;
        const int32_t path = ctx->attn_by_size    ? ATTN_PATH_AUTO
                             : pos < ctx->n_path ? ATTN_PATH_FLASH
                                                 : ATTN_PATH_SPLITKV;
        const bool last_chunk = start + len == n;
        int32_t first_out = len; /* no logits wanted from this chunk */
        float *dst = ctx->logits;
        if (all_logits) {
            first_out = 0;
            dst = ctx->logits + (size_t)start * n_vocab;
        } else if (last_chunk) {
            first_out = len - 1;
        }
        llama_forward(ctx, tokens + start, len, first_out, path, dst);
        int rc = llama_forward_failed(ctx->model); /* a streamed layer could not be read (mem_budget) */
        if (rc) {
            ctx->n_logits = 0;
            return rc;
        }
        ctx->n_past += len;
        if (ctx->n_past - 1 > ctx->ring_hi) ctx->ring_hi = ctx->n_past - 1;
        start += len;
    }
    ctx->n_logits = rows;
    ctx->logits_first = all_logits ? 0 : n - 1;
    return KITE_OK;
}

const float *kite_ctx_logits(const kite_ctx *ctx, int32_t i) {
    if (!ctx || ctx->n_logits == 0) return NULL;
    if (i < 0) i = ctx->logits_first + ctx->n_logits - 1;
    if (i < ctx->logits_first || i >= ctx->logits_first + ctx->n_logits) return NULL;
    return ctx->logits + (size_t)(i - ctx->logits_first) * (size_t)ctx->model->hp.n_vocab;
}

int32_t kite_ctx_n_past(const kite_ctx *ctx) { return ctx->n_past; }
int32_t kite_ctx_n_ctx(const kite_ctx *ctx) { return ctx->n_ctx; }
int32_t kite_ctx_n_threads(const kite_ctx *ctx) { return ctx->n_threads; }
int64_t kite_ctx_kv_bytes(const kite_ctx *ctx) { return ctx ? ctx->kv_bytes : 0; }

int kite_ctx_set_skip_layers(kite_ctx *ctx, const bool *skip, int32_t n) {
    if (!ctx) return err_set(KITE_E_ARG, "kite_ctx_set_skip_layers: ctx is required");
    const int32_t n_layer = ctx->model->hp.n_layer;
    if (!skip || n == 0) {
        free(ctx->skip_layers);
        ctx->skip_layers = NULL;
        return KITE_OK;
    }
    if (n != n_layer)
        return err_set(KITE_E_ARG, "kite_ctx_set_skip_layers: %d flags given, the model has %d layers", n, n_layer);
    bool *copy = malloc((size_t)n_layer * sizeof *copy);
    if (!copy) return err_set(KITE_E_NOMEM, "out of memory");
    bool any = false;
    for (int32_t l = 0; l < n_layer; l++) any |= (copy[l] = skip[l]);
    free(ctx->skip_layers);
    ctx->skip_layers = any ? copy : NULL;
    if (!any) free(copy);
    return KITE_OK;
}

int kite_ctx_truncate(kite_ctx *ctx, int32_t n_past) {
    if (n_past < 0 || n_past > ctx->n_past)
        return err_set(KITE_E_ARG, "kite_ctx_truncate: n_past %d outside [0, %d]", n_past, ctx->n_past);
    if (ctx->kv_ring > 0 && n_past > 0) {
        /* a token at n_past attends back to n_past - window + 1; a ring row
         * still holds its position if no later position written since
         * (up to ring_hi) maps to it */
        const int32_t need = n_past - ctx->model->hp.sliding_window + 1;
        const int32_t kept = ctx->ring_hi - ctx->kv_ring + 1;
        if (need > 0 ? need < kept : kept > 0)
            return err_set(KITE_E_STATE,
                           "kite_ctx_truncate: the sliding-window ring (%d positions) no longer holds positions "
                           "%d.. that a token at %d attends to (positions up to %d were written since): truncate "
                           "to 0 and evaluate again, or create the context with swa_full",
                           ctx->kv_ring, need > 0 ? need : 0, n_past, ctx->ring_hi);
    }
    if (n_past == 0) ctx->ring_hi = -1;
    ctx->n_past = n_past;
    ctx->n_logits = 0;
    if (n_past == 0) { /* the next eval starts a new prompt */
        ctx->n_path = 0;
        ctx->path_fixed = false;
    }
    return KITE_OK;
}

int ctx_set_prompt(kite_ctx *ctx, int32_t n_prompt) {
    if (n_prompt < 0) return err_set(KITE_E_ARG, "ctx_set_prompt: n_prompt %d is negative", n_prompt);
    if (ctx->n_past != 0) return err_set(KITE_E_STATE, "ctx_set_prompt: the context holds %d positions", ctx->n_past);
    ctx->n_path = n_prompt > ATTN_SPLITKV_MAX_TOK ? n_prompt : 0;
    ctx->path_fixed = true;
    return KITE_OK;
}

static const char *const prof_names[PROF_COUNT] = {
    "embed", "attn_norm", "q_proj", "k_proj", "v_proj", "rope", "attention", "o_proj",
    "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down", "out_norm", "output", "other",
};
_Static_assert(PROF_COUNT == KITE_PROFILE_N_OPS, "profile op list and KITE_PROFILE_N_OPS disagree");

int kite_ctx_set_profiling(kite_ctx *ctx, bool on) {
    if (!ctx) return err_set(KITE_E_ARG, "kite_ctx_set_profiling: ctx is required");
    if (on) memset(ctx->prof_s, 0, sizeof ctx->prof_s);
    ctx->profiling = on;
    return KITE_OK;
}

int32_t kite_ctx_profile(const kite_ctx *ctx, double *seconds, const char **names, int32_t cap) {
    if (!ctx) return -1;
    for (int32_t i = 0; i < cap && i < PROF_COUNT; i++) {
        if (seconds) seconds[i] = ctx->prof_s[i];
        if (names) names[i] = prof_names[i];
    }
    return PROF_COUNT;
}

_Static_assert((int)KITE_KV_F32 == (int)KITE_DTYPE_F32 && (int)KITE_KV_F16 == (int)KITE_DTYPE_F16 &&
                   (int)KITE_KV_Q4_0 == (int)KITE_DTYPE_Q4_0 &&
                   (int)KITE_KV_Q8_0 == (int)KITE_DTYPE_Q8_0,
               "kite_kv_type values must be the dtype ids");

int kite_ctx_follow(kite_ctx *ctx) {
    if (!ctx) return err_set(KITE_E_ARG, "kite_ctx_follow: ctx is NULL");
    return llama_follow(ctx);
}
