/*
 * mix.c - quantization recipes: llama.cpp's per-tensor type rules of its
 * llama_ftype mixes (Q4_K_M, ...) and the row-length fallbacks.
 *
 * DESIGN
 *   The recipe table maps a name to llama.cpp's ftype number and its default
 *   type.  quant_recipe_type() is a re-statement of the rules llama.cpp's
 *   llama_tensor_get_type() applies for those ftypes to LLaMA-family dense
 *   models (no experts, not Falcon, no importance matrix): which tensors get
 *   more bits.  The rules are written from llama.cpp's behaviour (checked
 *   against its files for stories260K, tests/unit/test_quantize.c), not
 *   copied.  Like llama.cpp's, they match role names (model/arch.h)
 *   inside tensor names, so they also apply to names kite does not load
 *   (ffn_down_exps, other architectures).  docs/quantization/rtn.md lists
 *   them as tables.  Only recipes whose types all have a reference
 *   quantizer in kite are offered (no IQ1/IQ2/IQ3 mixes, which also need an
 *   importance matrix in llama.cpp).
 *
 * THREAD SAFETY
 *   Pure functions over constant tables.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/arch.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

/* llama.cpp llama_ftype numbers (include/llama.h, append-only there). */
enum {
    FT_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q2_K = 10,
    FT_Q3_K_S = 11,
    FT_Q3_K_M = 12,
    FT_Q3_K_L = 13,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_IQ4_NL = 25,
    FT_IQ4_XS = 30,
    FT_BF16 = 32,
    FT_TQ1_0 = 36,
    FT_TQ2_0 = 37,
};

/* Order matters for quant_ftype_of_type: the first recipe with a base type
 * is that type's pure ftype (q3_K -> Q3_K_S, q4_K -> Q4_K_S, q5_K -> Q5_K_S). */
static const quant_recipe recipes[] = {
    {"f32", FT_F32, KITE_DTYPE_F32},       {"f16", FT_F16, KITE_DTYPE_F16},
    {"bf16", FT_BF16, KITE_DTYPE_BF16},    {"q4_0", FT_Q4_0, KITE_DTYPE_Q4_0},
    {"q4_1", FT_Q4_1, KITE_DTYPE_Q4_1},    {"q5_0", FT_Q5_0, KITE_DTYPE_Q5_0},
    {"q5_1", FT_Q5_1, KITE_DTYPE_Q5_1},    {"q8_0", FT_Q8_0, KITE_DTYPE_Q8_0},
    {"q2_k", FT_Q2_K, KITE_DTYPE_Q2_K},    {"q3_k_s", FT_Q3_K_S, KITE_DTYPE_Q3_K},
    {"q3_k_m", FT_Q3_K_M, KITE_DTYPE_Q3_K}, {"q3_k_l", FT_Q3_K_L, KITE_DTYPE_Q3_K},
    {"q4_k_s", FT_Q4_K_S, KITE_DTYPE_Q4_K}, {"q4_k_m", FT_Q4_K_M, KITE_DTYPE_Q4_K},
    {"q5_k_s", FT_Q5_K_S, KITE_DTYPE_Q5_K}, {"q5_k_m", FT_Q5_K_M, KITE_DTYPE_Q5_K},
    {"q6_k", FT_Q6_K, KITE_DTYPE_Q6_K},    {"iq4_nl", FT_IQ4_NL, KITE_DTYPE_IQ4_NL},
    {"iq4_xs", FT_IQ4_XS, KITE_DTYPE_IQ4_XS}, {"tq1_0", FT_TQ1_0, KITE_DTYPE_TQ1_0},
    {"tq2_0", FT_TQ2_0, KITE_DTYPE_TQ2_0},
};
#define N_RECIPES (sizeof recipes / sizeof recipes[0])

const quant_recipe *quant_recipe_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_RECIPES; i++)
        if (!strcasecmp(name, recipes[i].name)) return &recipes[i];
    return NULL;
}

const quant_recipe *quant_recipe_by_ftype_name(const char *name) {
    if (!name || !*name) return NULL;
    /* llama-quantize's short names: Q3_K, Q4_K, Q5_K are its _M mixes */
    static const char *const alias[][2] = {{"q3_k", "q3_k_m"}, {"q4_k", "q4_k_m"}, {"q5_k", "q5_k_m"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcasecmp(name, alias[i][0])) return quant_recipe_find(alias[i][1]);
    const char *d = name;
    while (*d >= '0' && *d <= '9') d++;
    if (*d == '\0' && d - name <= 4) { /* a number: the ftype itself */
        const uint32_t ft = (uint32_t)strtoul(name, NULL, 10);
        for (size_t i = 0; i < N_RECIPES; i++)
            if (recipes[i].ftype == ft) return &recipes[i];
        return NULL;
    }
    return quant_recipe_find(name);
}

const char *quant_recipe_list(void) {
    return "f32|f16|bf16|q4_0|q4_1|q5_0|q5_1|q8_0|q2_k|q3_k_s|q3_k_m|q3_k_l|q4_k_s|q4_k_m|q5_k_s|q5_k_m|q6_k|"
           "iq4_nl|iq4_xs|tq1_0|tq2_0";
}

int64_t quant_ftype_of_type(uint32_t t) {
    for (size_t i = 0; i < N_RECIPES; i++)
        if (recipes[i].base == t) return recipes[i].ftype;
    return -1;
}

/* llama.cpp's "use more bits" layer set of its _M mixes: the first and last
 * eighth of the layers and every third layer in between. */
static bool more_bits(int32_t i, int32_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }
static bool has_base(const char *name, int role) { return has(name, arch_role_base(role)); } /* "attn_v.weight" */
static bool has_stem(const char *name, int role) { return has(name, arch_role_stem(role)); } /* "ffn_down" */
static bool is_role(const char *name, int role) { return !strcmp(name, arch_role_base(role)); }

static int32_t block_of(uint32_t t) {
    const dtype_traits *tr = dtype_get(t);
    return tr && tr->name ? tr->block_size : 1;
}

uint32_t quant_recipe_type(const quant_recipe *r, const quant_model_info *mi, const char *name, int64_t ne0,
                           int32_t layer_rank) {
    uint32_t t = r->base;
    const uint32_t ft = r->ftype;
    if (ft == FT_F32 || ft == FT_F16 || ft == FT_BF16) return t; /* not quantized: no rules */
    const int32_t n_layer = mi->n_layer > 0 ? mi->n_layer : 1;
    const int32_t i = layer_rank;

    if (is_role(name, TR_OUTPUT) || (!mi->has_output && is_role(name, TR_TOKEN_EMBD))) {
        /* the classifier: q8_0 when the default type does not fit, else q6_K
         * (unless the default is already q8_0) */
        if (ne0 % block_of(t) != 0)
            t = KITE_DTYPE_Q8_0;
        else if (t != KITE_DTYPE_Q8_0)
            t = KITE_DTYPE_Q6_K;
    } else if (is_role(name, TR_TOKEN_EMBD)) {
        if (ft == FT_TQ1_0 || ft == FT_TQ2_0) t = KITE_DTYPE_Q4_K;
    } else if (has_base(name, TR_ATTN_V)) {
        if (ft == FT_Q2_K)
            t = mi->n_gqa >= 4 ? KITE_DTYPE_Q4_K : KITE_DTYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = i < 2 ? KITE_DTYPE_Q5_K : KITE_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = KITE_DTYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && mi->n_gqa >= 4)
            t = KITE_DTYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(i, mi->n_attn_v))
            t = KITE_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4)
            t = KITE_DTYPE_Q5_K;
        if (mi->is_70b && (t == KITE_DTYPE_Q3_K || t == KITE_DTYPE_Q4_K)) t = KITE_DTYPE_Q5_K;
    } else if (has_stem(name, TR_FFN_DOWN)) {
        if (ft == FT_Q2_K)
            t = KITE_DTYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = i < n_layer / 16 ? KITE_DTYPE_Q5_K : KITE_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = KITE_DTYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (more_bits(i, n_layer)) t = KITE_DTYPE_Q6_K;
        } else if (i < n_layer / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !mi->has_imatrix)
            t = KITE_DTYPE_Q5_K;
        else if (ft == FT_Q5_K_M && more_bits(i, n_layer))
            t = KITE_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < n_layer / 8)
            t = KITE_DTYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && mi->has_imatrix && i < n_layer / 8)
            /* llama.cpp guards the first ffn_down layers with the offset types, only with an imatrix */
            t = ft == FT_Q4_0 ? KITE_DTYPE_Q4_1 : KITE_DTYPE_Q5_1;
    } else if (has_base(name, TR_ATTN_OUT)) {
        if (ft == FT_Q2_K)
            t = KITE_DTYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = KITE_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = KITE_DTYPE_Q5_K;
    } else if (has_base(name, TR_ATTN_QKV)) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L)
            t = KITE_DTYPE_Q4_K;
        else if (ft == FT_Q4_K_M)
            t = KITE_DTYPE_Q5_K;
        else if (ft == FT_Q5_K_M)
            t = KITE_DTYPE_Q6_K;
    }
    return t;
}

uint32_t quant_fallback(uint32_t type, int64_t ne0) {
    if (ne0 % block_of(type) == 0) return type;
    uint32_t t;
    switch (type) {
    case KITE_DTYPE_TQ1_0:
    case KITE_DTYPE_TQ2_0: t = KITE_DTYPE_Q4_0; break;
    case KITE_DTYPE_Q2_K:
    case KITE_DTYPE_Q3_K:
    case KITE_DTYPE_IQ4_XS: t = KITE_DTYPE_IQ4_NL; break;
    case KITE_DTYPE_Q4_K: t = KITE_DTYPE_Q5_0; break;
    case KITE_DTYPE_Q5_K: t = KITE_DTYPE_Q5_1; break;
    case KITE_DTYPE_Q6_K: t = KITE_DTYPE_Q8_0; break;
    default: t = KITE_DTYPE_F16; break; /* kite: 32-element types (llama.cpp refuses) */
    }
    if (ne0 % block_of(t) != 0) t = KITE_DTYPE_F16;
    return t;
}

bool quant_tensor_is_matrix(const char *name, uint32_t n_dims) {
    size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 6, "weight") != 0) return false;
    if (n_dims < 2) return false;
    /* norms (any "<x>_norm.weight", also of roles kite lacks), the MoE router and learned positions stay */
    if (has(name, "_norm.weight") || has_base(name, TR_FFN_GATE_INP)) return false;
    if (is_role(name, TR_POS_EMBD) || !strcmp(name, "token_types.weight")) return false;
    return true;
}
