/*
 * quant_act_avx512.c - q8_0 and W8A8 activation rows with AVX-512 (level
 * avx512 and up): the same bytes as act_quantize_q8_0_ref (ref/quant_act.c)
 * and w8_quantize_row (tensor/quant_w8.c), 16 lanes at a time.
 *
 * DESIGN
 *   Per 32-element block: amax by vmaxps over |x| (max is exact and
 *   order-free; vmaxps returns its second operand when the first is NaN,
 *   so with the running maximum second a NaN element is skipped, as fmaxf
 *   does); d, its reciprocal and the f16 scale in scalar code exactly as the
 *   reference; q = roundf(x*id) as trunc(v) plus sign(v) where |v - trunc(v)|
 *   >= 0.5 (v - trunc(v) is exact, so ties go away from zero as roundf's
 *   do; adding 0.5 first would round 0.49999997 up); vpmovdb narrows, which
 *   wraps like the reference's (int8_t) cast.
 *   kern_matmul quantizes every activation row once per call; in the serving
 *   benchmark the scalar quantizer (with out-of-line fmaxf/roundf) was about
 *   10% of all samples at 16 concurrent requests.
 *
 * THREAD SAFETY: pure function.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/x86_avx512/avx512.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

/* roundf of 16 floats (|v| < 2^23 or not: trunc is exact either way) as int32 */
static inline __m512i round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
    return _mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, one));
}

void act_quantize_q8_0_avx512(const float *x, void *dst, int64_t n) {
    unsigned char *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0, y += sizeof(block_q8_0)) {
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_abs_ps(x1), m);
        const float amax = _mm512_reduce_max_ps(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = fp32_to_fp16(d);
        memcpy(y + offsetof(block_q8_0, d), &h, sizeof h);
        const __m512 vid = _mm512_set1_ps(id);
        const __m128i q0 = _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(x0, vid)));
        const __m128i q1 = _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(x1, vid)));
        _mm_storeu_si128((__m128i *)(void *)(y + offsetof(block_q8_0, qs)), q0);
        _mm_storeu_si128((__m128i *)(void *)(y + offsetof(block_q8_0, qs) + 16), q1);
    }
}

/* A W8A8 row (dtype.h: f32 d, i32 sum, int8 q[n]; any n): the row's amax
 * as above, d = amax / 127 and its reciprocal in scalar code as
 * w8_quantize_row, q = roundf(x * id) clamped to +-127 with NaN as 0 (NaN is
 * replaced before the clamp, which would otherwise turn it into 127), the
 * sum of q in int32 lanes (exact).  WHY: the scalar quantizer, with
 * out-of-line roundf, took a fifth of the W8A8 GEMM's time in prefill (perf,
 * TinyLlama-1.1B shape, 128 tokens). */
void act_quantize_w8a8_avx512(const float *x, void *dst, int64_t n) {
    __m512 m = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i)), m);
    }
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id), lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
    int8_t *q = (int8_t *)dst + W8_ROW_HEADER;
    __m512i sum = _mm512_setzero_si512();
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vid);
        const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
        const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
        const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
        __m512 r = _mm512_mask_add_ps(t, up, t, one);
        r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r); /* NaN -> 0 */
        r = _mm512_max_ps(_mm512_min_ps(r, lim), nlim);
        const __m512i qi = _mm512_maskz_cvttps_epi32(k, r);
        sum = _mm512_add_epi32(sum, qi);
        _mm_mask_storeu_epi8(q + i, k, _mm512_cvtepi32_epi8(qi));
    }
    const int32_t s = _mm512_reduce_add_epi32(sum);
    memcpy(dst, &d, sizeof d);
    memcpy((char *)dst + 4, &s, sizeof s);
}
#else
typedef int kite_empty_unit_quant_act_avx512; /* ISO C wants a declaration */
#endif
