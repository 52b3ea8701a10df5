/*
 * int8_gemm_ref.c - scalar reference of the W8A8 INT8 GEMM (the
 * specification the SIMD kernels match bit for bit; int8_gemm.h).
 *
 * Portable C, no ISA flags.  Thread safety: pure functions.
 */
#include "kernels/int8_gemm.h"
#include "tensor/dtype.h"

int64_t w8a8_dot_i64(int64_t n, const void *w, const void *a) {
    const int8_t *qw = (const int8_t *)w + W8_ROW_HEADER, *qa = (const int8_t *)a + W8_ROW_HEADER;
    int64_t total = 0;
    for (int64_t c0 = 0; c0 < n; c0 += W8_MAX_COLS) { /* int32 per chunk: the SIMD kernels' width */
        const int64_t c1 = n - c0 < W8_MAX_COLS ? n : c0 + W8_MAX_COLS;
        int32_t acc = 0;
        for (int64_t i = c0; i < c1; i++) acc += (int32_t)qw[i] * (int32_t)qa[i];
        total += acc;
    }
    return total;
}

void vec_dot_w8a8_ref(int64_t n, float *out, const void *w, const void *a) {
    *out = (float)w8a8_dot_i64(n, w, a) * w8_row_scale(a) * w8_row_scale(w);
}

void gemm_w8a8_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                   size_t a_stride, int nt) {
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            vec_dot_w8a8_ref(n, y + (int64_t)t * ldy + r, (const char *)w + (size_t)r * w_stride,
                             (const char *)a + (size_t)t * a_stride);
}

void act_quantize_w8a8(const float *x, void *dst, int64_t n) { w8_quantize_row(x, dst, n, NULL); }
