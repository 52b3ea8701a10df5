/*
 * avx2.h - AVX2 + FMA + F16C kernels (compiled with those flags only; called
 * only when cpu_features() reports them).  Contracts as in dispatch.h; each
 * is tested against its ref.h twin in tests/unit/test_kernels.c.
 */
#ifndef KITE_KERNELS_AVX2_H
#define KITE_KERNELS_AVX2_H

#include <stddef.h>
#include <stdint.h>

void vec_dot_f32_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_f16_f32_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_bf16_f32_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_0_q8_0_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q8_0_q8_0_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q6_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q3_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q2_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_iq4_xs_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_0_q8_0_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_1_q8_0_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_1_q8_0_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_tq1_0_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
void vec_dot_tq2_0_q8_K_avx2(int64_t n, float *out, const void *w, const void *a);
/* q8_0 activation rows, bytes equal to act_quantize_q8_0_ref (quant_act_avx2.c) */
void act_quantize_q8_0_avx2(const float *x, void *dst, int64_t n);
void act_quantize_w8a8_avx2(const float *x, void *dst, int64_t n); /* a W8A8 row: w8_quantize_row's bytes */

#define KERN_GEMM_DECL(NAME)                                                                           \
    void NAME(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a, \
              size_t a_stride, int nt)
KERN_GEMM_DECL(gemm_f32_avx2);
KERN_GEMM_DECL(gemm_f16_f32_avx2);
KERN_GEMM_DECL(gemm_bf16_f32_avx2);
KERN_GEMM_DECL(gemm_q4_0_q8_0_avx2);
KERN_GEMM_DECL(gemm_q8_0_q8_0_avx2);
KERN_GEMM_DECL(gemm_q4_K_q8_K_avx2);
KERN_GEMM_DECL(gemm_q6_K_q8_K_avx2);
KERN_GEMM_DECL(gemm_q5_K_q8_K_avx2);
KERN_GEMM_DECL(gemm_q3_K_q8_K_avx2);
KERN_GEMM_DECL(gemm_q2_K_q8_K_avx2);
KERN_GEMM_DECL(gemm_iq4_xs_q8_K_avx2);
KERN_GEMM_DECL(gemm_iq4_nl_q8_0_avx2);
KERN_GEMM_DECL(gemm_q5_0_q8_0_avx2);
KERN_GEMM_DECL(gemm_q4_1_q8_0_avx2);
KERN_GEMM_DECL(gemm_q5_1_q8_0_avx2);
KERN_GEMM_DECL(gemm_tq1_0_q8_K_avx2);
KERN_GEMM_DECL(gemm_tq2_0_q8_K_avx2);

#endif
