/*
 * linalg.c - GEMM, Cholesky, triangular / SPD inverses and GPTQ's factor
 * (see linalg.h).
 *
 * DESIGN
 *   Textbook algorithms in double, row-major: Cholesky-Banachiewicz for L,
 *   the inverse as L^-T L^-1 (L inverted in place by forward substitution),
 *   and the upper factor of the inverse as the transpose of the lower factor
 *   of the inverse.  A pivot <= 0 (or NaN) reports "not positive definite".
 *
 *   Blocked versions: GEMM as in BLIS (la_gemm_impl.h, instantiated for
 *   float and double) on the registry's register tiles; threads take
 *   disjoint row ranges of C (balanced by area for lower-triangle GEMMs),
 *   each with its own packing workspace.  Cholesky is right-looking in
 *   LA_NB blocks: the diagonal block by the textbook routine, the panel
 *   below it as A21 * L11^-T (L11^-1 by substitution, then a GEMM), the
 *   trailing matrix by a lower-triangle GEMM.  The triangular inverse goes
 *   by block rows: X_ij = -X_ii sum_{j<=k<i} L_ik X_kj, the sums one GEMM per
 *   (i, j), the j of a block row split over the threads.
 *
 * THREAD SAFETY
 *   Textbook functions: no state.  la_ctx: one driving thread.
 */
#include "quant/linalg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "kernels/dispatch.h"

bool la_cholesky_lower(double *a, int n) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double s = a[(long)i * n + j];
            const double *ri = a + (long)i * n, *rj = a + (long)j * n;
            for (int k = 0; k < j; k++) s -= ri[k] * rj[k];
            if (i == j) {
                if (!(s > 0.0)) return false;
                a[(long)i * n + i] = sqrt(s);
            } else {
                a[(long)i * n + j] = s / rj[j];
            }
        }
        for (int j = i + 1; j < n; j++) a[(long)i * n + j] = 0.0;
    }
    return true;
}

bool la_spd_inverse(double *a, int n) {
    if (!la_cholesky_lower(a, n)) return false;
    /* invert L in place (lower triangular): column by column */
    for (int j = 0; j < n; j++) {
        a[(long)j * n + j] = 1.0 / a[(long)j * n + j];
        for (int i = j + 1; i < n; i++) {
            double s = 0.0;
            for (int k = j; k < i; k++) s += a[(long)i * n + k] * a[(long)k * n + j];
            a[(long)i * n + j] = -s / a[(long)i * n + i];
        }
    }
    /* a^-1 = L^-T L^-1: entry (i, j), i <= j, = sum_{k >= j} M[k][i] M[k][j]
     * with M = L^-1 (lower).  Computed into the upper triangle row by row
     * from the top: entry (i, j) reads M's columns i and j at rows k >= j;
     * writing (i, j >= i) only replaces M entries that no later entry reads
     * (the zeros above M's diagonal, and M[i][i], whose column i is not
     * read again once row i is done). */
    for (int i = 0; i < n; i++) {
        for (int j = i; j < n; j++) {
            double s = 0.0;
            for (int k = j; k < n; k++) s += a[(long)k * n + i] * a[(long)k * n + j];
            a[(long)i * n + j] = s;
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) a[(long)i * n + j] = a[(long)j * n + i];
    return true;
}

bool la_cholesky_inverse_upper(double *a, int n) {
    if (!la_spd_inverse(a, n) || !la_cholesky_lower(a, n)) return false;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            a[(long)i * n + j] = a[(long)j * n + i];
            a[(long)j * n + i] = 0.0;
        }
    return true;
}

/* ---- GEMM --------------------------------------------------------------------------- */

/* Columns per packed B slice (multiples of every level's NR): KC x NC fills
 * about 768 KB, most of a 1 MB L2 (test_linalg --bench chose them). */
#define LA_NC_S 512
#define LA_NC_D 256

size_t la_gemm_ws_bytes(int64_t rows) {
    /* rows padded to whole MR panels for any level's MR <= KERN_LA_MR_MAX: at most
     * rows + MR - 1 (rounding to a multiple of 8 was not enough for AVX2's MR = 6: 8 rows
     * pack as 12, and the A panels ran into the packed B) */
    const size_t mp = (size_t)rows + KERN_LA_MR_MAX - 1;
    const size_t s = (mp * LA_KC + (size_t)LA_KC * LA_NC_S) * sizeof(float);
    const size_t d = (mp * LA_KC + (size_t)LA_KC * LA_NC_D) * sizeof(double);
    return (s > d ? s : d) + 64;
}

#define LA_T float
#define LA_SFX _s
#define LA_UKR sgemm
#define LA_MR s_mr
#define LA_NR s_nr
#define LA_NC LA_NC_S
#include "quant/la_gemm_impl.h" /* undefines LA_* */

#define LA_T double
#define LA_SFX _d
#define LA_UKR dgemm
#define LA_MR d_mr
#define LA_NR d_nr
#define LA_NC LA_NC_D
#include "quant/la_gemm_impl.h" /* undefines LA_* */

void la_sgemm_st(const kern_la_ops *ops, const la_gemm_args *g, void *ws) {
    if (g->m <= 0 || g->n <= 0 || g->k <= 0) return;
    gemm_region__s(ops, g, 0, g->m, 0, g->n, ws);
}

struct la_ctx {
    threadpool *tp;
    const kern_la_ops *ops;
    int n_threads;
    unsigned char *ws;  /* [n_threads][ws_bytes] */
    size_t ws_bytes;
    double seconds, flops, cpu_seconds;
    int depth;          /* > 0 inside a factorisation */
    bool oom;           /* a workspace allocation failed */
};

la_ctx *la_ctx_new(threadpool *tp, const kern_la_ops *ops) {
    la_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(KITE_E_NOMEM, "linalg: out of memory");
        return NULL;
    }
    c->tp = tp;
    c->n_threads = tp ? tp_n_threads(tp) : 1;
    c->ops = ops ? ops : kern_table()->la;
    return c;
}

/* Grows every thread's workspace to GEMMs over `rows` rows of C.  The
 * failure is sticky (c->oom): callers check it once at the end. */
static bool ws_reserve(la_ctx *c, int64_t rows) {
    const size_t need = (la_gemm_ws_bytes(rows) + 63) / 64 * 64;
    if (need <= c->ws_bytes) return true;
    free(c->ws);
    c->ws = aligned_alloc(64, need * (size_t)c->n_threads);
    c->ws_bytes = c->ws ? need : 0;
    if (!c->ws) {
        c->oom = true;
        err_set(KITE_E_NOMEM, "linalg: out of memory for GEMM workspace (%zu bytes per thread)", need);
    }
    return c->ws != NULL;
}

bool la_ctx_failed(const la_ctx *c) { return c->oom; }

void la_ctx_free(la_ctx *c) {
    if (!c) return;
    free(c->ws);
    free(c);
}

const kern_la_ops *la_ctx_ops(const la_ctx *c) { return c->ops; }

void la_ctx_stats(const la_ctx *c, double *seconds, double *flops, double *cpu_seconds) {
    *seconds = c->seconds;
    *flops = c->flops;
    if (cpu_seconds) *cpu_seconds = c->cpu_seconds;
}

typedef struct gemm_task {
    la_ctx *c;
    const la_gemm_args *g;
    bool dbl;
} gemm_task;

/* Row ranges of C per thread: equal counts, or equal lower-triangle areas. */
static void row_range(const la_gemm_args *g, int ith, int nth, int64_t *lo, int64_t *hi) {
    if (!g->lower) {
        long l, h;
        tp_split((long)g->m, ith, nth, &l, &h);
        *lo = l;
        *hi = h;
        return;
    }
    *lo = (int64_t)((double)g->m * sqrt((double)ith / nth));
    *hi = ith + 1 == nth ? g->m : (int64_t)((double)g->m * sqrt((double)(ith + 1) / nth));
}

static void gemm_task_run(void *arg, int ith, int nth) {
    const gemm_task *t = arg;
    int64_t lo, hi;
    row_range(t->g, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    void *ws = t->c->ws + (size_t)ith * t->c->ws_bytes;
    if (t->dbl) gemm_region__d(t->c->ops, t->g, lo, hi, 0, t->g->n, ws);
    else gemm_region__s(t->c->ops, t->g, lo, hi, 0, t->g->n, ws);
}

static void gemm_mt(la_ctx *c, const la_gemm_args *g, bool dbl) {
    if (g->m <= 0 || g->n <= 0 || g->k <= 0) return;
    const double t0 = time_now_s(), u0 = time_cpu_s();
    const bool count = c->depth == 0; /* a factorisation counts its GEMMs itself */
    double work = (double)g->m * (double)g->n * (double)g->k * (g->lower ? 0.5 : 1.0);
    gemm_task t = {.c = c, .g = g, .dbl = dbl};
    int nth = c->tp ? tp_threads_for(c->tp, work) : 1;
    if (nth > 1 && g->m < 2 * KERN_LA_MR_MAX) nth = 1; /* too few rows to split */
    if (!ws_reserve(c, g->m)) return;
    if (nth > 1) tp_run_n(c->tp, gemm_task_run, &t, nth);
    else gemm_task_run(&t, 0, 1);
    if (count) {
        c->seconds += time_now_s() - t0;
        c->cpu_seconds += time_cpu_s() - u0;
        c->flops += 2.0 * work;
    }
}

void la_dgemm(la_ctx *c, const la_gemm_args *g) { gemm_mt(c, g, true); }
void la_sgemm(la_ctx *c, const la_gemm_args *g) { gemm_mt(c, g, false); }

/* ---- blocked factorisations ------------------------------------------------------------ */

/* End of a factorisation of n^3/3 nominal flops started at (t0, u0): its
 * GEMMs were not counted on their own (depth > 0). */
static bool factor_end(la_ctx *c, int n, double t0, double u0, bool ok) {
    c->depth--;
    c->seconds += time_now_s() - t0;
    c->cpu_seconds += time_cpu_s() - u0;
    c->flops += (double)n * n * n / 3.0; /* n^3/6 multiply-adds */
    return ok && !c->oom;
}

/* Textbook Cholesky of the kb x kb block at a (row stride lda), in place. */
static bool chol_block(double *a, int64_t lda, int kb) {
    for (int i = 0; i < kb; i++) {
        double *ri = a + i * lda;
        for (int j = 0; j <= i; j++) {
            const double *rj = a + j * lda;
            double s = ri[j];
            for (int k = 0; k < j; k++) s -= ri[k] * rj[k];
            if (i == j) {
                if (!(s > 0.0) || !isfinite(s)) return false;
                ri[i] = sqrt(s);
            } else {
                ri[j] = s / rj[j];
            }
        }
    }
    return true;
}

/* inv = L^-1 of the kb x kb lower block l (stride lda) into inv (stride kb,
 * strict upper zero), by forward substitution. */
static bool tri_inv_block(const double *l, int64_t lda, int kb, double *inv) {
    memset(inv, 0, (size_t)kb * (size_t)kb * sizeof *inv);
    for (int j = 0; j < kb; j++) {
        const double d = l[j * lda + j];
        if (!(d != 0.0) || !isfinite(d)) return false;
        inv[j * kb + j] = 1.0 / d;
        for (int i = j + 1; i < kb; i++) {
            double s = 0.0;
            for (int k = j; k < i; k++) s += l[i * lda + k] * inv[k * kb + j];
            inv[i * kb + j] = -s / l[i * lda + i];
        }
    }
    return true;
}

bool la_cholesky_lower_blocked(la_ctx *c, double *a, int n) {
    const double t0 = time_now_s(), u0 = time_cpu_s();
    c->depth++;
    double *inv = malloc((size_t)LA_NB * LA_NB * sizeof *inv);
    double *panel = malloc((size_t)n * LA_NB * sizeof *panel);
    bool ok = inv && panel;
    if (!ok) err_set(KITE_E_NOMEM, "linalg: out of memory");
    for (int k0 = 0; ok && k0 < n; k0 += LA_NB) {
        const int kb = n - k0 < LA_NB ? n - k0 : LA_NB;
        double *akk = a + (int64_t)k0 * n + k0;
        if (!(ok = chol_block(akk, n, kb) && tri_inv_block(akk, n, kb, inv))) break;
        const int64_t r0 = k0 + kb, nr = n - r0;
        if (nr == 0) break;
        /* L21 = A21 L11^-T: copy A21 out, multiply into place */
        for (int64_t r = 0; r < nr; r++) {
            double *row = a + (r0 + r) * n + k0;
            memcpy(panel + r * kb, row, (size_t)kb * sizeof *row);
            memset(row, 0, (size_t)kb * sizeof *row);
        }
        la_gemm_args g = {.m = nr, .n = kb, .k = kb, .alpha = 1.0,
                          .a = {.p = panel, .ld = kb}, .b = {.p = inv, .ld = kb, .trans = true},
                          .c = a + r0 * n + k0, .ldc = n};
        la_dgemm(c, &g);
        /* A22 -= L21 L21^T (lower triangle) */
        la_gemm_args t = {.m = nr, .n = nr, .k = kb, .alpha = -1.0,
                          .a = {.p = a + r0 * n + k0, .ld = n}, .b = {.p = a + r0 * n + k0, .ld = n, .trans = true},
                          .c = a + r0 * n + r0, .ldc = n, .lower = true};
        la_dgemm(c, &t);
    }
    if (ok)
        for (int i = 0; i < n; i++) memset(a + (int64_t)i * n + i + 1, 0, (size_t)(n - i - 1) * sizeof *a);
    free(inv);
    free(panel);
    return factor_end(c, n, t0, u0, ok);
}

typedef struct inv_task {
    la_ctx *c;
    double *a;      /* the matrix (rows < i0 hold X, rows >= i0 still L) */
    double *t;      /* [kb][i0] T = L[i, 0:i] X[0:i, 0:i] */
    int n, i0, kb;
} inv_task;

/* T[:, jb] = L[i, jb:i] X[jb:i, jb] for the column blocks jb of thread ith */
static void inv_task_run(void *arg, int ith, int nth) {
    const inv_task *t = arg;
    void *ws = t->c->ws + (size_t)ith * t->c->ws_bytes;
    const int nb = (t->i0 + LA_NB - 1) / LA_NB;
    for (int jb = ith; jb < nb; jb += nth) {
        const int j0 = jb * LA_NB, jw = t->i0 - j0 < LA_NB ? t->i0 - j0 : LA_NB;
        for (int r = 0; r < t->kb; r++) memset(t->t + (int64_t)r * t->i0 + j0, 0, (size_t)jw * sizeof(double));
        la_gemm_args g = {.m = t->kb, .n = jw, .k = t->i0 - j0, .alpha = 1.0,
                          .a = {.p = t->a + (int64_t)t->i0 * t->n + j0, .ld = t->n},
                          .b = {.p = t->a + (int64_t)j0 * t->n + j0, .ld = t->n},
                          .c = t->t + j0, .ldc = t->i0};
        gemm_region__d(t->c->ops, &g, 0, g.m, 0, g.n, ws);
    }
}

bool la_tri_lower_inverse_blocked(la_ctx *c, double *a, int n) {
    const double t0 = time_now_s(), u0 = time_cpu_s();
    c->depth++;
    double *inv = malloc((size_t)LA_NB * LA_NB * sizeof *inv);
    double *tt = malloc((size_t)LA_NB * (size_t)n * sizeof *tt);
    bool ok = inv && tt;
    if (!ok) err_set(KITE_E_NOMEM, "linalg: out of memory");
    for (int i0 = 0; ok && i0 < n; i0 += LA_NB) {
        const int kb = n - i0 < LA_NB ? n - i0 : LA_NB;
        double *aii = a + (int64_t)i0 * n + i0;
        if (!(ok = tri_inv_block(aii, n, kb, inv))) break;
        if (i0 > 0) {
            inv_task t = {.c = c, .a = a, .t = tt, .n = n, .i0 = i0, .kb = kb};
            const int nb = (i0 + LA_NB - 1) / LA_NB;
            int nth = c->tp ? tp_threads_for(c->tp, (double)kb * i0 * i0 * 0.5) : 1;
            if (nth > nb) nth = nb;
            if (!ws_reserve(c, kb)) {
            ok = false;
            break;
        }
        if (nth > 1) tp_run_n(c->tp, inv_task_run, &t, nth);
            else inv_task_run(&t, 0, 1);
            /* X[i, 0:i] = -X_ii T */
            for (int r = 0; r < kb; r++) memset(a + (int64_t)(i0 + r) * n, 0, (size_t)i0 * sizeof *a);
            la_gemm_args g = {.m = kb, .n = i0, .k = kb, .alpha = -1.0, .a = {.p = inv, .ld = kb},
                              .b = {.p = tt, .ld = i0}, .c = a + (int64_t)i0 * n, .ldc = n};
            la_dgemm(c, &g);
        }
        for (int r = 0; r < kb; r++) memcpy(aii + (int64_t)r * n, inv + (int64_t)r * kb, (size_t)kb * sizeof *a);
    }
    free(inv);
    free(tt);
    return factor_end(c, n, t0, u0, ok);
}

/* a[i][j] <-> a[n-1-i][n-1-j]: the flat array reversed */
static void reverse_both(double *a, int n) {
    const size_t nn = (size_t)n * (size_t)n;
    for (size_t k = 0; k < nn / 2; k++) {
        const double t = a[k];
        a[k] = a[nn - 1 - k];
        a[nn - 1 - k] = t;
    }
}

bool la_gptq_factor(la_ctx *c, double *a, int n) {
    reverse_both(a, n);
    if (!la_cholesky_lower_blocked(c, a, n) || !la_tri_lower_inverse_blocked(c, a, n)) return false;
    reverse_both(a, n);
    return true;
}
