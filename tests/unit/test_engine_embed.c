/*
 * test_engine_embed.c - embeddings through the serving engine (engine_req
 * .embed; docs/engine.md, "Embeddings"): each vector equals kite_ctx_embed's
 * on a context of its own bit for bit - alone, many at once, mixed with
 * generation requests in the same passes, with chunked prefill (a small
 * step budget), under preemption (a small pool), for every pooling mode -
 * and the generation requests beside them still equal plain decoding.
 * and with each drafter (lookup, skipped layers, lookahead).  Also: an input
 * of n_ctx tokens fits, errors are refused at submit, and an embedding never
 * takes a prefix-cache match.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "engine/engine.h"

#include "engine_harness.h"
#include "synth_harness.h"

#define N_EMBD_MAX 4096

typedef struct ecollect {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int kind;
    int32_t n_embd, n_prompt, n_cached;
    float vec[N_EMBD_MAX];
} ecollect;

static void on_embed(void *user, const engine_event *ev) {
    ecollect *c = user;
    pthread_mutex_lock(&c->mu);
    CHECK(ev->kind != ENGINE_EV_TEXT); /* an embedding streams no text */
    if (ev->kind != ENGINE_EV_TEXT) {
        c->done = true;
        c->kind = ev->kind;
        c->n_prompt = ev->n_prompt;
        c->n_cached = ev->n_cached;
        if (ev->embedding && ev->n_embd <= N_EMBD_MAX) {
            c->n_embd = ev->n_embd;
            memcpy(c->vec, ev->embedding, sizeof *c->vec * (size_t)ev->n_embd);
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static bool ecollect_wait(ecollect *c, double seconds) {
    return harness_wait_done(&c->mu, &c->cv, &c->done, seconds);
}

#define N_IN 6
static const char *const texts[N_IN] = {
    "Once upon a time there was a cat.",
    "The dog ran to the park and played with a big red ball all day long, and then he went home to sleep.",
    "Hi",
    "Lily liked red apples.",
    "A",
    "Tom and his mom went to the store to buy some bread and milk. They saw a big dog on the way.",
};

/* kite_ctx_embed of each text on a context of its own: the reference. */
static void reference_vecs(const kite_token (*toks)[MAX_TOK], const int32_t *n, int32_t pooling, float *out, int32_t E) {
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = MAX_TOK;
    cp.n_threads = 1;
    kite_ctx *ctx = NULL;
    CHECK_EQ_INT(kite_ctx_new(g_model, &cp, &ctx), KITE_OK);
    kite_embed_params ep = kite_embed_default_params();
    ep.pooling = pooling;
    for (int i = 0; i < N_IN; i++) CHECK_EQ_INT(kite_ctx_embed(ctx, toks[i], n[i], &ep, out + (size_t)i * E), KITE_OK);
    kite_ctx_free(ctx);
}

/* The embeddings of N_IN texts (each submitted `copies` times) beside `n_gen` generation
 * requests, on an engine with the given pool and step budget: every vector equals the
 * reference bit for bit, and every generation equals plain decoding. */
/* drafter settings for embed_mixed: 0 none, 1 prompt lookup, 2 self-speculative (layers
 * skipped), 3 lookahead */
static int g_drafter;

/* A gate the engine thread waits at in its first logits row until every
 * request of a case is submitted, so that what runs side by side (and
 * whether the small pool preempts) does not depend on how the submitting
 * thread is scheduled: a loaded host let the engine finish early sequences
 * before the later ones arrived, and nothing was preempted. */
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static bool g_gate_open = true;

static void gated_logits(void *hook_user, void *req_user, const float *logits, int32_t n_vocab) {
    pthread_mutex_lock(&g_gate_mu);
    while (!g_gate_open) pthread_cond_wait(&g_gate_cv, &g_gate_mu);
    pthread_mutex_unlock(&g_gate_mu);
    on_logits(hook_user, req_user, logits, n_vocab);
}

static void gate_set(bool open) {
    pthread_mutex_lock(&g_gate_mu);
    g_gate_open = open;
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
}

static int64_t embed_mixed(int32_t n_parallel, int64_t kv_mem, int32_t step, int32_t pooling, int n_gen, int copies,
                           const char *what) {
    kite_model_info info;
    kite_model_get_info(g_model, &info);
    const int32_t E = info.n_embd;
    static kite_token toks[N_IN][MAX_TOK];
    int32_t n[N_IN];
    for (int i = 0; i < N_IN; i++) {
        size_t got = 0;
        CHECK_EQ_INT(kite_tokenize(g_model, texts[i], strlen(texts[i]), true, toks[i], MAX_TOK, &got), KITE_OK);
        n[i] = (int32_t)got;
    }
    float *ref = calloc((size_t)N_IN * E, sizeof *ref);
    reference_vecs((const kite_token(*)[MAX_TOK])toks, n, pooling, ref, E);

    engine_params p = harness_params(n_parallel, MAX_TOK, kv_mem, step);
    bool skip[5] = {false, true, false, true, false}; /* stories260K: 5 layers */
    if (g_drafter == 1) p.spec_lookup_n = 3;
    if (g_drafter == 2) {
        p.spec_skip_layers = skip;
        p.n_spec_skip = 5;
    }
    if (g_drafter == 3) {
        p.spec_la_window = 4;
        p.spec_la_ngram = 3;
        p.spec_la_pool = 4;
    }
    engine *e = harness_engine(&p);
    if (!e) {
        free(ref);
        return 0;
    }
    engine_set_logits_hook(e, gated_logits, NULL);
    gate_set(false);
    const int n_emb = N_IN * copies;
    ecollect *ec = calloc((size_t)n_emb, sizeof *ec);
    collect *gc = calloc((size_t)(n_gen ? n_gen : 1), sizeof *gc);
    req_spec *gs = calloc((size_t)(n_gen ? n_gen : 1), sizeof *gs);
    for (int i = 0; i < n_emb; i++) {
        pthread_mutex_init(&ec[i].mu, NULL);
        pthread_cond_init(&ec[i].cv, NULL);
    }
    for (int j = 0; j < n_gen; j++) {
        collect_init(&gc[j]);
        spec_from_text(&gs[j], texts[(j + 1) % N_IN], 24 + 8 * j);
        gs[j].ignore_eos = true;
    }
    /* interleaved submissions: generation, embeddings, generation, ... */
    for (int i = 0, j = 0; i < n_emb || j < n_gen;) {
        if (j < n_gen && (j <= i / 3 || i >= n_emb)) {
            engine_req q = to_req(&gs[j]);
            CHECK_EQ_INT(engine_submit(e, &q, on_event, &gc[j], NULL), KITE_OK);
            j++;
        } else {
            engine_req q = {.prompt = toks[i % N_IN], .n_prompt = n[i % N_IN], .embed = true,
                            .embed_params = kite_embed_default_params()};
            q.embed_params.pooling = pooling;
            CHECK_MSG(engine_submit(e, &q, on_embed, &ec[i], NULL) == KITE_OK, "%s: submit: %s", what,
                      kite_last_error());
            i++;
        }
    }
    gate_set(true);
    for (int i = 0; i < n_emb; i++) {
        CHECK_MSG(ecollect_wait(&ec[i], 60), "%s: embedding %d did not finish", what, i);
        CHECK_EQ_INT(ec[i].kind, ENGINE_EV_DONE);
        CHECK_EQ_INT(ec[i].n_embd, E);
        CHECK_EQ_INT(ec[i].n_cached, 0);
        CHECK_EQ_INT(ec[i].n_prompt, n[i % N_IN]);
        CHECK_MSG(!memcmp(ec[i].vec, ref + (size_t)(i % N_IN) * E, sizeof(float) * (size_t)E),
                  "%s: embedding %d (input %d, pooling %d) differs from kite_ctx_embed's", what, i, i % N_IN, pooling);
    }
    for (int j = 0; j < n_gen; j++) {
        CHECK_MSG(collect_wait(&gc[j], 60), "%s: generation %d did not finish", what, j);
        collect ref_out;
        reference(&gs[j], &ref_out);
        CHECK_MSG(same_output(&gc[j], &ref_out) && same_logits(&gc[j], &ref_out),
                  "%s: generation %d beside embeddings differs from plain decoding", what, j);
        collect_destroy(&gc[j]);
    }
    engine_stats st;
    stats_after(e, n_emb + n_gen, &st);
    CHECK_EQ_INT(st.running, 0);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    engine_free(e);
    for (int i = 0; i < n_emb; i++) {
        pthread_mutex_destroy(&ec[i].mu);
        pthread_cond_destroy(&ec[i].cv);
    }
    free(ec);
    free(gc);
    free(gs);
    free(ref);
    return st.preemptions;
}

TEST(embed_alone_equals_ctx_embed) { (void)embed_mixed(4, 0, 512, KITE_POOLING_MEAN, 0, 1, "alone"); }

TEST(embed_mixed_with_generation) {
    (void)embed_mixed(4, 0, 512, KITE_POOLING_MEAN, 3, 2, "mixed, mean");
    (void)embed_mixed(4, 0, 512, KITE_POOLING_LAST, 2, 1, "mixed, last");
    (void)embed_mixed(4, 0, 512, KITE_POOLING_CLS, 2, 1, "mixed, cls");
}

/* a step budget of 7 tokens: every long input prefilled in chunks beside other work */
TEST(embed_chunked_prefill) { (void)embed_mixed(3, 0, 7, KITE_POOLING_MEAN, 2, 1, "chunked"); }

/* a pool of 100 positions (blocks of 2), less than the four running sequences grow to:
 * sequences preempted and recomputed */
TEST(embed_under_preemption) {
    const int64_t pos_bytes = 2 * 5 * 4 * 8 * 4; /* stories260K: 5 layers, 4 KV heads of 8, f32 */
    const int64_t pre = embed_mixed(4, 100 * pos_bytes, 512, KITE_POOLING_MEAN, 4, 3, "preemption");
    CHECK_MSG(pre > 0, "no preemption happened (%lld)", (long long)pre);
}

/* with each drafter: embeddings draft nothing, and both kinds of output are unchanged */
TEST(embed_with_drafters) {
    static const char *const names[] = {"", "prompt lookup", "skipped layers", "lookahead"};
    for (g_drafter = 1; g_drafter <= 3; g_drafter++) (void)embed_mixed(4, 0, 512, KITE_POOLING_MEAN, 3, 1, names[g_drafter]);
    g_drafter = 0;
}

/* Phi-3 LongRoPE (tiny-phi3: long factors past 32 positions): an engine of 4 sequences of
 * 24 positions has a pool of 96, but each sequence must get the short factors a context of
 * 24 uses (ctx_set_rope_n_ctx) - the vectors equal kite_ctx_embed's at n_ctx 24 */
TEST(embed_longrope_per_sequence) {
    char path[] = "/tmp/kite-test-engine-embed-phi3-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    unlink(path); /* harness_synth_model writes it */
    kite_model *m = harness_synth_model(path, "tiny-phi3");
    if (!m) return;
    kite_model_info info;
    kite_model_get_info(m, &info);
    const int32_t E = info.n_embd;
    const kite_token toks[3][20] = {{1, 5, 9, 200, 7, 33, 12, 8, 100, 4, 3, 2, 60, 61, 62, 63, 64, 65, 66, 67},
                                    {1, 400, 401, 402},
                                    {1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}};
    const int32_t n[3] = {20, 4, 12};
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 24;
    cp.n_threads = 1;
    kite_ctx *ctx = NULL;
    CHECK_EQ_INT(kite_ctx_new(m, &cp, &ctx), KITE_OK);
    float ref[3][N_EMBD_MAX];
    for (int i = 0; i < 3 && ctx; i++) CHECK_EQ_INT(kite_ctx_embed(ctx, toks[i], n[i], NULL, ref[i]), KITE_OK);
    kite_ctx_free(ctx);
    engine_params p = harness_params(4, 24, 0, 512);
    engine *e = NULL;
    CHECK_MSG(engine_new(m, &p, &e) == KITE_OK, "engine_new: %s", kite_last_error());
    ecollect c[3];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 3 && e; i++) {
        pthread_mutex_init(&c[i].mu, NULL);
        pthread_cond_init(&c[i].cv, NULL);
        engine_req q = {.prompt = toks[i], .n_prompt = n[i], .embed = true, .embed_params = kite_embed_default_params()};
        CHECK_EQ_INT(engine_submit(e, &q, on_embed, &c[i], NULL), KITE_OK);
    }
    for (int i = 0; i < 3 && e; i++) {
        CHECK(ecollect_wait(&c[i], 60) && c[i].n_embd == E);
        CHECK_MSG(!memcmp(c[i].vec, ref[i], sizeof(float) * (size_t)E), "phi3 input %d: engine != kite_ctx_embed", i);
        pthread_mutex_destroy(&c[i].mu);
        pthread_cond_destroy(&c[i].cv);
    }
    engine_free(e);
    kite_model_free(m);
    unlink(path);
}

TEST(embed_submit_errors) {
    engine_params p = harness_params(2, 64, 0, 512);
    engine *e = harness_engine(&p);
    if (!e) return;
    kite_token t[65];
    for (int i = 0; i < 65; i++) t[i] = 1 + i % 100;
    ecollect c = {0};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    engine_req q = {.prompt = t, .n_prompt = 65, .embed = true, .embed_params = kite_embed_default_params()};
    CHECK_EQ_INT(engine_submit(e, &q, on_embed, &c, NULL), KITE_E_RANGE); /* more than n_ctx */
    q.n_prompt = 64; /* n_ctx itself fits (nothing is generated) */
    q.embed_params.pooling = 7;
    CHECK_EQ_INT(engine_submit(e, &q, on_embed, &c, NULL), KITE_E_ARG);
    q.embed_params.pooling = KITE_POOLING_LAST;
    CHECK_EQ_INT(engine_submit(e, &q, on_embed, &c, NULL), KITE_OK);
    CHECK(ecollect_wait(&c, 60));
    CHECK_EQ_INT(c.kind, ENGINE_EV_DONE);
    CHECK(c.n_embd > 0);
    engine_free(e);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
}

int main(void) {
    kite_model_params mp = kite_model_default_params();
    if (kite_model_load(MODEL, &mp, &g_model) != KITE_OK) {
        printf("cannot load %s: %s\n", MODEL, kite_last_error());
        return 1;
    }
    RUN(embed_alone_equals_ctx_embed);
    RUN(embed_mixed_with_generation);
    RUN(embed_chunked_prefill);
    RUN(embed_under_preemption);
    RUN(embed_with_drafters);
    RUN(embed_longrope_per_sequence);
    RUN(embed_submit_errors);
    kite_model_free(g_model);
    return harness_summary(__FILE__);
}
