/*
 * attention_simd.c - the attention loop tables (attention_simd.h): the scalar
 * one, built from attention_impl.h's inline loops (the specification), and
 * the choice of table by kernel level.
 *
 * Levels: scalar -> scalar table; avx2 and above (x86 builds) -> the avx2
 * table.  The AVX-512 levels reuse it: the dots' 8-lane contract maps onto
 * one ymm register, and the element-wise loops are bound by loads, not width.
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

static void scale_scalar(float *y, float w, int32_t n) { attn_scale(y, w, n); }
static float exp_sum_scalar(float *x, float sub, int32_t n) { return attn_exp_sum(x, sub, n); }
static void deq_f16_scalar(const uint16_t *x, float *y, int32_t n) { attn_deq_f16(x, y, n); }
static void deq_q8_0_scalar(const unsigned char *x, float *y, int32_t n) { attn_deq_q8_0(x, y, n); }
static void deq_q4_0_scalar(const unsigned char *x, float *y, int32_t n) { attn_deq_q4_0(x, y, n); }

static const attn_ops ops_scalar = {
    .name = "scalar", .dot = dot_scalar, .dot_rows = dot_rows_scalar, .axpy = axpy_scalar,
    .axpy_rows = axpy_rows_scalar, .scale = scale_scalar, .exp_sum = exp_sum_scalar,
    .deq_f16 = deq_f16_scalar, .deq_q8_0 = deq_q8_0_scalar, .deq_q4_0 = deq_q4_0_scalar,
};

#ifdef ATTN_X86
static const attn_ops ops_avx2 = {
    .name = "avx2", .dot = attn_dot_avx2, .dot_rows = attn_dot_rows_avx2, .axpy = attn_axpy_avx2,
    .axpy_rows = attn_axpy_rows_avx2, .scale = attn_scale_avx2, .exp_sum = attn_exp_sum_avx2,
    .deq_f16 = attn_deq_f16_avx2, .deq_q8_0 = attn_deq_q8_0_avx2, .deq_q4_0 = attn_deq_q4_0_avx2,
};
#endif

const attn_ops *attn_ops_for_level(kern_level level) {
    if ((unsigned)level >= KERN_LEVEL_COUNT || level > kern_level_max()) return NULL;
#ifdef ATTN_X86
    if (level >= KERN_LEVEL_AVX2) return &ops_avx2;
#endif
    return &ops_scalar;
}

const attn_ops *attn_ops_active(void) {
    const attn_ops *o = attn_ops_for_level(kern_table()->level);
    return o ? o : &ops_scalar;
}
