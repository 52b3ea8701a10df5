/*
 * awq.c - AWQ scale search (see awq.h).
 *
 * DESIGN
 *   For each alpha the group's rows are scaled, fake-quantized, unscaled and
 *   compared with the originals through the sampled inputs: cost per alpha
 *   O(rows * n * (n_x + quantization)).  Errors are summed in double.
 *
 * THREAD SAFETY
 *   No state.
 */
#include "quant/awq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kite.h"
#include "quant/grid.h"
#include "tensor/dtype.h"

void awq_fake_quant_row(uint32_t type, int bits, int group, const float *x, int64_t n, void *blocks, float *out) {
    const dtype_traits *tr = dtype_get(type);
    if (qgrid_supported(type, bits) && (bits != 0 || group != QGRID_BLOCK))
        qgrid_quantize_row(type, bits, group, x, n, blocks);
    else
        tr->from_float(x, blocks, n);
    tr->to_float(blocks, out, n);
}

double awq_output_error(const float *w, const float *weff, int64_t rows, int64_t n, const float *x, int32_t n_x) {
    double err = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *a = w + (size_t)r * (size_t)n, *b = weff + (size_t)r * (size_t)n;
        for (int32_t t = 0; t < n_x; t++) {
            const float *xt = x + (size_t)t * (size_t)n;
            double y = 0.0;
            for (int64_t j = 0; j < n; j++) y += ((double)a[j] - (double)b[j]) * (double)xt[j];
            err += y * y;
        }
    }
    return err;
}

int awq_search(const awq_mat *mats, int n_mats, int64_t n, const float *x, int32_t n_x, const float *sx,
               const awq_params *p, float *s, awq_result *res) {
    const int n_grid = p->n_grid > 0 ? p->n_grid : AWQ_N_GRID;
    float *cur = malloc((size_t)n * sizeof *cur);
    float *row = malloc((size_t)n * sizeof *row);
    float *deq = malloc((size_t)n * sizeof *deq);
    double *diff = malloc((size_t)n * sizeof *diff);
    size_t max_bytes = 0;
    for (int m = 0; m < n_mats; m++) {
        size_t b = dtype_row_size(mats[m].type, n);
        if (b > max_bytes) max_bytes = b;
    }
    void *blocks = malloc(max_bytes ? max_bytes : 1);
    int rc = KITE_OK;
    if (!cur || !row || !deq || !diff || !blocks) {
        rc = err_set(KITE_E_NOMEM, "awq: out of memory for a row of %lld", (long long)n);
        goto done;
    }
    res->alpha = 0.0f;
    res->err = res->err_rtn = INFINITY;
    for (int64_t j = 0; j < n; j++) s[j] = 1.0f;
    for (int gi = 0; gi < n_grid; gi++) {
        const float alpha = (float)gi / (float)n_grid;
        float lo = INFINITY, hi = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            cur[j] = powf(fmaxf(sx[j], 1e-4f), alpha);
            lo = fminf(lo, cur[j]);
            hi = fmaxf(hi, cur[j]);
        }
        const float norm = sqrtf(hi * lo);
        for (int64_t j = 0; j < n; j++) cur[j] /= norm;
        double err = 0.0;
        for (int m = 0; m < n_mats; m++) {
            for (int64_t r = 0; r < mats[m].rows; r++) {
                const float *w = mats[m].w + (size_t)r * (size_t)n;
                for (int64_t j = 0; j < n; j++) row[j] = w[j] * cur[j];
                awq_fake_quant_row(mats[m].type, p->bits, p->group, row, n, blocks, deq);
                for (int64_t j = 0; j < n; j++) diff[j] = (double)w[j] - (double)(deq[j] / cur[j]);
                for (int32_t t = 0; t < n_x; t++) {
                    const float *xt = x + (size_t)t * (size_t)n;
                    double y = 0.0;
                    for (int64_t j = 0; j < n; j++) y += diff[j] * (double)xt[j];
                    err += y * y;
                }
            }
        }
        if (gi == 0) res->err_rtn = err;
        if (err < res->err) {
            res->err = err;
            res->alpha = alpha;
            memcpy(s, cur, (size_t)n * sizeof *s);
        }
    }
done:
    free(cur);
    free(row);
    free(deq);
    free(diff);
    free(blocks);
    return rc;
}
