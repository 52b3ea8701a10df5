/*
 * hf_config.c - config.json -> hf_config -> GGUF hyperparameters.
 *
 * The architecture comes from "model_type" (or, if that is absent or
 * unknown, "architectures"[0]).  Keys follow llama.cpp's converter:
 * mistral and mixtral are written as GGUF arch "llama" (mixtral with
 * expert_count / expert_used_count), qwen3_moe as "qwen3moe", and optional
 * fields are written only when config.json has them (head_count_kv is always
 * written; it defaults to head_count).
 *
 * Sliding windows, as Hugging Face's model code applies them: "sliding_window"
 * (null or absent: none) on every layer for mistral and mixtral; qwen2/qwen3
 * only with "use_sliding_window" true (their configs carry a window that is
 * off by default), on the layers from "max_window_layers" on; a per-layer
 * "layer_types" list ("sliding_attention" / "full_attention") or a
 * "sliding_window_pattern" period p (every p-th layer global, Gemma-3) takes
 * precedence.  Written as {arch}.attention.sliding_window, plus
 * {arch}.attention.sliding_window_pattern (one bool per layer, llama.cpp's
 * form) when not every layer is windowed.  Plain llama ignores the key, as
 * Hugging Face's LlamaAttention does.  Gemma 2 windows its even layers
 * (Gemma2Attention's layer_idx % 2 == 0), which kite's loader and llama.cpp
 * assume for gemma2: no pattern key is written for it unless layer_types
 * says otherwise.
 *
 * Gemma 2 also gives attn_logit_softcapping and final_logit_softcapping
 * (written as {arch}.attn_logit_softcapping / final_logit_softcapping, as
 * llama.cpp's converter does), ties its embeddings unless told otherwise,
 * and query_pre_attn_scalar, which GGUF has no key for: llama.cpp scales q
 * by 1/sqrt(head_dim), or 1/sqrt(hidden_size / num_attention_heads) for
 * the 46-layer 27B model, so a config whose scalar is neither is refused.
 *
 * Phi-3 / Phi-3.5 / Phi-4 (Phi3ForCausalLM) rotate head_dim *
 * partial_rotary_factor dims (written as rope.dimension_count), always
 * write rope.scaling.original_context_length
 * (original_max_position_embeddings, Phi3Config's default 4096) and
 * attention.sliding_window (0 for a null window, llama.cpp's mark for "none").
 * A longrope (or its older name su) rope_scaling must give long_factor and
 * short_factor, n_rot / 2 positive numbers each; they become the
 * rope_factors_long/short tensors (hf_tensors.c) and rope.scaling.attn_factor
 * is rope_scaling's attention_factor, or as llama.cpp's converter and
 * transformers compute it: sqrt(1 + ln(s) / ln(original)) for s =
 * max_position_embeddings / original > 1, else 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "convert/hf_internal.h"

#define MAXDIM ((int64_t)1 << 24)

static const struct {
    const char *model_type, *hf_class;
    int family;
    const char *arch;
} families[] = {
    {"llama", "LlamaForCausalLM", HF_LLAMA, "llama"},
    {"mistral", "MistralForCausalLM", HF_LLAMA, "llama"},
    {"mixtral", "MixtralForCausalLM", HF_LLAMA, "llama"},
    {"qwen2", "Qwen2ForCausalLM", HF_QWEN2, "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", HF_QWEN3, "qwen3"},
    {"qwen3_moe", "Qwen3MoeForCausalLM", HF_QWEN3_MOE, "qwen3moe"},
    {"gpt2", "GPT2LMHeadModel", HF_GPT2, "gpt2"},
    {"gemma2", "Gemma2ForCausalLM", HF_GEMMA2, "gemma2"},
    {"phi3", "Phi3ForCausalLM", HF_PHI3, "phi3"},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

void hf_config_free(hf_config *c) {
    if (!c) return;
    cJSON_Delete(c->json);
    c->json = NULL;
    free(c->rope_long);
    free(c->rope_short);
    c->rope_long = c->rope_short = NULL;
}

/* Optional integer: keeps *out when absent; errors pass through. */
static int opt_int(const hf_config *c, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present) {
    int rc = hf_json_int(c->json, c->path, key, false, lo, hi, out);
    if (present) *present = rc == KITE_OK;
    return rc == KITE_E_NOT_FOUND ? KITE_OK : rc;
}

static int opt_num(const hf_config *c, const char *key, double *out, bool *present) {
    int rc = hf_json_num(c->json, c->path, key, false, out);
    if (present) *present = rc == KITE_OK;
    return rc == KITE_E_NOT_FOUND ? KITE_OK : rc;
}

static int find_family(hf_config *c) {
    const char *mt = hf_json_str(c->json, "model_type");
    for (size_t i = 0; mt && i < N_FAMILIES; i++)
        if (!strcmp(mt, families[i].model_type)) {
            c->family = families[i].family;
            c->arch = families[i].arch;
            snprintf(c->model_type, sizeof c->model_type, "%s", families[i].model_type);
            return KITE_OK;
        }
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c->json, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    for (size_t i = 0; cJSON_IsString(a0) && i < N_FAMILIES; i++)
        if (!strcmp(a0->valuestring, families[i].hf_class)) {
            c->family = families[i].family;
            c->arch = families[i].arch;
            snprintf(c->model_type, sizeof c->model_type, "%s", families[i].model_type);
            return KITE_OK;
        }
    char b1[ST_PRINTABLE_MAX], b2[ST_PRINTABLE_MAX];
    return err_set(KITE_E_UNSUPPORTED,
                   "%s: model_type '%s' (architectures[0] '%s') is not supported "
                   "(llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gpt2, gemma2, phi3)",
                   c->path, mt ? st_printable(mt, b1) : "(none)", cJSON_IsString(a0) ? st_printable(a0->valuestring, b2) : "(none)");
}

static int load_rope_scaling(hf_config *c) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->json, "rope_scaling");
    if (!rs || cJSON_IsNull(rs) || c->family == HF_PHI3) return KITE_OK; /* phi3: load_phi3 */
    if (!cJSON_IsObject(rs)) return err_set(KITE_E_FORMAT, "%s: 'rope_scaling' is not an object", c->path);
    const char *type = hf_json_str(rs, "rope_type");
    if (!type) type = hf_json_str(rs, "type");
    if (!type) return err_set(KITE_E_FORMAT, "%s: rope_scaling has no 'rope_type' or 'type'", c->path);
    char where[4200];
    snprintf(where, sizeof where, "%s: rope_scaling", c->path);
    int rc;
    if (!strcmp(type, "default")) return KITE_OK;
    if ((rc = hf_json_num(rs, where, "factor", true, &c->rope_factor))) return rc;
    if (!(c->rope_factor > 0)) return err_set(KITE_E_FORMAT, "%s: 'factor' must be positive", where);
    if (!strcmp(type, "linear")) {
        c->rope_scaling = 1;
    } else if (!strcmp(type, "llama3")) {
        c->rope_scaling = 2;
        c->rope_low_freq = 1.0;
        c->rope_high_freq = 4.0;
        c->rope_orig_ctx = 8192;
        if ((rc = hf_json_num(rs, where, "low_freq_factor", false, &c->rope_low_freq)) && rc != KITE_E_NOT_FOUND) return rc;
        if ((rc = hf_json_num(rs, where, "high_freq_factor", false, &c->rope_high_freq)) && rc != KITE_E_NOT_FOUND) return rc;
        if ((rc = hf_json_int(rs, where, "original_max_position_embeddings", false, 1, MAXDIM, &c->rope_orig_ctx)) &&
            rc != KITE_E_NOT_FOUND)
            return rc;
        if (!(c->rope_low_freq > 0) || !(c->rope_high_freq > c->rope_low_freq))
            return err_set(KITE_E_FORMAT, "%s: need 0 < low_freq_factor < high_freq_factor", where);
    } else if (!strcmp(type, "yarn")) {
        c->rope_scaling = 3;
        if ((rc = hf_json_int(rs, where, "original_max_position_embeddings", true, 1, MAXDIM, &c->rope_orig_ctx))) return rc;
    } else {
        char b[ST_PRINTABLE_MAX];
        return err_set(KITE_E_UNSUPPORTED, "%s: type '%s' is not supported (linear, llama3, yarn)", where,
                       st_printable(type, b));
    }
    return KITE_OK;
}

/* One LongRoPE factor list of rope_scaling (where: its location, for messages):
 * n_rot / 2 positive finite numbers into a new array *out. */
static int load_factors(const hf_config *c, const cJSON *rs, const char *where, const char *key, float **out) {
    const int64_t want = c->n_rot / 2;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(rs, key);
    if (!cJSON_IsArray(a))
        return err_set(KITE_E_FORMAT, "%s: longrope needs '%s', a list of %lld numbers (rotary dims %lld / 2)", where,
                       key, (long long)want, (long long)c->n_rot);
    int n = cJSON_GetArraySize(a);
    if (n != want)
        return err_set(KITE_E_FORMAT, "%s: '%s' has %d entries, expected %lld (rotary dims %lld / 2)", where, key, n,
                       (long long)want, (long long)c->n_rot);
    float *v = malloc((size_t)want * sizeof *v);
    if (!v) return err_set(KITE_E_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *x = a->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || !isfinite(x->valuedouble) || x->valuedouble > 1e30) {
            free(v);
            return err_set(KITE_E_FORMAT, "%s: %s[%d] must be a positive number", where, key, i);
        }
        v[i] = (float)x->valuedouble;
    }
    *out = v;
    return KITE_OK;
}

/* Phi-3's rotary dims, original context and LongRoPE (see the header);
 * after head_dim is known. */
static int load_phi3(hf_config *c) {
    double prf = 1.0;
    int rc;
    if ((rc = opt_num(c, "partial_rotary_factor", &prf, NULL))) return rc;
    if (!(prf > 0 && prf <= 1))
        return err_set(KITE_E_FORMAT, "%s: partial_rotary_factor %g must be in (0, 1]", c->path, prf);
    c->n_rot = (int64_t)((double)c->head_dim * prf);
    if (c->n_rot < 2 || c->n_rot % 2)
        return err_set(KITE_E_FORMAT, "%s: rotary dims %lld (head size %lld x partial_rotary_factor %g) must be even "
                       "and positive", c->path, (long long)c->n_rot, (long long)c->head_dim, prf);
    if (!c->n_ctx) c->n_ctx = 4096; /* Phi3Config's defaults */
    c->rope_orig_ctx = 4096;
    if ((rc = opt_int(c, "original_max_position_embeddings", 1, INT32_MAX, &c->rope_orig_ctx, NULL))) return rc;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->json, "rope_scaling");
    if (!rs || cJSON_IsNull(rs)) return KITE_OK;
    if (!cJSON_IsObject(rs)) return err_set(KITE_E_FORMAT, "%s: 'rope_scaling' is not an object", c->path);
    const char *type = hf_json_str(rs, "rope_type");
    if (!type) type = hf_json_str(rs, "type");
    if (!type) return err_set(KITE_E_FORMAT, "%s: rope_scaling has no 'rope_type' or 'type'", c->path);
    if (!strcmp(type, "default")) return KITE_OK;
    char where[4200];
    snprintf(where, sizeof where, "%s: rope_scaling", c->path);
    if (strcmp(type, "longrope") && strcmp(type, "su")) {
        char b[ST_PRINTABLE_MAX];
        return err_set(KITE_E_UNSUPPORTED, "%s: type '%s' is not supported for phi3 (longrope, su)", where,
                       st_printable(type, b));
    }
    c->rope_scaling = 4;
    if ((rc = load_factors(c, rs, where, "long_factor", &c->rope_long)) ||
        (rc = load_factors(c, rs, where, "short_factor", &c->rope_short)))
        return rc;
    const double scale = (double)c->n_ctx / (double)c->rope_orig_ctx;
    c->rope_attn_factor = scale > 1.0 && c->rope_orig_ctx > 1 ? sqrt(1.0 + log(scale) / log((double)c->rope_orig_ctx))
                                                              : 1.0;
    rc = hf_json_num(rs, where, "attention_factor", false, &c->rope_attn_factor);
    if (rc && rc != KITE_E_NOT_FOUND) return rc;
    if (!(c->rope_attn_factor > 0 && c->rope_attn_factor < 100))
        return err_set(KITE_E_FORMAT, "%s: attention_factor %g must be in (0, 100)", where, c->rope_attn_factor);
    return KITE_OK;
}

/* Reads the sliding window and its per-layer pattern (see the header). */
static int load_sliding_window(hf_config *c) {
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c->json, "sliding_window");
    if (!sw || cJSON_IsNull(sw) || !strcmp(c->model_type, "llama")) return KITE_OK;
    int64_t w = 0;
    int rc = hf_json_int(c->json, c->path, "sliding_window", true, 1, 1 << 24, &w);
    if (rc) return rc;
    const bool qwen = c->family == HF_QWEN2 || c->family == HF_QWEN3 || c->family == HF_QWEN3_MOE;
    const cJSON *use = cJSON_GetObjectItemCaseSensitive(c->json, "use_sliding_window");
    if (use && !cJSON_IsBool(use))
        return err_set(KITE_E_FORMAT, "%s: 'use_sliding_window' must be true or false", c->path);
    if (use ? cJSON_IsFalse(use) : qwen) return KITE_OK; /* declared but not applied */
    for (int64_t l = 0; l < c->n_layer; l++) c->swa_layers[l] = c->family == HF_GEMMA2 ? l % 2 == 0 : 1;
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(c->json, "layer_types");
    int64_t period = 0, first = 0;
    if (types && !cJSON_IsNull(types)) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->n_layer)
            return err_set(KITE_E_FORMAT, "%s: 'layer_types' must list the %lld layers", c->path,
                           (long long)c->n_layer);
        int64_t l = 0;
        for (const cJSON *t = types->child; t; t = t->next, l++) {
            const char *s = cJSON_IsString(t) ? t->valuestring : "";
            if (strcmp(s, "sliding_attention") && strcmp(s, "full_attention"))
                return err_set(KITE_E_UNSUPPORTED, "%s: layer_types[%lld] = '%.40s' (supported: sliding_attention, "
                               "full_attention)", c->path, (long long)l, s);
            c->swa_layers[l] = !strcmp(s, "sliding_attention");
        }
    } else if ((rc = opt_int(c, "sliding_window_pattern", 1, 4096, &period, NULL))) {
        return rc;
    } else if (period > 0) {
        for (int64_t l = 0; l < c->n_layer; l++) c->swa_layers[l] = l % period < period - 1;
    } else if (qwen) {
        if ((rc = opt_int(c, "max_window_layers", 0, 4096, &first, NULL))) return rc;
        for (int64_t l = 0; l < c->n_layer; l++) c->swa_layers[l] = l >= first;
    }
    for (int64_t l = 0; l < c->n_layer; l++) c->n_swa_layers += c->swa_layers[l];
    if (c->n_swa_layers > 0) c->sliding_window = w;
    return KITE_OK;
}

int hf_config_load(const char *dir, hf_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s/config.json", dir);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    int rc = hf_json_load(dir, "config.json", false, &c->json);
    if (rc) return rc;
    if ((rc = find_family(c))) goto fail;
    bool gpt2 = c->family == HF_GPT2;
    if ((rc = hf_json_int(c->json, c->path, gpt2 ? "n_embd" : "hidden_size", true, 1, MAXDIM, &c->n_embd)) ||
        (rc = hf_json_int(c->json, c->path, gpt2 ? "n_layer" : "num_hidden_layers", true, 1, 4096, &c->n_layer)) ||
        (rc = hf_json_int(c->json, c->path, gpt2 ? "n_head" : "num_attention_heads", true, 1, 65536, &c->n_head)))
        goto fail;
    if ((rc = opt_int(c, "vocab_size", 1, MAXDIM, &c->n_vocab, NULL))) goto fail;
    bool has_kv, has_ctx = false;
    c->n_head_kv = c->n_head;
    if (gpt2) {
        c->n_ff = 4 * c->n_embd;
        c->n_ctx = 1024;
        if ((rc = opt_int(c, "n_inner", 1, MAXDIM, &c->n_ff, NULL)) ||
            (rc = opt_int(c, "n_positions", 1, MAXDIM, &c->n_ctx, NULL)) ||
            (rc = opt_int(c, "n_ctx", 1, MAXDIM, &c->n_ctx, NULL)))
            goto fail;
        c->norm_eps = 1e-5;
        if ((rc = opt_num(c, "layer_norm_epsilon", &c->norm_eps, &c->has_norm_eps))) goto fail;
        c->has_norm_eps = true;
        c->tie_embd = true;
    } else {
        if ((rc = hf_json_int(c->json, c->path, "intermediate_size", true, 1, MAXDIM, &c->n_ff)) ||
            (rc = opt_int(c, "num_key_value_heads", 1, 65536, &c->n_head_kv, &has_kv)) ||
            (rc = opt_int(c, "max_position_embeddings", 1, INT32_MAX, &c->n_ctx, &has_ctx)) ||
            (rc = opt_int(c, "head_dim", 1, 65536, &c->head_dim, &c->has_head_dim)) ||
            (rc = opt_num(c, "rope_theta", &c->rope_theta, &c->has_rope_theta)) ||
            (rc = opt_num(c, "rms_norm_eps", &c->rms_eps, &c->has_rms_eps)))
            goto fail;
        (void)has_kv;
        if (!has_ctx) c->n_ctx = 0;
        const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c->json, "tie_word_embeddings");
        if (tie && !cJSON_IsBool(tie)) {
            rc = err_set(KITE_E_FORMAT, "%s: 'tie_word_embeddings' must be true or false", c->path);
            goto fail;
        }
        c->tie_embd = cJSON_IsTrue(tie);
        if (c->family == HF_LLAMA) {
            bool moe;
            if ((rc = opt_int(c, "num_local_experts", 1, 4096, &c->n_expert, &moe))) goto fail;
            if (moe && (rc = hf_json_int(c->json, c->path, "num_experts_per_tok", true, 1, c->n_expert, &c->n_expert_used)))
                goto fail;
        } else if (c->family == HF_QWEN3_MOE) {
            if ((rc = hf_json_int(c->json, c->path, "num_experts", true, 1, 4096, &c->n_expert)) ||
                (rc = hf_json_int(c->json, c->path, "num_experts_per_tok", true, 1, c->n_expert, &c->n_expert_used)) ||
                (rc = hf_json_int(c->json, c->path, "moe_intermediate_size", true, 1, MAXDIM, &c->n_ff_exp)))
                goto fail;
        }
        if (c->family == HF_GEMMA2) {
            if (!tie) c->tie_embd = true; /* Gemma2Config's default */
            if ((rc = opt_num(c, "attn_logit_softcapping", &c->attn_softcap, NULL)) ||
                (rc = opt_num(c, "final_logit_softcapping", &c->final_softcap, NULL)))
                goto fail;
            if (c->attn_softcap < 0 || c->final_softcap < 0) {
                rc = err_set(KITE_E_FORMAT, "%s: the soft caps must be positive", c->path);
                goto fail;
            }
        }
        if ((rc = load_rope_scaling(c))) goto fail;
        if ((rc = load_sliding_window(c))) goto fail;
    }
    if (!c->has_head_dim) {
        if (c->n_embd % c->n_head) {
            rc = err_set(KITE_E_FORMAT, "%s: hidden size %lld is not a multiple of the head count %lld (and no head_dim)",
                         c->path, (long long)c->n_embd, (long long)c->n_head);
            goto fail;
        }
        c->head_dim = c->n_embd / c->n_head;
    }
    if (c->n_head % c->n_head_kv) {
        rc = err_set(KITE_E_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld", c->path,
                     (long long)c->n_head, (long long)c->n_head_kv);
        goto fail;
    }
    if (c->family == HF_GEMMA2) {
        double qpas = (double)c->head_dim;
        if ((rc = opt_num(c, "query_pre_attn_scalar", &qpas, NULL))) goto fail;
        const double want = c->n_layer == 46 ? (double)(c->n_embd / c->n_head) : (double)c->head_dim;
        if (qpas != want) {
            rc = err_set(KITE_E_UNSUPPORTED, "%s: query_pre_attn_scalar %g: a GGUF gemma2 model is scaled by "
                         "1/sqrt(%g) (llama.cpp's rule for %lld layers; GGUF has no key for another value)",
                         c->path, qpas, want, (long long)c->n_layer);
            goto fail;
        }
    }
    if (c->family == HF_PHI3 && (rc = load_phi3(c))) goto fail;
    if (c->family == HF_LLAMA && c->head_dim % 2) {
        rc = err_set(KITE_E_FORMAT, "%s: head size %lld must be even for RoPE", c->path, (long long)c->head_dim);
        goto fail;
    }
    return KITE_OK;
fail:
    hf_config_free(c);
    return rc;
}

static int put_u32(gguf_writer *w, const hf_config *c, const char *key, int64_t v) {
    char k[96];
    snprintf(k, sizeof k, "%s.%s", c->arch, key);
    return gguf_writer_set_u32(w, k, (uint32_t)v);
}

static int put_f32(gguf_writer *w, const hf_config *c, const char *key, double v) {
    char k[96];
    snprintf(k, sizeof k, "%s.%s", c->arch, key);
    return gguf_writer_set_f32(w, k, (float)v);
}

static int put_str(gguf_writer *w, const hf_config *c, const char *key, const char *v) {
    char k[96];
    snprintf(k, sizeof k, "%s.%s", c->arch, key);
    return gguf_writer_set_str(w, k, v);
}

int hf_config_write(const hf_config *c, gguf_writer *w) {
    int rc = KITE_OK;
#define TRY(x)                                                                                                  \
    do {                                                                                                        \
        if ((rc = (x))) return err_set(rc, "out of memory writing hyperparameters");                            \
    } while (0)
    TRY(put_u32(w, c, "block_count", c->n_layer));
    if (c->n_ctx) TRY(put_u32(w, c, "context_length", c->n_ctx));
    TRY(put_u32(w, c, "embedding_length", c->n_embd));
    TRY(put_u32(w, c, "feed_forward_length", c->n_ff));
    TRY(put_u32(w, c, "attention.head_count", c->n_head));
    if (c->family == HF_GPT2) {
        TRY(put_f32(w, c, "attention.layer_norm_epsilon", c->norm_eps));
        return KITE_OK;
    }
    TRY(put_u32(w, c, "attention.head_count_kv", c->n_head_kv));
    if (c->has_rope_theta) TRY(put_f32(w, c, "rope.freq_base", c->rope_theta));
    if (c->has_rms_eps) TRY(put_f32(w, c, "attention.layer_norm_rms_epsilon", c->rms_eps));
    if (c->n_expert) {
        TRY(put_u32(w, c, "expert_count", c->n_expert));
        TRY(put_u32(w, c, "expert_used_count", c->n_expert_used));
    }
    if (c->has_head_dim) {
        TRY(put_u32(w, c, "attention.key_length", c->head_dim));
        TRY(put_u32(w, c, "attention.value_length", c->head_dim));
    }
    if (c->n_ff_exp) TRY(put_u32(w, c, "expert_feed_forward_length", c->n_ff_exp));
    /* phi3: always (0: none), as llama.cpp's converter marks Phi-4 */
    if (c->sliding_window || c->family == HF_PHI3) TRY(put_u32(w, c, "attention.sliding_window", c->sliding_window));
    bool gemma2_pattern = c->family == HF_GEMMA2; /* the even layers: the loaders' own default */
    for (int64_t l = 0; l < c->n_layer && gemma2_pattern; l++) gemma2_pattern = c->swa_layers[l] == (l % 2 == 0);
    if (c->family == HF_GEMMA2) {
        if (c->attn_softcap > 0) TRY(put_f32(w, c, "attn_logit_softcapping", c->attn_softcap));
        if (c->final_softcap > 0) TRY(put_f32(w, c, "final_logit_softcapping", c->final_softcap));
    }
    if (c->sliding_window && c->n_swa_layers < c->n_layer && !gemma2_pattern) {
        char k[96];
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", c->arch);
        TRY(gguf_writer_set_arr(w, k, GGUF_VT_BOOL, c->swa_layers, (uint64_t)c->n_layer));
    }
    if (c->family == HF_LLAMA) {
        if (c->n_vocab) TRY(put_u32(w, c, "vocab_size", c->n_vocab));
        TRY(put_u32(w, c, "rope.dimension_count", c->head_dim));
    }
    if (c->family == HF_PHI3) {
        TRY(put_u32(w, c, "rope.dimension_count", c->n_rot));
        TRY(put_u32(w, c, "rope.scaling.original_context_length", c->rope_orig_ctx));
        if (c->rope_scaling == 4) TRY(put_f32(w, c, "rope.scaling.attn_factor", c->rope_attn_factor));
    }
    if (c->rope_scaling == 1) {
        TRY(put_str(w, c, "rope.scaling.type", "linear"));
        TRY(put_f32(w, c, "rope.scaling.factor", c->rope_factor));
        /* the older key, which llama.cpp still reads and kite's loader uses */
        TRY(put_f32(w, c, "rope.scale_linear", c->rope_factor));
    } else if (c->rope_scaling == 3) {
        TRY(put_str(w, c, "rope.scaling.type", "yarn"));
        TRY(put_f32(w, c, "rope.scaling.factor", c->rope_factor));
        TRY(put_u32(w, c, "rope.scaling.original_context_length", c->rope_orig_ctx));
    }
#undef TRY
    return KITE_OK;
}
