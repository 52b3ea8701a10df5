/*
 * test_linalg.c - the blocked linear algebra (src/quant/linalg.c) against
 * the textbook versions and a naive double reference, at every CPU level
 * this machine runs (kernels/la_gemm.h tiles).
 *
 *   - GEMM (float and double, every transpose pair, alpha -1, the
 *     lower-triangle mode, odd sizes crossing the MC/KC/NC blocks) matches
 *     a double reference, and its bits are the same at every level and for
 *     1 and 2 threads;
 *   - axpy_neg gives the scalar bits at every level;
 *   - blocked Cholesky, triangular inverse and GPTQ's factor match the
 *     textbook routines on SPD matrices of odd size (several LA_NB blocks),
 *     and refuse an indefinite matrix.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/la_gemm.h"
#include "quant/linalg.h"

static uint64_t rng = 777;
static double drand_(void) { /* uniform [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)((rng >> 11) & ((1ull << 52) - 1)) / (double)(1ull << 51) - 1.0;
}

/* a (n x n) = m m^T / n + I for a random m: SPD, condition ~ a few */
static void spd(double *a, int n) {
    double *m = malloc((size_t)n * n * sizeof *m);
    for (size_t i = 0; i < (size_t)n * n; i++) m[i] = drand_();
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += m[(size_t)i * n + k] * m[(size_t)j * n + k];
            a[(size_t)i * n + j] = a[(size_t)j * n + i] = s / n + (i == j);
        }
    free(m);
}

typedef struct gemm_case {
    int m, n, k;
    bool ta, tb, lower;
    double alpha;
} gemm_case;

static const gemm_case cases[] = {
    {1, 1, 1, false, false, false, 1.0},     {7, 5, 3, false, false, false, -1.0},
    {97, 131, 300, false, true, false, 1.0}, {101, 77, 257, true, false, false, -1.0},
    {33, 2100, 19, true, true, false, 1.0},  {203, 203, 261, false, true, true, -1.0},
    {130, 130, 64, true, false, true, 1.0},
};


TEST(test_gemm_levels_threads) {
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const gemm_case *q = &cases[ci];
        const int64_t lda = q->ta ? q->m : q->k, ldb = q->tb ? q->k : q->n;
        const size_t na = (size_t)q->m * q->k, nb = (size_t)q->k * q->n, nc = (size_t)q->m * q->n;
        double *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c0 = malloc(nc * sizeof *c0);
        float *af = malloc(na * sizeof *af), *bf = malloc(nb * sizeof *bf);
        double *cd[KERN_LEVEL_COUNT][2];
        float *cs[KERN_LEVEL_COUNT][2];
        for (size_t i = 0; i < na; i++) af[i] = (float)(a[i] = drand_());
        for (size_t i = 0; i < nb; i++) bf[i] = (float)(b[i] = drand_());
        for (size_t i = 0; i < nc; i++) c0[i] = drand_();
        /* reference in double from the float inputs */
        double *ref = malloc(nc * sizeof *ref);
        for (int i = 0; i < q->m; i++)
            for (int j = 0; j < q->n; j++) {
                double s = 0;
                for (int p = 0; p < q->k; p++) {
                    const double x = q->ta ? af[(size_t)p * lda + i] : af[(size_t)i * lda + p];
                    const double y = q->tb ? bf[(size_t)j * ldb + p] : bf[(size_t)p * ldb + j];
                    s += x * y;
                }
                ref[(size_t)i * q->n + j] = c0[i * q->n + j] + q->alpha * s;
            }
        const int lmax = (int)kern_level_max();
        for (int lv = 0; lv <= lmax; lv++) {
            const kern_la_ops *ops = kern_table_for_level((kern_level)lv)->la;
            for (int th = 0; th < 2; th++) {
                la_ctx *lc = la_ctx_new(th ? tp2 : NULL, ops);
                cd[lv][th] = malloc(nc * sizeof(double));
                cs[lv][th] = malloc(nc * sizeof(float));
                memcpy(cd[lv][th], c0, nc * sizeof(double));
                for (size_t i = 0; i < nc; i++) cs[lv][th][i] = (float)c0[i];
                la_gemm_args g = {.m = q->m, .n = q->n, .k = q->k, .alpha = q->alpha,
                                  .a = {.p = af, .ld = lda, .trans = q->ta, .f32 = true},
                                  .b = {.p = bf, .ld = ldb, .trans = q->tb, .f32 = true},
                                  .c = cd[lv][th], .ldc = q->n, .lower = q->lower};
                la_dgemm(lc, &g); /* double GEMM widening float inputs */
                g.c = cs[lv][th];
                la_sgemm(lc, &g);
                double worst_d = 0, worst_s = 0;
                for (int i = 0; i < q->m; i++)
                    for (int j = 0; j < q->n; j++) {
                        if (q->lower && j > i) continue;
                        const size_t ix = (size_t)i * q->n + j;
                        worst_d = fmax(worst_d, fabs(cd[lv][th][ix] - ref[ix]));
                        worst_s = fmax(worst_s, fabs((double)cs[lv][th][ix] - ref[ix]));
                    }
                CHECK_MSG(worst_d < 1e-12 * q->k + 1e-13, "case %zu level %d threads %d: double error %g", ci, lv,
                          th + 1, worst_d);
                CHECK_MSG(worst_s < 2e-6 * sqrt((double)q->k) + 1e-6, "case %zu level %d threads %d: float error %g",
                          ci, lv, th + 1, worst_s);
                la_ctx_free(lc);
            }
        }
        /* bits: every level and thread count equal to scalar's 1-thread result */
        for (int lv = 0; lv <= lmax; lv++)
            for (int th = 0; th < 2; th++) {
                bool same_d = true, same_s = true;
                for (int i = 0; i < q->m; i++)
                    for (int j = 0; j < q->n; j++) {
                        if (q->lower && j > i) continue;
                        const size_t ix = (size_t)i * q->n + j;
                        same_d &= memcmp(&cd[lv][th][ix], &cd[0][0][ix], sizeof(double)) == 0;
                        same_s &= memcmp(&cs[lv][th][ix], &cs[0][0][ix], sizeof(float)) == 0;
                    }
                CHECK_MSG(same_d && same_s, "case %zu level %d threads %d: bits differ from scalar (d %d s %d)", ci,
                          lv, th + 1, same_d, same_s);
            }
        for (int lv = 0; lv <= lmax; lv++)
            for (int th = 0; th < 2; th++) {
                free(cd[lv][th]);
                free(cs[lv][th]);
            }
        free(a), free(b), free(c0), free(af), free(bf), free(ref);
    }
    tp_free(tp2);
}

TEST(test_axpy_neg_levels) {
    float x[77], y0[77], y[77], yr[77];
    for (int j = 0; j < 77; j++) x[j] = (float)drand_(), y0[j] = (float)drand_();
    for (int n = 0; n <= 77; n += 7) {
        memcpy(yr, y0, sizeof y0);
        kern_la_scalar.saxpy_neg(n, 0.37f, x, yr);
        for (int lv = 0; lv <= (int)kern_level_max(); lv++) {
            memcpy(y, y0, sizeof y0);
            kern_table_for_level((kern_level)lv)->la->saxpy_neg(n, 0.37f, x, y);
            CHECK_MSG(memcmp(y, yr, sizeof y) == 0, "level %d n %d: axpy_neg bits differ", lv, n);
        }
    }
}

/* la_sgemm_st with exactly the workspace la_gemm_ws_bytes promises, row counts whose MR
 * padding exceeds a multiple of 8 at AVX2's MR = 6 (8 rows pack as 12, 128 as 132) and a
 * full-depth slice: every level gives the scalar level's bits and writes nothing past the
 * workspace.  The packed A panels once ran into the packed B there, which made GPTQ's
 * factorization wrong on AVX2-only CPUs (test_gptq: 77% of weights as the reference). */
TEST(test_gemm_st_workspace) {
    static const int rows[] = {1, 5, 7, 8, 13, 128};
    enum { N = 300, K = 400 }; /* K > LA_KC: a full-depth slice */
    float *a = malloc((size_t)128 * K * sizeof *a), *b = malloc((size_t)K * N * sizeof *b);
    float *c0 = malloc((size_t)128 * N * sizeof *c0), *cr = malloc((size_t)128 * N * sizeof *cr);
    float *c = malloc((size_t)128 * N * sizeof *c);
    for (int i = 0; i < 128 * K; i++) a[i] = (float)drand_();
    for (int i = 0; i < K * N; i++) b[i] = (float)drand_();
    for (int i = 0; i < 128 * N; i++) c0[i] = (float)drand_();
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
        const int m = rows[ri];
        const size_t wsb = la_gemm_ws_bytes(m);
        unsigned char *ws = aligned_alloc(64, (wsb + 64 + 63) / 64 * 64);
        for (int lv = 0; lv <= (int)kern_level_max(); lv++) {
            memset(ws + wsb, 0xA5, 64);
            float *dst = lv == 0 ? cr : c;
            memcpy(dst, c0, (size_t)m * N * sizeof *dst);
            la_gemm_args g = {.m = m, .n = N, .k = K, .alpha = -1.0, .a = {.p = a, .ld = K, .f32 = true},
                              .b = {.p = b, .ld = N, .f32 = true}, .c = dst, .ldc = N};
            la_sgemm_st(kern_table_for_level((kern_level)lv)->la, &g, ws);
            bool intact = true;
            for (int j = 0; j < 64; j++) intact &= ws[wsb + j] == 0xA5;
            CHECK_MSG(intact, "level %d, %d rows: wrote past la_gemm_ws_bytes", lv, m);
            if (lv)
                CHECK_MSG(memcmp(c, cr, (size_t)m * N * sizeof *c) == 0, "level %d, %d rows: bits differ from scalar",
                          lv, m);
        }
        free(ws);
    }
    free(a), free(b), free(c0), free(cr), free(c);
}

/* max |x - y| over n x n */
static double maxdiff(const double *x, const double *y, int n) {
    double w = 0;
    for (size_t i = 0; i < (size_t)n * n; i++) w = fmax(w, fabs(x[i] - y[i]));
    return w;
}

TEST(test_blocked_vs_textbook) {
    static const int sizes[] = {1, 5, 128, 129, 300};
    threadpool *tp2 = tp_new(2);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int n = sizes[si];
        const size_t nn = (size_t)n * n;
        double *a = malloc(nn * sizeof *a), *r = malloc(nn * sizeof *r), *b = malloc(nn * sizeof *b);
        spd(a, n);
        for (int lv = 0; lv <= (int)kern_level_max(); lv++) {
            la_ctx *lc = la_ctx_new(tp2, kern_table_for_level((kern_level)lv)->la);
            /* Cholesky */
            memcpy(r, a, nn * sizeof *a);
            memcpy(b, a, nn * sizeof *a);
            CHECK(la_cholesky_lower(r, n));
            CHECK(la_cholesky_lower_blocked(lc, b, n));
            CHECK_MSG(maxdiff(r, b, n) < 1e-12, "n %d level %d: cholesky differs by %g", n, lv, maxdiff(r, b, n));
            /* triangular inverse of that factor: X L = I and X lower */
            CHECK(la_tri_lower_inverse_blocked(lc, b, n));
            double worst = 0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    if (j > i) CHECK(b[(size_t)i * n + j] == 0.0);
                    double s = 0;
                    for (int k = 0; k < n; k++) s += b[(size_t)i * n + k] * r[(size_t)k * n + j];
                    worst = fmax(worst, fabs(s - (i == j)));
                }
            CHECK_MSG(worst < 1e-11, "n %d level %d: X L - I = %g", n, lv, worst);
            /* GPTQ factor vs textbook Cholesky-inverse-Cholesky */
            memcpy(r, a, nn * sizeof *a);
            memcpy(b, a, nn * sizeof *a);
            CHECK(la_cholesky_inverse_upper(r, n));
            CHECK(la_gptq_factor(lc, b, n));
            CHECK_MSG(maxdiff(r, b, n) < 1e-11, "n %d level %d: gptq factor differs by %g", n, lv, maxdiff(r, b, n));
            la_ctx_free(lc);
        }
        free(a), free(r), free(b);
    }
    /* indefinite: refused */
    enum { N = 140 };
    static double m[N * N];
    spd(m, N);
    m[(size_t)135 * N + 135] = -5.0;
    la_ctx *lc = la_ctx_new(tp2, NULL);
    CHECK(!la_cholesky_lower_blocked(lc, m, N));
    la_ctx_free(lc);
    tp_free(tp2);
}

/* ---- --bench: GEMM and factorisation GFLOP/s against the FMA peak ------------------- */

#include <time.h>

/* CPU seconds of the process: on a loaded shared machine this counts the
 * cycles the benchmark actually got (wall time does not) */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#if defined(__x86_64__)
#include <immintrin.h>
/* float FMA peak of one core: 16 independent zmm chains (enough for 2 FMA
 * pipes of latency 4), 2 flops per lane per FMA */
__attribute__((target("avx512f,fma"))) static double fma_peak_avx512(void) {
    __m512 v0 = _mm512_set1_ps(1.0f), v1 = v0, v2 = v0, v3 = v0, v4 = v0, v5 = v0, v6 = v0, v7 = v0;
    __m512 v8 = v0, v9 = v0, va = v0, vb = v0;
    const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    const long iters = 10000000;
    const double t0 = cpu_s();
    for (long it = 0; it < iters; it++) {
        __asm__("" : "+v"(v0), "+v"(v1), "+v"(v2), "+v"(v3), "+v"(v4), "+v"(v5)); /* keep the chains */
        v0 = _mm512_fmadd_ps(v0, m, a); v1 = _mm512_fmadd_ps(v1, m, a); v2 = _mm512_fmadd_ps(v2, m, a);
        v3 = _mm512_fmadd_ps(v3, m, a); v4 = _mm512_fmadd_ps(v4, m, a); v5 = _mm512_fmadd_ps(v5, m, a);
        v6 = _mm512_fmadd_ps(v6, m, a); v7 = _mm512_fmadd_ps(v7, m, a); v8 = _mm512_fmadd_ps(v8, m, a);
        v9 = _mm512_fmadd_ps(v9, m, a); va = _mm512_fmadd_ps(va, m, a); vb = _mm512_fmadd_ps(vb, m, a);
    }
    const double dt = cpu_s() - t0;
    __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3)),
                             _mm512_add_ps(_mm512_add_ps(v4, v5), _mm512_add_ps(v6, v7)));
    t = _mm512_add_ps(t, _mm512_add_ps(_mm512_add_ps(v8, v9), _mm512_add_ps(va, vb)));
    if (_mm512_reduce_add_ps(t) == 12345.0f) printf("!");
    return (double)iters * 12 * 16 * 2 / dt;
}
#endif

static void bench(int n_threads) {
#if defined(__x86_64__)
    const double peak1 = fma_peak_avx512();
    printf("fma peak (float, per core, measured in cpu time): %.1f GFLOP/s; double is half\n", peak1 / 1e9);
#else
    const double peak1 = 0;
#endif
    threadpool *tp = tp_new(n_threads);
    la_ctx *lc = la_ctx_new(tp, NULL);
    printf("kernels: %s\n", la_ctx_ops(lc)->name);
    { /* the register tile alone, operands in L1/L2 */
        const kern_la_ops *o = la_ctx_ops(lc);
        float *ap = calloc((size_t)LA_KC * o->s_mr, 4), *bp = calloc((size_t)LA_KC * o->s_nr * 16, 4);
        float *ct = calloc((size_t)o->s_mr * o->s_nr * 16, 4);
        const int reps = 20000;
        const double t0 = cpu_s();
        for (int r = 0; r < reps; r++)
            for (int j = 0; j < 16; j++)
                o->sgemm(LA_KC, ap, bp + (size_t)j * LA_KC * o->s_nr, ct + j * o->s_nr, 16 * o->s_nr, o->s_mr, o->s_nr);
        const double dt = cpu_s() - t0, gf = 2.0 * reps * 16 * LA_KC * o->s_mr * o->s_nr / dt;
        printf("sgemm tile alone (kc %d, B from L2): %.1f GFLOP/s, %.0f%% of FMA peak\n", LA_KC, gf / 1e9,
               peak1 > 0 ? 100 * gf / peak1 : 0.0);
        free(ap), free(bp), free(ct);
    }
    const int n = getenv("LA_N") ? atoi(getenv("LA_N")) : 2048;
    const size_t nn = (size_t)n * n;
    float *af = malloc(nn * 4), *bf = malloc(nn * 4), *cf = calloc(nn, 4);
    double *ad = malloc(nn * 8), *cd = calloc(nn, 8);
    for (size_t i = 0; i < nn; i++) af[i] = (float)drand_(), bf[i] = (float)drand_();
    for (int dbl = 0; dbl < 2; dbl++) {
        la_gemm_args g = {.m = n, .n = n, .k = n, .alpha = 1.0, .a = {.p = af, .ld = n, .f32 = true},
                          .b = {.p = bf, .ld = n, .f32 = true}, .c = dbl ? (void *)cd : (void *)cf, .ldc = n};
        if (dbl) la_dgemm(lc, &g); /* warm-up: C and the workspaces paged in */
        else la_sgemm(lc, &g);
        const double t0 = cpu_s();
        if (dbl) la_dgemm(lc, &g);
        else la_sgemm(lc, &g);
        const double dt = cpu_s() - t0, gf = 2.0 * n * n * (double)n / dt;
        const double pk = peak1 / (dbl ? 2 : 1);
        printf("%cgemm %d^3, %d threads: %.3f cpu-s, %.1f GFLOP/s per core, %.0f%% of FMA peak\n", dbl ? 'd' : 's', n, n_threads, dt,
               gf / 1e9, pk > 0 ? 100 * gf / pk : 0.0);
    }
    { /* the calibration Hessian's shape: lower triangle of X^T X, X 256 x n floats */
        memset(cd, 0, nn * 8);
        la_gemm_args g = {.m = n, .n = n, .k = 256, .alpha = 1.0, .a = {.p = af, .ld = n, .trans = true, .f32 = true},
                          .b = {.p = af, .ld = n, .f32 = true}, .c = cd, .ldc = n, .lower = true};
        la_dgemm(lc, &g);
        const double t0 = cpu_s();
        for (int r = 0; r < 4; r++) la_dgemm(lc, &g);
        const double dt = cpu_s() - t0, gf = 4 * (double)n * n * 256 / dt;
        printf("hessian dgemm (lower, k 256, float rows widened) n=%d: %.1f GFLOP/s per core, %.0f%% of double peak\n",
               n, gf / 1e9, peak1 > 0 ? 100 * gf / (peak1 / 2) : 0.0);
    }
    spd(ad, n);
    double s0, f0, s1, f1;
    la_ctx_stats(lc, &s0, &f0, NULL);
    const double t0 = cpu_s();
    CHECK(la_gptq_factor(lc, ad, n));
    const double dt = cpu_s() - t0;
    la_ctx_stats(lc, &s1, &f1, NULL);
    const double gf = (f1 - f0) / dt, pk = peak1 / 2;
    printf("gptq factor n=%d (cholesky + triangular inverse, 2n^3/3 flops), %d threads: %.3f cpu-s, %.1f GFLOP/s per core, "
           "%.0f%% of double FMA peak\n", n, n_threads, dt, gf / 1e9, pk > 0 ? 100 * gf / pk : 0.0);
    free(af), free(bf), free(cf), free(ad), free(cd);
    la_ctx_free(lc);
    tp_free(tp);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench(argc > 2 ? atoi(argv[2]) : 1);
        return 0;
    }
    RUN(test_gemm_levels_threads);
    RUN(test_axpy_neg_levels);
    RUN(test_gemm_st_workspace);
    RUN(test_blocked_vs_textbook);
    return harness_summary("test_linalg");
}
