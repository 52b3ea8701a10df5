/*
 * int8_mix.c - LLM.int8() matmul: vector-wise INT8 with a mixed-precision
 * decomposition of outlier input columns (weight type LLM_INT8; see
 * int8_gemm.h and docs/quantization/w8a8.md).
 *
 * DESIGN
 *   1. Outlier columns: c is an outlier when |x[t][c]| > threshold for some
 *      token t of this call's batch (a mask and an ordered column list).
 *   2. Every token row is quantized to a W8A8 row with the outlier columns
 *      zeroed (so they do not set the per-token scale either).
 *   3. Rows are split over the pool in KERN_ROW_UNIT-row units; each thread
 *      runs the level's W8A8 flat GEMM on the int8 half of its weight rows
 *      (an LLM_INT8 row starts with a complete W8A8 row), then adds, per
 *      output, sum over outlier columns c (in column order) of
 *      x[t][c] * f16 W[r][c] in float.
 *   With no outliers (threshold +inf) steps 2-3 are exactly the W8A8 matmul
 *   of the same int8 rows: identical bits.  With threshold 0 every nonzero
 *   column is an outlier: the int8 part is 0 and the result is the float
 *   dot of x with the f16 weights.
 *
 *   Scratch (kern_matmul_scratch_bytes covers it): [mask: ne0 bytes]
 *   [column list: ne0 int32] then n_tok W8A8 activation rows.
 *
 * THREAD SAFETY
 *   The threshold is process-wide (set before matmuls run); the matmul is
 *   reentrant and its result does not depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/int8_gemm.h"
#include "tensor/dtype.h"

#define MIX_ROW_UNIT 8 /* rows per work unit (as matmul.c) */
#define MIX_COLS 256   /* outlier weights widened at a time (stack) */
#define MIX_TOK 64     /* tokens whose sums a row's widened block serves (stack) */

static float g_threshold = LLM_INT8_THRESHOLD_DEFAULT; /* kern_configure sets it too */

float kern_llm_int8_threshold(void) { return g_threshold; }

void kern_llm_int8_set_threshold(float t) { g_threshold = t; }

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct mix_task {
    const kern_ops_table *kt;
    const weight *w;
    const float *x;       /* [n_tok][ne0] */
    int64_t n_tok;
    float *y;
    int64_t ldy;
    const uint8_t *mask;  /* [ne0] 1: outlier column */
    const int32_t *cols;  /* [n_cols] outlier columns, ascending */
    int64_t n_cols;
    char *act;            /* [n_tok] W8A8 rows of a_stride bytes */
    size_t a_stride;
} mix_task;

static void quant_part(void *arg, int ith, int nth) {
    const mix_task *t = arg;
    const int64_t ne0 = t->w->ne[0];
    long k0, k1;
    tp_split((long)t->n_tok, ith, nth, &k0, &k1);
    for (long k = k0; k < k1; k++)
        w8_quantize_row(t->x + k * ne0, t->act + (size_t)k * t->a_stride, ne0, t->n_cols ? t->mask : NULL);
}

static void gemm_part(void *arg, int ith, int nth) {
    const mix_task *t = arg;
    const weight *w = t->w;
    const int64_t ne0 = w->ne[0], nr = w->ne[1];
    long u0, u1;
    tp_split((long)((nr + MIX_ROW_UNIT - 1) / MIX_ROW_UNIT), ith, nth, &u0, &u1);
    const int64_t r0 = (int64_t)u0 * MIX_ROW_UNIT, r1 = (int64_t)u1 * MIX_ROW_UNIT < nr ? (int64_t)u1 * MIX_ROW_UNIT : nr;
    if (r1 <= r0) return;
    const kern_gemm_fn gemm = t->kt->ops[KITE_DTYPE_W8A8].gemm;
    const char *wd = (const char *)w->data + (size_t)r0 * w->row_bytes;
    for (int64_t k = 0; k < t->n_tok; k += KERN_GEMM_MAX_TOK) {
        const int tn = (int)(t->n_tok - k < KERN_GEMM_MAX_TOK ? t->n_tok - k : KERN_GEMM_MAX_TOK);
        gemm(ne0, t->y + k * t->ldy + r0, t->ldy, wd, w->row_bytes, (int)(r1 - r0), t->act + (size_t)k * t->a_stride,
             t->a_stride, tn);
    }
    if (!t->n_cols) return;
    /* The outlier columns' products, per (row, token) summed over the columns in ascending order (the
     * bits do not depend on the blocking): each row's f16 outlier weights are widened once per block
     * of MIX_COLS columns for up to MIX_TOK tokens, not once per token (the f16 conversion per
     * (row, token, column) and the call it cost made this loop 2.3x the INT8 GEMM's time, perf,
     * TinyLlama shape, 128 tokens). */
    float wo[MIX_COLS], s[MIX_TOK];
    for (int64_t r = r0; r < r1; r++) {
        const char *f16 = (const char *)w->data + (size_t)r * w->row_bytes + W8_ROW_HEADER + (size_t)ne0;
        for (int64_t k0 = 0; k0 < t->n_tok; k0 += MIX_TOK) {
            const int64_t nk = t->n_tok - k0 < MIX_TOK ? t->n_tok - k0 : MIX_TOK;
            for (int64_t k = 0; k < nk; k++) s[k] = 0.0f;
            for (int64_t j0 = 0; j0 < t->n_cols; j0 += MIX_COLS) {
                const int64_t nj = t->n_cols - j0 < MIX_COLS ? t->n_cols - j0 : MIX_COLS;
                for (int64_t j = 0; j < nj; j++) {
                    uint16_t h;
                    memcpy(&h, f16 + 2 * (size_t)t->cols[j0 + j], 2);
                    wo[j] = fp16_to_fp32(h);
                }
                for (int64_t k = 0; k < nk; k++) {
                    const float *xk = t->x + (k0 + k) * ne0;
                    float acc = s[k];
                    for (int64_t j = 0; j < nj; j++) acc += xk[t->cols[j0 + j]] * wo[j];
                    s[k] = acc;
                }
            }
            for (int64_t k = 0; k < nk; k++) t->y[(k0 + k) * t->ldy + r] += s[k];
        }
    }
}

void kern_llm_int8_matmul(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                          float *y, int64_t ldy, void *scratch) {
    KITE_ASSERT(w->type == KITE_DTYPE_LLM_INT8 && kt->ops[KITE_DTYPE_W8A8].gemm);
    const int64_t ne0 = w->ne[0];
    const float thr = kern_llm_int8_threshold();
    uint8_t *mask = scratch;
    int32_t *cols = (int32_t *)(void *)((char *)scratch + round64((size_t)ne0));
    mix_task t = {.kt = kt, .w = w, .x = x, .n_tok = n_tok, .y = y, .ldy = ldy, .mask = mask, .cols = cols,
                  .act = (char *)scratch + round64((size_t)ne0) + round64((size_t)ne0 * sizeof(int32_t)),
                  .a_stride = dtype_row_size(KITE_DTYPE_W8A8, ne0)};
    memset(mask, 0, (size_t)ne0);
    for (int64_t k = 0; k < n_tok; k++)
        for (int64_t c = 0; c < ne0; c++)
            if (fabsf(x[k * ne0 + c]) > thr) mask[c] = 1;
    for (int64_t c = 0; c < ne0; c++)
        if (mask[c]) cols[t.n_cols++] = (int32_t)c;
    int n_q = tp_threads_for(tp, 4.0 * (double)n_tok * (double)ne0);
    if (n_q > n_tok) n_q = (int)n_tok;
    tp_run_n(tp, quant_part, &t, n_q);
    const double macs = (double)n_tok * (double)w->ne[1] * ((double)ne0 / 8.0 + (double)t.n_cols);
    tp_run_n(tp, gemm_part, &t, tp_threads_for(tp, macs));
}

size_t kern_llm_int8_extra_scratch(int64_t max_cols) {
    return round64((size_t)max_cols) + round64((size_t)max_cols * sizeof(int32_t));
}
