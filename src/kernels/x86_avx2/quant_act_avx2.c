/*
 * quant_act_avx2.c - q8_0 activation rows with AVX2: the same bytes as
 * act_quantize_q8_0_ref (ref/quant_act.c), 8 lanes at a time.
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
#else
typedef int kite_empty_unit_quant_act_avx2; /* ISO C wants a declaration */
#endif
