/*
 * test_model.c - the forward pass against references.
 *
 *   - stories260K (F32) logits vs llama2.c run.c (tests/data/golden), token by
 *     token and as one prefill batch, within the 1e-4 the golden README gives;
 *   - prefill-then-decode == token-by-token, 1 thread == 2 threads;
 *   - the F16 file written by llama.cpp and a BF16 conversion, with
 *     tolerances derived below;
 *   - greedy generations of every golden prompt through the public API;
 *   - synthetic models (MQA, GQA, untied head, partial rotary, NEOX-free
 *     llama, odd widths, chunked prefill) against a naive reference forward
 *     pass written independently in this file;
 *   - load errors naming the key/tensor, and context-state errors.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "core/timing.h"
#include "harness.h"
#include "json_mini.h"
#include "kite.h"
#include "convert/llama2c.h"
#include "model_helpers.h"
#include "tensor/dtype.h"

#define MODEL_F32 "models/stories260K.gguf"
#define MODEL_F16 "tests/data/tokenizer/stories260K-F16.gguf" /* written by llama.cpp's llama-quantize */
#define GOLD_LOGITS "tests/data/golden/stories260K-logits-once.f32"
#define GOLD_LOGITS_F16 "tests/data/golden/stories260K-F16-logits-once.f32"
#define GOLD_LOGITS_JSON "tests/data/golden/stories260K-logits-once.json"
#define GOLD_GREEDY "tests/data/golden/stories260K-greedy.jsonl"
#define N_VOCAB 512
#define N_POS 32

static char tmpdir[] = "/tmp/kite-test-model-XXXXXX";

/* ---- helpers ----------------------------------------------------------- */

static float *read_f32(const char *path, size_t n) {
    size_t size = 0;
    char *buf = harness_read_file(path, &size);
    if (!buf || size != n * sizeof(float)) {
        free(buf);
        return NULL;
    }
    return (float *)(void *)buf;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

/* Evaluates ids one token at a time; returns [n][n_vocab] logits (malloc). */
static float *logits_token_by_token(kite_model *m, const int32_t *ids, int n, int n_threads) {
    kite_ctx *c = new_ctx_checked(m, 64, n_threads);
    if (!c) return NULL;
    float *out = malloc(sizeof(float) * (size_t)n * N_VOCAB);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(kite_ctx_eval(c, &ids[i], 1, false), KITE_OK);
        memcpy(out + (size_t)i * N_VOCAB, kite_ctx_logits(c, -1), sizeof(float) * N_VOCAB);
    }
    kite_ctx_free(c);
    return out;
}

static float *logits_prefill(kite_model *m, const int32_t *ids, int n, int n_threads) {
    kite_ctx *c = new_ctx_checked(m, 64, n_threads);
    if (!c) return NULL;
    float *out = malloc(sizeof(float) * (size_t)n * N_VOCAB);
    CHECK_EQ_INT(kite_ctx_eval(c, ids, n, true), KITE_OK);
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * N_VOCAB, kite_ctx_logits(c, i), sizeof(float) * N_VOCAB);
    kite_ctx_free(c);
    return out;
}

/* ---- golden logits ----------------------------------------------------- */

TEST(test_logits_f32_match_llama2c) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    float *gold = read_f32(GOLD_LOGITS, (size_t)N_POS * N_VOCAB);
    kite_model *m = load_model_checked(MODEL_F32);
    if (!gold || !m) goto done;
    float *tbt = logits_token_by_token(m, ids, N_POS, 2);
    float *pre = logits_prefill(m, ids, N_POS, 2);
    double e1 = max_abs_diff(tbt, gold, (size_t)N_POS * N_VOCAB);
    double e2 = max_abs_diff(pre, gold, (size_t)N_POS * N_VOCAB);
    printf("    f32 max abs error vs run.c: token-by-token %.3g, prefill %.3g\n", e1, e2);
    CHECK(e1 <= 1e-4);
    CHECK(e2 <= 1e-4);
    /* same kernels and summation order in both phases: equal to float rounding */
    CHECK(max_abs_diff(tbt, pre, (size_t)N_POS * N_VOCAB) <= 1e-5);
    free(tbt);
    free(pre);
done:
    free(gold);
    kite_model_free(m);
}

TEST(test_prefill_then_decode_equals_token_by_token) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    float *tbt = logits_token_by_token(m, ids, N_POS, 1);
    kite_ctx *c = new_ctx_checked(m, 64, 2);
    const int n_prompt = 5;
    CHECK_EQ_INT(kite_ctx_eval(c, ids, n_prompt, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_n_past(c), n_prompt);
    CHECK(kite_ctx_logits(c, 0) == NULL); /* only the last row was kept */
    double err = max_abs_diff(kite_ctx_logits(c, -1), tbt + (size_t)(n_prompt - 1) * N_VOCAB, N_VOCAB);
    for (int i = n_prompt; i < N_POS; i++) {
        CHECK_EQ_INT(kite_ctx_eval(c, &ids[i], 1, false), KITE_OK);
        double e = max_abs_diff(kite_ctx_logits(c, -1), tbt + (size_t)i * N_VOCAB, N_VOCAB);
        if (e > err) err = e;
    }
    printf("    prefill+decode vs token-by-token: max abs diff %.3g\n", err);
    CHECK_MSG(err <= 1e-5, "prefill+decode vs token-by-token: %g", err);
    /* truncate and replay the tail: the cache rows are recomputed identically */
    CHECK_EQ_INT(kite_ctx_truncate(c, 10), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(c, ids + 10, N_POS - 10, true), KITE_OK);
    CHECK(max_abs_diff(kite_ctx_logits(c, N_POS - 11), tbt + (size_t)(N_POS - 1) * N_VOCAB, N_VOCAB) <= 1e-5);
    kite_ctx_free(c);
    free(tbt);
    kite_model_free(m);
}

/* kite_ctx_set_profiling: the logits are bit-identical with it on and off;
 * every op time is >= 0 and their sum covers the evals' wall time (the
 * forward passes are all of an eval but its argument checks). */
TEST(test_profiling_same_logits_and_times_add_up) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_ctx *off = new_ctx_checked(m, 64, 2), *on = new_ctx_checked(m, 64, 2);
    double sec[KITE_PROFILE_N_OPS + 1];
    const char *names[KITE_PROFILE_N_OPS + 1] = {0};
    CHECK_EQ_INT(kite_ctx_set_profiling(NULL, true), KITE_E_ARG);
    CHECK_EQ_INT(kite_ctx_profile(NULL, sec, names, 1), -1);
    CHECK_EQ_INT(kite_ctx_set_profiling(on, true), KITE_OK);
    const int n_prompt = 7;
    bool same = true;
    double wall = 0;
    for (int i = 0; i < N_POS; i = i ? i + 1 : n_prompt) {
        const int n = i ? 1 : n_prompt;
        CHECK_EQ_INT(kite_ctx_eval(off, ids + i, n, false), KITE_OK);
        double t0 = time_now_s();
        CHECK_EQ_INT(kite_ctx_eval(on, ids + i, n, false), KITE_OK);
        wall += time_now_s() - t0;
        same &= memcmp(kite_ctx_logits(off, -1), kite_ctx_logits(on, -1), N_VOCAB * sizeof(float)) == 0;
    }
    CHECK_MSG(same, "logits differ with profiling on");
    CHECK_EQ_INT(kite_ctx_profile(on, sec, names, KITE_PROFILE_N_OPS + 1), KITE_PROFILE_N_OPS);
    double sum = 0;
    bool nonneg = true;
    for (int i = 0; i < KITE_PROFILE_N_OPS; i++) {
        nonneg &= sec[i] >= 0 && names[i] != NULL;
        sum += sec[i];
    }
    CHECK(nonneg);
    CHECK(names[KITE_PROFILE_N_OPS] == NULL); /* nothing written past the op count */
    CHECK(!strcmp(names[0], "embed") && !strcmp(names[KITE_PROFILE_N_OPS - 1], "other"));
    printf("    profile: sum of op times %.3f ms, eval wall time %.3f ms\n", sum * 1e3, wall * 1e3);
    CHECK_MSG(sum <= wall * 1.0001 + 1e-6 && sum >= 0.6 * wall, "op sum %g s vs eval %g s", sum, wall);
    /* off: accumulators stay readable and stop growing; on again: zeroed */
    CHECK_EQ_INT(kite_ctx_set_profiling(on, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_truncate(on, 0), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(on, ids, 4, false), KITE_OK);
    double after[KITE_PROFILE_N_OPS];
    kite_ctx_profile(on, after, NULL, KITE_PROFILE_N_OPS);
    CHECK(memcmp(after, sec, sizeof after) == 0);
    CHECK_EQ_INT(kite_ctx_set_profiling(on, true), KITE_OK);
    kite_ctx_profile(on, after, NULL, KITE_PROFILE_N_OPS);
    double z = 0;
    for (int i = 0; i < KITE_PROFILE_N_OPS; i++) z += after[i];
    CHECK(z == 0.0);
    kite_ctx_free(on);
    kite_ctx_free(off);
    kite_model_free(m);
}

TEST(test_thread_count_does_not_change_results) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    float *a = logits_prefill(m, ids, N_POS, 1);
    float *b = logits_prefill(m, ids, N_POS, 2);
    float *c = logits_prefill(m, ids, N_POS, 3);
    /* work is split by rows / heads, never inside a dot product */
    CHECK(memcmp(a, b, sizeof(float) * N_POS * N_VOCAB) == 0);
    CHECK(memcmp(a, c, sizeof(float) * N_POS * N_VOCAB) == 0);
    free(a);
    free(b);
    free(c);
    kite_model_free(m);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* F16 weights: llama.cpp's stories260K-F16.gguf (norms F32, matrices F16).
 * (1) Against the golden computed in float32 from the same dequantized F16
 *     weights only the summation order differs: 1e-4, as for F32.
 * (2) Against the F32 golden, every weight carries a relative rounding error
 *     up to 2^-11 (4.9e-4).  These errors add up over the 64..172-term dot
 *     products of 5 layers and the 512-row head; the measured maximum on
 *     logits of magnitude <= 22 is 1.1e-2.  Budget: 3e-2 absolute, and every
 *     row's argmax must agree (the golden's smallest top-2 margin is 4.2e-3,
 *     and the argmax rows are what greedy decoding sees). */
TEST(test_logits_f16) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    float *gold16 = read_f32(GOLD_LOGITS_F16, (size_t)N_POS * N_VOCAB);
    float *gold32 = read_f32(GOLD_LOGITS, (size_t)N_POS * N_VOCAB);
    kite_model *m = load_model_checked(MODEL_F16);
    if (!gold16 || !gold32 || !m) goto done;
    float *got = logits_prefill(m, ids, N_POS, 2);
    double e16 = max_abs_diff(got, gold16, (size_t)N_POS * N_VOCAB);
    double e32 = max_abs_diff(got, gold32, (size_t)N_POS * N_VOCAB);
    printf("    f16 max abs error: vs f16 reference %.3g, vs f32 reference %.3g\n", e16, e32);
    CHECK(e16 <= 1e-4);
    CHECK(e32 <= 3e-2);
    for (int i = 0; i < N_POS; i++)
        CHECK_EQ_INT(argmax(got + (size_t)i * N_VOCAB, N_VOCAB), argmax(gold32 + (size_t)i * N_VOCAB, N_VOCAB));
    free(got);
done:
    free(gold16);
    free(gold32);
    kite_model_free(m);
}

/* BF16 keeps 8 significant bits: relative error up to 2^-9 (2e-3) per
 * weight, 4x F16's, and the measured maximum grows accordingly (8.8e-2, with
 * all 32 argmaxes equal).  Budget 0.2 absolute, and at least 30 of 32
 * argmaxes equal: top-2 margins go down to 4.2e-3, below BF16's noise, so an
 * exact match is luck rather than a property to test. */
TEST(test_logits_bf16) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    char out[512];
    snprintf(out, sizeof out, "%s/bf16.gguf", tmpdir);
    llama2c_convert_params cp = {.model_path = "tests/data/convert/stories260K.bin",
                                 .tokenizer_path = "tests/data/convert/tok512.bin",
                                 .out_type = KITE_DTYPE_BF16};
    CHECK_MSG(llama2c_convert(&cp, out) == KITE_OK, "%s", kite_last_error());
    float *gold = read_f32(GOLD_LOGITS, (size_t)N_POS * N_VOCAB);
    kite_model *m = load_model_checked(out);
    if (!gold || !m) goto done;
    float *got = logits_prefill(m, ids, N_POS, 2);
    double e = max_abs_diff(got, gold, (size_t)N_POS * N_VOCAB);
    int same = 0;
    for (int i = 0; i < N_POS; i++)
        same += argmax(got + (size_t)i * N_VOCAB, N_VOCAB) == argmax(gold + (size_t)i * N_VOCAB, N_VOCAB);
    printf("    bf16 max abs error vs f32 reference %.3g, argmax agreement %d/%d\n", e, same, N_POS);
    CHECK(e <= 0.2);
    CHECK(same >= 30);
    free(got);
done:
    free(gold);
    kite_model_free(m);
    unlink(out);
}

/* ---- greedy generations through the public API ------------------------- */

static int json_field_string(const char *line, const char *key, char **out, size_t *len) {
    const char *p = json_field(line, key);
    if (!p) return -1;
    return jm_string(&p, out, len);
}

TEST(test_greedy_goldens) {
    char *all = harness_read_file(GOLD_GREEDY, NULL);
    kite_model *m = load_model_checked(MODEL_F32);
    CHECK(all != NULL);
    if (!all || !m) goto done;
    kite_sampler_params sp = kite_sampler_default_params();
    sp.temperature = 0;
    int cases = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        char *prompt = NULL;
        size_t plen = 0;
        int32_t *gold_ids = NULL, *gold_prompt = NULL;
        size_t n_gold = 0, n_gold_prompt = 0;
        CHECK(json_field_string(line, "prompt", &prompt, &plen) == 0);
        CHECK(json_field_ids(line, "ids", &gold_ids, &n_gold) == 0);
        CHECK(json_field_ids(line, "prompt_ids", &gold_prompt, &n_gold_prompt) == 0);
        if (!prompt || !gold_ids || !gold_prompt) break;
        cases++;

        kite_token toks[512];
        size_t n = 0;
        CHECK_EQ_INT(kite_tokenize(m, prompt, plen, true, toks, 512, &n), KITE_OK);
        CHECK_EQ_INT(n, n_gold_prompt);
        CHECK(memcmp(toks, gold_prompt, n * sizeof *toks) == 0);
        kite_ctx *c = new_ctx_checked(m, 512, 2);
        kite_sampler *s = NULL;
        CHECK_EQ_INT(kite_sampler_new(&sp, N_VOCAB, &s), KITE_OK);
        /* like run.c: steps = n_gold - 1 positions, stop on BOS */
        int rc = kite_ctx_eval(c, toks, (int32_t)n, false);
        CHECK_EQ_INT(rc, KITE_OK);
        while (n < n_gold && rc == KITE_OK) {
            kite_token t = kite_sampler_sample(s, kite_ctx_logits(c, -1));
            toks[n++] = t;
            if (t == kite_token_bos(m) || n == n_gold) break;
            rc = kite_ctx_eval(c, &t, 1, false);
        }
        /* a golden that stopped on BOS ends with the prompt+generated ids,
         * without the BOS; ours has the BOS as its last element */
        size_t cmp_n = n_gold < n ? n_gold : n;
        CHECK_MSG(memcmp(toks, gold_ids, cmp_n * sizeof *toks) == 0, "prompt '%s': generated ids differ", prompt);
        kite_sampler_free(s);
        kite_ctx_free(c);
        free(prompt);
        free(gold_ids);
        free(gold_prompt);
    }
    CHECK_EQ_INT(cases, 5);
done:
    free(all);
    kite_model_free(m);
}

/* ---- synthetic models vs a naive reference ----------------------------- */

typedef struct synth {
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_layer, n_rot, n_ctx;
    float rope_base, eps;
    bool tied;
    /* float weights, (rows, cols) row-major */
    float *embd, *out_norm, *output;
    float *attn_norm[4], *wq[4], *wk[4], *wv[4], *wo[4], *ffn_norm[4], *wg[4], *wu[4], *wd[4];
} synth;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(float scale) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(rng_state >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
}
static float *rand_mat(int rows, int cols, float scale) {
    float *m = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    for (int i = 0; i < rows * cols; i++) m[i] = frand(scale);
    return m;
}
static float *norm_vec(int n) {
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) v[i] = 1.0f + frand(0.2f);
    return v;
}

static void synth_init(synth *s) {
    const int Q = s->n_head * s->head_dim, KV = s->n_head_kv * s->head_dim;
    s->embd = rand_mat(s->n_vocab, s->n_embd, 1.0f);
    s->out_norm = norm_vec(s->n_embd);
    s->output = s->tied ? s->embd : rand_mat(s->n_vocab, s->n_embd, 0.3f);
    for (int l = 0; l < s->n_layer; l++) {
        s->attn_norm[l] = norm_vec(s->n_embd);
        s->wq[l] = rand_mat(Q, s->n_embd, 0.3f);
        s->wk[l] = rand_mat(KV, s->n_embd, 0.3f);
        s->wv[l] = rand_mat(KV, s->n_embd, 0.3f);
        s->wo[l] = rand_mat(s->n_embd, Q, 0.3f);
        s->ffn_norm[l] = norm_vec(s->n_embd);
        s->wg[l] = rand_mat(s->n_ff, s->n_embd, 0.3f);
        s->wu[l] = rand_mat(s->n_ff, s->n_embd, 0.3f);
        s->wd[l] = rand_mat(s->n_embd, s->n_ff, 0.3f);
    }
}

static void synth_free(synth *s) {
    free(s->embd);
    free(s->out_norm);
    if (!s->tied) free(s->output);
    for (int l = 0; l < s->n_layer; l++) {
        free(s->attn_norm[l]);
        free(s->wq[l]);
        free(s->wk[l]);
        free(s->wv[l]);
        free(s->wo[l]);
        free(s->ffn_norm[l]);
        free(s->wg[l]);
        free(s->wu[l]);
        free(s->wd[l]);
    }
}

/* skip: tensor name to leave out; bad_shape: tensor to write with a wrong
 * row count; drop_key: metadata key to leave out. */
static int synth_write(const synth *s, const char *path, const char *skip, const char *bad_shape,
                       const char *drop_key, const char *arch) {
    gguf_writer *w = gguf_writer_new();
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
#define SETU(k, v)                                                                                     \
    if (!drop_key || strcmp(drop_key, k)) gguf_writer_set_u32(w, k, (uint32_t)(v))
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", "synthetic");
    SETU(KEY("context_length"), s->n_ctx);
    SETU(KEY("embedding_length"), s->n_embd);
    SETU(KEY("block_count"), s->n_layer);
    SETU(KEY("feed_forward_length"), s->n_ff);
    SETU(KEY("attention.head_count"), s->n_head);
    SETU(KEY("attention.head_count_kv"), s->n_head_kv);
    SETU(KEY("rope.dimension_count"), s->n_rot);
    if (s->head_dim * s->n_head != s->n_embd) SETU(KEY("attention.key_length"), s->head_dim);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->eps);
    /* a minimal SentencePiece vocabulary: <unk> <s> </s> then pieces */
    const char **toks = malloc(sizeof(char *) * (size_t)s->n_vocab);
    char (*names)[16] = malloc(16 * (size_t)s->n_vocab);
    float *scores = malloc(sizeof(float) * (size_t)s->n_vocab);
    int32_t *types = malloc(sizeof(int32_t) * (size_t)s->n_vocab);
    for (int i = 0; i < s->n_vocab; i++) {
        if (i == 0) snprintf(names[i], 16, "<unk>");
        else if (i == 1) snprintf(names[i], 16, "<s>");
        else if (i == 2) snprintf(names[i], 16, "</s>");
        else snprintf(names[i], 16, "t%d", i);
        toks[i] = names[i];
        scores[i] = (float)-i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)s->n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, scores, (uint64_t)s->n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types, (uint64_t)s->n_vocab);
#define T(name, data, cols, rows)                                                                      \
    do {                                                                                               \
        if (!skip || strcmp(skip, name)) {                                                            \
            const bool bad_ = bad_shape && !strcmp(bad_shape, name);                                  \
            int64_t ne_[2] = {(cols), (rows) + (bad_ ? 1 : 0)};                                        \
            uint32_t nd_ = ne_[1] == 1 ? 1 : 2;                                                        \
            /* a wrong shape needs more data than the real tensor has: zeros */                       \
            const void *d_ = bad_ ? (const void *)zeros : (const void *)(data);                        \
            CHECK_EQ_INT(gguf_writer_add_tensor(w, name, KITE_DTYPE_F32, nd_, ne_, d_), KITE_OK);      \
        }                                                                                              \
    } while (0)
    const int Q = s->n_head * s->head_dim, KV = s->n_head_kv * s->head_dim;
    int maxdim = s->n_vocab;
    const int dims[4] = {s->n_ff, Q, KV, s->n_embd};
    for (int i = 0; i < 4; i++)
        if (dims[i] > maxdim) maxdim = dims[i];
    float *zeros = calloc((size_t)(maxdim + 1) * (size_t)maxdim, sizeof(float));
    T("token_embd.weight", s->embd, s->n_embd, s->n_vocab);
    T("output_norm.weight", s->out_norm, s->n_embd, 1);
    if (!s->tied) T("output.weight", s->output, s->n_embd, s->n_vocab);
    char n[12][64];
    for (int l = 0; l < s->n_layer; l++) {
        const char *suffix[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                 "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, suffix[i]);
        T(n[0], s->attn_norm[l], s->n_embd, 1);
        T(n[1], s->wq[l], s->n_embd, Q);
        T(n[2], s->wk[l], s->n_embd, KV);
        T(n[3], s->wv[l], s->n_embd, KV);
        T(n[4], s->wo[l], Q, s->n_embd);
        T(n[5], s->ffn_norm[l], s->n_embd, 1);
        T(n[6], s->wg[l], s->n_embd, s->n_ff);
        T(n[7], s->wu[l], s->n_embd, s->n_ff);
        T(n[8], s->wd[l], s->n_ff, s->n_embd);
    }
#undef T
#undef SETU
#undef KEY
    int rc = gguf_writer_write(w, path);
    gguf_writer_free(w);
    free(zeros);
    free(toks);
    free(names);
    free(scores);
    free(types);
    return rc;
}

static void matvec(const float *W, const float *x, int rows, int cols, float *y) {
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int c = 0; c < cols; c++) acc += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = (float)acc;
    }
}
static void rmsnorm_ref(float *o, const float *x, const float *g, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = (float)(x[i] * s * g[i]);
}
static void rope_ref(float *v, int pos, int n_rot, float base) {
    for (int i = 0; i < n_rot; i += 2) {
        double theta = pos * pow(base, -(double)i / n_rot);
        double c = cos(theta), sn = sin(theta), a = v[i], b = v[i + 1];
        v[i] = (float)(a * c - b * sn);
        v[i + 1] = (float)(a * sn + b * c);
    }
}

/* Naive reference: recomputes K and V of every previous position from
 * scratch (no cache), in double where it is convenient.  [n][n_vocab] out. */
static void reference_forward(const synth *s, const int32_t *ids, int n, float *logits) {
    const int E = s->n_embd, HD = s->head_dim, Q = s->n_head * HD, KV = s->n_head_kv * HD, F = s->n_ff;
    float *x = malloc(sizeof(float) * (size_t)n * E), *xb = malloc(sizeof(float) * E);
    float *q = malloc(sizeof(float) * Q), *k = malloc(sizeof(float) * (size_t)n * KV),
          *v = malloc(sizeof(float) * (size_t)n * KV), *att = malloc(sizeof(float) * Q);
    float *g = malloc(sizeof(float) * F), *u = malloc(sizeof(float) * F), *o = malloc(sizeof(float) * E);
    double *sc = malloc(sizeof(double) * (size_t)n);
    for (int t = 0; t < n; t++) memcpy(x + (size_t)t * E, s->embd + (size_t)ids[t] * E, sizeof(float) * E);
    for (int l = 0; l < s->n_layer; l++) {
        /* K, V for all positions from this layer's input */
        for (int t = 0; t < n; t++) {
            rmsnorm_ref(xb, x + (size_t)t * E, s->attn_norm[l], E, s->eps);
            matvec(s->wk[l], xb, KV, E, k + (size_t)t * KV);
            matvec(s->wv[l], xb, KV, E, v + (size_t)t * KV);
            for (int h = 0; h < s->n_head_kv; h++) rope_ref(k + (size_t)t * KV + h * HD, t, s->n_rot, s->rope_base);
        }
        float *xnew = malloc(sizeof(float) * (size_t)n * E);
        for (int t = 0; t < n; t++) {
            float *xt = x + (size_t)t * E;
            rmsnorm_ref(xb, xt, s->attn_norm[l], E, s->eps);
            matvec(s->wq[l], xb, Q, E, q);
            for (int h = 0; h < s->n_head; h++) {
                rope_ref(q + h * HD, t, s->n_rot, s->rope_base);
                int kvh = h / (s->n_head / s->n_head_kv);
                double mx = -1e300, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)q[h * HD + i] * k[(size_t)p * KV + kvh * HD + i];
                    sc[p] = d / sqrt((double)HD);
                    if (sc[p] > mx) mx = sc[p];
                }
                for (int p = 0; p <= t; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int i = 0; i < HD; i++) {
                    double a = 0;
                    for (int p = 0; p <= t; p++) a += sc[p] / sum * v[(size_t)p * KV + kvh * HD + i];
                    att[h * HD + i] = (float)a;
                }
            }
            matvec(s->wo[l], att, E, Q, o);
            float *xn = xnew + (size_t)t * E;
            for (int i = 0; i < E; i++) xn[i] = xt[i] + o[i];
            rmsnorm_ref(xb, xn, s->ffn_norm[l], E, s->eps);
            matvec(s->wg[l], xb, F, E, g);
            matvec(s->wu[l], xb, F, E, u);
            for (int i = 0; i < F; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
            matvec(s->wd[l], g, E, F, o);
            for (int i = 0; i < E; i++) xn[i] += o[i];
        }
        memcpy(x, xnew, sizeof(float) * (size_t)n * E);
        free(xnew);
    }
    for (int t = 0; t < n; t++) {
        rmsnorm_ref(xb, x + (size_t)t * E, s->out_norm, E, s->eps);
        matvec(s->output, xb, s->n_vocab, E, logits + (size_t)t * s->n_vocab);
    }
    free(x);
    free(xb);
    free(q);
    free(k);
    free(v);
    free(att);
    free(g);
    free(u);
    free(o);
    free(sc);
}

static void check_synth(synth s, int n_tok, int n_ctx_run) {
    synth_init(&s);
    char path[512];
    snprintf(path, sizeof path, "%s/synth.gguf", tmpdir);
    CHECK_EQ_INT(synth_write(&s, path, NULL, NULL, NULL, "llama"), KITE_OK);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_tok);
    for (int i = 0; i < n_tok; i++) ids[i] = (int32_t)((i * 7919 + 3) % s.n_vocab);
    float *ref = malloc(sizeof(float) * (size_t)n_tok * (size_t)s.n_vocab);
    reference_forward(&s, ids, n_tok, ref);
    kite_model *m = load_model_checked(path);
    if (m) {
        /* prefill everything (possibly in several n_batch chunks) */
        kite_ctx *c = new_ctx_checked(m, n_ctx_run, 2);
        CHECK_EQ_INT(kite_ctx_eval(c, ids, n_tok, true), KITE_OK);
        double err = 0, mag = 0;
        for (int t = 0; t < n_tok; t++) {
            const float *l = kite_ctx_logits(c, t);
            double e = max_abs_diff(l, ref + (size_t)t * s.n_vocab, (size_t)s.n_vocab);
            if (e > err) err = e;
            for (int i = 0; i < s.n_vocab; i++)
                if (fabs(ref[(size_t)t * s.n_vocab + i]) > mag) mag = fabs(ref[(size_t)t * s.n_vocab + i]);
        }
        printf("    synth n_head %d n_head_kv %d head_dim %d n_rot %d n_ff %d %s, %d tokens: max err %.3g (max |logit| "
               "%.3g)\n",
               s.n_head, s.n_head_kv, s.head_dim, s.n_rot, s.n_ff, s.tied ? "tied" : "untied", n_tok, err, mag);
        CHECK(err <= 1e-4 * (mag > 1 ? mag : 1));
        /* then decode the last 3 positions again one at a time */
        CHECK_EQ_INT(kite_ctx_truncate(c, n_tok - 3), KITE_OK);
        for (int t = n_tok - 3; t < n_tok; t++) {
            CHECK_EQ_INT(kite_ctx_eval(c, &ids[t], 1, false), KITE_OK);
            double e = max_abs_diff(kite_ctx_logits(c, -1), ref + (size_t)t * s.n_vocab, (size_t)s.n_vocab);
            CHECK(e <= 1e-4 * (mag > 1 ? mag : 1));
        }
        kite_ctx_free(c);
        kite_model_free(m);
    }
    free(ids);
    free(ref);
    synth_free(&s);
    unlink(path);
}

TEST(test_synthetic_mqa_untied_odd_sizes) {
    synth s = {.n_embd = 48, .n_head = 6, .n_head_kv = 1, .head_dim = 8, .n_ff = 100, .n_vocab = 67,
               .n_layer = 2, .n_rot = 8, .n_ctx = 128, .rope_base = 500000.0f, .eps = 1e-6f, .tied = false};
    check_synth(s, 20, 64);
}

TEST(test_synthetic_gqa_partial_rotary_key_length) {
    /* head_dim 12 * 4 heads != n_embd 40: key_length given explicitly; only
     * the first 6 of 12 head dims are rotated */
    synth s = {.n_embd = 40, .n_head = 4, .n_head_kv = 2, .head_dim = 12, .n_ff = 33, .n_vocab = 50,
               .n_layer = 3, .n_rot = 6, .n_ctx = 64, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true};
    check_synth(s, 17, 32);
}

TEST(test_synthetic_chunked_prefill) {
    /* 600 tokens > the 512-token batch: two chunks, the second attending to
     * the first through the cache */
    synth s = {.n_embd = 16, .n_head = 2, .n_head_kv = 2, .head_dim = 8, .n_ff = 24, .n_vocab = 40,
               .n_layer = 1, .n_rot = 8, .n_ctx = 1024, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true};
    check_synth(s, 600, 700);
}

/* ---- errors ------------------------------------------------------------ */

static void expect_load_error(const synth *s, const char *skip, const char *bad, const char *drop, const char *arch,
                              int code, const char *needle) {
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    CHECK_EQ_INT(synth_write(s, path, skip, bad, drop, arch), KITE_OK);
    kite_model *m = NULL;
    int rc = kite_model_load(path, NULL, &m);
    CHECK_EQ_INT(rc, code);
    CHECK(m == NULL);
    CHECK_CONTAINS(kite_last_error(), needle);
    CHECK_CONTAINS(kite_last_error(), path);
    kite_model_free(m);
    unlink(path);
}

TEST(test_load_errors_name_the_field) {
    synth s = {.n_embd = 16, .n_head = 2, .n_head_kv = 1, .head_dim = 8, .n_ff = 24, .n_vocab = 40,
               .n_layer = 1, .n_rot = 8, .n_ctx = 64, .rope_base = 10000.0f, .eps = 1e-5f, .tied = false};
    synth_init(&s);
    expect_load_error(&s, NULL, NULL, "llama.embedding_length", "llama", KITE_E_NOT_FOUND,
                      "llama.embedding_length");
    expect_load_error(&s, NULL, NULL, "llama.attention.head_count", "llama", KITE_E_NOT_FOUND,
                      "llama.attention.head_count");
    expect_load_error(&s, "blk.0.ffn_up.weight", NULL, NULL, "llama", KITE_E_NOT_FOUND, "blk.0.ffn_up.weight");
    expect_load_error(&s, NULL, "blk.0.attn_k.weight", NULL, "llama", KITE_E_FORMAT, "blk.0.attn_k.weight");
    expect_load_error(&s, NULL, "output.weight", NULL, "llama", KITE_E_FORMAT, "output.weight");
    expect_load_error(&s, NULL, NULL, NULL, "mamba", KITE_E_UNSUPPORTED, "mamba");
    synth_free(&s);
}

TEST(test_unsupported_tensor_type_and_vocab_only) {
    /* A tensor of a type whose layout kite knows (so the file is valid) but
     * that it cannot compute with must fail cleanly, naming the tensor and
     * the type.  Built from the F32 model by storing attn_q as mxfp4. */
    gguf_ctx *g = NULL;
    CHECK_EQ_INT(gguf_open(MODEL_F32, NULL, &g), KITE_OK);
    if (!g) return;
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        char *k = gguf_str_dup(g->kv[i].key);
        gguf_writer_set_value(w, k, &g->kv[i].value);
        free(k);
    }
    uint8_t *q8 = calloc(1, 64 * 64 / 32 * 17);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        char *name = gguf_str_dup(t->name);
        if (!strcmp(name, "blk.0.attn_q.weight"))
            gguf_writer_add_tensor(w, name, KITE_DTYPE_MXFP4, t->n_dims, t->ne, q8);
        else
            gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
        free(name);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/mxfp4.gguf", tmpdir);
    CHECK_EQ_INT(gguf_writer_write(w, path), KITE_OK);
    gguf_writer_free(w);
    free(q8);
    gguf_close(g);
    kite_model *m = NULL;
    CHECK_EQ_INT(kite_model_load(path, NULL, &m), KITE_E_UNSUPPORTED);
    CHECK_CONTAINS(kite_last_error(), "blk.0.attn_q.weight");
    CHECK_CONTAINS(kite_last_error(), "mxfp4");
    /* the same file is fine as a vocabulary */
    kite_model_params p = kite_model_default_params();
    p.vocab_only = true;
    CHECK_EQ_INT(kite_model_load(path, &p, &m), KITE_OK);
    kite_ctx *c = NULL;
    CHECK_EQ_INT(kite_ctx_new(m, NULL, &c), KITE_E_STATE);
    CHECK_CONTAINS(kite_last_error(), "is a vocab-only GGUF (a vocabulary, no weights)");
    kite_model_free(m);
    unlink(path);
    /* a file without tensors: loads only when a vocabulary is asked for; else the one message */
    m = NULL;
    CHECK_EQ_INT(kite_model_load("models/vocab-llama2.gguf", NULL, &m), KITE_E_STATE);
    CHECK(m == NULL);
    CHECK_CONTAINS(kite_last_error(), "models/vocab-llama2.gguf is a vocab-only GGUF (a vocabulary, no weights)");
    CHECK_EQ_INT(kite_model_load("models/vocab-llama2.gguf", &p, &m), KITE_OK);
    kite_model_free(m);
}

TEST(test_context_limits) {
    kite_model *m = load_model_checked(MODEL_F32);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 8, 2);
    kite_token ids[10] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    CHECK_EQ_INT(kite_ctx_eval(c, ids, 6, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(c, ids + 6, 3, false), KITE_E_RANGE); /* 6 + 3 > 8 */
    CHECK_CONTAINS(kite_last_error(), "context full");
    CHECK_EQ_INT(kite_ctx_n_past(c), 6); /* unchanged on error */
    kite_token bad = 512;
    CHECK_EQ_INT(kite_ctx_eval(c, &bad, 1, false), KITE_E_RANGE);
    CHECK_CONTAINS(kite_last_error(), "512");
    bad = -1;
    CHECK_EQ_INT(kite_ctx_eval(c, &bad, 1, false), KITE_E_RANGE);
    CHECK_EQ_INT(kite_ctx_eval(c, ids, 0, false), KITE_E_ARG);
    CHECK_EQ_INT(kite_ctx_n_past(c), 6);
    CHECK_EQ_INT(kite_ctx_eval(c, ids + 6, 2, false), KITE_OK);
    CHECK_EQ_INT(kite_ctx_n_past(c), 8);
    CHECK_EQ_INT(kite_ctx_truncate(c, 9), KITE_E_ARG);
    kite_ctx_free(c);
    kite_ctx_params p = kite_ctx_default_params();
    p.n_ctx = -1;
    CHECK_EQ_INT(kite_ctx_new(m, &p, &c), KITE_E_ARG);
    kite_model_info info;
    kite_model_get_info(m, &info);
    CHECK_STR_EQ(info.arch, "llama");
    CHECK_EQ_INT(info.n_vocab, 512);
    CHECK_EQ_INT(info.n_layer, 5);
    CHECK_EQ_INT(info.n_head_kv, 4);
    CHECK_EQ_INT(info.n_ctx_train, 512);
    kite_model_free(m);
    CHECK_EQ_INT(kite_model_load("tests/data/does-not-exist.gguf", NULL, &m), KITE_E_IO);
    CHECK_CONTAINS(kite_last_error(), "does-not-exist.gguf");
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_logits_f32_match_llama2c);
    RUN(test_prefill_then_decode_equals_token_by_token);
    RUN(test_thread_count_does_not_change_results);
    RUN(test_logits_f16);
    RUN(test_logits_bf16);
    RUN(test_greedy_goldens);
    RUN(test_synthetic_mqa_untied_odd_sizes);
    RUN(test_synthetic_gqa_partial_rotary_key_length);
    RUN(test_synthetic_chunked_prefill);
    RUN(test_load_errors_name_the_field);
    RUN(test_unsupported_tensor_type_and_vocab_only);
    RUN(test_context_limits);
    RUN(test_profiling_same_logits_and_times_add_up);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
