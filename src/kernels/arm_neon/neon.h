/*
 * neon.h - the AArch64 kernels (levels neon and dotprod, dispatch.h): Armv8-A
 * Advanced SIMD, the baseline of every AArch64 CPU, and the Armv8.2 dot
 * product (sdot) integer kernels in *_dotprod.c, the only files compiled with
 * -march=armv8.2-a+dotprod (Makefile); register.c stores their addresses and
 * runs on any AArch64 CPU.
 *
 * ARITHMETIC: every dot product and quantizer here computes the scalar
 * reference's bits (ref/):
 *   - integer dots form each block's sum exactly in int32 (vmull_s8 +
 *     vpadalq_s16, or sdot), scale it in float as the reference does
 *     ((float)sumi * (d_w * d_a)) and add the block terms in block order;
 *   - float dots keep the reference's 8 lanes (two float32x4: lanes 0-3 and
 *     4-7, element i in lane i % 8), multiply and add unfused, and reduce
 *     them in its order ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) plus the
 *     sequential tail;
 *   - the q8_0 activation quantizer rounds ties away from zero (fcvtas) as
 *     roundf does, and takes the f16 scale from fp32_to_fp16.
 * Only gcc/clang with arm_neon.h; the files compile to nothing elsewhere.
 * Speed is unmeasured: these kernels ran only under qemu-aarch64
 * (docs/kernels.md, "AArch64").
 */
#ifndef KITE_KERNELS_ARM_NEON_H
#define KITE_KERNELS_ARM_NEON_H

#include <stdint.h>

#include "kernels/gemm_driver.h"

/* vec_dot_float_neon.c */
void vec_dot_f32_neon(int64_t n, float *out, const void *w, const void *a);
void vec_dot_f16_f32_neon(int64_t n, float *out, const void *w, const void *a);
void vec_dot_bf16_f32_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_f32_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                   size_t a_stride, int nt);
void gemm_f16_f32_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                       size_t a_stride, int nt);
void gemm_bf16_f32_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                        size_t a_stride, int nt);

/* vec_dot_quant_neon.c: plain NEON (vmull_s8 + vpadalq_s16) */
void vec_dot_q4_0_q8_0_neon(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q8_0_q8_0_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_0_q8_0_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nt);
void gemm_q8_0_q8_0_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                         size_t a_stride, int nt);

/* vec_dot_quant_dotprod.c: sdot (vdotq_s32) */
void vec_dot_q4_0_q8_0_dotprod(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q8_0_q8_0_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_0_q8_0_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                            const void *a, size_t a_stride, int nt);
void gemm_q8_0_q8_0_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                            const void *a, size_t a_stride, int nt);

/* gemm_x16_neon.c, gemm_x16_dotprod.c: the 16-row interleaved q4_0 / q8_0
 * kernels (gemm_x16.h), the reference's bits */
void gemm_x16_q4_0_neon(int64_t nb, float *y, int64_t ldy, const void *grp, const void *a, size_t a_stride,
                        const int32_t *corr, const float *da, int64_t c_stride, int nt, int acc);
void gemm_x16_q8_0_neon(int64_t nb, float *y, int64_t ldy, const void *grp, const void *a, size_t a_stride,
                        const int32_t *corr, const float *da, int64_t c_stride, int nt, int acc);
void gemm_x16_q4_0_dotprod(int64_t nb, float *y, int64_t ldy, const void *grp, const void *a, size_t a_stride,
                           const int32_t *corr, const float *da, int64_t c_stride, int nt, int acc);
void gemm_x16_q8_0_dotprod(int64_t nb, float *y, int64_t ldy, const void *grp, const void *a, size_t a_stride,
                           const int32_t *corr, const float *da, int64_t c_stride, int nt, int acc);

/* the same for q5_0, iq4_nl (q4_0's float expression), q4_1 and q5_1 (with
 * the min term), both levels */
void vec_dot_q5_0_q8_0_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q5_0_q8_0_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_iq4_nl_q8_0_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_iq4_nl_q8_0_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q4_1_q8_0_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_1_q8_0_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q5_1_q8_0_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q5_1_q8_0_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q5_0_q8_0_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q5_0_q8_0_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_iq4_nl_q8_0_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_iq4_nl_q8_0_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q4_1_q8_0_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_1_q8_0_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q5_1_q8_0_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q5_1_q8_0_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);

/* q4_K, q5_K, q6_K and iq4_xs with q8_K activations (kquant_neon.h), both levels */
void vec_dot_iq4_xs_q8_K_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_iq4_xs_q8_K_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_iq4_xs_q8_K_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_iq4_xs_q8_K_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q5_K_q8_K_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q5_K_q8_K_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q5_K_q8_K_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q5_K_q8_K_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q4_K_q8_K_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_K_q8_K_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q6_K_q8_K_neon(int64_t n, float *out, const void *w, const void *a);
void gemm_q6_K_q8_K_neon(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q4_K_q8_K_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_K_q8_K_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);
void vec_dot_q6_K_q8_K_dotprod(int64_t n, float *out, const void *w, const void *a);
void gemm_q6_K_q8_K_dotprod(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
    const void *a, size_t a_stride, int nt);

/* quant_act_neon.c: the reference quantizers' bytes */
void act_quantize_q8_0_neon(const float *x, void *dst, int64_t n);
void act_quantize_q8_K_neon(const float *x, void *dst, int64_t n);

/* ops_neon.c: the element-wise ops (ops_simd.h) with the x86 SIMD levels'
 * bits, not the reference's (the one exception to ARITHMETIC above; the
 * budgets of test_ops.c apply) */
struct kern_elt_ops;
extern const struct kern_elt_ops kern_elt_neon;

/* attention_neon.c: the attention loops (attention_simd.h), the scalar bits */
struct attn_ops;
extern const struct attn_ops kern_attn_neon;

#endif
