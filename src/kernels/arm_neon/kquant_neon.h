/*
 * kquant_neon.h - q4_K, q5_K, q6_K and iq4_xs weight rows with q8_K activations on NEON,
 * over the level's exact int32 dot of 16 int8 pairs DOT16(w, y) (levels
 * neon and dotprod).  The integer sums are exact whatever their order; the
 * float expressions are the reference's (ref/vec_dot_quant.c):
 *   q4_K, q5_K: d = d_w * dy, dmin = dmin_w * dy, sum += d * isum - dmin * msum;
 *   q6_K, iq4_xs: sum += d_w * dy * isum;
 * super-blocks added in order: the reference's bits.  Include from the
 * arm_neon kernel files only.
 */
#ifndef KITE_KERNELS_ARM_KQUANT_NEON_H
#define KITE_KERNELS_ARM_KQUANT_NEON_H

#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

static inline float kq_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32_inline(h);
}
static inline float kq_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* bit j of each qh byte as 0x10 (q5_K's fifth bits of sub-block j) */
static inline uint8x16_t kq_fifth(uint8x16_t h, int j) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << j))), vdupq_n_u8(0x10));
}

/* q4_K (Q5 = 0) and q5_K (Q5 = 1: the same header, the element's fifth bit
 * from bit j of qh[k], as ref/vec_dot_quant.c dot_q45_K) */
#define KQUANT_DEFINE(SUFFIX, DOT16)                                                                        \
    static inline __attribute__((always_inline)) void dot_q45_K_##SUFFIX(const int Q5, int64_t n, float *out, \
                                                                        const void *w, const void *a) {     \
        const unsigned char *x = w, *y = a;                                                                 \
        const size_t bb = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);                                     \
        float sum = 0.0f;                                                                                   \
        for (int64_t b = 0; b < n / QK_K; b++, x += bb, y += sizeof(block_q8_K)) {                          \
            const uint8_t *scales = x + offsetof(block_q4_K, scales);                                       \
            const uint8_t *qs = x + (Q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));             \
            const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));                              \
            const unsigned char *bsums = y + offsetof(block_q8_K, bsums);                                   \
            uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);                                              \
            if (Q5) {                                                                                       \
                h0 = vld1q_u8(x + offsetof(block_q5_K, qh));                                                \
                h1 = vld1q_u8(x + offsetof(block_q5_K, qh) + 16);                                           \
            }                                                                                               \
            int32_t isum = 0, msum = 0;                                                                     \
            for (int jp = 0; jp < 4; jp++) { /* sub-blocks 2jp (low nibbles) and 2jp + 1 (high) */          \
                const uint8x16_t c0 = vld1q_u8(qs + 32 * jp), c1 = vld1q_u8(qs + 32 * jp + 16);             \
                uint8x16_t u00 = vandq_u8(c0, vdupq_n_u8(0x0f)), u01 = vandq_u8(c1, vdupq_n_u8(0x0f));      \
                uint8x16_t u10 = vshrq_n_u8(c0, 4), u11 = vshrq_n_u8(c1, 4);                                \
                if (Q5) {                                                                                   \
                    u00 = vorrq_u8(u00, kq_fifth(h0, 2 * jp));                                              \
                    u01 = vorrq_u8(u01, kq_fifth(h1, 2 * jp));                                              \
                    u10 = vorrq_u8(u10, kq_fifth(h0, 2 * jp + 1));                                          \
                    u11 = vorrq_u8(u11, kq_fifth(h1, 2 * jp + 1));                                          \
                }                                                                                           \
                const int8_t *a0 = q8 + 64 * jp;                                                            \
                const int32_t s0 = DOT16(vreinterpretq_s8_u8(u00), a0) + DOT16(vreinterpretq_s8_u8(u01), a0 + 16); \
                const int32_t s1 = DOT16(vreinterpretq_s8_u8(u10), a0 + 32) + DOT16(vreinterpretq_s8_u8(u11), a0 + 48); \
                for (int e = 0; e < 2; e++) {                                                               \
                    const int j = 2 * jp + e;                                                               \
                    int sc, m;                                                                              \
                    ref_scale_min_k4(j, scales, &sc, &m);                                                   \
                    isum += sc * (e ? s1 : s0);                                                             \
                    int16_t b0, b1;                                                                         \
                    memcpy(&b0, bsums + 4 * j, 2);                                                          \
                    memcpy(&b1, bsums + 4 * j + 2, 2);                                                      \
                    msum += m * (b0 + b1);                                                                  \
                }                                                                                           \
            }                                                                                               \
            const float dy = kq_f32(y + offsetof(block_q8_K, d));                                           \
            const float d = kq_half(x + offsetof(block_q4_K, d)) * dy;                                      \
            const float dmin = kq_half(x + offsetof(block_q4_K, dmin)) * dy;                                \
            sum += d * (float)isum - dmin * (float)msum;                                                    \
        }                                                                                                   \
        *out = sum;                                                                                         \
    }                                                                                                       \
    void vec_dot_q4_K_q8_K_##SUFFIX(int64_t n, float *out, const void *w, const void *a) {                  \
        dot_q45_K_##SUFFIX(0, n, out, w, a);                                                                \
    }                                                                                                       \
    void vec_dot_q5_K_q8_K_##SUFFIX(int64_t n, float *out, const void *w, const void *a) {                  \
        dot_q45_K_##SUFFIX(1, n, out, w, a);                                                                \
    }                                                                                                       \
    void vec_dot_q6_K_q8_K_##SUFFIX(int64_t n, float *out, const void *w, const void *a) {                  \
        const unsigned char *x = w, *y = a;                                                                 \
        float sum = 0.0f;                                                                                   \
        for (int64_t b = 0; b < n / QK_K; b++, x += sizeof(block_q6_K), y += sizeof(block_q8_K)) {          \
            const uint8_t *ql = x + offsetof(block_q6_K, ql), *qh = x + offsetof(block_q6_K, qh);           \
            const int8_t *sc = (const int8_t *)(x + offsetof(block_q6_K, scales));                          \
            const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));                              \
            const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x03);                                  \
            const int8x16_t off = vdupq_n_s8(32);                                                           \
            int32_t isum = 0;                                                                               \
            for (int h = 0; h < 2; h++)                                                                     \
                for (int k = 0; k < 32; k += 16) { /* elements 128h + k + {0, 32, 64, 96} .. +15 */         \
                    const uint8x16_t l0 = vld1q_u8(ql + 64 * h + k), l1 = vld1q_u8(ql + 64 * h + 32 + k);   \
                    const uint8x16_t hh = vld1q_u8(qh + 32 * h + k);                                        \
                    const uint8x16_t u[4] = {                                                               \
                        vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(hh, m3), 4)),                        \
                        vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 2), m3), 4)),         \
                        vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 4), m3), 4)),        \
                        vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hh, 6), 4))};                     \
                    for (int q = 0; q < 4; q++) {                                                           \
                        const int e = 128 * h + 32 * q + k; /* first element; group e / 16 */               \
                        isum += sc[e / 16] * DOT16(vsubq_s8(vreinterpretq_s8_u8(u[q]), off), q8 + e);       \
                    }                                                                                       \
                }                                                                                           \
            sum += kq_half(x + offsetof(block_q6_K, d)) * kq_f32(y + offsetof(block_q8_K, d)) * (float)isum; \
        }                                                                                                   \
        *out = sum;                                                                                         \
    }                                                                                                       \
    /* iq4_xs: per sub-block j (ls_j - 32) * sum(v[q] * a), v the iq4_nl codebook; q6_K's float expression */ \
    void vec_dot_iq4_xs_q8_K_##SUFFIX(int64_t n, float *out, const void *w, const void *a) {                \
        const unsigned char *x = w, *y = a;                                                                 \
        const int8x16_t tbl = vld1q_s8(kite_iq4nl_values);                                                  \
        float sum = 0.0f;                                                                                   \
        for (int64_t b = 0; b < n / QK_K; b++, x += sizeof(block_iq4_xs), y += sizeof(block_q8_K)) {        \
            const uint8_t *qs = x + offsetof(block_iq4_xs, qs), *sl = x + offsetof(block_iq4_xs, scales_l); \
            const int8_t *q8 = (const int8_t *)(y + offsetof(block_q8_K, qs));                              \
            uint16_t sh;                                                                                    \
            memcpy(&sh, x + offsetof(block_iq4_xs, scales_h), sizeof sh);                                   \
            int32_t isum = 0;                                                                               \
            for (int j = 0; j < QK_K / 32; j++) {                                                           \
                const int ls = ((sl[j / 2] >> (4 * (j & 1))) & 0xF) | ((sh >> (2 * j)) & 3) << 4;           \
                const uint8x16_t c = vld1q_u8(qs + 16 * j);                                                 \
                const int32_t sj = DOT16(vqtbl1q_s8(tbl, vandq_u8(c, vdupq_n_u8(0x0f))), q8 + 32 * j) +     \
                                   DOT16(vqtbl1q_s8(tbl, vshrq_n_u8(c, 4)), q8 + 32 * j + 16);              \
                isum += (ls - 32) * sj;                                                                     \
            }                                                                                               \
            sum += kq_half(x + offsetof(block_iq4_xs, d)) * kq_f32(y + offsetof(block_q8_K, d)) * (float)isum; \
        }                                                                                                   \
        *out = sum;                                                                                         \
    }                                                                                                       \
    KERN_DEFINE_GEMM(gemm_iq4_xs_q8_K_##SUFFIX, vec_dot_iq4_xs_q8_K_##SUFFIX)                               \
    KERN_DEFINE_GEMM(gemm_q4_K_q8_K_##SUFFIX, vec_dot_q4_K_q8_K_##SUFFIX)                                   \
    KERN_DEFINE_GEMM(gemm_q6_K_q8_K_##SUFFIX, vec_dot_q6_K_q8_K_##SUFFIX)                                   \
    KERN_DEFINE_GEMM(gemm_q5_K_q8_K_##SUFFIX, vec_dot_q5_K_q8_K_##SUFFIX)

#endif
