/*
 * attention_flash.c - FlashAttention for prefill: fused, tiled causal
 * attention with an online softmax (docs/attention.md, "Prefill").
 *
 * A job is one (query tile of q_tile rows, head).  It walks the KV positions
 * in tiles of kv_tile, from 0 up to the last position its last row may see,
 * so tiles that every row of the query tile masks out are never touched; rows
 * that a tile masks out entirely are skipped within it.  Per tile:
 *   Kt  = the K tile of the head's kv head, transposed [head_dim][kv_tile]
 *         (once per tile, shared by the q_tile rows);
 *   s_j = (q*scale) . k_j, accumulated over head_dim with j innermost, a
 *         contiguous loop that vectorises without reassociation, for
 *         FLASH_SCORE_ROWS query rows at a time (they share the loads of Kt);
 *   online softmax: m' = max(m, max_j s_j), alpha = exp(m - m'),
 *         l = l*alpha + sum_j exp(s_j - m'), acc = acc*alpha + sum_j exp(s_j - m') v_j;
 * then out = acc / l.  Memory per thread: one q_tile x kv_tile score tile,
 * the transposed K tile, the accumulators and the scaled queries (the
 * scratch slice); never an n x n matrix.  With a quantized KV cache the
 * tile's K rows are dequantized one at a time on their way into Kt and its V
 * rows once into Vd [kv_tile][head_dim], shared by the tile's query rows.
 *
 * The inner loops (K tile transpose, score tile, max, exp, V sums) go
 * through g->ops (attention_simd.h); every table gives the same bits.  The V
 * sums of up to FLASH_ROWS query rows of a tile are one axpy_rows_multi call
 * per run of consecutive rows (after every row's scores, max, exp and
 * rescale), so for a small head_dim the rows' add chains interleave; per row
 * the operations and their order are those of a row-by-row loop.
 *
 * Jobs are dealt to threads cyclically (job = ith, ith + nth, ...), which
 * balances the causal triangle; a job's arithmetic does not depend on which
 * thread runs it, so results are identical for any thread count.
 */
#include <math.h>
#include <string.h>

#include "kernels/attention_impl.h"

#define FLASH_ROWS 32 /* query rows of a tile whose V sums are one axpy_rows_multi call */
#define FLASH_SCORE_ROWS 8 /* query rows whose scores are one axpy_rows_multi call (the union of
                              their ranges: on a diagonal tile at most 7 extra columns per row) */

typedef struct flash_task {
    const attn_args *a;
    const attn_geom *g;
    int32_t n_qt; /* query tiles */
} flash_task;

static void flash_job(const attn_args *a, const attn_geom *g, int32_t qt, int32_t h, float *ws) {
    const int32_t hd = a->head_dim, bq = g->q_tile, bk = g->kv_tile;
    const int32_t t0 = qt * bq, nq = a->n_tok - t0 < bq ? a->n_tok - t0 : bq;
    const int32_t kvh = h / g->group;
    float *S = ws;                               /* [bq][bk] scores, then probabilities */
    float *Kt = S + (size_t)bq * bk;             /* [hd][bk] */
    float *acc = Kt + (size_t)hd * bk;           /* [bq][hd] */
    float *qs = acc + (size_t)bq * hd;           /* [bq][hd] scaled queries */
    float *m = qs + (size_t)bq * hd;             /* [bq] running max */
    float *l = m + bq;                           /* [bq] running sum */
    float *Vd = l + bq;                          /* [bk][hd] dequantized rows of a tile (kv_type != f32) */

    for (int32_t i = 0; i < nq; i++) {
        const float *q = a->q + (size_t)(t0 + i) * g->q_dim + (size_t)h * hd;
        for (int32_t d = 0; d < hd; d++) qs[(size_t)i * hd + d] = q[d] * a->scale;
        memset(acc + (size_t)i * hd, 0, sizeof(float) * (size_t)hd);
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const int32_t kv_end = a->pos0 + t0 + nq; /* exclusive: the last row sees pos0+t0+nq-1 */
    /* sliding window: start at the tile holding the first row's first position
     * (tile boundaries stay multiples of bk) */
    const int32_t k_first = attn_win_lo(a, a->pos0 + t0) / bk * bk;
    for (int32_t k0 = k_first; k0 < kv_end; k0 += bk) {
        const int32_t nk = kv_end - k0 < bk ? kv_end - k0 : bk;
        if (g->quantized) { /* the tile's K rows dequantized into Vd, then transposed into Kt */
            for (int32_t j = 0; j < nk; j++) {
                int32_t run;
                attn_kv_row(g, a->k_cache, attn_row_run(a, k0 + j, &run), kvh, hd, Vd + (size_t)j * hd);
            }
            g->ops->transpose(Vd, (size_t)hd, nk, hd, Kt, (size_t)bk);
        } else { /* f32: transposed from the cache, a run of consecutive rows at a time */
            for (int32_t j = 0; j < nk;) {
                int32_t run;
                const size_t row = attn_row_run_n(a, k0 + j, nk - j, &run);
                const int32_t cnt = run < nk - j ? run : nk - j;
                g->ops->transpose(attn_kv_row(g, a->k_cache, row, kvh, hd, NULL), attn_kv_ld(g), cnt, hd, Kt + j,
                                  (size_t)bk);
                j += cnt;
            }
        }
        if (g->quantized) /* quantized cache: the tile's V rows once, shared by the q_tile rows */
            for (int32_t j = 0; j < nk; j++) {
                int32_t run;
                attn_kv_row(g, a->v_cache, attn_row_run(a, k0 + j, &run), kvh, hd, Vd + (size_t)j * hd);
            }
        for (int32_t i0 = 0; i0 < nq; i0 += FLASH_ROWS) {
            const int32_t ni = nq - i0 < FLASH_ROWS ? nq - i0 : FLASH_ROWS;
            int32_t lo[FLASH_ROWS], hi[FLASH_ROWS]; /* row i0+r's unmasked positions [lo, hi) of the tile */
            int32_t jmin = nk, jmax = 0;
            for (int32_t r = 0; r < ni; r++) {
                const int32_t i = i0 + r;
                lo[r] = hi[r] = 0;
                /* row i sees positions < pos0 + t0 + i + 1 */
                const int32_t lim = a->pos0 + t0 + i + 1 - k0;
                const int32_t nj = lim < nk ? lim : nk;
                /* and positions >= the row's window start: j0 > 0 only with a window */
                const int32_t wlo = attn_win_lo(a, a->pos0 + t0 + i) - k0;
                const int32_t j0 = wlo > 0 ? wlo : 0;
                if (nj <= j0) continue; /* masked out in this whole tile */
                lo[r] = j0;
                hi[r] = nj;
                jmin = j0 < jmin ? j0 : jmin;
                jmax = nj > jmax ? nj : jmax;
            }
            /* s_i[j] = sum_d qs_i[d] Kt[d][j] (from 0, d in order) for FLASH_SCORE_ROWS rows at a time over
             * the union of their ranges (one axpy_rows_multi call: the rows share each load of Kt); a
             * column outside a row's own range is computed but never read */
            for (int32_t r0 = 0; r0 < ni; r0 += FLASH_SCORE_ROWS) {
                const int32_t rn = ni - r0 < FLASH_SCORE_ROWS ? ni - r0 : FLASH_SCORE_ROWS;
                int32_t ja = nk, jb = 0, dlo[FLASH_SCORE_ROWS], dhi[FLASH_SCORE_ROWS];
                for (int32_t r = r0; r < r0 + rn; r++) {
                    dlo[r - r0] = 0;
                    dhi[r - r0] = hd;
                    if (hi[r] <= lo[r]) continue;
                    ja = lo[r] < ja ? lo[r] : ja;
                    jb = hi[r] > jb ? hi[r] : jb;
                }
                if (jb <= ja) continue;
                float *s0 = S + (size_t)(i0 + r0) * bk;
                for (int32_t r = 0; r < rn; r++) memset(s0 + (size_t)r * bk + ja, 0, sizeof(float) * (size_t)(jb - ja));
                g->ops->axpy_rows_multi(s0 + ja, (size_t)bk, qs + (size_t)(i0 + r0) * hd, (size_t)hd, dlo, dhi, rn,
                                        Kt + ja, (size_t)bk, jb - ja);
            }
            /* online softmax, row by row */
            for (int32_t r = 0; r < ni; r++) {
                if (hi[r] <= lo[r]) continue;
                const int32_t i = i0 + r, j0 = lo[r], nj = hi[r];
                float *sr = S + (size_t)i * bk;
                if (a->softcap > 0.0f) attn_softcap(sr + j0, nj - j0, a->softcap);
                const float mx = g->ops->max(sr + j0, nj - j0);
                const float m_new = mx > m[i] ? mx : m[i];
                const float sum = g->ops->exp_sum(sr + j0, m_new, nj - j0);
                if (m_new != m[i]) {
                    const float alpha = expf(m[i] - m_new); /* 0 on the first tile (m = -inf) */
                    l[i] *= alpha;
                    g->ops->scale(acc + (size_t)i * hd, alpha, hd);
                }
                l[i] += sum;
                m[i] = m_new;
            }
            /* o_i += s_i[j] v_j, j = lo .. hi-1 in order for every row, the rows' chains interleaved
             * (axpy_rows_multi); f32 cache: one call per run of consecutive cache rows */
            float *o = acc + (size_t)i0 * hd;
            const float *p = S + (size_t)i0 * bk;
            if (g->quantized) {
                g->ops->axpy_rows_multi(o, (size_t)hd, p, (size_t)bk, lo, hi, ni, Vd, (size_t)hd, hd);
            } else {
                for (int32_t j = jmin; j < jmax;) {
                    int32_t run;
                    const size_t row = attn_row_run_n(a, k0 + j, jmax - j, &run);
                    const int32_t cnt = run < jmax - j ? run : jmax - j;
                    int32_t slo[FLASH_ROWS], shi[FLASH_ROWS]; /* the rows' ranges within [j, j + cnt), from j */
                    for (int32_t r = 0; r < ni; r++) {
                        const int32_t a0 = lo[r] > j ? lo[r] : j, a1 = hi[r] < j + cnt ? hi[r] : j + cnt;
                        slo[r] = a1 > a0 ? a0 - j : 0;
                        shi[r] = a1 > a0 ? a1 - j : 0;
                    }
                    g->ops->axpy_rows_multi(o, (size_t)hd, p + j, (size_t)bk, slo, shi, ni,
                                            attn_kv_row(g, a->v_cache, row, kvh, hd, NULL), attn_kv_ld(g), hd);
                    j += cnt;
                }
            }
        }
    }
    for (int32_t i = 0; i < nq; i++) {
        float *out = a->out + (size_t)(t0 + i) * g->q_dim + (size_t)h * hd;
        const float inv = 1.0f / l[i];
        const float *o = acc + (size_t)i * hd;
        for (int32_t d = 0; d < hd; d++) out[d] = o[d] * inv;
    }
}

static void flash_part(void *arg, int ith, int nth) {
    const flash_task *ft = arg;
    const attn_args *a = ft->a;
    float *ws = a->scratch + (size_t)ith * ft->g->slice;
    const long n_jobs = (long)ft->n_qt * a->n_head;
    for (long job = ith; job < n_jobs; job += nth)
        flash_job(a, ft->g, (int32_t)(job / a->n_head), (int32_t)(job % a->n_head), ws);
}

void attn_flash(threadpool *tp, const attn_args *a, const attn_geom *g) {
    flash_task ft = {a, g, (a->n_tok + g->q_tile - 1) / g->q_tile};
    tp_run_n(tp, flash_part, &ft, tp_threads_for(tp, attn_work(a)));
}
