/*
 * dtype.c - traits table of tensor types, and the f16/bf16 conversions.
 *
 * Sizes follow ggml's block layouts (checked against ../shared/golden/quant).
 * The block types point at the reference (scalar, ggml bit-exact) row
 * conversions of quants.h.  Entries without to_float are types kite can
 * validate in a file but not yet compute with (the i-quants with grids).
 * Ids >= 256 are kite's own row-scaled types (W8A8, LLM_INT8: quant_w8.c),
 * whose rows have a row_extra-byte header; ggml ids are unchanged.
 */
#include "tensor/dtype.h"

#include "tensor/quants.h"

#include <string.h>
#include <strings.h>

float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) return (uint16_t)(sign | 0x7e00); /* NaN */
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (absx < 0x38800000u) { /* subnormal or zero in half */
        /* value = absx as float; half subnormal unit is 2^-24 */
        uint32_t e = absx >> 23;
        if (e < 102) return (uint16_t)sign; /* < 2^-25: rounds to 0 */
        uint32_t man = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) ... */
        uint32_t r = man >> (shift);
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absx + 0xfff + ((absx >> 13) & 1); /* round to nearest even */
    r -= 0x38000000u;                                 /* rebias exponent 127 -> 15 */
    return (uint16_t)(sign | (r >> 13));
}

float bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
    }
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = fp32_to_fp16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
    }
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = fp32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

/* kite row-scaled int8 types (quant_w8.c; the rows are whole: n is the row length) */
static void w8a8_to_float(const void *src, float *dst, int64_t n) {
    const float d = w8_row_scale(src);
    const int8_t *q = (const int8_t *)src + W8_ROW_HEADER;
    for (int64_t i = 0; i < n; i++) dst[i] = (float)q[i] * d;
}
static void w8a8_from_float(const float *src, void *dst, int64_t n) { w8_quantize_row(src, dst, n, NULL); }
/* LLM_INT8's values are its int8 half (what a matmul without outliers
 * computes with); the f16 copy is read only for outlier columns (int8_mix.c). */
static void llm_int8_to_float(const void *src, float *dst, int64_t n) { w8a8_to_float(src, dst, n); }
static void llm_int8_from_float(const float *src, void *dst, int64_t n) {
    w8_quantize_row(src, dst, n, NULL);
    f16_from_float(src, (char *)dst + W8_ROW_HEADER + n, n);
}

static const dtype_traits traits[KITE_DTYPE_COUNT] = {
    [KITE_DTYPE_F32] = {"f32", 1, 4, f32_to_float, f32_from_float, 0, NULL},
    [KITE_DTYPE_F16] = {"f16", 1, 2, f16_to_float, f16_from_float, 0, NULL},
    [KITE_DTYPE_Q4_0] = {"q4_0", 32, 18, dequantize_row_q4_0, quantize_row_q4_0_ref, 0, quantize_row_q4_0_imat},
    [KITE_DTYPE_Q4_1] = {"q4_1", 32, 20, dequantize_row_q4_1, quantize_row_q4_1_ref, 0, quantize_row_q4_1_imat},
    [KITE_DTYPE_Q5_0] = {"q5_0", 32, 22, dequantize_row_q5_0, quantize_row_q5_0_ref, 0, quantize_row_q5_0_imat},
    [KITE_DTYPE_Q5_1] = {"q5_1", 32, 24, dequantize_row_q5_1, quantize_row_q5_1_ref, 0, quantize_row_q5_1_imat},
    [KITE_DTYPE_Q8_0] = {"q8_0", 32, 34, dequantize_row_q8_0, quantize_row_q8_0_ref, 0, NULL},
    [KITE_DTYPE_Q8_1] = {"q8_1", 32, 36, dequantize_row_q8_1, quantize_row_q8_1_ref, 0, NULL},
    [KITE_DTYPE_Q2_K] = {"q2_K", 256, 84, dequantize_row_q2_K, quantize_row_q2_K_ref, 0, quantize_row_q2_K_imat},
    [KITE_DTYPE_Q3_K] = {"q3_K", 256, 110, dequantize_row_q3_K, quantize_row_q3_K_ref, 0, quantize_row_q3_K_imat},
    [KITE_DTYPE_Q4_K] = {"q4_K", 256, 144, dequantize_row_q4_K, quantize_row_q4_K_ref, 0, quantize_row_q4_K_imat},
    [KITE_DTYPE_Q5_K] = {"q5_K", 256, 176, dequantize_row_q5_K, quantize_row_q5_K_ref, 0, quantize_row_q5_K_imat},
    [KITE_DTYPE_Q6_K] = {"q6_K", 256, 210, dequantize_row_q6_K, quantize_row_q6_K_ref, 0, quantize_row_q6_K_imat},
    [KITE_DTYPE_Q8_K] = {"q8_K", 256, 292, dequantize_row_q8_K, quantize_row_q8_K_ref, 0, NULL},
    [KITE_DTYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ2_XS] = {"iq2_xs", 256, 74, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ1_S] = {"iq1_s", 256, 50, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ4_NL] = {"iq4_nl", 32, 18, dequantize_row_iq4_nl, quantize_row_iq4_nl_ref, 0, quantize_row_iq4_nl_imat},
    [KITE_DTYPE_IQ3_S] = {"iq3_s", 256, 110, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ2_S] = {"iq2_s", 256, 82, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ4_XS] = {"iq4_xs", 256, 136, dequantize_row_iq4_xs, quantize_row_iq4_xs_ref, 0, quantize_row_iq4_xs_imat},
    [KITE_DTYPE_I8] = {"i8", 1, 1, NULL, NULL, 0, NULL},
    [KITE_DTYPE_I16] = {"i16", 1, 2, NULL, NULL, 0, NULL},
    [KITE_DTYPE_I32] = {"i32", 1, 4, NULL, NULL, 0, NULL},
    [KITE_DTYPE_I64] = {"i64", 1, 8, NULL, NULL, 0, NULL},
    [KITE_DTYPE_F64] = {"f64", 1, 8, NULL, NULL, 0, NULL},
    [KITE_DTYPE_IQ1_M] = {"iq1_m", 256, 56, NULL, NULL, 0, NULL},
    [KITE_DTYPE_BF16] = {"bf16", 1, 2, bf16_to_float, bf16_from_float, 0, NULL},
    [KITE_DTYPE_TQ1_0] = {"tq1_0", 256, 54, dequantize_row_tq1_0, quantize_row_tq1_0_ref, 0, NULL},
    [KITE_DTYPE_TQ2_0] = {"tq2_0", 256, 66, dequantize_row_tq2_0, quantize_row_tq2_0_ref, 0, NULL},
    [KITE_DTYPE_MXFP4] = {"mxfp4", 32, 17, NULL, NULL, 0, NULL},
    [KITE_DTYPE_W8A8] = {"w8a8", 1, 1, w8a8_to_float, w8a8_from_float, W8_ROW_HEADER, NULL},
    [KITE_DTYPE_LLM_INT8] = {"llm_int8", 1, 3, llm_int8_to_float, llm_int8_from_float, W8_ROW_HEADER, NULL},
};

const dtype_traits *dtype_get(uint32_t t) {
    if (t >= KITE_DTYPE_COUNT || traits[t].name == NULL) return NULL;
    return &traits[t];
}

const char *dtype_name(uint32_t t) {
    const dtype_traits *tr = dtype_get(t);
    return tr ? tr->name : "?";
}

int dtype_from_name(const char *name) {
    for (int t = 0; t < KITE_DTYPE_COUNT; t++)
        if (traits[t].name && strcasecmp(traits[t].name, name) == 0) return t;
    return -1;
}

size_t dtype_row_size(uint32_t t, int64_t n) {
    const dtype_traits *tr = dtype_get(t);
    if (!tr || n < 0 || n % tr->block_size != 0) return 0;
    return (size_t)(n / tr->block_size) * (size_t)tr->type_size + (size_t)tr->row_extra;
}
