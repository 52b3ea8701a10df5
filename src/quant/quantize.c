/*
 * quantize.c - the tensor-by-tensor RTN quantizer behind `kite quantize`.
 *
 * DESIGN
 *   quant_plan() fixes every tensor's output type up front (so all fallback
 *   lines and errors come before any byte is written); quant_model() then
 *   copies the metadata into a gguf writer and registers every tensor with a
 *   fill callback.  The writer asks for a few MiB of rows at a time; the
 *   callback converts them row by row (input to_float -> output reference
 *   from_float) on a thread pool, each thread with its own float scratch row,
 *   or copies them when the type is unchanged.  A row's bytes depend only on
 *   that row, so the output is identical for any thread count.  Tensors that
 *   quant/method.c routes elsewhere (GPTQ, AWQ, group grids) are filled by
 *   qm_fill instead; their progress line names the route.
 *
 * OWNERSHIP
 *   quant_model() owns the reader ctx, the writer, the pool and the scratch;
 *   all are freed on every path (one cleanup label).
 *
 * THREAD SAFETY
 *   No global state.  The fill callback runs on the writer's (calling)
 *   thread and fans out to the pool.
 */
#include "quant/quantize.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "kite.h"
#include "model/arch.h"
#include "quant/imatrix.h"
#include "quant/method.h"
#include "quant/progress.h"
#include "tensor/dtype.h"

#define QUANT_VERSION 2 /* ggml's GGML_QNT_VERSION, written to general.quantization_version */

/* ---- planning ---------------------------------------------------------------- */

static bool is_float_type(uint32_t t) {
    return t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16;
}


/* llama.cpp visits tensors ordered by (layer, name); the rank of tensor i
 * among those whose name contains `kind`, in that order. */
static int32_t kind_rank(char **names, const int32_t *layers, uint64_t n, uint64_t i, const char *kind) {
    int32_t r = 0;
    for (uint64_t j = 0; j < n; j++) {
        if (j == i || !strstr(names[j], kind)) continue;
        if (layers[j] < layers[i] || (layers[j] == layers[i] && strcmp(names[j], names[i]) < 0)) r++;
    }
    return r;
}

static int32_t meta_i32(const gguf_ctx *in, const char *arch, const char *suffix) {
    char key[160];
    uint32_t v = 0;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_get_u32(in, key, &v) != KITE_OK || v > 1000000) return 0;
    return (int32_t)v;
}

static void model_info(const gguf_ctx *in, char **names, const int32_t *layers, quant_model_info *mi) {
    memset(mi, 0, sizeof *mi);
    char arch[64] = "llama";
    gguf_str s;
    if (gguf_get_str(in, "general.architecture", &s) == KITE_OK && s.len < sizeof arch) {
        memcpy(arch, s.ptr, (size_t)s.len);
        arch[s.len] = '\0';
    }
    int32_t max_layer = -1;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        if (strstr(names[i], arch_role_base(TR_ATTN_V))) mi->n_attn_v++;
        if (!strcmp(names[i], arch_role_base(TR_OUTPUT))) mi->has_output = true;
        if (layers[i] > max_layer) max_layer = layers[i];
    }
    mi->n_layer = meta_i32(in, arch, "block_count");
    if (mi->n_layer <= 0) mi->n_layer = max_layer + 1;
    int32_t n_head = meta_i32(in, arch, "attention.head_count");
    int32_t n_head_kv = meta_i32(in, arch, "attention.head_count_kv");
    if (n_head_kv <= 0) n_head_kv = n_head;
    mi->n_gqa = n_head > 0 && n_head_kv > 0 ? n_head / n_head_kv : 1;
    mi->is_70b = !strcmp(arch, "llama") && mi->n_layer == 80 && n_head != n_head_kv;
}

static int check_target(uint32_t t, const char *what) {
    const dtype_traits *tr = dtype_get(t);
    if (!tr || !tr->name) return err_set(KITE_E_ARG, "%s: unknown type id %" PRIu32, what, t);
    if (!tr->from_float)
        return err_set(KITE_E_ARG, "%s: type %s has no reference quantizer", what, tr->name);
    return KITE_OK;
}

int quant_plan(const gguf_ctx *in, const quant_params *p, quant_choice *out, quant_model_info *mi_out) {
    if (!in || !p || !out) return err_set(KITE_E_ARG, "quant_model: NULL argument");
    int rc = check_target(p->recipe ? p->recipe->base : p->type, "--type");
    if (rc) return rc;
    const uint64_t n = in->n_tensors;
    char **names = calloc(n ? n : 1, sizeof *names);
    int32_t *layers = calloc(n ? n : 1, sizeof *layers);
    quant_model_info mi;
    bool warned_requant = false;
    if (!names || !layers) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!(names[i] = gguf_str_dup(in->tensors[i].name))) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto done;
        }
        layers[i] = arch_name_layer(names[i]);
    }
    model_info(in, names, layers, &mi);
    mi.has_imatrix = p->imatrix != NULL;

    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = &in->tensors[i];
        const char *name = names[i];
        quant_choice c = {.type = t->type, .wanted = t->type, .convert = false};
        if (quant_tensor_is_matrix(name, t->n_dims)) {
            uint32_t want = p->recipe ? p->recipe->base : p->type;
            if (p->recipe && !p->pure) {
                int32_t rank = 0;
                const char *v = arch_role_base(TR_ATTN_V), *down = arch_role_stem(TR_FFN_DOWN);
                if (strstr(name, v)) rank = kind_rank(names, layers, n, i, v);
                else if (strstr(name, down)) rank = kind_rank(names, layers, n, i, down);
                want = quant_recipe_type(p->recipe, &mi, name, t->ne[0], rank);
            }
            /* llama-quantize's overrides come after its rules */
            const bool is_output = !strcmp(name, arch_role_base(TR_OUTPUT));
            if (is_output && p->set_output_type) want = p->output_type;
            if (p->set_token_embd_type && !strcmp(name, arch_role_base(TR_TOKEN_EMBD))) want = p->token_embd_type;
            c.wanted = want;
            c.type = quant_fallback(want, t->ne[0]);
            c.convert = c.type != t->type;
            if (is_output && p->leave_output) c = (quant_choice){.type = t->type, .wanted = t->type};
            if ((rc = check_target(c.type, name))) goto done;
        }
        if (c.convert) {
            const dtype_traits *tr = dtype_get(t->type);
            if (!tr || !tr->to_float) {
                rc = err_set(KITE_E_UNSUPPORTED, "%s: input type %s cannot be converted (no dequantizer)",
                             name, dtype_name(t->type));
                goto done;
            }
            if (!is_float_type(t->type)) {
                if (!p->allow_requantize) {
                    rc = err_set(KITE_E_UNSUPPORTED,
                                 "%s: input is already quantized (%s); requantizing loses quality, "
                                 "pass --allow-requantize to do it anyway", name, dtype_name(t->type));
                    goto done;
                }
                if (!warned_requant && p->log)
                    fprintf(p->log, "quantize: warning: requantizing already-quantized weights (first: %s, %s) "
                            "loses quality; quantize from the f32/f16/bf16 model if you can\n", name,
                            dtype_name(t->type));
                warned_requant = true;
            }
        }
        out[i] = c;
    }
    if (mi_out) *mi_out = mi;
done:
    if (names)
        for (uint64_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(layers);
    return rc;
}

/* ---- writing ------------------------------------------------------------------ */

typedef struct quant_job quant_job;

/* One tensor's streaming source. */
typedef struct quant_src {
    quant_job *job;
    double work;            /* progress units (tensor_work) */
    const gguf_tensor *t;   /* input tensor */
    quant_choice c;
    int32_t index;          /* 1-based, for progress lines */
    size_t in_row_bytes;    /* bytes of an input row */
    size_t out_row_bytes;   /* bytes of an output row */
    const float *qw;        /* importance of the columns ([ne0 * ne2], expert after expert), or NULL */
} quant_src;

struct quant_job {
    const quant_params *p;
    threadpool *tp;
    float *scratch;         /* [n_threads][max_ne0] */
    int64_t max_ne0;        /* longest converted row */
    int32_t n_tensors;
    qm_state *qm;           /* method / group-grid state, or NULL (plain RTN) */
    qprog *prog;            /* progress / ETA, or NULL */
};

typedef struct fill_task {
    const quant_src *s;
    int64_t row0, n_rows;
    uint8_t *dst;
} fill_task;

static void fill_task_run(void *arg, int ith, int nth) {
    const fill_task *f = arg;
    const quant_src *s = f->s;
    const dtype_traits *ti = dtype_get(s->t->type), *to = dtype_get(s->c.type);
    const int64_t ne0 = s->t->ne[0];
    float *row = s->job->scratch + (size_t)ith * (size_t)s->job->max_ne0;
    const uint8_t *src = (const uint8_t *)s->t->data;
    long lo, hi;
    tp_split((long)f->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const uint8_t *in_row = src + (size_t)(f->row0 + r) * s->in_row_bytes;
        ti->to_float(in_row, row, ne0);
        uint8_t *out = f->dst + (size_t)r * s->out_row_bytes;
        if (s->qw) /* expert e of a 3-D tensor (rows e*ne1 ..) has its own slice */
            to->from_float_imat(row, out, ne0, s->qw + (size_t)((f->row0 + r) / s->t->ne[1]) * (size_t)ne0);
        else
            to->from_float(row, out, ne0);
    }
}

static int fill_chunk(const quant_src *s, int64_t row0, int64_t n_rows, void *dst);

static int fill_rows(void *user, int64_t row0, int64_t n_rows, void *dst) {
    const quant_src *s = user;
    const quant_params *p = s->job->p;
    if (row0 == 0 && p->log) {
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(s->t->name.len < 95 ? s->t->name.len : 95), s->t->name.ptr);
        char why[128] = "";
        if (s->c.type != s->c.wanted)
            snprintf(why, sizeof why, "  fallback: row length %" PRId64 " is not a multiple of the %s block (%d)",
                     s->t->ne[0], dtype_name(s->c.wanted), (int)dtype_get(s->c.wanted)->block_size);
        else if (!s->c.convert && !(s->job->qm && qm_route(s->job->qm, (uint64_t)(s->index - 1)) == QM_AWQ))
            snprintf(why, sizeof why, "  copied");
        if (p->imatrix && s->c.convert && dtype_get(s->c.type)->from_float_imat) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, s->qw ? "  imatrix" : "  no imatrix entry");
        }
        if (s->job->qm) {
            const int route = qm_route(s->job->qm, (uint64_t)(s->index - 1));
            const int g = s->c.type == KITE_DTYPE_Q3_K ? 16 : (p->group ? p->group : 32); /* q3_K: sub-blocks */
            size_t l = strlen(why);
            if (route == QM_GRID) snprintf(why + l, sizeof why - l, "  rtn/g%d", g);
            else if (route == QM_GPTQ) snprintf(why + l, sizeof why - l, "  gptq/g%d%s", g, p->act_order ? "/act-order" : "");
            else if (route == QM_AWQ && p->method == QUANT_AWQ_GPTQ && s->c.convert && !is_float_type(s->c.type))
                snprintf(why + l, sizeof why - l, qm_fallback(s->job->qm, (uint64_t)(s->index - 1))
                                                      ? "  awq/g%d (gptq fallback: no gptq grid)"
                                                      : "  awq+gptq/g%d%s", g, p->act_order ? "/act-order" : "");
            else if (qm_fallback(s->job->qm, (uint64_t)(s->index - 1)))
                snprintf(why + l, sizeof why - l, "  rtn (gptq fallback: no gptq grid for %s)", dtype_name(s->c.type));
            else if (p->method != QUANT_RTN && s->c.convert && route == QM_RTN)
                snprintf(why + l, sizeof why - l, "  rtn");
            else if (route == QM_AWQ) snprintf(why + l, sizeof why - l, "  awq/g%d", g);
            l = strlen(why);
            if (route != QM_RTN && p->bits) snprintf(why + l, sizeof why - l, " %d-bit grid", p->bits);
        }
        char line[512];
        snprintf(line, sizeof line, "[%3d/%3d] %-28s %5s -> %-6s (%" PRId64 " x %" PRId64 ")%s", s->index,
                 s->job->n_tensors, name, dtype_name(s->t->type), dtype_name(s->c.type), s->t->ne[0],
                 s->t->ne[1] * s->t->ne[2] * s->t->ne[3], why);
        if (p->progress.fn) core_progress_report(&p->progress, 0, 0, line); /* the renderer keeps it */
        else fprintf(p->log, "%s\n", line);
        qprog_tensor(s->job->prog, s->index, s->job->n_tensors, name, s->work);
    }
    const int rc = fill_chunk(s, row0, n_rows, dst);
    const int64_t rows = s->t->ne[1] * s->t->ne[2] * s->t->ne[3];
    qprog_advance(s->job->prog, rows > 0 ? (double)(row0 + n_rows) / (double)rows : 1.0);
    return rc;
}

static int fill_chunk(const quant_src *s, int64_t row0, int64_t n_rows, void *dst) {
    if (s->job->qm && qm_route(s->job->qm, (uint64_t)(s->index - 1)) != QM_RTN)
        return qm_fill(s->job->qm, (uint64_t)(s->index - 1), row0, n_rows, dst);
    if (!s->c.convert) {
        memcpy(dst, (const uint8_t *)s->t->data + (size_t)row0 * s->in_row_bytes, (size_t)n_rows * s->in_row_bytes);
        return KITE_OK;
    }
    fill_task f = {.s = s, .row0 = row0, .n_rows = n_rows, .dst = dst};
    /* a row costs a few hundred operations per element in the k-quant searches */
    double work = (double)n_rows * (double)s->t->ne[0] * 64.0;
    tp_run_n(s->job->tp, fill_task_run, &f, tp_threads_for(s->job->tp, work));
    return KITE_OK;
}

static int copy_metadata(const gguf_ctx *in, gguf_writer *w, uint32_t ftype) {
    for (uint64_t i = 0; i < in->n_kv; i++) {
        char *key = gguf_str_dup(in->kv[i].key);
        if (!key) return err_set(KITE_E_NOMEM, "out of memory");
        int rc = gguf_writer_set_value(w, key, &in->kv[i].value);
        free(key);
        if (rc) return rc;
    }
    int rc = gguf_writer_set_u32(w, "general.quantization_version", QUANT_VERSION);
    if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", ftype);
    return rc;
}

/* Finds the first NaN/Inf weight of a tensor the output re-encodes: raw bit
 * tests for f32/f16/bf16 (exponent all ones), the dequantized row for the
 * others.  Returns KITE_OK or KITE_E_FORMAT naming the tensor, row and
 * column.  row: scratch of ne0 floats. */
static int check_finite(const gguf_tensor *t, float *row) {
    const int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t rb = dtype_row_size(t->type, ne0);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)t->data + (size_t)r * rb;
        int64_t bad = -1;
        if (t->type == KITE_DTYPE_F32) {
            for (int64_t j = 0; j < ne0 && bad < 0; j++) {
                uint32_t u;
                memcpy(&u, src + 4 * j, 4);
                if ((u & 0x7f800000u) == 0x7f800000u) bad = j;
            }
        } else if (t->type == KITE_DTYPE_F16 || t->type == KITE_DTYPE_BF16) {
            const uint16_t mask = t->type == KITE_DTYPE_F16 ? 0x7c00u : 0x7f80u;
            for (int64_t j = 0; j < ne0 && bad < 0; j++) {
                uint16_t h;
                memcpy(&h, src + 2 * j, 2);
                if ((h & mask) == mask) bad = j;
            }
        } else {
            dtype_get(t->type)->to_float(src, row, ne0);
            for (int64_t j = 0; j < ne0 && bad < 0; j++)
                if (!isfinite(row[j])) bad = j;
        }
        if (bad >= 0)
            return err_set(KITE_E_FORMAT, "%.*s: row %" PRId64 " has a NaN or Inf weight (column %" PRId64
                           "); refusing to quantize it", (int)t->name.len, t->name.ptr, r, bad);
    }
    return KITE_OK;
}

/* quantize.imatrix.* keys, as llama-quantize writes them (strings cut at 127 bytes). */
static int imatrix_metadata(gguf_writer *w, const quant_params *p) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", p->imatrix_path ? p->imatrix_path : "");
    int rc = gguf_writer_set_str(w, "quantize.imatrix.file", buf);
    if (!rc && p->imatrix->dataset && *p->imatrix->dataset) {
        snprintf(buf, sizeof buf, "%s", p->imatrix->dataset);
        rc = gguf_writer_set_str(w, "quantize.imatrix.dataset", buf);
    }
    if (!rc) rc = gguf_writer_set_i32(w, "quantize.imatrix.entries_count", p->imatrix->n_entries);
    if (!rc && p->imatrix->chunks > 0) rc = gguf_writer_set_i32(w, "quantize.imatrix.chunks_count", p->imatrix->chunks);
    return rc;
}

/* The importance of tensor t (written as type) from p->imatrix: *qw NULL when
 * it has no entry or the type ignores importance.  An entry of the wrong size
 * is an error (llama-quantize's rule, token_embd excepted: ignored). */
static int imatrix_of(const quant_params *p, const char *name, const gguf_tensor *t, uint32_t type, const float **qw) {
    *qw = NULL;
    const imatrix_entry *e = imatrix_find(p->imatrix, name);
    if (!e) return KITE_OK;
    const int64_t want = t->ne[0] * t->ne[2];
    if (e->n != want) {
        if (!strcmp(name, arch_role_base(TR_TOKEN_EMBD))) return KITE_OK;
        return err_set(KITE_E_FORMAT, "imatrix: entry %s has %d values, the tensor needs %" PRId64
                       " (ne0 %" PRId64 " x %" PRId64 " experts): an imatrix of another model?", name, e->n, want,
                       t->ne[0], t->ne[2]);
    }
    if (t->ne[3] != 1) return err_set(KITE_E_UNSUPPORTED, "imatrix: %s is 4-D", name);
    if (dtype_get(type)->from_float_imat) *qw = e->qw;
    return KITE_OK;
}

/* Progress units of tensor i: rows x row length x cost per element. */
static double tensor_work(const gguf_tensor *t, const quant_choice *c, int route) {
    const double rows = (double)(t->ne[1] * t->ne[2] * t->ne[3]), ne0 = (double)t->ne[0];
    if (route == QM_GPTQ) return rows * ne0 * ne0;
    return rows * ne0 * (c->convert || route != QM_RTN ? 64.0 : 1.0);
}

int quant_model(const char *in_path, const char *out_path, const quant_params *p_in, quant_stats *stats) {
    if (!in_path || !out_path || !p_in) return err_set(KITE_E_ARG, "quant_model: NULL argument");
    if (p_in->imatrix && (p_in->method != QUANT_RTN || p_in->bits != 0 || (p_in->group != 0 && p_in->group != 32)))
        return err_set(KITE_E_ARG, "an importance matrix applies to rtn on the types' own grids (not gptq, awq, "
                       "--group, --bits)");
    quant_params pl = *p_in;
    const quant_params *p = &pl; /* log replaced by the progress-aware stream */
    gguf_ctx *in = NULL;
    gguf_writer *w = NULL;
    quant_choice *plan = NULL;
    quant_src *srcs = NULL;
    quant_job job = {.p = p};
    quant_stats st = {0};
    int n_threads = p->n_threads > 0 ? p->n_threads : 1;
    gguf_open_params op = {.use_mmap = true};
    int rc = gguf_open(in_path, &op, &in);
    if (rc) goto done;
    const uint64_t n = in->n_tensors;
    if (n > INT32_MAX) {
        rc = err_set(KITE_E_FORMAT, "%s: too many tensors", in_path);
        goto done;
    }
    plan = calloc(n ? n : 1, sizeof *plan);
    srcs = calloc(n ? n : 1, sizeof *srcs);
    if (!plan || !srcs) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = quant_plan(in, p, plan, NULL))) goto done;
    if (p->recipe) {
        st.ftype = p->recipe->ftype;
    } else {
        int64_t ft = quant_ftype_of_type(p->type);
        st.ftype = ft >= 0 ? (uint32_t)ft : 1024; /* LLAMA_FTYPE_GUESSED */
    }
    for (uint64_t i = 0; i < n; i++)
        if (plan[i].convert && in->tensors[i].ne[0] > job.max_ne0) job.max_ne0 = in->tensors[i].ne[0];
    if (job.max_ne0 > 0) {
        job.scratch = malloc((size_t)n_threads * (size_t)job.max_ne0 * sizeof(float));
        if (!job.scratch) {
            rc = err_set(KITE_E_NOMEM, "out of memory for %d scratch rows", n_threads);
            goto done;
        }
    }
    for (uint64_t i = 0; i < n; i++) /* before any output: a NaN/Inf weight is an error naming its row */
        if (plan[i].convert && (rc = check_finite(&in->tensors[i], job.scratch))) goto done;
    if (!(job.tp = tp_new(n_threads))) {
        rc = KITE_E_NOMEM;
        goto done;
    }
    job.n_tensors = (int32_t)n;
    /* the caller's progress sink (the CLI's display) or, without one, quantize's own status line on log */
    if (p_in->log && !p_in->progress.fn && (job.prog = qprog_new(p_in->log, 0))) pl.log = qprog_log(job.prog, p_in->log);
    if (p->method != QUANT_RTN || p->bits != 0 || (p->group != 0 && p->group != 32))
        if ((rc = qm_new(in_path, in, plan, p, job.tp, &job.qm))) goto done;
    double total_work = 0;
    for (uint64_t i = 0; i < n; i++)
        total_work += tensor_work(&in->tensors[i], &plan[i], job.qm ? qm_route(job.qm, i) : QM_RTN);
    qprog_set_total(job.prog, total_work);
    if (job.qm && p->awq_float_out) /* tests: every tensor keeps its input type, AWQ's folded */
        for (uint64_t i = 0; i < n; i++)
            plan[i] = (quant_choice){.type = in->tensors[i].type, .wanted = in->tensors[i].type};
    if (!(w = gguf_writer_new())) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = copy_metadata(in, w, st.ftype))) goto done;
    if (p->imatrix && (rc = imatrix_metadata(w, p))) goto done;
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = &in->tensors[i];
        quant_src *s = &srcs[i];
        *s = (quant_src){.job = &job, .t = t, .c = plan[i], .index = (int32_t)i + 1,
                         .work = tensor_work(t, &plan[i], job.qm ? qm_route(job.qm, i) : QM_RTN),
                         .in_row_bytes = dtype_row_size(t->type, t->ne[0]),
                         .out_row_bytes = dtype_row_size(plan[i].type, t->ne[0])};
        char *name = gguf_str_dup(t->name);
        if (!name) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto done;
        }
        if (p->imatrix && plan[i].convert && (rc = imatrix_of(p, name, t, plan[i].type, &s->qw))) {
            free(name);
            goto done;
        }
        rc = gguf_writer_add_tensor_cb(w, name, plan[i].type, t->n_dims, t->ne, fill_rows, s);
        free(name);
        if (rc) goto done;
        uint64_t rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        st.bytes_in += t->nbytes;
        st.bytes_out += (uint64_t)s->out_row_bytes * rows;
        if (plan[i].convert) st.n_converted++;
        if (plan[i].type != plan[i].wanted) st.n_fallback++;
    }
    st.n_tensors = (int32_t)n;
    gguf_writer_set_progress(w, p->progress);
    if ((rc = gguf_writer_write(w, out_path))) goto done;
    if (job.qm) qm_report(job.qm);
    if (stats) *stats = st;
done:
    gguf_writer_free(w);
    qm_free(job.qm);
    qprog_free(job.prog);
    tp_free(job.tp);
    free(job.scratch);
    free(srcs);
    free(plan);
    gguf_close(in);
    return rc;
}
