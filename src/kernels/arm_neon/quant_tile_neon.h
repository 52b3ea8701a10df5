/*
 * quant_tile_neon.h - the register-blocked flat-GEMM tile of the q4_0/q8_0
 * x q8_0 kernels (levels neon and dotprod), over a per-block exact int32
 * sum SUMI(weight block bytes, activation block bytes).
 *
 * Each output adds its block terms (float)sumi * (d_w * d_a) in block order,
 * the reference's float expression (ref/vec_dot_quant.c), so every tile size
 * gives vec_dot's bits (gemm_driver.h INVARIANTS) and both equal the
 * reference.  Scales are widened with fp16_to_fp32_inline (the reference's
 * bits, NaN payloads included).  Include from the arm_neon kernel files only.
 */
#ifndef KITE_KERNELS_ARM_QUANT_TILE_NEON_H
#define KITE_KERNELS_ARM_QUANT_TILE_NEON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_driver.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

static inline float qt_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32_inline(h);
}

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
