/*
 * vec_dot_quant_dotprod.c - q4_0, q5_0, iq4_nl, q4_1, q5_1 and q8_0 weight
 * rows with q8_0 activations on the Armv8.2 dot product (level dotprod; this file alone is
 * compiled with -march=armv8.2-a+dotprod): sdot (vdotq_s32) sums four int8
 * products into each int32 lane, exactly.  The float side is
 * quant_tile_neon.h's: the reference's bits (neon.h ARITHMETIC).
 */
#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>

#include "kernels/arm_neon/neon.h"
#include "kernels/arm_neon/kquant_neon.h"
#include "kernels/arm_neon/quant_tile_neon.h"

static inline int32_t sumi_q8_0_dotprod(const unsigned char *x, const int8_t *y) {
    int32x4_t acc = vdotq_s32(vdupq_n_s32(0), vld1q_s8((const int8_t *)x), vld1q_s8(y));
    acc = vdotq_s32(acc, vld1q_s8((const int8_t *)x + 16), vld1q_s8(y + 16));
    return vaddvq_s32(acc);
}

static inline int32_t sumi_q4_0_dotprod(const unsigned char *x, const int8_t *y) {
    const uint8x16_t q = vld1q_u8(x);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    int32x4_t acc = vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(y));
    acc = vdotq_s32(acc, hi, vld1q_s8(y + 16));
    return vaddvq_s32(acc);
}

static inline int32_t dot32_dotprod(int8x16_t lo, int8x16_t hi, const int8_t *y) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(y)), hi, vld1q_s8(y + 16)));
}
QT_SUMI(sumi_q5_0_dotprod, qt_unpack_q5_0, dot32_dotprod)
QT_SUMI(sumi_iq4_nl_dotprod, qt_unpack_iq4_nl, dot32_dotprod)
QT_SUMI(sumi_q4_1_dotprod, qt_unpack_q4_1, dot32_dotprod)
QT_SUMI(sumi_q5_1_dotprod, qt_unpack_q5_1, dot32_dotprod)

static inline int32_t dot16s_dotprod(int8x16_t w, const int8_t *y) {
    return vaddvq_s32(vdotq_s32(vdupq_n_s32(0), w, vld1q_s8(y)));
}
KQUANT_DEFINE(dotprod, dot16s_dotprod)

QUANT_TILE_DEFINE(vec_dot_q8_0_q8_0_dotprod, gemm_q8_0_q8_0_dotprod, sizeof(block_q8_0), sumi_q8_0_dotprod)
QUANT_TILE_DEFINE(vec_dot_q4_0_q8_0_dotprod, gemm_q4_0_q8_0_dotprod, sizeof(block_q4_0), sumi_q4_0_dotprod)
QUANT_TILE_DEFINE(vec_dot_q5_0_q8_0_dotprod, gemm_q5_0_q8_0_dotprod, sizeof(block_q5_0), sumi_q5_0_dotprod)
QUANT_TILE_DEFINE(vec_dot_iq4_nl_q8_0_dotprod, gemm_iq4_nl_q8_0_dotprod, sizeof(block_iq4_nl), sumi_iq4_nl_dotprod)
QUANT_TILE_DEFINE_MIN(vec_dot_q4_1_q8_0_dotprod, gemm_q4_1_q8_0_dotprod, sizeof(block_q4_1), sumi_q4_1_dotprod)
QUANT_TILE_DEFINE_MIN(vec_dot_q5_1_q8_0_dotprod, gemm_q5_1_q8_0_dotprod, sizeof(block_q5_1), sumi_q5_1_dotprod)

#else
typedef int kite_empty_unit_vec_dot_quant_dotprod; /* ISO C wants a declaration */
#endif
