/*
 * hf_tensors.c - Hugging Face tensor names -> GGUF tensors, streamed.
 *
 * DESIGN
 *   hf_plan_build() walks the names a family's checkpoint must have
 *   (model.layers.N.self_attn.q_proj.weight, ...), checks each source shape
 *   against config.json, and registers one GGUF tensor per output with
 *   gguf_writer_add_tensor_cb.  An output reads 1 source matrix, or
 *   n_expert of them stacked along a third dimension (ffn_*_exps, as
 *   llama.cpp stores MoE experts), optionally transformed:
 *     - PERMUTE (llama family q/k, weights and biases): destination row r
 *       takes source row hf_permute_src_row(r, head_dim) - see hf_internal.h;
 *     - TRANSPOSE (GPT-2 Conv1D weights, stored [in, out]);
 *     - PLUS1 (Gemma 2's RMSNorm gains: HF computes x * (1 + w), GGUF stores
 *       1 + w, as llama.cpp's converter writes it).
 *   Phi-3's fused matrices are copied as they are: qkv_proj holds the q rows,
 *   then k, then v (attn_qkv), gate_up_proj the gate rows then the up rows
 *   (ffn_up, no ffn_gate), which is the row order kite and llama.cpp read;
 *   its rope is NEOX, so nothing is permuted.  Generated tensors (rope_freqs
 *   for llama3 scaling, rope_factors_long/short from a longrope config) come
 *   from floats computed or read from config.json.
 *   Rows are converted source dtype -> float -> output type one at a time
 *   into the writer's buffer (F16->F16 and BF16->BF16 are exact this way).
 *
 *   Output types follow llama.cpp's converter: 1-D tensors, *_norm.weight,
 *   biases, ffn_gate_inp and position_embd stay F32; other matrices get the
 *   requested type; Q8_0 falls back to F16 for rows that are not a multiple
 *   of 32.
 *
 * INVARIANTS
 *   Every source tensor is either consumed or on the ignore list; anything
 *   else is an error naming it (a checkpoint kite does not understand is
 *   not converted silently).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "convert/hf_internal.h"
#include "model/arch.h"
#include "tensor/dtype.h"

enum { XF_NONE, XF_PERMUTE, XF_TRANSPOSE, XF_PLUS1 };

typedef struct out_tensor {
    char name[ARCH_NAME_MAX];  /* GGUF name (of its role, model/arch.h) */
    uint32_t type;             /* output dtype */
    uint32_t n_dims;
    int64_t ne[4];             /* GGUF order, ne[0] contiguous */
    const st_tensor **src;     /* [n_src] source matrices (n_src > 1: stacked experts) */
    int n_src;
    int xform;                 /* XF_* */
    int64_t head_dim;          /* XF_PERMUTE: rows per head */
    float *gen;                /* generated data (rope_freqs), owned; NULL: from src */
    struct hf_plan *plan;
} out_tensor;

struct hf_plan {
    out_tensor *t;             /* [n] */
    int64_t n, cap;
    float *row, *tmp;          /* scratch: [max_cols] each */
    int64_t max_cols;
    bool *used;                /* [st_model_n_tensors] */
    const st_model *st;
    const hf_config *c;
    uint32_t out_type;
};

int64_t hf_permute_src_row(int64_t r, int64_t head_dim) {
    int64_t h = r / head_dim, w = r % head_dim, half = head_dim / 2;
    return h * head_dim + (w % 2) * half + w / 2;
}

void hf_plan_free(hf_plan *p) {
    if (!p) return;
    for (int64_t i = 0; i < p->n; i++) {
        free(p->t[i].src);
        free(p->t[i].gen);
    }
    free(p->t);
    free(p->row);
    free(p->tmp);
    free(p->used);
    free(p);
}

int64_t hf_plan_n_tensors(const hf_plan *p) { return p->n; }

/* ---- reading rows ---- */

static float load1(uint32_t dt, const uint8_t *p) {
    uint16_t h;
    float f;
    switch (dt) {
    case KITE_DTYPE_F32: memcpy(&f, p, 4); return f;
    case KITE_DTYPE_F16: memcpy(&h, p, 2); return fp16_to_fp32(h);
    default: memcpy(&h, p, 2); return bf16_to_fp32(h);
    }
}

static size_t elsize(uint32_t dt) { return dt == KITE_DTYPE_F32 ? 4 : 2; }

/* Row sr (of ncols elements) of a 2-D source [rows, ncols] (or the whole
 * vector of a 1-D one, sr == 0) as floats. */
static void src_row(const st_tensor *s, int64_t sr, int64_t ncols, float *dst) {
    const uint8_t *p = s->data + (size_t)sr * (size_t)ncols * elsize(s->dtype);
    dtype_get(s->dtype)->to_float(p, dst, ncols);
}

static int fill_rows(void *user, int64_t row0, int64_t n_rows, void *dst) {
    out_tensor *t = user;
    hf_plan *p = t->plan;
    const int64_t cols = t->ne[0];
    const int64_t rows_per_src = t->ne[1];
    const size_t rs = dtype_row_size(t->type, cols);
    const dtype_traits *out = dtype_get(t->type);
    for (int64_t i = 0; i < n_rows; i++) {
        int64_t r = row0 + i;
        float *row = p->row;
        if (t->gen) {
            row = t->gen + r * cols;
        } else {
            const st_tensor *s = t->src[r / rows_per_src];
            int64_t rr = r % rows_per_src;
            if (t->xform == XF_TRANSPOSE) {
                /* source [cols][rows_per_src]: destination row rr is source column rr */
                size_t es = elsize(s->dtype);
                for (int64_t k = 0; k < cols; k++)
                    row[k] = load1(s->dtype, s->data + ((size_t)k * (size_t)rows_per_src + (size_t)rr) * es);
            } else if (t->xform == XF_PERMUTE && t->n_dims == 1) {
                src_row(s, 0, cols, p->tmp);
                for (int64_t k = 0; k < cols; k++) row[k] = p->tmp[hf_permute_src_row(k, t->head_dim)];
            } else if (t->xform == XF_PERMUTE) {
                src_row(s, hf_permute_src_row(rr, t->head_dim), cols, row);
            } else {
                src_row(s, rr, cols, row);
                if (t->xform == XF_PLUS1)
                    for (int64_t k = 0; k < cols; k++) row[k] += 1.0f;
            }
        }
        out->from_float(row, (uint8_t *)dst + (size_t)i * rs, cols);
    }
    return KITE_OK;
}

/* ---- building the plan ---- */

static int64_t st_index(const st_model *st, const st_tensor *t) {
    size_t lo = 0, hi = st_model_n_tensors(st);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st_model_tensor(st, mid)->name, t->name);
        if (c == 0) return (int64_t)mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static uint32_t pick_type(const hf_plan *p, const char *name, uint32_t n_dims, int64_t ne0) {
    if (n_dims <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
        strstr(name, arch_role_stem(TR_FFN_GATE_INP)) || !strcmp(name, arch_role_base(TR_POS_EMBD)))
        return KITE_DTYPE_F32;
    if (p->out_type == KITE_DTYPE_Q8_0 && ne0 % 32 != 0) return KITE_DTYPE_F16;
    return p->out_type;
}

/* A new output tensor of a role (layer -1: a global role); NULL on OOM. */
static out_tensor *new_out(hf_plan *p, int role, int64_t layer) {
    char name[ARCH_NAME_MAX];
    /* any architecture's names: the checkpoint decides what is written */
    const char *named = arch_tensor_name(NULL, role, (int)layer, name, sizeof name);
    KITE_ASSERT(named); /* role constants; hf_config bounds the layer count (4096) */
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 64;
        out_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        p->t = t;
        p->cap = cap;
    }
    out_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->plan = p;
    return t;
}

/* Looks up a source tensor, checks its shape ([d0] or [d0, d1]; -1 = any)
 * and marks it used.  *out NULL (and KITE_OK) when absent and optional. */
static int take(hf_plan *p, const char *hf_name, bool required, int64_t d0, int64_t d1, const st_tensor **out) {
    const st_tensor *s = st_model_find(p->st, hf_name);
    *out = NULL;
    if (!s) {
        if (!required) return KITE_OK;
        return err_set(KITE_E_NOT_FOUND, "%s: tensor '%s' (needed by %s) is missing from the safetensors files",
                       p->c->dir, hf_name, p->c->model_type);
    }
    uint32_t nd = d1 < -1 ? 1 : 2; /* d1 == -2: a vector */
    if (s->n_dims != nd || (d0 >= 0 && s->shape[0] != d0) || (nd == 2 && d1 >= 0 && s->shape[1] != d1))
        return err_set(KITE_E_FORMAT, "%s: tensor '%s' has shape [%lld%s%lld], expected [%lld%s%lld] from config.json",
                       s->file, hf_name, (long long)s->shape[0], s->n_dims > 1 ? ", " : "",
                       s->n_dims > 1 ? (long long)s->shape[1] : 0LL, (long long)d0, nd > 1 ? ", " : "",
                       nd > 1 ? (long long)d1 : 0LL);
    if (s->n_dims == 0 || s->shape[s->n_dims - 1] == 0 || s->shape[0] == 0)
        return err_set(KITE_E_FORMAT, "%s: tensor '%s' is empty", s->file, hf_name);
    p->used[st_index(p->st, s)] = true;
    *out = s;
    return KITE_OK;
}

static int add_src(hf_plan *p, out_tensor *t, const st_tensor *s) {
    const st_tensor **a = realloc(t->src, (size_t)(t->n_src + 1) * sizeof *a);
    if (!a) return err_set(KITE_E_NOMEM, "out of memory");
    t->src = a;
    t->src[t->n_src++] = s;
    (void)p;
    return KITE_OK;
}

/* The GGUF tensor of a role (layer -1: global) from one HF tensor.  Vector: d1 == -2. */
static int map1(hf_plan *p, int role, int64_t layer, const char *hf_name, bool required, int64_t d0, int64_t d1,
                int xform) {
    const st_tensor *s;
    int rc = take(p, hf_name, required, d0, d1, &s);
    if (rc || !s) return rc;
    out_tensor *t = new_out(p, role, layer);
    if (!t) return err_set(KITE_E_NOMEM, "out of memory");
    if ((rc = add_src(p, t, s))) return rc;
    t->xform = xform;
    t->head_dim = p->c->head_dim;
    t->n_dims = s->n_dims;
    t->ne[0] = s->shape[s->n_dims - 1];
    t->ne[1] = s->n_dims > 1 ? s->shape[0] : 1;
    t->ne[2] = t->ne[3] = 1;
    if (xform == XF_TRANSPOSE) {
        t->ne[0] = s->shape[0];
        t->ne[1] = s->shape[1];
    }
    return KITE_OK;
}

/* n_expert HF matrices [d0, d1] named model.layers.<layer>.<group>.<e>.<leaf>
 * stacked into a GGUF tensor ne = [d1, d0, n_expert]. */
static int map_experts(hf_plan *p, int role, const char *group, const char *leaf, int64_t layer, int64_t d0,
                       int64_t d1) {
    out_tensor *t = new_out(p, role, layer);
    if (!t) return err_set(KITE_E_NOMEM, "out of memory");
    t->n_dims = 3;
    t->ne[0] = d1;
    t->ne[1] = d0;
    t->ne[2] = p->c->n_expert;
    t->ne[3] = 1;
    for (int64_t e = 0; e < p->c->n_expert; e++) {
        char name[256];
        snprintf(name, sizeof name, "model.layers.%d.%s.%d.%s", (int)layer, group, (int)e, leaf);
        const st_tensor *s;
        int rc = take(p, name, true, d0, d1, &s);
        if (rc || (rc = add_src(p, t, s))) return rc;
    }
    return KITE_OK;
}

/* The name the token embedding is read from.  With tie_word_embeddings one
 * matrix is both the embedding and the classifier, and a checkpoint may
 * store it under either name: safetensors' save_model keeps one of two
 * shared tensors (TinyStories-656K keeps only lm_head.weight, and records
 * the other in __metadata__).  A tied lm_head.weight then becomes
 * token_embd and no output tensor is written - what llama.cpp's converter
 * writes for such a file, and the loaders fall back to token_embd. */
static const char *embd_source(const hf_plan *p, const char *embd, bool *from_head /* OUT */) {
    *from_head = p->c->tie_embd && !st_model_find(p->st, embd) && st_model_find(p->st, "lm_head.weight");
    return *from_head ? "lm_head.weight" : embd;
}

static int map_llama_like(hf_plan *p) {
    const hf_config *c = p->c;
    const int64_t E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim, F = c->n_ff,
                  V = c->n_vocab ? c->n_vocab : -1, HD = c->head_dim;
    const int VEC = -2;
    const bool llama = c->family == HF_LLAMA, qk_norm = c->family == HF_QWEN3 || c->family == HF_QWEN3_MOE;
    const bool gemma2 = c->family == HF_GEMMA2, phi3 = c->family == HF_PHI3;
    const int qk_xf = llama ? XF_PERMUTE : XF_NONE;
    const int nx = gemma2 ? XF_PLUS1 : XF_NONE; /* the norms' gains */
    int rc;
    bool embd_from_head;
    const char *embd = embd_source(p, "model.embed_tokens.weight", &embd_from_head);
    if ((rc = map1(p, TR_TOKEN_EMBD, -1, embd, true, V, E, XF_NONE))) return rc;
    for (int64_t l = 0; l < c->n_layer; l++) {
        char h[160];
#define M(role, hh, req, d0, d1, xf)                                                                            \
    do {                                                                                                        \
        snprintf(h, sizeof h, "model.layers.%d.%s", (int)l, hh);                                                \
        if ((rc = map1(p, role, l, h, req, d0, d1, xf))) return rc;                                             \
    } while (0)
        M(TR_ATTN_NORM, "input_layernorm.weight", true, E, VEC, nx);
        if (phi3) { /* fused: q, k, v rows; gate, up rows */
            M(TR_ATTN_QKV, "self_attn.qkv_proj.weight", true, Q + 2 * KV, E, XF_NONE);
            M(TR_ATTN_OUT, "self_attn.o_proj.weight", true, E, Q, XF_NONE);
            M(TR_FFN_NORM, "post_attention_layernorm.weight", true, E, VEC, XF_NONE);
            M(TR_FFN_UP, "mlp.gate_up_proj.weight", true, 2 * F, E, XF_NONE);
            M(TR_FFN_DOWN, "mlp.down_proj.weight", true, E, F, XF_NONE);
            continue;
        }
        M(TR_ATTN_Q, "self_attn.q_proj.weight", true, Q, E, qk_xf);
        M(TR_ATTN_Q_B, "self_attn.q_proj.bias", c->family == HF_QWEN2, Q, VEC, qk_xf);
        /* permute k with n_head_kv heads: same head_dim, fewer rows */
        M(TR_ATTN_K, "self_attn.k_proj.weight", true, KV, E, qk_xf);
        M(TR_ATTN_K_B, "self_attn.k_proj.bias", c->family == HF_QWEN2, KV, VEC, qk_xf);
        M(TR_ATTN_V, "self_attn.v_proj.weight", true, KV, E, XF_NONE);
        M(TR_ATTN_V_B, "self_attn.v_proj.bias", c->family == HF_QWEN2, KV, VEC, XF_NONE);
        M(TR_ATTN_OUT, "self_attn.o_proj.weight", true, E, Q, XF_NONE);
        M(TR_ATTN_OUT_B, "self_attn.o_proj.bias", false, E, VEC, XF_NONE);
        if (qk_norm) {
            M(TR_ATTN_Q_NORM, "self_attn.q_norm.weight", true, HD, VEC, XF_NONE);
            M(TR_ATTN_K_NORM, "self_attn.k_norm.weight", true, HD, VEC, XF_NONE);
        }
        if (gemma2) { /* post_attention_layernorm is the attention's post-norm, the FFN has its own pair */
            M(TR_ATTN_POST_NORM, "post_attention_layernorm.weight", true, E, VEC, nx);
            M(TR_FFN_NORM, "pre_feedforward_layernorm.weight", true, E, VEC, nx);
            M(TR_FFN_POST_NORM, "post_feedforward_layernorm.weight", true, E, VEC, nx);
        } else {
            M(TR_FFN_NORM, "post_attention_layernorm.weight", true, E, VEC, XF_NONE);
        }
        if (c->n_expert && c->family == HF_LLAMA) {
            M(TR_FFN_GATE_INP, "block_sparse_moe.gate.weight", true, c->n_expert, E, XF_NONE);
            const char *grp = "block_sparse_moe.experts";
            if ((rc = map_experts(p, TR_FFN_GATE_EXPS, grp, "w1.weight", l, F, E))) return rc;
            if ((rc = map_experts(p, TR_FFN_DOWN_EXPS, grp, "w2.weight", l, E, F))) return rc;
            if ((rc = map_experts(p, TR_FFN_UP_EXPS, grp, "w3.weight", l, F, E))) return rc;
        } else if (c->n_expert) {
            const int64_t FE = c->n_ff_exp;
            M(TR_FFN_GATE_INP, "mlp.gate.weight", true, c->n_expert, E, XF_NONE);
            if ((rc = map_experts(p, TR_FFN_GATE_EXPS, "mlp.experts", "gate_proj.weight", l, FE, E))) return rc;
            if ((rc = map_experts(p, TR_FFN_DOWN_EXPS, "mlp.experts", "down_proj.weight", l, E, FE))) return rc;
            if ((rc = map_experts(p, TR_FFN_UP_EXPS, "mlp.experts", "up_proj.weight", l, FE, E))) return rc;
        } else {
            M(TR_FFN_GATE, "mlp.gate_proj.weight", true, F, E, XF_NONE);
            M(TR_FFN_DOWN, "mlp.down_proj.weight", true, E, F, XF_NONE);
            M(TR_FFN_UP, "mlp.up_proj.weight", true, F, E, XF_NONE);
        }
#undef M
    }
    if ((rc = map1(p, TR_OUTPUT_NORM, -1, "model.norm.weight", true, E, VEC, nx))) return rc;
    if (gemma2 && c->tie_embd) { /* a tied lm_head.weight (AutoAWQ keeps one) is skipped, as llama.cpp does */
        const st_tensor *lm = st_model_find(p->st, "lm_head.weight");
        if (lm && !embd_from_head) p->used[st_index(p->st, lm)] = true;
        return KITE_OK;
    }
    if (!embd_from_head && (rc = map1(p, TR_OUTPUT, -1, "lm_head.weight", !c->tie_embd, V, E, XF_NONE)))
        return rc;
    return KITE_OK;
}

static int map_gpt2(hf_plan *p) {
    const hf_config *c = p->c;
    const int64_t E = c->n_embd, F = c->n_ff, V = c->n_vocab ? c->n_vocab : -1;
    const int VEC = -2;
    const char *pre = st_model_find(p->st, "transformer.wte.weight") || st_model_find(p->st, "transformer.ln_f.weight")
                          ? "transformer."
                          : "";
    char h[160];
    int rc;
#define G(role, hh, req, d0, d1, xf)                                                                            \
    do {                                                                                                        \
        snprintf(h, sizeof h, "%s%s", pre, hh);                                                                 \
        if ((rc = map1(p, role, -1, h, req, d0, d1, xf))) return rc;                                            \
    } while (0)
    char wte[160];
    bool embd_from_head;
    snprintf(wte, sizeof wte, "%swte.weight", pre);
    const char *embd = embd_source(p, wte, &embd_from_head); /* output is written from it either way */
    (void)embd_from_head;
    if ((rc = map1(p, TR_TOKEN_EMBD, -1, embd, true, V, E, XF_NONE))) return rc;
    G(TR_POS_EMBD, "wpe.weight", true, -1, E, XF_NONE);
    for (int64_t l = 0; l < c->n_layer; l++) {
#define L(role, hh, d0, d1, xf)                                                                                 \
    do {                                                                                                        \
        snprintf(h, sizeof h, "%sh.%d.%s", pre, (int)l, hh);                                                    \
        if ((rc = map1(p, role, l, h, true, d0, d1, xf))) return rc;                                            \
    } while (0)
        L(TR_ATTN_NORM, "ln_1.weight", E, VEC, XF_NONE);
        L(TR_ATTN_NORM_B, "ln_1.bias", E, VEC, XF_NONE);
        L(TR_ATTN_QKV, "attn.c_attn.weight", E, 3 * E, XF_TRANSPOSE);
        L(TR_ATTN_QKV_B, "attn.c_attn.bias", 3 * E, VEC, XF_NONE);
        L(TR_ATTN_OUT, "attn.c_proj.weight", E, E, XF_TRANSPOSE);
        L(TR_ATTN_OUT_B, "attn.c_proj.bias", E, VEC, XF_NONE);
        L(TR_FFN_NORM, "ln_2.weight", E, VEC, XF_NONE);
        L(TR_FFN_NORM_B, "ln_2.bias", E, VEC, XF_NONE);
        L(TR_FFN_UP, "mlp.c_fc.weight", E, F, XF_TRANSPOSE);
        L(TR_FFN_UP_B, "mlp.c_fc.bias", F, VEC, XF_NONE);
        L(TR_FFN_DOWN, "mlp.c_proj.weight", F, E, XF_TRANSPOSE);
        L(TR_FFN_DOWN_B, "mlp.c_proj.bias", E, VEC, XF_NONE);
#undef L
    }
    G(TR_OUTPUT_NORM, "ln_f.weight", true, E, VEC, XF_NONE);
    G(TR_OUTPUT_NORM_B, "ln_f.bias", true, E, VEC, XF_NONE);
#undef G
    /* GPT-2's classifier is the token embedding: written again as output.weight, as llama.cpp does. */
    out_tensor *t = new_out(p, TR_OUTPUT, -1);
    if (!t) return err_set(KITE_E_NOMEM, "out of memory");
    const out_tensor *emb = &p->t[0];
    const st_tensor *s = emb->src[0];
    t->n_dims = 2;
    memcpy(t->ne, emb->ne, sizeof t->ne);
    if ((rc = add_src(p, t, s))) return rc;
    /* lm_head.weight, when present, is the same tied matrix */
    const st_tensor *lm = st_model_find(p->st, "lm_head.weight");
    if (lm) p->used[st_index(p->st, lm)] = true;
    return KITE_OK;
}

/* A generated F32 vector of n floats for a global role (from: its values, or
 * NULL to fill t->gen afterwards). */
static out_tensor *new_gen_vector(hf_plan *p, int role, int64_t n, const float *from) {
    out_tensor *t = new_out(p, role, -1);
    if (!t) return NULL;
    if (!(t->gen = malloc((size_t)n * sizeof *t->gen))) return NULL;
    if (from) memcpy(t->gen, from, (size_t)n * sizeof *t->gen);
    t->n_dims = 1;
    t->ne[0] = n;
    t->ne[1] = t->ne[2] = t->ne[3] = 1;
    return t;
}

/* longrope (phi3): config.json's factor lists, as llama.cpp's rope_factors_long/short tensors. */
static int add_rope_factors(hf_plan *p) {
    const hf_config *c = p->c;
    if (!new_gen_vector(p, TR_ROPE_FACTORS_LONG, c->n_rot / 2, c->rope_long) ||
        !new_gen_vector(p, TR_ROPE_FACTORS_SHORT, c->n_rot / 2, c->rope_short))
        return err_set(KITE_E_NOMEM, "out of memory");
    return KITE_OK;
}

/* llama3 rope_scaling: per-frequency divisors, as llama.cpp's rope_freqs tensor. */
static int add_rope_freqs(hf_plan *p) {
    const hf_config *c = p->c;
    int64_t n = c->head_dim / 2;
    out_tensor *t = new_gen_vector(p, TR_ROPE_FREQS, n, NULL);
    if (!t) return err_set(KITE_E_NOMEM, "out of memory");
    const float base = c->has_rope_theta ? (float)c->rope_theta : 10000.0f;
    const float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq, hi = (float)c->rope_high_freq;
    const float old_ctx = (float)c->rope_orig_ctx;
    const float lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (int64_t i = 0; i < n; i++) {
        float freq = 1.0f / powf(base, (float)(2 * i) / (float)c->head_dim);
        float wavelen = 2.0f * (float)M_PI / freq;
        if (wavelen < hi_wavelen) {
            t->gen[i] = 1.0f;
        } else if (wavelen > lo_wavelen) {
            t->gen[i] = factor;
        } else {
            float smooth = (old_ctx / wavelen - lo) / (hi - lo);
            t->gen[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
    return KITE_OK;
}

static bool ignorable(const char *name) {
    return ends_with(name, ".rotary_emb.inv_freq") || ends_with(name, ".attn.bias") ||
           ends_with(name, ".attn.masked_bias");
}

int hf_plan_build(const hf_config *c, const st_model *st, uint32_t out_type, gguf_writer *w, hf_plan **out) {
    hf_plan *p = calloc(1, sizeof *p);
    size_t n_st = st_model_n_tensors(st);
    int rc = KITE_OK;
    if (!p || !(p->used = calloc(n_st ? n_st : 1, sizeof *p->used))) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    p->st = st;
    p->c = c;
    p->out_type = out_type;
    if (c->rope_scaling == 2 && (rc = add_rope_freqs(p))) goto fail;
    if (c->rope_scaling == 4 && (rc = add_rope_factors(p))) goto fail;
    rc = c->family == HF_GPT2 ? map_gpt2(p) : map_llama_like(p);
    if (rc) goto fail;
    for (size_t i = 0; i < n_st; i++) {
        const st_tensor *s = st_model_tensor(st, i);
        if (!p->used[i] && !ignorable(s->name)) {
            char nm[ST_PRINTABLE_MAX];
            rc = err_set(KITE_E_UNSUPPORTED, "%s: tensor '%s' is not used by the %s architecture (unexpected in this checkpoint)",
                         s->file, st_printable(s->name, nm), c->model_type);
            goto fail;
        }
    }
    for (int64_t i = 0; i < p->n; i++) {
        out_tensor *t = &p->t[i];
        t->plan = p; /* p->t may have moved while growing */
        t->type = pick_type(p, t->name, t->n_dims, t->ne[0]);
        if (t->ne[0] > p->max_cols) p->max_cols = t->ne[0];
    }
    if (!(p->row = malloc((size_t)p->max_cols * sizeof *p->row)) || !(p->tmp = malloc((size_t)p->max_cols * sizeof *p->tmp))) {
        rc = err_set(KITE_E_NOMEM, "out of memory for a row of %lld floats", (long long)p->max_cols);
        goto fail;
    }
    for (int64_t i = 0; i < p->n; i++) {
        out_tensor *t = &p->t[i];
        if ((rc = gguf_writer_add_tensor_cb(w, t->name, t->type, t->n_dims, t->ne, fill_rows, t))) {
            err_prefix(t->name);
            goto fail;
        }
    }
    *out = p;
    return KITE_OK;
fail:
    hf_plan_free(p);
    return rc;
}
