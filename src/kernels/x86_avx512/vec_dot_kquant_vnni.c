/*
 * vec_dot_kquant_vnni.c - q4_K, q6_K, q2_K, q3_K, tq1_0 and tq2_0 weight rows x q8_K activations with
 * AVX-512 VNNI, as a register-blocked flat GEMM (4 weight rows, or 1 for
 * the remainder, x 1..4 activation rows per micro-kernel).
 *
 * DESIGN
 *   Per 256-element super-block, vpdpbusd forms the unsigned-weight x
 *   signed-activation products of 4 elements per int32 lane (exact).  Each
 *   lane holds one sub-block (q4_K: 32 elements, 8 lanes; q6_K: 16 elements,
 *   4 lanes), and every lane sum fits in int16 (q4_K <= 4*15*127, q6_K <=
 *   4*63*127 = 32004), so two lane vectors are packed to int16 (vpackssdw,
 *   no saturation) and multiplied by the sub-block scales with vpmaddwd:
 *   sum_j sc_j * sum(q*a) in int32, exact.  The unsigned-offset terms come
 *   from the q8_K bsums: q4_K's mins (sum_j m_j * bsum_j) and q6_K's -32
 *   (32 * sum_g sc_g * bsum_g).
 *   The integer sums of 4 rows are reduced together (one horizontal add
 *   tree for 4 rows), then the reference's float expression is evaluated
 *   lane-wise for the 4 rows in SSE, in the reference's operation order:
 *     q4_K: sum += d*dy*isum - dmin*dy*msum;  q6_K: sum += d*dy*isum.
 *   The integer sums are exact and the float operations identical, so
 *   results are bit-identical to ref/vec_dot_quant.c for any row/token
 *   grouping; vec_dot is the 1x1 micro-kernel.
 *
 *   Lane layout: q4_K's 128 nibble bytes are two zmm; low nibbles of the
 *   first hold sub-blocks 0 and 2 (256-bit halves), high nibbles 1 and 3,
 *   so the activations are loaded as [qs 0..31 | qs 64..95] etc. once per
 *   token.  q6_K's 6-bit values are assembled in element order (low 4 bits
 *   from ql, the 2 high bits from a broadcast of qh shifted per half), so
 *   its activations load contiguously.
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/x86_avx512/kquant_vnni.h"
#include "kernels/x86_avx512/vnni_common.h"
#include "tensor/blocks.h"

#define KB4 ((size_t)sizeof(block_q4_K)) /* 144 bytes */
#define KB6 ((size_t)sizeof(block_q6_K)) /* 210 bytes */
#define KB8 ((size_t)sizeof(block_q8_K)) /* 292 bytes */
/* Software prefetch target, bytes ahead of the current block of a row.
 * With NR > 1 rows walked side by side, the hardware prefetchers lose track
 * of the interleaved streams (measured: q4_K 4-row DRAM streaming at 6-7 GB/s
 * without, 15.7 GB/s with this prefetch, 1 thread): fetch the same offset in
 * the row NR rows below, i.e. the next row group's data, at least once per
 * line.  A single row (vec_dot) prefetches PF_DIST bytes ahead. */
#define PF_DIST 1024
static ALWAYS_INLINE size_t prefetch_ahead(int nr, size_t ws) { return nr > 1 ? (size_t)nr * ws : PF_DIST; }

static ALWAYS_INLINE __m512i ld512(const void *p) { return _mm512_loadu_si512(p); }
static ALWAYS_INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static ALWAYS_INLINE float ld_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Sums of 4 int32 vectors as the 4 lanes of an xmm (exact). */
static ALWAYS_INLINE __m128i reduce4_512(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
    const __m256i y0 = _mm256_add_epi32(_mm512_castsi512_si256(v0), _mm512_extracti64x4_epi64(v0, 1));
    const __m256i y1 = _mm256_add_epi32(_mm512_castsi512_si256(v1), _mm512_extracti64x4_epi64(v1, 1));
    const __m256i y2 = _mm256_add_epi32(_mm512_castsi512_si256(v2), _mm512_extracti64x4_epi64(v2, 1));
    const __m256i y3 = _mm256_add_epi32(_mm512_castsi512_si256(v3), _mm512_extracti64x4_epi64(v3, 1));
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(y0, y1), _mm256_hadd_epi32(y2, y3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
static ALWAYS_INLINE __m128i reduce4_128(__m128i v0, __m128i v1, __m128i v2, __m128i v3) {
    return _mm_hadd_epi32(_mm_hadd_epi32(v0, v1), _mm_hadd_epi32(v2, v3));
}
/* 4 halves (rows' scales; missing rows 0) widened to floats */
static ALWAYS_INLINE __m128 halves4(const uint16_t h[4]) {
    return _mm_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], 0, 0, 0, 0));
}

/* ---- q4_K ---- */

/* scales (sc) and mins (m) of a q4_K block as 8 int16 each (the values of
 * ref_scale_min_k4), unpacked in SSE from a 16-byte load at the scales
 * (the 4 bytes past them are qs, inside the block):
 *   bytes [sc0..3 | sc4..7 | m0..3 | m4..7] =
 *     [q0..3 & 63 | q8..11 & 15 | q4..7 & 63 | q8..11 >> 4]
 *   | [0 | (q0..3 >> 6) << 4 | 0 | (q4..7 >> 6) << 4]. */
static ALWAYS_INLINE void k4_scales(const unsigned char *q, __m128i *sc, __m128i *m) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
    const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i lo = _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    const __m128i top = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
    const __m128i r = _mm_or_si128(_mm_or_si128(lo, hi), top);
    *sc = _mm_cvtepu8_epi16(r);
    *m = _mm_cvtepu8_epi16(_mm_srli_si128(r, 8));
}

/* int16 word w of packs(P_a, P_b) belongs to sub-block 2*(L/2) + half
 * (L = w/8 the 128-bit lane, half = (w%8)/4); +4 for the second pair. */
static ALWAYS_INLINE __m512i k4_perm(int base) {
    short idx[32];
    for (int w = 0; w < 32; w++) idx[w] = (short)(base + 2 * ((w / 8) / 2) + (w % 8) / 4);
    return _mm512_loadu_si512(idx);
}

static ALWAYS_INLINE void q4_K_step(__m128 acc[4], const unsigned char *w, size_t ws, const unsigned char *a,
                                    size_t as, const int NR, const int NT, __m512i i01, __m512i i23) {
    const size_t pf = prefetch_ahead(NR, ws);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i l0[4], h0[4], l1[4], h1[4], sc01[4], sc23[4];
    __m128i mins[4];
    uint16_t d[4] = {0, 0, 0, 0}, dm[4] = {0, 0, 0, 0};
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 128, _MM_HINT_T0);
        const unsigned char *qs = x + offsetof(block_q4_K, qs);
        const __m512i z0 = ld512(qs), z1 = ld512(qs + 64);
        l0[r] = _mm512_and_si512(z0, m4);
        h0[r] = _mm512_and_si512(_mm512_srli_epi16(z0, 4), m4);
        l1[r] = _mm512_and_si512(z1, m4);
        h1[r] = _mm512_and_si512(_mm512_srli_epi16(z1, 4), m4);
        __m128i sc;
        k4_scales(x + offsetof(block_q4_K, scales), &sc, &mins[r]);
        sc01[r] = _mm512_permutexvar_epi16(i01, _mm512_castsi128_si512(sc));
        sc23[r] = _mm512_permutexvar_epi16(i23, _mm512_castsi128_si512(sc));
        d[r] = ld_u16(x + offsetof(block_q4_K, d));
        dm[r] = ld_u16(x + offsetof(block_q4_K, dmin));
    }
    const __m128 dw = halves4(d), dmw = halves4(dm);
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *y = a + (size_t)t * as;
        const unsigned char *q8 = y + offsetof(block_q8_K, qs);
        const __m512i a0 = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(q8)), ld256(q8 + 64), 1);
        const __m512i a1 = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(q8 + 32)), ld256(q8 + 96), 1);
        const __m512i a2 = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(q8 + 128)), ld256(q8 + 192), 1);
        const __m512i a3 = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(q8 + 160)), ld256(q8 + 224), 1);
        const __m256i bs = ld256(y + offsetof(block_q8_K, bsums));
        const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        __m512i is[4];
        __m128i ms[4];
        KITE_UNROLL
        for (int r = 0; r < 4; r++) {
            if (r < NR) {
                const __m512i z = _mm512_setzero_si512();
                const __m512i p0 = _mm512_dpbusd_epi32(z, l0[r], a0), p1 = _mm512_dpbusd_epi32(z, h0[r], a1);
                const __m512i p2 = _mm512_dpbusd_epi32(z, l1[r], a2), p3 = _mm512_dpbusd_epi32(z, h1[r], a3);
                is[r] = _mm512_add_epi32(_mm512_madd_epi16(_mm512_packs_epi32(p0, p1), sc01[r]),
                                         _mm512_madd_epi16(_mm512_packs_epi32(p2, p3), sc23[r]));
                ms[r] = _mm_madd_epi16(mins[r], pairs);
            } else {
                is[r] = _mm512_setzero_si512();
                ms[r] = _mm_setzero_si128();
            }
        }
        const __m128 isum = _mm_cvtepi32_ps(reduce4_512(is[0], is[1], is[2], is[3]));
        const __m128 msum = _mm_cvtepi32_ps(reduce4_128(ms[0], ms[1], ms[2], ms[3]));
        const __m128 dy = _mm_set1_ps(ld_f32(y + offsetof(block_q8_K, d)));
        /* ref: sum += d * (float)isum - dmin * (float)msum, d = half(d) * dy */
        acc[t] = _mm_add_ps(acc[t], _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(dw, dy), isum), _mm_mul_ps(_mm_mul_ps(dmw, dy), msum)));
    }
}

static ALWAYS_INLINE void store4(float *y, int64_t ldy, const int NR, const int NT, const __m128 acc[4]) {
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        float v[4];
        _mm_storeu_ps(v, acc[t]);
        KITE_UNROLL
        for (int r = 0; r < NR; r++) y[(int64_t)t * ldy + r] = v[r];
    }
}

static ALWAYS_INLINE void q4_K_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    const __m512i i01 = k4_perm(0), i23 = k4_perm(4);
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) q4_K_step(acc, w + (size_t)b * KB4, ws, a + (size_t)b * KB8, as, NR, NT, i01, i23);
    store4(y, ldy, NR, NT, acc);
}

/* ---- q6_K ---- */

/* int16 word w of packs(P_a, P_b) (P_a: groups 0..3 of a 64-element half
 * by 128-bit lane) belongs to group 4*half + L; +8 for the second half. */
static ALWAYS_INLINE __m512i k6_perm(int base) {
    short idx[32];
    for (int w = 0; w < 32; w++) idx[w] = (short)(base + 4 * ((w % 8) / 4) + w / 8);
    return _mm512_loadu_si512(idx);
}

/* 64 6-bit values of one half of a 128-element half-block: low 4 bits from
 * lo (already selected: ql & 15 or ql >> 4), high 2 bits from qhs. */
static ALWAYS_INLINE __m512i q6_join(__m512i lo, __m512i qhs) {
    return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi8(0x0F)), _mm512_and_si512(qhs, _mm512_set1_epi8(0x30)));
}

static ALWAYS_INLINE void q6_K_step(__m128 acc[4], const unsigned char *w, size_t ws, const unsigned char *a,
                                    size_t as, const int NR, const int NT, __m512i i01, __m512i i23) {
    const size_t pf = prefetch_ahead(NR, ws);
    /* per 16-bit lane shifts: low 256 bits / high 256 bits */
    const __m512i sl42 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sr02 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512i u[4][4], scA[4], scB[4];
    __m256i sc16[4];
    uint16_t d[4] = {0, 0, 0, 0};
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 192, _MM_HINT_T0);
        const unsigned char *ql = x + offsetof(block_q6_K, ql), *qh = x + offsetof(block_q6_K, qh);
        for (int h = 0; h < 2; h++) {
            const __m512i l = ld512(ql + 64 * h);
            const __m512i q = _mm512_broadcast_i64x4(ld256(qh + 32 * h));
            /* elements 128h + 0..63: (qh & 3) << 4 | ((qh >> 2) & 3) << 4 */
            u[r][2 * h] = q6_join(l, _mm512_sllv_epi16(q, sl42));
            /* elements 128h + 64..127: ((qh >> 4) & 3) << 4 | ((qh >> 6) & 3) << 4 */
            u[r][2 * h + 1] = q6_join(_mm512_srli_epi16(l, 4), _mm512_srlv_epi16(q, sr02));
        }
        const __m128i s8 = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_q6_K, scales)));
        sc16[r] = _mm256_cvtepi8_epi16(s8);
        const __m512i s = _mm512_castsi256_si512(sc16[r]);
        scA[r] = _mm512_permutexvar_epi16(i01, s);      /* groups 0..7 */
        scB[r] = _mm512_permutexvar_epi16(i23, s);      /* groups 8..15 */
        d[r] = ld_u16(x + offsetof(block_q6_K, d));
    }
    const __m128 dw = halves4(d);
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *y = a + (size_t)t * as;
        const unsigned char *q8 = y + offsetof(block_q8_K, qs);
        const __m512i a0 = ld512(q8), a1 = ld512(q8 + 64), a2 = ld512(q8 + 128), a3 = ld512(q8 + 192);
        const __m256i bs = ld256(y + offsetof(block_q8_K, bsums));
        __m512i is[4];
        KITE_UNROLL
        for (int r = 0; r < 4; r++) {
            if (r < NR) {
                const __m512i z = _mm512_setzero_si512();
                const __m512i p0 = _mm512_dpbusd_epi32(z, u[r][0], a0), p1 = _mm512_dpbusd_epi32(z, u[r][1], a1);
                const __m512i p2 = _mm512_dpbusd_epi32(z, u[r][2], a2), p3 = _mm512_dpbusd_epi32(z, u[r][3], a3);
                const __m512i s = _mm512_add_epi32(_mm512_madd_epi16(_mm512_packs_epi32(p0, p1), scA[r]),
                                                   _mm512_madd_epi16(_mm512_packs_epi32(p2, p3), scB[r]));
                /* the -32 offset: 32 * sum_g sc_g * bsum_g */
                const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16[r], bs), 5);
                is[r] = _mm512_sub_epi32(s, _mm512_zextsi256_si512(off));
            } else {
                is[r] = _mm512_setzero_si512();
            }
        }
        const __m128 isum = _mm_cvtepi32_ps(reduce4_512(is[0], is[1], is[2], is[3]));
        const __m128 dy = _mm_set1_ps(ld_f32(y + offsetof(block_q8_K, d)));
        /* ref: sum += half(d) * dy * (float)isum */
        acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_mul_ps(dw, dy), isum));
    }
}

static ALWAYS_INLINE void q6_K_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    const __m512i i01 = k6_perm(0), i23 = k6_perm(8);
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) q6_K_step(acc, w + (size_t)b * KB6, ws, a + (size_t)b * KB8, as, NR, NT, i01, i23);
    store4(y, ldy, NR, NT, acc);
}

/* ---- q2_K and q3_K ---- */

/* Their 2-bit fields: element e = 128h + 32k + r is bits 2k of qs[32h + r]
 * (q3_K: its third bit is bit 4h + k of hmask[r]).  Zmm j (elements
 * 64j..64j+63: h = j/2, k = 2(j%2) and 2(j%2)+1) is the 32 bytes broadcast
 * to both halves, each half shifted by its own count (vpsrlvw: the bits a
 * word shift moves in from the upper byte are masked off), so the values
 * are in element order like q6_K's and the activations load contiguously;
 * 128-bit lane L of zmm j is group 4j + L (16 elements), and k6_perm maps
 * the packed lane sums to their scales.  Lane sums are at most 4*7*127:
 * exact through vpackssdw.  q3_K's unsigned u = low | third << 2 (0..7) is
 * q + 4: the offset -4 * sum_g sc_g * bsum_g comes from the bsums.  Both
 * evaluate the reference's float expression in its order (bit-identical). */
/* The 32 bytes at p broadcast to both 256-bit halves, the low half shifted
 * right by s0 and the high half by s1, masked. */
static ALWAYS_INLINE __m512i k2_fields(const unsigned char *p, int s0, int s1, char mask) {
    const __m512i q = _mm512_broadcast_i64x4(ld256(p));
    const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)s0), _mm256_set1_epi16((short)s1), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(q, sh), _mm512_set1_epi8(mask));
}

/* q3_K's 16 6-bit scales minus 32 as int16 (the values of ref_q3_K_scales)
 * from one 16-byte load ending at d (bytes 94..109: inside the block):
 * scales byte i is byte i + 2.  Scale j: low 4 bits from byte j % 8 (>> 4
 * for j >= 8), high 2 bits from byte 8 + j % 4 at bits 2 * (j / 4). */
static ALWAYS_INLINE __m256i k3_scales(const unsigned char *x) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_q3_K, scales) - 2));
    const __m128i il = _mm_setr_epi8(2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9);
    const __m128i ih = _mm_setr_epi8(10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13);
    const __m256i sl = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m256i sh = _mm256_setr_epi16(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi16(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, il)), sl),
                                        _mm256_set1_epi16(15));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi16(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, ih)), sh),
                                        _mm256_set1_epi16(3));
    return _mm256_sub_epi16(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi16(32));
}

static ALWAYS_INLINE void q23_K_step(__m128 acc[4], const unsigned char *w, size_t ws, const unsigned char *a,
                                     size_t as, const int NR, const int NT, __m512i i01, __m512i i23, const int Q3) {
    const size_t pf = prefetch_ahead(NR, ws);
    const size_t qs_off = Q3 ? offsetof(block_q3_K, qs) : offsetof(block_q2_K, qs);
    __m512i u[4][4], scA[4], scB[4];
    __m256i sc16[4], m16[4];
    uint16_t d[4] = {0, 0, 0, 0}, dm[4] = {0, 0, 0, 0};
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 64, _MM_HINT_T0);
        if (Q3) _mm_prefetch((const char *)x + pf + 108, _MM_HINT_T0);
        KITE_UNROLL
        for (int j = 0; j < 4; j++) {
            const int h = j / 2, k0 = 2 * (j % 2);
            u[r][j] = k2_fields(x + qs_off + 32 * h, 2 * k0, 2 * k0 + 2, 3);
            if (Q3) /* the third bits: hmask bits 4h + k */
                u[r][j] = _mm512_or_si512(u[r][j], _mm512_slli_epi16(k2_fields(x + offsetof(block_q3_K, hmask),
                                                                               4 * h + k0, 4 * h + k0 + 1, 1), 2));
        }
        if (Q3) {
            sc16[r] = k3_scales(x);
            d[r] = ld_u16(x + offsetof(block_q3_K, d));
        } else {
            const __m128i s8 = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_q2_K, scales)));
            sc16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm_set1_epi8(15)));
            m16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
            d[r] = ld_u16(x + offsetof(block_q2_K, d));
            dm[r] = ld_u16(x + offsetof(block_q2_K, dmin));
        }
        const __m512i sw = _mm512_castsi256_si512(sc16[r]);
        scA[r] = _mm512_permutexvar_epi16(i01, sw); /* groups 0..7 */
        scB[r] = _mm512_permutexvar_epi16(i23, sw); /* groups 8..15 */
    }
    const __m128 dw = halves4(d), dmw = halves4(dm);
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *y = a + (size_t)t * as;
        const unsigned char *q8 = y + offsetof(block_q8_K, qs);
        const __m512i a0 = ld512(q8), a1 = ld512(q8 + 64), a2 = ld512(q8 + 128), a3 = ld512(q8 + 192);
        const __m256i bs = ld256(y + offsetof(block_q8_K, bsums));
        __m512i is[4], ms[4];
        KITE_UNROLL
        for (int r = 0; r < 4; r++) {
            if (r < NR) {
                const __m512i z = _mm512_setzero_si512();
                const __m512i p0 = _mm512_dpbusd_epi32(z, u[r][0], a0), p1 = _mm512_dpbusd_epi32(z, u[r][1], a1);
                const __m512i p2 = _mm512_dpbusd_epi32(z, u[r][2], a2), p3 = _mm512_dpbusd_epi32(z, u[r][3], a3);
                const __m512i sm = _mm512_add_epi32(_mm512_madd_epi16(_mm512_packs_epi32(p0, p1), scA[r]),
                                                    _mm512_madd_epi16(_mm512_packs_epi32(p2, p3), scB[r]));
                if (Q3) { /* q = u - 4: -4 * sum_g sc_g * bsum_g */
                    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16[r], bs), 2);
                    is[r] = _mm512_sub_epi32(sm, _mm512_zextsi256_si512(off));
                    ms[r] = _mm512_setzero_si512();
                } else {
                    is[r] = sm;
                    ms[r] = _mm512_zextsi256_si512(_mm256_madd_epi16(m16[r], bs));
                }
            } else {
                is[r] = ms[r] = _mm512_setzero_si512();
            }
        }
        const __m128 isum = _mm_cvtepi32_ps(reduce4_512(is[0], is[1], is[2], is[3]));
        const __m128 dy = _mm_set1_ps(ld_f32(y + offsetof(block_q8_K, d)));
        if (Q3) { /* ref: sum += half(d) * dy * (float)isum */
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_mul_ps(dw, dy), isum));
        } else { /* ref: sum += d * (float)isum - dmin * (float)msum, d = half(d) * dy */
            const __m128 msum = _mm_cvtepi32_ps(reduce4_512(ms[0], ms[1], ms[2], ms[3]));
            acc[t] = _mm_add_ps(acc[t],
                                _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(dw, dy), isum), _mm_mul_ps(_mm_mul_ps(dmw, dy), msum)));
        }
    }
}

static ALWAYS_INLINE void q2_K_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    const __m512i i01 = k6_perm(0), i23 = k6_perm(8);
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t b = 0; b < nb; b++)
        q23_K_step(acc, w + (size_t)b * sizeof(block_q2_K), ws, a + (size_t)b * KB8, as, NR, NT, i01, i23, 0);
    store4(y, ldy, NR, NT, acc);
}
static ALWAYS_INLINE void q3_K_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                      const unsigned char *a, size_t as, const int NR, const int NT) {
    const __m512i i01 = k6_perm(0), i23 = k6_perm(8);
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t b = 0; b < nb; b++)
        q23_K_step(acc, w + (size_t)b * sizeof(block_q3_K), ws, a + (size_t)b * KB8, as, NR, NT, i01, i23, 1);
    store4(y, ldy, NR, NT, acc);
}

/* ---- tq2_0 and tq1_0 (ternary: x = d*(t - 1), t in 0..2) ----
 * Both build the 256 unsigned t in element order in 4 zmm, so that the
 * activations load contiguously; sum((t-1)*a) = sum_j dpbusd(t_j, a_j) -
 * sum(bsums), exact.  tq2_0's t are q2_K's 2-bit fields.  tq1_0's are base-3
 * digits: digit k of byte b is the integer part of 3 * (b * 3^k mod 256) /
 * 256, i.e. (q > 85) + (q > 170) for q = b * 3^k mod 256 (two unsigned byte
 * compares); the byte products come from two vpmullw (even bytes, and odd
 * bytes with the even ones masked off), with one multiplier per word since
 * both bytes of a word take the same power.  The reference's float
 * expression, q3_K's, in its order: bit-identical. */
static ALWAYS_INLINE __m512i tq1_digits(__m512i z, __m512i mul) {
    const __m512i lo = _mm512_and_si512(_mm512_mullo_epi16(z, mul), _mm512_set1_epi16(0x00FF));
    const __m512i hi = _mm512_mullo_epi16(_mm512_and_si512(z, _mm512_set1_epi16((short)0xFF00)), mul);
    const __m512i q = _mm512_or_si512(lo, hi);
    return _mm512_add_epi8(_mm512_maskz_set1_epi8(_mm512_cmpgt_epu8_mask(q, _mm512_set1_epi8(85)), 1),
                           _mm512_maskz_set1_epi8(_mm512_cmpgt_epu8_mask(q, _mm512_set1_epi8((char)170)), 1));
}

/* Word multipliers of the 4 tq1_0 zmm (see tq1_rows): 3^k per 16 bytes. */
static const int16_t tq1_mul[4][32] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27},
    {81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3},
    {9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27, 81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27},
};

/* The 256 digits of a tq1_0 block in element order: zmm 0 = qs[0..31] x 1, x 3;
 * 1 = x 9, x 27; 2 = x 81 | qs[32..47] x 1, x 3; 3 = qs[32..47] x 9, x 27, x 81 |
 * qh[0..3] x 1, 3, 9, 27 (one dword each). */
static ALWAYS_INLINE void tq1_rows(const unsigned char *x, __m512i u[4]) {
    const __m256i A = ld256(x + offsetof(block_tq1_0, qs));
    const __m128i B = _mm_loadu_si128((const __m128i *)(const void *)(x + offsetof(block_tq1_0, qs) + 32));
    uint32_t h;
    memcpy(&h, x + offsetof(block_tq1_0, qh), 4);
    const __m512i zA = _mm512_broadcast_i64x4(A);
    const __m512i zB = _mm512_broadcast_i32x4(B);
    const __m512i z2 = _mm512_inserti64x4(_mm512_castsi256_si512(A), _mm512_castsi512_si256(zB), 1);
    const __m512i z3 = _mm512_inserti32x4(zB, _mm_set1_epi32((int)h), 3);
    u[0] = tq1_digits(zA, ld512(tq1_mul[0]));
    u[1] = tq1_digits(zA, ld512(tq1_mul[1]));
    u[2] = tq1_digits(z2, ld512(tq1_mul[2]));
    u[3] = tq1_digits(z3, ld512(tq1_mul[3]));
}

static ALWAYS_INLINE void tq_step(__m128 acc[4], const unsigned char *w, size_t ws, const unsigned char *a, size_t as,
                                  const int NR, const int NT, const int TQ1) {
    const size_t pf = prefetch_ahead(NR, ws);
    __m512i u[4][4];
    uint16_t d[4] = {0, 0, 0, 0};
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const unsigned char *x = w + (size_t)r * ws;
        _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
        _mm_prefetch((const char *)x + pf + 64, _MM_HINT_T0);
        if (TQ1) {
            tq1_rows(x, u[r]);
            d[r] = ld_u16(x + offsetof(block_tq1_0, d));
        } else {
            KITE_UNROLL
            for (int j = 0; j < 4; j++) {
                const int k0 = 2 * (j % 2);
                u[r][j] = k2_fields(x + offsetof(block_tq2_0, qs) + 32 * (j / 2), 2 * k0, 2 * k0 + 2, 3);
            }
            d[r] = ld_u16(x + offsetof(block_tq2_0, d));
        }
    }
    const __m128 dw = halves4(d);
    KITE_UNROLL
    for (int t = 0; t < NT; t++) {
        const unsigned char *y = a + (size_t)t * as;
        const unsigned char *q8 = y + offsetof(block_q8_K, qs);
        const __m512i a0 = ld512(q8), a1 = ld512(q8 + 64), a2 = ld512(q8 + 128), a3 = ld512(q8 + 192);
        const __m512i off =
            _mm512_zextsi256_si512(_mm256_madd_epi16(ld256(y + offsetof(block_q8_K, bsums)), _mm256_set1_epi16(1)));
        __m512i is[4];
        KITE_UNROLL
        for (int r = 0; r < 4; r++) {
            if (r < NR) {
                __m512i s = _mm512_dpbusd_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), off), u[r][0], a0);
                s = _mm512_dpbusd_epi32(s, u[r][1], a1);
                s = _mm512_dpbusd_epi32(s, u[r][2], a2);
                is[r] = _mm512_dpbusd_epi32(s, u[r][3], a3);
            } else {
                is[r] = _mm512_setzero_si512();
            }
        }
        const __m128 isum = _mm_cvtepi32_ps(reduce4_512(is[0], is[1], is[2], is[3]));
        const __m128 dy = _mm_set1_ps(ld_f32(y + offsetof(block_q8_K, d)));
        acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_mul_ps(dw, dy), isum)); /* ref: half(d) * dy * (float)isum */
    }
}

static ALWAYS_INLINE void tq1_0_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                       const unsigned char *a, size_t as, const int NR, const int NT) {
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t b = 0; b < nb; b++)
        tq_step(acc, w + (size_t)b * sizeof(block_tq1_0), ws, a + (size_t)b * KB8, as, NR, NT, 1);
    store4(y, ldy, NR, NT, acc);
}
static ALWAYS_INLINE void tq2_0_kernel(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,
                                       const unsigned char *a, size_t as, const int NR, const int NT) {
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    for (int64_t b = 0; b < nb; b++)
        tq_step(acc, w + (size_t)b * sizeof(block_tq2_0), ws, a + (size_t)b * KB8, as, NR, NT, 0);
    store4(y, ldy, NR, NT, acc);
}

/* Rows in fours (then singles), tokens in groups of up to 4 (one call per
 * token for the single rows). */
KERN_GEMM_DRIVER(gemm_q4_K_q8_K_vnni, q4_K_kernel, QK_K, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_SINGLE)
KERN_GEMM_DRIVER(gemm_q6_K_q8_K_vnni, q6_K_kernel, QK_K, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_SINGLE)
KERN_GEMM_DRIVER(gemm_q2_K_q8_K_vnni, q2_K_kernel, QK_K, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_SINGLE)
KERN_GEMM_DRIVER(gemm_q3_K_q8_K_vnni, q3_K_kernel, QK_K, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_SINGLE)
KERN_GEMM_DRIVER(gemm_tq1_0_q8_K_vnni, tq1_0_kernel, QK_K, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_SINGLE)
KERN_GEMM_DRIVER(gemm_tq2_0_q8_K_vnni, tq2_0_kernel, QK_K, 4, 4, TOKENS_OUTER, KERN_GEMM_TAIL_SINGLE)

void vec_dot_q4_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a) {
    q4_K_kernel(n / QK_K, out, 1, w, 0, a, 0, 1, 1);
}
void vec_dot_q6_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a) {
    q6_K_kernel(n / QK_K, out, 1, w, 0, a, 0, 1, 1);
}
void vec_dot_q2_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a) {
    q2_K_kernel(n / QK_K, out, 1, w, 0, a, 0, 1, 1);
}
void vec_dot_q3_K_q8_K_vnni(int64_t n, float *out, const void *w, const void *a) {
    q3_K_kernel(n / QK_K, out, 1, w, 0, a, 0, 1, 1);
}
void vec_dot_tq1_0_q8_K_vnni(int64_t n, float *out, const void *w, const void *a) {
    tq1_0_kernel(n / QK_K, out, 1, w, 0, a, 0, 1, 1);
}
void vec_dot_tq2_0_q8_K_vnni(int64_t n, float *out, const void *w, const void *a) {
    tq2_0_kernel(n / QK_K, out, 1, w, 0, a, 0, 1, 1);
}
#else
typedef int kite_empty_unit_vec_dot_kquant_vnni; /* ISO C wants a declaration */
#endif
