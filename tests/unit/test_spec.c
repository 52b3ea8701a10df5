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
 *     layer-list parsing; argument errors;
 *   - under a JSON schema (spec_set_grammar): greedy speculative output is
 *     token for token greedy output under the schema alone, for each drafter,
 *     on the bundled model and on the quantized 32k-vocabulary scale model
 *     (build/scale/tl4-q8_0.gguf); model drafts drawn under the grammar are
 *     all accepted when the draft is the target; sampled speculative output
 *     (lookup, a draft model) only ever holds tokens the grammar allows and ends
 *     by the grammar; kite_gen_check_draft and kite_gen_draft_masked_logits
 *     agree with the grammar mask token by token.
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
#define SCHEMA "tests/data/grammar/pet.schema.json"
#define SCALE_Q8 "build/scale/tl4-q8_0.gguf" /* make build/scale/tl4-q8_0.gguf (a make test prerequisite) */

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

/* ---- under a grammar ------------------------------------------------------ */

/* Generates up to n_new tokens after prompt under grammar g through a kite_gen
 * (the rules kite run applies), speculatively with p or plainly (p NULL), at
 * temperature temp.  Every token goes through kite_gen_push, which refuses a
 * token the grammar does not allow.  Returns the count written to out (the
 * stop reason in *stop), or -1. */
static int grammar_generate(kite_model *m, const kite_grammar *g, const spec_params *p, float temp,
                            const kite_token *prompt, int n_prompt, int n_new, kite_token *out, int *stop,
                            spec_stats *st) {
    kite_model_info info;
    kite_model_get_info(m, &info);
    kite_ctx *c = new_ctx_checked(m, n_prompt + n_new + SPEC_MAX_DRAFT + 2, 1);
    kite_sampler_params sp = kite_sampler_default_params();
    sp.temperature = temp;
    sp.seed = 11;
    kite_sampler *smp = NULL;
    kite_gen *gen = NULL;
    spec_decoder *d = NULL;
    int n = -1;
    if (!c || kite_sampler_new(&sp, info.n_vocab, &smp) != KITE_OK || kite_gen_new(m, &gen) != KITE_OK) goto done;
    kite_gen_params gp = kite_gen_default_params();
    gp.sampler = p ? NULL : smp;
    gp.n_predict = n_new;
    gp.grammar = g;
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, n_prompt), KITE_OK);
    kite_gen_step step;
    int rc;
    n = 0;
    if (p) {
        spec_params q = *p;
        q.seed = 5;
        rc = spec_new(c, &sp, &q, &d);
        CHECK_MSG(rc == KITE_OK, "spec_new: %s", kite_last_error());
        if (rc != KITE_OK || (rc = spec_set_grammar(d, g, false)) != KITE_OK || (rc = spec_begin(d, prompt, n_prompt))) {
            CHECK_MSG(0, "spec setup: %s", kite_last_error());
            n = -1;
            goto done;
        }
        while (kite_gen_stopped(gen) == KITE_STOP_NONE) {
            kite_token o[SPEC_MAX_DRAFT + 1];
            int32_t got = 0;
            rc = spec_step(d, n_new - n, o, &got);
            CHECK_MSG(rc == KITE_OK, "spec_step: %s", kite_last_error());
            if (rc != KITE_OK) break;
            for (int32_t i = 0; i < got && kite_gen_stopped(gen) == KITE_STOP_NONE; i++) {
                rc = kite_gen_push(gen, o[i], &step);
                CHECK_MSG(rc == KITE_OK, "token %d refused: %s", o[i], kite_last_error());
                if (rc != KITE_OK) goto done;
                if (step.output) out[n++] = o[i];
            }
        }
        if (st) *st = *spec_get_stats(d);
    } else {
        for (int i = 0; i < n_prompt; i++) kite_sampler_accept(smp, prompt[i]);
        rc = kite_ctx_eval(c, prompt, n_prompt, false);
        while (rc == KITE_OK && kite_gen_stopped(gen) == KITE_STOP_NONE) {
            rc = kite_gen_sample(gen, kite_ctx_logits(c, -1), &step);
            CHECK_MSG(rc == KITE_OK, "kite_gen_sample: %s", kite_last_error());
            if (rc != KITE_OK || !step.output) break;
            out[n++] = step.token;
            if (step.stop == KITE_STOP_NONE) rc = kite_ctx_eval(c, &step.token, 1, false);
        }
    }
    *stop = kite_gen_stopped(gen);
done:
    spec_free(d);
    kite_gen_free(gen);
    kite_sampler_free(smp);
    kite_ctx_free(c);
    return n;
}

/* Greedy under the pet schema: each drafter's output == the grammar alone's, on model m. */
static void check_grammar_drafters(kite_model *m, const char *label, int n_new) {
    size_t len = 0;
    char *schema = harness_read_file(SCHEMA, &len);
    kite_grammar *g = NULL;
    CHECK(schema && kite_grammar_new(m, KITE_GRAMMAR_JSON_SCHEMA, schema, len, &g) == KITE_OK);
    /* a prompt full of the schema's own text, so that lookup drafts often */
    const char *text = "{\"name\": \"Tom\", \"kind\": \"dog\", \"age\": 3, \"home\": {\"town\": \"Ely\"}} "
                       "{\"name\": \"Tom\", \"kind\": \"dog\", \"age\": 3, \"home\": {\"town\": \"Ely\"}} ";
    kite_token prompt[128], ref[MAX_TOK], got[MAX_TOK];
    size_t n_prompt = 0;
    CHECK(kite_tokenize(m, text, strlen(text), true, prompt, 128, &n_prompt) == KITE_OK);
    int stop_ref = -1, stop = -1;
    const int n_ref = g ? grammar_generate(m, g, NULL, 0.0f, prompt, (int)n_prompt, n_new, ref, &stop_ref, NULL) : -1;
    CHECK(n_ref > 0);
    bool *skip = NULL;
    kite_model_info info;
    kite_model_get_info(m, &info);
    skip = calloc((size_t)info.n_layer, sizeof *skip);
    CHECK(skip != NULL);
    if (n_ref <= 0 || !skip) goto done;
    skip[info.n_layer - 1] = true;
    for (int v = 0; v < 5; v++) {
        spec_params p = spec_default_params();
        const char *name = "lookup 3";
        if (v == 1) { p.drafter = SPEC_DRAFT_LOOKUP; p.lookup_n = 1; p.fixed_k = true; p.draft_max = SPEC_MAX_DRAFT; name = "lookup 1, k 16"; }
        else if (v == 2) { p.drafter = SPEC_DRAFT_LOOKAHEAD; name = "lookahead 8,4,8"; }
        else if (v == 3) { p.drafter = SPEC_DRAFT_SELF; p.skip_layers = skip; p.n_skip = info.n_layer; name = "self, last layer skipped"; }
        else if (v == 4) { p.drafter = SPEC_DRAFT_MODEL; p.draft_model = m; p.fixed_k = true; p.draft_max = 4; name = "draft = same model"; }
        else p.drafter = SPEC_DRAFT_LOOKUP;
        spec_stats st = {0};
        const int n = grammar_generate(m, g, &p, 0.0f, prompt, (int)n_prompt, n_new, got, &stop, &st);
        CHECK_MSG(n == n_ref && stop == stop_ref && memcmp(got, ref, (size_t)n_ref * sizeof *ref) == 0,
                  "%s, %s: %d tokens (stop %s), the grammar alone %d (stop %s)", label, name, n, kite_stop_name(stop),
                  n_ref, kite_stop_name(stop_ref));
        printf("  %s under the schema, %s: %d tokens (%s) in %lld passes, %lld of %lld drafted accepted\n", label,
               name, n, kite_stop_name(stop), (long long)st.n_steps, (long long)st.n_accepted,
               (long long)st.n_drafted);
        /* its own drafts, drawn under the grammar (kite_gen_draft_*): all accepted, about k + 1 tokens a pass */
        if (v == 4) CHECK_MSG(st.n_drafted > 0 && st.n_accepted == st.n_drafted && st.n_steps * 3 < n,
                              "%lld passes for %d tokens", (long long)st.n_steps, n);
        if (v == 0 && n_new > 40) CHECK(st.n_drafted > 0);
    }
done:
    free(skip);
    kite_grammar_free(g);
    free(schema);
}

TEST(test_grammar_greedy) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    check_grammar_drafters(m, "stories260K", 300);
    kite_model_free(m);
}

TEST(test_grammar_greedy_scale) {
    kite_model *m = load_model_checked(SCALE_Q8); /* a missing file fails, as in test_scale */
    if (!m) return;
    check_grammar_drafters(m, "tl4-q8_0", 40);
    kite_model_free(m);
}

/* A lazy grammar (kite_grammar_new_lazy, as tool_choice "auto" uses): greedy, every drafter's
 * output equals the lazy grammar alone's; that output is plain greedy decoding's up to the
 * token completing the trigger, then follows the grammar to its end. */
TEST(test_lazy_grammar_drafters) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    static const char gtext[] = "root ::= \" named {\\\"pet\\\": \" ( \"\\\"cat\\\"\" | \"\\\"dog\\\"\" ) \"}\"";
    const kite_grammar_trigger trig[] = {{" named", false}};
    kite_grammar *g = NULL;
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, gtext, strlen(gtext), trig, 1, &g), KITE_OK);
    /* the call's text in the prompt, so that lookup drafts run across the trigger */
    const char *text = "Tim had a dog named {\"pet\": \"dog\"}. Once upon a time, there was a little girl";
    kite_token prompt[64], plain[MAX_TOK], ref[MAX_TOK], got[MAX_TOK];
    size_t n_prompt = 0;
    CHECK(kite_tokenize(m, text, strlen(text), true, prompt, 64, &n_prompt) == KITE_OK);
    int stop_plain = -1, stop_ref = -1, stop = -1;
    const int n_plain = grammar_generate(m, NULL, NULL, 0.0f, prompt, (int)n_prompt, 120, plain, &stop_plain, NULL);
    const int n_ref = g ? grammar_generate(m, g, NULL, 0.0f, prompt, (int)n_prompt, 120, ref, &stop_ref, NULL) : -1;
    CHECK_MSG(n_ref > 0 && stop_ref == KITE_STOP_GRAMMAR, "lazy alone: %d tokens, stop %s", n_ref,
              kite_stop_name(stop_ref));
    if (n_ref <= 0 || n_plain <= 0) goto done;
    /* the text up to the trigger is plain decoding's; from it on, the grammar's */
    char out[4096];
    size_t len = 0, at_trigger = 0;
    int k_trig = -1;
    for (int i = 0; i < n_ref && len < sizeof out - 64; i++) {
        const char *pc;
        char buf[8];
        int n = kite_token_to_piece(m, ref[i], &pc, buf);
        if (n > 0) memcpy(out + len, pc, (size_t)n), len += (size_t)n;
        out[len] = 0;
        if (k_trig < 0 && strstr(out, " named")) k_trig = i, at_trigger = (size_t)(strstr(out, " named") - out);
    }
    CHECK_MSG(k_trig >= 0 && k_trig < n_plain && memcmp(ref, plain, (size_t)k_trig * sizeof *ref) == 0,
              "the output before the trigger (%d tokens) differs from plain greedy decoding", k_trig);
    CHECK_MSG(k_trig >= 0 && (!strcmp(out + at_trigger, " named {\"pet\": \"cat\"}") ||
                              !strcmp(out + at_trigger, " named {\"pet\": \"dog\"}")),
              "the output from the trigger on: %s", k_trig >= 0 ? out + at_trigger : out);
    for (int v = 0; v < 4; v++) {
        spec_params p = spec_default_params();
        const char *name = "lookup 3";
        if (v == 1) { p.drafter = SPEC_DRAFT_LOOKUP; p.lookup_n = 1; p.fixed_k = true; p.draft_max = SPEC_MAX_DRAFT; name = "lookup 1, k 16"; }
        else if (v == 2) { p.drafter = SPEC_DRAFT_LOOKAHEAD; name = "lookahead 8,4,8"; }
        else if (v == 3) { p.drafter = SPEC_DRAFT_MODEL; p.draft_model = m; p.fixed_k = true; p.draft_max = 4; name = "draft = same model"; }
        else p.drafter = SPEC_DRAFT_LOOKUP;
        spec_stats st = {0};
        const int n = grammar_generate(m, g, &p, 0.0f, prompt, (int)n_prompt, 120, got, &stop, &st);
        CHECK_MSG(n == n_ref && stop == stop_ref && memcmp(got, ref, (size_t)n_ref * sizeof *ref) == 0,
                  "lazy grammar, %s: %d tokens (stop %s), the grammar alone %d (stop %s)", name, n,
                  kite_stop_name(stop), n_ref, kite_stop_name(stop_ref));
        if (v == 1) CHECK(st.n_drafted > 0);
    }
done:
    kite_grammar_free(g);
    kite_model_free(m);
}

/* Sampling at temperature 1 with lookup drafts: every token passes kite_gen_push's grammar check. */
TEST(test_grammar_sampled) {
    kite_model *m = load_model_checked(MODEL_F32);
    size_t len = 0;
    char *schema = harness_read_file(SCHEMA, &len);
    kite_grammar *g = NULL;
    CHECK(m && schema && kite_grammar_new(m, KITE_GRAMMAR_JSON_SCHEMA, schema, len, &g) == KITE_OK);
    if (g) {
        const char *text = "{\"name\": \"Tom\", \"kind\": \"cat\", \"age\": 3, \"home\": {\"town\": \"Ely\"}}";
        kite_token prompt[64], out[MAX_TOK];
        size_t n_prompt = 0;
        CHECK(kite_tokenize(m, text, strlen(text), true, prompt, 64, &n_prompt) == KITE_OK);
        spec_params p = spec_default_params();
        p.drafter = SPEC_DRAFT_LOOKUP;
        p.lookup_n = 1;
        int stop = -1;
        spec_stats st = {0};
        int n = grammar_generate(m, g, &p, 1.0f, prompt, (int)n_prompt, 400, out, &stop, &st);
        CHECK_MSG(n > 0 && stop == KITE_STOP_GRAMMAR, "%d tokens, stop %s", n, kite_stop_name(stop));
        CHECK(st.n_drafted > 0);
        /* a model drafter samples its draft from the masked q: all allowed, most accepted */
        kite_model *m16 = load_model_checked(MODEL_F16);
        p.drafter = SPEC_DRAFT_MODEL;
        p.draft_model = m16;
        if (m16) {
            n = grammar_generate(m, g, &p, 1.0f, prompt, (int)n_prompt, 400, out, &stop, &st);
            CHECK_MSG(n > 0 && stop == KITE_STOP_GRAMMAR, "draft model: %d tokens, stop %s", n, kite_stop_name(stop));
            CHECK_MSG(st.n_drafted > 0 && st.n_accepted > 0, "draft model: %lld of %lld accepted",
                      (long long)st.n_accepted, (long long)st.n_drafted);
        }
        kite_model_free(m16);
    }
    kite_grammar_free(g);
    free(schema);
    kite_model_free(m);
}

/* kite_gen_check_draft against the mask: after a grammar's first output token,
 * a draft [t] is allowed exactly when t survives kite_gen_masked_logits. */
TEST(test_grammar_check_draft) {
    kite_model *m = load_model_checked(MODEL_F32);
    size_t len = 0;
    char *schema = harness_read_file(SCHEMA, &len);
    kite_grammar *g = NULL;
    kite_gen *gen = NULL;
    float *ones = malloc(N_VOCAB * sizeof *ones);
    CHECK(m && schema && ones && kite_grammar_new(m, KITE_GRAMMAR_JSON_SCHEMA, schema, len, &g) == KITE_OK &&
          kite_gen_new(m, &gen) == KITE_OK);
    if (!gen) goto done;
    for (int i = 0; i < N_VOCAB; i++) ones[i] = 0.0f;
    kite_gen_params gp = kite_gen_default_params();
    gp.grammar = g;
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
    int32_t ok = -1;
    for (int step = 0; step < 3; step++) {
        const float *row = NULL;
        CHECK_EQ_INT(kite_gen_masked_logits(gen, ones, &row), KITE_OK);
        if (!row) break;
        kite_token first_ok = -1;
        int n_allowed = 0, n_agree = 0;
        for (kite_token t = 0; t < N_VOCAB; t++) {
            CHECK_EQ_INT(kite_gen_check_draft(gen, &t, 1, &ok), KITE_OK);
            const bool allowed = row[t] != -INFINITY;
            n_allowed += allowed;
            n_agree += (ok == 1) == allowed;
            if (allowed && first_ok < 0 && !kite_token_is_eog(m, t)) first_ok = t;
        }
        CHECK_MSG(n_agree == N_VOCAB, "step %d: check_draft and the mask disagree on %d tokens", step,
                  N_VOCAB - n_agree);
        float *live = malloc(N_VOCAB * sizeof *live);
        const float *drow = NULL;
        if (live) memcpy(live, row, N_VOCAB * sizeof *live);
        CHECK_EQ_INT(kite_gen_draft_begin(gen), KITE_OK);
        CHECK_EQ_INT(kite_gen_draft_masked_logits(gen, ones, &drow), KITE_OK);
        CHECK(live && drow && memcmp(live, drow, N_VOCAB * sizeof *live) == 0); /* a draft starts at the state */
        free(live);
        CHECK(n_allowed > 0 && n_allowed < N_VOCAB && first_ok >= 0);
        /* a two-token draft: the allowed token, then one refused after it */
        kite_token two[3] = {first_ok, 0, first_ok};
        CHECK_EQ_INT(kite_gen_check_draft(gen, two, 3, &ok), KITE_OK);
        CHECK(ok <= 1);
        bool more = false;
        CHECK_EQ_INT(kite_gen_draft_push(gen, first_ok, &more), KITE_E_STATE); /* the check ended the draft */
        CHECK_EQ_INT(kite_gen_draft_begin(gen), KITE_OK);
        CHECK_EQ_INT(kite_gen_draft_push(gen, first_ok, &more), KITE_OK);
        CHECK(more);
        CHECK_EQ_INT(kite_gen_draft_push(gen, 0, &more), KITE_E_STATE); /* <unk>: no text for the grammar */
        kite_gen_step st;
        CHECK_EQ_INT(kite_gen_push(gen, first_ok, &st), KITE_OK); /* the state moves on; the drafts did not move it */
    }
    CHECK_EQ_INT(kite_gen_check_draft(gen, NULL, 0, &ok), KITE_OK);
    CHECK_EQ_INT(ok, 0);
    CHECK(kite_gen_check_draft(gen, NULL, 1, &ok) == KITE_E_ARG);
done:
    free(ones);
    kite_gen_free(gen);
    kite_grammar_free(g);
    free(schema);
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
    RUN(test_grammar_check_draft);
    RUN(test_grammar_greedy);
    RUN(test_lazy_grammar_drafters);
    RUN(test_grammar_sampled);
    RUN(test_grammar_greedy_scale);
    return harness_summary(__FILE__);
}
