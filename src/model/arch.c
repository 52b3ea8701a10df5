/* arch.c - tensor role names and the architecture table (see arch.h).
 * A role a row does not list is absent for that architecture. */
#include "model/arch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

/* llama.cpp's LLM_TENSOR_* names: one spelling per role, for every
 * architecture.  stem "." kind is the base name (string concatenation). */
#define ROLE(stem, kind) {stem, stem "." kind}
static const struct {
    const char *stem; /* "ffn_down" */
    const char *base; /* "ffn_down.weight" */
} roles[TR_COUNT] = {
    [TR_TOKEN_EMBD] = ROLE("token_embd", "weight"),
    [TR_POS_EMBD] = ROLE("position_embd", "weight"),
    [TR_OUTPUT_NORM] = ROLE("output_norm", "weight"),
    [TR_OUTPUT_NORM_B] = ROLE("output_norm", "bias"),
    [TR_OUTPUT] = ROLE("output", "weight"),
    [TR_ROPE_FREQS] = ROLE("rope_freqs", "weight"),
    [TR_ROPE_FACTORS_LONG] = ROLE("rope_factors_long", "weight"),
    [TR_ROPE_FACTORS_SHORT] = ROLE("rope_factors_short", "weight"),
    [TR_ATTN_NORM] = ROLE("attn_norm", "weight"),
    [TR_ATTN_NORM_B] = ROLE("attn_norm", "bias"),
    [TR_ATTN_Q] = ROLE("attn_q", "weight"),
    [TR_ATTN_K] = ROLE("attn_k", "weight"),
    [TR_ATTN_V] = ROLE("attn_v", "weight"),
    [TR_ATTN_QKV] = ROLE("attn_qkv", "weight"),
    [TR_ATTN_Q_B] = ROLE("attn_q", "bias"),
    [TR_ATTN_K_B] = ROLE("attn_k", "bias"),
    [TR_ATTN_V_B] = ROLE("attn_v", "bias"),
    [TR_ATTN_QKV_B] = ROLE("attn_qkv", "bias"),
    [TR_ATTN_Q_NORM] = ROLE("attn_q_norm", "weight"),
    [TR_ATTN_K_NORM] = ROLE("attn_k_norm", "weight"),
    [TR_ATTN_OUT] = ROLE("attn_output", "weight"),
    [TR_ATTN_OUT_B] = ROLE("attn_output", "bias"),
    [TR_ATTN_POST_NORM] = ROLE("post_attention_norm", "weight"),
    [TR_FFN_NORM] = ROLE("ffn_norm", "weight"),
    [TR_FFN_NORM_B] = ROLE("ffn_norm", "bias"),
    [TR_FFN_GATE] = ROLE("ffn_gate", "weight"),
    [TR_FFN_UP] = ROLE("ffn_up", "weight"),
    [TR_FFN_UP_B] = ROLE("ffn_up", "bias"),
    [TR_FFN_DOWN] = ROLE("ffn_down", "weight"),
    [TR_FFN_DOWN_B] = ROLE("ffn_down", "bias"),
    [TR_FFN_GATE_INP] = ROLE("ffn_gate_inp", "weight"),
    [TR_FFN_GATE_EXPS] = ROLE("ffn_gate_exps", "weight"),
    [TR_FFN_UP_EXPS] = ROLE("ffn_up_exps", "weight"),
    [TR_FFN_DOWN_EXPS] = ROLE("ffn_down_exps", "weight"),
    [TR_FFN_POST_NORM] = ROLE("post_ffw_norm", "weight"),
};
#undef ROLE

#define LAYER_PREFIX "blk."

/* Role sets of the rows. */
#define COMMON_ROLES                                                                                            \
    [TR_TOKEN_EMBD] = true, [TR_OUTPUT_NORM] = true, [TR_OUTPUT] = true, [TR_ATTN_NORM] = true,                  \
    [TR_ATTN_OUT] = true, [TR_FFN_NORM] = true, [TR_FFN_UP] = true, [TR_FFN_DOWN] = true
#define QKV_ROLES [TR_ATTN_Q] = true, [TR_ATTN_K] = true, [TR_ATTN_V] = true
#define QK_NORM_ROLES [TR_ATTN_Q_NORM] = true, [TR_ATTN_K_NORM] = true
#define MOE_ROLES                                                                                               \
    [TR_FFN_GATE_INP] = true, [TR_FFN_GATE_EXPS] = true, [TR_FFN_UP_EXPS] = true, [TR_FFN_DOWN_EXPS] = true
#define LLAMA_ROLES COMMON_ROLES, QKV_ROLES, MOE_ROLES, [TR_FFN_GATE] = true, [TR_ROPE_FREQS] = true

static const arch_info archs[] = {
    {.name = "llama", .rope_type = ROPE_NORM, .expert_norm = true, .has = {LLAMA_ROLES}},
    /* Mistral's GGUFs say "llama"; "mistral" is accepted as the same graph
     * (its sliding window comes from {arch}.attention.sliding_window) */
    {.name = "mistral", .rope_type = ROPE_NORM, .expert_norm = true, .has = {LLAMA_ROLES}},
    {.name = "qwen2", .rope_type = ROPE_NEOX, .qkv_bias = true,
     .has = {COMMON_ROLES, QKV_ROLES, [TR_FFN_GATE] = true, [TR_ATTN_Q_B] = true, [TR_ATTN_K_B] = true,
             [TR_ATTN_V_B] = true}},
    {.name = "qwen3", .rope_type = ROPE_NEOX, .qk_norm = true,
     .has = {COMMON_ROLES, QKV_ROLES, QK_NORM_ROLES, [TR_FFN_GATE] = true}},
    {.name = "qwen3moe", .rope_type = ROPE_NEOX, .qk_norm = true, .moe_required = true, .expert_norm = true,
     .has = {COMMON_ROLES, QKV_ROLES, QK_NORM_ROLES, MOE_ROLES}},
    {.name = "gpt2", .rope_type = ROPE_NORM, .norm_type = NORM_LAYER, .ffn_type = FFN_GELU, .fused_qkv = true,
     .biases = true, .pos_embd = true,
     .has = {COMMON_ROLES, [TR_POS_EMBD] = true, [TR_OUTPUT_NORM_B] = true, [TR_ATTN_NORM_B] = true,
             [TR_ATTN_QKV] = true, [TR_ATTN_QKV_B] = true, [TR_ATTN_OUT_B] = true, [TR_FFN_NORM_B] = true,
             [TR_FFN_UP_B] = true, [TR_FFN_DOWN_B] = true}},
    /* Phi-3 / Phi-3.5 / Phi-4: llama's graph with fused q/k/v and gate/up
     * matrices, NEOX rope with LongRoPE factors (rope_factors_long/short)
     * and a sliding window from phi3.attention.sliding_window */
    {.name = "phi3", .rope_type = ROPE_NEOX, .fused_qkv = true, .fused_gate_up = true,
     .has = {COMMON_ROLES, [TR_ATTN_QKV] = true, [TR_ROPE_FACTORS_LONG] = true, [TR_ROPE_FACTORS_SHORT] = true}},
    /* Gemma 2: GeGLU FFN, RMSNorm before and after attention and FFN (the
     * GGUF's gains already hold Gemma's 1 + w), embeddings x sqrt(n_embd),
     * attention and final logit soft-capping, NEOX rope, tied classifier,
     * a window on the even layers (llama.cpp's il % 2 == 0) */
    {.name = "gemma2", .rope_type = ROPE_NEOX, .ffn_type = FFN_GEGLU, .gemma2 = true, .swa_period = 2,
     .has = {COMMON_ROLES, QKV_ROLES, [TR_FFN_GATE] = true, [TR_ATTN_POST_NORM] = true, [TR_FFN_POST_NORM] = true}},
};
#define N_ARCHS (sizeof archs / sizeof archs[0])

const arch_info *arch_find(const char *name) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

const arch_info *arch_at(size_t i) { return i < N_ARCHS ? &archs[i] : NULL; }

static char supported[256];
static pthread_once_t supported_once = PTHREAD_ONCE_INIT;

static void build_supported(void) {
    size_t len = 0;
    for (size_t i = 0; i < N_ARCHS; i++) {
        int k = snprintf(supported + len, sizeof supported - len, "%s%s", i ? ", " : "", archs[i].name);
        KITE_ASSERT(k >= 0 && (size_t)k < sizeof supported - len); /* else the table outgrew the buffer */
        len += (size_t)k;
    }
}

const char *arch_supported_list(void) {
    pthread_once(&supported_once, build_supported);
    return supported;
}

static bool role_ok(int role) { return role >= 0 && role < TR_COUNT; }

bool arch_has_role(const arch_info *ai, int role) { return role_ok(role) && ai->has[role]; }

bool arch_role_per_layer(int role) { return role >= TR_ATTN_NORM && role < TR_COUNT; }

const char *arch_role_base(int role) { return role_ok(role) ? roles[role].base : NULL; }

const char *arch_role_stem(int role) { return role_ok(role) ? roles[role].stem : NULL; }

const char *arch_tensor_name(const arch_info *ai, int role, int layer, char *buf, size_t n) {
    if (!role_ok(role) || (ai && !ai->has[role]) || arch_role_per_layer(role) != (layer >= 0)) return NULL;
    int k = layer >= 0 ? snprintf(buf, n, LAYER_PREFIX "%d.%s", layer, roles[role].base)
                       : snprintf(buf, n, "%s", roles[role].base);
    return k >= 0 && (size_t)k < n ? buf : NULL;
}

int arch_name_layer(const char *name) {
    const size_t np = sizeof LAYER_PREFIX - 1;
    if (strncmp(name, LAYER_PREFIX, np) != 0) return -1;
    char *end;
    long l = strtol(name + np, &end, 10);
    if (end == name + np || *end != '.' || l < 0 || l > 1000000) return -1;
    return (int)l;
}

int arch_parse_name(const char *name, int *layer) {
    const int l = arch_name_layer(name);
    const char *base = name;
    if (l >= 0) base = strchr(name + sizeof LAYER_PREFIX - 1, '.') + 1;
    for (int r = 0; r < TR_COUNT; r++)
        if (arch_role_per_layer(r) == (l >= 0) && !strcmp(base, roles[r].base)) {
            if (layer) *layer = l;
            return r;
        }
    if (layer) *layer = -1;
    return TR_NONE;
}
