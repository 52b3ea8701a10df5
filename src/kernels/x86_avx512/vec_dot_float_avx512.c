/*
 * vec_dot_float_avx512.c - f32/f16/bf16 weight rows x f32 activations with
 * 512-bit FMA (levels avx512 and up): vec_dot, the flat GEMM and the tiled
 * prefill GEMM (gemm_tiled.h), all on one micro-kernel.
 *
 * DESIGN
 *   Per output: one zmm accumulator along K, one FMA per 16 elements in
 *   order, the last n % 16 elements through zero-masked loads (0 * 0 adds
 *   nothing), then the 16 lanes reduced by a fixed tree: l[i] + l[i+8], then
 *   + [i+4], + [i+2], + [i+1] (reduce16).  Widening is exact (vcvtph2ps;
 *   bf16 by a 16-bit shift), so only the FMAs and the tree round.  The order
 *   depends only on n: vec_dot, the flat GEMM and the tiled GEMM give the
 *   same bits for every output, whatever the tile, the token grouping or the
 *   thread split (kernels.h's contract; test_kernels.c, test_gemm.c).
 *   Latency is hidden by several outputs in flight, not by several
 *   accumulators per output: the micro-kernel keeps mr weight rows x nt
 *   tokens of accumulators and per 16 elements loads mr weight vectors
 *   (widened once) and nt activation vectors for mr*nt FMAs.
 *     prefill  FMR x FNR = 4 x 6: 24 accumulators, 10 loads per 24 FMAs;
 *     decode   8 rows x 1 token: eight chains while the weights stream,
 *              the 8 rows a long stretch apart (see gemv; f16/bf16 rows
 *              also prefetch DPF bytes ahead, see rows8).
 *   vec_dot alone is a single chain (latency-bound); kern_matmul never calls
 *   it, it uses the GEMMs.  A 4-row tile reduces four tokens at once
 *   (reduce4x4: the same tree, lane-parallel, 128-bit stores), and the full
 *   4 x 6 tile is a separate (noinline) function per type so its loop keeps
 *   its strides in registers.
 *   Cache tiling (tiled and flat GEMM): weight rows in blocks of about
 *   GEMM_TILED_FLOAT_BYTES (at most FRB rows), token groups of FNR, K in
 *   blocks of FKB elements (f16/bf16 rows of up to FKB1 elements: one
 *   block), row micro-tiles innermost: a group's activations for one K
 *   block (6 x 4 KiB; 6 x 8 KiB for a 2048-element f16 row) stay in L1/L2
 *   while the row block streams from L2.  Between K blocks an accumulator
 *   is parked in a state buffer and reloaded unchanged, so K blocking does
 *   not change the order.
 *
 * THREAD SAFETY: reentrant; state lives on the caller's stack (48 KiB).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#include "kernels/gemm_tiled.h"
#include "kernels/ref/ref.h"
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/reduce16.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { T_F32 = 0, T_F16 = 1, T_BF16 = 2 };
#define FMR 4    /* weight rows per prefill micro-tile */
#define FNR 6    /* tokens per prefill micro-tile */
#define DMR 8    /* weight rows per decode (one token) micro-tile */
#define MAXR FMR /* largest mr of micro (decode rows go through rows8) */
#define FRB 128  /* most rows per cache block (bounds the state buffer: 48 KiB) */
#define FKB 1024 /* elements per K block (a multiple of 16; 512 was 4-7% slower for f16) ... */
#define FKB1 2048 /* f16/bf16 rows of up to FKB1 elements are one K block (+1-4% at 2048; f32: -10%) */
#define DPF 1024  /* decode: bytes ahead that f16/bf16 rows prefetch (768-1024 best on one thread) */

static ALWAYS_INLINE __m512 ldw(int ty, const unsigned char *p) {
    if (ty == T_F32) return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (ty == T_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static ALWAYS_INLINE __m512 mldw(int ty, __mmask16 k, const unsigned char *p) {
    if (ty == T_F32) return _mm512_maskz_loadu_ps(k, p);
    const __m256i h = _mm256_maskz_loadu_epi16(k, p);
    if (ty == T_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Elements [i0, i1) of mr rows x nt tokens (constants after inlining).
 * i0 == 0 starts from zero accumulators, otherwise from st; i1 >= n adds the
 * masked tail and writes y[t*ldy + r], otherwise parks the accumulators in
 * st (st[r*FNR + t]; unused when the whole row is one call). */
static ALWAYS_INLINE void micro(int ty, int mr, int nt, int64_t i0, int64_t i1, int64_t n, const unsigned char *w,
                                size_t ws, const unsigned char *a, size_t as, __m512 *st, float *y, int64_t ldy) {
    const size_t esz = ty == T_F32 ? 4 : 2;
    const int64_t n16 = n - n % 16, e1 = i1 < n16 ? i1 : n16;
    __m512 acc[MAXR][FNR];
#pragma GCC unroll 8
    for (int r = 0; r < MAXR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < FNR; t++)
            if (r < mr && t < nt) acc[r][t] = i0 == 0 ? _mm512_setzero_ps() : st[r * FNR + t];
    for (int64_t i = i0; i < e1; i += 16) {
        __m512 wv[MAXR];
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
            if (r < mr) wv[r] = ldw(ty, w + r * ws + (size_t)i * esz);
#pragma GCC unroll 8
        for (int t = 0; t < FNR; t++) {
            if (t >= nt) break;
            const __m512 av = _mm512_loadu_ps(a + t * as + 4 * (size_t)i);
#pragma GCC unroll 8
            for (int r = 0; r < MAXR; r++)
                if (r < mr) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    if (i1 < n) {
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < FNR; t++)
                if (r < mr && t < nt) st[r * FNR + t] = acc[r][t];
        return;
    }
    if (n16 < n) {
        const __mmask16 k = (__mmask16)((1u << (n - n16)) - 1);
        __m512 wv[MAXR];
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
            if (r < mr) wv[r] = mldw(ty, k, w + r * ws + (size_t)n16 * esz);
#pragma GCC unroll 8
        for (int t = 0; t < FNR; t++) {
            if (t >= nt) break;
            const __m512 av = _mm512_maskz_loadu_ps(k, a + t * as + 4 * (size_t)n16);
#pragma GCC unroll 8
            for (int r = 0; r < MAXR; r++)
                if (r < mr) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
    if (mr == 4 && nt >= 2) { /* four tokens at a time (reduce16.h) */
        REDUCE16_TILE4(acc, nt, FNR, y, ldy);
        return;
    }
#pragma GCC unroll 8
    for (int t = 0; t < FNR; t++)
#pragma GCC unroll 8
        for (int r = 0; r < MAXR; r++)
            if (t < nt && r < mr) y[(int64_t)t * ldy + r] = reduce16(acc[r][t]);
}

/* One token (decode), DMR rows side by side: eight accumulator chains while
 * the weights stream from memory, each row's bytes in address order (the
 * hardware prefetchers follow each row).  Same order as micro: one FMA per
 * 16 elements in order, then the masked tail and reduce16, so the results
 * equal vec_dot's.  A separate (noinline) function per type keeps the row
 * pointers in registers.
 * Reads in flight: the out-of-order window holds a fixed number of
 * instructions, and an f32 step (64 bytes per row) keeps enough DRAM reads
 * in flight without software prefetch; f16/bf16 rows give half the bytes
 * per instruction, so they also prefetch each row's line DPF bytes ahead,
 * once per 32 elements (an address computed as an integer: it may lie past
 * the row or the weights, and a prefetch never faults).  The previous
 * scheme, prefetching the next DMR rows in address order, made one thread
 * 12-24% slower for f32 (docs/notes/kernels-history.md, "Decode streaming and K
 * blocks"). */
static ALWAYS_INLINE void rows8(int ty, int64_t n, float *y, int64_t ys, const unsigned char *w, size_t ws,
                                const unsigned char *a) {
    const size_t esz = ty == T_F32 ? 4 : 2;
    const int64_t n16 = n - n % 16, n32 = n - n % 32;
    __m512 acc[DMR];
#pragma GCC unroll 8
    for (int r = 0; r < DMR; r++) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    if (esz == 2)
        for (; i < n32; i += 32) { /* two steps of 16 elements */
            const unsigned char *p = w + (size_t)i * 2;
#pragma GCC unroll 8
            for (int r = 0; r < DMR; r++) _mm_prefetch((const char *)((uintptr_t)p + r * ws + DPF), _MM_HINT_T0);
            const __m512 a0 = _mm512_loadu_ps(a + 4 * (size_t)i), a1 = _mm512_loadu_ps(a + 4 * (size_t)i + 64);
#pragma GCC unroll 8
            for (int r = 0; r < DMR; r++) acc[r] = _mm512_fmadd_ps(ldw(ty, p + r * ws), a0, acc[r]);
#pragma GCC unroll 8
            for (int r = 0; r < DMR; r++) acc[r] = _mm512_fmadd_ps(ldw(ty, p + r * ws + 32), a1, acc[r]);
        }
    for (; i < n16; i += 16) {
        const __m512 a0 = _mm512_loadu_ps(a + 4 * (size_t)i);
#pragma GCC unroll 8
        for (int r = 0; r < DMR; r++) acc[r] = _mm512_fmadd_ps(ldw(ty, w + r * ws + (size_t)i * esz), a0, acc[r]);
    }
    if (n16 < n) {
        const __mmask16 k = (__mmask16)((1u << (n - n16)) - 1);
        const __m512 a0 = _mm512_maskz_loadu_ps(k, a + 4 * (size_t)n16);
#pragma GCC unroll 8
        for (int r = 0; r < DMR; r++)
            acc[r] = _mm512_fmadd_ps(mldw(ty, k, w + r * ws + (size_t)n16 * esz), a0, acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < DMR; r++) y[r * ys] = reduce16(acc[r]);
}
#define ROWS8(NAME, TY)                                                                                 \
    static __attribute__((noinline)) void NAME(int64_t n, float *y, int64_t ys, const unsigned char *w, \
                                               size_t ws, const unsigned char *a) {                     \
        rows8(TY, n, y, ys, w, ws, a);                                                                  \
    }
ROWS8(rows8_f32, T_F32)
ROWS8(rows8_f16, T_F16)
ROWS8(rows8_bf16, T_BF16)
#undef ROWS8

/* One token: no K blocking (nothing is reused).  The first q*DMR rows are
 * cut into DMR stretches of q rows, and rows8 takes row g of every stretch
 * (rows g, g+q, ..., g+7q), so each of its eight streams runs on through
 * q consecutive rows: the hardware prefetchers keep following the same
 * eight streams instead of finding new ones every DMR rows (adjacent rows
 * side by side end a stream where the next row's begins, one already read).
 * One token, 4 cold TinyLlama layers through kern_matmul on 2 threads, in
 * alternation with the adjacent-rows order (medians of two runs): f16
 * 1.08-1.17x, f32 1.04-1.07x (docs/notes/kernels-history.md, "Decode: long
 * streams").  The rest (< DMR rows) run one at a time. */
static ALWAYS_INLINE void gemv(int ty, int64_t n, float *y, const unsigned char *w, size_t ws, int nr,
                               const unsigned char *a) {
    const int q = nr / DMR;
    for (int g = 0; g < q; g++)
        (ty == T_F32 ? rows8_f32 : ty == T_F16 ? rows8_f16 : rows8_bf16)(n, y + g, q, w + (size_t)g * ws,
                                                                         (size_t)q * ws, a);
    for (int r = q * DMR; r < nr; r++) micro(ty, 1, 1, 0, n, n, w + (size_t)r * ws, ws, a, 0, NULL, y + r, 0);
}

/* Rows per cache block: about GEMM_TILED_FLOAT_BYTES of weights, a multiple
 * of FMR, at most FRB. */
static int64_t rows_per_block(size_t row_bytes) {
    int64_t rb = (int64_t)(GEMM_TILED_FLOAT_BYTES / (row_bytes ? row_bytes : 1));
    if (rb > FRB) rb = FRB;
    rb -= rb % FMR;
    return rb < FMR ? FMR : rb;
}

/* The full FMR x FNR tile as its own function per weight type: inlined
 * into the GEMM loops, gcc spilled an accumulator or the row strides and
 * reloaded them from the stack in the inner loop. */
#define FULL_TILE(NAME, TY)                                                                                \
    static __attribute__((noinline)) void NAME(int64_t i0, int64_t i1, int64_t n, const unsigned char *w, \
                                               size_t ws, const unsigned char *a, size_t as, __m512 *st,    \
                                               float *y, int64_t ldy) {                                     \
        micro(TY, FMR, FNR, i0, i1, n, w, ws, a, as, st, y, ldy);                                          \
    }
FULL_TILE(full_tile_f32, T_F32)
FULL_TILE(full_tile_f16, T_F16)
FULL_TILE(full_tile_bf16, T_BF16)
#undef FULL_TILE

/* One micro-tile of rn <= FMR rows x tn <= FNR tokens over [i0, i1):
 * constant shapes, so the accumulators stay in registers. */
static ALWAYS_INLINE void tile(int ty, int rn, int tn, int64_t i0, int64_t i1, int64_t n, const unsigned char *w,
                               size_t ws, const unsigned char *a, size_t as, __m512 *st, float *y, int64_t ldy) {
#define TILE_CASES(MR, W, S, Y)                                                \
    switch (tn) {                                                              \
    case 6: micro(ty, MR, 6, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 5: micro(ty, MR, 5, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 4: micro(ty, MR, 4, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 3: micro(ty, MR, 3, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    case 2: micro(ty, MR, 2, i0, i1, n, W, ws, a, as, S, Y, ldy); break;  \
    default: micro(ty, MR, 1, i0, i1, n, W, ws, a, as, S, Y, ldy); break; \
    }
    if (rn == FMR && tn == FNR) {
        (ty == T_F32 ? full_tile_f32 : ty == T_F16 ? full_tile_f16 : full_tile_bf16)(i0, i1, n, w, ws, a, as, st,
                                                                                  y, ldy);
    } else if (rn == FMR) {
        TILE_CASES(FMR, w, st, y)
    } else { /* fewer than FMR rows left: one row at a time */
        for (int rr = 0; rr < rn; rr++) TILE_CASES(1, w + rr * ws, st + rr * FNR, y + rr)
    }
#undef TILE_CASES
}

/* Loop order: row block (weights in L2) > token group of FNR > K block of
 * FKB (the group's activations for it in L1) > row micro-tile. */
static ALWAYS_INLINE void gemm_f(int ty, int64_t n, float *y, int64_t ldy, const void *w, size_t ws, int nr,
                                 const void *a, size_t as, int nt) {
    const unsigned char *wb = w, *ab = a;
    if (nt == 1) {
        gemv(ty, n, y, wb, ws, nr, ab);
        return;
    }
    const int64_t rb = rows_per_block(ws), kb = ty != T_F32 && n <= FKB1 ? n : FKB;
    __m512 st[FRB * FNR];
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        const int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < nt; t += FNR) {
            const int tn = nt - t < FNR ? nt - t : FNR;
            const unsigned char *at = ab + (size_t)t * as;
            for (int64_t i0 = 0; i0 < n; i0 += kb) {
                const int64_t i1 = i0 + kb;
                for (int64_t r = r0; r < r1; r += FMR) {
                    const int rn = (int)(r1 - r < FMR ? r1 - r : FMR);
                    tile(ty, rn, tn, i0, i1, n, wb + (size_t)r * ws, ws, at, as, st + (r - r0) * FNR,
                         y + (int64_t)t * ldy + r, ldy);
                }
            }
        }
    }
}

void vec_dot_f32_avx512(int64_t n, float *out, const void *w, const void *a) {
    micro(T_F32, 1, 1, 0, n, n, w, 0, a, 0, NULL, out, 0);
}
void vec_dot_f16_f32_avx512(int64_t n, float *out, const void *w, const void *a) {
    micro(T_F16, 1, 1, 0, n, n, w, 0, a, 0, NULL, out, 0);
}
void vec_dot_bf16_f32_avx512(int64_t n, float *out, const void *w, const void *a) {
    micro(T_BF16, 1, 1, 0, n, n, w, 0, a, 0, NULL, out, 0);
}

/* The flat GEMMs (dispatch.h) and the tiled ones (gemm_tiled.h) are the same code. */
KERN_GEMM_DECL512(gemm_f32_avx512) { gemm_f(T_F32, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_DECL512(gemm_f16_f32_avx512) { gemm_f(T_F16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_DECL512(gemm_bf16_f32_avx512) { gemm_f(T_BF16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_f32_avx512) { gemm_f(T_F32, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_f16_avx512) { gemm_f(T_F16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_avx512) { gemm_f(T_BF16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
#else
typedef int kite_empty_unit_vec_dot_float_avx512; /* ISO C wants a declaration */
#endif
