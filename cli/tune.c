/*
 * tune.c - `kite tune`: time kern_matmul's bit-identical variants on this
 * machine for the matrix shapes of a model and write the lookup table that
 * kern_matmul consults at run time (src/kernels/tune.h).
 *
 *   kite tune [-m MODEL] [-t THREADS] [--out FILE] [--quick] [--budget-ms MS]
 *
 * DESIGN
 *   Shapes: every distinct (type, rows, K) of the model's matrices (2-D
 *   tensors with more than one row; token_embd only when it is the tied
 *   classifier), using the file's own weights, in the layout a run uses:
 *   q4_0, q8_0, q4_K and q6_K (gemm_x16.h) and f16 / bf16 (gemm_x32.h)
 *   matrices are repacked into a copy where kite_model_load repacks them
 *   (model_repack_matrix: the loader's choice; x16: only the thread choice
 *   matters).
 *   For each shape and each n_tok class, at the class's representative
 *   batch (1 4 8 16 32 128 tokens), the candidates are: the built-in
 *   default, flat with every row tile (only the default tile up to
 *   KERN_GEMM_MAX_TOK tokens, where one token group makes the tile moot)
 *   and tiled where the level has a tiled kernel for the type, each with
 *   threads auto / 1 / all (auto only on a 1-thread pool); a candidate equal
 *   to the default is not timed twice.  Candidates run in interleaved
 *   rounds (one call each per round, after a warm-up round) until the
 *   budget is spent and at least MIN_ROUNDS rounds ran; a candidate's time
 *   is its median.  Shapes that fall into the same class add their times.
 *   The fastest candidate replaces the default only when it is at least
 *   MARGIN faster (noise on a shared machine must not flip choices).
 *   Noisy machines: as in `kite bench`, a short FMA check on all the
 *   threads runs before and after each (shape, batch) measurement; below
 *   AVAIL_MIN of the expected rate the measurement is redone (at most
 *   MAX_REDO times, keeping the attempt that saw the most availability) and
 *   the summary marks the class.  --quick and --no-check skip the checks.
 *   The table is merged with the file already there (same level: its other
 *   classes are kept) and written atomically (temp file + rename).
 *
 * THREAD SAFETY
 *   A command: one thread drives the pool.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "progress/progress.h"
#include "config/config.h"
#include "roofline/probe.h"
#include "core/threadpool.h"
#include "core/timing.h"
#include "gguf/gguf.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemm_x16.h"
#include "kernels/kernels.h"
#include "kernels/tune.h"
#include "model/model.h"
#include "model/arch.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"
#include "tune_attn.h"
#include "tune_options.h"

#define CMD "tune"
#define MAX_SHAPES 64
#define MAX_CAND 16
#define MAX_ROUNDS 64
#define MIN_ROUNDS 3          /* timed rounds at least (--quick: 1) */
#define BUDGET_MS 300        /* ms per (shape, n_tok class), all candidates together */
#define QUICK_BUDGET_MS 5
#define MARGIN 0.03           /* a variant must beat the default by 3% to be chosen */
#define AVAIL_MIN 0.70        /* below this share of the expected FMA rate a measurement is redone */
#define CHECK_MS 5.0          /* one availability check */
#define MAX_REDO 2
#define OPT_ROUNDS 5          /* kernel option rounds (--quick: 1) */

typedef struct tune_opts {
    const char *model, *out, *attn_calib, *attn_out;
    int64_t threads, budget_ms, min_mib, attn_tokens;
    bool quick, no_check, no_options;
} tune_opts;

static const cli_opt tune_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(tune_opts, model),
     .def_doc = "the bundled stories260K"},
    {.names = "-t, --threads", .arg = "N", .help = "pool threads to tune for", .kind = CLI_INT,
     CLI_AT(tune_opts, threads), .min = 1, .max = 256, .def_doc = "all online CPUs"},
    {.names = "--out", .arg = "FILE",
     .help = "table to write (default: $KITE_TUNE_FILE, else\n$XDG_CACHE_HOME/kite/tune-<level>.txt or ~/.cache/kite/...)",
     .kind = CLI_STR, CLI_AT(tune_opts, out)},
    {.names = "--quick", .help = "a few milliseconds per shape (tests; the choices are noisy)", .kind = CLI_FLAG,
     CLI_AT(tune_opts, quick)},
    {.names = "--budget-ms", .arg = "MS", .help = "time per shape and batch size", .kind = CLI_INT,
     CLI_AT(tune_opts, budget_ms), .min = 0, .max = 600000, .def_doc = CLI_XSTR(BUDGET_MS) " ms, --quick "
     CLI_XSTR(QUICK_BUDGET_MS)},
    {.names = "--no-check", .help = "skip the core-availability check around each measurement", .kind = CLI_FLAG,
     CLI_AT(tune_opts, no_check)},
    {.names = "--no-options", .help = "time the matmul variants only, not the kernel options", .kind = CLI_FLAG,
     CLI_AT(tune_opts, no_options)},
    {.names = "--min-mib", .arg = "N",
     .help = "time decode-prefetch only on models of at least N MiB\n(smaller ones stay in the caches)",
     .kind = CLI_INT, CLI_AT(tune_opts, min_mib), .min = 0, .max = (int64_t)1 << 30, .def = "256"},
    {.names = "--attn-calib", .arg = "TEXT",
     .help = "instead of the matmul tuning: calibrate split-KV's unified\nmaximum phi (FlashDecoding++) per layer or "
             "head on the\ntext in file TEXT and store it in the model's GGUF metadata\n(docs/attention.md)",
     .kind = CLI_STR, CLI_AT(tune_opts, attn_calib)},
    {.names = "--attn-out", .arg = "FILE", .help = "GGUF to write with the calibrated phi", .kind = CLI_STR,
     CLI_AT(tune_opts, attn_out), .def_doc = "MODEL itself, replaced"},
    {.names = "--attn-tokens", .arg = "N", .help = "tokens of TEXT to calibrate on", .kind = CLI_INT,
     CLI_AT(tune_opts, attn_tokens), .min = 2, .max = 1 << 20, .def = CLI_XSTR(ATTN_CALIB_TOKENS)},
    CLI_OPT_QUIET,
};

const cli_spec cli_spec_tune = {
    .cmd = CMD,
    .usage = "usage: kite tune [-m MODEL] [-t THREADS] [--out FILE] [--quick] [--budget-ms MS] [--no-check]\n"
             "                 [--no-options] [--min-mib N] [-q]\n"
             "       kite tune -m MODEL --attn-calib TEXT [--attn-out FILE] [--attn-tokens N] [-t THREADS]\n"
             "\n"
             "Times kern_matmul's variants (flat or tiled GEMM, flat row tile, 1 / auto / all threads;\n"
             "all give bit-identical results) for every matrix shape of MODEL at batch sizes 1, 4, 8, 16,\n"
             "32 and 128, and writes the fastest per shape class to the tune table that kite reads at run\n"
             "time (docs/kernels.md, \"Tuning\").  Then times the machine-wide kernel options that apply to\n"
             "MODEL (decode-prefetch, bf16-fma, f16-widen; never a change of results) off and on over\n"
             "whole-model prefill and decode, and records the faster setting.\n",
    CLI_TABLE(tune_opts_table, tune_opts),
};

typedef struct shape {
    weight w;       /* the file's tensor (first of its shape), or a repacked copy */
    int n_same;     /* tensors of this shape */
    void *copy;     /* owned repacked copy (w.data), or NULL */
} shape;

/* One shape class's accumulated timings. */
typedef struct class_acc {
    uint32_t key;
    int ntok_cls;
    uint32_t type;
    int64_t rows, k;            /* first shape's, for the summary */
    int n_shapes;
    int n_cand;
    kern_tune_choice cand[MAX_CAND];
    double t[MAX_CAND];         /* summed median seconds per call */
    double avail;               /* lowest availability seen by its kept measurements (1: not checked) */
} class_acc;

static void fill_rand(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

static int collect_shapes(const gguf_ctx *g, shape *out, int cap) {
    const bool tied = gguf_find_tensor(g, arch_role_base(TR_OUTPUT)) == NULL;
    int n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        bool flat2d = t->ne[1] > 1;
        for (uint32_t d = 2; d < t->n_dims; d++) flat2d = flat2d && t->ne[d] == 1;
        const dtype_traits *tr = dtype_get(t->type);
        if (!flat2d || !tr || !tr->to_float || t->type == KITE_DTYPE_LLM_INT8) continue;
        if (gguf_str_eq(t->name, arch_role_base(TR_TOKEN_EMBD)) && !tied) continue;
        const size_t rb = dtype_row_size(t->type, t->ne[0]);
        if (rb == 0 || rb * (uint64_t)t->ne[1] > t->nbytes) continue;
        int j = 0;
        while (j < n && !(out[j].w.type == t->type && out[j].w.ne[0] == t->ne[0] && out[j].w.ne[1] == t->ne[1])) j++;
        if (j < n) {
            out[j].n_same++;
            continue;
        }
        if (n == cap) break;
        out[n].w = (weight){.type = t->type, .ne = {t->ne[0], t->ne[1]}, .row_bytes = rb, .data = t->data};
        out[n++].n_same = 1;
    }
    return n;
}

/* The candidates for a shape class; [0] is the default. */
static int candidates(const kern_ops_table *kt, uint32_t type, int64_t n_tok, int nth, kern_tune_choice *c) {
    int n = 0;
    c[n++] = *kern_tune_default();
    const bool has_tiled = kt->ops[type].vec_dot && kern_gemm_tiled_get(kt->level, type);
    /* the default resolves to tiled-auto above KERN_GEMM_MAX_TOK where a tiled kernel exists, else flat-64K-auto */
    const bool default_tiled = has_tiled && n_tok > KERN_GEMM_MAX_TOK;
    for (int thr = 0; thr < KERN_TUNE_N_THR; thr++) {
        if (nth == 1 && thr != KERN_TUNE_THR_AUTO) continue;
        for (int tile = 0; tile < KERN_TUNE_N_TILES; tile++) {
            if (n_tok <= KERN_GEMM_MAX_TOK && tile != KERN_TUNE_TILE_DEFAULT) continue;
            if (!default_tiled && thr == KERN_TUNE_THR_AUTO && tile == KERN_TUNE_TILE_DEFAULT) continue;
            c[n++] = (kern_tune_choice){.regime = KERN_TUNE_FLAT, .tile = (uint8_t)tile, .threads = (uint8_t)thr};
        }
        if (has_tiled && !(default_tiled && thr == KERN_TUNE_THR_AUTO))
            c[n++] = (kern_tune_choice){.regime = KERN_TUNE_TILED, .tile = KERN_TUNE_TILE_DEFAULT, .threads = (uint8_t)thr};
    }
    return n;
}

/* Times every candidate on w with n_tok tokens; t[i] = median seconds per call. */
static int time_shape(const kern_ops_table *kt, threadpool *tp, const weight *w, int64_t n_tok, const kern_tune_choice *c,
                      int n_cand, double budget_s, int min_rounds, double *t) {
    const int nth = tp_n_threads(tp);
    const size_t sb = (kern_matmul_scratch_bytes(nth, n_tok, w->ne[0]) + 63) / 64 * 64;
    float *x = malloc(sizeof(float) * (size_t)(n_tok * w->ne[0]));
    float *y = malloc(sizeof(float) * (size_t)(n_tok * w->ne[1]));
    void *scratch = aligned_alloc(64, sb ? sb : 64);
    static double v[MAX_CAND][MAX_ROUNDS];
    int rc = 1, rounds = 0;
    if (!x || !y || !scratch) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    fill_rand(x, n_tok * w->ne[0], (uint64_t)n_tok);
    for (int i = 0; i < n_cand; i++) /* warm-up round: caches, page faults, pool wake-up */
        kern_matmul_variant(kt, tp, w, x, n_tok, y, w->ne[1], scratch, &c[i]);
    const double t_end = time_now_s() + budget_s;
    while (rounds < MAX_ROUNDS && (rounds < min_rounds || time_now_s() < t_end)) {
        for (int i = 0; i < n_cand; i++) {
            const double t0 = time_now_s();
            kern_matmul_variant(kt, tp, w, x, n_tok, y, w->ne[1], scratch, &c[i]);
            v[i][rounds] = time_now_s() - t0;
        }
        rounds++;
    }
    for (int i = 0; i < n_cand; i++) t[i] = cli_median(v[i], rounds);
    rc = 0;
done:
    free(x);
    free(y);
    free(scratch);
    return rc;
}

static void make_parent_dirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)mkdir(buf, 0755); /* EEXIST and the like: fopen reports a real failure */
        *p = '/';
    }
}

/* Reads the table at path into t when it exists, parses and was tuned at
 * `level` (other files are replaced). */
static void merge_existing(const char *path, int level, kern_tune_table *t) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char *text = malloc((4u << 20) + 1);
    size_t n = text ? fread(text, 1, 4u << 20, f) : 0;
    fclose(f);
    if (!text) return;
    text[n] = '\0';
    kern_tune_table *old = malloc(sizeof *old);
    if (old) {
        kern_tune_table_init(old);
        if (kern_tune_table_parse(old, text, path) >= 0 && old->level == level) *t = *old;
    }
    free(old);
    free(text);
}

static int write_table(const char *path, const kern_tune_table *t, const char *model, int nth) {
    char tmp[1100], line[256];
    make_parent_dirs(path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "kite %s: %s: cannot create: %s\n", CMD, tmp, strerror(errno));
        return 1;
    }
    fprintf(f, "# kite tune table: matmul variant per shape class (docs/kernels.md, \"Tuning\")\n"
               "# last run: kite tune -m %s -t %d\n"
               "kite-tune %d\nlevel %s\n# type rows k n_tok threads variant\n",
            model, nth, KERN_TUNE_VERSION, kern_level_name((kern_level)t->level));
    for (int i = 0; i < t->n; i++)
        if (kern_tune_table_line(t, i, line, sizeof line)) fprintf(f, "%s\n", line);
    for (int o = 0; o < KERN_OPT_COUNT; o++)
        if (t->opt[o] >= 0) fprintf(f, "option %s %s\n", kern_opt_name((kern_opt)o), t->opt[o] ? "on" : "off");
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        fprintf(stderr, "kite %s: %s: cannot write the table: %s\n", CMD, path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

/* Replaces the matrices kite_model_load repacks (q4_0, q8_0, q4_K and q6_K
 * into gemm_x16.h's layout, f16 and bf16 into gemm_x32.h's, where it pays:
 * model_repack_matrix makes the loader's choice) by repacked copies, so that tune times what a
 * run computes.  Returns 0, or 1 after printing an out-of-memory error. */
static int repack_shapes(shape *shapes, int n_shapes) {
    for (int s = 0; s < n_shapes; s++) {
        weight *w = &shapes[s].w;
        const size_t bytes = w->row_bytes * (size_t)w->ne[1];
        void *copy = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!copy) {
            fprintf(stderr, "kite %s: out of memory\n", CMD);
            return 1;
        }
        memcpy(copy, w->data, bytes);
        weight c = *w;
        c.data = copy;
        if (model_repack_matrix(&c) == WEIGHT_LAYOUT_PLAIN) {
            free(copy); /* the level gains nothing from a layout: the file's rows are timed */
            continue;
        }
        shapes[s].copy = copy;
        *w = c;
    }
    return 0;
}

/* How the shape classes are timed. */
typedef struct tune_run {
    int threads;
    double expect;   /* FMA GFLOP/s all threads should reach; 0: no availability checks */
    double budget_s; /* per shape and batch size */
    int min_rounds;
} tune_run;

/* Times every candidate of every (shape, n_tok class), adding the times of
 * shapes that share a class into acc[0..*n_classes).  Returns 0 or 1. */
static int measure(const kern_ops_table *kt, threadpool *tp, const shape *shapes, int n_shapes, const tune_run *r,
                   class_acc *acc, int *n_classes) {
    progress pg;
    progress_begin(&pg, "kite " CMD, PROGRESS_ITEMS, "shape x batch classes");
    const uint64_t n_steps = (uint64_t)n_shapes * KERN_TUNE_N_NTOK;
    for (int s = 0; s < n_shapes; s++) {
        const weight *w = &shapes[s].w;
        for (int nc = 0; nc < KERN_TUNE_N_NTOK; nc++) {
            const int64_t n_tok = kern_tune_ntok_rep(nc);
            const uint32_t key = kern_tune_key(w->type, w->ne[1], w->ne[0], n_tok, r->threads);
            int ci = 0;
            while (ci < *n_classes && acc[ci].key != key) ci++;
            class_acc *a = &acc[ci];
            if (ci == *n_classes) {
                (*n_classes)++;
                a->key = key;
                a->ntok_cls = nc;
                a->type = w->type;
                a->rows = w->ne[1];
                a->k = w->ne[0];
                a->n_cand = candidates(kt, w->type, n_tok, r->threads, a->cand);
                a->avail = 1.0;
            }
            double t[MAX_CAND], best_t[MAX_CAND], best_av = -1.0;
            for (int attempt = 0; attempt <= MAX_REDO; attempt++) {
                const double a0 = r->expect > 0 ? probe_fma_check(r->threads, CHECK_MS) / r->expect : 1.0;
                if (time_shape(kt, tp, w, n_tok, a->cand, a->n_cand, r->budget_s, r->min_rounds, t)) {
                    progress_end(&pg);
                    return 1;
                }
                const double a1 = r->expect > 0 ? probe_fma_check(r->threads, CHECK_MS) / r->expect : 1.0;
                const double av = a0 < a1 ? a0 : a1;
                if (av > best_av) {
                    best_av = av;
                    memcpy(best_t, t, sizeof t);
                }
                if (av >= AVAIL_MIN) break;
            }
            for (int i = 0; i < a->n_cand; i++) a->t[i] += best_t[i];
            if (best_av < a->avail) a->avail = best_av;
            a->n_shapes++;
            progress_update(&pg, (uint64_t)s * KERN_TUNE_N_NTOK + (uint64_t)nc + 1, n_steps);
        }
    }
    progress_end(&pg);
    return 0;
}

/* Picks each class's variant (the default unless another is MARGIN faster),
 * puts it in table and prints the summary table.  Returns 0 or 1. */
static int pick(const class_acc *acc, int n_classes, double expect, kern_tune_table *table, int *n_changed) {
    int n_noisy = 0;
    printf("| %-6s | %6s | %6s | %5s | %10s | %-15s | %9s | %7s | %5s |\n", "type", "rows", "k", "n_tok",
           "default us", "picked", "picked us", "speedup", "avail");
    printf("|--------|-------:|-------:|------:|-----------:|-----------------|----------:|--------:|------:|\n");
    for (int ci = 0; ci < n_classes; ci++) {
        const class_acc *a = &acc[ci];
        int best = 0;
        for (int i = 1; i < a->n_cand; i++)
            if (a->t[i] < a->t[best]) best = i;
        if (a->t[best] > a->t[0] * (1.0 - MARGIN)) best = 0;
        kern_tune_choice c = a->cand[best];
        c.tuned = 1;
        if (!kern_tune_table_put(table, a->key, &c)) {
            fprintf(stderr, "kite %s: the table is full (%d classes)\n", CMD, KERN_TUNE_MAX_ENTRIES);
            return 1;
        }
        *n_changed += best != 0;
        char rows[32];
        snprintf(rows, sizeof rows, "%lld%s", (long long)a->rows, a->n_shapes > 1 ? "*" : "");
        char avail[16];
        if (expect > 0)
            snprintf(avail, sizeof avail, "%.0f%%%s", 100.0 * a->avail, a->avail < AVAIL_MIN ? "*" : "");
        else
            snprintf(avail, sizeof avail, "-");
        n_noisy += a->avail < AVAIL_MIN;
        printf("| %-6s | %6s | %6lld | %5s | %10.1f | %-15s | %9.1f | %6.2fx | %5s |\n", dtype_name(a->type), rows,
               (long long)a->k, kern_tune_ntok_label(a->ntok_cls), a->t[0] * 1e6, kern_tune_choice_name(&c),
               a->t[best] * 1e6, a->t[best] > 0 ? a->t[0] / a->t[best] : 1.0, avail);
    }
    printf("(rows*: several shapes share the class; times are summed.  avail: the lowest share of the FMA rate the\n"
           " machine gave around the measurements; * below %.0f%% after %d retries: a noisy choice)\n",
           100.0 * AVAIL_MIN, MAX_REDO);
    if (n_noisy)
        fprintf(stderr, "kite %s: %d of %d classes were measured on a busy machine (avail *): run again when it is idle\n",
                CMD, n_noisy, n_classes);
    return 0;
}

int cmd_tune(int argc, char **argv) {
    tune_opts args = {.budget_ms = -1};
    int rc = cli_parse(&cli_spec_tune, argc, argv, &args);
    if (rc >= 0) return rc;
    const char *model = args.model, *out = args.out;
    int64_t threads = args.threads;
    double budget_ms = (double)args.budget_ms;
    const bool quick = args.quick, check = !args.no_check, options = !args.no_options;
    const int64_t min_mib = args.min_mib;
    if (!model) model = cli_default_model(argv[0]);
    if (threads == 0) {
        const long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc > 0 ? nc : 1;
    }
    if (args.attn_calib)
        return tune_attn_calib(model, args.attn_calib, args.attn_out ? args.attn_out : model,
                               args.attn_tokens, (int)threads);
    if (budget_ms < 0) budget_ms = quick ? QUICK_BUDGET_MS : BUDGET_MS;
    double expect = 0.0; /* FMA GFLOP/s all threads should reach; 0: no availability checks */

    int status = 1, n_classes = 0;
    gguf_ctx *g = NULL;
    threadpool *tp = NULL;
    shape *shapes = NULL;
    class_acc *acc = NULL;
    kern_tune_table *table = NULL;
    char path[1024];
    const kern_ops_table *kt = kern_table();
    gguf_open_params gp = {.use_mmap = true};
    if (gguf_open(model, &gp, &g) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    shapes = calloc(MAX_SHAPES, sizeof *shapes);
    acc = calloc((size_t)MAX_SHAPES * KERN_TUNE_N_NTOK, sizeof *acc);
    table = malloc(sizeof *table);
    if (!shapes || !acc || !table) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    const int n_shapes = collect_shapes(g, shapes, MAX_SHAPES);
    if (n_shapes == 0) {
        fprintf(stderr, "kite %s: %s: no matrices to tune\n", CMD, model);
        goto done;
    }
    /* time what a run computes: the layouts kite_model_load repacks into (x16, x32) where they pay */
    if (!config_get()->no_repack && repack_shapes(shapes, n_shapes)) goto done;
    probe_result pr;
    if (check && !quick) {
        if (config_probe_get(&pr, NULL) == KITE_OK)
            expect = pr.fma_gflops * (double)threads;
        else
            fprintf(stderr, "kite %s: %s; no availability checks\n", CMD, kite_last_error());
    }
    if (!(tp = tp_new((int)threads))) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    if (out) {
        snprintf(path, sizeof path, "%s", out);
    } else if (!config_tune_path(kt->level, path, sizeof path)) {
        fprintf(stderr, "kite %s: neither XDG_CACHE_HOME nor HOME is set: pass --out FILE\n", CMD);
        goto done;
    }
    fprintf(stderr, "kite %s: %s: %d matrix shapes, kernels %s, %d threads, %.0f ms per shape and batch size\n", CMD,
            model, n_shapes, kt->name, (int)threads, budget_ms);

    const double t_start = time_now_s();
    const tune_run run = {.threads = (int)threads, .expect = expect, .budget_s = budget_ms * 1e-3,
                          .min_rounds = quick ? 1 : MIN_ROUNDS};
    if (measure(kt, tp, shapes, n_shapes, &run, acc, &n_classes)) goto done;

    kern_tune_table_init(table);
    merge_existing(path, (int)kt->level, table);
    table->level = (int)kt->level;
    int n_changed = 0;
    if (pick(acc, n_classes, expect, table, &n_changed)) goto done;
    if (options) {
        uint32_t types[MAX_SHAPES];
        for (int i = 0; i < n_shapes; i++) types[i] = shapes[i].w.type;
        const tune_opt_params op = {.model = model, .threads = (int)threads, .rounds = quick ? 1 : OPT_ROUNDS,
                                    .quick = quick, .min_mib = min_mib, .expect = expect, .types = types,
                                    .n_types = n_shapes};
        if (tune_options(&op, table)) goto done;
    }
    if (write_table(path, table, model, (int)threads)) goto done;
    char opts[128] = "";
    for (int o = 0, n = 0; o < KERN_OPT_COUNT && n < (int)sizeof opts; o++)
        if (table->opt[o] >= 0)
            n += snprintf(opts + n, sizeof opts - (size_t)n, "%s%s %s", n ? ", " : "; options ",
                          kern_opt_name((kern_opt)o), table->opt[o] ? "on" : "off");
    printf("wrote %s: %d classes tuned here (%d differ from the default), %d in the file%s; %.1f s\n", path,
           n_classes, n_changed, table->n, opts, time_now_s() - t_start);
    status = 0;
done:
    tp_free(tp);
    gguf_close(g);
    for (int s = 0; shapes && s < MAX_SHAPES; s++) free(shapes[s].copy);
    free(shapes);
    free(acc);
    free(table);
    return status;
}
