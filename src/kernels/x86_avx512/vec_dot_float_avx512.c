/*
 * vec_dot_float_avx512.c - f32/f16/bf16 weight rows x f32 activations with
 * 512-bit FMA.  Widening is exact (vcvtph2ps; bf16 by a 16-bit shift).  Four
 * 16-lane accumulators per 64 elements, one per 16, then a masked load for
 * the last n % 16 elements; the order depends only on n.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/ref/ref.h"
#include "kernels/x86_avx512/avx512.h"

static inline __m512 ld_f32(const unsigned char *p) { return _mm512_loadu_ps(p); }
static inline __m512 ld_f16(const unsigned char *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static inline __m512 ld_bf16(const unsigned char *p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 mld_f32(__mmask16 k, const unsigned char *p) { return _mm512_maskz_loadu_ps(k, p); }
static inline __m512 mld_f16(__mmask16 k, const unsigned char *p) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}
static inline __m512 mld_bf16(__mmask16 k, const unsigned char *p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

#define DOT_BODY(LD, MLD, SZ)                                                                     \
    const unsigned char *wp = w, *ap = a;                                                         \
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(),          \
           s3 = _mm512_setzero_ps();                                                              \
    int64_t i = 0;                                                                                \
    for (; i + 64 <= n; i += 64) {                                                                \
        s0 = _mm512_fmadd_ps(LD(wp + (size_t)i * SZ), ld_f32(ap + 4 * (size_t)i), s0);            \
        s1 = _mm512_fmadd_ps(LD(wp + (size_t)(i + 16) * SZ), ld_f32(ap + 4 * (size_t)(i + 16)), s1); \
        s2 = _mm512_fmadd_ps(LD(wp + (size_t)(i + 32) * SZ), ld_f32(ap + 4 * (size_t)(i + 32)), s2); \
        s3 = _mm512_fmadd_ps(LD(wp + (size_t)(i + 48) * SZ), ld_f32(ap + 4 * (size_t)(i + 48)), s3); \
    }                                                                                             \
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(LD(wp + (size_t)i * SZ), ld_f32(ap + 4 * (size_t)i), s0); \
    if (i < n) {                                                                                  \
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);                                     \
        s1 = _mm512_fmadd_ps(MLD(k, wp + (size_t)i * SZ), mld_f32(k, ap + 4 * (size_t)i), s1);    \
    }                                                                                             \
    *out = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));

void vec_dot_f32_avx512(int64_t n, float *out, const void *w, const void *a) { DOT_BODY(ld_f32, mld_f32, 4) }
void vec_dot_f16_f32_avx512(int64_t n, float *out, const void *w, const void *a) { DOT_BODY(ld_f16, mld_f16, 2) }
void vec_dot_bf16_f32_avx512(int64_t n, float *out, const void *w, const void *a) {
    DOT_BODY(ld_bf16, mld_bf16, 2)
}

KERN_DEFINE_GEMM(gemm_f32_avx512, vec_dot_f32_avx512)
KERN_DEFINE_GEMM(gemm_f16_f32_avx512, vec_dot_f16_f32_avx512)
KERN_DEFINE_GEMM(gemm_bf16_f32_avx512, vec_dot_bf16_f32_avx512)
#else
typedef int kite_empty_unit_vec_dot_float_avx512; /* ISO C wants a declaration */
#endif
