/*
 * batch.c - `kite batch -m MODEL -f prompts.jsonl -o out.jsonl`: many prompts
 * through the serving engine (src/engine), B sequences in flight, so that every
 * forward pass - and with --mem-budget every streamed layer read - serves up
 * to B sequences (issue 27 item 4, throughput mode; docs/offload.md).
 *
 * Input: one JSON object per line, {"prompt": "...", "max_tokens": N, "id": X}
 * ("prompt" required; "max_tokens" overrides -n; "id", any JSON value, is
 * copied to the output line); blank lines are skipped.  Output: one line per
 * prompt in input order, {"index", "id", "text", "ids", "n_prompt", "n_gen",
 * "finish_reason"}.  The engine's greedy output equals plain decoding
 * (docs/engine.md), so at --temp 0 (the default here) each line's ids are
 * `kite run --temp 0`'s for that prompt.
 *
 * The output is written to OUT.tmp.<pid>.<n> and renamed over OUT only when
 * every prompt succeeded: a bad line, a failed request, a write error or an
 * interrupt (core/tmpfile.h) leaves no partial OUT.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "core/tmpfile.h"
#include "model/offload.h"
#include "roofline/roofline.h"
#include "engine/engine.h"
#include "kite.h"
#include "progress/progress.h"

typedef struct batch_opts {
    const char *model, *in, *out;
    const char *block;   /* "auto" or a count */
    int64_t n_predict, n_ctx, n_threads;
    uint64_t mem_budget;
    uint64_t seed;
    float temp;
    bool ignore_eos, quiet;
} batch_opts;

static const cli_opt batch_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(batch_opts, model),
     .def_doc = "the bundled model"},
    {.names = "-f, --file", .arg = "JSONL", .help = "prompts, one JSON object a line: {\"prompt\": ..., "
                                                   "\"max_tokens\": N, \"id\": X}",
     .kind = CLI_STR, CLI_AT(batch_opts, in)},
    {.names = "-o, --output", .arg = "JSONL", .help = "results, one line per prompt in input order (written whole or\n"
                                                     "not at all)",
     .kind = CLI_STR, CLI_AT(batch_opts, out)},
    {.names = "-n, --n-predict", .arg = "N", .help = "tokens to generate per prompt", .kind = CLI_INT,
     CLI_AT(batch_opts, n_predict), .min = 1, .max = 1 << 24, .def = "128"},
    {.names = "-B, --block", .arg = "B|auto", .help = "sequences in flight (each pass serves up to B, at most 1024);\n"
                                                     "auto: the cost model's choice, printed with its prediction",
     .kind = CLI_STR, CLI_AT(batch_opts, block), .def = "auto"},
    {.names = "-c, --ctx-size", .arg = "N", .help = "positions per sequence (prompt + output)", .kind = CLI_INT,
     CLI_AT(batch_opts, n_ctx), .min = 1, .max = 1 << 24, .def_doc = "the model's, capped at 4096"},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads", .kind = CLI_INT, CLI_AT(batch_opts, n_threads),
     .min = 1, .max = 1024, .def_doc = "all CPUs"},
    {.names = "--temp", .arg = "T", .help = "temperature; 0 = greedy", .kind = CLI_FLOAT, CLI_AT(batch_opts, temp),
     .fmin = 0.0f, .fmax = 100.0f, .def = "0"},
    {.names = "-s, --seed", .arg = "S", .help = "random seed of every request (with --temp > 0)", .kind = CLI_U64,
     CLI_AT(batch_opts, seed), .def = "1"},
    {.names = "--ignore-eos", .help = "keep generating after end-of-generation tokens", .kind = CLI_FLAG,
     CLI_AT(batch_opts, ignore_eos)},
    CLI_OPT_MEM_BUDGET(batch_opts, mem_budget),
    CLI_OPT_F16_COMPUTE,
    {.names = "-q, --quiet", .help = "no progress or policy output", .kind = CLI_FLAG, CLI_AT(batch_opts, quiet)},
};

const cli_spec cli_spec_batch = {
    .cmd = "batch",
    .usage = "usage: kite batch -m MODEL -f PROMPTS.jsonl -o OUT.jsonl [-n N] [-B B|auto] [--mem-budget SIZE]\n"
             "\n"
             "Generates for many prompts at once, B sequences per forward pass (throughput mode).\n",
    CLI_TABLE(batch_opts_table, batch_opts),
};

typedef struct job {
    int line;            /* 1-based line of the input */
    char *id_json;       /* the "id" value printed, or NULL */
    kite_token *prompt;
    int32_t n_prompt, max_tokens;
    cli_text text;       /* generated text */
    kite_token *ids;
    int32_t n_ids, ids_cap;
    const char *finish;  /* static string from the engine ("stop", "length", ...) */
    int status;          /* KITE_OK, or the request's error */
    char *message;
} job;

typedef struct batch_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t remaining, done;
    bool oom;
} batch_state;

typedef struct job_ref {
    batch_state *bs;
    job *j;
} job_ref;

static bool append(job *j, const char *s, size_t n, const kite_token *t, int32_t nt) {
    if (!cli_text_append(&j->text, s, n)) return false;
    if (j->n_ids + nt > j->ids_cap) {
        int32_t cap = (j->ids_cap ? j->ids_cap * 2 : 64) + nt;
        kite_token *p = realloc(j->ids, sizeof *p * (size_t)cap);
        if (!p) return false;
        j->ids = p;
        j->ids_cap = cap;
    }
    memcpy(j->ids + j->n_ids, t, sizeof *t * (size_t)nt);
    j->n_ids += nt;
    return true;
}

static void on_event(void *user, const engine_event *ev) {
    job_ref *r = user;
    job *j = r->j;
    batch_state *bs = r->bs;
    bool end = false;
    pthread_mutex_lock(&bs->mu);
    if (ev->kind == ENGINE_EV_TEXT) {
        if (!append(j, ev->text, ev->len, ev->tokens, ev->n_tokens)) bs->oom = true;
    } else if (ev->kind == ENGINE_EV_DONE) {
        j->finish = ev->finish_reason;
        end = true;
    } else {
        j->status = ev->status ? ev->status : KITE_E_STATE;
        j->message = strdup(ev->message ? ev->message : "request failed");
        end = true;
    }
    if (end) {
        bs->remaining--;
        bs->done++;
        pthread_cond_broadcast(&bs->cv);
    }
    pthread_mutex_unlock(&bs->mu);
}

/* Reads and tokenizes the prompt lines; returns the job count or -1 after printing the error. */
static int read_jobs(const batch_opts *o, kite_model *m, job **out) {
    FILE *f = fopen(o->in, "rb");
    if (!f) {
        fprintf(stderr, "kite batch: cannot open '%s': %s\n", o->in, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t n;
    int n_jobs = 0, cap = 0, ln = 0;
    job *jobs = NULL;
    int rc = 0;
    while ((n = getline(&line, &lcap, f)) >= 0) {
        ln++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = 0;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) continue;
        cJSON *js = cJSON_ParseWithLength(line, (size_t)n);
        const cJSON *pr = js ? cJSON_GetObjectItemCaseSensitive(js, "prompt") : NULL;
        const cJSON *mt = js ? cJSON_GetObjectItemCaseSensitive(js, "max_tokens") : NULL;
        const cJSON *id = js ? cJSON_GetObjectItemCaseSensitive(js, "id") : NULL;
        const char *err = NULL;
        if (!js || !cJSON_IsObject(js)) err = "not a JSON object";
        else if (!cJSON_IsString(pr)) err = "\"prompt\" (a string) is missing";
        else if (mt && (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > (1 << 24) ||
                        mt->valuedouble != (double)(int32_t)mt->valuedouble))
            err = "\"max_tokens\" must be an integer in [1, 16777216]";
        if (!err && n_jobs == cap) {
            cap = cap ? 2 * cap : 64;
            job *q = realloc(jobs, sizeof *q * (size_t)cap);
            if (!q) err = "out of memory";
            else jobs = q;
        }
        if (err) {
            fprintf(stderr, "kite batch: %s:%d: %s\n", o->in, ln, err);
            cJSON_Delete(js);
            rc = -1;
            break;
        }
        job *j = &jobs[n_jobs++];
        memset(j, 0, sizeof *j);
        j->line = ln;
        j->max_tokens = mt ? (int32_t)mt->valuedouble : (int32_t)o->n_predict;
        j->id_json = id ? cJSON_PrintUnformatted(id) : NULL;
        const size_t plen = strlen(pr->valuestring);
        size_t nt = 0;
        j->prompt = malloc(sizeof *j->prompt * (plen + 8));
        if (!j->prompt ||
            cli_tokenize_text(m, pr->valuestring, plen, true, true, j->prompt, plen + 8, &nt) != KITE_OK) {
            fprintf(stderr, "kite batch: %s:%d: %s\n", o->in, ln, j->prompt ? kite_last_error() : "out of memory");
            cJSON_Delete(js);
            rc = -1;
            break;
        }
        j->n_prompt = (int32_t)nt;
        cJSON_Delete(js);
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "kite batch: reading '%s' failed: %s\n", o->in, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (!rc && n_jobs == 0) {
        fprintf(stderr, "kite batch: %s holds no prompts\n", o->in);
        rc = -1;
    }
    *out = jobs;
    return rc ? -1 - n_jobs : n_jobs; /* on error: -1 - the jobs to free */
}

static void free_jobs(job *jobs, int n) {
    for (int i = 0; i < n; i++) {
        free(jobs[i].id_json);
        free(jobs[i].prompt);
        free(jobs[i].text.p);
        free(jobs[i].ids);
        free(jobs[i].message);
    }
    free(jobs);
}

/* Writes every job's line to OUT through a temporary file; 0 or 1 (message printed). */
static int write_out(const char *out, const job *jobs, int n) {
    char tmp[TMPF_PATH_MAX];
    if (tmpf_name(tmp, sizeof tmp, out, "tmp")) {
        fprintf(stderr, "kite batch: output path '%s' is too long\n", out);
        return 1;
    }
    const int slot = tmpf_register(tmp);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "kite batch: cannot create '%s': %s\n", tmp, strerror(errno));
        tmpf_unregister(slot);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const job *j = &jobs[i];
        fprintf(f, "{\"index\": %d, \"id\": %s, \"text\": ", i, j->id_json ? j->id_json : "null");
        cli_json_string(f, j->text.p ? j->text.p : "", j->text.len);
        fprintf(f, ", \"ids\": ");
        cli_json_ids(f, j->ids, (size_t)j->n_ids);
        fprintf(f, ", \"n_prompt\": %d, \"n_gen\": %d, \"finish_reason\": \"%s\"}\n", j->n_prompt, j->n_ids,
                j->finish ? j->finish : "");
    }
    const bool ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    const int e = errno;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "kite batch: writing '%s' failed: %s\n", tmp, strerror(ok ? errno : e));
        unlink(tmp);
        tmpf_unregister(slot);
        return 1;
    }
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "kite batch: cannot rename '%s' to '%s': %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        tmpf_unregister(slot);
        return 1;
    }
    tmpf_unregister(slot);
    return 0;
}

#define MAX_BLOCK 1024

/* The block size -B auto gives: the cost model's choice for these prompts (roofline/batch.c: the roofline
 * profile of this machine, probed once and cached, and with a budget the disk probe and the bytes each
 * pass streams), printed with its prediction.  Returns 0 after printing an error. */
static int64_t choose_block(const batch_opts *o, const kite_model_info *mi, const job *jobs, int n_jobs, int32_t n_ctx) {
    rl_shape sh;
    if (rl_shape_from_file(o->model, &sh) != KITE_OK) {
        fprintf(stderr, "kite batch: -B auto: %s (give -B N)\n", kite_last_error());
        return 0;
    }
    long nt = o->n_threads;
    if (nt < 1) nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    rl_hw hw;
    bool measured = false;
    char path[512];
    const config *cf = config_get();
    if (!o->quiet) fprintf(stderr, "kite batch: -B auto: this machine's roofline profile (probed once, then cached)\n");
    if (rl_hw_probe((int)nt, false, config_roofline_path((int)nt, path, sizeof path) ? path : NULL,
                    cf->have_probe_path ? cf->probe_path : NULL, &hw, &measured) != KITE_OK) {
        fprintf(stderr, "kite batch: -B auto: %s (give -B N)\n", kite_last_error());
        return 0;
    }
    rl_batch_in in = {.n_seq = n_jobs, .stream_bytes = (double)mi->stream_bytes};
    int64_t sp = 0, sg = 0;
    for (int i = 0; i < n_jobs; i++) {
        sp += jobs[i].n_prompt;
        sg += jobs[i].max_tokens;
    }
    in.prompt = (sp + n_jobs - 1) / n_jobs;
    in.gen = (sg + n_jobs - 1) / n_jobs;
    bool direct = false;
    if (in.stream_bytes > 0 && (offload_probe_disk(o->model, 256u << 20, &in.disk_gbs, &direct) != KITE_OK ||
                                !(in.disk_gbs > 0))) {
        fprintf(stderr, "kite batch: -B auto: the disk probe of %s failed: %s (give -B N)\n", o->model,
                kite_last_error());
        return 0;
    }
    /* activations and KV as the engine runs them: int8 activations for the int8-kernel types, f32 KV */
    const rl_setting base = {.atype = sh.wtype == KITE_DTYPE_F16 || sh.wtype == KITE_DTYPE_BF16 || sh.wtype == KITE_DTYPE_F32
                                          ? RL_A_F32
                                          : RL_A_INT8,
                             .kvtype = KITE_DTYPE_F32};
    /* the engine's KV pool holds B sequences of n_ctx positions (f32 K and V of every layer): at most its
     * 2^20 positions, and at most half this machine's memory */
    const double pos_bytes = 2.0 * (double)sh.n_layer * (double)sh.n_head_kv * (double)sh.head_dim * 4.0;
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    int64_t max_block = MAX_BLOCK;
    if ((int64_t)(1 << 20) / n_ctx < max_block) max_block = (int64_t)(1 << 20) / n_ctx;
    if (ram > 0 && ram / 2 / ((double)n_ctx * pos_bytes) < (double)max_block)
        max_block = (int64_t)(ram / 2 / ((double)n_ctx * pos_bytes));
    if (max_block < 1) max_block = 1;
    rl_batch_out best;
    if (rl_batch_choose(&sh, &hw, &base, &in, max_block, &best) != KITE_OK) {
        fprintf(stderr, "kite batch: -B auto: %s (give -B N)\n", kite_last_error());
        return 0;
    }
    char disk[160] = "";
    if (in.stream_bytes > 0)
        snprintf(disk, sizeof disk, ", %d of %d layers resident, %.1f MB streamed per pass at %.2f GB/s (%s probe)",
                 mi->n_resident_layers, mi->n_layer, in.stream_bytes / 1e6, in.disk_gbs, direct ? "O_DIRECT" : "buffered");
    if (!o->quiet)
        fprintf(stderr,
            "kite batch: policy B = %lld (cost model; -B N overrides): %lld prompts of ~%lld tokens, %lld generated "
            "each%s; predicted %.1f tok/s, decode %s-bound (step %.1f ms, prefill %.2f s per wave, %lld wave%s), "
            "KV pool %.1f MB\n",
            (long long)best.block, (long long)in.n_seq, (long long)in.prompt, (long long)in.gen, disk, best.tok_s,
            best.disk_bound ? "disk" : "compute", best.t_step * 1e3, best.t_prefill, (long long)best.waves,
            best.waves == 1 ? "" : "s",
            (double)best.block * (double)n_ctx * pos_bytes / 1e6);
    return best.block;
}

int cmd_batch(int argc, char **argv) {
    batch_opts o = {0};
    const int prc = cli_parse(&cli_spec_batch, argc, argv, &o);
    if (prc >= 0) return prc;
    if (!o.in) return cli_usage_error("batch", "missing -f PROMPTS.jsonl");
    if (!o.out) return cli_usage_error("batch", "missing -o OUT.jsonl");
    if (!o.model) o.model = cli_default_model(argv[0]);
    if (o.quiet) progress_set_quiet(true);
    int64_t fixed_block = 0; /* -B N; 0: auto */
    if (strcmp(o.block, "auto") != 0) {
        char *end;
        errno = 0;
        const long long b = strtoll(o.block, &end, 10);
        if (errno || *end || end == o.block || b < 1 || b > MAX_BLOCK)
            return cli_usage_error("batch", "-B: '%s' is not auto or a count in [1, %d]", o.block, MAX_BLOCK);
        fixed_block = b;
    }
    tmpf_install_signal_handlers(); /* an interrupt leaves no partial output */

    int status = 1, n_jobs = 0;
    job *jobs = NULL;
    job_ref *refs = NULL;
    engine *e = NULL;
    kite_model *model = NULL;
    batch_state bs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    kite_model_params mp = config_model_params();
    mp.mem_budget = o.mem_budget;
    const double t0 = time_now_s();
    if (kite_model_load(o.model, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite batch: %s\n", kite_last_error());
        goto done;
    }
    kite_model_info mi;
    kite_model_get_info(model, &mi);
    n_jobs = read_jobs(&o, model, &jobs);
    if (n_jobs < 0) {
        n_jobs = -1 - n_jobs;
        goto done;
    }
    engine_params ep = {0};
    ep.n_ctx = o.n_ctx ? (int32_t)o.n_ctx : (mi.n_ctx_train < 4096 ? mi.n_ctx_train : 4096);
    if (!o.n_ctx) { /* no -c: as many positions as the longest prompt and its output take, so that the KV
                       pool (B sequences of n_ctx positions) holds no more than the prompts need */
        int64_t need = 1;
        for (int i = 0; i < n_jobs; i++)
            if ((int64_t)jobs[i].n_prompt + jobs[i].max_tokens > need) need = (int64_t)jobs[i].n_prompt + jobs[i].max_tokens;
        if (need < ep.n_ctx) ep.n_ctx = (int32_t)need;
    }
    const int64_t block = fixed_block ? fixed_block : choose_block(&o, &mi, jobs, n_jobs, ep.n_ctx);
    if (block < 1) goto done;
    ep.n_parallel = (int32_t)block;
    ep.n_threads = (int32_t)o.n_threads;
    for (int i = 0; i < n_jobs; i++)
        if (jobs[i].n_prompt >= ep.n_ctx) {
            fprintf(stderr, "kite batch: %s:%d: the prompt has %d tokens but a sequence holds only %d (raise -c)\n",
                    o.in, jobs[i].line, jobs[i].n_prompt, ep.n_ctx);
            goto done;
        }
    if (engine_new(model, &ep, &e) != KITE_OK || !(refs = calloc((size_t)n_jobs, sizeof *refs))) {
        fprintf(stderr, "kite batch: %s\n", e ? "out of memory" : kite_last_error());
        goto done;
    }
    const double t_load = time_now_s() - t0, t1 = time_now_s();
    bs.remaining = n_jobs;
    for (int i = 0; i < n_jobs; i++) {
        refs[i] = (job_ref){.bs = &bs, .j = &jobs[i]};
        engine_req q = {.prompt = jobs[i].prompt, .n_prompt = jobs[i].n_prompt, .max_tokens = jobs[i].max_tokens,
                        .ignore_eos = o.ignore_eos};
        q.sampling = kite_sampler_default_params();
        q.sampling.temperature = o.temp;
        q.sampling.seed = o.seed;
        if (engine_submit(e, &q, on_event, &refs[i], NULL) != KITE_OK) {
            fprintf(stderr, "kite batch: %s:%d: %s\n", o.in, jobs[i].line, kite_last_error());
            pthread_mutex_lock(&bs.mu);
            bs.remaining -= n_jobs - i; /* the rest is never submitted */
            pthread_mutex_unlock(&bs.mu);
            break;
        }
    }
    progress pg;
    progress_begin(&pg, "kite batch", PROGRESS_ITEMS, "prompts");
    pthread_mutex_lock(&bs.mu);
    while (bs.remaining > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&bs.cv, &bs.mu, &ts);
        const int32_t d = bs.done;
        pthread_mutex_unlock(&bs.mu);
        progress_update(&pg, (uint64_t)d, (uint64_t)n_jobs);
        pthread_mutex_lock(&bs.mu);
    }
    pthread_mutex_unlock(&bs.mu);
    progress_end(&pg);
    engine_stats st;
    engine_get_stats(e, &st);
    engine_free(e);
    e = NULL;
    const double t_gen = time_now_s() - t1;
    if (bs.oom) {
        fprintf(stderr, "kite batch: out of memory collecting the outputs\n");
        goto done;
    }
    for (int i = 0; i < n_jobs; i++)
        if (jobs[i].status != KITE_OK || !jobs[i].finish) {
            fprintf(stderr, "kite batch: %s:%d: %s\n", o.in, jobs[i].line,
                    jobs[i].message ? jobs[i].message : "the request was not run");
            goto done;
        }
    if (write_out(o.out, jobs, n_jobs)) goto done;
    fprintf(stderr,
            "kite batch: %d prompts, %lld tokens in, %lld generated in %.2f s (%.1f tok/s), %lld passes, up to %lld "
            "in flight | load %.0f ms, weights %s\n",
            n_jobs, (long long)st.tokens_in, (long long)st.tokens_out, t_gen,
            t_gen > 0 ? (double)st.tokens_out / t_gen : 0.0, (long long)st.steps, (long long)block,
            t_load * 1e3, mi.residency);
    status = 0;
done:
    engine_free(e);
    free(refs);
    free_jobs(jobs, n_jobs);
    kite_model_free(model);
    return status;
}
