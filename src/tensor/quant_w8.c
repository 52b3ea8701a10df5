/*
 * quant_w8.c - row conversions of kite's row-scaled int8 types W8A8 and
 * LLM_INT8 (layouts in dtype.h, format notes in docs/quantization/w8a8.md).
 *
 * DESIGN
 *   One scale per row (symmetric, d = max|x| / 127, round half away from
 *   zero, q in -127..127: -128 never occurs, so the integer kernels' sign and
 *   offset tricks stay exact).  The same quantizer makes weight rows (at
 *   quantization time) and activation rows (per token, at run time), so a
 *   W8A8 matmul's activation rounding is this file's.  The header also keeps
 *   sum(q), which the VNNI kernel needs for its u8 offset (vpdpbusd).
 *
 * THREAD SAFETY
 *   Pure functions.
 */
#include <math.h>
#include <string.h>

#include "tensor/dtype.h"

float w8_row_scale(const void *row) {
    float d;
    memcpy(&d, row, sizeof d);
    return d;
}

int32_t w8_row_sum(const void *row) {
    int32_t s;
    memcpy(&s, (const char *)row + 4, sizeof s);
    return s;
}

void w8_quantize_row(const float *x, void *dst, int64_t n, const uint8_t *skip) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (!(skip && skip[i]) && a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    int8_t *q = (int8_t *)dst + W8_ROW_HEADER;
    int32_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = (skip && skip[i]) ? 0.0f : roundf(x[i] * id);
        if (v > 127.0f) v = 127.0f; /* x * (1/d) may round a hair above 127 */
        if (v < -127.0f) v = -127.0f;
        if (!(v == v)) v = 0.0f;    /* NaN input: keep the row finite-coded */
        q[i] = (int8_t)v;
        sum += q[i];
    }
    memcpy(dst, &d, sizeof d);
    memcpy((char *)dst + 4, &sum, sizeof sum);
}
