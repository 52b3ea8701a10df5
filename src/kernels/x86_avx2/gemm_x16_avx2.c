/*
 * gemm_x16_avx2.c - the 16-row interleaved q4_0 kernel for AVX2 without VNNI (layout and
 * arithmetic in gemm_x16.h; equal bit for bit to ref/gemm_x16_ref.c).
 *
 * DESIGN
 *   A group block's 4 chunks of 64 bytes are two ymm of 8 rows each; each chunk's nibbles split
 *   with an AND and a shift+AND into unsigned weights u (0..15).  Per (8 rows, token) the 8
 *   vpmaddubsw with the token's 4 activation bytes broadcast give each row's products in pairs
 *   of int16 lanes, added as int16 (8 x 2 x 15 x 127 = 30480 < 2^15, and q8_0 activations are
 *   never -128), then one vpmaddwd by ones makes the row's int32 sum, which starts at corr (the
 *   -8 * sum(a) offset of gemm_x16.h) before the same convert, multiply and FMA as the VNNI
 *   kernel.  The int32 sums are exact, so the result is the reference's.  Tokens go in passes of
 *   X16A_PASS (the 8 operands of a half, the passes' float accumulators of both halves and two
 *   temporaries fill the 16 ymm registers).
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/gemm_x16.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define X16A_PASS 8 /* tokens per pass over a group */

static ALWAYS_INLINE __m256i bcast32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* NT tokens (their q8_0 rows at a + t*as, corr and da at t*cs) over the nb blocks of the group at g. */
static ALWAYS_INLINE void q4_0_pass(int64_t nb, float *y, int64_t ldy, const unsigned char *g, const unsigned char *a,
                                    size_t as, const int32_t *corr, const float *da, int64_t cs, int acc, const int NT) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 f[X16A_PASS][2];
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < 2; h++)
            f[t][h] = acc ? _mm256_loadu_ps(y + (int64_t)t * ldy + 8 * h) : _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *sc = g + kern_x16_scale_offset(256, nb, b), *q = g + kern_x16_quant_offset(256, nb, b);
        for (int h = 0; h < 2; h++) { /* rows 8h .. 8h + 7: bytes 32h .. 32h + 31 of every chunk */
            __m256i w[8];
            for (int j = 0; j < 4; j++) {
                const __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(q + 64 * j + 32 * h));
                w[j] = _mm256_and_si256(c, m4);
                w[4 + j] = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sc + 16 * h)));
            for (int t = 0; t < NT; t++) {
                const unsigned char *qa = a + (size_t)t * as + (size_t)b * 34 + 2;
                __m256i s = _mm256_maddubs_epi16(w[0], bcast32(qa));
                for (int j = 1; j < 4; j++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[j], bcast32(qa + 4 * j)));
                for (int j = 0; j < 4; j++)
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[4 + j], bcast32(qa + 16 + 4 * j)));
                const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(corr[(int64_t)t * cs + b]));
                const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(da[(int64_t)t * cs + b]));
                f[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), d, f[t][h]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + (int64_t)t * ldy + 8 * h, f[t][h]);
}

KERN_GEMM_X16_DECL(gemm_x16_q4_0_avx2) {
    const unsigned char *g = grp, *act = a;
    for (int t0 = 0; t0 < nt; t0 += X16A_PASS) {
        float *yt = y + (int64_t)t0 * ldy;
        const unsigned char *at = act + (size_t)t0 * a_stride;
        const int32_t *ct = corr + (int64_t)t0 * c_stride;
        const float *dt = da + (int64_t)t0 * c_stride;
        switch (nt - t0) {
        case 1: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 1); break;
        case 2: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 2); break;
        case 3: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 3); break;
        case 4: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 4); break;
        case 5: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 5); break;
        case 6: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 6); break;
        case 7: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 7); break;
        default: q4_0_pass(nb, yt, ldy, g, at, a_stride, ct, dt, c_stride, acc, 8); break;
        }
    }
}
#else
typedef int kite_empty_unit_gemm_x16_avx2; /* ISO C wants a declaration */
#endif
