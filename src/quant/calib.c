/*
 * calib.c - calibration statistics through the forward-pass tap (calib.h).
 *
 * DESIGN
 *   calib_load(layer) runs a pass when `layer` is outside the group held:
 *   it frees the old group, allocates the statistics of the group
 *   [g0, g1) (g0 = layer rounded down to layers_per_pass), installs the tap
 *   and evaluates every window from an empty cache.  The tap ignores other
 *   layers.  Hessians are accumulated as blocked GEMMs on the thread pool
 *   (the lower triangle of X^T X per CALIB_HBUF_ROWS buffered input rows,
 *   linalg.h), finished
 *   (mirrored, scaled by 2/n) after the pass.
 *   The head's input only reaches the tap for positions whose logits are
 *   computed, so a pass whose group holds the head asks for all logits.
 *   A pass runs only its group's layers (ctx_set_layer_range): the layers
 *   after the group feed none of its taps, and the residual stream entering
 *   the group is the one the previous pass kept (the carry, n_windows x
 *   window x n_embd floats), so visiting the groups in order costs one
 *   forward pass over the text in all, not one per group.  The statistics
 *   are the same bits either way (each window is one batch).
 *
 *   Sizes per layer (bytes): Hessians 8 * (2 E^2 + Q^2 + F^2) when asked
 *   (and their row buffers, 4 * CALIB_HBUF_ROWS * (2E + Q + F))
 *   (E = n_embd, Q = n_head * head_dim, F = n_ff), samples
 *   4 * n_samples * (2E + Q + F), channel statistics 12 * (2E + Q + F).
 *
 * OWNERSHIP / THREAD SAFETY
 *   See calib.h.  The tap runs on the thread driving the context.
 */
#include "quant/calib.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "core/timing.h"
#include "model/context.h"
#include "model/model.h"
#include "quant/linalg.h"

#define CALIB_SEED 0x9E3779B97F4A7C15ull
/* Input rows buffered per point before a Hessian update.  WHY: each update
 * reads and writes the whole width x width matrix (254 MB for n_ff 5632), so
 * updating per 256-token window made the accumulation memory-bound: 12-16
 * GFLOP per CPU-second on the TinyLlama-1.1B shape; with 2048 rows they ran at 38
 * (docs/quantization/calibrated.md).  2048 is the one size measured, not a tuned optimum. */
#define CALIB_HBUF_ROWS 2048

struct calib {
    kite_model *model;
    kite_token *tokens;     /* [n_tokens] */
    int64_t n_tokens;
    calib_params p;
    int32_t window;         /* tokens per window incl. BOS */
    int32_t n_windows;
    int32_t per_pass;       /* layers (head = n_layer) per pass */
    int32_t g0, g1;         /* group held: layers [g0, g1); g0 == g1: none */
    calib_point *pts;       /* [(g1 - g0) * TAP_COUNT] */
    float **hbuf;           /* [(g1 - g0) * TAP_COUNT] rows awaiting the Hessian update ([CALIB_HBUF_ROWS][width]) */
    int32_t *hbuf_n;        /* rows in each */
    uint64_t *rng;          /* [(g1 - g0) * TAP_COUNT] reservoir generators */
    threadpool *tp;
    la_ctx *la;             /* Hessian GEMMs on tp */
    double pass_s;          /* seconds in calibration passes (forward + statistics) */
    float *carry;           /* [n_windows][window][n_embd] residual stream entering layer carry_layer, or NULL */
    int32_t carry_layer;    /* -1: carry holds nothing usable */
    int status;             /* first failure inside the tap */
};

static int32_t point_width(const model_hparams *hp, int32_t layer, int point) {
    if (layer == hp->n_layer) return point == TAP_OUTPUT_IN ? hp->n_embd : 0;
    switch (point) {
    case TAP_ATTN_IN:
    case TAP_FFN_IN: return hp->n_embd;
    case TAP_WO_IN: return hp->n_head * hp->head_dim;
    case TAP_DOWN_IN: return hp->n_ff;
    default: return 0;
    }
}

/* Layers with statistics: the model's, plus the head (layer n_layer) unless no_head. */
static int32_t calib_n_all(const calib *c) { return c->model->hp.n_layer + (c->p.no_head ? 0 : 1); }

static size_t layer_bytes(const calib *c, int32_t layer) {
    size_t b = 0;
    for (int pt = 0; pt < TAP_COUNT; pt++) {
        const size_t w = (size_t)point_width(&c->model->hp, layer, pt);
        if (c->p.hessian) b += 8 * w * w + 4 * (size_t)CALIB_HBUF_ROWS * w;
        b += 4 * (size_t)c->p.n_samples * w + 12 * w;
    }
    return b;
}

int calib_tokenize(const kite_model *model, const char *text, size_t len, int64_t max_tokens, kite_token **out,
                   int64_t *n_out) {
    size_t cap = len + 16, n = 0;
    kite_token *t = malloc(cap * sizeof *t);
    if (!t) return err_set(KITE_E_NOMEM, "calibration: out of memory for %zu tokens", cap);
    int rc = kite_tokenize(model, text, len, false, t, cap, &n);
    if (rc) {
        free(t);
        return rc;
    }
    if (n == 0) {
        free(t);
        return err_set(KITE_E_ARG, "calibration: the text gives no tokens");
    }
    if (max_tokens > 0 && (int64_t)n > max_tokens) n = (size_t)max_tokens;
    *out = t;
    *n_out = (int64_t)n;
    return KITE_OK;
}

int calib_new(kite_model *model, const kite_token *tokens, int64_t n_tokens, const calib_params *p, calib **out) {
    if (!model || !tokens || !p || n_tokens <= 0) return err_set(KITE_E_ARG, "calibration: no tokens");
    if (model->vocab_only || !model->layers)
        return err_set(KITE_E_ARG, "calibration: %s has no weights", model->path ? model->path : "model");
    calib *c = calloc(1, sizeof *c);
    if (!c) return err_set(KITE_E_NOMEM, "calibration: out of memory");
    c->model = model;
    c->p = *p;
    c->carry_layer = -1;
    if (c->p.mem_limit == 0) c->p.mem_limit = CALIB_MEM_LIMIT_DEFAULT;
    if (c->p.n_threads <= 0) c->p.n_threads = 1;
    c->tokens = malloc((size_t)n_tokens * sizeof *c->tokens);
    c->tp = tp_new(c->p.n_threads);
    if (c->tp) c->la = la_ctx_new(c->tp, NULL);
    if (!c->tokens || !c->tp || !c->la) {
        calib_free(c);
        return err_set(KITE_E_NOMEM, "calibration: out of memory");
    }
    memcpy(c->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    c->n_tokens = n_tokens;
    const int32_t n_ctx = model->hp.n_ctx_train > 0 ? model->hp.n_ctx_train : 256;
    c->window = p->window > 0 ? p->window : (n_ctx < 256 ? n_ctx : 256);
    if (c->window > n_ctx) c->window = n_ctx;
    if (c->window < 2) c->window = 2;
    c->n_windows = (int32_t)((n_tokens + (c->window - 1) - 1) / (c->window - 1));
    /* layers per pass: as many as fit, at least one */
    const int32_t n_all = calib_n_all(c);
    size_t total = 0;
    int32_t k = 0;
    while (k < n_all && (k == 0 || total + layer_bytes(c, k) <= c->p.mem_limit)) total += layer_bytes(c, k++);
    c->per_pass = k;
    *out = c;
    return KITE_OK;
}

static void drop_group(calib *c) {
    const int32_t n = (c->g1 - c->g0) * TAP_COUNT;
    for (int32_t i = 0; c->hbuf && i < n; i++) free(c->hbuf[i]);
    free(c->hbuf);
    free(c->hbuf_n);
    c->hbuf = NULL;
    c->hbuf_n = NULL;
    for (int32_t i = 0; c->pts && i < n; i++) {
        free(c->pts[i].h);
        free(c->pts[i].mean_abs);
        free(c->pts[i].max_abs);
        free(c->pts[i].samples);
    }
    free(c->pts);
    free(c->rng);
    c->pts = NULL;
    c->rng = NULL;
    c->g0 = c->g1 = 0;
}

void calib_free(calib *c) {
    if (!c) return;
    drop_group(c);
    free(c->carry);
    la_ctx_free(c->la);
    tp_free(c->tp);
    free(c->tokens);
    free(c);
}

int32_t calib_layers_per_pass(const calib *c) { return c->per_pass; }

void calib_stats(const calib *c, double *pass_s, double *hess_s, double *hess_flops, double *hess_cpu_s) {
    *pass_s = c->pass_s;
    la_ctx_stats(c->la, hess_s, hess_flops, hess_cpu_s);
}
int32_t calib_n_windows(const calib *c) { return c->n_windows; }

const calib_point *calib_get(const calib *c, int32_t layer, int point) {
    if (!c || layer < c->g0 || layer >= c->g1 || point < 0 || point >= TAP_COUNT) return NULL;
    const calib_point *cp = &c->pts[(size_t)(layer - c->g0) * TAP_COUNT + (size_t)point];
    return cp->width > 0 ? cp : NULL;
}

/* ---- the tap ----------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Lower triangle of H += X^T X over the buffered rows of point ix: a GEMM widening the float rows. */
static void hess_flush(calib *c, size_t ix) {
    calib_point *cp = &c->pts[ix];
    const int32_t k = c->hbuf_n[ix], w = cp->width;
    if (!cp->h || k == 0) return;
    la_gemm_args g = {.m = w, .n = w, .k = k, .alpha = 1.0, .a = {.p = c->hbuf[ix], .ld = w, .trans = true, .f32 = true},
                      .b = {.p = c->hbuf[ix], .ld = w, .f32 = true}, .c = cp->h, .ldc = w, .lower = true};
    la_dgemm(c->la, &g);
    if (la_ctx_failed(c->la) && !c->status) c->status = KITE_E_NOMEM;
    c->hbuf_n[ix] = 0;
}

static void calib_tap(void *user, int32_t layer, int point, const float *x, int32_t n_tok, int32_t width) {
    calib *c = user;
    if (layer < c->g0 || layer >= c->g1 || point < 0 || point >= TAP_COUNT || n_tok <= 0) return;
    const size_t ix = (size_t)(layer - c->g0) * TAP_COUNT + (size_t)point;
    calib_point *cp = &c->pts[ix];
    if (cp->width == 0) return;
    if (width != cp->width) {
        if (!c->status)
            c->status = err_set(KITE_E_STATE, "calibration: layer %d tap %d has width %d, expected %d", layer, point,
                                width, cp->width);
        return;
    }
    for (int32_t r = 0; r < n_tok; r++) {
        const float *xr = x + (size_t)r * width;
        for (int32_t j = 0; j < width; j++) {
            const float a = fabsf(xr[j]);
            cp->mean_abs[j] += a;
            if (a > cp->max_abs[j]) cp->max_abs[j] = a;
        }
        if (cp->samples) { /* reservoir sampling (Algorithm R) */
            const int64_t seen = cp->n_rows + r;
            int64_t slot = -1;
            if (cp->n_samp < c->p.n_samples) slot = cp->n_samp++;
            else {
                uint64_t k = rng_next(&c->rng[ix]) % (uint64_t)(seen + 1);
                if (k < (uint64_t)c->p.n_samples) slot = (int64_t)k;
            }
            if (slot >= 0) memcpy(cp->samples + (size_t)slot * width, xr, (size_t)width * sizeof *xr);
        }
    }
    if (cp->h) /* rows wait in the buffer; a full buffer is one Hessian update */
        for (int32_t r = 0; r < n_tok;) {
            const int32_t take = n_tok - r < CALIB_HBUF_ROWS - c->hbuf_n[ix] ? n_tok - r : CALIB_HBUF_ROWS - c->hbuf_n[ix];
            memcpy(c->hbuf[ix] + (size_t)c->hbuf_n[ix] * width, x + (size_t)r * width, (size_t)take * width * sizeof *x);
            c->hbuf_n[ix] += take;
            r += take;
            if (c->hbuf_n[ix] == CALIB_HBUF_ROWS) hess_flush(c, ix);
        }
    cp->n_rows += n_tok;
}

static int alloc_group(calib *c, int32_t g0, int32_t g1) {
    const int32_t n = (g1 - g0) * TAP_COUNT;
    c->pts = calloc((size_t)n, sizeof *c->pts);
    c->rng = calloc((size_t)n, sizeof *c->rng);
    c->hbuf = calloc((size_t)n, sizeof *c->hbuf);
    c->hbuf_n = calloc((size_t)n, sizeof *c->hbuf_n);
    c->g0 = g0;
    c->g1 = g1;
    if (!c->pts || !c->rng || !c->hbuf || !c->hbuf_n) return err_set(KITE_E_NOMEM, "calibration: out of memory");
    for (int32_t l = g0; l < g1; l++)
        for (int pt = 0; pt < TAP_COUNT; pt++) {
            const int32_t w = point_width(&c->model->hp, l, pt);
            const size_t ix = (size_t)(l - g0) * TAP_COUNT + (size_t)pt;
            calib_point *cp = &c->pts[ix];
            c->rng[ix] = CALIB_SEED ^ ((uint64_t)l << 8 | (uint64_t)pt);
            if (w == 0) continue;
            cp->width = w;
            cp->mean_abs = calloc((size_t)w, sizeof *cp->mean_abs);
            cp->max_abs = calloc((size_t)w, sizeof *cp->max_abs);
            if (c->p.hessian) {
                cp->h = calloc((size_t)w * (size_t)w, sizeof *cp->h);
                c->hbuf[ix] = malloc((size_t)CALIB_HBUF_ROWS * (size_t)w * sizeof(float));
                if (!c->hbuf[ix]) return err_set(KITE_E_NOMEM, "calibration: out of memory for layer %d statistics", l);
            }
            if (c->p.n_samples > 0) cp->samples = malloc((size_t)c->p.n_samples * (size_t)w * sizeof(float));
            if (!cp->mean_abs || !cp->max_abs || (c->p.hessian && !cp->h) || (c->p.n_samples > 0 && !cp->samples))
                return err_set(KITE_E_NOMEM, "calibration: out of memory for layer %d statistics", l);
        }
    return KITE_OK;
}

int calib_load(calib *c, int32_t layer) {
    const model_hparams *hp = &c->model->hp;
    const int32_t n_all = calib_n_all(c);
    if (layer < 0 || layer >= n_all) return err_set(KITE_E_ARG, "calibration: layer %d outside [0, %d]", layer, n_all - 1);
    if (layer >= c->g0 && layer < c->g1) return KITE_OK;
    drop_group(c);
    const int32_t g0 = layer / c->per_pass * c->per_pass;
    const int32_t g1 = g0 + c->per_pass < n_all ? g0 + c->per_pass : n_all;
    kite_ctx *ctx = NULL;
    kite_token *buf = NULL;
    int rc = alloc_group(c, g0, g1);
    if (rc) goto done;
    if (c->p.log) {
        size_t bytes = 0;
        for (int32_t l = g0; l < g1; l++) bytes += layer_bytes(c, l);
        const int n_pass = (n_all + c->per_pass - 1) / c->per_pass;
        char what[64];
        const int32_t last = g1 - 1 < hp->n_layer ? g1 - 1 : hp->n_layer - 1;
        if (g0 >= hp->n_layer) snprintf(what, sizeof what, "output head");
        else snprintf(what, sizeof what, "layers %d-%d%s", g0, last, g1 == hp->n_layer + 1 ? " + output" : "");
        fprintf(c->p.log, "calibrate: %" PRId64 " tokens in %d windows of %d, %s (%s, %.1f MB of statistics)\n",
                c->n_tokens, c->n_windows, c->window, what,
                n_pass == 1 ? "all in one pass" : "one group of layers per pass, repeated passes", (double)bytes / 1e6);
    }
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = c->window;
    cp.n_threads = c->p.n_threads;
    if ((rc = kite_ctx_new(c->model, &cp, &ctx))) goto done;
    if (!(buf = malloc((size_t)c->window * sizeof *buf))) {
        rc = err_set(KITE_E_NOMEM, "calibration: out of memory");
        goto done;
    }
    /* Layers after the group feed no tap and are not run.  Layers before it are not run either
     * when the previous pass kept the residual stream entering g0 (the carry): the group's
     * statistics are then the same bits as from a full forward, at one layer group's cost. */
    const size_t E = (size_t)hp->n_embd, win_floats = (size_t)c->window * E;
    const bool carry_ok = c->window <= ctx->n_batch; /* one forward pass per window */
    const int32_t from = carry_ok && c->carry && c->carry_layer == g0 && g0 > 0 ? g0 : 0;
    const int32_t to = g1 < hp->n_layer ? g1 : hp->n_layer;
    bool capture = carry_ok && g1 < hp->n_layer;
    if (capture && !c->carry && !(c->carry = malloc((size_t)c->n_windows * win_floats * sizeof(float))))
        capture = false; /* without the memory: later passes run from layer 0 */
    c->carry_layer = -1;
    ctx_set_tap(ctx, calib_tap, c);
    c->status = KITE_OK;
    const double t_pass = time_now_s();
    const kite_token bos = kite_token_bos(c->model);
    const bool head = g1 == hp->n_layer + 1;
    for (int64_t pos = 0, w = 0; pos < c->n_tokens; w++) {
        int32_t n = 0;
        if (bos >= 0) buf[n++] = bos;
        while (n < c->window && pos < c->n_tokens) buf[n++] = c->tokens[pos++];
        float *stream = c->carry ? c->carry + (size_t)w * win_floats : NULL;
        ctx_set_layer_range(ctx, from, to, n, from > 0 ? stream : NULL, capture ? stream : NULL);
        if ((rc = kite_ctx_truncate(ctx, 0)) || (rc = kite_ctx_eval(ctx, buf, n, head))) goto done;
        if ((rc = c->status)) goto done;
    }
    ctx_set_tap(ctx, NULL, NULL);
    if (capture) c->carry_layer = g1;
    for (size_t i = 0; i < (size_t)(g1 - g0) * TAP_COUNT; i++) hess_flush(c, i);
    if ((rc = c->status)) goto done;
    c->pass_s += time_now_s() - t_pass;
    /* finish: means, mirrored and scaled Hessians */
    bool any = false;
    for (int32_t l = g0; l < g1; l++)
        for (int pt = 0; pt < TAP_COUNT; pt++) {
            calib_point *p = &c->pts[(size_t)(l - g0) * TAP_COUNT + (size_t)pt];
            if (p->width == 0) continue;
            if (p->n_rows == 0) { /* e.g. TAP_DOWN_IN of a mixture-of-experts layer: not applicable */
                free(p->h);
                free(p->mean_abs);
                free(p->max_abs);
                free(p->samples);
                memset(p, 0, sizeof *p);
                continue;
            }
            any = true;
            const int32_t w = p->width;
            for (int32_t j = 0; j < w; j++) p->mean_abs[j] /= (double)p->n_rows;
            if (p->h) { /* scale the lower triangle, mirror it */
                const double s = 2.0 / (double)p->n_rows;
                for (int32_t i = 0; i < w; i++)
                    for (int32_t j = 0; j <= i; j++) {
                        const double v = p->h[(size_t)i * w + j] * s;
                        p->h[(size_t)i * w + j] = v;
                        p->h[(size_t)j * w + i] = v;
                    }
            }
        }
    if (!any) rc = err_set(KITE_E_STATE, "calibration: no activations reached layers %d-%d (forward-pass taps not "
                           "wired?)", g0, g1 - 1);
done:
    if (rc) drop_group(c);
    free(buf);
    kite_ctx_free(ctx);
    return rc;
}
