/*
 * test_smoothquant.c - SmoothQuant and the outlier transformation on the
 * bundled stories260K model (smoothquant.h), and LLM.int8() at model level.
 *
 * Known answers: the smoothing fold and the outlier transformation leave the
 * full-precision logits unchanged (float tolerance); the outlier model's
 * norm gains are the factor larger on the documented channels; on the
 * outlier model, SmoothQuant W8A8 has a lower KL divergence from full
 * precision than plain W8A8, and LLM.int8() with threshold +inf gives the
 * plain W8A8 logits bit for bit; bad alpha is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "kernels/int8_gemm.h"
#include "kite.h"
#include "quant/calib.h"
#include "quant/quantize.h"
#include "quant/smoothquant.h"
#include "tensor/dtype.h"

#define MODEL "models/stories260K.gguf"
#define N_VOCAB 512

/* Calibration / evaluation text written for this test (TinyStories style). */
static const char *const k_text =
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with her ball. "
    "One day, she saw a big dog near the tree. The dog was sad because it was lost. Lily said, \"Do not "
    "be sad, dog. I will help you find your home.\" They walked and walked until they saw a small house. "
    "A kind old man came out and hugged the dog. He said, \"Thank you, Lily!\" Lily smiled and went home "
    "happy. The next day, Tom and his mom went to the store. Tom wanted a red car, but his mom said no. "
    "Tom was sad, but then he found a shiny rock on the way home. He gave it to his mom and she laughed.";

static char g_dir[64];
static char *tmp_path(const char *name) {
    static char buf[8][160];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 160, "%s/%s", g_dir, name);
    return p;
}

static int32_t g_ids[160];
static int32_t g_n;

/* Tokenizes k_text once with the bundled model's vocabulary (BOS first). */
static void tokenize_text(void) {
    kite_model *m = NULL;
    if (kite_model_load(MODEL, NULL, &m) != KITE_OK) return;
    kite_token *t = NULL;
    int64_t n = 0;
    if (calib_tokenize(m, k_text, strlen(k_text), 150, &t, &n) == KITE_OK) {
        g_ids[0] = 1;
        for (int64_t i = 0; i < n && i + 1 < 160; i++) g_ids[++g_n] = t[i];
        g_n++;
    }
    free(t);
    kite_model_free(m);
}

/* Logits [g_n][N_VOCAB] of g_ids under the model at path (malloc), or NULL. */
static float *logits_of(const char *path) {
    kite_model *m = NULL;
    kite_ctx *c = NULL;
    float *out = NULL;
    int rc = kite_model_load(path, NULL, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", path, kite_last_error());
    if (rc == KITE_OK) {
        kite_ctx_params cp = kite_ctx_default_params();
        cp.n_ctx = 256;
        cp.n_threads = 2;
        rc = kite_ctx_new(m, &cp, &c);
        if (rc == KITE_OK) rc = kite_ctx_eval(c, g_ids, g_n, true);
        CHECK_MSG(rc == KITE_OK, "eval %s: %s", path, kite_last_error());
        if (rc == KITE_OK && (out = malloc(sizeof(float) * (size_t)g_n * N_VOCAB)))
            for (int i = 0; i < g_n; i++) memcpy(out + (size_t)i * N_VOCAB, kite_ctx_logits(c, i), sizeof(float) * N_VOCAB);
    }
    kite_ctx_free(c);
    kite_model_free(m);
    return out;
}

static double max_abs_diff(const float *a, const float *b) {
    double m = 0;
    for (int i = 0; i < g_n * N_VOCAB; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Mean over positions of KL(softmax(p) || softmax(q)). */
static double mean_kld(const float *p, const float *q) {
    double s = 0;
    for (int i = 0; i < g_n; i++) {
        const float *a = p + (size_t)i * N_VOCAB, *b = q + (size_t)i * N_VOCAB;
        double ma = a[0], mb = b[0], za = 0, zb = 0, k = 0;
        for (int v = 1; v < N_VOCAB; v++) {
            ma = fmax(ma, a[v]);
            mb = fmax(mb, b[v]);
        }
        for (int v = 0; v < N_VOCAB; v++) {
            za += exp(a[v] - ma);
            zb += exp(b[v] - mb);
        }
        for (int v = 0; v < N_VOCAB; v++) {
            const double la = a[v] - ma - log(za), lb = b[v] - mb - log(zb);
            k += exp(la) * (la - lb);
        }
        s += k;
    }
    return s / g_n;
}

static int write_calib(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fputs(k_text, f);
    return fclose(f) == 0;
}

static float *g_base; /* logits of the bundled model */

TEST(test_smoothing_keeps_function) {
    const char *cal = tmp_path("calib.txt"), *sm = tmp_path("smooth.gguf");
    CHECK(write_calib(cal));
    sq_params p = {.alpha = 0.5f, .calib_path = cal, .n_threads = 2};
    int rc = sq_smooth_model(MODEL, sm, &p);
    CHECK_MSG(rc == KITE_OK, "smooth: %s", kite_last_error());
    float *got = rc == KITE_OK ? logits_of(sm) : NULL;
    if (got && g_base) {
        const double d = max_abs_diff(got, g_base);
        printf("    smoothed (alpha 0.5) f32 logits: max abs diff %.3g over %d positions\n", d, g_n);
        CHECK_MSG(d < 2e-3, "smoothing changed the logits by %g", d);
    }
    free(got);
    /* and the weights did change (the fold is not a no-op) */
    gguf_ctx *a = NULL, *b = NULL;
    if (gguf_open(MODEL, NULL, &a) == KITE_OK && gguf_open(sm, NULL, &b) == KITE_OK) {
        const gguf_tensor *ta = gguf_find_tensor(a, "blk.0.attn_norm.weight"), *tb = gguf_find_tensor(b, "blk.0.attn_norm.weight");
        CHECK(ta && tb && tb->type == KITE_DTYPE_F32 && memcmp(ta->data, tb->data, (size_t)ta->nbytes) != 0);
    }
    gguf_close(a);
    gguf_close(b);
    p.alpha = 1.5f;
    CHECK_EQ_INT(sq_smooth_model(MODEL, sm, &p), KITE_E_ARG);
    p.alpha = 0.5f;
    p.calib_path = NULL;
    CHECK_EQ_INT(sq_smooth_model(MODEL, sm, &p), KITE_E_ARG);
    remove(cal);
    remove(sm);
}

TEST(test_outliers_and_w8a8_methods) {
    const char *out = tmp_path("outliers.gguf"), *cal = tmp_path("calib.txt"), *rtn = tmp_path("rtn.gguf"),
               *sq = tmp_path("sq.gguf"), *mix = tmp_path("int8.gguf");
    CHECK(write_calib(cal));
    int rc = sq_make_outliers(MODEL, out, 30.0f, 4);
    CHECK_MSG(rc == KITE_OK, "outliers: %s", kite_last_error());
    if (rc != KITE_OK) return;
    float *lo = logits_of(out);
    if (lo && g_base) {
        const double d = max_abs_diff(lo, g_base);
        printf("    outlier model f32 logits: max abs diff %.3g\n", d);
        CHECK_MSG(d < 2e-3, "outlier transformation changed the logits by %g", d);
    }
    free(lo);
    gguf_ctx *a = NULL, *b = NULL; /* channel 5 (k = 0) of ffn_norm is 30x larger, channel 0 unchanged */
    if (gguf_open(MODEL, NULL, &a) == KITE_OK && gguf_open(out, NULL, &b) == KITE_OK) {
        const float *ga = gguf_find_tensor(a, "blk.2.ffn_norm.weight")->data, *gb = gguf_find_tensor(b, "blk.2.ffn_norm.weight")->data;
        CHECK_NEAR(gb[5], ga[5] * 30.0f, 1e-5 * fabs(ga[5] * 30.0f));
        CHECK(gb[0] == ga[0]);
    }
    gguf_close(a);
    gguf_close(b);
    quant_params qp = {.type = KITE_DTYPE_W8A8, .n_threads = 2};
    CHECK_EQ_INT(quant_model(out, rtn, &qp, NULL), KITE_OK);
    qp.type = KITE_DTYPE_LLM_INT8;
    CHECK_EQ_INT(quant_model(out, mix, &qp, NULL), KITE_OK);
    sq_params sp = {.alpha = 0.5f, .calib_path = cal, .n_threads = 2};
    rc = sq_quantize(out, sq, KITE_DTYPE_W8A8, &sp);
    CHECK_MSG(rc == KITE_OK, "smoothquant: %s", kite_last_error());
    CHECK(access(tmp_path("sq.gguf.smooth.tmp"), F_OK) != 0); /* the intermediate file is gone */
    float *lr = logits_of(rtn), *ls = logits_of(sq);
    const float saved = kern_llm_int8_threshold();
    kern_llm_int8_set_threshold(INFINITY);
    float *lm_inf = logits_of(mix);
    kern_llm_int8_set_threshold(6.0f);
    float *lm = logits_of(mix);
    kern_llm_int8_set_threshold(saved);
    if (lr && ls && lm && lm_inf && g_base) {
        const double kr = mean_kld(g_base, lr), ks = mean_kld(g_base, ls), km = mean_kld(g_base, lm);
        printf("    outlier model KLD vs f32: w8a8 %.4g, smoothquant w8a8 %.4g, llm.int8() %.4g\n", kr, ks, km);
        CHECK_MSG(ks < kr, "smoothquant KLD %g not below plain w8a8 %g", ks, kr);
        CHECK_MSG(km < 0.01, "llm.int8() KLD %g above 0.01", km);
        CHECK_MSG(memcmp(lm_inf, lr, sizeof(float) * (size_t)g_n * N_VOCAB) == 0,
                  "llm.int8() with threshold inf differs from plain w8a8");
    } else {
        CHECK_MSG(0, "logits missing");
    }
    free(lr);
    free(ls);
    free(lm);
    free(lm_inf);
    remove(out);
    remove(cal);
    remove(rtn);
    remove(sq);
    remove(mix);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-test-sq-%d", (int)getpid());
    mkdir(g_dir, 0700);
    tokenize_text();
    CHECK_MSG(g_n > 50, "tokenized %d tokens", g_n);
    g_base = logits_of(MODEL);
    RUN(test_smoothing_keeps_function);
    RUN(test_outliers_and_w8a8_methods);
    free(g_base);
    rmdir(g_dir);
    return harness_summary(__FILE__);
}
