/*
 * register.c - the avx512, avx512vnni and avx512bf16 levels of the kernel
 * registry (dispatch.h), each over the level below: AVX-512 float kernels
 * and the 32-row f16/bf16 layout; VNNI integer kernels and the 16-row
 * layout; bf16 activations with vdpbf16ps.
 *
 * Compiled WITHOUT ISA flags (Makefile): it only stores addresses, and runs
 * on any CPU (every level's table is built, the CPU picks which one runs).
 * Thread safety: called once by the table builder (kern_tables_build).
 */
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/attention_simd.h"
#include "kernels/dispatch.h"
#include "kernels/la_gemm.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemm_x16.h"
#include "kernels/gemm_x32.h"
#include "kernels/int8_gemm.h"
#include "kernels/ops_simd.h"
#include "kernels/x86_avx2/attention_avx2.h"
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/avx512bf16.h"
#include "kernels/x86_avx512/kquant_vnni.h"

#ifndef KITE_ELT_OPS_REF
static const kern_elt_ops elt_avx512 = {
    .name = "avx512", .rmsnorm = kern_rmsnorm_avx512, .layernorm = kern_layernorm_avx512,
    .softmax = kern_softmax_avx512, .swiglu = kern_swiglu_avx512, .gelu = kern_gelu_avx512, .add = kern_add_avx512,
    .exp = kern_exp_avx512,
};
#endif

/* the avx2 loops, with attn_exp on 16 lanes and axpy_rows / axpy_rows_multi
 * on 16 columns (attention_avx512.c); the dots' 8-lane contract maps onto one
 * ymm register */
static const attn_ops attn_avx512 = {
    .name = "avx512", .dot = attn_dot_avx2, .dot_rows = attn_dot_rows_avx2, .axpy = attn_axpy_avx2,
    .axpy_rows = attn_axpy_rows_avx512, .axpy_rows_multi = attn_axpy_rows_multi_avx512, .scale = attn_scale_avx2,
    .exp_sum = attn_exp_sum_avx512, .max = attn_max_avx2, .transpose = attn_transpose_avx2,
    .deq_f16 = attn_deq_f16_avx2, .deq_q8_0 = attn_deq_q8_0_avx2, .deq_q4_0 = attn_deq_q4_0_avx2,
};

/* integer kernels stay the avx2 ones at this level */
void kern_register_avx512(kern_ops_table *t) {
    kern_set_dot(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_avx512, gemm_f32_avx512);
    kern_set_dot(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_avx512, gemm_f16_f32_avx512);
    kern_set_dot(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_avx512, gemm_bf16_f32_avx512);
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_avx512; /* same bytes as the reference */
    t->act_from_f32[KITE_DTYPE_W8A8] = act_quantize_w8a8_avx512; /* same bytes as w8_quantize_row */
    t->ops[KITE_DTYPE_F32].tiled = gemm_tiled_f32_avx512;
    t->ops[KITE_DTYPE_F16].tiled = gemm_tiled_f16_avx512;
    t->ops[KITE_DTYPE_BF16].tiled = gemm_tiled_bf16_avx512;
    /* 32-row groups: f16 pays from here; bf16 runs the FMA kernel on widened
     * pairs (repacking pays only at avx512bf16) */
    t->ops[KITE_DTYPE_F16].x32 = gemm_x32_f16_avx512;
    t->ops[KITE_DTYPE_F16].x32_f16_widen = gemm_x32_f16_widened_avx512;
    t->ops[KITE_DTYPE_F16].repack = true;
    t->ops[KITE_DTYPE_BF16].x32 = gemm_x32_bf16f_avx512;
    t->ops[KITE_DTYPE_BF16].x32_wide = true;
#ifndef KITE_ELT_OPS_REF
    t->elt = &elt_avx512;
#endif
    t->attn = &attn_avx512;
    t->la = &kern_la_avx512;
}

void kern_register_avx512vnni(kern_ops_table *t) {
    kern_set_dot(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_vnni, gemm_q4_0_q8_0_vnni);
    kern_set_dot(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_vnni, gemm_q8_0_q8_0_vnni);
    kern_set_dot(t, KITE_DTYPE_Q4_1, KITE_DTYPE_Q8_0, vec_dot_q4_1_q8_0_vnni, gemm_q4_1_q8_0_vnni);
    kern_set_dot(t, KITE_DTYPE_Q5_1, KITE_DTYPE_Q8_0, vec_dot_q5_1_q8_0_vnni, gemm_q5_1_q8_0_vnni);
    kern_set_dot(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_vnni, gemm_q4_K_q8_K_vnni);
    kern_set_dot(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_vnni, gemm_q6_K_q8_K_vnni);
    kern_set_dot(t, KITE_DTYPE_Q2_K, KITE_DTYPE_Q8_K, vec_dot_q2_K_q8_K_vnni, gemm_q2_K_q8_K_vnni);
    kern_set_dot(t, KITE_DTYPE_Q3_K, KITE_DTYPE_Q8_K, vec_dot_q3_K_q8_K_vnni, gemm_q3_K_q8_K_vnni);
    kern_set_dot(t, KITE_DTYPE_TQ1_0, KITE_DTYPE_Q8_K, vec_dot_tq1_0_q8_K_vnni, gemm_tq1_0_q8_K_vnni);
    kern_set_dot(t, KITE_DTYPE_TQ2_0, KITE_DTYPE_Q8_K, vec_dot_tq2_0_q8_K_vnni, gemm_tq2_0_q8_K_vnni);
    kern_set_dot(t, KITE_DTYPE_W8A8, KITE_DTYPE_W8A8, vec_dot_w8a8_vnni, gemm_w8a8_vnni);
    kern_set_dot(t, KITE_DTYPE_LLM_INT8, KITE_DTYPE_W8A8, vec_dot_w8a8_vnni, gemm_w8a8_vnni); /* its int8 half */
    t->ops[KITE_DTYPE_Q8_0].tiled = gemm_tiled_q8_0_vnni;
    t->ops[KITE_DTYPE_Q4_0].tiled = gemm_tiled_q4_0_vnni;
    /* 16-row groups: the VNNI kernels make repacking pay */
    t->ops[KITE_DTYPE_Q4_0].x16 = gemm_x16_q4_0_vnni;
    t->ops[KITE_DTYPE_Q8_0].x16 = gemm_x16_q8_0_vnni;
    t->ops[KITE_DTYPE_Q4_K].x16 = gemm_x16_q4_K_vnni;
    t->ops[KITE_DTYPE_Q6_K].x16 = gemm_x16_q6_K_vnni;
    t->ops[KITE_DTYPE_Q4_0].repack = t->ops[KITE_DTYPE_Q8_0].repack = true;
    t->ops[KITE_DTYPE_Q4_K].repack = t->ops[KITE_DTYPE_Q6_K].repack = true;
    t->ops[KITE_DTYPE_Q5_K].x16 = gemm_x16_q5_K_vnni;
    t->ops[KITE_DTYPE_IQ4_XS].x16 = gemm_x16_iq4_xs_vnni;
    t->ops[KITE_DTYPE_Q3_K].x16 = gemm_x16_q3_K_vnni;
    t->ops[KITE_DTYPE_Q2_K].x16 = gemm_x16_q2_K_vnni;
    t->ops[KITE_DTYPE_Q4_1].x16 = gemm_x16_q4_1_vnni;
    t->ops[KITE_DTYPE_Q5_1].x16 = gemm_x16_q5_1_vnni;
    t->ops[KITE_DTYPE_Q5_K].repack = t->ops[KITE_DTYPE_IQ4_XS].repack = true;
    t->ops[KITE_DTYPE_Q3_K].repack = t->ops[KITE_DTYPE_Q2_K].repack = true;
    t->ops[KITE_DTYPE_Q4_1].repack = t->ops[KITE_DTYPE_Q5_1].repack = true;
    t->ops[KITE_DTYPE_IQ4_NL].x16 = gemm_x16_iq4_nl_vnni;
    t->ops[KITE_DTYPE_Q5_0].x16 = gemm_x16_q5_0_vnni;
    t->ops[KITE_DTYPE_IQ4_NL].repack = t->ops[KITE_DTYPE_Q5_0].repack = true;
}

/* bf16 weights with bf16 activations (vdpbf16ps); f32/f16 keep f32 activations */
void kern_register_avx512bf16(kern_ops_table *t) {
    kern_set_dot(t, KITE_DTYPE_BF16, KITE_DTYPE_BF16, vec_dot_bf16_bf16_avx512bf16, gemm_bf16_bf16_avx512bf16);
    t->act_from_f32[KITE_DTYPE_BF16] = act_bf16_from_f32_avx512bf16; /* same bytes as the reference */
    t->ops[KITE_DTYPE_BF16].tiled = gemm_tiled_bf16_bf16_avx512bf16;
    /* x32: vdpbf16ps on the pairs, or the FMA kernel while KERN_OPT_BF16_FMA is on */
    t->ops[KITE_DTYPE_BF16].x32 = gemm_x32_bf16_avx512bf16;
    t->ops[KITE_DTYPE_BF16].x32_wide = false;
    t->ops[KITE_DTYPE_BF16].x32_bf16_fma = gemm_x32_bf16f_avx512;
    t->ops[KITE_DTYPE_BF16].repack = true;
}
#else
typedef int kite_empty_unit_register_avx512; /* ISO C wants a declaration */
#endif
