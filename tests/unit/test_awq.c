/*
 * test_awq.c - AWQ (src/quant/awq.c and its folding in method.c).
 *
 * Known answers:
 *   - a search over alpha = 0 only returns scales of exactly 1 (RTN);
 *   - on inputs with one outlier channel the search picks alpha > 0 and
 *     lowers the output error below RTN's;
 *   - `quant_model` with AWQ restricted to alpha = 0 writes the RTN file
 *     byte for byte (q4_0, and q4_0 in groups of 64);
 *   - the fold (norms / wv rows / w_up rows divided by the scales, matrix
 *     columns multiplied) leaves the full-precision model's logits unchanged
 *     up to float rounding, while actually changing the weights;
 *   - gptq / awq parameter errors are reported.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "quant/awq.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

#define MODEL "models/stories260K.gguf"
#define CALIB "tests/data/quant-calib/calib.txt"

static char tmpdir[] = "/tmp/kite-test-awq-XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static bool files_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = harness_read_file(a, &na), *y = harness_read_file(b, &nb);
    bool eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

static uint64_t rng_state = 777;
static float frand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

enum { N = 64, ROWS = 8, T = 128 };
static float w[ROWS * N], x[T * N], sx[N], s[N];

static void make_inputs(float outlier) {
    for (int i = 0; i < ROWS * N; i++) w[i] = frand();
    for (int t = 0; t < T; t++)
        for (int j = 0; j < N; j++) x[t * N + j] = frand() * (j == 5 ? outlier : 1.0f);
    for (int j = 0; j < N; j++) {
        double m = 0;
        for (int t = 0; t < T; t++) m += fabsf(x[t * N + j]);
        sx[j] = (float)(m / T);
    }
}

TEST(test_alpha_zero_is_rtn) {
    make_inputs(20.0f);
    awq_mat m = {.w = w, .rows = ROWS, .type = KITE_DTYPE_Q4_0};
    awq_params p = {.n_grid = 1, .group = 32};
    awq_result r;
    CHECK_EQ_INT(awq_search(&m, 1, N, x, T, sx, &p, s, &r), KITE_OK);
    for (int j = 0; j < N; j++) CHECK(s[j] == 1.0f);
    CHECK(r.alpha == 0.0f);
    CHECK(r.err == r.err_rtn);
}

TEST(test_outlier_channel_gets_scaled) {
    make_inputs(20.0f);
    awq_mat m = {.w = w, .rows = ROWS, .type = KITE_DTYPE_Q4_0};
    awq_params p = {.group = 32};
    awq_result r;
    CHECK_EQ_INT(awq_search(&m, 1, N, x, T, sx, &p, s, &r), KITE_OK);
    printf("    outlier x20: alpha %.2f, output error %.4g vs rtn %.4g\n", (double)r.alpha, r.err, r.err_rtn);
    CHECK(r.alpha > 0.0f);
    CHECK(r.err < 0.8 * r.err_rtn);
    for (int j = 0; j < N; j++)
        if (j != 5) CHECK(s[5] > s[j]);
}

static int quantize(const char *out, int method, int group, int n_grid, bool float_out) {
    quant_params p = {.type = KITE_DTYPE_Q4_0, .n_threads = 2, .method = method, .calib_path = CALIB,
                      .calib_tokens = 1024, .group = group, .awq_n_grid = n_grid, .awq_float_out = float_out};
    if (method == QUANT_RTN) p.calib_path = NULL;
    return quant_model(MODEL, out, &p, NULL);
}

TEST(test_model_alpha_zero_equals_rtn) {
    for (int g = 32; g <= 64; g += 32) {
        const char *a = tmp_path("rtn.gguf"), *b = tmp_path("awq0.gguf");
        CHECK_EQ_INT(quantize(a, QUANT_RTN, g, 0, false), KITE_OK);
        CHECK_EQ_INT(quantize(b, QUANT_AWQ, g, 1, false), KITE_OK);
        CHECK_MSG(files_equal(a, b), "group %d: AWQ at alpha 0 differs from RTN", g);
        unlink(a);
        unlink(b);
    }
}

/* awq+gptq at alpha 0 (every scale 1: nothing folded, the Hessians unscaled)
 * must be GPTQ byte for byte; with the search it must differ. */
TEST(test_awq_gptq_alpha_zero_equals_gptq) {
    const char *a = tmp_path("gptq.gguf"), *b = tmp_path("awqgptq0.gguf"), *c = tmp_path("awqgptq.gguf");
    CHECK_EQ_INT(quantize(a, QUANT_GPTQ, 32, 0, false), KITE_OK);
    CHECK_EQ_INT(quantize(b, QUANT_AWQ_GPTQ, 32, 1, false), KITE_OK);
    CHECK_EQ_INT(quantize(c, QUANT_AWQ_GPTQ, 32, 0, false), KITE_OK);
    CHECK_MSG(files_equal(a, b), "awq+gptq at alpha 0 differs from gptq");
    CHECK_MSG(!files_equal(a, c), "awq+gptq with its scale search equals gptq: the scales were not applied");
    unlink(a);
    unlink(b);
    unlink(c);
}

/* Logits of every position of a fixed prompt. */
static int logits_of(const char *path, float *out, int n_tok) {
    kite_model *m = NULL;
    kite_ctx *c = NULL;
    kite_model_params mp = kite_model_default_params();
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    kite_token toks[32];
    for (int i = 0; i < n_tok; i++) toks[i] = i == 0 ? 1 : (kite_token)(30 + 13 * i % 400);
    int rc = kite_model_load(path, &mp, &m);
    if (!rc) rc = kite_ctx_new(m, &cp, &c);
    if (!rc) rc = kite_ctx_eval(c, toks, n_tok, true);
    for (int i = 0; !rc && i < n_tok; i++) memcpy(out + i * 512, kite_ctx_logits(c, i), 512 * sizeof(float));
    kite_ctx_free(c);
    kite_model_free(m);
    return rc;
}

TEST(test_fold_keeps_function) {
    enum { NT = 24 };
    static float a[NT * 512], b[NT * 512];
    const char *f = tmp_path("folded.gguf");
    CHECK_EQ_INT(quantize(f, QUANT_AWQ, 32, 0, true), KITE_OK);
    CHECK(!files_equal(f, MODEL)); /* the scales did change the weights */
    CHECK_EQ_INT(logits_of(MODEL, a, NT), KITE_OK);
    CHECK_EQ_INT(logits_of(f, b, NT), KITE_OK);
    double worst = 0, scale = 0;
    for (int i = 0; i < NT * 512; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    printf("    folded f32 model: max |logit difference| %.3g (max |logit| %.3g)\n", worst, scale);
    CHECK(worst <= 1e-4 * scale);
    unlink(f);
}

TEST(test_param_errors) {
    const char *f = tmp_path("bad.gguf");
    quant_params p = {.type = KITE_DTYPE_Q4_0, .method = QUANT_GPTQ};
    CHECK_EQ_INT(quant_model(MODEL, f, &p, NULL), KITE_E_ARG); /* no calibration text */
    CHECK_CONTAINS(kite_last_error(), "--calib");
    p.calib_path = "tests/data/quant-calib/no-such.txt";
    CHECK_EQ_INT(quant_model(MODEL, f, &p, NULL), KITE_E_IO);
    p.method = QUANT_RTN;
    p.calib_path = NULL;
    p.group = 48;
    CHECK_EQ_INT(quant_model(MODEL, f, &p, NULL), KITE_E_ARG);
    CHECK(access(f, F_OK) != 0);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_alpha_zero_is_rtn);
    RUN(test_outlier_channel_gets_scaled);
    RUN(test_model_alpha_zero_equals_rtn);
    RUN(test_awq_gptq_alpha_zero_equals_gptq);
    RUN(test_fold_keeps_function);
    RUN(test_param_errors);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
