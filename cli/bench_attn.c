/*
 * bench_attn.c - `kite bench -m MODEL --attn-ctx LIST`: split-KV decode
 * attention at long contexts with phi = 0, the model's calibrated unified
 * maxima (kite.attention.unified_max, `kite tune --attn-calib`) and the
 * exact method (ATTN_PHI_EXACT: every chunk against its own maximum).
 *
 * DESIGN
 *   A real prefill of P tokens (the text of -f, cycled, else random ids)
 *   fills the KV cache; positions P.. up to the longest context repeat those
 *   P rows, layer by layer (a row keeps the rotary phase of the position it
 *   was copied from), so that contexts of 16k cost a 512-token prefill.  For
 *   each context N the cache holds N - 1 positions and decode steps run at
 *   position N - 1 (each step's rows are dropped again), with the per-op
 *   profile on: the reported time is the profile's "attention" op per token
 *   (all layers), median and range over the repetitions, and the split-KV
 *   statistics give the share of chunks that left the unified path
 *   (attn_stats.n_recompute / n_chunks) and of rows combined with rescaling.
 *   The three modes run in turn within every repetition, their order
 *   rotating, so that load on a shared machine falls on all of them; an
 *   untimed round of all three comes first at each context.
 *
 * THREAD SAFETY
 *   A command: one thread drives the context's pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/context.h"
#include "model/model.h"
#include "tune_attn.h"

#define CMD "bench"
#define MAX_CTX 8
#define MAX_REPS 64
#define N_MODES 3

typedef struct attn_bench_opts {
    const char *model, *file;
    int32_t ctx[MAX_CTX];
    int n_ctx;
    int64_t prefill, steps, reps, threads;
    bool json;
} attn_bench_opts;

static const cli_opt attn_bench_opts_table[] = {
    {.names = "--attn-ctx", .arg = "LIST", .help = "contexts (positions) to time decode attention at",
     .kind = CLI_LIST, CLI_AT(attn_bench_opts, ctx), CLI_COUNT(attn_bench_opts, n_ctx), .min = 2,
     .max = 1 << 20},
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(attn_bench_opts, model)},
    {.names = "-f, --file", .arg = "FILE", .help = "text whose tokens fill the cache (cycled)", .kind = CLI_STR,
     CLI_AT(attn_bench_opts, file), .def_doc = "random token ids"},
    {.names = "--attn-prefill", .arg = "P", .help = "real positions; the rest of the cache repeats them",
     .kind = CLI_INT, CLI_AT(attn_bench_opts, prefill), .min = 1, .max = 1 << 20, .def = "512"},
    {.names = "-n, --n-gen", .arg = "N", .help = "decode steps per context, mode and repetition", .kind = CLI_INT,
     CLI_AT(attn_bench_opts, steps), .min = 1, .max = 1024, .def = "2"},
    {.names = "-r, --repetitions", .arg = "N", .help = "repetitions", .kind = CLI_INT,
     CLI_AT(attn_bench_opts, reps), .min = 1, .max = MAX_REPS, .def = "3"},
    {.names = "-t, --threads", .arg = "N", .help = "threads", .kind = CLI_INT, CLI_AT(attn_bench_opts, threads),
     .min = 0, .max = 256, .def_doc = "all online CPUs"},
    {.names = "--json", .help = "one JSON line per (context, mode) instead of the table", .kind = CLI_FLAG,
     CLI_AT(attn_bench_opts, json)},
};

const cli_spec cli_spec_bench_attn = {
    .cmd = CMD,
    .usage = "usage: kite bench -m FILE --attn-ctx LIST [-f TEXT] [--attn-prefill P] [-n N] [-r N] [-t N] [--json]\n"
             "\n"
             "Times split-KV decode attention (the per-op profile's \"attention\", all layers, per token) at\n"
             "each context of LIST with phi = 0, the model's calibrated unified maxima\n"
             "(kite.attention.unified_max, written by `kite tune --attn-calib`) and the exact method\n"
             "(every chunk against its own maximum), and counts the chunks that left the unified path.\n"
             "The cache holds a real prefill of P tokens, repeated up to the context (docs/attention.md).\n",
    CLI_TABLE(attn_bench_opts_table, attn_bench_opts),
};

static const char *const mode_names[N_MODES] = {"phi=0", "calibrated", "exact"};

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Token ids for the cache: the text's (cycled) or random ones. */
static int bench_tokens(const attn_bench_opts *o, const kite_model *m, kite_token *toks, int64_t n) {
    if (!o->file) {
        uint64_t s = 0x9e3779b97f4a7c15ull;
        for (int64_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            toks[i] = (kite_token)(s % (uint64_t)m->hp.n_vocab);
        }
        return 0;
    }
    size_t len = 0, nt = 0;
    char *text = tune_attn_read_text(CMD, o->file, &len);
    if (!text) return 1;
    kite_token *tt = malloc(sizeof *tt * (len + 2));
    if (!tt || kite_tokenize(m, text, len, true, tt, len + 2, &nt) != KITE_OK || nt == 0) {
        fprintf(stderr, "kite %s: %s: cannot tokenize\n", CMD, o->file);
        free(text);
        free(tt);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) toks[i] = tt[(size_t)i % nt];
    free(text);
    free(tt);
    return 0;
}

/* Positions P.. n_pos - 1 of every layer's K and V repeat positions 0.. P - 1 (a cache of n_ctx rows
 * per layer: no sliding-window ring). */
static void repeat_cache(kite_ctx *ctx, int32_t P, int32_t n_pos) {
    const size_t rb = ctx->kv_row_bytes;
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        uint8_t *k = ctx->k_cache + (size_t)l * (size_t)ctx->n_ctx * rb;
        uint8_t *v = ctx->v_cache + (size_t)l * (size_t)ctx->n_ctx * rb;
        for (int32_t p = P; p < n_pos; p += P) {
            const int32_t n = n_pos - p < P ? n_pos - p : P;
            memcpy(k + (size_t)p * rb, k, (size_t)n * rb);
            memcpy(v + (size_t)p * rb, v, (size_t)n * rb);
        }
    }
}

int bench_fill_cache(kite_ctx *ctx, const kite_token *toks, int32_t P, int32_t n_pos) {
    if (ctx->kv_ring > 0)
        return err_set(KITE_E_UNSUPPORTED, "a filled cache of %d positions: the model's sliding-window layers "
                       "keep a ring of %d rows, which repeated rows cannot fill", n_pos, ctx->kv_ring);
    if (P > n_pos) P = n_pos;
    int rc = kite_ctx_truncate(ctx, 0);
    if (rc == KITE_OK) rc = kite_ctx_eval(ctx, toks, P, false);
    if (rc != KITE_OK) return rc;
    repeat_cache(ctx, P, n_pos);
    ctx->n_past = n_pos;
    return KITE_OK;
}

int bench_attn(int argc, char **argv) {
    attn_bench_opts o = {0};
    int rc = cli_parse(&cli_spec_bench_attn, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.model) return cli_usage_error(CMD, "-m FILE is required");
    if (o.threads == 0) {
        const long nc = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = nc > 0 ? nc : 1;
    }
    int status = 1;
    kite_model *m = NULL;
    kite_ctx *ctx = NULL;
    kite_token *toks = NULL;
    float *zeros = NULL;
    int32_t n_max = 0;
    for (int i = 0; i < o.n_ctx; i++) n_max = o.ctx[i] > n_max ? o.ctx[i] : n_max;
    const int32_t P = (int32_t)(o.prefill < n_max - 1 ? o.prefill : n_max - 1);
    kite_model_params mp = kite_model_default_params();
    if (kite_model_load(o.model, &mp, &m) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    const int32_t NL = m->hp.n_layer, NH = m->hp.n_head;
    const bool calibrated = m->attn_phi != NULL;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = n_max + (int32_t)o.steps;
    cp.n_threads = (int32_t)o.threads;
    if (!(toks = malloc(sizeof *toks * (size_t)(P + o.steps))) || !(zeros = calloc((size_t)NL * NH, sizeof *zeros))) {
        fprintf(stderr, "kite %s: out of memory\n", CMD);
        goto done;
    }
    if (bench_tokens(&o, m, toks, P + o.steps)) goto done;
    if (kite_ctx_new(m, &cp, &ctx) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    fprintf(stderr, "kite %s: %s: prefill %d positions, cache repeated up to %d, %d threads%s\n", CMD, o.model, P,
            n_max, (int)o.threads, calibrated ? "" : "; the model has no kite.attention.unified_max (calibrated skipped)");
    if (kite_ctx_eval(ctx, toks, P, false) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        goto done;
    }
    repeat_cache(ctx, P, n_max);
    const char *names[KITE_PROFILE_N_OPS];
    double secs[KITE_PROFILE_N_OPS];
    kite_ctx_profile(ctx, secs, names, KITE_PROFILE_N_OPS);
    int op_attn = -1;
    for (int i = 0; i < KITE_PROFILE_N_OPS; i++)
        if (strcmp(names[i], "attention") == 0) op_attn = i;
    if (!o.json) {
        printf("| context | mode | attention ms/token (median) | min - max | chunks off the unified path | rows "
               "rescaled |\n");
        printf("|--------:|------|----------------------------:|----------:|----------------------------:|------"
               "-------:|\n");
    }
    for (int ci = 0; ci < o.n_ctx; ci++) {
        const int32_t N = o.ctx[ci];
        double t[N_MODES][MAX_REPS];
        attn_stats st[N_MODES];
        memset(st, 0, sizeof st);
        for (int r = -1; r < o.reps; r++) /* r = -1: one untimed round (this context's rows into the caches) */
            for (int k = 0; k < N_MODES; k++) {
                const int mode = (k + (r < 0 ? 0 : r)) % N_MODES;
                if (mode == 1 && !calibrated) continue;
                if (mode == 0) rc = ctx_set_attn_phi(ctx, zeros, NL * NH, ATTN_PHI_UNIFIED);
                else rc = ctx_set_attn_phi(ctx, NULL, 0, mode == 2 ? ATTN_PHI_EXACT : ATTN_PHI_UNIFIED);
                if (rc != KITE_OK) {
                    fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
                    goto done;
                }
                ctx->n_past = N - 1;
                ctx_set_attn_stats(ctx, r < 0 ? NULL : &st[mode]);
                kite_ctx_set_profiling(ctx, true);
                for (int64_t s = 0; s < o.steps; s++)
                    if (kite_ctx_eval(ctx, &toks[P + s], 1, false) != KITE_OK) {
                        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
                        goto done;
                    }
                kite_ctx_set_profiling(ctx, false);
                ctx_set_attn_stats(ctx, NULL);
                kite_ctx_profile(ctx, secs, NULL, KITE_PROFILE_N_OPS);
                if (r >= 0) t[mode][r] = secs[op_attn] / (double)o.steps * 1e3;
            }
        for (int mode = 0; mode < N_MODES; mode++) {
            if (mode == 1 && !calibrated) continue;
            qsort(t[mode], (size_t)o.reps, sizeof(double), cmp_d);
            const double med = o.reps % 2 ? t[mode][o.reps / 2] : 0.5 * (t[mode][o.reps / 2 - 1] + t[mode][o.reps / 2]);
            const double pc = st[mode].n_chunks ? 100.0 * (double)st[mode].n_recompute / (double)st[mode].n_chunks : 0;
            const double pr = st[mode].n_rows ? 100.0 * (double)st[mode].n_fallback / (double)st[mode].n_rows : 0;
            if (o.json)
                printf("{\"test\":\"attn\",\"ctx\":%d,\"mode\":\"%s\",\"attn_ms\":%.4f,\"attn_ms_min\":%.4f,"
                       "\"attn_ms_max\":%.4f,\"chunks\":%lld,\"recompute\":%lld,\"recompute_pct\":%.4f,"
                       "\"rows_rescaled_pct\":%.4f,\"threads\":%d,\"steps\":%d,\"reps\":%d}\n",
                       N, mode_names[mode], med, t[mode][0], t[mode][o.reps - 1], (long long)st[mode].n_chunks,
                       (long long)st[mode].n_recompute, pc, pr, (int)o.threads, (int)o.steps, (int)o.reps);
            else
                printf("| %d | %s | %.3f | %.3f - %.3f | %.3f%% (%lld of %lld) | %.3f%% |\n", N, mode_names[mode], med,
                       t[mode][0], t[mode][o.reps - 1], pc, (long long)st[mode].n_recompute,
                       (long long)st[mode].n_chunks, pr);
        }
        fflush(stdout);
    }
    status = 0;
done:
    kite_ctx_free(ctx);
    kite_model_free(m);
    free(toks);
    free(zeros);
    return status;
}
