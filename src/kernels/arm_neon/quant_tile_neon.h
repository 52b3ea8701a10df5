/*
 * quant_tile_neon.h - the register-blocked flat-GEMM tiles of the q4_0,
 * q5_0, iq4_nl, q4_1, q5_1 and q8_0 x q8_0 kernels (levels neon and
 * dotprod), over a per-block exact int32 sum SUMI(weight block bytes after
 * the scale, activation quants), and the weight unpacking they share.
 *
 * Each output adds its block terms (float)sumi * (d_w * d_a) in block order,
 * the reference's float expression (ref/vec_dot_quant.c), so every tile size
 * gives vec_dot's bits (gemm_driver.h INVARIANTS) and both equal the
 * reference.  Scales are widened with fp16_to_fp32_inline (the reference's
 * bits, NaN payloads included).  Include from the arm_neon kernel files only.
 */
#ifndef KITE_KERNELS_ARM_QUANT_TILE_NEON_H
#define KITE_KERNELS_ARM_QUANT_TILE_NEON_H

#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_driver.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

static inline float qt_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32_inline(h);
}

/* ---- weight blocks to signed int8 (elements 0..15 in lo, 16..31 in hi);
 * p points past the block's f16 scale (and q4_1/q5_1's f16 min) ---- */

/* nibbles: element j the low nibble of byte j, j + 16 the high one */
static inline void qt_nibbles(const unsigned char *qs, uint8x16_t *lo, uint8x16_t *hi) {
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vandq_u8(q, vdupq_n_u8(0x0f));
    *hi = vshrq_n_u8(q, 4);
}

/* the fifth bits of q5_0/q5_1 (qh: element j in bit j), as 0x10 per element */
static inline void qt_fifth(const unsigned char *qhp, uint8x16_t *lo, uint8x16_t *hi) {
    static const uint8_t idx_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint32_t qh;
    memcpy(&qh, qhp, sizeof qh);
    const uint8x16_t h = vreinterpretq_u8_u32(vdupq_n_u32(qh)), bm = vld1q_u8(bits), il = vld1q_u8(idx_lo);
    const uint8x16_t l = vqtbl1q_u8(h, il), u = vqtbl1q_u8(h, vaddq_u8(il, vdupq_n_u8(2)));
    *lo = vandq_u8(vtstq_u8(l, bm), vdupq_n_u8(0x10));
    *hi = vandq_u8(vtstq_u8(u, bm), vdupq_n_u8(0x10));
}

static inline void qt_unpack_q4_0(const unsigned char *p, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t l, h;
    qt_nibbles(p, &l, &h);
    *lo = vsubq_s8(vreinterpretq_s8_u8(l), vdupq_n_s8(8));
    *hi = vsubq_s8(vreinterpretq_s8_u8(h), vdupq_n_s8(8));
}
/* q5_0: p at qh[4], then qs; w = (nibble | fifth bit << 4) - 16 */
static inline void qt_unpack_q5_0(const unsigned char *p, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t l, h, fl, fh;
    qt_nibbles(p + 4, &l, &h);
    qt_fifth(p, &fl, &fh);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l, fl)), vdupq_n_s8(16));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(h, fh)), vdupq_n_s8(16));
}
/* iq4_nl: the nibbles index kite_iq4nl_values */
static inline void qt_unpack_iq4_nl(const unsigned char *p, int8x16_t *lo, int8x16_t *hi) {
    const int8x16_t tbl = vld1q_s8(kite_iq4nl_values);
    uint8x16_t l, h;
    qt_nibbles(p, &l, &h);
    *lo = vqtbl1q_s8(tbl, l);
    *hi = vqtbl1q_s8(tbl, h);
}
/* q4_1: the unsigned nibbles (0..15) */
static inline void qt_unpack_q4_1(const unsigned char *p, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t l, h;
    qt_nibbles(p, &l, &h);
    *lo = vreinterpretq_s8_u8(l);
    *hi = vreinterpretq_s8_u8(h);
}
/* q5_1: p at qh[4], then qs; unsigned 0..31 */
static inline void qt_unpack_q5_1(const unsigned char *p, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t l, h, fl, fh;
    qt_nibbles(p + 4, &l, &h);
    qt_fifth(p, &fl, &fh);
    *lo = vreinterpretq_s8_u8(vorrq_u8(l, fl));
    *hi = vreinterpretq_s8_u8(vorrq_u8(h, fh));
}

/* SUMI over an unpacked block: UNPACK then DOT32(lo, hi, y), the level's
 * exact int32 dot of 32 int8 pairs */
#define QT_SUMI(NAME, UNPACK, DOT32)                                                                            static inline int32_t NAME(const unsigned char *p, const int8_t *y) {                                           int8x16_t lo, hi;                                                                                           UNPACK(p, &lo, &hi);                                                                                        return DOT32(lo, hi, y);                                                                                }

/* q4_1 / q5_1 (WB-byte blocks: d, m, then qs or qh + qs) with q8_0
 * activations: per block (float)sumi * (d_w * d_a) + (float)suma * (m_w * d_a),
 * suma the activation block's sum, the reference's expression
 * (ref/vec_dot_quant.c dot_q41_ref); 4x4 tiles as QUANT_TILE_DEFINE. */
#define QUANT_TILE_DEFINE_MIN(VEC, GEMM, WB, SUMI)                                                              static inline __attribute__((always_inline)) void VEC##_tile(int64_t nb, float *y, int64_t ldy,                                                                          const unsigned char *w, size_t ws,                                                                           const unsigned char *a, size_t as, int NR,                                                                   int NT) {                                          float sum[4][4] = {{0}};                                                                                    for (int64_t b = 0; b < nb; b++) {                                                                              float dw[4], mw[4], da[4];                                                                                  int32_t suma[4];                                                                                            for (int r = 0; r < NR; r++) {                                                                                  dw[r] = qt_half(w + (size_t)r * ws + (size_t)b * (WB));                                                     mw[r] = qt_half(w + (size_t)r * ws + (size_t)b * (WB) + 2);                                             }                                                                                                           for (int t = 0; t < NT; t++) {                                                                                  const unsigned char *ab = a + (size_t)t * as + (size_t)b * sizeof(block_q8_0);                              da[t] = qt_half(ab);                                                                                        suma[t] = vaddlvq_s8(vld1q_s8((const int8_t *)(ab + 2))) +                                                            vaddlvq_s8(vld1q_s8((const int8_t *)(ab + 18)));                                              }                                                                                                           for (int r = 0; r < NR; r++)                                                                                    for (int t = 0; t < NT; t++) {                                                                                  const int32_t s = SUMI(w + (size_t)r * ws + (size_t)b * (WB) + 4,                                                                  (const int8_t *)(a + (size_t)t * as + (size_t)b * sizeof(block_q8_0) + 2));                     sum[r][t] += (float)s * (dw[r] * da[t]) + (float)suma[t] * (mw[r] * da[t]);                             }                                                                                                   }                                                                                                           for (int r = 0; r < NR; r++)                                                                                    for (int t = 0; t < NT; t++) y[(int64_t)t * ldy + r] = sum[r][t];                                   }                                                                                                           void VEC(int64_t n, float *out, const void *w, const void *a) {                                                 VEC##_tile(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);                                                        }                                                                                                           KERN_GEMM_DRIVER(GEMM, VEC##_tile, QK8_0, 4, 4, ROWS_OUTER, KERN_GEMM_TAIL_SINGLE)

/* Defines NAME##_tile (a gemm_driver.h KERNEL), the vec_dot NAME##_vec and
 * gemm NAME##_gemm for weight blocks of WB bytes (scale first) with q8_0
 * activation blocks. */
#define QUANT_TILE_DEFINE(VEC, GEMM, WB, SUMI)                                                              \
    static inline __attribute__((always_inline)) void VEC##_tile(int64_t nb, float *y, int64_t ldy,         \
                                                                 const unsigned char *w, size_t ws,          \
                                                                 const unsigned char *a, size_t as, int NR,  \
                                                                 int NT) {                                  \
        float sum[4][4] = {{0}};                                                                            \
        for (int64_t b = 0; b < nb; b++) {                                                                  \
            float dw[4], da[4];                                                                             \
            for (int r = 0; r < NR; r++) dw[r] = qt_half(w + (size_t)r * ws + (size_t)b * (WB));            \
            for (int t = 0; t < NT; t++) da[t] = qt_half(a + (size_t)t * as + (size_t)b * sizeof(block_q8_0)); \
            for (int r = 0; r < NR; r++)                                                                    \
                for (int t = 0; t < NT; t++) {                                                              \
                    const int32_t s = SUMI(w + (size_t)r * ws + (size_t)b * (WB) + 2,                       \
                                           (const int8_t *)(a + (size_t)t * as + (size_t)b * sizeof(block_q8_0) + 2)); \
                    sum[r][t] += (float)s * (dw[r] * da[t]);                                                \
                }                                                                                           \
        }                                                                                                   \
        for (int r = 0; r < NR; r++)                                                                        \
            for (int t = 0; t < NT; t++) y[(int64_t)t * ldy + r] = sum[r][t];                               \
    }                                                                                                       \
    void VEC(int64_t n, float *out, const void *w, const void *a) {                                         \
        VEC##_tile(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);                                                    \
    }                                                                                                       \
    KERN_GEMM_DRIVER(GEMM, VEC##_tile, QK8_0, 4, 4, ROWS_OUTER, KERN_GEMM_TAIL_SINGLE)

#endif
