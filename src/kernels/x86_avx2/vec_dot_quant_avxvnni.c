/*
 * vec_dot_quant_avxvnni.c - q4_0 and q8_0 weight rows x q8_0 activations
 * with AVX-VNNI: the VEX-encoded 256-bit vpdpbusd (_mm256_dpbusd_avx_epi32)
 * of CPUs that have it without AVX-512 (and of those that have both).  The
 * avx2 level uses these instead of its vpmaddubsw + vpmaddwd kernels when
 * cpu_features()->avxvnni (dispatch.c); the level name stays "avx2".
 *
 * DESIGN
 *   One block (32 values) per ymm: vpdpbusd adds four unsigned-byte x
 *   signed-byte products into each of 8 int32 lanes with no intermediate
 *   saturation, so every lane (and the block sum) is exact.
 *   Operand tricks (the first vpdpbusd operand is unsigned), as in
 *   x86_avx512/vec_dot_quant_vnni.c:
 *     q4_0: the nibbles u = w + 8 (0..15) are unsigned:
 *           sum((u-8)*a) = dpbusd(-8*sum(a), u, a); -8*sum(a) (= -dpbusd(8, a))
 *           is formed once per activation block and shared by all rows.
 *     q8_0: the activations are made unsigned, a' = a ^ 0x80 = a + 128:
 *           sum(w*a) = dpbusd(-128*sum(w), a', w); -128*sum(w) is formed once
 *           per weight block and shared by all tokens.  |lane| < 2^18.
 *   Each block's int32 lanes are converted, multiplied by d_w*d_a (the
 *   reference's scale product: both halves widened exactly, one float
 *   multiply) and added with one FMA into a float accumulator per output;
 *   the 8 lanes are summed at the end.  The float order differs from the
 *   reference (tested within a budget) but depends only on n.
 *
 *   Flat GEMM: a register-blocked micro-kernel of NR weight rows (4, or 1
 *   for the remainder) x NT tokens (q4_0: 1..2; q8_0: 1; 16 ymm registers
 *   bound the tile).  A weight block is unpacked once for NT tokens, an
 *   activation block loaded once for NR rows.  Every output goes through the
 *   same instruction sequence whatever NR and NT, and vec_dot is the kernel
 *   at NR = NT = 1, so gemm equals vec_dot bit for bit.  Rows are the outer
 *   loop: a group of 4 rows stays in L1 while all token groups pass over it.
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/gemm_driver.h"
#include "kernels/x86_avx2/avxvnni.h"
#include "tensor/blocks.h"

#define AI inline __attribute__((always_inline))
/* fully unrolled row/token loops keep the tiles in registers */
#define AVXVNNI_PRAGMA(x) _Pragma(#x)
#define AVXVNNI_UNROLL AVXVNNI_PRAGMA(GCC unroll 4)

#define QB4 ((size_t)sizeof(block_q4_0)) /* 18 bytes */
#define QB8 ((size_t)sizeof(block_q8_0)) /* 34 bytes */

/* The f16 at p (any alignment) as a float: exact widening (F16C). */
static AI float ld_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}
static AI __m256i ld256(const unsigned char *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }

static AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 nibbles u = w + 8 of a q4_0 block in element order (low nibbles
 * are elements 0..15, high nibbles 16..31). */
static AI __m256i q4_nibbles(const unsigned char *x) {
    const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_q4_0, qs)));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

/* Software prefetch for row groups: the same block NR rows below (the next
 * group's data), as in the AVX-512 kernels; a single row leaves it to the
 * hardware prefetcher. */
static AI void prefetch_next(const unsigned char *x, int nr, size_t ws) {
    if (nr > 1) _mm_prefetch((const char *)x + (size_t)nr * ws, _MM_HINT_T0);
}

static AI void store_sums(float *y, int64_t ldy, int nr, int nt, __m256 acc[4][2]) {
    AVXVNNI_UNROLL
    for (int r = 0; r < nr; r++)
        AVXVNNI_UNROLL
        for (int t = 0; t < nt; t++) y[(int64_t)t * ldy + r] = hsum8(acc[r][t]);
}

/* NR q4_0 rows at w (stride ws) x NT q8_0 activation rows at a (stride as):
 * y[t*ldy + r].  NR <= 4, NT <= 2, compile-time constants at every call. */
static AI void q4_0_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                           const unsigned char *a, size_t as, const int NR, const int NT) {
    __m256 acc[4][2];
    AVXVNNI_UNROLL
    for (int r = 0; r < NR; r++)
        AVXVNNI_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++) {
        __m256i u[4];
        float dw[4];
        AVXVNNI_UNROLL
        for (int r = 0; r < NR; r++) {
            const unsigned char *x = w + (size_t)r * ws + (size_t)b * QB4;
            prefetch_next(x, NR, ws);
            u[r] = q4_nibbles(x);
            dw[r] = ld_half(x);
        }
        AVXVNNI_UNROLL
        for (int t = 0; t < NT; t++) {
            const unsigned char *q = a + (size_t)t * as + (size_t)b * QB8;
            const __m256i qa = ld256(q + offsetof(block_q8_0, qs));
            const __m256i neg8 = _mm256_sub_epi32(_mm256_setzero_si256(),
                                                  _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), eight, qa));
            const float da = ld_half(q);
            AVXVNNI_UNROLL
            for (int r = 0; r < NR; r++) {
                const __m256i s = _mm256_dpbusd_avx_epi32(neg8, u[r], qa);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * da), acc[r][t]);
            }
        }
    }
    store_sums(y, ldy, NR, NT, acc);
}

/* The same for q8_0 rows (NT = 1 in practice: two vectors per row). */
static AI void q8_0_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                           const unsigned char *a, size_t as, const int NR, const int NT) {
    __m256 acc[4][2];
    AVXVNNI_UNROLL
    for (int r = 0; r < NR; r++)
        AVXVNNI_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    const __m256i c128 = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        __m256i qw[4], off[4];
        float dw[4];
        AVXVNNI_UNROLL
        for (int r = 0; r < NR; r++) {
            const unsigned char *x = w + (size_t)r * ws + (size_t)b * QB8;
            prefetch_next(x, NR, ws);
            qw[r] = ld256(x + offsetof(block_q8_0, qs));
            off[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                      _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), c128, qw[r]));
            dw[r] = ld_half(x);
        }
        AVXVNNI_UNROLL
        for (int t = 0; t < NT; t++) {
            const unsigned char *q = a + (size_t)t * as + (size_t)b * QB8;
            const __m256i qa = _mm256_xor_si256(ld256(q + offsetof(block_q8_0, qs)), c128);
            const float da = ld_half(q);
            AVXVNNI_UNROLL
            for (int r = 0; r < NR; r++) {
                const __m256i s = _mm256_dpbusd_avx_epi32(off[r], qa, qw[r]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * da), acc[r][t]);
            }
        }
    }
    store_sums(y, ldy, NR, NT, acc);
}

/* rows in fours (then singles) as the outer loop, tokens in groups of 2
 * (q4_0) or 1 (q8_0) inside, single rows one token at a time */
KERN_GEMM_DRIVER(gemm_q4_0_q8_0_avxvnni, q4_0_kernel, QK8_0, 4, 2, ROWS_OUTER, KERN_GEMM_TAIL_SINGLE)
KERN_GEMM_DRIVER(gemm_q8_0_q8_0_avxvnni, q8_0_kernel, QK8_0, 4, 1, ROWS_OUTER, KERN_GEMM_TAIL_SINGLE)

void vec_dot_q4_0_q8_0_avxvnni(int64_t n, float *out, const void *w, const void *a) {
    q4_0_kernel(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);
}

void vec_dot_q8_0_q8_0_avxvnni(int64_t n, float *out, const void *w, const void *a) {
    q8_0_kernel(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);
}
#else
typedef int kite_empty_unit_vec_dot_quant_avxvnni; /* ISO C wants a declaration */
#endif
