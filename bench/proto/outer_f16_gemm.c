/*
 * bench/proto/outer_f16_gemm.c - prototype, not part of kite's build: an
 * outer-product f16 GEMM on a 32-row interleaved layout ([K][32] halves per
 * group of 32 rows; activations packed as [K][GT] floats), against
 * kern_matmul on the same weights in plain rows.  See docs/notes/kernels-history.md,
 * "An outer-product f16 GEMM".  Build and run (after `make`):
 *
 *   gcc -D_DEFAULT_SOURCE -O2 -std=c11 -fopenmp -mavx512f -mavx512bw -mavx512vl \
 *       -mfma -mf16c -Isrc -Iinclude -o /tmp/outer_f16_gemm bench/proto/outer_f16_gemm.c \
 *       build/libkite.a -lm -pthread
 *   OMP_NUM_THREADS=1 /tmp/outer_f16_gemm 5632 2048 120 1
 *   OMP_NUM_THREADS=2 /tmp/outer_f16_gemm 5632 2048 120 2
 *
 * Arguments: rows, K, tokens (a multiple of GT), kite pool threads.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
#ifndef GT
#define GT 12   /* tokens per group */
#endif
#define GR 32   /* rows per group (2 zmm) */
#ifndef RB
#define RB 128  /* rows per L2 block */
#endif
/* w: [R/32][K][32] halves; xp: packed [K][GT] floats for one token group; y[t*ldy + r] */
static __attribute__((noinline)) void tile(int64_t K, const uint16_t *w, const float *xp, float *y, int64_t ldy) {
    __m512 a0[GT], a1[GT];
    for (int t = 0; t < GT; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + k * 32)));
        const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + k * 32 + 16)));
#pragma GCC unroll 16
        for (int t = 0; t < GT; t++) {
            const __m512 b = _mm512_set1_ps(xp[k * GT + t]);
            a0[t] = _mm512_fmadd_ps(w0, b, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, b, a1[t]);
        }
    }
    for (int t = 0; t < GT; t++) { _mm512_storeu_ps(y + t * ldy, a0[t]); _mm512_storeu_ps(y + t * ldy + 16, a1[t]); }
}
int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s ROWS K TOKENS THREADS\n", argv[0]);
        return 2;
    }
    int64_t R = atoll(argv[1]), K = atoll(argv[2]); int T = atoi(argv[3]), nth = atoi(argv[4]);
    if (R <= 0 || R % RB || K <= 0 || T <= 0 || T % GT || nth < 1) {
        fprintf(stderr, "need ROWS a multiple of %d, TOKENS a multiple of %d, K and THREADS >= 1\n", RB, GT);
        return 2;
    }
    uint16_t *w = aligned_alloc(64, R * K * 2); float *x = aligned_alloc(64, T * K * 4), *xp = aligned_alloc(64, (size_t)T * K * 4 + 64);
    float *y = aligned_alloc(64, (size_t)T * R * 4);
    for (int64_t i = 0; i < R * K; i++) w[i] = _cvtss_sh((float)((i * 7) % 97) / 50.0f - 1, 0);
    for (int64_t i = 0; i < T * K; i++) x[i] = (float)(i % 17) / 9.0f - 1;
    double best = 0, g[9];
    for (int rep = 0; rep < 9; rep++) {
        double t0 = now();
        for (int tg = 0; tg < T; tg += GT) /* pack every token group once (cost counted) */
            for (int64_t k = 0; k < K; k++) for (int t = 0; t < GT; t++) xp[(size_t)tg * K + k * GT + t] = x[(tg + t) * K + k];
#pragma omp parallel for schedule(static)
        for (int64_t r0 = 0; r0 < R; r0 += RB) {
            for (int tg = 0; tg < T; tg += GT) {
                for (int64_t r = r0; r < r0 + RB && r < R; r += GR) tile(K, w + r * K, xp + (size_t)tg * K, y + (int64_t)tg * R + r, R);
            }
        }
        g[rep] = 2.0 * R * K * T / (now() - t0) / 1e9; if (g[rep] > best) best = g[rep];
    }
    for (int i = 1; i < 9; i++) for (int j = i; j > 0 && g[j] < g[j-1]; j--) { double tt = g[j]; g[j] = g[j-1]; g[j-1] = tt; }
    /* check one output: row 37 token 5, with the layout: w[(r/32)*K*32 + k*32 + r%32] */
    double ref = 0; for (int64_t k = 0; k < K; k++) ref += (double)_cvtsh_ss(w[(37 / 32) * K * 32 + k * 32 + 37 % 32]) * x[5 * K + k];
    printf("GT %d RB %d: %lld x %lld x %d: median %.1f GFLOP/s (best %.1f); y check %.6g vs %.6g\n", GT, RB, (long long)R, (long long)K, T, g[4], best, y[5 * R + 37], ref);
    /* today's kernels: the same weights in plain rows through kern_matmul */
    uint16_t *pw = aligned_alloc(64, R * K * 2);
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < K; k++) pw[r * K + k] = w[(r / 32) * K * 32 + k * 32 + r % 32];
    weight wt = {.type = KITE_DTYPE_F16, .ne = {K, R}, .row_bytes = (size_t)K * 2, .data = pw};
    threadpool *tp = tp_new(nth);
    void *sc = aligned_alloc(64, (kern_matmul_scratch_bytes(nth, T, K) + 63) & ~(size_t)63);
    for (int rep = 0; rep < 9; rep++) {
        double t0 = now();
        kern_matmul(tp, &wt, x, T, y, R, sc);
        g[rep] = 2.0 * R * K * T / (now() - t0) / 1e9;
    }
    for (int i = 1; i < 9; i++) for (int j = i; j > 0 && g[j] < g[j-1]; j--) { double tt = g[j]; g[j] = g[j-1]; g[j-1] = tt; }
    printf("kern_matmul, %d threads, plain rows: median %.1f GFLOP/s; y check %.6g\n", nth, g[4], y[5 * R + 37]);
    tp_free(tp);
}
