/*
 * avxvnni_ab.c - A/B of the avx2 level's two q4_0/q8_0 integer kernels
 * alone: vpmaddubsw + vpmaddwd (vec_dot_quant_avx2.c) against AVX-VNNI
 * vpdpbusd ymm (vec_dot_quant_avxvnni.c), through their flat GEMMs, 1 thread.
 *
 *   cc -O2 -Iinclude -Isrc bench/avxvnni_ab.c BUILD/libkite.a -lm -pthread -o /tmp/avxvnni_ab
 *   /tmp/avxvnni_ab [reps]
 *
 * K = 2048 columns; n = 1 and 8 tokens; "cache": 32 weight rows re-read
 * (L1/L2-resident), "DRAM": 65536 rows (75 MB q4_0, 143 MB q8_0) in calls of
 * 64 rows, as kern_matmul tiles them.  A and B run back to back in each
 * repetition; medians are printed as weight GB/s.  Needs AVX-VNNI.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#include "kernels/x86_avx2/avx2.h"
#include "kernels/x86_avx2/avxvnni.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define K 2048
#define MAXR 41

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* seconds for `passes` passes of gemm over rows [0, nr) in calls of 64 rows */
static double run(kern_gemm_fn g, const unsigned char *w, size_t ws, int64_t nr, const unsigned char *a, size_t as,
                  int nt, int passes, float *y) {
    const double t0 = now();
    for (int p = 0; p < passes; p++)
        for (int64_t r = 0; r < nr; r += 64)
            g(K, y, 64, w + (size_t)r * ws, ws, (int)(nr - r < 64 ? nr - r : 64), a, as, nt);
    return now() - t0;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 9;
    if (!cpu_features()->avxvnni || reps < 1 || reps > MAXR) {
        printf("needs AVX-VNNI and 1 <= reps <= %d\n", MAXR);
        return 1;
    }
    const uint32_t types[2] = {KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0};
    const kern_gemm_fn ga[2] = {gemm_q4_0_q8_0_avx2, gemm_q8_0_q8_0_avx2};
    const kern_gemm_fn gb[2] = {gemm_q4_0_q8_0_avxvnni, gemm_q8_0_q8_0_avxvnni};
    const int64_t big = 65536;
    float x[K], y[64 * 8];
    unsigned char a[8 * 2176];
    srand(1);
    for (int t = 0; t < 8; t++) {
        for (int i = 0; i < K; i++) x[i] = (float)(rand() % 1000) / 1000.0f - 0.5f;
        act_quantize_q8_0_ref(x, a + (size_t)t * dtype_row_size(KITE_DTYPE_Q8_0, K), K);
    }
    printf("%-5s %-3s %-6s %12s %12s %7s\n", "type", "n", "where", "avx2 GB/s", "avxvnni GB/s", "B/A");
    for (int ti = 0; ti < 2; ti++) {
        const size_t ws = dtype_row_size(types[ti], K), bs = dtype_get(types[ti])->type_size;
        unsigned char *w = malloc(ws * (size_t)big);
        if (!w) return 1;
        for (size_t i = 0; i < ws * (size_t)big; i++) w[i] = (unsigned char)rand();
        for (size_t b = 0; b < ws * (size_t)big / bs; b++) { /* sane scales: 0.01 */
            const uint16_t d = fp32_to_fp16(0.01f);
            memcpy(w + b * bs, &d, 2);
        }
        for (int nt = 1; nt <= 8; nt += 7)
            for (int where = 0; where < 2; where++) {
                const int64_t nr = where ? big : 32;
                const int passes = where ? 1 : 2000 / nt;
                double ta[MAXR], tb[MAXR];
                run(ga[ti], w, ws, nr, a, 2176, nt, 1, y); /* warm-up */
                run(gb[ti], w, ws, nr, a, 2176, nt, 1, y);
                for (int r = 0; r < reps; r++) {
                    ta[r] = run(ga[ti], w, ws, nr, a, 2176, nt, passes, y);
                    tb[r] = run(gb[ti], w, ws, nr, a, 2176, nt, passes, y);
                }
                qsort(ta, (size_t)reps, sizeof *ta, cmp_d);
                qsort(tb, (size_t)reps, sizeof *tb, cmp_d);
                const double bytes = (double)ws * (double)nr * passes;
                printf("%-5s %-3d %-6s %12.1f %12.1f %7.2f\n", dtype_name(types[ti]), nt, where ? "DRAM" : "cache",
                       bytes / ta[reps / 2] * 1e-9, bytes / tb[reps / 2] * 1e-9, ta[reps / 2] / tb[reps / 2]);
            }
        free(w);
    }
    return 0;
}
