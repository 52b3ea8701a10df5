/*
 * hf_convert.h - Hugging Face model directory -> GGUF (`kite convert --hf`).
 *
 * DESIGN
 *   hf_convert() reads DIR/config.json (architecture and hyperparameters),
 *   DIR/tokenizer.json (+ tokenizer_config.json) and the safetensors weights
 *   (single file or sharded with model.safetensors.index.json), and writes a
 *   GGUF file with llama.cpp's metadata keys and tensor names, so that the
 *   output loads in kite and in llama.cpp.  Supported: llama, mistral and
 *   mixtral (GGUF arch "llama"; q/k rows permuted from Hugging Face's
 *   rotate-half layout to the interleaved-pair RoPE layout, experts stacked
 *   into 3-D tensors), qwen2, qwen3, qwen3_moe and gpt2.
 *
 *   Tensors are streamed through gguf_writer_add_tensor_cb: each row is read
 *   from the mapped safetensors file, converted and written, so no tensor is
 *   held in memory twice.
 *
 * ERRORS
 *   One-line messages naming the file and the field ("DIR/config.json:
 *   'num_attention_heads' missing", "DIR/model.safetensors: tensor 'x': ...").
 *
 * THREAD SAFETY
 *   No shared state; kite_last_error() is thread-local.
 */
#ifndef KITE_TOOLS_HF_CONVERT_H
#define KITE_TOOLS_HF_CONVERT_H

#include <stdint.h>

#include "core/progress.h"

#define HF_TYPE_AUTO (-1)

typedef struct hf_convert_params {
    const char *dir;      /* Hugging Face model directory */
    const char *out_path; /* GGUF to write (via a temporary file, renamed on success) */
    int out_type;         /* KITE_DTYPE_F32/F16/BF16/Q8_0, or HF_TYPE_AUTO (BF16 if the
                           * weights are BF16, else F16) */
    const char *name;     /* general.name; NULL: the directory's last component */
    core_progress progress; /* bytes of tensor data written (zero: none) */
} hf_convert_params;

typedef struct hf_convert_info {
    char arch[32];        /* GGUF general.architecture written */
    char model_type[32];  /* config.json model_type (or derived from architectures) */
    char tokenizer[16];   /* tokenizer.ggml.model: "gpt2" or "llama" */
    char pre[16];         /* tokenizer.ggml.pre ("" for llama) */
    uint32_t out_type;    /* enum kite_dtype of the matrices */
    int64_t n_layer;
    int64_t n_vocab;      /* tokens written */
    int64_t n_tensors;    /* GGUF tensors written */
} hf_convert_info;

/* Converts p->dir to p->out_path.  info may be NULL.  Returns KITE_OK or an
 * error status with kite_last_error() set; on error no output file is left. */
int hf_convert(const hf_convert_params *p, hf_convert_info *info /* OUT */);

#endif
