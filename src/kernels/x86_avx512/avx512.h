/*
 * avx512.h - AVX-512 kernels: float dots on zmm (level avx512) and VNNI
 * integer dots (level avx512vnni).  Compiled with AVX-512 flags only; called
 * only when cpu_features() reports them.  Contracts as in dispatch.h.
 */
#ifndef KITE_KERNELS_AVX512_H
#define KITE_KERNELS_AVX512_H

#include <stddef.h>
#include <stdint.h>

void vec_dot_f32_avx512(int64_t n, float *out, const void *w, const void *a);
void vec_dot_f16_f32_avx512(int64_t n, float *out, const void *w, const void *a);
void vec_dot_bf16_f32_avx512(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_0_q8_0_vnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q8_0_q8_0_vnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_1_q8_0_vnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_1_q8_0_vnni(int64_t n, float *out, const void *w, const void *a);
/* q8_0 activation rows, bytes equal to act_quantize_q8_0_ref (quant_act_avx512.c) */
void act_quantize_q8_0_avx512(const float *x, void *dst, int64_t n);
void act_quantize_w8a8_avx512(const float *x, void *dst, int64_t n); /* a W8A8 row: w8_quantize_row's bytes */

#define KERN_GEMM_DECL512(NAME)                                                                        \
    void NAME(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a, \
              size_t a_stride, int nt)
KERN_GEMM_DECL512(gemm_f32_avx512);
KERN_GEMM_DECL512(gemm_f16_f32_avx512);
KERN_GEMM_DECL512(gemm_bf16_f32_avx512);
KERN_GEMM_DECL512(gemm_q4_0_q8_0_vnni);
KERN_GEMM_DECL512(gemm_q8_0_q8_0_vnni);
KERN_GEMM_DECL512(gemm_q4_1_q8_0_vnni);
KERN_GEMM_DECL512(gemm_q5_1_q8_0_vnni);

#endif
