/*
 * moe.h - mixture-of-experts FFN of one layer (Mixtral, qwen3moe).
 *
 * DESIGN
 *   moe_route: router logits = gate_inp * x per token, softmax over the
 *   n_expert logits, top-k (k = n_expert_used) by descending probability
 *   (ties: lower expert id first), weights = the chosen probabilities,
 *   divided by their sum when hp.expert_norm is set (llama.cpp's norm_w,
 *   true for llama/Mixtral and qwen3moe).
 *   moe_experts: for each expert in id order, gather the rows of the tokens
 *   that chose it, run its SwiGLU FFN as one matmul per weight over those rows
 *   (so a prefill batch reads each chosen expert's weights once and experts no
 *   token chose are never read), and add weight * output to each token's
 *   accumulator row.  A token's sum runs over its experts in id order: its
 *   result depends only on its own row, never on the other tokens of the batch.
 *
 * BUFFERS
 *   ctx->moe_* (context.c) sized for n_batch tokens; hb/hb2 hold n_ff_exp
 *   columns.  Nothing is allocated here.
 */
#ifndef KITE_MODEL_MOE_H
#define KITE_MODEL_MOE_H

#include "model/context.h"

/* Fills ctx->moe_sel / ctx->moe_w ([n][n_expert_used]) for the n rows of x
 * ([n][n_embd], the ffn-normed input). */
void moe_route(kite_ctx *ctx, const layer_weights *L, const float *x, int32_t n);

/* out[t] = sum over t's chosen experts e of w_e * down_e(silu(gate_e x_t) * up_e x_t),
 * for the routing of the last moe_route call; out is [n][n_embd] and must not
 * alias x or the ctx->moe_x / hb / hb2 buffers.  layer: for ctx->expert_tap. */
void moe_experts(kite_ctx *ctx, const layer_weights *L, int32_t layer, const float *x, int32_t n, float *out);

#endif
