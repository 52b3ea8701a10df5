/*
 * smoothquant.c - SmoothQuant scales and the fold of per-channel input
 * scales into a model file; the outlier transformation (smoothquant.h).
 *
 * DESIGN
 *   sq_fold_write() is shared: given, per layer and input point, scales s
 *   (NULL: point untouched), it streams every tensor of the input to the
 *   output, rewriting the affected ones as F32 rows
 *     out[r][c] = in[r][c] * colmul[c] * rowmul[r]
 *   (colmul = s for the matrices reading the point, 1/s for the norm gains
 *   and biases producing it; rowmul = 1/s for the w_up / wv rows producing
 *   down_in / wo_in).  Scales are computed once for the whole model before
 *   anything is written: n_layer * (2 n_embd + n_q + n_ff) floats (twice,
 *   with the inverses).
 *
 * OWNERSHIP / THREAD SAFETY
 *   Everything is local to a call; see smoothquant.h.
 */
#include "quant/smoothquant.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpfile.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/context.h"
#include "model/model.h"
#include "quant/calib.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

enum { P_ATTN = 0, P_WO, P_FFN, P_DOWN, P_COUNT };

/* The layer roles (model/arch.h) smoothing reads or rewrites, in load order. */
static const int sq_roles[] = {TR_ATTN_NORM, TR_ATTN_NORM_B, TR_ATTN_Q,   TR_ATTN_K,      TR_ATTN_V,
                               TR_ATTN_V_B,  TR_ATTN_OUT,    TR_FFN_NORM, TR_FFN_NORM_B, TR_FFN_GATE,
                               TR_FFN_UP,    TR_FFN_UP_B,    TR_FFN_DOWN};
#define N_SQ_ROLES (sizeof sq_roles / sizeof sq_roles[0])

typedef struct sq_model {
    gguf_ctx *in;
    int32_t n_layer;
    const gguf_tensor **t;  /* [n_layer][TR_COUNT], NULL: absent (or a role not in sq_roles) */
    int64_t width[P_COUNT]; /* input width of each point (0: no layer has it) */
    float **s;              /* [n_layer][P_COUNT] scales, or NULL: point not smoothed */
    float **inv;            /* [n_layer][P_COUNT] 1 / s */
} sq_model;

static const gguf_tensor *tens(const sq_model *m, int32_t l, int role) { return m->t[(size_t)l * TR_COUNT + role]; }

static void sq_model_free(sq_model *m) {
    if (m->s)
        for (size_t k = 0; k < (size_t)m->n_layer * P_COUNT; k++) {
            free(m->s[k]);
            free(m->inv[k]);
        }
    free(m->s);
    free(m->inv);
    free(m->t);
    gguf_close(m->in);
    memset(m, 0, sizeof *m);
}

/* Opens in_path and files its llama-named layer tensors by role. */
static int sq_model_open(const char *in_path, sq_model *m) {
    memset(m, 0, sizeof *m);
    gguf_open_params op = {.use_mmap = true};
    int rc = gguf_open(in_path, &op, &m->in);
    if (rc) return rc;
    int32_t n_layer = 0;
    for (uint64_t i = 0; i < m->in->n_tensors; i++) {
        const gguf_str nm = m->in->tensors[i].name;
        char name[128];
        const size_t len = nm.len < sizeof name ? (size_t)nm.len : sizeof name - 1;
        memcpy(name, nm.ptr, len);
        name[len] = '\0';
        const int l = arch_name_layer(name);
        if (l >= 0 && l < 100000 && l + 1 > n_layer) n_layer = l + 1;
    }
    if (n_layer == 0) return err_set(KITE_E_FORMAT, "%s: no blk.N tensors to smooth", in_path);
    m->n_layer = n_layer;
    const size_t nk = (size_t)n_layer * P_COUNT;
    m->t = calloc((size_t)n_layer * TR_COUNT, sizeof *m->t);
    m->s = calloc(nk, sizeof *m->s);
    m->inv = calloc(nk, sizeof *m->inv);
    if (!m->t || !m->s || !m->inv) return err_set(KITE_E_NOMEM, "smoothquant: out of memory");
    char name[ARCH_NAME_MAX];
    for (int32_t l = 0; l < n_layer; l++)
        for (size_t k = 0; k < N_SQ_ROLES; k++) {
            const int r = sq_roles[k];
            if (!arch_tensor_name(NULL, r, l, name, sizeof name))
                return err_set(KITE_E_STATE, "smoothquant: no name for role %d of layer %d", r, (int)l);
            const gguf_tensor *t = gguf_find_tensor(m->in, name);
            if (t && (t->ne[2] != 1 || t->ne[3] != 1 || !dtype_get(t->type) || !dtype_get(t->type)->to_float))
                return err_set(KITE_E_UNSUPPORTED, "smoothquant: tensor %s: type %s or shape not supported", name,
                               dtype_name(t->type));
            m->t[(size_t)l * TR_COUNT + r] = t;
        }
    for (int32_t l = 0; l < n_layer; l++) {
        if (tens(m, l, TR_ATTN_NORM)) m->width[P_ATTN] = tens(m, l, TR_ATTN_NORM)->ne[0];
        if (tens(m, l, TR_ATTN_OUT)) m->width[P_WO] = tens(m, l, TR_ATTN_OUT)->ne[0];
        if (tens(m, l, TR_FFN_NORM)) m->width[P_FFN] = tens(m, l, TR_FFN_NORM)->ne[0];
        if (tens(m, l, TR_FFN_DOWN)) m->width[P_DOWN] = tens(m, l, TR_FFN_DOWN)->ne[0];
    }
    return KITE_OK;
}

/* Whether point p of layer l can be folded (all its tensors present, shapes consistent). */
static bool point_ok(const sq_model *m, int32_t l, int p) {
    const int64_t w = m->width[p];
    const gguf_tensor *norm, *q, *k, *v, *o, *gate, *up, *down;
    switch (p) {
    case P_ATTN:
        norm = tens(m, l, TR_ATTN_NORM), q = tens(m, l, TR_ATTN_Q), k = tens(m, l, TR_ATTN_K);
        v = tens(m, l, TR_ATTN_V);
        return norm && q && k && v && norm->ne[0] == w && q->ne[0] == w && k->ne[0] == w && v->ne[0] == w;
    case P_WO: /* one wv row per wo input channel: n_head == n_head_kv; no v bias */
        o = tens(m, l, TR_ATTN_OUT), v = tens(m, l, TR_ATTN_V);
        return o && v && !tens(m, l, TR_ATTN_V_B) && o->ne[0] == w && v->ne[1] == w;
    case P_FFN:
        norm = tens(m, l, TR_FFN_NORM), gate = tens(m, l, TR_FFN_GATE), up = tens(m, l, TR_FFN_UP);
        return norm && gate && up && norm->ne[0] == w && gate->ne[0] == w && up->ne[0] == w;
    case P_DOWN:
        down = tens(m, l, TR_FFN_DOWN), up = tens(m, l, TR_FFN_UP), gate = tens(m, l, TR_FFN_GATE);
        return down && up && gate && !tens(m, l, TR_FFN_UP_B) && down->ne[0] == w && up->ne[1] == w;
    default: return false;
    }
}

/* Allocates s / inv of (l, p), s set to 1. */
static int alloc_point(sq_model *m, int32_t l, int p) {
    const size_t k = (size_t)l * P_COUNT + (size_t)p, w = (size_t)m->width[p];
    m->s[k] = malloc(w * sizeof(float));
    m->inv[k] = malloc(w * sizeof(float));
    if (!m->s[k] || !m->inv[k]) return err_set(KITE_E_NOMEM, "smoothquant: out of memory");
    for (size_t j = 0; j < w; j++) m->s[k][j] = m->inv[k][j] = 1.0f;
    return KITE_OK;
}

static void set_inverse(sq_model *m, int32_t l, int p) {
    const size_t k = (size_t)l * P_COUNT + (size_t)p;
    for (int64_t j = 0; j < m->width[p]; j++) m->inv[k][j] = 1.0f / m->s[k][j];
}

/* amax[j] = max(amax[j], max_r |W[r][j]|). */
static int col_absmax(const gguf_tensor *t, float *amax) {
    const dtype_traits *tr = dtype_get(t->type);
    const int64_t ne0 = t->ne[0];
    const size_t rb = dtype_row_size(t->type, ne0);
    float *row = malloc((size_t)ne0 * sizeof(float));
    if (!row) return err_set(KITE_E_NOMEM, "smoothquant: out of memory");
    for (int64_t r = 0; r < t->ne[1]; r++) {
        tr->to_float((const char *)t->data + (size_t)r * rb, row, ne0);
        for (int64_t j = 0; j < ne0; j++)
            if (fabsf(row[j]) > amax[j]) amax[j] = fabsf(row[j]);
    }
    free(row);
    return KITE_OK;
}

/* ---- writing --------------------------------------------------------------------- */

typedef struct fold_src {
    const gguf_tensor *t;
    const float *colmul; /* [ne0] or NULL */
    const float *rowmul; /* [ne1] or NULL */
} fold_src;

static int fold_fill(void *user, int64_t row0, int64_t n_rows, void *dst) {
    const fold_src *f = user;
    const dtype_traits *tr = dtype_get(f->t->type);
    const int64_t ne0 = f->t->ne[0];
    const size_t rb = dtype_row_size(f->t->type, ne0);
    for (int64_t r = row0; r < row0 + n_rows; r++) {
        float *o = (float *)dst + (size_t)(r - row0) * (size_t)ne0;
        tr->to_float((const char *)f->t->data + (size_t)r * rb, o, ne0);
        if (f->colmul)
            for (int64_t j = 0; j < ne0; j++) o[j] *= f->colmul[j];
        if (f->rowmul)
            for (int64_t j = 0; j < ne0; j++) o[j] *= f->rowmul[r];
    }
    return KITE_OK;
}

/* Which scales tensor t gets: fills f, returns true when it is rewritten. */
static bool fold_of(const sq_model *m, const gguf_tensor *t, fold_src *f) {
    *f = (fold_src){.t = t};
    for (int32_t l = 0; l < m->n_layer; l++)
        for (size_t k = 0; k < N_SQ_ROLES; k++) {
            const int r = sq_roles[k];
            if (tens(m, l, r) != t) continue;
            float *const *s = m->s + (size_t)l * P_COUNT, *const *inv = m->inv + (size_t)l * P_COUNT;
            switch (r) {
            case TR_ATTN_NORM: case TR_ATTN_NORM_B: f->colmul = inv[P_ATTN]; break;
            case TR_FFN_NORM: case TR_FFN_NORM_B: f->colmul = inv[P_FFN]; break;
            case TR_ATTN_Q: case TR_ATTN_K: f->colmul = s[P_ATTN]; break;
            case TR_ATTN_V: f->colmul = s[P_ATTN]; f->rowmul = inv[P_WO]; break;
            case TR_ATTN_OUT: f->colmul = s[P_WO]; break;
            case TR_FFN_GATE: f->colmul = s[P_FFN]; break;
            case TR_FFN_UP: f->colmul = s[P_FFN]; f->rowmul = inv[P_DOWN]; break;
            case TR_FFN_DOWN: f->colmul = s[P_DOWN]; break;
            default: break;
            }
            return f->colmul || f->rowmul;
        }
    return false;
}

static int sq_fold_write(const sq_model *m, const char *out_path) {
    const gguf_ctx *in = m->in;
    int rc = KITE_OK;
    fold_src *srcs = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *srcs);
    gguf_writer *w = gguf_writer_new();
    if (!srcs || !w) {
        rc = err_set(KITE_E_NOMEM, "smoothquant: out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < in->n_kv && !rc; i++) {
        char *key = gguf_str_dup(in->kv[i].key);
        if (!key) rc = err_set(KITE_E_NOMEM, "smoothquant: out of memory");
        else rc = gguf_writer_set_value(w, key, &in->kv[i].value);
        free(key);
    }
    for (uint64_t i = 0; i < in->n_tensors && !rc; i++) {
        const gguf_tensor *t = &in->tensors[i];
        char *name = gguf_str_dup(t->name);
        if (!name) {
            rc = err_set(KITE_E_NOMEM, "smoothquant: out of memory");
            break;
        }
        if (fold_of(m, t, &srcs[i]))
            rc = gguf_writer_add_tensor_cb(w, name, KITE_DTYPE_F32, t->n_dims, t->ne, fold_fill, &srcs[i]);
        else
            rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
        free(name);
    }
    if (!rc) rc = gguf_writer_write(w, out_path);
done:
    gguf_writer_free(w);
    free(srcs);
    return rc;
}

/* ---- SmoothQuant ----------------------------------------------------------------- */

static int read_text(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KITE_E_IO, "smoothquant: cannot open calibration text %s", path);
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int rc = KITE_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t nc = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, nc);
            if (!nb) {
                rc = err_set(KITE_E_NOMEM, "smoothquant: out of memory reading %s", path);
                break;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096) break;
    }
    if (!rc && ferror(f)) rc = err_set(KITE_E_IO, "smoothquant: read error on %s", path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return KITE_OK;
}

/* s_j from the activation and weight maxima (smoothquant.h). */
static float smooth_scale(float ax, float aw, float alpha) {
    if (!(ax > 0.0f) || !(aw > 0.0f)) return 1.0f;
    float s = powf(ax, alpha) / powf(aw, 1.0f - alpha);
    if (!(s >= SQ_S_MIN)) s = SQ_S_MIN; /* also NaN */
    if (s > SQ_S_MAX) s = SQ_S_MAX;
    return s;
}

static const int tap_of_point[P_COUNT] = {TAP_ATTN_IN, TAP_WO_IN, TAP_FFN_IN, TAP_DOWN_IN};
static const char *const point_names[P_COUNT] = {"attn_in", "wo_in", "ffn_in", "down_in"};

/* Scales of every layer from a calibration run over p's text. */
static int sq_compute(sq_model *m, const char *in_path, const sq_params *p) {
    kite_model *model = NULL;
    calib *cal = NULL;
    char *text = NULL;
    kite_token *toks = NULL;
    float *amax = NULL;
    size_t len = 0;
    int64_t n_tok = 0;
    kite_model_params mp = kite_model_default_params();
    mp.no_repack = p->no_repack;
    int rc = read_text(p->calib_path, &text, &len);
    if (!rc) rc = kite_model_load(in_path, &mp, &model);
    if (!rc) rc = calib_tokenize(model, text, len, p->calib_tokens, &toks, &n_tok);
    calib_params cp = {.n_threads = p->n_threads > 0 ? p->n_threads : 1, .log = p->log};
    if (!rc) rc = calib_new(model, toks, n_tok, &cp, &cal);
    if (!rc && p->log)
        fprintf(p->log, "smoothquant: alpha %.2f, calibration %s: %" PRId64 " tokens, %d windows\n", (double)p->alpha,
                p->calib_path, n_tok, calib_n_windows(cal));
    int64_t wmax = 1;
    for (int k = 0; k < P_COUNT; k++)
        if (m->width[k] > wmax) wmax = m->width[k];
    if (!rc && !(amax = malloc((size_t)wmax * sizeof(float)))) rc = err_set(KITE_E_NOMEM, "smoothquant: out of memory");
    if (!rc && model->hp.n_layer != m->n_layer)
        rc = err_set(KITE_E_FORMAT, "smoothquant: %s: %d layers in the metadata, %d in the tensor names", in_path,
                     model->hp.n_layer, m->n_layer);
    static const int mats[P_COUNT][3] = {
        {TR_ATTN_Q, TR_ATTN_K, TR_ATTN_V}, {TR_ATTN_OUT, -1, -1}, {TR_FFN_GATE, TR_FFN_UP, -1}, {TR_FFN_DOWN, -1, -1}};
    for (int32_t l = 0; l < m->n_layer && !rc; l++) {
        if ((rc = calib_load(cal, l))) break;
        for (int pt = 0; pt < P_COUNT && !rc; pt++) {
            const calib_point *cp_ = calib_get(cal, l, tap_of_point[pt]);
            if (!point_ok(m, l, pt) || !cp_ || cp_->width != m->width[pt]) {
                if (p->log) fprintf(p->log, "smoothquant: layer %d %s: not smoothed\n", l, point_names[pt]);
                continue;
            }
            if ((rc = alloc_point(m, l, pt))) break;
            for (int64_t j = 0; j < m->width[pt]; j++) amax[j] = 0.0f;
            for (int k = 0; k < 3 && !rc; k++)
                if (mats[pt][k] >= 0) rc = col_absmax(tens(m, l, mats[pt][k]), amax);
            float *s = m->s[(size_t)l * P_COUNT + (size_t)pt];
            float xmax = 0, xmed = 0, smin = INFINITY, smax = 0;
            for (int64_t j = 0; j < m->width[pt]; j++) {
                s[j] = smooth_scale(cp_->max_abs[j], amax[j], p->alpha);
                if (cp_->max_abs[j] > xmax) xmax = cp_->max_abs[j];
                xmed += cp_->max_abs[j] / (float)m->width[pt];
                if (s[j] < smin) smin = s[j];
                if (s[j] > smax) smax = s[j];
            }
            set_inverse(m, l, pt);
            if (p->log)
                fprintf(p->log, "smoothquant: layer %d %-7s max|x| %.3g (mean of channel maxima %.3g), s in [%.3g, %.3g]\n",
                        l, point_names[pt], (double)xmax, (double)xmed, (double)smin, (double)smax);
        }
    }
    free(amax);
    calib_free(cal);
    free(toks);
    free(text);
    kite_model_free(model);
    return rc;
}

int sq_smooth_model(const char *in_path, const char *out_path, const sq_params *p) {
    if (!in_path || !out_path || !p) return err_set(KITE_E_ARG, "smoothquant: NULL argument");
    if (!(p->alpha >= 0.0f && p->alpha <= 1.0f))
        return err_set(KITE_E_ARG, "smoothquant: alpha %g is not in [0, 1]", (double)p->alpha);
    if (!p->calib_path) return err_set(KITE_E_ARG, "smoothquant: a calibration text is required (--calib TEXT)");
    sq_model m;
    int rc = sq_model_open(in_path, &m);
    if (!rc) rc = sq_compute(&m, in_path, p);
    if (!rc) rc = sq_fold_write(&m, out_path);
    sq_model_free(&m);
    return rc;
}

int sq_quantize(const char *in_path, const char *out_path, uint32_t out_type, const sq_params *p) {
    if (!out_path) return err_set(KITE_E_ARG, "smoothquant: NULL output path");
    const size_t n = strlen(out_path) + 48;
    char *tmp = malloc(n);
    if (!tmp) return err_set(KITE_E_NOMEM, "smoothquant: out of memory");
    tmpf_name(tmp, n, out_path, "smooth"); /* unique: two runs never share it */
    const int slot = tmpf_register(tmp);   /* removed on SIGINT/SIGTERM */
    int rc = sq_smooth_model(in_path, tmp, p);
    if (!rc) {
        quant_params qp = {.type = out_type, .n_threads = p->n_threads, .log = p->log, .method = QUANT_RTN};
        rc = quant_model(tmp, out_path, &qp, NULL);
    }
    remove(tmp);
    tmpf_unregister(slot);
    free(tmp);
    return rc;
}

/* ---- outlier transformation ------------------------------------------------------ */

int sq_make_outliers(const char *in_path, const char *out_path, float factor, int32_t n_channels) {
    if (!in_path || !out_path) return err_set(KITE_E_ARG, "outliers: NULL argument");
    if (!(factor > 0.0f) || !isfinite(factor) || n_channels < 0)
        return err_set(KITE_E_ARG, "outliers: factor %g must be positive and finite, channels %d >= 0", (double)factor,
                       n_channels);
    sq_model m;
    int rc = sq_model_open(in_path, &m);
    for (int32_t l = 0; l < m.n_layer && !rc; l++)
        for (int pt = P_ATTN; pt <= P_FFN && !rc; pt += P_FFN - P_ATTN) {
            if (!point_ok(&m, l, pt)) continue;
            if ((rc = alloc_point(&m, l, pt))) break;
            float *s = m.s[(size_t)l * P_COUNT + (size_t)pt];
            for (int32_t k = 0; k < n_channels && k < m.width[pt]; k++) s[(5 + 37 * (int64_t)k) % m.width[pt]] = 1.0f / factor;
            set_inverse(&m, l, pt);
        }
    if (!rc) rc = sq_fold_write(&m, out_path);
    sq_model_free(&m);
    return rc;
}
