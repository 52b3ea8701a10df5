/*
 * vec_dot_quant_vnni.c - q4_0 and q8_0 weight rows x q8_0 activations with
 * AVX-512 VNNI: vpdpbusd adds four unsigned-byte x signed-byte products into
 * each int32 lane without intermediate saturation, so block sums are exact.
 *
 * Operand trick: vpdpbusd wants one unsigned operand.
 *   q4_0: the nibbles u (0..15) are already unsigned; sum((u-8)*a) is
 *         vpdpbusd(u, a) - vpdpbusd(8, a).
 *   q8_0: |w| as unsigned (|-128| = 128 fits) times a*sign(w); activations
 *         are never -128 (ref/quant_act.c), so negating them is safe.
 * Two blocks share one zmm (block b in the low 256 bits, b+1 in the high);
 * the block sums are scaled and accumulated in a float vector, so the float
 * summation order differs from the reference (tested within a budget).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "kernels/x86_avx512/avx512.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

static inline float ld_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}
static inline __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
static inline __m512 scales2(float d0, float d1) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}
/* q4_0 nibbles of one block as unsigned bytes in element order */
static inline __m256i nibbles(const unsigned char *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

void vec_dot_q4_0_q8_0_vnni(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 2 * sizeof(block_q4_0), y += 2 * sizeof(block_q8_0)) {
        const unsigned char *x1 = x + sizeof(block_q4_0), *y1 = y + sizeof(block_q8_0);
        const __m512i u = join(nibbles(x + offsetof(block_q4_0, qs)), nibbles(x1 + offsetof(block_q4_0, qs)));
        const __m512i q = join(ld256(y + offsetof(block_q8_0, qs)), ld256(y1 + offsetof(block_q8_0, qs)));
        const __m512i s = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q),
                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, q));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scales2(ld_half(x) * ld_half(y), ld_half(x1) * ld_half(y1)),
                              acc);
    }
    __m256 acc8 = _mm256_setzero_ps();
    if (b < nb) {
        const __m256i u = nibbles(x + offsetof(block_q4_0, qs));
        const __m256i q = ld256(y + offsetof(block_q8_0, qs));
        const __m256i s = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q),
                                           _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), q));
        acc8 = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(ld_half(x) * ld_half(y)));
    }
    acc = _mm512_add_ps(acc, _mm512_zextps256_ps512(acc8));
    *out = _mm512_reduce_add_ps(acc);
}

void vec_dot_q8_0_q8_0_vnni(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 2 * sizeof(block_q8_0), y += 2 * sizeof(block_q8_0)) {
        const unsigned char *x1 = x + sizeof(block_q8_0), *y1 = y + sizeof(block_q8_0);
        const __m512i qx = join(ld256(x + offsetof(block_q8_0, qs)), ld256(x1 + offsetof(block_q8_0, qs)));
        const __m512i qy = join(ld256(y + offsetof(block_q8_0, qs)), ld256(y1 + offsetof(block_q8_0, qs)));
        const __mmask64 neg = _mm512_movepi8_mask(qx);
        const __m512i sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(qx), sy);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scales2(ld_half(x) * ld_half(y), ld_half(x1) * ld_half(y1)),
                              acc);
    }
    __m256 acc8 = _mm256_setzero_ps();
    if (b < nb) {
        const __m256i qx = ld256(x + offsetof(block_q8_0, qs)), qy = ld256(y + offsetof(block_q8_0, qs));
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(qx, qx),
                                              _mm256_sign_epi8(qy, qx));
        acc8 = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(ld_half(x) * ld_half(y)));
    }
    acc = _mm512_add_ps(acc, _mm512_zextps256_ps512(acc8));
    *out = _mm512_reduce_add_ps(acc);
}

KERN_DEFINE_GEMM(gemm_q4_0_q8_0_vnni, vec_dot_q4_0_q8_0_vnni)
KERN_DEFINE_GEMM(gemm_q8_0_q8_0_vnni, vec_dot_q8_0_q8_0_vnni)
#else
typedef int kite_empty_unit_vec_dot_quant_vnni; /* ISO C wants a declaration */
#endif
