/*
 * bench_spec.c - `kite bench --spec-verify` and `kite bench --spec DRAFTER`:
 * the two speculative-decoding benchmarks of docs/spec.md.
 *
 *   kite bench -m FILE --spec-verify [--n-past 64] [--k LIST] [-r 5] [-t N] [--seed S]
 *   kite bench [-m FILE] --spec lookup N | lookahead W,N,G | skip LIST | draft FILE
 *              [-f PROMPT_FILE | --prompt TEXT] [-n 128] [--draft-max K] [-r 3] [-t N]
 *
 * DESIGN
 *   --spec-verify: after n_past random tokens are cached, one repetition
 *   times, for every k of the list, a single decode step (1 token, last
 *   logits) and then a verification pass (k + 1 tokens with every row's
 *   logits, what spec_step evaluates), truncating back to n_past after
 *   each; the two are interleaved so a load change hits both alike.  The
 *   table gives the medians of both times and the median of the per-
 *   repetition ratios verify / step, with (k + 1) / ratio: the speedup an
 *   all-accepted draft would give at zero drafting cost.
 *   --spec: the same prompt decoded greedily (temperature 0, EOS ignored)
 *   plainly and speculatively, alternating, -r times each; times run from
 *   the end of prefill to the last token.  Greedy speculation is token-for-
 *   token plain decoding, which is checked.  The default prompt is one
 *   sentence written four times, which the model goes on copying (an
 *   input-copying task).
 *
 * OWNERSHIP / THREADS
 *   Single-threaded driver; the contexts use -t threads.  Everything is
 *   released before returning.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/error.h"
#include "core/timing.h"
#include "kite.h"
#include "spec/spec.h"

#define CMD "bench"
#define MAX_K_LIST 8
#define MAX_REPS 200

/* The built-in input-copying prompt of --spec (docs/spec.md): one sentence
 * four times; the bundled model's greedy continuation mostly repeats it
 * (the best prompt-lookup acceptance among the copy prompts tried). */
static const char DEFAULT_PROMPT[] =
    "The ball was very happy. The ball was very happy. The ball was very happy. The ball was very happy.";

typedef struct spec_bench_opts {
    const char *model;
    bool verify;             /* --spec-verify */
    const char *drafter;     /* --spec NAME */
    const char *drafter_arg; /* its argument */
    const char *prompt;      /* --prompt TEXT */
    const char *prompt_file; /* -f FILE */
    int64_t n_past, n_gen, reps, threads, draft_max;
    int32_t k_list[MAX_K_LIST];
    int n_k;
    uint64_t seed;
    bool reps_set;
} spec_bench_opts;

static int opt_spec(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    spec_bench_opts *b = state;
    (void)o, (void)cmd, (void)flag, (void)n;
    b->drafter = vals[0];
    b->drafter_arg = vals[1];
    return 2;
}

static const cli_opt bench_spec_opts_table[] = {
    {.names = "--spec-verify", .help = "the cost of verification passes", .kind = CLI_FLAG,
     CLI_AT(spec_bench_opts, verify)},
    {.names = "--spec", .arg = "DRAFTER ARG", .help = "plain vs speculative decoding with DRAFTER", .kind = CLI_FN,
     .nargs = 2, .fn = opt_spec, .example = "lookup 3"},
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model (--spec default: the bundled model)", .kind = CLI_STR,
     CLI_AT(spec_bench_opts, model)},
    {.names = "--n-past", .arg = "N", .help = "cached positions before the step", .kind = CLI_INT,
     CLI_AT(spec_bench_opts, n_past), .min = 1, .max = 1 << 16, .def = "64"},
    {.names = "--k", .arg = "LIST", .help = "draft lengths (each 1.." CLI_XSTR(SPEC_MAX_DRAFT) ")", .kind = CLI_LIST,
     CLI_AT(spec_bench_opts, k_list), CLI_COUNT(spec_bench_opts, n_k), .min = 1, .max = SPEC_MAX_DRAFT,
     .def = "1,2,4,8,16"},
    {.names = "-f, --file", .arg = "FILE", .help = "prompt file (--spec)", .kind = CLI_STR,
     CLI_AT(spec_bench_opts, prompt_file), .def_doc = "a built-in input-copying prompt"},
    {.names = "--prompt", .arg = "TEXT", .help = "prompt text (--spec)", .kind = CLI_STR,
     CLI_AT(spec_bench_opts, prompt)},
    {.names = "-n, --n-gen", .arg = "N", .help = "tokens to generate (--spec)", .kind = CLI_INT,
     CLI_AT(spec_bench_opts, n_gen), .min = 1, .max = 1 << 16, .def = "128"},
    {.names = "--draft-max", .arg = "K", .help = "longest draft, 1.." CLI_XSTR(SPEC_MAX_DRAFT) " (--spec)",
     .kind = CLI_INT, CLI_AT(spec_bench_opts, draft_max), .min = 1, .max = SPEC_MAX_DRAFT, .def_doc = "8"},
    {.names = "-r, --repetitions", .arg = "N", .help = "repetitions", .kind = CLI_INT, CLI_AT(spec_bench_opts, reps),
     .min = 1, .max = MAX_REPS, CLI_SEEN(spec_bench_opts, reps_set), .def_doc = "5 for --spec-verify, 3 for --spec"},
    {.names = "-t, --threads", .arg = "N", .help = "threads", .kind = CLI_INT, CLI_AT(spec_bench_opts, threads),
     .min = 1, .max = 256, .def_doc = "all online CPUs"},
    {.names = "-s, --seed", .arg = "S", .help = "seed of the random token ids (--spec-verify)", .kind = CLI_U64,
     CLI_AT(spec_bench_opts, seed), .def = "1"},
};

const cli_spec cli_spec_bench_spec = {
    .cmd = CMD,
    .usage = "usage: kite bench -m FILE --spec-verify [--n-past N] [--k LIST] [-r N] [-t N] [--seed S]\n"
             "       kite bench [-m FILE] --spec DRAFTER ARG [-f FILE | --prompt TEXT] [-n N] [--draft-max K]\n"
             "                  [-r N] [-t N]\n"
             "\n"
             "--spec-verify: cost of one verification pass over k drafted tokens (an eval of k+1 tokens\n"
             "after n_past cached positions) relative to one decode step, interleaved, medians.\n"
             "--spec: plain vs speculative greedy decoding of the same prompt: tok/s of both, ratio,\n"
             "acceptance and tokens per verification pass.  DRAFTER ARG is one of\n"
             "  lookup N | lookahead W,N,G | skip LIST | draft FILE\n",
    CLI_TABLE(bench_spec_opts_table, spec_bench_opts),
    .unknown_tail = " (with --spec-verify / --spec)",
};

static int parse_args(int argc, char **argv, spec_bench_opts *o) {
    int rc = cli_parse(&cli_spec_bench_spec, argc, argv, o);
    if (rc >= 0) return rc;
    if (o->verify == (o->drafter != NULL)) return cli_usage_error(CMD, "give either --spec-verify or --spec DRAFTER");
    if (o->verify && !o->model) return cli_usage_error(CMD, "--spec-verify: -m FILE is required");
    if (o->prompt && o->prompt_file) return cli_usage_error(CMD, "give at most one of -f and --prompt");
    if (!o->reps_set) o->reps = o->verify ? 5 : 3;
    return -1;
}

/* ---- helpers ---------------------------------------------------------------- */


/* One-minute load average, or -1 when /proc/loadavg is unreadable. */
static double load_avg(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Reads a whole file (NUL-terminated, malloc'd); NULL on failure. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) return NULL;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t nc = cap ? 2 * cap : 8192;
            char *nb = realloc(buf, nc);
            if (!nb) goto fail;
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    if (ferror(f)) goto fail;
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

/* ---- --spec-verify ------------------------------------------------------------ */

/* Seconds of one eval of n tokens at position n_past (then truncated back). */
static double time_eval(kite_ctx *ctx, const kite_token *t, int32_t n, int32_t n_past, int *rc) {
    double t0 = time_now_s();
    *rc = kite_ctx_eval(ctx, t, n, n > 1);
    double dt = time_now_s() - t0;
    if (*rc == KITE_OK) *rc = kite_ctx_truncate(ctx, n_past);
    return dt;
}

static int run_verify(const spec_bench_opts *o, kite_model *model, const kite_model_info *mi) {
    int status = 1, rc;
    kite_ctx *ctx = NULL;
    kite_token *ids = NULL;
    double *step = NULL, *ver = NULL, *ratio = NULL;
    const int32_t n_past = (int32_t)o->n_past, reps = (int32_t)o->reps;
    int32_t kmax = 1;
    for (int i = 0; i < o->n_k; i++)
        if (o->k_list[i] > kmax) kmax = o->k_list[i];
    const size_t n_ids = (size_t)n_past + (size_t)kmax + 1;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)n_ids;
    cp.n_threads = (int32_t)o->threads;
    ids = malloc(sizeof *ids * n_ids);
    step = malloc(sizeof *step * (size_t)reps * (size_t)o->n_k);
    ver = malloc(sizeof *ver * (size_t)reps * (size_t)o->n_k);
    ratio = malloc(sizeof *ratio * (size_t)reps * (size_t)o->n_k);
    if (!ids || !step || !ver || !ratio) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    uint64_t s = o->seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n_ids; i++) ids[i] = (kite_token)(xorshift(&s) % (uint64_t)mi->n_vocab);
    if (kite_ctx_new(model, &cp, &ctx) != KITE_OK) goto err;
    if (kite_ctx_eval(ctx, ids, n_past, false) != KITE_OK) goto err;
    const kite_token *tail = ids + n_past;
    const double load0 = load_avg();
    /* warm-up: every shape once */
    time_eval(ctx, tail, 1, n_past, &rc);
    if (rc != KITE_OK) goto err;
    for (int j = 0; j < o->n_k; j++) {
        time_eval(ctx, tail, o->k_list[j] + 1, n_past, &rc);
        if (rc != KITE_OK) goto err;
    }
    for (int32_t r = 0; r < reps; r++) {
        for (int j = 0; j < o->n_k; j++) {
            const size_t at = (size_t)j * (size_t)reps + (size_t)r;
            /* alternate the order so neither measurement always runs second */
            if (r % 2 == 0) {
                step[at] = time_eval(ctx, tail, 1, n_past, &rc);
                if (rc == KITE_OK) ver[at] = time_eval(ctx, tail, o->k_list[j] + 1, n_past, &rc);
            } else {
                ver[at] = time_eval(ctx, tail, o->k_list[j] + 1, n_past, &rc);
                if (rc == KITE_OK) step[at] = time_eval(ctx, tail, 1, n_past, &rc);
            }
            if (rc != KITE_OK) goto err;
            ratio[at] = step[at] > 0 ? ver[at] / step[at] : 0.0;
        }
    }
    const double load1 = load_avg();
    printf("spec-verify: %s, %d layers, n_past %d, threads %d, %d repetitions, load average %.2f -> %.2f\n",
           base_name(o->model), mi->n_layer, n_past, kite_ctx_n_threads(ctx), reps, load0, load1);
    printf("| %3s | %6s | %12s | %12s | %20s | %14s |\n", "k", "tokens", "step ms", "verify ms", "ratio (min-max)",
           "(k+1)/ratio");
    printf("|----:|-------:|-------------:|-------------:|---------------------:|---------------:|\n");
    for (int j = 0; j < o->n_k; j++) {
        double *sv = step + (size_t)j * (size_t)reps, *vv = ver + (size_t)j * (size_t)reps,
               *rv = ratio + (size_t)j * (size_t)reps;
        const double ms_step = 1e3 * cli_median(sv, reps), ms_ver = 1e3 * cli_median(vv, reps), rm = cli_median(rv, reps);
        char rs[48];
        snprintf(rs, sizeof rs, "%.3f (%.2f-%.2f)", rm, rv[0], rv[reps - 1]);
        printf("| %3d | %6d | %12.2f | %12.2f | %20s | %14.2f |\n", o->k_list[j], o->k_list[j] + 1, ms_step, ms_ver,
               rs, rm > 0 ? (o->k_list[j] + 1) / rm : 0.0);
    }
    fflush(stdout);
    status = 0;
    goto done;
err:
    fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
done:
    kite_ctx_free(ctx);
    free(ids);
    free(step);
    free(ver);
    free(ratio);
    return status;
}

/* ---- --spec DRAFTER ------------------------------------------------------------ */

/* Greedy plain decoding of n_gen tokens after the prompt (EOS ignored);
 * out[0..n_gen) receives them.  Seconds from the end of prefill. */
static int plain_decode(kite_ctx *ctx, const kite_token *prompt, int32_t n_prompt, int32_t n_gen, int32_t n_vocab,
                        kite_token *out, double *secs) {
    int rc = kite_ctx_truncate(ctx, 0);
    if (rc == KITE_OK) rc = kite_ctx_eval(ctx, prompt, n_prompt, false);
    double t0 = time_now_s();
    for (int32_t i = 0; rc == KITE_OK && i < n_gen; i++) {
        const float *l = kite_ctx_logits(ctx, -1);
        kite_token best = 0;
        for (int32_t v = 1; v < n_vocab; v++)
            if (l[v] > l[best]) best = v; /* ties to the lowest id, like the sampler */
        out[i] = best;
        if (i + 1 < n_gen) rc = kite_ctx_eval(ctx, &best, 1, false);
    }
    *secs = time_now_s() - t0;
    return rc;
}

/* Fills sp's drafter fields from --spec NAME ARG (loading a draft model
 * into *draft, allocating *skip).  KITE_OK or a status with the message set. */
static int drafter_params(const spec_bench_opts *o, const kite_model_info *mi, spec_params *sp, kite_model **draft,
                          bool **skip) {
    const char *n = o->drafter, *a = o->drafter_arg;
    if (!strcmp(n, "lookup")) {
        char *end;
        long v = strtol(a, &end, 10);
        if (*a == '\0' || *end != '\0' || v < 1 || v > 64) {
            return err_set(KITE_E_ARG, "lookup: expected N in 1..64, got '%s'", a);
        }
        sp->drafter = SPEC_DRAFT_LOOKUP;
        sp->lookup_n = (int32_t)v;
        return KITE_OK;
    }
    if (!strcmp(n, "lookahead")) {
        sp->drafter = SPEC_DRAFT_LOOKAHEAD;
        return spec_parse_lookahead(a, sp);
    }
    if (!strcmp(n, "skip")) {
        if (!(*skip = calloc((size_t)mi->n_layer, sizeof **skip))) return KITE_E_NOMEM;
        int rc = spec_parse_layers(a, mi->n_layer, *skip);
        if (rc != KITE_OK) return rc;
        sp->drafter = SPEC_DRAFT_SELF;
        sp->skip_layers = *skip;
        sp->n_skip = mi->n_layer;
        return KITE_OK;
    }
    if (!strcmp(n, "draft")) {
        kite_model_params mp = config_model_params();
        int rc = kite_model_load(a, &mp, draft);
        if (rc != KITE_OK) return rc;
        sp->drafter = SPEC_DRAFT_MODEL;
        sp->draft_model = *draft;
        return KITE_OK;
    }
    return err_set(KITE_E_ARG, "unknown drafter '%s' (expected lookup, lookahead, skip or draft)", n);
}

static int run_spec(const spec_bench_opts *o, kite_model *model, const kite_model_info *mi) {
    int status = 1, rc = KITE_OK;
    kite_ctx *ctx = NULL;
    kite_model *draft = NULL;
    bool *skip = NULL;
    spec_decoder *sd = NULL;
    char *text_buf = NULL;
    kite_token *prompt = NULL, *ref = NULL, *got = NULL;
    double *t_plain = NULL, *t_spec = NULL, *ratio = NULL;
    const int32_t reps = (int32_t)o->reps, n_gen = (int32_t)o->n_gen;
    size_t len = 0, n_prompt = 0;
    const char *text = o->prompt ? o->prompt : DEFAULT_PROMPT;
    if (o->prompt_file) {
        if (!(text_buf = read_file(o->prompt_file, &len))) {
            fprintf(stderr, "kite %s: cannot read prompt file '%s'\n", CMD, o->prompt_file);
            goto done;
        }
        text = text_buf;
    }
    len = strlen(text);
    prompt = malloc(sizeof *prompt * (len + 8));
    ref = malloc(sizeof *ref * ((size_t)n_gen + SPEC_MAX_DRAFT + 1));
    got = malloc(sizeof *got * ((size_t)n_gen + SPEC_MAX_DRAFT + 1));
    t_plain = malloc(sizeof *t_plain * (size_t)reps);
    t_spec = malloc(sizeof *t_spec * (size_t)reps);
    ratio = malloc(sizeof *ratio * (size_t)reps);
    if (!prompt || !ref || !got || !t_plain || !t_spec || !ratio) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    if (kite_tokenize(model, text, len, true, prompt, len + 8, &n_prompt) != KITE_OK) goto err;
    if (n_prompt == 0) {
        fprintf(stderr, "kite %s: empty prompt\n", CMD);
        goto done;
    }
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)n_prompt + n_gen + SPEC_MAX_DRAFT + 2;
    if (mi->n_ctx_train > 0 && cp.n_ctx > mi->n_ctx_train) {
        fprintf(stderr, "kite %s: prompt (%zu tokens) + -n %d exceed the model's context %d\n", CMD, n_prompt, n_gen,
                mi->n_ctx_train);
        goto done;
    }
    cp.n_threads = (int32_t)o->threads;
    if (kite_ctx_new(model, &cp, &ctx) != KITE_OK) goto err;
    spec_params sp = spec_default_params();
    if (o->draft_max) sp.draft_max = (int32_t)o->draft_max;
    if ((rc = drafter_params(o, mi, &sp, &draft, &skip)) != KITE_OK) {
        fprintf(stderr, "kite %s: --spec %s %s: %s\n", CMD, o->drafter, o->drafter_arg, kite_last_error());
        if (rc == KITE_E_ARG) status = 2; /* a bad drafter argument is a usage error */
        goto done;
    }
    kite_sampler_params smp = kite_sampler_default_params();
    smp.temperature = 0.0f;
    smp.repeat_penalty = 1.0f;
    smp.frequency_penalty = 0.0f;
    smp.presence_penalty = 0.0f;
    smp.penalty_last_n = 0;
    const double load0 = load_avg();
    /* warm-up: a short plain run */
    double warm;
    if (plain_decode(ctx, prompt, (int32_t)n_prompt, n_gen < 4 ? n_gen : 4, mi->n_vocab, ref, &warm) != KITE_OK)
        goto err;
    spec_stats st = {0};
    bool same = true;
    for (int32_t r = 0; r < reps; r++) {
        if (plain_decode(ctx, prompt, (int32_t)n_prompt, n_gen, mi->n_vocab, ref, &t_plain[r]) != KITE_OK) goto err;
        if (kite_ctx_truncate(ctx, 0) != KITE_OK) goto err;
        if (spec_new(ctx, &smp, &sp, &sd) != KITE_OK || spec_begin(sd, prompt, (int32_t)n_prompt) != KITE_OK) goto err;
        int32_t n = 0;
        double t0 = time_now_s();
        while (n < n_gen) {
            int32_t k = 0;
            if ((rc = spec_step(sd, n_gen - n, got + n, &k)) != KITE_OK) break;
            n += k;
        }
        t_spec[r] = time_now_s() - t0;
        if (rc != KITE_OK) goto err;
        st = *spec_get_stats(sd);
        spec_free(sd);
        sd = NULL;
        if (kite_ctx_truncate(ctx, 0) != KITE_OK) goto err;
        if (memcmp(ref, got, sizeof *ref * (size_t)n_gen) != 0) same = false;
        ratio[r] = t_spec[r] > 0 ? t_plain[r] / t_spec[r] : 0.0;
    }
    const double load1 = load_avg();
    printf("spec: %s, drafter %s %s, prompt %zu tokens%s, %d generated, threads %d, %d repetitions, load average "
           "%.2f -> %.2f\n",
           base_name(o->model), o->drafter, o->drafter_arg, n_prompt,
           o->prompt_file ? " (file)" : o->prompt ? " (--prompt)" : " (built-in copy task)", n_gen,
           kite_ctx_n_threads(ctx), reps, load0, load1);
    const double mp = cli_median(t_plain, reps), ms = cli_median(t_spec, reps), mr = cli_median(ratio, reps);
    printf("| %-12s | %10s | %10s |\n", "decoding", "tok/s", "ms");
    printf("|--------------|-----------:|-----------:|\n");
    printf("| %-12s | %10.2f | %10.1f |\n", "plain", mp > 0 ? n_gen / mp : 0.0, 1e3 * mp);
    printf("| %-12s | %10.2f | %10.1f |\n", "speculative", ms > 0 ? n_gen / ms : 0.0, 1e3 * ms);
    printf("speedup %.2fx (median of per-repetition ratios, min-max %.2f-%.2f); acceptance %.1f%% (%" PRId64
           "/%" PRId64 " drafted), %.2f tokens/pass over %" PRId64 " passes; output %s plain greedy decoding\n",
           mr, ratio[0], ratio[reps - 1], st.n_drafted ? 100.0 * (double)st.n_accepted / (double)st.n_drafted : 0.0,
           st.n_accepted, st.n_drafted, st.n_steps ? (double)st.n_generated / (double)st.n_steps : 0.0, st.n_steps,
           same ? "identical to" : "DIFFERS from");
    fflush(stdout);
    status = same ? 0 : 1;
    goto done;
err:
    fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
done:
    spec_free(sd);
    kite_ctx_free(ctx);
    kite_model_free(draft);
    free(skip);
    free(text_buf);
    free(prompt);
    free(ref);
    free(got);
    free(t_plain);
    free(t_spec);
    free(ratio);
    return status;
}

int bench_spec(int argc, char **argv) {
    spec_bench_opts o = {0};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = ncpu > 0 ? ncpu : 1;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.model) o.model = cli_default_model(argv[0]);
    kite_model *model = NULL;
    kite_model_params mp = config_model_params();
    if (kite_model_load(o.model, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    kite_model_info mi;
    kite_model_get_info(model, &mi);
    int status;
    if (mi.vocab_only) {
        fprintf(stderr, "kite %s: %s: a vocab-only model has no weights to benchmark\n", CMD, o.model);
        status = 1;
    } else {
        status = o.verify ? run_verify(&o, model, &mi) : run_spec(&o, model, &mi);
    }
    kite_model_free(model);
    return status;
}
