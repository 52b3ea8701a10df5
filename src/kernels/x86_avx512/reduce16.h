/*
 * reduce16.h - the fixed 16-lane reduction tree of the float and bf16 kernels
 * at the AVX-512 levels (vec_dot_float_avx512.c, bf16_avx512bf16.c), for one
 * accumulator and for a 4 x 4 tile of them at once.
 *
 * reduce16: l[i] + l[i+8], then + [i+4], + [i+2], + [i+1] (the tree of
 * ref_bf16_reduce16 and of the float references).  reduce4x4 runs the same
 * adds for four tokens x four rows lane-parallel, each sum lo + hi at every
 * level, so every output equals its reduce16 bit for bit.
 * Include only from files compiled with the AVX-512 flags.
 */
#ifndef KITE_KERNELS_X86_AVX512_REDUCE16_H
#define KITE_KERNELS_X86_AVX512_REDUCE16_H

#include <immintrin.h>
#include <stdint.h>

static inline __attribute__((always_inline)) float reduce16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* Level 1 pairs two accumulators' 256-bit halves, level 2 their 128-bit
 * quarters; levels 3 and 4 (in reduce4x4) shuffle within 128-bit lanes. */
static inline __attribute__((always_inline)) __m512 reduce16_l12(__m512 t0, __m512 t1, __m512 t2, __m512 t3) {
    const __m512 b01 = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x44), _mm512_shuffle_f32x4(t0, t1, 0xEE));
    const __m512 b23 = _mm512_add_ps(_mm512_shuffle_f32x4(t2, t3, 0x44), _mm512_shuffle_f32x4(t2, t3, 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(b01, b23, 0x88), _mm512_shuffle_f32x4(b01, b23, 0xDD));
}

/* reduce16 of tokens 0..3 (the second index) x rows a..d: 128-bit lane j of
 * the result holds rows a..d of token j, stored to y + j*ldy for j < nst. */
static inline __attribute__((always_inline)) void reduce4x4(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 b0,
                                                            __m512 b1, __m512 b2, __m512 b3, __m512 c0, __m512 c1,
                                                            __m512 c2, __m512 c3, __m512 d0, __m512 d1, __m512 d2,
                                                            __m512 d3, float *y, int64_t ldy, int nst) {
    const __m512 ca = reduce16_l12(a0, a1, a2, a3), cb = reduce16_l12(b0, b1, b2, b3);
    const __m512 cc = reduce16_l12(c0, c1, c2, c3), cd = reduce16_l12(d0, d1, d2, d3);
    const __m512 dab = _mm512_add_ps(_mm512_shuffle_ps(ca, cb, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(ca, cb, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 dcd = _mm512_add_ps(_mm512_shuffle_ps(cc, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(cc, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(dab, dcd, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(dab, dcd, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm_storeu_ps(y, _mm512_castps512_ps128(e));
    if (nst > 1) _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(e, 1));
    if (nst > 2) _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(e, 2));
    if (nst > 3) _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(e, 3));
}

/* The outputs of a 4-row tile, acc[r][t] for r < 4 and t < nt (nt <= n_max,
 * both constants after inlining), reduced four tokens at a time into y[t*ldy
 * + r], the last group padded by repeating a token.  A macro so that acc
 * stays the caller's register array. */
#define REDUCE16_TILE4(acc, nt, n_max, y, ldy)                                                                     \
    do {                                                                                                         \
        _Pragma("GCC unroll 8") for (int t_ = 0; t_ < (n_max); t_ += 4) if (t_ < (nt)) {                       \
            const int u1_ = t_ + 1 < (nt) ? t_ + 1 : (nt) - 1, u2_ = t_ + 2 < (nt) ? t_ + 2 : (nt) - 1;         \
            const int u3_ = t_ + 3 < (nt) ? t_ + 3 : (nt) - 1;                                                  \
            reduce4x4(acc[0][t_], acc[0][u1_], acc[0][u2_], acc[0][u3_], acc[1][t_], acc[1][u1_], acc[1][u2_],  \
                      acc[1][u3_], acc[2][t_], acc[2][u1_], acc[2][u2_], acc[2][u3_], acc[3][t_], acc[3][u1_],  \
                      acc[3][u2_], acc[3][u3_], (y) + (int64_t)t_ * (ldy), (ldy), (nt) - t_ < 4 ? (nt) - t_ : 4); \
        }                                                                                                        \
    } while (0)

#endif
