/*
 * model.h - the loaded model: hyperparameters, weights, vocabulary.
 *
 * DESIGN
 *   kite_model_load() opens the GGUF file (src/gguf), reads the tokenizer
 *   (src/tokenizer) and, unless the file is vocab-only, the hyperparameters
 *   of its architecture and a `weight` view of every tensor through the
 *   per-architecture name table (src/model/arch.c).  Weight views point into
 *   the file image: nothing is copied except 1-D vectors (norm weights), which
 *   are converted to float once at load time because they are tiny and read
 *   on every token.
 *
 *   A `weight` carries its ggml type; the kernels (src/kernels) dispatch on it
 *   through the dtype traits table, so block-quantized types slot in without
 *   touching the forward pass.
 *
 * OWNERSHIP
 *   The model owns the gguf_ctx (and with it the mapping), the vocab and the
 *   layer array.  It is immutable after load.
 */
#ifndef KITE_MODEL_MODEL_H
#define KITE_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kite.h"
#include "tensor/weight.h"

struct vocab;

enum rope_type {
    ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama, llama2.c */
    ROPE_NEOX = 2  /* rotate halves (x[i], x[i + d/2]): gpt-neox, qwen2, ... */
};

typedef struct model_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;       /* model width (dim) */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;    /* < n_head: grouped-query attention; 1: multi-query */
    int32_t head_dim;     /* per-head width of q and k (and v) */
    int32_t n_ff;         /* FFN hidden width */
    int32_t n_rot;        /* rotary dimensions per head (<= head_dim) */
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    int rope_type;         /* enum rope_type */
} model_hparams;

typedef struct layer_weights {
    const float *attn_norm; /* (n_embd) RMSNorm gain, float copy */
    weight wq;              /* (n_head*head_dim rows, n_embd cols) */
    weight wk;              /* (n_head_kv*head_dim, n_embd) */
    weight wv;              /* (n_head_kv*head_dim, n_embd) */
    weight wo;              /* (n_embd, n_head*head_dim) */
    const float *ffn_norm;  /* (n_embd) */
    weight w_gate;          /* (n_ff, n_embd) */
    weight w_up;            /* (n_ff, n_embd) */
    weight w_down;          /* (n_embd, n_ff) */
} layer_weights;

struct kite_model {
    char *path;
    char *arch;            /* general.architecture */
    char *name;            /* general.name or "" */
    gguf_ctx *gguf;
    struct vocab *vocab;
    bool vocab_only;
    model_hparams hp;
    weight tok_embd;       /* (n_vocab rows, n_embd cols) */
    const float *output_norm; /* (n_embd) */
    weight output;         /* (n_vocab, n_embd); == tok_embd when tied */
    layer_weights *layers; /* [n_layer] */
    float *vectors;        /* owned storage of every float copy above */
    uint64_t n_params;
    uint64_t n_bytes;
};

#endif
