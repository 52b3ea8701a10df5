/*
 * test_engine.c - the serving engine (src/engine/engine.c, scheduler.c) with
 * the bundled stories260K model.
 *
 *   - 32 concurrent greedy requests (different prompts and lengths, from 4
 *     submitting threads) each give exactly the tokens and text of the same
 *     request served alone, and of plain kite_ctx_eval greedy decoding;
 *   - seeded sampling at temperature 0.9: batched == alone;
 *   - shared prompt prefixes hit the prefix cache (stats, n_cached) and the
 *     outputs are unchanged;
 *   - a pool too small for all sequences forces preemption (stats) and the
 *     outputs are unchanged;
 *   - cancellation mid-generation: no callback after engine_cancel returns,
 *     every block released (stats);
 *   - stop strings (cut before the match, held-back text, "stop"), the stop
 *     filter on hand-made pieces (split matches, false starts, UTF-8),
 *     max_tokens ("length"), submit errors (prompt too long, bad token,
 *     empty prompt, max_tokens 0), engine_free cancelling live requests;
 *   - per-token logprobs (issue 24) equal log_softmax of plain decoding's
 *     rows with a logit_bias that bans greedy's first token.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kite.h"
#include "engine/engine.h"
#include "generate/stop.h"

#include "engine_harness.h"

static engine *new_engine(int32_t n_parallel, int32_t n_ctx, int64_t kv_mem, int32_t step_tokens) {
    engine_params p = harness_params(n_parallel, n_ctx, kv_mem, step_tokens);
    return harness_engine(&p);
}

/* The same with blocks of 16 positions (the block arithmetic of a test). */
static engine *new_engine16(int32_t n_parallel, int32_t n_ctx, int64_t kv_mem, int32_t step_tokens) {
    engine_params p = harness_params(n_parallel, n_ctx, kv_mem, step_tokens);
    p.block_size = 16;
    return harness_engine(&p);
}

/* Runs each spec alone (one at a time) on engine e. */
static void run_alone(engine *e, const req_spec *specs, int32_t n, collect *out) {
    for (int32_t i = 0; i < n; i++) {
        collect_init(&out[i]);
        engine_req q = to_req(&specs[i]);
        CHECK_EQ_INT(engine_submit(e, &q, on_event, &out[i], NULL), KITE_OK);
        CHECK(collect_wait(&out[i], 30));
    }
}

typedef struct submit_job {
    engine *e;
    const req_spec *specs;
    collect *out;
    int32_t first, n;
} submit_job;

static void *submit_thread(void *arg) {
    submit_job *j = arg;
    for (int32_t i = j->first; i < j->first + j->n; i++) {
        engine_req q = to_req(&j->specs[i]);
        if (engine_submit(j->e, &q, on_event, &j->out[i], NULL) != KITE_OK) j->out[i].kind = -1;
    }
    return NULL;
}

/* Submits all specs at once from n_threads threads and waits for them. */
static void run_concurrent(engine *e, const req_spec *specs, int32_t n, collect *out, int n_threads) {
    pthread_t th[8];
    submit_job jobs[8];
    for (int32_t i = 0; i < n; i++) collect_init(&out[i]);
    const int32_t per = (n + n_threads - 1) / n_threads;
    for (int t = 0; t < n_threads; t++) {
        const int32_t first = t * per, cnt = first + per > n ? n - first : per;
        jobs[t] = (submit_job){.e = e, .specs = specs, .out = out, .first = first, .n = cnt < 0 ? 0 : cnt};
        pthread_create(&th[t], NULL, submit_thread, &jobs[t]);
    }
    for (int t = 0; t < n_threads; t++) pthread_join(th[t], NULL);
    for (int32_t i = 0; i < n; i++) CHECK_MSG(collect_wait(&out[i], 60), "request %d did not finish", i);
}

static const char *const story_bits[] = {
    "Once upon a time",
    "Lily and Tom went to the park to play with a big red ball",
    "The little dog was sad because",
    "One day, a cat",
    "Ben",
    "There was a small bird who loved to sing. Every morning it sang a happy song for the",
    "Mom said",
    "The sun was hot and the children wanted to swim in the lake, so they",
};
#define N_BITS (int32_t)(sizeof story_bits / sizeof story_bits[0])

/* 32 prompts of different lengths: story openings, some joined. */
static void make_specs(req_spec *specs, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        char text[512];
        if (i < N_BITS) snprintf(text, sizeof text, "%s", story_bits[i]);
        else snprintf(text, sizeof text, "%s %s", story_bits[i % N_BITS], story_bits[(i * 3 + 1) % N_BITS]);
        spec_from_text(&specs[i], text, 8 + (i * 7) % 29);
    }
}

/* ---- tests --------------------------------------------------------------- */

TEST(concurrent_equals_alone_and_reference) {
    enum { N = 32 };
    static req_spec specs[N];
    static collect batched[N], alone[N], ref[N];
    make_specs(specs, N);
    engine *e = new_engine(16, 256, 0, 64);
    if (!e) return;
    run_concurrent(e, specs, N, batched, 4);
    engine_stats st;
    stats_after(e, N, &st);
    /* continuous batching: far fewer forward passes than generated tokens */
    CHECK_MSG(st.steps * 4 <= st.tokens_out, "%lld steps for %lld tokens", (long long)st.steps,
              (long long)st.tokens_out);
    run_alone(e, specs, N, alone);
    stats_after(e, 2 * N, &st);
    CHECK_EQ_INT(st.requests_total, 2 * N);
    CHECK_EQ_INT(st.requests_done, 2 * N);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK(st.steps > 0);
    engine_free(e);
    int n_stop = 0;
    for (int32_t i = 0; i < N; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        reference(&specs[i], &ref[i]);
        CHECK_MSG(batched[i].kind == ENGINE_EV_DONE, "request %d: final event %d", i, batched[i].kind);
        CHECK_MSG(same_output(&batched[i], &alone[i]), "request %d: batched \"%s\" != alone \"%s\"", i,
                  batched[i].text, alone[i].text);
        CHECK_MSG(same_output(&batched[i], &ref[i]), "request %d: batched \"%s\" != reference \"%s\"", i,
                  batched[i].text, ref[i].text);
        CHECK_MSG(same_logits(&batched[i], &ref[i]), "request %d: logits differ from the reference", i);
        CHECK_MSG(same_logits(&alone[i], &ref[i]), "request %d: logits (alone) differ from the reference", i);
        CHECK_EQ_INT(batched[i].n_gen, ref[i].n_toks);
        CHECK_EQ_INT(batched[i].n_prompt, specs[i].n_prompt);
        const bool full = ref[i].n_toks == specs[i].max_tokens;
        CHECK_STR_EQ(batched[i].reason, full ? "length" : "stop");
        n_stop += !full;
        collect_destroy(&batched[i]);
        collect_destroy(&alone[i]);
    }
    (void)n_stop;
}

TEST(sampled_batched_equals_alone) {
    enum { N = 8 };
    static req_spec specs[N];
    static collect batched[N], alone[N], ref[N];
    make_specs(specs, N);
    for (int32_t i = 0; i < N; i++) {
        specs[i].temperature = 0.9f;
        specs[i].seed = 1000 + (uint64_t)i;
        specs[i].max_tokens = 20;
    }
    engine *e = new_engine(8, 256, 0, 64);
    if (!e) return;
    run_concurrent(e, specs, N, batched, 2);
    run_alone(e, specs, N, alone);
    engine_free(e);
    for (int32_t i = 0; i < N; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        reference(&specs[i], &ref[i]);
        CHECK_MSG(same_output(&batched[i], &alone[i]), "request %d: \"%s\" != \"%s\"", i, batched[i].text,
                  alone[i].text);
        CHECK_MSG(same_output(&batched[i], &ref[i]), "request %d: \"%s\" != reference \"%s\"", i, batched[i].text,
                  ref[i].text);
        CHECK_MSG(same_logits(&batched[i], &ref[i]), "request %d: logits differ from the reference", i);
        collect_destroy(&batched[i]);
        collect_destroy(&alone[i]);
    }
}

TEST(prefix_cache_hits) {
    enum { N = 6 };
    static req_spec specs[N];
    static collect out[N], ref[N];
    const char *base = "There was a small bird who loved to sing. Every morning it sang a happy song for the "
                       "children in the park, and they";
    const char *tails[N] = {"", " laughed", " danced and", " Lily said", " the dog", ""};
    for (int32_t i = 0; i < N; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", base, tails[i]);
        spec_from_text(&specs[i], text, 12);
    }
    CHECK(specs[0].n_prompt > 32); /* at least two full blocks shared */
    engine *e = new_engine16(8, 256, 0, 64);
    if (!e) return;
    /* the first request fills the cache, the others then run together */
    collect_init(&out[0]);
    engine_req q0 = to_req(&specs[0]);
    CHECK_EQ_INT(engine_submit(e, &q0, on_event, &out[0], NULL), KITE_OK);
    CHECK(collect_wait(&out[0], 30));
    engine_stats st;
    stats_after(e, 1, &st);
    CHECK_EQ_INT(st.prefix_hit_tokens, 0);
    CHECK(st.kv_blocks_cached > 0);
    run_concurrent(e, specs + 1, N - 1, out + 1, 2);
    stats_after(e, N, &st);
    CHECK(st.prefix_hit_tokens >= (int64_t)(N - 1) * 32);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    engine_free(e);
    for (int32_t i = 0; i < N; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        reference(&specs[i], &ref[i]);
        if (i > 0) CHECK_MSG(out[i].n_cached >= 32, "request %d: n_cached %d", i, out[i].n_cached);
        CHECK_MSG(same_output(&out[i], &ref[i]), "request %d: \"%s\" != reference \"%s\"", i, out[i].text,
                  ref[i].text);
        CHECK_MSG(same_logits(&out[i], &ref[i]), "request %d: logits differ from the reference", i);
        collect_destroy(&out[i]);
    }
    /* the repeated prompt reuses everything but its last partial block */
    CHECK_EQ_INT(out[N - 1].n_cached, (specs[N - 1].n_prompt - 1) / 16 * 16);
}

TEST(preemption_keeps_outputs) {
    enum { N = 8 };
    static req_spec specs[N];
    static collect out[N], ref[N];
    make_specs(specs, N);
    for (int32_t i = 0; i < N; i++) {
        specs[i].max_tokens = 40 + 5 * i;
        specs[i].ignore_eos = true;
    }
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    /* 12 blocks of 16 positions: far less than 8 sequences of ~60 positions */
    const int64_t pos_bytes = 2LL * info.n_layer * info.n_head_kv * (info.n_embd / info.n_head) * 4;
    engine *e = new_engine16(8, 128, 12 * 16 * pos_bytes, 64);
    if (!e) return;
    run_concurrent(e, specs, N, out, 2);
    engine_stats st;
    stats_after(e, N, &st);
    CHECK_EQ_INT(st.kv_blocks_total, 12);
    CHECK_MSG(st.preemptions > 0, "no preemption happened");
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    engine_free(e);
    for (int32_t i = 0; i < N; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        reference(&specs[i], &ref[i]);
        CHECK_MSG(same_output(&out[i], &ref[i]), "request %d: \"%s\" != reference \"%s\"", i, out[i].text,
                  ref[i].text);
        CHECK_MSG(same_logits(&out[i], &ref[i]), "request %d: logits differ from the reference", i);
        CHECK_STR_EQ(out[i].reason, "length");
        collect_destroy(&out[i]);
    }
}

TEST(cancel_frees_blocks) {
    req_spec s;
    spec_from_text(&s, "Once upon a time", 400);
    s.ignore_eos = true;
    engine *e = new_engine(4, 512, 0, 64);
    if (!e) return;
    static collect a, b;
    collect_init(&a);
    collect_init(&b);
    a.delay_ms = 1;
    engine_req q = to_req(&s);
    uint64_t id = 0;
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &a, &id), KITE_OK);
    /* b cancels itself from its own callback after 3 tokens */
    b.cancel_after = 3;
    b.e = e;
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &b, &b.id), KITE_OK);
    CHECK(id != b.id);
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&a.mu);
        const int32_t got = a.n_toks;
        pthread_mutex_unlock(&a.mu);
        if (got >= 10) break;
        sleep_ms(1);
    }
    engine_cancel(e, id);
    pthread_mutex_lock(&a.mu);
    const int32_t events = a.n_events;
    pthread_mutex_unlock(&a.mu);
    engine_stats st = {0};
    stats_after(e, 2, &st);
    CHECK_EQ_INT(st.requests_done, 2);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.kv_slots_allocated, 0);
    pthread_mutex_lock(&a.mu);
    CHECK_EQ_INT(a.n_events, events); /* nothing after engine_cancel returned */
    CHECK(!a.done);
    CHECK(a.n_toks >= 10 && a.n_toks < 400);
    pthread_mutex_unlock(&a.mu);
    CHECK(!b.done);
    CHECK_EQ_INT(b.n_toks, 3);
    engine_cancel(e, 12345); /* unknown id: ignored */
    engine_free(e);
    collect_destroy(&a);
    collect_destroy(&b);
}

TEST(stop_strings) {
    req_spec s;
    spec_from_text(&s, "Once upon a time", 60);
    static collect ref, out, out2;
    memset(&ref, 0, sizeof ref);
    reference(&s, &ref);
    /* a stop string from the middle of the reference text, spanning tokens */
    CHECK(ref.n_text > 40);
    char stop[16];
    memcpy(stop, ref.text + 20, 7);
    stop[7] = '\0';
    const char *first = strstr(ref.text, stop);
    const size_t cut = (size_t)(first - ref.text);
    engine *e = new_engine(4, 256, 0, 64);
    if (!e) return;
    collect_init(&out);
    engine_req q = to_req(&s);
    const char *stops[] = {"never appears in a story 123", stop};
    q.stop = stops;
    q.n_stop = 2;
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &out, NULL), KITE_OK);
    CHECK(collect_wait(&out, 30));
    CHECK_STR_EQ(out.reason, "stop");
    CHECK_EQ_INT(out.n_text, cut);
    CHECK(strncmp(out.text, ref.text, cut) == 0);
    CHECK(out.n_toks < ref.n_toks);
    /* a stop string that never completes: its held-back prefix is released at the end */
    collect_init(&out2);
    char partial[64];
    snprintf(partial, sizeof partial, "%.*sZQ", 3, ref.text + ref.n_text - 3);
    const char *stops2[] = {partial};
    q.stop = stops2;
    q.n_stop = 1;
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &out2, NULL), KITE_OK);
    CHECK(collect_wait(&out2, 30));
    CHECK_MSG(same_output(&out2, &ref), "\"%s\" != \"%s\"", out2.text, ref.text);
    engine_free(e);
    collect_destroy(&out);
    collect_destroy(&out2);
}

TEST(max_tokens_and_submit_errors) {
    req_spec s;
    spec_from_text(&s, "Once upon a time", 5);
    engine *e = new_engine(2, 64, 0, 32);
    if (!e) return;
    static collect out;
    collect_init(&out);
    engine_req q = to_req(&s);
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &out, NULL), KITE_OK);
    CHECK(collect_wait(&out, 30));
    CHECK_STR_EQ(out.reason, "length");
    CHECK_EQ_INT(out.n_toks, 5);
    CHECK_EQ_INT(out.n_gen, 5);

    /* too long for n_ctx 64 */
    static kite_token longp[64];
    for (int i = 0; i < 64; i++) longp[i] = 300;
    engine_req bad = q;
    bad.prompt = longp;
    bad.n_prompt = 64;
    CHECK_EQ_INT(engine_submit(e, &bad, on_event, &out, NULL), KITE_E_RANGE);
    CHECK_CONTAINS(kite_last_error(), "does not fit");
    bad.n_prompt = 63; /* fits: max_tokens is clipped to the one position left */
    static collect clip;
    collect_init(&clip);
    bad.max_tokens = 50;
    bad.ignore_eos = true;
    CHECK_EQ_INT(engine_submit(e, &bad, on_event, &clip, NULL), KITE_OK);
    CHECK(collect_wait(&clip, 30));
    CHECK_EQ_INT(clip.n_toks, 1);
    CHECK_STR_EQ(clip.reason, "length");
    bad = q;
    longp[0] = 512;
    bad.prompt = longp;
    bad.n_prompt = 2;
    CHECK_EQ_INT(engine_submit(e, &bad, on_event, &out, NULL), KITE_E_RANGE);
    bad.n_prompt = 0;
    CHECK_EQ_INT(engine_submit(e, &bad, on_event, &out, NULL), KITE_E_ARG);
    bad = q;
    bad.max_tokens = 0;
    CHECK_EQ_INT(engine_submit(e, &bad, on_event, &out, NULL), KITE_E_ARG);
    CHECK_EQ_INT(engine_submit(e, &q, NULL, NULL, NULL), KITE_E_ARG);
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.requests_total, 2);
    engine_free(e);
    collect_destroy(&out);
    collect_destroy(&clip);
}

TEST(free_cancels_live_requests) {
    req_spec s;
    spec_from_text(&s, "Once upon a time", 400);
    s.ignore_eos = true;
    engine *e = new_engine(1, 512, 0, 64);
    if (!e) return;
    static collect a, b;
    collect_init(&a);
    collect_init(&b);
    a.delay_ms = 1;
    engine_req q = to_req(&s);
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &a, NULL), KITE_OK);
    CHECK_EQ_INT(engine_submit(e, &q, on_event, &b, NULL), KITE_OK); /* waits: n_parallel 1 */
    engine_free(e);
    CHECK(a.done && b.done);
    CHECK_STR_EQ(a.reason, "cancelled");
    CHECK_STR_EQ(b.reason, "cancelled");
    collect_destroy(&a);
    collect_destroy(&b);
}

/* Pushes pieces through a filter; returns the released text, *stopped set. */
static void filter_run(const char *const *stops, int32_t n_stop, const char *const *pieces, int n, char *out,
                       size_t cap, bool *stopped, size_t *released_after_first) {
    stop_filter f;
    sbuf b = {0};
    CHECK_EQ_INT(stop_filter_init(&f, stops, n_stop), KITE_OK);
    *stopped = false;
    for (int i = 0; i < n && !*stopped; i++) {
        int rc = stop_filter_push(&f, pieces[i], strlen(pieces[i]), &b);
        CHECK(rc == 0 || rc == 1);
        *stopped = rc == 1;
        if (i == 0 && released_after_first) *released_after_first = b.n;
    }
    if (!*stopped) CHECK_EQ_INT(stop_filter_finish(&f, &b), KITE_OK);
    snprintf(out, cap, "%s", b.p ? b.p : "");
    sbuf_free(&b);
    stop_filter_free(&f);
}

TEST(stop_filter_pieces) {
    char out[128];
    bool stopped;
    size_t first = 0;
    /* a stop string split over three pieces; text before it is released */
    const char *stops[] = {"", "END!", "xyz"};
    const char *p1[] = {"hello E", "N", "D! more"};
    filter_run(stops, 3, p1, 3, out, sizeof out, &stopped, &first);
    CHECK(stopped);
    CHECK_STR_EQ(out, "hello ");
    CHECK_EQ_INT(first, 6); /* "E" held back after the first piece */
    /* a false start is released once it cannot match any more */
    const char *p2[] = {"ab EN", "Dx", "yZ"};
    filter_run(stops, 3, p2, 3, out, sizeof out, &stopped, &first);
    CHECK(!stopped);
    CHECK_STR_EQ(out, "ab ENDxyZ");
    CHECK_EQ_INT(first, 3);
    /* the earliest of several stop strings wins */
    const char *p3[] = {"1 xyz 2 END!"};
    filter_run(stops, 3, p3, 1, out, sizeof out, &stopped, NULL);
    CHECK(stopped);
    CHECK_STR_EQ(out, "1 ");
    /* multi-byte stop strings: held text starts on a character boundary */
    const char *ustops[] = {"\xC3\xA9t\xC3\xA9"};
    const char *p4[] = {"caf\xC3\xA9", "s \xC3\xA9t", "\xC3\xA9 fin"};
    filter_run(ustops, 1, p4, 3, out, sizeof out, &stopped, &first);
    CHECK(stopped);
    CHECK_STR_EQ(out, "caf\xC3\xA9s ");
    CHECK_EQ_INT(first, 3); /* "\xC3\xA9" held: it starts the stop string */
    /* no stop strings: everything passes straight through */
    const char *p5[] = {"a", "b"};
    filter_run(NULL, 0, p5, 2, out, sizeof out, &stopped, NULL);
    CHECK_STR_EQ(out, "ab");
}

TEST(bad_params) {
    engine *e = NULL;
    engine_params p = engine_default_params();
    p.n_parallel = -1;
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    p = engine_default_params();
    p.kv_mem_bytes = 1; /* less than one block */
    CHECK_EQ_INT(engine_new(g_model, &p, &e), KITE_E_ARG);
    CHECK(e == NULL);
    engine_free(NULL);
}

/* Per-token logprobs of TEXT events (issue 24), beside the usual collection. */
typedef struct lp_collect {
    collect c; /* first: on_event's user */
    kite_logprobs lp[MAX_TOK];
    int32_t n_lp;
} lp_collect;

static void on_event_lp(void *user, const engine_event *ev) {
    lp_collect *l = user;
    if (ev->kind == ENGINE_EV_TEXT && ev->logprobs && l->n_lp < MAX_TOK) l->lp[l->n_lp++] = *ev->logprobs;
    on_event(&l->c, ev);
}

/* logprobs: one record per output token, equal to log_softmax of plain
 * decoding's row with the logit_bias applied; a -100 bias bans the token
 * greedy would pick. */
TEST(logprobs_and_logit_bias) {
    req_spec s;
    spec_from_text(&s, "Once upon a time", 24);
    static collect ref;
    memset(&ref, 0, sizeof ref);
    reference(&s, &ref);
    CHECK(ref.n_toks > 0);
    const kite_token banned = ref.toks[0];
    engine *e = new_engine(2, 256, 0, 64);
    if (!e) return;
    static lp_collect out;
    collect_init(&out.c);
    out.n_lp = 0;
    engine_req q = to_req(&s);
    kite_logit_bias b = {banned, -100.0f};
    q.sampling.logit_bias = &b;
    q.sampling.n_logit_bias = 1;
    q.logprobs = true;
    q.top_logprobs = 5;
    CHECK_EQ_INT(engine_submit(e, &q, on_event_lp, &out, NULL), KITE_OK);
    CHECK(collect_wait(&out.c, 30));
    CHECK_EQ_INT(out.n_lp, out.c.n_toks);
    /* replay the output with kite_ctx_eval and compare with log_softmax of each row */
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = MAX_TOK;
    cp.n_threads = 1;
    kite_ctx *ctx = NULL;
    CHECK_EQ_INT(kite_ctx_new(g_model, &cp, &ctx), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(ctx, s.prompt, s.n_prompt, false), KITE_OK);
    double worst = 0;
    for (int32_t i = 0; i < out.n_lp && ctx; i++) {
        const float *row = kite_ctx_logits(ctx, -1);
        const kite_token t = out.c.toks[i];
        CHECK(t != banned);
        CHECK_EQ_INT(out.lp[i].token, t);
        CHECK_EQ_INT(out.lp[i].n_top, 5);
        CHECK_EQ_INT(out.lp[i].top[0].token, t); /* greedy: the most likely */
        double max = -INFINITY, sum = 0;
        for (int32_t v = 0; v < N_VOCAB; v++)
            if (v != banned && row[v] > max) max = row[v];
        for (int32_t v = 0; v < N_VOCAB; v++)
            if (v != banned) sum += exp((double)row[v] - max);
        const double want = (double)row[t] - max - log(sum), d = fabs(want - (double)out.lp[i].logprob);
        if (d > worst) worst = d;
        for (int32_t j = 0; j < 5; j++) CHECK(out.lp[i].top[j].token != banned);
        CHECK_EQ_INT(kite_ctx_eval(ctx, &t, 1, false), KITE_OK);
    }
    CHECK_MSG(worst < 1e-5, "worst logprob error %g", worst);
    kite_ctx_free(ctx);
    /* without logprobs no record comes */
    static lp_collect none;
    collect_init(&none.c);
    none.n_lp = 0;
    q.logprobs = false;
    q.top_logprobs = 0;
    CHECK_EQ_INT(engine_submit(e, &q, on_event_lp, &none, NULL), KITE_OK);
    CHECK(collect_wait(&none.c, 30));
    CHECK_EQ_INT(none.n_lp, 0);
    CHECK(same_output(&none.c, &out.c));
    q.top_logprobs = KITE_MAX_TOP_LOGPROBS + 1;
    CHECK_EQ_INT(engine_submit(e, &q, on_event_lp, &none, NULL), KITE_E_ARG);
    engine_free(e);
    collect_destroy(&out.c);
    collect_destroy(&none.c);
}

int main(void) {
    kite_model_params mp = kite_model_default_params();
    if (kite_model_load(MODEL, &mp, &g_model) != KITE_OK) {
        printf("cannot load %s: %s\n", MODEL, kite_last_error());
        return 1;
    }
    RUN(concurrent_equals_alone_and_reference);
    RUN(sampled_batched_equals_alone);
    RUN(prefix_cache_hits);
    RUN(preemption_keeps_outputs);
    RUN(cancel_frees_blocks);
    RUN(stop_strings);
    RUN(max_tokens_and_submit_errors);
    RUN(free_cancels_live_requests);
    RUN(stop_filter_pieces);
    RUN(bad_params);
    RUN(logprobs_and_logit_bias);
    kite_model_free(g_model);
    return harness_summary(__FILE__);
}
