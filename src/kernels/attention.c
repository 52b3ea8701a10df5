/*
 * attention.c - kern_attention: path choice, thread-count policy, scratch
 * sizing, and the reference path (the specification the others are tested
 * against).  The fast paths are attention_flash.c (prefill) and
 * attention_splitkv.c (decode); docs/attention.md gives the math.
 *
 * Reference path: work is split over (token, head) rows; each thread keeps
 * one row's scores in its scratch slice (n_ctx floats), softmaxes them with
 * kern_softmax_ref (not the SIMD table of ops_simd.h, so the path is the same
 * at every level) and sums V weighted by them.  A sliding window (attn_args.window)
 * only moves the first position of a row (attn_win_lo); every path skips the
 * positions before it, so window 0 and a window longer than the row run the
 * same arithmetic.
 *
 * KV cache type (attn_args.kv_type): rows are read through attn_kv_row
 * (attention_impl.h), dequantized one kv-head row at a time when not f32.
 *
 * Inner loops: every path calls them through g->ops (attention_simd.h), the
 * table of the active CPU level or, via kern_attention_with, a given one;
 * all tables give the same bits.
 *
 * Thread count: every path's result is the same for any nth, so the number
 * of threads is chosen from the work alone (tp_threads_for): the 260K-param
 * model's attention always runs on the calling thread.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/attention_impl.h"
#include "kernels/ops_simd.h"

void attn_geom_init(attn_geom *g, const attn_args *a) {
    g->q_tile = a->q_tile > 0 ? a->q_tile : ATTN_Q_TILE;
    g->kv_tile = a->kv_tile > 0 ? a->kv_tile : a->head_dim <= ATTN_SMALL_HD ? ATTN_KV_TILE_SMALL_HD : ATTN_KV_TILE;
    g->kv_chunk = a->kv_chunk > 0 ? a->kv_chunk : ATTN_KV_CHUNK;
    g->q_dim = a->n_head * a->head_dim;
    g->kv_dim = a->n_head_kv * a->head_dim;
    g->group = a->n_head / a->n_head_kv;
    const dtype_traits *tr = a->kv_type == KITE_DTYPE_F32 ? NULL : dtype_get((uint32_t)a->kv_type);
    g->kv_type = a->kv_type;
    g->quantized = tr != NULL;
    g->head_bytes = tr ? (size_t)(a->head_dim / tr->block_size) * (size_t)tr->type_size
                       : sizeof(float) * (size_t)a->head_dim;
    g->row_bytes = (size_t)a->n_head_kv * g->head_bytes;
    g->ops = attn_ops_active();
    const size_t hd = (size_t)a->head_dim, bq = (size_t)g->q_tile, bk = (size_t)g->kv_tile;
    /* flash: S[bq][bk], Kt[hd][bk], acc[bq][hd], qs[bq][hd], m[bq], l[bq], Vd[bk][hd] (dequantized
     * rows of a tile; the slice is the same whatever kv_type, so callers size scratch without it) */
    size_t s = bq * bk + hd * bk + 2 * bq * hd + 2 * bq + bk * hd;
    if ((size_t)a->n_ctx + hd > s) s = (size_t)a->n_ctx + hd; /* reference: one row of scores + a K/V row */
    if ((size_t)g->kv_chunk + 2 * hd > s) s = (size_t)g->kv_chunk + 2 * hd; /* split-KV: scores, scaled q, row */
    /* split-KV grouped jobs (quantized cache, f32 GQA): ATTN_DEQ_ROWS dequantized rows, then scaled q and
     * chunk scores of each head of a kv-head group */
    const size_t grouped = ATTN_DEQ_ROWS * hd + (size_t)g->group * (hd + (size_t)g->kv_chunk);
    if (grouped > s) s = grouped;
    g->slice = (s + 15) & ~(size_t)15;
}

int32_t kern_attention_first_read(const attn_args *a, int32_t pos) {
    attn_geom g;
    attn_geom_init(&g, a);
    return attn_win_lo(a, pos) / g.kv_tile * g.kv_tile; /* split-KV and the reference start at the window */
}

size_t kern_attention_scratch_floats(const attn_args *a, int n_threads) {
    attn_geom g;
    attn_geom_init(&g, a);
    /* split-KV partials for up to ATTN_SPLITKV_MAX_TOK queries at a time
     * (attn_splitkv takes longer batches in groups of that many) */
    const size_t n_rows = (size_t)(a->n_tok < ATTN_SPLITKV_MAX_TOK ? a->n_tok : ATTN_SPLITKV_MAX_TOK);
    const size_t partials =
        n_rows * (size_t)a->n_head * (size_t)attn_n_chunks(a->n_ctx, g.kv_chunk) * attn_partial_floats(a->head_dim);
    return (size_t)(n_threads > 0 ? n_threads : 1) * g.slice + partials;
}

double attn_work(const attn_args *a) {
    /* query t reads pos0 + t + 1 keys: QK and PV are head_dim multiply-adds each */
    const double n = (double)a->n_tok, kv = (double)a->pos0 + (n + 1.0) / 2.0;
    return n * kv * (double)a->n_head * 2.0 * (double)a->head_dim;
}

typedef struct ref_task {
    const attn_args *a;
    const attn_geom *g;
} ref_task;

static void ref_part(void *arg, int ith, int nth) {
    const ref_task *rt = arg;
    const attn_args *a = rt->a;
    const attn_geom *g = rt->g;
    const int32_t hd = a->head_dim;
    float *score = a->scratch + (size_t)ith * g->slice;
    float *row = score + a->n_ctx; /* [head_dim] one dequantized K/V row */
    long lo, hi;
    tp_split((long)a->n_tok * a->n_head, ith, nth, &lo, &hi);
    for (long job = lo; job < hi; job++) {
        const int32_t t = (int32_t)(job / a->n_head), h = (int32_t)(job % a->n_head);
        const int32_t n_kv = a->pos0 + t + 1; /* causal: positions p0..pos0+t */
        const int32_t p0 = attn_win_lo(a, a->pos0 + t);
        const float *q = a->q + (size_t)t * g->q_dim + (size_t)h * hd;
        const int32_t kvh = h / g->group;
        for (int32_t p = p0; p < n_kv; p++) {
            int32_t run;
            const float *k = attn_kv_row(g, a->k_cache, attn_row_run(a, p, &run), kvh, hd, row);
            score[p - p0] = kern_dot_f32(q, k, hd) * a->scale;
        }
        if (a->softcap > 0.0f) attn_softcap(score, n_kv - p0, a->softcap);
        kern_softmax_ref(score, n_kv - p0); /* libm expf at every level: the specification */
        float *out = a->out + (size_t)t * g->q_dim + (size_t)h * hd;
        memset(out, 0, sizeof(float) * (size_t)hd);
        for (int32_t p = p0; p < n_kv; p++) {
            int32_t run;
            g->ops->axpy(out, score[p - p0], attn_kv_row(g, a->v_cache, attn_row_run(a, p, &run), kvh, hd, row), hd);
        }
    }
}

void kern_attention(threadpool *tp, const attn_args *a) { kern_attention_with(attn_ops_active(), tp, a); }

void kern_attention_with(const attn_ops *ops, threadpool *tp, const attn_args *a) {
    KITE_ASSERT(ops != NULL);
    KITE_ASSERT(a->n_tok >= 1 && a->pos0 >= 0 && a->pos0 + a->n_tok <= a->n_ctx && a->n_head_kv >= 1 &&
                (!a->block_table || a->block_size >= 1) && a->window >= 0 && a->softcap >= 0.0f &&
                a->n_head % a->n_head_kv == 0 && a->head_dim >= 1);
    KITE_ASSERT(a->kv_type == KITE_DTYPE_F32 || a->kv_type == KITE_DTYPE_F16 ||
                ((a->kv_type == KITE_DTYPE_Q8_0 || a->kv_type == KITE_DTYPE_Q4_0) && a->head_dim % 32 == 0));
    attn_geom g;
    attn_geom_init(&g, a);
    g.ops = ops;
    int path = a->path;
    if (path == ATTN_PATH_AUTO) path = a->n_tok <= ATTN_SPLITKV_MAX_TOK ? ATTN_PATH_SPLITKV : ATTN_PATH_FLASH;
    switch (path) {
    case ATTN_PATH_REF: {
        ref_task rt = {a, &g};
        tp_run_n(tp, ref_part, &rt, tp_threads_for(tp, attn_work(a)));
        break;
    }
    case ATTN_PATH_FLASH: attn_flash(tp, a, &g); break;
    default: attn_splitkv(tp, a, &g); break;
    }
}
