/*
 * test_ops.c - the element-wise / per-row kernels (ops_simd.h): every SIMD
 * table against the references at every level this CPU supports, on odd
 * sizes and unaligned pointers, with named error budgets:
 *   EXP_ULP_EXPF      ops exp vs libm expf over a sweep of [-104, 89] and
 *                     edge values (ulps of the float result; subnormal
 *                     results included);
 *   SWIGLU_REL        silu(g) u vs the reference, relative to |result|;
 *   GELU_REL_DOUBLE   gelu vs the tanh form in double, relative to |v|
 *                     (the reference itself loses up to ~1e-3 of |result|
 *                     for u << 0, where 1 + tanh u cancels; that is why
 *                     the budget is against double, not against it);
 *   NORM_REL          rmsnorm / layernorm vs the reference, relative to the
 *                     row's largest |gain * normalised x| (+|bias|);
 *   SOFTMAX_REL       softmax vs the reference, relative to |result| + 1e-9.
 * The norm and softmax budgets are mostly the reference's own sequential
 * float sums (their error grows with n; measured worst at n = 5632: norms
 * 2e-6, softmax 1.8e-6); the exp and the per-element arithmetic add ~1e-7.
 * Plus: avx2 and avx512 tables give identical bits; an element's swiglu /
 * gelu / add result does not depend on the slice it is computed in; a row's
 * norm is the same on every call and at any address; special values (silu
 * of -100 is -0, no NaN from finite input, NaN stays NaN); KITE_CPU_LEVEL
 * selects the table.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/ops_simd.h"

#define EXP_ULP_EXPF 2.0
#define SWIGLU_REL 6e-7
#define GELU_REL_DOUBLE 6e-7
#define NORM_REL 1e-5
#define SOFTMAX_REL 8e-6

static const int64_t sizes[] = {1, 7, 15, 17, 64, 172, 2049, 5632};
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])
#define MAXN 5632

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* distance in representable floats (same sign; 0 for equal, huge for NaN mismatch) */
static double ulp_dist(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0.0 : 1e30;
    if (a == b) return 0.0;
    int64_t ia = (int32_t)bits_of(a), ib = (int32_t)bits_of(b);
    if (ia < 0) ia = (int64_t)INT32_MIN - ia;
    if (ib < 0) ib = (int64_t)INT32_MIN - ib;
    return (double)(ia > ib ? ia - ib : ib - ia);
}

/* the SIMD tables this machine can run (not the scalar one) */
static int simd_tables(const kern_elt_ops **out) {
    int k = 0;
    for (int l = KERN_LEVEL_AVX2; l < KERN_LEVEL_COUNT; l++) {
        const kern_elt_ops *o = kern_elt_ops_for_level((kern_level)l);
        if (!o || strcmp(o->name, "scalar") == 0) continue;
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= out[j] == o;
        if (!seen) out[k++] = o;
    }
    return k;
}

static float buf_a[MAXN + 16], buf_b[MAXN + 16], buf_c[MAXN + 16], buf_d[MAXN + 16], buf_e[MAXN + 16];

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = frand() * scale;
}

TEST(test_tables) {
    const kern_elt_ops *s = kern_elt_ops_for_level(KERN_LEVEL_SCALAR);
    CHECK(s != NULL);
    if (s) CHECK_STR_EQ(s->name, "scalar");
    CHECK(kern_elt_ops_for_level(KERN_LEVEL_COUNT) == NULL);
    const kern_elt_ops *t[KERN_LEVEL_COUNT];
    const int n = simd_tables(t);
    printf("    element-wise tables tested: scalar");
    for (int i = 0; i < n; i++) printf(", %s", t[i]->name);
    printf(" (active %s)\n", kern_elt_ops_active()->name);
    CHECK(kern_elt_ops_active() == kern_elt_ops_for_level(kern_table()->level));
}

TEST(test_exp_accuracy) {
    const kern_elt_ops *t[KERN_LEVEL_COUNT];
    const int nt = simd_tables(t);
    if (nt == 0) SKIP_TEST("no SIMD level on this CPU: only the reference exp (libm expf) exists");
    enum { CHUNK = 4096 };
    static float x[CHUNK], y[CHUNK];
    for (int k = 0; k < nt; k++) {
        double max_expf = 0.0, max_cr = 0.0, worst_x = 0.0;
        /* a sweep of [-104, 89] in steps of ~1.2e-4 (1.6 M points) */
        const double lo = -104.0, hi = 89.0, step = (hi - lo) / (1600.0 * CHUNK);
        for (int c = 0; c < 1600; c++) {
            for (int i = 0; i < CHUNK; i++) x[i] = (float)(lo + step * ((double)c * CHUNK + i));
            t[k]->exp(y, x, CHUNK);
            for (int i = 0; i < CHUNK; i++) {
                const double d = ulp_dist(y[i], expf(x[i]));
                const double dc = ulp_dist(y[i], (float)exp((double)x[i]));
                if (d > max_expf) max_expf = d, worst_x = x[i];
                if (dc > max_cr) max_cr = dc;
            }
        }
        printf("    %s exp: max %.0f ulp vs expf (at x = %.6g), %.0f ulp vs correctly rounded\n", t[k]->name,
               max_expf, worst_x, max_cr);
        CHECK_MSG(max_expf <= EXP_ULP_EXPF, "%s exp: %.0f ulp from expf > %.0f", t[k]->name, max_expf, EXP_ULP_EXPF);
        /* edge values */
        const float ev[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.72f, 88.73f, 89.0f, 100.0f, 1e30f, INFINITY,
                            -87.3f, -88.0f, -100.0f, -103.9f, -104.5f, -200.0f, -1e30f, -INFINITY,
                            1e-30f, -1e-30f, 0.5f, NAN};
        const int ne = (int)(sizeof ev / sizeof ev[0]);
        t[k]->exp(y, ev, ne);
        for (int i = 0; i < ne; i++) {
            const float want = expf(ev[i]);
            CHECK_MSG(ulp_dist(y[i], want) <= EXP_ULP_EXPF, "%s exp(%g) = %.9g, expf %.9g", t[k]->name,
                      (double)ev[i], (double)y[i], (double)want);
        }
        CHECK(y[0] == 1.0f && y[1] == 1.0f);
        CHECK(isinf(y[9]) && y[9] > 0 && y[17] == 0.0f && !signbit(y[17]) && isnan(y[ne - 1]));
    }
}

/* every op of every SIMD table against the reference, odd sizes, unaligned */
TEST(test_ops_vs_reference_all_levels) {
    const kern_elt_ops *t[KERN_LEVEL_COUNT];
    const int nt = simd_tables(t);
    if (nt == 0) SKIP_TEST("no SIMD level on this CPU: the scalar table is the reference itself");
    for (int k = 0; k < nt; k++) {
        const kern_elt_ops *o = t[k];
        double w_swiglu = 0, w_gelu = 0, w_norm = 0, w_ln = 0, w_sm = 0;
        for (int si = 0; si < N_SIZES; si++) {
            const int64_t n = sizes[si];
            for (int off = 0; off < 2; off++) { /* aligned and 4-byte offset pointers */
                float *x = buf_a + off, *u = buf_b + off, *r = buf_c + off, *s = buf_d + off, *g = buf_e + off;
                /* swiglu: gates over [-20, 20], some large */
                fill(x, n, 20.0f);
                fill(u, n, 3.0f);
                if (n > 3) x[1] = -100.0f, x[2] = 95.0f, x[3] = 0.0f;
                memcpy(r, x, sizeof(float) * (size_t)n);
                memcpy(s, x, sizeof(float) * (size_t)n);
                kern_swiglu_ref(r, u, n);
                o->swiglu(s, u, n);
                for (int64_t i = 0; i < n; i++) {
                    const double e = fabs((double)s[i] - r[i]) / (fabs((double)r[i]) + 1e-30);
                    if (e > w_swiglu) w_swiglu = e;
                    if (!(e <= SWIGLU_REL)) {
                        FAIL_AT_("%s swiglu n=%lld i=%lld g=%g: %.9g vs ref %.9g", o->name, (long long)n,
                                 (long long)i, (double)x[i], (double)s[i], (double)r[i]);
                        break;
                    }
                }
                /* gelu: against the tanh form in double */
                fill(x, n, 8.0f);
                memcpy(s, x, sizeof(float) * (size_t)n);
                o->gelu(s, n);
                for (int64_t i = 0; i < n; i++) {
                    const double v = x[i];
                    const double want = 0.5 * v * (1.0 + tanh(0.79788456080286535588 * v * (1.0 + 0.044715 * v * v)));
                    const double e = fabs((double)s[i] - want) / (fabs(v) + 1e-30);
                    if (e > w_gelu) w_gelu = e;
                    if (!(e <= GELU_REL_DOUBLE)) {
                        FAIL_AT_("%s gelu n=%lld v=%g: %.9g vs %.9g", o->name, (long long)n, v, (double)s[i], want);
                        break;
                    }
                }
                /* add: exact */
                fill(x, n, 5.0f);
                memcpy(r, x, sizeof(float) * (size_t)n);
                memcpy(s, x, sizeof(float) * (size_t)n);
                kern_add_ref(r, u, n);
                o->add(s, u, n);
                CHECK_MSG(memcmp(r, s, sizeof(float) * (size_t)n) == 0, "%s add n=%lld", o->name, (long long)n);
                /* rmsnorm (out of place and in place) */
                fill(x, n, 2.0f);
                fill(g, n, 1.5f);
                kern_rmsnorm_ref(r, x, g, n, 1e-5f);
                o->rmsnorm(s, x, g, n, 1e-5f);
                double big = 0;
                for (int64_t i = 0; i < n; i++) big = fmax(big, fabs((double)r[i]));
                for (int64_t i = 0; i < n; i++) {
                    const double e = fabs((double)s[i] - r[i]) / (big + 1e-30);
                    if (e > w_norm) w_norm = e;
                    if (!(e <= NORM_REL)) {
                        FAIL_AT_("%s rmsnorm n=%lld i=%lld: %.9g vs %.9g", o->name, (long long)n, (long long)i,
                                 (double)s[i], (double)r[i]);
                        break;
                    }
                }
                o->rmsnorm(x, x, g, n, 1e-5f);
                CHECK_MSG(memcmp(x, s, sizeof(float) * (size_t)n) == 0, "%s rmsnorm in place n=%lld", o->name,
                          (long long)n);
                /* layernorm with and without bias, values with an offset (mean) */
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    for (int64_t i = 0; i < n; i++) x[i] = 3.0f + frand() * 2.0f;
                    fill(u, n, 0.5f);
                    const float *bias = with_bias ? u : NULL;
                    kern_layernorm_ref(r, x, g, bias, n, 1e-5f);
                    o->layernorm(s, x, g, bias, n, 1e-5f);
                    big = 0;
                    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs((double)r[i]) + (bias ? fabs((double)bias[i]) : 0));
                    for (int64_t i = 0; i < n; i++) {
                        const double e = fabs((double)s[i] - r[i]) / (big + 1e-30);
                        if (e > w_ln) w_ln = e;
                        if (!(e <= NORM_REL)) {
                            FAIL_AT_("%s layernorm n=%lld bias %d i=%lld: %.9g vs %.9g", o->name, (long long)n,
                                     with_bias, (long long)i, (double)s[i], (double)r[i]);
                            break;
                        }
                    }
                    o->layernorm(x, x, g, bias, n, 1e-5f);
                    CHECK_MSG(memcmp(x, s, sizeof(float) * (size_t)n) == 0, "%s layernorm in place n=%lld",
                              o->name, (long long)n);
                }
                /* softmax of scores over [-30, 30] */
                fill(x, n, 30.0f);
                memcpy(r, x, sizeof(float) * (size_t)n);
                memcpy(s, x, sizeof(float) * (size_t)n);
                kern_softmax_ref(r, n);
                o->softmax(s, n);
                double sum = 0;
                for (int64_t i = 0; i < n; i++) {
                    sum += s[i];
                    const double e = fabs((double)s[i] - r[i]) / (fabs((double)r[i]) + 1e-9);
                    if (e > w_sm) w_sm = e;
                    if (!(e <= SOFTMAX_REL)) {
                        FAIL_AT_("%s softmax n=%lld i=%lld: %.9g vs %.9g", o->name, (long long)n, (long long)i,
                                 (double)s[i], (double)r[i]);
                        break;
                    }
                }
                CHECK_NEAR(sum, 1.0, 1e-5);
            }
        }
        printf("    %s worst: swiglu %.2g (budget %.1g), gelu %.2g (%.1g), rmsnorm %.2g, layernorm %.2g (%.1g), "
               "softmax %.2g (%.1g)\n",
               o->name, w_swiglu, SWIGLU_REL, w_gelu, GELU_REL_DOUBLE, w_norm, w_ln, NORM_REL, w_sm, SOFTMAX_REL);
    }
}

/* avx2 and avx512 compute the same bits (ops_simd.h) */
TEST(test_simd_levels_bit_identical) {
    const kern_elt_ops *t[KERN_LEVEL_COUNT];
    const int nt = simd_tables(t);
    if (nt < 2) SKIP_TEST("fewer than two SIMD levels on this CPU: nothing to compare");
    static float a0[MAXN], a1[MAXN], u[MAXN], g[MAXN];
    for (int si = 0; si < N_SIZES; si++) {
        const int64_t n = sizes[si];
        fill(u, n, 3.0f);
        fill(g, n, 1.5f);
        for (int op = 0; op < 7; op++) {
            fill(a0, n, op == 5 ? 40.0f : 12.0f);
            memcpy(a1, a0, sizeof(float) * (size_t)n);
            for (int k = 0; k < 2; k++) {
                float *a = k ? a1 : a0;
                const kern_elt_ops *o = t[k];
                switch (op) {
                case 0: o->swiglu(a, u, n); break;
                case 1: o->gelu(a, n); break;
                case 2: o->add(a, u, n); break;
                case 3: o->rmsnorm(a, a, g, n, 1e-6f); break;
                case 4: o->layernorm(a, a, g, u, n, 1e-6f); break;
                case 5: o->softmax(a, n); break;
                default: o->exp(a, a, n); break;
                }
            }
            CHECK_MSG(memcmp(a0, a1, sizeof(float) * (size_t)n) == 0, "%s vs %s: op %d n=%lld", t[0]->name,
                      t[1]->name, op, (long long)n);
        }
    }
}

/* an element's swiglu / gelu value is the same in any slice of the array */
TEST(test_slices_position_independent) {
    const kern_elt_ops *t[KERN_LEVEL_COUNT + 1];
    int nt = simd_tables(t);
    t[nt++] = kern_elt_ops_for_level(KERN_LEVEL_SCALAR);
    enum { N = 1000 };
    static float g[N], u[N], whole[N], part[N], gw[N], gp[N];
    fill(g, N, 10.0f);
    fill(u, N, 2.0f);
    for (int k = 0; k < nt; k++) {
        memcpy(whole, g, sizeof g);
        t[k]->swiglu(whole, u, N);
        memcpy(gw, g, sizeof g);
        t[k]->gelu(gw, N);
        memcpy(part, g, sizeof g);
        memcpy(gp, g, sizeof g);
        /* uneven slices, as per-thread row ranges would give */
        int64_t lo = 0;
        const int64_t cuts[] = {3, 20, 21, 77, 300, 301, 640, 999, N};
        for (int c = 0; c < (int)(sizeof cuts / sizeof cuts[0]); c++) {
            t[k]->swiglu(part + lo, u + lo, cuts[c] - lo);
            t[k]->gelu(gp + lo, cuts[c] - lo);
            lo = cuts[c];
        }
        CHECK_MSG(memcmp(whole, part, sizeof whole) == 0, "%s swiglu depends on the slicing", t[k]->name);
        CHECK_MSG(memcmp(gw, gp, sizeof gw) == 0, "%s gelu depends on the slicing", t[k]->name);
        /* one element alone (n = 1) gives the same as inside the array */
        for (int i = 0; i < N; i += 97) {
            float one = g[i];
            t[k]->swiglu(&one, &u[i], 1);
            CHECK_MSG(bits_of(one) == bits_of(whole[i]), "%s swiglu element %d alone", t[k]->name, i);
        }
    }
}

/* a row's norm is the same on every call, at any address */
TEST(test_norm_deterministic) {
    const kern_elt_ops *t[KERN_LEVEL_COUNT];
    const int nt = simd_tables(t);
    if (nt == 0) SKIP_TEST("no SIMD level on this CPU");
    enum { N = 2049 };
    static float x[N + 8], y[N + 8], gain[N], o1[N], o2[N];
    fill(x, N, 3.0f);
    fill(gain, N, 1.0f);
    for (int k = 0; k < nt; k++) {
        t[k]->rmsnorm(o1, x, gain, N, 1e-5f);
        for (int shift = 1; shift < 8; shift += 3) {
            memcpy(y + shift, x, sizeof(float) * N);
            t[k]->rmsnorm(o2, y + shift, gain, N, 1e-5f);
            CHECK_MSG(memcmp(o1, o2, sizeof o1) == 0, "%s rmsnorm at offset %d", t[k]->name, shift);
        }
    }
}

/* silu(-100) = -0, no NaN from finite inputs, NaN stays NaN, inf as the reference */
TEST(test_special_values) {
    const kern_elt_ops *t[KERN_LEVEL_COUNT + 1];
    int nt = simd_tables(t);
    t[nt++] = kern_elt_ops_for_level(KERN_LEVEL_SCALAR);
    const float gv[] = {-100.0f, -1000.0f, -1e30f, -88.0f, -89.0f, -90.0f, 88.0f, 89.0f, 1000.0f, 1e30f,
                        0.0f,    -0.0f,    1e-30f, -1e-40f, INFINITY, NAN};
    enum { NV = (int)(sizeof gv / sizeof gv[0]) };
    float g[NV], one[NV], r[NV];
    for (int i = 0; i < NV; i++) one[i] = 1.0f;
    for (int k = 0; k < nt; k++) {
        memcpy(g, gv, sizeof g);
        t[k]->swiglu(g, one, NV);
        memcpy(r, gv, sizeof r);
        kern_swiglu_ref(r, one, NV);
        CHECK_MSG(g[0] == 0.0f && signbit(g[0]), "%s silu(-100) = %g, want -0", t[k]->name, (double)g[0]);
        for (int i = 0; i < NV - 1; i++) {
            CHECK_MSG(!isnan(g[i]), "%s silu(%g) is NaN", t[k]->name, (double)gv[i]);
            CHECK_MSG(ulp_dist(g[i], r[i]) <= 4.0 || fabs((double)g[i] - r[i]) < 1e-30, "%s silu(%g) = %g, ref %g",
                      t[k]->name, (double)gv[i], (double)g[i], (double)r[i]);
        }
        CHECK(isinf(g[NV - 2]) && g[NV - 2] > 0);
        CHECK(isnan(g[NV - 1]));
        memcpy(g, gv, sizeof g);
        t[k]->gelu(g, NV);
        CHECK_MSG(g[0] == 0.0f && signbit(g[0]), "%s gelu(-100) = %g, want -0", t[k]->name, (double)g[0]);
        for (int i = 0; i < NV - 1; i++) CHECK_MSG(!isnan(g[i]), "%s gelu(%g) is NaN", t[k]->name, (double)gv[i]);
        CHECK(g[9] == 1e30f && isinf(g[NV - 2]) && isnan(g[NV - 1]));
        /* softmax with -inf scores (masked positions) and a huge spread */
        float sm[5] = {-INFINITY, 0.0f, -200.0f, 50.0f, -INFINITY};
        t[k]->softmax(sm, 5);
        CHECK(sm[0] == 0.0f && sm[4] == 0.0f && sm[3] == 1.0f && !isnan(sm[1]) && sm[1] < 1e-21f);
    }
}

/* KITE_CPU_LEVEL, read by the CLI's configuration (tools/config), picks the
 * table (in children: the cap is fixed by the first use) */
TEST(test_env_cap) {
    static const char *const caps[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        const kern_level want = kern_level_capped(i); /* on AArch64 the x86 caps give scalar */
        fflush(stdout);
        const pid_t pid = fork();
        if (pid == 0) {
            setenv("KITE_CPU_LEVEL", caps[i], 1);
            (void)config_get();
            const kern_elt_ops *o = kern_elt_ops_active();
            /* the public kernel runs the active table */
            float a[19], b[19], u[19];
            for (int j = 0; j < 19; j++) a[j] = b[j] = (float)j - 9.5f, u[j] = 1.0f;
            kern_swiglu(a, u, 19);
            o->swiglu(b, u, 19);
            _exit(o == kern_elt_ops_for_level(want) && memcmp(a, b, sizeof a) == 0 ? 0 : 1);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "KITE_CPU_LEVEL=%s", caps[i]);
    }
}

int main(void) {
    RUN(test_env_cap);
    RUN(test_tables);
    RUN(test_exp_accuracy);
    RUN(test_ops_vs_reference_all_levels);
    RUN(test_simd_levels_bit_identical);
    RUN(test_slices_position_independent);
    RUN(test_norm_deterministic);
    RUN(test_special_values);
    return harness_summary(__FILE__);
}
