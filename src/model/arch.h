/*
 * arch.h - per-architecture tables: tensor names and fixed properties.
 *
 * Tensor names are data, not code: an architecture is a row of the table in
 * arch.c giving the GGUF name of every tensor role ("blk.%d." names take the
 * layer index) and the features of its graph (norm type, FFN type, which
 * optional tensors it has).  The forward pass works on roles and features,
 * so a new architecture that shares one of the graphs only needs a row here.
 * Names are llama.cpp's, so GGUF files of either project load in the other.
 */
#ifndef KITE_MODEL_ARCH_H
#define KITE_MODEL_ARCH_H

#include <stdbool.h>

enum tensor_role {
    /* global */
    TR_TOKEN_EMBD,
    TR_POS_EMBD,      /* learned positions (gpt2) */
    TR_OUTPUT_NORM,
    TR_OUTPUT_NORM_B, /* LayerNorm bias */
    TR_OUTPUT,
    TR_ROPE_FREQS,    /* Llama 3 rope frequency factors (optional) */
    /* per layer (from TR_ATTN_NORM on) */
    TR_ATTN_NORM,
    TR_ATTN_NORM_B,
    TR_ATTN_Q,
    TR_ATTN_K,
    TR_ATTN_V,
    TR_ATTN_QKV,      /* fused q, k, v rows (gpt2) */
    TR_ATTN_Q_B,
    TR_ATTN_K_B,
    TR_ATTN_V_B,
    TR_ATTN_QKV_B,
    TR_ATTN_Q_NORM,   /* per-head q RMSNorm (qwen3) */
    TR_ATTN_K_NORM,
    TR_ATTN_OUT,
    TR_ATTN_OUT_B,
    TR_FFN_NORM,
    TR_FFN_NORM_B,
    TR_FFN_GATE,
    TR_FFN_UP,
    TR_FFN_UP_B,
    TR_FFN_DOWN,
    TR_FFN_DOWN_B,
    TR_FFN_GATE_INP,  /* MoE router */
    TR_FFN_GATE_EXPS, /* MoE experts, 3-D [n_embd, n_ff_exp, n_expert] */
    TR_FFN_UP_EXPS,
    TR_FFN_DOWN_EXPS, /* [n_ff_exp, n_embd, n_expert] */
    TR_COUNT
};

typedef struct arch_info {
    const char *name;      /* general.architecture */
    int arch;              /* enum model_arch */
    int rope_type;         /* enum rope_type */
    int norm_type;         /* enum norm_type */
    int ffn_type;          /* enum ffn_type of the dense FFN */
    bool qkv_bias;         /* attn_{q,k,v}.bias required (qwen2) */
    bool qk_norm;          /* attn_{q,k}_norm required (qwen3, qwen3moe) */
    bool fused_qkv;        /* attn_qkv (+bias) instead of attn_q/k/v (gpt2) */
    bool biases;           /* LayerNorm, attn_output and FFN biases (gpt2) */
    bool pos_embd;         /* learned positions, no rope (gpt2) */
    bool moe_required;     /* expert_count must be > 0 (qwen3moe) */
    bool expert_norm;      /* default of {arch}.expert_weights_norm (llama.cpp's norm_w per arch) */
    /* GGUF tensor names; roles from TR_ATTN_NORM on are per layer and get the
     * prefix "blk.<layer>." (the same for every architecture llama.cpp knows) */
    const char *tensor_name[TR_COUNT];
} arch_info;

/* Table row of an architecture name, or NULL if kite does not support it. */
const arch_info *arch_find(const char *name);
/* "llama, ..." - the supported names, for error messages. */
const char *arch_supported_list(void);

#endif
