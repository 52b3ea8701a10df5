/*
 * register.c - the AArch64 levels of the kernel registry (dispatch.h):
 *   neon     Armv8-A NEON kernels of this folder over the scalar level;
 *   dotprod  + the sdot q4_0/q8_0 kernels (*_dotprod.c) over neon.
 * Every dot product and quantizer computes its scalar twin's bits, the
 * element-wise ops the x86 SIMD levels' (neon.h ARITHMETIC).
 *
 * Compiled WITHOUT ISA flags beyond the AArch64 baseline (Makefile): it only
 * stores addresses (the dotprod level's table exists on every AArch64 CPU;
 * dispatch.c runs it only where HWCAP_ASIMDDP is set).
 * Thread safety: called once by the table builder (kern_tables_build).
 */
#if defined(__aarch64__)
#include "kernels/arm_neon/neon.h"
#include "kernels/attention_simd.h"
#include "kernels/dispatch.h"
#include "kernels/ops_simd.h"

void kern_register_neon(kern_ops_table *t) {
    kern_set_dot(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_neon, gemm_f32_neon);
    kern_set_dot(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_neon, gemm_f16_f32_neon);
    kern_set_dot(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_neon, gemm_bf16_f32_neon);
    kern_set_dot(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_neon, gemm_q4_0_q8_0_neon);
    kern_set_dot(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_neon, gemm_q8_0_q8_0_neon);
    kern_set_dot(t, KITE_DTYPE_Q5_0, KITE_DTYPE_Q8_0, vec_dot_q5_0_q8_0_neon, gemm_q5_0_q8_0_neon);
    kern_set_dot(t, KITE_DTYPE_IQ4_NL, KITE_DTYPE_Q8_0, vec_dot_iq4_nl_q8_0_neon, gemm_iq4_nl_q8_0_neon);
    kern_set_dot(t, KITE_DTYPE_Q4_1, KITE_DTYPE_Q8_0, vec_dot_q4_1_q8_0_neon, gemm_q4_1_q8_0_neon);
    kern_set_dot(t, KITE_DTYPE_Q5_1, KITE_DTYPE_Q8_0, vec_dot_q5_1_q8_0_neon, gemm_q5_1_q8_0_neon);
    kern_set_dot(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_neon, gemm_q4_K_q8_K_neon);
    kern_set_dot(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_neon, gemm_q6_K_q8_K_neon);
    kern_set_dot(t, KITE_DTYPE_IQ4_XS, KITE_DTYPE_Q8_K, vec_dot_iq4_xs_q8_K_neon, gemm_iq4_xs_q8_K_neon);
    kern_set_dot(t, KITE_DTYPE_Q5_K, KITE_DTYPE_Q8_K, vec_dot_q5_K_q8_K_neon, gemm_q5_K_q8_K_neon);
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_neon; /* same bytes as the reference */
    t->act_from_f32[KITE_DTYPE_Q8_K] = act_quantize_q8_K_neon;
#ifndef KITE_ELT_OPS_REF
    t->elt = &kern_elt_neon; /* the x86 SIMD levels' bits (ops_neon.c) */
#endif
    t->attn = &kern_attn_neon;
    /* the 16-row layout's kernels; repack stays false (the scalar level's): with
     * no AArch64 machine to measure on, whether it pays here is unknown (the flag
     * is per type, kern_x16_pays_type, so it could be set for these two alone) */
    t->ops[KITE_DTYPE_Q4_0].x16 = gemm_x16_q4_0_neon;
    t->ops[KITE_DTYPE_Q8_0].x16 = gemm_x16_q8_0_neon;
}

void kern_register_dotprod(kern_ops_table *t) {
    kern_set_dot(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_dotprod, gemm_q4_0_q8_0_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_dotprod, gemm_q8_0_q8_0_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q5_0, KITE_DTYPE_Q8_0, vec_dot_q5_0_q8_0_dotprod, gemm_q5_0_q8_0_dotprod);
    kern_set_dot(t, KITE_DTYPE_IQ4_NL, KITE_DTYPE_Q8_0, vec_dot_iq4_nl_q8_0_dotprod, gemm_iq4_nl_q8_0_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q4_1, KITE_DTYPE_Q8_0, vec_dot_q4_1_q8_0_dotprod, gemm_q4_1_q8_0_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q5_1, KITE_DTYPE_Q8_0, vec_dot_q5_1_q8_0_dotprod, gemm_q5_1_q8_0_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_dotprod, gemm_q4_K_q8_K_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_dotprod, gemm_q6_K_q8_K_dotprod);
    kern_set_dot(t, KITE_DTYPE_IQ4_XS, KITE_DTYPE_Q8_K, vec_dot_iq4_xs_q8_K_dotprod, gemm_iq4_xs_q8_K_dotprod);
    kern_set_dot(t, KITE_DTYPE_Q5_K, KITE_DTYPE_Q8_K, vec_dot_q5_K_q8_K_dotprod, gemm_q5_K_q8_K_dotprod);
    t->ops[KITE_DTYPE_Q4_0].x16 = gemm_x16_q4_0_dotprod;
    t->ops[KITE_DTYPE_Q8_0].x16 = gemm_x16_q8_0_dotprod;
}
#else
typedef int kite_empty_unit_register_arm; /* ISO C wants a declaration */
#endif
