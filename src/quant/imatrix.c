/*
 * imatrix.c - importance matrices: llama.cpp's file format and their
 * collection through the forward-pass tap (imatrix.h).
 *
 * DESIGN
 *   Collection keeps one double accumulator of sum(x^2) per (layer, tap
 *   point) and the rows it saw; at the end every weight tensor of the GGUF
 *   whose role reads that point gets an entry (q, k, v and a fused qkv read
 *   TAP_ATTN_IN; gate, up and the MoE router TAP_FFN_IN; ...), with the
 *   values llama-imatrix stores: mean square * ncall, ncall = chunks.  The
 *   mixture-of-experts tensors (3-D) get one slice per expert from the
 *   per-expert tap (ctx_set_expert_tap): the rows routed to that expert, once
 *   per (token, slot).  An expert no token chose in the whole text leaves
 *   its tensor without an entry, as llama-imatrix skips "partial data".
 */
#include "quant/imatrix.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/tmpfile.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/context.h"
#include "model/model.h"

/* ---- parsing ------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p, *end;
    const char *what;
} reader;

static bool rd_i32(reader *r, int32_t *v) {
    if (r->end - r->p < 4) return false;
    uint32_t u = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    memcpy(v, &u, 4);
    r->p += 4;
    return true;
}

void imatrix_free(imatrix *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_entries; i++) {
        free(m->e[i].name);
        free(m->e[i].values);
        free(m->e[i].qw);
    }
    free(m->e);
    free(m->dataset);
    free(m);
}

const imatrix_entry *imatrix_find(const imatrix *m, const char *name) {
    if (!m || !name) return NULL;
    for (int32_t i = 0; i < m->n_entries; i++)
        if (!strcmp(m->e[i].name, name)) return &m->e[i];
    return NULL;
}

/* Fills e->qw from e->values (llama-quantize's division by ncall). */
static int finish_entry(imatrix_entry *e) {
    if (!(e->qw = malloc((size_t)e->n * sizeof *e->qw))) return err_set(KITE_E_NOMEM, "imatrix: out of memory");
    for (int32_t j = 0; j < e->n; j++) e->qw[j] = e->ncall > 0 ? e->values[j] / (float)e->ncall : e->values[j];
    return KITE_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const imatrix_entry *const *)a)->name, (*(const imatrix_entry *const *)b)->name);
}

/* KITE_E_FORMAT when two entries share a name: sorted pointers, O(n log n), so a
 * file of millions of tiny entries cannot stall the reader. */
static int check_unique(const imatrix *m, const char *what) {
    const imatrix_entry **p = malloc((size_t)m->n_entries * sizeof *p);
    if (!p) return err_set(KITE_E_NOMEM, "imatrix: out of memory");
    for (int32_t i = 0; i < m->n_entries; i++) p[i] = &m->e[i];
    qsort(p, (size_t)m->n_entries, sizeof *p, cmp_name);
    int rc = KITE_OK;
    for (int32_t i = 1; i < m->n_entries && !rc; i++)
        if (!strcmp(p[i - 1]->name, p[i]->name))
            rc = err_set(KITE_E_FORMAT, "%s: entry '%s' appears twice", what, p[i]->name);
    free(p);
    return rc;
}

int imatrix_parse(const uint8_t *buf, size_t len, const char *what, imatrix **out) {
    if (!out) return err_set(KITE_E_ARG, "imatrix_parse: NULL argument");
    *out = NULL;
    if (!what) what = "imatrix";
    reader r = {buf, buf + (buf ? len : 0), what};
    int32_t n = 0;
    if (!rd_i32(&r, &n)) return err_set(KITE_E_FORMAT, "%s: not an imatrix file (shorter than its entry count)", what);
    if (n < 1) return err_set(KITE_E_FORMAT, "%s: entry count %d (an imatrix file has at least one entry)", what, n);
    /* every entry takes at least 16 bytes: a count larger than the file is a lie */
    if ((size_t)n > len / 16)
        return err_set(KITE_E_FORMAT, "%s: entry count %d does not fit in %zu bytes", what, n, len);
    imatrix *m = calloc(1, sizeof *m);
    if (!m || !(m->e = calloc((size_t)n, sizeof *m->e))) {
        free(m);
        return err_set(KITE_E_NOMEM, "imatrix: out of memory");
    }
    int rc = KITE_OK;
    for (int32_t i = 0; i < n; i++) {
        imatrix_entry *e = &m->e[i];
        int32_t nl = 0;
        if (!rd_i32(&r, &nl)) {
            rc = err_set(KITE_E_FORMAT, "%s: entry %d: truncated before its name length", what, i + 1);
            goto fail;
        }
        if (nl < 1 || nl > IMATRIX_NAME_MAX || r.end - r.p < nl) {
            rc = err_set(KITE_E_FORMAT, "%s: entry %d: name length %d (1..%d, within the file)", what, i + 1, nl,
                         IMATRIX_NAME_MAX);
            goto fail;
        }
        if (memchr(r.p, '\0', (size_t)nl)) {
            rc = err_set(KITE_E_FORMAT, "%s: entry %d: the name holds a NUL byte", what, i + 1);
            goto fail;
        }
        if (!(e->name = malloc((size_t)nl + 1))) {
            rc = err_set(KITE_E_NOMEM, "imatrix: out of memory");
            goto fail;
        }
        memcpy(e->name, r.p, (size_t)nl);
        e->name[nl] = '\0';
        r.p += nl;
        m->n_entries = i + 1; /* owned from here on, for imatrix_free */
        if (!rd_i32(&r, &e->ncall) || !rd_i32(&r, &e->n)) {
            rc = err_set(KITE_E_FORMAT, "%s: entry '%s': truncated before its call and value counts", what, e->name);
            goto fail;
        }
        if (e->ncall < 0) {
            rc = err_set(KITE_E_FORMAT, "%s: entry '%s': negative call count %d", what, e->name, e->ncall);
            goto fail;
        }
        if (e->n < 1 || (size_t)(r.end - r.p) / 4 < (size_t)e->n) {
            rc = err_set(KITE_E_FORMAT, "%s: entry '%s': %d values (at least 1, within the file's %zu bytes left)",
                         what, e->name, e->n, (size_t)(r.end - r.p));
            goto fail;
        }
        if (!(e->values = malloc((size_t)e->n * sizeof *e->values))) {
            rc = err_set(KITE_E_NOMEM, "imatrix: out of memory");
            goto fail;
        }
        for (int32_t j = 0; j < e->n; j++) {
            int32_t bits = 0;
            rd_i32(&r, &bits); /* cannot fail: n values fit (checked above) */
            memcpy(&e->values[j], &bits, 4);
            if (!isfinite(e->values[j]) || e->values[j] < 0) {
                rc = err_set(KITE_E_FORMAT, "%s: entry '%s': value %d is %g (a mean square: finite, >= 0)", what,
                             e->name, j, (double)e->values[j]);
                goto fail;
            }
        }
        if ((rc = finish_entry(e))) goto fail;
    }
    if ((rc = check_unique(m, what))) goto fail;
    if (r.p != r.end) { /* the trailer: chunk count and dataset name (newer files) */
        int32_t dl = 0;
        if (!rd_i32(&r, &m->chunks) || !rd_i32(&r, &dl)) {
            rc = err_set(KITE_E_FORMAT, "%s: %zu bytes after the entries are not a chunk count and dataset name", what,
                         (size_t)(r.end - r.p));
            goto fail;
        }
        if (dl < 0 || dl != r.end - r.p) {
            rc = err_set(KITE_E_FORMAT, "%s: dataset name length %d, but %zu bytes are left", what, dl,
                         (size_t)(r.end - r.p));
            goto fail;
        }
        if (!(m->dataset = malloc((size_t)dl + 1))) {
            rc = err_set(KITE_E_NOMEM, "imatrix: out of memory");
            goto fail;
        }
        memcpy(m->dataset, r.p, (size_t)dl);
        m->dataset[dl] = '\0';
        r.p += dl;
    }
    *out = m;
    return KITE_OK;
fail:
    imatrix_free(m);
    return rc;
}

int imatrix_read(const char *path, imatrix **out) {
    if (!path || !out) return err_set(KITE_E_ARG, "imatrix_read: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = KITE_OK;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                rc = err_set(KITE_E_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        const size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) rc = err_set(KITE_E_IO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (!rc) rc = imatrix_parse(buf, len, path, out);
    free(buf);
    return rc;
}

/* ---- writing ------------------------------------------------------------- */

static bool wr_i32(FILE *f, int32_t v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    return fwrite(b, 1, 4, f) == 4;
}

static bool wr_entry(FILE *f, const imatrix_entry *e) {
    const size_t nl = strlen(e->name);
    if (!wr_i32(f, (int32_t)nl) || fwrite(e->name, 1, nl, f) != nl || !wr_i32(f, e->ncall) || !wr_i32(f, e->n))
        return false;
    for (int32_t j = 0; j < e->n; j++) {
        int32_t bits;
        memcpy(&bits, &e->values[j], 4);
        if (!wr_i32(f, bits)) return false;
    }
    return true;
}

int imatrix_write(const imatrix *m, const char *path) {
    if (!m || !path || m->n_entries < 1) return err_set(KITE_E_ARG, "imatrix_write: nothing to write");
    char tmp[TMPF_PATH_MAX];
    if (tmpf_name(tmp, sizeof tmp, path, "tmp")) return err_set(KITE_E_ARG, "%s: path too long", path);
    const int slot = tmpf_register(tmp);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        tmpf_unregister(slot);
        return err_set(KITE_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    bool ok = wr_i32(f, m->n_entries);
    for (int32_t i = 0; ok && i < m->n_entries; i++) ok = wr_entry(f, &m->e[i]);
    const char *ds = m->dataset ? m->dataset : "";
    const size_t dl = strlen(ds);
    ok = ok && wr_i32(f, m->chunks) && wr_i32(f, (int32_t)dl) && fwrite(ds, 1, dl, f) == dl;
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    int rc = KITE_OK;
    if (!ok) rc = err_set(KITE_E_IO, "%s: write failed: %s", path, strerror(errno));
    else if (rename(tmp, path)) rc = err_set(KITE_E_IO, "%s: cannot rename %s: %s", path, tmp, strerror(errno));
    if (rc) unlink(tmp);
    tmpf_unregister(slot);
    return rc;
}

/* ---- collection ------------------------------------------------------------ */

typedef struct acc {
    double *sum;   /* [width] sum of x^2 */
    int64_t rows;
    int32_t width;
} acc;

typedef struct collector {
    acc *a;        /* [(n_layer + 1) * TAP_COUNT] */
    acc *ex;       /* [n_layer][n_expert][2] experts' TAP_FFN_IN, TAP_DOWN_IN; NULL without experts */
    int32_t n_layer, n_expert;
    bool head;     /* collect TAP_OUTPUT_IN */
    int status;
} collector;

/* Adds n_tok rows of x (width floats) to a. */
static void acc_add(collector *c, acc *a, const float *x, int32_t n_tok, int32_t width) {
    if (!a->sum) {
        if (!(a->sum = calloc((size_t)width, sizeof *a->sum))) {
            c->status = err_set(KITE_E_NOMEM, "imatrix: out of memory");
            return;
        }
        a->width = width;
    }
    if (a->width != width) {
        c->status = err_set(KITE_E_STATE, "imatrix: input width %d, then %d", a->width, width);
        return;
    }
    for (int32_t t = 0; t < n_tok; t++) {
        const float *r = x + (size_t)t * (size_t)width;
        for (int32_t j = 0; j < width; j++) a->sum[j] += (double)r[j] * (double)r[j];
    }
    a->rows += n_tok;
}

static void imatrix_expert_tap(void *user, int32_t layer, int32_t expert, int point, const float *x, int32_t n_tok,
                               int32_t width) {
    collector *c = user;
    if (c->status || !c->ex || layer < 0 || layer >= c->n_layer || expert < 0 || expert >= c->n_expert) return;
    if (point != TAP_FFN_IN && point != TAP_DOWN_IN) return;
    acc_add(c, &c->ex[((size_t)layer * (size_t)c->n_expert + (size_t)expert) * 2 + (point == TAP_DOWN_IN)], x, n_tok,
            width);
}

static void imatrix_tap(void *user, int32_t layer, int point, const float *x, int32_t n_tok, int32_t width) {
    collector *c = user;
    if (c->status || layer < 0 || layer > c->n_layer || point < 0 || point >= TAP_COUNT) return;
    if (point == TAP_OUTPUT_IN && !c->head) return;
    acc_add(c, &c->a[(size_t)layer * TAP_COUNT + (size_t)point], x, n_tok, width);
}

/* The tap point whose rows the tensor of role multiplies, or -1. */
static int point_of_role(int role) {
    switch (role) {
    case TR_ATTN_Q:
    case TR_ATTN_K:
    case TR_ATTN_V:
    case TR_ATTN_QKV: return TAP_ATTN_IN;
    case TR_ATTN_OUT: return TAP_WO_IN;
    case TR_FFN_GATE:
    case TR_FFN_UP:
    case TR_FFN_GATE_INP: return TAP_FFN_IN;
    case TR_FFN_DOWN: return TAP_DOWN_IN;
    case TR_OUTPUT: return TAP_OUTPUT_IN;
    default: return -1;
    }
}

/* log(softmax(logits)[tok]) in double. */
static double log_prob(const float *logits, int32_t n_vocab, kite_token tok) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    double s = 0;
    for (int32_t i = 0; i < n_vocab; i++) s += exp((double)logits[i] - (double)max);
    return (double)logits[tok] - (double)max - log(s);
}

/* Appends the entry `name` from k accumulators (one per expert; k = 1 for a
 * plain matrix), each of width ne0; false (nothing appended) when one of
 * them saw no rows. */
static int add_entry(imatrix *m, char *name, const acc *a, int32_t k, int64_t ne0, int32_t n_chunks, FILE *log,
                     bool *added) {
    *added = false;
    for (int32_t e = 0; e < k; e++)
        if (!a[e].sum || a[e].rows == 0 || a[e].width != ne0) {
            if (log) {
                if (k > 1) fprintf(log, "imatrix: %s: expert %d saw no tokens (not collected)\n", name, e);
                else fprintf(log, "imatrix: %s: no activations reached it (not collected)\n", name);
            }
            return KITE_OK;
        }
    imatrix_entry *en = &m->e[m->n_entries];
    en->name = name;
    en->ncall = n_chunks;
    en->n = (int32_t)ne0 * k;
    if (!(en->values = malloc((size_t)en->n * sizeof *en->values))) return err_set(KITE_E_NOMEM, "imatrix: out of memory");
    m->n_entries++; /* owns name from here on */
    *added = true;
    for (int32_t e = 0; e < k; e++)
        for (int64_t j = 0; j < ne0; j++)
            en->values[(size_t)e * (size_t)ne0 + (size_t)j] =
                (float)(a[e].sum[j] / (double)a[e].rows * (double)n_chunks);
    return finish_entry(en);
}

/* Builds the entries of m from the accumulators, in the GGUF's tensor order. */
static int build_entries(const kite_model *model, const collector *c, int32_t n_chunks, imatrix *m, FILE *log) {
    const gguf_ctx *g = model->gguf;
    if (!(m->e = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *m->e))) return err_set(KITE_E_NOMEM, "imatrix: out of memory");
    acc *tmp = c->ex ? calloc((size_t)c->n_expert, sizeof *tmp) : NULL;
    if (c->ex && !tmp) return err_set(KITE_E_NOMEM, "imatrix: out of memory");
    int rc = KITE_OK;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        char *name = gguf_str_dup(g->tensors[i].name);
        if (!name) {
            rc = err_set(KITE_E_NOMEM, "imatrix: out of memory");
            break;
        }
        int layer = -1;
        const int role = arch_parse_name(name, &layer);
        const int64_t ne0 = g->tensors[i].ne[0];
        bool added = false;
        if (role == TR_FFN_GATE_EXPS || role == TR_FFN_UP_EXPS || role == TR_FFN_DOWN_EXPS) {
            if (c->ex && layer >= 0 && layer < c->n_layer && g->tensors[i].ne[2] == c->n_expert) {
                const int slot = role == TR_FFN_DOWN_EXPS;
                for (int32_t e = 0; e < c->n_expert; e++)
                    tmp[e] = c->ex[((size_t)layer * (size_t)c->n_expert + (size_t)e) * 2 + (size_t)slot];
                rc = add_entry(m, name, tmp, c->n_expert, ne0, n_chunks, log, &added);
            }
        } else {
            const int pt = point_of_role(role);
            const bool want = pt >= 0 && (pt == TAP_OUTPUT_IN ? c->head : layer >= 0 && layer < c->n_layer);
            if (want) {
                const int32_t l = pt == TAP_OUTPUT_IN ? c->n_layer : layer;
                rc = add_entry(m, name, &c->a[(size_t)l * TAP_COUNT + (size_t)pt], 1, ne0, n_chunks, log, &added);
            }
        }
        if (!added) free(name);
    }
    free(tmp);
    if (!rc && m->n_entries == 0)
        rc = err_set(KITE_E_STATE, "imatrix: no weight tensor received activations (forward-pass taps not wired for "
                     "this architecture?)");
    return rc;
}

int imatrix_collect(kite_model *model, const char *text, size_t len, const imatrix_params *p, imatrix **out,
                    double *ppl) {
    if (!model || !text || !p || !out) return err_set(KITE_E_ARG, "imatrix_collect: NULL argument");
    *out = NULL;
    if (model->vocab_only || !model->layers || !model->gguf)
        return err_set(KITE_E_ARG, "imatrix: %s has no weights", model->path ? model->path : "model");
    const int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : 512;
    if (n_ctx < 2) return err_set(KITE_E_ARG, "imatrix: a chunk of %d tokens is too short", n_ctx);
    const kite_token bos = kite_token_bos(model);
    size_t cap = len + 16, n_tok = 0;
    kite_token *tok = malloc(cap * sizeof *tok);
    collector c = {.n_layer = model->hp.n_layer, .n_expert = model->hp.n_expert, .head = p->process_output};
    c.a = calloc((size_t)(c.n_layer + 1) * TAP_COUNT, sizeof *c.a);
    if (c.n_expert > 0) c.ex = calloc((size_t)c.n_layer * (size_t)c.n_expert * 2, sizeof *c.ex);
    kite_ctx *ctx = NULL;
    imatrix *m = calloc(1, sizeof *m);
    int rc = KITE_OK;
    if (!tok || !c.a || !m || (c.n_expert > 0 && !c.ex)) {
        rc = err_set(KITE_E_NOMEM, "imatrix: out of memory");
        goto done;
    }
    /* with BOS, as llama-imatrix tokenizes (add_special) */
    if ((rc = kite_tokenize(model, text, len, bos >= 0, tok, cap, &n_tok))) goto done;
    const int64_t n_max = (int64_t)n_tok / n_ctx;
    if (n_max < 1) {
        rc = err_set(KITE_E_ARG, "imatrix: the text gives %zu tokens, less than one chunk of %d (-c)", n_tok, n_ctx);
        goto done;
    }
    const int32_t n_chunks = p->n_chunks > 0 && p->n_chunks < n_max ? p->n_chunks : (int32_t)n_max;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = n_ctx;
    if (p->n_threads > 0) cp.n_threads = p->n_threads; /* else the context's default: all CPUs */
    if ((rc = kite_ctx_new(model, &cp, &ctx))) goto done;
    ctx_set_tap(ctx, imatrix_tap, &c);
    ctx_set_expert_tap(ctx, imatrix_expert_tap, &c);
    const int32_t n_vocab = model->hp.n_vocab, first = n_ctx / 2;
    double nll = 0;
    int64_t count = 0;
    for (int32_t i = 0; i < n_chunks; i++) {
        kite_token *chunk = tok + (size_t)i * (size_t)n_ctx;
        const kite_token orig = chunk[0];
        if (bos >= 0) chunk[0] = bos; /* every chunk starts with BOS, replacing its first token */
        rc = kite_ctx_truncate(ctx, 0);
        if (!rc) rc = kite_ctx_eval(ctx, chunk, n_ctx, true);
        chunk[0] = orig;
        if (!rc) rc = c.status;
        if (rc) goto done;
        for (int32_t j = first; j < n_ctx - 1; j++, count++)
            nll -= log_prob(kite_ctx_logits(ctx, j), n_vocab, chunk[j + 1]);
        core_progress_report(&p->progress, (uint64_t)i + 1, (uint64_t)n_chunks, NULL);
    }
    ctx_set_tap(ctx, NULL, NULL);
    ctx_set_expert_tap(ctx, NULL, NULL);
    m->chunks = n_chunks;
    if (p->dataset && !(m->dataset = strdup(p->dataset))) {
        rc = err_set(KITE_E_NOMEM, "imatrix: out of memory");
        goto done;
    }
    if ((rc = build_entries(model, &c, n_chunks, m, p->log))) goto done;
    if (ppl) *ppl = count > 0 ? exp(nll / (double)count) : 0.0;
    *out = m;
    m = NULL;
done:
    imatrix_free(m);
    kite_ctx_free(ctx);
    if (c.a)
        for (size_t i = 0; i < (size_t)(c.n_layer + 1) * TAP_COUNT; i++) free(c.a[i].sum);
    free(c.a);
    if (c.ex)
        for (size_t i = 0; i < (size_t)c.n_layer * (size_t)c.n_expert * 2; i++) free(c.ex[i].sum);
    free(c.ex);
    free(tok);
    return rc;
}
