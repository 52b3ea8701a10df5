/*
 * synth.h - synthetic models: real LLaMA-family shapes with deterministic
 * random weights, written as GGUF (`kite synth`).
 *
 * DESIGN
 *   Benchmarks need models of realistic size without downloads.  A shape
 *   table gives the hyperparameters of well-known models (TinyLlama-1.1B,
 *   Llama-2/3, Mistral-7B, Mixtral-8x7B, Qwen2/Qwen3/Qwen3-MoE, GPT-2,
 *   stories260K) and tiny test variants ("tiny-*", 64 wide, 2 layers);
 *   synth_write() emits a GGUF file for the shape's architecture (llama,
 *   qwen2, qwen3, qwen3moe, gpt2) with llama.cpp's key and tensor names,
 *   a SentencePiece-style vocabulary of the right size, and random weights:
 *
 *     matrices      ~ N(0, 1/fan_in) (fan_in = row length ne[0]), so every
 *                   matmul output has unit variance when its input does;
 *     token_embd    ~ N(0, 1);
 *     norm weights  1 + N(0, 0.02^2) (stored as F32, like llama.cpp);
 *     biases        N(0, 0.1^2); q/k norm gains 1 + N(0, 0.1^2); learned
 *                   positions N(0, 0.5^2) (all F32);
 *     rope_freqs    not random: Llama 3's frequency factors (rope_llama3_ctx).
 *   Expert tensors are 3-D [fan_in, rows, n_expert], one stream per row of
 *   every expert.  The vocabulary is always the SentencePiece-style one below
 *   (llama.cpp loads it for any architecture).
 *
 *   With RMSNorm before every matmul, activations stay O(1), attention
 *   scores ~N(0, 1) and logits ~N(0, 1) (max over the vocabulary a few
 *   units).  "N" is an Irwin-Hall sum of four 16-bit uniforms (bell-shaped,
 *   unit variance, bounded by +-2*sqrt(3)), one 64-bit draw per element.
 *
 *   Determinism: every row of every tensor has its own PRNG stream, seeded
 *   from (seed, tensor index, row), so the bytes depend only on the seed and
 *   the parameters, never on the thread count or the chunking.  Matrices
 *   are generated as float rows and converted with the dtype traits'
 *   from_float, so any type with a reference quantizer works; a type
 *   without one fails with KITE_E_UNSUPPORTED before anything is written.
 *   A matrix whose row length is not a multiple of its type's block size
 *   gets the type `kite quantize` would give it (quant_fallback(), the one
 *   rule both use: q4_K -> q5_0, q6_K -> q8_0, 32-element types -> f16,
 *   ...); synth_fallbacks() lists them.  Files whose rows all fit are what
 *   they were before the fallback existed, byte for byte.
 *
 *   Memory: tensors are streamed through gguf_writer_add_tensor_cb, a few
 *   MiB at a time, so a 27 GB F32 7B file needs no more than the vocabulary
 *   and a chunk buffer.
 *
 * THREAD SAFETY
 *   synth_write() may run concurrently with itself (no global state); it
 *   uses its own worker threads.
 */
#ifndef KITE_MODEL_SYNTH_H
#define KITE_MODEL_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/progress.h"

typedef struct synth_shape {
    const char *name;  /* "tinyllama-1.1b", ... */
    int32_t n_embd;    /* model width */
    int32_t n_ff;      /* FFN hidden width */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_vocab;   /* >= 259: <unk>, <s>, </s> and 256 byte tokens come first */
    int32_t n_ctx;     /* llama.context_length */
    float rope_base;   /* llama.rope.freq_base */
    float rms_eps;     /* llama.attention.layer_norm_rms_epsilon (gpt2: layer_norm_epsilon) */
    /* architecture extras (zero for a plain llama shape) */
    const char *arch;  /* general.architecture: NULL = "llama"; "qwen2", "qwen3", "qwen3moe", "gpt2" */
    int32_t head_dim;  /* attention.key_length when not n_embd / n_head (qwen3); 0 = n_embd / n_head */
    int32_t n_expert;  /* expert_count (MoE), 0 = dense */
    int32_t n_expert_used; /* expert_used_count */
    int32_t n_ff_exp;  /* expert_feed_forward_length (qwen3moe); 0 = n_ff */
    int32_t sliding_window; /* attention.sliding_window (Mistral v0.1), 0 = none */
    int32_t swa_period;     /* > 0: attention.sliding_window_pattern, n_layer bools: layer l windowed when
                               l % swa_period < swa_period - 1 (Gemma-2/3-style local/global layers) */
    int32_t rope_llama3_ctx; /* > 0: write Llama 3 rope_freqs.weight (factor 8, low 1, high 4, this original
                                context length) as llama.cpp's converter computes it */
    int32_t tied;      /* 1: no output.weight (the classifier is token_embd) */
    float attn_softcap;  /* gemma2: attn_logit_softcapping (written for gemma2 shapes only) */
    float final_softcap; /* gemma2: final_logit_softcapping */
    int32_t longrope_ctx; /* > 0: Phi-3 LongRoPE with this original context: rope_factors_long/short.weight,
                             rope.scaling.attn_factor and original_context_length as llama.cpp's converter
                             writes them (the factors are made up: a smooth ramp) */
} synth_shape;

/* The built-in shape called name (case-sensitive), or NULL. */
const synth_shape *synth_shape_find(const char *name);
/* "tinyllama-1.1b|llama2-7b|..." for usage texts. */
const char *synth_shape_list(void);

/* Weight mixes beyond a single type (optional, like llama.cpp's _M files). */
enum synth_mix {
    SYNTH_MIX_PURE = 0, /* every matrix has `type` */
    SYNTH_MIX_Q4_K_M,   /* q4_K, with q6_K for output, and for attn_v/ffn_down of
                           the first and last eighth of the layers and every
                           third layer between (llama.cpp's Q4_K_M rule) */
    SYNTH_MIX_Q5_K_M    /* q5_K, with q6_K where Q4_K_M has it (llama.cpp's Q5_K_M) */
};

typedef struct synth_params {
    synth_shape shape;   /* hyperparameters (copy; callers may change n_layer) */
    uint32_t type;       /* enum kite_dtype of the 2-D matrices (PURE mix) */
    int mix;             /* enum synth_mix */
    uint64_t seed;       /* PRNG seed; same seed and parameters -> same bytes */
    int n_threads;       /* generator threads (<= 0: 1); the output does not depend on it */
    const char *name;    /* general.name; NULL: "synth-<shape>" */
    const char *vocab_from; /* a GGUF whose tokenizer.* metadata is copied (a real vocabulary, e.g.
                               ../shared/models/vocab-llama3.gguf; shape.n_vocab must equal its token
                               count: synth_vocab_size), or NULL: the synthetic SentencePiece one */
    core_progress progress; /* bytes of tensor data written (zero: none) */
} synth_params;

/* The token count of the vocabulary in the GGUF at path (for synth_params.vocab_from).
 * Returns KITE_OK, or the reader's status / KITE_E_NOT_FOUND (no tokenizer.ggml.tokens). */
int synth_vocab_size(const char *path, int32_t *n_vocab /* OUT */);

/* Checks the shape (positive sizes, n_head a multiple of n_head_kv, n_embd a
 * multiple of n_head, n_vocab >= 259) and that the matrix type(s), after the
 * fallback, have from_float.  Returns KITE_OK or KITE_E_ARG /
 * KITE_E_UNSUPPORTED with a message. */
int synth_check(const synth_params *p);

/* The tensors that fall back to another type (see DESIGN): returns their
 * count (0: none; -1: out of memory) and writes one line, without a newline,
 * to buf[0..cap) (truncated to fit): groups "ROLE WANTED->TYPE (row N) xCOUNT"
 * joined by ", ", e.g. "attn_q q4_K->q5_0 (row 896) x24". */
int synth_fallbacks(const synth_params *p, char *buf /* OUT */, size_t cap);

/* Writes the model to path (through "<path>.tmp.<pid>", renamed on success).
 * Returns KITE_OK, or the synth_check status, KITE_E_NOMEM or KITE_E_IO. */
int synth_write(const synth_params *p, const char *path);

/* Bytes of the tensor data synth_write would produce (without padding). */
uint64_t synth_data_bytes(const synth_params *p);

#endif
