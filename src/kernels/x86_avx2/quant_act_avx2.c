/*
 * quant_act_avx2.c - q8_0 and W8A8 activation rows with AVX2: the same
 * bytes as act_quantize_q8_0_ref (ref/quant_act.c) and w8_quantize_row
 * (tensor/quant_w8.c), 8 lanes at a time.
 *
 * DESIGN
 *   As quant_act_avx512.c: amax by vmaxps with the running maximum as the
 *   second operand (a NaN element is skipped, as fmaxf does; max is exact
 *   in any order), scalar d / id / f16 as the reference, roundf as
 *   trunc(v) + sign(v) where |v - trunc(v)| >= 0.5 (exact), then int32 ->
 *   int8.  The saturating packs equal the reference's (int8_t) cast because
 *   |x*id| <= 127.0001 for finite x (it never reaches 127.5).
 *
 * THREAD SAFETY: pure function.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/x86_avx2/avx2.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

static inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

static inline __m256i round_away8(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, one)));
}

void act_quantize_q8_0_avx2(const float *x, void *dst, int64_t n) {
    unsigned char *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0, y += sizeof(block_q8_0)) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(abs8(v[k]), m);
        }
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s = _mm_max_ss(s, _mm_movehdup_ps(s));
        const float amax = _mm_cvtss_f32(s);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = fp32_to_fp16(d);
        memcpy(y + offsetof(block_q8_0, d), &h, sizeof h);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = round_away8(_mm256_mul_ps(v[k], vid));
        /* packs interleave 128-bit lanes: fix the dword order afterwards */
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(y + offsetof(block_q8_0, qs)), o);
    }
}

/* One element of a W8A8 row as w8_quantize_row codes it (the tail). */
static inline int8_t w8_code(float x, float id) {
    float v = roundf(x * id);
    if (v > 127.0f) v = 127.0f;
    if (v < -127.0f) v = -127.0f;
    if (!(v == v)) v = 0.0f;
    return (int8_t)v;
}

/* A W8A8 row (dtype.h; any n), as act_quantize_w8a8_avx512: 8 lanes, the
 * last n % 8 elements in scalar code; NaN -> 0 before the clamp. */
void act_quantize_w8a8_avx2(const float *x, void *dst, int64_t n) {
    __m256 m = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(abs8(_mm256_loadu_ps(x + i)), m);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    float amax = _mm_cvtss_f32(s);
    for (; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    int8_t *q = (int8_t *)dst + W8_ROW_HEADER;
    __m256i sum = _mm256_setzero_si256();
    const __m256i zero = _mm256_setzero_si256();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vid);
        const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
        const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
        __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, one));
        r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q)); /* NaN -> 0 */
        r = _mm256_max_ps(_mm256_min_ps(r, lim), nlim);
        const __m256i qi = _mm256_cvttps_epi32(r);
        sum = _mm256_add_epi32(sum, qi);
        /* |q| <= 127: the saturating packs are exact; bytes 0-3 of each 128-bit lane hold q */
        const __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(qi, zero), zero);
        const __m128i lo = _mm256_castsi256_si128(p8), hi = _mm256_extracti128_si256(p8, 1);
        _mm_storel_epi64((__m128i *)(void *)(q + i), _mm_unpacklo_epi32(lo, hi));
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    int32_t total = _mm_cvtsi128_si32(s4);
    for (; i < n; i++) {
        q[i] = w8_code(x[i], id);
        total += q[i];
    }
    memcpy(dst, &d, sizeof d);
    memcpy((char *)dst + 4, &total, sizeof total);
}
#else
typedef int kite_empty_unit_quant_act_avx2; /* ISO C wants a declaration */
#endif
