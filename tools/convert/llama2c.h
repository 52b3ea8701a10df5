/*
 * llama2c.h - reading llama2.c checkpoints and tokenizers, converting to GGUF.
 *
 * DESIGN
 *   llama2.c (github.com/karpathy/llama2.c) stores a model as a small header
 *   followed by raw little-endian weights, in one of three layouts:
 *     v0 (legacy): 7 x int32 config, then float32 tensors grouped by kind
 *        (token_embedding, rms_att[L], wq[L], wk[L], wv[L], wo[L], rms_ffn[L],
 *        w1[L], w2[L], w3[L], rms_final), the unused freq_cis tables
 *        (seq_len * head_size / 2 floats, twice), and, when vocab_size < 0,
 *        an untied classifier wcls.
 *     v1: 256-byte header (uint32 magic 0x616b3432 "ak42", int32 version 1,
 *        7 x int32 config, uint8 shared_classifier), then float32 tensors with
 *        the norms first: rms_att[L], rms_ffn[L], rms_final, token_embedding,
 *        wq[L], wk[L], wv[L], wo[L], w1[L], w2[L], w3[L], [wcls]; no freq_cis.
 *     v2: as v1 with version 2 and an int32 group_size at byte 37; the norms
 *        stay float32 (same order), every matrix (same order as v1) is stored
 *        as int8 values followed by one float32 scale per group_size values
 *        (symmetric "Q8_0"); they are dequantized (q * scale) on conversion.
 *   A matrix (out, in) is row-major; it becomes a GGUF tensor with
 *   ne = [in, out] and the same bytes.  No Q/K permutation is needed: llama2.c
 *   rotates adjacent pairs like ggml's "llama" RoPE.
 *
 *   The tokenizer file is int32 max_token_length, then per token a float32
 *   score, an int32 byte length and the bytes.  Conversion to llama.cpp's
 *   "llama" (SentencePiece) vocabulary: ' ' becomes U+2581, "\n<s>\n" and
 *   "\n</s>\n" become "<s>" / "</s>" (control), "<unk>" is unknown, "<0xNN>"
 *   is a byte token, everything else is normal.
 *
 *   The output follows llama.cpp's conventions for arch "llama" (key names,
 *   tensor names, order, output.weight written even when tied, 1-D norm
 *   tensors always F32).  See docs/convert.md.
 *
 * ERRORS
 *   Untrusted input: every size is checked against the file length with
 *   checked arithmetic; messages name the file and what was expected, e.g.
 *   "m.bin: expected 1056540 bytes for dim=64 ... but file has 1056536".
 *
 * OWNERSHIP / THREAD SAFETY
 *   A llama2c_conv owns its file mapping, converted buffers and the
 *   gguf_writer whose tensor data points into them.  One thread at a time.
 *   Assumes a little-endian host (as llama2.c itself does).
 */
#ifndef KITE_MODEL_LLAMA2C_H
#define KITE_MODEL_LLAMA2C_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

#define LLAMA2C_MAGIC 0x616b3432u /* "ak42" as a little-endian uint32 */
#define LLAMA2C_HEADER_SIZE 256   /* v1 / v2 header bytes */
#define LLAMA2C_RMS_EPS 1e-5f     /* llama2.c run.c rmsnorm epsilon */
#define LLAMA2C_ROPE_BASE 10000.0f

/* The model header, after validation. */
typedef struct llama2c_config {
    int32_t version;           /* 0 (legacy), 1 or 2 */
    int32_t dim;               /* model width */
    int32_t hidden_dim;        /* FFN width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t vocab_size;        /* always positive here */
    int32_t seq_len;           /* training context */
    bool shared_classifier;    /* wcls == token_embedding */
    int32_t group_size;        /* v2 quantization group, else 0 */
} llama2c_config;

/* llama.* hyperparameters to write into a vocab-only file (optional). */
typedef struct llama2c_hparams {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, seq_len;
} llama2c_hparams;

typedef struct llama2c_convert_params {
    const char *model_path;      /* llama2.c model .bin; NULL: vocab-only output */
    const char *tokenizer_path;  /* llama2.c tokenizer .bin (required) */
    uint32_t out_type;           /* KITE_DTYPE_F32, _F16 or _BF16 for the matrices */
    const char *name;            /* general.name; NULL: file name without ".bin" */
    int32_t vocab_size;          /* vocab-only: tokens to read, 0 = until end of file */
    const llama2c_hparams *hparams; /* vocab-only: write llama.* keys too (NULL: no) */
} llama2c_convert_params;

typedef struct llama2c_conv llama2c_conv;

/* Reads and validates a model header plus the file size.  KITE_E_IO,
 * KITE_E_FORMAT (bad/inconsistent values, wrong size) or KITE_E_UNSUPPORTED
 * (unknown version); *out unchanged on error. */
int llama2c_read_config(const char *path, llama2c_config *out /* OUT */);

/* Builds the whole conversion in memory: reads and checks the inputs and
 * fills a gguf_writer (see llama2c_conv_writer).  *out unchanged on error. */
int llama2c_conv_new(const llama2c_convert_params *params, llama2c_conv **out /* OUT */);
gguf_writer *llama2c_conv_writer(llama2c_conv *c);              /* owned by c */
const llama2c_config *llama2c_conv_config(const llama2c_conv *c); /* NULL if vocab-only */
int32_t llama2c_conv_n_vocab(const llama2c_conv *c);
void llama2c_conv_free(llama2c_conv *c); /* NULL is a no-op */

/* new + gguf_writer_write(out_path) + free. */
int llama2c_convert(const llama2c_convert_params *params, const char *out_path);

#endif
