/*
 * attention_avx2.h - AVX2 versions of the attention loops (attention_simd.h
 * gives the contracts; each is bit-identical to its scalar twin in
 * attention_impl.h).  Compiled with AVX2 flags only; called only at level
 * avx2 or above.
 */
#ifndef KITE_KERNELS_ATTENTION_AVX2_H
#define KITE_KERNELS_ATTENTION_AVX2_H

#include <stddef.h>
#include <stdint.h>

float attn_dot_avx2(const float *a, const float *b, int32_t n);
void attn_dot_rows_avx2(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s);
void attn_axpy_avx2(float *y, float w, const float *x, int32_t n);
void attn_axpy_rows_avx2(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n);
void attn_axpy_rows_multi_avx2(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo, const int32_t *hi,
                               int32_t n_q, const float *x, size_t ldx, int32_t n);
void attn_scale_avx2(float *y, float w, int32_t n);
float attn_exp_sum_avx2(float *x, float sub, int32_t n);
float attn_max_avx2(const float *x, int32_t n);
void attn_transpose_avx2(const float *x, size_t ldx, int32_t n_rows, int32_t n, float *t, size_t ldt);
/* the avx512 table's exp_sum (16 lanes of attn_exp, sums in 8) and axpy_rows (16 columns per
 * register), in x86_avx512/attention_avx512.c */
float attn_exp_sum_avx512(float *x, float sub, int32_t n);
void attn_axpy_rows_avx512(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n);
void attn_axpy_rows_multi_avx512(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo,
                                 const int32_t *hi, int32_t n_q, const float *x, size_t ldx, int32_t n);
void attn_deq_f16_avx2(const uint16_t *x, float *y, int32_t n);
void attn_deq_q8_0_avx2(const unsigned char *x, float *y, int32_t n);
void attn_deq_q4_0_avx2(const unsigned char *x, float *y, int32_t n);

#endif
