/*
 * int8_gemm_avx2.c - W8A8 INT8 GEMM with AVX2 (int8_gemm.h).
 *
 * 32 bytes a step with the sign trick (vpsignb, vpmaddubsw, vpmaddwd: see
 * dot_rows), the rest by int8 -> int16 sign extension (vpmovsxbw) and
 * vpmaddwd: every product (|q| <= 127) and pair sum fits, and an int32 lane
 * sums at most W8_MAX_COLS / 8 pairs of pairs, so the integer sum is exact and
 * the result equals the reference bit for bit.  The flat GEMM loads a weight chunk once for up
 * to 4 tokens.  Rows longer than W8_MAX_COLS take the reference.
 *
 * Compiled with AVX2 flags (Makefile); called only at level >= avx2.
 */
#include <immintrin.h>

#include "kernels/int8_gemm.h"
#include "tensor/dtype.h"

static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline __m256i load16(const int8_t *p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p)); }

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* One weight row with NT (1..4, a constant at each call) activation rows: exact int32 sums
 * into acc[].  32 bytes a step by the sign trick: |w| (u8) times a with w's sign (s8) through
 * vpmaddubsw, whose pair sums (at most 2 * 127 * 127 = 32258) never saturate as |q| <= 127;
 * then vpmaddwd by ones into int32.  A 16-byte step (sign extension) and scalar code end it. */
static ALWAYS_INLINE void dot_rows(int64_t n, const int8_t *qw, const int8_t *const *qa, int NT, int32_t *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(qw + i));
        const __m256i aw = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; t++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(qa[t] + i));
            const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a, w));
            s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
        }
    }
    for (; i + 16 <= n; i += 16) {
        const __m256i w = load16(qw + i);
        for (int t = 0; t < NT; t++) s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(w, load16(qa[t] + i)));
    }
    for (int t = 0; t < NT; t++) {
        int32_t a = hsum_i32(s[t]);
        for (int64_t k = i; k < n; k++) a += (int32_t)qw[k] * (int32_t)qa[t][k];
        acc[t] = a;
    }
}

/* dot_rows with m (1..4) known only at run time: one constant-NT copy each. */
static void dot_rows_m(int64_t n, const int8_t *qw, const int8_t *const *qa, int m, int32_t *acc) {
    switch (m) {
    case 1: dot_rows(n, qw, qa, 1, acc); break;
    case 2: dot_rows(n, qw, qa, 2, acc); break;
    case 3: dot_rows(n, qw, qa, 3, acc); break;
    default: dot_rows(n, qw, qa, 4, acc); break;
    }
}

void vec_dot_w8a8_avx2(int64_t n, float *out, const void *w, const void *a) {
    if (n > W8_MAX_COLS) {
        vec_dot_w8a8_ref(n, out, w, a);
        return;
    }
    const int8_t *qa = (const int8_t *)a + W8_ROW_HEADER;
    int32_t acc;
    dot_rows(n, (const int8_t *)w + W8_ROW_HEADER, &qa, 1, &acc);
    *out = (float)(int64_t)acc * w8_row_scale(a) * w8_row_scale(w);
}

void gemm_w8a8_avx2(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                    size_t a_stride, int nt) {
    if (n > W8_MAX_COLS) {
        gemm_w8a8_ref(n, y, ldy, w, w_stride, nr, a, a_stride, nt);
        return;
    }
    for (int r = 0; r < nr; r++) {
        const char *wr = (const char *)w + (size_t)r * w_stride;
        const float dw = w8_row_scale(wr);
        for (int t0 = 0; t0 < nt; t0 += 4) {
            const int m = nt - t0 < 4 ? nt - t0 : 4;
            const int8_t *qa[4];
            int32_t acc[4];
            for (int t = 0; t < m; t++) qa[t] = (const int8_t *)a + (size_t)(t0 + t) * a_stride + W8_ROW_HEADER;
            dot_rows_m(n, (const int8_t *)wr + W8_ROW_HEADER, qa, m, acc);
            for (int t = 0; t < m; t++) {
                const char *ar = (const char *)a + (size_t)(t0 + t) * a_stride;
                y[(int64_t)(t0 + t) * ldy + r] = (float)(int64_t)acc[t] * w8_row_scale(ar) * dw;
            }
        }
    }
}
