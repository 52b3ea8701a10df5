/*
 * vec_dot_float_avx2.c - f32/f16/bf16 weight rows x f32 activations with
 * 256-bit FMA.  f16 widens with F16C (vcvtph2ps) and bf16 by a 16-bit shift,
 * both exact, so only the float sums round.  Four 8-lane accumulators per 32
 * elements, then one per 8, then a scalar tail; the order depends only on n
 * (never on the thread count or the batch grouping).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/ref/ref.h"
#include "kernels/x86_avx2/avx2.h"
#include "tensor/dtype.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 ld_f32(const unsigned char *p) { return _mm256_loadu_ps((const float *)(const void *)p); }
static inline __m256 ld_f16(const unsigned char *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static inline __m256 ld_bf16(const unsigned char *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
static inline float sc_f32(const unsigned char *p) {
    float v;
    __builtin_memcpy(&v, p, 4);
    return v;
}
static inline float sc_f16(const unsigned char *p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}
static inline float sc_bf16(const unsigned char *p) {
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return bf16_to_fp32(h);
}

#define DOT_BODY(LD, SC, SZ)                                                                      \
    const unsigned char *wp = w, *ap = a;                                                         \
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),          \
           s3 = _mm256_setzero_ps();                                                              \
    int64_t i = 0;                                                                                \
    for (; i + 32 <= n; i += 32) {                                                                \
        s0 = _mm256_fmadd_ps(LD(wp + (size_t)i * SZ), ld_f32(ap + 4 * (size_t)i), s0);            \
        s1 = _mm256_fmadd_ps(LD(wp + (size_t)(i + 8) * SZ), ld_f32(ap + 4 * (size_t)(i + 8)), s1); \
        s2 = _mm256_fmadd_ps(LD(wp + (size_t)(i + 16) * SZ), ld_f32(ap + 4 * (size_t)(i + 16)), s2); \
        s3 = _mm256_fmadd_ps(LD(wp + (size_t)(i + 24) * SZ), ld_f32(ap + 4 * (size_t)(i + 24)), s3); \
    }                                                                                             \
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LD(wp + (size_t)i * SZ), ld_f32(ap + 4 * (size_t)i), s0); \
    float tail = 0.0f;                                                                            \
    for (; i < n; i++) tail += SC(wp + (size_t)i * SZ) * sc_f32(ap + 4 * (size_t)i);              \
    *out = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))) + tail;

void vec_dot_f32_avx2(int64_t n, float *out, const void *w, const void *a) { DOT_BODY(ld_f32, sc_f32, 4) }
void vec_dot_f16_f32_avx2(int64_t n, float *out, const void *w, const void *a) { DOT_BODY(ld_f16, sc_f16, 2) }
void vec_dot_bf16_f32_avx2(int64_t n, float *out, const void *w, const void *a) { DOT_BODY(ld_bf16, sc_bf16, 2) }

KERN_DEFINE_GEMM(gemm_f32_avx2, vec_dot_f32_avx2)
KERN_DEFINE_GEMM(gemm_f16_f32_avx2, vec_dot_f16_f32_avx2)
KERN_DEFINE_GEMM(gemm_bf16_f32_avx2, vec_dot_bf16_f32_avx2)
#else
typedef int kite_empty_unit_vec_dot_float_avx2; /* ISO C wants a declaration */
#endif
