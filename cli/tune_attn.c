/*
 * tune_attn.c - `kite tune --attn-calib TEXT`: choose FlashDecoding++'s
 * unified maximum phi per layer (or per head) from a model's attention
 * scores and store it in the model's GGUF metadata (docs/attention.md,
 * "Choosing phi").
 *
 * DESIGN
 *   Split-KV decode subtracts phi from every score of a chunk; a chunk whose
 *   maximum m_c leaves [phi - ATTN_PHI_RANGE, phi + ATTN_PHI_RANGE] takes
 *   the exact method and makes its row combine with rescaling.  A row stays
 *   on the unified path when its smallest and largest chunk maxima (lo, hi)
 *   both lie in the window, i.e. when phi is in [hi - R, lo + R].  The
 *   calibration runs the text through the model with the attention hook
 *   (ctx_set_attn_tap: every pass split-KV, chunk maxima per row), and for
 *   each layer (all its heads' rows) and each head picks the phi covered by
 *   the most such intervals, with R shrunk by ATTN_CALIB_MARGIN so that the
 *   longer contexts of real use (more chunks, lower minima) still fit: the
 *   middle of the best segment of a sweep over the interval ends.  Per-head
 *   values are stored when they keep at least 0.1% more rows inside the full
 *   window than the per-layer ones; otherwise one value per layer.
 *
 *   Where: GGUF metadata, kite.attention.unified_max (float32[n_layer] or
 *   [n_layer * n_head]).  phi is a property of the weights (the statistics
 *   of their scores), not of the machine, so it travels with the file like
 *   the other hyperparameters, and the loader reads it from the file it is
 *   given; the tune table is per machine and per CPU level, shared by every
 *   model.  The copy is written from a fresh mapping of the input (the
 *   loaded model's image is repacked in place), through a temporary file and
 *   a rename, so out_path may be the input itself.
 *
 * THREAD SAFETY
 *   A command: one thread drives the context's pool.
 */
#include "tune_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/context.h"
#include "model/model.h"

#define CMD "tune"
#define PHI_KEY "kite.attention.unified_max"

char *tune_attn_read_text(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kite %s: cannot open '%s'\n", cmd, path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        const size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    const int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "kite %s: cannot read '%s'\n", cmd, path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

typedef struct calib_acc {
    int32_t n_layer, n_head;
    int64_t cap;     /* rows per (layer, head) */
    int64_t *n;      /* [n_layer] rows recorded */
    float *lo, *hi;  /* [n_layer][n_head][cap] smallest / largest chunk maximum of each row */
} calib_acc;

static void calib_tap(void *user, int32_t layer, const float *chunk_max, int32_t n_tok, int32_t n_head) {
    calib_acc *c = user;
    for (int32_t t = 0; t < n_tok && c->n[layer] < c->cap; t++, c->n[layer]++)
        for (int32_t h = 0; h < n_head; h++) {
            const size_t at = ((size_t)layer * (size_t)c->n_head + (size_t)h) * (size_t)c->cap + (size_t)c->n[layer];
            c->lo[at] = chunk_max[((size_t)t * n_head + h) * 2];
            c->hi[at] = chunk_max[((size_t)t * n_head + h) * 2 + 1];
        }
}

typedef struct sweep_ev {
    float x;
    int d; /* +1: an interval starts, -1: one ends */
} sweep_ev;

static int ev_cmp(const void *a, const void *b) {
    const sweep_ev *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    return q->d - p->d; /* starts before ends: closed intervals */
}

/* The phi inside the most intervals [hi_i - w, lo_i + w] of the n rows
 * (the middle of the widest segment with that count); 0 when none is
 * feasible.  ev: scratch of 2n events. */
static float pick_phi(const float *lo, const float *hi, int64_t n, float w, sweep_ev *ev) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(hi[i] - w <= lo[i] + w)) continue; /* wider than the window (or NaN): never inside */
        ev[m++] = (sweep_ev){hi[i] - w, +1};
        ev[m++] = (sweep_ev){lo[i] + w, -1};
    }
    if (m == 0) return 0.0f;
    qsort(ev, (size_t)m, sizeof *ev, ev_cmp);
    int64_t cnt = 0, best = -1;
    float a = 0.0f, b = 0.0f;
    for (int64_t i = 0; i < m; i++) {
        cnt += ev[i].d;
        if (ev[i].d < 0 || i + 1 >= m) continue;
        const float x0 = ev[i].x, x1 = ev[i + 1].x;
        if (cnt > best || (cnt == best && x1 - x0 > b - a)) {
            best = cnt;
            a = x0;
            b = x1;
        }
    }
    return 0.5f * (a + b);
}

/* Rows of one (layer, head) inside the full window of phi. */
static int64_t rows_inside(const float *lo, const float *hi, int64_t n, float phi) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += hi[i] <= phi + ATTN_PHI_RANGE && lo[i] >= phi - ATTN_PHI_RANGE;
    return k;
}

static int write_copy(const char *model_path, const char *out_path, const float *phi, uint64_t n_phi) {
    gguf_ctx *in = NULL;
    gguf_writer *w = NULL;
    int rc = KITE_OK;
    const gguf_open_params gp = {.use_mmap = true};
    if ((rc = gguf_open(model_path, &gp, &in)) != KITE_OK) return rc;
    if (!(w = gguf_writer_new())) {
        rc = KITE_E_NOMEM;
        goto done;
    }
    for (uint64_t i = 0; i < in->n_kv && rc == KITE_OK; i++) {
        if (gguf_str_eq(in->kv[i].key, PHI_KEY)) continue; /* replaced below */
        char *key = gguf_str_dup(in->kv[i].key);
        rc = key ? gguf_writer_set_value(w, key, &in->kv[i].value) : KITE_E_NOMEM;
        free(key);
    }
    if (rc == KITE_OK) rc = gguf_writer_set_arr(w, PHI_KEY, GGUF_VT_FLOAT32, phi, n_phi);
    for (uint64_t i = 0; i < in->n_tensors && rc == KITE_OK; i++) {
        const gguf_tensor *t = &in->tensors[i];
        char *name = gguf_str_dup(t->name);
        rc = name ? gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data) : KITE_E_NOMEM;
        free(name);
    }
    if (rc == KITE_OK) rc = gguf_writer_write(w, out_path);
done:
    gguf_writer_free(w);
    gguf_close(in);
    return rc;
}

int tune_attn_calib(const char *model_path, const char *text_path, const char *out_path, int64_t n_tokens,
                    int n_threads) {
    int status = 1;
    kite_model *m = NULL;
    kite_ctx *ctx = NULL;
    char *text = NULL;
    kite_token *toks = NULL;
    calib_acc acc = {0};
    sweep_ev *ev = NULL;
    float *phi_layer = NULL, *phi_head = NULL;
    size_t len = 0, n_tok = 0;
    if (!(text = tune_attn_read_text(CMD, text_path, &len))) goto done;
    kite_model_params mp = kite_model_default_params();
    if (kite_model_load(model_path, &mp, &m) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    const int32_t NL = m->hp.n_layer, NH = m->hp.n_head;
    int rc = kite_tokenize(m, text, len, true, NULL, 0, &n_tok);
    if ((rc != KITE_OK && rc != KITE_E_RANGE) || !(toks = malloc(sizeof *toks * (n_tok + 1))) ||
        kite_tokenize(m, text, len, true, toks, n_tok + 1, &n_tok) != KITE_OK) {
        fprintf(stderr, "kite %s: %s: cannot tokenize the calibration text\n", CMD, text_path);
        goto done;
    }
    if ((int64_t)n_tok > n_tokens) n_tok = (size_t)n_tokens;
    if (n_tok < 2) {
        fprintf(stderr, "kite %s: %s: the calibration text gives %zu tokens; at least 2 are needed\n", CMD,
                text_path, n_tok);
        goto done;
    }
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)n_tok;
    cp.n_threads = n_threads;
    if (kite_ctx_new(m, &cp, &ctx) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    acc.n_layer = NL;
    acc.n_head = NH;
    acc.cap = (int64_t)n_tok;
    acc.n = calloc((size_t)NL, sizeof *acc.n);
    acc.lo = malloc(sizeof(float) * (size_t)NL * (size_t)NH * n_tok);
    acc.hi = malloc(sizeof(float) * (size_t)NL * (size_t)NH * n_tok);
    ev = malloc(sizeof *ev * 2 * (size_t)NH * n_tok);
    phi_layer = malloc(sizeof(float) * (size_t)NL * (size_t)NH);
    phi_head = malloc(sizeof(float) * (size_t)NL * (size_t)NH);
    if (!acc.n || !acc.lo || !acc.hi || !ev || !phi_layer || !phi_head || ctx_set_attn_tap(ctx, calib_tap, &acc)) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    fprintf(stderr, "kite %s: attention calibration: %s, %zu tokens of %s, split-KV chunks of %d\n", CMD,
            model_path, n_tok, text_path, ATTN_KV_CHUNK);
    if (kite_ctx_eval(ctx, toks, (int32_t)n_tok, false) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    const int64_t rows = (int64_t)n_tok; /* per (layer, head) */
    const float w = ATTN_PHI_RANGE - ATTN_CALIB_MARGIN;
    int64_t in0 = 0, in_layer = 0, in_head = 0, total = 0;
    printf("| layer | phi | chunk maxima min | max | rows outside, phi = 0 | calibrated (per layer) | per head |\n");
    printf("|------:|----:|-----------------:|----:|----------------------:|-----------------------:|---------:|\n");
    for (int32_t l = 0; l < NL; l++) {
        const float *lo = acc.lo + (size_t)l * NH * n_tok, *hi = acc.hi + (size_t)l * NH * n_tok;
        const float pl = pick_phi(lo, hi, rows * NH, w, ev);
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t i = 0; i < rows * NH; i++) {
            mn = lo[i] < mn ? lo[i] : mn;
            mx = hi[i] > mx ? hi[i] : mx;
        }
        int64_t k0 = 0, kl = 0, kh = 0;
        for (int32_t h = 0; h < NH; h++) {
            const float *lh = lo + (size_t)h * n_tok, *hh = hi + (size_t)h * n_tok;
            phi_layer[l * NH + h] = pl;
            phi_head[l * NH + h] = pick_phi(lh, hh, rows, w, ev);
            k0 += rows_inside(lh, hh, rows, 0.0f);
            kl += rows_inside(lh, hh, rows, pl);
            kh += rows_inside(lh, hh, rows, phi_head[l * NH + h]);
        }
        const double n = (double)(rows * NH);
        printf("| %d | %.2f | %.2f | %.2f | %.3f%% | %.3f%% | %.3f%% |\n", l, (double)pl, (double)mn, (double)mx,
               100.0 * (n - (double)k0) / n, 100.0 * (n - (double)kl) / n, 100.0 * (n - (double)kh) / n);
        in0 += k0;
        in_layer += kl;
        in_head += kh;
        total += rows * NH;
    }
    /* per head only where it pays: it must keep 0.1% more of all rows inside the window */
    const bool per_head = (double)(in_head - in_layer) > 1e-3 * (double)total;
    const uint64_t n_phi = per_head ? (uint64_t)NL * (uint64_t)NH : (uint64_t)NL;
    float *store = per_head ? phi_head : phi_layer;
    if (!per_head)
        for (int32_t l = 0; l < NL; l++) store[l] = phi_layer[l * NH]; /* one per layer, packed */
    printf("rows outside the window (|chunk max - phi| > %g): phi = 0: %.3f%%, per layer: %.3f%%, per head: %.3f%% "
           "of %lld; storing %s values\n",
           (double)ATTN_PHI_RANGE, 100.0 * (double)(total - in0) / (double)total,
           100.0 * (double)(total - in_layer) / (double)total, 100.0 * (double)(total - in_head) / (double)total,
           (long long)total, per_head ? "per-head" : "per-layer");
    kite_ctx_free(ctx);
    ctx = NULL;
    kite_model_free(m);
    m = NULL;
    if (write_copy(model_path, out_path, store, n_phi) != KITE_OK) {
        fprintf(stderr, "kite %s: %s: %s\n", CMD, out_path, kite_last_error());
        goto done;
    }
    fprintf(stderr, "kite %s: wrote %s with %s (%llu values)\n", CMD, out_path, PHI_KEY, (unsigned long long)n_phi);
    status = 0;
done:
    kite_ctx_free(ctx);
    kite_model_free(m);
    free(text);
    free(toks);
    free(acc.n);
    free(acc.lo);
    free(acc.hi);
    free(ev);
    free(phi_layer);
    free(phi_head);
    return status;
}
