/*
 * engine.c - the serving engine: request intake, the engine thread, one
 * forward pass per step, sampling and streamed output (engine.h; design in
 * docs/engine.md).
 *
 * DESIGN
 *   Requests live in an `ereq` that embeds the scheduler's sched_seq.  A
 *   submitted request is validated and fully prepared (token copy, sampler
 *   primed with the prompt, detokenizer, stop filter) on the caller's thread
 *   and put on the incoming list; the engine thread moves incoming requests
 *   into the scheduler's queue at the top of each iteration, then plans one
 *   step (scheduler.c), runs llama_forward_batch over it, and for every
 *   sequence whose pending tokens are all computed samples one token and
 *   streams its text.  Each step's state change is then published as stats.
 *
 *   Speculative decoding (engine_params.spec_lookup_n): make_drafts fills
 *   each decoding sequence's draft (spec/lookup.h, length from its
 *   spec_adapt) before sched_plan, which turns its decode item into a
 *   draft item when budget and blocks allow; verify_draft then walks the
 *   item's logits rows in order, pushing each accepted token exactly as
 *   on_logits pushes a sampled one (so stop strings, EOS and max_tokens cut
 *   at the same token), and sched_keep_draft drops the rejected positions.
 *   The acceptance RNG of sampling requests is a stream of their own,
 *   seeded from the request's seed.  With a model drafter (engine_draft.h)
 *   make_drafts hands every decoding sequence to edraft_run instead, in
 *   admission order and within the step budget the drafts would get, and
 *   verify_draft uses the returned q rows in the rejection rule.  With
 *   lookahead each request has a spec_la (window + n-gram pool, made at its
 *   first draft): make_drafts takes its window as the draft, and verify_draft feeds the pass's argmax
 *   rows back (spec_la_update) and adds the accepted text to the pool.
 *
 *   Output text per request: token -> kite_gen (the stop rules of kite.h,
 *   then whole UTF-8 characters) -> stop_filter (holds back what may start a
 *   stop string) -> TEXT event.  A request finishes on EOS/EOG or BOS (unless
 *   ignore_eos: "stop"), a stop string ("stop"), max_tokens or the context
 *   ("length": max_gen is max_tokens clipped to the context).  The EOS token
 *   itself is not output.
 *
 * THREADS / LOCKS
 *   mu guards the incoming list, the registry of live requests (for
 *   engine_cancel), next_id, the stop flag and the published stats.  The
 *   engine thread owns everything else (scheduler, pool, context, the
 *   requests once taken in).  Callbacks run with cb_mu held; engine_cancel
 *   sets the request's `cancelled` flag under mu and then takes cb_mu once,
 *   so a callback in flight finishes before it returns and none starts
 *   afterwards.  A callback calling engine_cancel (on the engine thread)
 *   skips that step: it is the callback in flight.
 */
#include "engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "engine/engine_draft.h"
#include "engine/kv_blocks.h"
#include "engine/scheduler.h"
#include "generate/stop.h"
#include "spec/accept.h"
#include "spec/adapt.h"
#include "spec/lookahead.h"
#include "spec/lookup.h"

typedef struct ereq {
    sched_seq s;                 /* first member: scheduler items point here */
    uint64_t id;
    engine_cb cb;
    void *user;
    kite_sampler *smp;
    kite_gen *gen;               /* stop rules (EOG/BOS, max_gen) and detokenizer */
    stop_filter stop;
    int32_t max_gen;             /* generated-token limit after clipping to the context */
    int32_t n_gen;               /* generated tokens (EOS excluded), as counted by gen */
    bool greedy;                 /* temperature <= 0 */
    bool logprobs;               /* engine_req.logprobs */
    int32_t top_logprobs;
    kite_logprobs lp;            /* the latest token's (no allocation per token) */
    kite_grammar *grammar;       /* owned (engine_req.grammar), or NULL */
    spec_adapt adapt;            /* speculative: this sequence's draft length */
    sampler_rng rng_accept;      /* speculative acceptance draws (temperature > 0) */
    kite_token draft[SPEC_MAX_DRAFT]; /* this step's draft (s.draft points here) */
    edraft_seq ds;               /* model drafters: draft cache and sampler of this sequence */
    spec_la la;                  /* lookahead: window and n-gram pool of this sequence */
    kite_embed_params ep;        /* embed request (s.embed): pooling */
    double *esum;                /* embed, mean pooling: [n_embd] sum of the normed rows */
    float *evec;                 /* embed: [n_embd] the vector */
    atomic_bool cancelled;
    double t_submit, queue_s;    /* engine_submit time; seconds until first admitted (0 = not yet) */
    struct ereq *reg_prev, *reg_next; /* registry of live requests (mu) */
    struct ereq *in_next;        /* incoming list (mu) */
} ereq;

struct engine {
    kite_model *model;           /* borrowed */
    kite_ctx *ctx;               /* paged context (ctx_new_sized) */
    kv_pool *kv;
    sched sched;
    int32_t n_vocab, n_ctx, n_parallel, block_size, n_blocks, step_tokens;
    int32_t spec_n;              /* prompt-lookup n-gram size; 0 = no speculation */
    int32_t draft_max;           /* upper bound of a draft */
    edrafter *drafter;           /* model drafter (draft model or skipped layers), or NULL */
    edraft_job *jobs;            /* [n_parallel] drafting jobs of a step (drafter only) */
    int32_t la_w, la_n, la_g;    /* lookahead W, N, G; la_w 0 = off */
    kite_token la_in[SPEC_MAX_DRAFT + 1];   /* lookahead: a verified item's tokens */
    kite_token la_pred[SPEC_MAX_DRAFT + 1]; /* and the argmax of each of its rows */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_mutex_t cb_mu;
    pthread_cond_t cv;
    bool stop;                   /* mu */
    ereq *in_head, *in_tail;     /* mu */
    int32_t n_incoming;          /* mu */
    ereq *live;                  /* mu: every request not yet freed */
    uint64_t next_id;            /* mu */
    engine_stats st;             /* mu: last published */
    engine_logits_fn logits_hook; /* set before requests are submitted (engine_set_logits_hook) */
    void *logits_hook_user;

    /* engine thread only */
    sched_item *items;           /* [n_parallel] */
    fwd_seq *fseqs;              /* [n_parallel] */
    kite_token *batch;           /* [step_tokens] */
    float *logits;               /* [n_rows][n_vocab] */
    int32_t n_rows;              /* logits rows of a step: n_parallel, more with drafts */
    float *prob;                 /* [n_vocab] target distribution (speculative sampling) */
    float *resid;                /* [n_vocab] residual distribution (speculative sampling) */
    float *erow;                 /* [n_embd] scratch row of embedding pooling */
    int32_t *scratch;            /* [n_blocks] for sched_kv_usage */
    attn_args win;               /* shape and window of the attention (every layer windowed), for
                                    sched.first_read */
    sbuf text;                   /* text of the event being built */
    int64_t tokens_out, requests_done, steps;
    int64_t spec_drafted, spec_accepted, spec_passes, spec_pool_drafts;
};

engine_params engine_default_params(void) {
    engine_params p = {0};
    return p;
}

/* First position the attention reads for a query at pos (sched.first_read). */
static int32_t first_read(void *user, int32_t pos) {
    const engine *e = user;
    return kern_attention_first_read(&e->win, pos);
}

/* ---- K/V copy-on-write -------------------------------------------------- */

/* Copies block src's K/V rows to block dst in every layer (copy-on-write). */
static void copy_block_rows(void *user, int32_t dst, int32_t src) {
    engine *e = user;
    const int32_t bs = e->ctx->kv_block;
    ctx_kv_copy_rows(e->ctx, dst * bs, src * bs, bs);
}

/* ---- requests ----------------------------------------------------------- */

static void req_free(ereq *r) {
    if (!r) return;
    kv_table_free(NULL, &r->s.kv);
    edraft_seq_free(NULL, &r->ds); /* its blocks were released (req_retire, engine_free) */
    spec_la_free(&r->la);
    free(r->s.toks);
    kite_sampler_free(r->smp);
    kite_gen_free(r->gen);
    kite_grammar_free(r->grammar); /* after the generator that used it */
    stop_filter_free(&r->stop);
    free(r->esum);
    free(r->evec);
    free(r);
}

/* Unlinks r from the registry and frees it (engine thread, or after join). */
static void req_retire(engine *e, ereq *r) {
    if (e->drafter) edraft_seq_drop(e->drafter, &r->ds);
    pthread_mutex_lock(&e->mu);
    if (r->reg_prev) r->reg_prev->reg_next = r->reg_next; else e->live = r->reg_next;
    if (r->reg_next) r->reg_next->reg_prev = r->reg_prev;
    pthread_mutex_unlock(&e->mu);
    req_free(r);
}

/* Queue time (engine_event.queue_s): the first step that plans a request
 * admits it.  Items point at ereq's first member. */
static void note_admitted(engine *e, int32_t n) {
    double now = -1;
    for (int32_t i = 0; i < n; i++) {
        ereq *r = (ereq *)(void *)e->items[i].seq;
        if (r->queue_s > 0) continue;
        if (now < 0) now = time_now_s();
        r->queue_s = now - r->t_submit > 1e-9 ? now - r->t_submit : 1e-9;
    }
}

static void emit(engine *e, ereq *r, engine_event *ev) {
    ev->n_prompt = r->s.n_prompt;
    ev->n_gen = r->n_gen;
    ev->n_cached = r->s.n_cached;
    ev->queue_s = r->queue_s;
    pthread_mutex_lock(&e->cb_mu);
    if (!atomic_load(&r->cancelled)) r->cb(r->user, ev);
    pthread_mutex_unlock(&e->cb_mu);
}

/* Sends the final event and frees the request; its blocks must be released. */
static void publish_stats(engine *e);
static void finish(engine *e, ereq *r, const char *reason, int status, const char *message) {
    engine_event ev = {.kind = status == KITE_OK ? ENGINE_EV_DONE : ENGINE_EV_ERROR,
                       .finish_reason = reason, .status = status, .message = message};
    e->requests_done++;
    /* before the event: a caller that waits for its last request's DONE and then reads the stats
     * (kite batch) must see this step's tokens, not the figures of the step before; the drafter's
     * blocks go first so that the figures show them free (req_retire's drop is then a no-op) */
    if (e->drafter) edraft_seq_drop(e->drafter, &r->ds);
    publish_stats(e);
    emit(e, r, &ev);
    req_retire(e, r);
}

/* Appends token t, sampled or accepted, to r's output and streams its text
 * (one TEXT event per token, as plain decoding).  The stop rules are
 * kite_gen's (EOG or BOS unless ignore_eos: "stop"; max_gen: "length"); a
 * stop string is the stop filter's ("stop").  Returns true when r has
 * finished: it has then been removed and freed. */
static bool push_token(engine *e, ereq *r, kite_token t, const float *logits) {
    const char *reason = NULL;
    bool stop_string = false;
    int32_t n_new = 0;
    e->text.n = 0;
    if (e->text.p) e->text.p[0] = '\0';
    bool have_lp = false;
    if (r->logprobs) { /* before the push: the grammar state and penalty history t was sampled under */
        const float *masked = logits;
        have_lp = kite_gen_masked_logits(r->gen, logits, &masked) == KITE_OK &&
                  kite_sampler_logprobs(r->smp, masked, t, r->top_logprobs, &r->lp) == KITE_OK;
    }
    kite_gen_step st;
    const int rc = kite_gen_push(r->gen, t, &st);
    KITE_ASSERT(rc == KITE_OK); /* t was sampled from the vocabulary and r is still generating */
    if (st.output) {
        KITE_ASSERT(r->s.n_toks < r->s.n_prompt + r->max_gen);
        r->s.toks[r->s.n_toks++] = t;
        r->n_gen = (int32_t)st.n_gen;
        e->tokens_out++;
        n_new = 1;
        if (st.len > 0 && stop_filter_push(&r->stop, st.text, st.len, &e->text) == 1) {
            reason = "stop";
            stop_string = true;
        }
    }
    if (!reason && st.stop != KITE_STOP_NONE) reason = st.stop == KITE_STOP_LENGTH ? "length" : "stop";
    if (reason && !stop_string) {
        /* end of text: an incomplete character, then whatever was held back */
        const char *tail;
        size_t n_tail = 0;
        kite_gen_flush(r->gen, &tail, &n_tail);
        if (n_tail > 0 && stop_filter_push(&r->stop, tail, n_tail, &e->text) == 1) {
            reason = "stop";
        } else {
            stop_filter_finish(&r->stop, &e->text);
        }
    }
    if (n_new > 0 || e->text.n > 0) {
        engine_event ev = {.kind = ENGINE_EV_TEXT, .text = e->text.p ? e->text.p : "", .len = e->text.n,
                           .tokens = &r->s.toks[r->s.n_toks - n_new], .n_tokens = n_new,
                           .logprobs = have_lp && n_new == 1 ? &r->lp : NULL};
        emit(e, r, &ev);
    }
    if (!reason) return false;
    sched_remove(&e->sched, &r->s);
    finish(e, r, reason, KITE_OK, NULL);
    return true;
}

/* Ends r with an error event (a grammar that no token can continue); r is freed. */
static void fail_req(engine *e, ereq *r, int status) {
    sched_remove(&e->sched, &r->s);
    finish(e, r, NULL, status, kite_last_error());
}

/* Samples the next token of r from its logits row (under its grammar, if any) and streams the result. */
static void on_logits(engine *e, ereq *r, const float *logits) {
    if (e->logits_hook) e->logits_hook(e->logits_hook_user, r->user, logits, e->n_vocab);
    kite_token t;
    const int rc = kite_gen_pick(r->gen, logits, &t);
    if (rc != KITE_OK) fail_req(e, r, rc);
    else push_token(e, r, t, logits);
}

/* Verifies r's draft of n_draft tokens from rows[0..n_draft] (row i scores
 * the token after the pending token and draft[0..i)).  Positions are taken
 * in order, each token pushed (sampler history, stop strings, limits)
 * before the next row is judged, exactly as plain decoding would see them:
 * temperature 0 keeps a draft while it equals the sampler's argmax;
 * otherwise the point-mass rejection rule (spec/accept.h) keeps draft d with
 * probability p(d) and replaces it by a draw from p without d, so every
 * output token is distributed as plain sampling's.  The first rejection (or
 * the bonus row after n_draft acceptances) yields the step's last token;
 * tokens after a finish are never pushed.  Then the KV of the kept drafts
 * stays and the rest is dropped (sched_keep_draft). */
static void verify_draft(engine *e, ereq *r, const float *rows, int32_t n_draft) {
    int32_t j = 0;
    bool rejected = false, finished = false;
    const int32_t n_hist0 = r->s.n_toks; /* history before this step's tokens */
    kite_token last = -1;
    if (e->la_w > 0) { /* the pass's argmax on every row: the next Jacobi window and the pool's n-grams */
        e->la_in[0] = r->s.toks[n_hist0 - 1];
        memcpy(e->la_in + 1, r->draft, (size_t)n_draft * sizeof *e->la_in);
        for (int32_t i = 0; i <= n_draft; i++) {
            const float *lg = rows + (size_t)i * (size_t)e->n_vocab;
            kite_token best = 0;
            for (int32_t v = 1; v < e->n_vocab; v++)
                if (lg[v] > lg[best]) best = v;
            e->la_pred[i] = best;
        }
    }
    for (int32_t i = 0; i <= n_draft && !finished && !rejected; i++) {
        const float *logits = rows + (size_t)i * (size_t)e->n_vocab;
        if (e->logits_hook) e->logits_hook(e->logits_hook_user, r->user, logits, e->n_vocab);
        kite_token x;
        /* under a grammar every row is judged on the masked distribution of the state the tokens
         * pushed so far reached: a draft the grammar refuses has probability 0 and is replaced */
        int rc = KITE_OK;
        if (i == n_draft) {
            rc = kite_gen_pick(r->gen, logits, &x); /* bonus token after a fully accepted draft */
        } else if (r->greedy) {
            rc = kite_gen_pick(r->gen, logits, &x);
            rejected = x != r->draft[i];
        } else {
            const float *masked = logits;
            rc = kite_gen_masked_logits(r->gen, logits, &masked);
            if (rc == KITE_OK) spec_probs(r->smp, masked, e->n_vocab, e->prob);
            x = r->draft[i];
            /* q: the model drafter's distribution, or NULL (a lookup draft is a point mass) */
            const float *q = r->ds.q ? r->ds.q + (size_t)i * (size_t)e->n_vocab : NULL;
            if (rc == KITE_OK) rejected = !spec_accept(e->prob, q, x, e->n_vocab, &r->rng_accept, e->resid, &x);
        }
        if (rc != KITE_OK) {
            fail_req(e, r, rc);
            finished = true;
            break;
        }
        if (i < n_draft && !rejected) j++;
        last = x;
        finished = push_token(e, r, x, logits); /* r is freed when this returns true */
    }
    e->spec_drafted += n_draft;
    e->spec_accepted += j;
    e->spec_passes++;
    if (finished) return;
    if (e->la_w > 0) {
        e->la_pred[j] = last; /* the token actually taken (the argmax when greedy) */
        spec_la_update(&r->la, e->la_in, e->la_pred, n_draft, j);
        spec_la_add_history(&r->la, r->s.toks, r->s.n_toks, n_hist0);
    }
    spec_adapt_update(&r->adapt, j, rejected);
    sched_keep_draft(&e->sched, &r->s, j);
}

/* Creates r's lookahead window and n-gram pool (from its prompt, then the
 * n-grams of its whole history); false when out of memory (no draft). */
static bool lookahead_start(engine *e, ereq *r) {
    if (spec_la_init(&r->la, e->la_w, e->la_n, e->la_g, r->s.toks, r->s.n_prompt) != KITE_OK) return false;
    spec_la_add_history(&r->la, r->s.toks, r->s.n_toks, 0);
    return true;
}

/* Cuts r's draft at the first token its grammar refuses (kite_gen_check_draft;
 * nothing without a grammar): greedy, or with a point-mass draft (lookup,
 * lookahead), that token and all after it would be rejected for sure, and
 * the row before it yields the masked replacement verify_draft would draw.
 * A sampled model draft keeps its first refused token, whose rejection draws
 * from the residual (p - q)+ as the rule needs.  A matcher error drops the
 * draft (the verification meets the error again and fails the request). */
static void grammar_cut_draft(ereq *r) {
    if (!r->grammar || r->s.n_draft <= 0) return;
    int32_t ok = 0;
    if (kite_gen_check_draft(r->gen, r->draft, r->s.n_draft, &ok) != KITE_OK) ok = 0;
    else if (!r->greedy && r->ds.q && ok < r->s.n_draft) ok++;
    r->s.n_draft = ok;
}

/* Before planning a step: drafts for every running sequence that is
 * decoding (one pending token past the prompt path), at most its adaptive
 * length and never more than the tokens it may still produce minus the one
 * every step yields: by prompt lookup over its prompt and output, or with
 * the model drafter for all of them at once.  Model drafts are also capped,
 * oldest first, by the step budget that sched_plan leaves them after the
 * decode tokens (a draft token beyond it would be computed for nothing).
 * When the drafter ran short of blocks, the draft caches of waiting
 * (preempted) sequences are dropped for the next step. */
static void make_drafts(engine *e) {
    sched *s = &e->sched;
    int32_t n_jobs = 0, budget = s->step_tokens;
    for (int32_t i = 0; i < s->n_running; i++) budget -= s->running[i]->n_toks - s->running[i]->n_computed == 1;
    for (int32_t i = 0; i < s->n_running; i++) {
        ereq *r = (ereq *)s->running[i];
        r->s.n_draft = 0;
        r->s.draft = r->draft;
        r->ds.q = NULL;
        if (r->s.embed) continue;
        if (r->s.n_toks - r->s.n_computed != 1 || r->s.n_computed < r->s.n_path) continue;
        int32_t k = r->adapt.k;
        if (k > r->max_gen - r->n_gen - 1) k = r->max_gen - r->n_gen - 1;
        if (e->la_w > 0) {
            /* the window and pool are made at the first draft, so queued requests hold none */
            if (k <= 0 || (!r->la.window && !lookahead_start(e, r))) continue;
            int from_pool = 0;
            r->s.n_draft = spec_la_draft(&r->la, r->s.toks[r->s.n_toks - 1], k, r->draft, &from_pool);
            e->spec_pool_drafts += from_pool;
            grammar_cut_draft(r);
            continue;
        }
        if (!e->drafter) {
            if (k > 0) r->s.n_draft = spec_lookup_draft(r->s.toks, r->s.n_toks, e->spec_n, k, r->draft);
            grammar_cut_draft(r);
            continue;
        }
        if (k > budget) k = budget;
        if (k <= 0) continue;
        budget -= k;
        e->jobs[n_jobs++] = (edraft_job){.ds = &r->ds, .gen = r->grammar ? r->gen : NULL, .hist = r->s.toks,
                                         .n_hist = r->s.n_toks,
                                         .n_path = r->s.n_path, .k = k, .out = r->draft};
    }
    if (n_jobs == 0) return;
    const int32_t starved = edraft_run(e->drafter, e->jobs, n_jobs);
    for (int32_t j = 0; j < n_jobs; j++) {
        ereq *r = (ereq *)((char *)e->jobs[j].ds - offsetof(ereq, ds));
        r->s.n_draft = e->jobs[j].k;
        grammar_cut_draft(r);
    }
    if (starved > 0)
        for (sched_seq *q = s->wait_head; q; q = q->q_next) edraft_seq_drop(e->drafter, &((ereq *)q)->ds);
}

/* Drops cancelled requests (no callback) from the queue and the batch. */
static void reap_cancelled(engine *e) {
    sched *s = &e->sched;
    for (int32_t i = s->n_running - 1; i >= 0; i--) {
        ereq *r = (ereq *)s->running[i];
        if (!atomic_load(&r->cancelled)) continue;
        sched_remove(s, &r->s);
        e->requests_done++;
        req_retire(e, r);
    }
    for (sched_seq *q = s->wait_head, *next; q; q = next) {
        next = q->q_next;
        ereq *r = (ereq *)q;
        if (!atomic_load(&r->cancelled)) continue;
        sched_remove(s, q);
        e->requests_done++;
        req_retire(e, r);
    }
}

/* An embedding whose last chunk is computed: its vector in the DONE event; r is freed. */
static void finish_embed(engine *e, ereq *r) {
    const int32_t E = e->model->hp.n_embd;
    embed_pool_end(E, r->s.n_toks, r->ep.pooling, r->ep.normalize, r->esum, r->evec);
    sched_remove(&e->sched, &r->s);
    engine_event ev = {.kind = ENGINE_EV_DONE, .finish_reason = "stop", .embedding = r->evec, .n_embd = E};
    emit(e, r, &ev);
    e->requests_done++;
    req_retire(e, r);
}

static void run_step(engine *e, int32_t n) {
    int32_t nt = 0;
    for (int32_t i = 0; i < n; i++) {
        const sched_item *it = &e->items[i];
        const sched_seq *q = it->seq;
        const int32_t n_known = it->n_tok - it->n_draft; /* pending tokens, then the draft */
        memcpy(e->batch + nt, q->toks + q->n_computed, (size_t)n_known * sizeof *e->batch);
        if (it->n_draft > 0) memcpy(e->batch + nt + n_known, q->draft, (size_t)it->n_draft * sizeof *e->batch);
        e->fseqs[i] = (fwd_seq){.block_table = q->kv.blocks, .pos0 = q->n_computed, .n_tok = it->n_tok,
                                .n_out = it->n_out,
                                .attn_path = it->prompt_path ? ATTN_PATH_FLASH : ATTN_PATH_SPLITKV};
        nt += it->n_tok;
    }
    llama_forward_batch(e->ctx, e->batch, e->fseqs, n, e->logits);
    if (llama_forward_failed(e->model) != KITE_OK) { /* a streamed layer was unreadable (mem_budget): the
                                                        step's logits are garbage, its requests end with the error */
        for (int32_t i = 0; i < n; i++) fail_req(e, (ereq *)e->items[i].seq, KITE_E_IO);
        return;
    }
    e->steps++;
    /* embeddings pool their rows of the residual stream (before sched_advance: n_computed is the
     * item's first position; a sequence restarted at 0 after a preemption starts its sum afresh) */
    const int32_t E = e->model->hp.n_embd;
    for (int32_t i = 0, t = 0; i < n; t += e->items[i].n_tok, i++) {
        const sched_seq *q = e->items[i].seq;
        if (!q->embed) continue;
        ereq *r = (ereq *)(void *)e->items[i].seq;
        if (q->n_computed == 0 && r->esum) memset(r->esum, 0, sizeof *r->esum * (size_t)E);
        embed_pool_rows(e->model, e->ctx->x + (size_t)t * (size_t)E, e->items[i].n_tok, q->n_computed, q->n_toks,
                        r->ep.pooling, r->esum, r->evec, e->erow);
    }
    sched_advance(&e->sched, e->items, n);
    int32_t row = 0;
    for (int32_t i = 0; i < n; i++) {
        const sched_item *it = &e->items[i];
        if (it->seq->embed) {
            if (it->seq->n_computed == it->seq->n_toks) finish_embed(e, (ereq *)(void *)it->seq);
            continue;
        }
        if (!it->n_out) continue;
        const float *rows = e->logits + (size_t)row * (size_t)e->n_vocab;
        if (it->n_draft > 0) verify_draft(e, (ereq *)it->seq, rows, it->n_draft);
        else on_logits(e, (ereq *)it->seq, rows);
        row += it->n_out;
    }
}

/* No item could be planned although work is waiting: the only way out is to
 * fail a request (cannot happen with a pool of at least n_ctx positions). */
static void unstick(engine *e) {
    sched *s = &e->sched;
    ereq *r = s->n_running > 0 ? (ereq *)s->running[s->n_running - 1] : (ereq *)s->wait_head;
    if (!r) return;
    sched_remove(s, &r->s);
    finish(e, r, NULL, KITE_E_NOMEM, "the KV cache pool cannot hold this request");
}

static void publish_stats(engine *e) {
    int64_t alloc = 0, used = 0;
    sched_kv_usage(&e->sched, e->scratch, &alloc, &used);
    pthread_mutex_lock(&e->mu);
    engine_stats *st = &e->st;
    st->requests_done = e->requests_done;
    st->tokens_in = e->sched.tokens_in;
    st->tokens_out = e->tokens_out;
    st->prefix_hit_tokens = e->sched.prefix_hit_tokens;
    st->preemptions = e->sched.preemptions;
    st->steps = e->steps;
    st->queue_len = e->sched.n_wait;
    st->running = e->sched.n_running;
    st->kv_blocks_total = e->n_blocks;
    st->kv_blocks_used = kv_pool_n_used(e->kv);
    st->kv_blocks_cached = kv_pool_n_cached(e->kv);
    st->kv_slots_allocated = alloc;
    st->kv_slots_used = used;
    st->spec_drafted = e->spec_drafted;
    st->spec_accepted = e->spec_accepted;
    st->spec_verify_passes = e->spec_passes;
    st->spec_pool_drafts = e->spec_pool_drafts;
    if (e->drafter) {
        st->spec_draft_s = edraft_seconds(e->drafter);
        st->kv_draft_blocks_used = edraft_blocks_used(e->drafter);
    }
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg) {
    engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->in_head && sched_idle(&e->sched)) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        while (e->in_head) {
            ereq *r = e->in_head;
            e->in_head = r->in_next;
            r->in_next = NULL;
            sched_enqueue(&e->sched, &r->s);
        }
        e->in_tail = NULL;
        e->n_incoming = 0;
        pthread_mutex_unlock(&e->mu);

        reap_cancelled(e);
        if (!sched_idle(&e->sched)) {
            if (e->spec_n > 0 || e->drafter || e->la_w > 0) make_drafts(e);
            const int32_t n = sched_plan(&e->sched, e->items);
            note_admitted(e, n);
            if (n > 0) run_step(e, n); else unstick(e);
        }
        publish_stats(e);
    }
    return NULL;
}

/* ---- public API --------------------------------------------------------- */

int engine_new(kite_model *model, const engine_params *params, engine **out) {
    if (!model || !out) return err_set(KITE_E_ARG, "engine_new: model and out are required");
    engine_params p = params ? *params : engine_default_params();
    if (model->vocab_only) return model_err_vocab_only(model->path);
    if (model->tp_size > 1) /* its passes carry block tables, which llama_follow does not relay yet */
        return err_set(KITE_E_UNSUPPORTED, "%s: the serving engine does not run a tensor-split model yet",
                       model->path);
    const model_hparams *hp = &model->hp;
    if (p.n_parallel < 0 || p.n_parallel > 4096 || p.n_ctx < 0 || p.kv_mem_bytes < 0 || p.block_size < 0 ||
        p.block_size > 4096 || p.step_tokens < 0 || p.step_tokens > 65536 || p.n_threads < 0)
        return err_set(KITE_E_ARG, "engine_new: a parameter is out of range (n_parallel %d, n_ctx %d, "
                       "block_size %d, step_tokens %d)", p.n_parallel, p.n_ctx, p.block_size, p.step_tokens);
    if (p.spec_lookup_n < 0 || p.spec_lookup_n > 64 || p.spec_draft_max < 0 || p.spec_draft_max > SPEC_MAX_DRAFT)
        return err_set(KITE_E_ARG, "engine_new: spec_lookup_n %d (0..64) or spec_draft_max %d (0..%d) out of range",
                       p.spec_lookup_n, p.spec_draft_max, SPEC_MAX_DRAFT);
    if ((p.spec_lookup_n > 0) + (p.spec_draft_model != NULL) + (p.spec_skip_layers != NULL) +
            (p.spec_la_window > 0) > 1)
        return err_set(KITE_E_ARG, "engine_new: spec_lookup_n, spec_draft_model, spec_skip_layers and "
                       "spec_la_window are exclusive (one drafter at a time)");
    if (p.spec_la_window < 0 || (p.spec_la_window > 0 &&
            (p.spec_la_window > SPEC_MAX_DRAFT || p.spec_la_ngram < 2 || p.spec_la_ngram > p.spec_la_window + 1 ||
             p.spec_la_pool < 1 || p.spec_la_pool > 255)))
        return err_set(KITE_E_ARG, "engine_new: lookahead W,N,G = %d,%d,%d: need 1 <= W <= %d, 2 <= N <= W+1, "
                       "1 <= G <= 255", p.spec_la_window, p.spec_la_ngram, p.spec_la_pool, SPEC_MAX_DRAFT);
    if (p.spec_draft_kv_bytes < 0)
        return err_set(KITE_E_ARG, "engine_new: spec_draft_kv_bytes %lld < 0", (long long)p.spec_draft_kv_bytes);
    const bool model_drafter = p.spec_draft_model || p.spec_skip_layers;
    const int32_t n_parallel = p.n_parallel ? p.n_parallel : 4;
    int32_t n_ctx = p.n_ctx ? p.n_ctx : hp->n_ctx_train;
    const int32_t bs = p.block_size ? p.block_size : ENGINE_BLOCK_SIZE;
    int32_t step = p.step_tokens ? p.step_tokens : 512;
    if (step < n_parallel) step = n_parallel;
    const int64_t pos_bytes = 2 * (int64_t)hp->n_layer * hp->n_head_kv * hp->head_dim * (int64_t)sizeof(float);
    int64_t n_blocks = p.kv_mem_bytes ? p.kv_mem_bytes / (pos_bytes * bs)
                                      : (int64_t)n_parallel * (((int64_t)n_ctx + bs - 1) / bs);
    if (n_blocks < 1)
        return err_set(KITE_E_ARG, "engine_new: kv_mem_bytes %lld is less than one KV block (%lld bytes)",
                       (long long)p.kv_mem_bytes, (long long)(pos_bytes * bs));
    if (n_blocks * bs > (1 << 20))
        return err_set(KITE_E_ARG, "engine_new: KV pool of %lld positions is too large (max %d)",
                       (long long)(n_blocks * bs), 1 << 20);
    if (n_ctx > n_blocks * bs) n_ctx = (int32_t)(n_blocks * bs); /* one sequence must fit the pool */

    engine *e = calloc(1, sizeof *e);
    if (!e) return err_set(KITE_E_NOMEM, "engine_new: out of memory");
    /* first, so that engine_free can clean up after any failure below */
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->cb_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->model = model;
    e->n_vocab = hp->n_vocab;
    e->n_ctx = n_ctx;
    e->n_parallel = n_parallel;
    e->block_size = bs;
    e->n_blocks = (int32_t)n_blocks;
    e->step_tokens = step;
    e->spec_n = p.spec_lookup_n;
    e->draft_max = p.spec_draft_max ? p.spec_draft_max : 8;
    e->la_w = p.spec_la_window;
    e->la_n = p.spec_la_ngram;
    e->la_g = p.spec_la_pool;
    if (e->la_w > 0) e->draft_max = e->la_w; /* one Jacobi iteration = the whole window */
    e->n_rows = n_parallel;
    if (e->spec_n > 0 || model_drafter || e->la_w > 0) {
        const int64_t rows = (int64_t)n_parallel * (1 + e->draft_max);
        e->n_rows = rows < step ? (int32_t)rows : step;
    }
    int rc = ctx_new_sized(model, e->n_blocks * bs, step, bs, p.n_threads, &e->ctx);
    if (rc != KITE_OK) goto fail_early;
    ctx_set_rope_n_ctx(e->ctx, n_ctx); /* per sequence, not the pool: LongRoPE's choice as kite_ctx_eval makes it */
    rc = kv_pool_new(e->n_blocks, bs, !p.no_prefix_cache, &e->kv);
    if (rc != KITE_OK) goto fail_early;
    rc = sched_init(&e->sched, e->kv, n_parallel, step, copy_block_rows, e);
    if (rc != KITE_OK) goto fail_early;
    if (hp->sliding_window > 0 && hp->n_swa_layers == hp->n_layer) { /* blocks leave every layer's window */
        e->win = (attn_args){.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                             .n_ctx = e->ctx->n_ctx, .window = hp->sliding_window, .kv_type = e->ctx->kv_type};
        e->sched.first_read = first_read;
        e->sched.first_read_user = e;
    }
    e->items = calloc((size_t)n_parallel, sizeof *e->items);
    e->fseqs = calloc((size_t)n_parallel, sizeof *e->fseqs);
    e->batch = calloc((size_t)step, sizeof *e->batch);
    e->logits = malloc((size_t)e->n_rows * (size_t)e->n_vocab * sizeof *e->logits);
    e->scratch = malloc((size_t)e->n_blocks * sizeof *e->scratch);
    e->prob = malloc((size_t)e->n_vocab * sizeof *e->prob);
    e->resid = malloc((size_t)e->n_vocab * sizeof *e->resid);
    e->erow = malloc((size_t)hp->n_embd * sizeof *e->erow);
    if (!e->items || !e->fseqs || !e->batch || !e->logits || !e->scratch || !e->prob || !e->resid || !e->erow) {
        rc = err_set(KITE_E_NOMEM, "engine_new: out of memory");
        goto fail_early;
    }
    if (model_drafter) {
        const edraft_config dc = {.target = model, .draft_model = p.spec_draft_model,
                                  .skip_layers = p.spec_skip_layers, .n_skip = p.n_spec_skip,
                                  .n_parallel = n_parallel, .n_ctx = n_ctx, .block_size = bs, .step_tokens = step,
                                  .draft_max = e->draft_max, .kv_mem_bytes = p.spec_draft_kv_bytes,
                                  .n_blocks = e->n_blocks, .n_threads = p.n_threads,
                                  .prefix_cache = !p.no_prefix_cache};
        if ((rc = edraft_new(&dc, &e->drafter)) != KITE_OK) goto fail_early;
        e->jobs = calloc((size_t)n_parallel, sizeof *e->jobs);
        if (!e->jobs) {
            rc = err_set(KITE_E_NOMEM, "engine_new: out of memory");
            goto fail_early;
        }
    }
    e->st.kv_blocks_total = e->n_blocks;
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        rc = err_set(KITE_E_NOMEM, "engine_new: cannot start the engine thread");
        engine_free(e);
        return rc;
    }
    e->thread_started = true;
    *out = e;
    return KITE_OK;
fail_early:
    engine_free(e); /* the thread was not started: this only frees what exists */
    return rc;
}

void engine_free(engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    /* the thread is gone: every live request gets DONE "cancelled" */
    while (e->live) {
        ereq *r = e->live;
        engine_event ev = {.kind = ENGINE_EV_DONE, .finish_reason = "cancelled"};
        emit(e, r, &ev);
        e->live = r->reg_next;
        if (e->drafter) edraft_seq_drop(e->drafter, &r->ds);
        req_free(r);
    }
    edraft_free(e->drafter);
    free(e->jobs);
    sched_free(&e->sched);
    kv_pool_free(e->kv);
    kite_ctx_free(e->ctx);
    free(e->items);
    free(e->fseqs);
    free(e->batch);
    free(e->logits);
    free(e->scratch);
    free(e->prob);
    free(e->resid);
    free(e->erow);
    sbuf_free(&e->text);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->cb_mu);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* Checks a request against the engine's limits (kite_last_error set). */
static int check_req(const engine *e, const engine_req *req, engine_cb cb) {
    if (!req || !cb) return err_set(KITE_E_ARG, "engine_submit: request and callback are required");
    if (!req->prompt || req->n_prompt < 1) return err_set(KITE_E_ARG, "engine_submit: the prompt is empty");
    for (int32_t i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || req->prompt[i] >= e->n_vocab)
            return err_set(KITE_E_RANGE, "engine_submit: prompt token %d (index %d) is outside the vocabulary "
                           "[0, %d)", req->prompt[i], i, e->n_vocab);
    if (req->embed) {
        if (req->grammar) return err_set(KITE_E_ARG, "engine_submit: an embedding request takes no grammar");
        const kite_embed_params *ep = &req->embed_params;
        if (ep->pooling != KITE_POOLING_MEAN && ep->pooling != KITE_POOLING_LAST && ep->pooling != KITE_POOLING_CLS)
            return err_set(KITE_E_ARG, "engine_submit: unknown pooling %d", (int)ep->pooling);
        if (req->n_prompt > e->n_ctx)
            return err_set(KITE_E_RANGE, "engine_submit: input of %d tokens does not fit the context of %d tokens",
                           req->n_prompt, e->n_ctx);
        if (e->model->pos_embd.data && req->n_prompt > e->model->hp.n_ctx_train)
            return err_set(KITE_E_RANGE, "engine_submit: input of %d tokens is more than the model's %d positions",
                           req->n_prompt, e->model->hp.n_ctx_train);
        return KITE_OK;
    }
    if (req->n_prompt >= e->n_ctx)
        return err_set(KITE_E_RANGE, "engine_submit: prompt of %d tokens does not fit the context of %d tokens "
                       "(with room for one generated token)", req->n_prompt, e->n_ctx);
    if (req->max_tokens < 1)
        return err_set(KITE_E_ARG, "engine_submit: max_tokens must be >= 1 (got %d)", req->max_tokens);
    if (req->n_stop < 0 || (req->n_stop > 0 && !req->stop))
        return err_set(KITE_E_ARG, "engine_submit: %d stop strings but no array", req->n_stop);
    if (req->top_logprobs < 0 || req->top_logprobs > KITE_MAX_TOP_LOGPROBS)
        return err_set(KITE_E_ARG, "engine_submit: top_logprobs %d outside [0, %d]", (int)req->top_logprobs,
                       KITE_MAX_TOP_LOGPROBS);
    return KITE_OK;
}

int engine_submit(engine *e, const engine_req *req, engine_cb cb, void *user, uint64_t *id) {
    if (!e) return err_set(KITE_E_ARG, "engine_submit: engine is required");
    int rc = check_req(e, req, cb);
    if (rc != KITE_OK) return rc;
    ereq *r = calloc(1, sizeof *r);
    if (!r) return err_set(KITE_E_NOMEM, "engine_submit: out of memory");
    if (req->embed) { /* prompt only: no sampler, generator, stop filter or drafter state */
        const int32_t E = e->model->hp.n_embd;
        r->cb = cb;
        r->user = user;
        r->t_submit = time_now_s();
        r->ep = req->embed_params;
        atomic_init(&r->cancelled, false);
        kv_table_init(&r->s.kv);
        r->s.embed = true;
        r->s.client = req->client;
        r->s.n_prompt = r->s.n_toks = req->n_prompt;
        r->s.n_path = req->n_prompt > ATTN_SPLITKV_MAX_TOK ? req->n_prompt : 0; /* kite_ctx_embed's path */
        r->s.toks = malloc((size_t)req->n_prompt * sizeof *r->s.toks);
        r->evec = calloc((size_t)E, sizeof *r->evec);
        r->esum = r->ep.pooling == KITE_POOLING_MEAN ? calloc((size_t)E, sizeof *r->esum) : NULL;
        if (!r->s.toks || !r->evec || (r->ep.pooling == KITE_POOLING_MEAN && !r->esum)) {
            req_free(r);
            return err_set(KITE_E_NOMEM, "engine_submit: out of memory");
        }
        memcpy(r->s.toks, req->prompt, (size_t)req->n_prompt * sizeof *r->s.toks);
        goto queue;
    }
    const int32_t room = e->n_ctx - req->n_prompt;
    r->max_gen = req->max_tokens < room ? req->max_tokens : room;
    r->cb = cb;
    r->user = user;
    r->t_submit = time_now_s();
    r->greedy = req->sampling.temperature <= 0.0f;
    r->logprobs = req->logprobs;
    r->top_logprobs = req->top_logprobs;
    spec_adapt_init(&r->adapt, e->la_w > 0 ? e->la_w : 1, e->draft_max, e->la_w > 0);
    sampler_rng_seed(&r->rng_accept, req->sampling.seed ^ 0x5EC0ACCE97ull);
    atomic_init(&r->cancelled, false);
    kv_table_init(&r->s.kv);
    r->s.client = req->client;
    r->s.n_prompt = r->s.n_toks = req->n_prompt;
    r->s.n_path = req->n_prompt > ATTN_SPLITKV_MAX_TOK ? req->n_prompt : 0;
    r->s.toks = malloc((size_t)(req->n_prompt + r->max_gen) * sizeof *r->s.toks);
    if (!r->s.toks) {
        rc = err_set(KITE_E_NOMEM, "engine_submit: out of memory");
        goto fail;
    }
    memcpy(r->s.toks, req->prompt, (size_t)req->n_prompt * sizeof *r->s.toks);
    if ((rc = kite_sampler_new(&req->sampling, e->n_vocab, &r->smp)) != KITE_OK) goto fail;
    for (int32_t i = 0; i < req->n_prompt; i++) kite_sampler_accept(r->smp, req->prompt[i]);
    kite_gen_params gp = kite_gen_default_params();
    gp.sampler = r->smp;
    gp.n_predict = r->max_gen; /* already clipped to the context */
    gp.ignore_eos = req->ignore_eos;
    gp.grammar = req->grammar;
    if ((rc = kite_gen_new(e->model, &r->gen)) != KITE_OK) goto fail;
    if ((rc = kite_gen_begin(r->gen, &gp, req->n_prompt)) != KITE_OK) goto fail;
    const kite_token bos = kite_token_bos(e->model);
    if (req->prompt[req->n_prompt - 1] == bos && bos >= 0) {
        kite_gen_step st; /* only sets the detokenizer's after-BOS state */
        kite_gen_echo(r->gen, bos, &st);
    }
    if ((rc = stop_filter_init(&r->stop, req->stop, req->n_stop)) != KITE_OK) goto fail;
    if (e->drafter && (rc = edraft_seq_init(e->drafter, &r->ds, &req->sampling)) != KITE_OK) goto fail;

    r->grammar = req->grammar; /* ownership passes only now: every failure above leaves it to the caller */
queue:
    pthread_mutex_lock(&e->mu);
    r->id = ++e->next_id;
    r->reg_next = e->live;
    if (e->live) e->live->reg_prev = r;
    e->live = r;
    if (e->in_tail) e->in_tail->in_next = r; else e->in_head = r;
    e->in_tail = r;
    e->n_incoming++;
    e->st.requests_total++;
    if (r->s.embed) e->st.embed_total++;
    if (id) *id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return KITE_OK;
fail:
    req_free(r);
    return rc;
}

void engine_cancel(engine *e, uint64_t id) {
    if (!e) return;
    bool found = false;
    pthread_mutex_lock(&e->mu);
    for (ereq *r = e->live; r; r = r->reg_next)
        if (r->id == id) {
            atomic_store(&r->cancelled, true);
            found = true;
            break;
        }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    /* wait out a callback in flight, unless we are that callback */
    if (found && !(e->thread_started && pthread_equal(pthread_self(), e->thread))) {
        pthread_mutex_lock(&e->cb_mu);
        pthread_mutex_unlock(&e->cb_mu);
    }
}

void engine_set_logits_hook(engine *e, engine_logits_fn fn, void *hook_user) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->logits_hook = fn;
    e->logits_hook_user = fn ? hook_user : NULL;
    pthread_mutex_unlock(&e->mu);
}

void engine_get_stats(engine *e, engine_stats *out) {
    if (!e || !out) return;
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->queue_len += e->n_incoming;
    pthread_mutex_unlock(&e->mu);
}
