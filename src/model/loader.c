/*
 * loader.c - kite_model_load: GGUF file -> kite_model.
 *
 * Order: open and validate the container (src/gguf), build the vocabulary
 * (src/tokenizer), then - unless vocab-only - read the architecture's
 * hyperparameters and bind every tensor role of the arch table to a weight
 * view, checking its shape against the hyperparameters and that kite can
 * compute with its type.  Errors name the file and the key or tensor.
 * Nothing is left allocated on failure (one cleanup path: kite_model_free).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/dist.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/offload.h"
#include "tensor/dtype.h"
#include "tokenizer/vocab.h"

kite_model_params kite_model_default_params(void) {
    /* Heap reads, not mmap, by default: never slower on the development VMs
     * and reported 3-5x faster on some (docs/model.md has the figures);
     * use_mmap opts back in, e.g. for files too large to hold twice. */
    kite_model_params p = {.use_mmap = false, .vocab_only = false};
    return p;
}

void kite_model_free(kite_model *m) {
    if (!m) return;
    offload_free(m->offload); /* stops the I/O thread before the mapping goes */
    vocab_free(m->vocab);
    gguf_close(m->gguf);
    free(m->layers);
    free(m->vectors);
    free(m->shard_data);
    free(m->attn_phi);
    free(m->arch);
    free(m->name);
    free(m->path);
    free(m);
}

/* Reads "<arch>.<suffix>" as a positive int32.  Absent and required: error;
 * absent and optional: *out keeps its default. */
static int hparam_i32(const kite_model *m, const char *suffix, bool required, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    if (!gguf_get(m->gguf, key)) {
        if (!required) return KITE_OK;
        return err_set(KITE_E_NOT_FOUND, "%s: missing required key '%s'", m->path, key);
    }
    uint32_t v;
    if (gguf_get_u32(m->gguf, key, &v) != KITE_OK) {
        err_prefix(m->path);
        return KITE_E_FORMAT;
    }
    if (v == 0 || v > (1u << 24))
        return err_set(KITE_E_FORMAT, "%s: key '%s' = %u is out of range [1, %u]", m->path, key, v, 1u << 24);
    *out = (int32_t)v;
    return KITE_OK;
}

/* Reads an optional "<arch>.<suffix>" count in [0, max]; absent: *out keeps its default. */
static int hparam_count(const kite_model *m, const char *suffix, uint32_t max, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    if (!gguf_get(m->gguf, key)) return KITE_OK;
    uint32_t v;
    if (gguf_get_u32(m->gguf, key, &v) != KITE_OK) {
        err_prefix(m->path);
        return KITE_E_FORMAT;
    }
    if (v > max) return err_set(KITE_E_FORMAT, "%s: key '%s' = %u is out of range [0, %u]", m->path, key, v, max);
    *out = (int32_t)v;
    return KITE_OK;
}

static int hparam_f32(const kite_model *m, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    if (!gguf_get(m->gguf, key)) return KITE_OK;
    float v;
    if (gguf_get_f32(m->gguf, key, &v) != KITE_OK) {
        err_prefix(m->path);
        return KITE_E_FORMAT;
    }
    if (!isfinite(v) || v <= 0.0f)
        return err_set(KITE_E_FORMAT, "%s: key '%s' = %g must be a positive number", m->path, key, (double)v);
    *out = v;
    return KITE_OK;
}

/* {arch}.rope.scaling.type / .factor as llama.cpp writes them: "none" and
 * "linear" (positions divided by factor) are supported; Llama 3's scaling
 * comes as the rope_freqs tensor instead (bound in bind_weights). */
static int read_rope_scaling(const kite_model *m, float *scale_linear) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    gguf_str type;
    if (!gguf_get(m->gguf, key)) return KITE_OK;
    if (gguf_get_str(m->gguf, key, &type) != KITE_OK) {
        err_prefix(m->path);
        return KITE_E_FORMAT;
    }
    if (gguf_str_eq(type, "none")) return KITE_OK;
    if (!gguf_str_eq(type, "linear"))
        return err_set(KITE_E_UNSUPPORTED, "%s: %s = '%.*s' is not supported (none, linear; llama3 scaling comes as "
                       "the rope_freqs tensor)", m->path, key, (int)(type.len > 32 ? 32 : type.len), type.ptr);
    return hparam_f32(m, "rope.scaling.factor", scale_linear);
}

/* Phi-3 GGUFs written before llama.cpp stored phi3.attention.sliding_window
 * lack the key: the window is then the one those models were trained with,
 * by llama.cpp's rule (mini/medium 4k: 2047; mini 128k: 262144; medium 128k:
 * 131072).  A stored 0 means no window (Phi-4). */
static int phi3_window(kite_model *m) {
    model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch);
    if (gguf_get(m->gguf, key)) return KITE_OK;
    if ((hp->n_layer == 32 || hp->n_layer == 40) && hp->n_ctx_train == 4096) hp->sliding_window = 2047;
    else if (hp->n_layer == 32 && hp->n_head_kv == 32 && hp->n_ctx_train == 131072) hp->sliding_window = 262144;
    else if (hp->n_layer == 40 && hp->n_ctx_train == 131072) hp->sliding_window = 131072;
    else
        return err_set(KITE_E_FORMAT, "%s: missing %s (a phi3 model of unknown size: its window cannot be inferred)",
                       m->path, key);
    return KITE_OK;
}

/* Gemma 2 as llama.cpp reads it: the window defaults to 4096 (absent key),
 * both soft caps are read when present (absent: llama.cpp's defaults, 50
 * and 30), embeddings are scaled by sqrt(n_embd) and q by 1/sqrt(head_dim),
 * except for the 27B model (46 layers), whose query_pre_attn_scalar is
 * n_embd / n_head (llama.cpp picks the scale by layer count; the converter
 * writes no key for it). */
static int gemma2_hparams(kite_model *m) {
    model_hparams *hp = &m->hp;
    char key[128];
    int rc;
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch);
    if (!gguf_get(m->gguf, key)) hp->sliding_window = 4096;
    hp->attn_softcap = 50.0f;
    hp->final_softcap = 30.0f;
    if ((rc = hparam_f32(m, "attn_logit_softcapping", &hp->attn_softcap))) return rc;
    if ((rc = hparam_f32(m, "final_logit_softcapping", &hp->final_softcap))) return rc;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    if (hp->n_layer == 46) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    return KITE_OK;
}

static int read_hparams(kite_model *m, const arch_info *ai) {
    model_hparams *hp = &m->hp;
    int rc;
    hp->n_ctx_train = 2048;
    if ((rc = hparam_i32(m, "context_length", false, &hp->n_ctx_train))) return rc;
    if ((rc = hparam_i32(m, "embedding_length", true, &hp->n_embd))) return rc;
    if ((rc = hparam_i32(m, "block_count", true, &hp->n_layer))) return rc;
    if ((rc = hparam_i32(m, "feed_forward_length", true, &hp->n_ff))) return rc;
    if ((rc = hparam_i32(m, "attention.head_count", true, &hp->n_head))) return rc;
    hp->n_head_kv = hp->n_head;
    if ((rc = hparam_i32(m, "attention.head_count_kv", false, &hp->n_head_kv))) return rc;
    char key_length[128];
    snprintf(key_length, sizeof key_length, "%s.attention.key_length", m->arch);
    if (hp->n_embd % hp->n_head != 0 && !gguf_get(m->gguf, key_length))
        return err_set(KITE_E_FORMAT, "%s: %s.embedding_length %d is not a multiple of %s.attention.head_count %d",
                       m->path, m->arch, hp->n_embd, m->arch, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((rc = hparam_i32(m, "attention.key_length", false, &hp->head_dim))) return rc;
    int32_t v_len = hp->head_dim;
    if ((rc = hparam_i32(m, "attention.value_length", false, &v_len))) return rc;
    if (v_len != hp->head_dim)
        return err_set(KITE_E_UNSUPPORTED, "%s: %s.attention.value_length %d differs from key_length %d", m->path,
                       m->arch, v_len, hp->head_dim);
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return err_set(KITE_E_FORMAT, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
                       m->path, m->arch, hp->n_head, hp->n_head_kv);
    hp->n_rot = hp->head_dim;
    if ((rc = hparam_i32(m, "rope.dimension_count", false, &hp->n_rot))) return rc;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return err_set(KITE_E_FORMAT, "%s: %s.rope.dimension_count %d must be even and <= head size %d", m->path,
                       m->arch, hp->n_rot, hp->head_dim);
    hp->rms_eps = 1e-5f;
    if ((rc = hparam_f32(m, ai->norm_type == NORM_LAYER ? "attention.layer_norm_epsilon"
                                                         : "attention.layer_norm_rms_epsilon",
                         &hp->rms_eps)))
        return rc;
    hp->rope_freq_base = 10000.0f;
    if ((rc = hparam_f32(m, "rope.freq_base", &hp->rope_freq_base))) return rc;
    float scale_linear = 1.0f;
    if ((rc = hparam_f32(m, "rope.scale_linear", &scale_linear))) return rc;
    if ((rc = read_rope_scaling(m, &scale_linear))) return rc;
    hp->rope_freq_scale = 1.0f / scale_linear;
    hp->rope_attn_factor = 1.0f;
    if ((rc = hparam_f32(m, "rope.scaling.attn_factor", &hp->rope_attn_factor))) return rc;
    if (!(hp->rope_attn_factor > 0.0f && hp->rope_attn_factor < 100.0f))
        return err_set(KITE_E_FORMAT, "%s: %s.rope.scaling.attn_factor %g is out of range (0, 100)", m->path, m->arch,
                       (double)hp->rope_attn_factor);
    hp->n_ctx_orig = hp->n_ctx_train;
    if ((rc = hparam_i32(m, "rope.scaling.original_context_length", false, &hp->n_ctx_orig))) return rc;
    hp->rope_type = ai->rope_type;
    hp->norm_type = ai->norm_type;
    hp->ffn_type = ai->ffn_type;
    if (ai->pos_embd) hp->n_rot = 0; /* learned positions instead of rope */
    if ((rc = hparam_count(m, "attention.sliding_window", 1u << 24, &hp->sliding_window))) return rc;
    if (!strcmp(ai->name, "phi3") && (rc = phi3_window(m))) return rc;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    if (ai->gemma2 && (rc = gemma2_hparams(m))) return rc;
    if ((rc = hparam_count(m, "expert_count", 4096, &hp->n_expert))) return rc;
    if (ai->moe_required && hp->n_expert == 0)
        return err_set(KITE_E_FORMAT, "%s: %s.expert_count must be > 0 for architecture %s", m->path, m->arch,
                       m->arch);
    if (hp->n_expert > 0) {
        if ((rc = hparam_i32(m, "expert_used_count", true, &hp->n_expert_used))) return rc;
        if (hp->n_expert_used > hp->n_expert)
            return err_set(KITE_E_FORMAT, "%s: %s.expert_used_count %d exceeds expert_count %d", m->path, m->arch,
                           hp->n_expert_used, hp->n_expert);
        hp->n_ff_exp = hp->n_ff;
        if ((rc = hparam_i32(m, "expert_feed_forward_length", false, &hp->n_ff_exp))) return rc;
        char key[128];
        snprintf(key, sizeof key, "%s.expert_weights_norm", m->arch);
        hp->expert_norm = ai->expert_norm;
        if (gguf_get(m->gguf, key) && gguf_get_bool(m->gguf, key, &hp->expert_norm) != KITE_OK) {
            err_prefix(m->path);
            return KITE_E_FORMAT;
        }
    }
    hp->n_vocab = vocab_n_tokens(m->vocab);
    /* Bound the sizes so that every product below fits comfortably in int64. */
    if ((int64_t)hp->n_head * hp->head_dim > (1 << 20) || hp->n_layer > 4096)
        return err_set(KITE_E_FORMAT, "%s: implausible hyperparameters (n_head*head_dim %lld, n_layer %d)", m->path,
                       (long long)hp->n_head * hp->head_dim, hp->n_layer);
    return KITE_OK;
}

/* kite.attention.unified_max (written by `kite tune --attn-calib`,
 * docs/attention.md): float32[n_layer] (one phi per layer) or
 * float32[n_layer * n_head] (per layer, then per head), expanded into
 * m->attn_phi[n_layer][n_head].  Absent: m->attn_phi stays NULL (phi =
 * ATTN_PHI_DEFAULT).  Any other length or a non-finite value is a format
 * error: the kernel would stay exact, but such a file is not what kite wrote. */
static int read_unified_max(kite_model *m) {
    static const char key[] = "kite.attention.unified_max";
    if (!gguf_get(m->gguf, key)) return KITE_OK;
    gguf_array arr;
    if (gguf_get_arr(m->gguf, key, GGUF_VT_FLOAT32, &arr) != KITE_OK) {
        err_prefix(m->path);
        return KITE_E_FORMAT;
    }
    const int64_t nl = m->hp.n_layer, nh = m->hp.n_head;
    if ((int64_t)arr.n != nl && (int64_t)arr.n != nl * nh)
        return err_set(KITE_E_FORMAT, "%s: %s has %llu values; expected %lld (per layer) or %lld (per head)", m->path,
                       key, (unsigned long long)arr.n, (long long)nl, (long long)(nl * nh));
    const float *v = arr.data;
    for (uint64_t i = 0; i < arr.n; i++)
        if (!isfinite(v[i]))
            return err_set(KITE_E_FORMAT, "%s: %s[%llu] is not finite", m->path, key, (unsigned long long)i);
    m->attn_phi = malloc(sizeof(float) * (size_t)(nl * nh));
    if (!m->attn_phi) return err_set(KITE_E_NOMEM, "%s: out of memory", m->path);
    for (int64_t l = 0; l < nl; l++)
        for (int64_t h = 0; h < nh; h++) m->attn_phi[l * nh + h] = (int64_t)arr.n == nl ? v[l] : v[l * nh + h];
    return KITE_OK;
}

/* Finds the tensor of a role (layer < 0 for global ones) and checks its
 * shape [ne0, ne1, ne2] and type; a weight view of its first ne0 x ne1 slice. */
static int bind3(kite_model *m, const arch_info *ai, int role, int layer, int64_t ne0, int64_t ne1, int64_t ne2,
                 bool required, weight *w) {
    char name[ARCH_NAME_MAX];
    memset(w, 0, sizeof *w);
    if (!arch_tensor_name(ai, role, layer, name, sizeof name)) { /* the architecture has no such tensor */
        if (!required) return KITE_OK;
        return err_set(KITE_E_UNSUPPORTED, "%s: architecture %s has no tensor role %d", m->path, m->arch, role);
    }
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (!required) return KITE_OK;
        return err_set(KITE_E_NOT_FOUND, "%s: missing tensor '%s'", m->path, name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return err_set(KITE_E_FORMAT,
                       "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld] "
                       "(n_embd %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, n_vocab %d, n_expert %d, "
                       "n_ff_exp %d)",
                       m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1, (long long)ne2, m->hp.n_embd,
                       m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, m->hp.n_ff, m->hp.n_vocab, m->hp.n_expert,
                       m->hp.n_ff_exp);
    const dtype_traits *tr = dtype_get(t->type);
    if (!tr || !tr->to_float)
        return err_set(KITE_E_UNSUPPORTED, "%s: tensor '%s' has type %s, which kite cannot compute with yet",
                       m->path, name, dtype_name(t->type));
    w->type = t->type;
    w->ne[0] = ne0;
    w->ne[1] = ne1;
    w->row_bytes = dtype_row_size(t->type, ne0);
    w->data = t->data;
    return KITE_OK;
}

/* Finds the tensor of a role (layer < 0 for global ones) and checks its
 * shape [ne0, ne1] (ne1 == 1 for vectors) and type. */
static int bind(kite_model *m, const arch_info *ai, int role, int layer, int64_t ne0, int64_t ne1, bool required,
                weight *w) {
    return bind3(m, ai, role, layer, ne0, ne1, 1, required, w);
}

/* Binds a vector of n floats (required or optional) and converts it to float
 * into *dst (advanced by n); *out is NULL when an optional one is absent. */
static int bind_vec(kite_model *m, const arch_info *ai, int role, int layer, int64_t n, bool required, float **dst,
                    const float **out) {
    weight w;
    *out = NULL;
    int rc = bind(m, ai, role, layer, n, 1, required, &w);
    if (rc || !w.data) return rc;
    const dtype_traits *tr = dtype_get(w.type);
    tr->to_float(w.data, *dst, n);
    *out = *dst;
    *dst += n;
    return KITE_OK;
}

static int bind_vector(kite_model *m, const arch_info *ai, int role, int layer, int64_t n, float **dst,
                       const float **out) {
    return bind_vec(m, ai, role, layer, n, true, dst, out);
}

/* Rows [r0, r0 + n) of a matrix view (the q, k, v parts of a fused attn_qkv). */
static weight row_slice(const weight *w, int64_t r0, int64_t n) {
    weight v = *w;
    v.ne[1] = n;
    v.data = (const char *)w->data + (size_t)r0 * w->row_bytes;
    return v;
}

/* {arch}.attention.sliding_window_pattern, as llama.cpp writes and reads it:
 * an array of n_layer bools (true: the layer uses the sliding window), or an
 * integer period p (layer l is windowed when l % p < p - 1, so every p-th
 * layer is global: Gemma-3 is 6, Gemma-2 2; 0: every layer windowed, 1:
 * none, as llama.cpp's set_swa_pattern).
 * Absent: the architecture's default period (arch_info.swa_period: gemma2's
 * 2, as llama.cpp's il % 2 == 0 windowed), else every layer is windowed
 * (Mistral).  Sets layers[].full_attn and
 * n_swa_layers; a pattern without a window is ignored. */
static int read_swa_pattern(kite_model *m) {
    model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch);
    const gguf_value *v = gguf_get(m->gguf, key);
    hp->n_swa_layers = hp->sliding_window > 0 ? hp->n_layer : 0;
    if (hp->sliding_window == 0) return KITE_OK;
    if (!v) { /* the architecture's own pattern (arch_info.swa_period): gemma2's files carry no key */
        const int period = arch_find(m->arch)->swa_period;
        for (int32_t l = 0; l < hp->n_layer && period > 0; l++) m->layers[l].full_attn = l % period == period - 1;
    } else if (v->type == GGUF_VT_ARRAY) {
        gguf_array a;
        if (gguf_get_arr(m->gguf, key, GGUF_VT_BOOL, &a) != KITE_OK) {
            err_prefix(m->path);
            return KITE_E_FORMAT;
        }
        if (a.n != (uint64_t)hp->n_layer)
            return err_set(KITE_E_FORMAT, "%s: %s has %llu entries, the model has %d layers", m->path, key,
                           (unsigned long long)a.n, hp->n_layer);
        const uint8_t *b = a.data; /* GGUF bools are one byte */
        for (int32_t l = 0; l < hp->n_layer; l++) m->layers[l].full_attn = b[l] == 0;
    } else {
        uint32_t period;
        if (gguf_get_u32(m->gguf, key, &period) != KITE_OK) {
            err_prefix(m->path);
            return KITE_E_FORMAT;
        }
        for (int32_t l = 0; l < hp->n_layer && period > 0; l++)
            m->layers[l].full_attn = (uint32_t)l % period == period - 1;
    }
    for (int32_t l = 0; l < hp->n_layer; l++) hp->n_swa_layers -= m->layers[l].full_attn;
    return KITE_OK;
}

static int bind_weights(kite_model *m, const arch_info *ai) {
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, V = hp->n_vocab, HD = hp->head_dim;
    const bool moe = hp->n_expert > 0;
    int rc;
    /* float copies: norms and biases; an upper bound of what any architecture has */
    const size_t per_layer = 4 * (size_t)E + 2 * (size_t)Q + 2 * (size_t)KV + 2 * (size_t)HD + (size_t)F + 2 * (size_t)E;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    m->n_vector_bytes = sizeof(float) * (per_layer * (size_t)hp->n_layer + 2 * (size_t)E + 3 * ((size_t)hp->n_rot / 2) + 1);
    m->vectors = malloc(m->n_vector_bytes);
    if (!m->layers || !m->vectors) return err_set(KITE_E_NOMEM, "%s: out of memory for the layer table", m->path);
    float *vec = m->vectors;

    if ((rc = bind(m, ai, TR_TOKEN_EMBD, -1, E, V, true, &m->tok_embd))) return rc;
    if ((rc = bind(m, ai, TR_POS_EMBD, -1, E, hp->n_ctx_train, ai->pos_embd, &m->pos_embd))) return rc;
    if ((rc = bind_vector(m, ai, TR_OUTPUT_NORM, -1, E, &vec, &m->output_norm))) return rc;
    if ((rc = bind_vec(m, ai, TR_OUTPUT_NORM_B, -1, E, ai->biases, &vec, &m->output_norm_b))) return rc;
    if ((rc = bind(m, ai, TR_OUTPUT, -1, E, V, false, &m->output))) return rc;
    if (!m->output.data) m->output = m->tok_embd; /* tied classifier */
    if (hp->n_rot > 0 && (rc = bind_vec(m, ai, TR_ROPE_FREQS, -1, hp->n_rot / 2, false, &vec, &m->rope_freqs)))
        return rc;
    if (hp->n_rot > 0 && ((rc = bind_vec(m, ai, TR_ROPE_FACTORS_LONG, -1, hp->n_rot / 2, false, &vec, &m->rope_long)) ||
                          (rc = bind_vec(m, ai, TR_ROPE_FACTORS_SHORT, -1, hp->n_rot / 2, false, &vec, &m->rope_short))))
        return rc;
    if (!m->rope_long != !m->rope_short)
        return err_set(KITE_E_FORMAT, "%s: rope_factors_long.weight and rope_factors_short.weight come together (only "
                       "one is present)", m->path);
    for (int l = 0; l < hp->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        if ((rc = bind_vector(m, ai, TR_ATTN_NORM, l, E, &vec, &L->attn_norm))) return rc;
        if ((rc = bind_vec(m, ai, TR_ATTN_NORM_B, l, E, ai->biases, &vec, &L->attn_norm_b))) return rc;
        if (ai->fused_qkv) {
            weight qkv;
            const float *b = NULL;
            if ((rc = bind(m, ai, TR_ATTN_QKV, l, E, Q + 2 * KV, true, &qkv))) return rc;
            if ((rc = bind_vec(m, ai, TR_ATTN_QKV_B, l, Q + 2 * KV, ai->biases, &vec, &b))) return rc;
            L->wq = row_slice(&qkv, 0, Q);
            L->wk = row_slice(&qkv, Q, KV);
            L->wv = row_slice(&qkv, Q + KV, KV);
            if (b) {
                L->bq = b;
                L->bk = b + Q;
                L->bv = b + Q + KV;
            }
        } else {
            if ((rc = bind(m, ai, TR_ATTN_Q, l, E, Q, true, &L->wq))) return rc;
            if ((rc = bind(m, ai, TR_ATTN_K, l, E, KV, true, &L->wk))) return rc;
            if ((rc = bind(m, ai, TR_ATTN_V, l, E, KV, true, &L->wv))) return rc;
            if ((rc = bind_vec(m, ai, TR_ATTN_Q_B, l, Q, ai->qkv_bias, &vec, &L->bq))) return rc;
            if ((rc = bind_vec(m, ai, TR_ATTN_K_B, l, KV, ai->qkv_bias, &vec, &L->bk))) return rc;
            if ((rc = bind_vec(m, ai, TR_ATTN_V_B, l, KV, ai->qkv_bias, &vec, &L->bv))) return rc;
        }
        if ((rc = bind_vec(m, ai, TR_ATTN_Q_NORM, l, HD, ai->qk_norm, &vec, &L->q_norm))) return rc;
        if ((rc = bind_vec(m, ai, TR_ATTN_K_NORM, l, HD, ai->qk_norm, &vec, &L->k_norm))) return rc;
        if ((rc = bind(m, ai, TR_ATTN_OUT, l, Q, E, true, &L->wo))) return rc;
        if ((rc = bind_vec(m, ai, TR_ATTN_OUT_B, l, E, ai->biases, &vec, &L->bo))) return rc;
        if ((rc = bind_vec(m, ai, TR_ATTN_POST_NORM, l, E, ai->gemma2, &vec, &L->attn_post_norm))) return rc;
        if ((rc = bind_vec(m, ai, TR_FFN_POST_NORM, l, E, ai->gemma2, &vec, &L->ffn_post_norm))) return rc;
        if ((rc = bind_vector(m, ai, TR_FFN_NORM, l, E, &vec, &L->ffn_norm))) return rc;
        if ((rc = bind_vec(m, ai, TR_FFN_NORM_B, l, E, ai->biases, &vec, &L->ffn_norm_b))) return rc;
        if (moe) {
            const int64_t FE = hp->n_ff_exp, NE = hp->n_expert;
            if ((rc = bind(m, ai, TR_FFN_GATE_INP, l, E, NE, true, &L->gate_inp))) return rc;
            if ((rc = bind3(m, ai, TR_FFN_GATE_EXPS, l, E, FE, NE, true, &L->gate_exps))) return rc;
            if ((rc = bind3(m, ai, TR_FFN_UP_EXPS, l, E, FE, NE, true, &L->up_exps))) return rc;
            if ((rc = bind3(m, ai, TR_FFN_DOWN_EXPS, l, FE, E, NE, true, &L->down_exps))) return rc;
        } else {
            if (ai->fused_gate_up) { /* ffn_up: gate rows [0, F), then up rows [F, 2F) */
                weight gu;
                if ((rc = bind(m, ai, TR_FFN_UP, l, E, 2 * F, true, &gu))) return rc;
                L->w_gate = row_slice(&gu, 0, F);
                L->w_up = row_slice(&gu, F, F);
            } else {
                if (ai->ffn_type != FFN_GELU && (rc = bind(m, ai, TR_FFN_GATE, l, E, F, true, &L->w_gate)))
                    return rc;
                if ((rc = bind(m, ai, TR_FFN_UP, l, E, F, true, &L->w_up))) return rc;
            }
            if ((rc = bind(m, ai, TR_FFN_DOWN, l, F, E, true, &L->w_down))) return rc;
            if ((rc = bind_vec(m, ai, TR_FFN_UP_B, l, F, ai->biases, &vec, &L->b_up))) return rc;
            if ((rc = bind_vec(m, ai, TR_FFN_DOWN_B, l, E, ai->biases, &vec, &L->b_down))) return rc;
        }
    }
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->n_bytes += t->nbytes;
    }
    return KITE_OK;
}

static char *str_or_empty(const gguf_ctx *g, const char *key) {
    gguf_str s;
    if (gguf_get_str(g, key, &s) != KITE_OK) return strdup("");
    return gguf_str_dup(s);
}

int model_err_vocab_only(const char *path) {
    return err_set(KITE_E_STATE, "%s is a vocab-only GGUF (a vocabulary, no weights)", path ? path : "model");
}

int kite_model_load(const char *path, const kite_model_params *params, kite_model **out) {
    if (!path || !out) return err_set(KITE_E_ARG, "kite_model_load: path and out are required");
    kite_model_params p = params ? *params : kite_model_default_params();
    int rc = KITE_E_NOMEM;
    kite_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) goto oom;

    /* a budget maps the file (offload_setup reads what stays resident into its own arena), and so
     * does a tensor-split rank (it reads only the pages of its share, shard.c) */
    gguf_open_params gp = {.use_mmap = p.use_mmap || (p.mem_budget > 0 && !p.vocab_only) || p.tp_size > 1};
    if ((rc = gguf_open(path, &gp, &m->gguf))) goto fail;
    m->arch = str_or_empty(m->gguf, "general.architecture");
    m->name = str_or_empty(m->gguf, "general.name");
    if (!m->arch || !m->name) goto oom;
    if ((rc = vocab_load_gguf(m->gguf, &m->vocab))) goto fail;

    if (!p.vocab_only && m->gguf->n_tensors == 0) { /* every command that needs weights says so, from here */
        rc = model_err_vocab_only(path);
        goto fail;
    }
    if (p.vocab_only) {
        m->vocab_only = true;
        m->hp.n_vocab = vocab_n_tokens(m->vocab);
        *out = m;
        return KITE_OK;
    }
    if (!gguf_get(m->gguf, "general.architecture")) {
        rc = err_set(KITE_E_NOT_FOUND, "%s: missing required key 'general.architecture'", path);
        goto fail;
    }
    const arch_info *ai = arch_find(m->arch);
    if (!ai) {
        rc = err_set(KITE_E_UNSUPPORTED, "%s: general.architecture '%s' is not supported (supported: %s)", path,
                     m->arch, arch_supported_list());
        goto fail;
    }
    if ((rc = read_hparams(m, ai))) goto fail;
    if ((rc = read_unified_max(m))) goto fail;
    if ((rc = bind_weights(m, ai))) goto fail;
    if ((rc = read_swa_pattern(m))) goto fail;
    if (p.tp_size > 1 && p.tp_size != dist_size()) {
        rc = err_set(KITE_E_ARG, "%s: tensor split over %d ranks, but this process group has %d (start the ranks "
                     "with mpirun -np %d)", path, p.tp_size, dist_size(), p.tp_size);
        goto fail;
    }
    if (p.tp_size > 1 && p.mem_budget > 0) {
        rc = err_set(KITE_E_UNSUPPORTED, "%s: a memory budget with a tensor split is not supported yet", path);
        goto fail;
    }
    if ((rc = model_shard_tensor(m, p.tp_rank, p.tp_size > 1 ? p.tp_size : 1))) goto fail;
    m->n_resident = m->hp.n_layer;
    /* weights in writable memory (read into the heap, a ring slot, or a split model's own copies of its
     * layer matrices, shard.c, whatever the residency): what in-place repacking and bf16 rounding need */
    const bool writable = p.mem_budget > 0 || m->tp_size > 1 || strcmp(gguf_residency(m->gguf), "heap") == 0;
    const bool repack = !p.no_repack && writable;
    m->repack_streamed = repack; /* set before the I/O thread starts reading */
    if (p.f16_compute != KITE_F16_COMPUTE_EXACT && p.f16_compute != KITE_F16_COMPUTE_BF16) {
        rc = err_set(KITE_E_ARG, "%s: f16_compute %d is not exact (0) or bf16 (1)", path, (int)p.f16_compute);
        goto fail;
    }
    if (p.f16_compute == KITE_F16_COMPUTE_BF16 && !writable) {
        rc = err_set(KITE_E_ARG, "%s: f16 compute bf16 rounds the weights in memory: it needs them read into "
                     "memory, not a file mapping (drop --mmap / use_mmap)", path);
        goto fail;
    }
    m->f16_as_bf16 = p.f16_compute == KITE_F16_COMPUTE_BF16;
    if (p.mem_budget > 0) {
        if ((rc = offload_setup(m, p.mem_budget))) goto fail;
        m->n_resident = offload_get_plan(m->offload)->n_resident;
    }
    if (m->f16_as_bf16 && (rc = model_to_bf16(m))) goto fail;
    if (repack && (rc = model_repack(m))) goto fail;
    *out = m;
    return KITE_OK;
oom:
    rc = err_set(KITE_E_NOMEM, "%s: out of memory", path);
fail:
    kite_model_free(m);
    return rc;
}

void kite_model_get_info(const kite_model *m, kite_model_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = m->arch;
    info->name = m->name;
    info->n_vocab = m->hp.n_vocab;
    info->n_ctx_train = m->hp.n_ctx_train;
    info->n_embd = m->hp.n_embd;
    info->n_layer = m->hp.n_layer;
    info->sliding_window = m->hp.sliding_window;
    info->n_swa_layers = m->hp.n_swa_layers;
    const model_hparams *full = m->tp_size > 1 ? &m->hp_full : &m->hp; /* the model's, not this rank's share */
    info->n_head = full->n_head;
    info->n_head_kv = full->n_head_kv;
    info->n_ff = full->n_ff;
    info->n_params = m->n_params;
    info->n_bytes = m->n_bytes;
    info->vocab_only = m->vocab_only;
    info->residency = m->offload ? "offload" : gguf_residency(m->gguf);
    if (m->offload) {
        const offload_plan *pl = offload_get_plan(m->offload);
        info->mem_budget = pl->budget;
        info->resident_bytes = pl->resident;
        info->ring_bytes = (uint64_t)pl->n_slots * pl->slot_bytes;
        info->stream_bytes = pl->stream_bytes;
    }
    info->n_resident_layers = m->n_resident;
    info->n_repacked = m->n_repacked;
    info->repack_ms = m->repack_ms;
    info->n_f16_as_bf16 = m->n_f16_as_bf16;
    info->tp_size = m->tp_size > 1 ? m->tp_size : 1;
    info->n_bytes_split = m->shard_bytes;
    info->n_bytes_layers = m->shard_full_bytes;
}
