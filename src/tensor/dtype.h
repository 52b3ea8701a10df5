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
    KITE_DTYPE_COUNT
};

/* Converts n elements (a multiple of block_size) of a row to float. */
typedef void (*dtype_to_float_fn)(const void *src, float *dst, int64_t n);
/* Reference (round-to-nearest) conversion of n floats to the type. */
typedef void (*dtype_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct dtype_traits {
    const char *name;        /* "f32", "q4_0", ... as llama.cpp prints them; NULL: unknown id */
    int32_t block_size;      /* elements per block */
    int32_t type_size;       /* bytes per block */
    dtype_to_float_fn to_float;
    dtype_from_float_fn from_float;
} dtype_traits;

/* Traits of type t, or NULL when t is not a known type id. */
const dtype_traits *dtype_get(uint32_t t);
const char *dtype_name(uint32_t t); /* "?" for unknown */
/* Type id by (case-insensitive) name, or -1. */
int dtype_from_name(const char *name);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t dtype_row_size(uint32_t t, int64_t n);

/* Scalar conversions used everywhere (IEEE binary16 and bfloat16). */
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f); /* round to nearest even, like ggml */
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f); /* round to nearest even, NaN kept quiet, like ggml */

#endif
