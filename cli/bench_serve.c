/*
 * bench_serve.c - `kite bench --parallel LIST`: aggregate generation
 * throughput of the serving engine (src/engine) at several concurrency
 * levels, against the same requests served one at a time, and KV memory
 * waste under load (issue 5; docs/engine.md).
 *
 *   kite bench --parallel 1,4,16,32 [-m FILE] [-p 64] [-n 64] [-t THREADS]
 *              [--seq 4] [--block 2] [--step 512] [--seed 1] [--json]
 *
 * For each level C: C requests (BOS + P random token ids, N generated tokens,
 * greedy, EOS ignored so every request generates exactly N) are submitted at
 * once to an engine with n_parallel C and a pool of C * (P + N) positions;
 * the wall time from the first submit to the last DONE gives the aggregate
 * tok/s (generated tokens only; prefill time is included in the wall time).
 * The baseline serves the first min(C, --seq) of the same requests one at a
 * time on an engine with n_parallel 1 (the one-at-a-time rate does not
 * depend on C; --seq bounds the cost of measuring it).  Speedup = aggregate
 * / one-at-a-time; "speedup per CPU-s" is the same ratio of tokens per
 * second of process CPU time (getrusage), which other load on a shared
 * machine disturbs much less than wall time.  KV waste = (allocated - used) / allocated token slots of
 * the blocks held by running sequences, sampled every ~2 ms during the
 * batched run: the slot-weighted mean over the samples and the maximum.
 * The prefix cache is off (random prompts share nothing, and the baseline
 * must not reuse the batched run's blocks).
 *
 * With --lookup N [--draft-max K] [--reps R] the table compares, per level,
 * the same batched run without and with speculative decoding by prompt
 * lookup (engine_params.spec_lookup_n), alternating the two R times (default
 * 3) in this process and reporting medians: tok/s (wall and per CPU-s), the
 * acceptance rate (accepted / drafted tokens) and the tokens each
 * verification pass yields ((accepted + passes) / passes).  Random prompts
 * give lookup little to copy; --prompt TEXT makes every request BOS + TEXT
 * (e.g. a passage followed by its first words again).  --draft-model FILE
 * (a model with the same vocabulary drafts) and --draft-skip-layers LIST
 * (the model itself with those layers skipped drafts) make the same
 * comparison with a model drafter (engine_params.spec_draft_model /
 * spec_skip_layers); their JSON lines say "test": "serve_spec", name the
 * drafter, use "spec" where --lookup's say "lookup" and add the seconds
 * spent drafting ("draft_s").  --lookahead W,N,G does the same with
 * lookahead drafting (engine_params.spec_la_window; "drafter": "lookahead").
 */
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "kite.h"
#include "engine/engine.h"
#include "spec/spec.h"

#define CMD "bench"
#define MAX_LEVELS 16

typedef struct serve_opts {
    const char *model;
    int32_t levels[MAX_LEVELS];
    int n_levels;
    int32_t n_prompt, n_gen, n_threads, n_seq, block, step;
    uint64_t seed;
    bool json;
    int32_t lookup, draft_max, reps; /* --lookup N (0: no speculation), --draft-max K, --reps R */
    const char *prompt_text;         /* --prompt TEXT, or NULL for random ids */
    const char *draft_path;          /* --draft-model FILE, or NULL */
    const char *skip_list;           /* --draft-skip-layers LIST, or NULL */
    const char *la_spec;             /* --lookahead W,N,G, or NULL */
    int32_t la_w, la_n, la_g;        /* its parsed values (la_w 0: off) */
    kite_model *draft;               /* the loaded --draft-model */
    bool *skip;                      /* [n_skip] parsed --draft-skip-layers */
    int32_t n_skip;
} serve_opts;

/* Completion counter shared by the requests of one run. */
typedef struct run_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t remaining;
    int64_t tokens;
    int32_t errors;
} run_state;

static void on_event(void *user, const engine_event *ev) {
    run_state *rs = user;
    pthread_mutex_lock(&rs->mu);
    if (ev->kind == ENGINE_EV_TEXT) {
        rs->tokens += ev->n_tokens;
    } else {
        if (ev->kind == ENGINE_EV_ERROR) rs->errors++;
        rs->remaining--;
        pthread_cond_broadcast(&rs->cv);
    }
    pthread_mutex_unlock(&rs->mu);
}

typedef struct run_result {
    double seconds;
    double cpu_s;                 /* process CPU time (user + system) over the run */
    int64_t tokens;
    double waste_mean, waste_max; /* fractions */
    int64_t steps, preemptions;
    int64_t drafted, accepted, passes; /* speculative decoding counters over the run */
    double draft_s;               /* model drafters: seconds in draft forward passes */
    int32_t errors;
} run_result;

static double cpu_now_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* Submits n requests at once and waits for all of them, sampling the KV
 * statistics meanwhile. */
static int run_batch(engine *e, kite_token *const *prompts, int32_t n, const serve_opts *o, run_result *res) {
    run_state rs = {.remaining = n};
    pthread_mutex_init(&rs.mu, NULL);
    pthread_cond_init(&rs.cv, NULL);
    engine_stats st0, st;
    engine_get_stats(e, &st0);
    const double t0 = time_now_s(), c0 = cpu_now_s();
    int rc = KITE_OK;
    for (int32_t i = 0; i < n && rc == KITE_OK; i++) {
        engine_req q = {.prompt = prompts[i], .n_prompt = o->n_prompt, .max_tokens = o->n_gen, .ignore_eos = true};
        q.sampling = kite_sampler_default_params();
        q.sampling.temperature = 0;
        rc = engine_submit(e, &q, on_event, &rs, NULL);
        if (rc != KITE_OK) {
            pthread_mutex_lock(&rs.mu);
            rs.remaining -= n - i; /* the rest is never submitted */
            pthread_mutex_unlock(&rs.mu);
        }
    }
    double alloc_sum = 0, waste_sum = 0, waste_max = 0;
    for (;;) {
        pthread_mutex_lock(&rs.mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (rs.remaining > 0) pthread_cond_timedwait(&rs.cv, &rs.mu, &ts);
        const bool done = rs.remaining <= 0;
        pthread_mutex_unlock(&rs.mu);
        if (done) break;
        engine_get_stats(e, &st);
        if (st.kv_slots_allocated > 0) {
            const double w = (double)(st.kv_slots_allocated - st.kv_slots_used);
            alloc_sum += (double)st.kv_slots_allocated;
            waste_sum += w;
            if (w / (double)st.kv_slots_allocated > waste_max) waste_max = w / (double)st.kv_slots_allocated;
        }
    }
    res->seconds = time_now_s() - t0;
    res->cpu_s = cpu_now_s() - c0;
    /* stats are published after the step that finished the last request */
    for (int i = 0; i < 1000; i++) {
        engine_get_stats(e, &st);
        if (st.requests_done - st0.requests_done >= n) break;
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
        nanosleep(&ms, NULL);
    }
    res->tokens = rs.tokens;
    res->errors = rs.errors;
    res->waste_mean = alloc_sum > 0 ? waste_sum / alloc_sum : 0;
    res->waste_max = waste_max;
    res->steps = st.steps - st0.steps;
    res->preemptions = st.preemptions - st0.preemptions;
    res->drafted = st.spec_drafted - st0.spec_drafted;
    res->accepted = st.spec_accepted - st0.spec_accepted;
    res->passes = st.spec_verify_passes - st0.spec_verify_passes;
    res->draft_s = st.spec_draft_s - st0.spec_draft_s;
    pthread_cond_destroy(&rs.cv);
    pthread_mutex_destroy(&rs.mu);
    return rc;
}

/* spec: with the drafter the options name (lookup, draft model or skipped layers). */
static engine *new_engine(kite_model *m, const serve_opts *o, int32_t n_parallel, bool spec) {
    engine_params p = engine_default_params();
    p.n_parallel = n_parallel;
    p.n_ctx = o->n_prompt + o->n_gen;
    p.block_size = o->block;
    p.step_tokens = o->step;
    p.n_threads = o->n_threads;
    p.no_prefix_cache = true;
    p.spec_draft_max = o->draft_max;
    if (spec) {
        p.spec_lookup_n = o->lookup;
        p.spec_draft_model = o->draft;
        p.spec_skip_layers = o->skip;
        p.n_spec_skip = o->skip ? o->n_skip : 0;
        p.spec_la_window = o->la_w;
        p.spec_la_ngram = o->la_n;
        p.spec_la_pool = o->la_g;
    }
    engine *e = NULL;
    if (engine_new(m, &p, &e) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return NULL;
    }
    return e;
}

static const cli_opt bench_serve_opts_table[] = {
    {.names = "--parallel", .arg = "LIST", .help = "concurrency levels, e.g. 1,4,16,32", .kind = CLI_LIST,
     CLI_AT(serve_opts, levels), CLI_COUNT(serve_opts, n_levels), .min = 1, .max = 1024},
    {.names = "-m, --model", .arg = "F", .help = "model", .kind = CLI_STR, CLI_AT(serve_opts, model),
     .def_doc = "the bundled stories260K"},
    {.names = "-p, --n-prompt", .arg = "N", .help = "prompt tokens per request", .kind = CLI_INT,
     CLI_AT(serve_opts, n_prompt), .min = 1, .max = 100000, .def = "64"},
    {.names = "-n, --n-gen", .arg = "N", .help = "generated tokens per request", .kind = CLI_INT,
     CLI_AT(serve_opts, n_gen), .min = 1, .max = 100000, .def = "64"},
    {.names = "-t, --threads", .arg = "N", .help = "engine threads", .kind = CLI_INT, CLI_AT(serve_opts, n_threads),
     .min = 1, .max = 1024, .def_doc = "all online CPUs"},
    {.names = "--seq", .arg = "N", .help = "requests served one at a time for the baseline", .kind = CLI_INT,
     CLI_AT(serve_opts, n_seq), .min = 1, .max = 1024, .def = "4"},
    {.names = "--block", .arg = "N", .help = "KV block size in positions", .kind = CLI_INT, CLI_AT(serve_opts, block),
     .min = 1, .max = 4096, .def = "2"},
    {.names = "--step", .arg = "N", .help = "token budget of one engine step", .kind = CLI_INT,
     CLI_AT(serve_opts, step), .min = 1, .max = 65536, .def = "512"},
    {.names = "-s, --seed", .arg = "S", .help = "seed of the random prompts", .kind = CLI_U64, CLI_AT(serve_opts, seed),
     .def = "1"},
    {.names = "--json", .help = "one JSON line per level instead of the table", .kind = CLI_FLAG,
     CLI_AT(serve_opts, json)},
    {.names = "--prompt", .arg = "TEXT", .help = "every request is BOS + TEXT instead of random ids (-p is ignored)",
     .kind = CLI_STR, CLI_AT(serve_opts, prompt_text)},
    {.kind = CLI_SECTION, .help = "Speculative decoding: each level without and with the drafter, medians of -r R\n"
                                  "alternated runs (random prompts give lookup little to copy; see --prompt):"},
    CLI_OPTS_DRAFT(serve_opts, draft_path, skip_list, lookup, la_spec, draft_max),
    {.names = "-r, --repetitions, --reps", .arg = "R",
     .help = "alternated runs (--reps: the older spelling, kept)", .kind = CLI_INT, CLI_AT(serve_opts, reps),
     .min = 1, .max = 100, .def = "3"},
};

const cli_spec cli_spec_bench_serve = {
    .cmd = CMD,
    .usage = "usage: kite bench --parallel LIST [-m FILE] [-p N_PROMPT] [-n N_GEN] [-t THREADS]\n"
             "                  [--seq N] [--block N] [--step N] [-s SEED] [--json]\n"
             "                  [--lookup N | --draft-model F | --draft-skip-layers LIST | --lookahead W,N,G]\n"
             "                  [--draft-max K] [-r R] [--prompt TEXT]\n\n"
             "Serving throughput: for each concurrency C in LIST, C requests (BOS + N_PROMPT random ids,\n"
             "N_GEN greedy tokens, EOS ignored) submitted at once to the serving engine, against the\n"
             "first min(C, --seq) of them served one at a time; and KV-cache waste under load.\n",
    CLI_TABLE(bench_serve_opts_table, serve_opts),
    .unknown = "unknown argument",
    .unknown_tail = " (with --parallel; see kite bench --parallel 1 -h)",
};

static int parse_args(int argc, char **argv, serve_opts *o) {
    int rc = cli_parse(&cli_spec_bench_serve, argc, argv, o);
    if (rc >= 0) return rc;
    if (o->la_spec) { /* checked by cli_parse */
        spec_params la = spec_default_params();
        spec_parse_lookahead(o->la_spec, &la);
        o->la_w = la.la_window;
        o->la_n = la.la_ngram;
        o->la_g = la.la_pool;
    }
    if ((o->lookup > 0) + (o->draft_path != NULL) + (o->skip_list != NULL) + (o->la_w > 0) > 1)
        return cli_usage_error(CMD, "give at most one of --lookup, --draft-model, --draft-skip-layers and --lookahead");
    return -1;
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            const double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define MAX_REPS 100

/* --lookup / --draft-model / --draft-skip-layers: level c without and with
 * speculation, alternated o->reps times; prints one row (or JSON line) of
 * medians.  Returns 0 or 1. */
static int spec_level(kite_model *m, kite_token *const *prompts, int32_t c, const serve_opts *o) {
    double tps[2][MAX_REPS], cpu[2][MAX_REPS];
    run_result last[2];
    memset(last, 0, sizeof last);
    for (int r = 0; r < o->reps; r++)
        for (int k = 0; k < 2; k++) {
            engine *e = new_engine(m, o, c, k == 1);
            if (!e) return 1;
            run_result res = {0};
            const int rc = run_batch(e, prompts, c, o, &res);
            engine_free(e);
            if (rc != KITE_OK || res.errors) {
                fprintf(stderr, "kite %s: a request failed: %s\n", CMD, kite_last_error());
                return 1;
            }
            tps[k][r] = (double)res.tokens / res.seconds;
            cpu[k][r] = (double)res.tokens / res.cpu_s;
            last[k] = res;
        }
    const double plain = median(tps[0], o->reps), spec = median(tps[1], o->reps);
    const double plain_cpu = median(cpu[0], o->reps), spec_cpu = median(cpu[1], o->reps);
    const run_result *sr = &last[1];
    const double acc = sr->drafted > 0 ? (double)sr->accepted / (double)sr->drafted : 0.0;
    const double per_pass = sr->passes > 0 ? (double)(sr->accepted + sr->passes) / (double)sr->passes : 0.0;
    if (o->json && o->lookup == 0) {
        printf("{\"test\": \"serve_spec\", \"drafter\": \"%s\", \"draft\": \"%s\", \"model\": \"%s\", "
               "\"parallel\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"draft_max\": %d, "
               "\"reps\": %d, \"gen_tokens\": %lld, \"plain_tok_s\": %.2f, \"spec_tok_s\": %.2f, "
               "\"speedup\": %.3f, \"plain_tok_per_cpu_s\": %.2f, \"spec_tok_per_cpu_s\": %.2f, "
               "\"speedup_cpu\": %.3f, \"drafted\": %lld, \"accepted\": %lld, \"acceptance\": %.4f, "
               "\"tokens_per_pass\": %.3f, \"steps_plain\": %lld, \"steps_spec\": %lld, \"draft_s\": %.4f}\n",
               o->draft ? "draft-model" : o->skip ? "skip-layers" : "lookahead",
               o->draft ? o->draft_path : o->skip ? o->skip_list : o->la_spec, o->model, c,
               o->n_prompt, o->n_gen, o->n_threads, o->la_w ? o->la_w : o->draft_max ? o->draft_max : 8, o->reps,
               (long long)sr->tokens,
               plain, spec, spec / plain, plain_cpu, spec_cpu, spec_cpu / plain_cpu, (long long)sr->drafted,
               (long long)sr->accepted, acc, per_pass, (long long)last[0].steps, (long long)sr->steps, sr->draft_s);
    } else if (o->json) {
        printf("{\"test\": \"serve_lookup\", \"model\": \"%s\", \"parallel\": %d, \"n_prompt\": %d, \"n_gen\": %d, "
               "\"threads\": %d, \"lookup\": %d, \"draft_max\": %d, \"reps\": %d, \"gen_tokens\": %lld, "
               "\"plain_tok_s\": %.2f, \"lookup_tok_s\": %.2f, \"speedup\": %.3f, \"plain_tok_per_cpu_s\": %.2f, "
               "\"lookup_tok_per_cpu_s\": %.2f, \"speedup_cpu\": %.3f, \"drafted\": %lld, \"accepted\": %lld, "
               "\"acceptance\": %.4f, \"tokens_per_pass\": %.3f, \"steps_plain\": %lld, \"steps_lookup\": %lld}\n",
               o->model, c, o->n_prompt, o->n_gen, o->n_threads, o->lookup, o->draft_max ? o->draft_max : 8, o->reps,
               (long long)sr->tokens, plain, spec, spec / plain, plain_cpu, spec_cpu, spec_cpu / plain_cpu,
               (long long)sr->drafted, (long long)sr->accepted, acc, per_pass, (long long)last[0].steps,
               (long long)sr->steps);
    } else {
        printf("| %d | %lld | %.1f | %.1f | %.2fx | %.2fx | %.1f%% | %.2f | %lld | %lld |\n", c, (long long)sr->tokens,
               plain, spec, spec / plain, spec_cpu / plain_cpu, 100 * acc, per_pass, (long long)last[0].steps,
               (long long)sr->steps);
    }
    fflush(stdout);
    return 0;
}

int bench_serve(int argc, char **argv) {
    serve_opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.model) o.model = cli_default_model(argv[0]);
    int status = 1;
    int32_t max_c = 0;
    for (int i = 0; i < o.n_levels; i++) max_c = o.levels[i] > max_c ? o.levels[i] : max_c;
    kite_token **prompts = calloc((size_t)max_c, sizeof *prompts);
    kite_model *model = NULL;
    engine *solo = NULL;
    kite_model_params mp = config_model_params();
    if (!prompts || kite_model_load(o.model, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, prompts ? kite_last_error() : "out of memory");
        goto done;
    }
    kite_model_info mi;
    kite_model_get_info(model, &mi);
    const kite_token bos = kite_token_bos(model);
    kite_token *text_toks = NULL;
    if (o.prompt_text) {
        const size_t len = strlen(o.prompt_text), cap = len + 2;
        size_t n = 0;
        text_toks = malloc(cap * sizeof *text_toks);
        if (!text_toks || kite_tokenize(model, o.prompt_text, len, true, text_toks, cap, &n) != KITE_OK || n < 1) {
            fprintf(stderr, "kite %s: --prompt: %s\n", CMD, text_toks ? kite_last_error() : "out of memory");
            free(text_toks);
            goto done;
        }
        o.n_prompt = (int32_t)n;
    }
    uint64_t s = o.seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int32_t i = 0; i < max_c; i++) {
        if (!(prompts[i] = malloc((size_t)o.n_prompt * sizeof **prompts))) goto done;
        for (int32_t j = 0; j < o.n_prompt; j++)
            prompts[i][j] = text_toks ? text_toks[j]
                            : j == 0 && bos >= 0 ? bos : (kite_token)(3 + xorshift(&s) % (uint64_t)(mi.n_vocab - 3));
    }
    free(text_toks);
    text_toks = NULL;
    if (o.draft_path && kite_model_load(o.draft_path, &mp, &o.draft) != KITE_OK) {
        fprintf(stderr, "kite %s: --draft-model: %s\n", CMD, kite_last_error());
        goto done;
    }
    if (o.skip_list) {
        o.n_skip = mi.n_layer;
        if (!(o.skip = calloc((size_t)mi.n_layer, sizeof *o.skip)) ||
            spec_parse_layers(o.skip_list, mi.n_layer, o.skip) != KITE_OK) {
            fprintf(stderr, "kite %s: --draft-skip-layers: %s\n", CMD, o.skip ? kite_last_error() : "out of memory");
            goto done;
        }
    }
    if (o.lookup > 0 || o.draft || o.skip || o.la_w > 0) {
        const char *label = o.lookup > 0 ? "lookup" : "spec";
        if (!o.json) {
            if (o.lookup > 0)
                printf("# kite bench --parallel --lookup %d", o.lookup);
            else
                printf("# kite bench --parallel %s %s",
                       o.draft ? "--draft-model" : o.skip ? "--draft-skip-layers" : "--lookahead",
                       o.draft ? o.draft_path : o.skip ? o.skip_list : o.la_spec);
            printf(": %s, prompt %d, gen %d, draft max %d, medians of %d runs\n", mi.name[0] ? mi.name : o.model,
                   o.n_prompt, o.n_gen, o.la_w ? o.la_w : o.draft_max ? o.draft_max : 8, o.reps);
            printf("| parallel | gen tok | plain tok/s | %s tok/s | speedup | speedup per CPU-s | acceptance | "
                   "tokens/pass | steps plain | steps %s |\n", label, label);
            printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        }
        for (int li = 0; li < o.n_levels; li++)
            if (spec_level(model, prompts, o.levels[li], &o)) goto done;
        status = 0;
        goto done;
    }
    if (!(solo = new_engine(model, &o, 1, false))) goto done;
    if (!o.json) {
        printf("# kite bench --parallel: %s, prompt %d, gen %d, block %d, step %d\n", mi.name[0] ? mi.name : o.model,
               o.n_prompt, o.n_gen, o.block, o.step);
        printf("| parallel | gen tok | wall s | agg tok/s | one-at-a-time tok/s | speedup | speedup per CPU-s | "
               "KV waste mean | KV waste max | steps | preempt |\n");
        printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int li = 0; li < o.n_levels; li++) {
        const int32_t c = o.levels[li];
        engine *e = new_engine(model, &o, c, false);
        if (!e) goto done;
        run_result b = {0}, q = {0};
        int r1 = run_batch(e, prompts, c, &o, &b);
        engine_free(e);
        /* one at a time: each request alone on the n_parallel-1 engine */
        const int32_t n_solo = c < o.n_seq ? c : o.n_seq;
        int r2 = KITE_OK;
        for (int32_t i = 0; i < n_solo && r2 == KITE_OK; i++) {
            run_result one = {0};
            r2 = run_batch(solo, prompts + i, 1, &o, &one);
            q.seconds += one.seconds;
            q.cpu_s += one.cpu_s;
            q.tokens += one.tokens;
            q.errors += one.errors;
        }
        if (r1 != KITE_OK || r2 != KITE_OK || b.errors || q.errors) {
            fprintf(stderr, "kite %s: a request failed: %s\n", CMD, kite_last_error());
            goto done;
        }
        const double agg = (double)b.tokens / b.seconds, one = (double)q.tokens / q.seconds;
        /* per CPU-second: the same comparison, insensitive to other load on the machine */
        const double agg_cpu = (double)b.tokens / b.cpu_s, one_cpu = (double)q.tokens / q.cpu_s;
        if (o.json) {
            printf("{\"test\": \"serve\", \"model\": \"%s\", \"parallel\": %d, \"n_prompt\": %d, \"n_gen\": %d, "
                   "\"threads\": %d, \"block\": %d, \"step\": %d, \"gen_tokens\": %lld, \"wall_s\": %.4f, "
                   "\"agg_tok_s\": %.2f, \"solo_tok_s\": %.2f, \"solo_requests\": %d, \"speedup\": %.3f, "
                   "\"kv_waste_mean\": %.5f, \"kv_waste_max\": %.5f, \"steps\": %lld, \"preemptions\": %lld, "
                   "\"agg_tok_per_cpu_s\": %.2f, \"solo_tok_per_cpu_s\": %.2f, \"speedup_cpu\": %.3f}\n",
                   o.model, c, o.n_prompt, o.n_gen, o.n_threads, o.block, o.step, (long long)b.tokens, b.seconds,
                   agg, one, n_solo, agg / one, b.waste_mean, b.waste_max, (long long)b.steps,
                   (long long)b.preemptions, agg_cpu, one_cpu, agg_cpu / one_cpu);
        } else {
            printf("| %d | %lld | %.2f | %.1f | %.1f | %.2fx | %.2fx | %.2f%% | %.2f%% | %lld | %lld |\n", c,
                   (long long)b.tokens, b.seconds, agg, one, agg / one, agg_cpu / one_cpu, 100 * b.waste_mean,
                   100 * b.waste_max, (long long)b.steps, (long long)b.preemptions);
        }
        fflush(stdout);
    }
    status = 0;
done:
    engine_free(solo);
    kite_model_free(o.draft);
    free(o.skip);
    kite_model_free(model);
    if (prompts)
        for (int32_t i = 0; i < max_c; i++) free(prompts[i]);
    free(prompts);
    return status;
}
