/*
 * int8_gemm_vnni.c - W8A8 INT8 GEMM with AVX-512 VNNI (int8_gemm.h).
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the activations are
 * offset to u8 (qa + 128, an XOR with 0x80) and the weight row's stored
 * 128 * sum(qw) is subtracted: sum (qa + 128) qw - 128 sum qw = sum qa qw.
 * With |q| <= 127 and n <= W8_MAX_COLS every partial sum stays inside int32
 * (n * 255 * 127 < 2^31), so the result is exact and equals the reference
 * bit for bit.  The tail is a masked load (zero weights contribute 0 even
 * though the zeroed activations become 128).
 *
 * Register blocking: a micro-kernel of NR = 4 weight rows (1 for the
 * remainder, and for a single token: see gemm_w8a8_vnni) x NT = 1..4 tokens, with NR and NT compile-time constants at
 * each call (fully unrolled: accumulators stay in zmm registers); each
 * 64-byte weight chunk is loaded once for NT tokens and each activation
 * chunk once for NR rows.  Walking 4 rows side by side defeats the hardware
 * prefetchers, so the one-token walk prefetches the same offset NR rows below.
 * Every output is the same integer sum whatever the blocking.
 *
 * Compiled with AVX-512 flags (Makefile); called only at level avx512vnni.
 */
#include <immintrin.h>

#include "kernels/int8_gemm.h"
#include "kernels/x86_avx512/vnni_common.h"
#include "tensor/dtype.h"

static ALWAYS_INLINE void micro(int64_t n, const char *w, size_t ws, const char *a, size_t as, int NR, int NT,
                                float *y, int64_t ldy) {
    const __m512i off = _mm512_set1_epi8((char)0x80);
    __m512i s[4][4];
    KITE_UNROLL
    for (int r = 0; r < NR; r++)
        KITE_UNROLL
        for (int t = 0; t < NT; t++) s[r][t] = _mm512_setzero_si512();
    const int8_t *qw = (const int8_t *)(w + W8_ROW_HEADER), *qa = (const int8_t *)(a + W8_ROW_HEADER);
    const size_t pf = NR > 1 ? (size_t)NR * ws : 512;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i wv[4], av[4];
        KITE_UNROLL
        for (int r = 0; r < NR; r++) {
            /* only the one-token walk streams rows once; with NT > 1 the rows stay in cache for the
             * next token group and the prefetches only cost issue slots (pp128 1.08x without them,
             * bench/ab.sh, 8 rounds, TinyLlama shape, 4 layers) */
            if (NT == 1) _mm_prefetch((const char *)(qw + (size_t)r * ws + i) + pf, _MM_HINT_T0);
            wv[r] = _mm512_loadu_si512((const void *)(qw + (size_t)r * ws + i));
        }
        KITE_UNROLL
        for (int t = 0; t < NT; t++) av[t] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(qa + (size_t)t * as + i)), off);
        KITE_UNROLL
        for (int r = 0; r < NR; r++)
            KITE_UNROLL
            for (int t = 0; t < NT; t++) s[r][t] = _mm512_dpbusd_epi32(s[r][t], av[t], wv[r]);
    }
    if (i < n) {
        const __mmask64 m = (__mmask64)(~0ULL >> (64 - (n - i)));
        __m512i wv[4], av[4];
        KITE_UNROLL
        for (int r = 0; r < NR; r++) wv[r] = _mm512_maskz_loadu_epi8(m, qw + (size_t)r * ws + i);
        KITE_UNROLL
        for (int t = 0; t < NT; t++) av[t] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, qa + (size_t)t * as + i), off);
        KITE_UNROLL
        for (int r = 0; r < NR; r++)
            KITE_UNROLL
            for (int t = 0; t < NT; t++) s[r][t] = _mm512_dpbusd_epi32(s[r][t], av[t], wv[r]);
    }
    KITE_UNROLL
    for (int r = 0; r < NR; r++) {
        const char *wr = w + (size_t)r * ws;
        const int64_t o = 128 * (int64_t)w8_row_sum(wr); /* int64: a corrupt header cannot overflow */
        const float dw = w8_row_scale(wr);
        KITE_UNROLL
        for (int t = 0; t < NT; t++)
            y[(int64_t)t * ldy + r] =
                (float)((int64_t)_mm512_reduce_add_epi32(s[r][t]) - o) * w8_row_scale(a + (size_t)t * as) * dw;
    }
}

void vec_dot_w8a8_vnni(int64_t n, float *out, const void *w, const void *a) {
    if (n > W8_MAX_COLS) {
        vec_dot_w8a8_ref(n, out, w, a);
        return;
    }
    micro(n, w, 0, a, 0, 1, 1, out, 1);
}

/* NR rows x nt tokens, tokens in groups of 4 (NT constant per call). */
static ALWAYS_INLINE void rows(int64_t n, float *y, int64_t ldy, const char *w, size_t ws, int NR, const char *a,
                               size_t as, int nt) {
    int t = 0;
    for (; t + 4 <= nt; t += 4) micro(n, w, ws, a + (size_t)t * as, as, NR, 4, y + (int64_t)t * ldy, ldy);
    switch (nt - t) {
    case 3: micro(n, w, ws, a + (size_t)t * as, as, NR, 3, y + (int64_t)t * ldy, ldy); break;
    case 2: micro(n, w, ws, a + (size_t)t * as, as, NR, 2, y + (int64_t)t * ldy, ldy); break;
    case 1: micro(n, w, ws, a + (size_t)t * as, as, NR, 1, y + (int64_t)t * ldy, ldy); break;
    default: break;
    }
}

void gemm_w8a8_vnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,
                    size_t a_stride, int nt) {
    if (n > W8_MAX_COLS) {
        gemm_w8a8_ref(n, y, ldy, w, w_stride, nr, a, a_stride, nt);
        return;
    }
    const char *wc = w, *ac = a;
    int r = 0;
    /* one token (decode): one row at a time.  Four rows side by side gain nothing without
     * token reuse and read four streams, which ran at 40% of the bandwidth against 90% for
     * one (tg16 66-73 -> 144-153 tok/s, TinyLlama shape, 1 thread, AMD EPYC) */
    if (nt == 1) {
        for (; r < nr; r++) micro(n, wc + (size_t)r * w_stride, 0, ac, 0, 1, 1, y + r, ldy);
        return;
    }
    for (; r + 4 <= nr; r += 4) rows(n, y + r, ldy, wc + (size_t)r * w_stride, w_stride, 4, ac, a_stride, nt);
    for (; r < nr; r++) rows(n, y + r, ldy, wc + (size_t)r * w_stride, w_stride, 1, ac, a_stride, nt);
}
