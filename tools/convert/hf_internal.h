/*
 * hf_internal.h - shared pieces of the Hugging Face importer (tools/convert/).
 *
 *   hf_json.c    reading JSON files, typed field getters with one-line errors
 *   hf_config.c  config.json -> hf_config, and the GGUF hyperparameter keys
 *   hf_vocab.c   tokenizer.json (+ tokenizer_config.json) -> tokenizer.ggml.*
 *   hf_tensors.c tensor name mapping, q/k permutation, expert stacking, and
 *                the streaming row callbacks
 *   hf_convert.c the driver (the `kite convert --hf` flags are cli/convert_hf.c)
 */
#ifndef KITE_TOOLS_HF_INTERNAL_H
#define KITE_TOOLS_HF_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "convert/safetensors.h"

/* ---- hf_json.c ---- */

/* Reads and parses dir/name.  Returns KITE_OK (*out owned by the caller,
 * cJSON_Delete), KITE_E_NOT_FOUND (absent; no message when optional),
 * KITE_E_IO or KITE_E_FORMAT. */
int hf_json_load(const char *dir, const char *name, bool optional, cJSON **out /* OUT */);
/* Integer field: KITE_OK, KITE_E_NOT_FOUND (absent: *out unchanged, message
 * set only if required) or KITE_E_FORMAT (not an integer in [lo, hi]). */
int hf_json_int(const cJSON *obj, const char *file, const char *key, bool required, int64_t lo, int64_t hi,
                int64_t *out);
int hf_json_num(const cJSON *obj, const char *file, const char *key, bool required, double *out);
/* NULL if absent or not a string. */
const char *hf_json_str(const cJSON *obj, const char *key);

/* ---- hf_config.c ---- */

enum hf_family {
    HF_LLAMA,     /* llama, mistral, mixtral -> GGUF "llama" */
    HF_QWEN2,     /* GGUF "qwen2" */
    HF_QWEN3,     /* GGUF "qwen3" */
    HF_QWEN3_MOE, /* GGUF "qwen3moe" */
    HF_GPT2,      /* GGUF "gpt2" */
    HF_GEMMA2,    /* GGUF "gemma2" */
    HF_PHI3       /* GGUF "phi3" */
};

typedef struct hf_config {
    char path[4096];        /* DIR/config.json, for messages */
    char dir[4096];         /* DIR, for messages */
    int family;             /* enum hf_family */
    const char *arch;       /* GGUF general.architecture (static string) */
    char model_type[32];
    int64_t n_vocab;        /* vocab_size (0: absent) */
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    int64_t head_dim;       /* explicit head_dim or n_embd / n_head */
    bool has_head_dim;      /* head_dim given in config.json */
    int64_t n_expert, n_expert_used, n_ff_exp; /* MoE; 0 when dense */
    bool tie_embd;          /* tie_word_embeddings */
    bool has_rope_theta, has_rms_eps, has_norm_eps;
    double rope_theta, rms_eps, norm_eps;
    /* rope_scaling */
    int rope_scaling;       /* 0 none, 1 linear, 2 llama3, 3 yarn, 4 longrope (phi3) */
    double rope_factor, rope_low_freq, rope_high_freq;
    int64_t rope_orig_ctx;
    /* phi3: rotary dims (head_dim * partial_rotary_factor), and LongRoPE's per-frequency factors
     * ([n_rot / 2] each, owned; NULL unless rope_scaling == 4) and cos/sin scale */
    int64_t n_rot;
    float *rope_long, *rope_short;
    double rope_attn_factor;
    /* gemma2: soft caps (attn_logit_softcapping, final_logit_softcapping; 0: absent or null) */
    double attn_softcap, final_softcap;
    /* sliding window (load_sliding_window) */
    int64_t sliding_window; /* positions; 0: none (absent, null, or use_sliding_window false) */
    int64_t n_swa_layers;   /* layers using it; < n_layer: swa_layers is written as the pattern */
    uint8_t swa_layers[4096]; /* [n_layer] 1: the layer uses the window */
    cJSON *json;            /* the parsed config.json (owned) */
} hf_config;

/* Parses DIR/config.json.  On KITE_OK release with hf_config_free. */
int hf_config_load(const char *dir, hf_config *c /* OUT */);
void hf_config_free(hf_config *c);
/* Writes {arch}.* hyperparameter keys as llama.cpp's converter does. */
int hf_config_write(const hf_config *c, gguf_writer *w);

/* ---- hf_vocab.c ---- */

typedef struct hf_vocab_info {
    char model[16];   /* "gpt2" or "llama" */
    char pre[16];     /* pre-tokenizer name, "" for llama */
    int64_t n_tokens;
} hf_vocab_info;

/* Reads DIR/tokenizer.json (+ tokenizer_config.json; c->json for fallback
 * special ids) and writes the tokenizer.ggml.* keys. */
int hf_vocab_write(const char *dir, const hf_config *c, gguf_writer *w, hf_vocab_info *info /* OUT */);

/* ---- hf_tensors.c ---- */

typedef struct hf_plan hf_plan;

/* Maps every safetensors tensor to its GGUF tensor(s), checks shapes against
 * the config, and registers streaming tensors on w (data read at write time;
 * the plan and st must outlive gguf_writer_write).  out_type: the matrix
 * type (F32/F16/BF16/Q8_0).  Every source tensor must be used or known to be
 * unneeded (rotary inv_freq, GPT-2 attention masks). */
int hf_plan_build(const hf_config *c, const st_model *st, uint32_t out_type, gguf_writer *w, hf_plan **out /* OUT */);
int64_t hf_plan_n_tensors(const hf_plan *p);
void hf_plan_free(hf_plan *p);

/* Row permutation llama.cpp applies to q/k projections: HF stores each head's
 * rows as [first halves of the rotated pairs..., second halves...]; GGUF
 * (interleaved-pair RoPE) wants pair (i, i + hd/2) at rows 2i, 2i+1.
 * Returns the source row of destination row r for rows grouped in heads of
 * head_dim (even) rows. */
int64_t hf_permute_src_row(int64_t r, int64_t head_dim);

#endif
