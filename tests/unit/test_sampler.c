/*
 * test_sampler.c - the sampler chain: PRNG, greedy, filters, penalties,
 * reproducibility and the sampled distribution.
 *
 * Every random stream here comes from the sampler's own seeded generator, so
 * the statistical checks are deterministic: they either always pass or
 * always fail for a given implementation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kite.h"
#include "sampler/sampler_internal.h"

/* Parameters with every filter and penalty off at the given temperature. */
static kite_sampler_params plain_params(float temp) {
    kite_sampler_params p = kite_sampler_default_params();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    return p;
}

static kite_sampler *new_sampler(const kite_sampler_params *p, int32_t n_vocab) {
    kite_sampler *s = NULL;
    int rc = kite_sampler_new(p, n_vocab, &s);
    CHECK_EQ_INT(rc, KITE_OK);
    return s;
}

/* Sorted ids of the surviving candidates, written to ids; returns the count. */
static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static size_t survivors(kite_sampler *s, const float *logits, int32_t *ids) {
    const sampler_cand *c;
    size_t n = sampler_candidates(s, logits, &c);
    for (size_t i = 0; i < n; i++) ids[i] = c[i].id;
    qsort(ids, n, sizeof *ids, cmp_i32);
    return n;
}

/* Checks that the survivor set equals want[0..n_want). */
#define CHECK_SET(s, logits, ...)                                                    \
    do {                                                                             \
        const int32_t want_[] = {__VA_ARGS__};                                       \
        int32_t got_[64];                                                            \
        size_t n_ = survivors((s), (logits), got_);                                  \
        CHECK_EQ_INT(n_, sizeof want_ / sizeof want_[0]);                            \
        for (size_t i_ = 0; i_ < n_ && i_ < sizeof want_ / sizeof want_[0]; i_++)    \
            CHECK_EQ_INT(got_[i_], want_[i_]);                                       \
    } while (0)

TEST(test_defaults) {
    kite_sampler_params p = kite_sampler_default_params();
    CHECK_NEAR(p.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.95, 1e-7);
    CHECK_NEAR(p.min_p, 0.05, 1e-7);
    CHECK_NEAR(p.repeat_penalty, 1.0, 0);
    CHECK_NEAR(p.frequency_penalty, 0.0, 0);
    CHECK_NEAR(p.presence_penalty, 0.0, 0);
    CHECK_EQ_INT(p.penalty_last_n, 64);
    CHECK(p.seed == 0xC0FFEEu);
}

TEST(test_bad_args) {
    kite_sampler *s = (kite_sampler *)(uintptr_t)1; /* must stay unchanged */
    kite_sampler_params p = kite_sampler_default_params();
    CHECK_EQ_INT(kite_sampler_new(&p, 0, &s), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "n_vocab");
    p.temperature = NAN;
    CHECK_EQ_INT(kite_sampler_new(&p, 10, &s), KITE_E_ARG);
    p = kite_sampler_default_params();
    p.penalty_last_n = -2;
    CHECK_EQ_INT(kite_sampler_new(&p, 10, &s), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "penalty_last_n");
    p = kite_sampler_default_params();
    p.repeat_penalty = 0.0f;
    CHECK_EQ_INT(kite_sampler_new(&p, 10, &s), KITE_E_ARG);
    CHECK(s == (kite_sampler *)(uintptr_t)1);
    kite_sampler_free(NULL);
}

TEST(test_rng_vectors) {
    /* splitmix64 reference outputs from state 0 */
    uint64_t st = 0;
    CHECK(sampler_splitmix64(&st) == 0xe220a8397b1dcdafull);
    CHECK(sampler_splitmix64(&st) == 0x6e789e6aa1b965f4ull);
    CHECK(sampler_splitmix64(&st) == 0x06c45d188009454full);
    /* xoshiro256** from state {1,2,3,4}: rotl(2*5, 7) * 9 = 11520 */
    sampler_rng r = {{1, 2, 3, 4}};
    CHECK(sampler_rng_next(&r) == 11520u);
    /* uniform in [0, 1) */
    sampler_rng_seed(&r, 42);
    for (int i = 0; i < 1000; i++) {
        double u = sampler_rng_uniform(&r);
        CHECK(u >= 0.0 && u < 1.0);
    }
}

TEST(test_greedy) {
    kite_sampler_params p = plain_params(0.0f);
    kite_sampler *s = new_sampler(&p, 6);
    const float a[6] = {0.1f, 2.0f, -3.0f, 7.5f, 7.4f, 1.0f};
    CHECK_EQ_INT(kite_sampler_sample(s, a), 3);
    const float ties[6] = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f, -1.0f};
    CHECK_EQ_INT(kite_sampler_sample(s, ties), 1);
    const float ninf[6] = {-INFINITY, -INFINITY, -5.0f, -INFINITY, -6.0f, -INFINITY};
    CHECK_EQ_INT(kite_sampler_sample(s, ninf), 2);
    const float all_ninf[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(kite_sampler_sample(s, all_ninf), 0);
    const float nan_in[6] = {NAN, 1.0f, NAN, 0.5f, 0.0f, NAN};
    CHECK_EQ_INT(kite_sampler_sample(s, nan_in), 1);
    kite_sampler_free(s);

    /* default filters with temperature 0 are still greedy */
    p = kite_sampler_default_params();
    p.temperature = -1.0f;
    s = new_sampler(&p, 6);
    CHECK_EQ_INT(kite_sampler_sample(s, a), 3);
    kite_sampler_free(s);
}

static void make_logits(float *l, int n, uint64_t seed) {
    sampler_rng r;
    sampler_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) l[i] = (float)(sampler_rng_uniform(&r) * 8.0 - 4.0);
}

TEST(test_reproducible) {
    enum { NV = 300, N = 1000 };
    static float logits[NV];
    static kite_token a[N], b[N], c[N];
    make_logits(logits, NV, 7);
    kite_sampler_params p = kite_sampler_default_params();
    p.temperature = 1.5f; /* wide enough that the draws vary */
    p.top_k = 100;
    p.top_p = 0.99f;
    p.min_p = 0.01f;
    kite_sampler *s1 = new_sampler(&p, NV);
    kite_sampler *s2 = new_sampler(&p, NV);
    p.seed = 12345;
    kite_sampler *s3 = new_sampler(&p, NV);
    int distinct = 0;
    for (int i = 0; i < N; i++) {
        a[i] = kite_sampler_sample(s1, logits);
        b[i] = kite_sampler_sample(s2, logits);
        c[i] = kite_sampler_sample(s3, logits);
        if (i > 0 && a[i] != a[i - 1]) distinct++;
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    CHECK(distinct > 100);
    /* reset reseeds: the same sequence again */
    kite_sampler_reset(s1);
    int same = 1;
    for (int i = 0; i < N; i++) same &= kite_sampler_sample(s1, logits) == a[i];
    CHECK(same);
    kite_sampler_free(s1);
    kite_sampler_free(s2);
    kite_sampler_free(s3);
}

TEST(test_top_k) {
    kite_sampler_params p = plain_params(1.0f);
    p.top_k = 3;
    kite_sampler *s = new_sampler(&p, 8);
    const float l[8] = {0.1f, 3.0f, 2.0f, 5.0f, 5.0f, -1.0f, 4.0f, 0.0f};
    CHECK_SET(s, l, 3, 4, 6);
    /* survivors come best first, ties by id */
    const sampler_cand *c;
    size_t n = sampler_candidates(s, l, &c);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(c[0].id, 3);
    CHECK_EQ_INT(c[1].id, 4);
    CHECK_EQ_INT(c[2].id, 6);
    /* ties at the boundary keep the lowest ids */
    const float eq[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_SET(s, eq, 0, 1, 2);
    kite_sampler_free(s);

    /* top_k >= n_vocab is off */
    p.top_k = 8;
    s = new_sampler(&p, 8);
    CHECK_SET(s, l, 0, 1, 2, 3, 4, 5, 6, 7);
    kite_sampler_free(s);

    /* a larger random case against a full sort */
    enum { NV = 2000, K = 17 };
    static float big[NV];
    make_logits(big, NV, 99);
    p.top_k = K;
    s = new_sampler(&p, NV);
    n = sampler_candidates(s, big, &c);
    CHECK_EQ_INT(n, K);
    static float sorted[NV];
    memcpy(sorted, big, sizeof big);
    for (int i = 0; i < K; i++) { /* selection of the K largest */
        int best = i;
        for (int j = i + 1; j < NV; j++)
            if (sorted[j] > sorted[best]) best = j;
        float t = sorted[i];
        sorted[i] = sorted[best];
        sorted[best] = t;
        CHECK(c[i].logit == sorted[i]);
        CHECK(big[c[i].id] == c[i].logit);
    }
    kite_sampler_free(s);
}

/* logits whose softmax (temperature 1) is exactly proportional to probs */
static void logits_from_probs(float *l, const double *probs, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)log(probs[i]);
}

TEST(test_top_p) {
    /* ids 0..4 have p = 0.1, 0.5, 0.05, 0.2, 0.15 */
    const double probs[5] = {0.1, 0.5, 0.05, 0.2, 0.15};
    float l[5];
    logits_from_probs(l, probs, 5);
    kite_sampler_params p = plain_params(1.0f);
    struct {
        float top_p;
        int n;
    } cases[] = {{0.8f, 3}, {0.4f, 1}, {0.69f, 2}, {0.9f, 4}, {0.99f, 5}, {0.0f, 1}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        p.top_p = cases[t].top_p;
        kite_sampler *s = new_sampler(&p, 5);
        int32_t ids[8];
        size_t n = survivors(s, l, ids);
        CHECK_EQ_INT(n, cases[t].n);
        kite_sampler_free(s);
    }
    p.top_p = 0.8f; /* 0.5 + 0.2 + 0.15 */
    kite_sampler *s = new_sampler(&p, 5);
    CHECK_SET(s, l, 1, 3, 4);
    /* probabilities are renormalised over the survivors */
    const sampler_cand *c;
    size_t n = sampler_candidates(s, l, &c);
    CHECK_EQ_INT(n, 3);
    CHECK_NEAR(c[0].p, 0.5 / 0.85, 1e-6);
    CHECK_NEAR(c[1].p, 0.2 / 0.85, 1e-6);
    CHECK_NEAR(c[2].p, 0.15 / 0.85, 1e-6);
    kite_sampler_free(s);
}

TEST(test_min_p) {
    const double probs[5] = {0.1, 0.5, 0.05, 0.2, 0.15};
    float l[5];
    logits_from_probs(l, probs, 5);
    kite_sampler_params p = plain_params(1.0f);
    p.min_p = 0.25f; /* p >= 0.125 */
    kite_sampler *s = new_sampler(&p, 5);
    CHECK_SET(s, l, 1, 3, 4);
    kite_sampler_free(s);
    p.min_p = 0.35f; /* p >= 0.175 */
    s = new_sampler(&p, 5);
    CHECK_SET(s, l, 1, 3);
    kite_sampler_free(s);
    p.min_p = 0.15f; /* p >= 0.075 */
    s = new_sampler(&p, 5);
    CHECK_SET(s, l, 0, 1, 3, 4);
    kite_sampler_free(s);
    /* chained: top-k 4 drops id 2, top-p 0.9 keeps 0.5+0.2+0.15+0.1, min-p 0.25 keeps 3 */
    p.top_k = 4;
    p.top_p = 0.9f;
    p.min_p = 0.25f;
    s = new_sampler(&p, 5);
    CHECK_SET(s, l, 1, 3, 4);
    kite_sampler_free(s);
    /* filters act at temperature 1: a high temperature does not widen the set */
    p.temperature = 5.0f;
    s = new_sampler(&p, 5);
    CHECK_SET(s, l, 1, 3, 4);
    kite_sampler_free(s);
}

/* Draws n samples and returns the chi-square statistic against the softmax of
 * logits at temperature temp over the ids in keep (mass 0 elsewhere). */
static double chi_square(kite_sampler *s, const float *logits, int nv, float temp, const int *keep,
                         int n, int *outside) {
    double expect[16] = {0}, sum = 0.0;
    int counts[16] = {0};
    for (int i = 0; i < nv; i++)
        if (keep[i]) sum += exp((double)logits[i] / temp);
    for (int i = 0; i < nv; i++)
        if (keep[i]) expect[i] = n * exp((double)logits[i] / temp) / sum;
    *outside = 0;
    for (int d = 0; d < n; d++) {
        kite_token t = kite_sampler_sample(s, logits);
        if (t < 0 || t >= nv || !keep[t]) (*outside)++;
        else counts[t]++;
    }
    double chi2 = 0.0;
    for (int i = 0; i < nv; i++)
        if (keep[i]) chi2 += (counts[i] - expect[i]) * (counts[i] - expect[i]) / expect[i];
    return chi2;
}

TEST(test_distribution) {
    enum { N = 60000 };
    const float l[6] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f};
    int outside;
    /* all 6 tokens at temperature 0.7: 5 degrees of freedom; 25.7 is p = 1e-4 */
    kite_sampler_params p = plain_params(0.7f);
    kite_sampler *s = new_sampler(&p, 6);
    const int all[6] = {1, 1, 1, 1, 1, 1};
    double chi2 = chi_square(s, l, 6, 0.7f, all, N, &outside);
    CHECK_EQ_INT(outside, 0);
    CHECK_MSG(chi2 < 25.7, "chi2 %.3f over 5 dof", chi2);
    kite_sampler_free(s);

    /* top-k 3 at temperature 1.5: only {4, 1, 0}, renormalised; 2 dof, 18.4 */
    p = plain_params(1.5f);
    p.top_k = 3;
    p.seed = 2024;
    s = new_sampler(&p, 6);
    const int top3[6] = {1, 1, 0, 0, 1, 0};
    chi2 = chi_square(s, l, 6, 1.5f, top3, N, &outside);
    CHECK_EQ_INT(outside, 0);
    CHECK_MSG(chi2 < 18.4, "chi2 %.3f over 2 dof", chi2);
    kite_sampler_free(s);

    /* -inf logits are never drawn */
    const float holes[6] = {-INFINITY, 0.0f, -INFINITY, 0.0f, NAN, -INFINITY};
    p = plain_params(1.0f);
    s = new_sampler(&p, 6);
    const int two[6] = {0, 1, 0, 1, 0, 0};
    chi2 = chi_square(s, holes, 6, 1.0f, two, 20000, &outside);
    CHECK_EQ_INT(outside, 0);
    CHECK_MSG(chi2 < 15.1, "chi2 %.3f over 1 dof", chi2);
    /* all -inf: the lowest id, no crash */
    const float none[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(kite_sampler_sample(s, none), 0);
    kite_sampler_free(s);

    /* a tiny temperature behaves like greedy */
    p = plain_params(1e-30f);
    s = new_sampler(&p, 6);
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(kite_sampler_sample(s, l), 4);
    kite_sampler_free(s);
}

/* penalised logit of id after the chain with every filter off (id order) */
static float penalised(kite_sampler *s, const float *logits, int32_t id) {
    const sampler_cand *c;
    size_t n = sampler_candidates(s, logits, &c);
    for (size_t i = 0; i < n; i++)
        if (c[i].id == id) return c[i].logit;
    return NAN;
}

TEST(test_penalties) {
    const float l[6] = {2.0f, -2.0f, 0.0f, 1.0f, 4.0f, -1.0f};
    kite_sampler_params p = plain_params(1.0f);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    kite_sampler *s = new_sampler(&p, 6);
    kite_sampler_accept(s, 0);
    kite_sampler_accept(s, 0);
    kite_sampler_accept(s, 1);
    kite_sampler_accept(s, 3);
    kite_sampler_accept(s, 2);
    kite_sampler_accept(s, 99); /* out of range: ignored */
    kite_sampler_accept(s, -1);
    /* 0: 2/2 - (2*0.5 + 0.25); 1: -2*2 - 0.75; 3: 1/2 - 0.75; 2: 0*2 - 0.75 */
    CHECK(penalised(s, l, 0) == 1.0f - (2.0f * 0.5f + 0.25f));
    CHECK(penalised(s, l, 1) == -4.0f - (1.0f * 0.5f + 0.25f));
    CHECK(penalised(s, l, 2) == 0.0f - (1.0f * 0.5f + 0.25f));
    CHECK(penalised(s, l, 3) == 0.5f - (1.0f * 0.5f + 0.25f));
    CHECK(penalised(s, l, 4) == 4.0f);
    CHECK(penalised(s, l, 5) == -1.0f);
    /* the input is not modified */
    CHECK(l[0] == 2.0f && l[1] == -2.0f);
    kite_sampler_reset(s);
    CHECK(penalised(s, l, 0) == 2.0f);
    kite_sampler_free(s);

    /* repeat only, window of 2: only the last two accepted tokens count */
    p = plain_params(1.0f);
    p.repeat_penalty = 1.5f;
    p.penalty_last_n = 2;
    s = new_sampler(&p, 6);
    kite_sampler_accept(s, 0);
    kite_sampler_accept(s, 4);
    kite_sampler_accept(s, 1);
    kite_sampler_accept(s, 4);
    CHECK(penalised(s, l, 0) == 2.0f);
    CHECK(penalised(s, l, 1) == -2.0f * 1.5f);
    CHECK(penalised(s, l, 4) == 4.0f / 1.5f);
    kite_sampler_accept(s, 5); /* window is now {4, 5} */
    CHECK(penalised(s, l, 1) == -2.0f);
    CHECK(penalised(s, l, 4) == 4.0f / 1.5f);
    CHECK(penalised(s, l, 5) == -1.0f * 1.5f);
    kite_sampler_free(s);

    /* whole context (-1) and off (0) */
    p.penalty_last_n = -1;
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 1.0f;
    s = new_sampler(&p, 6);
    for (int i = 0; i < 100; i++) kite_sampler_accept(s, 4);
    CHECK(penalised(s, l, 4) == 4.0f - 100.0f);
    kite_sampler_free(s);
    p.penalty_last_n = 0;
    s = new_sampler(&p, 6);
    kite_sampler_accept(s, 4);
    CHECK(penalised(s, l, 4) == 4.0f);
    kite_sampler_free(s);

    /* greedy sees the penalised logits: 4 drops below 0 */
    p = plain_params(0.0f);
    p.presence_penalty = 10.0f;
    s = new_sampler(&p, 6);
    CHECK_EQ_INT(kite_sampler_sample(s, l), 4);
    kite_sampler_accept(s, 4);
    CHECK_EQ_INT(kite_sampler_sample(s, l), 0);
    kite_sampler_free(s);
}

TEST(test_vocab_one) {
    const float l[1] = {0.3f};
    const float ninf[1] = {-INFINITY};
    kite_sampler_params p = kite_sampler_default_params();
    kite_sampler *s = new_sampler(&p, 1);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ_INT(kite_sampler_sample(s, l), 0);
        kite_sampler_accept(s, 0);
    }
    CHECK_EQ_INT(kite_sampler_sample(s, ninf), 0);
    kite_sampler_free(s);
    p.temperature = 0.0f;
    s = new_sampler(&p, 1);
    CHECK_EQ_INT(kite_sampler_sample(s, l), 0);
    kite_sampler_free(s);
}

/* logit_bias: -100 bans the argmax even under greedy, +bias shifts; bad
 * entries are refused; the sampler keeps its own copy. */
TEST(test_logit_bias) {
    const float l[4] = {3.0f, 1.0f, 2.0f, 0.5f};
    kite_logit_bias b[2] = {{0, -100.0f}, {3, 1.0f}};
    kite_sampler_params p = plain_params(0.0f);
    p.logit_bias = b;
    p.n_logit_bias = 2;
    kite_sampler *s = new_sampler(&p, 4);
    b[0].bias = 0.0f; /* the copy is what counts */
    CHECK_EQ_INT(kite_sampler_sample(s, l), 2);
    kite_sampler_free(s);
    b[0].bias = -100.0f;
    b[1].bias = 2.0f; /* token 3: 2.5 > 2 */
    s = new_sampler(&p, 4);
    CHECK_EQ_INT(kite_sampler_sample(s, l), 3);
    kite_sampler_free(s);
    /* sampling never draws a banned token */
    p = plain_params(1.0f);
    kite_logit_bias ban = {0, -100.0f};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    s = new_sampler(&p, 4);
    for (int i = 0; i < 500; i++) CHECK(kite_sampler_sample(s, l) != 0);
    kite_sampler_free(s);
    kite_sampler *bad = NULL;
    ban.token = 4;
    CHECK_EQ_INT(kite_sampler_new(&p, 4, &bad), KITE_E_ARG);
    ban.token = 1;
    ban.bias = NAN;
    CHECK_EQ_INT(kite_sampler_new(&p, 4, &bad), KITE_E_ARG);
    p.logit_bias = NULL;
    CHECK_EQ_INT(kite_sampler_new(&p, 4, &bad), KITE_E_ARG);
    CHECK(bad == NULL);
}

/* logprobs: log_softmax at temperature 1 whatever the temperature, after
 * bias and penalties; top list sorted, ties to the lower id. */
TEST(test_logprobs) {
    const float l[5] = {1.0f, 3.0f, 2.0f, 3.0f, -INFINITY};
    double z = exp(1.0) + 2 * exp(3.0) + exp(2.0);
    kite_sampler_params p = plain_params(0.3f);
    kite_sampler *s = new_sampler(&p, 5);
    kite_logprobs lp;
    CHECK_EQ_INT(kite_sampler_logprobs(s, l, 2, 5, &lp), KITE_OK);
    CHECK_NEAR(lp.logprob, 2.0 - log(z), 1e-5);
    CHECK_EQ_INT(lp.n_top, 4); /* the -inf token has no mass */
    CHECK_EQ_INT(lp.top[0].token, 1);
    CHECK_EQ_INT(lp.top[1].token, 3);
    CHECK_EQ_INT(lp.top[2].token, 2);
    CHECK_EQ_INT(lp.top[3].token, 0);
    CHECK_NEAR(lp.top[0].logprob, 3.0 - log(z), 1e-5);
    double sum = 0;
    for (int i = 0; i < lp.n_top; i++) sum += exp(lp.top[i].logprob);
    CHECK_NEAR(sum, 1.0, 1e-5);
    CHECK_EQ_INT(kite_sampler_logprobs(s, l, 1, 1, &lp), KITE_OK);
    CHECK_EQ_INT(lp.n_top, 1);
    CHECK_EQ_INT(lp.top[0].token, 1);
    CHECK_EQ_INT(kite_sampler_logprobs(s, l, 4, 0, &lp), KITE_OK);
    CHECK(lp.logprob == -INFINITY);
    CHECK_EQ_INT(lp.n_top, 0);
    CHECK_EQ_INT(kite_sampler_logprobs(s, l, 5, 0, &lp), KITE_E_ARG);
    CHECK_EQ_INT(kite_sampler_logprobs(s, l, 0, KITE_MAX_TOP_LOGPROBS + 1, &lp), KITE_E_ARG);
    kite_sampler_free(s);
    /* bias and presence penalty enter the distribution */
    kite_logit_bias b = {1, -100.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    p.presence_penalty = 1.0f;
    p.penalty_last_n = -1;
    s = new_sampler(&p, 5);
    kite_sampler_accept(s, 3);
    z = exp(1.0) + exp(2.0) + exp(2.0);
    CHECK_EQ_INT(kite_sampler_logprobs(s, l, 3, 3, &lp), KITE_OK);
    CHECK_NEAR(lp.logprob, 2.0 - log(z), 1e-5);
    CHECK_EQ_INT(lp.n_top, 3);
    CHECK_EQ_INT(lp.top[0].token, 2);
    CHECK_EQ_INT(lp.top[1].token, 3);
    CHECK_EQ_INT(lp.top[2].token, 0);
    kite_sampler_free(s);
}

int main(void) {
    RUN(test_defaults);
    RUN(test_bad_args);
    RUN(test_rng_vectors);
    RUN(test_greedy);
    RUN(test_reproducible);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_min_p);
    RUN(test_distribution);
    RUN(test_penalties);
    RUN(test_vocab_one);
    RUN(test_logit_bias);
    RUN(test_logprobs);
    return harness_summary(__FILE__);
}
