/*
 * test_calib.c - calibration statistics (src/quant/calib.c) on stories260K.
 *
 * Known answers:
 *   - with fewer rows than the sample size the reservoir keeps every row,
 *     so H must equal 2 X X^T / n of the kept rows, and mean / max |x| their
 *     column statistics (every layer input, head included);
 *   - statistics collected one layer per pass (a tiny memory bound) equal
 *     those of a single pass bit for bit;
 *   - a layer outside [0, n_layer] is refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kite.h"
#include "model/context.h"
#include "model/model.h"
#include "quant/calib.h"

static kite_model *model;
static kite_token *toks;
static int64_t n_toks;

TEST(test_hessian_equals_samples) {
    calib *c = NULL;
    /* 60 tokens in windows of 32 (2 windows, 62 rows): all kept by a 256-row reservoir */
    calib_params p = {.window = 32, .hessian = true, .n_samples = 256, .n_threads = 2};
    CHECK_EQ_INT(calib_new(model, toks, 60, &p, &c), KITE_OK);
    if (!c) return;
    CHECK_EQ_INT(calib_layers_per_pass(c), model->hp.n_layer + 1);
    for (int32_t l = 0; l <= model->hp.n_layer; l++) {
        CHECK_EQ_INT(calib_load(c, l), KITE_OK);
        for (int pt = 0; pt < TAP_COUNT; pt++) {
            const calib_point *cp = calib_get(c, l, pt);
            const bool head = l == model->hp.n_layer;
            CHECK(!cp == (head != (pt == TAP_OUTPUT_IN)));
            if (!cp) continue;
            CHECK_EQ_INT(cp->n_rows, 62);
            CHECK_EQ_INT(cp->n_samp, 62);
            const int32_t w = cp->width;
            double worst = 0, scale = 0, worst_m = 0;
            for (int32_t i = 0; i < w; i++) {
                double ma = 0, mx = 0;
                for (int32_t r = 0; r < cp->n_samp; r++) {
                    const double v = fabs(cp->samples[(size_t)r * w + i]);
                    ma += v;
                    if (v > mx) mx = v;
                }
                worst_m = fmax(worst_m, fabs(ma / cp->n_samp - cp->mean_abs[i]));
                CHECK(mx == cp->max_abs[i]);
                for (int32_t j = 0; j < w; j++) {
                    double s = 0;
                    for (int32_t r = 0; r < cp->n_samp; r++)
                        s += (double)cp->samples[(size_t)r * w + i] * cp->samples[(size_t)r * w + j];
                    s *= 2.0 / cp->n_samp;
                    worst = fmax(worst, fabs(s - cp->h[(size_t)i * w + j]));
                    scale = fmax(scale, fabs(s));
                    CHECK(cp->h[(size_t)i * w + j] == cp->h[(size_t)j * w + i]);
                }
            }
            CHECK_MSG(worst <= 1e-9 * (scale + 1), "layer %d tap %d: H differs by %g (scale %g)", l, pt, worst, scale);
            CHECK_NEAR(worst_m, 0, 1e-6);
        }
    }
    calib_free(c);
}

TEST(test_grouped_passes_equal_one_pass) {
    calib *one = NULL, *grp = NULL;
    calib_params p = {.window = 64, .hessian = true, .n_samples = 16, .n_threads = 1};
    CHECK_EQ_INT(calib_new(model, toks, 300, &p, &one), KITE_OK);
    p.mem_limit = 1; /* one layer per pass */
    CHECK_EQ_INT(calib_new(model, toks, 300, &p, &grp), KITE_OK);
    if (!one || !grp) goto done;
    CHECK_EQ_INT(calib_layers_per_pass(grp), 1);
    for (int32_t l = 0; l <= model->hp.n_layer; l++) {
        CHECK_EQ_INT(calib_load(one, l), KITE_OK);
        CHECK_EQ_INT(calib_load(grp, l), KITE_OK);
        CHECK(calib_get(grp, l == 0 ? 1 : 0, TAP_ATTN_IN) == NULL); /* the other layers were dropped */
        for (int pt = 0; pt < TAP_COUNT; pt++) {
            const calib_point *a = calib_get(one, l, pt), *b = calib_get(grp, l, pt);
            CHECK(!a == !b);
            if (!a || !b) continue;
            const size_t w = (size_t)a->width;
            CHECK(memcmp(a->h, b->h, w * w * sizeof *a->h) == 0);
            CHECK(memcmp(a->mean_abs, b->mean_abs, w * sizeof *a->mean_abs) == 0);
            CHECK(memcmp(a->samples, b->samples, (size_t)a->n_samp * w * sizeof(float)) == 0);
        }
    }
    /* out of order: the carried residual stream is used only for the group right after it */
    {
        static const int32_t order[] = {3, 1, 2, 4, 0, 5};
        for (size_t k = 0; k < sizeof order / sizeof order[0] && order[k] <= model->hp.n_layer; k++) {
            const int32_t l = order[k];
            CHECK_EQ_INT(calib_load(one, l), KITE_OK);
            CHECK_EQ_INT(calib_load(grp, l), KITE_OK);
            const int pt = l == model->hp.n_layer ? TAP_OUTPUT_IN : TAP_FFN_IN;
            const calib_point *a = calib_get(one, l, pt), *b = calib_get(grp, l, pt);
            CHECK(a && b && memcmp(a->h, b->h, (size_t)a->width * (size_t)a->width * sizeof *a->h) == 0);
        }
    }
done:
    calib_free(one);
    calib_free(grp);
}

TEST(test_errors) {
    calib *c = NULL;
    calib_params p = {.n_samples = 4};
    CHECK_EQ_INT(calib_new(model, toks, 0, &p, &c), KITE_E_ARG);
    CHECK_EQ_INT(calib_new(model, toks, 10, &p, &c), KITE_OK);
    if (!c) return;
    CHECK_EQ_INT(calib_load(c, -1), KITE_E_ARG);
    CHECK_EQ_INT(calib_load(c, model->hp.n_layer + 1), KITE_E_ARG);
    CHECK(calib_get(c, 0, TAP_ATTN_IN) == NULL); /* nothing loaded */
    calib_free(c);
}

int main(void) {
    kite_model_params mp = kite_model_default_params();
    size_t n = 0;
    char *text = harness_read_file("tests/data/quant-calib/calib.txt", &n);
    if (!text || kite_model_load("models/stories260K.gguf", &mp, &model) != KITE_OK ||
        calib_tokenize(model, text, n, 2048, &toks, &n_toks) != KITE_OK) {
        printf("setup failed: %s\n", kite_last_error());
        return 1;
    }
    free(text);
    RUN(test_hessian_equals_samples);
    RUN(test_grouped_passes_equal_one_pass);
    RUN(test_errors);
    free(toks);
    kite_model_free(model);
    return harness_summary(__FILE__);
}
