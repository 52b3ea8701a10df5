/*
 * bf16_avx512bf16.c - bf16 weights x bf16 activations with VDPBF16PS (level
 * avx512bf16): the activation converter, vec_dot, the flat GEMM and the
 * tiled prefill GEMM, all on one micro-kernel.
 *
 * DESIGN
 *   Per output: one zmm accumulator along K; each VDPBF16PS adds 32
 *   products (lane j: elements 2j+1 then 2j of the chunk, two fused steps);
 *   the last n % 32 elements come through zero-masked loads (bf16 zeros in
 *   both operands, as the reference pads); the 16 lanes are reduced by the
 *   fixed tree of ref_bf16_reduce16.  That order depends only on n, so every
 *   entry point (vec_dot, flat GEMM, tiled GEMM, any tile, any thread split)
 *   gives vec_dot_bf16_bf16_ref's bits (ref/vec_dot_bf16.c explains the
 *   instruction model).
 *   Micro-kernel: mr weight rows x nt tokens of accumulators; per 32-element
 *   chunk it loads mr weight and nt activation vectors for mr*nt VDPBF16PS.
 *   Prefill uses BMR x BNR = 4 x 6 (24 accumulators; the other 8 zmm hold
 *   the operands; the full tile is a noinline function so its loop keeps its
 *   strides in registers, and a 4-row tile reduces four tokens at once with
 *   reduce4x4, the same tree lane-parallel), decode (one token) 8 x 1 (eight
 *   independent chains hide the instruction's latency while the weights
 *   stream from memory).
 *   Cache tiling: rows in blocks of about GEMM_TILED_FLOAT_BYTES of
 *   weights, token groups of BNR outside the row micro-tiles, rows longer
 *   than BKB1 in K blocks of BKB, so a block stays in L2 and a group's
 *   activation rows for one K block (6 x 2 KiB, or 6 x 4 KiB for a row of
 *   2048) in L1.
 *
 *   The activation converter is fp32_to_bf16 in integer SIMD (round to
 *   nearest even by adding 0x7fff plus the kept lowest bit, NaN made quiet),
 *   not VCVTNEPS2BF16, which flushes subnormal inputs: the bytes equal the
 *   reference's.
 *
 * THREAD SAFETY: reentrant; the parked accumulators live on the caller's
 * stack (48 KiB).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#include "kernels/gemm_tiled.h"
#include "kernels/x86_avx512/avx512bf16.h"
#include "kernels/x86_avx512/reduce16.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

#define BMR 4   /* weight rows per prefill micro-tile */
#define BNR 6   /* tokens per prefill micro-tile */
#define DMR 8   /* weight rows per decode (one token) micro-tile */
#define MAXR 8  /* largest mr of any micro-tile */
#define BRB 128 /* most rows per cache block (bounds the parked accumulators: 48 KiB) */
#define BKB 1024 /* elements per K block of rows longer than BKB1 (a multiple of 32) */
#define BKB1 2048 /* rows of up to BKB1 elements are one K block */

void act_bf16_from_f32_avx512bf16(const float *x, void *dst, int64_t n) {
    unsigned char *d = dst;
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff), q = _mm512_set1_epi32(64);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, x + i));
        const __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(hi, one))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
        r = _mm512_mask_or_epi32(r, nan, hi, q);
        _mm512_mask_cvtepi32_storeu_epi16(d + 2 * (size_t)i, k, r);
    }
}

static ALWAYS_INLINE __m512bh as_bh(__m512i v) { return (__m512bh)v; }

/* Elements [i0, i1) (multiples of 32) of mr rows x nt tokens (constants
 * after inlining).  i0 == 0 starts from zero accumulators, otherwise from st;
 * i1 >= n adds the masked tail and writes y[t*ldy + r], otherwise parks the
 * accumulators in st (st[r*BNR + t]), unchanged, for the next K block. */
static ALWAYS_INLINE void micro(int mr, int nt, int64_t i0, int64_t i1, int64_t n, const unsigned char *w, size_t ws,
                                const unsigned char *a, size_t as, __m512 *st, float *y, int64_t ldy) {
    __m512 acc[MAXR][BNR];
#pragma GCC unroll 8
    for (int r = 0; r < MAXR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < BNR; t++)
            if (r < mr && t < nt) acc[r][t] = i0 == 0 ? _mm512_setzero_ps() : st[r * BNR + t];
    const int64_t n32 = n - n % 32, e1 = i1 < n32 ? i1 : n32;
    for (int64_t i = i0; i < e1; i += 32) {
        __m512i wv[MAXR];
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
            if (r < mr) wv[r] = _mm512_loadu_si512(w + r * ws + 2 * (size_t)i);
#pragma GCC unroll 8
        for (int t = 0; t < BNR; t++) {
            if (t >= nt) break;
            const __m512i av = _mm512_loadu_si512(a + t * as + 2 * (size_t)i);
#pragma GCC unroll 8
            for (int r = 0; r < MAXR; r++)
                if (r < mr) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], as_bh(wv[r]), as_bh(av));
        }
    }
    if (i1 < n) {
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < BNR; t++)
                if (r < mr && t < nt) st[r * BNR + t] = acc[r][t];
        return;
    }
    if (n32 < n) {
        const __mmask32 k = (__mmask32)(((uint64_t)1 << (n - n32)) - 1);
        __m512i wv[MAXR];
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
            if (r < mr) wv[r] = _mm512_maskz_loadu_epi16(k, w + r * ws + 2 * (size_t)n32);
#pragma GCC unroll 8
        for (int t = 0; t < BNR; t++) {
            if (t >= nt) break;
            const __m512i av = _mm512_maskz_loadu_epi16(k, a + t * as + 2 * (size_t)n32);
#pragma GCC unroll 8
            for (int r = 0; r < MAXR; r++)
                if (r < mr) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], as_bh(wv[r]), as_bh(av));
        }
    }
    if (mr == 4 && nt >= 2) { /* four tokens at a time (reduce16.h) */
        REDUCE16_TILE4(acc, nt, BNR, y, ldy);
        return;
    }
#pragma GCC unroll 8
    for (int t = 0; t < BNR; t++)
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
            if (t < nt && r < mr) y[(int64_t)t * ldy + r] = reduce16(acc[r][t]);
}

/* The full BMR x BNR tile as its own function: inlined into gemm_bb's loops,
 * gcc kept the row and token strides on the stack and reloaded seven of them
 * in every step of the inner loop. */
static __attribute__((noinline)) void full_tile(int64_t i0, int64_t i1, int64_t n, const unsigned char *w, size_t ws,
                                                const unsigned char *a, size_t as, __m512 *st, float *y,
                                                int64_t ldy) {
    micro(BMR, BNR, i0, i1, n, w, ws, a, as, st, y, ldy);
}

void vec_dot_bf16_bf16_avx512bf16(int64_t n, float *out, const void *w, const void *a) {
    micro(1, 1, 0, n, n, w, 0, a, 0, NULL, out, 0);
}

/* One token: DMR rows side by side, each read as its own stream followed by
 * the hardware prefetchers; a step loads 64 bytes per row, and the
 * out-of-order window keeps enough DRAM reads in flight without software
 * prefetch (prefetching the next row group, as before Nov 30, made one
 * thread 5-17% slower; docs/notes/kernels-history.md).  As in vec_dot_float_avx512.c's
 * gemv, the DMR rows of a step lie q rows apart (the first q*DMR rows cut
 * into DMR stretches), so each stream runs on through q consecutive rows;
 * 1.12-1.15x over adjacent rows (docs/notes/kernels-history.md, "Decode: long streams").
 * The rest (< DMR rows) run one at a time. */
static void gemv(int64_t n, float *y, const unsigned char *w, size_t ws, int nr, const unsigned char *a) {
    const int q = nr / DMR;
    for (int g = 0; g < q; g++) {
        float t[DMR];
        micro(DMR, 1, 0, n, n, w + (size_t)g * ws, (size_t)q * ws, a, 0, NULL, t, 0);
        for (int j = 0; j < DMR; j++) y[g + (int64_t)j * q] = t[j];
    }
    for (int r = q * DMR; r < nr; r++) micro(1, 1, 0, n, n, w + (size_t)r * ws, ws, a, 0, NULL, y + r, 0);
}

/* Rows per cache block: about GEMM_TILED_FLOAT_BYTES of weights, a multiple
 * of BMR, at most BRB. */
static int64_t rows_per_block(size_t row_bytes) {
    int64_t rb = (int64_t)(GEMM_TILED_FLOAT_BYTES / (row_bytes ? row_bytes : 1));
    if (rb > BRB) rb = BRB;
    rb -= rb % BMR;
    return rb < BMR ? BMR : rb;
}

/* One micro-tile of rn <= BMR rows x tn <= BNR tokens over [i0, i1):
 * constant shapes, so the accumulators stay in registers. */
static ALWAYS_INLINE void tile(int rn, int tn, int64_t i0, int64_t i1, int64_t n, const unsigned char *w, size_t ws,
                               const unsigned char *a, size_t as, __m512 *st, float *y, int64_t ldy) {
#define TILE_CASES(MR, W, S, Y)                                          \
    switch (tn) {                                                        \
    case 6: micro(MR, 6, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 5: micro(MR, 5, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 4: micro(MR, 4, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 3: micro(MR, 3, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 2: micro(MR, 2, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    default: micro(MR, 1, i0, i1, n, W, ws, a, as, S, Y, ldy); break; \
    }
    if (rn == BMR && tn == BNR) {
        full_tile(i0, i1, n, w, ws, a, as, st, y, ldy);
    } else if (rn == BMR) {
        TILE_CASES(BMR, w, st, y)
    } else { /* fewer than BMR rows left: one row at a time */
        for (int rr = 0; rr < rn; rr++) TILE_CASES(1, w + rr * ws, st + rr * BNR, y + rr)
    }
#undef TILE_CASES
}

/* Loop order: row block (weights in L2) > token group of BNR > K block of
 * BKB (the group's activations for it in L1) > row micro-tile. */
static void gemm_bb(int64_t n, float *y, int64_t ldy, const void *w, size_t ws, int nr, const void *a, size_t as,
                    int nt) {
    const unsigned char *wb = w, *ab = a;
    if (nt == 1) {
        gemv(n, y, wb, ws, nr, ab);
        return;
    }
    const int64_t rb = rows_per_block(ws), kb = n <= BKB1 ? n : BKB;
    __m512 st[BRB * BNR];
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        const int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < nt; t += BNR) {
            const int tn = nt - t < BNR ? nt - t : BNR;
            const unsigned char *at = ab + (size_t)t * as;
            for (int64_t i0 = 0; i0 < n; i0 += kb)
                for (int64_t r = r0; r < r1; r += BMR) {
                    const int rn = (int)(r1 - r < BMR ? r1 - r : BMR);
                    tile(rn, tn, i0, i0 + kb, n, wb + (size_t)r * ws, ws, at, as, st + (r - r0) * BNR,
                         y + (int64_t)t * ldy + r, ldy);
                }
        }
    }
}

void gemm_bf16_bf16_avx512bf16(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                               const void *a, size_t a_stride, int nt) {
    gemm_bb(n, y, ldy, w, w_stride, nr, a, a_stride, nt);
}

KERN_GEMM_TILED_DECL(gemm_tiled_bf16_bf16_avx512bf16) { gemm_bb(n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
#else
typedef int kite_empty_unit_bf16_avx512bf16; /* ISO C wants a declaration */
#endif
