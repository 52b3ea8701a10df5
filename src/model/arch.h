/*
 * arch.h - tensor roles and per-architecture tables.
 *
 * DESIGN
 *   Tensor names are data, not code, and live only here.  A tensor role
 *   (enum tensor_role) has one GGUF name for every architecture, llama.cpp's
 *   (its LLM_TENSOR_NAMES), so GGUF files of either project load in the
 *   other: roles from TR_ATTN_NORM on are per layer and are named
 *   "blk.<layer>.<base>" ("blk.3.attn_q.weight"), the others are named by
 *   their base alone ("output.weight").  An architecture is a row of the
 *   table in arch.c: the roles it has and the features of its graph (norm
 *   type, FFN type, which optional tensors are required).  The forward pass
 *   works on roles and features, so a new architecture that shares one of
 *   the graphs only needs a row there.
 *
 *   Every producer and consumer of tensor names goes through this header:
 *   the loader, the quantizers (their mix rules match role bases inside
 *   names, as llama.cpp's do), the synthetic model writer and the
 *   converters (llama2.c, Hugging Face).
 *
 * THREAD SAFETY
 *   Constant tables and pure functions; the supported-architecture list is
 *   built on first use under a pthread_once.
 */
#ifndef KITE_MODEL_ARCH_H
#define KITE_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

enum tensor_role {
    TR_NONE = -1,     /* not a role name (arch_parse_name) */
    /* global */
    TR_TOKEN_EMBD,
    TR_POS_EMBD,      /* learned positions (gpt2) */
    TR_OUTPUT_NORM,
    TR_OUTPUT_NORM_B, /* LayerNorm bias */
    TR_OUTPUT,
    TR_ROPE_FREQS,    /* Llama 3 rope frequency factors (optional) */
    TR_ROPE_FACTORS_LONG,  /* Phi-3 LongRoPE factors beyond the original context (optional) */
    TR_ROPE_FACTORS_SHORT, /* Phi-3 LongRoPE factors within it (optional) */
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
    TR_ATTN_POST_NORM, /* RMSNorm of the attention output before the residual add (gemma2) */
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
    TR_FFN_POST_NORM, /* RMSNorm of the FFN output before the residual add (gemma2) */
    TR_COUNT
};

#define ARCH_NAME_MAX 64 /* buffer size that holds every tensor name arch_tensor_name writes */

typedef struct arch_info {
    const char *name;      /* general.architecture */
    int rope_type;         /* enum rope_type */
    int norm_type;         /* enum norm_type */
    int ffn_type;          /* enum ffn_type of the dense FFN */
    bool qkv_bias;         /* attn_{q,k,v}.bias required (qwen2) */
    bool qk_norm;          /* attn_{q,k}_norm required (qwen3, qwen3moe) */
    bool fused_qkv;        /* attn_qkv (+bias) instead of attn_q/k/v (gpt2, phi3) */
    bool fused_gate_up;    /* ffn_up holds gate rows then up rows, no ffn_gate (phi3) */
    bool biases;           /* LayerNorm, attn_output and FFN biases (gpt2) */
    bool pos_embd;         /* learned positions, no rope (gpt2) */
    bool moe_required;     /* expert_count must be > 0 (qwen3moe) */
    bool expert_norm;      /* default of {arch}.expert_weights_norm (llama.cpp's norm_w per arch) */
    bool gemma2;           /* Gemma 2: embeddings x sqrt(n_embd), post-attention and post-FFN norms
                              (required), attention and final logit soft-capping, window 4096 on the
                              even layers unless the file says otherwise, 27B's query scale rule */
    int swa_period;        /* default of {arch}.attention.sliding_window_pattern when absent: 0 every
                              layer windowed (Mistral), p > 0 as the integer form (gemma2: 2) */
    bool has[TR_COUNT];    /* the roles this architecture can have (required or optional) */
} arch_info;

/* Table row of an architecture name, or NULL if kite does not support it. */
const arch_info *arch_find(const char *name);
/* Row i of the table (0 ..), NULL past the last: for listing and tests. */
const arch_info *arch_at(size_t i);
/* "llama, mistral, ..." - the table's names in table order, for error messages. */
const char *arch_supported_list(void);

/* Whether ai has the role (false for TR_NONE and out-of-range roles). */
bool arch_has_role(const arch_info *ai, int role);
/* Whether the role's tensors are per layer ("blk.<layer>." names). */
bool arch_role_per_layer(int role);
/* Name of the role without the layer prefix ("attn_q.weight"), or NULL for
 * an out-of-range role.  Mix rules match it inside tensor names. */
const char *arch_role_base(int role);
/* Base without its ".weight"/".bias" ending ("ffn_down"), or NULL for an
 * out-of-range role. */
const char *arch_role_stem(int role);

/* Writes the GGUF name of a role into buf (n bytes): "blk.<layer>.<base>"
 * for a per-layer role (layer >= 0), "<base>" for a global one (layer < 0).
 * Returns buf, or NULL (buf unspecified) when ai is not NULL and lacks the
 * role, the role is out of range, the layer does not fit the role's kind,
 * or the name does not fit.  ai NULL: any architecture's name. */
const char *arch_tensor_name(const arch_info *ai, int role, int layer, char *buf, size_t n);
/* Role of a GGUF tensor name and, in *layer (may be NULL), its layer (-1 for
 * a global role).  TR_NONE (and *layer -1) for a name that is no role's,
 * e.g. "blk.x.attn_q.weight", "blk.0.output.weight" or "token_types.weight".
 * Names are the same for every architecture, so no arch is needed. */
int arch_parse_name(const char *name, int *layer);
/* Layer of a "blk.<layer>.<anything>" name (any tensor, role or not), or
 * -1 when the name has no such prefix or the layer exceeds 1000000.  The
 * layer is read with strtol, as the quantizers always did, so "blk.03." is
 * layer 3 (such names do not round-trip; kite and llama.cpp write none). */
int arch_name_layer(const char *name);

#endif
