/*
 * bench_lut.c - `kite bench --lut-gemm`: LUT-GEMM against dequantize-then-
 * multiply on binary-coded (BCQ) weights (src/quant/bcq.h), one thread.
 *
 * For each number of planes q: a rows x cols matrix with random planes and
 * scales (speed does not depend on the values), y = W x timed with the
 * lookup tables and with per-row dequantization + SIMD dot product, and a
 * dense FP32 GEMV of the same shape for scale.  Medians of -r repetitions;
 * the three are interleaved within each repetition so a noisy machine hits
 * them alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "quant/bcq.h"


typedef struct lut_opts {
    int64_t rows, cols, group, reps, max_bits;
    bool json, lut_gemm;
} lut_opts;

static const cli_opt lut_opts_table[] = {
    {.names = "--lut-gemm", .help = "this benchmark", .kind = CLI_FLAG, CLI_AT(lut_opts, lut_gemm)},
    {.names = "--rows", .arg = "N", .help = "matrix rows", .kind = CLI_INT, CLI_AT(lut_opts, rows), .min = 1,
     .max = 1 << 16, .def = "4096"},
    {.names = "--cols", .arg = "N", .help = "matrix columns", .kind = CLI_INT, CLI_AT(lut_opts, cols), .min = 1,
     .max = 1 << 16, .def = "4096"},
    {.names = "--group", .arg = "G", .help = "weights per scale: a multiple of 8 up to 512", .kind = CLI_INT,
     CLI_AT(lut_opts, group), .min = 1, .max = 1 << 16, .def = "128"},
    {.names = "--bits", .arg = "Q", .help = "planes 1..Q are measured (Q at most 4)", .kind = CLI_INT,
     CLI_AT(lut_opts, max_bits), .min = 1, .max = 1 << 16, .def = "4"},
    {.names = "-r, --repetitions", .arg = "N", .help = "repetitions (medians; at most 101 are run)",
     .kind = CLI_INT, CLI_AT(lut_opts, reps), .min = 1, .max = 1 << 16, .def = "7"},
    {.names = "--json", .help = "one JSON line per number of planes", .kind = CLI_FLAG, CLI_AT(lut_opts, json)},
};

const cli_spec cli_spec_bench_lut = {
    .cmd = "bench",
    .usage = "usage: kite bench --lut-gemm [--rows N] [--cols N] [--group G] [--bits Q] [-r N] [--json]\n"
             "\n"
             "LUT-GEMM against dequantize-then-multiply on binary-coded (BCQ) weights, one thread: for\n"
             "each number of planes q, y = W x timed both ways and as a dense FP32 GEMV (us per GEMV).\n",
    CLI_TABLE(lut_opts_table, lut_opts),
    .unknown = "--lut-gemm: unknown option",
    .unknown_tail = " (--rows --cols --group --bits -r --json)",
};

int bench_lut_gemm(int argc, char **argv) {
    const char *cmd = "bench";
    lut_opts o = {0};
    int rc = cli_parse(&cli_spec_bench_lut, argc, argv, &o);
    if (rc >= 0) return rc;
    const int64_t rows = o.rows, cols = o.cols, group = o.group, max_bits = o.max_bits;
    int64_t reps = o.reps;
    const bool json = o.json;
    if (group % 8 || group > 512 || max_bits > 4) return cli_usage_error(cmd, "--lut-gemm: group must be a multiple of 8 up to 512, bits at most 4");
    if (reps > 101) reps = 101;

    float *x = malloc(sizeof(float) * (size_t)cols), *y = malloc(sizeof(float) * (size_t)rows);
    float *dense = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    if (!x || !y || !dense) {
        fprintf(stderr, "kite bench: out of memory\n");
        free(x), free(y), free(dense);
        return 1;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    for (int64_t i = 0; i < rows * cols; i++) dense[i] = x[i % cols] * 0.01f;
    if (!json)
        printf("LUT-GEMM vs dequantize-then-multiply, %lldx%lld, group %lld, 1 thread, median of %lld (us per GEMV)\n\n"
               "| planes q | bits/weight | LUT-GEMM | dequant + dot | FP32 dense | LUT speedup vs dequant |\n"
               "|---|---|---|---|---|---|\n",
               (long long)rows, (long long)cols, (long long)group, (long long)reps);
    int status = 0;
    for (int32_t q = 1; q <= (int32_t)max_bits; q++) {
        bcq_matrix m;
        if (bcq_alloc(&m, (int32_t)rows, (int32_t)cols, q, (int32_t)group) != KITE_OK) {
            fprintf(stderr, "kite bench: %s\n", kite_last_error());
            status = 1;
            break;
        }
        const size_t n_planes = (size_t)rows * (size_t)q * (size_t)(m.cols8 / 8);
        for (size_t i = 0; i < n_planes; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            m.planes[i] = (uint8_t)(s >> 56);
        }
        for (size_t i = 0; i < (size_t)rows * (size_t)m.n_groups * (size_t)q; i++) m.alpha[i] = 0.01f / (float)(1 + i % 4);
        float *scratch = malloc(sizeof(float) * bcq_lut_scratch_floats(&m));
        float *row = malloc(sizeof(float) * (size_t)m.cols8);
        double t_lut[101], t_deq[101], t_f32[101];
        for (int64_t r = 0; r <= reps && scratch && row; r++) { /* r = 0: warm-up */
            double t0 = time_now_s();
            bcq_lut_gemv(&m, x, y, scratch);
            double t1 = time_now_s();
            bcq_dequant_gemv(&m, x, y, row);
            double t2 = time_now_s();
            for (int64_t i = 0; i < rows; i++) y[i] = kern_dot_f32(dense + (size_t)i * (size_t)cols, x, cols);
            double t3 = time_now_s();
            if (r > 0) t_lut[r - 1] = t1 - t0, t_deq[r - 1] = t2 - t1, t_f32[r - 1] = t3 - t2;
        }
        const double lut = cli_median(t_lut, (int)reps) * 1e6, deq = cli_median(t_deq, (int)reps) * 1e6,
                     f32 = cli_median(t_f32, (int)reps) * 1e6;
        const double bpw = (double)q + 32.0 * q / (double)group;
        if (json)
            printf("{\"bits\": %d, \"bits_per_weight\": %.3f, \"lut_us\": %.1f, \"dequant_us\": %.1f, \"f32_us\": %.1f}\n",
                   q, bpw, lut, deq, f32);
        else
            printf("| %d | %.2f | %.0f | %.0f | %.0f | %.2fx |\n", q, bpw, lut, deq, f32, deq / lut);
        free(scratch);
        free(row);
        bcq_free(&m);
    }
    free(x), free(y), free(dense);
    return status;
}
