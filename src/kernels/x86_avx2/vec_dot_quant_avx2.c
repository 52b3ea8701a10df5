/*
 * vec_dot_quant_avx2.c - integer dot products with AVX2 (vpmaddubsw +
 * vpmaddwd): int8 x int4/int8 products summed exactly in int32.
 *
 * vpmaddubsw multiplies unsigned bytes by signed bytes and adds pairs into
 * saturating int16.  Signed x signed products (q4_0 after -8, q8_0) use the
 * sign trick: |w| as unsigned times a*sign(w); activations are never -128
 * (ref/quant_act.c), so negating them cannot overflow, and a pair sum is at
 * most 2*128*127 < 32767.  q4_K nibbles (0..15) and q6_K 6-bit values
 * (0..63, the -32 offset applied through bsums) are already unsigned.
 *
 * q4_0/q8_0/q4_1/q5_1 accumulate the scaled block sums in a float vector (fast, but
 * summed in another order than the reference: tested within a budget).
 * q4_K/q5_K/q6_K/iq4_xs (and iq4_nl, q5_0) form each (super-)block's integer sum exactly and
 * then evaluate the reference's float expression in the reference's order,
 * so their results are bit-identical to ref/vec_dot_quant.c.  q5_K's 5-bit
 * values (0..31) are unsigned like q4_K's; iq4_xs's codebook values
 * (-127..113, never 0) are looked up with vpshufb and take the sign trick.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "kernels/x86_avx2/avx2.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

/* An f16 scale as float with F16C (exact, inline; the out-of-line software
 * fp16_to_fp32 twice per block cost these kernels more than their dot
 * products - see docs/notes/kernels-history.md, AVX-VNNI variant). */
static inline float ld_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}
static inline float ld_f32s(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 lanes of sum(x*y) for signed bytes x, y (y != -128). */
static inline __m256i dot_s8(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* The 32 values of a q4_0 block minus 8, as signed bytes in element order. */
static inline __m256i unpack_q4_0(const unsigned char *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

void vec_dot_q4_0_q8_0_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 2 * sizeof(block_q4_0), y += 2 * sizeof(block_q8_0)) {
        const unsigned char *x1 = x + sizeof(block_q4_0), *y1 = y + sizeof(block_q8_0);
        const __m256i p0 = dot_s8(unpack_q4_0(x + offsetof(block_q4_0, qs)), ld256(y + offsetof(block_q8_0, qs)));
        const __m256i p1 = dot_s8(unpack_q4_0(x1 + offsetof(block_q4_0, qs)), ld256(y1 + offsetof(block_q8_0, qs)));
        const float d0 = ld_half(x) * ld_half(y), d1 = ld_half(x1) * ld_half(y1);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d1), acc1);
    }
    for (; b < nb; b++, x += sizeof(block_q4_0), y += sizeof(block_q8_0)) {
        const __m256i p0 = dot_s8(unpack_q4_0(x + offsetof(block_q4_0, qs)), ld256(y + offsetof(block_q8_0, qs)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(ld_half(x) * ld_half(y)), acc0);
    }
    *out = hsum8(_mm256_add_ps(acc0, acc1));
}

void vec_dot_q8_0_q8_0_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 2 * sizeof(block_q8_0), y += 2 * sizeof(block_q8_0)) {
        const unsigned char *x1 = x + sizeof(block_q8_0), *y1 = y + sizeof(block_q8_0);
        const __m256i p0 = dot_s8(ld256(x + offsetof(block_q8_0, qs)), ld256(y + offsetof(block_q8_0, qs)));
        const __m256i p1 = dot_s8(ld256(x1 + offsetof(block_q8_0, qs)), ld256(y1 + offsetof(block_q8_0, qs)));
        const float d0 = ld_half(x) * ld_half(y), d1 = ld_half(x1) * ld_half(y1);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d1), acc1);
    }
    for (; b < nb; b++, x += sizeof(block_q8_0), y += sizeof(block_q8_0)) {
        const __m256i p0 = dot_s8(ld256(x + offsetof(block_q8_0, qs)), ld256(y + offsetof(block_q8_0, qs)));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(ld_half(x) * ld_half(y)), acc0);
    }
    *out = hsum8(_mm256_add_ps(acc0, acc1));
}

/* Unpacks the 12 scale bytes of a q4_K block: sc[0..7] 6-bit scales and
 * m[0..7] 6-bit mins (same values as ref_scale_min_k4). */
static inline void unpack_k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    uint32_t u[3];
    memcpy(u, q, 12);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t s_lo = u[0] & lo6;                                  /* sc 0..3 */
    const uint32_t m_lo = u[1] & lo6;                                  /* m 0..3 */
    const uint32_t s_hi = (u[2] & lo4) | (((u[0] >> 6) & lo2) << 4);   /* sc 4..7 */
    const uint32_t m_hi = ((u[2] >> 4) & lo4) | (((u[1] >> 6) & lo2) << 4); /* m 4..7 */
    memcpy(sc, &s_lo, 4);
    memcpy(sc + 4, &s_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

/* Exact integer parts of one q4_K (Q5 = 0) or q5_K (Q5 = 1) x q8_K
 * super-block: *isum = sum_j sc_j * sum(q*a8), *msum = sum_j m_j *
 * (bsum_2j + bsum_2j+1); q5_K's q has bit j of qh[k] as bit 4 of element k
 * of sub-block j.  Q5 is a constant at every call (always inlined). */
static inline __attribute__((always_inline)) void q45_K_block_avx2(const int Q5, const unsigned char *x,
                                                                   const unsigned char *y, int32_t *isum,
                                                                   int32_t *msum) {
    uint8_t sc[8], m[8];
    unpack_k4_scales(x + offsetof(block_q4_K, scales), sc, m);
    const unsigned char *qs = x + (Q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    const unsigned char *q8 = y + offsetof(block_q8_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i hb = Q5 ? ld256(x + offsetof(block_q5_K, qh)) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i bits = ld256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(bits, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if (Q5) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4));
        }
        __m256i p0 = _mm256_maddubs_epi16(lo, ld256(q8 + 64 * c));
        __m256i p1 = _mm256_maddubs_epi16(hi, ld256(q8 + 64 * c + 32));
        p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * c]));
        p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * c + 1]));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
    }
    *isum = hsum8i(acc);
    /* bsums: 16 int16; pairs summed -> 8 sub-block sums, times the mins */
    const __m256i bs = ld256(y + offsetof(block_q8_K, bsums));
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m128i mm = _mm_loadl_epi64((const __m128i *)(const void *)m);
    const __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(mm), pairs);
    __m128i s = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    *msum = _mm_cvtsi128_si32(s);
}

/* Both k4-scale types: the reference's float expression per super-block. */
static inline __attribute__((always_inline)) void dot_q45_K_avx2(const int Q5, int64_t n, float *out, const void *w,
                                                                 const void *a) {
    const int64_t nb = n / QK_K;
    const size_t bb = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += bb, y += sizeof(block_q8_K)) {
        int32_t isum, msum;
        q45_K_block_avx2(Q5, x, y, &isum, &msum);
        const float dy = ld_f32s(y + offsetof(block_q8_K, d));
        const float d = ld_half(x + offsetof(block_q4_K, d)) * dy;
        const float dmin = ld_half(x + offsetof(block_q4_K, dmin)) * dy;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *out = sum;
}

void vec_dot_q4_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) { dot_q45_K_avx2(0, n, out, w, a); }

void vec_dot_q5_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) { dot_q45_K_avx2(1, n, out, w, a); }

/* Exact sum_g sc_g * sum((u-32)*a8) of one q6_K x q8_K super-block. */
static inline int32_t q6_K_block_avx2(const unsigned char *x, const unsigned char *y) {
    const unsigned char *ql = x + offsetof(block_q6_K, ql);
    const unsigned char *qh = x + offsetof(block_q6_K, qh);
    const int8_t *scp = (const int8_t *)(x + offsetof(block_q6_K, scales));
    const unsigned char *q8 = y + offsetof(block_q8_K, qs);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = ld256(ql + 64 * h), l1 = ld256(ql + 64 * h + 32);
        const __m256i hb = ld256(qh + 32 * h);
        __m256i u[4];
        u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
        u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
        u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
        u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
        for (int k = 0; k < 4; k++) {
            const int g = 8 * h + 2 * k; /* 16-element groups g (low lane) and g+1 (high lane) */
            const __m256i p = _mm256_maddubs_epi16(u[k], ld256(q8 + 128 * h + 32 * k));
            const __m256i s = _mm256_set_m128i(_mm_set1_epi16(scp[g + 1]), _mm_set1_epi16(scp[g]));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
        }
    }
    /* the -32 offset: 32 * sum_g sc_g * bsum_g */
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)scp));
    const __m256i off = _mm256_madd_epi16(sc16, ld256(y + offsetof(block_q8_K, bsums)));
    return hsum8i(acc) - 32 * hsum8i(off);
}

void vec_dot_q6_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q6_K), y += sizeof(block_q8_K)) {
        const int32_t isum = q6_K_block_avx2(x, y);
        sum += ld_half(x + offsetof(block_q6_K, d)) * ld_f32s(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* Exact sum_j (ls_j - 32) * sum(v*a8) of one iq4_xs x q8_K super-block:
 * sub-blocks 2c and 2c+1 in the two 128-bit lanes. */
static inline int32_t iq4_xs_block_avx2(const unsigned char *x, const unsigned char *y) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)kite_iq4nl_values));
    const unsigned char *qs = x + offsetof(block_iq4_xs, qs), *sl = x + offsetof(block_iq4_xs, scales_l);
    const unsigned char *q8 = y + offsetof(block_q8_K, qs);
    uint16_t sh;
    memcpy(&sh, x + offsetof(block_iq4_xs, scales_h), 2);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i bits = ld256(qs + 32 * c);
        const __m256i lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(bits, m4));
        const __m256i hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4));
        const __m256i alo = _mm256_loadu2_m128i((const __m128i *)(const void *)(q8 + 64 * c + 32),
                                                (const __m128i *)(const void *)(q8 + 64 * c));
        const __m256i ahi = _mm256_loadu2_m128i((const __m128i *)(const void *)(q8 + 64 * c + 48),
                                                (const __m128i *)(const void *)(q8 + 64 * c + 16));
        const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(lo), _mm256_sign_epi8(alo, lo));
        const __m256i p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(hi), _mm256_sign_epi8(ahi, hi));
        const int l0 = ((sl[c] & 0xF) | ((sh >> (4 * c)) & 3) << 4) - 32;
        const int l1 = ((sl[c] >> 4) | ((sh >> (4 * c + 2)) & 3) << 4) - 32;
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16((short)l1), _mm_set1_epi16((short)l0));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(p0, s), _mm256_madd_epi16(p1, s)));
    }
    return hsum8i(acc);
}

/* iq4_nl: per block the exact integer sum (codebook by vpshufb, the sign
 * trick), then the reference's float expression in its order, so the result
 * is the reference's bit for bit. */
void vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    const __m128i tbl = _mm_loadu_si128((const __m128i *)(const void *)kite_iq4nl_values), m4 = _mm_set1_epi8(0x0F);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_iq4_nl), y += sizeof(block_q8_0)) {
        const __m128i bits = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_iq4_nl, qs)));
        const __m256i v = _mm256_set_m128i(_mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                                           _mm_shuffle_epi8(tbl, _mm_and_si128(bits, m4)));
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(ld256(y + offsetof(block_q8_0, qs)), v));
        const int32_t sumi = hsum8i(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        sum += (float)sumi * (ld_half(x + offsetof(block_iq4_nl, d)) * ld_half(y + offsetof(block_q8_0, d)));
    }
    *out = sum;
}

/* Byte e of the result: 0xFF where bit e of x is set, else 0. */
static inline __m256i bits_to_bytes(uint32_t x) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)x), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i others = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeull); /* all bits but bit e % 8 */
    return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

/* q5_0: per block the exact integer sum (w - 16 by the sign trick), then
 * the reference's float expression in its order (bit-identical). */
void vec_dot_q5_0_q8_0_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK8_0;
    const unsigned char *x = w, *y = a;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q5_0), y += sizeof(block_q8_0)) {
        const __m128i bits = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_q5_0, qs)));
        uint32_t qh;
        memcpy(&qh, x + offsetof(block_q5_0, qh), 4);
        const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bits, 4), m4), _mm_and_si128(bits, m4));
        const __m256i u = _mm256_or_si256(nib, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
        const __m256i v = _mm256_sub_epi8(u, _mm256_set1_epi8(16));
        const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(ld256(y + offsetof(block_q8_0, qs)), v));
        const int32_t sumi = hsum8i(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        sum += (float)sumi * (ld_half(x + offsetof(block_q5_0, d)) * ld_half(y + offsetof(block_q8_0, d)));
    }
    *out = sum;
}

/* q4_1 / q5_1: per block the 8 lanes of sum(q*a) (q unsigned, so maddubs
 * takes it as it is: |pair| <= 2*31*127 fits int16) and of sum(a), scaled by
 * d_w*d_a and m_w*d_a into float vectors (q4_0's scheme: the float order
 * differs from the reference, tested within a budget; a horizontal sum per
 * block to stay bit-identical made prefill slower than the generic path). */
static inline __attribute__((always_inline)) __m256 q41_block_avx2(const int Q5, const unsigned char *x,
                                                                   const unsigned char *y, __m256 acc) {
    const size_t qs = Q5 ? offsetof(block_q5_1, qs) : offsetof(block_q4_1, qs);
    const __m128i bits = _mm_loadu_si128((const __m128i *)(const void *)(x + qs));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bits, 4), m4), _mm_and_si128(bits, m4));
    if (Q5) {
        uint32_t qh;
        memcpy(&qh, x + offsetof(block_q5_1, qh), 4);
        q = _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
    }
    const __m256i q8 = ld256(y + offsetof(block_q8_0, qs)), ones16 = _mm256_set1_epi16(1);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, q8), ones16);
    const __m256i sa = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q8), ones16);
    const float da = ld_half(y + offsetof(block_q8_0, d));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(ld_half(x) * da), acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sa), _mm256_set1_ps(ld_half(x + 2) * da), acc); /* m after d */
}

static inline __attribute__((always_inline)) void dot_q41_avx2(const int Q5, int64_t n, float *out, const void *w,
                                                               const void *a) {
    const int64_t nb = n / QK8_0;
    const size_t qb = Q5 ? sizeof(block_q5_1) : sizeof(block_q4_1);
    const unsigned char *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 2 * qb, y += 2 * sizeof(block_q8_0)) {
        acc0 = q41_block_avx2(Q5, x, y, acc0);
        acc1 = q41_block_avx2(Q5, x + qb, y + sizeof(block_q8_0), acc1);
    }
    if (b < nb) acc0 = q41_block_avx2(Q5, x, y, acc0);
    *out = hsum8(_mm256_add_ps(acc0, acc1));
}

void vec_dot_q4_1_q8_0_avx2(int64_t n, float *out, const void *w, const void *a) { dot_q41_avx2(0, n, out, w, a); }

void vec_dot_q5_1_q8_0_avx2(int64_t n, float *out, const void *w, const void *a) { dot_q41_avx2(1, n, out, w, a); }

void vec_dot_iq4_xs_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_iq4_xs), y += sizeof(block_q8_K)) {
        const int32_t isum = iq4_xs_block_avx2(x, y);
        sum += ld_half(x + offsetof(block_iq4_xs, d)) * ld_f32s(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* The 2-bit fields k (0..3) of 32 q2_K/q3_K qs bytes: elements 128h + 32k + 0..31. */
static inline __m256i k2_field(__m256i qs, int k) {
    return _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
}
/* 16-element groups g (low 128-bit lane) and g+1 (high lane) scaled and summed in int32. */
static inline __m256i k2_group_pair(__m256i u, const unsigned char *q8, int sc_lo, int sc_hi) {
    const __m256i p = _mm256_maddubs_epi16(u, ld256(q8)); /* |pair| <= 2*7*128: no saturation */
    return _mm256_madd_epi16(p, _mm256_set_m128i(_mm_set1_epi16((short)sc_hi), _mm_set1_epi16((short)sc_lo)));
}

/* Exact sum_g sc_g * sum(q*a8) of one q3_K x q8_K super-block, q = u - 4 with
 * u = low bits | hmask bit << 2 (0..7, unsigned for vpmaddubsw); the -4 through bsums. */
/* ref_q3_K_scales in SSE: low nibbles of bytes 0..7 then their high nibbles, each OR'ed
 * with bits 2*(j/4) of byte 8 + j%4 moved to bits 4..5, minus 32 (prefill calls the dot
 * once per row and token, so the unpack is on the hot path). */
static inline __m128i q3_K_scales_sse(const unsigned char *p) {
    unsigned char b[16] = {0};
    memcpy(b, p, 12); /* the block ends 2 bytes after the scales: no 16-byte load */
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)b), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m128i hb = _mm_shuffle_epi8(v, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
    const __m128i h2 = _mm_and_si128(_mm_srlv_epi32(hb, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(h2, 4)), _mm_set1_epi8(32));
}

static inline int32_t q3_K_block_avx2(const unsigned char *x, const unsigned char *y) {
    const unsigned char *q8 = y + offsetof(block_q8_K, qs);
    int8_t sc[16];
    const __m128i sc8 = q3_K_scales_sse(x + offsetof(block_q3_K, scales));
    _mm_storeu_si128((__m128i *)(void *)sc, sc8);
    const __m256i hm = ld256(x + offsetof(block_q3_K, hmask));
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i qs = ld256(x + offsetof(block_q3_K, qs) + 32 * h);
        for (int k = 0; k < 4; k++) {
            const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + k)), _mm256_set1_epi8(1));
            const __m256i u = _mm256_or_si256(k2_field(qs, k), _mm256_slli_epi16(hb, 2));
            const int g = 8 * h + 2 * k;
            acc = _mm256_add_epi32(acc, k2_group_pair(u, q8 + 128 * h + 32 * k, sc[g], sc[g + 1]));
        }
    }
    const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), ld256(y + offsetof(block_q8_K, bsums)));
    return hsum8i(acc) - 4 * hsum8i(off);
}

void vec_dot_q3_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q3_K), y += sizeof(block_q8_K)) {
        const int32_t isum = q3_K_block_avx2(x, y);
        sum += ld_half(x + offsetof(block_q3_K, d)) * ld_f32s(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

/* q2_K: the exact sums sum_g (sc_g & 15) * sum(q*a8) and sum_g (sc_g >> 4) * bsum_g. */
void vec_dot_q2_K_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q2_K), y += sizeof(block_q8_K)) {
        const unsigned char *q8 = y + offsetof(block_q8_K, qs), *scp = x + offsetof(block_q2_K, scales);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qs = ld256(x + offsetof(block_q2_K, qs) + 32 * h);
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                acc = _mm256_add_epi32(acc, k2_group_pair(k2_field(qs, k), q8 + 128 * h + 32 * k, scp[g] & 15,
                                                          scp[g + 1] & 15));
            }
        }
        const __m128i s8 = _mm_loadu_si128((const __m128i *)(const void *)scp);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
        const int32_t isum = hsum8i(acc);
        const int32_t msum = hsum8i(_mm256_madd_epi16(m16, ld256(y + offsetof(block_q8_K, bsums))));
        const float dy = ld_f32s(y + offsetof(block_q8_K, d));
        const float d = ld_half(x + offsetof(block_q2_K, d)) * dy;
        const float dmin = ld_half(x + offsetof(block_q2_K, dmin)) * dy;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *out = sum;
}

/* tq2_0 / tq1_0: the 256 unsigned digits t (0..2; tq2_0's 2-bit fields may
 * hold 3) in element order, 32 at a time against the contiguous activations:
 * vpmaddubsw pairs are at most 2*3*127 and 8 of them summed stay inside int16,
 * so the block takes one vpmaddwd; sum((t-1)*a) = that - sum(bsums), exact,
 * then the reference's float expression (bit-identical).  tq1_0's digit k of
 * byte b: q = b * 3^k mod 256 (two vpmullw: even bytes, and odd bytes with the
 * even ones masked off), t = (q >= 86) + (q >= 171) from unsigned max
 * compares (see vec_dot_kquant_vnni.c). */
static inline int32_t bsum_total(const unsigned char *y) {
    return hsum8i(_mm256_madd_epi16(ld256(y + offsetof(block_q8_K, bsums)), _mm256_set1_epi16(1)));
}

void vec_dot_tq2_0_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) {
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_tq2_0), y += sizeof(block_q8_K)) {
        const unsigned char *q8 = y + offsetof(block_q8_K, qs);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qs = ld256(x + offsetof(block_tq2_0, qs) + 32 * h);
            for (int k = 0; k < 4; k++)
                acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(k2_field(qs, k), ld256(q8 + 128 * h + 32 * k)));
        }
        const int32_t isum = hsum8i(_mm256_madd_epi16(acc, _mm256_set1_epi16(1))) - bsum_total(y);
        sum += ld_half(x + offsetof(block_tq2_0, d)) * ld_f32s(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

static inline __m256i tq1_digits_avx2(__m256i z, __m256i mul) {
    const __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(z, mul), _mm256_set1_epi16(0x00FF));
    const __m256i hi = _mm256_mullo_epi16(_mm256_and_si256(z, _mm256_set1_epi16((short)0xFF00)), mul);
    const __m256i q = _mm256_or_si256(lo, hi);
    const __m256i c1 = _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8(86)), q);
    const __m256i c2 = _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8((char)171)), q);
    return _mm256_sub_epi8(_mm256_setzero_si256(), _mm256_add_epi8(c1, c2)); /* -(-1 + -1) */
}

void vec_dot_tq1_0_q8_K_avx2(int64_t n, float *out, const void *w, const void *a) {
    static const short pow3[5] = {1, 3, 9, 27, 81};
    const int64_t nb = n / QK_K;
    const unsigned char *x = w, *y = a;
    /* word multipliers of the qs[32..47] pairs (x 1 | x 3, x 9 | x 27) and of
     * [qs[32..47] x 81 | qh x 1, 3, 9, 27 per dword] */
    const __m256i m01 = _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(1));
    const __m256i m23 = _mm256_set_m128i(_mm_set1_epi16(27), _mm_set1_epi16(9));
    const __m256i m4h = _mm256_set_m128i(_mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27), _mm_set1_epi16(81));
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_tq1_0), y += sizeof(block_q8_K)) {
        const unsigned char *q8 = y + offsetof(block_q8_K, qs);
        const __m256i A = ld256(x + offsetof(block_tq1_0, qs));
        const __m128i B = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_tq1_0, qs) + 32));
        uint32_t h;
        memcpy(&h, x + offsetof(block_tq1_0, qh), 4);
        const __m256i BB = _mm256_set_m128i(B, B), BH = _mm256_set_m128i(_mm_set1_epi32((int)h), B);
        __m256i acc = _mm256_setzero_si256();
        for (int k = 0; k < 5; k++)
            acc = _mm256_add_epi16(
                acc, _mm256_maddubs_epi16(tq1_digits_avx2(A, _mm256_set1_epi16(pow3[k])), ld256(q8 + 32 * k)));
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(tq1_digits_avx2(BB, m01), ld256(q8 + 160)));
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(tq1_digits_avx2(BB, m23), ld256(q8 + 192)));
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(tq1_digits_avx2(BH, m4h), ld256(q8 + 224)));
        const int32_t isum = hsum8i(_mm256_madd_epi16(acc, _mm256_set1_epi16(1))) - bsum_total(y);
        sum += ld_half(x + offsetof(block_tq1_0, d)) * ld_f32s(y + offsetof(block_q8_K, d)) * (float)isum;
    }
    *out = sum;
}

KERN_DEFINE_GEMM(gemm_q4_0_q8_0_avx2, vec_dot_q4_0_q8_0_avx2)
KERN_DEFINE_GEMM(gemm_q8_0_q8_0_avx2, vec_dot_q8_0_q8_0_avx2)
KERN_DEFINE_GEMM(gemm_q4_K_q8_K_avx2, vec_dot_q4_K_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_q6_K_q8_K_avx2, vec_dot_q6_K_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_q5_K_q8_K_avx2, vec_dot_q5_K_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_iq4_xs_q8_K_avx2, vec_dot_iq4_xs_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_iq4_nl_q8_0_avx2, vec_dot_iq4_nl_q8_0_avx2)
KERN_DEFINE_GEMM(gemm_q5_0_q8_0_avx2, vec_dot_q5_0_q8_0_avx2)
KERN_DEFINE_GEMM(gemm_q4_1_q8_0_avx2, vec_dot_q4_1_q8_0_avx2)
KERN_DEFINE_GEMM(gemm_q5_1_q8_0_avx2, vec_dot_q5_1_q8_0_avx2)
KERN_DEFINE_GEMM(gemm_q3_K_q8_K_avx2, vec_dot_q3_K_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_q2_K_q8_K_avx2, vec_dot_q2_K_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_tq1_0_q8_K_avx2, vec_dot_tq1_0_q8_K_avx2)
KERN_DEFINE_GEMM(gemm_tq2_0_q8_K_avx2, vec_dot_tq2_0_q8_K_avx2)
#else
typedef int kite_empty_unit_vec_dot_quant_avx2; /* ISO C wants a declaration */
#endif
