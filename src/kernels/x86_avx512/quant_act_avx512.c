/*
 * quant_act_avx512.c - q8_0 activation rows with AVX-512 (level avx512 and
 * up): the same bytes as act_quantize_q8_0_ref (ref/quant_act.c), 16 lanes
 * at a time.
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
#else
typedef int kite_empty_unit_quant_act_avx512; /* ISO C wants a declaration */
#endif
