/*
 * bench/proto/outer_f16_decode.c - prototype, not part of kite's build: the
 * one-token f16 matvec on the 32-row layout of outer_f16_gemm.c (each output
 * one FMA chain over k, NG groups in flight), against kern_matmul on plain
 * rows, alternated pass by pass, 2 threads (OpenMP static split vs kite's
 * pool).  The weights are values, not a model; their bytes are what counts.
 * See docs/notes/kernels-history.md, "An outer-product f16 GEMM".  After `make`:
 *
 *   gcc -D_DEFAULT_SOURCE -O2 -std=c11 -fopenmp -mavx512f -mavx512bw -mavx512vl \
 *       -mfma -mf16c -Isrc -Iinclude -o /tmp/outer_f16_decode bench/proto/outer_f16_decode.c \
 *       build/libkite.a -lm -pthread
 *   /tmp/outer_f16_decode 2048 352 20
 *
 * Arguments: K, MiB of weights (well above the L3), passes (at most 64).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "core/timing.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#ifndef NG
#define NG 4
#endif
static __attribute__((noinline)) void quad(int64_t K, const uint16_t *w, const float *x, float *y) {
    __m512 a[NG][2];
    for (int g = 0; g < NG; g++) a[g][0] = a[g][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 b = _mm512_set1_ps(x[k]);
#pragma GCC unroll 8
        for (int g = 0; g < NG; g++) {
            const uint16_t *p = w + (size_t)g * K * 32 + k * 32;
            a[g][0] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)), b, a[g][0]);
            a[g][1] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 16))), b, a[g][1]);
        }
    }
    for (int g = 0; g < NG; g++) { _mm512_storeu_ps(y + g * 32, a[g][0]); _mm512_storeu_ps(y + g * 32 + 16, a[g][1]); }
}
static int cmpd(const void *a, const void *b) { double u = *(const double *)a, v = *(const double *)b; return u < v ? -1 : u > v; }
int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s K MIB PASSES\n", argv[0]);
        return 2;
    }
    int64_t K = atoll(argv[1]); size_t bytes = (size_t)atoll(argv[2]) << 20; int passes = atoi(argv[3]);
    if (K <= 0 || bytes < ((size_t)K * 2 * 32 * NG * 2) || passes < 1 || passes > 64) {
        fprintf(stderr, "need K >= 1, MIB large enough for %d groups, 1 <= PASSES <= 64\n", 2 * NG);
        return 2;
    }
    int64_t R = bytes / (K * 2); R -= R % (32 * NG * 2);
    uint16_t *w = mmap(NULL, R * K * 2 + (4 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    w = (uint16_t *)(((uintptr_t)w + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1)); madvise(w, R * K * 2, MADV_HUGEPAGE);
    for (int64_t i = 0; i < R * K; i++) w[i] = _cvtss_sh((float)((i * 7) % 97) / 50.0f - 1, 0);
    float *x = malloc(K * 4), *y = malloc(R * 4); for (int i = 0; i < K; i++) x[i] = (float)(i % 17) / 9.0f - 1;
    weight pw = {.type = KITE_DTYPE_F16, .ne = {K, R}, .row_bytes = (size_t)K * 2, .data = w};
    threadpool *tp = tp_new(2); void *sc = aligned_alloc(64, (kern_matmul_scratch_bytes(2, 1, K) + 63) & ~63ul);
    double g[2][64], r[64];
    for (int p = 0; p < passes; p++) for (int mm = 0; mm < 2; mm++) { int m = (p & 1) ? 1 - mm : mm; double t0 = time_now_s();
        if (m == 0) kern_matmul(tp, &pw, x, 1, y, R, sc);
        else {
#pragma omp parallel for schedule(static) num_threads(2)
            for (int64_t q = 0; q < R / (32 * NG); q++) quad(K, w + (size_t)q * NG * 32 * K, x, y + q * NG * 32);
        }
        g[m][p] = (double)R * K * 2 / (time_now_s() - t0) / 1e9; }
    for (int p = 0; p < passes; p++) r[p] = g[1][p] / g[0][p];
    qsort(g[0], passes, 8, cmpd); qsort(g[1], passes, 8, cmpd); qsort(r, passes, 8, cmpd);
    printf("K %lld, %.0f MB: kern_matmul plain rows %.1f GB/s (%.1f-%.1f), [K][32] layout %d groups in flight %.1f (%.1f-%.1f), ratio %.3f (q1 %.3f q3 %.3f)\n",
           (long long)K, R * K * 2 / 1e6, g[0][passes / 2], g[0][0], g[0][passes - 1], NG, g[1][passes / 2], g[1][0], g[1][passes - 1], r[passes / 2], r[passes / 4], r[3 * passes / 4]);
}
