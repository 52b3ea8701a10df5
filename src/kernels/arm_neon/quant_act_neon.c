/*
 * quant_act_neon.c - float activation rows to q8_0 on NEON (level neon):
 * the bytes of act_quantize_q8_0_ref.  amax by vmaxnm (fmaxf's NaN rule),
 * d = amax / 127 and its reciprocal in scalar float as the reference, the
 * f16 scale by fp32_to_fp16, and q = x * id rounded to nearest with ties
 * away from zero (fcvtas: roundf), narrowed to int8 (|q| <= 127).
 */
#if defined(__aarch64__)
#include <arm_neon.h>
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

#else
typedef int kite_empty_unit_quant_act_neon; /* ISO C wants a declaration */
#endif
