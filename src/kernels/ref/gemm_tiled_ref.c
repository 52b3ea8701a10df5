/*
 * gemm_tiled_ref.c - scalar specification of the tiled prefill GEMM
 * (gemm_tiled.h) and the per-level selector kern_gemm_tiled_get.
 *
 * Every reference is the flat reference dot (ref.h) per output: the tiled
 * kernels change only the loop order over outputs, never what an output is
 * (each SIMD kernel reproduces its level's flat vec_dot exactly).
 *
 * Portable C, no ISA flags; the selector only names x86 kernels on x86.
 */
#include "kernels/gemm_tiled.h"
#include "kernels/ref/ref.h"
#include "tensor/dtype.h"

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

kern_gemm_tiled_fn kern_gemm_tiled_get(kern_level level, uint32_t type) {
#if defined(__x86_64__) || defined(__i386__)
    if (level >= KERN_LEVEL_AVX512BF16 && type == KITE_DTYPE_BF16) return gemm_tiled_bf16_bf16_avx512bf16;
    if (level >= KERN_LEVEL_AVX512VNNI) {
        if (type == KITE_DTYPE_Q8_0) return gemm_tiled_q8_0_vnni;
        if (type == KITE_DTYPE_Q4_0) return gemm_tiled_q4_0_vnni;
    }
    if (level >= KERN_LEVEL_AVX512) {
        if (type == KITE_DTYPE_F32) return gemm_tiled_f32_avx512;
        if (type == KITE_DTYPE_F16) return gemm_tiled_f16_avx512;
        if (type == KITE_DTYPE_BF16) return gemm_tiled_bf16_avx512;
    }
    if (level >= KERN_LEVEL_AVX2) {
        if (type == KITE_DTYPE_F32) return gemm_tiled_f32_avx2;
        if (type == KITE_DTYPE_F16) return gemm_tiled_f16_avx2;
        if (type == KITE_DTYPE_BF16) return gemm_tiled_bf16_avx2;
    }
#else
    (void)level;
    (void)type;
#endif
    return NULL;
}
