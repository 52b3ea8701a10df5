/*
 * gemm_x16_kquant_vnni.c - the 16-row interleaved q2_K, q3_K, q4_K, q5_K, q6_K and
 * iq4_xs kernels with AVX-512 VNNI (block formats and arithmetic in
 * gemm_x16.h; equal bit for bit to ref/gemm_x16_ref.c).
 *
 * DESIGN
 *   Per group block (16 rows x 256 elements), once for all tokens of a
 *   pass, the scales become 16 int32 lanes: q4_K with one zero-extending
 *   load and an AND per sub-block j, its mins with a shift and one
 *   vpternlogd more, doubled into both 16-bit halves (m_j * 0x10001); q6_K
 *   with one sign-extending load per group, and pairs of groups packed
 *   into 16-bit halves for the -32 term.  The quants become vpdpbusd
 *   operands of 16 rows x 4 unsigned bytes: q4_K's nibbles with an AND or a
 *   shift+AND; q6_K's 6-bit values with one vpternlogd each, which takes
 *   the low nibble from ql and bits 4-5 from qh pre-masked with 0x33 or
 *   0xCC and shifted into place.
 *   Per token: the offset term first (q4_K: 8 vpdpwssd of the mins with
 *   the bsum pairs (bsums[2j], bsums[2j+1]), folded into f at once; q6_K: 8
 *   vpdpwssd of the scale pairs with the bsums, -32 times that starting
 *   isum), then per sub-block (q4_K, 32 elements) or scale group (q6_K, 16)
 *   a chain of vpdpbusd with the token's 4 activation bytes broadcast,
 *   multiplied by its 16 scales (vpmulld) into isum; one convert and one
 *   FMA at the block end.
 *   q5_K is q4_K with each nibble's fifth bit moved into bit 4 from its
 *   X16Q5_QH chunk: one shift of the chunk (by 4 - 2p for the low
 *   nibbles of sub-block pair p, 3 - 2p for the high ones), an AND with
 *   0x10 and one vpternlogd that merges it with the nibble.  iq4_xs looks
 *   its nibbles up in the codebook + 128 (vpshufb on the nibble; unsigned
 *   1..241, the vpdpbusd operand), unpacks its 6-bit sub-block scales from
 *   SL and SH (one shift + vpternlogd each) and starts isum at -128 times
 *   the scales' dot with the bsum pairs (8 vpdpwssd, as q6_K).
 *   Tokens go in passes of X16K_PASS_TOK: the unpacked quants of a step,
 *   the pass's float and int32 accumulators and the step's scales fit the
 *   32 zmm registers.  q2_K and q3_K unpack 8 operands per 32-element step
 *   and take X16Q23_PASS_TOK = 8 tokens (pp128 15-25% faster than 4).  With one or two tokens q4_K's sub-block chains are
 *   split in two (the int32 result is the same).
 *   Prefetch: X16_PF_BYTES ahead of every block, for any token count.
 *   Unlike the q4_0/q8_0 kernel, whose lighter blocks stream faster without
 *   it, q4_K decode gained from it (571 MB of groups, one thread: 19.4 GB/s
 *   without, 26-31 with 4-12 KiB; the R4 kernel it replaces 23-27 in the
 *   same runs; two threads 53-54 against R4's 46-48).
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/gemm_x16.h"
#include "kernels/x86_avx512/vnni_common.h"
#include "tensor/blocks.h"
#include "tensor/quants.h"

#ifndef X16_PF_BYTES
#define X16_PF_BYTES 4096
#endif
#define X16K_PASS_TOK 4 /* tokens per pass over a group (register budget) */
#ifndef X16Q23_PASS_TOK
#define X16Q23_PASS_TOK 8 /* q2_K / q3_K: 8 operands per step leave room for 8 tokens */
#endif
#define X16K_PASS_MAX 8

#define Q8K_QS ((size_t)offsetof(block_q8_K, qs))
#define Q8K_BSUMS ((size_t)offsetof(block_q8_K, bsums))

static ALWAYS_INLINE __m512i bcast32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

static ALWAYS_INLINE __m512i zx16(const unsigned char *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static ALWAYS_INLINE __m512i sx16(const unsigned char *p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}
/* (b & c) | (a & ~c), bitwise: vpternlogd's table for (a, b, c) */
#define TL_B_WHERE_C 0xD8

static ALWAYS_INLINE float ld_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The block end: f[t] = fma((float)isum[t], d_w * dy_t, f[t]), dy_t the
 * float scale of token t's q8_K block at a + t*as. */
static ALWAYS_INLINE void fold_isum(const __m512i *isum, __m512 dw, const unsigned char *a, size_t as, __m512 *f,
                                    const int NT) {
    KITE_PRAGMA(GCC unroll 8)
    for (int t = 0; t < NT; t++) {
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(ld_f32(a + (size_t)t * as)));
        f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), d, f[t]);
    }
}

/* sum_k of the 16-bit pairs of w[k] times (bsums[2k], bsums[2k+1]) of the
 * q8_K block at a, per int32 lane (vpdpwssd, exact). */
static ALWAYS_INLINE __m512i bsums_dot(const __m512i w[8], const unsigned char *a) {
    __m512i s = _mm512_setzero_si512();
    KITE_PRAGMA(GCC unroll 8)
    for (int k = 0; k < 8; k++) s = _mm512_dpwssd_epi32(s, w[k], bcast32(a + Q8K_BSUMS + 4 * k));
    return s;
}

/* isum[t] = -(bsums_dot(sp, token t's q8_K block) << SHIFT): the offset
 * term q6_K (32 * csum) and iq4_xs (128 * csum) start their sums with. */
static ALWAYS_INLINE void offset_start(const __m512i sp[8], const unsigned char *a, size_t as, const int SHIFT,
                                       __m512i *isum, const int NT) {
    KITE_PRAGMA(GCC unroll 8)
    for (int t = 0; t < NT; t++)
        isum[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bsums_dot(sp, a + (size_t)t * as), SHIFT));
}

/* Sum over 8 chunks k of dpbusd(w[k], activation dword k at qa), in one or
 * two chains. */
static ALWAYS_INLINE __m512i sub_sum(const __m512i w[8], const unsigned char *qa, const int chains) {
    if (chains == 2) {
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        KITE_UNROLL
        for (int k = 0; k < 4; k++) {
            s0 = _mm512_dpbusd_epi32(s0, w[k], bcast32(qa + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, w[4 + k], bcast32(qa + 16 + 4 * k));
        }
        return _mm512_add_epi32(s0, s1);
    }
    __m512i s = _mm512_setzero_si512();
    KITE_PRAGMA(GCC unroll 8)
    for (int k = 0; k < 8; k++) s = _mm512_dpbusd_epi32(s, w[k], bcast32(qa + 4 * k));
    return s;
}

/* v shifted left by s bits per 16-bit lane (right by -s for s < 0). */
static ALWAYS_INLINE __m512i shl16(__m512i v, const int s) {
    return s >= 0 ? _mm512_slli_epi16(v, (unsigned)s) : _mm512_srli_epi16(v, (unsigned)-s);
}

/* Block x (X16K format, with X16Q5_QH for Q5) for the NT tokens whose q8_K
 * blocks are at a + t*as, into f[t]. */
static ALWAYS_INLINE void q45_K_block(const int Q5, const unsigned char *x, const unsigned char *a, size_t as,
                                      __m512 *f, const int NT) {
    const __m512i k63 = _mm512_set1_epi32(63), k15 = _mm512_set1_epi32(15), m4 = _mm512_set1_epi8(0x0F);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + X16K_D)));
    const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + X16K_DMIN)));
    /* mins, doubled into both 16-bit halves: m_j = (n nibble) | (s >> 6) << 4,
     * as (B & 15) | (A & ~15) with A = s >> 2 (bits 4-5: m_j's top bits) */
    {
        __m512i mm[8];
        KITE_UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i n = zx16(x + X16K_ML + 16 * p);
            const __m512i s0 = _mm512_srli_epi32(zx16(x + X16K_SC + 32 * p), 2);
            const __m512i s1 = _mm512_srli_epi32(zx16(x + X16K_SC + 32 * p + 16), 2);
            const __m512i m0 = _mm512_ternarylogic_epi32(s0, n, k15, TL_B_WHERE_C);
            const __m512i m1 = _mm512_ternarylogic_epi32(s1, _mm512_srli_epi32(n, 4), k15, TL_B_WHERE_C);
            mm[2 * p] = _mm512_or_si512(m0, _mm512_slli_epi32(m0, 16));
            mm[2 * p + 1] = _mm512_or_si512(m1, _mm512_slli_epi32(m1, 16));
        }
        KITE_PRAGMA(GCC unroll 4)
        for (int t = 0; t < NT; t++) {
            const __m512i ms = bsums_dot(mm, a + (size_t)t * as);
            const __m512 dm = _mm512_mul_ps(dmw, _mm512_set1_ps(ld_f32(a + (size_t)t * as)));
            f[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), dm, f[t]);
        }
    }
    __m512i isum[X16K_PASS_MAX];
    KITE_PRAGMA(GCC unroll 4)
    for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
    KITE_UNROLL
    for (int p = 0; p < 4; p++) {
        __m512i lo[8], hi[8];
        KITE_PRAGMA(GCC unroll 8)
        for (int k = 0; k < 8; k++) {
            const __m512i c = _mm512_loadu_si512(x + X16K_QS + 512 * p + 64 * k);
            if (Q5) { /* bits 2p / 2p+1 of the qh bytes into bit 4 of the low / high nibble's byte */
                const __m512i h = _mm512_loadu_si512(x + X16Q5_QH + 64 * k), k10 = _mm512_set1_epi8(0x10);
                lo[k] = _mm512_ternarylogic_epi32(_mm512_and_si512(shl16(h, 4 - 2 * p), k10), c, m4, TL_B_WHERE_C);
                hi[k] = _mm512_ternarylogic_epi32(_mm512_and_si512(shl16(h, 3 - 2 * p), k10),
                                                  _mm512_srli_epi16(c, 4), m4, TL_B_WHERE_C);
            } else {
                lo[k] = _mm512_and_si512(c, m4);
                hi[k] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
            }
        }
        const __m512i sc0 = _mm512_and_si512(zx16(x + X16K_SC + 32 * p), k63);
        const __m512i sc1 = _mm512_and_si512(zx16(x + X16K_SC + 32 * p + 16), k63);
        KITE_PRAGMA(GCC unroll 4)
        for (int t = 0; t < NT; t++) {
            const unsigned char *qa = a + (size_t)t * as + Q8K_QS + 64 * p;
            const __m512i s0 = sub_sum(lo, qa, NT <= 2 ? 2 : 1), s1 = sub_sum(hi, qa + 32, NT <= 2 ? 2 : 1);
            const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(s0, sc0), _mm512_mullo_epi32(s1, sc1));
            isum[t] = _mm512_add_epi32(isum[t], s);
        }
    }
    fold_isum(isum, dw, a, as, f, NT);
}

/* q6_K block b (X16Q6 format at g) for the NT tokens whose q8_K blocks are
 * at a + t*as, into f[t]. */
static ALWAYS_INLINE void q6_K_block(const unsigned char *g, int64_t b, const unsigned char *a, size_t as, __m512 *f,
                                     const int NT) {
    const unsigned char *sc = g + kern_x16q6_offset(b, X16Q6_SC), *qs = g + kern_x16q6_offset(b, X16Q6_QS);
    const unsigned char *dp = g + kern_x16q6_offset(b, X16Q6_D);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)dp));
    const __m512i m4 = _mm512_set1_epi8(0x0F), k33 = _mm512_set1_epi8(0x33), kcc = _mm512_set1_epi8((char)0xCC);
    __m512i isum[X16K_PASS_MAX];
    { /* isum starts at -32 * sum_g sc_g * bsums[g]: scale pairs (2k, 2k+1) in the 16-bit halves */
        const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
        __m512i sp[8];
        KITE_PRAGMA(GCC unroll 8)
        for (int k = 0; k < 8; k++)
            sp[k] = _mm512_ternarylogic_epi32(_mm512_slli_epi32(sx16(sc + 32 * k + 16), 16), sx16(sc + 32 * k), lo16,
                                              TL_B_WHERE_C);
        offset_start(sp, a, as, 5, isum, NT);
    }
    KITE_PRAGMA(GCC unroll 4)
    for (int s = 0; s < 4; s++) {
        const int h = s / 2, kk = s % 2;
        const unsigned char *st = qs + 768 * s;
        KITE_PRAGMA(GCC unroll 2)
        for (int part = 0; part < 2; part++) { /* A (ql low half) with qh bits 0-1 / 4-5, B with bits 2-3 / 6-7 */
            __m512i lo[4], hi[4];
            KITE_UNROLL
            for (int k = 0; k < 4; k++) {
                const __m512i x = _mm512_loadu_si512(st + 512 * part + 64 * k);
                const __m512i hq = _mm512_loadu_si512(st + 256 + 64 * k);
                if (part == 0) {
                    const __m512i p = _mm512_and_si512(hq, k33);
                    lo[k] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(p, 4), x, m4, TL_B_WHERE_C);
                    hi[k] = _mm512_ternarylogic_epi32(p, _mm512_srli_epi16(x, 4), m4, TL_B_WHERE_C);
                } else {
                    const __m512i q = _mm512_and_si512(hq, kcc);
                    lo[k] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(q, 2), x, m4, TL_B_WHERE_C);
                    const __m512i qr = _mm512_srli_epi16(q, 2);
                    hi[k] = _mm512_ternarylogic_epi32(qr, _mm512_srli_epi16(x, 4), m4, TL_B_WHERE_C);
                }
            }
            /* lo: elements 128h + 32 part + 4k..: group 8h + 2 part + kk; hi: 64 further, group + 4 */
            const int e = 128 * h + 32 * part + 16 * kk, glo = 8 * h + 2 * part + kk;
            const __m512i slo = sx16(sc + 16 * glo), shi = sx16(sc + 16 * (glo + 4));
            KITE_PRAGMA(GCC unroll 4)
            for (int t = 0; t < NT; t++) {
                const unsigned char *qa = a + (size_t)t * as + Q8K_QS + e;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                KITE_UNROLL
                for (int k = 0; k < 4; k++) {
                    s0 = _mm512_dpbusd_epi32(s0, lo[k], bcast32(qa + 4 * k));
                    s1 = _mm512_dpbusd_epi32(s1, hi[k], bcast32(qa + 64 + 4 * k));
                }
                const __m512i sg = _mm512_add_epi32(_mm512_mullo_epi32(s0, slo), _mm512_mullo_epi32(s1, shi));
                isum[t] = _mm512_add_epi32(isum[t], sg);
            }
        }
    }
    fold_isum(isum, dw, a, as, f, NT);
}

/* (a & c) | b, bitwise: vpternlogd's table for (a, b, c) */
#define TL_A_AND_C_OR_B 0xEC

/* iq4_xs block x (X16I4 format) for the NT tokens whose q8_K blocks are at
 * a + t*as, into f[t]. */
static ALWAYS_INLINE void iq4_xs_block(const unsigned char *x, const unsigned char *a, size_t as, __m512 *f,
                                       const int NT) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* the codebook + 128 (xor 0x80 on the int8 values) in every 128-bit lane */
    const __m512i tbl = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)kite_iq4nl_values), _mm_set1_epi8((char)0x80)));
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + X16I4_D)));
    /* ls_j - 32: low 4 bits from SL, bits 4-5 from SH (pre-shifted by 4, then by 2j) */
    const __m512i h4 = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(x + X16I4_SH))), 4);
    const __m512i k15 = _mm512_set1_epi32(15), k30 = _mm512_set1_epi32(0x30), k32 = _mm512_set1_epi32(32);
    __m512i ls[8];
    KITE_UNROLL
    for (int p = 0; p < 4; p++) {
        const __m512i l = zx16(x + X16I4_SL + 16 * p);
        ls[2 * p] = _mm512_sub_epi32(
            _mm512_ternarylogic_epi32(_mm512_srli_epi32(h4, 4 * p), _mm512_and_si512(l, k15), k30, TL_A_AND_C_OR_B), k32);
        ls[2 * p + 1] = _mm512_sub_epi32(
            _mm512_ternarylogic_epi32(_mm512_srli_epi32(h4, 4 * p + 2), _mm512_srli_epi32(l, 4), k30, TL_A_AND_C_OR_B),
            k32);
    }
    __m512i isum[X16K_PASS_MAX];
    { /* isum starts at -128 * sum_j ls_j * (bsums[2j] + bsums[2j+1]): ls_j in both 16-bit halves */
        const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
        __m512i sp[8];
        KITE_PRAGMA(GCC unroll 8)
        for (int j = 0; j < 8; j++) sp[j] = _mm512_ternarylogic_epi32(_mm512_slli_epi32(ls[j], 16), ls[j], lo16, TL_B_WHERE_C);
        offset_start(sp, a, as, 7, isum, NT);
    }
    KITE_PRAGMA(GCC unroll 8)
    for (int j = 0; j < 8; j++) {
        __m512i lo[4], hi[4];
        KITE_UNROLL
        for (int k = 0; k < 4; k++) {
            const __m512i c = _mm512_loadu_si512(x + X16I4_QS + 256 * j + 64 * k);
            lo[k] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(c, m4));
            hi[k] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
        }
        KITE_PRAGMA(GCC unroll 4)
        for (int t = 0; t < NT; t++) {
            const unsigned char *qa = a + (size_t)t * as + Q8K_QS + 32 * j;
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            KITE_UNROLL
            for (int k = 0; k < 4; k++) {
                s0 = _mm512_dpbusd_epi32(s0, lo[k], bcast32(qa + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, hi[k], bcast32(qa + 16 + 4 * k));
            }
            isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), ls[j]));
        }
    }
    fold_isum(isum, dw, a, as, f, NT);
}

/* q3_K (Q3 = 1, X16Q3 format) or q2_K (X16Q2) block b of the group at g for the NT tokens whose
 * q8_K blocks are at a + t*as, into f[t]. */
static ALWAYS_INLINE void q23_K_block(const int Q3, const unsigned char *g, int64_t b, const unsigned char *a,
                                      size_t as, __m512 *f, const int NT) {
    const unsigned char *x = g + (size_t)b * X16Q2_BLOCK_BYTES; /* q2_K */
    const unsigned char *qs = Q3 ? g + kern_x16q3_offset(b, X16Q3_QS) : x + X16Q2_QS;
    const unsigned char *hm = g + kern_x16q3_offset(b, X16Q3_HM), *sc = g + kern_x16q3_offset(b, X16Q3_SC);
    const __m512 dw = _mm512_cvtph_ps(
        _mm256_loadu_si256((const __m256i *)(const void *)(Q3 ? g + kern_x16q3_offset(b, X16Q3_D) : x + X16Q2_D)));
    const __m512i k15 = _mm512_set1_epi32(15), lo16 = _mm512_set1_epi32(0xFFFF);
    __m512i s[16]; /* the 16 scale groups' scales of 16 rows: q3_K s_g (signed), q2_K sc_g */
    __m512i isum[X16K_PASS_MAX];
    if (Q3) {
        /* s_g = (low nibble | top bits << 4) - 32, the top bits pre-shifted by 4 and then by 2 (g / 4) */
        const __m512i k63 = _mm512_set1_epi32(63), k32 = _mm512_set1_epi32(32);
        KITE_UNROLL
        for (int k = 0; k < 16; k++) {
            const __m512i l = zx16(sc + 16 * (k % 8)), t = zx16(sc + 16 * (8 + k % 4));
            const __m512i ls = k >= 8 ? _mm512_srli_epi32(l, 4) : l;
            const __m512i ts = k / 4 == 3 ? _mm512_srli_epi32(t, 2) : _mm512_slli_epi32(t, 4 - 2 * (k / 4));
            s[k] = _mm512_sub_epi32(_mm512_and_si512(_mm512_ternarylogic_epi32(ts, ls, k15, TL_B_WHERE_C), k63), k32);
        }
        /* isum starts at -4 * sum_g s_g * bsums[g]: scale pairs (2k, 2k+1) in the 16-bit halves */
        __m512i sp[8];
        KITE_PRAGMA(GCC unroll 8)
        for (int k = 0; k < 8; k++)
            sp[k] = _mm512_ternarylogic_epi32(_mm512_slli_epi32(s[2 * k + 1], 16), s[2 * k], lo16, TL_B_WHERE_C);
        offset_start(sp, a, as, 2, isum, NT);
    } else {
        const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + X16Q2_DMIN)));
        __m512i mp[8]; /* min pairs (2k, 2k+1) in the 16-bit halves */
        KITE_UNROLL
        for (int k = 0; k < 8; k++) {
            const __m512i v0 = zx16(x + X16Q2_SC + 32 * k), v1 = zx16(x + X16Q2_SC + 32 * k + 16);
            s[2 * k] = _mm512_and_si512(v0, k15);
            s[2 * k + 1] = _mm512_and_si512(v1, k15);
            mp[k] = _mm512_or_si512(_mm512_srli_epi32(v0, 4), _mm512_slli_epi32(_mm512_srli_epi32(v1, 4), 16));
        }
        KITE_PRAGMA(GCC unroll 8)
        for (int t = 0; t < NT; t++) {
            const __m512i ms = bsums_dot(mp, a + (size_t)t * as);
            const __m512 dm = _mm512_mul_ps(dmw, _mm512_set1_ps(ld_f32(a + (size_t)t * as)));
            f[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), dm, f[t]);
            isum[t] = _mm512_setzero_si512();
        }
    }
    const __m512i k03 = _mm512_set1_epi8(3), k04 = _mm512_set1_epi8(4);
    KITE_PRAGMA(GCC unroll 2)
    for (int h = 0; h < 2; h++) {
        KITE_UNROLL
        for (int j = 0; j < 4; j++) { /* elements 128h + 32j + 0..31: scale groups 8h + 2j and + 1 */
            __m512i u[8];
            KITE_PRAGMA(GCC unroll 8)
            for (int c = 0; c < 8; c++) {
                const __m512i q = _mm512_loadu_si512(qs + 64 * (8 * h + c));
                const __m512i lo = j ? _mm512_srli_epi16(q, 2 * j) : q;
                if (Q3) { /* bit 4h + j of the hmask bytes into bit 2 */
                    const __m512i t = _mm512_and_si512(shl16(_mm512_loadu_si512(hm + 64 * c), 2 - (4 * h + j)), k04);
                    u[c] = _mm512_ternarylogic_epi32(lo, t, k03, TL_A_AND_C_OR_B);
                } else {
                    u[c] = _mm512_and_si512(lo, k03);
                }
            }
            const __m512i s0 = s[8 * h + 2 * j], s1 = s[8 * h + 2 * j + 1];
            KITE_PRAGMA(GCC unroll 8)
            for (int t = 0; t < NT; t++) {
                const unsigned char *qa = a + (size_t)t * as + Q8K_QS + 128 * h + 32 * j;
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                KITE_UNROLL
                for (int c = 0; c < 4; c++) {
                    p0 = _mm512_dpbusd_epi32(p0, u[c], bcast32(qa + 4 * c));
                    p1 = _mm512_dpbusd_epi32(p1, u[4 + c], bcast32(qa + 16 + 4 * c));
                }
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(p0, s0), _mm512_mullo_epi32(p1, s1)));
            }
        }
    }
    fold_isum(isum, dw, a, as, f, NT);
}

/* The group block formats of this file's kernels. */
enum { KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_IQ4_XS, KQ_Q3_K, KQ_Q2_K };

/* One pass: NT tokens over the nb blocks of the group at g. */
static ALWAYS_INLINE void kquant_pass(const int KQ, int64_t nb, float *y, int64_t ldy, const unsigned char *g,
                                      const unsigned char *a, size_t as, int acc, const int NT) {
    const size_t bb = KQ == KQ_Q6_K ? X16Q6_BLOCK_BYTES : KQ == KQ_Q5_K ? X16Q5_BLOCK_BYTES
                    : KQ == KQ_IQ4_XS ? X16I4_BLOCK_BYTES : KQ == KQ_Q3_K ? X16Q3_BLOCK_BYTES
                    : KQ == KQ_Q2_K ? X16Q2_BLOCK_BYTES : X16K_BLOCK_BYTES;
    __m512 f[X16K_PASS_MAX];
    KITE_PRAGMA(GCC unroll 8)
    for (int t = 0; t < NT; t++) f[t] = acc ? _mm512_loadu_ps(y + (int64_t)t * ldy) : _mm512_setzero_ps();
    /* one or two tokens where kern_decode_prefetch() is on: also into L2, 16 KiB ahead (q4_K_M decode
     * 1.19-1.27x on an Intel Xeon; docs/notes/kernels-history.md, "Decode prefetch by CPU") */
    const size_t pf2 = NT <= 2 && kern_decode_prefetch() ? 16384 : 0;
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *x = g + (size_t)b * bb;
        KITE_PRAGMA(GCC unroll 53)
        for (size_t l = 0; l < bb; l += 64) _mm_prefetch((const char *)x + X16_PF_BYTES + l, _MM_HINT_T0);
        if (pf2)
            for (size_t l = 0; l < bb; l += 64) _mm_prefetch((const char *)x + pf2 + l, _MM_HINT_T1);
        const unsigned char *ab = a + (size_t)b * sizeof(block_q8_K);
        if (KQ == KQ_Q6_K) q6_K_block(g, b, ab, as, f, NT);
        else if (KQ == KQ_IQ4_XS) iq4_xs_block(x, ab, as, f, NT);
        else if (KQ == KQ_Q3_K || KQ == KQ_Q2_K) q23_K_block(KQ == KQ_Q3_K, g, b, ab, as, f, NT);
        else q45_K_block(KQ == KQ_Q5_K, x, ab, as, f, NT);
    }
    KITE_PRAGMA(GCC unroll 8)
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (int64_t)t * ldy, f[t]);
}

static ALWAYS_INLINE void kquant_tokens(const int KQ, int64_t nb, float *y, int64_t ldy, const void *grp,
                                        const void *a, size_t a_stride, int nt, int acc) {
    const unsigned char *g = grp, *act = a;
    const int pass = KQ == KQ_Q3_K || KQ == KQ_Q2_K ? X16Q23_PASS_TOK : X16K_PASS_TOK;
    for (int t0 = 0; t0 < nt; t0 += pass) {
        float *yt = y + (int64_t)t0 * ldy;
        const unsigned char *at = act + (size_t)t0 * a_stride;
        const int n = nt - t0 < pass ? nt - t0 : pass;
        switch (n) {
        case 1: kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 1); break;
        case 2: kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 2); break;
        case 3: kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 3); break;
        case 4: kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 4); break;
        case 5: if (pass > 4) kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 5); break;
        case 6: if (pass > 4) kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 6); break;
        case 7: if (pass > 4) kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 7); break;
        default: if (pass > 4) kquant_pass(KQ, nb, yt, ldy, g, at, a_stride, acc, 8); break;
        }
    }
}

/* The registry entry of a type (q8_K rows carry their own scales and sums: corr and da are not used). */
#define KQUANT_X16(NAME, KQ)                                      \
    KERN_GEMM_X16_DECL(NAME) {                                    \
        (void)corr;                                               \
        (void)da;                                                 \
        (void)c_stride;                                           \
        kquant_tokens(KQ, nb, y, ldy, grp, a, a_stride, nt, acc); \
    }

KQUANT_X16(gemm_x16_q4_K_vnni, KQ_Q4_K)

KQUANT_X16(gemm_x16_q6_K_vnni, KQ_Q6_K)

KQUANT_X16(gemm_x16_q5_K_vnni, KQ_Q5_K)

KQUANT_X16(gemm_x16_iq4_xs_vnni, KQ_IQ4_XS)

KQUANT_X16(gemm_x16_q3_K_vnni, KQ_Q3_K)

KQUANT_X16(gemm_x16_q2_K_vnni, KQ_Q2_K)
#else
typedef int kite_empty_unit_gemm_x16_kquant_vnni; /* ISO C wants a declaration */
#endif
