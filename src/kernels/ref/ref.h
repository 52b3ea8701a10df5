/*
 * ref.h - scalar reference kernels: the specification every SIMD kernel is
 * tested against (tests/unit/test_kernels.c).  Portable C, no ISA flags.
 *
 * Float kernels (f32/f16/bf16 weights, f32 activations) sum in 8 lanes,
 * lane j taking elements i = j (mod 8), combined as
 * ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) plus the sequential tail: the order of
 * kern_dot_f32.  Integer kernels form each block's (or super-block's) sum of
 * int8 x int4/int8 products exactly in int32 and accumulate the scaled block
 * terms in float, block by block.  Contracts as kern_vec_dot_fn (dispatch.h).
 */
#ifndef KITE_KERNELS_REF_H
#define KITE_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm_driver.h"

void vec_dot_f32_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_f16_f32_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_bf16_f32_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_0_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q8_0_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q6_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_iq4_xs_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_iq4_nl_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_0_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q4_1_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q5_1_q8_0_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_tq1_0_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_tq2_0_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q3_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q2_K_q8_K_ref(int64_t n, float *out, const void *w, const void *a);

/* Activation quantizers, identical in output to ggml's quantize_row_q8_0 /
 * quantize_row_q8_K reference code (q8_0: d = amax/127 stored as f16,
 * q = round(x/d); q8_K: d = max/-127 as float (1/iscale), where max is the signed
 * element of largest magnitude, q = min(127, nearest(x/d)), plus bsums). */
void act_quantize_q8_0_ref(const float *x, void *dst, int64_t n);
void act_quantize_q8_K_ref(const float *x, void *dst, int64_t n);

/* bf16 activations and bf16 x bf16 dots (vec_dot_bf16.c; level avx512bf16
 * only, the lower levels give bf16 weights f32 activations).  The converter
 * is fp32_to_bf16 (dtype.h) per element; the dot models VDPBF16PS: 16 lanes,
 * lane j takes pairs (2j, 2j+1) of each 32-element chunk (tail padded with
 * zeros) by two float FMAs, odd element first, DAZ inputs / FTZ result, then
 * ref_bf16_reduce16's tree. */
void act_bf16_from_f32_ref(const float *x, void *dst, int64_t n);
void vec_dot_bf16_bf16_ref(int64_t n, float *out, const void *w, const void *a);
/* ((l[i]+l[i+8]) for i<8, then +[i+4], +[i+2], +[i+1]): the lane reduction of the bf16 kernels */
float ref_bf16_reduce16(const float l[16]);
/* One VDPBF16PS lane: acc + w1*a1, then + w0*a0, each a rounded FMA, with DAZ on
 * the bf16 inputs and the accumulator and FTZ on the results. */
float ref_bf16_dp_lane(float acc, uint16_t w0, uint16_t w1, uint16_t a0, uint16_t a1);

/* 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block. */
static inline void ref_scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The 16 signed scales (6 bits, minus 32) of a q3_K block from its 12 packed bytes:
 * scale j's low 4 bits are nibble j/8 of byte j%8, its high 2 bits bits 2*(j/4) of
 * byte 8 + j%4 (ggml's layout). */
static inline void ref_q3_K_scales(const uint8_t *s, int8_t sc[16]) {
    for (int j = 0; j < 16; j++) {
        const int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
        const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int8_t)((low | (high << 4)) - 32);
    }
}

/* (flat GEMMs are defined from their vec_dot with KERN_DEFINE_GEMM,
 * gemm_driver.h: the one driver of every level) */
void gemm_f32_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                  size_t a_stride, int nt);
void gemm_f16_f32_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                      size_t a_stride, int nt);
void gemm_bf16_f32_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                       size_t a_stride, int nt);
void gemm_q4_0_q8_0_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q8_0_q8_0_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q4_K_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q6_K_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q5_K_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_iq4_xs_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                          size_t a_stride, int nt);
void gemm_iq4_nl_q8_0_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                          size_t a_stride, int nt);
void gemm_q5_0_q8_0_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q4_1_q8_0_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q5_1_q8_0_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_tq1_0_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                          size_t a_stride, int nt);
void gemm_tq2_0_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                          size_t a_stride, int nt);
void gemm_q3_K_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);
void gemm_q2_K_q8_K_ref(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);

#endif
