/*
 * test_int8.c - W8A8 INT8 GEMM and LLM.int8() (int8_gemm.h, quant_w8.c).
 *
 * Known answers: the row quantizer on a hand-worked row; every level's
 * vec_dot / flat GEMM equals an independent exact integer reference
 * ((float)sum_i qw*qa * d_a * d_w, the sum in int64) bit for bit, on odd
 * row lengths (1..1000, 65536 at the int32 limit with +-127 everywhere, and
 * one row longer than W8_MAX_COLS), odd strides and token counts; the
 * W8A8 matmul equals per-token quantization + that reference for 1 and 3
 * threads; LLM.int8() with threshold +inf equals the W8A8 matmul exactly,
 * with threshold 0 equals the float dot with the f16 weights, and with
 * planted outlier columns equals the explicit decomposition.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/int8_gemm.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static float frnd(void) { return (float)(rnd() % 2000001u) / 1000000.0f - 1.0f; } /* [-1, 1] */

/* Independent reference: exact sum in int64, then the documented float expression. */
static float exact_ref(int64_t n, const void *w, const void *a) {
    const int8_t *qw = (const int8_t *)w + W8_ROW_HEADER, *qa = (const int8_t *)a + W8_ROW_HEADER;
    int64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += (int64_t)qw[i] * qa[i];
    return (float)s * w8_row_scale(a) * w8_row_scale(w);
}

/* The f16 copy of an LLM_INT8 row, widened. */
static void f16_row(const unsigned char *row, int64_t n, float *dst) {
    dtype_get(KITE_DTYPE_F16)->to_float(row + W8_ROW_HEADER + n, dst, n);
}

static int bits_equal(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

TEST(test_quantize_row_known) {
    const float x[4] = {-2.0f, 1.0f, 0.5f, 0.25f};
    unsigned char row[W8_ROW_HEADER + 4];
    CHECK_EQ_INT((int)dtype_row_size(KITE_DTYPE_W8A8, 4), W8_ROW_HEADER + 4);
    CHECK_EQ_INT((int)dtype_row_size(KITE_DTYPE_LLM_INT8, 4), W8_ROW_HEADER + 12);
    w8_quantize_row(x, row, 4, NULL);
    const int8_t *q = (const int8_t *)row + W8_ROW_HEADER;
    /* d = 2/127; x/d = -127, 63.5, 31.75, 15.875 -> -127, 64, 32, 16 (half away from zero) */
    CHECK(w8_row_scale(row) == 2.0f / 127.0f);
    CHECK_EQ_INT(q[0], -127);
    CHECK_EQ_INT(q[1], 64);
    CHECK_EQ_INT(q[2], 32);
    CHECK_EQ_INT(q[3], 16);
    CHECK_EQ_INT(w8_row_sum(row), -15);
    const uint8_t skip[4] = {1, 0, 0, 0}; /* without column 0: d = 1/127 */
    w8_quantize_row(x, row, 4, skip);
    CHECK(w8_row_scale(row) == 1.0f / 127.0f);
    CHECK_EQ_INT(q[0], 0);
    CHECK_EQ_INT(q[1], 127);
    CHECK_EQ_INT(w8_row_sum(row), 127 + 64 + 32);
    const float z[3] = {0};
    w8_quantize_row(z, row, 3, NULL);
    CHECK(w8_row_scale(row) == 0.0f && q[0] == 0 && q[2] == 0 && w8_row_sum(row) == 0);
}

/* nr weight rows and nt activation rows of n elements; mode 0 random, 1 all +-127 extremes. */
static void check_shape(const kern_ops_table *kt, int64_t n, int nr, int nt, int mode) {
    const size_t rb = dtype_row_size(KITE_DTYPE_W8A8, n);
    const size_t ws = rb + 3, as = rb + 5; /* odd strides: unaligned rows */
    unsigned char *w = calloc((size_t)nr, ws), *a = calloc((size_t)nt, as);
    float *x = malloc((size_t)n * sizeof(float));
    float *y = malloc((size_t)nr * (size_t)nt * sizeof(float));
    for (int r = 0; r < nr; r++) {
        for (int64_t i = 0; i < n; i++) x[i] = mode ? ((i + r) % 3 == 0 ? -1.0f : 1.0f) : frnd() * (float)(1 + r);
        w8_quantize_row(x, w + (size_t)r * ws, n, NULL);
    }
    for (int t = 0; t < nt; t++) {
        for (int64_t i = 0; i < n; i++) x[i] = mode ? ((i + t) % 3 == 0 ? -1.0f : 1.0f) : frnd() * 3.0f;
        kt->act_from_f32[KITE_DTYPE_W8A8](x, a + (size_t)t * as, n);
    }
    const kern_type_ops *op = &kt->ops[KITE_DTYPE_W8A8];
    int bad = 0;
    op->gemm(n, y, nr, w, ws, nr, a, as, nt);
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            const float e = exact_ref(n, w + (size_t)r * ws, a + (size_t)t * as);
            float v;
            op->vec_dot(n, &v, w + (size_t)r * ws, a + (size_t)t * as);
            if (!bits_equal(v, e) || !bits_equal(y[t * nr + r], e)) bad++;
        }
    CHECK_MSG(bad == 0, "%s: n=%lld nr=%d nt=%d mode %d: %d outputs differ from the exact reference", kt->name,
              (long long)n, nr, nt, mode, bad);
    free(w);
    free(a);
    free(x);
    free(y);
}

TEST(test_gemm_exact_all_levels) {
    static const int64_t ns[] = {1, 7, 31, 63, 64, 65, 100, 127, 172, 255, 1000};
    int levels = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue;
        levels++;
        CHECK(kt->ops[KITE_DTYPE_W8A8].act_type == KITE_DTYPE_W8A8 && kt->ops[KITE_DTYPE_W8A8].gemm);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) check_shape(kt, ns[k], 5, 6, 0);
        check_shape(kt, 172, 9, 16, 0);
        check_shape(kt, W8_MAX_COLS, 2, 2, 1);      /* largest int32-exact chunk, +-127 products */
        check_shape(kt, W8_MAX_COLS + 77, 1, 2, 1); /* longer rows: int64 across chunks */
    }
    printf("    int8 levels tested: %d (max %s)\n", levels, kern_level_name(kern_level_max()));
}

/* y = matmul of a W8A8 weight built from wf, vs per-token quantization + reference. */
TEST(test_matmul_w8a8_threads) {
    const int64_t ne0 = 172, nr = 21, n_tok = 19, ldy = 23;
    const size_t rb = dtype_row_size(KITE_DTYPE_W8A8, ne0);
    unsigned char *wq = malloc((size_t)nr * rb), *aq = malloc(rb);
    float *wf = malloc((size_t)(ne0 * nr) * sizeof(float)), *x = malloc((size_t)(ne0 * n_tok) * sizeof(float));
    float *y1 = malloc((size_t)(ldy * n_tok) * sizeof(float)), *y3 = malloc((size_t)(ldy * n_tok) * sizeof(float));
    for (int64_t i = 0; i < ne0 * nr; i++) wf[i] = frnd();
    for (int64_t i = 0; i < ne0 * n_tok; i++) x[i] = frnd() * 2.0f;
    for (int64_t r = 0; r < nr; r++) dtype_get(KITE_DTYPE_W8A8)->from_float(wf + r * ne0, wq + (size_t)r * rb, ne0);
    weight w = {.type = KITE_DTYPE_W8A8, .ne = {ne0, nr}, .row_bytes = rb, .data = wq};
    threadpool *tp1 = tp_new(1), *tp3 = tp_new(3);
    void *scratch = aligned_alloc(64, (kern_matmul_scratch_bytes(3, n_tok, ne0) + 63) & ~(size_t)63);
    int bad = 0;
    for (int l = 0; l <= (int)kern_level_max() && tp1 && tp3; l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        kern_matmul_with(kt, tp1, &w, x, n_tok, y1, ldy, scratch);
        kern_matmul_with(kt, tp3, &w, x, n_tok, y3, ldy, scratch);
        for (int64_t t = 0; t < n_tok; t++) {
            w8_quantize_row(x + t * ne0, aq, ne0, NULL);
            for (int64_t r = 0; r < nr; r++) {
                const float e = exact_ref(ne0, wq + (size_t)r * rb, aq);
                if (!bits_equal(y1[t * ldy + r], e) || !bits_equal(y3[t * ldy + r], e)) bad++;
            }
        }
    }
    CHECK_MSG(bad == 0, "%d matmul outputs differ from per-token quantization + exact reference", bad);
    /* and it approximates the float product (8-bit weights and activations) */
    kern_matmul_with(kern_table(), tp1, &w, x, n_tok, y1, ldy, scratch);
    double num = 0, den = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < nr; r++) {
            const double f = kern_dot_f32(wf + r * ne0, x + t * ne0, ne0);
            num += (y1[t * ldy + r] - f) * (y1[t * ldy + r] - f);
            den += f * f;
        }
    CHECK_MSG(sqrt(num / den) < 0.02, "W8A8 relative rms error %g", sqrt(num / den));
    free(wq);
    free(aq);
    free(wf);
    free(x);
    free(y1);
    free(y3);
    free(scratch);
    tp_free(tp1);
    tp_free(tp3);
}

/* LLM.int8(): threshold inf == W8A8, threshold 0 == f16 float dot, planted outliers == decomposition. */
TEST(test_llm_int8_decomposition) {
    const int64_t ne0 = 172, nr = 13, n_tok = 18, ldy = 13;
    const size_t rb8 = dtype_row_size(KITE_DTYPE_W8A8, ne0), rbm = dtype_row_size(KITE_DTYPE_LLM_INT8, ne0);
    unsigned char *w8 = malloc((size_t)nr * rb8), *wm = malloc((size_t)nr * rbm), *aq = malloc(rb8);
    float *wf = malloc((size_t)(ne0 * nr) * sizeof(float)), *x = malloc((size_t)(ne0 * n_tok) * sizeof(float));
    float *ya = malloc((size_t)(ldy * n_tok) * sizeof(float)), *yb = malloc((size_t)(ldy * n_tok) * sizeof(float));
    float *row = malloc((size_t)ne0 * sizeof(float));
    uint8_t *mask = calloc((size_t)ne0, 1);
    for (int64_t i = 0; i < ne0 * nr; i++) wf[i] = frnd();
    for (int64_t i = 0; i < ne0 * n_tok; i++) x[i] = frnd();
    x[3 * ne0 + 5] = 40.0f; /* outlier columns 5 (one token) and 100 (all tokens) */
    mask[5] = 1;
    for (int64_t t = 0; t < n_tok; t++) x[t * ne0 + 100] = -25.0f + (float)t;
    mask[100] = 1;
    for (int64_t r = 0; r < nr; r++) {
        dtype_get(KITE_DTYPE_W8A8)->from_float(wf + r * ne0, w8 + (size_t)r * rb8, ne0);
        dtype_get(KITE_DTYPE_LLM_INT8)->from_float(wf + r * ne0, wm + (size_t)r * rbm, ne0);
        CHECK(memcmp(w8 + (size_t)r * rb8, wm + (size_t)r * rbm, rb8) == 0); /* int8 half == W8A8 row */
    }
    weight W8 = {.type = KITE_DTYPE_W8A8, .ne = {ne0, nr}, .row_bytes = rb8, .data = w8};
    weight WM = {.type = KITE_DTYPE_LLM_INT8, .ne = {ne0, nr}, .row_bytes = rbm, .data = wm};
    threadpool *tp = tp_new(2);
    void *scratch = aligned_alloc(64, (kern_matmul_scratch_bytes(2, n_tok, ne0) + 63) & ~(size_t)63);
    const float saved = kern_llm_int8_threshold();
    int bad_inf = 0, bad_dec = 0;
    double max0 = 0;
    for (int l = 0; l <= (int)kern_level_max() && tp; l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        kern_llm_int8_set_threshold(INFINITY);
        kern_matmul_with(kt, tp, &W8, x, n_tok, ya, ldy, scratch);
        kern_matmul_with(kt, tp, &WM, x, n_tok, yb, ldy, scratch);
        for (int64_t i = 0; i < n_tok * ldy; i++) bad_inf += !bits_equal(ya[i], yb[i]);
        kern_llm_int8_set_threshold(0.0f);
        kern_matmul_with(kt, tp, &WM, x, n_tok, yb, ldy, scratch);
        for (int64_t r = 0; r < nr; r++) {
            f16_row(wm + (size_t)r * rbm, ne0, row); /* the f16 copy */
            for (int64_t t = 0; t < n_tok; t++) {
                const double f = kern_dot_f32(row, x + t * ne0, ne0), d = fabs(yb[t * ldy + r] - f);
                if (d / (1.0 + fabs(f)) > max0) max0 = d / (1.0 + fabs(f));
            }
        }
        kern_llm_int8_set_threshold(6.0f); /* the planted columns only */
        kern_matmul_with(kt, tp, &WM, x, n_tok, yb, ldy, scratch);
        for (int64_t t = 0; t < n_tok; t++) {
            w8_quantize_row(x + t * ne0, aq, ne0, mask);
            for (int64_t r = 0; r < nr; r++) {
                float e = exact_ref(ne0, w8 + (size_t)r * rb8, aq);
                f16_row(wm + (size_t)r * rbm, ne0, row);
                e += x[t * ne0 + 5] * row[5] + x[t * ne0 + 100] * row[100];
                if (fabsf(yb[t * ldy + r] - e) > 1e-4f * (1.0f + fabsf(e))) bad_dec++;
            }
        }
    }
    kern_llm_int8_set_threshold(saved);
    CHECK_MSG(bad_inf == 0, "threshold inf: %d outputs differ from the W8A8 matmul", bad_inf);
    CHECK_MSG(max0 < 1e-5, "threshold 0: max relative difference from the f16 float dot %g", max0);
    CHECK_MSG(bad_dec == 0, "threshold 6: %d outputs differ from the explicit decomposition", bad_dec);
    /* the decomposition beats plain W8A8 on rows with outliers */
    double e8 = 0, em = 0;
    kern_matmul(tp, &W8, x, n_tok, ya, ldy, scratch);
    kern_matmul(tp, &WM, x, n_tok, yb, ldy, scratch);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < nr; r++) {
            const double f = kern_dot_f32(wf + r * ne0, x + t * ne0, ne0);
            e8 += (ya[t * ldy + r] - f) * (ya[t * ldy + r] - f);
            em += (yb[t * ldy + r] - f) * (yb[t * ldy + r] - f);
        }
    CHECK_MSG(em < e8, "LLM.int8() error %g not below W8A8's %g with outliers", em, e8);
    free(w8);
    free(wm);
    free(aq);
    free(wf);
    free(x);
    free(ya);
    free(yb);
    free(row);
    free(mask);
    free(scratch);
    tp_free(tp);
}

int main(void) {
    RUN(test_quantize_row_known);
    RUN(test_gemm_exact_all_levels);
    RUN(test_matmul_w8a8_threads);
    RUN(test_llm_int8_decomposition);
    return harness_summary(__FILE__);
}
