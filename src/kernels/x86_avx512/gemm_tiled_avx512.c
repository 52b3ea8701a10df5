/*
 * gemm_tiled_avx512.c - tiled prefill GEMM on zmm (gemm_tiled.h).
 *
 * Float weights (f32/f16/bf16) x f32 activations: micro-kernel of FMR = 4
 * weight rows x FNR = 6 tokens, 24 zmm accumulators, one per output; per 16
 * elements it loads (and widens: vcvtph2ps / 16-bit shift, exact) 4 weight
 * vectors and 6 activation vectors for 24 FMAs.  Each output is summed in
 * the order of the flat kernel (vec_dot_*_avx512: accumulators s0..s3 over
 * 64-element chunks, trailing 16-element chunks into s0, the masked n % 16
 * tail into s1, reduce of (s0+s1)+(s2+s3)); the four accumulators are
 * computed as four phases one after another (phase_f), each output's
 * partial state kept in a per-block buffer, so results equal the flat path
 * bit for bit.  If the flat kernels' order changes, phase_f must follow
 * (test_gemm.c checks the identity).
 *
 * q8_0 / q4_0 weights x q8_0 activations (avx512vnni): micro-kernel of
 * QMR = 4 rows x QNR = 4 tokens; two 32-element blocks per zmm as in the
 * flat VNNI kernel, and the same float order (block-pair FMA of the int32
 * lanes times d_w*d_a, an odd last block as a pair with a zero upper half
 * and scale 0, _mm512_reduce_add_ps), so results equal vec_dot_*_vnni bit
 * for bit.  Signed x signed products need one unsigned
 * operand for vpdpbusd; the correction is folded into the accumulator input:
 *   q8_0: activations a+128 (xor 0x80) as unsigned; per weight vector
 *         c = vpdpbusd(0, 128, w) (128*sum of each lane's 4 weights), and
 *         sum(w*a) = vpdpbusd(-c, a+128, w).
 *   q4_0: nibbles u unsigned; per activation vector c = vpdpbusd(0, 8, a),
 *         sum((u-8)*a) = vpdpbusd(-c, u, a).
 * All int32 sums are exact (|sum| < 2^17).
 *
 * Cache tiling: weight rows in blocks of GEMM_TILED_L2_BYTES (float: at
 * most FRB rows); inside a block, token groups outside row micro-tiles
 * (float: token group > phase > row micro-tile, so the quarter of the
 * group's activation rows a phase touches stays in L1).
 *
 * THREAD SAFETY: reentrant; state lives on the caller's stack (48 KiB).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/gemm_tiled.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { T_F32 = 0, T_F16 = 1, T_BF16 = 2 };
#define FMR 4
#define FNR 6
#define QMR 4
#define QNR 4

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

/* acc[r][t] += w[r][i..i+16) * a[t][i..i+16) for i = i0, i0+step, ... < i1 */
static ALWAYS_INLINE void run_f(int ty, int mr, int nr, __m512 acc[FMR][FNR], const unsigned char *w, size_t ws,
                                const unsigned char *a, size_t as, int64_t i0, int64_t i1, int64_t step) {
    const size_t esz = ty == T_F32 ? 4 : 2;
    for (int64_t i = i0; i < i1; i += step) {
        __m512 wv[FMR];
#pragma GCC unroll 8
        for (int r = 0; r < FMR; r++)
            if (r < mr) wv[r] = ldw(ty, w + r * ws + (size_t)i * esz);
#pragma GCC unroll 8
        for (int t = 0; t < FNR; t++) {
            if (t >= nr) break;
            const __m512 av = _mm512_loadu_ps(a + t * as + 4 * (size_t)i);
#pragma GCC unroll 8
            for (int r = 0; r < FMR; r++)
                if (r < mr) acc[r][t] = _mm512_fmadd_ps(wv[r], av, acc[r][t]);
        }
    }
}

/* Phase p (0..3) of mr x nr outputs (mr <= FMR, nr <= FNR; constants after
 * inlining): the flat kernel's accumulator s_p (elements 64c + 16p + j;
 * s0 also takes the trailing 16-element chunks, s1 the masked tail).  The
 * phases of an output run one after another and meet in its state st:
 * st[0] = s0, then s0+s1; st[1] = s2; phase 3 stores the reduce of
 * (s0+s1)+(s2+s3), so every lane sees the flat kernel's sequence of FMAs.
 * st[r][t] is the state of row r, token t of the tile. */
static ALWAYS_INLINE void phase_f(int ty, int mr, int nr, int p, int64_t n, const unsigned char *w, size_t ws,
                                  const unsigned char *a, size_t as, __m512 (*st)[FNR][2], float *y, int64_t ldy) {
    const size_t esz = ty == T_F32 ? 4 : 2;
    const int64_t n64 = n - n % 64, n16 = n - n % 16;
    __m512 acc[FMR][FNR];
#pragma GCC unroll 8
    for (int r = 0; r < FMR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < FNR; t++) acc[r][t] = _mm512_setzero_ps();
    run_f(ty, mr, nr, acc, w, ws, a, as, 16 * p, n64, 64);
    if (p == 0) run_f(ty, mr, nr, acc, w, ws, a, as, n64, n16, 16);
    if (p == 1 && n16 < n) {
        const __mmask16 k = (__mmask16)((1u << (n - n16)) - 1);
        for (int t = 0; t < nr; t++) {
            const __m512 av = _mm512_maskz_loadu_ps(k, a + t * as + 4 * (size_t)n16);
            for (int r = 0; r < mr; r++)
                acc[r][t] = _mm512_fmadd_ps(mldw(ty, k, w + r * ws + (size_t)n16 * esz), av, acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < FMR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < FNR; t++) {
            if (r >= mr || t >= nr) continue;
            if (p == 0) st[r][t][0] = acc[r][t];
            else if (p == 1) st[r][t][0] = _mm512_add_ps(st[r][t][0], acc[r][t]);
            else if (p == 2) st[r][t][1] = acc[r][t];
            else y[(int64_t)t * ldy + r] =
                _mm512_reduce_add_ps(_mm512_add_ps(st[r][t][0], _mm512_add_ps(st[r][t][1], acc[r][t])));
        }
}

#define FRB 64 /* most rows per float cache block: bounds the phase state (FRB*FNR*2 zmm = 48 KiB) */

/* Rows per cache block: about GEMM_TILED_L2_BYTES of weights, a multiple of m. */
static int64_t rows_per_block(size_t row_bytes, int m) {
    int64_t rb = (int64_t)(GEMM_TILED_L2_BYTES / (row_bytes ? row_bytes : 1));
    rb -= rb % m;
    return rb < m ? m : rb;
}

/* Loop order: row block (weights in L2) > token group of FNR > phase >
 * row micro-tile.  Within a phase the token group's activations touched
 * (a quarter of each row) stay in L1 while the block's rows stream from L2. */
static ALWAYS_INLINE void gemm_f(int ty, int64_t n, float *y, int64_t ldy, const void *w, size_t ws, int nr,
                                 const void *a, size_t as, int nt) {
    const unsigned char *wb = w, *ab = a;
    int64_t rb = rows_per_block(ws, FMR);
    if (rb > FRB) rb = FRB;
    __m512 st[FRB][FNR][2];
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        const int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < nt; t += FNR) {
            const int tn = nt - t < FNR ? nt - t : FNR;
            const unsigned char *at = ab + (size_t)t * as;
            for (int p = 0; p < 4; p++)
                for (int64_t r = r0; r < r1; r += FMR) {
                    const int rn = (int)(r1 - r < FMR ? r1 - r : FMR);
                    const unsigned char *wr = wb + (size_t)r * ws;
                    float *yo = y + (int64_t)t * ldy + r;
                    __m512(*s)[FNR][2] = st + (r - r0);
                    if (rn == FMR) switch (tn) { /* constant tile shapes: accumulators stay in registers */
                        case 6: phase_f(ty, FMR, 6, p, n, wr, ws, at, as, s, yo, ldy); break;
                        case 5: phase_f(ty, FMR, 5, p, n, wr, ws, at, as, s, yo, ldy); break;
                        case 4: phase_f(ty, FMR, 4, p, n, wr, ws, at, as, s, yo, ldy); break;
                        case 3: phase_f(ty, FMR, 3, p, n, wr, ws, at, as, s, yo, ldy); break;
                        case 2: phase_f(ty, FMR, 2, p, n, wr, ws, at, as, s, yo, ldy); break;
                        default: phase_f(ty, FMR, 1, p, n, wr, ws, at, as, s, yo, ldy); break;
                        }
                    else /* fewer than FMR rows left: one row at a time */
                        for (int rr = 0; rr < rn; rr++) switch (tn) {
                            case 6: phase_f(ty, 1, 6, p, n, wr + rr * ws, ws, at, as, s + rr, yo + rr, ldy); break;
                            case 5: phase_f(ty, 1, 5, p, n, wr + rr * ws, ws, at, as, s + rr, yo + rr, ldy); break;
                            case 4: phase_f(ty, 1, 4, p, n, wr + rr * ws, ws, at, as, s + rr, yo + rr, ldy); break;
                            case 3: phase_f(ty, 1, 3, p, n, wr + rr * ws, ws, at, as, s + rr, yo + rr, ldy); break;
                            case 2: phase_f(ty, 1, 2, p, n, wr + rr * ws, ws, at, as, s + rr, yo + rr, ldy); break;
                            default: phase_f(ty, 1, 1, p, n, wr + rr * ws, ws, at, as, s + rr, yo + rr, ldy); break;
                            }
                }
        }
    }
}

KERN_GEMM_TILED_DECL(gemm_tiled_f32_avx512) { gemm_f(T_F32, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_f16_avx512) { gemm_f(T_F16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_avx512) { gemm_f(T_BF16, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }

/* ---- q8_0 / q4_0 weights x q8_0 activations (VNNI) ---- */

enum { T_Q8_0 = 0, T_Q4_0 = 1 };

static ALWAYS_INLINE uint16_t ld_u16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}
static ALWAYS_INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static ALWAYS_INLINE __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
/* lanes 0..7 = half h0, 8..15 = half h1, widened exactly (vcvtph2ps) */
static ALWAYS_INLINE __m512 scales2(uint16_t h0, uint16_t h1) {
    return _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16((short)h0), 0xFF00, (short)h1));
}
/* weight quants of blocks x0 (low half) and x1 (high half; NULL: zeros).
 * q4_0: each block's 16 bytes broadcast to both 128-bit lanes of its half,
 * shifted right by 0 (first lane) or 4 (second) and masked: the nibbles in
 * element order. */
static ALWAYS_INLINE __m512i wq(int ty, const unsigned char *x0, const unsigned char *x1) {
    if (ty == T_Q8_0) {
        const __m256i lo = ld256(x0 + offsetof(block_q8_0, qs));
        return x1 ? join(lo, ld256(x1 + offsetof(block_q8_0, qs))) : _mm512_zextsi256_si512(lo);
    }
    const __m512i shift = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll,
                                           0x0004000400040004ll, 0, 0);
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)(x0 + offsetof(block_q4_0, qs)));
    __m512i t = _mm512_broadcast_i32x4(q0);
    t = x1 ? _mm512_mask_broadcast_i32x4(t, 0xFF00,
                                         _mm_loadu_si128((const __m128i *)(const void *)(x1 + offsetof(block_q4_0, qs))))
           : _mm512_maskz_broadcast_i32x4(0x00FF, q0);
    return _mm512_and_si512(_mm512_srlv_epi16(t, shift), _mm512_set1_epi8(0x0F));
}

/* One block pair at block b (two = 0: block b alone, upper half zero with
 * scale 0, as the flat kernel does) for mr rows x nr tokens. */
static ALWAYS_INLINE void step_q(int ty, int mr, int nr, __m512 acc[QMR][QNR], int64_t b, int two,
                                 const unsigned char *w, size_t ws, const unsigned char *a, size_t as) {
    const size_t wbs = ty == T_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0), qbs = sizeof(block_q8_0);
    const __m512i c80 = _mm512_set1_epi8((char)0x80), c8 = _mm512_set1_epi8(8), z = _mm512_setzero_si512();
    __m512i wv[QMR], wc[QMR];
    __m512 dw[QMR];
#pragma GCC unroll 8
    for (int r = 0; r < QMR; r++) {
        if (r >= mr) break;
        const unsigned char *x0 = w + r * ws + (size_t)b * wbs, *x1 = two ? x0 + wbs : NULL;
        wv[r] = wq(ty, x0, x1);
        if (ty == T_Q8_0) wc[r] = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, c80, wv[r]));
        dw[r] = scales2(ld_u16(x0), two ? ld_u16(x1) : 0);
    }
#pragma GCC unroll 8
    for (int t = 0; t < QNR; t++) {
        if (t >= nr) break;
        const unsigned char *y0 = a + t * as + (size_t)b * qbs, *y1 = y0 + qbs;
        const __m256i lo = ld256(y0 + offsetof(block_q8_0, qs));
        const __m512i q = two ? join(lo, ld256(y1 + offsetof(block_q8_0, qs))) : _mm512_zextsi256_si512(lo);
        const __m512 da = scales2(ld_u16(y0), two ? ld_u16(y1) : 0);
        __m512i qu = q, ac = z;
        if (ty == T_Q8_0) qu = _mm512_xor_si512(q, c80);
        else ac = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, c8, q));
#pragma GCC unroll 8
        for (int r = 0; r < QMR; r++) {
            if (r >= mr) break;
            const __m512i s = ty == T_Q8_0 ? _mm512_dpbusd_epi32(wc[r], qu, wv[r]) : _mm512_dpbusd_epi32(ac, wv[r], q);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], da), acc[r][t]);
        }
    }
}

/* mr x nr outputs (mr <= QMR, nr <= QNR); nb blocks per row. */
static ALWAYS_INLINE void micro_q(int ty, int mr, int nr, int64_t nb, const unsigned char *w, size_t ws,
                                  const unsigned char *a, size_t as, float *y, int64_t ldy) {
    __m512 acc[QMR][QNR];
#pragma GCC unroll 8
    for (int r = 0; r < QMR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < QNR; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) step_q(ty, mr, nr, acc, b, 1, w, ws, a, as);
    if (b < nb) step_q(ty, mr, nr, acc, b, 0, w, ws, a, as);
#pragma GCC unroll 8
    for (int t = 0; t < QNR; t++)
#pragma GCC unroll 8
        for (int r = 0; r < QMR; r++)
            if (t < nr && r < mr) y[(int64_t)t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

static ALWAYS_INLINE void gemm_q(int ty, int64_t n, float *y, int64_t ldy, const void *w, size_t ws, int nr,
                                 const void *a, size_t as, int nt) {
    const unsigned char *wb = w, *ab = a;
    const int64_t nb = n / QK8_0, rb = rows_per_block(ws, QMR);
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        const int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < nt; t += QNR) {
            const int tn = nt - t < QNR ? nt - t : QNR;
            const unsigned char *at = ab + (size_t)t * as;
            for (int64_t r = r0; r < r1; r += QMR) {
                const int rn = (int)(r1 - r < QMR ? r1 - r : QMR);
                const unsigned char *wr = wb + (size_t)r * ws;
                float *yo = y + (int64_t)t * ldy + r;
                if (rn == QMR) switch (tn) {
                    case 4: micro_q(ty, QMR, 4, nb, wr, ws, at, as, yo, ldy); break;
                    case 3: micro_q(ty, QMR, 3, nb, wr, ws, at, as, yo, ldy); break;
                    case 2: micro_q(ty, QMR, 2, nb, wr, ws, at, as, yo, ldy); break;
                    default: micro_q(ty, QMR, 1, nb, wr, ws, at, as, yo, ldy); break;
                    }
                else
                    for (int tt = 0; tt < tn; tt++)
                        for (int rr = 0; rr < rn; rr++)
                            micro_q(ty, 1, 1, nb, wr + rr * ws, ws, at + tt * as, as, yo + tt * ldy + rr, ldy);
            }
        }
    }
}

KERN_GEMM_TILED_DECL(gemm_tiled_q8_0_vnni) { gemm_q(T_Q8_0, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
KERN_GEMM_TILED_DECL(gemm_tiled_q4_0_vnni) { gemm_q(T_Q4_0, n, y, ldy, w, w_stride, nr, a, a_stride, nt); }
#else
typedef int kite_empty_unit_gemm_tiled_avx512; /* ISO C wants a declaration */
#endif
