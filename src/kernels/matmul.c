/*
 * matmul.c - y = W x for a batch of tokens, through the kernel table
 * (dispatch.h).
 *
 * DESIGN
 *   1. The activations are converted once per call into the weight type's
 *      act_type (q8_0 / q8_K blocks, bf16 rows) in the caller's scratch, split over
 *      threads by token when the batch is large enough to pay for a pool
 *      round trip; f32 activations are used in place.
 *   2. The weight rows are split over threads in units of KERN_ROW_UNIT rows
 *      (16- or 32-row groups for interleaved weights); below the tiled prefill
 *      GEMM, threads that finish early take chunks from the others' ranges
 *      (work sharing, see exec_run).  Rows of several matmuls on the same
 *      input can share one conversion and one round trip (kern_matmul_fused).
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
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x32.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemm_x16.h"
#include "kernels/int8_gemm.h"
#include "kernels/kernels.h"
#include "kernels/tune.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define KERN_ROW_UNIT 8         /* rows per work unit: keeps SIMD-friendly chunks per thread */
#define MM_TILE_BYTES (64 << 10) /* weight bytes per row tile (reused from L2 by token groups) */
/* tp_threads_for counts scalar multiply-adds; a SIMD kernel does about this
 * many per scalar one (8 float lanes; more for int8), so its work counts
 * less and small ops stay on fewer threads. */
#define MM_SIMD_SPEEDUP 8.0
/* The interleaved q4_0/q8_0 kernel (gemm_x16.h) does 512 multiply-adds in
 * about 11 instructions (q4_K/q6_K in 12-16): a k/v projection (256 x 2048)
 * of one to a few tokens ran faster on one thread than on two (kite tune,
 * this VM; measured for q4_0). */
#define MM_X16_SPEEDUP 32.0
/* Prefill on 32-row f16/bf16 groups (gemm_x32.h): this many groups (512 KiB
 * at K = 2048) stay in L2 while every token group runs over them. */
#define MM_X32_BLOCK_GROUPS 4
/* x16 prefill: tokens per block.  A thread's groups run over one block of tokens before the next, so
 * the panel's activation rows of the block (128 x 2.2 KB for a q4_0 or q8_K panel) stay in L2 while
 * every group reads them; with all of a long prompt's tokens per group they came from L3 once per
 * group.  The groups are read once per block instead (from L3 or memory).  22-layer TinyLlama shape,
 * 2 threads, alternating: q4_0 pp512 393-397 -> 422-432 tok/s, pp2048 316 -> 338; q8_0 pp512
 * 295-358 -> 338-384 (64 tokens: 350-404, q4_0 414-436 / 321); q4_K_M within noise. */
#ifndef MM_X16_TOK_BLOCK
#define MM_X16_TOK_BLOCK 128
#endif

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
        const int64_t be = kern_x16_block_elems(w->type), nb = w->ne[0] / be;
        _Alignas(16) unsigned char blk[256]; /* one plain block of any x16 type (q6_K: 210 bytes) */
        KITE_ASSERT((size_t)tr->type_size <= sizeof blk);
        for (int64_t b = 0; b < nb; b++) {
            kern_x16_row_block(w->type, w->data, w->ne[1], w->ne[0], row, b, blk);
            tr->to_float(blk, dst + b * be, be);
        }
        return;
    }
    if (row < kern_x32_rows(w)) {
        kern_x32_get_row(w->type, w->data, w->ne[0], row, dst);
        return;
    }
    tr->to_float((const char *)w->data + (size_t)row * w->row_bytes, dst, w->ne[0]);
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Largest activation row (bytes) of any act format for rows of up to n. */
static size_t max_act_row_bytes(int64_t n) {
    const size_t q80 = (size_t)((n + 31) / 32) * 34, q8k = (size_t)((n + 255) / 256) * 292;
    const size_t w8 = (size_t)n + W8_ROW_HEADER; /* W8A8 rows (int8_gemm.h); q8k already covers it */
    /* 32-row groups (gemm_x32.h): f16 packs [K][tokens] floats (4n); bf16 makes
     * bf16 rows (2n), then packs their pairs (2n) or, widened, two floats per
     * pair (4n) */
    const size_t x32 = (size_t)n * 6;
    size_t m = q80 > q8k ? q80 : q8k;
    if (x32 > m) m = x32; /* covers bf16 rows (level avx512bf16) too */
    return m > w8 ? m : w8; /* plain f32 rows are used in place, never copied */
}

/* x32 f16 prefill on Intel (gemm_x32.h, kern_x32_f16_widen): each thread's
 * widened block, at the start of the scratch. */
static size_t widen_bytes(int n_threads, int64_t ne0) {
    return (size_t)n_threads * round64(kern_x32_widen_floats(ne0) * sizeof(float));
}

size_t kern_matmul_scratch_bytes(int n_threads, int64_t n_tok_max, int64_t max_cols) {
    return widen_bytes(n_threads, max_cols) + round64((size_t)n_threads * (size_t)max_cols * sizeof(float)) +
           (size_t)n_tok_max * max_act_row_bytes(max_cols) + 64 +
           (size_t)n_tok_max * (size_t)((max_cols + 31) / 32) * 8 + 64 + /* x16: corr + da per block */
           kern_llm_int8_extra_scratch(max_cols); /* W8A8 / LLM.int8() hook */
}

typedef struct matmul_task {
    const kern_ops_table *kt;
    const weight *w;
    const float *x;      /* float activations [n_tok][ne0] */
    const char *act;     /* activation rows in act_type, a_stride bytes apart */
    uint32_t act_type;   /* their format: the type's act_type (x32 bf16: always bf16 rows) */
    size_t a_stride;
    int64_t n_tok;
    float *y;
    int64_t ldy;
    float *row_buf;      /* [nth][ne0] floats: generic path */
    kern_gemm_tiled_fn tiled; /* prefill GEMM (gemm_tiled.h) or NULL: flat path */
    kern_gemm_x16_fn x16;     /* interleaved-layout kernel (gemm_x16.h) or NULL */
    kern_gemm_x32_fn x32;     /* 32-row f16/bf16 kernel (gemm_x32.h) or NULL */
    const void *xp;           /* x32: activations packed in token groups (the row itself for one token) */
    size_t xp_row;            /* x32: packed bytes per token (4 per unit, 8 widened) */
    bool x32_wide;            /* x32 bf16: the kernel takes widened pairs (kern_type_ops.x32_wide) */
    kern_x32_f16_widened_fn x32_widen; /* x32 f16 prefill: blocks widened first (x32_f16_widen) or NULL */
    float *widen;             /* its per-thread blocks, widen_floats apart */
    size_t widen_floats;
    int32_t *corr;            /* x16: [n_tok][nb] activation corrections */
    float *da;                /* x16: [n_tok][nb] activation scales */
    int64_t tile_bytes;       /* tune hook (tune.h): flat path's weight bytes per row tile */
} matmul_task;

static void quant_part(void *arg, int ith, int nth) {
    const matmul_task *t = arg;
    const int64_t ne0 = t->w->ne[0];
    const kern_act_fn q = t->kt->act_from_f32[t->act_type];
    long t0, t1;
    tp_split((long)t->n_tok, ith, nth, &t0, &t1);
    const int64_t nb = ne0 / 32;
    const bool prep = t->x16 && t->kt->ops[t->w->type].act_type == KITE_DTYPE_Q8_0; /* k-quants: q8_K rows only */
    for (long k = t0; k < t1; k++) {
        q(t->x + k * ne0, (char *)t->act + (size_t)k * t->a_stride, ne0);
        if (prep)
            kern_x16_act_prep(t->act + (size_t)k * t->a_stride, nb, kern_x16_offset(t->w->type), t->corr + k * nb,
                              t->da + k * nb);
    }
}

/* x32: packs the token groups of thread ith's share (gemm_x32.h, ACTIVATIONS). */
static void pack_part(void *arg, int ith, int nth) {
    const matmul_task *t = arg;
    const int64_t ne0 = t->w->ne[0];
    long j0, j1;
    tp_split((long)((t->n_tok + X32_TOK - 1) / X32_TOK), ith, nth, &j0, &j1);
    for (long j = j0; j < j1; j++) {
        const int64_t k = (int64_t)j * X32_TOK;
        const int nt = (int)(t->n_tok - k < X32_TOK ? t->n_tok - k : X32_TOK);
        /* f16 packs the float rows, bf16 the bf16 rows quant_part made (widened for the FMA kernel) */
        const bool f = t->act == (const char *)t->x;
        char *dst = (char *)(uintptr_t)t->xp + (size_t)k * t->xp_row;
        if (t->x32_wide)
            kern_x32_pack_act_wide(t->act + (size_t)k * t->a_stride, t->a_stride, ne0 / 2, nt, (float *)(void *)dst);
        else
            kern_x32_pack_act(f ? (const void *)(t->x + k * ne0) : (const void *)(t->act + (size_t)k * t->a_stride),
                              f ? (size_t)ne0 * sizeof(float) : t->a_stride, (int64_t)(t->xp_row / 4), nt, dst);
    }
}

/* Rows [r0, r1) of W for every token, on thread ith (its generic row buffer).
 * r0 is a multiple of the task's unit (task_unit); r1 is one too, or nr.
 * Interleaved weights run their 16-row groups through the x16 kernel, each
 * group for all tokens in passes of X16_MAX_TOK (the group stays in cache
 * between passes); rows past the last full group take the plain flat GEMM. */
static void run_rows(const matmul_task *t, int64_t r0, int64_t r1, int ith) {
    const weight *w = t->w;
    const int64_t ne0 = w->ne[0];
    const kern_type_ops *op = &t->kt->ops[w->type];
    const char *wd = w->data;
    if (r1 <= r0) return;
    if (t->x32) { /* 32-row f16/bf16 groups (gemm_x32.h), then the plain tail rows below */
        const int64_t packed = kern_x32_rows(w), g0 = r0 / X32_ROWS;
        const int64_t g1 = (r1 < packed ? r1 : packed) / X32_ROWS;
        const size_t gs = kern_x32_pack_tmp_bytes(ne0); /* bytes per group */
        if (t->n_tok == 1 && g1 > g0) /* decode: one call, the kernel streams its groups side by side */
            t->x32(ne0, (const uint16_t *)(const void *)(wd + (size_t)g0 * gs), g1 - g0, t->xp, 1,
                   t->y + g0 * X32_ROWS, t->ldy);
        else if (t->x32_widen) /* f16 prefill on Intel: each block widened once, then every token group */
            for (int64_t gb = g0, bg = kern_x32_widen_groups(ne0); gb < g1; gb += bg)
                t->x32_widen(ne0, (const uint16_t *)(const void *)(wd + (size_t)gb * gs), g1 - gb < bg ? g1 - gb : bg,
                             t->xp, t->xp_row, t->n_tok, t->y + gb * X32_ROWS, t->ldy,
                             t->widen + (size_t)ith * t->widen_floats);
        else
            for (int64_t gb = g0; gb < g1; gb += MM_X32_BLOCK_GROUPS) {
                const int64_t ng = g1 - gb < MM_X32_BLOCK_GROUPS ? g1 - gb : MM_X32_BLOCK_GROUPS;
                for (int64_t k = 0; k < t->n_tok; k += X32_TOK) {
                    const int tn = (int)(t->n_tok - k < X32_TOK ? t->n_tok - k : X32_TOK);
                    t->x32(ne0, (const uint16_t *)(const void *)(wd + (size_t)gb * gs), ng,
                           (const char *)t->xp + (size_t)k * t->xp_row, tn, t->y + k * t->ldy + gb * X32_ROWS, t->ldy);
                }
            }
        if (g1 * X32_ROWS > r0) r0 = g1 * X32_ROWS;
        if (r0 >= r1) return;
        /* the plain kernel's activations: floats, or bf16 rows at avx512bf16 */
        const bool f32 = op->act_type == KITE_DTYPE_F32;
        const char *ta = f32 ? (const char *)t->x : t->act;
        const size_t ts = f32 ? (size_t)ne0 * sizeof(float) : t->a_stride;
        for (int64_t k = 0; k < t->n_tok; k += KERN_GEMM_MAX_TOK) {
            const int tn = (int)(t->n_tok - k < KERN_GEMM_MAX_TOK ? t->n_tok - k : KERN_GEMM_MAX_TOK);
            op->gemm(ne0, t->y + k * t->ldy + r0, t->ldy, wd + (size_t)r0 * w->row_bytes, w->row_bytes,
                     (int)(r1 - r0), ta + (size_t)k * ts, ts, tn);
        }
        return;
    }
    if (t->x16) { /* panel by panel, the groups of [r0, r1) in each (gemm_x16.h) */
        const int64_t nb = ne0 / kern_x16_block_elems(w->type), packed = kern_x16_rows(w);
        const int64_t pb = kern_x16_panel_blocks(w->type), g1 = (r1 < packed ? r1 : packed) / X16_ROWS;
        const uint32_t at = op->act_type;
        for (int64_t b0 = 0; b0 < nb; b0 += pb) {
            const int64_t nbp = nb - b0 < pb ? nb - b0 : pb;
            const size_t a_off = dtype_row_size(at, b0 * kern_x16_block_elems(w->type)); /* the panel's blocks */
            for (int64_t k0 = 0; k0 < t->n_tok; k0 += MM_X16_TOK_BLOCK) { /* the block's activations stay in L2 */
                const int64_t k1 = t->n_tok - k0 < MM_X16_TOK_BLOCK ? t->n_tok : k0 + MM_X16_TOK_BLOCK;
                for (int64_t g = r0 / X16_ROWS; g < g1; g++)
                    for (int64_t k = k0; k < k1; k += X16_MAX_TOK) {
                        const int tn = (int)(k1 - k < X16_MAX_TOK ? k1 - k : X16_MAX_TOK);
                        t->x16(nbp, t->y + k * t->ldy + g * X16_ROWS, t->ldy,
                               wd + kern_x16_panel_offset(w->type, nb, packed / X16_ROWS, g, b0),
                               t->act + (size_t)k * t->a_stride + a_off, t->a_stride, t->corr + k * nb + b0,
                               t->da + k * nb + b0, nb, tn, b0 > 0);
                    }
            }
        }
        if (g1 * X16_ROWS > r0) r0 = g1 * X16_ROWS;
        if (r0 >= r1) return;
        for (int64_t k = 0; k < t->n_tok; k += KERN_GEMM_MAX_TOK) {
            const int tn = (int)(t->n_tok - k < KERN_GEMM_MAX_TOK ? t->n_tok - k : KERN_GEMM_MAX_TOK);
            op->gemm(ne0, t->y + k * t->ldy + r0, t->ldy, wd + (size_t)r0 * w->row_bytes, w->row_bytes,
                     (int)(r1 - r0), t->act + (size_t)k * t->a_stride, t->a_stride, tn);
        }
        return;
    }
    /* --- prefill hook (gemm_tiled.h): these rows x all tokens --- */
    if (t->tiled) {
        t->tiled(ne0, t->y + r0, t->ldy, wd + (size_t)r0 * w->row_bytes, w->row_bytes, (int)(r1 - r0), t->act,
                 t->a_stride, (int)t->n_tok);
        return;
    }
    /* --- end prefill hook --- */
    if (op->gemm) {
        int64_t tile = t->tile_bytes / (int64_t)(w->row_bytes ? w->row_bytes : 1); /* tune hook */
        if (tile < KERN_ROW_UNIT) tile = KERN_ROW_UNIT;
        if (t->n_tok == 1) tile = r1 - r0; /* decode: nothing to reuse; one call keeps the kernel's streams long */
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

/* Rows per work unit: the groups of interleaved weights, KERN_ROW_UNIT otherwise. */
static int64_t task_unit(const matmul_task *t) { return t->x16 ? X16_ROWS : t->x32 ? X32_ROWS : KERN_ROW_UNIT; }

void kern_matmul(threadpool *tp, const weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                 void *scratch) {
    kern_matmul_with(kern_table(), tp, w, x, n_tok, y, ldy, scratch);
}

/* --- tune hook (tune.h): the variant `kite tune` chose for this shape class, else the default --- */
void kern_matmul_with(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                      float *y, int64_t ldy, void *scratch) {
    kern_matmul_variant(kt, tp, w, x, n_tok, y, ldy, scratch,
                        kern_tune_pick(kern_config_get()->tune, kt->level, w->type, w->ne[1], w->ne[0], n_tok,
                                       tp_n_threads(tp)));
}
/* --- end tune hook --- */

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
    float *widen = scratch; /* [nth] widened blocks (widen_bytes), then the rest */
    char *sc = (char *)scratch + widen_bytes(nth, ne0);
    *t = (matmul_task){.kt = kt, .w = w, .x = x, .n_tok = n_tok, .y = y, .ldy = ldy, .row_buf = (float *)(void *)sc};
    const double macs = (double)n_tok * (double)w->ne[1] * (double)ne0;
    const double speedup = w->layout == WEIGHT_LAYOUT_X16 ? MM_X16_SPEEDUP : MM_SIMD_SPEEDUP;
    int n_split = tp_threads_for(tp, kt->level > KERN_LEVEL_SCALAR ? macs / speedup : macs);
    /* --- tune hook: thread count and flat row tile of the variant (MM_TILE_BYTES by default) --- */
    if (vc->threads != KERN_TUNE_THR_AUTO) n_split = vc->threads == KERN_TUNE_THR_ONE ? 1 : nth;
    t->tile_bytes = (int64_t)kern_tune_tile_bytes(vc->tile);
    /* --- end tune hook --- */

    t->act_type = op->act_type;
    char *rows = sc + round64((size_t)nth * (size_t)ne0 * sizeof(float)); /* converted activations */
    if (w->layout == WEIGHT_LAYOUT_X32) { /* gemm_x32.h, ACTIVATIONS; packed by convert_act */
        /* the registry's kernel, or its option variants (dispatch.h kern_opt, read here once per call) */
        t->x32 = op->x32;
        t->x32_wide = op->x32_wide;
        if (op->x32_bf16_fma && kern_opt_on(KERN_OPT_BF16_FMA)) {
            t->x32 = op->x32_bf16_fma;
            t->x32_wide = true;
        }
        KITE_ASSERT(t->x32);
        if (op->x32_f16_widen && n_tok > X32_TOK && kern_opt_on(KERN_OPT_F16_WIDEN)) {
            t->x32_widen = op->x32_f16_widen;
            t->widen = widen;
            t->widen_floats = round64(kern_x32_widen_floats(ne0) * sizeof(float)) / sizeof(float);
        }
        t->xp_row = (size_t)(ne0 / kern_x32_unit(w->type)) * (t->x32_wide ? 8 : 4);
        if (w->type == KITE_DTYPE_BF16) { /* bf16 rows at every level (the lower ones' tables take floats) */
            t->act_type = KITE_DTYPE_BF16;
            t->act = rows;
            t->a_stride = kern_act_row_bytes(KITE_DTYPE_BF16, ne0);
            KITE_ASSERT(t->a_stride > 0 && kt->act_from_f32[KITE_DTYPE_BF16]);
            /* one token reads its bf16 row in place, unless the kernel wants it widened */
            t->xp = n_tok == 1 && !t->x32_wide ? (const void *)rows
                                               : (const void *)(rows + round64((size_t)n_tok * t->a_stride));
        } else {
            t->act = (const char *)x;
            t->a_stride = (size_t)ne0 * sizeof(float);
            t->xp = n_tok == 1 ? (const void *)x : (const void *)rows;
        }
    } else if (!op->vec_dot || op->act_type == KITE_DTYPE_F32) {
        t->act = (const char *)x;
        t->a_stride = (size_t)ne0 * sizeof(float);
    } else {
        t->act = rows;
        t->a_stride = kern_act_row_bytes(op->act_type, ne0);
        KITE_ASSERT(t->a_stride > 0 && kt->act_from_f32[op->act_type]);
        if (w->layout == WEIGHT_LAYOUT_X16) {
            t->x16 = op->x16;
            const uint32_t act = kern_x16_block_elems(w->type) == QK_K ? KITE_DTYPE_Q8_K : KITE_DTYPE_Q8_0;
            KITE_ASSERT(t->x16 && op->act_type == act);
            char *side = (char *)t->act + round64((size_t)n_tok * t->a_stride);
            t->corr = (int32_t *)(void *)side;
            t->da = (float *)(void *)(side + round64((size_t)n_tok * (size_t)(ne0 / 32) * sizeof(int32_t)));
        }
    }
    /* --- prefill hook: tiled GEMM when the batch exceeds the flat GEMM's --- */
    /* (tune hook: or as the variant's regime says) */
    if (op->vec_dot && w->layout == WEIGHT_LAYOUT_PLAIN &&
        (vc->regime == KERN_TUNE_TILED || (vc->regime == KERN_TUNE_DEFAULT && n_tok > KERN_GEMM_MAX_TOK)))
        t->tiled = op->tiled;
    /* --- end prefill hook --- */
    /* --- tune hook: count the variant that runs (kite bench prints them) --- */
    const int regime = t->x16 ? KERN_TUNE_X16 : t->x32 ? KERN_TUNE_X32 : t->tiled ? KERN_TUNE_TILED
                     : op->gemm ? KERN_TUNE_FLAT : KERN_TUNE_GENERIC;
    kern_tune_count(kern_tune_variant_id(regime, vc->tile, vc->threads), vc->tuned);
    /* --- end tune hook --- */
    return n_split;
}

/* Converts the float activations into t's act format (no-op when the
 * kernel reads floats in place). */
static void convert_act(threadpool *tp, matmul_task *t) {
    if (t->act != (const char *)t->x) {
        /* a few float ops per element: split by token only when that pays */
        int n_q = tp_threads_for(tp, 4.0 * (double)t->n_tok * (double)t->w->ne[0]);
        if (n_q > t->n_tok) n_q = (int)t->n_tok;
        tp_run_n(tp, quant_part, t, n_q);
    }
    if (t->x32 && t->xp != (const void *)t->x && t->xp != (const void *)t->act) {
        /* then the x32 packing, a copy: split by token group only when that pays */
        int n_p = tp_threads_for(tp, (double)t->n_tok * (double)t->w->ne[0]);
        const int64_t n_groups = (t->n_tok + X32_TOK - 1) / X32_TOK;
        if (n_p > n_groups) n_p = (int)n_groups;
        tp_run_n(tp, pack_part, t, n_p);
    }
}

/* ---- one pool round trip over the rows of one or more matmuls ----------------

   The rows of the items form one space of work units (task_unit rows each):
   item after item, or - with an epilogue - unit u of every item together, so
   that the thread that computes rows [r0, r1) of all items runs the epilogue
   on them.  Thread i starts with the units tp_split gives it.  With work
   sharing (decode and small batches, flat and x16 kernels), it takes them a
   chunk at a time from the front of its range, and when its range is empty
   it takes chunks from the back of the other threads' ranges.  On a machine
   where the host stalls one core for a while (this VM), the other core then
   finishes the op instead of waiting for it at the join.  Each thread still
   streams a contiguous run of rows, and claims cost one uncontended
   compare-and-swap per chunk.  Which thread computes a row never changes its
   value, so results stay bit-identical.  The tiled prefill GEMM keeps the
   static split (it is compute-bound and packs its activations per call).
   kern_config.work_sharing = false turns sharing off (for A/B measurements;
   the kite CLI sets it from KITE_WORK_SHARING=0). */

#define MM_SHARE_MAX_THREADS 64 /* ranges kept on the stack; larger pools use the static split */
#define MM_CHUNKS_PER_THREAD 8  /* claims per thread's own range: balance vs claim count */

typedef struct mm_range {
    _Alignas(64) _Atomic uint64_t fb; /* (back << 32) | front: units [front, back) not yet claimed */
} mm_range;

typedef struct mm_exec {
    matmul_task t[KERN_FUSED_MAX];
    int n;
    kern_rows_fn epilogue;
    void *epilogue_arg;
    int64_t first[KERN_FUSED_MAX + 1]; /* concatenated mode: item i owns units [first[i], first[i+1]) */
    int64_t n_units;
    int64_t chunk;                     /* units per claim */
    bool share;
    mm_range range[MM_SHARE_MAX_THREADS];
} mm_exec;

/* Runs work units [u0, u1). */
static void exec_units(const mm_exec *e, int64_t u0, int64_t u1, int ith) {
    if (e->epilogue) { /* unit u = rows of unit u of every item (equal row counts) */
        const int64_t unit = task_unit(&e->t[0]), nr = e->t[0].w->ne[1];
        const int64_t r0 = u0 * unit, r1 = u1 * unit < nr ? u1 * unit : nr;
        for (int i = 0; i < e->n; i++) run_rows(&e->t[i], r0, r1, ith);
        if (r1 > r0) e->epilogue(e->epilogue_arg, r0, r1);
        return;
    }
    for (int i = 0; i < e->n; i++) {
        const int64_t a = u0 > e->first[i] ? u0 : e->first[i], b = u1 < e->first[i + 1] ? u1 : e->first[i + 1];
        if (a >= b) continue;
        const int64_t unit = task_unit(&e->t[i]), nr = e->t[i].w->ne[1];
        const int64_t r0 = (a - e->first[i]) * unit, r1 = (b - e->first[i]) * unit;
        run_rows(&e->t[i], r0, r1 < nr ? r1 : nr, ith);
    }
}

/* Claims up to `chunk` units from the front (own range) or the back (another
 * thread's) of range r; false when it is empty. */
static bool claim(mm_range *r, int64_t chunk, bool front, int64_t *u0, int64_t *u1) {
    uint64_t v = atomic_load_explicit(&r->fb, memory_order_relaxed);
    for (;;) {
        const int64_t f = (int64_t)(v & 0xffffffffu), b = (int64_t)(v >> 32);
        if (f >= b) return false;
        const int64_t nf = front ? (f + chunk < b ? f + chunk : b) : f, nb = front ? b : (b - chunk > f ? b - chunk : f);
        if (atomic_compare_exchange_weak_explicit(&r->fb, &v, ((uint64_t)nb << 32) | (uint64_t)nf,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *u0 = front ? f : nb;
            *u1 = front ? nf : b;
            return true;
        }
    }
}

static void exec_part(void *arg, int ith, int nth) {
    mm_exec *e = arg;
    if (!e->share) {
        long u0, u1;
        tp_split((long)e->n_units, ith, nth, &u0, &u1);
        exec_units(e, u0, u1, ith);
        return;
    }
    int64_t u0, u1;
    while (claim(&e->range[ith], e->chunk, true, &u0, &u1)) exec_units(e, u0, u1, ith);
    for (int k = 1; k < nth; k++) /* then help the others, from the ends of their ranges */
        while (claim(&e->range[(ith + k) % nth], e->chunk, false, &u0, &u1)) exec_units(e, u0, u1, ith);
}

/* Runs the prepared items (converted activations) on n_split threads. */
static void exec_run(threadpool *tp, mm_exec *e, int n_split) {
    e->first[0] = 0;
    for (int i = 0; i < e->n; i++) {
        const int64_t nr = e->t[i].w->ne[1], unit = task_unit(&e->t[i]);
        e->first[i + 1] = e->first[i] + (e->epilogue && i > 0 ? 0 : (nr + unit - 1) / unit);
    }
    e->n_units = e->epilogue ? e->first[1] : e->first[e->n];
    bool tiled = false;
    for (int i = 0; i < e->n; i++) tiled |= e->t[i].tiled != NULL;
    if (n_split > tp_n_threads(tp)) n_split = tp_n_threads(tp);
    e->share = n_split > 1 && n_split <= MM_SHARE_MAX_THREADS && !tiled && e->n_units >= 2 * n_split &&
               e->n_units < (int64_t)1 << 31 && kern_config_get()->work_sharing;
    if (e->share) {
        e->chunk = e->n_units / n_split / MM_CHUNKS_PER_THREAD;
        if (e->chunk < 1) e->chunk = 1;
        for (int i = 0; i < n_split; i++) {
            long u0, u1;
            tp_split((long)e->n_units, i, n_split, &u0, &u1);
            atomic_store_explicit(&e->range[i].fb, ((uint64_t)u1 << 32) | (uint64_t)u0, memory_order_relaxed);
        }
    }
    tp_run_n(tp, exec_part, e, n_split); /* publishing the task orders the stores above */
}

void kern_matmul_variant(const kern_ops_table *kt, threadpool *tp, const weight *w, const float *x, int64_t n_tok,
                         float *y, int64_t ldy, void *scratch, const kern_tune_choice *vc) {
    /* --- LLM.int8() hook (int8_mix.c): batch-wide outlier columns in f16 --- */
    if (w->type == KITE_DTYPE_LLM_INT8) {
        kern_llm_int8_matmul(kt, tp, w, x, n_tok, y, ldy, scratch);
        return;
    }
    /* --- end LLM.int8() hook --- */
    mm_exec e; /* not zero-filled: its 4 KiB of ranges are set only when sharing */
    e.n = 1;
    e.epilogue = NULL;
    e.epilogue_arg = NULL;
    const int n_split = mm_setup(kt, tp, w, x, n_tok, y, ldy, scratch, vc, &e.t[0]);
    convert_act(tp, &e.t[0]);
    exec_run(tp, &e, n_split);
}

/* ---- several weights on one input ----------------------------------------- */

/* Items can share one activation conversion when their weights read the
 * same activation rows: same width, same act format, same kernel path
 * (interleaved or not; interleaved q4_0 and q8_0 differ in their activation
 * corrections, q4_K and q6_K have none), and for an epilogue the same row
 * count. */
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
        if (w->layout == WEIGHT_LAYOUT_X16 && kern_x16_offset(w->type) != kern_x16_offset(w0->type)) return false;
        if (w->layout == WEIGHT_LAYOUT_X32 && w->type != w0->type) return false; /* f16 and bf16 pack differently */
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
    mm_exec e; /* not zero-filled: its 4 KiB of ranges are set only when sharing */
    e.n = n_items;
    e.epilogue = epilogue;
    e.epilogue_arg = epilogue_arg;
    int n_split = 1;
    for (int i = 0; i < n_items; i++) {
        const weight *w = items[i].w;
        const kern_tune_choice *vc = kern_tune_pick(kern_config_get()->tune, kt->level, w->type, w->ne[1], w->ne[0], n_tok, nth);
        const int sp = mm_setup(kt, tp, w, x, n_tok, items[i].y, items[i].ldy, scratch, vc, &e.t[i]);
        if (sp > n_split) n_split = sp;
    }
    convert_act(tp, &e.t[0]); /* every item reads these rows (fusable) */
    exec_run(tp, &e, n_split);
}
