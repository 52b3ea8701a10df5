/*
 * avx512bf16.h - bf16 weights x bf16 activations with VDPBF16PS (level
 * avx512bf16; bf16_avx512bf16.c).  Compiled with AVX-512 flags only; called
 * only when cpu_features() reports AVX512_BF16.  Contracts as in dispatch.h
 * (vec_dot, gemm, act) and gemm_tiled.h (the tiled GEMM).  Every output is
 * vec_dot_bf16_bf16_ref's value (ref.h), bit for bit, whichever entry point
 * computes it.
 */
#ifndef KITE_KERNELS_AVX512BF16_H
#define KITE_KERNELS_AVX512BF16_H

#include <stddef.h>
#include <stdint.h>

/* bf16 activation row: the bytes of act_bf16_from_f32_ref */
void act_bf16_from_f32_avx512bf16(const float *x, void *dst, int64_t n);
void vec_dot_bf16_bf16_avx512bf16(int64_t n, float *out, const void *w, const void *a);
void gemm_bf16_bf16_avx512bf16(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                               const void *a, size_t a_stride, int nt);

#endif
