/*
 * kquant_vnni.h - q4_K, q6_K, q2_K, q3_K, tq1_0 and tq2_0 weight rows x q8_K activations with
 * AVX-512 VNNI (vec_dot_kquant_vnni.c; level avx512vnni).  Compiled with
 * AVX-512 flags only; called only when cpu_features() reports them.
 * Contracts as kern_vec_dot_fn / kern_gemm_fn (dispatch.h); results are
 * bit-identical to ref/vec_dot_quant.c.
 */
#ifndef KITE_KERNELS_KQUANT_VNNI_H
#define KITE_KERNELS_KQUANT_VNNI_H

#include <stddef.h>
#include <stdint.h>

void vec_dot_q4_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q6_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_K_q8_K_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nt);
void gemm_q6_K_q8_K_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nt);
void vec_dot_q2_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q3_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a);
void gemm_q2_K_q8_K_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nt);
void gemm_q3_K_q8_K_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nt);
void vec_dot_tq1_0_q8_K_vnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_tq2_0_q8_K_vnni(int64_t n, float *out, const void *w, const void *a);
void gemm_tq1_0_q8_K_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                          size_t a_stride, int nt);
void gemm_tq2_0_q8_K_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                          size_t a_stride, int nt);

#endif
