/*
 * quant_act.c - quantization of float activation rows into the 8-bit block
 * formats of the integer dot products (q8_0, q8_K).
 *
 * The bytes equal those of ggml's reference quantizers, so kite's integer
 * results can be compared with llama.cpp's:
 *   q8_0: per 32 elements d = amax/127 (stored as f16), q = roundf(x / d)
 *         with the float reciprocal of the unrounded d; q in [-127, 127].
 *   q8_K: per 256 elements, max = the element of largest magnitude (first
 *         one on ties), iscale = -127/max, q = min(127, nearest(iscale*x))
 *         (ties to even), d = 1/iscale (float), bsums = sums of 16 q's.
 *         q is in [-127, 127] as well: no activation is ever -128, which the
 *         SIMD sign tricks rely on.
 * An all-zero block gets d = 0 and zero quants (and zero bsums).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

static inline int round_even(float f) { /* |f| <= 127.5 here */
    float v = f + 12582912.f;           /* 1.5 * 2^23: the mantissa holds the rounded value */
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void act_quantize_q8_0_ref(const float *x, void *dst, int64_t n) {
    unsigned char *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0, y += sizeof(block_q8_0)) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = fp32_to_fp16(d);
        memcpy(y + offsetof(block_q8_0, d), &h, sizeof h);
        int8_t *qs = (int8_t *)(y + offsetof(block_q8_0, qs));
        for (int j = 0; j < QK8_0; j++) qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void act_quantize_q8_K_ref(const float *x, void *dst, int64_t n) {
    unsigned char *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K, y += sizeof(block_q8_K)) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        int8_t *qs = (int8_t *)(y + offsetof(block_q8_K, qs));
        int16_t bsums[QK_K / 16] = {0};
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(qs, 0, QK_K);
        } else {
            const float iscale = -127.0f / max;
            for (int j = 0; j < QK_K; j++) {
                const int v = round_even(iscale * x[j]);
                qs[j] = (int8_t)(v < 127 ? v : 127);
            }
            for (int g = 0; g < QK_K / 16; g++) {
                int s = 0;
                for (int k = 0; k < 16; k++) s += qs[16 * g + k];
                bsums[g] = (int16_t)s;
            }
            d = 1.0f / iscale;
        }
        memcpy(y + offsetof(block_q8_K, d), &d, sizeof d);
        memcpy(y + offsetof(block_q8_K, bsums), bsums, sizeof bsums);
    }
}
