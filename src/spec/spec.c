/*
 * spec.c - the speculative decoder: drafting, one batched verification per
 * step, acceptance, KV rollback and statistics (design in spec.h).
 */
#include "spec/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "model/context.h"
#include "spec/accept.h"
#include "spec/lookahead.h"
#include "spec/lookup.h"

/* Token strings compared between target and draft vocabularies: the first
 * VOCAB_CHECK_HEAD ids plus VOCAB_CHECK_SPREAD ids spread over the rest. */
#define VOCAB_CHECK_HEAD 32
#define VOCAB_CHECK_SPREAD 64

struct spec_decoder {
    spec_params p;
    kite_ctx *target;       /* borrowed */
    kite_ctx *dctx;         /* draft context (model / self drafters), owned, or NULL */
    kite_sampler *ts;       /* target sampler: the caller's parameters, penalties included */
    kite_sampler *ds;       /* draft sampler: same chain without penalties, or NULL */
    bool greedy;            /* temperature <= 0 */
    int32_t n_vocab;
    kite_token *hist;       /* [hist_cap] prompt + generated tokens */
    int32_t n_hist, hist_cap;
    kite_token verify[SPEC_MAX_DRAFT + 1]; /* pending token + drafts of a step */
    float *q;               /* [SPEC_MAX_DRAFT][n_vocab] draft distributions (sampling, model drafters) */
    float *prob;            /* [n_vocab] target distribution of one position */
    float *scratch;         /* [n_vocab] residual max(0, p - q) */
    sampler_rng rng_accept; /* acceptance decisions and replacements */
    sampler_rng rng_draft;  /* draws from q */
    spec_adapt adapt;
    spec_la la;             /* lookahead state (SPEC_DRAFT_LOOKAHEAD) */
    kite_token pred[SPEC_MAX_DRAFT + 1]; /* argmax of each verified row (lookahead) */
    spec_stats stats;
    kite_gen *gen;          /* spec_set_grammar: the grammar's state after the history, owned, or NULL */
    bool begun;
};

spec_params spec_default_params(void) {
    spec_params p = {.lookup_n = 3, .la_window = 8, .la_ngram = 4, .la_pool = 8, .draft_max = 8, .draft_min = 1,
                     .seed = 0x5ECu};
    return p;
}

void spec_free(spec_decoder *d) {
    if (!d) return;
    kite_ctx_free(d->dctx);
    kite_gen_free(d->gen);
    spec_la_free(&d->la);
    kite_sampler_free(d->ts);
    kite_sampler_free(d->ds);
    free(d->hist);
    free(d->q);
    free(d->prob);
    free(d->scratch);
    free(d);
}

/* Shared with the serving engine's draft model (contract in spec.h). */
int spec_check_vocab(const kite_model *t, const kite_model *dm) {
    kite_model_info ti, di;
    kite_model_get_info(t, &ti);
    kite_model_get_info(dm, &di);
    if (ti.n_vocab != di.n_vocab)
        return err_set(KITE_E_UNSUPPORTED, "draft model '%s': vocabulary of %d tokens, the target has %d",
                       dm->path, di.n_vocab, ti.n_vocab);
    const int32_t n = ti.n_vocab;
    const int32_t stride = n / VOCAB_CHECK_SPREAD > 0 ? n / VOCAB_CHECK_SPREAD : 1;
    for (int32_t i = 0; i < VOCAB_CHECK_HEAD + VOCAB_CHECK_SPREAD; i++) {
        const int32_t id = i < VOCAB_CHECK_HEAD ? i : (i - VOCAB_CHECK_HEAD) * stride + stride / 2;
        if (id >= n) continue;
        const char *a = NULL, *b = NULL;
        char ba[8], bb[8];
        int la = kite_token_to_piece(t, id, &a, ba), lb = kite_token_to_piece(dm, id, &b, bb);
        if (la != lb || (la > 0 && memcmp(a, b, (size_t)la) != 0))
            return err_set(KITE_E_UNSUPPORTED, "draft model '%s': token %d differs from the target's vocabulary",
                           dm->path, id);
    }
    return KITE_OK;
}

int spec_new(kite_ctx *target, const kite_sampler_params *sp, const spec_params *p, spec_decoder **out) {
    if (!target || !sp || !p || !out) return err_set(KITE_E_ARG, "spec_new: target, sp, p and out are required");
    if (p->draft_max < 1 || p->draft_max > SPEC_MAX_DRAFT)
        return err_set(KITE_E_ARG, "speculative: draft length %d out of range [1, %d]", p->draft_max,
                       SPEC_MAX_DRAFT);
    kite_model *tm = target->model;
    const int32_t n_vocab = tm->hp.n_vocab;
    int rc = KITE_OK;
    switch (p->drafter) {
    case SPEC_DRAFT_MODEL:
        if (!p->draft_model) return err_set(KITE_E_ARG, "speculative: no draft model given");
        if (p->draft_model->vocab_only)
            return err_set(KITE_E_ARG, "draft model '%s' has no weights", p->draft_model->path);
        if ((rc = spec_check_vocab(tm, p->draft_model)) != KITE_OK) return rc;
        break;
    case SPEC_DRAFT_SELF:
        if (!p->skip_layers || p->n_skip != tm->hp.n_layer)
            return err_set(KITE_E_ARG, "speculative: %d layer-skip flags for a model of %d layers", p->n_skip,
                           tm->hp.n_layer);
        break;
    case SPEC_DRAFT_LOOKUP:
        if (p->lookup_n < 1) return err_set(KITE_E_ARG, "speculative: lookup n-gram size %d < 1", p->lookup_n);
        break;
    case SPEC_DRAFT_LOOKAHEAD:
        if (p->la_window < 1 || p->la_window > SPEC_MAX_DRAFT || p->la_ngram < 2 || p->la_ngram > p->la_window + 1 ||
            p->la_pool < 1 || p->la_pool > 255)
            return err_set(KITE_E_ARG, "lookahead W,N,G = %d,%d,%d: need 1 <= W <= %d, 2 <= N <= W+1, 1 <= G <= 255",
                           p->la_window, p->la_ngram, p->la_pool, SPEC_MAX_DRAFT);
        break;
    default:
        return err_set(KITE_E_ARG, "speculative: unknown drafter %d", (int)p->drafter);
    }

    spec_decoder *d = calloc(1, sizeof *d);
    if (!d) return err_set(KITE_E_NOMEM, "out of memory");
    d->p = *p;
    d->p.skip_layers = NULL; /* copied into the draft context below */
    d->target = target;
    d->n_vocab = n_vocab;
    d->greedy = sp->temperature <= 0.0f;
    if (p->drafter == SPEC_DRAFT_LOOKAHEAD) /* one Jacobi iteration = the whole window */
        spec_adapt_init(&d->adapt, p->la_window, p->la_window, true);
    else
        spec_adapt_init(&d->adapt, p->draft_min, p->draft_max, p->fixed_k);
    sampler_rng_seed(&d->rng_accept, p->seed);
    sampler_rng_seed(&d->rng_draft, p->seed ^ 0x9E3779B97F4A7C15ull);
    if ((rc = kite_sampler_new(sp, n_vocab, &d->ts)) != KITE_OK) goto fail;
    d->prob = malloc((size_t)n_vocab * sizeof *d->prob);
    d->scratch = malloc((size_t)n_vocab * sizeof *d->scratch);
    d->hist_cap = 256;
    d->hist = malloc((size_t)d->hist_cap * sizeof *d->hist);
    if (!d->prob || !d->scratch || !d->hist) goto nomem;
    if (p->drafter == SPEC_DRAFT_MODEL || p->drafter == SPEC_DRAFT_SELF) {
        kite_sampler_params dp = *sp;
        dp.repeat_penalty = 1.0f;
        dp.frequency_penalty = 0.0f;
        dp.presence_penalty = 0.0f;
        dp.penalty_last_n = 0;
        dp.seed = p->seed ^ 0xD4AF7ull;
        kite_ctx_params cp = kite_ctx_default_params();
        cp.n_ctx = target->n_ctx;
        cp.n_threads = target->n_threads;
        kite_model *dm = p->drafter == SPEC_DRAFT_MODEL ? p->draft_model : tm;
        if ((rc = kite_sampler_new(&dp, n_vocab, &d->ds)) != KITE_OK) goto fail;
        if ((rc = kite_ctx_new(dm, &cp, &d->dctx)) != KITE_OK) goto fail;
        if (p->drafter == SPEC_DRAFT_SELF &&
            (rc = kite_ctx_set_skip_layers(d->dctx, p->skip_layers, p->n_skip)) != KITE_OK)
            goto fail;
        if (!d->greedy) {
            d->q = malloc((size_t)SPEC_MAX_DRAFT * (size_t)n_vocab * sizeof *d->q);
            if (!d->q) goto nomem;
        }
    }
    *out = d;
    return KITE_OK;
nomem:
    rc = err_set(KITE_E_NOMEM, "out of memory for the speculative decoder");
fail:
    spec_free(d);
    return rc;
}

static int hist_push(spec_decoder *d, const kite_token *t, int32_t n) {
    if (d->n_hist + n > d->hist_cap) {
        int32_t cap = d->hist_cap;
        while (cap < d->n_hist + n) cap *= 2;
        kite_token *h = realloc(d->hist, (size_t)cap * sizeof *h);
        if (!h) return err_set(KITE_E_NOMEM, "out of memory for the token history");
        d->hist = h;
        d->hist_cap = cap;
    }
    memcpy(d->hist + d->n_hist, t, (size_t)n * sizeof *t);
    d->n_hist += n;
    return KITE_OK;
}

int spec_set_grammar(spec_decoder *d, const kite_grammar *grammar, bool ignore_eos) {
    if (!d || !grammar) return err_set(KITE_E_ARG, "spec_set_grammar: NULL argument");
    if (d->begun || d->gen) return err_set(KITE_E_STATE, "spec_set_grammar: call it once, before spec_begin");
    kite_gen *g = NULL;
    int rc = kite_gen_new(d->target->model, &g);
    if (rc != KITE_OK) return rc;
    /* only the grammar and the end rules: the caller's generator applies the limits */
    kite_gen_params gp = kite_gen_default_params();
    gp.n_predict = INT64_MAX;
    gp.ignore_eos = ignore_eos;
    gp.grammar = grammar;
    if ((rc = kite_gen_begin(g, &gp, 0)) != KITE_OK) {
        kite_gen_free(g);
        return rc;
    }
    d->gen = g;
    return KITE_OK;
}

/* Advances the grammar over an output token t; *ended: the generation ends with it. */
static int gen_advance(spec_decoder *d, kite_token t, bool *ended) {
    kite_gen_step st;
    int rc = kite_gen_push(d->gen, t, &st);
    *ended = rc == KITE_OK && st.stop != KITE_STOP_NONE;
    return rc;
}

int spec_begin(spec_decoder *d, const kite_token *prompt, int32_t n) {
    if (!d || !prompt || n < 1) return err_set(KITE_E_ARG, "spec_begin: a prompt of at least one token is required");
    if (d->begun || d->target->n_past != 0)
        return err_set(KITE_E_STATE, "spec_begin: the decoder has begun already or the target context is not empty");
    int rc = hist_push(d, prompt, n);
    if (rc != KITE_OK) return rc;
    if (d->p.drafter == SPEC_DRAFT_LOOKAHEAD &&
        (rc = spec_la_init(&d->la, d->p.la_window, d->p.la_ngram, d->p.la_pool, prompt, n)) != KITE_OK)
        return rc;
    if (d->p.drafter == SPEC_DRAFT_LOOKAHEAD) spec_la_add_history(&d->la, d->hist, d->n_hist, 0);
    for (int32_t i = 0; i < n; i++) kite_sampler_accept(d->ts, prompt[i]);
    /* the prompt's last token is evaluated by the first verification pass: it still takes the prompt's
     * attention path, as in plain decoding's one-pass prefill (bit-identical logits, context.h) */
    if ((rc = ctx_set_prompt(d->target, n)) != KITE_OK) return rc;
    if (n > 1 && (rc = kite_ctx_eval(d->target, prompt, n - 1, false)) != KITE_OK) return rc;
    d->begun = true;
    return KITE_OK;
}

/* Drafts up to k tokens into verify[1..]; *nd receives the count.  Model
 * drafters first catch their context up to the whole history. */
static int draft(spec_decoder *d, int32_t k, int32_t *nd) {
    *nd = 0;
    if (d->p.drafter == SPEC_DRAFT_LOOKUP) {
        *nd = spec_lookup_draft(d->hist, d->n_hist, d->p.lookup_n, k, d->verify + 1);
        return KITE_OK;
    }
    if (d->p.drafter == SPEC_DRAFT_LOOKAHEAD) {
        int from_pool;
        *nd = spec_la_draft(&d->la, d->hist[d->n_hist - 1], k, d->verify + 1, &from_pool);
        d->stats.n_pool_drafts += from_pool;
        return KITE_OK;
    }
    kite_ctx *D = d->dctx;
    const int32_t m = D->n_past; /* <= n_hist - 1 by the truncation after each step */
    int rc = kite_ctx_eval(D, d->hist + m, d->n_hist - m, false);
    /* under a grammar the draft model samples from its masked logits, advancing a draft state
     * (kite_gen_draft_*): every draft token is allowed, and q is the masked distribution */
    if (rc == KITE_OK && d->gen) rc = kite_gen_draft_begin(d->gen);
    for (int32_t i = 0; i < k && rc == KITE_OK; i++) {
        const float *logits = kite_ctx_logits(D, -1);
        if (d->gen && (rc = kite_gen_draft_masked_logits(d->gen, logits, &logits)) != KITE_OK) break;
        kite_token t;
        if (d->greedy) {
            t = kite_sampler_sample(d->ds, logits);
        } else {
            float *q = d->q + (size_t)i * (size_t)d->n_vocab;
            spec_probs(d->ds, logits, d->n_vocab, q);
            t = spec_draw(q, d->n_vocab, &d->rng_draft);
        }
        d->verify[1 + i] = t;
        (*nd)++;
        bool more = true;
        if (d->gen && (rc = kite_gen_draft_push(d->gen, t, &more)) != KITE_OK) break;
        if (!more) break; /* t ends the generation: nothing after it can be kept */
        if (i + 1 < k) rc = kite_ctx_eval(D, &t, 1, false);
    }
    return rc;
}

int spec_step(spec_decoder *d, int32_t max_new, kite_token *out, int32_t *n_out) {
    if (!d || !out || !n_out || max_new < 1) return err_set(KITE_E_ARG, "spec_step: bad arguments");
    if (!d->begun) return err_set(KITE_E_STATE, "spec_step: call spec_begin first");
    *n_out = 0;
    kite_ctx *T = d->target;
    const int32_t n = d->n_hist;
    const int32_t room = T->n_ctx - (n - 1); /* positions left for the pending token + drafts */
    if (room < 1) return err_set(KITE_E_RANGE, "context full: %d positions", T->n_ctx);
    int32_t k = d->adapt.k;
    if (k > room - 1) k = room - 1;
    if (k > max_new - 1) k = max_new - 1;

    double t0 = time_now_s();
    int32_t nd = 0;
    int rc = k > 0 ? draft(d, k, &nd) : KITE_OK;
    if (rc != KITE_OK) return rc;
    if (d->gen && nd > 0) {
        /* drafts the grammar refuses end the draft: under greedy acceptance, or a point-mass draft
         * (lookup, lookahead), such a token would be rejected for sure and its replacement drawn from
         * the masked p, which is what the row before it gives now.  A sampled model draft keeps its
         * first refused token, so that the rejection rule draws the replacement from the residual
         * (p - q)+ as it must for the output to stay distributed as p */
        int32_t ok = 0;
        if ((rc = kite_gen_check_draft(d->gen, d->verify + 1, nd, &ok)) != KITE_OK) return rc;
        if (d->greedy || !d->q) nd = ok;
        else if (ok + 1 < nd) nd = ok + 1;
    }
    double t1 = time_now_s();
    d->verify[0] = d->hist[n - 1];
    if ((rc = kite_ctx_eval(T, d->verify, nd + 1, true)) != KITE_OK) return rc;

    /* under a grammar every row is judged on the masked logits of the state the accepted tokens
     * reached, as plain decoding under the grammar would see them */
    int32_t j = 0;
    kite_token x = -1;
    bool rejected = false, ended = false;
    for (int32_t i = 0; i < nd; i++) {
        const float *logits = kite_ctx_logits(T, i);
        if (d->gen && (rc = kite_gen_masked_logits(d->gen, logits, &logits)) != KITE_OK) return rc;
        const kite_token dt = d->verify[1 + i];
        if (d->greedy) {
            x = kite_sampler_sample(d->ts, logits);
            rejected = x != dt;
        } else {
            spec_probs(d->ts, logits, d->n_vocab, d->prob);
            const float *q = d->q ? d->q + (size_t)i * (size_t)d->n_vocab : NULL; /* NULL: lookup point mass */
            rejected = !spec_accept(d->prob, q, dt, d->n_vocab, &d->rng_accept, d->scratch, &x);
        }
        if (rejected) break;
        kite_sampler_accept(d->ts, dt);
        if (d->gen && (rc = gen_advance(d, dt, &ended)) != KITE_OK) return rc;
        if (ended) { /* the grammar's end or an end token: dt is the step's last token */
            x = dt;
            break;
        }
        out[j++] = dt;
    }
    if (!ended) {
        if (!rejected) { /* bonus token */
            const float *logits = kite_ctx_logits(T, nd);
            if (d->gen && (rc = kite_gen_masked_logits(d->gen, logits, &logits)) != KITE_OK) return rc;
            x = kite_sampler_sample(d->ts, logits);
        }
        kite_sampler_accept(d->ts, x);
        if (d->gen && (rc = gen_advance(d, x, &ended)) != KITE_OK) return rc;
    }
    out[j] = x;
    *n_out = j + 1;

    if (d->p.drafter == SPEC_DRAFT_LOOKAHEAD) {
        /* the pass's argmax on every row: the next Jacobi iterate and the pool's n-grams */
        for (int32_t i = 0; i <= nd; i++) {
            const float *lg = kite_ctx_logits(T, i);
            kite_token best = 0;
            for (int32_t v = 1; v < d->n_vocab; v++)
                if (lg[v] > lg[best]) best = v;
            d->pred[i] = best;
        }
        d->pred[j] = x; /* the token actually taken (equal to the argmax when greedy) */
        spec_la_update(&d->la, d->verify, d->pred, nd, j);
    }

    /* roll back: keep h[0..n) and the j accepted drafts; x is the new pending token */
    /* at most SPEC_MAX_DRAFT positions back: always possible, also with a
     * sliding-window ring of window + n_batch - 1 rows (kite_ctx_truncate) */
    if ((rc = kite_ctx_truncate(T, n + j)) != KITE_OK) return rc;
    if (d->dctx && d->dctx->n_past > n + j && (rc = kite_ctx_truncate(d->dctx, n + j)) != KITE_OK) return rc;
    double t2 = time_now_s();
    if ((rc = hist_push(d, out, j + 1)) != KITE_OK) return rc;
    if (d->p.drafter == SPEC_DRAFT_LOOKAHEAD) spec_la_add_history(&d->la, d->hist, d->n_hist, n);

    d->stats.n_steps++;
    d->stats.n_drafted += nd;
    d->stats.n_accepted += j + (ended && !rejected && j < nd); /* a draft that ended the generation */
    d->stats.n_generated += j + 1;
    d->stats.t_draft_s += t1 - t0;
    d->stats.t_verify_s += t2 - t1;
    if (nd > 0) spec_adapt_update(&d->adapt, j, rejected);
    return KITE_OK;
}

const spec_stats *spec_get_stats(const spec_decoder *d) { return &d->stats; }
int32_t spec_draft_len(const spec_decoder *d) { return d->adapt.k; }

int spec_parse_lookahead(const char *s, spec_params *p) {
    int w = 0, n = 0, g = 0, used = 0;
    if (!s || !p || sscanf(s, "%d,%d,%d%n", &w, &n, &g, &used) != 3 || s[used] != '\0')
        return err_set(KITE_E_ARG, "lookahead '%s': expected W,N,G, e.g. 8,4,8", s ? s : "");
    if (w < 1 || w > SPEC_MAX_DRAFT || n < 2 || n > w + 1 || g < 1 || g > 255)
        return err_set(KITE_E_ARG, "lookahead '%s': need 1 <= W <= %d, 2 <= N <= W+1, 1 <= G <= 255", s,
                       SPEC_MAX_DRAFT);
    p->la_window = w;
    p->la_ngram = n;
    p->la_pool = g;
    return KITE_OK;
}

int spec_parse_layers(const char *list, int32_t n_layer, bool *flags) {
    if (!list || !flags || n_layer < 1) return err_set(KITE_E_ARG, "layer list: bad arguments");
    memset(flags, 0, (size_t)n_layer * sizeof *flags);
    const char *s = list;
    bool any = false;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b;
        if (end == s) goto bad;
        b = a;
        s = end;
        if (*s == '-') {
            s++;
            b = strtol(s, &end, 10);
            if (end == s) goto bad;
            s = end;
        }
        if (a < 0 || b < a || b >= n_layer)
            return err_set(KITE_E_ARG, "layer list '%s': range %ld-%ld outside the model's layers 0..%d", list, a, b,
                           n_layer - 1);
        for (long l = a; l <= b; l++) flags[l] = true;
        any = true;
        if (*s == ',') s++;
        else if (*s) goto bad;
    }
    if (!any) goto bad;
    return KITE_OK;
bad:
    return err_set(KITE_E_ARG, "layer list '%s': expected comma-separated layers or ranges, e.g. '2,3' or '1-3'",
                   list);
}
