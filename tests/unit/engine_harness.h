/*
 * engine_harness.h - shared by the serving-engine tests (test_engine.c,
 * test_engine_spec.c): a request's events collected for comparison, request
 * specs, and plain single-sequence decoding with kite_ctx_eval as the
 * reference the engine must reproduce.  Include after harness.h; the test
 * loads g_model (the bundled model, MODEL) before using anything here.
 */
#ifndef KITE_TESTS_ENGINE_HARNESS_H
#define KITE_TESTS_ENGINE_HARNESS_H

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kite.h"
#include "engine/engine.h"

#define MODEL "models/stories260K.gguf"
#define MAX_TOK 512
#define TEXT_CAP 8192
#define N_VOCAB 512 /* the bundled model's vocabulary */

static kite_model *g_model;

/* ---- collecting a request's events -------------------------------------- */

typedef struct collect {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kite_token toks[MAX_TOK];
    int32_t n_toks;
    char text[TEXT_CAP];
    size_t n_text;
    int32_t n_events;      /* TEXT events */
    bool done;
    int kind;              /* final event kind */
    char reason[16];
    int32_t n_prompt, n_gen, n_cached;
    int cancel_after;      /* > 0: the callback cancels its request after this many tokens */
    int delay_ms;          /* > 0: each TEXT callback sleeps this long (a slow client) */
    uint64_t logit_hash[MAX_TOK]; /* hash of the bits of each logits row sampled from */
    int32_t n_logits;
    engine *e;
    uint64_t id;
} collect;

static inline void collect_init(collect *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static inline void collect_destroy(collect *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline void on_event(void *user, const engine_event *ev) {
    collect *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->kind == ENGINE_EV_TEXT) {
        c->n_events++;
        for (int32_t i = 0; i < ev->n_tokens && c->n_toks < MAX_TOK; i++) c->toks[c->n_toks++] = ev->tokens[i];
        if (c->n_text + ev->len < TEXT_CAP) {
            memcpy(c->text + c->n_text, ev->text, ev->len);
            c->n_text += ev->len;
            c->text[c->n_text] = '\0';
        }
    } else {
        c->done = true;
        c->kind = ev->kind;
        snprintf(c->reason, sizeof c->reason, "%s", ev->finish_reason ? ev->finish_reason : "");
        c->n_prompt = ev->n_prompt;
        c->n_gen = ev->n_gen;
        c->n_cached = ev->n_cached;
        pthread_cond_broadcast(&c->cv);
    }
    const bool cancel = c->cancel_after > 0 && c->n_toks >= c->cancel_after && !c->done;
    const int delay = ev->kind == ENGINE_EV_TEXT ? c->delay_ms : 0;
    pthread_mutex_unlock(&c->mu);
    if (delay > 0) sleep_ms(delay);
    if (cancel) engine_cancel(c->e, c->id); /* allowed from a callback */
}

/* FNV-1a over the bytes of a logits row: equal hashes <=> (practically)
 * bit-identical rows. */
static inline uint64_t row_hash(const float *x, int32_t n) {
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < (size_t)n * sizeof *x; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static inline void on_logits(void *hook_user, void *req_user, const float *logits, int32_t n_vocab) {
    (void)hook_user;
    collect *c = req_user;
    pthread_mutex_lock(&c->mu);
    if (c->n_logits < MAX_TOK) c->logit_hash[c->n_logits++] = row_hash(logits, n_vocab);
    pthread_mutex_unlock(&c->mu);
}

/* Waits up to `seconds` for *done (set under mu, cv broadcast); false on
 * timeout.  For every collector of engine events. */
static inline bool harness_wait_done(pthread_mutex_t *mu, pthread_cond_t *cv, const bool *done, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)seconds;
    pthread_mutex_lock(mu);
    int rc = 0;
    while (!*done && rc == 0) rc = pthread_cond_timedwait(cv, mu, &ts);
    const bool ok = *done;
    pthread_mutex_unlock(mu);
    return ok;
}

/* Waits up to `seconds` for the final event; false on timeout. */
static inline bool collect_wait(collect *c, double seconds) {
    return harness_wait_done(&c->mu, &c->cv, &c->done, seconds);
}


/* Stats are published after each step, so a request's DONE callback may run
 * before they show it: waits until requests_done reaches n (2 s at most). */
static inline void stats_after(engine *e, int64_t n, engine_stats *st) {
    for (int i = 0; i < 2000; i++) {
        engine_get_stats(e, st);
        if (st->requests_done >= n) return;
        sleep_ms(1);
    }
}

/* ---- requests and the plain reference ----------------------------------- */

typedef struct req_spec {
    kite_token prompt[MAX_TOK];
    int32_t n_prompt;
    int32_t max_tokens;
    bool ignore_eos;
    float temperature;
    bool no_filters;    /* top-k, top-p and min-p off: the whole distribution */
    uint64_t seed;
} req_spec;

static inline void spec_from_text(req_spec *r, const char *text, int32_t max_tokens) {
    memset(r, 0, sizeof *r);
    size_t n = 0;
    int rc = kite_tokenize(g_model, text, strlen(text), true, r->prompt, MAX_TOK, &n);
    CHECK_EQ_INT(rc, KITE_OK);
    r->n_prompt = (int32_t)n;
    r->max_tokens = max_tokens;
}

static inline engine_req to_req(const req_spec *r) {
    engine_req q = {.prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->max_tokens,
                    .ignore_eos = r->ignore_eos};
    q.sampling = kite_sampler_default_params();
    q.sampling.temperature = r->temperature;
    q.sampling.seed = r->seed ? r->seed : q.sampling.seed;
    if (r->no_filters) {
        q.sampling.top_k = 0;
        q.sampling.top_p = 1.0f;
        q.sampling.min_p = 0.0f;
    }
    return q;
}

/* Engine parameters of the tests: the given pool and batch shape, one
 * thread; callers add their drafter settings. */
static inline engine_params harness_params(int32_t n_parallel, int32_t n_ctx, int64_t kv_mem, int32_t step_tokens) {
    engine_params p = engine_default_params();
    p.n_parallel = n_parallel;
    p.n_ctx = n_ctx;
    p.kv_mem_bytes = kv_mem;
    p.step_tokens = step_tokens;
    p.n_threads = 1;
    return p;
}

/* An engine on g_model with the logits hook that fills collect's hashes;
 * NULL (and a failed check) when engine_new refuses p. */
static inline engine *harness_engine(const engine_params *p) {
    engine *e = NULL;
    int rc = engine_new(g_model, p, &e);
    CHECK_MSG(rc == KITE_OK, "engine_new: %s", kite_last_error());
    if (e) engine_set_logits_hook(e, on_logits, NULL);
    return e;
}

/* Submits all specs at once (one thread) and waits for them. */
static inline void run_all(engine *e, const req_spec *specs, int32_t n, collect *out) {
    for (int32_t i = 0; i < n; i++) collect_init(&out[i]);
    for (int32_t i = 0; i < n; i++) {
        engine_req q = to_req(&specs[i]);
        CHECK_EQ_INT(engine_submit(e, &q, on_event, &out[i], NULL), KITE_OK);
    }
    for (int32_t i = 0; i < n; i++) CHECK_MSG(collect_wait(&out[i], 60), "request %d did not finish", i);
}

/* Plain single-sequence decoding with kite_ctx_eval: what the engine must
 * reproduce (stop on EOG or BOS unless ignore_eos, at most max_tokens).
 * Fills out's tokens, text and logits hashes (reset first). */
static inline void reference(const req_spec *r, collect *out) {
    out->n_toks = 0;
    out->n_text = 0;
    out->n_logits = 0;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = MAX_TOK;
    cp.n_threads = 1;
    kite_ctx *ctx = NULL;
    kite_sampler *smp = NULL;
    kite_detok *dt = NULL;
    engine_req q = to_req(r);
    CHECK_EQ_INT(kite_ctx_new(g_model, &cp, &ctx), KITE_OK);
    CHECK_EQ_INT(kite_sampler_new(&q.sampling, N_VOCAB, &smp), KITE_OK);
    CHECK_EQ_INT(kite_detok_new(g_model, &dt), KITE_OK);
    const kite_token bos = kite_token_bos(g_model);
    char piece[1024];
    if (r->prompt[r->n_prompt - 1] == bos) kite_detok_push(dt, bos, piece, sizeof piece);
    for (int32_t i = 0; i < r->n_prompt; i++) kite_sampler_accept(smp, r->prompt[i]);
    CHECK_EQ_INT(kite_ctx_eval(ctx, r->prompt, r->n_prompt, false), KITE_OK);
    for (int32_t g = 0; g < r->max_tokens; g++) {
        out->logit_hash[out->n_logits++] = row_hash(kite_ctx_logits(ctx, -1), N_VOCAB);
        kite_token t = kite_sampler_sample(smp, kite_ctx_logits(ctx, -1));
        if (!r->ignore_eos && (kite_token_is_eog(g_model, t) || t == bos)) break;
        kite_sampler_accept(smp, t);
        out->toks[out->n_toks++] = t;
        int k = kite_detok_push(dt, t, piece, sizeof piece);
        if (k > 0 && out->n_text + (size_t)k < TEXT_CAP) {
            memcpy(out->text + out->n_text, piece, (size_t)k);
            out->n_text += (size_t)k;
        }
        if (g + 1 < r->max_tokens) CHECK_EQ_INT(kite_ctx_eval(ctx, &t, 1, false), KITE_OK);
    }
    int k = kite_detok_flush(dt, piece, sizeof piece);
    if (k > 0) {
        memcpy(out->text + out->n_text, piece, (size_t)k);
        out->n_text += (size_t)k;
    }
    out->text[out->n_text] = '\0';
    kite_detok_free(dt);
    kite_sampler_free(smp);
    kite_ctx_free(ctx);
}

static inline bool same_output(const collect *a, const collect *b) {
    return a->n_toks == b->n_toks && memcmp(a->toks, b->toks, (size_t)a->n_toks * sizeof *a->toks) == 0 &&
           a->n_text == b->n_text && memcmp(a->text, b->text, a->n_text) == 0;
}

/* Every logits row sampled from is bit-identical (both sides hooked). */
static inline bool same_logits(const collect *a, const collect *b) {
    return a->n_logits == b->n_logits && a->n_logits > 0 &&
           memcmp(a->logit_hash, b->logit_hash, (size_t)a->n_logits * sizeof *a->logit_hash) == 0;
}

/* ---- comparing two samples of sampled tokens (temperature > 0 tests) ------ */

/* Chi-square statistic of homogeneity for two samples over `n` bins. */
static inline double chi2_two_samples(const int32_t *a, const int32_t *b, int32_t n, double na, double nb, int32_t *dof) {
    double x = 0.0;
    *dof = -1;
    for (int32_t i = 0; i < n; i++) {
        const double tot = (double)a[i] + (double)b[i];
        if (tot <= 0.0) continue;
        const double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        x += ((double)a[i] - ea) * ((double)a[i] - ea) / ea + ((double)b[i] - eb) * ((double)b[i] - eb) / eb;
        (*dof)++;
    }
    return x;
}

/* Bins of the pairs keys[0][0..n) and keys[1][0..n): the BINS-1 most
 * frequent pairs over both samples get a bin each, all others share the
 * last one; fills hist[2][BINS]. */
enum { BINS = 16 };
static inline void bin_pairs(const uint32_t *const keys[2], int32_t n, int32_t hist[2][BINS]) {
    static uint32_t uniq[4096];
    static int32_t count[4096];
    int32_t n_uniq = 0;
    for (int s = 0; s < 2; s++)
        for (int32_t i = 0; i < n; i++) {
            int32_t u = 0;
            while (u < n_uniq && uniq[u] != keys[s][i]) u++;
            if (u == n_uniq) {
                uniq[n_uniq] = keys[s][i];
                count[n_uniq++] = 0;
            }
            count[u]++;
        }
    /* selection of the most frequent (ties: first seen) */
    static uint32_t top[BINS - 1];
    int32_t n_top = 0;
    for (; n_top < BINS - 1 && n_top < n_uniq; n_top++) {
        int32_t best = -1;
        for (int32_t u = 0; u < n_uniq; u++)
            if (count[u] >= 0 && (best < 0 || count[u] > count[best])) best = u;
        top[n_top] = uniq[best];
        count[best] = -1;
    }
    memset(hist, 0, 2 * BINS * sizeof **hist);
    for (int s = 0; s < 2; s++)
        for (int32_t i = 0; i < n; i++) {
            int32_t b = 0;
            while (b < n_top && top[b] != keys[s][i]) b++;
            hist[s][b < n_top ? b : BINS - 1]++;
        }
}


/* The verdict of a temperature-1 test: pairs[0] (plain) and pairs[1]
 * (speculative) hold each request's first two tokens; both branches of the
 * rejection rule must have run, and the two samples must agree in a
 * chi-square test of homogeneity, far tail only (about p < 1e-4 at 15
 * degrees of freedom, where chi-square 44.3 is p = 1e-4; always accepting
 * the drafts scores several times higher). */
static inline void check_same_pair_distribution(const uint32_t *plain, const uint32_t *spec, int32_t n,
                                                long long accepted, long long rejected) {
    CHECK(accepted > 0 && rejected > 0);
    const uint32_t *const keys[2] = {plain, spec};
    int32_t hist[2][BINS];
    bin_pairs(keys, n, hist);
    int32_t dof = 0;
    const double x = chi2_two_samples(hist[0], hist[1], BINS, n, n, &dof);
    const double limit = dof + 6.0 * sqrt(2.0 * (dof > 0 ? dof : 1));
    printf("  sampling: chi-square %.1f, %d degrees of freedom (limit %.1f), %lld drafts accepted, %lld not\n", x,
           dof, limit, accepted, rejected);
    CHECK_MSG(dof > 0 && x < limit, "chi-square %.1f with %d degrees of freedom (limit %.1f)", x, dof, limit);
}

#endif
