/*
 * attention_splitkv.c - decode attention: FlashDecoding's split of the KV
 * sequence with FlashDecoding++'s asynchronized softmax (docs/attention.md,
 * "Decode").
 *
 * For query row r (a token) and head h the positions 0..n_kv-1 are cut into
 * chunks of kv_chunk positions at fixed boundaries (c*kv_chunk), and a job is
 * one (row, head, chunk).  A job computes, with no knowledge of the other
 * chunks and no shared running maximum:
 *     l_c = sum_j exp(s_j - phi),  acc_c = sum_j exp(s_j - phi) v_j,  m_c = max_j s_j
 * where s_j = (q*scale) . k_j and phi is the unified maximum (a per-model,
 * or per-layer and per-head, constant: attn_args.phi or phi_head).  After the
 * parallel phase the calling thread combines each row in chunk order:
 * out = (sum_c acc_c) / (sum_c l_c).  This equals softmax(s) V exactly in
 * real arithmetic whatever phi is; in float it is as accurate as the
 * max-subtracted form while m_c stays within ATTN_PHI_RANGE of phi (see the
 * doc for the bounds).
 *
 * Safety, per chunk: a job has all of its chunk's scores (and so m_c) before
 * any exp, so a chunk whose m_c leaves the window subtracts m_c instead of
 * phi (the exact method, FlashDecoding's) at no extra cost; a chunk whose
 * sums come out non-finite against phi (|v| near FLT_MAX / e^40) is computed
 * again against m_c.  Either way the partial records the value it
 * subtracted (ref), and a row with any such chunk is combined with
 * FlashDecoding's rescaling, each chunk weighted by exp(ref_c - max ref).
 * Those chunks are counted in attn_stats.n_recompute.  attn_args.phi_mode =
 * ATTN_PHI_EXACT makes every chunk take the exact method.
 *
 * Sliding window (attn_args.window): a row's chunks before the one holding its
 * first position are skipped and that chunk starts at the first position;
 * the chunk boundaries themselves do not move.
 *
 * Quantized KV cache, and f32 GQA when that still leaves a job per thread: a
 * job is one (row, kv head, chunk) instead, covering the n_head/n_head_kv
 * query heads of that kv head, so each K and V row of the chunk is read (f32,
 * in place, in tiles of ATTN_F32_TILE rows that stay in L1) or dequantized
 * (ATTN_DEQ_ROWS rows at a time into a buffer of the thread's slice) once for
 * all of them; per head the arithmetic and its order are those of the
 * per-head job, so the result equals the f32 path on the dequantized rows bit
 * for bit, and which job shape runs never changes a bit.
 *
 * Inner loops go through g->ops (attention_simd.h): on an f32 cache a run of
 * consecutive rows is one dot_rows call for the scores and one axpy_rows call
 * for the V sum (a grouped job: one axpy_rows_multi call for the group's
 * heads, whose add chains then interleave, each head's in axpy_rows's order);
 * every table gives the same bits.
 *
 * Determinism: chunk boundaries and the combination order depend only on the
 * positions, never on the thread count or on which thread ran a chunk, so
 * the result is bit-identical for any number of threads.  Batches of more
 * than ATTN_SPLITKV_MAX_TOK queries (only when the path is forced) run in
 * groups of that many, one pool dispatch per group.
 */
#include <math.h>
#include <string.h>

#include "kernels/attention_impl.h"

/* Split-KV grouped jobs read one kv head's head_bytes of every row_bytes of the cache, a stride the
 * hardware prefetchers follow badly: the tile dequantizing row i asks for row i + ATTN_PF_ROWS (the next
 * tile's).  f16 KV at 4096 positions (TinyLlama shape, 2 threads, 22 layers): 15.3 -> 10.7 ms per token
 * (distances 16: 10.8, 64: 11.5, 96: 12.2). */
#ifndef ATTN_PF_ROWS
#define ATTN_PF_ROWS 32
#endif

typedef struct split_task {
    const attn_args *a;
    const attn_geom *g;
    float *partials;      /* [n_rows][n_head][n_chunks][head_dim + 2], after the per-thread slices */
    int32_t t0, n_rows;   /* query rows t0 .. t0+n_rows-1 */
    int32_t n_chunks;     /* chunks of the longest row (the last) */
} split_task;

/* Unified maximum of query head h. */
static float head_phi(const attn_args *a, int32_t h) { return a->phi_head ? a->phi_head[h] : a->phi; }

/* The value a chunk whose maximum score is mx subtracts: phi while mx is
 * within ATTN_PHI_RANGE of it, else mx (also for a NaN mx or phi). */
static float chunk_ref(float mx, float phi, int32_t mode) {
    if (mode == ATTN_PHI_EXACT) return mx;
    return mx - phi <= ATTN_PHI_RANGE && mx - phi >= -ATTN_PHI_RANGE ? phi : mx;
}

/* A partial against phi that must be computed again against its own maximum:
 * it subtracted phi (not already m) and its sums are not finite. */
static int needs_recompute(const float *part, int32_t hd) {
    if (!(part[hd + 2] != part[hd + 1])) return 0;
    if (!(part[hd] > 0.0f && part[hd] <= 3.0e38f)) return 1;
    for (int32_t d = 0; d < hd; d++)
        if (!(fabsf(part[d]) <= 3.0e38f)) return 1;
    return 0;
}

static float *partial_at(const split_task *st, int32_t r, int32_t h, int32_t c) {
    const size_t idx = ((size_t)r * (size_t)st->a->n_head + (size_t)h) * (size_t)st->n_chunks + (size_t)c;
    return st->partials + idx * attn_partial_floats(st->a->head_dim);
}

/* One chunk [p0, p1) of row (qs = scaled query, kv head kvh) against phi
 * (chunk_ref): part = acc[head_dim], l, m, ref.  sbuf: p1 - p0 floats; tmp:
 * head_dim floats (one dequantized row when the cache is not f32). */
static void chunk_partial(const attn_args *a, const attn_geom *g, const float *qs, int32_t kvh, int32_t p0,
                          int32_t p1, float phi, int32_t mode, float *sbuf, float *tmp, float *part) {
    const int32_t hd = a->head_dim, n = p1 - p0;
    float mx = -INFINITY;
    for (int32_t j = 0; j < n;) { /* runs of consecutive cache rows (one block each when paged) */
        int32_t run;
        size_t row = attn_row_run_n(a, p0 + j, n - j, &run);
        const int32_t end = run < n - j ? j + run : n;
        if (!g->quantized) /* f32: the run's rows in place, one call */
            g->ops->dot_rows(qs, attn_kv_row(g, a->k_cache, row, kvh, hd, NULL), attn_kv_ld(g), end - j, hd, sbuf + j);
        else
            for (int32_t jj = j; jj < end; jj++, row++)
                sbuf[jj] = g->ops->dot(qs, attn_kv_row(g, a->k_cache, row, kvh, hd, tmp), hd);
        if (a->softcap > 0.0f) attn_softcap(sbuf + j, end - j, a->softcap);
        for (; j < end; j++) mx = sbuf[j] > mx ? sbuf[j] : mx;
    }
    const float ref = chunk_ref(mx, phi, mode);
    const float l = g->ops->exp_sum(sbuf, ref, n);
    memset(part, 0, sizeof(float) * (size_t)hd);
    for (int32_t j = 0; j < n;) {
        int32_t run;
        size_t row = attn_row_run_n(a, p0 + j, n - j, &run);
        const int32_t end = run < n - j ? j + run : n;
        if (!g->quantized)
            g->ops->axpy_rows(part, sbuf + j, attn_kv_row(g, a->v_cache, row, kvh, hd, NULL), attn_kv_ld(g), end - j,
                              hd);
        else
            for (int32_t jj = j; jj < end; jj++, row++)
                g->ops->axpy(part, sbuf[jj], attn_kv_row(g, a->v_cache, row, kvh, hd, tmp), hd);
        j = end;
    }
    part[hd] = l;
    part[hd + 1] = mx;
    part[hd + 2] = ref;
}

static void scaled_query(const attn_args *a, const attn_geom *g, int32_t t, int32_t h, float *qs) {
    const float *q = a->q + (size_t)t * g->q_dim + (size_t)h * a->head_dim;
    for (int32_t d = 0; d < a->head_dim; d++) qs[d] = q[d] * a->scale;
}

/* Rows of kv head kvh at positions pos .. pos + *cnt - 1 (0 < *cnt <= left),
 * *ld floats apart: an f32 cache's rows in place (part of one run of
 * consecutive rows, at most ATTN_F32_TILE, so the tile stays in L1 while the
 * group's heads use it), otherwise ATTN_DEQ_ROWS rows dequantized into tmp. */
static const float *group_tile(const attn_args *a, const attn_geom *g, const void *base, int32_t kvh, int32_t pos,
                               int32_t left, float *tmp, size_t *ld, int32_t *cnt) {
    const int32_t hd = a->head_dim;
    if (!g->quantized) {
        int32_t run;
        const size_t row = attn_row_run_n(a, pos, left < ATTN_F32_TILE ? left : ATTN_F32_TILE, &run);
        *cnt = run < left ? run : left;
        if (*cnt > ATTN_F32_TILE) *cnt = ATTN_F32_TILE;
        *ld = attn_kv_ld(g);
        return attn_kv_row(g, base, row, kvh, hd, NULL);
    }
    *cnt = left < ATTN_DEQ_ROWS ? left : ATTN_DEQ_ROWS;
    for (int32_t i = 0; i < *cnt; i++) {
        int32_t run;
        if (i + ATTN_PF_ROWS < left) { /* the row ATTN_PF_ROWS on: its lines while this tile is computed */
            const unsigned char *p = (const unsigned char *)base +
                                     attn_row_run(a, pos + i + ATTN_PF_ROWS, &run) * g->row_bytes +
                                     (size_t)kvh * g->head_bytes;
            for (size_t o = 0; o < g->head_bytes; o += 64) __builtin_prefetch(p + o);
        }
        attn_kv_row(g, base, attn_row_run(a, pos + i, &run), kvh, hd, tmp + (size_t)i * hd);
    }
    *ld = (size_t)hd;
    return tmp;
}

/* chunk_partial for the `group` query heads kvh*group.. that share kv head
 * kvh: each tile of K and V rows (group_tile) is read or dequantized once
 * for all of them.  Per head the arithmetic is chunk_partial's, in the same
 * order, so the partials are bit-identical to it.  qs: [group][head_dim]
 * scaled queries; sb: [group][kv_chunk] scores; tmp: [ATTN_DEQ_ROWS][head_dim]. */
static void chunk_partial_group(const split_task *st, const float *qs, int32_t r, int32_t kvh, int32_t c,
                                int32_t p0, int32_t p1, float *sb, float *tmp) {
    const attn_args *a = st->a;
    const attn_geom *g = st->g;
    const int32_t hd = a->head_dim, n = p1 - p0, G = g->group, C = g->kv_chunk;
    for (int32_t j = 0; j < n;) {
        size_t ld;
        int32_t cnt;
        const float *k = group_tile(a, g, a->k_cache, kvh, p0 + j, n - j, tmp, &ld, &cnt);
        for (int32_t gi = 0; gi < G; gi++) g->ops->dot_rows(qs + (size_t)gi * hd, k, ld, cnt, hd, sb + (size_t)gi * C + j);
        j += cnt;
    }
    for (int32_t gi = 0; gi < G; gi++) {
        float *part = partial_at(st, r, kvh * G + gi, c);
        const float *s = sb + (size_t)gi * C;
        if (a->softcap > 0.0f) attn_softcap(sb + (size_t)gi * C, n, a->softcap);
        /* the max from -inf: ops->max (the sequential rule from s[0]) gives the same value unless s[0] is NaN */
        float mx = g->ops->max(s, n);
        if (mx != mx) {
            mx = -INFINITY;
            for (int32_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
        }
        const float ref = chunk_ref(mx, head_phi(a, kvh * G + gi), a->phi_mode);
        part[hd + 1] = mx;
        part[hd + 2] = ref;
        part[hd] = g->ops->exp_sum(sb + (size_t)gi * C, ref, n);
        memset(part, 0, sizeof(float) * (size_t)hd);
    }
    for (int32_t j = 0; j < n;) {
        size_t ld;
        int32_t cnt;
        const float *v = group_tile(a, g, a->v_cache, kvh, p0 + j, n - j, tmp, &ld, &cnt);
        /* the group's heads over this tile in one call (their add chains interleave; per head the
         * adds of axpy_rows in the same order): head gi's partial is gi * ldp floats after the first */
        int32_t lo[8] = {0}, hi[8];
        for (int32_t gi = 0; gi < 8; gi++) hi[gi] = cnt;
        const size_t ldp = (size_t)st->n_chunks * attn_partial_floats(hd);
        for (int32_t g0 = 0; g0 < G; g0 += 8)
            g->ops->axpy_rows_multi(partial_at(st, r, kvh * G + g0, c), ldp, sb + (size_t)g0 * C + j, (size_t)C, lo,
                                    hi, G - g0 < 8 ? G - g0 : 8, v, ld, hd);
        j += cnt;
    }
    /* sums that overflowed against phi: that head again, alone, against its maximum (chunk_partial is
     * this function's per-head arithmetic; sb's first kv_chunk floats and tmp are free now) */
    for (int32_t gi = 0; gi < G; gi++) {
        float *part = partial_at(st, r, kvh * G + gi, c);
        if (needs_recompute(part, hd))
            chunk_partial(a, g, qs + (size_t)gi * hd, kvh, p0, p1, 0.0f, ATTN_PHI_EXACT, sb, tmp, part);
    }
}

/* Grouped jobs (quantized caches, and f32 GQA when there are enough of them):
 * a job is one (row, kv head, chunk), for all the query heads of that kv head. */
static void split_part_grouped(void *arg, int ith, int nth) {
    const split_task *st = arg;
    const attn_args *a = st->a;
    const attn_geom *g = st->g;
    const int32_t hd = a->head_dim, G = g->group;
    float *tmp = a->scratch + (size_t)ith * g->slice; /* [ATTN_DEQ_ROWS][head_dim] */
    float *qs = tmp + (size_t)ATTN_DEQ_ROWS * hd;     /* [group][head_dim] */
    float *sb = qs + (size_t)G * hd;                  /* [group][kv_chunk] */
    const long per_row = (long)a->n_head_kv * st->n_chunks;
    const long n_jobs = (long)st->n_rows * per_row;
    int32_t qs_t = -1, qs_kvh = -1;
    for (long job = ith; job < n_jobs; job += nth) {
        const int32_t r = (int32_t)(job / per_row);
        const int32_t kvh = (int32_t)(job % per_row / st->n_chunks);
        const int32_t c = (int32_t)(job % st->n_chunks);
        const int32_t t = st->t0 + r;
        const int32_t n_kv = a->pos0 + t + 1;
        const int32_t lo = attn_win_lo(a, a->pos0 + t);
        int32_t p0 = c * g->kv_chunk;
        if (p0 >= n_kv) continue;
        const int32_t p1 = p0 + g->kv_chunk < n_kv ? p0 + g->kv_chunk : n_kv;
        if (p1 <= lo) continue;
        if (p0 < lo) p0 = lo;
        if (t != qs_t || kvh != qs_kvh) {
            for (int32_t gi = 0; gi < G; gi++) scaled_query(a, g, t, kvh * G + gi, qs + (size_t)gi * hd);
            qs_t = t;
            qs_kvh = kvh;
        }
        chunk_partial_group(st, qs, r, kvh, c, p0, p1, sb, tmp);
    }
}

static void split_part(void *arg, int ith, int nth) {
    const split_task *st = arg;
    const attn_args *a = st->a;
    const attn_geom *g = st->g;
    float *sbuf = a->scratch + (size_t)ith * g->slice; /* [kv_chunk] scores */
    float *qs = sbuf + g->kv_chunk;                    /* [head_dim] */
    float *tmp = qs + a->head_dim;                     /* [head_dim] a dequantized K/V row */
    const long per_row = (long)a->n_head * st->n_chunks;
    const long n_jobs = (long)st->n_rows * per_row;
    int32_t qs_t = -1, qs_h = -1;
    for (long job = ith; job < n_jobs; job += nth) {
        const int32_t r = (int32_t)(job / per_row);
        const int32_t h = (int32_t)(job % per_row / st->n_chunks);
        const int32_t c = (int32_t)(job % st->n_chunks);
        const int32_t t = st->t0 + r;
        const int32_t n_kv = a->pos0 + t + 1;
        const int32_t lo = attn_win_lo(a, a->pos0 + t);
        int32_t p0 = c * g->kv_chunk;
        if (p0 >= n_kv) continue; /* beyond this row's causal limit */
        const int32_t p1 = p0 + g->kv_chunk < n_kv ? p0 + g->kv_chunk : n_kv;
        if (p1 <= lo) continue;  /* before this row's sliding window */
        if (p0 < lo) p0 = lo;
        if (t != qs_t || h != qs_h) {
            scaled_query(a, g, t, h, qs);
            qs_t = t;
            qs_h = h;
        }
        float *part = partial_at(st, r, h, c);
        chunk_partial(a, g, qs, h / g->group, p0, p1, head_phi(a, h), a->phi_mode, sbuf, tmp, part);
        if (needs_recompute(part, a->head_dim)) /* sums overflowed against phi: again against the maximum */
            chunk_partial(a, g, qs, h / g->group, p0, p1, 0.0f, ATTN_PHI_EXACT, sbuf, tmp, part);
    }
}

/* out = sum_c acc_c over chunks c0..nc-1, returns sum_c l_c, sets *m_out =
 * max_c m_c, *m_lo = min_c m_c and *n_left to the chunks that did not subtract phi.  Without
 * such chunks the partials add as they are (FlashDecoding++); otherwise each
 * is weighted by exp(ref_c - max_c ref_c) (FlashDecoding's rescaling; libm
 * expf, on the calling thread, so every level and thread count gives the
 * same bits). */
static float sum_partials(const split_task *st, int32_t r, int32_t h, int32_t c0, int32_t nc, float phi,
                          float *out, float *m_out, float *m_lo, int32_t *n_left) {
    const int32_t hd = st->a->head_dim;
    float l = 0.0f, m = -INFINITY, top = -INFINITY, lo = INFINITY;
    int32_t left = 0;
    for (int32_t c = c0; c < nc; c++) {
        const float *p = partial_at(st, r, h, c);
        left += !(p[hd + 2] == phi);
        top = p[hd + 2] > top ? p[hd + 2] : top;
        m = p[hd + 1] > m ? p[hd + 1] : m;
        lo = p[hd + 1] < lo ? p[hd + 1] : lo;
    }
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int32_t c = c0; c < nc; c++) {
        const float *p = partial_at(st, r, h, c);
        const float w = left ? expf(p[hd + 2] - top) : 1.0f;
        st->g->ops->axpy(out, w, p, hd);
        l += left ? w * p[hd] : p[hd];
    }
    *m_out = m;
    *m_lo = lo;
    *n_left = left;
    return l;
}

static int row_finite(const float *out, int32_t hd, float l) {
    if (!(l > 0.0f && l <= 3.0e38f)) return 0;
    for (int32_t d = 0; d < hd; d++)
        if (!(fabsf(out[d]) <= 3.0e38f)) return 0;
    return 1;
}

/* Combines every row of the group, on the caller.  A row whose chunks are
 * finite but whose sum overflows (|v| ~ 1e17 with a maximum near phi + 40)
 * has its chunks that subtracted phi computed again against their own
 * maximum, here, and is combined again. */
static void combine(const split_task *st) {
    const attn_args *a = st->a;
    const attn_geom *g = st->g;
    const int32_t hd = a->head_dim;
    float *sbuf = a->scratch; /* the caller's slice: free after the parallel phase */
    float *qs = sbuf + g->kv_chunk;
    float *tmp = qs + hd;
    for (int32_t r = 0; r < st->n_rows; r++) {
        const int32_t t = st->t0 + r, n_kv = a->pos0 + t + 1;
        const int32_t nc = attn_n_chunks(n_kv, g->kv_chunk);
        const int32_t lo = attn_win_lo(a, a->pos0 + t), c0 = lo / g->kv_chunk; /* first chunk in the window */
        for (int32_t h = 0; h < a->n_head; h++) {
            float *out = a->out + (size_t)t * g->q_dim + (size_t)h * hd;
            float m, m_lo;
            int32_t left;
            const float phi = head_phi(a, h);
            float l = sum_partials(st, r, h, c0, nc, phi, out, &m, &m_lo, &left);
            if (!row_finite(out, hd, l) && left < nc - c0) {
                scaled_query(a, g, t, h, qs);
                for (int32_t c = c0; c < nc; c++) {
                    float *part = partial_at(st, r, h, c);
                    if (!(part[hd + 2] == phi)) continue;
                    const int32_t p0 = c * g->kv_chunk > lo ? c * g->kv_chunk : lo;
                    const int32_t p1 = c * g->kv_chunk + g->kv_chunk < n_kv ? c * g->kv_chunk + g->kv_chunk : n_kv;
                    chunk_partial(a, g, qs, h / g->group, p0, p1, 0.0f, ATTN_PHI_EXACT, sbuf, tmp, part);
                }
                l = sum_partials(st, r, h, c0, nc, phi, out, &m, &m_lo, &left);
            }
            g->ops->scale(out, 1.0f / l, hd);
            if (a->chunk_max) {
                a->chunk_max[((size_t)t * a->n_head + h) * 2] = m_lo;
                a->chunk_max[((size_t)t * a->n_head + h) * 2 + 1] = m;
            }
            if (a->stats) {
                attn_stats *s = a->stats;
                if (a->phi_mode == ATTN_PHI_EXACT) left = 0;
                if (s->n_rows == 0 || m < s->row_max_lo) s->row_max_lo = m;
                if (s->n_rows == 0 || m > s->row_max_hi) s->row_max_hi = m;
                s->n_rows++;
                s->n_fallback += left > 0;
                s->n_chunks += nc - c0;
                s->n_recompute += left;
            }
        }
    }
}

void attn_splitkv(threadpool *tp, const attn_args *a, const attn_geom *g) {
    split_task st = {.a = a, .g = g, .partials = a->scratch + (size_t)tp_n_threads(tp) * g->slice};
    for (int32_t t0 = 0; t0 < a->n_tok; t0 += ATTN_SPLITKV_MAX_TOK) {
        st.t0 = t0;
        st.n_rows = a->n_tok - t0 < ATTN_SPLITKV_MAX_TOK ? a->n_tok - t0 : ATTN_SPLITKV_MAX_TOK;
        st.n_chunks = attn_n_chunks(a->pos0 + t0 + st.n_rows, g->kv_chunk);
        attn_args group = *a;
        group.n_tok = st.n_rows;
        group.pos0 = a->pos0 + t0;
        int nth = tp_threads_for(tp, attn_work(&group));
        /* grouped jobs read each K/V tile once per kv head instead of once per query head; f32 takes
         * them when they still give every thread a job (the bits are the same either way) */
        const long n_grouped = (long)st.n_rows * a->n_head_kv * st.n_chunks;
        const int grouped = g->quantized || (g->group > 1 && n_grouped >= nth);
        const long n_jobs = grouped ? n_grouped : (long)st.n_rows * a->n_head * st.n_chunks;
        if (nth > n_jobs) nth = (int)n_jobs;
        tp_run_n(tp, grouped ? split_part_grouped : split_part, &st, nth);
        combine(&st);
    }
}
