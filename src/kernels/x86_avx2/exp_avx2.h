/*
 * exp_avx2.h - the exp polynomial (kernels/exp_poly.h, its contract) on 8
 * lanes, and the two kernels' exps built on it: ops_exp8 (element-wise ops,
 * fused) and attn_exp8 (attention, unfused: attn_exp lane by lane).  Each is
 * the x86_avx512/exp_avx512.h function of the same name instruction for
 * instruction on 8 lanes instead of 16, hence the same bits.
 * Include only from this folder's .c files (AVX2 + FMA flags).
 */
#ifndef KITE_KERNELS_EXP_AVX2_H
#define KITE_KERNELS_EXP_AVX2_H

#include <immintrin.h>

#include "kernels/exp_poly.h"

/* One Horner step p*r + c: an FMA where fused, else a multiply then an add
 * (fused is a constant at every call: the choice costs nothing). */
#define EXP_STEP8(p, r, c, fused) \
    ((fused) ? _mm256_fmadd_ps(p, r, _mm256_set1_ps(c)) : _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c)))

/* e^r, |r| <= ln2/2: p = C7, then p = p*r + C_k for k = 6 .. 0 */
static inline __attribute__((always_inline)) __m256 exp_poly8(__m256 r, const int fused) {
    __m256 p = _mm256_set1_ps(KERN_EXP_C7);
    p = EXP_STEP8(p, r, KERN_EXP_C6, fused);
    p = EXP_STEP8(p, r, KERN_EXP_C5, fused);
    p = EXP_STEP8(p, r, KERN_EXP_C4, fused);
    p = EXP_STEP8(p, r, KERN_EXP_C3, fused);
    p = EXP_STEP8(p, r, KERN_EXP_C2, fused);
    p = EXP_STEP8(p, r, KERN_EXP_C1, fused);
    p = EXP_STEP8(p, r, KERN_EXP_C0, fused);
    return p;
}

/* ops_exp (ops_simd.h) */
static inline __m256 ops_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(OPS_EXP_HI), x); /* NaN in the second operand is returned */
    x = _mm256_max_ps(_mm256_set1_ps(OPS_EXP_LO), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KERN_EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(KERN_EXP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(KERN_EXP_LN2_LO), r);
    const __m256 p = exp_poly8(r, 1);
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* attn_exp (attention_impl.h): the same float operations in the same order. */
static inline __m256 attn_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(KERN_EXP_ATTN_LO), hi = _mm256_set1_ps(KERN_EXP_ATTN_HI);
    const __m256 flush = _mm256_cmp_ps(x, _mm256_set1_ps(ATTN_EXP_FLUSH), _CMP_LT_OQ); /* result +0 there */
    /* clamp; NaN compares false both ways and passes through */
    x = _mm256_blendv_ps(x, lo, _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    x = _mm256_blendv_ps(x, hi, _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    const __m256 round = _mm256_set1_ps(12582912.0f);
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(KERN_EXP_LOG2E)), round);
    const __m256 nn = _mm256_sub_ps(t, round);
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(nn, _mm256_set1_ps(KERN_EXP_LN2_HI)));
    r = _mm256_add_ps(r, _mm256_mul_ps(nn, _mm256_set1_ps(KERN_EXP_LN2_LO)));
    const __m256 p = exp_poly8(r, 0);
    __m256i sb = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4b400000));
    sb = _mm256_slli_epi32(_mm256_add_epi32(sb, _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(flush, _mm256_mul_ps(p, _mm256_castsi256_ps(sb)));
}

#endif
