/*
 * method.c - GPTQ / AWQ / group-grid tensor production for quant_model
 * (see method.h for the routes).
 *
 * DESIGN
 *   Tensor roles are model/arch.h's (arch_parse_name); the methods use the
 *   norms and matrices of attention and the dense FFN and, as layer n_layer
 *   (TAP_OUTPUT_IN), output_norm and output.  role_ix[layer][role] finds a
 *   layer's tensors.
 *
 *   GPTQ: the first chunk of a matrix loads its layer's calibration group
 *   and the GPTQ factor of its input (one per (layer, tap point), shared by
 *   wq/wk/wv and by w_gate/w_up, kept until the layer changes); rows are
 *   then quantized on the pool, each thread with its own scratch.
 *
 *   AWQ: the first tensor of a layer to be written triggers the layer's
 *   searches (attention input, wo input with the scale tied across the query
 *   heads of a KV head, FFN input, w_down input; the head for layer
 *   n_layer) and builds the folded float weights of every tensor of the
 *   layer; later tensors of the layer are served from them.  A search is
 *   skipped (scale 1) when none of its matrices is quantized or the tensor
 *   that absorbs the scale is missing or has another shape.
 *
 * OWNERSHIP / THREAD SAFETY
 *   See method.h.
 */
#include "quant/method.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timing.h"
#include "kite.h"
#include "model/arch.h"
#include "model/context.h"
#include "model/model.h"
#include "quant/awq.h"
#include "quant/calib.h"
#include "quant/gptq.h"
#include "quant/grid.h"
#include "quant/linalg.h"
#include "tensor/dtype.h"

#define CALIB_MAX_TEXT ((size_t)256 << 20) /* calibration texts above 256 MiB are refused */

/* Whether the methods use tensors of this role (head roles: layer n_layer). */
static bool method_role(int role) {
    switch (role) {
    case TR_ATTN_NORM: case TR_ATTN_Q: case TR_ATTN_K: case TR_ATTN_V: case TR_ATTN_OUT:
    case TR_FFN_NORM: case TR_FFN_GATE: case TR_FFN_UP: case TR_FFN_DOWN:
    case TR_OUTPUT_NORM: case TR_OUTPUT: return true;
    default: return false;
    }
}

struct qm_state {
    const gguf_ctx *in;
    const quant_choice *plan;
    quant_params p;
    threadpool *tp;
    int n_threads;
    kite_model *model;
    calib *cal;
    int32_t n_layer;
    int32_t *t_layer;       /* [n_tensors] layer of a role tensor, -1 otherwise */
    int8_t *t_role;         /* [n_tensors] enum tensor_role, TR_NONE */
    int64_t *role_ix;       /* [(n_layer + 1) * TR_COUNT] tensor index or -1 */
    int8_t *route;          /* [n_tensors] enum qm_route */
    int8_t *fallback;       /* [n_tensors] 1: GPTQ asked for, RTN written (allow_fallback) */
    uint32_t *qtype;        /* [n_tensors] planned output type (the type AWQ searches for) */
    bool *qconv;            /* [n_tensors] planned conversion */
    /* GPTQ state of one layer */
    int32_t g_layer;
    gptq_factor fac[TAP_COUNT];
    la_ctx *la;             /* blocked linear algebra on the pool */
    double sweep_s;         /* seconds in GPTQ row sweeps */
    double sweep_cpu_s;     /* process CPU seconds in them */
    double sweep_flops;     /* their nominal flops (rows x n^2: the lazy updates' multiply-adds) */
    float *scratch;         /* [n_threads][scratch_floats] */
    size_t scratch_floats;
    /* AWQ state of one layer */
    int32_t a_layer;
    float *folded[TR_COUNT]; /* folded float weights of the layer's tensors, or NULL (unchanged) */
    float *awq_s[TAP_COUNT];  /* awq+gptq: the layer's AWQ scale of each input (the Hessians are scaled by it), or NULL */
};

static bool is_float_type(uint32_t t) {
    return t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16;
}

static int tap_of(int role) {
    switch (role) {
    case TR_OUTPUT: return TAP_OUTPUT_IN;
    case TR_ATTN_Q: case TR_ATTN_K: case TR_ATTN_V: return TAP_ATTN_IN;
    case TR_ATTN_OUT: return TAP_WO_IN;
    case TR_FFN_GATE: case TR_FFN_UP: return TAP_FFN_IN;
    case TR_FFN_DOWN: return TAP_DOWN_IN;
    default: return -1;
    }
}

static void name_role(const gguf_tensor *t, int32_t n_layer, int32_t *layer, int8_t *role) {
    char name[128];
    *layer = -1;
    *role = TR_NONE;
    if (t->name.len >= sizeof name) return;
    memcpy(name, t->name.ptr, (size_t)t->name.len);
    name[t->name.len] = '\0';
    int l;
    const int r = arch_parse_name(name, &l);
    if (!method_role(r) || l >= n_layer) return;
    *layer = l < 0 ? n_layer : l; /* the head is layer n_layer */
    *role = (int8_t)r;
}

static const char *method_name(int m) { return m == QUANT_GPTQ ? "gptq" : m == QUANT_AWQ ? "awq" : "awq+gptq"; }
static bool uses_gptq(int m) { return m == QUANT_GPTQ || m == QUANT_AWQ_GPTQ; }
static bool uses_awq(int m) { return m == QUANT_AWQ || m == QUANT_AWQ_GPTQ; }

static bool grid_wanted(const quant_params *p) { return p->bits != 0 || (p->group != 0 && p->group != QGRID_BLOCK); }

static int decide_route(const qm_state *s, uint64_t i) {
    const quant_choice *c = &s->plan[i];
    const gguf_tensor *t = &s->in->tensors[i];
    const bool grid = c->convert && qgrid_supported(c->type, s->p.bits);
    const int role = s->t_role[i];
    if (uses_awq(s->p.method) && role >= 0) return QM_AWQ;
    if (s->p.method == QUANT_GPTQ && role >= 0 && c->convert && gptq_supported(c->type, s->p.bits) && t->n_dims >= 2 &&
        tap_of(role) >= 0)
        return QM_GPTQ;
    if (grid && grid_wanted(&s->p)) return QM_GRID;
    return QM_RTN;
}

/* Whether GPTQ can produce tensor i (a method matrix of a type with a GPTQ grid). */
static bool gptq_applies(const qm_state *s, uint64_t i) {
    const int role = s->t_role[i];
    return role >= 0 && s->plan[i].convert && gptq_supported(s->plan[i].type, s->p.bits) &&
           s->in->tensors[i].n_dims >= 2 && tap_of(role) >= 0;
}

void qm_free(qm_state *s) {
    if (!s) return;
    for (int k = 0; k < TAP_COUNT; k++) free(s->awq_s[k]);
    for (int k = 0; k < TAP_COUNT; k++) gptq_factor_free(&s->fac[k]);
    la_ctx_free(s->la);
    for (int r = 0; r < TR_COUNT; r++) free(s->folded[r]);
    free(s->scratch);
    calib_free(s->cal);
    kite_model_free(s->model);
    free(s->t_layer);
    free(s->t_role);
    free(s->role_ix);
    free(s->route);
    free(s->fallback);
    free(s->qtype);
    free(s->qconv);
    free(s);
}

static int read_text(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot open the calibration text", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = KITE_OK;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 65536 * 2;
            if (cap > CALIB_MAX_TEXT + 65536) {
                rc = err_set(KITE_E_ARG, "%s: calibration text larger than %zu MiB", path, CALIB_MAX_TEXT >> 20);
                break;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = err_set(KITE_E_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) rc = err_set(KITE_E_IO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return KITE_OK;
}

int qm_new(const char *in_path, const gguf_ctx *in, const quant_choice *plan, const quant_params *p, threadpool *tp,
           qm_state **out) {
    if (p->group != 0 && p->group != 32 && p->group != 64 && p->group != 128)
        return err_set(KITE_E_ARG, "--group %d: must be 32, 64 or 128", p->group);
    if (p->method != QUANT_RTN && p->method != QUANT_GPTQ && p->method != QUANT_AWQ && p->method != QUANT_AWQ_GPTQ)
        return err_set(KITE_E_ARG, "unknown method %d", p->method);
    if (p->method != QUANT_RTN && !p->calib_path)
        return err_set(KITE_E_ARG, "--method %s needs a calibration text (--calib FILE)", method_name(p->method));
    qm_state *s = calloc(1, sizeof *s);
    char *text = NULL;
    kite_token *toks = NULL;
    int rc = KITE_OK;
    if (!s) return err_set(KITE_E_NOMEM, "out of memory");
    s->in = in;
    s->plan = plan;
    s->p = *p;
    if (s->p.group == 0) s->p.group = QGRID_BLOCK;
    s->tp = tp;
    s->n_threads = tp_n_threads(tp);
    if (uses_gptq(p->method) && !(s->la = la_ctx_new(tp, NULL))) {
        rc = KITE_E_NOMEM;
        goto fail;
    }
    s->g_layer = s->a_layer = -1;
    const uint64_t n = in->n_tensors;
    s->t_layer = malloc((n ? n : 1) * sizeof *s->t_layer);
    s->t_role = malloc((n ? n : 1) * sizeof *s->t_role);
    s->route = malloc((n ? n : 1) * sizeof *s->route);
    s->fallback = calloc(n ? n : 1, sizeof *s->fallback);
    s->qtype = malloc((n ? n : 1) * sizeof *s->qtype);
    s->qconv = malloc((n ? n : 1) * sizeof *s->qconv);
    if (!s->t_layer || !s->t_role || !s->route || !s->fallback || !s->qtype || !s->qconv) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    if (p->method != QUANT_RTN) {
        kite_model_params mp = kite_model_default_params();
        mp.no_repack = p->no_repack;
        if ((rc = kite_model_load(in_path, &mp, &s->model))) goto fail;
        if (strcmp(s->model->arch, "llama") != 0 && p->log)
            fprintf(p->log, "quantize: note: architecture %s: tensors are matched by llama names\n", s->model->arch);
        s->n_layer = s->model->hp.n_layer;
    } else {
        s->n_layer = 0; /* no roles needed */
    }
    const size_t n_roles = (size_t)(s->n_layer + 1) * TR_COUNT;
    if (!(s->role_ix = malloc(n_roles * sizeof *s->role_ix))) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n_roles; k++) s->role_ix[k] = -1;
    for (uint64_t i = 0; i < n; i++) {
        s->qtype[i] = plan[i].type;
        s->qconv[i] = plan[i].convert;
        s->t_layer[i] = -1;
        s->t_role[i] = TR_NONE;
        if (p->method != QUANT_RTN) name_role(&in->tensors[i], s->n_layer, &s->t_layer[i], &s->t_role[i]);
        if (s->t_role[i] >= 0) s->role_ix[(size_t)s->t_layer[i] * TR_COUNT + (size_t)s->t_role[i]] = (int64_t)i;
    }
    int64_t max_ne0 = 0;
    for (uint64_t i = 0; i < n; i++) {
        s->route[i] = (int8_t)decide_route(s, i);
        if (s->route[i] != QM_RTN && in->tensors[i].ne[0] > max_ne0) max_ne0 = in->tensors[i].ne[0];
        /* a matrix of the method's roles that GPTQ cannot produce: an error, or a named fallback */
        if (uses_gptq(p->method) && !gptq_applies(s, i) && s->t_role[i] >= 0 && tap_of(s->t_role[i]) >= 0 &&
            plan[i].convert && !is_float_type(plan[i].type)) {
            if (!p->allow_fallback) {
                rc = err_set(KITE_E_UNSUPPORTED, "%.*s: %s cannot produce %s%s (gptq's grids: q4_0 q4_1 q5_0 q5_1 "
                             "q8_0 q3_k%s); pass --allow-fallback to write such matrices with rtn",
                             (int)in->tensors[i].name.len, in->tensors[i].name.ptr, method_name(p->method),
                             dtype_name(plan[i].type),
                             plan[i].type != plan[i].wanted ? " (the row-length fallback of the planned type)" : "",
                             p->bits ? " with --bits below the type's own" : "");
                goto fail;
            }
            s->fallback[i] = 1;
        }
    }
    /* per thread: GPTQ scratch, an input row and an output row of blocks */
    s->scratch_floats = gptq_scratch_floats((int)max_ne0, GPTQ_CHUNK_ROWS) + (GPTQ_CHUNK_ROWS + 2) * (size_t)max_ne0 + 64;
    if (!(s->scratch = malloc((size_t)s->n_threads * s->scratch_floats * sizeof(float)))) {
        rc = err_set(KITE_E_NOMEM, "out of memory for scratch");
        goto fail;
    }
    if (p->method != QUANT_RTN) {
        size_t len = 0;
        int64_t n_tok = 0;
        if ((rc = read_text(p->calib_path, &text, &len))) goto fail;
        if ((rc = calib_tokenize(s->model, text, len,
                                 p->calib_tokens > 0 ? p->calib_tokens : QUANT_CALIB_TOKENS_DEFAULT, &toks, &n_tok)))
            goto fail;
        /* the head's statistics only when a method produces one of its tensors (a q6_K head under
         * --allow-fallback does not need every position's logits in a pass) */
        bool head_used = false;
        for (uint64_t i = 0; i < n; i++)
            if (s->t_layer[i] == s->n_layer && (s->route[i] == QM_GPTQ || s->route[i] == QM_AWQ)) head_used = true;
        calib_params cp = {.hessian = uses_gptq(p->method),
                           .no_head = !head_used,
                           .n_samples = uses_awq(p->method) ? QUANT_AWQ_SAMPLES : 0,
                           .mem_limit = p->calib_mem_limit, .n_threads = s->n_threads, .log = p->log};
        if ((rc = calib_new(s->model, toks, n_tok, &cp, &s->cal))) goto fail;
        if (p->log)
            fprintf(p->log, "quantize: method %s, calibration %s: %" PRId64 " tokens, %d windows, %d of %d layers "
                    "(%s) per pass, group %d%s\n", method_name(p->method),
                    p->calib_path, n_tok, calib_n_windows(s->cal), calib_layers_per_pass(s->cal),
                    s->n_layer + (head_used ? 1 : 0), head_used ? "the head counted as one" : "no head statistics",
                    s->p.group, p->act_order && uses_gptq(p->method) ? ", act-order" : "");
    }
    free(text);
    free(toks);
    *out = s;
    return KITE_OK;
fail:
    free(text);
    free(toks);
    qm_free(s);
    return rc;
}

int qm_route(const qm_state *s, uint64_t i) { return s->route[i]; }
bool qm_fallback(const qm_state *s, uint64_t i) { return s->fallback[i] != 0; }

/* ---- row production ------------------------------------------------------------- */

typedef struct rows_task {
    qm_state *s;
    uint64_t i;
    int64_t row0, n_rows;
    uint8_t *dst;
    const float *src_f;      /* float source rows (AWQ folded), or NULL: the input tensor */
    const gptq_factor *fac;  /* GPTQ, or NULL */
} rows_task;

static void rows_task_run(void *arg, int ith, int nth) {
    const rows_task *r = arg;
    qm_state *s = r->s;
    const gguf_tensor *t = &s->in->tensors[r->i];
    const uint32_t ot = s->plan[r->i].type;
    const int64_t ne0 = t->ne[0];
    const size_t in_bytes = dtype_row_size(t->type, ne0), out_bytes = dtype_row_size(ot, ne0);
    float *scr = s->scratch + (size_t)ith * s->scratch_floats;
    float *row = scr + gptq_scratch_floats((int)ne0, GPTQ_CHUNK_ROWS);
    gptq_params gp = {.type = ot, .bits = s->p.bits, .group = s->p.group, .act_order = s->p.act_order,
                      .damp = s->p.damp};
    const bool grid = qgrid_supported(ot, s->p.bits) && s->plan[r->i].convert && grid_wanted(&s->p);
    long lo, hi;
    tp_split((long)r->n_rows, ith, nth, &lo, &hi);
    if (r->fac) { /* GPTQ: chunks of rows share each pass over U */
        for (long k = lo; k < hi; k += GPTQ_CHUNK_ROWS) {
            const int R = (int)(hi - k < GPTQ_CHUNK_ROWS ? hi - k : GPTQ_CHUNK_ROWS);
            const float *src = row;
            if (r->src_f) src = r->src_f + (size_t)(r->row0 + k) * (size_t)ne0;
            else
                for (int j = 0; j < R; j++)
                    dtype_get(t->type)->to_float((const uint8_t *)t->data + (size_t)(r->row0 + k + j) * in_bytes,
                                                 row + (size_t)j * (size_t)ne0, ne0);
            gptq_quantize_rows(src, (size_t)ne0, R, r->fac, &gp, scr, r->dst + (size_t)k * out_bytes, out_bytes);
        }
        return;
    }
    for (long k = lo; k < hi; k++) {
        const int64_t rr = r->row0 + k;
        const float *src;
        if (r->src_f) {
            src = r->src_f + (size_t)rr * (size_t)ne0;
        } else {
            dtype_get(t->type)->to_float((const uint8_t *)t->data + (size_t)rr * in_bytes, row, ne0);
            src = row;
        }
        uint8_t *d = r->dst + (size_t)k * out_bytes;
        if (grid) qgrid_quantize_row(ot, s->p.bits, s->p.group, src, ne0, d);
        else dtype_get(ot)->from_float(src, d, ne0);
    }
}

static int run_rows(qm_state *s, uint64_t i, int64_t row0, int64_t n_rows, void *dst, const float *src_f,
                    const gptq_factor *fac) {
    rows_task r = {.s = s, .i = i, .row0 = row0, .n_rows = n_rows, .dst = dst, .src_f = src_f, .fac = fac};
    const double ne0 = (double)s->in->tensors[i].ne[0];
    double work = (double)n_rows * ne0 * (fac ? ne0 : 64.0);
    tp_run_n(s->tp, rows_task_run, &r, tp_threads_for(s->tp, work));
    return KITE_OK;
}

/* GPTQ rows (run_rows with the factor), timed for the report. */
static int sweep_rows(qm_state *s, uint64_t i, int64_t row0, int64_t n_rows, void *dst, const float *src_f,
                      const gptq_factor *fac) {
    const double t0 = time_now_s(), u0 = time_cpu_s();
    const int rc = run_rows(s, i, row0, n_rows, dst, src_f, fac);
    s->sweep_s += time_now_s() - t0;
    s->sweep_cpu_s += time_cpu_s() - u0;
    s->sweep_flops += (double)n_rows * (double)fac->n * (double)fac->n;
    return rc;
}

static int gptq_fill(qm_state *s, uint64_t i, int64_t row0, int64_t n_rows, void *dst) {
    const int32_t layer = s->t_layer[i];
    const int tap = tap_of(s->t_role[i]);
    int rc;
    if (layer != s->g_layer) {
        for (int k = 0; k < TAP_COUNT; k++) gptq_factor_free(&s->fac[k]);
        s->g_layer = layer;
    }
    if (!s->fac[tap].u) {
        if ((rc = calib_load(s->cal, layer))) return rc;
        const calib_point *cp = calib_get(s->cal, layer, tap);
        if (!cp || !cp->h || cp->width != s->in->tensors[i].ne[0]) {
            const gguf_tensor *t = &s->in->tensors[i];
            if (!s->p.allow_fallback)
                return err_set(KITE_E_UNSUPPORTED, "%.*s: gptq has no calibration data for this matrix (layer %d "
                               "input %d); pass --allow-fallback to write it with rtn", (int)t->name.len, t->name.ptr,
                               layer, tap);
            if (row0 == 0 && s->p.log)
                fprintf(s->p.log, "gptq: %.*s: no calibration data for this matrix (layer %d input %d): rtn instead "
                        "(--allow-fallback)\n", (int)t->name.len, t->name.ptr, layer, tap);
            return run_rows(s, i, row0, n_rows, dst, NULL, NULL);
        }
        gptq_params gp = {.type = s->plan[i].type, .bits = s->p.bits, .group = s->p.group,
                          .act_order = s->p.act_order, .damp = s->p.damp};
        if ((rc = gptq_prepare(cp->h, cp->width, &gp, s->la, &s->fac[tap]))) return rc;
        const double d0 = s->p.damp > 0 ? s->p.damp : GPTQ_DAMP_DEFAULT;
        if (s->p.log && s->fac[tap].damp_used > d0 * 1.5)
            fprintf(s->p.log, "gptq: layer %d input %d: dampening raised to %g to make H positive definite\n", layer,
                    tap, s->fac[tap].damp_used);
    }
    return sweep_rows(s, i, row0, n_rows, dst, NULL, &s->fac[tap]);
}

void qm_report(const qm_state *s) {
    if (!s->p.log || !uses_gptq(s->p.method) || !s->cal) return;
    double pass_s, hess_s, hess_f, hess_u, fac_s, fac_f, fac_u;
    calib_stats(s->cal, &pass_s, &hess_s, &hess_f, &hess_u);
    la_ctx_stats(s->la, &fac_s, &fac_f, &fac_u);
    /* GFLOP/s per CPU-second: the rate per core, comparable with one core's FMA peak on a loaded machine */
    fprintf(s->p.log, "gptq: time (wall / cpu): calibration passes %.1f s, of it Hessian GEMMs %.1f / %.1f s "
            "(%.1f GFLOP per cpu-s); factors %.1f / %.1f s (%.1f GFLOP per cpu-s); row sweeps %.1f / %.1f s "
            "(%.1f GFLOP per cpu-s)\n", pass_s, hess_s, hess_u, hess_u > 0 ? hess_f / hess_u / 1e9 : 0.0, fac_s, fac_u,
            fac_u > 0 ? fac_f / fac_u / 1e9 : 0.0, s->sweep_s, s->sweep_cpu_s,
            s->sweep_cpu_s > 0 ? s->sweep_flops / s->sweep_cpu_s / 1e9 : 0.0);
}

/* ---- AWQ ------------------------------------------------------------------------- */

/* Float copy of tensor ix (ne0 * rows floats), or NULL on OOM. */
static float *tensor_floats(const qm_state *s, int64_t ix) {
    const gguf_tensor *t = &s->in->tensors[ix];
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    float *f = malloc((size_t)(t->ne[0] * rows) * sizeof *f);
    if (!f) return NULL;
    const size_t rb = dtype_row_size(t->type, t->ne[0]);
    for (int64_t r = 0; r < rows; r++)
        dtype_get(t->type)->to_float((const uint8_t *)t->data + (size_t)r * rb, f + (size_t)(r * t->ne[0]), t->ne[0]);
    return f;
}

static int64_t rows_of(const gguf_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* Whether tensor ix (or -1) is a matrix the output quantizes. */
static bool quantized_matrix(const qm_state *s, int64_t ix) {
    return ix >= 0 && s->qconv[ix] && !is_float_type(s->qtype[ix]) && s->in->tensors[ix].n_dims >= 2;
}

/* One search: matrices roles[0..n_roles) of layer (those quantized, with
 * row length n), tap point `tap`, channel magnitudes sx; scale out in s. */
static int awq_group(qm_state *s, int32_t layer, const int *roles, int n_roles, int tap, const float *sx, int64_t n,
                     float *const *orig, float *scale, const char *what) {
    awq_mat mats[4];
    int nm = 0;
    for (int k = 0; k < n_roles; k++) {
        const int64_t ix = s->role_ix[(size_t)layer * TR_COUNT + (size_t)roles[k]];
        if (!quantized_matrix(s, ix) || s->in->tensors[ix].ne[0] != n || !orig[roles[k]]) continue;
        mats[nm++] = (awq_mat){.w = orig[roles[k]], .rows = rows_of(&s->in->tensors[ix]), .type = s->qtype[ix]};
    }
    for (int64_t j = 0; j < n; j++) scale[j] = 1.0f;
    if (nm == 0) return KITE_OK;
    const calib_point *cp = calib_get(s->cal, layer, tap);
    if (!cp || cp->width != n || !cp->samples || cp->n_samp == 0) return KITE_OK; /* no data: scale 1 */
    awq_params ap = {.n_grid = s->p.awq_n_grid, .bits = s->p.bits, .group = s->p.group};
    awq_result res;
    int rc = awq_search(mats, nm, n, cp->samples, cp->n_samp, sx, &ap, scale, &res);
    if (rc) return rc;
    if (s->p.log) {
        char lname[32];
        if (layer == s->n_layer) snprintf(lname, sizeof lname, "output");
        else snprintf(lname, sizeof lname, "blk.%d", layer);
        fprintf(s->p.log, "awq: %-7s %-9s alpha %.2f  output error %.4g (rtn %.4g, %.1f%%)\n", lname, what,
                (double)res.alpha, res.err, res.err_rtn, res.err_rtn > 0 ? 100.0 * res.err / res.err_rtn : 100.0);
    }
    return KITE_OK;
}

static void scale_cols(float *w, int64_t rows, int64_t n, const float *s) {
    if (!w) return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) w[(size_t)(r * n + j)] *= s[j];
}

static void unscale_rows(float *w, int64_t rows, int64_t n, const float *s) {
    if (!w) return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) w[(size_t)(r * n + j)] /= s[r];
}

static void unscale_vec(float *v, int64_t n, const float *s) {
    if (!v) return;
    for (int64_t j = 0; j < n; j++) v[j] /= s[j];
}

/* Whether the input has the tensor of a role of layer (a global role for the head). */
static bool has_tensor(const qm_state *s, int32_t layer, int role) {
    char name[ARCH_NAME_MAX];
    return arch_tensor_name(NULL, role, layer == s->n_layer ? -1 : layer, name, sizeof name) &&
           gguf_find_tensor(s->in, name) != NULL;
}

/* Keeps a copy of scale s[0..n) as the layer's AWQ scale of input tap (awq+gptq). */
static int keep_scale(qm_state *st, int tap, const float *sc, int64_t n) {
    if (st->p.method != QUANT_AWQ_GPTQ) return KITE_OK;
    if (!(st->awq_s[tap] = malloc((size_t)n * sizeof(float)))) return err_set(KITE_E_NOMEM, "awq: out of memory");
    memcpy(st->awq_s[tap], sc, (size_t)n * sizeof(float));
    return KITE_OK;
}

static int awq_layer(qm_state *s, int32_t layer) {
    for (int r = 0; r < TR_COUNT; r++) {
        free(s->folded[r]);
        s->folded[r] = NULL;
    }
    for (int k = 0; k < TAP_COUNT; k++) {
        free(s->awq_s[k]);
        s->awq_s[k] = NULL;
        gptq_factor_free(&s->fac[k]);
    }
    s->a_layer = layer;
    int rc = calib_load(s->cal, layer);
    if (rc) return rc;
    const model_hparams *hp = &s->model->hp;
    const bool head = layer == s->n_layer;
    int64_t ix[TR_COUNT];
    for (int r = 0; r < TR_COUNT; r++) {
        ix[r] = s->role_ix[(size_t)layer * TR_COUNT + (size_t)r];
        if (ix[r] >= 0 && !(s->folded[r] = tensor_floats(s, ix[r])))
            return err_set(KITE_E_NOMEM, "awq: out of memory for layer %d", layer);
    }
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim,
                  F = hp->n_ff;
    int64_t maxw = E > Q ? E : Q;
    if (F > maxw) maxw = F;
    float *sc = malloc((size_t)maxw * sizeof *sc), *sx = malloc((size_t)maxw * sizeof *sx);
    if (!sc || !sx) {
        rc = err_set(KITE_E_NOMEM, "awq: out of memory");
        goto done;
    }
    /* the searches read the original weights: do all of them before any fold */
    float *orig[TR_COUNT];
    for (int r = 0; r < TR_COUNT; r++) orig[r] = s->folded[r];
    /* a fold target must be a plain RMSNorm gain / a linear map without bias */
    const int norm = head ? TR_OUTPUT_NORM : TR_ATTN_NORM;
    const bool norm_ok = ix[norm] >= 0 && s->in->tensors[ix[norm]].ne[0] == E &&
                         !has_tensor(s, layer, head ? TR_OUTPUT_NORM_B : TR_ATTN_NORM_B);
    if (head) {
        static const int out_roles[] = {TR_OUTPUT};
        const calib_point *cp = calib_get(s->cal, layer, TAP_OUTPUT_IN);
        if (!norm_ok || !cp) goto done; /* tied or unusual head: stays RTN */
        for (int64_t j = 0; j < E; j++) sx[j] = (float)cp->mean_abs[j];
        if ((rc = awq_group(s, layer, out_roles, 1, TAP_OUTPUT_IN, sx, E, orig, sc, "output_in"))) goto done;
        if ((rc = keep_scale(s, TAP_OUTPUT_IN, sc, E))) goto done;
        if (ix[TR_OUTPUT] >= 0) scale_cols(s->folded[TR_OUTPUT], rows_of(&s->in->tensors[ix[TR_OUTPUT]]), E, sc);
        unscale_vec(s->folded[TR_OUTPUT_NORM], E, sc);
        goto done;
    }
    /* scales of the four inputs, computed first (searches see original weights) */
    float *s_attn = malloc((size_t)E * sizeof(float)), *s_o = malloc((size_t)Q * sizeof(float));
    float *s_ffn = malloc((size_t)E * sizeof(float)), *s_down = malloc((size_t)F * sizeof(float));
    if (!s_attn || !s_o || !s_ffn || !s_down) {
        rc = err_set(KITE_E_NOMEM, "awq: out of memory");
        goto done_scales;
    }
    const calib_point *cp;
    /* attention input -> attn_norm */
    for (int64_t j = 0; j < E; j++) s_attn[j] = 1.0f;
    if (norm_ok && (cp = calib_get(s->cal, layer, TAP_ATTN_IN))) {
        static const int roles[] = {TR_ATTN_Q, TR_ATTN_K, TR_ATTN_V};
        for (int64_t j = 0; j < E; j++) sx[j] = (float)cp->mean_abs[j];
        if ((rc = awq_group(s, layer, roles, 3, TAP_ATTN_IN, sx, E, orig, s_attn, "attn_in"))) goto done_scales;
    }
    /* wo input -> wv rows; the scale is tied over the query heads of a KV head */
    for (int64_t j = 0; j < Q; j++) s_o[j] = 1.0f;
    const int32_t gqa = hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 0;
    const bool wo_ok = ix[TR_ATTN_V] >= 0 && ix[TR_ATTN_OUT] >= 0 && gqa > 0 && hp->n_head % hp->n_head_kv == 0 &&
                       !has_tensor(s, layer, TR_ATTN_V_B) &&
                       rows_of(&s->in->tensors[ix[TR_ATTN_V]]) == KV && s->in->tensors[ix[TR_ATTN_OUT]].ne[0] == Q;
    if (wo_ok && (cp = calib_get(s->cal, layer, TAP_WO_IN))) {
        static const int roles[] = {TR_ATTN_OUT};
        const int32_t hd = hp->head_dim;
        for (int64_t c = 0; c < Q; c++) {
            const int64_t kvh = c / hd / gqa, d = c % hd;
            double m = 0.0;
            for (int32_t g = 0; g < gqa; g++) m += cp->mean_abs[(kvh * gqa + g) * hd + d];
            sx[c] = (float)(m / gqa);
        }
        if ((rc = awq_group(s, layer, roles, 1, TAP_WO_IN, sx, Q, orig, s_o, "wo_in"))) goto done_scales;
    }
    /* FFN input -> ffn_norm */
    for (int64_t j = 0; j < E; j++) s_ffn[j] = 1.0f;
    const bool ffn_ok = ix[TR_FFN_NORM] >= 0 && s->in->tensors[ix[TR_FFN_NORM]].ne[0] == E &&
                        !has_tensor(s, layer, TR_FFN_NORM_B);
    if (ffn_ok && (cp = calib_get(s->cal, layer, TAP_FFN_IN))) {
        static const int roles[] = {TR_FFN_GATE, TR_FFN_UP};
        for (int64_t j = 0; j < E; j++) sx[j] = (float)cp->mean_abs[j];
        if ((rc = awq_group(s, layer, roles, 2, TAP_FFN_IN, sx, E, orig, s_ffn, "ffn_in"))) goto done_scales;
    }
    /* w_down input -> w_up rows */
    for (int64_t j = 0; j < F; j++) s_down[j] = 1.0f;
    /* SwiGLU only: silu(gate x) * (up x) is linear in up's rows, GELU(up x) is not */
    const bool down_ok = ix[TR_FFN_UP] >= 0 && ix[TR_FFN_GATE] >= 0 && rows_of(&s->in->tensors[ix[TR_FFN_UP]]) == F &&
                         !has_tensor(s, layer, TR_FFN_UP_B);
    if (down_ok && (cp = calib_get(s->cal, layer, TAP_DOWN_IN))) {
        static const int roles[] = {TR_FFN_DOWN};
        float *sxf = malloc((size_t)F * sizeof *sxf);
        if (!sxf) {
            rc = err_set(KITE_E_NOMEM, "awq: out of memory");
            goto done_scales;
        }
        for (int64_t j = 0; j < F; j++) sxf[j] = (float)cp->mean_abs[j];
        rc = awq_group(s, layer, roles, 1, TAP_DOWN_IN, sxf, F, orig, s_down, "down_in");
        free(sxf);
        if (rc) goto done_scales;
    }
    if ((rc = keep_scale(s, TAP_ATTN_IN, s_attn, E)) || (rc = keep_scale(s, TAP_WO_IN, s_o, Q)) ||
        (rc = keep_scale(s, TAP_FFN_IN, s_ffn, E)) || (rc = keep_scale(s, TAP_DOWN_IN, s_down, F)))
        goto done_scales;
    /* folds */
    if (ix[TR_ATTN_Q] >= 0) scale_cols(s->folded[TR_ATTN_Q], rows_of(&s->in->tensors[ix[TR_ATTN_Q]]), E, s_attn);
    if (ix[TR_ATTN_K] >= 0) scale_cols(s->folded[TR_ATTN_K], rows_of(&s->in->tensors[ix[TR_ATTN_K]]), E, s_attn);
    if (ix[TR_ATTN_V] >= 0) scale_cols(s->folded[TR_ATTN_V], rows_of(&s->in->tensors[ix[TR_ATTN_V]]), E, s_attn);
    unscale_vec(s->folded[TR_ATTN_NORM], E, s_attn);
    if (wo_ok) {
        float *s_v = malloc((size_t)KV * sizeof *s_v);
        if (!s_v) {
            rc = err_set(KITE_E_NOMEM, "awq: out of memory");
            goto done_scales;
        }
        for (int64_t r = 0; r < KV; r++) s_v[r] = s_o[(r / hp->head_dim) * gqa * hp->head_dim + r % hp->head_dim];
        unscale_rows(s->folded[TR_ATTN_V], KV, E, s_v);
        free(s_v);
        scale_cols(s->folded[TR_ATTN_OUT], rows_of(&s->in->tensors[ix[TR_ATTN_OUT]]), Q, s_o);
    }
    if (ix[TR_FFN_GATE] >= 0) scale_cols(s->folded[TR_FFN_GATE], rows_of(&s->in->tensors[ix[TR_FFN_GATE]]), E, s_ffn);
    if (ix[TR_FFN_UP] >= 0) scale_cols(s->folded[TR_FFN_UP], rows_of(&s->in->tensors[ix[TR_FFN_UP]]), E, s_ffn);
    unscale_vec(s->folded[TR_FFN_NORM], E, s_ffn);
    if (down_ok) unscale_rows(s->folded[TR_FFN_UP], F, E, s_down);
    if (ix[TR_FFN_DOWN] >= 0) scale_cols(s->folded[TR_FFN_DOWN], rows_of(&s->in->tensors[ix[TR_FFN_DOWN]]), F, s_down);
done_scales:
    free(s_attn);
    free(s_o);
    free(s_ffn);
    free(s_down);
done:
    free(sc);
    free(sx);
    return rc;
}

static int awq_fill(qm_state *s, uint64_t i, int64_t row0, int64_t n_rows, void *dst) {
    const int32_t layer = s->t_layer[i];
    int rc;
    if (layer != s->a_layer && (rc = awq_layer(s, layer))) {
        s->a_layer = -1;
        return rc;
    }
    const float *f = s->folded[s->t_role[i]];
    KITE_ASSERT(f);
    if (s->p.method != QUANT_AWQ_GPTQ || !gptq_applies(s, i)) return run_rows(s, i, row0, n_rows, dst, f, NULL);
    /* awq+gptq: GPTQ on the folded W S, whose input is S^-1 X: Hessian S^-1 H S^-1 */
    const int tap = tap_of(s->t_role[i]);
    if (!s->fac[tap].u) {
        const calib_point *cp = calib_get(s->cal, layer, tap);
        if (!cp || !cp->h || cp->width != s->in->tensors[i].ne[0]) {
            const gguf_tensor *t = &s->in->tensors[i];
            if (!s->p.allow_fallback)
                return err_set(KITE_E_UNSUPPORTED, "%.*s: awq+gptq has no calibration Hessian for this matrix (layer %d "
                               "input %d); pass --allow-fallback to write it with awq alone", (int)t->name.len,
                               t->name.ptr, layer, tap);
            return run_rows(s, i, row0, n_rows, dst, f, NULL);
        }
        const size_t w = (size_t)cp->width;
        double *h = malloc(w * w * sizeof *h);
        if (!h) return err_set(KITE_E_NOMEM, "awq+gptq: out of memory for a %zu-wide Hessian", w);
        const float *sc = s->awq_s[tap];
        for (size_t a = 0; a < w; a++)
            for (size_t b = 0; b < w; b++)
                h[a * w + b] = sc ? cp->h[a * w + b] / ((double)sc[a] * (double)sc[b]) : cp->h[a * w + b];
        gptq_params gp = {.type = s->plan[i].type, .bits = s->p.bits, .group = s->p.group,
                          .act_order = s->p.act_order, .damp = s->p.damp};
        rc = gptq_prepare(h, cp->width, &gp, s->la, &s->fac[tap]);
        free(h);
        if (rc) return rc;
    }
    return sweep_rows(s, i, row0, n_rows, dst, f, &s->fac[tap]);
}

int qm_fill(qm_state *s, uint64_t i, int64_t row0, int64_t n_rows, void *dst) {
    switch (s->route[i]) {
    case QM_GPTQ: return gptq_fill(s, i, row0, n_rows, dst);
    case QM_AWQ: return awq_fill(s, i, row0, n_rows, dst);
    case QM_GRID: return run_rows(s, i, row0, n_rows, dst, NULL, NULL);
    default: return err_set(KITE_E_STATE, "tensor %" PRIu64 " has no method route", i);
    }
}
