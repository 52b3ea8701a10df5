/*
 * gemm_x16_vnni.c - the 16-row interleaved q4_0 / q4_1 / q5_0 / q5_1 / q8_0 / iq4_nl kernel with
 * AVX-512 VNNI (layout and arithmetic in gemm_x16.h; equal bit for bit to
 * ref/gemm_x16_ref.c).
 *
 * DESIGN
 *   Per block: the group's 16 scales (one vcvtph2ps) and its quants as 4
 *   (q4_0) or 8 (q8_0) zmm of 16 rows x 4 unsigned bytes; q4_0 nibbles are
 *   split with an AND and a shift+AND, so 4 loads give 8 operands (iq4_nl:
 *   the same nibbles looked up in the codebook + 128 with one vpshufb
 *   each; q5_0: each merged with its fifth bit from the transposed qh by a
 *   shift, an AND and one vpternlogd).  Then
 *   per token: the int32 accumulator starts at corr[t][b] (broadcast), 8
 *   vpdpbusd add 4 products each per row with the token's 4 activation
 *   bytes broadcast, and one convert, one multiply (d_w * d_a) and one FMA
 *   scale it into the token's float accumulator: 11 vector instructions for
 *   512 multiply-adds.  The weights of a block are unpacked once for up to
 *   X16_MAX_TOK tokens.  NT is a compile-time constant per instantiation so
 *   the accumulators stay in registers.  With one or two tokens the 8
 *   vpdpbusd run as two chains (lo/hi) to halve the dependency latency; the
 *   int32 result is the same.
 *   Blocks are read in address order (the pair layout of gemm_x16.h), so a
 *   thread's run of groups is one forward stream.
 *   Prefetch for one or two tokens (decode) depends on the CPU
 *   (kern_decode_prefetch, dispatch.h): on AMD Zen 5 the hardware
 *   prefetchers follow the single stream, and software prefetch only got in
 *   their way (q4_0, one thread, 571 MB of groups: 26.7 GB/s without it,
 *   22.3-23.6 with 1-8 KiB distances); on an Intel Xeon they fall behind,
 *   and every block pair prefetching its bytes X16_DECODE_PF_Q4/Q8 further
 *   on into L1, and X16_DECODE_PF_L2 further on into L2, made whole-model
 *   q4_0 decode 1.4x faster, then 1.12-1.17x more (docs/notes/kernels-history.md,
 *   "Decode prefetch by CPU").
 *   From three tokens on (prefill and batched decode run each group in
 *   passes of up to 16 tokens, re-read from cache) the stream stalls between
 *   groups, so every block pair prefetches its bytes X16_PF_BYTES further
 *   on, which runs on into the next group: without it q8_0 prefill lost
 *   10-20%.
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
#include "tensor/quants.h"

/* Prefetch distance in bytes of the group's forward stream, and the token
 * count above which it is used (see DESIGN). */
#ifndef X16_PF_BYTES
#define X16_PF_BYTES 4096
#endif
#ifndef X16_PF_MIN_TOK
#define X16_PF_MIN_TOK 2
#endif
/* Decode prefetch distances, where kern_decode_prefetch() is on: into L1
 * about 7 q4_0 pairs (576 bytes) or 2 q8_0 pairs (1088 bytes) ahead, and
 * into L2 16 KiB ahead (q4_0 decode 1.12-1.17x, q8_0 1.08-1.10x on top of
 * the L1 prefetch alone; docs/notes/kernels-history.md, "Decode prefetch by CPU"). */
#define X16_DECODE_PF_Q4 4096
#define X16_DECODE_PF_Q8 2048
#define X16_DECODE_PF_L2 16384

static ALWAYS_INLINE __m512i bcast32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* Sum over a block for one token: s = corr + sum_j dpbusd(w[j], a dword j). */
static ALWAYS_INLINE __m512i block_sum(const __m512i w[8], const unsigned char *qa, int32_t corr, const int chains) {
    if (chains == 2) {
        __m512i lo = _mm512_set1_epi32(corr), hi = _mm512_setzero_si512();
        KITE_UNROLL
        for (int j = 0; j < 4; j++) {
            lo = _mm512_dpbusd_epi32(lo, w[j], bcast32(qa + 4 * j));
            hi = _mm512_dpbusd_epi32(hi, w[4 + j], bcast32(qa + 16 + 4 * j));
        }
        return _mm512_add_epi32(lo, hi);
    }
    __m512i s = _mm512_set1_epi32(corr);
    KITE_PRAGMA(GCC unroll 8)
    for (int j = 0; j < 8; j++) s = _mm512_dpbusd_epi32(s, w[j], bcast32(qa + 4 * j));
    return s;
}

/* The quant formats of this file's kernels: q8_0 bytes, q4_0 nibbles,
 * iq4_nl nibbles through the codebook. */
enum { X16_Q8, X16_Q4, X16_NL, X16_Q5, X16_Q41, X16_Q51 };

/* (b & c) | (a & ~c), bitwise: vpternlogd's table for (a, b, c) */
#define TL_B_WHERE_C 0xD8

/* Block b (scales dw, mins mw for q4_1 / q5_1, quants at q) for NT tokens into f. */
static ALWAYS_INLINE void x16_block(const int IS_Q4, __m512 dw, __m512 mw, const unsigned char *q, int64_t b,
                                    __m512 *f, const unsigned char *a, size_t as, const int32_t *corr,
                                    const float *da, int64_t cs, const int NT) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i w[8];
    if (IS_Q4 == X16_NL) { /* the codebook + 128 (xor 0x80 on the int8 values) in every 128-bit lane */
        const __m512i tbl = _mm512_broadcast_i32x4(_mm_xor_si128(
            _mm_loadu_si128((const __m128i *)(const void *)kite_iq4nl_values), _mm_set1_epi8((char)0x80)));
        KITE_UNROLL
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_loadu_si512(q + 64 * j);
            w[j] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(c, m4));
            w[4 + j] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
        }
    } else if (IS_Q4 == X16_Q5 || IS_Q4 == X16_Q51) { /* bit j / 4 + j of each qh byte into bit 4 of chunk j's lo / hi */
        const __m512i h = _mm512_loadu_si512(q), k10 = _mm512_set1_epi8(0x10);
        KITE_UNROLL
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_loadu_si512(q + 64 + 64 * j);
            w[j] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_slli_epi32(h, (unsigned)(4 - j)), k10), c, m4,
                                             TL_B_WHERE_C);
            w[4 + j] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(h, (unsigned)j), k10),
                                                 _mm512_srli_epi16(c, 4), m4, TL_B_WHERE_C);
        }
    } else if (IS_Q4) {
        KITE_UNROLL
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_loadu_si512(q + 64 * j);
            w[j] = _mm512_and_si512(c, m4);
            w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
        }
    } else {
        KITE_PRAGMA(GCC unroll 8)
        for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(q + 64 * j);
    }
    KITE_PRAGMA(GCC unroll 16)
    for (int t = 0; t < NT; t++) {
        const unsigned char *qa = a + (size_t)t * as + (size_t)b * 34 + 2;
        const bool q1 = IS_Q4 == X16_Q41 || IS_Q4 == X16_Q51;
        const int32_t c = corr[(int64_t)t * cs + b];
        const float dat = da[(int64_t)t * cs + b];
        const __m512i s = block_sum(w, qa, q1 ? 0 : c, NT <= 2 ? 2 : 1);
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dat));
        f[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, f[t]);
        if (q1) f[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(dat * (float)c), f[t]); /* the min term, corr = sum_a */
    }
}

/* IS_Q4: q4_0, iq4_nl (4 chunks of nibbles), q5_0 (its fifth bits, then 4
 * chunks of nibbles), or q8_0 (8 chunks of bytes).  Walks the
 * group's block pairs in address order (gemm_x16.h). */
static ALWAYS_INLINE void x16_kernel(const int IS_Q4, int64_t nb, float *y, int64_t ldy, const unsigned char *g,
                                     const unsigned char *a, size_t as, const int32_t *corr, const float *da,
                                     int64_t cs, int acc, const int NT) {
    const bool q1 = IS_Q4 == X16_Q41 || IS_Q4 == X16_Q51;
    const size_t qb = IS_Q4 == X16_Q5 || IS_Q4 == X16_Q51 ? 320 : IS_Q4 ? 256 : 512;
    /* prefetch unit: a block pair, or a q4_1 / q5_1 block pair (their blocks go one after the other) */
    const size_t pair = q1 ? 2 * (64 + qb) : 2 * (X16_SCALE_BYTES + qb);
    const size_t dpf =
        NT <= X16_PF_MIN_TOK && kern_decode_prefetch() ? (IS_Q4 ? X16_DECODE_PF_Q4 : X16_DECODE_PF_Q8) : 0;
    __m512 f[X16_MAX_TOK];
    KITE_PRAGMA(GCC unroll 16)
    for (int t = 0; t < NT; t++) f[t] = acc ? _mm512_loadu_ps(y + (int64_t)t * ldy) : _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *p = q1 ? g + (size_t)b * (64 + qb) : g + kern_x16_scale_offset(qb, nb, b);
        if (dpf && b % 2 == 0) {
            KITE_PRAGMA(GCC unroll 17)
            for (size_t l = 0; l < pair; l += 64) {
                _mm_prefetch((const char *)p + dpf + l, _MM_HINT_T0);
                _mm_prefetch((const char *)p + X16_DECODE_PF_L2 + l, _MM_HINT_T1);
            }
        }
        if (NT > X16_PF_MIN_TOK && b % 2 == 0) {
            KITE_PRAGMA(GCC unroll 17)
            for (size_t l = 0; l < pair; l += 64) _mm_prefetch((const char *)p + X16_PF_BYTES + l, _MM_HINT_T0);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
        const __m512 mw = q1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + X16Q1_M)))
                             : _mm512_setzero_ps();
        x16_block(IS_Q4, dw, mw, q1 ? p + X16Q1_QS : g + kern_x16_quant_offset(qb, nb, b), b, f, a, as, corr, da,
                  cs, NT);
    }
    KITE_PRAGMA(GCC unroll 16)
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (int64_t)t * ldy, f[t]);
}

#define X16_TOKENS(IS_Q4) \
    switch (nt) { \
    case 1: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 1); break; \
    case 2: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 2); break; \
    case 3: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 3); break; \
    case 4: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 4); break; \
    case 5: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 5); break; \
    case 6: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 6); break; \
    case 7: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 7); break; \
    case 8: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 8); break; \
    case 9: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 9); break; \
    case 10: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 10); break; \
    case 11: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 11); break; \
    case 12: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 12); break; \
    case 13: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 13); break; \
    case 14: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 14); break; \
    case 15: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 15); break; \
    default: x16_kernel(IS_Q4, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, acc, 16); break; \
    }

KERN_GEMM_X16_DECL(gemm_x16_q4_0_vnni) { X16_TOKENS(X16_Q4) }

KERN_GEMM_X16_DECL(gemm_x16_q8_0_vnni) { X16_TOKENS(X16_Q8) }

KERN_GEMM_X16_DECL(gemm_x16_iq4_nl_vnni) { X16_TOKENS(X16_NL) }

KERN_GEMM_X16_DECL(gemm_x16_q5_0_vnni) { X16_TOKENS(X16_Q5) }

KERN_GEMM_X16_DECL(gemm_x16_q4_1_vnni) { X16_TOKENS(X16_Q41) }

KERN_GEMM_X16_DECL(gemm_x16_q5_1_vnni) { X16_TOKENS(X16_Q51) }
#else
typedef int kite_empty_unit_gemm_x16_vnni; /* ISO C wants a declaration */
#endif
