/*
 * gptq.c - GPTQ row quantization on the block types' grids (see gptq.h).
 *
 * DESIGN
 *   gptq_prepare works in double (damping, permutation, inverse, Cholesky)
 *   and stores U as float; the row sweep works in float.  Scratch layout of a
 *   row: wp[n] (weights in visiting order, updated), codes[n] (chosen codes,
 *   by original column, as floats), err[GPTQ_BLOCK], then the groups' grids.
 *
 * OWNERSHIP
 *   gptq_factor owns u and perm (gptq_factor_free).
 *
 * THREAD SAFETY
 *   No state.
 */
#include "quant/gptq.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kite.h"
#include "quant/grid.h"
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

int gptq_prepare(const double *h, int n, const gptq_params *p, gptq_factor *f) {
    memset(f, 0, sizeof *f);
    if (n <= 0 || !h || !p) return err_set(KITE_E_ARG, "gptq: bad arguments (n %d)", n);
    const size_t nn = (size_t)n * (size_t)n;
    double *a = malloc(nn * sizeof *a);
    diag_ix *dx = malloc((size_t)n * sizeof *dx);
    f->u = malloc(nn * sizeof *f->u);
    f->perm = malloc((size_t)n * sizeof *f->perm);
    int rc = KITE_OK;
    if (!a || !dx || !f->u || !f->perm) {
        rc = err_set(KITE_E_NOMEM, "gptq: out of memory for a %d x %d Hessian", n, n);
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
        ok = la_cholesky_inverse_upper(a, n);
        if (ok) f->damp_used = damp;
    }
    if (!ok) {
        rc = err_set(KITE_E_ARG, "gptq: %d x %d Hessian is not positive definite even with dampening %g", n, n,
                     damp / 10.0);
        goto fail;
    }
    for (size_t k = 0; k < nn; k++) f->u[k] = (float)a[k];
    f->n = n;
    free(a);
    free(dx);
    return KITE_OK;
fail:
    free(a);
    free(dx);
    gptq_factor_free(f);
    return rc;
}

size_t gptq_scratch_floats(int n) {
    const size_t grid_floats = (sizeof(qgrid) + sizeof(float) - 1) / sizeof(float);
    return 2 * (size_t)n + GPTQ_BLOCK + ((size_t)n / QGRID_BLOCK + 1) * grid_floats;
}

bool gptq_supported(uint32_t type, int bits) {
    return qgrid_supported(type, bits) || (type == KITE_DTYPE_Q3_K && bits == 0);
}

void gptq_quantize_row(const float *w, const gptq_factor *f, const gptq_params *p, float *scratch, void *dst) {
    const int n = f->n;
    const bool q3k = p->type == KITE_DTYPE_Q3_K;
    const int group = q3k ? QGRID_Q3K : (p->group > 0 ? p->group : QGRID_BLOCK);
    KITE_ASSERT(n % (q3k ? QGRID_Q3K : QGRID_BLOCK) == 0 && group % QGRID_BLOCK == 0);
    float *wp = scratch;          /* [n] visiting order */
    float *codes = wp + n;        /* [n] original order */
    float *err = codes + n;       /* [GPTQ_BLOCK] */
    /* grids: qgrid per group, or q3k_grid per super-block (both need float alignment only) */
    qgrid *grids = (qgrid *)(void *)(err + GPTQ_BLOCK);
    q3k_grid *sb = (q3k_grid *)(void *)(err + GPTQ_BLOCK);
    const int n_groups = (n + group - 1) / group;
    const float *u = f->u;
    const int *perm = f->perm;

    for (int i = 0; i < n; i++) wp[i] = w[perm[i]];
    if (p->act_order) /* static groups: parameters from the original weights */
        for (int g = 0; g < n_groups; g++) {
            const int len = n - g * group < group ? n - g * group : group;
            if (q3k) q3k_fit(w + (size_t)g * group, &sb[g]);
            else qgrid_fit(p->type, p->bits, w + (size_t)g * group, len, &grids[g]);
        }

    for (int b0 = 0; b0 < n; b0 += GPTQ_BLOCK) {
        const int b1 = b0 + GPTQ_BLOCK < n ? b0 + GPTQ_BLOCK : n;
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
            const float *ui = u + (size_t)i * n;
            const float e = (wp[i] - q) / ui[i];
            for (int j = i + 1; j < b1; j++) wp[j] -= e * ui[j];
            err[i - b0] = e;
        }
        /* lazy update of the columns right of the block */
        for (int k = 0; k < b1 - b0; k++) {
            const float e = err[k];
            if (e == 0.0f) continue;
            const float *uk = u + (size_t)(b0 + k) * n;
            for (int j = b1; j < n; j++) wp[j] -= e * uk[j];
        }
    }

    const size_t bsz = (size_t)dtype_get(p->type)->type_size;
    if (q3k) {
        int blk[QGRID_Q3K];
        for (int g = 0; g < n_groups; g++) {
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
