/*
 * gemm_tiled_avx2.c - tiled prefill GEMM on ymm (gemm_tiled.h): f32, f16
 * and bf16 weights x f32 activations.
 *
 * Micro-kernel of MR = 4 weight rows x NR = 2 tokens: 8 ymm accumulators,
 * one per output, 4 widened weight vectors (vcvtph2ps / 16-bit shift, both
 * exact) and one activation vector live (13 of 16 registers).  Each output
 * is summed in the flat kernel's order (vec_dot_*_avx2), its four
 * accumulators computed one after another, so results equal the flat path
 * bit for bit (test_gemm.c checks it; if the flat order changes, micro
 * must follow).  Cache tiling as in the AVX-512 file: weight row blocks of
 * GEMM_TILED_L2_BYTES, token pairs outside the row micro-tiles.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/gemm_tiled.h"
#include "tensor/dtype.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { T_F32 = 0, T_F16 = 1, T_BF16 = 2 };
#define MR 4
#define NR 2

static ALWAYS_INLINE __m256 ldw(int ty, const unsigned char *p) {
    if (ty == T_F32) return _mm256_loadu_ps((const float *)(const void *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (ty == T_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static ALWAYS_INLINE float hsum8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

static ALWAYS_INLINE float scw(int ty, const unsigned char *p) {
    if (ty == T_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return ty == T_F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}
static ALWAYS_INLINE float sca(const unsigned char *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* acc[r][t] += w[r][i..i+8) * a[t][i..i+8) for i = i0, i0+step, ... < i1 */
static ALWAYS_INLINE void run(int ty, int mr, int nr, __m256 acc[MR][NR], const unsigned char *w, size_t ws,
                              const unsigned char *a, size_t as, int64_t i0, int64_t i1, int64_t step) {
    const size_t esz = ty == T_F32 ? 4 : 2;
    for (int64_t i = i0; i < i1; i += step) {
        __m256 wv[MR];
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
            if (r < mr) wv[r] = ldw(ty, w + r * ws + (size_t)i * esz);
#pragma GCC unroll 8
        for (int t = 0; t < NR; t++) {
            if (t >= nr) break;
            const __m256 av = _mm256_loadu_ps((const float *)(const void *)(a + t * as + 4 * (size_t)i));
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++)
                if (r < mr) acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
}

/* mr x nr outputs, each in the flat kernel's order (vec_dot_*_avx2:
 * accumulators s0..s3 over 32-element chunks, trailing 8-element chunks
 * into s0, hsum8((s0+s1)+(s2+s3)) plus a sequential scalar tail), the four
 * accumulators computed one after another. */
static ALWAYS_INLINE void micro(int ty, int mr, int nr, int64_t n, const unsigned char *w, size_t ws,
                                const unsigned char *a, size_t as, float *y, int64_t ldy) {
    const size_t esz = ty == T_F32 ? 4 : 2;
    const int64_t n32 = n - n % 32, n8 = n - n % 8;
    __m256 acc[MR][NR], s01[MR][NR], s2[MR][NR];
    for (int p = 0; p < 4; p++) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < NR; t++) acc[r][t] = _mm256_setzero_ps();
        run(ty, mr, nr, acc, w, ws, a, as, 8 * p, n32, 32);
        if (p == 0) run(ty, mr, nr, acc, w, ws, a, as, n32, n8, 8);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < NR; t++) {
                if (p == 0) s01[r][t] = acc[r][t];
                else if (p == 1) s01[r][t] = _mm256_add_ps(s01[r][t], acc[r][t]);
                else if (p == 2) s2[r][t] = acc[r][t];
                else s01[r][t] = _mm256_add_ps(s01[r][t], _mm256_add_ps(s2[r][t], acc[r][t]));
            }
    }
    for (int t = 0; t < nr; t++)
        for (int r = 0; r < mr; r++) {
            const unsigned char *wp = w + r * ws, *ap = a + t * as;
            float tail = 0.0f;
            for (int64_t i = n8; i < n; i++) tail += scw(ty, wp + (size_t)i * esz) * sca(ap + 4 * (size_t)i);
            y[(int64_t)t * ldy + r] = hsum8(s01[r][t]) + tail;
        }
}

static ALWAYS_INLINE void gemm(int ty, int64_t n, float *y, int64_t ldy, const void *w, size_t ws, int nr,
                               const void *a, size_t as, int nt) {
    const unsigned char *wb = w, *ab = a;
    int64_t rb = (int64_t)(GEMM_TILED_L2_BYTES / (ws ? ws : 1));
    rb -= rb % MR;
    if (rb < MR) rb = MR;
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        const int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < nt; t += NR) {
            const int tn = nt - t < NR ? nt - t : NR;
            const unsigned char *at = ab + (size_t)t * as;
            for (int64_t r = r0; r < r1; r += MR) {
                const int rn = (int)(r1 - r < MR ? r1 - r : MR);
                const unsigned char *wr = wb + (size_t)r * ws;
                float *yo = y + (int64_t)t * ldy + r;
                if (rn == MR && tn == NR) micro(ty, MR, NR, n, wr, ws, at, as, yo, ldy);
                else if (rn == MR) micro(ty, MR, 1, n, wr, ws, at, as, yo, ldy);
                else
                    for (int rr = 0; rr < rn; rr++)
                        micro(ty, 1, tn == NR ? NR : 1, n, wr + rr * ws, ws, at, as, yo + rr, ldy);
            }
        }
    }
}

KERN_GEMM_TILED_DECL(gemm_tiled_f32_avx2) { gemm(T_F32, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_f16_avx2) { gemm(T_F16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_avx2) { gemm(T_BF16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
#else
typedef int kite_empty_unit_gemm_tiled_avx2; /* ISO C wants a declaration */
#endif
