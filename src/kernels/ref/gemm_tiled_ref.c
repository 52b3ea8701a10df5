/*
 * gemm_tiled_ref.c - scalar specification of the tiled prefill GEMM
 * (gemm_tiled.h).
 *
 * Every reference is the flat reference dot (ref.h) per output: the tiled
 * kernels change only the loop order over outputs, never what an output is
 * (each SIMD kernel reproduces its level's flat vec_dot exactly).
 *
 * Portable C, no ISA flags.
 */
#include "kernels/gemm_tiled.h"
#include "kernels/ref/ref.h"

#define REF_TILED(NAME, DOT)                                                                                \
    KERN_GEMM_TILED_DECL(NAME) {                                                                            \
        for (int t = 0; t < nt; t++)                                                                        \
            for (int r = 0; r < nr; r++)                                                                    \
                DOT(n, y + (int64_t)t * ldy + r, (const char *)w + (size_t)r * w_stride,                    \
                    (const char *)a + (size_t)t * a_stride);                                                \
    }
REF_TILED(gemm_tiled_f32_ref, vec_dot_f32_ref)
REF_TILED(gemm_tiled_f16_ref, vec_dot_f16_f32_ref)
REF_TILED(gemm_tiled_bf16_ref, vec_dot_bf16_f32_ref)
REF_TILED(gemm_tiled_q8_0_ref, vec_dot_q8_0_q8_0_ref)
REF_TILED(gemm_tiled_q4_0_ref, vec_dot_q4_0_q8_0_ref)
REF_TILED(gemm_tiled_bf16_bf16_ref, vec_dot_bf16_bf16_ref)
