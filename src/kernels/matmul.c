/*
 * matmul.c - reference matrix kernels (any dtype with to_float).
 *
 * Rows of W are split over threads; each thread converts a row to float once
 * (a no-op copy avoided for f32) and takes its dot product with every token
 * of the batch, so the weights are streamed once per call.
 */
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

float kern_dot_f32(const float *a, const float *b, int64_t n) {
    /* 8 independent partial sums: lets the compiler keep a vector register
     * of accumulators without -ffast-math, and the order does not depend on
     * the thread count, so results are identical for any -t. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void kern_get_row(const weight *w, int64_t row, float *dst) {
    const dtype_traits *tr = dtype_get(w->type);
    KITE_ASSERT(tr && tr->to_float && row >= 0 && row < w->ne[1]);
    tr->to_float((const char *)w->data + (size_t)row * w->row_bytes, dst, w->ne[0]);
}

typedef struct matmul_task {
    const weight *w;
    const float *x;
    int64_t n_tok;
    float *y;
    int64_t ldy;
    float *scratch;
} matmul_task;

static void matmul_part(void *arg, int ith, int nth) {
    const matmul_task *t = arg;
    const weight *w = t->w;
    const int64_t n_cols = w->ne[0];
    long r0, r1;
    tp_split((long)w->ne[1], ith, nth, &r0, &r1);
    const dtype_traits *tr = dtype_get(w->type);
    float *buf = t->scratch + (size_t)ith * (size_t)n_cols;
    for (long r = r0; r < r1; r++) {
        const char *src = (const char *)w->data + (size_t)r * w->row_bytes;
        const float *row;
        if (w->type == KITE_DTYPE_F32) {
            row = (const float *)(const void *)src;
        } else {
            tr->to_float(src, buf, n_cols);
            row = buf;
        }
        for (int64_t k = 0; k < t->n_tok; k++)
            t->y[k * t->ldy + r] = kern_dot_f32(row, t->x + k * n_cols, n_cols);
    }
}

void kern_matmul(threadpool *tp, const weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                 float *scratch) {
    const dtype_traits *tr = dtype_get(w->type);
    KITE_ASSERT(tr && tr->to_float && ldy >= w->ne[1]);
    matmul_task t = {w, x, n_tok, y, ldy, scratch};
    tp_run(tp, matmul_part, &t);
}
