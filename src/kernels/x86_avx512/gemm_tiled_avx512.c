/*
 * gemm_tiled_avx512.c - tiled prefill GEMM on zmm (gemm_tiled.h).
 *
 * Float weights (f32/f16/bf16) x f32 activations live in
 * vec_dot_float_avx512.c (one micro-kernel for vec_dot, flat and tiled GEMM)
 * and bf16 x bf16 activations in bf16_avx512bf16.c.
 *
 * q8_0 / q4_0 weights x q8_0 activations (avx512vnni): micro-kernel of
 * QMR = 4 rows x QNR = 4 tokens; two 32-element blocks per zmm as in the
 * flat VNNI kernel, and the same float order (block-pair FMA of the int32
 * lanes times d_w*d_a, an odd last block as a pair with a zero upper half
 * and scale 0, _mm512_reduce_add_ps), so results equal vec_dot_*_vnni bit
 * for bit.  Signed x signed products need one unsigned
 * operand for vpdpbusd; the correction is folded into the accumulator input:
 *   q8_0: activations a+128 (xor 0x80) as unsigned; per weight vector
 *         c = vpdpbusd(0, 128, w) (128*sum of each lane's 4 weights), and
 *         sum(w*a) = vpdpbusd(-c, a+128, w).
 *   q4_0: nibbles u unsigned; per activation vector c = vpdpbusd(0, 8, a),
 *         sum((u-8)*a) = vpdpbusd(-c, u, a).
 * All int32 sums are exact (|sum| < 2^17).
 *
 * Cache tiling: weight rows in blocks of GEMM_TILED_L2_BYTES; inside a
 * block, token groups outside row micro-tiles.
 *
 * THREAD SAFETY: reentrant, no state.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/gemm_tiled.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define QMR 4
#define QNR 4

/* Rows per cache block: about GEMM_TILED_L2_BYTES of weights, a multiple of m. */
static int64_t rows_per_block(size_t row_bytes, int m) {
    int64_t rb = (int64_t)(GEMM_TILED_L2_BYTES / (row_bytes ? row_bytes : 1));
    rb -= rb % m;
    return rb < m ? m : rb;
}

/* ---- q8_0 / q4_0 weights x q8_0 activations (VNNI) ---- */

enum { T_Q8_0 = 0, T_Q4_0 = 1 };

static ALWAYS_INLINE uint16_t ld_u16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}
static ALWAYS_INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static ALWAYS_INLINE __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
/* lanes 0..7 = half h0, 8..15 = half h1, widened exactly (vcvtph2ps) */
static ALWAYS_INLINE __m512 scales2(uint16_t h0, uint16_t h1) {
    return _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16((short)h0), 0xFF00, (short)h1));
}
/* weight quants of blocks x0 (low half) and x1 (high half; NULL: zeros).
 * q4_0: each block's 16 bytes broadcast to both 128-bit lanes of its half,
 * shifted right by 0 (first lane) or 4 (second) and masked: the nibbles in
 * element order. */
static ALWAYS_INLINE __m512i wq(int ty, const unsigned char *x0, const unsigned char *x1) {
    if (ty == T_Q8_0) {
        const __m256i lo = ld256(x0 + offsetof(block_q8_0, qs));
        return x1 ? join(lo, ld256(x1 + offsetof(block_q8_0, qs))) : _mm512_zextsi256_si512(lo);
    }
    const __m512i shift = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll,
                                           0x0004000400040004ll, 0, 0);
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)(x0 + offsetof(block_q4_0, qs)));
    __m512i t = _mm512_broadcast_i32x4(q0);
    t = x1 ? _mm512_mask_broadcast_i32x4(t, 0xFF00,
                                         _mm_loadu_si128((const __m128i *)(const void *)(x1 + offsetof(block_q4_0, qs))))
           : _mm512_maskz_broadcast_i32x4(0x00FF, q0);
    return _mm512_and_si512(_mm512_srlv_epi16(t, shift), _mm512_set1_epi8(0x0F));
}

/* One block pair at block b (two = 0: block b alone, upper half zero with
 * scale 0, as the flat kernel does) for mr rows x nr tokens. */
static ALWAYS_INLINE void step_q(int ty, int mr, int nr, __m512 acc[QMR][QNR], int64_t b, int two,
                                 const unsigned char *w, size_t ws, const unsigned char *a, size_t as) {
    const size_t wbs = ty == T_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0), qbs = sizeof(block_q8_0);
    const __m512i c80 = _mm512_set1_epi8((char)0x80), c8 = _mm512_set1_epi8(8), z = _mm512_setzero_si512();
    __m512i wv[QMR], wc[QMR];
    __m512 dw[QMR];
#pragma GCC unroll 8
    for (int r = 0; r < QMR; r++) {
        if (r >= mr) break;
        const unsigned char *x0 = w + r * ws + (size_t)b * wbs, *x1 = two ? x0 + wbs : NULL;
        wv[r] = wq(ty, x0, x1);
        if (ty == T_Q8_0) wc[r] = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, c80, wv[r]));
        dw[r] = scales2(ld_u16(x0), two ? ld_u16(x1) : 0);
    }
#pragma GCC unroll 8
    for (int t = 0; t < QNR; t++) {
        if (t >= nr) break;
        const unsigned char *y0 = a + t * as + (size_t)b * qbs, *y1 = y0 + qbs;
        const __m256i lo = ld256(y0 + offsetof(block_q8_0, qs));
        const __m512i q = two ? join(lo, ld256(y1 + offsetof(block_q8_0, qs))) : _mm512_zextsi256_si512(lo);
        const __m512 da = scales2(ld_u16(y0), two ? ld_u16(y1) : 0);
        __m512i qu = q, ac = z;
        if (ty == T_Q8_0) qu = _mm512_xor_si512(q, c80);
        else ac = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, c8, q));
#pragma GCC unroll 8
        for (int r = 0; r < QMR; r++) {
            if (r >= mr) break;
            const __m512i s = ty == T_Q8_0 ? _mm512_dpbusd_epi32(wc[r], qu, wv[r]) : _mm512_dpbusd_epi32(ac, wv[r], q);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], da), acc[r][t]);
        }
    }
}

/* mr x nr outputs (mr <= QMR, nr <= QNR); nb blocks per row. */
static ALWAYS_INLINE void micro_q(int ty, int mr, int nr, int64_t nb, const unsigned char *w, size_t ws,
                                  const unsigned char *a, size_t as, float *y, int64_t ldy) {
    __m512 acc[QMR][QNR];
#pragma GCC unroll 8
    for (int r = 0; r < QMR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < QNR; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) step_q(ty, mr, nr, acc, b, 1, w, ws, a, as);
    if (b < nb) step_q(ty, mr, nr, acc, b, 0, w, ws, a, as);
#pragma GCC unroll 8
    for (int t = 0; t < QNR; t++)
#pragma GCC unroll 8
        for (int r = 0; r < QMR; r++)
            if (t < nr && r < mr) y[(int64_t)t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

static ALWAYS_INLINE void gemm_q(int ty, int64_t n, float *y, int64_t ldy, const void *w, size_t ws, int nr,
                                 const void *a, size_t as, int nt) {
    const unsigned char *wb = w, *ab = a;
    const int64_t nb = n / QK8_0, rb = rows_per_block(ws, QMR);
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        const int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < nt; t += QNR) {
            const int tn = nt - t < QNR ? nt - t : QNR;
            const unsigned char *at = ab + (size_t)t * as;
            for (int64_t r = r0; r < r1; r += QMR) {
                const int rn = (int)(r1 - r < QMR ? r1 - r : QMR);
                const unsigned char *wr = wb + (size_t)r * ws;
                float *yo = y + (int64_t)t * ldy + r;
                if (rn == QMR) switch (tn) {
                    case 4: micro_q(ty, QMR, 4, nb, wr, ws, at, as, yo, ldy); break;
                    case 3: micro_q(ty, QMR, 3, nb, wr, ws, at, as, yo, ldy); break;
                    case 2: micro_q(ty, QMR, 2, nb, wr, ws, at, as, yo, ldy); break;
                    default: micro_q(ty, QMR, 1, nb, wr, ws, at, as, yo, ldy); break;
                    }
                else
                    for (int tt = 0; tt < tn; tt++)
                        for (int rr = 0; rr < rn; rr++)
                            micro_q(ty, 1, 1, nb, wr + rr * ws, ws, at + tt * as, as, yo + tt * ldy + rr, ldy);
            }
        }
    }
}

KERN_GEMM_TILED_DECL(gemm_tiled_q8_0_vnni) { gemm_q(T_Q8_0, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_q4_0_vnni) { gemm_q(T_Q4_0, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
#else
typedef int kite_empty_unit_gemm_tiled_avx512; /* ISO C wants a declaration */
#endif
