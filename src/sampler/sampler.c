/*
 * sampler.c - token sampling: a fixed chain of stages over the logits.
 *
 * DESIGN
 *   kite_sampler_sample() copies the logits into a candidate buffer and runs
 *
 *     logit_bias -> penalties -> greedy (temperature <= 0: argmax, ties to the lowest id)
 *               -> top-k -> top-p -> min-p -> temperature -> softmax -> draw
 *
 *   which is llama.cpp's default order.  The filters (top-k, top-p, min-p)
 *   look at the distribution at temperature 1; temperature only reshapes the
 *   probabilities of the survivors.  So a low temperature never widens the
 *   candidate set and a high one never lets a filtered-out token back in.
 *
 *   Top-k uses a bounded heap of k entries (O(n_vocab log k)), then heap-sorts
 *   the k survivors.  Top-p sorts the current survivors (all n_vocab of them
 *   only when top-k is off).  Min-p needs no order: it keeps candidates with
 *   exp(logit - max_logit) >= min_p, i.e. p >= min_p * p_max.  Candidates are
 *   ordered "better first" by (logit descending, id ascending), a total
 *   order, so results do not depend on the sort's stability.
 *
 *   Draws use xoshiro256** seeded with splitmix64(seed): a 64-bit integer
 *   generator with the same stream on every platform (no rand()).  Every
 *   non-greedy draw takes exactly one 64-bit output (top 53 bits as a double
 *   in [0, 1)); greedy sampling never touches the generator.
 *
 *   logit_bias (OpenAI) adds a per-token value to the copied logits; a
 *   bias <= -100 sets the logit to -inf, a ban even under greedy.
 *   kite_sampler_logprobs reports log_softmax of the logits after bias and
 *   penalties (temperature 1, nothing truncated).
 *
 *   Penalties use per-token counts over a window of the last penalty_last_n
 *   accepted tokens (a ring buffer of that capacity; -1 = every accepted
 *   token since the last reset, counts only).  For a token with count c > 0:
 *     logit = logit <= 0 ? logit * repeat : logit / repeat
 *     logit = logit - (c * frequency + presence)
 *
 * INVARIANTS
 *   cand holds n_vocab entries, counts n_vocab, ring ring_cap; all allocated
 *   in kite_sampler_new: sample/accept never allocate.
 *   counts[t] == occurrences of t in the ring (window mode) or since reset.
 *   NaN logits are treated as -inf and +inf as FLT_MAX.  If every surviving
 *   logit is -inf the first survivor (the lowest id) is returned.
 *
 * THREAD SAFETY
 *   A sampler is used by one thread at a time.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kite.h"
#include "sampler/sampler_internal.h"

/* Largest accepted penalty_last_n (ring buffer entries, 4 MiB). */
#define SAMPLER_MAX_LAST_N (1 << 20)

struct kite_sampler {
    kite_sampler_params params;
    int32_t n_vocab;
    sampler_cand *cand; /* [n_vocab] scratch for one call */
    int32_t *counts;    /* [n_vocab] occurrences in the penalty window */
    int32_t *ring;      /* [ring_cap] last accepted tokens, oldest at ring_head */
    int32_t ring_cap;   /* penalty_last_n when > 0, else 0 */
    int32_t ring_len;   /* entries in use, <= ring_cap */
    int32_t ring_head;  /* index of the oldest entry */
    sampler_rng rng;
    kite_logit_bias *bias; /* [n_bias] copy of params.logit_bias (params.logit_bias points here) */
    int32_t n_bias;
};

/* ---- PRNG ----------------------------------------------------------------- */

uint64_t sampler_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sampler_rng_seed(sampler_rng *r, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) r->s[i] = sampler_splitmix64(&st);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sampler_rng_next(sampler_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double sampler_rng_uniform(sampler_rng *r) {
    return (double)(sampler_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

/* ---- parameters and lifetime ------------------------------------------------ */

kite_sampler_params kite_sampler_default_params(void) {
    kite_sampler_params p = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .penalty_last_n = 64,
        .seed = 0xC0FFEEu,
    };
    return p;
}

int kite_sampler_new(const kite_sampler_params *params, int32_t n_vocab, kite_sampler **out) {
    kite_sampler_params p = params ? *params : kite_sampler_default_params();
    kite_sampler *s = NULL;
    if (!out) return err_set(KITE_E_ARG, "sampler: out is NULL");
    if (n_vocab < 1) return err_set(KITE_E_ARG, "sampler: n_vocab %d must be >= 1", (int)n_vocab);
    if (isnan(p.temperature) || isnan(p.top_p) || isnan(p.min_p))
        return err_set(KITE_E_ARG, "sampler: temperature, top_p and min_p must not be NaN");
    if (!isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f)
        return err_set(KITE_E_ARG, "sampler: repeat_penalty %g must be finite and > 0", (double)p.repeat_penalty);
    if (!isfinite(p.frequency_penalty) || !isfinite(p.presence_penalty))
        return err_set(KITE_E_ARG, "sampler: frequency/presence penalties must be finite");
    if (p.penalty_last_n < -1 || p.penalty_last_n > SAMPLER_MAX_LAST_N)
        return err_set(KITE_E_ARG, "sampler: penalty_last_n %d out of range [-1, %d]", (int)p.penalty_last_n,
                       SAMPLER_MAX_LAST_N);

    if (p.n_logit_bias < 0 || (p.n_logit_bias > 0 && !p.logit_bias))
        return err_set(KITE_E_ARG, "sampler: logit_bias is NULL with n_logit_bias %d", (int)p.n_logit_bias);
    for (int32_t i = 0; i < p.n_logit_bias; i++) {
        if (p.logit_bias[i].token < 0 || p.logit_bias[i].token >= n_vocab)
            return err_set(KITE_E_ARG, "sampler: logit_bias token %d outside the vocabulary (%d tokens)",
                           (int)p.logit_bias[i].token, (int)n_vocab);
        if (!isfinite(p.logit_bias[i].bias))
            return err_set(KITE_E_ARG, "sampler: logit_bias of token %d is not finite", (int)p.logit_bias[i].token);
    }

    s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->params = p;
    if (p.n_logit_bias > 0) {
        s->bias = malloc((size_t)p.n_logit_bias * sizeof *s->bias);
        if (!s->bias) goto nomem;
        memcpy(s->bias, p.logit_bias, (size_t)p.n_logit_bias * sizeof *s->bias);
        s->n_bias = p.n_logit_bias;
    }
    s->params.logit_bias = s->bias;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    if (!s->cand || !s->counts) goto nomem;
    if (p.penalty_last_n > 0) {
        s->ring_cap = p.penalty_last_n;
        s->ring = malloc((size_t)s->ring_cap * sizeof *s->ring);
        if (!s->ring) goto nomem;
    }
    sampler_rng_seed(&s->rng, p.seed);
    *out = s;
    return KITE_OK;
nomem:
    kite_sampler_free(s);
    return err_set(KITE_E_NOMEM, "sampler: out of memory for n_vocab %d", (int)n_vocab);
}

void kite_sampler_free(kite_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->ring);
    free(s->counts);
    free(s->cand);
    free(s);
}

void kite_sampler_reset(kite_sampler *s) {
    if (!s) return;
    memset(s->counts, 0, (size_t)s->n_vocab * sizeof *s->counts);
    s->ring_len = 0;
    s->ring_head = 0;
    sampler_rng_seed(&s->rng, s->params.seed);
}

/* Records t for the penalties.  Ids outside [0, n_vocab) are ignored. O(1). */
void kite_sampler_accept(kite_sampler *s, kite_token t) {
    if (!s || t < 0 || t >= s->n_vocab || s->params.penalty_last_n == 0) return;
    if (s->ring_cap > 0) {
        if (s->ring_len == s->ring_cap) { /* evict the oldest */
            s->counts[s->ring[s->ring_head]]--;
            s->ring[s->ring_head] = t;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = t;
            s->ring_len++;
        }
    }
    if (s->counts[t] < INT32_MAX) s->counts[t]++;
}

/* ---- chain stages ------------------------------------------------------------ */

/* Total order: higher logit first, then lower id. */
static inline bool cand_better(const sampler_cand *a, const sampler_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const sampler_cand *a = pa, *b = pb;
    if (cand_better(a, b)) return -1;
    if (cand_better(b, a)) return 1;
    return 0;
}

/* Restores the heap property below i in a heap whose root is the worst entry. */
static void heap_sift_down(sampler_cand *h, size_t n, size_t i) {
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && cand_better(&h[w], &h[l])) w = l;
        if (r < n && cand_better(&h[w], &h[r])) w = r;
        if (w == i) return;
        sampler_cand tmp = h[i];
        h[i] = h[w];
        h[w] = tmp;
        i = w;
    }
}

/* Keeps the k best of c[0..n) in c[0..k), sorted best first.  Requires
 * 0 < k < n.  O(n log k) time, no extra memory. */
static void stage_top_k(sampler_cand *c, size_t n, size_t k) {
    for (size_t i = k / 2; i-- > 0;) heap_sift_down(c, k, i);
    for (size_t j = k; j < n; j++) {
        if (cand_better(&c[j], &c[0])) {
            c[0] = c[j];
            heap_sift_down(c, k, 0);
        }
    }
    for (size_t end = k - 1; end > 0; end--) { /* heap sort: worst goes last */
        sampler_cand tmp = c[0];
        c[0] = c[end];
        c[end] = tmp;
        heap_sift_down(c, end, 0);
    }
}

static float max_logit(const sampler_cand *c, size_t n) {
    float m = c[0].logit;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > m) m = c[i].logit;
    return m;
}

/* c[0..n) sorted best first, c[0].logit finite.  Returns the length of the
 * smallest prefix whose probability mass (temperature 1) is >= top_p. */
static size_t stage_top_p(const sampler_cand *c, size_t n, float top_p) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)c[i].logit - (double)c[0].logit);
    double cum = 0.0, target = (double)top_p * sum;
    for (size_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - (double)c[0].logit);
        if (cum >= target) return i + 1;
    }
    return n; /* rounding: keep everything */
}

/* Keeps (in order) the candidates with p >= min_p * p_max; max is finite. */
static size_t stage_min_p(sampler_cand *c, size_t n, float min_p, float max) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (exp((double)c[i].logit - (double)max) >= (double)min_p) c[m++] = c[i];
    }
    return m; /* >= 1: the max itself has ratio 1 >= min_p for min_p <= 1 */
}

/* Temperature + softmax into .p; max is finite. */
static void stage_softmax(sampler_cand *c, size_t n, float temp, float max) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        /* (l - max) / temp, not l / temp - max / temp: no overflow for tiny temp */
        double e = exp(((double)c[i].logit - (double)max) / (double)temp);
        c[i].p = (float)e;
        sum += e;
    }
    for (size_t i = 0; i < n; i++) c[i].p = (float)((double)c[i].p / sum);
}

static void stage_penalties(kite_sampler *s) {
    const kite_sampler_params *p = &s->params;
    if (p->penalty_last_n == 0) return;
    if (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f) return;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        int32_t cnt = s->counts[i];
        if (cnt <= 0) continue;
        float l = s->cand[i].logit;
        l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
        l = l - ((float)cnt * p->frequency_penalty + p->presence_penalty);
        s->cand[i].logit = l;
    }
}

/* logit_bias: added to the logits; -100 or less bans the token. */
static void stage_bias(kite_sampler *s) {
    for (int32_t i = 0; i < s->n_bias; i++) {
        sampler_cand *c = &s->cand[s->bias[i].token];
        c->logit = s->bias[i].bias <= -100.0f ? -INFINITY : c->logit + s->bias[i].bias;
    }
}

/* Copies logits into the candidate buffer (NaN -> -inf, +inf -> FLT_MAX)
 * and applies the bias and the penalties: the distribution every later
 * stage, and kite_sampler_logprobs, starts from. */
static void prepare(kite_sampler *s, const float *logits) {
    sampler_cand *c = s->cand;
    const size_t n = (size_t)s->n_vocab;
    for (size_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l)) l = -INFINITY;
        else if (l == INFINITY) l = FLT_MAX;
        c[i].id = (int32_t)i;
        c[i].logit = l;
        c[i].p = 0.0f;
    }
    stage_bias(s);
    stage_penalties(s);
}

/* The chain without the draw; returns the survivor count (see the header). */
static size_t run_chain(kite_sampler *s, const float *logits) {
    const kite_sampler_params *p = &s->params;
    sampler_cand *c = s->cand;
    size_t n = (size_t)s->n_vocab;
    prepare(s, logits);

    if (p->temperature <= 0.0f) { /* greedy: first maximum = lowest id */
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        c[0] = c[best];
        c[0].p = 1.0f;
        return 1;
    }

    bool sorted = false;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        stage_top_k(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        sorted = true;
    }
    float max = sorted ? c[0].logit : max_logit(c, n);
    if (max == -INFINITY) { /* nothing has any mass: the first candidate (lowest id) */
        c[0].p = 1.0f;
        return 1;
    }
    if (p->top_p < 1.0f) {
        if (!sorted) {
            qsort(c, n, sizeof *c, cand_cmp);
        }
        n = stage_top_p(c, n, p->top_p);
    }
    if (p->min_p > 0.0f) n = stage_min_p(c, n, p->min_p > 1.0f ? 1.0f : p->min_p, max);
    stage_softmax(c, n, p->temperature, max);
    return n;
}

size_t sampler_candidates(kite_sampler *s, const float *logits, const sampler_cand **out) {
    size_t n = run_chain(s, logits);
    *out = s->cand;
    return n;
}

kite_token kite_sampler_sample(kite_sampler *s, const float *logits) {
    size_t n = run_chain(s, logits);
    if (s->params.temperature <= 0.0f) return s->cand[0].id; /* greedy: no RNG use */
    /* Exactly one RNG output per non-greedy draw, whatever survived.  Inverse CDF over the survivors in their current order.  A zero-mass
     * candidate is never picked: cum does not grow there, and r < total. */
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += (double)s->cand[i].p;
    double r = sampler_rng_uniform(&s->rng) * total, cum = 0.0;
    size_t last_pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (s->cand[i].p <= 0.0f) continue;
        cum += (double)s->cand[i].p;
        last_pos = i;
        if (r < cum) return s->cand[i].id;
    }
    return s->cand[last_pos].id; /* rounding at the very top */
}

int kite_sampler_logprobs(kite_sampler *s, const float *logits, kite_token token, int32_t n_top,
                          kite_logprobs *out) {
    if (!s || !logits || !out) return err_set(KITE_E_ARG, "kite_sampler_logprobs: NULL argument");
    if (token < 0 || token >= s->n_vocab)
        return err_set(KITE_E_ARG, "kite_sampler_logprobs: token %d outside the vocabulary", (int)token);
    if (n_top < 0 || n_top > KITE_MAX_TOP_LOGPROBS)
        return err_set(KITE_E_ARG, "kite_sampler_logprobs: n_top %d outside [0, %d]", (int)n_top,
                       KITE_MAX_TOP_LOGPROBS);
    prepare(s, logits);
    const sampler_cand *c = s->cand;
    const size_t n = (size_t)s->n_vocab;
    out->token = token;
    out->n_top = 0;
    float max = max_logit(c, n);
    if (max == -INFINITY) { /* nothing has mass: the sampler returns the lowest id with p = 1 */
        out->logprob = token == 0 ? 0.0f : -INFINITY;
        if (n_top > 0) out->top[out->n_top++] = (kite_token_logprob){0, 0.0f};
        return KITE_OK;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)c[i].logit - (double)max);
    const double log_z = (double)max + log(sum);
    out->logprob = (float)((double)c[token].logit - log_z);
    /* top n_top by (logit desc, id asc): insertion into a short sorted list;
     * ids ascend, so an equal logit never displaces an earlier entry */
    kite_token_logprob *top = out->top;
    int32_t k = 0;
    for (size_t i = 0; i < n && n_top > 0; i++) {
        const float l = c[i].logit;
        if (l == -INFINITY || (k == n_top && l <= top[k - 1].logprob)) continue;
        int32_t j = k < n_top ? k++ : n_top - 1;
        while (j > 0 && top[j - 1].logprob < l) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (kite_token_logprob){(kite_token)i, l};
    }
    for (int32_t j = 0; j < k; j++) top[j].logprob = (float)((double)top[j].logprob - log_z);
    out->n_top = k;
    return KITE_OK;
}
