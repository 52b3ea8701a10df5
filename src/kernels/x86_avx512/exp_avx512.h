/*
 * exp_avx512.h - the exp polynomial (kernels/exp_poly.h, its contract) on
 * 16 lanes, and the two kernels' exps built on it: ops_exp16 (element-wise
 * ops, fused) and attn_exp16 (attention, unfused: attn_exp lane by lane;
 * the clamp as maxps/minps with x second, which passes a NaN through like
 * the reference's compare-and-select; below ATTN_EXP_FLUSH a zeroing mask,
 * NaN kept by the unordered compare).
 * Include only from this folder's .c files (AVX-512 flags).
 */
#ifndef KITE_KERNELS_EXP_AVX512_H
#define KITE_KERNELS_EXP_AVX512_H

#include <immintrin.h>

#include "kernels/exp_poly.h"

/* One Horner step p*r + c: an FMA where fused, else a multiply then an add
 * (fused is a constant at every call: the choice costs nothing). */
#define EXP_STEP16(p, r, c, fused) \
    ((fused) ? _mm512_fmadd_ps(p, r, _mm512_set1_ps(c)) : _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c)))

/* e^r, |r| <= ln2/2: p = C7, then p = p*r + C_k for k = 6 .. 0 */
static inline __attribute__((always_inline)) __m512 exp_poly16(__m512 r, const int fused) {
    __m512 p = _mm512_set1_ps(KERN_EXP_C7);
    p = EXP_STEP16(p, r, KERN_EXP_C6, fused);
    p = EXP_STEP16(p, r, KERN_EXP_C5, fused);
    p = EXP_STEP16(p, r, KERN_EXP_C4, fused);
    p = EXP_STEP16(p, r, KERN_EXP_C3, fused);
    p = EXP_STEP16(p, r, KERN_EXP_C2, fused);
    p = EXP_STEP16(p, r, KERN_EXP_C1, fused);
    p = EXP_STEP16(p, r, KERN_EXP_C0, fused);
    return p;
}

/* ops_exp (ops_simd.h): n = round-to-nearest-even(x log2 e); r = x - n ln2
 * (Cody-Waite, fused); times 2^n as two exact power-of-two factors
 * 2^(n>>1) and 2^(n - (n>>1)), so the only rounding of the scaling is the
 * last multiply: overflow gives +inf, deep underflow 0, and subnormal
 * results are rounded once. */
static inline __m512 ops_exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(OPS_EXP_HI), x); /* NaN in the second operand is returned */
    x = _mm512_max_ps(_mm512_set1_ps(OPS_EXP_LO), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KERN_EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(KERN_EXP_LN2_HI), x); /* x - n ln2_hi */
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(KERN_EXP_LN2_LO), r);
    const __m512 p = exp_poly16(r, 1);
    const __m512i ni = _mm512_cvtps_epi32(n); /* |n| <= 152 (NaN: garbage lanes, p is NaN anyway) */
    const __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

/* attn_exp (attention_impl.h): the same float operations in the same order. */
static inline __m512 attn_exp16(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN_EXP_FLUSH), _CMP_NLT_UQ); /* else +0 */
    x = _mm512_max_ps(_mm512_set1_ps(KERN_EXP_ATTN_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(KERN_EXP_ATTN_HI), x);
    const __m512 round = _mm512_set1_ps(12582912.0f);
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(KERN_EXP_LOG2E)), round);
    const __m512 nn = _mm512_sub_ps(t, round);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(nn, _mm512_set1_ps(KERN_EXP_LN2_HI)));
    r = _mm512_add_ps(r, _mm512_mul_ps(nn, _mm512_set1_ps(KERN_EXP_LN2_LO)));
    const __m512 p = exp_poly16(r, 0);
    __m512i sb = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4b400000));
    sb = _mm512_slli_epi32(_mm512_add_epi32(sb, _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(sb));
}

#endif
