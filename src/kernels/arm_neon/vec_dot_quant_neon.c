/*
 * vec_dot_quant_neon.c - q4_0, q5_0, iq4_nl, q4_1, q5_1 and q8_0 weight rows
 * with q8_0 activations on plain Armv8-A NEON (level neon; the weights
 * unpacked to int8 by quant_tile_neon.h): a block's 32 int8 x int8 products by
 * vmull_s8 (int16, exact: |p| <= 128*128) summed pairwise into int32 by
 * vpadalq_s16, then across lanes (vaddvq_s32).  The float side is
 * quant_tile_neon.h's: the reference's bits (neon.h ARITHMETIC).
 */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/arm_neon/neon.h"
#include "kernels/arm_neon/kquant_neon.h"
#include "kernels/arm_neon/quant_tile_neon.h"

/* sum of x[i]*y[i], i < 16, added to acc (int32 lanes) */
static inline int32x4_t dot16_neon(int32x4_t acc, int8x16_t x, int8x16_t y) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(x), vget_low_s8(y)));
    return vpadalq_s16(acc, vmull_high_s8(x, y));
}

/* q8_0 block: 32 int8 quants at x (after the scale) */
static inline int32_t sumi_q8_0_neon(const unsigned char *x, const int8_t *y) {
    int32x4_t acc = dot16_neon(vdupq_n_s32(0), vld1q_s8((const int8_t *)x), vld1q_s8(y));
    acc = dot16_neon(acc, vld1q_s8((const int8_t *)x + 16), vld1q_s8(y + 16));
    return vaddvq_s32(acc);
}

/* q4_0 block: 16 bytes at x, element i the low nibble of x[i], i+16 the high
 * one, each minus 8 */
static inline int32_t sumi_q4_0_neon(const unsigned char *x, const int8_t *y) {
    const uint8x16_t q = vld1q_u8(x);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    int32x4_t acc = dot16_neon(vdupq_n_s32(0), lo, vld1q_s8(y));
    acc = dot16_neon(acc, hi, vld1q_s8(y + 16));
    return vaddvq_s32(acc);
}

/* 32 weights (lo: elements 0..15, hi: 16..31) with 32 activations at y */
static inline int32_t dot32_neon(int8x16_t lo, int8x16_t hi, const int8_t *y) {
    return vaddvq_s32(dot16_neon(dot16_neon(vdupq_n_s32(0), lo, vld1q_s8(y)), hi, vld1q_s8(y + 16)));
}
QT_SUMI(sumi_q5_0_neon, qt_unpack_q5_0, dot32_neon)
QT_SUMI(sumi_iq4_nl_neon, qt_unpack_iq4_nl, dot32_neon)
QT_SUMI(sumi_q4_1_neon, qt_unpack_q4_1, dot32_neon)
QT_SUMI(sumi_q5_1_neon, qt_unpack_q5_1, dot32_neon)

static inline int32_t dot16s_neon(int8x16_t w, const int8_t *y) {
    return vaddvq_s32(dot16_neon(vdupq_n_s32(0), w, vld1q_s8(y)));
}
KQUANT_DEFINE(neon, dot16s_neon)

QUANT_TILE_DEFINE(vec_dot_q8_0_q8_0_neon, gemm_q8_0_q8_0_neon, sizeof(block_q8_0), sumi_q8_0_neon)
QUANT_TILE_DEFINE(vec_dot_q4_0_q8_0_neon, gemm_q4_0_q8_0_neon, sizeof(block_q4_0), sumi_q4_0_neon)
QUANT_TILE_DEFINE(vec_dot_q5_0_q8_0_neon, gemm_q5_0_q8_0_neon, sizeof(block_q5_0), sumi_q5_0_neon)
QUANT_TILE_DEFINE(vec_dot_iq4_nl_q8_0_neon, gemm_iq4_nl_q8_0_neon, sizeof(block_iq4_nl), sumi_iq4_nl_neon)
QUANT_TILE_DEFINE_MIN(vec_dot_q4_1_q8_0_neon, gemm_q4_1_q8_0_neon, sizeof(block_q4_1), sumi_q4_1_neon)
QUANT_TILE_DEFINE_MIN(vec_dot_q5_1_q8_0_neon, gemm_q5_1_q8_0_neon, sizeof(block_q5_1), sumi_q5_1_neon)

#else
typedef int kite_empty_unit_vec_dot_quant_neon; /* ISO C wants a declaration */
#endif
