/*
 * x16_tile_neon.h - the 16-row interleaved q4_0 / q8_0 kernels (layout and
 * arithmetic in gemm_x16.h) on NEON, over a per-block integer sum SUM(q,
 * qa, s) of the group's 16 rows: s[r] (int32x4, rows 4r..4r+3) = the exact
 * sum over the block of w * a, with w signed (q4_0: the nibble 0..15 itself;
 * q8_0: the stored w + 128 xor 0x80, i.e. w).
 *
 * Per token and block: s + corr (+ 128 * sum(a) for q8_0, which turns the
 * signed sum into gemm_x16.h's unsigned one: the same int32), converted,
 * times d_w * d_a (a product rounded to float), added by one FMA: the
 * reference's float steps, so the result is the reference's bits.  Tokens
 * run one after the other over the group (weights re-read from cache).
 * Include from the arm_neon kernel files only.
 */
#ifndef KITE_KERNELS_ARM_X16_TILE_NEON_H
#define KITE_KERNELS_ARM_X16_TILE_NEON_H

#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_x16.h"

/* 4 activation bytes broadcast to every 32-bit lane */
static inline int8x16_t x16_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

/* Defines the kern_gemm_x16_fn NAME over SUM for blocks of QB quant bytes;
 * Q8 = 1 adds 128 * sum(a) (q8_0's offset). */
#define X16_NEON_DEFINE(NAME, SUM, QB, Q8)                                                                  \
    KERN_GEMM_X16_DECL(NAME) {                                                                              \
        const unsigned char *g = grp;                                                                       \
        for (int t = 0; t < nt; t++) {                                                                      \
            const unsigned char *at = (const unsigned char *)a + (size_t)t * a_stride;                      \
            float *yt = y + (int64_t)t * ldy;                                                               \
            float32x4_t f[4];                                                                               \
            for (int r = 0; r < 4; r++) f[r] = acc ? vld1q_f32(yt + 4 * r) : vdupq_n_f32(0.0f);             \
            for (int64_t b = 0; b < nb; b++) {                                                              \
                const int8_t *qa = (const int8_t *)(at + (size_t)b * 34 + 2); /* q8_0: d, then qs */        \
                int32x4_t s[4];                                                                             \
                SUM(g + kern_x16_quant_offset((QB), nb, b), qa, s);                                         \
                int32_t c = corr[(int64_t)t * c_stride + b];                                                \
                if (Q8) c += 128 * (vaddlvq_s8(vld1q_s8(qa)) + vaddlvq_s8(vld1q_s8(qa + 16)));              \
                const unsigned char *sc = g + kern_x16_scale_offset((QB), nb, b);                           \
                const float16x8_t h0 = vreinterpretq_f16_u8(vld1q_u8(sc)),                                  \
                                  h1 = vreinterpretq_f16_u8(vld1q_u8(sc + 16));                             \
                const float dab = da[(int64_t)t * c_stride + b];                                            \
                const float32x4_t dw[4] = {vcvt_f32_f16(vget_low_f16(h0)), vcvt_high_f32_f16(h0),           \
                                           vcvt_f32_f16(vget_low_f16(h1)), vcvt_high_f32_f16(h1)};          \
                for (int r = 0; r < 4; r++) {                                                               \
                    const float32x4_t sf = vcvtq_f32_s32(vaddq_s32(s[r], vdupq_n_s32(c)));                  \
                    f[r] = vfmaq_f32(f[r], sf, vmulq_n_f32(dw[r], dab));                                    \
                }                                                                                           \
            }                                                                                               \
            for (int r = 0; r < 4; r++) vst1q_f32(yt + 4 * r, f[r]);                                        \
        }                                                                                                   \
    }

#endif
