/*
 * quantize.h - round-to-nearest (RTN) model quantization, tensor by tensor
 * (`kite quantize`), with llama.cpp's type mixes and fallbacks; and the
 * calibrated methods GPTQ / AWQ and group-wise grids (params.method,
 * .group, .bits), produced through quant/method.c (docs/quantization/calibrated.md).
 *
 * DESIGN
 *   quant_model() reads a GGUF model, decides an output type for every
 *   tensor (quant_plan), then writes a new GGUF file: all metadata copied
 *   unchanged except general.file_type (the llama.cpp ftype number of the
 *   recipe) and general.quantization_version (2), and the tensors in input
 *   order.  Each tensor's data is produced at write time by a fill callback
 *   (gguf_writer_add_tensor_cb): a chunk of rows is converted to float with
 *   the input type's to_float and quantized with the output type's reference
 *   from_float, rows split over a thread pool.  Each row is converted on its
 *   own, so the bytes do not depend on the thread count, and no more than a
 *   chunk of output is in memory at a time.
 *
 *   Type choice (docs/quantization/rtn.md has the full tables):
 *     - only 2-D+ tensors whose name ends in "weight" and is not a norm
 *       ("_norm.weight") are converted; the rest (norms, ...) are copied;
 *     - pure mode (recipe NULL): every such matrix gets params.type;
 *     - a recipe (mix) applies llama.cpp's per-tensor rules of the matching
 *       llama_ftype (output.weight, token_embd, attn_v, ffn_down, ...);
 *     - then the fallback: a row length (ne[0]) that is not a multiple of
 *       the chosen type's block size moves to a type that fits, with
 *       llama.cpp's table (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0,
 *       q2_K/q3_K/iq4_xs -> iq4_nl, tq1_0/tq2_0 -> q4_0) and f16 when that
 *       still does not fit; kite also sends the 32-element legacy types and
 *       iq4_nl to f16 (llama.cpp refuses those with "Unsupported tensor
 *       size").
 *
 * OWNERSHIP / THREAD SAFETY
 *   No global state; quant_model() may run concurrently with itself.  It
 *   starts and joins its own worker threads.  The output is written through
 *   "<path>.tmp.<pid>.<n>" and renamed on success (gguf writer), so a failed run
 *   leaves no output file.
 */
#ifndef KITE_QUANT_QUANTIZE_H
#define KITE_QUANT_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/progress.h"
#include "gguf/gguf.h"

/* A named recipe: llama.cpp's LLAMA_FTYPE_MOSTLY_<NAME> (mix.c). */
typedef struct quant_recipe {
    const char *name; /* "q4_k_m", lower case */
    uint32_t ftype;   /* llama.cpp llama_ftype, written to general.file_type */
    uint32_t base;    /* enum kite_dtype most matrices get */
} quant_recipe;

/* The recipe called name (case-insensitive), or NULL. */
const quant_recipe *quant_recipe_find(const char *name);
/* What llama-quantize means by a type name: a recipe name, the aliases
 * q3_k / q4_k / q5_k (its _M mixes), or an ftype number ("15"); NULL if none. */
const quant_recipe *quant_recipe_by_ftype_name(const char *name);
/* "f32|f16|...|q4_k_m|..." for usage texts (static string). */
const char *quant_recipe_list(void);
/* llama.cpp ftype number for a pure quantization to type t (q4_K -> 14,
 * Q4_K_S, the ftype whose default type it is), or -1 if none. */
int64_t quant_ftype_of_type(uint32_t t);

/* What the rules need to know about the model (from its metadata and
 * tensor table; quant_plan fills it). */
typedef struct quant_model_info {
    int32_t n_layer;    /* <arch>.block_count (or 1 + highest blk.N) */
    int32_t n_gqa;      /* n_head / n_head_kv; 1 if unknown */
    int32_t n_attn_v;   /* number of attn_v.weight tensors */
    bool has_output;    /* an output.weight tensor exists (else token_embd is the classifier) */
    bool is_70b;        /* llama.cpp's LLM_TYPE_70B: 80 layers with grouped-query attention */
    bool has_imatrix;   /* an importance matrix is given (llama.cpp's mixes change a few choices then) */
} quant_model_info;

/* The type recipe r gives the matrix called name with row length ne0, with
 * base type r->base, BEFORE the fallback.  layer_rank: for attn_v and
 * ffn_down tensors, their index among the tensors of that kind in layer
 * order (= the layer for llama models); otherwise ignored.  Pure types
 * (f32/f16/bf16 recipes) return base unchanged. */
uint32_t quant_recipe_type(const quant_recipe *r, const quant_model_info *mi, const char *name, int64_t ne0,
                           int32_t layer_rank);

/* The fallback for a row length ne0 that `type` does not fit: type itself
 * when ne0 is a multiple of its block size, else a type that fits (see the
 * DESIGN note).  Always returns a type whose block size divides ne0. */
uint32_t quant_fallback(uint32_t type, int64_t ne0);

/* Whether a tensor is converted at all (llama.cpp's rule): name ends in
 * "weight", n_dims >= 2, not a "_norm.weight", not ffn_gate_inp / pos_embd /
 * token_types. */
bool quant_tensor_is_matrix(const char *name, uint32_t n_dims);

typedef struct quant_choice {
    uint32_t type;     /* enum kite_dtype written to the output */
    uint32_t wanted;   /* what the recipe chose before the fallback (== type if none) */
    bool convert;      /* false: data copied byte for byte */
} quant_choice;

/* Quantization methods (docs/quantization/calibrated.md). */
enum quant_method {
    QUANT_RTN = 0,  /* round to nearest, tensor by tensor (no calibration) */
    QUANT_GPTQ = 1, /* GPTQ error compensation with calibration Hessians (gptq.h) */
    QUANT_AWQ = 2,  /* AWQ activation-aware scales folded into norms / linears (awq.h) */
    QUANT_AWQ_GPTQ = 3 /* AWQ's scales, then GPTQ on the scaled weights with the scaled inputs' Hessians */
};

#define QUANT_CALIB_TOKENS_DEFAULT 8192 /* calibration tokens when calib_tokens is 0 */
#define QUANT_AWQ_SAMPLES 256           /* activation rows kept per layer input for AWQ's search */

struct imatrix; /* quant/imatrix.h */

typedef struct quant_params {
    const quant_recipe *recipe; /* a mix, or NULL for pure `type` */
    uint32_t type;              /* pure mode: the matrices' type */
    bool pure;                  /* with a recipe: every matrix gets recipe->base (llama-quantize --pure); the
                                   file says the recipe's ftype */
    bool set_output_type;       /* output.weight gets output_type (--output-tensor-type), not the rules' */
    uint32_t output_type;
    bool set_token_embd_type;   /* token_embd.weight gets token_embd_type (--token-embedding-type) */
    uint32_t token_embd_type;
    bool leave_output;          /* output.weight is copied unchanged (--leave-output-tensor) */
    int n_threads;              /* worker threads (<= 0: 1); output does not depend on it */
    bool allow_requantize;      /* accept already-quantized input matrices (warned) */
    FILE *log;                  /* per-tensor, fallback and size lines; NULL: silent */
    core_progress progress;     /* bytes of output written, and the per-tensor lines (then not on log) */
    /* calibrated methods and group-wise grids (zero: plain RTN as above) */
    int method;                 /* enum quant_method */
    const char *calib_path;     /* calibration text (required by gptq and awq) */
    int64_t calib_tokens;       /* tokens of it used (0: QUANT_CALIB_TOKENS_DEFAULT) */
    int group;                  /* elements per scale group of the legacy types: 0/32 (one block), 64, 128 */
    int bits;                   /* grid levels of the legacy types: 0 (the type's own) or fewer, e.g. 3 in q4_0 */
    bool act_order;             /* GPTQ: visit columns by descending Hessian diagonal */
    double damp;                /* GPTQ dampening (0: 1% of the mean diagonal) */
    size_t calib_mem_limit;     /* bytes of calibration statistics per pass (0: 1 GiB) */
    int awq_n_grid;             /* AWQ alpha steps (0: 20; 1: alpha 0 only, i.e. RTN -- tests) */
    bool awq_float_out;         /* tests: search AWQ scales for the planned types, but write every tensor
                                   in its input type (AWQ's folded, unquantized): the fold must keep the function */
    bool no_repack;             /* the calibration model keeps the file's layout (kite_model_params) */
    const struct imatrix *imatrix; /* importance matrix (--imatrix), borrowed, or NULL: RTN-routed matrices of
                                   the types with an importance-weighted quantizer use it, as
                                   llama-quantize --imatrix; the file's name goes to quantize.imatrix.* */
    const char *imatrix_path;   /* recorded in quantize.imatrix.file */
    bool allow_fallback;        /* GPTQ: a matrix it cannot produce (type without a GPTQ grid, no
                                   calibration data) is written with RTN (named on its progress line)
                                   instead of failing with KITE_E_UNSUPPORTED */
} quant_params;

typedef struct quant_stats {
    uint64_t bytes_in;      /* tensor data of the input */
    uint64_t bytes_out;     /* tensor data of the output (no padding) */
    int32_t n_tensors;
    int32_t n_converted;    /* tensors re-encoded */
    int32_t n_fallback;     /* tensors that fell back to another type */
    uint32_t ftype;         /* general.file_type written */
} quant_stats;

/* Decides the output type of every tensor of in: out[i] for in->tensors[i]
 * (out has in->n_tensors entries); a fallback shows as type != wanted
 * (quant_model prints its reason on the tensor's progress line).  Logs only
 * the requantization warning.  Returns KITE_OK, KITE_E_ARG (type without a reference quantizer),
 * KITE_E_UNSUPPORTED (input type without to_float, or quantized input
 * without allow_requantize) with a message naming the tensor. */
int quant_plan(const gguf_ctx *in, const quant_params *p, quant_choice *out /* OUT: [n_tensors] */,
               quant_model_info *mi /* OUT, may be NULL */);

/* Quantizes in_path into out_path, printing one progress line per tensor
 * to p->log as it is written ("[ 12/201] NAME  f32 -> q4_K  (4096 x 4096)",
 * plus the reason when the tensor fell back, and the method when it is not
 * plain RTN: "gptq", "awq", "rtn/g64").  With method gptq / awq the model is
 * loaded, calibrated on p->calib_path (progress lines "calibrate: ...",
 * "awq: ...") and the matrices with a grid type (q4_0, q4_1, q5_0, q5_1,
 * q8_0, q3_K; gptq) or any quantized type (awq) are produced by the method; the
 * others stay RTN.  KITE_E_ARG for bad method parameters.  stats may be NULL.  Returns KITE_OK or
 * the reader's / quant_plan's / writer's status (KITE_E_IO, KITE_E_FORMAT,
 * KITE_E_UNSUPPORTED, KITE_E_ARG, KITE_E_NOMEM) with kite_last_error() set;
 * on failure no output file (and no temporary file) is left. */
int quant_model(const char *in_path, const char *out_path, const quant_params *p, quant_stats *stats /* OUT */);

#endif
