/*
 * test_bcq.c - binary-coding quantization and LUT-GEMM (src/quant/bcq.c):
 * hand-worked fits, error non-increasing in the number of planes and in the
 * ALS iterations, the LUT GEMV against dequantize-then-multiply and against
 * a double-precision product on odd shapes.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "kite.h"
#include "quant/bcq.h"

static uint64_t rng = 0x12345678abcdefull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Gaussian-ish weights with a few outliers, like real layers. */
static void fill_weights(float *w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        w[i] = (frand() + frand() + frand()) * 0.3f;
        if (i % 97 == 0) w[i] *= 6.0f;
    }
}

/* Exactly representable: one plane fits w = a * sign exactly; two planes fit
 * the four levels {+-a1 +- a2} exactly. */
TEST(test_exact_cases) {
    bcq_matrix m;
    float w[16], out[16];
    for (int j = 0; j < 16; j++) w[j] = (j % 3) ? 0.5f : -0.5f;
    CHECK(bcq_alloc(&m, 1, 16, 1, 8) == KITE_OK);
    CHECK(bcq_fit(&m, w, 5) < 1e-12);
    bcq_dequant_row(&m, 0, out);
    for (int j = 0; j < 16; j++) CHECK_NEAR(out[j], w[j], 1e-6);
    bcq_free(&m);
    static const float lv[4] = {-3.0f, -1.0f, 1.0f, 3.0f}; /* a1 = 2, a2 = 1 */
    for (int j = 0; j < 16; j++) w[j] = lv[(j * 7) % 4];
    CHECK(bcq_alloc(&m, 1, 16, 2, 16) == KITE_OK);
    CHECK(bcq_fit(&m, w, 10) < 1e-9);
    bcq_dequant_row(&m, 0, out);
    for (int j = 0; j < 16; j++) CHECK_NEAR(out[j], w[j], 1e-5);
    bcq_free(&m);
}

TEST(test_error_decreases_with_bits_and_iters) {
    enum { R = 7, C = 203 }; /* odd shape: padding columns in the last group */
    float *w = malloc(sizeof(float) * R * C);
    fill_weights(w, (size_t)R * C);
    double prev = INFINITY;
    for (int q = 1; q <= 4; q++) {
        bcq_matrix m;
        CHECK(bcq_alloc(&m, R, C, q, 64) == KITE_OK);
        const double greedy = bcq_fit(&m, w, 0);
        const double als = bcq_fit(&m, w, 20);
        printf("    q=%d: squared error greedy %.4f, ALS %.4f\n", q, greedy, als);
        CHECK_MSG(als <= greedy * (1 + 1e-9), "q=%d: ALS %.6f > greedy %.6f", q, als, greedy);
        CHECK_MSG(als < prev, "q=%d: error %.6f not below q-1's %.6f", q, als, prev);
        /* the reported error is the real one */
        float *row = malloc(sizeof(float) * (size_t)m.cols8);
        double e = 0.0;
        for (int r = 0; r < R; r++) {
            bcq_dequant_row(&m, r, row);
            for (int c = 0; c < C; c++) e += ((double)w[r * C + c] - row[c]) * ((double)w[r * C + c] - row[c]);
        }
        CHECK_NEAR(e, als, 1e-4 * als + 1e-9);
        free(row);
        prev = als;
        bcq_free(&m);
    }
    free(w);
}

TEST(test_lut_gemv_matches) {
    static const int shapes[][4] = {{1, 8, 1, 8}, {5, 13, 2, 8}, {9, 64, 3, 32}, {17, 203, 4, 64}, {3, 517, 3, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int R = shapes[s][0], C = shapes[s][1], q = shapes[s][2], g = shapes[s][3];
        float *w = malloc(sizeof(float) * (size_t)R * C), *x = malloc(sizeof(float) * (size_t)C);
        fill_weights(w, (size_t)R * C);
        for (int c = 0; c < C; c++) x[c] = frand();
        bcq_matrix m;
        CHECK(bcq_alloc(&m, R, C, q, g) == KITE_OK);
        bcq_fit(&m, w, 5);
        float *scratch = malloc(sizeof(float) * bcq_lut_scratch_floats(&m));
        float *row = malloc(sizeof(float) * (size_t)m.cols8);
        float *y1 = malloc(sizeof(float) * (size_t)R), *y2 = malloc(sizeof(float) * (size_t)R);
        bcq_lut_gemv(&m, x, y1, scratch);
        bcq_dequant_gemv(&m, x, y2, row);
        for (int r = 0; r < R; r++) {
            bcq_dequant_row(&m, r, row);
            double ref = 0.0, mag = 0.0;
            for (int c = 0; c < C; c++) {
                ref += (double)row[c] * x[c];
                mag += fabs((double)row[c] * x[c]);
            }
            CHECK_MSG(fabs(y1[r] - ref) <= 1e-5 * mag + 1e-6, "shape %zu row %d: lut %.7g vs %.7g", s, r, y1[r], ref);
            CHECK_MSG(fabs(y2[r] - ref) <= 1e-5 * mag + 1e-6, "shape %zu row %d: dequant %.7g vs %.7g", s, r, y2[r],
                      ref);
        }
        free(w), free(x), free(scratch), free(row), free(y1), free(y2);
        bcq_free(&m);
    }
}

TEST(test_bad_shapes) {
    bcq_matrix m;
    CHECK(bcq_alloc(&m, 0, 8, 1, 8) == KITE_E_ARG);
    CHECK(bcq_alloc(&m, 1, 8, 0, 8) == KITE_E_ARG);
    CHECK(bcq_alloc(&m, 1, 8, BCQ_MAX_BITS + 1, 8) == KITE_E_ARG);
    CHECK(bcq_alloc(&m, 1, 8, 2, 12) == KITE_E_ARG);
    CHECK(bcq_alloc(&m, 1, 8, 2, 1024) == KITE_E_ARG);
}

int main(void) {
    RUN(test_exact_cases);
    RUN(test_error_decreases_with_bits_and_iters);
    RUN(test_lut_gemv_matches);
    RUN(test_bad_shapes);
    return harness_summary(__FILE__);
}
