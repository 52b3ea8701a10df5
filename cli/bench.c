/*
 * bench.c - `kite bench`: prefill and decode speed, in the spirit of llama-bench.
 *
 *   kite bench -m FILE [-p 128] [-n 32] [-t LIST] [-r 5] [--json] [--mmap] [--no-check] [--profile]
 *   kite bench --probe [--json]
 *
 * Tests (see docs/bench.md for what every number means):
 *   ppP  prefill: P random token ids evaluated as one batch into an empty
 *        context (a fresh context for every repetition);
 *   tgN  decode: N tokens evaluated one at a time from an empty context.
 * One warm-up run of each comes first.  Each test is repeated -r times; the
 * table gives the median tok/s and min-max.  Decode is compared with the
 * machine's read bandwidth (bytes of weights read per token * tok/s), prefill
 * with its FP32 FMA peak; both peaks come from src/roofline/probe (cached).
 *
 * Noisy machines: around every repetition a ~10 ms FMA check runs on the
 * same number of threads.  If the machine delivered less than
 * AVAIL_MIN of the expected rate (threads * per-thread peak) before or
 * after, the repetition is marked and run again (at most -r extra runs per
 * test); the number of marked repetitions and the median availability are
 * reported.
 *
 * Every test also reports which matmul variants ran (kernels/tune.h: the
 * difference of the variant counters around the test) and the tune table in
 * use: a "variants" line per test after the table, JSON fields "variants",
 * "variants_tuned" and "tune_table".
 *
 * --profile turns on the context's per-op-type timing (kite_ctx_set_profiling)
 * for the timed repetitions and reports, per test, the time per token of
 * every op type: the mean over the kept repetitions that passed the check
 * (over all attempts if none did).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "progress/progress.h"
#include "config/config.h"
#include "roofline/probe.h"
#include "core/timing.h"
#include "gguf/gguf.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x32.h"
#include "kernels/tune.h"
#include "model/arch.h"
#include "model/kv_cache.h"
#include "model/offload.h"
#include "kite.h"
#include "tensor/dtype.h"

#define CMD "bench"
#define MAX_THREAD_LIST 8
#define MAX_REPS 1000
#define AVAIL_MIN 0.70   /* below this fraction of the expected FMA rate a repetition is redone */
#define CHECK_MS 10.0    /* length of one availability check */
#define BENCH_DEPTH_PREFILL 512 /* -d: real positions; the rest of the depth repeats them (bench_fill_cache) */

typedef struct bench_opts {
    const char *model;
    int64_t n_prompt, n_gen, reps;
    int64_t depth; /* -d: positions already in the cache before every test */
    int threads[MAX_THREAD_LIST];
    int n_threads_list;
    uint64_t seed;
    uint64_t mem_budget; /* --mem-budget */
    bool json, use_mmap, probe, no_check, profile;
    int32_t kv_type; /* --kv-type, enum kite_kv_type */
} bench_opts;

static const cli_opt bench_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(bench_opts, model),
     .def_doc = "the bundled stories260K"},
    {.names = "-p, --n-prompt", .arg = "N", .help = "prefill test size (0 = skip)", .kind = CLI_INT,
     CLI_AT(bench_opts, n_prompt), .min = 0, .max = 1 << 16, .def = "128"},
    {.names = "-n, --n-gen", .arg = "N", .help = "decode test size (0 = skip)", .kind = CLI_INT,
     CLI_AT(bench_opts, n_gen), .min = 0, .max = 1 << 16, .def = "32"},
    {.names = "-d, --depth", .arg = "N",
     .help = "positions already in the KV cache before each test (llama-bench -d): tests run\n"
             "after a real prefill of up to 512 random tokens, repeated up to N (named tg32@d4096)",
     .kind = CLI_INT, CLI_AT(bench_opts, depth), .min = 0, .max = 1 << 20, .def = "0"},
    {.names = "-t, --threads", .arg = "LIST", .help = "threads, e.g. 2 or 1,2", .kind = CLI_LIST,
     CLI_AT(bench_opts, threads), CLI_COUNT(bench_opts, n_threads_list), .min = 1, .max = PROBE_MAX_THREADS,
     .def_doc = "all online CPUs"},
    {.names = "-r, --repetitions", .arg = "N", .help = "repetitions per test", .kind = CLI_INT,
     CLI_AT(bench_opts, reps), .min = 1, .max = MAX_REPS / 2, .def = "5"},
    CLI_OPT_KV_TYPE(bench_opts, kv_type, "KV cache type: f32, f16, q8_0 or q4_0"),
    {.names = "-s, --seed", .arg = "S", .help = "seed of the random token ids", .kind = CLI_U64,
     CLI_AT(bench_opts, seed), .def = "1"},
    {.names = "--mmap", .help = "map the file instead of reading it into memory", .kind = CLI_FLAG,
     CLI_AT(bench_opts, use_mmap)},
    CLI_OPT_MEM_BUDGET(bench_opts, mem_budget),
    CLI_OPT_F16_COMPUTE,
    {.names = "--no-check", .help = "skip the core-availability check around each repetition", .kind = CLI_FLAG,
     CLI_AT(bench_opts, no_check)},
    {.names = "--json", .help = "one JSON line per test on stdout instead of the table", .kind = CLI_FLAG,
     CLI_AT(bench_opts, json)},
    {.names = "--profile",
     .help = "time every op type of the forward pass (per token, per test; with\n"
             "--json an \"ops\" object of seconds per token)",
     .kind = CLI_FLAG, CLI_AT(bench_opts, profile)},
    {.names = "--probe",
     .help = "measure the machine's read bandwidth (1..nproc threads) and FMA peak\n"
             "again, store them in the cache, and print them",
     .kind = CLI_FLAG, CLI_AT(bench_opts, probe)},
    CLI_OPT_QUIET,
};

const cli_spec cli_spec_bench = {
    .cmd = CMD,
    .usage = "usage: kite bench [-m FILE] [-p N] [-n N] [-t LIST] [-r N] [--json] [--mmap] [--no-check] [--profile]\n"
             "       kite bench --probe [--json]\n"
             "       kite bench --lut-gemm [--rows N] [--cols N] [--group G] [--bits Q] [-r N] [--json]\n"
             "       kite bench --parallel LIST ...                          (kite bench --parallel 1 -h)\n"
             "       kite bench -m FILE --spec-verify | --spec DRAFTER ...   (kite bench --spec-verify -h)\n"
             "       kite bench -m FILE --attn-ctx LIST ...                  (kite bench --attn-ctx 2 -h)\n"
             "\n"
             "Measures prefill (ppN: N random tokens as one batch) and decode (tgN: N tokens one at a\n"
             "time) in tokens/s: median and min-max over the repetitions, with decode's weight traffic\n"
             "in GB/s against the measured read bandwidth and prefill's GFLOP/s against the measured\n"
             "FP32 FMA peak (see docs/bench.md).\n",
    CLI_TABLE(bench_opts_table, bench_opts),
};

/* ---- model facts from the file ----------------------------------------------- */

typedef struct model_facts {
    char type[16];          /* "F16", "Q4_K_M", ... */
    uint64_t file_bytes;
    uint64_t bytes_per_token; /* weight bytes one decode step reads */
    double mat_flops;       /* 2 * multiply-adds of the matrices per token */
    double attn_flops_pos;  /* attention FLOPs per token per cached position */
    double kv_bytes_pos;    /* K and V bytes of one cached position, all layers (the context's KV type) */
    bool bf16_dp;           /* the matrices run VDPBF16PS (a BF16 file, or F16 with --f16-compute bf16, at
                               avx512bf16 without the bf16-fma option): two products per FP32 lane, so the
                               prefill reference is twice the FP32 FMA peak */
    int32_t n_f16_as_bf16;  /* kite_model_info.n_f16_as_bf16 */
} model_facts;

/* llama.cpp's general.file_type names (informational). */
static const char *ftype_name(uint32_t ft) {
    static const char *const names[] = {
        [0] = "F32",    [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",    [8] = "Q5_0",
        [9] = "Q5_1",   [10] = "Q2_K",   [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S",
        [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K",   [25] = "IQ4_NL", [32] = "BF16",
    };
    return ft < sizeof names / sizeof names[0] ? names[ft] : NULL;
}

static int read_facts(const char *path, const kite_model_info *mi, model_facts *mf) {
    gguf_ctx *g;
    gguf_open_params gp = {.use_mmap = true};
    if (gguf_open(path, &gp, &g) != KITE_OK) return 1;
    memset(mf, 0, sizeof *mf);
    mf->file_bytes = g->size;
    bool tied = gguf_find_tensor(g, arch_role_base(TR_OUTPUT)) == NULL;
    uint64_t by_type[KITE_DTYPE_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        bool embd = gguf_str_eq(t->name, arch_role_base(TR_TOKEN_EMBD));
        if (embd && !tied) {
            mf->bytes_per_token += t->nbytes / (uint64_t)t->ne[1]; /* one row looked up */
        } else {
            mf->bytes_per_token += t->nbytes;
            if (t->ne[1] > 1) mf->mat_flops += 2.0 * (double)t->ne[0] * (double)t->ne[1];
        }
        if (t->type < KITE_DTYPE_COUNT && t->ne[1] > 1) by_type[t->type] += t->nbytes;
    }
    uint32_t ft;
    const char *name = gguf_get_u32(g, "general.file_type", &ft) == KITE_OK ? ftype_name(ft) : NULL;
    if (!name) {
        uint32_t best = 0;
        for (uint32_t t = 0; t < KITE_DTYPE_COUNT; t++)
            if (by_type[t] > by_type[best]) best = t;
        name = dtype_name(best);
    }
    snprintf(mf->type, sizeof mf->type, "%s", name);
    /* QK^T and AV: 2 FLOPs per multiply-add, per head_dim element, per head, per layer */
    int32_t head_dim = mi->n_head > 0 ? mi->n_embd / mi->n_head : 0;
    mf->attn_flops_pos = 4.0 * mi->n_layer * (double)mi->n_head * head_dim;
    gguf_close(g);
    return 0;
}

/* ---- statistics -------------------------------------------------------------- */


typedef struct test_result {
    char name[32];            /* "pp128", "tg32", "tg32@d4096" */
    double kv_bytes_per_token; /* tg: KV cache bytes a decode step reads (mean over the test's positions) */
    int threads;
    int n_runs;               /* kept repetitions */
    double tok_s, tok_s_min, tok_s_max;
    double gb_s;              /* weight traffic: bytes read per second */
    double gflops;            /* arithmetic of the matrices and attention */
    double roofline_pct;      /* tg: gb_s vs read bandwidth; pp: gflops vs FMA peak (x2 for bf16_dp) */
    double avail;             /* median availability seen by the checks (0: not checked) */
    int redone;               /* attempts marked because availability < AVAIL_MIN */
    int noisy;                /* marked attempts kept in the result (the machine stayed noisy) */
    double op_s[KITE_PROFILE_N_OPS]; /* --profile: seconds per token of each op type */
    const char *op_names[KITE_PROFILE_N_OPS]; /* their names (static, from kite_ctx_profile) */
    uint64_t variants[2][KERN_TUNE_N_VARIANTS]; /* matmul calls per variant (kernels/tune.h) during the test,
                                                   warm-up included: [0] default choice, [1] from the tune table */
} test_result;

/* ---- running ------------------------------------------------------------------ */

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One repetition: returns tokens per second, or < 0 on error.  prof != NULL:
 * the repetition runs with profiling on and its per-op seconds (all
 * KITE_PROFILE_N_OPS) are added to prof. */
static double run_once(kite_ctx *ctx, kite_token *ids, int32_t n_vocab, bool prefill, int64_t n, int32_t depth,
                       uint64_t seed, double *prof) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) ids[i] = (kite_token)(xorshift(&s) % (uint64_t)n_vocab);
    if (kite_ctx_truncate(ctx, depth) != KITE_OK) return -1.0; /* the filled positions stay (-d) */
    if (prof && kite_ctx_set_profiling(ctx, true) != KITE_OK) return -1.0;
    double t0 = time_now_s();
    if (prefill) {
        if (kite_ctx_eval(ctx, ids, (int32_t)n, false) != KITE_OK) return -1.0;
    } else {
        for (int64_t i = 0; i < n; i++)
            if (kite_ctx_eval(ctx, &ids[i], 1, false) != KITE_OK) return -1.0;
    }
    double dt = time_now_s() - t0;
    if (prof) {
        double op[KITE_PROFILE_N_OPS];
        kite_ctx_profile(ctx, op, NULL, KITE_PROFILE_N_OPS);
        for (int i = 0; i < KITE_PROFILE_N_OPS; i++) prof[i] += op[i];
        kite_ctx_set_profiling(ctx, false);
    }
    return dt > 0 ? (double)n / dt : 0.0;
}

static int run_test(const bench_opts *o, kite_ctx *ctx, kite_token *ids, int32_t n_vocab, bool prefill, int threads,
                    const probe_result *pr, const model_facts *mf, test_result *tr, progress *pg) {
    const int64_t n = prefill ? o->n_prompt : o->n_gen;
    double v[MAX_REPS], av[2 * MAX_REPS];
    int nv = 0, na = 0, tries = 0;
    memset(tr, 0, sizeof *tr);
    if (o->depth > 0)
        snprintf(tr->name, sizeof tr->name, "%s%" PRId64 "@d%" PRId64, prefill ? "pp" : "tg", n, o->depth);
    else
        snprintf(tr->name, sizeof tr->name, "%s%" PRId64, prefill ? "pp" : "tg", n);
    tr->threads = threads;
    const double expect = pr->fma_gflops * threads;
    uint64_t var0[2][KERN_TUNE_N_VARIANTS];
    kern_tune_counts(var0); /* which matmul variants ran: the difference at the end */

    /* warm-up (not counted): faults in scratch buffers and caches */
    if (run_once(ctx, ids, n_vocab, prefill, prefill ? (n < 16 ? n : 16) : 2, (int32_t)o->depth, o->seed ^ 0xabcdef,
                 NULL) < 0)
        return 1;
    /* Up to 2r attempts, stopping at r good ones (availability >= AVAIL_MIN).
     * If the machine stays noisy, the best-availability noisy attempts fill
     * the remaining places and are counted in tr->noisy. */
    double bad_v[2 * MAX_REPS], bad_a[2 * MAX_REPS];
    int nbad = 0;
    /* --profile: per-op seconds summed over the good / the marked attempts */
    double prof_good[KITE_PROFILE_N_OPS] = {0}, prof_bad[KITE_PROFILE_N_OPS] = {0}, prof_try[KITE_PROFILE_N_OPS];
    while (nv < o->reps && tries < 2 * o->reps) {
        tries++;
        double a0 = !o->no_check ? probe_fma_check(threads, CHECK_MS) / expect : 1.0;
        memset(prof_try, 0, sizeof prof_try);
        double ts = run_once(ctx, ids, n_vocab, prefill, n, (int32_t)o->depth, o->seed + (uint64_t)tries,
                             o->profile ? prof_try : NULL);
        if (ts < 0) return 1;
        double a1 = !o->no_check ? probe_fma_check(threads, CHECK_MS) / expect : 1.0;
        double a = a0 < a1 ? a0 : a1;
        if (!o->no_check) av[na++] = a;
        for (int i = 0; i < KITE_PROFILE_N_OPS; i++) (a < AVAIL_MIN ? prof_bad : prof_good)[i] += prof_try[i];
        progress_update(pg, pg->done + 1, pg->total + (a < AVAIL_MIN)); /* a marked try adds one */
        if (a < AVAIL_MIN) {
            tr->redone++;
            bad_v[nbad] = ts;
            bad_a[nbad++] = a;
            progress_clear(pg);
            if (!o->json)
                fprintf(stderr, "kite bench: %s t=%d: repetition marked, the machine delivered %.0f%% of its FMA rate\n",
                        tr->name, threads, 100.0 * a);
            continue;
        }
        v[nv++] = ts;
    }
    while (nv < o->reps && nbad > 0) { /* fill with the least noisy marked attempts */
        int best = 0;
        for (int i = 1; i < nbad; i++)
            if (bad_a[i] > bad_a[best]) best = i;
        v[nv++] = bad_v[best];
        tr->noisy++;
        bad_v[best] = bad_v[--nbad];
        bad_a[best] = bad_a[nbad];
    }
    const int n_good = nv - tr->noisy;
    kern_tune_counts(tr->variants);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < KERN_TUNE_N_VARIANTS; i++) tr->variants[s][i] -= var0[s][i];
    kite_ctx_profile(ctx, NULL, tr->op_names, KITE_PROFILE_N_OPS);
    for (int i = 0; i < KITE_PROFILE_N_OPS; i++)
        tr->op_s[i] = n_good > 0 ? prof_good[i] / n_good / (double)n : prof_bad[i] / tr->redone / (double)n;
    tr->n_runs = nv;
    tr->tok_s = cli_median(v, nv);
    tr->tok_s_min = v[0];
    tr->tok_s_max = v[nv - 1];
    tr->avail = na ? cli_median(av, na) : 0.0;
    /* mean cached positions a token of the test attends to: the depth, then its own share of the test */
    const double pos = (double)o->depth + (double)(n + 1) / 2.0;
    if (prefill) {
        double flops_tok = mf->mat_flops + mf->attn_flops_pos * pos;
        tr->gflops = flops_tok * tr->tok_s / 1e9;
        tr->gb_s = (double)mf->bytes_per_token * tr->tok_s / (double)n / 1e9; /* weights read once per batch */
        const double peak = expect * (mf->bf16_dp ? 2.0 : 1.0);
        tr->roofline_pct = peak > 0 ? 100.0 * tr->gflops / peak : 0.0;
    } else {
        /* the weights and the K and V rows every step reads (split-KV decode reads each cached row once) */
        tr->kv_bytes_per_token = mf->kv_bytes_pos * pos;
        tr->gb_s = ((double)mf->bytes_per_token + tr->kv_bytes_per_token) * tr->tok_s / 1e9;
        tr->gflops = (mf->mat_flops + mf->attn_flops_pos * pos) * tr->tok_s / 1e9;
        double bw = probe_read_gbs(pr, threads);
        tr->roofline_pct = bw > 0 ? 100.0 * tr->gb_s / bw : 0.0;
    }
    return 0;
}

/* ---- output ------------------------------------------------------------------- */

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "decode-prefetch on (cpu), bf16-fma on (cpu), f16-widen on (cpu)": the
 * kernel options (dispatch.h) and where each came from. */
static void format_opts(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int o = 0; o < KERN_OPT_COUNT && n < cap; o++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s %s (%s)", o ? ", " : "", kern_opt_name((kern_opt)o),
                              kern_opt_on((kern_opt)o) ? "on" : "off",
                              kern_opt_source_name(kern_opt_source_of((kern_opt)o)));
}

/* "decode_prefetch": true, "bf16_fma": ..., "kernel_opts_from": {"decode-prefetch": "cpu", ...}:
 * each option's value under its name with '_' for '-', then the sources. */
static void print_opts_json(void) {
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        char key[32];
        snprintf(key, sizeof key, "%s", kern_opt_name((kern_opt)o));
        for (char *c = key; *c; c++) *c = *c == '-' ? '_' : *c;
        printf("%s\"%s\": %s", o ? ", " : "", key, kern_opt_on((kern_opt)o) ? "true" : "false");
    }
    printf(", \"kernel_opts_from\": {");
    for (int o = 0; o < KERN_OPT_COUNT; o++)
        printf("%s\"%s\": \"%s\"", o ? ", " : "", kern_opt_name((kern_opt)o),
               kern_opt_source_name(kern_opt_source_of((kern_opt)o)));
    printf("}");
}

/* Why a test's roofline share is suspect, or NULL: a share above 100% means
 * the reference (the probe's read bandwidth or FMA peak) reads low, e.g.
 * because the host held back a core while it was measured; a probe measured
 * busy is named too. */
static const char *roofline_note(const probe_result *pr, const test_result *tr) {
    if (!(tr->roofline_pct > 100.0)) return NULL;
    return probe_suspect(pr, (long long)time(NULL)) & PROBE_BUSY
               ? "above 100%: the reference is suspect (the probe was measured while cores were held back)"
               : "above 100%: the reference is suspect (the probe read low); re-measure with kite bench --probe";
}

/* What a test's share is of: "bw" (decode), "fma" (prefill) or "bf16" (prefill on VDPBF16PS). */
static const char *roofline_ref(const model_facts *mf, const test_result *tr) {
    return tr->name[0] == 't' ? "bw" : mf->bf16_dp ? "bf16" : "fma";
}

static void print_json(const bench_opts *o, const model_facts *mf, const kite_model_info *mi, const char *kernels,
                       const probe_result *pr, const test_result *tr, double load_ms) {
    const char *m = base_name(o->model);
    printf("{\"model\": ");
    cli_json_string(stdout, m, strlen(m));
    printf(", \"type\": \"%s\", \"test\": \"%s\", \"threads\": %d, \"tok_s\": %.3f, \"tok_s_min\": %.3f, "
           "\"tok_s_max\": %.3f, \"gb_s\": %.3f, \"roofline_pct\": %.2f, \"gflops\": %.2f, \"kernels\": \"%s\", ",
           mf->type, tr->name, tr->threads, tr->tok_s, tr->tok_s_min, tr->tok_s_max, tr->gb_s, tr->roofline_pct,
           tr->gflops, kernels);
    print_opts_json();
    printf(", \"residency\": \"%s\", \"load_ms\": %.1f, \"reps\": %d, \"noisy_reps\": %d, \"redone\": %d, "
           "\"avail_pct\": %.1f, \"bytes_per_token\": %" PRIu64
           ", \"depth\": %" PRId64 ", \"kv_bytes_per_token\": %.0f"
           ", \"n_layer\": %d, \"read_gb_s\": %.2f, \"fma_gflops\": %.2f, \"cpu\": ",
           mi->residency ? mi->residency : "?", load_ms, tr->n_runs, tr->noisy, tr->redone, 100.0 * tr->avail,
           mf->bytes_per_token, o->depth, tr->kv_bytes_per_token, mi->n_layer, probe_read_gbs(pr, tr->threads), pr->fma_gflops * tr->threads);
    cli_json_string(stdout, pr->cpu, strlen(pr->cpu));
    const char *note = roofline_note(pr, tr);
    printf(", \"roofline_ref\": \"%s\", \"f16_compute\": \"%s\", \"n_f16_as_bf16\": %d", roofline_ref(mf, tr),
           mf->n_f16_as_bf16 > 0 ? "bf16" : "exact", (int)mf->n_f16_as_bf16);
    printf(", \"roofline_suspect\": %s, \"roofline_note\": ", note ? "true" : "false");
    cli_json_string(stdout, note ? note : "", note ? strlen(note) : 0);
    printf(", \"probe_measured_at\": %lld, \"probe_avail_pct\": %.1f", pr->measured_at,
           100.0 * pr->read_avail[tr->threads <= pr->n_read ? tr->threads : pr->n_read]);
    /* matmul variants that ran (kernels/tune.h) and the tune table they came from */
    char tune_path[1024];
    config_tune_source(tune_path, sizeof tune_path, NULL);
    uint64_t n_tuned = 0;
    printf(", \"variants\": {");
    for (int i = 0, first = 1; i < KERN_TUNE_N_VARIANTS; i++) {
        const uint64_t n = tr->variants[0][i] + tr->variants[1][i];
        n_tuned += tr->variants[1][i];
        if (!n) continue;
        printf("%s\"%s\": %" PRIu64, first ? "" : ", ", kern_tune_variant_name(i), n);
        first = 0;
    }
    printf("}, \"variants_tuned\": %" PRIu64 ", \"tune_table\": ", n_tuned);
    cli_json_string(stdout, tune_path, strlen(tune_path));
    if (o->profile) {
        printf(", \"ops\": {");
        for (int i = 0; i < KITE_PROFILE_N_OPS; i++) printf("%s\"%s\": %.6e", i ? ", " : "", tr->op_names[i], tr->op_s[i]);
        printf("}");
    }
    printf("}\n");
    fflush(stdout);
}

static void print_header(void) {
    printf("| %-28s | %-6s | %9s | %8s | %-9s | %-10s | %7s | %6s | %28s | %8s | %12s | %6s |\n", "model", "type",
           "size", "params", "residency", "kernels", "threads", "test", "t/s (min-max)", "GB/s", "% roofline",
           "avail");
    printf("|%.30s|%.8s|%.11s|%.10s|%.11s|%.12s|%.9s|%.8s|%.30s|%.10s|%.14s|%.8s|\n", "------------------------------",
           "--------", "----------:", "---------:", "-----------", "------------", "--------:", "-------:",
           "-----------------------------:", "---------:", "-------------:", "-------:");
}

static void print_row(const bench_opts *o, const model_facts *mf, const kite_model_info *mi, const char *kernels,
                      const test_result *tr) {
    char tps[48], roof[32], avail[16], size[16], params[16];
    snprintf(tps, sizeof tps, "%.2f (%.2f-%.2f)", tr->tok_s, tr->tok_s_min, tr->tok_s_max);
    snprintf(roof, sizeof roof, "%.1f%% %s%s", tr->roofline_pct, roofline_ref(mf, tr),
             tr->roofline_pct > 100.0 ? " !" : "");
    if (tr->avail > 0)
        snprintf(avail, sizeof avail, "%.0f%%%s", 100.0 * tr->avail, tr->noisy ? " *" : "");
    else
        snprintf(avail, sizeof avail, "-");
    if (mf->file_bytes >= 1000000000u)
        snprintf(size, sizeof size, "%.2f GB", (double)mf->file_bytes / 1e9);
    else
        snprintf(size, sizeof size, "%.2f MB", (double)mf->file_bytes / 1e6);
    if (mi->n_params >= 1000000000u)
        snprintf(params, sizeof params, "%.2f B", (double)mi->n_params / 1e9);
    else
        snprintf(params, sizeof params, "%.2f M", (double)mi->n_params / 1e6);
    printf("| %-28.28s | %-6s | %9s | %8s | %-9s | %-10s | %7d | %6s | %28s | %8.2f | %12s | %6s |\n",
           base_name(o->model), mf->type, size, params, mi->residency ? mi->residency : "?", kernels, tr->threads,
           tr->name, tps, tr->gb_s, roof, avail);
    fflush(stdout);
}

/* The matmul variants each test ran (kernels/tune.h): "variants pp128 t=2:
 * tiled-auto 154, flat-64K-1t 22 (tuned 22)", after the tune table's source. */
static void print_variants(const test_result *tr, int n) {
    char path[1024];
    const int n_entries = config_tune_source(path, sizeof path, NULL);
    if (n_entries < 0)
        printf("\ntune table: off (KITE_TUNE=off): built-in defaults\n");
    else if (n_entries == 0)
        printf("\ntune table: none (%s%s): built-in defaults\n", path[0] ? "no usable " : "", path);
    else
        printf("\ntune table: %s (%d classes)\n", path, n_entries);
    for (int j = 0; j < n; j++) {
        uint64_t tuned = 0;
        printf("variants %s t=%d:", tr[j].name, tr[j].threads);
        for (int i = 0, first = 1; i < KERN_TUNE_N_VARIANTS; i++) {
            const uint64_t c = tr[j].variants[0][i] + tr[j].variants[1][i];
            tuned += tr[j].variants[1][i];
            if (!c) continue;
            printf("%s %s %" PRIu64, first ? "" : ",", kern_tune_variant_name(i), c);
            first = 0;
        }
        printf(" (matmul calls; %" PRIu64 " chosen by the tune table)\n", tuned);
    }
}

/* --profile table: one column per test, microseconds per token and share. */
static void print_profile(const test_result *tr, int n) {
    printf("\nper-op time per token (us/tok, share of the sum), forward pass only:\n\n| %-10s |", "op");
    for (int j = 0; j < n; j++) printf(" %7s t=%-3d |", tr[j].name, tr[j].threads);
    printf("\n|------------|");
    for (int j = 0; j < n; j++) printf("--------------:|");
    printf("\n");
    double sum[2 * MAX_THREAD_LIST] = {0};
    for (int j = 0; j < n; j++)
        for (int i = 0; i < KITE_PROFILE_N_OPS; i++) sum[j] += tr[j].op_s[i];
    for (int i = 0; i < KITE_PROFILE_N_OPS; i++) {
        printf("| %-10s |", tr[0].op_names[i]);
        for (int j = 0; j < n; j++)
            printf(" %7.1f %4.1f%% |", tr[j].op_s[i] * 1e6, sum[j] > 0 ? 100.0 * tr[j].op_s[i] / sum[j] : 0.0);
        printf("\n");
    }
    printf("| %-10s |", "sum");
    for (int j = 0; j < n; j++) printf(" %7.1f       |", sum[j] * 1e6);
    printf("\n");
}

static void print_probe(const probe_result *pr, bool measured, bool json) {
    if (json) {
        printf("{\"probe\": true, \"cpu\": ");
        cli_json_string(stdout, pr->cpu, strlen(pr->cpu));
        printf(", \"n_cpu\": %d, \"isa\": \"%s\", \"fma_gflops_per_thread\": %.2f, \"read_gb_s\": [", pr->n_cpu, pr->isa,
               pr->fma_gflops);
        for (int t = 1; t <= pr->n_read; t++) printf(t > 1 ? ", %.2f" : "%.2f", pr->read_gbs[t]);
        printf("], \"measured\": %s", measured ? "true" : "false");
        if (measured) { /* availability around each kept read probe, and the busy tries */
            printf(", \"read_avail_pct\": [");
            for (int t = 1; t <= pr->n_read; t++) printf(t > 1 ? ", %.1f" : "%.1f", 100.0 * pr->read_avail[t]);
            printf("], \"read_busy_tries\": [");
            for (int t = 1; t <= pr->n_read; t++) printf(t > 1 ? ", %d" : "%d", pr->read_busy[t]);
            printf("]");
        }
        printf("}\n");
        return;
    }
    printf("cpu: %s (%d online)\n", pr->cpu, pr->n_cpu);
    printf("FP32 FMA peak: %.1f GFLOP/s per thread (%s)\n", pr->fma_gflops, pr->isa);
    for (int t = 1; t <= pr->n_read; t++) {
        printf("read bandwidth, %d thread%s: %.1f GB/s", t, t > 1 ? "s" : "", pr->read_gbs[t]);
        if (measured)
            printf(" (core availability %.0f%%%s)", 100.0 * pr->read_avail[t],
                   pr->read_busy[t] >= PROBE_READ_TRIES ? ": busy in every try, may read low"
                   : pr->read_busy[t] ? ", after a busy try" : "");
        printf("\n");
    }
    if (config_get()->have_probe_path) printf("%s: %s\n", measured ? "saved to" : "cached in", config_get()->probe_path);
}

int cmd_bench(int argc, char **argv) {
    if (cli_find_arg(argc, argv, "--lut-gemm")) return bench_lut_gemm(argc, argv); /* cli/bench_lut.c */
    if (cli_find_arg(argc, argv, "--parallel")) return bench_serve(argc, argv);   /* cli/bench_serve.c */
    if (cli_find_arg(argc, argv, "--spec-verify") || cli_find_arg(argc, argv, "--spec"))
        return bench_spec(argc, argv); /* cli/bench_spec.c */
    if (cli_find_arg(argc, argv, "--attn-ctx")) return bench_attn(argc, argv); /* cli/bench_attn.c */
    bench_opts o = {0};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads[0] = ncpu > 0 ? (int)(ncpu < PROBE_MAX_THREADS ? ncpu : PROBE_MAX_THREADS) : 1;
    o.n_threads_list = 1;
    int rc = cli_parse(&cli_spec_bench, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.model && !o.probe) o.model = cli_default_model(argv[0]); /* as run: the bundled model */

    probe_result pr;
    bool measured = false;
    if (o.probe) {
        if (probe_measure(&pr) != KITE_OK) goto err;
        measured = true;
        if (config_probe_save(&pr) != KITE_OK) fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        print_probe(&pr, true, o.json);
        if (!o.model) return 0;
    } else if (config_probe_get(&pr, &measured) != KITE_OK) {
        goto err;
    }

    int status = 1;
    kite_model *model = NULL;
    kite_ctx *ctx = NULL;
    kite_token *ids = NULL, *fill_ids = NULL;
    double t0 = time_now_s();
    kite_model_params mp = config_model_params();
    mp.use_mmap = o.use_mmap;
    mp.mem_budget = o.mem_budget;
    if (kite_model_load(o.model, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    double t_load = time_now_s() - t0;
    kite_model_info mi;
    kite_model_get_info(model, &mi);
    if (mi.vocab_only) {
        fprintf(stderr, "kite %s: %s: a vocab-only model has no weights to benchmark\n", CMD, o.model);
        goto done;
    }
    model_facts mf;
    if (read_facts(o.model, &mi, &mf)) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    const char *kernels = kern_table()->name;
    mf.n_f16_as_bf16 = mi.n_f16_as_bf16;
    {
        const kern_level lv = kern_table()->level;
        mf.bf16_dp = (!strcmp(mf.type, "BF16") || mi.n_f16_as_bf16 > 0) && lv >= KERN_LEVEL_AVX512BF16 &&
                     !kern_x32_bf16_wide(lv);
    }
    if (mi.n_f16_as_bf16 > 0 && !o.json)
        printf("note: --f16-compute bf16: %d F16 matrices rounded to bf16 at load and computed with bf16 "
               "activations (lossy; docs/kernels.md)%s\n", (int)mi.n_f16_as_bf16,
               mf.bf16_dp ? "; prefill's share is of the VDPBF16PS peak, twice the FP32 FMA peak" : "");
    char opts[160];
    format_opts(opts, sizeof opts);
    int64_t n_max = o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen;
    if (n_max < 16) n_max = 16; /* the warm-up prefill */
    if (!(ids = malloc(sizeof *ids * (size_t)n_max)) || !(fill_ids = malloc(sizeof *fill_ids * BENCH_DEPTH_PREFILL))) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    fprintf(stderr,
            "kite bench: %s: load %.0f ms, weights %s, kernels %s (%s), %.2f GB read per decoded "
            "token | machine: %s, read %.1f GB/s (%d thr), FMA %.1f GFLOP/s per thread (%s, %s)\n",
            o.model, t_load * 1e3, mi.residency, kernels, opts,
            (double)mf.bytes_per_token / 1e9, pr.cpu,
            probe_read_gbs(&pr, pr.n_read), pr.n_read, pr.fma_gflops, pr.isa, measured ? "just measured" : "cached");
    double disk_gbs = 0.0;
    if (mi.mem_budget > 0 && !o.json) { /* honest I/O (docs/offload.md): the plan, then the disk's own speed */
        bool direct = false;
        kite_offload_stats st;
        kite_model_offload_stats(model, &st);
        if (offload_probe_disk(o.model, 256u << 20, &disk_gbs, &direct) != KITE_OK) disk_gbs = 0.0;
        printf("offload: budget %.1f MiB, %d of %d layers resident, %.1f MiB held (ring %.1f MiB), streamed "
               "reads %s; disk read %.2f GB/s (%s sequential probe of the model file)\n",
               (double)mi.mem_budget / 1048576.0, mi.n_resident_layers, mi.n_layer,
               (double)mi.resident_bytes / 1048576.0, (double)mi.ring_bytes / 1048576.0,
               mi.ring_bytes == 0 ? "none (everything fits)" : st.direct ? "O_DIRECT" : "buffered (page cache)", disk_gbs,
               direct ? "O_DIRECT" : "buffered, so possibly page-cache speed:");
    }
    if (!o.json) print_header();
    test_result done_tr[2 * MAX_THREAD_LIST];
    int n_done = 0;
    progress pg;
    progress_begin(&pg, "kite " CMD, PROGRESS_ITEMS, "repetitions");
    pg.total = (uint64_t)o.n_threads_list * (uint64_t)((o.n_prompt > 0) + (o.n_gen > 0)) * (uint64_t)o.reps;

    for (int ti = 0; ti < o.n_threads_list; ti++) {
        kite_ctx_params cp = kite_ctx_default_params();
        cp.n_ctx = (int32_t)(n_max + o.depth) + 1;
        cp.n_threads = o.threads[ti];
        cp.kv_type = o.kv_type;
        if (kite_ctx_new(model, &cp, &ctx) != KITE_OK) {
            fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
            goto done;
        }
        mf.kv_bytes_pos = 2.0 * (double)mi.n_layer * (double)ctx_kv_row_bytes(ctx);
        if (o.depth > 0) { /* -d: the cache filled once; every repetition truncates back to it */
            const int32_t P = (int32_t)(o.depth < BENCH_DEPTH_PREFILL ? o.depth : BENCH_DEPTH_PREFILL);
            uint64_t sd = o.seed * 0x51ed270b27f3ull + 7;
            for (int32_t i = 0; i < P; i++) fill_ids[i] = (kite_token)(xorshift(&sd) % (uint64_t)mi.n_vocab);
            if (bench_fill_cache(ctx, fill_ids, P, (int32_t)o.depth) != KITE_OK) {
                fprintf(stderr, "kite %s: -d %" PRId64 ": %s\n", CMD, o.depth, kite_last_error());
                goto done;
            }
        }
        for (int k = 0; k < 2; k++) {
            bool prefill = k == 0;
            if ((prefill ? o.n_prompt : o.n_gen) == 0) continue;
            test_result tr;
            kite_offload_stats st0, st1;
            kite_model_offload_stats(model, &st0);
            const uint64_t io0 = offload_proc_read_bytes();
            if (run_test(&o, ctx, ids, mi.n_vocab, prefill, o.threads[ti], &pr, &mf, &tr, &pg)) {
                progress_end(&pg);
                fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
                goto done;
            }
            progress_clear(&pg); /* the row goes where the line was */
            if (o.json)
                print_json(&o, &mf, &mi, kernels, &pr, &tr, t_load * 1e3);
            else
                print_row(&o, &mf, &mi, kernels, &tr);
            done_tr[n_done++] = tr;
            kite_model_offload_stats(model, &st1);
            const uint64_t passes = st1.n_passes - st0.n_passes, io1 = offload_proc_read_bytes();
            if (mi.mem_budget > 0 && !o.json && passes > 0) {
                const double per = (double)(st1.bytes_read - st0.bytes_read) / (double)passes,
                             disk = (double)(io1 - io0) / (double)passes;
                printf("offload: %s t=%d: %.2f MB streamed per %s (I/O thread), %.2f MB read from disk per %s "
                       "(/proc/self/io read_bytes)",
                       prefill ? "pp" : "tg", o.threads[ti], per / 1e6, prefill ? "pass" : "token", disk / 1e6,
                       prefill ? "pass" : "token");
                if (!prefill && disk_gbs > 0 && per > 0)
                    printf(", disk-bound roofline %.1f tok/s", disk_gbs * 1e9 / per);
                printf("\n");
            }
        }
        kite_ctx_free(ctx);
        ctx = NULL;
    }
    progress_end(&pg);
    for (int i = 0; i < n_done && !o.json; i++) { /* "!" in the table: say why */
        const char *note = roofline_note(&pr, &done_tr[i]);
        if (note)
            printf("note: %s t=%d reads %.1f%% of the %s roofline, %s\n", done_tr[i].name, done_tr[i].threads,
                   done_tr[i].roofline_pct, done_tr[i].name[0] == 't' ? "bandwidth" : "FMA", note);
    }
    if (!o.json && n_done > 0) print_variants(done_tr, n_done);
    if (o.profile && !o.json && n_done > 0) print_profile(done_tr, n_done);
    status = 0;
done:
    free(ids);
    free(fill_ids);
    kite_ctx_free(ctx);
    kite_model_free(model);
    return status;
err:
    fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
    return 1;
}
