/*
 * attention_simd.c - the attention loop tables (attention_simd.h): the scalar
 * one, built from attention_impl.h's inline loops (the specification), and
 * the choice of table by kernel level.
 *
 * Levels: scalar -> scalar table; avx2 (x86 builds) -> the avx2 table;
 * avx512 and above -> the avx2 loops with a 16-lane exp_sum and a 16-column
 * axpy_rows (FlashAttention's score rows); the dots' 8-lane contract maps onto
 * one ymm register.
 * Thread safety: the tables are constant.
 */
#include "kernels/attention_simd.h"

#include "kernels/attention_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#define ATTN_X86 1
#include "kernels/x86_avx2/attention_avx2.h"
#endif

static float dot_scalar(const float *a, const float *b, int32_t n) { return attn_dot(a, b, n); }

static void dot_rows_scalar(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s) {
    for (int32_t r = 0; r < n_rows; r++) s[r] = attn_dot(q, k + (size_t)r * ldk, n);
}

static void axpy_scalar(float *y, float w, const float *x, int32_t n) { attn_axpy(y, w, x, n); }

static void axpy_rows_scalar(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n) {
    for (int32_t r = 0; r < n_rows; r++) attn_axpy(y, w[r], x + (size_t)r * ldx, n);
}

static void axpy_rows_multi_scalar(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo,
                                   const int32_t *hi, int32_t n_q, const float *x, size_t ldx, int32_t n) {
    for (int32_t i = 0; i < n_q; i++)
        if (hi[i] > lo[i])
            axpy_rows_scalar(y + (size_t)i * ldy, w + (size_t)i * ldw + lo[i], x + (size_t)lo[i] * ldx, ldx,
                             hi[i] - lo[i], n);
}

static void scale_scalar(float *y, float w, int32_t n) { attn_scale(y, w, n); }
static float exp_sum_scalar(float *x, float sub, int32_t n) { return attn_exp_sum(x, sub, n); }
static float max_scalar(const float *x, int32_t n) { return attn_max(x, n); }
static void transpose_scalar(const float *x, size_t ldx, int32_t n_rows, int32_t n, float *t, size_t ldt) {
    attn_transpose(x, ldx, n_rows, n, t, ldt);
}
static void deq_f16_scalar(const uint16_t *x, float *y, int32_t n) { attn_deq_f16(x, y, n); }
static void deq_q8_0_scalar(const unsigned char *x, float *y, int32_t n) { attn_deq_q8_0(x, y, n); }
static void deq_q4_0_scalar(const unsigned char *x, float *y, int32_t n) { attn_deq_q4_0(x, y, n); }

static const attn_ops ops_scalar = {
    .name = "scalar", .dot = dot_scalar, .dot_rows = dot_rows_scalar, .axpy = axpy_scalar,
    .axpy_rows = axpy_rows_scalar, .axpy_rows_multi = axpy_rows_multi_scalar, .scale = scale_scalar, .exp_sum = exp_sum_scalar, .max = max_scalar, .transpose = transpose_scalar,
    .deq_f16 = deq_f16_scalar, .deq_q8_0 = deq_q8_0_scalar, .deq_q4_0 = deq_q4_0_scalar,
};

#ifdef ATTN_X86
static const attn_ops ops_avx2 = {
    .name = "avx2", .dot = attn_dot_avx2, .dot_rows = attn_dot_rows_avx2, .axpy = attn_axpy_avx2,
    .axpy_rows = attn_axpy_rows_avx2, .axpy_rows_multi = attn_axpy_rows_multi_avx2, .scale = attn_scale_avx2, .exp_sum = attn_exp_sum_avx2, .max = attn_max_avx2, .transpose = attn_transpose_avx2,
    .deq_f16 = attn_deq_f16_avx2, .deq_q8_0 = attn_deq_q8_0_avx2, .deq_q4_0 = attn_deq_q4_0_avx2,
};
/* avx512 levels: the avx2 loops, with attn_exp on 16 lanes and axpy_rows / axpy_rows_multi on 16 columns
 * (attention_avx512.c) */
static const attn_ops ops_avx512 = {
    .name = "avx512", .dot = attn_dot_avx2, .dot_rows = attn_dot_rows_avx2, .axpy = attn_axpy_avx2,
    .axpy_rows = attn_axpy_rows_avx512, .axpy_rows_multi = attn_axpy_rows_multi_avx512, .scale = attn_scale_avx2,
    .exp_sum = attn_exp_sum_avx512, .max = attn_max_avx2, .transpose = attn_transpose_avx2,
    .deq_f16 = attn_deq_f16_avx2, .deq_q8_0 = attn_deq_q8_0_avx2, .deq_q4_0 = attn_deq_q4_0_avx2,
};
#endif

const attn_ops *attn_ops_for_level(kern_level level) {
    if ((unsigned)level >= KERN_LEVEL_COUNT || level > kern_level_max()) return NULL;
#ifdef ATTN_X86
    if (level >= KERN_LEVEL_AVX512) return &ops_avx512;
    if (level >= KERN_LEVEL_AVX2) return &ops_avx2;
#endif
    return &ops_scalar;
}

const attn_ops *attn_ops_active(void) {
    const attn_ops *o = attn_ops_for_level(kern_table()->level);
    return o ? o : &ops_scalar;
}
