/*
 * register.c - the avx2 level of the kernel registry (dispatch.h): AVX2 +
 * FMA + F16C kernels of this folder over the scalar level, and on a CPU with
 * AVX-VNNI the VEX vpdpbusd q4_0/q8_0 kernels (same level and name).
 *
 * Compiled WITHOUT ISA flags (Makefile): it only stores addresses, and runs
 * on any CPU (every level's table is built, the CPU picks which one runs).
 * Thread safety: called once by the table builder (kern_tables_build).
 */
#if defined(__x86_64__) || defined(__i386__)
#include "core/cpu.h"
#include "kernels/attention_simd.h"
#include "kernels/dispatch.h"
#include "kernels/la_gemm.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemm_x16.h"
#include "kernels/int8_gemm.h"
#include "kernels/ops_simd.h"
#include "kernels/x86_avx2/attention_avx2.h"
#include "kernels/x86_avx2/avx2.h"
#include "kernels/x86_avx2/avxvnni.h"

#ifndef KITE_ELT_OPS_REF
static const kern_elt_ops elt_avx2 = {
    .name = "avx2", .rmsnorm = kern_rmsnorm_avx2, .layernorm = kern_layernorm_avx2, .softmax = kern_softmax_avx2,
    .swiglu = kern_swiglu_avx2, .gelu = kern_gelu_avx2, .add = kern_add_avx2, .exp = kern_exp_avx2,
};
#endif

static const attn_ops attn_avx2 = {
    .name = "avx2", .dot = attn_dot_avx2, .dot_rows = attn_dot_rows_avx2, .axpy = attn_axpy_avx2,
    .axpy_rows = attn_axpy_rows_avx2, .axpy_rows_multi = attn_axpy_rows_multi_avx2, .scale = attn_scale_avx2,
    .exp_sum = attn_exp_sum_avx2, .max = attn_max_avx2, .transpose = attn_transpose_avx2,
    .deq_f16 = attn_deq_f16_avx2, .deq_q8_0 = attn_deq_q8_0_avx2, .deq_q4_0 = attn_deq_q4_0_avx2,
};

void kern_register_avx2(kern_ops_table *t) {
    kern_set_dot(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_avx2, gemm_f32_avx2);
    kern_set_dot(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_avx2, gemm_f16_f32_avx2);
    kern_set_dot(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_avx2, gemm_bf16_f32_avx2);
    kern_set_dot(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_avx2, gemm_q4_0_q8_0_avx2);
    kern_set_dot(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_avx2, gemm_q8_0_q8_0_avx2);
    kern_set_dot(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_avx2, gemm_q4_K_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_avx2, gemm_q6_K_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_Q5_K, KITE_DTYPE_Q8_K, vec_dot_q5_K_q8_K_avx2, gemm_q5_K_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_IQ4_XS, KITE_DTYPE_Q8_K, vec_dot_iq4_xs_q8_K_avx2, gemm_iq4_xs_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_IQ4_NL, KITE_DTYPE_Q8_0, vec_dot_iq4_nl_q8_0_avx2, gemm_iq4_nl_q8_0_avx2);
    kern_set_dot(t, KITE_DTYPE_Q5_0, KITE_DTYPE_Q8_0, vec_dot_q5_0_q8_0_avx2, gemm_q5_0_q8_0_avx2);
    kern_set_dot(t, KITE_DTYPE_Q4_1, KITE_DTYPE_Q8_0, vec_dot_q4_1_q8_0_avx2, gemm_q4_1_q8_0_avx2);
    kern_set_dot(t, KITE_DTYPE_Q5_1, KITE_DTYPE_Q8_0, vec_dot_q5_1_q8_0_avx2, gemm_q5_1_q8_0_avx2);
    kern_set_dot(t, KITE_DTYPE_Q3_K, KITE_DTYPE_Q8_K, vec_dot_q3_K_q8_K_avx2, gemm_q3_K_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_Q2_K, KITE_DTYPE_Q8_K, vec_dot_q2_K_q8_K_avx2, gemm_q2_K_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_TQ1_0, KITE_DTYPE_Q8_K, vec_dot_tq1_0_q8_K_avx2, gemm_tq1_0_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_TQ2_0, KITE_DTYPE_Q8_K, vec_dot_tq2_0_q8_K_avx2, gemm_tq2_0_q8_K_avx2);
    kern_set_dot(t, KITE_DTYPE_W8A8, KITE_DTYPE_W8A8, vec_dot_w8a8_avx2, gemm_w8a8_avx2);
    kern_set_dot(t, KITE_DTYPE_LLM_INT8, KITE_DTYPE_W8A8, vec_dot_w8a8_avx2, gemm_w8a8_avx2); /* its int8 half */
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_avx2; /* same bytes as the reference */
    t->act_from_f32[KITE_DTYPE_W8A8] = act_quantize_w8a8_avx2; /* same bytes as w8_quantize_row */
    /* 16-row groups: q4_0 with vpmaddubsw (its nibbles keep the int16 pair sums exact); the other x16
     * types keep the plain layout at this level (their reference kernels would not pay) */
    t->ops[KITE_DTYPE_Q4_0].x16 = gemm_x16_q4_0_avx2;
    t->ops[KITE_DTYPE_Q4_0].repack = true;
    if (cpu_features()->avxvnni) { /* variant: VEX vpdpbusd instead of vpmaddubsw + vpmaddwd */
        kern_set_dot(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_avxvnni, gemm_q4_0_q8_0_avxvnni);
        kern_set_dot(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_avxvnni, gemm_q8_0_q8_0_avxvnni);
    }
    t->ops[KITE_DTYPE_F32].tiled = gemm_tiled_f32_avx2;
    t->ops[KITE_DTYPE_F16].tiled = gemm_tiled_f16_avx2;
    t->ops[KITE_DTYPE_BF16].tiled = gemm_tiled_bf16_avx2;
#ifndef KITE_ELT_OPS_REF
    t->elt = &elt_avx2;
#endif
    t->attn = &attn_avx2;
    t->la = &kern_la_avx2;
}
#else
typedef int kite_empty_unit_register_avx2; /* ISO C wants a declaration */
#endif
