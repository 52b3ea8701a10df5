/*
 * test_engine_spec.c - speculative decoding inside the serving engine
 * (engine_params.spec_lookup_n; src/engine/engine.c verify_draft, scheduler
 * draft items) with the bundled stories260K model.
 *
 *   - temperature 0, concurrent requests (story openings and input-copying
 *     prompts where lookup drafts hit), speculation on: every output equals
 *     plain kite_ctx_eval greedy decoding token for token and text for text,
 *     and every logits row sampled from is bit-identical to the plain run's.
 *     The rows after a rejected draft depend on the K/V of the kept
 *     positions, so equal rows show the rollback left exactly the rows of a
 *     run that never drafted.  Drafts were proposed, some accepted and some
 *     rejected (counters), and every block is free at the end;
 *   - identical requests at once (their generated blocks meet in the prefix
 *     cache and get shared) and shared prompt prefixes: outputs unchanged;
 *   - a pool too small for everyone (drafts must shrink, preemption still
 *     happens) and a step budget of 8 tokens: outputs unchanged;
 *   - max_tokens 1..6 ("length" exactly at the limit) and a stop string in
 *     the middle of a copied span: the same text, tokens and finish reason
 *     as the engine without speculation;
 *   - seeded sampling at temperature 1 (no top-k/top-p/min-p) with speculation: valid outputs
 *     within the limits, drafts verified, and the joint distribution of the
 *     first two generated tokens over 800 seeds agrees with plain sampling
 *     (chi-square test of homogeneity);
 *   - the scheduler alone (no model): a decode item grows by its draft
 *     within the step budget and the spare blocks only (shorter draft, no
 *     preemption, when they are short), sched_keep_draft keeps exactly the
 *     accepted positions and frees the tail blocks, and a draft position in
 *     a block shared with another sequence is written into a private copy
 *     (copy-on-write) leaving the shared block untouched;
 *   - parameter checks.
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
#include "engine/kv_blocks.h"
#include "engine/scheduler.h"

#include "engine_harness.h"

static engine *new_engine(int32_t n_parallel, int32_t n_ctx, int64_t kv_mem, int32_t step_tokens, int32_t lookup,
                          bool no_prefix_cache) {
    engine_params p = harness_params(n_parallel, n_ctx, kv_mem, step_tokens);
    p.spec_lookup_n = lookup;
    p.no_prefix_cache = no_prefix_cache;
    return harness_engine(&p);
}

/* Prompts: story openings and input-copying ones (a passage, then its start
 * again, so the continuation can be looked up in the prompt). */
static const char *const prompts[] = {
    "Once upon a time",
    "Lily and Tom went to the park to play with a big red ball",
    "The little dog was sad because",
    "There was a small bird who loved to sing. Every morning it sang a happy song for the children. "
    "There was a small bird who loved to sing. Every morning",
    "Tom had a red car. He liked to drive it in the yard with his dog. One day the car broke. "
    "Tom had a red car. He liked to",
    "Mom said: \"Be careful, the stove is hot!\" Lily said: \"I will be careful, Mom.\" Mom said: \"Be",
    "Ben",
    "The sun was hot and the children wanted to swim in the lake, so they went to the lake. The sun was hot and",
};
#define N_PROMPTS (int32_t)(sizeof prompts / sizeof prompts[0])

static void make_specs(req_spec *specs, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        spec_from_text(&specs[i], prompts[i % N_PROMPTS], 24 + (i * 13) % 41);
        specs[i].ignore_eos = i % 3 == 1;
    }
}

/* Checks each output against plain decoding; returns how many matched. */
static int32_t check_against_reference(const req_spec *specs, collect *out, int32_t n) {
    int32_t ok = 0;
    static collect ref;
    for (int32_t i = 0; i < n; i++) {
        reference(&specs[i], &ref);
        const bool same = same_output(&out[i], &ref), logits = same_logits(&out[i], &ref);
        CHECK_MSG(out[i].kind == ENGINE_EV_DONE, "request %d: final event %d", i, out[i].kind);
        CHECK_MSG(same, "request %d: spec \"%s\" != reference \"%s\"", i, out[i].text, ref.text);
        CHECK_MSG(logits, "request %d: logits rows differ from plain decoding (%d vs %d rows)", i, out[i].n_logits,
                  ref.n_logits);
        CHECK_EQ_INT(out[i].n_gen, ref.n_toks);
        CHECK_STR_EQ(out[i].reason, ref.n_toks == specs[i].max_tokens ? "length" : "stop");
        ok += same && logits;
        collect_destroy(&out[i]);
    }
    return ok;
}

/* ---- tests --------------------------------------------------------------- */

TEST(greedy_equals_plain_decoding) {
    enum { N = 16 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    engine *e = new_engine(8, 256, 0, 64, 3, false);
    if (!e) return;
    run_all(e, specs, N, out);
    engine_stats st;
    stats_after(e, N, &st);
    CHECK_EQ_INT(st.requests_done, N);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.running, 0);
    /* not vacuous: drafts were scored, some kept and some rejected */
    CHECK_MSG(st.spec_drafted > 0 && st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted,
              "drafted %lld accepted %lld", (long long)st.spec_drafted, (long long)st.spec_accepted);
    CHECK(st.spec_verify_passes > 0);
    printf("  greedy: %lld drafted, %lld accepted, %lld verification passes, %lld steps for %lld tokens\n",
           (long long)st.spec_drafted, (long long)st.spec_accepted, (long long)st.spec_verify_passes,
           (long long)st.steps, (long long)st.tokens_out);
    engine_free(e);
    CHECK_EQ_INT(check_against_reference(specs, out, N), N);
}

TEST(shared_blocks_and_prefixes) {
    enum { N = 6 };
    static req_spec specs[N];
    static collect out[N];
    /* three identical requests (generated blocks get shared through the
     * prefix cache) and three sharing a long prompt prefix */
    for (int32_t i = 0; i < N; i++) {
        spec_from_text(&specs[i], i < 3 ? prompts[4] : prompts[3], 60);
        specs[i].ignore_eos = true;
    }
    specs[4].max_tokens = 33;
    specs[5].max_tokens = 47;
    engine *e = new_engine(8, 256, 0, 64, 2, false);
    if (!e) return;
    run_all(e, specs, 3, out);
    run_all(e, specs + 3, 1, out + 3);
    run_all(e, specs + 4, 2, out + 4);
    engine_stats st;
    stats_after(e, N, &st);
    CHECK(st.prefix_hit_tokens > 0);
    CHECK(st.spec_accepted > 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    engine_free(e);
    CHECK_EQ_INT(check_against_reference(specs, out, N), N);
}

TEST(small_pool_and_step_budget) {
    enum { N = 8 };
    static req_spec specs[N];
    static collect out[N];
    make_specs(specs, N);
    for (int32_t i = 0; i < N; i++) {
        specs[i].max_tokens = 40 + 5 * i;
        specs[i].ignore_eos = true;
    }
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    const int64_t pos_bytes = 2LL * info.n_layer * info.n_head_kv * (info.n_embd / info.n_head) * 4;
    /* 14 blocks of 16 positions for 8 sequences of ~60-110 positions */
    engine *e = new_engine(8, 128, 14 * 16 * pos_bytes, 64, 3, false);
    if (!e) return;
    run_all(e, specs, N, out);
    engine_stats st;
    stats_after(e, N, &st);
    CHECK_MSG(st.preemptions > 0, "no preemption happened");
    CHECK(st.spec_accepted > 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    engine_free(e);
    CHECK_EQ_INT(check_against_reference(specs, out, N), N);

    /* a step budget of 8 tokens shared by 4 decoding sequences and their drafts */
    e = new_engine(4, 256, 0, 8, 3, true);
    if (!e) return;
    run_all(e, specs, 4, out);
    stats_after(e, 4, &st);
    CHECK(st.spec_accepted > 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    engine_free(e);
    CHECK_EQ_INT(check_against_reference(specs, out, 4), 4);
}

TEST(limits_and_stop_strings) {
    static req_spec specs[6];
    static collect out[6], plain[6];
    for (int32_t i = 0; i < 6; i++) {
        spec_from_text(&specs[i], prompts[4], i + 1);
        specs[i].ignore_eos = true;
    }
    engine *e = new_engine(8, 256, 0, 64, 3, false);
    if (!e) return;
    run_all(e, specs, 6, out);
    for (int32_t i = 0; i < 6; i++) {
        CHECK_STR_EQ(out[i].reason, "length");
        CHECK_EQ_INT(out[i].n_toks, i + 1);
    }
    CHECK_EQ_INT(check_against_reference(specs, out, 6), 6);

    /* a stop string inside a span the drafts copy from the prompt */
    req_spec s;
    spec_from_text(&s, prompts[4], 60);
    collect ref;
    reference(&s, &ref);
    CHECK(ref.n_text > 30);
    char stop[16];
    memcpy(stop, ref.text + 12, 5);
    stop[5] = '\0';
    engine *p = new_engine(8, 256, 0, 64, 0, false);
    if (!p) {
        engine_free(e);
        return;
    }
    const char *stops[] = {stop};
    engine_req q = to_req(&s);
    q.stop = stops;
    q.n_stop = 1;
    collect_init(&out[0]);
    collect_init(&plain[0]);
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &out[0], NULL), KITE_OK);
    CHECK_EQ_INT(engine_submit(p, &q, on_event, &plain[0], NULL), KITE_OK);
    CHECK(collect_wait(&out[0], 30) && collect_wait(&plain[0], 30));
    CHECK_STR_EQ(out[0].reason, "stop");
    CHECK_STR_EQ(plain[0].reason, "stop");
    CHECK_MSG(same_output(&out[0], &plain[0]), "\"%s\" != \"%s\"", out[0].text, plain[0].text);
    CHECK_EQ_INT(out[0].n_gen, plain[0].n_gen);
    CHECK(strstr(out[0].text, stop) == NULL);
    engine_stats st;
    stats_after(e, 7, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK(st.spec_accepted > 0);
    engine_free(e);
    engine_free(p);
    collect_destroy(&out[0]);
    collect_destroy(&plain[0]);
}

TEST(sampling_distribution) {
    enum { N = 800 };
    static req_spec specs[N];
    static collect out[N];
    static uint32_t pairs[2][N];
    int64_t accepted = 0, rejected = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < N; i++) {
            if (i == 0) spec_from_text(&specs[0], prompts[5], 3);
            else specs[i] = specs[0];
            specs[i].temperature = 1.0f;
            specs[i].no_filters = true;
            specs[i].ignore_eos = true;
            specs[i].seed = 7000 + (uint64_t)i + (pass ? 100000u : 0u);
        }
        engine *e = new_engine(32, 128, 0, 256, pass == 0 ? 0 : 3, false);
        if (!e) return;
        run_all(e, specs, N, out);
        engine_stats st;
        stats_after(e, N, &st);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        if (pass) {
            accepted = st.spec_accepted;
            rejected = st.spec_drafted - st.spec_accepted;
        }
        engine_free(e);
        for (int32_t i = 0; i < N; i++) {
            CHECK_STR_EQ(out[i].reason, "length");
            CHECK_EQ_INT(out[i].n_toks, 3);
            for (int32_t t = 0; t < out[i].n_toks; t++) CHECK(out[i].toks[t] >= 0 && out[i].toks[t] < N_VOCAB);
            /* the first two generated tokens: the second is the first a draft can decide */
            pairs[pass][i] = (uint32_t)out[i].toks[0] * (uint32_t)N_VOCAB + (uint32_t)out[i].toks[1];
            collect_destroy(&out[i]);
        }
    }
    check_same_pair_distribution(pairs[0], pairs[1], N, (long long)accepted, (long long)rejected);
}

/* ---- the scheduler alone ------------------------------------------------ */

typedef struct copy_log {
    int32_t n;
    int32_t dst[8], src[8];
} copy_log;

static void log_copy(void *user, int32_t dst, int32_t src) {
    copy_log *c = user;
    if (c->n < 8) {
        c->dst[c->n] = dst;
        c->src[c->n] = src;
    }
    c->n++;
}

/* A sequence of n prompt tokens 10, 11, ... with room for `room` more. */
static void seq_init(sched_seq *q, kite_token *buf, int32_t n) {
    memset(q, 0, sizeof *q);
    kv_table_init(&q->kv);
    q->toks = buf;
    for (int32_t i = 0; i < n; i++) buf[i] = 10 + i;
    q->n_prompt = q->n_toks = n;
}

/* Takes q out of the scheduler and frees its table's arrays. */
static void seq_done(sched *s, sched_seq *q) {
    sched_remove(s, q);
    kv_table_free(NULL, &q->kv);
}

TEST(scheduler_draft_items) {
    static const kite_token draft[6] = {100, 101, 102, 103, 104, 105};
    kite_token ta[32], tb[32], tc[32];
    sched_item items[4];
    copy_log log = {0};

    /* budget: 4 blocks of 4; A prefills 8 tokens, then decodes with a draft of 6 */
    kv_pool *kv = NULL;
    sched s;
    CHECK_EQ_INT(kv_pool_new(4, 4, true, &kv), KITE_OK);
    CHECK_EQ_INT(sched_init(&s, kv, 2, 5, log_copy, &log), KITE_OK);
    sched_seq a;
    seq_init(&a, ta, 8);
    sched_enqueue(&s, &a);
    int32_t n = sched_plan(&s, items);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(items[0].n_tok, 5); /* chunked by the step budget of 5 */
    sched_advance(&s, items, n);
    n = sched_plan(&s, items);
    sched_advance(&s, items, n);
    CHECK_EQ_INT(a.n_computed, 8);
    ta[a.n_toks++] = 50; /* the sampled token, pending */
    a.draft = draft;
    a.n_draft = 6;
    n = sched_plan(&s, items);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(items[0].n_draft, 4); /* 1 + 4 tokens: the step budget */
    CHECK_EQ_INT(items[0].n_tok, 5);
    CHECK_EQ_INT(items[0].n_out, 5);
    CHECK_EQ_INT(a.kv.n_blocks, 4);    /* positions 8..12 */
    sched_advance(&s, items, n);
    CHECK_EQ_INT(a.n_computed, 9);     /* the pending token only */
    /* two drafts accepted, the third rejected: keep positions < 11, free block 3 */
    ta[a.n_toks++] = 100;
    ta[a.n_toks++] = 101;
    ta[a.n_toks++] = 77;
    sched_keep_draft(&s, &a, 2);
    CHECK_EQ_INT(a.n_computed, 11);
    CHECK_EQ_INT(a.kv.n_blocks, 3);
    CHECK_EQ_INT(kv_pool_n_used(kv), 3);
    CHECK_EQ_INT(kv_pool_available(kv), 1);

    seq_done(&s, &a);
    CHECK_EQ_INT(kv_pool_n_used(kv), 0);
    sched_free(&s);
    kv_pool_free(kv);

    /* blocks short: A (8 tokens) and B (3 tokens) fill a pool of 4 blocks once
     * A's pending token has its block; drafts then only use the free slots of
     * their own last blocks, and nobody is preempted for them */
    CHECK_EQ_INT(kv_pool_new(4, 4, true, &kv), KITE_OK);
    CHECK_EQ_INT(sched_init(&s, kv, 2, 32, log_copy, &log), KITE_OK);
    seq_init(&a, ta, 8);
    sched_seq b;
    seq_init(&b, tb, 3);
    sched_enqueue(&s, &a);
    sched_enqueue(&s, &b);
    n = sched_plan(&s, items);
    CHECK_EQ_INT(n, 2);
    sched_advance(&s, items, n);
    ta[a.n_toks++] = 50;
    tb[b.n_toks++] = 60;
    a.draft = b.draft = draft;
    a.n_draft = b.n_draft = 6;
    n = sched_plan(&s, items);
    CHECK_EQ_INT(n, 2);
    CHECK(items[0].seq == &a && items[1].seq == &b);
    CHECK_EQ_INT(items[0].n_draft, 3); /* positions 9..11: the rest of its new block */
    CHECK_EQ_INT(items[1].n_draft, 0); /* position 3 ends its block, no block spare */
    CHECK_EQ_INT(items[1].n_tok, 1);
    CHECK_EQ_INT(items[1].n_out, 1);
    CHECK_EQ_INT(kv_pool_available(kv), 0);
    CHECK_EQ_INT(s.preemptions, 0);
    CHECK_EQ_INT(s.n_running, 2);
    sched_advance(&s, items, n);
    seq_done(&s, &a);
    seq_done(&s, &b);
    CHECK_EQ_INT(kv_pool_n_used(kv), 0);
    sched_free(&s);
    kv_pool_free(kv);

    /* copy-on-write: C shares A's two full prompt blocks; a draft written into
     * the second one must go to a private copy */
    CHECK_EQ_INT(kv_pool_new(8, 4, true, &kv), KITE_OK);
    CHECK_EQ_INT(sched_init(&s, kv, 2, 16, log_copy, &log), KITE_OK);
    seq_init(&a, ta, 8);
    sched_enqueue(&s, &a);
    n = sched_plan(&s, items);
    sched_advance(&s, items, n);
    CHECK_EQ_INT(a.kv.n_keyed, 2);
    sched_seq c;
    seq_init(&c, tc, 9); /* A's 8 tokens and one more: matches both blocks */
    sched_enqueue(&s, &c);
    n = sched_plan(&s, items);
    CHECK_EQ_INT(c.n_computed, 8);
    sched_advance(&s, items, n);
    const int32_t shared0 = a.kv.blocks[0], shared1 = a.kv.blocks[1];
    CHECK_EQ_INT(c.kv.blocks[1], shared1);
    CHECK_EQ_INT(kv_block_refcount(kv, shared1), 2);
    /* put C back to 3 computed positions inside block 0 (as if rolled back
     * there) with one pending token and a draft of 3 reaching into block 1 */
    c.n_computed = 3;
    c.n_toks = 4;
    c.draft = draft;
    c.n_draft = 3;
    log.n = 0;
    n = sched_plan(&s, items);
    CHECK_EQ_INT(n, 1);
    CHECK(items[0].seq == &c);
    CHECK_EQ_INT(items[0].n_draft, 3);
    CHECK_EQ_INT(log.n, 2); /* block 0 for the pending token, block 1 for the draft */
    CHECK(c.kv.blocks[0] != shared0 && c.kv.blocks[1] != shared1);
    CHECK_EQ_INT(a.kv.blocks[0], shared0);
    CHECK_EQ_INT(a.kv.blocks[1], shared1);
    CHECK_EQ_INT(kv_block_refcount(kv, shared0), 1);
    CHECK_EQ_INT(kv_block_refcount(kv, shared1), 1);
    CHECK(kv_block_is_keyed(kv, shared1)); /* A's registered block keeps its key */
    CHECK_EQ_INT(log.src[1], shared1);
    sched_advance(&s, items, n);
    seq_done(&s, &a);
    seq_done(&s, &c);
    CHECK_EQ_INT(kv_pool_n_used(kv), 0);
    sched_free(&s);
    kv_pool_free(kv);
}

/* Fair queueing (scheduler.h): admission round-robin across clients, FIFO
 * within one.  One slot: each plan admits the next, which then finishes. */
TEST(scheduler_fair_queue) {
    enum { N = 8 };
    kite_token buf[N][8];
    sched_seq q[N];
    sched_item items[2];
    kv_pool *kv = NULL;
    sched s;
    CHECK_EQ_INT(kv_pool_new(64, 4, true, &kv), KITE_OK);
    CHECK_EQ_INT(sched_init(&s, kv, 1, 64, NULL, NULL), KITE_OK);
    /* 0..3: client A (key 7); 4: B (key 0, the default); 5, 6: C (key 9); 7: B, after A's first is admitted */
    static const uint64_t client[N] = {7, 7, 7, 7, 0, 9, 9, 0};
    for (int i = 0; i < N; i++) {
        seq_init(&q[i], buf[i], 4);
        q[i].client = client[i];
    }
    for (int i = 0; i < 7; i++) sched_enqueue(&s, &q[i]);
    CHECK_EQ_INT(s.n_wait, 7);
    /* A1, then B1 and C1 before A's others; B's second (sent after A1 was
     * admitted) takes round 2, after A2 and C2 that were waiting for it */
    static const int want[N] = {0, 4, 5, 1, 6, 7, 2, 3};
    for (int k = 0; k < N; k++) {
        int32_t n = sched_plan(&s, items);
        CHECK_EQ_INT(n, 1);
        CHECK_EQ_INT(s.n_running, 1);
        const int got = n == 1 ? (int)(items[0].seq - q) : -1;
        CHECK_EQ_INT(got, want[k]);
        if (k == 0) sched_enqueue(&s, &q[7]);
        if (got >= 0) seq_done(&s, &q[got]);
    }
    CHECK(sched_idle(&s));

    /* one client alone: plain FCFS, also when another client arrives later */
    for (int i = 0; i < 4; i++) {
        seq_init(&q[i], buf[i], 4);
        q[i].client = 3;
        sched_enqueue(&s, &q[i]);
    }
    static const int want2[5] = {0, 1, 4, 2, 3};
    for (int k = 0; k < 5; k++) {
        int32_t n = sched_plan(&s, items);
        const int got = n == 1 ? (int)(items[0].seq - q) : -1;
        CHECK_EQ_INT(got, want2[k]);
        if (k == 0) { /* client 5 arrives while 1..3 of client 3 wait: after 1 (round vnow + 1) */
            seq_init(&q[4], buf[4], 4);
            q[4].client = 5;
            sched_enqueue(&s, &q[4]);
        }
        if (got >= 0) seq_done(&s, &q[got]);
    }
    CHECK(sched_idle(&s));
    sched_free(&s);
    kv_pool_free(kv);
}

TEST(bad_params) {
    engine *e = NULL;
    engine_params p = engine_default_params();
    p.spec_lookup_n = -1;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    p = engine_default_params();
    p.spec_lookup_n = 3;
    p.spec_draft_max = 17;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    CHECK_CONTAINS(kite_last_error(), "spec_draft_max");
    CHECK(e == NULL);
}

int main(void) {
    kite_model_params mp = kite_model_default_params();
    if (kite_model_load(MODEL, &mp, &g_model) != KITE_OK) {
        printf("cannot load %s: %s\n", MODEL, kite_last_error());
        return 1;
    }
    RUN(greedy_equals_plain_decoding);
    RUN(shared_blocks_and_prefixes);
    RUN(small_pool_and_step_budget);
    RUN(limits_and_stop_strings);
    RUN(sampling_distribution);
    RUN(scheduler_draft_items);
    RUN(scheduler_fair_queue);
    RUN(bad_params);
    kite_model_free(g_model);
    return harness_summary(__FILE__);
}
