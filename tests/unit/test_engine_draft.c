/*
 * test_engine_draft.c - model drafters and lookahead inside the serving
 * engine (engine_params.spec_draft_model / spec_skip_layers, src/engine/
 * engine_draft.c; spec_la_window, src/engine/engine.c) with the bundled
 * stories260K model as the target.
 *
 *   - temperature 0, 16 concurrent requests, the same model (loaded a
 *     second time) as the draft: every draft token is accepted (the draft
 *     context computes the target's own rows: same paths, same blocks), the
 *     outputs are plain kite_ctx_eval decoding token for token and every
 *     logits row sampled from is bit-identical; all draft blocks are free
 *     at the end.  Then the F16 copy of the model as the draft (other
 *     weights, same vocabulary): the same outputs and rows, and most drafts
 *     accepted.
 *   - self-speculative drafts skipping layer 3, then layers 1-2: the same
 *     outputs and rows, drafts both kept and rejected;
 *   - a target pool too small for everyone (preemption), a step budget of 8
 *     tokens, and a draft pool too small for everyone (sequences draft
 *     less or not at all): outputs unchanged, every block free at the end;
 *   - seeded sampling at temperature 1 (no filters) with the layers-1-2
 *     drafter: the joint distribution of the first two generated tokens
 *     over 400 seeds agrees with plain sampling (chi-square test of
 *     homogeneity), and both branches of the rejection rule ran;
 *   - lookahead W,N,G = 4,3,4 and 8,4,8: greedy outputs and rows equal plain
 *     decoding (also with preemption and an 8-token step budget), pool
 *     n-grams were drafted;
 *   - parameter checks: drafters are exclusive, layer flags must match the
 *     model, a vocab-only draft model is refused, bad W,N,G.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kite.h"
#include "engine/engine.h"

#include "engine_harness.h"

#define MODEL_F16 "tests/data/tokenizer/stories260K-F16.gguf"

static kite_model *g_draft; /* MODEL loaded a second time */

/* What drafts: a model, the target with these layers skipped, or lookahead. */
typedef struct drafter {
    kite_model *model;
    const char *skip; /* layer list, e.g. "1-2" */
    int32_t la_w, la_n, la_g; /* lookahead W,N,G (la_w 0: off) */
} drafter;

static engine *new_engine(const drafter *dr, int32_t n_parallel, int32_t n_ctx, int64_t kv_mem, int32_t step_tokens,
                          int64_t draft_kv) {
    static bool skip[64];
    engine_params p = harness_params(n_parallel, n_ctx, kv_mem, step_tokens);
    p.spec_draft_kv_bytes = draft_kv;
    if (dr && dr->model) p.spec_draft_model = dr->model;
    if (dr && dr->la_w) {
        p.spec_la_window = dr->la_w;
        p.spec_la_ngram = dr->la_n;
        p.spec_la_pool = dr->la_g;
    }
    if (dr && dr->skip) {
        kite_model_info info;
        kite_model_get_info(g_model, &info);
        /* "1-2" / "3": parsed here as kite run's list syntax would give */
        memset(skip, 0, sizeof skip);
        int a = 0, b = 0;
        if (sscanf(dr->skip, "%d-%d", &a, &b) != 2) b = a;
        for (int l = a; l <= b && l < info.n_layer; l++) skip[l] = true;
        p.spec_skip_layers = skip;
        p.n_spec_skip = info.n_layer;
    }
    return harness_engine(&p);
}

static const char *const prompts[] = {
    "Once upon a time",
    "Lily and Tom went to the park to play with a big red ball",
    "The little dog was sad because",
    "There was a small bird who loved to sing. Every morning it sang a happy song for the children.",
    "Tom had a red car. He liked to drive it in the yard with his dog. One day the car broke.",
    "Ben",
};
#define N_PROMPTS (int32_t)(sizeof prompts / sizeof prompts[0])

static void make_specs(req_spec *specs, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        spec_from_text(&specs[i], prompts[i % N_PROMPTS], 16 + (i * 13) % 29);
        specs[i].ignore_eos = i % 3 == 1;
    }
}

/* Plain decoding of spec r, computed once per distinct spec (several tests
 * and drafters share their requests; this keeps the ASan run short). */
static const collect *cached_reference(const req_spec *r) {
    enum { CAP = 32 };
    static req_spec keys[CAP];
    static collect refs[CAP];
    static int32_t n_cached;
    for (int32_t i = 0; i < n_cached; i++)
        if (memcmp(&keys[i], r, sizeof *r) == 0) return &refs[i];
    static collect scratch;
    collect *dst = n_cached < CAP ? &refs[n_cached] : &scratch;
    reference(r, dst);
    if (n_cached < CAP) keys[n_cached++] = *r;
    return dst;
}

/* Checks each output against plain decoding; returns how many matched. */
static int32_t check_against_reference(const req_spec *specs, collect *out, int32_t n) {
    int32_t ok = 0;
    for (int32_t i = 0; i < n; i++) {
        const collect *ref = cached_reference(&specs[i]);
        const bool same = same_output(&out[i], ref), logits = same_logits(&out[i], ref);
        CHECK_MSG(out[i].kind == ENGINE_EV_DONE, "request %d: final event %d", i, out[i].kind);
        CHECK_MSG(same, "request %d: spec \"%s\" != reference \"%s\"", i, out[i].text, ref->text);
        CHECK_MSG(logits, "request %d: logits rows differ from plain decoding (%d vs %d rows)", i, out[i].n_logits,
                  ref->n_logits);
        CHECK_EQ_INT(out[i].n_gen, ref->n_toks);
        ok += same && logits;
        collect_destroy(&out[i]);
    }
    return ok;
}

static void print_stats(const char *what, const engine_stats *st) {
    printf("  %s: %lld drafted, %lld accepted, %lld passes, %lld steps for %lld tokens, %.3f s drafting\n", what,
           (long long)st->spec_drafted, (long long)st->spec_accepted, (long long)st->spec_verify_passes,
           (long long)st->steps, (long long)st->tokens_out, st->spec_draft_s);
}

/* ---- tests --------------------------------------------------------------- */

TEST(same_model_draft_accepts_everything) {
    enum { N = 16 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    const drafter dr = {.model = g_draft};
    engine *e = new_engine(&dr, 8, 256, 0, 64, 0);
    if (!e) return;
    run_all(e, specs, N, out);
    engine_stats st;
    stats_after(e, N, &st);
    print_stats("same model", &st);
    CHECK_EQ_INT(st.requests_done, N);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.kv_draft_blocks_used, 0);
    CHECK(st.spec_drafted > 0);
    CHECK_MSG(st.spec_accepted == st.spec_drafted, "accepted %lld of %lld drafts", (long long)st.spec_accepted,
              (long long)st.spec_drafted);
    engine_free(e);
    CHECK_EQ_INT(check_against_reference(specs, out, N), N);
}

TEST(f16_draft_model) {
    enum { N = 16 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    kite_model *m16 = NULL;
    kite_model_params mp = kite_model_default_params();
    CHECK_MSG(kite_model_load(MODEL_F16, &mp, &m16) == KITE_OK, "%s: %s", MODEL_F16, kite_last_error());
    if (!m16) return;
    const drafter dr = {.model = m16};
    engine *e = new_engine(&dr, 8, 256, 0, 64, 0);
    if (e) {
        run_all(e, specs, N, out);
        engine_stats st;
        stats_after(e, N, &st);
        print_stats("F16 draft", &st);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        CHECK_EQ_INT(st.kv_draft_blocks_used, 0);
        CHECK_MSG(st.spec_accepted * 2 > st.spec_drafted, "accepted %lld of %lld", (long long)st.spec_accepted,
                  (long long)st.spec_drafted);
        engine_free(e);
        CHECK_EQ_INT(check_against_reference(specs, out, N), N);
    }
    kite_model_free(m16);
}

TEST(self_speculative_greedy) {
    enum { N = 16 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    const drafter drs[2] = {{.skip = "3"}, {.skip = "1-2"}};
    for (int d = 0; d < 2; d++) {
        engine *e = new_engine(&drs[d], 8, 256, 0, 64, 0);
        if (!e) return;
        run_all(e, specs, N, out);
        engine_stats st;
        stats_after(e, N, &st);
        print_stats(drs[d].skip, &st);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        CHECK_EQ_INT(st.kv_draft_blocks_used, 0);
        CHECK_MSG(st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted, "accepted %lld of %lld",
                  (long long)st.spec_accepted, (long long)st.spec_drafted);
        engine_free(e);
        CHECK_EQ_INT(check_against_reference(specs, out, N), N);
    }
}

TEST(small_pools_and_step_budget) {
    enum { N = 8 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    for (int32_t i = 0; i < N; i++) {
        specs[i].max_tokens = 30 + 5 * i;
        specs[i].ignore_eos = true;
    }
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    const int64_t blk = 16LL * 2 * info.n_layer * info.n_head_kv * (info.n_embd / info.n_head) * 4;
    const drafter dr = {.skip = "3"};
    /* 12 target blocks of 16 positions for 8 sequences of ~40-100 positions: preemption */
    engine *e = new_engine(&dr, 8, 128, 12 * blk, 64, 0);
    if (!e) return;
    run_all(e, specs, N, out);
    engine_stats st;
    stats_after(e, N, &st);
    print_stats("small pool", &st);
    CHECK_MSG(st.preemptions > 0, "no preemption happened");
    CHECK(st.spec_accepted > 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.kv_draft_blocks_used, 0);
    engine_free(e);
    CHECK_EQ_INT(check_against_reference(specs, out, N), N);

    /* a step budget of 8 tokens for 4 decoding sequences, their catch-up and drafts;
     * and a draft pool of 6 blocks for 4 sequences (drafts shrink or stop) */
    const drafter dm = {.model = g_draft};
    for (int pass = 0; pass < 2; pass++) {
        e = new_engine(pass ? &dm : &dr, 4, 256, 0, pass ? 64 : 8, pass ? 6 * blk : 0);
        if (!e) return;
        run_all(e, specs, 4, out);
        stats_after(e, 4, &st);
        print_stats(pass ? "small draft pool" : "step budget 8", &st);
        CHECK(st.spec_accepted > 0);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        CHECK_EQ_INT(st.kv_draft_blocks_used, 0);
        engine_free(e);
        CHECK_EQ_INT(check_against_reference(specs, out, 4), 4);
    }
}

/* Temperature 1, no filters: N seeded 3-token requests with drafter dr and
 * without any; the joint distribution of the first two tokens must agree. */
static void check_sampling(const drafter *dr, int32_t prompt) {
    enum { N = 400 };
    static req_spec specs[N];
    static collect out[N];
    static uint32_t pairs[2][N];
    int64_t accepted = 0, rejected = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < N; i++) {
            if (i == 0) spec_from_text(&specs[0], prompts[prompt], 3);
            else specs[i] = specs[0];
            specs[i].temperature = 1.0f;
            specs[i].no_filters = true;
            specs[i].ignore_eos = true;
            specs[i].seed = 9000 + (uint64_t)i + (pass ? 100000u : 0u);
        }
        engine *e = new_engine(pass ? dr : NULL, 32, 64, 0, 256, 0);
        if (!e) return;
        run_all(e, specs, N, out);
        engine_stats st;
        stats_after(e, N, &st);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        CHECK_EQ_INT(st.kv_draft_blocks_used, 0);
        if (pass) {
            accepted = st.spec_accepted;
            rejected = st.spec_drafted - st.spec_accepted;
        }
        engine_free(e);
        for (int32_t i = 0; i < N; i++) {
            CHECK_STR_EQ(out[i].reason, "length");
            CHECK_EQ_INT(out[i].n_toks, 3);
            for (int32_t t = 0; t < out[i].n_toks; t++) CHECK(out[i].toks[t] >= 0 && out[i].toks[t] < N_VOCAB);
            pairs[pass][i] = (uint32_t)out[i].toks[0] * (uint32_t)N_VOCAB + (uint32_t)out[i].toks[1];
            collect_destroy(&out[i]);
        }
    }
    check_same_pair_distribution(pairs[0], pairs[1], N, (long long)accepted, (long long)rejected);
}

TEST(sampling_distribution) {
    const drafter dr = {.skip = "1-2"};
    check_sampling(&dr, 2);
}

TEST(lookahead) {
    enum { N = 16 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    const drafter las[2] = {{.la_w = 4, .la_n = 3, .la_g = 4}, {.la_w = 8, .la_n = 4, .la_g = 8}};
    for (int d = 0; d < 2; d++) {
        engine *e = new_engine(&las[d], 8, 256, 0, 64, 0);
        if (!e) return;
        run_all(e, specs, N, out);
        engine_stats st;
        stats_after(e, N, &st);
        print_stats(d ? "lookahead 8,4,8" : "lookahead 4,3,4", &st);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        CHECK(st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted);
        CHECK_MSG(st.spec_pool_drafts > 0, "no draft used a pool n-gram");
        engine_free(e);
        CHECK_EQ_INT(check_against_reference(specs, out, N), N);
    }
    /* preemption (12 blocks for 8 sequences), then an 8-token step budget */
    for (int32_t i = 0; i < 8; i++) {
        specs[i].max_tokens = 30 + 5 * i;
        specs[i].ignore_eos = true;
    }
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    const int64_t blk = 16LL * 2 * info.n_layer * info.n_head_kv * (info.n_embd / info.n_head) * 4;
    for (int pass = 0; pass < 2; pass++) {
        engine *e = new_engine(&las[1], 8, 128, pass ? 0 : 12 * blk, pass ? 8 : 64, 0);
        if (!e) return;
        run_all(e, specs, 8, out);
        engine_stats st;
        stats_after(e, 8, &st);
        print_stats(pass ? "lookahead, step budget 8" : "lookahead, small pool", &st);
        if (!pass) CHECK_MSG(st.preemptions > 0, "no preemption happened");
        CHECK(st.spec_accepted > 0);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        engine_free(e);
        CHECK_EQ_INT(check_against_reference(specs, out, 8), 8);
    }
    /* temperature > 0: lookahead drafts are point masses, judged by the rule that
     * test_engine_spec.c's chi-square test covers for lookup drafts */
}

TEST(bad_params) {
    engine *e = NULL;
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    bool skip[64] = {false};
    skip[1] = true;
    engine_params p = engine_default_params();
    p.spec_lookup_n = 3;
    p.spec_draft_model = g_draft;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "exclusive");
    p = engine_default_params();
    p.spec_draft_model = g_draft;
    p.spec_skip_layers = skip;
    p.n_spec_skip = info.n_layer;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    p = engine_default_params();
    p.spec_skip_layers = skip;
    p.n_spec_skip = info.n_layer + 1;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "layer");
    skip[1] = false;
    p.n_spec_skip = info.n_layer; /* no layer skipped: not a drafter */
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    kite_model *vocab_only = NULL;
    kite_model_params mp = kite_model_default_params();
    mp.vocab_only = true;
    if (kite_model_load(MODEL, &mp, &vocab_only) == KITE_OK) {
        p = engine_default_params();
        p.spec_draft_model = vocab_only;
        CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
        CHECK_CONTAINS(kite_last_error(), "no weights");
        kite_model_free(vocab_only);
    }
    p = engine_default_params();
    p.spec_la_window = 4;
    p.spec_la_ngram = 6; /* N > W + 1 */
    p.spec_la_pool = 4;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "lookahead");
    p.spec_la_ngram = 3;
    p.spec_lookup_n = 2;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "exclusive");
    CHECK(e == NULL);
}

int main(void) {
    kite_model_params mp = kite_model_default_params();
    if (kite_model_load(MODEL, &mp, &g_model) != KITE_OK || kite_model_load(MODEL, &mp, &g_draft) != KITE_OK) {
        printf("cannot load %s: %s\n", MODEL, kite_last_error());
        return 1;
    }
    RUN(same_model_draft_accepts_everything);
    RUN(f16_draft_model);
    RUN(self_speculative_greedy);
    RUN(small_pools_and_step_budget);
    RUN(sampling_distribution);
    RUN(lookahead);
    RUN(bad_params);
    kite_model_free(g_draft);
    kite_model_free(g_model);
    return harness_summary(__FILE__);
}
