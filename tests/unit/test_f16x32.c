/*
 * test_f16x32.c - the 32-row interleaved f16 layout (kernels/gemm_f16x32.h)
 * and its load-time use (model/repack.c).
 *
 *   - repacking gives each row back through kern_get_row (rows in groups
 *     and the plain tail rows);
 *   - the scalar reference is one fmaf chain per output (checked against a
 *     double-precision sum), and the avx512 kernel equals it bit for bit for
 *     every token count 1..F16X32_TOK, 1-6 groups and odd K;
 *   - kern_matmul on repacked weights, at every level: within FLOAT_BUDGET
 *     of a double reference; bit-identical for 1 and 3 threads, for a batch
 *     versus token by token and for a fused call versus single ones; the
 *     grouped rows equal the reference at every level, and the tail rows
 *     equal kern_matmul on the plain weight;
 *   - a synthesized f16 model loads repacked where the level gains from it,
 *     and its logits match the plain-layout load within the float budget.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_f16x32.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/synth.h"
#include "repack_harness.h"
#include "tensor/dtype.h"

#define FLOAT_BUDGET 1e-5 /* test_kernels.c's budget for float sums: |y - ref| <= 1e-5 * sum|w*x| */

/* nr random f16 rows of ne0 (plain), with a few extreme halves. */
static uint16_t *make_f16(int64_t nr, int64_t ne0) {
    uint16_t *w = malloc((size_t)(nr * ne0) * sizeof *w);
    for (int64_t i = 0; i < nr * ne0; i++) w[i] = fp32_to_fp16(frand() * ldexpf(1.0f, (int)(i % 7) - 3));
    w[0] = fp32_to_fp16(65504.0f);  /* largest half */
    w[nr * ne0 - 1] = 0x0001;       /* smallest subnormal */
    if (nr * ne0 > 40) w[40] = 0x8000; /* -0 */
    return w;
}

TEST(test_pack_get_row) {
    const int64_t shapes[][2] = {{32, 1}, {37, 5}, {101, 130}, {64, 2051}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t nr = shapes[s][0], ne0 = shapes[s][1];
        uint16_t *plain = make_f16(nr, ne0), *packed = malloc((size_t)(nr * ne0) * 2);
        void *tmp = malloc(kern_f16x32_pack_tmp_bytes(ne0));
        memcpy(packed, plain, (size_t)(nr * ne0) * 2);
        kern_f16x32_pack(packed, nr, ne0, tmp);
        weight w = {.type = KITE_DTYPE_F16, .ne = {ne0, nr}, .row_bytes = (size_t)ne0 * 2, .data = packed,
                    .layout = WEIGHT_LAYOUT_F16X32};
        CHECK_EQ_INT((int)kern_f16x32_rows(&w), (int)(nr / 32 * 32));
        float *got = malloc((size_t)ne0 * sizeof(float)), *want = malloc((size_t)ne0 * sizeof(float));
        for (int64_t r = 0; r < nr; r++) {
            kern_get_row(&w, r, got);
            dtype_get(KITE_DTYPE_F16)->to_float(plain + r * ne0, want, ne0);
            CHECK_MSG(memcmp(got, want, (size_t)ne0 * sizeof(float)) == 0, "%lld x %lld: row %lld", (long long)nr,
                      (long long)ne0, (long long)r);
        }
        if (nr >= 64 && ne0 > 1) /* the layout itself: row 33's element 1 is half 32 + 1 of group 1 */
            CHECK(packed[ne0 * 32 + 32 + 1] == plain[33 * ne0 + 1]);
        if (nr % 32) /* tail rows stay where they were */
            CHECK(memcmp(packed + nr / 32 * 32 * ne0, plain + nr / 32 * 32 * ne0, (size_t)(nr % 32 * ne0) * 2) == 0);
        free(plain);
        free(packed);
        free(tmp);
        free(got);
        free(want);
    }
}

/* The reference against a double-precision sum, and the avx512 kernel against the reference. */
TEST(test_kernel_equals_ref) {
    const int64_t ks[] = {1, 7, 37, 130, 2051};
    int n = 0;
    double worst = 0;
    const bool simd = kern_level_max() >= KERN_LEVEL_AVX512;
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        const int64_t K = ks[ki], ng = 6, ldy = ng * 32 + 3;
        uint16_t *w = make_f16(ng * 32, K);
        void *tmp = malloc(kern_f16x32_pack_tmp_bytes(K));
        float *wf = malloc((size_t)(ng * 32 * K) * sizeof(float));
        dtype_get(KITE_DTYPE_F16)->to_float(w, wf, ng * 32 * K);
        kern_f16x32_pack(w, ng * 32, K, tmp);
        float *x = malloc((size_t)(F16X32_TOK * K) * sizeof(float)), *xp = malloc((size_t)(F16X32_TOK * K) * 4);
        for (int64_t i = 0; i < F16X32_TOK * K; i++) x[i] = frand() * (i % 97 == 0 ? 50.0f : 1.0f);
        float *y0 = malloc((size_t)(F16X32_TOK * ldy) * 4), *y1 = malloc((size_t)(F16X32_TOK * ldy) * 4);
        for (int nt = 1; nt <= F16X32_TOK; nt++) {
            kern_f16x32_pack_act(x, K, nt, xp);
            for (int64_t g = 1; g <= ng; g += g < 3 ? 1 : 3) { /* 1, 2, 3, 6 groups: the wide tile and leftovers */
                for (int64_t i = 0; i < F16X32_TOK * ldy; i++) y0[i] = y1[i] = NAN;
                gemm_f16x32_ref(K, w, g, xp, nt, y0, ldy);
                for (int t = 0; t < nt; t++)
                    for (int64_t r = 0; r < g * 32; r++) {
                        double s = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            s += (double)wf[r * K + k] * x[t * K + k];
                            mag += fabs((double)wf[r * K + k] * x[t * K + k]);
                        }
                        const double e = fabs(y0[t * ldy + r] - s) / (FLOAT_BUDGET * mag + 1e-30);
                        if (e > worst) worst = e;
                        CHECK_MSG(e <= 1, "ref K %lld nt %d row %lld: %.9g vs %.9g", (long long)K, nt, (long long)r,
                                  y0[t * ldy + r], s);
                    }
                if (!simd) continue;
                kern_gemm_f16x32_get(KERN_LEVEL_AVX512)(K, w, g, xp, nt, y1, ldy);
                CHECK_MSG(memcmp(y0, y1, (size_t)(F16X32_TOK * ldy) * 4) == 0, "K %lld groups %lld nt %d", (long long)K,
                          (long long)g, nt);
                n++;
            }
        }
        free(w);
        free(tmp);
        free(wf);
        free(x);
        free(xp);
        free(y0);
        free(y1);
    }
    printf("    reference: worst error %.3f of FLOAT_BUDGET; %d avx512 calls bit-identical to it\n", worst, n);
    if (!simd) SKIP_TEST("this CPU has no AVX-512; the scalar reference alone was checked");
}

/* kern_matmul (single and fused) on a repacked weight at level l. */
static void check_matmul(kern_level l, threadpool *tp1, threadpool *tp3, float *y_level0) {
    const kern_ops_table *kt = kern_table_for_level(l);
    g_rng = 0xF16u; /* the same data at every level */
    const int64_t ne0 = 130, nr = 3 * 32 + 11, n_tok = 29; /* 3 groups + 11 tail rows; 2 full token groups + 5 */
    uint16_t *plain = make_f16(nr, ne0), *packed = malloc((size_t)(nr * ne0) * 2);
    void *tmp = malloc(kern_f16x32_pack_tmp_bytes(ne0));
    memcpy(packed, plain, (size_t)(nr * ne0) * 2);
    kern_f16x32_pack(packed, nr, ne0, tmp);
    weight wp = {.type = KITE_DTYPE_F16, .ne = {ne0, nr}, .row_bytes = (size_t)ne0 * 2, .data = plain};
    weight w = wp;
    w.data = packed;
    w.layout = WEIGHT_LAYOUT_F16X32;
    float *x = malloc((size_t)(n_tok * ne0) * sizeof(float)), *wf = malloc((size_t)(nr * ne0) * sizeof(float));
    for (int64_t i = 0; i < n_tok * ne0; i++) x[i] = frand() * 2.0f;
    dtype_get(KITE_DTYPE_F16)->to_float(plain, wf, nr * ne0);
    const size_t sb = kern_matmul_scratch_bytes(3, n_tok, ne0);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    const size_t ny = (size_t)(n_tok * nr) * sizeof(float);
    float *y1 = malloc(ny), *y3 = malloc(ny), *yd = malloc(ny), *yf = malloc(2 * ny), *yp = malloc(ny);
    kern_matmul_with(kt, tp1, &w, x, n_tok, y1, nr, scratch);
    kern_matmul_with(kt, tp3, &w, x, n_tok, y3, nr, scratch);
    for (int64_t k = 0; k < n_tok; k++) kern_matmul_with(kt, tp3, &w, x + k * ne0, 1, yd + k * nr, nr, scratch);
    kern_matmul_with(kt, tp3, &wp, x, n_tok, yp, nr, scratch);
    const kern_mm_item items[2] = {{&w, yf, nr}, {&w, yf + n_tok * nr, nr}};
    kern_matmul_fused_with(kt, tp3, items, 2, x, n_tok, scratch, NULL, NULL);
    CHECK_MSG(memcmp(y1, y3, ny) == 0, "%s: 1 vs 3 threads differ", kt->name);
    CHECK_MSG(memcmp(y1, yd, ny) == 0, "%s: batch vs token by token differ", kt->name);
    CHECK_MSG(memcmp(y1, yf, ny) == 0 && memcmp(y1, yf + n_tok * nr, ny) == 0, "%s: fused differs", kt->name);
    double worst = 0;
    for (int64_t k = 0; k < n_tok; k++) {
        for (int64_t r = 0; r < nr; r++) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < ne0; i++) {
                s += (double)wf[r * ne0 + i] * x[k * ne0 + i];
                mag += fabs((double)wf[r * ne0 + i] * x[k * ne0 + i]);
            }
            const double e = fabs(y1[k * nr + r] - s) / (FLOAT_BUDGET * mag + 1e-30);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1, "%s t=%lld r=%lld: %.9g vs %.9g", kt->name, (long long)k, (long long)r,
                      y1[k * nr + r], s);
        }
        CHECK_MSG(memcmp(y1 + k * nr + 96, yp + k * nr + 96, 11 * sizeof(float)) == 0, "%s: tail rows, token %lld",
                  kt->name, (long long)k);
    }
    if (l == KERN_LEVEL_SCALAR) memcpy(y_level0, y1, ny);
    else /* grouped rows follow the reference exactly at every level */
        for (int64_t k = 0; k < n_tok; k++)
            CHECK_MSG(memcmp(y1 + k * nr, y_level0 + k * nr, 96 * sizeof(float)) == 0, "%s vs scalar, token %lld",
                      kt->name, (long long)k);
    if (l == kern_level_max()) printf("    matmul f16x32 (%s): worst error %.3f of budget\n", kt->name, worst);
    free(plain);
    free(packed);
    free(tmp);
    free(x);
    free(wf);
    free(scratch);
    free(y1);
    free(y3);
    free(yd);
    free(yf);
    free(yp);
}

TEST(test_matmul_levels) {
    threadpool *tp1 = tp_new(1), *tp3 = tp_new(3);
    CHECK(tp1 && tp3);
    float *y0 = malloc((size_t)(29 * 107) * sizeof(float));
    for (int l = 0; l <= (int)kern_level_max() && tp1 && tp3; l++) check_matmul((kern_level)l, tp1, tp3, y0);
    free(y0);
    tp_free(tp1);
    tp_free(tp3);
}

TEST(test_model_repack) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/kite-test-f16x32-%d.gguf", (int)getpid());
    synth_params sp = {.shape = *synth_shape_find("tiny-llama3"), .type = KITE_DTYPE_F16, .seed = 7};
    CHECK_EQ_INT(synth_write(&sp, path), KITE_OK);
    int n0 = -1, n1 = -1;
    int32_t nv = 0;
    float *plain = repack_logits_of(path, true, &n0, &nv), *packed = repack_logits_of(path, false, &n1, &nv);
    CHECK(plain && packed);
    CHECK_EQ_INT(n0, 0);
    if (kern_f16x32_pays(kern_table()->level)) CHECK(n1 > 0);
    else CHECK_EQ_INT(n1, 0);
    double worst = 0, mag = 0;
    for (size_t i = 0; plain && packed && i < (size_t)nv * REPACK_N_TOK; i++) {
        worst = fmax(worst, fabs((double)plain[i] - packed[i]));
        mag = fmax(mag, fabs((double)plain[i]));
    }
    /* another float summation order through every layer: a few ulps of the
     * logits' scale; a layout or kernel error is far larger */
    CHECK_MSG(worst <= 1e-4 * mag + 1e-6, "max |plain - repacked| %.3g (max |logit| %.3g)", worst, mag);
    printf("    f16 model: %d matrices repacked, max logit difference %.3g (max |logit| %.3g)\n", n1, worst, mag);
    free(plain);
    free(packed);
    unlink(path);
}

int main(void) {
    RUN(test_pack_get_row);
    RUN(test_kernel_equals_ref);
    RUN(test_matmul_levels);
    RUN(test_model_repack);
    return harness_summary(__FILE__);
}
