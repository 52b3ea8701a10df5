/*
 * vec_dot_quant_vnni.c - q4_0, q8_0, q4_1 and q5_1 weight rows x q8_0 activations with
 * AVX-512 VNNI: vpdpbusd adds four unsigned-byte x signed-byte products into
 * each int32 lane without intermediate saturation, so block sums are exact.
 *
 * DESIGN (the decode "flat GEMM")
 *   One register-blocked micro-kernel per type handles NR weight rows (4, or
 *   1 for the remainder) x NT activation rows (1..4): a weight pair of
 *   blocks is unpacked once and used for NT tokens, an activation pair is
 *   loaded once and used for NR rows.  vec_dot is the same kernel at
 *   NR = NT = 1, so gemm returns vec_dot's values bit for bit.
 *
 *   Two blocks share one zmm: int32 lanes 0..7 hold block b, 8..15 block b+1
 *   (the activation pair is simply its two 32-byte qs arrays).  An odd last
 *   block runs the same code with the upper half zeroed (and its scale 0).
 *
 *   Operand tricks (vpdpbusd wants the first operand unsigned):
 *     q4_0: nibbles u (0..15) are unsigned: sum((u-8)*a) = dpbusd(-8*sum(a),
 *           u, a); -8*sum(a) (= -dpbusd(8, a)) is computed once per
 *           activation pair and shared by all rows.  The nibbles come from
 *           one broadcast load per block, a shift by 4 of every other
 *           128-bit quarter (masked) and an AND.
 *     q8_0: the activations are made unsigned, a' = a + 128 (XOR 0x80, once
 *           per activation pair): sum(a*w) = dpbusd(-128*sum(w), a', w);
 *           -128*sum(w) is computed once per weight pair and shared by all
 *           tokens.  a' <= 255, |w| <= 128: lane sums stay far inside int32.
 *   Each lane's int32 is converted and multiplied by d_w*d_a (the reference's
 *   scale product, rounded the same way) and added with FMA into a float
 *   accumulator per output; lanes are summed at the end.  The float order
 *   differs from the reference (tested within a budget) but depends only
 *   on n.
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/vnni_common.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define QB4 ((size_t)sizeof(block_q4_0)) /* 18 bytes */
#define QB8 ((size_t)sizeof(block_q8_0)) /* 34 bytes */

/* lanes 0..7 = half h0, lanes 8..15 = half h1, as floats (exact widening) */
static ALWAYS_INLINE __m512 scales2(uint16_t h0, uint16_t h1) {
    return _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16((short)h0), 0xFF00, (short)h1));
}
static ALWAYS_INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static ALWAYS_INLINE __m128i ld128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
static ALWAYS_INLINE __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The f16 scales of a block pair as floats (lanes 0..7 block b, 8..15 b+1)
 * from one load of the pair and a word permute: q4_0 pairs (36 bytes) have
 * d at bytes 0 and 18, q8_0 pairs (68 bytes) at 0 and 34.  Only for full
 * pairs: the loads stay inside the pair. */
static ALWAYS_INLINE __m512 scales_q4_pair(const unsigned char *x) {
    const __m256i idx = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9);
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(idx, ld256(x)));
}
static ALWAYS_INLINE __m512 scales_q8_pair(const unsigned char *x) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0x00110011, 0x00110011, 0x00110011, 0x00110011, 0, 0, 0, 0, 0,
                                          0, 0, 0);
    const __m512i v = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(x));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(v));
}

/* q4_0 nibbles of blocks at x0, x1 (x1 NULL: zero) as bytes in element
 * order: [qs0 & 15, qs0 >> 4, qs1 & 15, qs1 >> 4]. */
static ALWAYS_INLINE __m512i q4_pair(const unsigned char *x0, const unsigned char *x1) {
    __m512i t = _mm512_broadcast_i32x4(ld128(x0 + offsetof(block_q4_0, qs)));
    t = x1 ? _mm512_mask_broadcast_i32x4(t, 0xFF00, ld128(x1 + offsetof(block_q4_0, qs)))
           : _mm512_maskz_broadcast_i32x4(0x00FF, ld128(x0 + offsetof(block_q4_0, qs)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4), _mm512_set1_epi8(0x0F));
}
/* q8_0 qs of blocks at p0, p1 (p1 NULL: zero) */
static ALWAYS_INLINE __m512i q8_pair(const unsigned char *p0, const unsigned char *p1) {
    const __m256i lo = ld256(p0 + offsetof(block_q8_0, qs));
    return p1 ? join(lo, ld256(p1 + offsetof(block_q8_0, qs))) : _mm512_zextsi256_si512(lo);
}

static ALWAYS_INLINE void store_sums(float *y, int64_t ldy, int nr, int nt, __m512 acc[4][4]) {
    KITE_UNROLL
    for (int r = 0; r < nr; r++)
        KITE_UNROLL
        for (int t = 0; t < nt; t++) y[(int64_t)t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* Software prefetch target, bytes ahead of the current block of a row.
 * With NR > 1 rows walked side by side, the hardware prefetchers lose track
 * of the interleaved streams (measured: q4_K 4-row DRAM streaming at 6-7 GB/s
 * without, 15.7 GB/s with this prefetch, 1 thread): fetch the same offset in
 * the row NR rows below, i.e. the next row group's data, at least once per
 * line.  A single row (vec_dot) prefetches PF_DIST bytes ahead. */
#define PF_DIST 768
static ALWAYS_INLINE size_t prefetch_ahead(int nr, size_t ws) { return nr > 1 ? (size_t)nr * ws : PF_DIST; }

/* One pair of blocks at block b (two = 0: block b only) for NR q4_0 rows x
 * NT q8_0 activation rows. */
static ALWAYS_INLINE void q4_0_step(__m512 acc[4][4], int64_t b, const int two, const unsigned char *w, size_t ws,
                                    const unsigned char *a, size_t as, const int NR, const int NT) {
    const size_t pf = prefetch_ahead(NR, ws);
    __m512i u[4];
    __m512 dw[4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws + (size_t)b * QB4;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        u[r] = q4_pair(x, two ? x + QB4 : NULL);
        dw[r] = two ? scales_q4_pair(x) : scales2(ld_u16(x), 0);
    }
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *q = a + (size_t)t * as + (size_t)b * QB8;
        const __m512i qa = q8_pair(q, two ? q + QB8 : NULL);
        const __m512i neg8 =
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), qa));
        const __m512 da = two ? scales_q8_pair(q) : scales2(ld_u16(q), 0);
        KITE_UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512i s = _mm512_dpbusd_epi32(neg8, u[r], qa);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], da), acc[r][t]);
        }
    }
}

static ALWAYS_INLINE void q4_0_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    __m512 acc[4][4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++)
        KITE_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) q4_0_step(acc, b, 1, w, ws, a, as, NR, NT);
    if (b < nb) q4_0_step(acc, b, 0, w, ws, a, as, NR, NT);
    store_sums(y, ldy, NR, NT, acc);
}

/* The same for q8_0 rows. */
static ALWAYS_INLINE void q8_0_step(__m512 acc[4][4], int64_t b, const int two, const unsigned char *w, size_t ws,
                                    const unsigned char *a, size_t as, const int NR, const int NT) {
    const size_t pf = prefetch_ahead(NR, ws);
    const __m512i c128 = _mm512_set1_epi8((char)0x80);
    __m512i qw[4], off[4];
    __m512 dw[4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws + (size_t)b * QB8;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 64, _MM_HINT_T0);
        qw[r] = q8_pair(x, two ? x + QB8 : NULL);
        off[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, qw[r]));
        dw[r] = two ? scales_q8_pair(x) : scales2(ld_u16(x), 0);
    }
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *q = a + (size_t)t * as + (size_t)b * QB8;
        const __m512i qa = _mm512_xor_si512(q8_pair(q, two ? q + QB8 : NULL), c128);
        const __m512 da = two ? scales_q8_pair(q) : scales2(ld_u16(q), 0);
        KITE_UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512i s = _mm512_dpbusd_epi32(off[r], qa, qw[r]);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], da), acc[r][t]);
        }
    }
}

static ALWAYS_INLINE void q8_0_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    __m512 acc[4][4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++)
        KITE_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) q8_0_step(acc, b, 1, w, ws, a, as, NR, NT);
    if (b < nb) q8_0_step(acc, b, 0, w, ws, a, as, NR, NT);
    store_sums(y, ldy, NR, NT, acc);
}

/* q4_1 / q5_1 (w = d*q + m, q unsigned): per lane d_w*d_a*dpbusd(q, a) +
 * m_w*d_a*dpbusd(1, a), two FMAs; the activation sum dpbusd(1, a) is taken
 * once per activation pair and shared by all rows.  q5_1's fifth bits: the
 * pair's two qh words are one 64-bit byte mask in element order (the
 * nibble bytes are in element order too), merged with one masked byte broadcast and an OR.  The
 * scale pairs come from one 32-byte load of the pair (d, m at halves 0, 1
 * and 10, 11 for q4_1's 20-byte blocks; 0, 1 and 12, 13 for q5_1's 24). */
#define QB41 ((size_t)sizeof(block_q4_1)) /* 20 bytes */
#define QB51 ((size_t)sizeof(block_q5_1)) /* 24 bytes */

static ALWAYS_INLINE __m512 halves_pair(const unsigned char *x, short i0, short i1) {
    const __m256i idx = _mm256_setr_epi16(i0, i0, i0, i0, i0, i0, i0, i0, i1, i1, i1, i1, i1, i1, i1, i1);
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(idx, ld256(x)));
}
/* nibbles of the 16 qs bytes at q0, q1 (q1 NULL: zero), as q4_pair */
static ALWAYS_INLINE __m512i nib_pair(const unsigned char *q0, const unsigned char *q1) {
    __m512i t = _mm512_broadcast_i32x4(ld128(q0));
    t = q1 ? _mm512_mask_broadcast_i32x4(t, 0xFF00, ld128(q1)) : _mm512_maskz_broadcast_i32x4(0x00FF, ld128(q0));
    return _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4), _mm512_set1_epi8(0x0F));
}

static ALWAYS_INLINE void q41_step(__m512 acc[4][4], int64_t b, const int two, const unsigned char *w, size_t ws,
                                   const unsigned char *a, size_t as, const int NR, const int NT, const int Q5) {
    const size_t qb = Q5 ? QB51 : QB41;
    const size_t qs_off = Q5 ? offsetof(block_q5_1, qs) : offsetof(block_q4_1, qs);
    const size_t pf = prefetch_ahead(NR, ws);
    __m512i u[4];
    __m512 dw[4], mw[4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws + (size_t)b * qb;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        u[r] = nib_pair(x + qs_off, two ? x + qb + qs_off : NULL);
        if (Q5) {
            uint32_t h0, h1 = 0;
            memcpy(&h0, x + offsetof(block_q5_1, qh), 4);
            if (two) memcpy(&h1, x + qb + offsetof(block_q5_1, qh), 4);
            u[r] = _mm512_or_si512(u[r], _mm512_maskz_set1_epi8((__mmask64)((uint64_t)h1 << 32 | h0), 0x10));
        }
        const short i1 = (short)(qb / 2);
        dw[r] = two ? halves_pair(x, 0, i1) : scales2(ld_u16(x), 0);
        mw[r] = two ? halves_pair(x, 1, (short)(i1 + 1)) : scales2(ld_u16(x + 2), 0);
    }
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *q = a + (size_t)t * as + (size_t)b * QB8;
        const __m512i qa = q8_pair(q, two ? q + QB8 : NULL);
        const __m512 sa = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), qa));
        const __m512 da = two ? scales_q8_pair(q) : scales2(ld_u16(q), 0);
        KITE_UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[r], qa);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], da), acc[r][t]);
            acc[r][t] = _mm512_fmadd_ps(sa, _mm512_mul_ps(mw[r], da), acc[r][t]);
        }
    }
}

static ALWAYS_INLINE void q41_kernel_any(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                         const unsigned char *a, size_t as, const int NR, const int NT, const int Q5) {
    __m512 acc[4][4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++)
        KITE_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) q41_step(acc, b, 1, w, ws, a, as, NR, NT, Q5);
    if (b < nb) q41_step(acc, b, 0, w, ws, a, as, NR, NT, Q5);
    store_sums(y, ldy, NR, NT, acc);
}
static ALWAYS_INLINE void q4_1_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    q41_kernel_any(nb, y, ldy, w, ws, a, as, NR, NT, 0);
}
static ALWAYS_INLINE void q5_1_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    q41_kernel_any(nb, y, ldy, w, ws, a, as, NR, NT, 1);
}

/* The flat GEMM over micro-kernels: rows in fours (then singles), tokens in
 * groups of up to 4.  Every output goes through the same per-output
 * instruction sequence whatever NR/NT, so it equals vec_dot bit for bit. */
KERN_GEMM_DRIVER(gemm_q4_0_q8_0_vnni, q4_0_kernel, QK8_0, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_GROUPED)
KERN_GEMM_DRIVER(gemm_q8_0_q8_0_vnni, q8_0_kernel, QK8_0, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_GROUPED)
KERN_GEMM_DRIVER(gemm_q4_1_q8_0_vnni, q4_1_kernel, QK8_0, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_GROUPED)
KERN_GEMM_DRIVER(gemm_q5_1_q8_0_vnni, q5_1_kernel, QK8_0, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_GROUPED)

void vec_dot_q4_0_q8_0_vnni(int64_t n, float *out, const void *w, const void *a) {
    q4_0_kernel(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);
}

void vec_dot_q8_0_q8_0_vnni(int64_t n, float *out, const void *w, const void *a) {
    q8_0_kernel(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);
}

void vec_dot_q4_1_q8_0_vnni(int64_t n, float *out, const void *w, const void *a) {
    q4_1_kernel(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);
}

void vec_dot_q5_1_q8_0_vnni(int64_t n, float *out, const void *w, const void *a) {
    q5_1_kernel(n / QK8_0, out, 1, w, 0, a, 0, 1, 1);
}
#else
typedef int kite_empty_unit_vec_dot_quant_vnni; /* ISO C wants a declaration */
#endif
