/* arch.c - architecture table (see arch.h).  Every row uses llama.cpp's
 * tensor names; a role a row does not name is absent for that architecture. */
#include "model/arch.h"

#include <string.h>

#include "model/model.h"

/* Names every architecture shares (llama.cpp's LLM_TENSOR_* strings). */
#define COMMON_NAMES                                                                                            \
    [TR_TOKEN_EMBD] = "token_embd.weight", [TR_OUTPUT_NORM] = "output_norm.weight",                              \
    [TR_OUTPUT] = "output.weight", [TR_ATTN_NORM] = "attn_norm.weight", [TR_ATTN_OUT] = "attn_output.weight",    \
    [TR_FFN_NORM] = "ffn_norm.weight", [TR_FFN_UP] = "ffn_up.weight", [TR_FFN_DOWN] = "ffn_down.weight"
#define QKV_NAMES [TR_ATTN_Q] = "attn_q.weight", [TR_ATTN_K] = "attn_k.weight", [TR_ATTN_V] = "attn_v.weight"
#define MOE_NAMES                                                                                               \
    [TR_FFN_GATE_INP] = "ffn_gate_inp.weight", [TR_FFN_GATE_EXPS] = "ffn_gate_exps.weight",                      \
    [TR_FFN_UP_EXPS] = "ffn_up_exps.weight", [TR_FFN_DOWN_EXPS] = "ffn_down_exps.weight"
#define LLAMA_NAMES                                                                                             \
    COMMON_NAMES, QKV_NAMES, MOE_NAMES, [TR_FFN_GATE] = "ffn_gate.weight", [TR_ROPE_FREQS] = "rope_freqs.weight"

static const arch_info archs[] = {
    {.name = "llama", .arch = ARCH_LLAMA, .rope_type = ROPE_NORM, .expert_norm = true,
     .tensor_name = {LLAMA_NAMES}},
    /* Mistral's GGUFs say "llama"; "mistral" is accepted as the same graph
     * (its sliding window comes from {arch}.attention.sliding_window) */
    {.name = "mistral", .arch = ARCH_LLAMA, .rope_type = ROPE_NORM, .expert_norm = true,
     .tensor_name = {LLAMA_NAMES}},
    {.name = "qwen2", .arch = ARCH_QWEN2, .rope_type = ROPE_NEOX, .qkv_bias = true,
     .tensor_name = {COMMON_NAMES, QKV_NAMES, [TR_FFN_GATE] = "ffn_gate.weight", [TR_ATTN_Q_B] = "attn_q.bias",
                     [TR_ATTN_K_B] = "attn_k.bias", [TR_ATTN_V_B] = "attn_v.bias"}},
    {.name = "qwen3", .arch = ARCH_QWEN3, .rope_type = ROPE_NEOX, .qk_norm = true,
     .tensor_name = {COMMON_NAMES, QKV_NAMES, [TR_FFN_GATE] = "ffn_gate.weight",
                     [TR_ATTN_Q_NORM] = "attn_q_norm.weight", [TR_ATTN_K_NORM] = "attn_k_norm.weight"}},
    {.name = "qwen3moe", .arch = ARCH_QWEN3MOE, .rope_type = ROPE_NEOX, .qk_norm = true, .moe_required = true,
     .expert_norm = true,
     .tensor_name = {COMMON_NAMES, QKV_NAMES, MOE_NAMES, [TR_ATTN_Q_NORM] = "attn_q_norm.weight",
                     [TR_ATTN_K_NORM] = "attn_k_norm.weight"}},
    {.name = "gpt2", .arch = ARCH_GPT2, .rope_type = ROPE_NORM, .norm_type = NORM_LAYER, .ffn_type = FFN_GELU,
     .fused_qkv = true, .biases = true, .pos_embd = true,
     .tensor_name = {COMMON_NAMES, [TR_POS_EMBD] = "position_embd.weight", [TR_OUTPUT_NORM_B] = "output_norm.bias",
                     [TR_ATTN_NORM_B] = "attn_norm.bias", [TR_ATTN_QKV] = "attn_qkv.weight",
                     [TR_ATTN_QKV_B] = "attn_qkv.bias", [TR_ATTN_OUT_B] = "attn_output.bias",
                     [TR_FFN_NORM_B] = "ffn_norm.bias", [TR_FFN_UP_B] = "ffn_up.bias",
                     [TR_FFN_DOWN_B] = "ffn_down.bias"}},
};

const arch_info *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

const char *arch_supported_list(void) { return "llama, mistral, qwen2, qwen3, qwen3moe, gpt2"; }
