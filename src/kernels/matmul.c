/*
 * matmul.c - y = W x for a batch of tokens, through the kernel table
 * (dispatch.h).
 *
 * DESIGN
 *   1. The activations are converted once per call into the weight type's
 *      act_type (q8_0 / q8_K blocks, bf16 rows) in the caller's scratch, split over
 *      threads by token when the batch is large enough to pay for a pool
 *      round trip; f32 activations are used in place.
 *   2. The weight rows are split over threads in units of KERN_ROW_UNIT rows.
 *      Each thread walks its rows in tiles of about MM_TILE_BYTES of weights
 *      and, for each tile, calls the flat-GEMM kernel on groups of up to
 *      KERN_GEMM_MAX_TOK tokens: a weight tile comes from memory once and is
 *      reused from cache for every token group.  Decode (1 token) is one
 *      group: every weight byte is read once.
 *   3. Types without a vec_dot (generic path) convert each weight row to
 *      float with the dtype traits into a per-thread row buffer and use the
 *      f32 kernel.
 *   Every y value is the kernel's dot of one weight row and one activation
 *   row: the summation order depends on neither the thread count nor the
 *   batch grouping, so results are bit-identical for any -t and for prefill
 *   versus token-by-token decode.
 *
 *   Ops too small to pay for waking the pool use fewer threads, down to
 *   running inline on the caller (tp_threads_for / tp_run_n).
 */
#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemm_x16.h"
#include "kernels/int8_gemm.h"
#include "kernels/kernels.h"
#include "kernels/tune.h"
#include "tensor/dtype.h"

#define KERN_ROW_UNIT 8         /* rows per work unit: keeps SIMD-friendly chunks per thread */
#define MM_TILE_BYTES (64 << 10) /* weight bytes per row tile (reused from L2 by token groups) */
/* tp_threads_for counts scalar multiply-adds; a SIMD kernel does about this
 * many per scalar one (8 float lanes; more for int8), so its work counts
 * less and small ops stay on fewer threads. */
#define MM_SIMD_SPEEDUP 8.0
/* The interleaved q4_0/q8_0 kernel (gemm_x16.h) does 512 multiply-adds in
 * about 11 instructions: a k/v projection (256 x 2048) of one to a few
 * tokens ran faster on one thread than on two (kite tune, this VM). */
#define MM_X16_SPEEDUP 32.0

float kern_dot_f32(const float *a, const float *b, int64_t n) {
    /* 8 independent partial sums: lets the compiler keep a vector register
     * of accumulators without -ffast-math, and the order does not depend on
     * the thread count, so results are identical for any -t. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void kern_get_row(const weight *w, int64_t row, float *dst) {
    const dtype_traits *tr = dtype_get(w->type);
    KITE_ASSERT(tr && tr->to_float && row >= 0 && row < w->ne[1]);
    if (row < kern_x16_rows(w)) { /* interleaved group: gather the row's blocks one at a time */
        const int64_t nb = w->ne[0] / 32, g = row / X16_ROWS * X16_ROWS;
        const char *grp = (const char *)w->data + (size_t)g * w->row_bytes;
        unsigned char blk[64];
        for (int64_t b = 0; b < nb; b++) {
            kern_x16_get_block(w->type, grp, nb, b, (int)(row - g), blk);
            tr->to_float(blk, dst + b * 32, 32);
        }
        return;
    }
    tr->to_float((const char *)w->data + (size_t)row * w->row_bytes, dst, w->ne[0]);
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Largest activation row (bytes) of any act format for rows of up to n. */
static size_t max_act_row_bytes(int64_t n) {
    const size_t q80 = (size_t)((n + 31) / 32) * 34, q8k = (size_t)((n + 255) / 256) * 292;
    const size_t w8 = (size_t)n + W8_ROW_HEADER; /* W8A8 rows (int8_gemm.h); q8k already covers it */
    const size_t bf = (size_t)n * 2; /* bf16 rows (level avx512bf16) */
    size_t m = q80 > q8k ? q80 : q8k;
    if (bf > m) m = bf;
    return m > w8 ? m : w8; /* f32 activations are used in place, never copied */
}

size_t kern_matmul_scratch_bytes(int n_threads, int64_t n_tok_max, int64_t max_cols) {
    return round64((size_t)n_threads * (size_t)max_cols * sizeof(float)) +
           (size_t)n_tok_max * max_act_row_bytes(max_cols) + 64 +
           (size_t)n_tok_max * (size_t)((max_cols + 31) / 32) * 8 + 64 + /* x16: corr + da per block */
           kern_llm_int8_extra_scratch(max_cols); /* W8A8 / LLM.int8() hook */
}

typedef struct matmul_task {
    const kern_ops_table *kt;
    const weight *w;
    const float *x;      /* float activations [n_tok][ne0] */
    const char *act;     /* activation rows in act_type, a_stride bytes apart */
    size_t a_stride;
    int64_t n_tok;
    float *y;
    int64_t ldy;
    float *row_buf;      /* [nth][ne0] floats: generic path */
    kern_gemm_tiled_fn tiled; /* prefill GEMM (gemm_tiled.h) or NULL: flat path */
    kern_gemm_x16_fn x16;     /* interleaved-layout kernel (gemm_x16.h) or NULL */
    int32_t *corr;            /* x16: [n_tok][nb] activation corrections */
    float *da;                /* x16: [n_tok][nb] activation scales */
    int64_t tile_bytes;       /* tune hook (tune.h): flat path's weight bytes per row tile */
} matmul_task;

static void quant_part(void *arg, int ith, int nth) {
    const matmul_task *t = arg;
    const int64_t ne0 = t->w->ne[0];
    const kern_act_fn q = t->kt->act_from_f32[t->kt->ops[t->w->type].act_type];
    long t0, t1;
    tp_split((long)t->n_tok, ith, nth, &t0, &t1);
    const int64_t nb = ne0 / 32;
    for (long k = t0; k < t1; k++) {
        q(t->x + k * ne0, (char *)t->act + (size_t)k * t->a_stride, ne0);
        if (t->x16)
            kern_x16_act_prep(t->act + (size_t)k * t->a_stride, nb, kern_x16_offset(t->w->type), t->corr + k * nb,
                              t->da + k * nb);
    }
}

/* Interleaved weights (gemm_x16.h): this thread's 16-row groups, each for
 * all tokens in passes of X16_MAX_TOK (the group stays in cache between
 * passes); rows past the last full group take the plain flat GEMM. */
static void matmul_x16_part(const matmul_task *t, int ith, int nth) {
    const weight *w = t->w;
    const int64_t ne0 = w->ne[0], nr = w->ne[1], nb = ne0 / 32, packed = kern_x16_rows(w);
    long u0, u1;
    tp_split((long)((nr + X16_ROWS - 1) / X16_ROWS), ith, nth, &u0, &u1);
    const int64_t r0 = (int64_t)u0 * X16_ROWS, r1 = (int64_t)u1 * X16_ROWS < nr ? (int64_t)u1 * X16_ROWS : nr;
    const char *wd = w->data;
    int64_t r = r0;
    for (; r + X16_ROWS <= r1 && r + X16_ROWS <= packed; r += X16_ROWS)
        for (int64_t k = 0; k < t->n_tok; k += X16_MAX_TOK) {
            const int tn = (int)(t->n_tok - k < X16_MAX_TOK ? t->n_tok - k : X16_MAX_TOK);
            t->x16(nb, t->y + k * t->ldy + r, t->ldy, wd + (size_t)r * w->row_bytes, t->act + (size_t)k * t->a_stride,
                   t->a_stride, t->corr + k * nb, t->da + k * nb, nb, tn);
        }
    if (r >= r1) return;
    const kern_type_ops *op = &t->kt->ops[w->type];
    for (int64_t k = 0; k < t->n_tok; k += KERN_GEMM_MAX_TOK) {
        const int tn = (int)(t->n_tok - k < KERN_GEMM_MAX_TOK ? t->n_tok - k : KERN_GEMM_MAX_TOK);
        op->gemm(ne0, t->y + k * t->ldy + r, t->ldy, wd + (size_t)r * w->row_bytes, w->row_bytes, (int)(r1 - r),
                 t->act + (size_t)k * t->a_stride, t->a_stride, tn);
    }
}

static void matmul_part(void *arg, int ith, int nth) {
    const matmul_task *t = arg;
    const weight *w = t->w;
    const int64_t ne0 = w->ne[0], nr = w->ne[1];
    long u0, u1;
    tp_split((long)((nr + KERN_ROW_UNIT - 1) / KERN_ROW_UNIT), ith, nth, &u0, &u1);
    const int64_t r0 = (int64_t)u0 * KERN_ROW_UNIT, r1 = (int64_t)u1 * KERN_ROW_UNIT < nr ? (int64_t)u1 * KERN_ROW_UNIT : nr;
    if (t->x16) {
        matmul_x16_part(t, ith, nth);
        return;
    }
    const kern_type_ops *op = &t->kt->ops[w->type];
    const char *wd = w->data;
    /* --- prefill hook (gemm_tiled.h): this thread's rows x all tokens --- */
    if (t->tiled) {
        if (r1 > r0)
            t->tiled(ne0, t->y + r0, t->ldy, wd + (size_t)r0 * w->row_bytes, w->row_bytes, (int)(r1 - r0),
                     t->act, t->a_stride, (int)t->n_tok);
        return;
    }
    /* --- end prefill hook --- */
    if (op->gemm) {
        int64_t tile = t->tile_bytes / (int64_t)(w->row_bytes ? w->row_bytes : 1); /* tune hook */
        if (tile < KERN_ROW_UNIT) tile = KERN_ROW_UNIT;
        for (int64_t r = r0; r < r1; r += tile) {
            const int rn = (int)(r1 - r < tile ? r1 - r : tile);
            for (int64_t k = 0; k < t->n_tok; k += KERN_GEMM_MAX_TOK) {
                const int tn = (int)(t->n_tok - k < KERN_GEMM_MAX_TOK ? t->n_tok - k : KERN_GEMM_MAX_TOK);
                op->gemm(ne0, t->y + k * t->ldy + r, t->ldy, wd + (size_t)r * w->row_bytes, w->row_bytes, rn,
                         t->act + (size_t)k * t->a_stride, t->a_stride, tn);
            }
        }
        return;
    }
    /* generic: to_float once per row, then the f32 kernel for every token */
    const dtype_traits *tr = dtype_get(w->type);
    const kern_vec_dot_fn dot = t->kt->ops[KITE_DTYPE_F32].vec_dot;
    float *buf = t->row_buf + (size_t)ith * (size_t)ne0;
    for (int64_t r = r0; r < r1; r++) {
        tr->to_float(wd + (size_t)r * w->row_bytes, buf, ne0);
        for (int64_t k = 0; k < t->n_tok; k++) dot(ne0, t->y + k * t->ldy + r, buf, t->x + k * ne0);
    }
}

void kern_matmul(threadpool *tp, const weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                 void *scratch) {
    kern_matmul_with(kern_table(), tp, w, x, n_tok, y, ldy, scratch);
}

/* --- tune hook (tune.h): the variant `kite tune` chose for this shape class, else the default --- */
void kern_matmul_with(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                      float *y, int64_t ldy, void *scratch) {
    kern_matmul_variant(kt, tp, w, x, n_tok, y, ldy, scratch,
                        kern_tune_pick(kt->level, w->type, w->ne[1], w->ne[0], n_tok, tp_n_threads(tp)));
}
/* --- end tune hook --- */

/* Row range [r0, r1) of W that thread ith of nth computes in matmul_part:
 * 16-row groups for interleaved weights, KERN_ROW_UNIT rows otherwise. */
static void part_rows(const matmul_task *t, int ith, int nth, int64_t *r0, int64_t *r1) {
    const int64_t nr = t->w->ne[1], unit = t->x16 ? X16_ROWS : KERN_ROW_UNIT;
    long u0, u1;
    tp_split((long)((nr + unit - 1) / unit), ith, nth, &u0, &u1);
    *r0 = (int64_t)u0 * unit;
    *r1 = (int64_t)u1 * unit < nr ? (int64_t)u1 * unit : nr;
}

/* Fills t for y = W x with variant vc: the kernel path, and where the
 * activation rows go (in scratch; converted later by convert_act).  Returns
 * the number of threads the variant wants.  The activation layout depends
 * only on (nth, act type, ne0, n_tok), so weights that share those get the
 * same act pointers. */
static int mm_setup(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                    float *y, int64_t ldy, void *scratch, const kern_tune_choice *vc, matmul_task *t) {
    const dtype_traits *tr = dtype_get(w->type);
    KITE_ASSERT(kt && tr && tr->to_float && ldy >= w->ne[1]);
    const kern_type_ops *op = &kt->ops[w->type];
    const int nth = tp_n_threads(tp);
    const int64_t ne0 = w->ne[0];
    char *sc = scratch;
    *t = (matmul_task){.kt = kt, .w = w, .x = x, .n_tok = n_tok, .y = y, .ldy = ldy, .row_buf = (float *)(void *)sc};
    const double macs = (double)n_tok * (double)w->ne[1] * (double)ne0;
    const double speedup = w->layout == WEIGHT_LAYOUT_X16 ? MM_X16_SPEEDUP : MM_SIMD_SPEEDUP;
    int n_split = tp_threads_for(tp, kt->level > KERN_LEVEL_SCALAR ? macs / speedup : macs);
    /* --- tune hook: thread count and flat row tile of the variant (MM_TILE_BYTES by default) --- */
    if (vc->threads != KERN_TUNE_THR_AUTO) n_split = vc->threads == KERN_TUNE_THR_ONE ? 1 : nth;
    t->tile_bytes = (int64_t)kern_tune_tile_bytes(vc->tile);
    /* --- end tune hook --- */

    if (!op->vec_dot || op->act_type == KITE_DTYPE_F32) {
        t->act = (const char *)x;
        t->a_stride = (size_t)ne0 * sizeof(float);
    } else {
        t->act = sc + round64((size_t)nth * (size_t)ne0 * sizeof(float));
        t->a_stride = kern_act_row_bytes(op->act_type, ne0);
        KITE_ASSERT(t->a_stride > 0 && kt->act_from_f32[op->act_type]);
        if (w->layout == WEIGHT_LAYOUT_X16) {
            t->x16 = kern_gemm_x16_get(kt->level, w->type);
            KITE_ASSERT(t->x16 && op->act_type == KITE_DTYPE_Q8_0);
            char *side = (char *)t->act + round64((size_t)n_tok * t->a_stride);
            t->corr = (int32_t *)(void *)side;
            t->da = (float *)(void *)(side + round64((size_t)n_tok * (size_t)(ne0 / 32) * sizeof(int32_t)));
        }
    }
    /* --- prefill hook: tiled GEMM when the batch exceeds the flat GEMM's --- */
    /* (tune hook: or as the variant's regime says) */
    if (op->vec_dot && !t->x16 &&
        (vc->regime == KERN_TUNE_TILED || (vc->regime == KERN_TUNE_DEFAULT && n_tok > KERN_GEMM_MAX_TOK)))
        t->tiled = kern_gemm_tiled_get(kt->level, w->type);
    /* --- end prefill hook --- */
    /* --- tune hook: count the variant that runs (kite bench prints them) --- */
    kern_tune_count(kern_tune_variant_id(t->x16 ? KERN_TUNE_X16 : t->tiled ? KERN_TUNE_TILED
                                                  : op->gemm ? KERN_TUNE_FLAT : KERN_TUNE_GENERIC,
                                         vc->tile, vc->threads), vc->tuned);
    /* --- end tune hook --- */
    return n_split;
}

/* Converts the float activations into t's act format (no-op when the
 * kernel reads floats in place). */
static void convert_act(threadpool *tp, matmul_task *t) {
    if (t->act == (const char *)t->x) return;
    /* a few float ops per element: split by token only when that pays */
    int n_q = tp_threads_for(tp, 4.0 * (double)t->n_tok * (double)t->w->ne[0]);
    if (n_q > t->n_tok) n_q = (int)t->n_tok;
    tp_run_n(tp, quant_part, t, n_q);
}

void kern_matmul_variant(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                         float *y, int64_t ldy, void *scratch, const kern_tune_choice *vc) {
    /* --- LLM.int8() hook (int8_mix.c): batch-wide outlier columns in f16 --- */
    if (w->type == KITE_DTYPE_LLM_INT8) {
        kern_llm_int8_matmul(kt, tp, w, x, n_tok, y, ldy, scratch);
        return;
    }
    /* --- end LLM.int8() hook --- */
    matmul_task t;
    const int n_split = mm_setup(kt, tp, w, x, n_tok, y, ldy, scratch, vc, &t);
    convert_act(tp, &t);
    tp_run_n(tp, matmul_part, &t, n_split);
}

/* ---- several weights on one input, one pool round trip ------------------------ */

typedef struct matmul_fused_task {
    matmul_task t[KERN_FUSED_MAX];
    int n;
    kern_rows_fn epilogue;
    void *epilogue_arg;
} matmul_fused_task;

static void matmul_fused_part(void *arg, int ith, int nth) {
    const matmul_fused_task *f = arg;
    for (int i = 0; i < f->n; i++) matmul_part((void *)&f->t[i], ith, nth);
    if (f->epilogue) {
        int64_t r0, r1;
        part_rows(&f->t[0], ith, nth, &r0, &r1);
        if (r1 > r0) f->epilogue(f->epilogue_arg, r0, r1);
    }
}

/* Items can share one activation conversion and one row split when their
 * weights read the same activation rows: same width, same act format, same
 * kernel path (interleaved or not; interleaved types differ in their
 * activation corrections), and for an epilogue the same row count. */
static bool fusable(const kern_ops_table *kt, const kern_mm_item *it, int n, bool epilogue) {
    const weight *w0 = it[0].w;
    for (int i = 0; i < n; i++) {
        const weight *w = it[i].w;
        if (w->type == KITE_DTYPE_LLM_INT8) return false;
        if (w->ne[0] != w0->ne[0] || w->layout != w0->layout) return false;
        if (epilogue && w->ne[1] != w0->ne[1]) return false;
        const kern_type_ops *a = &kt->ops[w->type], *b = &kt->ops[w0->type];
        const bool fa = !a->vec_dot || a->act_type == KITE_DTYPE_F32, fb = !b->vec_dot || b->act_type == KITE_DTYPE_F32;
        if (fa != fb || (!fa && a->act_type != b->act_type)) return false;
        if (w->layout == WEIGHT_LAYOUT_X16 && w->type != w0->type) return false;
    }
    return true;
}

void kern_matmul_fused(threadpool *tp, const kern_mm_item *items, int n_items, const float *x, int64_t n_tok,
                       void *scratch, kern_rows_fn epilogue, void *epilogue_arg) {
    kern_matmul_fused_with(kern_table(), tp, items, n_items, x, n_tok, scratch, epilogue, epilogue_arg);
}

void kern_matmul_fused_with(const kern_ops_table *kt, threadpool *tp, const kern_mm_item *items, int n_items,
                            const float *x, int64_t n_tok, void *scratch, kern_rows_fn epilogue, void *epilogue_arg) {
    KITE_ASSERT(n_items >= 1 && n_items <= KERN_FUSED_MAX);
    const int nth = tp_n_threads(tp);
    if (!fusable(kt, items, n_items, epilogue != NULL)) {
        for (int i = 0; i < n_items; i++)
            kern_matmul_with(kt, tp, items[i].w, x, n_tok, items[i].y, items[i].ldy, scratch);
        if (epilogue) epilogue(epilogue_arg, 0, items[0].w->ne[1]);
        return;
    }
    matmul_fused_task f = {.n = n_items, .epilogue = epilogue, .epilogue_arg = epilogue_arg};
    int n_split = 1;
    for (int i = 0; i < n_items; i++) {
        const weight *w = items[i].w;
        const kern_tune_choice *vc = kern_tune_pick(kt->level, w->type, w->ne[1], w->ne[0], n_tok, nth);
        const int s = mm_setup(kt, tp, w, x, n_tok, items[i].y, items[i].ldy, scratch, vc, &f.t[i]);
        if (s > n_split) n_split = s;
    }
    convert_act(tp, &f.t[0]); /* every item reads these rows (fusable) */
    tp_run_n(tp, matmul_fused_part, &f, n_split);
}
