/*
 * register.c - the scalar level of the kernel registry (dispatch.h): the
 * reference kernels of this folder, the specification every ISA level is
 * tested against, and the base every other level starts from.
 *
 * A type without a vec_dot here takes kern_matmul's generic path (its
 * dtype traits' to_float, then the f32 dot); it keeps act_type F32.
 * Thread safety: called once by the table builder (kern_tables_build).
 */
#include <string.h>

#include "kernels/attention_simd.h"
#include "kernels/dispatch.h"
#include "kernels/la_gemm.h"
#include "kernels/gemm_x16.h"
#include "kernels/gemm_x32.h"
#include "kernels/int8_gemm.h"
#include "kernels/ops_simd.h"
#include "kernels/ref/ref.h"

static const kern_elt_ops elt_scalar = {
    .name = "scalar", .rmsnorm = kern_rmsnorm_ref, .layernorm = kern_layernorm_ref, .softmax = kern_softmax_ref,
    .swiglu = kern_swiglu_ref, .gelu = kern_gelu_ref, .add = kern_add_ref, .exp = kern_exp_ref,
};

static const attn_ops attn_scalar = {
    .name = "scalar", .dot = attn_dot_ref, .dot_rows = attn_dot_rows_ref, .axpy = attn_axpy_ref,
    .axpy_rows = attn_axpy_rows_ref, .axpy_rows_multi = attn_axpy_rows_multi_ref, .scale = attn_scale_ref,
    .exp_sum = attn_exp_sum_ref, .max = attn_max_ref, .transpose = attn_transpose_ref,
    .deq_f16 = attn_deq_f16_ref, .deq_q8_0 = attn_deq_q8_0_ref, .deq_q4_0 = attn_deq_q4_0_ref,
};

void kern_register_scalar(kern_ops_table *t) {
    for (int i = 0; i < KITE_DTYPE_COUNT; i++) t->ops[i].act_type = KITE_DTYPE_F32; /* generic path */
    kern_set_dot(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_ref, gemm_f32_ref);
    kern_set_dot(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_ref, gemm_f16_f32_ref);
    kern_set_dot(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_ref, gemm_bf16_f32_ref);
    kern_set_dot(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_ref, gemm_q4_0_q8_0_ref);
    kern_set_dot(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_ref, gemm_q8_0_q8_0_ref);
    kern_set_dot(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_ref, gemm_q4_K_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_ref, gemm_q6_K_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_Q5_K, KITE_DTYPE_Q8_K, vec_dot_q5_K_q8_K_ref, gemm_q5_K_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_IQ4_XS, KITE_DTYPE_Q8_K, vec_dot_iq4_xs_q8_K_ref, gemm_iq4_xs_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_IQ4_NL, KITE_DTYPE_Q8_0, vec_dot_iq4_nl_q8_0_ref, gemm_iq4_nl_q8_0_ref);
    kern_set_dot(t, KITE_DTYPE_Q5_0, KITE_DTYPE_Q8_0, vec_dot_q5_0_q8_0_ref, gemm_q5_0_q8_0_ref);
    kern_set_dot(t, KITE_DTYPE_Q4_1, KITE_DTYPE_Q8_0, vec_dot_q4_1_q8_0_ref, gemm_q4_1_q8_0_ref);
    kern_set_dot(t, KITE_DTYPE_Q5_1, KITE_DTYPE_Q8_0, vec_dot_q5_1_q8_0_ref, gemm_q5_1_q8_0_ref);
    kern_set_dot(t, KITE_DTYPE_Q3_K, KITE_DTYPE_Q8_K, vec_dot_q3_K_q8_K_ref, gemm_q3_K_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_Q2_K, KITE_DTYPE_Q8_K, vec_dot_q2_K_q8_K_ref, gemm_q2_K_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_TQ1_0, KITE_DTYPE_Q8_K, vec_dot_tq1_0_q8_K_ref, gemm_tq1_0_q8_K_ref);
    kern_set_dot(t, KITE_DTYPE_TQ2_0, KITE_DTYPE_Q8_K, vec_dot_tq2_0_q8_K_ref, gemm_tq2_0_q8_K_ref);
    /* W8A8 (int8_gemm.h): per-token int8 activations in the weight's own row format */
    kern_set_dot(t, KITE_DTYPE_W8A8, KITE_DTYPE_W8A8, vec_dot_w8a8_ref, gemm_w8a8_ref);
    /* its int8 half; kern_matmul adds the outliers */
    kern_set_dot(t, KITE_DTYPE_LLM_INT8, KITE_DTYPE_W8A8, vec_dot_w8a8_ref, gemm_w8a8_ref);
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_ref;
    t->act_from_f32[KITE_DTYPE_Q8_K] = act_quantize_q8_K_ref;
    t->act_from_f32[KITE_DTYPE_W8A8] = act_quantize_w8a8;
    t->act_from_f32[KITE_DTYPE_BF16] = act_bf16_from_f32_ref; /* the x32 bf16 rows; bf16 weights take f32 here */
    /* interleaved layouts: the references run them at every level without a
     * SIMD kernel (repack stays false: repacking would not pay there) */
    t->ops[KITE_DTYPE_Q4_0].x16 = gemm_x16_q4_0_ref;
    t->ops[KITE_DTYPE_Q8_0].x16 = gemm_x16_q8_0_ref;
    t->ops[KITE_DTYPE_Q4_K].x16 = gemm_x16_q4_K_ref;
    t->ops[KITE_DTYPE_Q6_K].x16 = gemm_x16_q6_K_ref;
    t->ops[KITE_DTYPE_Q5_K].x16 = gemm_x16_q5_K_ref;
    t->ops[KITE_DTYPE_IQ4_XS].x16 = gemm_x16_iq4_xs_ref;
    t->ops[KITE_DTYPE_Q3_K].x16 = gemm_x16_q3_K_ref;
    t->ops[KITE_DTYPE_Q2_K].x16 = gemm_x16_q2_K_ref;
    t->ops[KITE_DTYPE_Q4_1].x16 = gemm_x16_q4_1_ref;
    t->ops[KITE_DTYPE_Q5_1].x16 = gemm_x16_q5_1_ref;
    t->ops[KITE_DTYPE_IQ4_NL].x16 = gemm_x16_iq4_nl_ref;
    t->ops[KITE_DTYPE_Q5_0].x16 = gemm_x16_q5_0_ref;
    t->ops[KITE_DTYPE_F16].x32 = gemm_x32_f16_ref;
    t->ops[KITE_DTYPE_BF16].x32 = gemm_x32_bf16_ref;
    /* no tiled prefill GEMM: the flat path (gemm_tiled_*_ref are its specification) */
    t->elt = &elt_scalar;
    t->attn = &attn_scalar;
    t->la = &kern_la_scalar;
}
