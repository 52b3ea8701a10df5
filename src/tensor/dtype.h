/*
 * dtype.h - tensor element types and their traits table.
 *
 * The enum values are the ggml/GGUF type ids, so they are append-only and are
 * written to files as they are.  Each type has a traits entry: block size
 * (elements per block), bytes per block, and the row functions that exist for
 * it.  Model and kernel code never switch on a type: they look up the traits,
 * so a new block-quantized type is added here (plus its kernels) without
 * touching the model code.  A type whose to_float is NULL is known (its size
 * can be validated in a GGUF file) but cannot be computed with yet.
 */
#ifndef KITE_TENSOR_DTYPE_H
#define KITE_TENSOR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum kite_dtype {
    KITE_DTYPE_F32 = 0,
    KITE_DTYPE_F16 = 1,
    KITE_DTYPE_Q4_0 = 2,
    KITE_DTYPE_Q4_1 = 3,
    /* 4, 5: removed Q4_2, Q4_3 */
    KITE_DTYPE_Q5_0 = 6,
    KITE_DTYPE_Q5_1 = 7,
    KITE_DTYPE_Q8_0 = 8,
    KITE_DTYPE_Q8_1 = 9,
    KITE_DTYPE_Q2_K = 10,
    KITE_DTYPE_Q3_K = 11,
    KITE_DTYPE_Q4_K = 12,
    KITE_DTYPE_Q5_K = 13,
    KITE_DTYPE_Q6_K = 14,
    KITE_DTYPE_Q8_K = 15,
    KITE_DTYPE_IQ2_XXS = 16,
    KITE_DTYPE_IQ2_XS = 17,
    KITE_DTYPE_IQ3_XXS = 18,
    KITE_DTYPE_IQ1_S = 19,
    KITE_DTYPE_IQ4_NL = 20,
    KITE_DTYPE_IQ3_S = 21,
    KITE_DTYPE_IQ2_S = 22,
    KITE_DTYPE_IQ4_XS = 23,
    KITE_DTYPE_I8 = 24,
    KITE_DTYPE_I16 = 25,
    KITE_DTYPE_I32 = 26,
    KITE_DTYPE_I64 = 27,
    KITE_DTYPE_F64 = 28,
    KITE_DTYPE_IQ1_M = 29,
    KITE_DTYPE_BF16 = 30,
    /* 31..33: removed Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 */
    KITE_DTYPE_TQ1_0 = 34,
    KITE_DTYPE_TQ2_0 = 35,
    /* 36..38: removed IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 */
    KITE_DTYPE_MXFP4 = 39,
    /* kite's own types (docs/quantization/w8a8.md): ids far above ggml's so
     * ggml can keep appending; llama.cpp cannot load files that use them.
     * Both are row-scaled (no blocks: any row length), so their rows carry
     * a header of row_extra bytes before the elements. */
    KITE_DTYPE_W8A8 = 256,     /* per-row: f32 scale, i32 sum of q, int8 q[n] (SmoothQuant / W8A8) */
    KITE_DTYPE_LLM_INT8 = 257, /* a W8A8 row followed by the f16 copy of the row (LLM.int8()) */
    KITE_DTYPE_COUNT
};

/* Converts n elements (a multiple of block_size) of a row to float. */
typedef void (*dtype_to_float_fn)(const void *src, float *dst, int64_t n);
/* Reference (round-to-nearest) conversion of n floats to the type. */
typedef void (*dtype_from_float_fn)(const float *src, void *dst, int64_t n);
/* Importance-weighted conversion of ONE ROW of n floats (llama-quantize
 * --imatrix): qw[0..n) is the importance of each column (the mean square of
 * that input channel's activations), the per-row statistics are the row's. */
typedef void (*dtype_from_float_imat_fn)(const float *src, void *dst, int64_t n, const float *qw);

typedef struct dtype_traits {
    const char *name;        /* "f32", "q4_0", ... as llama.cpp prints them; NULL: unknown id */
    int32_t block_size;      /* elements per block */
    int32_t type_size;       /* bytes per block */
    dtype_to_float_fn to_float;
    dtype_from_float_fn from_float;
    int32_t row_extra;       /* bytes per row besides the blocks (kite row-scaled types' header); 0 for ggml types */
    dtype_from_float_imat_fn from_float_imat; /* NULL: the type ignores an importance matrix (q8_0, f16, tq*) */
} dtype_traits;

/* Traits of type t, or NULL when t is not a known type id. */
const dtype_traits *dtype_get(uint32_t t);
const char *dtype_name(uint32_t t); /* "?" for unknown */
/* Type id by (case-insensitive) name, or -1. */
int dtype_from_name(const char *name);

/* Bytes of a row of n elements (row_extra included); 0 if n is not a
 * multiple of the block size. */
size_t dtype_row_size(uint32_t t, int64_t n);

/* ---- kite row-scaled int8 types (quant_w8.c) ----------------------------
 * W8A8 row of n elements (n + W8_ROW_HEADER bytes, no alignment assumed):
 *   bytes 0..3  float d  = max|x| / 127 (0 for an all-zero row)
 *   bytes 4..7  int32 sum of q[0..n)  (the VNNI kernel's u8 offset term)
 *   bytes 8..   int8 q[i] = round-half-away(x[i] / d), in -127..127
 *   value i = q[i] * d.  Also the activation row format of W8A8 matmuls
 *   (per-token dynamic quantization).  n <= W8_MAX_COLS keeps every integer
 *   dot product (and the u8 offset form) exact in int32.
 * LLM_INT8 row: a W8A8 row, then n IEEE f16 copies of the row (n * 2 bytes). */
#define W8_ROW_HEADER 8
#define W8_MAX_COLS 65536
/* Quantizes x[0..n) into a W8A8 row, treating x[i] as 0 where skip && skip[i]
 * (LLM.int8()'s outlier columns; skip NULL: none). */
void w8_quantize_row(const float *x, void *dst, int64_t n, const uint8_t *skip);
float w8_row_scale(const void *row);     /* d of a W8A8 row */
int32_t w8_row_sum(const void *row);     /* sum of q of a W8A8 row */

/* Scalar conversions used everywhere (IEEE binary16 and bfloat16). */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f); /* round to nearest even, like ggml */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f); /* round to nearest even, NaN kept quiet, like ggml */

/* IEEE half to float, exact (the same bits as fp16_to_fp32, NaN payloads
 * included), inline and branch-free so that row loops vectorise (the KV
 * dequantizers of attention_impl.h, the x16 activation side data): normal
 * numbers and inf/NaN by moving the fields and rebiasing the exponent,
 * zero and subnormals as mantissa * 2^-24 (exact in float), chosen by masks. */
static inline float fp16_to_fp32_inline(uint16_t h) {
    const uint32_t em = (uint32_t)h & 0x7fffu;
    uint32_t norm = (em << 13) + ((uint32_t)(127 - 15) << 23);
    norm += -(uint32_t)(em >= 0x7c00u) & ((uint32_t)(128 - 16) << 23); /* exponent 31 -> 255 */
    const float sub_f = (float)(int32_t)em * 5.9604644775390625e-8f;  /* 2^-24 */
    uint32_t sub, bits;
    memcpy(&sub, &sub_f, sizeof sub);
    const uint32_t is_sub = -(uint32_t)(em < 0x0400u);
    bits = ((norm & ~is_sub) | (sub & is_sub)) | ((uint32_t)h & 0x8000u) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Float to bfloat16, the same bits as fp32_to_bf16 (nearest even, NaN kept quiet), inline and
 * branch-free so that row loops vectorise (f16 compute bf16's load-time rounding). */
static inline uint16_t fp32_to_bf16_inline(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t nan = -(uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    const uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((rne & ~nan) | (((u >> 16) | 0x40u) & nan));
}

#endif
