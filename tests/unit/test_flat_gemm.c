/*
 * test_flat_gemm.c - small batches ("flat" shape: 1..64 activation rows,
 * a large weight matrix) give every output bit for bit what the same row
 * gives alone (n = 1, the GEMV), at every CPU level this machine runs, and
 * the SIMD q8_0 activation quantizers write the reference's bytes.
 *
 *   - kern_matmul_with for n = 1..64 tokens (the flat GEMM up to
 *     KERN_GEMM_MAX_TOK, the tiled GEMM above it where the level has one)
 *     on 2 threads versus each token alone on 1 thread: q8_0 and q4_0 with
 *     K = 1120 (35 blocks: not a multiple of 256, an odd last block pair),
 *     q4_K and q6_K with K = 768 (3 super-blocks), f32 with K = 999; N = 37
 *     rows (odd: the 4-row micro-kernels' remainder, a split that is not a
 *     multiple of 8).  The serving engine's batch-vs-alone guarantee rests on
 *     this (test_engine.c, test_batch.c check it end to end).
 *   - the decode kernels of the float types (one token: rows in groups of 8,
 *     f16/bf16 in 32-element steps with a 16-element step and a masked tail
 *     after them; bf16 x bf16 activations at avx512bf16) against vec_dot,
 *     bit for bit, at every level: f32, f16, bf16 weights, K around those
 *     step edges (1, 15, 16, 17, 31, 32, 33, 47, 48, 63, 999, 2072), 8, 9,
 *     16, 17 and 37 rows, rows at odd byte offsets and strides.
 *   - act_from_f32[Q8_0] of every level versus act_quantize_q8_0_ref: random
 *     rows, rows whose products x*id are exact .5 ties (roundf rounds them
 *     away from zero), +-0, tiny and huge magnitudes: byte-identical.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define KERNEL_TEST_SEED 0x9e3779b97f4a7c15ull
#include "kernel_helpers.h"

#define MAX_TOK 64
#define N_ROWS 37

TEST(test_flat_vs_gemv) {
    static const uint32_t types[] = {KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0, KITE_DTYPE_Q4_K, KITE_DTYPE_Q6_K,
                                     KITE_DTYPE_F32,  KITE_DTYPE_Q5_K, KITE_DTYPE_IQ4_XS, KITE_DTYPE_Q3_K,
                                     KITE_DTYPE_Q2_K};
    static const int64_t cols[] = {1120, 1120, 768, 768, 999, 768, 768, 768, 768};
    threadpool *tp1 = tp_new(1), *tp2 = tp_new(2);
    CHECK(tp1 && tp2);
    for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++) {
        const uint32_t t = types[i];
        const int64_t ne0 = cols[i];
        const dtype_traits *tr = dtype_get(t);
        const size_t rb = dtype_row_size(t, ne0);
        unsigned char *wd = malloc(rb * N_ROWS);
        float *tmp = malloc((size_t)ne0 * sizeof(float));
        for (int r = 0; r < N_ROWS; r++) {
            for (int64_t j = 0; j < ne0; j++) tmp[j] = frand();
            tr->from_float(tmp, wd + rb * (size_t)r, ne0);
        }
        const weight w = {.type = t, .ne = {ne0, N_ROWS}, .row_bytes = rb, .data = wd};
        float *x = malloc((size_t)(MAX_TOK * ne0) * sizeof(float));
        for (int64_t j = 0; j < MAX_TOK * ne0; j++) x[j] = frand() * 2.0f;
        const size_t sb = kern_matmul_scratch_bytes(2, MAX_TOK, ne0);
        void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
        float *alone = malloc((size_t)(MAX_TOK * N_ROWS) * sizeof(float));
        float *batch = malloc((size_t)(MAX_TOK * N_ROWS) * sizeof(float));
        for (int l = 0; l <= (int)kern_level_max(); l++) {
            const kern_ops_table *kt = kern_table_for_level((kern_level)l);
            if (!kt) continue; /* another architecture's level */
            for (int k = 0; k < MAX_TOK; k++)
                kern_matmul_with(kt, tp1, &w, x + (int64_t)k * ne0, 1, alone + k * N_ROWS, N_ROWS, scratch);
            int bad = 0;
            for (int n = 1; n <= MAX_TOK && !bad; n++) {
                kern_matmul_with(kt, tp2, &w, x, n, batch, N_ROWS, scratch);
                for (int o = 0; o < n * N_ROWS && !bad; o++)
                    if (memcmp(&batch[o], &alone[o], sizeof(float)) != 0) {
                        bad = 1;
                        FAIL_AT_("%s %s n=%d token %d row %d: batch %.9g alone %.9g", kt->name, dtype_name(t), n,
                                 o / N_ROWS, o % N_ROWS, batch[o], alone[o]);
                    }
            }
            CHECK(!bad);
        }
        free(wd);
        free(tmp);
        free(x);
        free(scratch);
        free(alone);
        free(batch);
    }
    tp_free(tp1);
    tp_free(tp2);
}

/* gemm with one token (the decode path) == vec_dot for every row, float
 * weight types, K around the decode kernels' 16/32-element steps. */
TEST(test_decode_float_vs_vec_dot) {
    static const uint32_t types[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16};
    static const int64_t ks[] = {1, 15, 16, 17, 31, 32, 33, 47, 48, 63, 999, 2072};
    static const int nrs[] = {8, 9, 16, 17, 37};
    enum { MAX_R = 37, MAX_K = 2072 };
    unsigned char *wbuf = malloc((size_t)MAX_R * (MAX_K * 4 + 3) + 8), *abuf = malloc(MAX_K * 4 + 8);
    float *x = malloc(MAX_K * sizeof(float)), *y = malloc((MAX_R + 1) * sizeof(float));
    int n_checks = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        for (int i = 0; i < 3; i++) {
            const uint32_t t = types[i];
            const kern_type_ops *op = &kt->ops[t];
            for (int ik = 0; ik < (int)(sizeof ks / sizeof ks[0]); ik++) {
                const int64_t n = ks[ik];
                const size_t wb = dtype_row_size(t, n) + 3; /* odd stride */
                unsigned char *w = wbuf + 1, *a = abuf + 4 * (ik % 2); /* odd weight address */
                for (int r = 0; r < MAX_R; r++) {
                    for (int64_t j = 0; j < n; j++) x[j] = frand();
                    dtype_get(t)->from_float(x, w + (size_t)r * wb, n);
                }
                for (int64_t j = 0; j < n; j++) x[j] = frand() * 2.0f;
                if (op->act_type == KITE_DTYPE_F32) memcpy(a, x, (size_t)n * sizeof(float));
                else kt->act_from_f32[op->act_type](x, a, n);
                for (int ir = 0; ir < (int)(sizeof nrs / sizeof nrs[0]); ir++) {
                    const int nr = nrs[ir];
                    y[nr] = NAN;
                    op->gemm(n, y, nr, w, wb, nr, a, 0, 1);
                    for (int r = 0; r < nr; r++) {
                        float v;
                        op->vec_dot(n, &v, w + (size_t)r * wb, a);
                        CHECK_MSG(memcmp(&v, &y[r], sizeof v) == 0, "%s %s n=%lld nr=%d r=%d: gemm %.9g vec_dot %.9g",
                                  kt->name, dtype_name(t), (long long)n, nr, r, y[r], v);
                        n_checks++;
                    }
                    CHECK(isnan(y[nr])); /* nothing past the nr outputs is written */
                }
            }
        }
    }
    printf("    %d decode outputs checked\n", n_checks);
    free(wbuf);
    free(abuf);
    free(x);
    free(y);
}

/* One activation row of n floats of several kinds, by row index. */
static void act_row(int kind, float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        switch (kind) {
        case 0: x[j] = frand() * 3.0f; break;
        case 1: /* amax 127 -> d = 1, id = 1: every x*id a .5 tie */
            x[j] = j % QK8_0 == 0 ? 127.0f : (float)((int)(rnd() % 254) - 127) + 0.5f;
            break;
        case 2: /* amax 63.5 -> d = 0.5, id = 2: ties at quarter steps */
            x[j] = j % QK8_0 == 0 ? -63.5f : (float)((int)(rnd() % 254) - 127) * 0.25f;
            break;
        case 3: x[j] = (j / QK8_0) % 2 ? 0.0f : -0.0f; break; /* all-zero blocks */
        case 4: x[j] = frand() * 1e-30f; break;
        default: x[j] = frand() * 1e30f; break;
        }
    }
}

TEST(test_q8_0_act_quantizers) {
    enum { N = QK8_0 * 13 };
    float x[N];
    const size_t bytes = kern_act_row_bytes(KITE_DTYPE_Q8_0, N);
    unsigned char *ref = malloc(bytes), *got = malloc(bytes);
    int n_levels = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        const kern_act_fn q = kt->act_from_f32[KITE_DTYPE_Q8_0];
        CHECK(q != NULL);
        if (!q) continue;
        n_levels++;
        for (int rep = 0; rep < 60; rep++) {
            const int kind = rep % 6;
            act_row(kind, x, N);
            act_quantize_q8_0_ref(x, ref, N);
            memset(got, 0xA5, bytes);
            q(x, got, N);
            CHECK_MSG(memcmp(ref, got, bytes) == 0, "%s: q8_0 activation bytes differ from the reference (kind %d)",
                      kt->name, kind);
        }
    }
    CHECK(n_levels >= 1);
    free(ref);
    free(got);
}

/* W8A8 activation rows (any length): every level's act_from_f32[W8A8] writes
 * w8_quantize_row's bytes, on odd lengths and rows with ties, zeros, tiny
 * and huge values, NaN and Inf. */
TEST(test_w8a8_act_quantizers) {
    enum { NMAX = 1000 };
    static const int64_t lens[] = {1, 7, 15, 16, 17, 31, 33, 100, 257, 999};
    float x[NMAX];
    const size_t cap = (size_t)NMAX + W8_ROW_HEADER;
    unsigned char *ref = malloc(cap), *got = malloc(cap);
    int n_levels = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue;
        const kern_act_fn q = kt->act_from_f32[KITE_DTYPE_W8A8];
        CHECK(q != NULL);
        if (!q) continue;
        n_levels++;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int kind = 0; kind < 8; kind++) {
                const int64_t n = lens[li];
                act_row(kind % 6, x, n);
                if (kind == 6) x[n / 2] = NAN;
                if (kind == 7) x[n - 1] = n % 2 ? INFINITY : -INFINITY;
                w8_quantize_row(x, ref, n, NULL);
                memset(got, 0xA5, cap);
                q(x, got, n);
                CHECK_MSG(memcmp(ref, got, (size_t)n + W8_ROW_HEADER) == 0,
                          "%s: w8a8 activation bytes differ from w8_quantize_row (n %lld, kind %d)", kt->name,
                          (long long)n, kind);
                CHECK_MSG(got[(size_t)n + W8_ROW_HEADER] == 0xA5, "%s: w8a8 quantizer wrote past the row", kt->name);
            }
    }
    CHECK(n_levels >= 1);
    free(ref);
    free(got);
}

int main(void) {
    RUN(test_flat_vs_gemv);
    RUN(test_decode_float_vs_vec_dot);
    RUN(test_q8_0_act_quantizers);
    RUN(test_w8a8_act_quantizers);
    return harness_summary(__FILE__);
}
