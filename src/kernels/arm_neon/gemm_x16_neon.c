/*
 * gemm_x16_neon.c - the 16-row interleaved q4_0 / q8_0 kernels on plain
 * NEON (level neon; x16_tile_neon.h gives the arithmetic: the reference's
 * bits).  A 16-byte load is 4 rows x 4 weights; vmull_s8 against the
 * token's 4 activation bytes (twice) gives rows 2k and 2k+1's products in
 * int16, vpadalq_s16 adds their pairs into int32 (exact: no int16 sum), and
 * one vpaddq_s32 per 4 rows at the end of the block leaves one row per lane.
 */
#if defined(__aarch64__)
#include "kernels/arm_neon/neon.h"
#include "kernels/arm_neon/x16_tile_neon.h"

/* rows 4r..4r+3 of one 16-byte chunk w with activation bytes a (4, repeated) */
static inline void x16_mul4(int8x16_t w, int8x16_t a, int32x4_t *lo, int32x4_t *hi) {
    *lo = vpadalq_s16(*lo, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
    *hi = vpadalq_s16(*hi, vmull_high_s8(w, a));
}

static inline void x16_sum_q4_0_neon(const unsigned char *q, const int8_t *qa, int32x4_t s[4]) {
    int32x4_t lo[4], hi[4];
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = vdupq_n_s32(0);
    for (int j = 0; j < 4; j++) {
        const int8x16_t a0 = x16_bcast4(qa + 4 * j), a1 = x16_bcast4(qa + 16 + 4 * j);
        for (int r = 0; r < 4; r++) {
            const uint8x16_t c = vld1q_u8(q + 64 * j + 16 * r);
            x16_mul4(vreinterpretq_s8_u8(vandq_u8(c, vdupq_n_u8(0x0f))), a0, &lo[r], &hi[r]);
            x16_mul4(vreinterpretq_s8_u8(vshrq_n_u8(c, 4)), a1, &lo[r], &hi[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = vpaddq_s32(lo[r], hi[r]);
}

static inline void x16_sum_q8_0_neon(const unsigned char *q, const int8_t *qa, int32x4_t s[4]) {
    int32x4_t lo[4], hi[4];
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = vdupq_n_s32(0);
    for (int j = 0; j < 8; j++) {
        const int8x16_t a = x16_bcast4(qa + 4 * j);
        for (int r = 0; r < 4; r++) {
            const int8x16_t w = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + 64 * j + 16 * r), vdupq_n_u8(0x80)));
            x16_mul4(w, a, &lo[r], &hi[r]);
        }
    }
    for (int r = 0; r < 4; r++) s[r] = vpaddq_s32(lo[r], hi[r]);
}

X16_NEON_DEFINE(gemm_x16_q4_0_neon, x16_sum_q4_0_neon, 256, 0)
X16_NEON_DEFINE(gemm_x16_q8_0_neon, x16_sum_q8_0_neon, 512, 1)

#else
typedef int kite_empty_unit_gemm_x16_neon; /* ISO C wants a declaration */
#endif
