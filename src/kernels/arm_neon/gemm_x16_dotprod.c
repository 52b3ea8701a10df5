/*
 * gemm_x16_dotprod.c - the 16-row interleaved q4_0 / q8_0 kernels with the
 * Armv8.2 dot product (level dotprod; compiled with
 * -march=armv8.2-a+dotprod).  The layout's 4 bytes per row and chunk are
 * exactly one sdot lane: a 16-byte load is 4 rows, and vdotq_s32 against the
 * token's 4 activation bytes broadcast adds each row's 4 products into its
 * own int32 lane.  The arithmetic is x16_tile_neon.h's: the reference's bits.
 */
#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include "kernels/arm_neon/neon.h"
#include "kernels/arm_neon/x16_tile_neon.h"

static inline void x16_sum_q4_0_dotprod(const unsigned char *q, const int8_t *qa, int32x4_t s[4]) {
    for (int r = 0; r < 4; r++) s[r] = vdupq_n_s32(0);
    for (int j = 0; j < 4; j++) {
        const int8x16_t a0 = x16_bcast4(qa + 4 * j), a1 = x16_bcast4(qa + 16 + 4 * j);
        for (int r = 0; r < 4; r++) {
            const uint8x16_t c = vld1q_u8(q + 64 * j + 16 * r);
            s[r] = vdotq_s32(s[r], vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(0x0f))), a0);
            s[r] = vdotq_s32(s[r], vreinterpretq_s8_u8(vshrq_n_u8(c, 4)), a1);
        }
    }
}

static inline void x16_sum_q8_0_dotprod(const unsigned char *q, const int8_t *qa, int32x4_t s[4]) {
    for (int r = 0; r < 4; r++) s[r] = vdupq_n_s32(0);
    for (int j = 0; j < 8; j++) {
        const int8x16_t a = x16_bcast4(qa + 4 * j);
        for (int r = 0; r < 4; r++)
            s[r] = vdotq_s32(s[r], vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 64 * j + 16 * r), vdupq_n_u8(0x80))), a);
    }
}

X16_NEON_DEFINE(gemm_x16_q4_0_dotprod, x16_sum_q4_0_dotprod, 256, 0)
X16_NEON_DEFINE(gemm_x16_q8_0_dotprod, x16_sum_q8_0_dotprod, 512, 1)

#else
typedef int kite_empty_unit_gemm_x16_dotprod; /* ISO C wants a declaration */
#endif
