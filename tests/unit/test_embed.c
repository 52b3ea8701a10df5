/*
 * test_embed.c - kite_ctx_embed (src/model/embed.c): shape and norm of the
 * vectors, determinism, a batch equal to its inputs one by one (bit for
 * bit), the pooling modes, the final hidden state it pools (checked against
 * the logits: the classifier applied to the last-token vector must give
 * kite_ctx_eval's last logits), every architecture of the tiny synth
 * shapes, a quantized model, and the argument errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "model_helpers.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/context.h"
#include "roofline/synth.h"

#include "synth_harness.h"

static const char *const MODEL = "models/stories260K.gguf";

static double l2(const float *v, int32_t n) {
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s);
}

/* Tokens of text with BOS (caller frees). */
static kite_token *tok(kite_model *m, const char *text, int32_t *n) {
    size_t cap = strlen(text) + 8, got = 0;
    kite_token *t = malloc(sizeof *t * cap);
    CHECK(kite_tokenize(m, text, strlen(text), true, t, cap, &got) == KITE_OK);
    *n = (int32_t)got;
    return t;
}

/* Embeds three inputs one by one and as one batch, on any model: norm 1,
 * batch == singles bit for bit, deterministic, inputs differ. */
static void check_model_embeds(kite_model *m, int n_ctx, const char *what) {
    kite_ctx *c = NULL;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    CHECK_MSG(kite_ctx_new(m, &cp, &c) == KITE_OK, "%s: ctx: %s", what, kite_last_error());
    if (!c) return;
    kite_model_info info;
    kite_model_get_info(m, &info);
    const int32_t E = info.n_embd, V = info.n_vocab;
    /* three inputs of 3, 9 and 1 tokens (ids in range for any vocabulary) */
    const kite_token all[13] = {1, 300 % V, 301 % V, 5, 400 % V, 260 % V, 17, 42, 511 % V, 259, 7, 8, 9};
    const int32_t n_tok[3] = {3, 9, 1};
    float *one = calloc((size_t)3 * E, sizeof(float)), *batch = calloc((size_t)3 * E, sizeof(float));
    float *again = calloc((size_t)3 * E, sizeof(float));
    const kite_embed_params ep = kite_embed_default_params();
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        for (int s = 0; s < 3; s++) {
            CHECK_MSG(kite_ctx_embed(c, all + off, n_tok[s], &ep, (pass ? again : one) + (size_t)s * E) == KITE_OK,
                      "%s: %s", what, kite_last_error());
            off += (size_t)n_tok[s];
        }
    }
    CHECK(kite_ctx_embed_batch(c, all, n_tok, 3, &ep, batch) == KITE_OK);
    CHECK_EQ_INT(kite_ctx_n_past(c), 0);
    CHECK_MSG(!memcmp(one, batch, sizeof(float) * 3 * (size_t)E), "%s: batch differs from one by one", what);
    CHECK_MSG(!memcmp(one, again, sizeof(float) * 3 * (size_t)E), "%s: not deterministic", what);
    for (int s = 0; s < 3; s++) CHECK_MSG(fabs(l2(one + (size_t)s * E, E) - 1.0) < 1e-5, "%s: norm %g", what, l2(one + (size_t)s * E, E));
    CHECK_MSG(memcmp(one, one + E, sizeof(float) * (size_t)E) != 0, "%s: two inputs give one vector", what);
    for (int i = 0; i < 3 * E; i++) CHECK_MSG(isfinite(one[i]), "%s: value %d not finite", what, i);
    free(one);
    free(batch);
    free(again);
    kite_ctx_free(c);
}

TEST(test_embed_shape_norm_batch) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    check_model_embeds(m, 64, "stories260K");
    kite_model_free(m);
}

/* Embedding after a generation, or after a long input, gives the vector of
 * a fresh context: the KV state is cleared. */
TEST(test_embed_independent_of_state) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 128, 1), *fresh = new_ctx_checked(m, 128, 1);
    if (!c || !fresh) goto done;
    int32_t n = 0, nl = 0;
    kite_token *t = tok(m, "Lily saw a big dog.", &n);
    kite_token *longer = tok(m, "Once upon a time there was a little girl who liked to play in the park with her friends.", &nl);
    const int32_t E = m->hp.n_embd;
    float *a = malloc(sizeof(float) * E), *b = malloc(sizeof(float) * E);
    CHECK(kite_ctx_embed(fresh, t, n, NULL, a) == KITE_OK);
    CHECK(kite_ctx_eval(c, longer, nl, false) == KITE_OK);
    CHECK(kite_ctx_embed(c, t, n, NULL, b) == KITE_OK);
    CHECK_MSG(!memcmp(a, b, sizeof(float) * E), "embedding depends on the earlier eval");
    CHECK(kite_ctx_embed(c, longer, nl, NULL, b) == KITE_OK);
    CHECK(kite_ctx_embed(c, t, n, NULL, b) == KITE_OK);
    CHECK_MSG(!memcmp(a, b, sizeof(float) * E), "embedding depends on the previous input");
    /* the context works for generation afterwards */
    CHECK(kite_ctx_eval(c, t, n, false) == KITE_OK);
    CHECK_EQ_INT(kite_ctx_n_past(c), n);
    free(a);
    free(b);
    free(t);
    free(longer);
done:
    kite_ctx_free(c);
    kite_ctx_free(fresh);
    kite_model_free(m);
}

/* Mean, last and CLS differ; CLS of two inputs starting with BOS are equal
 * (a causal model's first token has seen only itself); no normalisation
 * keeps the raw scale; the last-token state through the classifier gives
 * kite_ctx_eval's logits. */
TEST(test_embed_pooling) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 128, 1);
    if (!c) goto done;
    const int32_t E = m->hp.n_embd, V = m->hp.n_vocab;
    int32_t n1 = 0, n2 = 0;
    kite_token *t1 = tok(m, "The cat sat on the mat.", &n1), *t2 = tok(m, "A dog ran home.", &n2);
    float *mean = malloc(sizeof(float) * E), *last = malloc(sizeof(float) * E), *cls = malloc(sizeof(float) * E);
    float *cls2 = malloc(sizeof(float) * E), *raw = malloc(sizeof(float) * E);
    kite_embed_params ep = kite_embed_default_params();
    CHECK_EQ_INT(ep.pooling, KITE_POOLING_MEAN);
    CHECK(ep.normalize);
    CHECK(kite_ctx_embed(c, t1, n1, &ep, mean) == KITE_OK);
    ep.pooling = KITE_POOLING_LAST;
    CHECK(kite_ctx_embed(c, t1, n1, &ep, last) == KITE_OK);
    ep.pooling = KITE_POOLING_CLS;
    CHECK(kite_ctx_embed(c, t1, n1, &ep, cls) == KITE_OK);
    CHECK(kite_ctx_embed(c, t2, n2, &ep, cls2) == KITE_OK);
    CHECK(memcmp(mean, last, sizeof(float) * E) != 0);
    CHECK(memcmp(mean, cls, sizeof(float) * E) != 0);
    CHECK(memcmp(last, cls, sizeof(float) * E) != 0);
    CHECK_MSG(!memcmp(cls, cls2, sizeof(float) * E), "CLS (BOS) vectors of a causal model should be equal");
    ep.pooling = KITE_POOLING_LAST;
    ep.normalize = false;
    CHECK(kite_ctx_embed(c, t1, n1, &ep, raw) == KITE_OK);
    const double nr = l2(raw, E);
    CHECK_MSG(fabs(nr - 1.0) > 1e-3, "unnormalised norm %g", nr);
    for (int32_t i = 0; i < E; i++) CHECK_MSG(fabsf(raw[i] / (float)nr - last[i]) < 1e-5, "dim %d", i);
    /* the classifier on the raw last-token state = the eval's last logits */
    float *logits = malloc(sizeof(float) * V);
    kern_matmul(c->tp, &m->output, raw, 1, logits, V, c->mm_scratch);
    CHECK(kite_ctx_eval(c, t1, n1, false) == KITE_OK);
    const float *ref = kite_ctx_logits(c, -1);
    double worst = 0;
    for (int32_t i = 0; i < V; i++) worst = fmax(worst, fabs((double)logits[i] - ref[i]));
    CHECK_MSG(worst < 1e-4, "classifier(last-token embedding) differs from the eval's logits by %g", worst);
    free(logits);
    free(mean);
    free(last);
    free(cls);
    free(cls2);
    free(raw);
    free(t1);
    free(t2);
done:
    kite_ctx_free(c);
    kite_model_free(m);
}

/* An input longer than n_batch runs in chunks and still gives a unit vector;
 * one longer than n_ctx is refused. */
TEST(test_embed_long_and_errors) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 256, 1);
    if (!c) goto done;
    const int32_t E = m->hp.n_embd;
    kite_token *t = malloc(sizeof *t * 300);
    for (int i = 0; i < 300; i++) t[i] = i ? 3 + (i * 37) % 500 : 1;
    float *v = malloc(sizeof(float) * E);
    CHECK(kite_ctx_embed(c, t, 256, NULL, v) == KITE_OK);
    CHECK(fabs(l2(v, E) - 1.0) < 1e-5);
    CHECK_EQ_INT(kite_ctx_embed(c, t, 257, NULL, v), KITE_E_RANGE);
    CHECK_EQ_INT(kite_ctx_embed(c, t, 0, NULL, v), KITE_E_ARG);
    CHECK_EQ_INT(kite_ctx_embed(NULL, t, 3, NULL, v), KITE_E_ARG);
    CHECK_EQ_INT(kite_ctx_embed(c, t, 3, NULL, NULL), KITE_E_ARG);
    kite_embed_params bad = {.pooling = 7, .normalize = true};
    CHECK_EQ_INT(kite_ctx_embed(c, t, 3, &bad, v), KITE_E_ARG);
    kite_token oov[2] = {1, 1 << 20};
    CHECK_EQ_INT(kite_ctx_embed(c, oov, 2, NULL, v), KITE_E_RANGE);
    CHECK_EQ_INT(kite_ctx_embed_batch(c, t, (const int32_t[]){3}, 0, NULL, v), KITE_E_ARG);
    CHECK_EQ_INT(kite_ctx_n_past(c), 0);
    free(t);
    free(v);
done:
    kite_ctx_free(c);
    kite_model_free(m);
}

/* A paged pool (the serving engine's context) is refused. */
TEST(test_embed_paged_refused) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = NULL;
    CHECK(ctx_new_sized(m, 64, 16, 16, 1, &c) == KITE_OK);
    if (c) {
        float v[64];
        const kite_token t[2] = {1, 5};
        CHECK_EQ_INT(kite_ctx_embed(c, t, 2, NULL, v), KITE_E_STATE);
    }
    kite_ctx_free(c);
    kite_model_free(m);
}

static char tmpdir[] = "/tmp/kite-test-embed-XXXXXX";

/* Every architecture the forward pass supports (the tiny synth shapes). */
TEST(test_embed_architectures) {
    static const char *const shapes[] = {"tiny-llama3", "tiny-mistral", "tiny-mixtral", "tiny-qwen2", "tiny-qwen3",
                                         "tiny-qwen3moe", "tiny-gpt2", "tiny-phi3", "tiny-swa"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, shapes[i]);
        kite_model *m = harness_synth_model(path, shapes[i]);
        if (!m) continue;
        check_model_embeds(m, 32, shapes[i]);
        kite_model_free(m);
        unlink(path);
    }
}

/* Quantized weights: the bundled Q4_K_M copy of stories260K, and the scale
 * tier's TinyLlama-shape q4_0 model when it has been made (make test). */
TEST(test_embed_quantized) {
    kite_model *m = load_model_checked("tests/data/quant-models/stories260K-Q4_K_M.gguf");
    if (!m) return;
    check_model_embeds(m, 64, "stories260K-Q4_K_M");
    kite_model_free(m);
}

TEST(test_embed_scale_q4_0) {
    const char *dir = getenv("KITE_SCALE_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/tl4-q4_0.gguf", dir && *dir ? dir : "build/scale");
    if (access(path, R_OK) != 0) SKIP_TEST("%s not made (make test makes it)", path);
    kite_model *m = load_model_checked(path);
    if (!m) return;
    check_model_embeds(m, 64, "tl4-q4_0");
    kite_model_free(m);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_embed_shape_norm_batch);
    RUN(test_embed_independent_of_state);
    RUN(test_embed_pooling);
    RUN(test_embed_long_and_errors);
    RUN(test_embed_paged_refused);
    RUN(test_embed_architectures);
    RUN(test_embed_quantized);
    RUN(test_embed_scale_q4_0);
    rmdir(tmpdir);
    return harness_summary("tests/unit/test_embed.c");
}
