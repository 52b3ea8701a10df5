/*
 * quant_act_neon.c - float activation rows to q8_0 and q8_K on NEON (level
 * neon): the bytes of act_quantize_q8_0_ref / _q8_K_ref.  q8_0:  amax by vmaxnm (fmaxf's NaN rule),
 * d = amax / 127 and its reciprocal in scalar float as the reference, the
 * f16 scale by fp32_to_fp16, and q = x * id rounded to nearest with ties
 * away from zero (fcvtas: roundf), narrowed to int8 (|q| <= 127).
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/arm_neon/neon.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

void act_quantize_q8_0_neon(const float *x, void *dst, int64_t n) {
    unsigned char *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0, y += sizeof(block_q8_0)) {
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int j = 0; j < 8; j++) {
            v[j] = vld1q_f32(x + 4 * j);
            m = vmaxnmq_f32(m, vabsq_f32(v[j]));
        }
        const float amax = vmaxnmvq_f32(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = fp32_to_fp16(d);
        memcpy(y + offsetof(block_q8_0, d), &h, sizeof h);
        const float32x4_t vid = vdupq_n_f32(id);
        int8x8_t q[4];
        for (int j = 0; j < 4; j++) {
            const int32x4_t q0 = vcvtaq_s32_f32(vmulq_f32(v[2 * j], vid));
            const int32x4_t q1 = vcvtaq_s32_f32(vmulq_f32(v[2 * j + 1], vid));
            q[j] = vmovn_s16(vcombine_s16(vmovn_s32(q0), vmovn_s32(q1)));
        }
        int8_t *qs = (int8_t *)(y + offsetof(block_q8_0, qs));
        vst1q_s8(qs, vcombine_s8(q[0], q[1]));
        vst1q_s8(qs + 16, vcombine_s8(q[2], q[3]));
    }
}

/* q8_K: the bytes of act_quantize_q8_K_ref.  max is the first element of
 * largest magnitude (amax by vmaxnm, then the first index reaching it),
 * iscale = -127 / max, q = min(127, nearest-even(iscale * x)) (fcvtns: the
 * reference's 1.5 * 2^23 rounding for |v| <= 127.5), d = 1 / iscale, bsums by
 * saddlv per 16 quants. */
void act_quantize_q8_K_neon(const float *x, void *dst, int64_t n) {
    unsigned char *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K, y += sizeof(block_q8_K)) {
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int j = 0; j < QK_K; j += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + j)));
        const float amax = vmaxnmvq_f32(m);
        int8_t *qs = (int8_t *)(y + offsetof(block_q8_K, qs));
        int16_t bsums[QK_K / 16] = {0};
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(qs, 0, QK_K);
        } else {
            int jm = 0;
            while (fabsf(x[jm]) != amax) jm++; /* the first: amax is one of the |x| */
            const float iscale = -127.0f / x[jm];
            const float32x4_t is = vdupq_n_f32(iscale);
            for (int j = 0; j < QK_K; j += 16) {
                int16x8_t h[2];
                for (int k = 0; k < 2; k++) {
                    const int32x4_t v0 = vminq_s32(vcvtnq_s32_f32(vmulq_f32(is, vld1q_f32(x + j + 8 * k))), vdupq_n_s32(127));
                    const int32x4_t v1 = vminq_s32(vcvtnq_s32_f32(vmulq_f32(is, vld1q_f32(x + j + 8 * k + 4))), vdupq_n_s32(127));
                    h[k] = vcombine_s16(vmovn_s32(v0), vmovn_s32(v1));
                }
                const int8x16_t q = vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1]));
                vst1q_s8(qs + j, q);
                bsums[j / 16] = (int16_t)vaddlvq_s8(q);
            }
            d = 1.0f / iscale;
        }
        memcpy(y + offsetof(block_q8_K, d), &d, sizeof d);
        memcpy(y + offsetof(block_q8_K, bsums), bsums, sizeof bsums);
    }
}

#else
typedef int kite_empty_unit_quant_act_neon; /* ISO C wants a declaration */
#endif
