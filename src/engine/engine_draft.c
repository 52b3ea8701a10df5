/*
 * engine_draft.c - batched drafting with a draft model or the target with
 * layers skipped, for the serving engine (design in engine_draft.h).
 */
#include "engine/engine_draft.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "spec/accept.h"
#include "spec/spec.h"

/* Progress of one job inside edraft_run. */
typedef struct job_state {
    int32_t m;          /* positions with draft K/V so far */
    int32_t catch_end;  /* history positions to cache this run (n_hist, or less when out of budget) */
    int32_t got;        /* draft tokens produced */
    int32_t k;          /* draft tokens to produce (0: catch up only, or nothing) */
    bool ended;         /* the grammar ended the draft early (not a shortage) */
} job_state;

struct edrafter {
    kite_ctx *ctx;               /* paged draft context (draft model, or target with skipped layers) */
    kv_pool *kv;                 /* its block pool */
    int32_t n_vocab, n_parallel, draft_max, step_tokens, n_batch;
    fwd_seq *fseqs;              /* [n_parallel] */
    kite_token *batch;           /* [n_batch] tokens of one pass */
    int32_t *item_job;           /* [n_parallel] job of each fwd_seq of a pass */
    job_state *js;               /* [n_parallel] */
    float *logits;               /* [n_parallel][n_vocab] one row per job and pass */
    float *q;                    /* [n_parallel][draft_max][n_vocab] q rows of sampled drafts */
    double seconds;              /* time in edraft_run */
};

/* Copy-on-write of draft K/V rows (blocks shared through the prefix cache). */
static void copy_rows(void *user, int32_t dst, int32_t src) {
    edrafter *d = user;
    const int32_t bs = d->ctx->kv_block;
    ctx_kv_copy_rows(d->ctx, dst * bs, src * bs, bs);
}

void edraft_free(edrafter *d) {
    if (!d) return;
    kite_ctx_free(d->ctx);
    kv_pool_free(d->kv);
    free(d->fseqs);
    free(d->batch);
    free(d->item_job);
    free(d->js);
    free(d->logits);
    free(d->q);
    free(d);
}

int edraft_new(const edraft_config *c, edrafter **out) {
    if (!c || !c->target || !out || c->n_parallel < 1 || c->block_size < 1 || c->step_tokens < 1 ||
        c->draft_max < 1 || c->draft_max > SPEC_MAX_DRAFT || c->n_blocks < 1 || c->kv_mem_bytes < 0)
        return err_set(KITE_E_ARG, "edraft_new: bad configuration");
    kite_model *tm = c->target, *dm = c->draft_model ? c->draft_model : c->target;
    int rc = KITE_OK;
    if (c->draft_model) {
        if (c->draft_model->vocab_only)
            return err_set(KITE_E_ARG, "draft model '%s' has no weights", c->draft_model->path);
        if ((rc = spec_check_vocab(tm, c->draft_model)) != KITE_OK) return rc;
        if (c->skip_layers) return err_set(KITE_E_ARG, "engine: a draft model and skipped layers are exclusive");
    } else {
        bool any = false;
        for (int32_t l = 0; c->skip_layers && l < c->n_skip; l++) any |= c->skip_layers[l];
        if (!c->skip_layers || c->n_skip != tm->hp.n_layer || !any)
            return err_set(KITE_E_ARG, "engine: %d layer-skip flags (at least one set) for a model of %d layers",
                           c->n_skip, tm->hp.n_layer);
    }
    if (dm->pos_embd.data && c->n_ctx > dm->hp.n_ctx_train)
        return err_set(KITE_E_ARG, "draft model '%s': learned positions up to %d, the engine's context is %d",
                       dm->path, dm->hp.n_ctx_train, c->n_ctx);
    const model_hparams *hp = &dm->hp;
    const int64_t pos_bytes = 2 * (int64_t)hp->n_layer * hp->n_head_kv * hp->head_dim * (int64_t)sizeof(float);
    const int64_t n_blocks = c->kv_mem_bytes ? c->kv_mem_bytes / (pos_bytes * c->block_size) : c->n_blocks;
    if (n_blocks < 1 || n_blocks * c->block_size > (1 << 20))
        return err_set(KITE_E_ARG, "engine: draft KV pool of %lld blocks of %d positions (1 .. %d positions)",
                       (long long)n_blocks, c->block_size, 1 << 20);

    edrafter *d = calloc(1, sizeof *d);
    if (!d) return err_set(KITE_E_NOMEM, "engine: out of memory for the drafter");
    d->n_vocab = tm->hp.n_vocab;
    d->n_parallel = c->n_parallel;
    d->draft_max = c->draft_max;
    d->step_tokens = c->step_tokens;
    d->n_batch = c->step_tokens + c->n_parallel; /* catch-up budget plus one draft token per job */
    rc = ctx_new_sized(dm, (int32_t)n_blocks * c->block_size, d->n_batch, c->block_size, c->n_threads, &d->ctx);
    if (rc != KITE_OK) goto fail;
    ctx_set_rope_n_ctx(d->ctx, c->n_ctx); /* per sequence, as the target's (engine.c) */
    if (!c->draft_model && (rc = kite_ctx_set_skip_layers(d->ctx, c->skip_layers, c->n_skip)) != KITE_OK) goto fail;
    if ((rc = kv_pool_new((int32_t)n_blocks, c->block_size, c->prefix_cache, &d->kv)) != KITE_OK) goto fail;
    const size_t np = (size_t)c->n_parallel, nv = (size_t)d->n_vocab;
    d->fseqs = calloc(np, sizeof *d->fseqs);
    d->batch = calloc((size_t)d->n_batch, sizeof *d->batch);
    d->item_job = calloc(np, sizeof *d->item_job);
    d->js = calloc(np, sizeof *d->js);
    d->logits = malloc(np * nv * sizeof *d->logits);
    d->q = malloc(np * (size_t)c->draft_max * nv * sizeof *d->q);
    if (!d->fseqs || !d->batch || !d->item_job || !d->js || !d->logits || !d->q) {
        rc = err_set(KITE_E_NOMEM, "engine: out of memory for the drafter");
        goto fail;
    }
    *out = d;
    return KITE_OK;
fail:
    edraft_free(d);
    return rc;
}

int edraft_seq_init(edrafter *d, edraft_seq *s, const kite_sampler_params *sp) {
    memset(s, 0, sizeof *s);
    kv_table_init(&s->kv);
    kite_sampler_params p = *sp; /* the request's chain without penalties */
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.penalty_last_n = 0;
    s->greedy = sp->temperature <= 0.0f;
    sampler_rng_seed(&s->rng, sp->seed ^ 0xD4AF7D4AF7ull);
    return kite_sampler_new(&p, d->n_vocab, &s->smp);
}

void edraft_seq_free(edrafter *d, edraft_seq *s) {
    if (d) kv_release(d->kv, &s->kv);
    kv_table_free(NULL, &s->kv);
    kite_sampler_free(s->smp);
    s->smp = NULL;
}

void edraft_seq_drop(edrafter *d, edraft_seq *s) {
    kv_release(d->kv, &s->kv);
    s->n_cached = s->base = s->n_fed = 0;
}

/* Lazy rollback: keeps the history positions and the fed drafts the
 * history now repeats, never the pending (last) token's position. */
static void sync_seq(edrafter *d, edraft_seq *s, const kite_token *hist, int32_t n_hist) {
    int32_t keep = s->n_cached;
    if (s->n_fed > 0) {
        keep = s->base;
        for (int32_t i = 0; i < s->n_fed && keep < n_hist && hist[keep] == s->fed[i]; i++) keep++;
    }
    if (keep > n_hist - 1) keep = n_hist - 1;
    s->n_fed = 0;
    if (keep < s->n_cached) {
        s->n_cached = keep;
        kv_truncate(d->kv, &s->kv, keep);
    }
}

/* Picks job j's next draft token from its logits row (masked under the job's grammar: then q
 * is the masked distribution).  False when the grammar cannot continue the draft; *more false
 * when the token ends the generation. */
static bool pick(edrafter *d, edraft_job *job, int32_t j, const float *row, kite_token *t, bool *more) {
    edraft_seq *s = job->ds;
    *more = true;
    if (job->gen && kite_gen_draft_masked_logits(job->gen, row, &row) != KITE_OK) return false;
    if (s->greedy) {
        *t = kite_sampler_sample(s->smp, row); /* argmax, ties to the lowest id */
    } else {
        float *q = d->q + ((size_t)j * (size_t)d->draft_max + (size_t)d->js[j].got) * (size_t)d->n_vocab;
        spec_probs(s->smp, row, d->n_vocab, q);
        *t = spec_draw(q, d->n_vocab, &s->rng);
    }
    return !job->gen || kite_gen_draft_push(job->gen, *t, more) == KITE_OK;
}

/* Reserves blocks and budget for job j; sets its job_state.  *budget is
 * the catch-up budget left. */
static void plan_job(edrafter *d, edraft_job *job, int32_t j, int32_t *budget) {
    edraft_seq *s = job->ds;
    job_state *st = &d->js[j];
    sync_seq(d, s, job->hist, job->n_hist);
    if (s->kv.n_blocks == 0 && s->n_cached == 0) {
        const int32_t m = kv_match_prefix(d->kv, &s->kv, job->hist, job->n_hist - 1, job->n_path);
        if (m > 0) s->n_cached = m;
    }
    st->m = s->n_cached;
    st->got = 0;
    st->k = 0;
    st->ended = false;
    st->catch_end = s->n_cached;
    int32_t want = job->k < d->draft_max ? job->k : d->draft_max;
    const int32_t need = job->n_hist - s->n_cached; /* >= 1: the pending token */
    if (need > *budget) { /* catch up part of the way; no draft this step */
        const int32_t take = *budget;
        if (take > 0 && kv_prepare_write(d->kv, &s->kv, s->n_cached, take, copy_rows, d) == KITE_OK) {
            st->catch_end = s->n_cached + take;
            *budget -= take;
        }
        return;
    }
    for (; want >= 1; want--)
        if (kv_write_cost(d->kv, &s->kv, s->n_cached, need + want - 1) <= kv_pool_available(d->kv)) break;
    if (want < 1 || kv_prepare_write(d->kv, &s->kv, s->n_cached, need + want - 1, copy_rows, d) != KITE_OK) return;
    st->catch_end = job->n_hist;
    st->k = want;
    if (job->gen && kite_gen_draft_begin(job->gen) != KITE_OK) { /* catch up only */
        st->k = 0;
        st->ended = true;
    }
    *budget -= need;
}

int32_t edraft_run(edrafter *d, edraft_job *jobs, int32_t n) {
    const double t0 = time_now_s();
    KITE_ASSERT(n >= 0 && n <= d->n_parallel);
    int32_t budget = d->step_tokens, starved = 0;
    for (int32_t j = 0; j < n; j++) plan_job(d, &jobs[j], j, &budget);

    for (;;) { /* one batched forward per pass */
        int32_t ns = 0, nt = 0;
        for (int32_t j = 0; j < n; j++) {
            edraft_job *job = &jobs[j];
            job_state *st = &d->js[j];
            fwd_seq f = {.block_table = job->ds->kv.blocks, .pos0 = st->m};
            if (st->m < st->catch_end) { /* catch-up chunk, never straddling n_path */
                int32_t end = st->catch_end;
                if (st->m < job->n_path && end > job->n_path) end = job->n_path;
                f.n_tok = end - st->m;
                f.n_out = end == job->n_hist && st->k > 0 ? 1 : 0;
                f.attn_path = st->m < job->n_path ? ATTN_PATH_FLASH : ATTN_PATH_SPLITKV;
                memcpy(d->batch + nt, job->hist + st->m, (size_t)f.n_tok * sizeof *d->batch);
            } else if (st->got >= 1 && st->got < st->k) { /* feed the last draft token */
                f.n_tok = f.n_out = 1;
                f.attn_path = ATTN_PATH_SPLITKV;
                d->batch[nt] = job->out[st->got - 1];
            } else {
                continue;
            }
            KITE_ASSERT(nt + f.n_tok <= d->n_batch);
            d->fseqs[ns] = f;
            d->item_job[ns++] = j;
            nt += f.n_tok;
        }
        if (ns == 0) break;
        llama_forward_batch(d->ctx, d->batch, d->fseqs, ns, d->logits);
        int32_t row = 0;
        for (int32_t i = 0; i < ns; i++) {
            const int32_t j = d->item_job[i];
            job_state *st = &d->js[j];
            st->m += d->fseqs[i].n_tok;
            if (!d->fseqs[i].n_out) continue;
            kite_token t;
            bool more;
            if (pick(d, &jobs[j], j, d->logits + (size_t)row * (size_t)d->n_vocab, &t, &more))
                jobs[j].out[st->got++] = t;
            else
                more = false;
            if (!more) { /* the grammar ends the draft here */
                st->k = st->got;
                st->ended = true;
            }
            row++;
        }
    }

    for (int32_t j = 0; j < n; j++) {
        edraft_job *job = &jobs[j];
        edraft_seq *s = job->ds;
        const job_state *st = &d->js[j];
        s->n_cached = st->m;
        s->base = job->n_hist;
        s->n_fed = st->m > job->n_hist ? st->m - job->n_hist : 0;
        if (s->n_fed > 0) memcpy(s->fed, job->out, (size_t)s->n_fed * sizeof *s->fed);
        /* blocks reserved past what was written (a partial catch-up) are dropped */
        kv_truncate(d->kv, &s->kv, s->n_cached);
        kv_commit(d->kv, &s->kv, job->hist, s->n_cached < job->n_hist ? s->n_cached : job->n_hist, job->n_path);
        s->q = !s->greedy && st->got > 0 ? d->q + (size_t)j * (size_t)d->draft_max * (size_t)d->n_vocab : NULL;
        if (st->got < job->k && !st->ended) starved++;
        job->k = st->got;
    }
    d->seconds += time_now_s() - t0;
    return starved;
}

int32_t edraft_blocks_used(const edrafter *d) { return kv_pool_n_used(d->kv); }
double edraft_seconds(const edrafter *d) { return d->seconds; }
