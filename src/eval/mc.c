/*
 * mc.c - multiple-choice scoring by log-likelihood (`kite eval`).
 *
 * DESIGN
 *   For an item with context C and endings E_k, each ending is scored like
 *   lm-evaluation-harness's loglikelihood requests:
 *
 *     ctx  = BOS + tokenize(C)            (BOS when the model has one)
 *     full = BOS + tokenize(C + E_k)      (one tokenization, so the tokens at
 *                                          the boundary are the natural ones)
 *     the continuation is full[s..), s = the longest common prefix of ctx
 *     and full (at least 1, at most len(full) - 1, so >= 1 token is scored);
 *     ll_k = sum of log p(full[j] | full[0..j)) over the continuation.
 *
 *   acc picks argmax ll_k; acc_norm picks argmax ll_k / chars(E_k) (Unicode
 *   characters, as lm-eval-harness divides by the length of the string).
 *   Ties go to the lowest index.
 *
 *   The KV cache is reused between endings: positions shared with the
 *   previous sequence (up to s - 1) are kept with kite_ctx_truncate, and only
 *   the rest is evaluated, with all logits.  Public API only.
 *
 * THREAD SAFETY
 *   Drives one kite_ctx; no global state.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "eval/eval.h"
#include "model/context.h"

/* Unicode characters of s[0..n): bytes that do not continue a UTF-8 sequence. */
static int32_t utf8_chars(const char *s, size_t n) {
    int32_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

/* BOS (if any) + tokens of text[0..len) into a malloc'd *out, *n. */
static int tokenize_with_bos(const kite_model *m, const char *text, size_t len, kite_token **out, int64_t *n) {
    kite_token *ids = NULL;
    int64_t cnt = 0;
    int rc = eval_tokenize(m, text, len, &ids, &cnt);
    if (rc != KITE_OK) return rc;
    const kite_token bos = kite_token_bos(m);
    if (bos >= 0) {
        kite_token *b = malloc(sizeof *b * (size_t)(cnt + 1));
        if (!b) {
            free(ids);
            return err_set(KITE_E_NOMEM, "out of memory");
        }
        b[0] = bos;
        memcpy(b + 1, ids, sizeof *b * (size_t)cnt);
        free(ids);
        ids = b;
        cnt++;
    }
    *out = ids;
    *n = cnt;
    return KITE_OK;
}

int eval_mc_score(kite_ctx *ctx, const kite_model *m, const eval_mc_item *it, eval_mc_scores *sc) {
    if (!ctx || !m || !it || !sc || it->n_endings < 1) return err_set(KITE_E_ARG, "eval_mc_score: bad arguments");
    kite_model_info info;
    kite_model_get_info(m, &info);
    const int32_t n_vocab = info.n_vocab;
    int rc = KITE_OK;
    kite_token *ctx_ids = NULL, *full = NULL, *cached = NULL;
    char *joined = NULL;
    int64_t n_ctx_ids = 0, n_cached = 0;
    const bool by_size = ctx->attn_by_size; /* scoring, no decoding: each pass's path by its size */
    ctx->attn_by_size = true;
    if ((rc = tokenize_with_bos(m, it->context, it->context_len, &ctx_ids, &n_ctx_ids)) != KITE_OK) goto done;
    if ((rc = kite_ctx_truncate(ctx, 0)) != KITE_OK) goto done;
    for (int32_t k = 0; k < it->n_endings; k++) {
        const size_t jl = it->context_len + it->ending_len[k];
        free(joined);
        if (!(joined = malloc(jl + 1))) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto done;
        }
        memcpy(joined, it->context, it->context_len);
        memcpy(joined + it->context_len, it->endings[k], it->ending_len[k]);
        joined[jl] = '\0';
        int64_t n_full = 0;
        free(full);
        full = NULL;
        if ((rc = tokenize_with_bos(m, joined, jl, &full, &n_full)) != KITE_OK) goto done;
        if (n_full < 2) {
            rc = err_set(KITE_E_ARG, "ending %d: nothing to score (empty context and ending)", k);
            goto done;
        }
        if (n_full - 1 > kite_ctx_n_ctx(ctx)) {
            rc = err_set(KITE_E_RANGE, "ending %d: %lld tokens do not fit the context window (%d)", k,
                         (long long)n_full, kite_ctx_n_ctx(ctx));
            goto done;
        }
        int64_t s = 0;
        while (s < n_ctx_ids && s < n_full && ctx_ids[s] == full[s]) s++;
        if (s < 1) s = 1;
        if (s > n_full - 1) s = n_full - 1;
        /* keep the cached positions shared with this sequence, up to s - 1 */
        int64_t keep = 0;
        while (keep < n_cached && keep < s - 1 && cached[keep] == full[keep]) keep++;
        rc = kite_ctx_truncate(ctx, (int32_t)keep);
        if (rc == KITE_E_STATE) { /* a sliding-window ring overwrote that prefix: recompute it */
            keep = 0;
            rc = kite_ctx_truncate(ctx, 0);
        }
        if (rc != KITE_OK) goto done;
        const int32_t n_eval = (int32_t)(n_full - 1 - keep);
        if ((rc = kite_ctx_eval(ctx, full + keep, n_eval, true)) != KITE_OK) goto done;
        free(cached);
        cached = full;
        n_cached = n_full - 1;
        full = NULL;
        double ll = 0.0;
        for (int64_t j = s; j < n_full; j++) {
            const float *row = kite_ctx_logits(ctx, (int32_t)(j - 1 - keep));
            if (!row) {
                rc = err_set(KITE_E_STATE, "eval_mc_score: no logits for position %lld", (long long)(j - 1));
                goto done;
            }
            const kite_token t = cached[j];
            if (t < 0 || t >= n_vocab) {
                rc = err_set(KITE_E_RANGE, "token %d outside the vocabulary", t);
                goto done;
            }
            ll -= eval_logsumexp(row, n_vocab) - (double)row[t];
        }
        sc->ll[k] = ll;
        sc->n_tokens[k] = (int32_t)(n_full - s);
        sc->n_chars[k] = utf8_chars(it->endings[k], it->ending_len[k]);
    }
    sc->pred = 0;
    sc->pred_norm = 0;
    for (int32_t k = 1; k < it->n_endings; k++) {
        if (sc->ll[k] > sc->ll[sc->pred]) sc->pred = k;
        const double a = sc->ll[k] / (sc->n_chars[k] > 0 ? sc->n_chars[k] : 1);
        const double b = sc->ll[sc->pred_norm] / (sc->n_chars[sc->pred_norm] > 0 ? sc->n_chars[sc->pred_norm] : 1);
        if (a > b) sc->pred_norm = k;
    }
done:
    ctx->attn_by_size = by_size;
    free(joined);
    free(full);
    free(cached);
    free(ctx_ids);
    return rc;
}
