/*
 * attention_impl.h - private to the attention kernels (attention*.c):
 * effective tile sizes, scratch layout and the small inline loops they share.
 *
 * Scratch layout (floats): n_threads per-thread slices of attn_slice_floats()
 * each (rounded up to 16 floats, 64 bytes), then the split-KV partials.
 *
 * Quantized KV cache (attn_args.kv_type f16/q8_0/q4_0): every read of a K or
 * V row of one kv head goes through attn_kv_row, which for f32 returns the
 * cache pointer itself (the arithmetic is then exactly that of a float
 * cache) and otherwise dequantizes that one row of head_dim values into a
 * per-thread buffer of the scratch slice.  No path ever holds more than a
 * tile of dequantized rows.
 * Inner loops are written in blocks of 8 independent lanes with a scalar tail,
 * which gcc's and clang's SLP vectorisers turn into vector code at -O2
 * without -ffast-math; the summation order is fixed by the code, never by
 * the thread count.  These inline loops are the specification: the kernels
 * call them through attn_geom.ops (attention_simd.h), whose SIMD tables
 * compute the same bits.
 */
#ifndef KITE_KERNELS_ATTENTION_IMPL_H
#define KITE_KERNELS_ATTENTION_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention_simd.h"
#include "kernels/exp_poly.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

#define ATTN_DEQ_ROWS 32 /* split-KV, quantized cache: K/V rows dequantized per batch (scratch rows) */
#define ATTN_F32_TILE 32 /* split-KV, grouped f32 jobs: K/V rows per tile shared by a group's heads */
/* FlashAttention's default KV tile when head_dim <= ATTN_SMALL_HD (attn_args.kv_tile 0): with a small
 * head_dim a tile's Kt and V rows are small, and the per-tile, per-row costs (score-row setup, the
 * rescale, calls on a few leftover positions) dominate, so fewer, longer tiles pay.  Chosen with a
 * kern_attention loop at the stories260K shape (8 heads, 4 kv heads, head_dim 8, 9 queries after 64
 * and 200 cached positions, 1 thread): kv_tile 64 -> 256 took 11-13 -> 8.5-10.5 us and 24 -> 17 us
 * per call (docs/kernels.md, "Element-wise ops"). */
#define ATTN_SMALL_HD 16
#define ATTN_KV_TILE_SMALL_HD 256

typedef struct attn_geom {
    int32_t q_tile, kv_tile, kv_chunk; /* effective sizes (defaults applied) */
    int32_t q_dim, kv_dim, group;      /* n_head*head_dim, n_head_kv*head_dim, n_head/n_head_kv */
    size_t slice;                      /* per-thread scratch floats (multiple of 16) */
    size_t head_bytes;                 /* bytes of one kv head's row of head_dim values (kv_type) */
    size_t row_bytes;                  /* bytes of one position's row: n_head_kv * head_bytes */
    int32_t kv_type;                   /* attn_args.kv_type */
    int32_t quantized;                 /* kv_type != f32: rows go through a dequantization buffer */
    const attn_ops *ops;               /* inner loops (attention_simd.h); attn_ops_active() by default */
} attn_geom;

void attn_geom_init(attn_geom *g, const attn_args *a);

/* Partials of one (token, head, chunk) of the split-KV path: acc[head_dim],
 * then l (sum of exp(s - ref)), m (max s) and ref, the value subtracted: the
 * head's phi, or m when the chunk took the exact method. */
static inline size_t attn_partial_floats(int32_t head_dim) { return (size_t)head_dim + 3; }

/* Number of chunks covering positions [0, n_kv). */
static inline int32_t attn_n_chunks(int32_t n_kv, int32_t chunk) { return (n_kv + chunk - 1) / chunk; }

/* Cache row of position p, and in *run how many positions from p on have
 * consecutive rows (to the end of p's block; unbounded without a table).
 * Loops walk positions in such runs so the inner loops stay contiguous and
 * the arithmetic is the same with and without a block table. */
static inline size_t attn_row_run(const attn_args *a, int32_t p, int32_t *run) {
    if (!a->block_table) {
        *run = INT32_MAX;
        return (size_t)p;
    }
    const int32_t b = p / a->block_size, off = p - b * a->block_size;
    *run = a->block_size - off;
    return (size_t)a->block_table[b] * (size_t)a->block_size + (size_t)off;
}

/* attn_row_run, with the run extended over the following blocks while the
 * table names physically consecutive ones (the engine allocates a
 * sequence's blocks in order where it can), up to `want` positions: only
 * table entries of positions < p + want are read, so want must not reach
 * past the positions the call may read.  Longer runs mean fewer, longer
 * calls of the _rows loops; per element they compute the same as shorter
 * runs (attention_simd.h), so the bits do not depend on the layout. */
static inline size_t attn_row_run_n(const attn_args *a, int32_t p, int32_t want, int32_t *run) {
    const size_t row = attn_row_run(a, p, run);
    if (!a->block_table || *run >= want) return row;
    const int32_t bs = a->block_size;
    for (int32_t b = p / bs + 1, next = a->block_table[p / bs] + 1; *run < want && a->block_table[b] == next;
         b++, next++)
        *run += bs;
    return row;
}

/* Row dequantizers of the KV types: the formulas and operation order of
 * dequantize_row_q8_0 / _q4_0 (quant_legacy.c), so the floats are identical,
 * written with constant-length inner loops that gcc -O2 vectorises. */
static inline void attn_deq_f16(const uint16_t *restrict x, float *restrict y, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) y[i + j] = fp16_to_fp32_inline(x[i + j]);
    for (; i < n; i++) y[i] = fp16_to_fp32_inline(x[i]);
}
static inline void attn_deq_q8_0(const unsigned char *restrict x, float *restrict y, int32_t n) {
    for (int32_t b = 0; b < n / 32; b++, x += 34, y += 32) { /* block_q8_0: f16 d, int8 qs[32] */
        uint16_t dh;
        memcpy(&dh, x, sizeof dh);
        const float d = fp16_to_fp32_inline(dh);
        const int8_t *qs = (const int8_t *)(const void *)(x + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}
static inline void attn_deq_q4_0(const unsigned char *restrict x, float *restrict y, int32_t n) {
    for (int32_t b = 0; b < n / 32; b++, x += 18, y += 32) { /* block_q4_0: f16 d, 16 bytes of nibbles */
        uint16_t dh;
        memcpy(&dh, x, sizeof dh);
        const float d = fp16_to_fp32_inline(dh);
        const unsigned char *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* K or V row (base = a->k_cache or a->v_cache) of cache row `row`, kv head
 * kvh, as head_dim floats: the cache itself for f32, else dequantized into
 * tmp (head_dim floats), which the result then points to.  Cost: head_dim
 * conversions; no allocation.  An f32 cache's rows of one kv head are
 * attn_kv_ld floats apart (for the _rows loops over a run of rows). */
static inline const float *attn_kv_row(const attn_geom *g, const void *base, size_t row, int32_t kvh,
                                       int32_t head_dim, float *tmp) {
    const unsigned char *p = (const unsigned char *)base + row * g->row_bytes + (size_t)kvh * g->head_bytes;
    switch (g->kv_type) {
    case KITE_DTYPE_F16: g->ops->deq_f16((const uint16_t *)(const void *)p, tmp, head_dim); return tmp;
    case KITE_DTYPE_Q8_0: g->ops->deq_q8_0(p, tmp, head_dim); return tmp;
    case KITE_DTYPE_Q4_0: g->ops->deq_q4_0(p, tmp, head_dim); return tmp;
    default: return (const float *)(const void *)p;
    }
}

static inline size_t attn_kv_ld(const attn_geom *g) { return g->row_bytes / sizeof(float); }

/* First position the query at position p attends to (sliding window). */
static inline int32_t attn_win_lo(const attn_args *a, int32_t p) {
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

/* Soft cap of scaled scores in place (attn_args.softcap > 0): s = cap *
 * tanh(s / cap), libm tanhf as ggml's tanh, so every path and level gives
 * the same bits for the same score.  Cost: n tanhf calls. */
static inline void attn_softcap(float *s, int32_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int32_t i = 0; i < n; i++) s[i] = tanhf(s[i] * inv) * cap;
}

/* Work units (multiply-adds) of an attention call, for tp_threads_for. */
double attn_work(const attn_args *a);

void attn_flash(threadpool *tp, const attn_args *a, const attn_geom *g);
void attn_splitkv(threadpool *tp, const attn_args *a, const attn_geom *g);

/* sum_i a[i]*b[i] in 8 lanes + tail, fixed order. */
static inline float attn_dot(const float *restrict a, const float *restrict b, int32_t n) {
    float acc[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

/* y[i] += w * x[i], i < n; y and x must not overlap (restrict lets the SLP
 * vectoriser use vector loads/stores without an alias check). */
static inline void attn_axpy(float *restrict y, float w, const float *restrict x, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) y[i + j] += w * x[i + j];
    for (; i < n; i++) y[i] += w * x[i];
}

/* max of x[0..n) (n >= 1) by the sequential rule m = x[j] > m ? x[j] : m from
 * m = x[0] (so a NaN after x[0] is skipped, a NaN x[0] stays). */
static inline float attn_max(const float *x, int32_t n) {
    float m = x[0];
    for (int32_t j = 1; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* t[d*ldt + j] = x[j*ldx + d] for j < n_rows, d < n (a tile of K rows into
 * FlashAttention's transposed Kt); a copy, no arithmetic. */
static inline void attn_transpose(const float *restrict x, size_t ldx, int32_t n_rows, int32_t n, float *restrict t,
                                  size_t ldt) {
    for (int32_t j = 0; j < n_rows; j++)
        for (int32_t d = 0; d < n; d++) t[(size_t)d * ldt + (size_t)j] = x[(size_t)j * ldx + (size_t)d];
}

/* y[i] *= w, i < n. */
static inline void attn_scale(float *restrict y, float w, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) y[i + j] *= w;
    for (; i < n; i++) y[i] *= w;
}

/* exp(x) in float for the softmax weights, written to vectorise (the libm
 * expf call does not).  x = n*ln2 + r with |r| <= ln2/2 (n by the
 * 1.5*2^23 rounding trick, ln2 split in two so n*ln2_hi is exact), e^r by its
 * Taylor series to r^7 (truncation < 6e-9 relative), times 2^n built in the
 * exponent bits (the contract of kernels/exp_poly.h, unfused; ATTN_EXP_FLUSH
 * and the clamp are defined there).  Against double exp over [ATTN_EXP_FLUSH, 88]: 1.2 ulp at
 * most (measured); test_exp in tests/unit/test_attention.c checks <= 2 ulp.
 * Below ATTN_EXP_FLUSH the result is +0: callers only add it to sums whose
 * largest term is >= e^-40 (split-KV's phi window; the running maximum's
 * own term in FlashAttention), so an e^-80 term is 4e-18 of that term and
 * changes no float sum, while the products e^-87 * v it used to give were
 * subnormal, and a subnormal product costs a microcode assist on Intel cores
 * (stories260K decode at 512 tokens ran 1.2-1.5x faster with FTZ/DAZ set;
 * docs/attention.md).  Above 88 x is clamped: e^88 instead of a larger one
 * (callers never keep such values: split-KV falls back beyond
 * phi + ATTN_PHI_RANGE).  NaN stays NaN.  No float-to-int conversion, so
 * no undefined behaviour for any input. */
static inline float attn_exp(float x) {
    /* clamp by bit selection (below, only to keep the steps finite: those results are
     * flushed): gcc 12 -O2 does not if-convert `x < lo ? lo : x`
     * inside a vectorised loop, but does vectorise masks; NaN compares false
     * both ways and passes through */
    const float lo = KERN_EXP_ATTN_LO, hi = KERN_EXP_ATTN_HI;
    int32_t xb, lob, hib;
    memcpy(&xb, &x, sizeof xb);
    memcpy(&lob, &lo, sizeof lob);
    memcpy(&hib, &hi, sizeof hib);
    const int32_t below = -(int32_t)(x < lo), above = -(int32_t)(x > hi);
    const uint32_t flush = -(uint32_t)(x < ATTN_EXP_FLUSH); /* all ones: the result is +0 */
    xb = (xb & ~(below | above)) | (lob & below) | (hib & above);
    memcpy(&x, &xb, sizeof x);
    const float round = 12582912.0f; /* 1.5 * 2^23 */
    const float t = x * KERN_EXP_LOG2E + round;
    const float n = t - round;
    float r = x - n * KERN_EXP_LN2_HI; /* n*ln2_hi exact */
    r = r + n * KERN_EXP_LN2_LO;
    const float p = kern_exp_poly(r); /* the unfused polynomial (exp_poly.h) */
    uint32_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    /* the low bits of t hold n: (n + 127) << 23, n in [-126, 127] (unsigned:
     * wraps harmlessly for a NaN input, whose result is NaN anyway) */
    sb = (tb - 0x4b400000u + 127u) << 23;
    float scale, e;
    memcpy(&scale, &sb, sizeof scale);
    e = p * scale;
    uint32_t eb;
    memcpy(&eb, &e, sizeof eb);
    eb &= ~flush;
    memcpy(&e, &eb, sizeof e);
    return e;
}

/* x[i] = exp(x[i] - sub) in place for i < n; returns their sum (8 lanes +
 * tail, fixed order). */
static inline float attn_exp_sum(float *x, float sub, int32_t n) {
    float acc[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            const float e = attn_exp(x[i + j] - sub);
            x[i + j] = e;
            acc[j] += e;
        }
    float tail = 0.0f;
    for (; i < n; i++) {
        x[i] = attn_exp(x[i] - sub);
        tail += x[i];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

#endif
