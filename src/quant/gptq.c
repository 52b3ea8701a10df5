/*
 * gptq.c - GPTQ row quantization on the block types' grids (see gptq.h).
 *
 * DESIGN
 *   gptq_prepare works in double (damping, permutation, blocked factor) and
 *   stores U as float; the row sweep works in float.  Scratch layout of a
 *   chunk of R rows: wp[R][n] (weights in visiting order, updated),
 *   codes[R][n] (chosen codes, by original column, as floats),
 *   err[R][GPTQ_BLOCK], the groups' grids [R][n/32 + 1], then the GEMM
 *   workspace (la_gemm_ws_bytes(R)).
 *
 * OWNERSHIP
 *   gptq_factor owns u and perm (gptq_factor_free).
 *
 * THREAD SAFETY
 *   No state.
 */
#include "quant/gptq.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kite.h"
#include "quant/grid.h"
#include "kernels/la_gemm.h"
#include "quant/linalg.h"
#include "tensor/dtype.h"

static_assert(_Alignof(qgrid) <= _Alignof(float) && _Alignof(q3k_grid) <= _Alignof(float),
              "grids live in the float scratch");
static_assert(sizeof(q3k_grid) <= 8 * sizeof(qgrid), "a q3_K super-block grid fits in the slots of 8 groups");

void gptq_factor_free(gptq_factor *f) {
    if (!f) return;
    free(f->u);
    free(f->perm);
    memset(f, 0, sizeof *f);
}

/* qsort context-free comparison: descending diagonal, then ascending index */
typedef struct diag_ix {
    double d;
    int i;
} diag_ix;

static int cmp_diag_desc(const void *a, const void *b) {
    const diag_ix *x = a, *y = b;
    if (x->d != y->d) return x->d > y->d ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

int gptq_prepare(const double *h, int n, const gptq_params *p, la_ctx *la, gptq_factor *f) {
    memset(f, 0, sizeof *f);
    if (n <= 0 || !h || !p) return err_set(KITE_E_ARG, "gptq: bad arguments (n %d)", n);
    const size_t nn = (size_t)n * (size_t)n;
    la_ctx *own = NULL;
    if (!la && !(la = own = la_ctx_new(NULL, NULL))) return KITE_E_NOMEM;
    double *a = malloc(nn * sizeof *a);
    diag_ix *dx = malloc((size_t)n * sizeof *dx);
    f->u = malloc(nn * sizeof *f->u);
    f->perm = malloc((size_t)n * sizeof *f->perm);
    int rc = KITE_OK;
    if (!a || !dx || !f->u || !f->perm) {
        rc = err_set(KITE_E_NOMEM, "gptq: out of memory for a %d x %d Hessian", n, n);
        goto fail;
    }
    for (size_t k = 0; k < nn; k++)
        if (!isfinite(h[k])) {
            rc = err_set(KITE_E_ARG, "gptq: the %d x %d Hessian has a non-finite entry at (%zu, %zu): NaN/Inf "
                         "activations in the calibration", n, n, k / (size_t)n, k % (size_t)n);
            goto fail;
        }
    for (int i = 0; i < n; i++) {
        dx[i].d = h[(size_t)i * n + i];
        dx[i].i = i;
    }
    if (p->act_order) qsort(dx, (size_t)n, sizeof *dx, cmp_diag_desc);
    for (int i = 0; i < n; i++) f->perm[i] = dx[i].i;
    double mean = 0.0;
    for (int i = 0; i < n; i++) mean += h[(size_t)i * n + i] > 0.0 ? h[(size_t)i * n + i] : 1.0;
    mean /= n;
    double damp = p->damp > 0.0 ? p->damp : GPTQ_DAMP_DEFAULT;
    bool ok = false;
    for (int attempt = 0; attempt < 5 && !ok; attempt++, damp *= 10.0) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                const int pi = f->perm[i], pj = f->perm[j];
                double v = h[(size_t)pi * n + pj];
                if (pi == pj) v = (v > 0.0 ? v : 1.0) + damp * mean; /* dead input: H_ii = 1 */
                a[(size_t)i * n + j] = v;
            }
        ok = la_gptq_factor(la, a, n);
        if (la_ctx_failed(la)) {
            rc = KITE_E_NOMEM;
            goto fail;
        }
        if (ok) f->damp_used = damp;
    }
    if (!ok) {
        rc = err_set(KITE_E_ARG, "gptq: %d x %d Hessian is not positive definite even with dampening %g", n, n,
                     damp / 10.0);
        goto fail;
    }
    for (size_t k = 0; k < nn; k++) f->u[k] = (float)a[k];
    f->n = n;
    f->la = la_ctx_ops(la);
    free(a);
    free(dx);
    la_ctx_free(own);
    return KITE_OK;
fail:
    free(a);
    free(dx);
    la_ctx_free(own);
    gptq_factor_free(f);
    return rc;
}

static size_t grid_floats_per_row(int n) {
    const size_t grid_floats = (sizeof(qgrid) + sizeof(float) - 1) / sizeof(float);
    return ((size_t)n / QGRID_BLOCK + 1) * grid_floats;
}

size_t gptq_scratch_floats(int n, int rows) {
    if (rows < 1) rows = 1;
    if (rows > GPTQ_CHUNK_ROWS) rows = GPTQ_CHUNK_ROWS;
    return (size_t)rows * (2 * (size_t)n + GPTQ_BLOCK + grid_floats_per_row(n)) +
           (la_gemm_ws_bytes(rows) + 63) / sizeof(float) + 16;
}

bool gptq_supported(uint32_t type, int bits) {
    return qgrid_supported(type, bits) || (type == KITE_DTYPE_Q3_K && bits == 0);
}

/* The fit / round / in-block propagation of columns [b0, b1) of one row
 * (wp in visiting order); the block's scaled errors go to err. */
static void sweep_block(const gptq_factor *f, const gptq_params *p, int b0, int b1, float *wp, float *codes,
                        float *err, qgrid *grids, q3k_grid *sb) {
    const int n = f->n;
    const bool q3k = p->type == KITE_DTYPE_Q3_K;
    const int group = q3k ? QGRID_Q3K : (p->group > 0 ? p->group : QGRID_BLOCK);
    const int *perm = f->perm;
    for (int i = b0; i < b1; i++) {
        const int col = perm[i];
        const int g = col / group;
        if (!p->act_order && col % group == 0) { /* group start: fit on the current weights */
            const int len = n - col < group ? n - col : group;
            if (q3k) q3k_fit(wp + i, &sb[g]);
            else qgrid_fit(p->type, p->bits, wp + i, len, &grids[g]);
        }
        int c;
        float q;
        if (q3k) {
            c = q3k_code(&sb[g], col % group, wp[i]);
            q = q3k_value(&sb[g], col % group, c);
        } else {
            c = qgrid_code(&grids[g], wp[i]);
            q = qgrid_value(&grids[g], c);
        }
        codes[col] = (float)c;
        const float *ui = f->u + (size_t)i * n;
        const float e = (wp[i] - q) / ui[i];
        f->la->saxpy_neg(b1 - i - 1, e, ui + i + 1, wp + i + 1);
        err[i - b0] = e;
    }
}

static void pack_row(const gptq_factor *f, const gptq_params *p, const float *codes, const qgrid *grids,
                     const q3k_grid *sb, void *dst) {
    const int n = f->n;
    const bool q3k = p->type == KITE_DTYPE_Q3_K;
    const int group = q3k ? QGRID_Q3K : (p->group > 0 ? p->group : QGRID_BLOCK);
    const size_t bsz = (size_t)dtype_get(p->type)->type_size;
    if (q3k) {
        int blk[QGRID_Q3K];
        for (int g = 0; g < n / QGRID_Q3K; g++) {
            for (int j = 0; j < QGRID_Q3K; j++) blk[j] = (int)codes[g * QGRID_Q3K + j];
            q3k_pack(&sb[g], blk, (uint8_t *)dst + (size_t)g * bsz);
        }
        return;
    }
    int blk[QGRID_BLOCK];
    for (int b = 0; b < n / QGRID_BLOCK; b++) {
        for (int j = 0; j < QGRID_BLOCK; j++) blk[j] = (int)codes[b * QGRID_BLOCK + j];
        qgrid_pack(p->type, &grids[b * QGRID_BLOCK / group], blk, (uint8_t *)dst + (size_t)b * bsz);
    }
}

/* One chunk of R <= GPTQ_CHUNK_ROWS rows. */
static void quantize_chunk(const float *w, size_t ldw, int R, const gptq_factor *f, const gptq_params *p,
                           float *scratch, uint8_t *dst, size_t dst_stride) {
    const int n = f->n;
    const bool q3k = p->type == KITE_DTYPE_Q3_K;
    const int group = q3k ? QGRID_Q3K : (p->group > 0 ? p->group : QGRID_BLOCK);
    KITE_ASSERT(n % (q3k ? QGRID_Q3K : QGRID_BLOCK) == 0 && group % QGRID_BLOCK == 0);
    const size_t gfl = grid_floats_per_row(n);
    float *wp = scratch;                          /* [R][n] visiting order */
    float *codes = wp + (size_t)R * n;            /* [R][n] original order */
    float *err = codes + (size_t)R * n;           /* [R][GPTQ_BLOCK] */
    float *grid_base = err + (size_t)R * GPTQ_BLOCK; /* [R][gfl]: qgrid per group or q3k_grid per super-block */
    void *ws = (void *)(((uintptr_t)(grid_base + (size_t)R * gfl) + 63) & ~(uintptr_t)63);
    const int n_groups = (n + group - 1) / group;
    const int *perm = f->perm;

    for (int r = 0; r < R; r++) {
        const float *wr = w + (size_t)r * ldw;
        float *wpr = wp + (size_t)r * n;
        for (int i = 0; i < n; i++) wpr[i] = wr[perm[i]];
        if (p->act_order) { /* static groups: parameters from the original weights */
            qgrid *grids = (qgrid *)(void *)(grid_base + (size_t)r * gfl);
            q3k_grid *sb = (q3k_grid *)(void *)(grid_base + (size_t)r * gfl);
            for (int g = 0; g < n_groups; g++) {
                const int len = n - g * group < group ? n - g * group : group;
                if (q3k) q3k_fit(wr + (size_t)g * group, &sb[g]);
                else qgrid_fit(p->type, p->bits, wr + (size_t)g * group, len, &grids[g]);
            }
        }
    }
    for (int b0 = 0; b0 < n; b0 += GPTQ_BLOCK) {
        const int b1 = b0 + GPTQ_BLOCK < n ? b0 + GPTQ_BLOCK : n;
        for (int r = 0; r < R; r++)
            sweep_block(f, p, b0, b1, wp + (size_t)r * n, codes + (size_t)r * n, err + (size_t)r * GPTQ_BLOCK,
                        (qgrid *)(void *)(grid_base + (size_t)r * gfl), (q3k_grid *)(void *)(grid_base + (size_t)r * gfl));
        if (b1 == n) break;
        /* lazy update of the columns right of the block: W[:, b1:] -= E U[b0:b1, b1:] */
        la_gemm_args g = {.m = R, .n = n - b1, .k = b1 - b0, .alpha = -1.0,
                          .a = {.p = err, .ld = GPTQ_BLOCK, .f32 = true},
                          .b = {.p = f->u + (size_t)b0 * n + b1, .ld = n, .f32 = true},
                          .c = wp + b1, .ldc = n};
        la_sgemm_st(f->la, &g, ws);
    }
    for (int r = 0; r < R; r++)
        pack_row(f, p, codes + (size_t)r * n, (const qgrid *)(const void *)(grid_base + (size_t)r * gfl),
                 (const q3k_grid *)(const void *)(grid_base + (size_t)r * gfl), dst + (size_t)r * dst_stride);
}

void gptq_quantize_rows(const float *w, size_t ldw, int n_rows, const gptq_factor *f, const gptq_params *p,
                        float *scratch, void *dst, size_t dst_stride) {
    for (int r0 = 0; r0 < n_rows; r0 += GPTQ_CHUNK_ROWS) {
        const int R = n_rows - r0 < GPTQ_CHUNK_ROWS ? n_rows - r0 : GPTQ_CHUNK_ROWS;
        quantize_chunk(w + (size_t)r0 * ldw, ldw, R, f, p, scratch, (uint8_t *)dst + (size_t)r0 * dst_stride,
                       dst_stride);
    }
}

void gptq_quantize_row(const float *w, const gptq_factor *f, const gptq_params *p, float *scratch, void *dst) {
    gptq_quantize_rows(w, (size_t)f->n, 1, f, p, scratch, dst, 0);
}
