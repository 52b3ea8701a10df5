/*
 * test_spec.c - speculative decoding (src/spec).
 *
 *   - greedy speculative decoding reproduces plain greedy decoding exactly on
 *     every stories260K golden prompt, for each drafter: prompt lookup,
 *     self-speculative (a layer skipped), a draft model (the same model: 100%
 *     acceptance; the F16 file: same vocabulary, other weights);
 *   - greedy with a repeat penalty: speculative == plain (penalties exact);
 *   - the rejection rule returns exactly the target distribution (seeded
 *     chi-square over many trials), q a distribution or a point mass;
 *   - KV rollback: after truncating rejected drafts, the next logits equal
 *     those of a context that never saw them;
 *   - adaptive k stays in bounds and moves the right way; n-gram lookup and
 *     layer-list parsing; argument errors.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "json_mini.h"
#include "kite.h"
#include "model_helpers.h"
#include "spec/accept.h"
#include "spec/adapt.h"
#include "spec/lookup.h"
#include "spec/lookahead.h"
#include "spec/spec.h"

#define MODEL_F32 "models/stories260K.gguf"
#define MODEL_F16 "tests/data/tokenizer/stories260K-F16.gguf"
#define GOLD_GREEDY "tests/data/golden/stories260K-greedy.jsonl"
#define N_VOCAB 512
#define MAX_TOK 512

/* Generates with the speculative decoder from prompt[0..n_prompt) until
 * n_total tokens or a generated BOS (kept, like test_model's loop).  Returns
 * the total length written to toks, or -1. */
static int spec_generate(kite_model *m, const spec_params *p, const kite_sampler_params *sp, const kite_token *prompt,
                         int n_prompt, int n_total, kite_token *toks, spec_stats *stats) {
    kite_ctx *c = new_ctx_checked(m, MAX_TOK, 1);
    spec_decoder *d = NULL;
    int n = -1;
    if (!c) return -1;
    int rc = spec_new(c, sp, p, &d);
    CHECK_MSG(rc == KITE_OK, "spec_new: %s", kite_last_error());
    if (rc != KITE_OK) goto done;
    CHECK_EQ_INT(spec_begin(d, prompt, n_prompt), KITE_OK);
    memcpy(toks, prompt, (size_t)n_prompt * sizeof *toks);
    n = n_prompt;
    while (n < n_total) {
        kite_token out[SPEC_MAX_DRAFT + 1];
        int32_t got = 0;
        rc = spec_step(d, n_total - n, out, &got);
        CHECK_MSG(rc == KITE_OK, "spec_step: %s", kite_last_error());
        if (rc != KITE_OK) break;
        CHECK(got >= 1 && got <= n_total - n);
        bool stop = false;
        for (int32_t i = 0; i < got && !stop; i++) {
            toks[n++] = out[i];
            stop = out[i] == kite_token_bos(m);
        }
        if (stop) break;
    }
    if (stats) *stats = *spec_get_stats(d);
done:
    spec_free(d);
    kite_ctx_free(c);
    return n;
}

/* Plain decoding (the reference), same stopping rule. */
static int plain_generate(kite_model *m, const kite_sampler_params *sp, const kite_token *prompt, int n_prompt,
                          int n_total, kite_token *toks) {
    kite_ctx *c = new_ctx_checked(m, MAX_TOK, 1);
    kite_sampler *s = NULL;
    if (!c || kite_sampler_new(sp, N_VOCAB, &s) != KITE_OK) {
        kite_ctx_free(c);
        return -1;
    }
    for (int i = 0; i < n_prompt; i++) kite_sampler_accept(s, prompt[i]);
    memcpy(toks, prompt, (size_t)n_prompt * sizeof *toks);
    int n = n_prompt;
    int rc = kite_ctx_eval(c, prompt, n_prompt, false);
    while (n < n_total && rc == KITE_OK) {
        kite_token t = kite_sampler_sample(s, kite_ctx_logits(c, -1));
        kite_sampler_accept(s, t);
        toks[n++] = t;
        if (t == kite_token_bos(m) || n == n_total) break;
        rc = kite_ctx_eval(c, &t, 1, false);
    }
    kite_sampler_free(s);
    kite_ctx_free(c);
    return n;
}

/* Runs the first max_cases golden prompts (all 5 for the main check of each
 * drafter; fewer for variants, to keep the ASan run short) through the
 * speculative decoder with p and checks the ids; sums statistics in *tot. */
static void check_goldens(kite_model *m, const spec_params *p, const char *label, int max_cases, spec_stats *tot) {
    char *all = harness_read_file(GOLD_GREEDY, NULL);
    CHECK(all != NULL);
    if (!all) return;
    kite_sampler_params sp = kite_sampler_default_params();
    sp.temperature = 0;
    memset(tot, 0, sizeof *tot);
    int cases = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        int32_t *gold = NULL, *gold_prompt = NULL;
        size_t n_gold = 0, n_prompt = 0;
        CHECK(json_field_ids(line, "ids", &gold, &n_gold) == 0);
        CHECK(json_field_ids(line, "prompt_ids", &gold_prompt, &n_prompt) == 0);
        if (gold && gold_prompt && n_gold <= MAX_TOK && cases < max_cases) {
            cases++;
            kite_token toks[MAX_TOK];
            spec_stats st;
            int n = spec_generate(m, p, &sp, gold_prompt, (int)n_prompt, (int)n_gold, toks, &st);
            CHECK(n > 0);
            size_t cmp_n = n_gold < (size_t)n ? n_gold : (size_t)n;
            CHECK_MSG(n > 0 && memcmp(toks, gold, cmp_n * sizeof *toks) == 0, "%s, case %d: ids differ", label,
                      cases);
            tot->n_steps += st.n_steps;
            tot->n_drafted += st.n_drafted;
            tot->n_accepted += st.n_accepted;
            tot->n_generated += st.n_generated;
            tot->n_pool_drafts += st.n_pool_drafts;
        }
        free(gold);
        free(gold_prompt);
    }
    CHECK_EQ_INT(cases, max_cases);
    printf("  %s: %lld tokens in %lld passes (%.2f tokens/pass), acceptance %.1f%% of %lld drafted\n", label,
            (long long)tot->n_generated, (long long)tot->n_steps,
            tot->n_steps ? (double)tot->n_generated / (double)tot->n_steps : 0.0,
            tot->n_drafted ? 100.0 * (double)tot->n_accepted / (double)tot->n_drafted : 0.0,
            (long long)tot->n_drafted);
    free(all);
}

/* ---- greedy == plain greedy, each drafter -------------------------------- */

TEST(test_greedy_lookup) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    spec_params p = spec_default_params();
    p.drafter = SPEC_DRAFT_LOOKUP;
    spec_stats st;
    check_goldens(m, &p, "lookup 3", 5, &st);
    CHECK(st.n_accepted > 0);
    CHECK(st.n_steps < st.n_generated); /* it did save passes */
    p.lookup_n = 1;
    p.fixed_k = true;
    p.draft_max = SPEC_MAX_DRAFT;
    check_goldens(m, &p, "lookup 1, k 16", 2, &st);
    kite_model_free(m);
}

TEST(test_greedy_lookahead) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    spec_params p = spec_default_params();
    p.drafter = SPEC_DRAFT_LOOKAHEAD;
    spec_stats st;
    check_goldens(m, &p, "lookahead 8,4,8", 5, &st);
    CHECK(st.n_accepted > 0);
    CHECK(st.n_pool_drafts > 0); /* the pool did get used */
    CHECK(st.n_steps < st.n_generated);
    p.la_window = 3, p.la_ngram = 2, p.la_pool = 1;
    check_goldens(m, &p, "lookahead 3,2,1", 2, &st);
    p.la_window = 16, p.la_ngram = 17, p.la_pool = 255;
    check_goldens(m, &p, "lookahead 16,17,255", 2, &st);
    kite_model_free(m);
}

/* The Jacobi window and the n-gram pool on hand-made passes. */
TEST(test_lookahead_state) {
    spec_la la;
    const kite_token prompt[] = {5, 6, 7};
    CHECK(spec_la_init(&la, 4, 3, 2, prompt, 3) == KITE_OK);
    kite_token d[8];
    int from_pool = -1;
    /* first window: the prompt's tokens, repeated to W */
    CHECK_EQ_INT(spec_la_draft(&la, 7, 8, d, &from_pool), 4);
    CHECK_EQ_INT(from_pool, 0);
    CHECK(d[0] == 5 && d[1] == 6 && d[2] == 7 && d[3] == 5);
    CHECK_EQ_INT(spec_la_draft(&la, 7, 2, d, &from_pool), 2); /* k caps the draft */
    /* a pass over [7, 5, 6, 7, 5] predicting [10, 11, 12, 13, 14], one draft accepted:
     * next window = preds after the accepted point (12, 13, 14) + old guess for the next slot */
    const kite_token in[] = {7, 10, 6, 7, 5}, pred[] = {10, 11, 12, 13, 14};
    spec_la_update(&la, in, pred, 4, 1);
    CHECK(la.window[0] == 12 && la.window[1] == 13 && la.window[2] == 14 && la.window[3] == 5);
    /* n-grams (in[i], pred[i], pred[i+1]) for i = 0..3, keyed by in[i] */
    kite_token g[8];
    CHECK_EQ_INT(spec_la_lookup(&la, 7, g, 4), 2); /* in[0] and in[3] are both 7: two entries, newest first */
    CHECK(g[0] == 13 && g[1] == 14 && g[2] == 10 && g[3] == 11);
    CHECK_EQ_INT(spec_la_lookup(&la, 6, g, 4), 1);
    CHECK(g[0] == 12 && g[1] == 13);
    CHECK_EQ_INT(spec_la_lookup(&la, 99, g, 4), 0);
    /* a draft for pending 7 starts with the newest pool n-gram, then the window's later guesses */
    CHECK_EQ_INT(spec_la_draft(&la, 7, 8, d, &from_pool), 4);
    CHECK_EQ_INT(from_pool, 1);
    CHECK(d[0] == 13 && d[1] == 14 && d[2] == 14 && d[3] == 5);
    /* duplicates are not stored twice; G = 2 keeps the two newest */
    spec_la_update(&la, in, pred, 4, 1);
    CHECK_EQ_INT(spec_la_lookup(&la, 7, g, 4), 2);
    const kite_token in2[] = {7, 1, 2}, pred2[] = {20, 21, 22};
    spec_la_update(&la, in2, pred2, 2, 2);
    CHECK_EQ_INT(spec_la_lookup(&la, 7, g, 4), 2);
    CHECK(g[0] == 20 && g[1] == 21 && g[2] == 13 && g[3] == 14);
    spec_la_free(&la);
    /* bad parameters */
    CHECK(spec_la_init(&la, 0, 2, 1, prompt, 3) == KITE_E_ARG);
    CHECK(spec_la_init(&la, 4, 6, 1, prompt, 3) == KITE_E_ARG);
    spec_params p = spec_default_params();
    CHECK(spec_parse_lookahead("8,4,8", &p) == KITE_OK && p.la_window == 8 && p.la_ngram == 4 && p.la_pool == 8);
    CHECK(spec_parse_lookahead("8,4", &p) == KITE_E_ARG);
    CHECK(spec_parse_lookahead("8,4,8x", &p) == KITE_E_ARG);
    CHECK(spec_parse_lookahead("17,4,8", &p) == KITE_E_ARG);
}

TEST(test_greedy_self) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_model_info info;
    kite_model_get_info(m, &info);
    bool skip[64] = {false};
    CHECK(info.n_layer >= 2 && info.n_layer <= 64);
    skip[info.n_layer - 2] = true;
    spec_params p = spec_default_params();
    p.drafter = SPEC_DRAFT_SELF;
    p.skip_layers = skip;
    p.n_skip = info.n_layer;
    spec_stats st;
    check_goldens(m, &p, "self, 1 layer skipped", 5, &st);
    CHECK(st.n_accepted > 0);
    CHECK(st.n_accepted < st.n_drafted); /* the skipped layer does change the draft */
    kite_model_free(m);
}

TEST(test_greedy_draft_model) {
    kite_model *m = load_model_checked(MODEL_F32);
    kite_model *m16 = load_model_checked(MODEL_F16);
    if (!m || !m16) goto done;
    spec_params p = spec_default_params();
    p.drafter = SPEC_DRAFT_MODEL;
    p.draft_model = m; /* the target itself as its own draft: everything is accepted */
    p.fixed_k = true;
    p.draft_max = 4;
    spec_stats st;
    check_goldens(m, &p, "draft = same model", 5, &st);
    CHECK(st.n_drafted > 0);
    CHECK_EQ_INT(st.n_accepted, st.n_drafted);
    p.draft_model = m16;
    p.fixed_k = false;
    p.draft_max = 8;
    check_goldens(m, &p, "draft = F16 file", 2, &st);
    CHECK(st.n_accepted > 0);
done:
    kite_model_free(m16);
    kite_model_free(m);
}

/* Penalties depend on the accepted history; verification in order keeps them exact. */
TEST(test_greedy_penalty) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_sampler_params sp = kite_sampler_default_params();
    sp.temperature = 0;
    sp.repeat_penalty = 1.3f;
    sp.frequency_penalty = 0.1f;
    sp.penalty_last_n = 32;
    const kite_token prompt[] = {1, 403, 407, 261, 378};
    kite_token a[MAX_TOK], b[MAX_TOK];
    int na = plain_generate(m, &sp, prompt, 5, 160, a);
    spec_params p = spec_default_params();
    p.drafter = SPEC_DRAFT_LOOKUP;
    p.lookup_n = 2;
    int nb = spec_generate(m, &p, &sp, prompt, 5, 160, b, NULL);
    CHECK_EQ_INT(na, nb);
    CHECK(na > 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    kite_model_free(m);
}

/* Sampling end to end: runs, stays in the vocabulary, reproducible per seed. */
TEST(test_sampling_smoke) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_sampler_params sp = kite_sampler_default_params();
    sp.repeat_penalty = 1.1f;
    const kite_token prompt[] = {1, 403, 407, 261, 378};
    bool skip[64] = {false};
    skip[1] = true;
    for (int kind = 0; kind < 3; kind++) {
        spec_params p = spec_default_params();
        p.drafter = kind == 2 ? SPEC_DRAFT_LOOKAHEAD : kind ? SPEC_DRAFT_SELF : SPEC_DRAFT_LOOKUP;
        p.skip_layers = skip;
        kite_model_info info;
        kite_model_get_info(m, &info);
        p.n_skip = info.n_layer;
        kite_token a[MAX_TOK], b[MAX_TOK];
        spec_stats st;
        int na = spec_generate(m, &p, &sp, prompt, 5, 120, a, &st);
        int nb = spec_generate(m, &p, &sp, prompt, 5, 120, b, NULL);
        CHECK(na > 5);
        CHECK_EQ_INT(na, nb);
        CHECK(na > 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0);
        for (int i = 0; i < na; i++) CHECK(a[i] >= 0 && a[i] < N_VOCAB);
        CHECK_EQ_INT(st.n_generated, na - 5);
    }
    kite_model_free(m);
}

/* ---- the rejection rule -------------------------------------------------- */

/* Draws `trials` tokens through draft + accept and returns the chi-square
 * statistic of the outcome counts against p (cells with p = 0 must stay 0). */
static double rejection_chi2(const float *p, const float *q, int point, int n, int trials, uint64_t seed,
                             double *accept_rate) {
    sampler_rng rng, drng;
    sampler_rng_seed(&rng, seed);
    sampler_rng_seed(&drng, seed ^ 0xABCDEFull);
    float scratch[8];
    long counts[8] = {0};
    long accepted = 0;
    for (int t = 0; t < trials; t++) {
        kite_token d = q ? spec_draw(q, n, &drng) : point, x = -1;
        if (spec_accept(p, q, d, n, &rng, scratch, &x)) {
            x = d;
            accepted++;
        }
        CHECK(x >= 0 && x < n);
        if (x < 0 || x >= n) return 1e30;
        counts[x]++;
    }
    double chi2 = 0.0;
    for (int i = 0; i < n; i++) {
        double e = (double)p[i] * trials;
        if (e == 0.0) {
            CHECK_EQ_INT(counts[i], 0);
            continue;
        }
        chi2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
    }
    *accept_rate = (double)accepted / trials;
    return chi2;
}

TEST(test_rejection_rule) {
    /* 4 degrees of freedom: P(chi2 > 30) ~ 5e-6; the seeds are fixed, so
     * this is deterministic, and a wrong rule (e.g. outputting the draft
     * always or never resampling from the residual) gives thousands. */
    const double bound = 30.0;
    const int trials = 100000;
    const float p[5] = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f};
    const float q1[5] = {0.3f, 0.1f, 0.2f, 0.2f, 0.2f}; /* mass where p has none */
    const float q2[5] = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f}; /* q == p: always accepted */
    const float q3[5] = {0.0f, 0.0f, 0.0f, 0.0f, 1.0f}; /* disjoint: never accepted */
    double acc = 0.0, chi2;
    chi2 = rejection_chi2(p, q1, 0, 5, trials, 1, &acc);
    CHECK_MSG(chi2 < bound, "q1: chi2 %.2f", chi2);
    /* acceptance = sum min(p, q) = 0.1 + 0.1 + 0.2 + 0.2 = 0.6 */
    CHECK_NEAR(acc, 0.6, 0.01);
    chi2 = rejection_chi2(p, q2, 0, 5, trials, 2, &acc);
    CHECK_MSG(chi2 < bound, "q2: chi2 %.2f", chi2);
    CHECK_NEAR(acc, 1.0, 1e-9);
    chi2 = rejection_chi2(p, q3, 0, 5, trials, 3, &acc);
    CHECK_MSG(chi2 < bound, "q3: chi2 %.2f", chi2);
    CHECK_NEAR(acc, 0.0, 1e-9);
    /* point masses (prompt lookup): accept with probability p(d) */
    for (int d = 0; d < 5; d++) {
        chi2 = rejection_chi2(p, NULL, d, 5, trials, 10 + (uint64_t)d, &acc);
        CHECK_MSG(chi2 < bound, "point mass on %d: chi2 %.2f", d, chi2);
        CHECK_NEAR(acc, p[d], 0.01);
    }
    /* a point mass on the only token with mass: always accepted */
    const float one[5] = {0, 0, 1, 0, 0};
    chi2 = rejection_chi2(one, NULL, 2, 5, 1000, 7, &acc);
    CHECK_NEAR(acc, 1.0, 1e-9);
}

/* spec_probs matches the sampler's own draws (same chain). */
TEST(test_probs_match_sampler) {
    float logits[N_VOCAB], probs[N_VOCAB];
    for (int i = 0; i < N_VOCAB; i++) logits[i] = (float)sin(i * 0.37) * 3.0f;
    kite_sampler_params sp = kite_sampler_default_params();
    sp.top_k = 5;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    kite_sampler *s = NULL;
    CHECK_EQ_INT(kite_sampler_new(&sp, N_VOCAB, &s), KITE_OK);
    if (!s) return;
    spec_probs(s, logits, N_VOCAB, probs);
    double sum = 0.0;
    int nz = 0;
    for (int i = 0; i < N_VOCAB; i++) {
        sum += probs[i];
        nz += probs[i] > 0.0f;
    }
    CHECK_NEAR(sum, 1.0, 1e-5);
    CHECK_EQ_INT(nz, 5);
    for (int t = 0; t < 200; t++) {
        kite_token x = kite_sampler_sample(s, logits);
        CHECK(x >= 0 && x < N_VOCAB && probs[x] > 0.0f);
    }
    kite_sampler_free(s);
    sp.temperature = 0;
    CHECK_EQ_INT(kite_sampler_new(&sp, N_VOCAB, &s), KITE_OK);
    if (!s) return;
    spec_probs(s, logits, N_VOCAB, probs);
    kite_token g = kite_sampler_sample(s, logits);
    CHECK(probs[g] == 1.0f);
    kite_sampler_free(s);
}

/* ---- KV rollback ----------------------------------------------------------- */

TEST(test_rollback) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_ctx *a = new_ctx_checked(m, 64, 1), *b = new_ctx_checked(m, 64, 1);
    if (!a || !b) goto done;
    const kite_token prompt[] = {1, 403, 407, 261, 378};
    const kite_token verify[] = {432, 383, 17, 99, 250}; /* pending + 4 drafts, 2 of them kept */
    const kite_token next = 286;
    CHECK_EQ_INT(kite_ctx_eval(a, prompt, 5, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(a, verify, 5, true), KITE_OK);
    CHECK_EQ_INT(kite_ctx_truncate(a, 5 + 2), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(a, &next, 1, false), KITE_OK);
    /* the context that never saw the rejected drafts */
    CHECK_EQ_INT(kite_ctx_eval(b, prompt, 5, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(b, verify, 2, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(b, &next, 1, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_n_past(a), kite_ctx_n_past(b));
    const float *la = kite_ctx_logits(a, -1), *lb = kite_ctx_logits(b, -1);
    CHECK(la && lb);
    if (la && lb) {
        double worst = 0.0;
        for (int i = 0; i < N_VOCAB; i++) {
            double e = fabs((double)la[i] - (double)lb[i]);
            if (e > worst) worst = e;
        }
        /* same positions, same cached rows; only the batch shape of the
         * kept rows' computation differs (5 vs 2 tokens) */
        CHECK_MSG(worst < 1e-4, "max |logit difference| %g", worst);
    }
done:
    kite_ctx_free(a);
    kite_ctx_free(b);
    kite_model_free(m);
}

/* Layer skipping is zero-cost when off and changes the output when on. */
TEST(test_skip_layers) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_model_info info;
    kite_model_get_info(m, &info);
    kite_ctx *a = new_ctx_checked(m, 32, 1), *b = new_ctx_checked(m, 32, 1);
    if (!a || !b) goto done;
    bool skip[64] = {false};
    CHECK_EQ_INT(kite_ctx_set_skip_layers(b, skip, info.n_layer + 1), KITE_E_ARG);
    CHECK_EQ_INT(kite_ctx_set_skip_layers(b, skip, info.n_layer), KITE_OK); /* all false: off */
    const kite_token prompt[] = {1, 403, 407, 261, 378};
    CHECK_EQ_INT(kite_ctx_eval(a, prompt, 5, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(b, prompt, 5, false), KITE_OK);
    CHECK(memcmp(kite_ctx_logits(a, -1), kite_ctx_logits(b, -1), N_VOCAB * sizeof(float)) == 0);
    skip[0] = true;
    CHECK_EQ_INT(kite_ctx_truncate(b, 0), KITE_OK);
    CHECK_EQ_INT(kite_ctx_set_skip_layers(b, skip, info.n_layer), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(b, prompt, 5, false), KITE_OK);
    CHECK(memcmp(kite_ctx_logits(a, -1), kite_ctx_logits(b, -1), N_VOCAB * sizeof(float)) != 0);
    CHECK_EQ_INT(kite_ctx_set_skip_layers(b, NULL, 0), KITE_OK);
    CHECK_EQ_INT(kite_ctx_truncate(b, 0), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(b, prompt, 5, false), KITE_OK);
    CHECK(memcmp(kite_ctx_logits(a, -1), kite_ctx_logits(b, -1), N_VOCAB * sizeof(float)) == 0);
done:
    kite_ctx_free(a);
    kite_ctx_free(b);
    kite_model_free(m);
}

/* ---- adaptive k, lookup, parsing, errors ------------------------------------ */

TEST(test_adapt_bounds) {
    spec_adapt a;
    spec_adapt_init(&a, 2, 12, false);
    CHECK(a.k >= 2 && a.k <= 12);
    sampler_rng r;
    sampler_rng_seed(&r, 42);
    for (int i = 0; i < 2000; i++) {
        int32_t acc = (int32_t)(sampler_rng_next(&r) % (uint64_t)(a.k + 1));
        spec_adapt_update(&a, acc, acc < a.k);
        CHECK(a.k >= 2 && a.k <= 12);
    }
    for (int i = 0; i < 50; i++) spec_adapt_update(&a, a.k, false);
    CHECK_EQ_INT(a.k, 12);
    for (int i = 0; i < 50; i++) spec_adapt_update(&a, 0, true);
    CHECK_EQ_INT(a.k, 2);
    spec_adapt_init(&a, 0, 99, false);
    CHECK(a.k_min == 1 && a.k_max == SPEC_MAX_DRAFT);
    spec_adapt_init(&a, 1, 5, true);
    spec_adapt_update(&a, 0, true);
    CHECK_EQ_INT(a.k, 5);
}

TEST(test_lookup) {
    const kite_token h[] = {5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 6, 7};
    kite_token out[8];
    /* last 2-gram "6 7": newest earlier occurrence at 6 -> "2 3 6 7" */
    CHECK_EQ_INT(spec_lookup_draft(h, 12, 2, 8, out), 4);
    CHECK(out[0] == 2 && out[1] == 3 && out[2] == 6 && out[3] == 7);
    CHECK_EQ_INT(spec_lookup_draft(h, 12, 2, 1, out), 1);
    /* 3-gram "3 6 7" never occurred before: falls back to the 2-gram */
    CHECK_EQ_INT(spec_lookup_draft(h, 12, 3, 2, out), 2);
    CHECK(out[0] == 2 && out[1] == 3);
    const kite_token u[] = {1, 2, 3};
    CHECK_EQ_INT(spec_lookup_draft(u, 3, 3, 4, out), 0);
    CHECK_EQ_INT(spec_lookup_draft(u, 1, 3, 4, out), 0);
    CHECK_EQ_INT(spec_lookup_draft(u, 0, 3, 4, out), 0);
}

TEST(test_parse_layers) {
    bool f[6];
    CHECK_EQ_INT(spec_parse_layers("1-3,5", 6, f), KITE_OK);
    CHECK(!f[0] && f[1] && f[2] && f[3] && !f[4] && f[5]);
    CHECK_EQ_INT(spec_parse_layers("0", 6, f), KITE_OK);
    CHECK(f[0] && !f[1]);
    CHECK_EQ_INT(spec_parse_layers("6", 6, f), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "0..5");
    CHECK_EQ_INT(spec_parse_layers("3-1", 6, f), KITE_E_ARG);
    CHECK_EQ_INT(spec_parse_layers("a", 6, f), KITE_E_ARG);
    CHECK_EQ_INT(spec_parse_layers("", 6, f), KITE_E_ARG);
    CHECK_EQ_INT(spec_parse_layers("1,,2", 6, f), KITE_E_ARG);
    CHECK_EQ_INT(spec_parse_layers("1;2", 6, f), KITE_E_ARG);
}

TEST(test_errors) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 16, 1);
    spec_decoder *d = NULL;
    kite_sampler_params sp = kite_sampler_default_params();
    spec_params p = spec_default_params();
    p.drafter = SPEC_DRAFT_SELF; /* no flags */
    CHECK_EQ_INT(spec_new(c, &sp, &p, &d), KITE_E_ARG);
    p.drafter = SPEC_DRAFT_MODEL; /* no model */
    CHECK_EQ_INT(spec_new(c, &sp, &p, &d), KITE_E_ARG);
    p.drafter = SPEC_DRAFT_LOOKUP;
    p.draft_max = SPEC_MAX_DRAFT + 1;
    CHECK_EQ_INT(spec_new(c, &sp, &p, &d), KITE_E_ARG);
    p.draft_max = 4;
    CHECK(d == NULL);
    CHECK_EQ_INT(spec_new(c, &sp, &p, &d), KITE_OK);
    if (d) {
        kite_token out[SPEC_MAX_DRAFT + 1];
        int32_t n = 0;
        CHECK_EQ_INT(spec_step(d, 4, out, &n), KITE_E_STATE);
        /* fill the 16-position context: steps stop with KITE_E_RANGE */
        const kite_token prompt[] = {1, 403, 407, 261, 378};
        CHECK_EQ_INT(spec_begin(d, prompt, 5), KITE_OK);
        int total = 5, rc = KITE_OK;
        while (rc == KITE_OK && total < 100) {
            rc = spec_step(d, 100, out, &n);
            if (rc == KITE_OK) total += n;
        }
        CHECK_EQ_INT(rc, KITE_E_RANGE);
        CHECK_EQ_INT(total, 17); /* n_ctx + 1: the last token is never evaluated */
        CHECK_EQ_INT(kite_ctx_n_past(c), 16);
    }
    spec_free(d);
    kite_ctx_free(c);
    kite_model_free(m);
}

int main(void) {
    RUN(test_greedy_lookup);
    RUN(test_greedy_lookahead);
    RUN(test_lookahead_state);
    RUN(test_greedy_self);
    RUN(test_greedy_draft_model);
    RUN(test_greedy_penalty);
    RUN(test_sampling_smoke);
    RUN(test_rejection_rule);
    RUN(test_probs_match_sampler);
    RUN(test_rollback);
    RUN(test_skip_layers);
    RUN(test_adapt_bounds);
    RUN(test_lookup);
    RUN(test_parse_layers);
    RUN(test_errors);
    return harness_summary(__FILE__);
}
