/*
 * attention_avx2.c - the attention loops of attention_impl.h on 256-bit
 * vectors, bit-identical to them (attention_simd.h).
 *
 * How the bits stay the same: the scalar loops keep 8 partial sums
 * acc[0..7] (element i+j goes to acc[j]); here acc is one ymm register, lane
 * j = acc[j], updated with a separate multiply and add (no FMA: this file is
 * compiled with -mfma but -ffp-contract=off, and only mul/add intrinsics are
 * used).  hsum8 reduces in the scalar order ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)),
 * and the tails run the scalar code.  Element-wise loops (axpy, scale) have
 * no order to keep.  attn_exp8 (exp_avx2.h) is attn_exp's operation sequence lane by lane;
 * the dequantizers do fp16_to_fp32_inline's integer moves and the same
 * int-to-float conversions and single multiplications.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/x86_avx2/attention_avx2.h"
#include "kernels/x86_avx2/exp_avx2.h"

/* ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) */
static inline float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* a_j + a_{j+4} */
    const __m128 h = _mm_hadd_ps(s, s);                                                   /* s0+s1, s2+s3 */
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

float attn_dot_avx2(const float *a, const float *b, int32_t n) {
    __m256 acc = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return hsum8(acc) + tail;
}

/* s[r] for 8 rows: 8 independent accumulators hide the add latency, and the
 * rows share each load of q.  Written out (no arrays) so that gcc -O2 keeps
 * them in registers. */
#define ATTN_ACC(A, R) A = _mm256_add_ps(A, _mm256_mul_ps(qv, _mm256_loadu_ps(k + (size_t)(R) * ldk + (size_t)i)))
static void dot_8rows(const float *q, const float *k, size_t ldk, int32_t n, float *s) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        ATTN_ACC(a0, 0); ATTN_ACC(a1, 1); ATTN_ACC(a2, 2); ATTN_ACC(a3, 3);
        ATTN_ACC(a4, 4); ATTN_ACC(a5, 5); ATTN_ACC(a6, 6); ATTN_ACC(a7, 7);
    }
    float t[8];
    for (int r = 0; r < 8; r++) {
        const float *kr = k + (size_t)r * ldk;
        t[r] = 0.0f;
        for (int32_t j = i; j < n; j++) t[r] += q[j] * kr[j];
    }
    /* the 8 reductions side by side, each in hsum8's order: u = (a_r[j] + a_r[j+4]) for two rows */
    const __m256 u01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
    const __m256 u23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20), _mm256_permute2f128_ps(a2, a3, 0x31));
    const __m256 u45 = _mm256_add_ps(_mm256_permute2f128_ps(a4, a5, 0x20), _mm256_permute2f128_ps(a4, a5, 0x31));
    const __m256 u67 = _mm256_add_ps(_mm256_permute2f128_ps(a6, a7, 0x20), _mm256_permute2f128_ps(a6, a7, 0x31));
    /* (u0+u1), (u2+u3) per row: rows 0 2 | 1 3, then 4 6 | 5 7 */
    const __m256 h0 = _mm256_hadd_ps(u01, u23), h1 = _mm256_hadd_ps(u45, u67);
    /* ((u0+u1)+(u2+u3)) per row, lanes hold rows 0 2 4 6 1 3 5 7; + tail last */
    __m256 tot = _mm256_hadd_ps(h0, h1);
    tot = _mm256_add_ps(tot, _mm256_setr_ps(t[0], t[2], t[4], t[6], t[1], t[3], t[5], t[7]));
    _mm256_storeu_ps(s, _mm256_permutevar8x32_ps(tot, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#undef ATTN_ACC

void attn_dot_rows_avx2(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s) {
    int32_t r = 0;
    for (; r + 8 <= n_rows; r += 8) dot_8rows(q, k + (size_t)r * ldk, ldk, n, s + r);
    for (; r + 4 <= n_rows; r += 4) { /* four rows share each load of q */
        const float *k0 = k + (size_t)r * ldk, *k1 = k0 + ldk, *k2 = k1 + ldk, *k3 = k2 + ldk;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, _mm256_loadu_ps(k0 + i)));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, _mm256_loadu_ps(k1 + i)));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, _mm256_loadu_ps(k2 + i)));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, _mm256_loadu_ps(k3 + i)));
        }
        float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
        for (; i < n; i++) {
            t0 += q[i] * k0[i];
            t1 += q[i] * k1[i];
            t2 += q[i] * k2[i];
            t3 += q[i] * k3[i];
        }
        s[r] = hsum8(a0) + t0;
        s[r + 1] = hsum8(a1) + t1;
        s[r + 2] = hsum8(a2) + t2;
        s[r + 3] = hsum8(a3) + t3;
    }
    for (; r < n_rows; r++) s[r] = attn_dot_avx2(q, k + (size_t)r * ldk, n);
}

void attn_axpy_avx2(float *y, float w, const float *x, int32_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(wv, _mm256_loadu_ps(x + i))));
    for (; i < n; i++) y[i] += w * x[i];
}

void attn_axpy_rows_avx2(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n) {
    int32_t c = 0;
    for (; c + 64 <= n; c += 64) { /* 64 columns (8 add chains) held in registers over all rows */
#define ATTN_LD(B) __m256 y##B = _mm256_loadu_ps(y + c + 8 * (B))
#define ATTN_UPD(B) y##B = _mm256_add_ps(y##B, _mm256_mul_ps(wv, _mm256_loadu_ps(xr + 8 * (B))))
#define ATTN_ST(B) _mm256_storeu_ps(y + c + 8 * (B), y##B)
        ATTN_LD(0); ATTN_LD(1); ATTN_LD(2); ATTN_LD(3); ATTN_LD(4); ATTN_LD(5); ATTN_LD(6); ATTN_LD(7);
        const float *xr = x + c;
        for (int32_t r = 0; r < n_rows; r++, xr += ldx) {
            const __m256 wv = _mm256_set1_ps(w[r]);
            ATTN_UPD(0); ATTN_UPD(1); ATTN_UPD(2); ATTN_UPD(3); ATTN_UPD(4); ATTN_UPD(5); ATTN_UPD(6); ATTN_UPD(7);
        }
        ATTN_ST(0); ATTN_ST(1); ATTN_ST(2); ATTN_ST(3); ATTN_ST(4); ATTN_ST(5); ATTN_ST(6); ATTN_ST(7);
#undef ATTN_LD
#undef ATTN_UPD
#undef ATTN_ST
    }
    for (; c + 32 <= n; c += 32) { /* 32 columns */
        __m256 y0 = _mm256_loadu_ps(y + c), y1 = _mm256_loadu_ps(y + c + 8);
        __m256 y2 = _mm256_loadu_ps(y + c + 16), y3 = _mm256_loadu_ps(y + c + 24);
        const float *xr = x + c;
        for (int32_t r = 0; r < n_rows; r++, xr += ldx) {
            const __m256 wv = _mm256_set1_ps(w[r]);
            y0 = _mm256_add_ps(y0, _mm256_mul_ps(wv, _mm256_loadu_ps(xr)));
            y1 = _mm256_add_ps(y1, _mm256_mul_ps(wv, _mm256_loadu_ps(xr + 8)));
            y2 = _mm256_add_ps(y2, _mm256_mul_ps(wv, _mm256_loadu_ps(xr + 16)));
            y3 = _mm256_add_ps(y3, _mm256_mul_ps(wv, _mm256_loadu_ps(xr + 24)));
        }
        _mm256_storeu_ps(y + c, y0);
        _mm256_storeu_ps(y + c + 8, y1);
        _mm256_storeu_ps(y + c + 16, y2);
        _mm256_storeu_ps(y + c + 24, y3);
    }
    for (; c + 8 <= n; c += 8) {
        __m256 y0 = _mm256_loadu_ps(y + c);
        const float *xr = x + c;
        for (int32_t r = 0; r < n_rows; r++, xr += ldx) y0 = _mm256_add_ps(y0, _mm256_mul_ps(_mm256_set1_ps(w[r]), _mm256_loadu_ps(xr)));
        _mm256_storeu_ps(y + c, y0);
    }
    for (; c < n; c++) {
        float yc = y[c];
        for (int32_t r = 0; r < n_rows; r++) yc += w[r] * x[(size_t)r * ldx + (size_t)c];
        y[c] = yc;
    }
}

/* axpy_rows_multi for head_dim a multiple of 8 below 64: query rows in groups of
 * 8 (then 4, 2), 8 columns at a time.  A group's rows share the range common to
 * all of them, [c0, c1), where every row's chain advances together (one load
 * of x_j for the group); each row's own prefix [lo, c0) runs before it and its
 * suffix [c1, hi) after it, so every row sees its j in ascending order: the
 * same adds as attn_axpy_rows_avx2, in the same order. */
static inline __m256 pv_solo8(__m256 acc, const float *w, const float *x, size_t ldx, int32_t j0, int32_t j1) {
    for (int32_t j = j0; j < j1; j++)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(x + (size_t)j * ldx)));
    return acc;
}

#define PV_R8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define PV_R4(M) M(0) M(1) M(2) M(3)
#define PV_R2(M) M(0) M(1)
#define PV_LD(i) __m256 a##i = pv_solo8(_mm256_loadu_ps(y + (i) * ldy), w + (i) * ldw, x, ldx, lo[i], c0);
#define PV_UPD(i) a##i = _mm256_add_ps(a##i, _mm256_mul_ps(_mm256_set1_ps(w[(size_t)(i) * ldw + (size_t)j]), xv));
#define PV_ST(i) _mm256_storeu_ps(y + (i) * ldy, pv_solo8(a##i, w + (i) * ldw, x, ldx, c1, hi[i]));
#define PV_GROUP(NAME, G, ROWS)                                                                                  \
    static void NAME(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo, const int32_t *hi,     \
                     const float *x, size_t ldx) {                                                               \
        int32_t c0 = lo[0], c1 = hi[0];                                                                          \
        for (int g = 1; g < (G); g++) {                                                                          \
            c0 = lo[g] > c0 ? lo[g] : c0;                                                                        \
            c1 = hi[g] < c1 ? hi[g] : c1;                                                                        \
        }                                                                                                        \
        if (c1 <= c0) { /* no common range (or an empty row): each row alone */                                  \
            for (int g = 0; g < (G); g++)                                                                        \
                if (hi[g] > lo[g])                                                                               \
                    _mm256_storeu_ps(y + g * ldy, pv_solo8(_mm256_loadu_ps(y + g * ldy), w + g * ldw, x, ldx,    \
                                                           lo[g], hi[g]));                                       \
            return;                                                                                              \
        }                                                                                                        \
        ROWS(PV_LD)                                                                                              \
        for (int32_t j = c0; j < c1; j++) {                                                                      \
            const __m256 xv = _mm256_loadu_ps(x + (size_t)j * ldx);                                              \
            ROWS(PV_UPD)                                                                                         \
        }                                                                                                        \
        ROWS(PV_ST)                                                                                              \
    }
PV_GROUP(pv_group8, 8, PV_R8)
PV_GROUP(pv_group4, 4, PV_R4)
PV_GROUP(pv_group2, 2, PV_R2)
#undef PV_GROUP
#undef PV_ST
#undef PV_UPD
#undef PV_LD
#undef PV_R4
#undef PV_R2
#undef PV_R8

void attn_axpy_rows_multi_avx2(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo, const int32_t *hi,
                               int32_t n_q, const float *x, size_t ldx, int32_t n) {
    if (n % 8 != 0 || n >= 64) { /* axpy_rows already keeps >= 8 chains per row, or a scalar tail */
        for (int32_t i = 0; i < n_q; i++)
            if (hi[i] > lo[i])
                attn_axpy_rows_avx2(y + (size_t)i * ldy, w + (size_t)i * ldw + lo[i], x + (size_t)lo[i] * ldx, ldx,
                                    hi[i] - lo[i], n);
        return;
    }
    for (int32_t c = 0; c < n; c += 8) {
        int32_t i = 0;
        for (; i + 8 <= n_q; i += 8) pv_group8(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx);
        for (; i + 4 <= n_q; i += 4) pv_group4(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx);
        for (; i + 2 <= n_q; i += 2) pv_group2(y + (size_t)i * ldy + c, ldy, w + (size_t)i * ldw, ldw, lo + i, hi + i, x + c, ldx);
        for (; i < n_q; i++)
            if (hi[i] > lo[i]) {
                float *yi = y + (size_t)i * ldy + c;
                _mm256_storeu_ps(yi, pv_solo8(_mm256_loadu_ps(yi), w + (size_t)i * ldw, x + c, ldx, lo[i], hi[i]));
            }
    }
}

void attn_scale_avx2(float *y, float w, int32_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), wv));
    for (; i < n; i++) y[i] *= w;
}


float attn_exp_sum_avx2(float *x, float sub, int32_t n) {
    const __m256 sv = _mm256_set1_ps(sub);
    __m256 acc = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = attn_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float tail = 0.0f;
    for (; i < n; i++) {
        x[i] = attn_exp(x[i] - sub);
        tail += x[i];
    }
    return hsum8(acc) + tail;
}

/* attn_max: the vector max equals the sequential rule's result whenever no
 * element is NaN and the max is not a zero (whose sign the two rules may pick
 * differently); those rows take the sequential loop. */
float attn_max_avx2(const float *x, int32_t n) {
    if (n < 16) return attn_max(x, n);
    __m256 m = _mm256_loadu_ps(x), bad = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    int32_t i = 8;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_max_ps(m, v);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (i < n) { /* the last 8, overlapping: max is idempotent */
        const __m256 v = _mm256_loadu_ps(x + n - 8);
        m = _mm256_max_ps(m, v);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    const float r = _mm_cvtss_f32(q);
    if (_mm256_movemask_ps(bad) || r == 0.0f) return attn_max(x, n);
    return r;
}

/* attn_transpose in 8 x 8 blocks (unpack / shuffle / lane permute), scalar edges */
void attn_transpose_avx2(const float *x, size_t ldx, int32_t n_rows, int32_t n, float *t, size_t ldt) {
    const int32_t r8 = n_rows & ~7, c8 = n & ~7;
    for (int32_t j = 0; j < r8; j += 8)
        for (int32_t d = 0; d < c8; d += 8) {
            const float *s = x + (size_t)j * ldx + (size_t)d;
            const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ldx), r2 = _mm256_loadu_ps(s + 2 * ldx),
                         r3 = _mm256_loadu_ps(s + 3 * ldx), r4 = _mm256_loadu_ps(s + 4 * ldx),
                         r5 = _mm256_loadu_ps(s + 5 * ldx), r6 = _mm256_loadu_ps(s + 6 * ldx),
                         r7 = _mm256_loadu_ps(s + 7 * ldx);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
            const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
            const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
            const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            float *o = t + (size_t)d * ldt + (size_t)j;
            _mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(o + ldt, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(o + 2 * ldt, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(o + 3 * ldt, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(o + 4 * ldt, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(o + 5 * ldt, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(o + 6 * ldt, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(o + 7 * ldt, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
    for (int32_t j = 0; j < n_rows; j++) /* edges: columns c8.. of every row, rows r8.. of the blocked columns */
        for (int32_t d = j < r8 ? c8 : 0; d < n; d++) t[(size_t)d * ldt + (size_t)j] = x[(size_t)j * ldx + (size_t)d];
}

/* F16C's vcvtph2ps converts every half exactly (subnormals too, whatever MXCSR says) except that it
 * quiets a signalling NaN, whose payload the reference keeps: a row with any NaN is converted again by
 * the reference's formula (fp16_to_fp32_inline).  The split-KV decode loop of an f16 cache dequantizes
 * every K and V row it reads (at 4096 positions the integer formula took 14.8% of a whole decode run's
 * samples). */
void attn_deq_f16_avx2(const uint16_t *x, float *y, int32_t n) {
    int32_t i = 0;
    __m256 nan = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + i)));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(f, f, _CMP_UNORD_Q));
        _mm256_storeu_ps(y + i, f);
    }
    if (_mm256_movemask_ps(nan)) i = 0; /* rare: the whole row by the reference's formula */
    for (; i < n; i++) y[i] = fp16_to_fp32_inline(x[i]);
}

static inline __m128i load8(const unsigned char *p) { /* 8 bytes into the low half (movq: no alignment) */
    return _mm_loadl_epi64((const __m128i *)(const void *)p);
}

void attn_deq_q8_0_avx2(const unsigned char *x, float *y, int32_t n) {
    for (int32_t b = 0; b < n / 32; b++, x += 34, y += 32) {
        uint16_t dh;
        memcpy(&dh, x, sizeof dh);
        const __m256 d = _mm256_set1_ps(fp16_to_fp32_inline(dh));
        for (int j = 0; j < 32; j += 8)
            _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(x + 2 + j))), d));
    }
}

void attn_deq_q4_0_avx2(const unsigned char *x, float *y, int32_t n) {
    const __m256i m4 = _mm256_set1_epi32(0x0f), eight = _mm256_set1_epi32(8);
    for (int32_t b = 0; b < n / 32; b++, x += 18, y += 32) {
        uint16_t dh;
        memcpy(&dh, x, sizeof dh);
        const __m256 d = _mm256_set1_ps(fp16_to_fp32_inline(dh));
        for (int j = 0; j < 16; j += 8) {
            const __m256i q = _mm256_cvtepu8_epi32(load8(x + 2 + j));
            const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, m4), eight);
            const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
            _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d));
            _mm256_storeu_ps(y + j + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
        }
    }
}

#endif
