/*
 * ppl.c - perplexity: window plans and the scoring loop (`kite ppl`).
 *
 * DESIGN
 *   A plan is computed before anything is evaluated, so the list of target
 *   ids is known up front (the logits file stores it in its header, and a
 *   --kld-base file is checked against it before the first forward pass).
 *
 *   Windows: BOS (EVAL_PLAN_BOS) + L text tokens, L = n_ctx - 1 (n_ctx
 *   without BOS); the text is cut into consecutive non-overlapping windows.
 *   Window index j's logits predict index j + 1.  Scored targets are window
 *   indices first..len-1 with first = 1 (every token after the first), or
 *   first = n_ctx/2 + 1 with EVAL_PLAN_HALF (llama.cpp's perplexity: the
 *   first half is context only; partial windows are skipped).  EVAL_PLAN_DOCS
 *   makes one window per eval_plan_add call, truncated to n_ctx (the golden
 *   stories260K protocol: one story per sequence, cut at seq_len).
 *   EVAL_PLAN_LLAMACPP cuts the text exactly as llama-perplexity does (n_ctx
 *   text tokens per window, BOS written over the first, the HALF targets), so
 *   that a logits file written by either tool scores the same tokens in the
 *   other.
 *
 *   The run uses only the public API: kite_ctx_truncate(ctx, 0), then
 *   kite_ctx_eval(all_logits) over the window in n_batch chunks, then
 *   kite_ctx_logits for each scored row.  Rows are scored in double
 *   (stats.c).
 *
 * THREAD SAFETY
 *   A plan belongs to one thread; eval_ppl_run drives one kite_ctx.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "eval/eval.h"
#include "model/context.h"

int eval_plan_init(eval_plan *p, int32_t n_ctx, uint32_t flags, kite_token bos) {
    if (!p) return err_set(KITE_E_ARG, "eval_plan_init: NULL plan");
    if (flags & ~EVAL_PLAN_KNOWN_FLAGS) return err_set(KITE_E_ARG, "eval_plan_init: unknown flags 0x%x", flags);
    const int32_t min_ctx = (flags & EVAL_PLAN_BOS) ? 3 : 2;
    if (n_ctx < min_ctx) return err_set(KITE_E_ARG, "context of %d tokens is too short (need >= %d)", n_ctx, min_ctx);
    if ((flags & EVAL_PLAN_BOS) && bos < 0) return err_set(KITE_E_ARG, "eval_plan_init: BOS requested but bos < 0");
    if ((flags & EVAL_PLAN_LLAMACPP) && (flags & (EVAL_PLAN_HALF | EVAL_PLAN_DOCS)))
        return err_set(KITE_E_ARG, "eval_plan_init: llama.cpp windows cannot be combined with HALF or DOCS");
    memset(p, 0, sizeof *p);
    p->n_ctx = n_ctx;
    p->flags = flags;
    p->bos = bos;
    return KITE_OK;
}

/* Makes room for window number n_win (0-based) of up to n_ctx tokens. */
static int plan_reserve(eval_plan *p, int32_t n_win) {
    if (n_win + 1 >= p->cap_win) {
        if (p->cap_win > INT32_MAX / 2) return err_set(KITE_E_NOMEM, "too many windows");
        const int32_t cap = p->cap_win ? p->cap_win * 2 : 16;
        int64_t *off = realloc(p->win_off, sizeof *off * ((size_t)cap + 1));
        if (!off) return err_set(KITE_E_NOMEM, "out of memory for the window plan");
        p->win_off = off;
        int32_t *first = realloc(p->first, sizeof *first * (size_t)cap);
        if (!first) return err_set(KITE_E_NOMEM, "out of memory for the window plan");
        p->first = first;
        p->cap_win = cap;
        if (n_win == 0) p->win_off[0] = 0;
    }
    const int64_t used = p->win_off[n_win];
    if (used + p->n_ctx > p->cap_tok) {
        int64_t cap = p->cap_tok ? p->cap_tok * 2 : 4096;
        while (cap < used + p->n_ctx) cap *= 2;
        kite_token *t = realloc(p->tokens, sizeof *t * (size_t)cap);
        if (!t) return err_set(KITE_E_NOMEM, "out of memory for the window plan");
        p->tokens = t;
        p->cap_tok = cap;
    }
    return KITE_OK;
}

int eval_plan_add(eval_plan *p, const kite_token *text, int64_t n) {
    if (!p || (!text && n > 0) || n < 0) return err_set(KITE_E_ARG, "eval_plan_add: bad arguments");
    const bool bos = (p->flags & EVAL_PLAN_BOS) != 0;
    bool half = (p->flags & EVAL_PLAN_HALF) != 0;
    const bool docs = (p->flags & EVAL_PLAN_DOCS) != 0;
    const bool lcpp = (p->flags & EVAL_PLAN_LLAMACPP) != 0;
    if (lcpp) half = true; /* the same scored half, but BOS overwrites a text token */
    const int64_t per_win = p->n_ctx - (bos && !lcpp ? 1 : 0); /* text tokens per window */
    const int lead = bos && !lcpp; /* BOS tokens inserted before the text of a window */
    /* Work on copies of the counters so that the plan is unchanged on error. */
    int32_t n_windows = p->n_windows;
    int64_t n_scored = p->n_scored, n_unscored = p->n_unscored, n_truncated = p->n_truncated;
    int64_t pos = 0;
    while (pos < n) {
        int64_t take = n - pos < per_win ? n - pos : per_win;
        const int64_t len = take + lead;
        const int32_t first = half ? p->n_ctx / 2 + 1 : 1;
        if (half && len < p->n_ctx) { /* partial window: llama.cpp skips it */
            n_unscored += n - pos;
            pos = n;
            break;
        }
        if (len <= first) { /* nothing to score (a lone token without BOS) */
            n_unscored += take;
            pos += take;
        } else {
            int rc = plan_reserve(p, n_windows);
            if (rc != KITE_OK) return rc;
            kite_token *dst = p->tokens + p->win_off[n_windows];
            if (lead) *dst++ = p->bos;
            memcpy(dst, text + pos, sizeof *dst * (size_t)take);
            if (lcpp && bos) dst[0] = p->bos;
            p->first[n_windows] = first;
            p->win_off[n_windows + 1] = p->win_off[n_windows] + len;
            n_windows++;
            n_scored += len - first;
            /* text tokens at window index < first are not targets */
            n_unscored += first - lead;
            pos += take;
        }
        if (docs) {
            n_truncated += n - pos;
            n_unscored += n - pos;
            pos = n;
        }
    }
    p->n_windows = n_windows;
    p->n_scored = n_scored;
    p->n_unscored = n_unscored;
    p->n_truncated = n_truncated;
    p->n_text += n;
    return KITE_OK;
}

void eval_plan_targets(const eval_plan *p, kite_token *out) {
    int64_t k = 0;
    for (int32_t w = 0; w < p->n_windows; w++) {
        const kite_token *win = p->tokens + p->win_off[w];
        const int64_t len = p->win_off[w + 1] - p->win_off[w];
        for (int64_t j = p->first[w]; j < len; j++) out[k++] = win[j];
    }
    KITE_ASSERT(k == p->n_scored);
}

void eval_plan_free(eval_plan *p) {
    if (!p) return;
    free(p->win_off);
    free(p->first);
    free(p->tokens);
    memset(p, 0, sizeof *p);
}

int eval_ppl_run(kite_ctx *ctx, const eval_plan *p, const eval_ppl_opts *o, eval_stats *s) {
    if (!ctx || !p || !o || !s) return err_set(KITE_E_ARG, "eval_ppl_run: NULL argument");
    if (kite_ctx_n_ctx(ctx) < p->n_ctx)
        return err_set(KITE_E_ARG, "eval_ppl_run: context holds %d positions, the plan needs %d", kite_ctx_n_ctx(ctx),
                       p->n_ctx);
    memset(s, 0, sizeof *s);
    int rc = KITE_OK;
    const int32_t n_batch = o->n_batch > 0 ? o->n_batch : p->n_ctx;
    const int32_t n_vocab = o->n_vocab;
    if (n_vocab < 1) return err_set(KITE_E_ARG, "eval_ppl_run: n_vocab %d", n_vocab);
    const bool by_size = ctx->attn_by_size; /* scoring, no decoding: each pass's path by its size */
    ctx->attn_by_size = true;
    float *logp = malloc(sizeof *logp * (size_t)n_vocab);
    float *base = o->base ? malloc(sizeof *base * (size_t)n_vocab) : NULL;
    if (!logp || (o->base && !base)) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t w = 0; w < p->n_windows; w++) {
        const kite_token *win = p->tokens + p->win_off[w];
        const int32_t len = (int32_t)(p->win_off[w + 1] - p->win_off[w]);
        if ((rc = kite_ctx_truncate(ctx, 0)) != KITE_OK) goto done;
        for (int32_t start = 0; start < len; start += n_batch) {
            const int32_t cnt = len - start < n_batch ? len - start : n_batch;
            if ((rc = kite_ctx_eval(ctx, win + start, cnt, true)) != KITE_OK) {
                err_prefix("eval_ppl_run");
                goto done;
            }
            /* row i (window index start+i) predicts window index start+i+1 */
            for (int32_t i = 0; i < cnt; i++) {
                const int32_t tgt = start + i + 1;
                if (tgt < p->first[w] || tgt >= len) continue;
                const float *row = kite_ctx_logits(ctx, i);
                if (!row) {
                    rc = err_set(KITE_E_STATE, "eval_ppl_run: no logits for row %d", i);
                    goto done;
                }
                const kite_token t = win[tgt];
                if (t < 0 || t >= n_vocab) {
                    rc = err_set(KITE_E_RANGE, "eval_ppl_run: target %d outside the vocabulary", t);
                    goto done;
                }
                const double nll = eval_log_softmax(row, n_vocab, logp) - (double)row[t];
                if (o->save && (rc = eval_logits_write_row(o->save, logp)) != KITE_OK) goto done;
                if (o->base && (rc = eval_logits_read_row(o->base, base)) != KITE_OK) goto done;
                eval_stats_add(s, nll, logp, base, n_vocab, t);
            }
        }
        if (o->on_window) o->on_window(o->user, w, p->n_windows, s);
    }
done:
    ctx->attn_by_size = by_size;
    free(logp);
    free(base);
    return rc;
}

int eval_tokenize(const kite_model *m, const char *text, size_t len, kite_token **out, int64_t *n) {
    if (!m || (!text && len) || !out || !n) return err_set(KITE_E_ARG, "eval_tokenize: bad arguments");
    size_t cap = len + 8, got = 0;
    kite_token *ids = malloc(sizeof *ids * cap);
    if (!ids) return err_set(KITE_E_NOMEM, "out of memory for %zu tokens", cap);
    int rc = kite_tokenize(m, text ? text : "", len, false, ids, cap, &got);
    if (rc == KITE_E_RANGE && got > cap) { /* more tokens than bytes: retry once */
        kite_token *bigger = realloc(ids, sizeof *ids * got);
        if (!bigger) {
            free(ids);
            return err_set(KITE_E_NOMEM, "out of memory for %zu tokens", got);
        }
        ids = bigger;
        cap = got;
        rc = kite_tokenize(m, text, len, false, ids, cap, &got);
    }
    if (rc != KITE_OK) {
        free(ids);
        return rc;
    }
    *out = ids;
    *n = (int64_t)got;
    return KITE_OK;
}
