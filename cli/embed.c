/*
 * embed.c - `kite embed`: embedding vectors of texts (kite_ctx_embed).
 *
 * Each input - the -p TEXT, or each line of -f FILE ('-': standard input) -
 * is tokenized with BOS (special-token text becomes the special tokens, as
 * kite serve's /v1/embeddings does), then pooled (mean by default) and
 * L2-normalised unless --no-normalize.  Output: one line per input of
 * n_embd floats separated by spaces, printed with %.9g (a float read back
 * is the same float); or with --json one object (docs/cli.md, "kite embed").
 * The inputs go through the serving engine (engine_req.embed): up to
 * EMBED_CLI_PARALLEL lines share each forward pass (continuous batching,
 * chunked prefill), which reads the weights once for all of them; a
 * sequence's rows do not depend on what shares its pass, so every line's
 * vector is the one kite_ctx_embed gives it alone, bit for bit.  Lines are
 * printed in order; at most EMBED_CLI_PARALLEL vectors are held.  The KV
 * pool holds that many sequences of the longest input (at most -c, the
 * model's training context by default), so short texts do not allocate a
 * long cache.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "cli.h"
#include "config/config.h"
#include "engine/engine.h"
#include "kite.h"

/* Lines in the engine at once (its n_parallel); chosen by hand: beyond 8 the
 * bundled and TinyLlama-shape models gained little on 2 cores. */
#define EMBED_CLI_PARALLEL 8

typedef struct embed_opts {
    const char *model;
    const char *prompt;
    const char *file;
    int32_t pooling;
    bool no_normalize;
    bool json;
    int64_t n_ctx, n_threads;
} embed_opts;

static const char *const pooling_names[] = {"mean", "last", "cls", NULL};
static const int32_t pooling_values[] = {KITE_POOLING_MEAN, KITE_POOLING_LAST, KITE_POOLING_CLS};

static const cli_opt embed_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(embed_opts, model),
     .def_doc = "the bundled model"},
    {.names = "-p, --prompt", .arg = "TEXT", .help = "the text to embed", .kind = CLI_STR, CLI_AT(embed_opts, prompt)},
    {.names = "-f, --file", .arg = "FILE", .help = "embed every line of FILE ('-': standard input), one output\nline each",
     .kind = CLI_STR, CLI_AT(embed_opts, file)},
    {.names = "--pooling", .arg = "P", .help = "mean (every token), last (the last token) or cls (the first)",
     .kind = CLI_ENUM, CLI_AT(embed_opts, pooling), .choices = pooling_names, .values = pooling_values,
     .def_doc = "mean"},
    {.names = "--no-normalize", .help = "print the pooled vector as it is (no L2 normalisation)", .kind = CLI_FLAG,
     CLI_AT(embed_opts, no_normalize)},
    {.names = "--json", .help = "print one JSON object: model, n_embd, pooling, data[{index,\nn_tokens, embedding}]",
     .kind = CLI_FLAG, CLI_AT(embed_opts, json)},
    {.names = "-c, --ctx-size, --ctx", .arg = "N", .help = "longest input in tokens, BOS included",
     .kind = CLI_INT, CLI_AT(embed_opts, n_ctx), .min = 1, .max = 1 << 24, .def_doc = "the model's training context"},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads", .kind = CLI_INT, CLI_AT(embed_opts, n_threads),
     .min = 1, .max = 1024, .def_doc = "all CPUs"},
};

const cli_spec cli_spec_embed = {
    .cmd = "embed",
    .usage = "usage: kite embed [-m MODEL] (-p TEXT | -f FILE) [--pooling mean|last|cls] [--no-normalize] [--json]\n"
             "\n"
             "Prints the embedding of TEXT, or of every line of FILE: the model's final\n"
             "hidden states (after the final norm) pooled over the tokens and L2-normalised,\n"
             "one line of n_embd numbers per input.  Each input is tokenized with BOS and\n"
             "embedded on its own, so a line's vector does not depend on the other lines.\n",
    CLI_TABLE(embed_opts_table, embed_opts),
};

/* One input: its text (borrowed from the buffer) and tokens. */
typedef struct embed_input {
    const char *text;
    size_t len;
    kite_token *ids;
    int32_t n;
} embed_input;

/* The lines in the engine: slot i % W holds line i's vector until printed. */
typedef struct embed_run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    float *slots;      /* [W][E] */
    bool *ready;       /* [W] */
    int32_t E;
    bool failed;       /* a line ended without a vector */
    char err[200];
} embed_run;

typedef struct embed_slot_user {
    embed_run *run;
    int32_t slot;
} embed_slot_user;

/* Engine thread: a line's end. */
static void on_embed(void *user, const engine_event *ev) {
    embed_slot_user *u = user;
    embed_run *r = u->run;
    if (ev->kind == ENGINE_EV_TEXT) return;
    pthread_mutex_lock(&r->mu);
    if (ev->kind == ENGINE_EV_DONE && ev->embedding && ev->n_embd == r->E) {
        memcpy(r->slots + (size_t)u->slot * (size_t)r->E, ev->embedding, sizeof *r->slots * (size_t)r->E);
        r->ready[u->slot] = true;
    } else if (!r->failed) {
        r->failed = true;
        snprintf(r->err, sizeof r->err, "%s", ev->message ? ev->message : "no vector");
    }
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void print_vec(const float *v, int32_t n, const char *sep) {
    for (int32_t i = 0; i < n; i++) {
        if (i) fputs(sep, stdout);
        printf("%.9g", (double)v[i]);
    }
}

int cmd_embed(int argc, char **argv) {
    embed_opts o = {0};
    int prc = cli_parse(&cli_spec_embed, argc, argv, &o);
    if (prc >= 0) return prc;
    if (!o.prompt == !o.file) return cli_usage_error("embed", o.prompt ? "give -p TEXT or -f FILE, not both"
                                                                        : "missing -p TEXT or -f FILE");
    const char *model_path = o.model ? o.model : cli_default_model(argv[0]);
    int status = 1;
    kite_model *model = NULL;
    engine *eng = NULL;
    embed_run run = {0};
    embed_slot_user users[EMBED_CLI_PARALLEL];
    bool run_init = false;
    char *buf = NULL;
    embed_input *in = NULL;
    size_t n_in = 0, cap_in = 0;

    if (o.file) {
        FILE *f = strcmp(o.file, "-") ? fopen(o.file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "kite embed: cannot open '%s': %s\n", o.file, strerror(errno));
            goto done;
        }
        size_t len = 0;
        buf = cli_read_stream(f, &len);
        if (f != stdin) fclose(f);
        if (!buf) {
            fprintf(stderr, "kite embed: cannot read '%s'\n", o.file);
            goto done;
        }
        for (size_t p = 0, line = 1; p < len; line++) {
            const char *nl = memchr(buf + p, '\n', len - p);
            size_t e = nl ? (size_t)(nl - buf) : len, l = e - p;
            if (l && buf[p + l - 1] == '\r') l--;
            if (l == 0) {
                fprintf(stderr, "kite embed: %s: line %zu is empty (one input per line)\n", o.file, line);
                goto done;
            }
            if (n_in == cap_in) {
                cap_in = cap_in ? cap_in * 2 : 16;
                embed_input *b = realloc(in, cap_in * sizeof *in);
                if (!b) goto oom;
                in = b;
            }
            in[n_in++] = (embed_input){.text = buf + p, .len = l};
            p = e + 1;
        }
        if (n_in == 0) {
            fprintf(stderr, "kite embed: %s has no input lines\n", o.file);
            goto done;
        }
    } else {
        if (!o.prompt[0]) {
            fprintf(stderr, "kite embed: -p TEXT is empty\n");
            goto done;
        }
        if (!(in = malloc(sizeof *in))) goto oom;
        in[0] = (embed_input){.text = o.prompt, .len = strlen(o.prompt)};
        n_in = 1;
    }

    kite_model_params mp = config_model_params();
    if (kite_model_load(model_path, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite embed: %s\n", kite_last_error());
        goto done;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    const int64_t max_ctx = o.n_ctx ? o.n_ctx : info.n_ctx_train;
    int32_t longest = 1;
    for (size_t i = 0; i < n_in; i++) {
        size_t cap = in[i].len + 2, n = 0;
        if (!(in[i].ids = malloc(cap * sizeof *in[i].ids))) goto oom;
        int rc = cli_tokenize_text(model, in[i].text, in[i].len, true, true, in[i].ids, cap, &n);
        if (rc == KITE_E_RANGE && n > cap) {
            kite_token *b = realloc(in[i].ids, n * sizeof *b);
            if (!b) goto oom;
            in[i].ids = b;
            cap = n;
            rc = cli_tokenize_text(model, in[i].text, in[i].len, true, true, in[i].ids, cap, &n);
        }
        if (rc != KITE_OK) {
            fprintf(stderr, "kite embed: input %zu: %s\n", i + 1, kite_last_error());
            goto done;
        }
        if ((int64_t)n > max_ctx) {
            fprintf(stderr, "kite embed: input %zu has %zu tokens, more than the context of %lld (-c)\n", i + 1, n,
                    (long long)max_ctx);
            goto done;
        }
        in[i].n = (int32_t)n;
        if (in[i].n > longest) longest = in[i].n;
    }
    const int32_t E = info.n_embd;
    const int32_t W = n_in < EMBED_CLI_PARALLEL ? (int32_t)n_in : EMBED_CLI_PARALLEL;
    engine_params epar = engine_default_params();
    epar.n_parallel = W;
    epar.n_ctx = longest;
    epar.n_threads = (int32_t)o.n_threads;
    if (engine_new(model, &epar, &eng) != KITE_OK) {
        fprintf(stderr, "kite embed: %s\n", kite_last_error());
        goto done;
    }
    run.E = E;
    run.slots = malloc(sizeof *run.slots * (size_t)W * (size_t)E);
    run.ready = calloc((size_t)W, sizeof *run.ready);
    if (!run.slots || !run.ready) goto oom;
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.cv, NULL);
    run_init = true;
    kite_embed_params ep = kite_embed_default_params();
    ep.pooling = o.pooling;
    ep.normalize = !o.no_normalize;
    if (o.json) {
        printf("{\"object\": \"list\", \"model\": ");
        cli_json_string(stdout, info.name && info.name[0] ? info.name : model_path,
                        strlen(info.name && info.name[0] ? info.name : model_path));
        printf(", \"n_embd\": %d, \"pooling\": \"%s\", \"normalized\": %s, \"data\": [", (int)E,
               pooling_names[o.pooling], ep.normalize ? "true" : "false");
    }
    /* line i is submitted once line i - W is printed (its slot is free) */
    size_t next = 0;
    for (size_t i = 0; i < n_in; i++) {
        for (; next < n_in && next < i + (size_t)W; next++) {
            const int32_t slot = (int32_t)(next % (size_t)W);
            users[slot] = (embed_slot_user){&run, slot};
            engine_req er = {.prompt = in[next].ids, .n_prompt = in[next].n, .embed = true, .embed_params = ep};
            if (engine_submit(eng, &er, on_embed, &users[slot], NULL) != KITE_OK) {
                if (o.json) printf("]}\n");
                fflush(stdout);
                fprintf(stderr, "kite embed: input %zu: %s\n", next + 1, kite_last_error());
                goto done;
            }
        }
        const int32_t slot = (int32_t)(i % (size_t)W);
        pthread_mutex_lock(&run.mu);
        while (!run.ready[slot] && !run.failed) pthread_cond_wait(&run.cv, &run.mu);
        const bool failed = !run.ready[slot];
        run.ready[slot] = false;
        pthread_mutex_unlock(&run.mu);
        if (failed) {
            if (o.json) printf("]}\n");
            fflush(stdout);
            fprintf(stderr, "kite embed: %s\n", run.err);
            goto done;
        }
        const float *vec = run.slots + (size_t)slot * (size_t)E;
        if (o.json) {
            printf("%s{\"index\": %zu, \"n_tokens\": %d, \"embedding\": [", i ? ", " : "", i, (int)in[i].n);
            print_vec(vec, E, ", ");
            printf("]}");
        } else {
            print_vec(vec, E, " ");
            putchar('\n');
        }
    }
    if (o.json) printf("]}\n");
    status = fflush(stdout) == 0 ? 0 : 1;
    goto done;
oom:
    fprintf(stderr, "kite embed: out of memory\n");
done:
    for (size_t i = 0; in && i < n_in; i++) free(in[i].ids);
    free(in);
    free(buf);
    engine_free(eng); /* before the run it calls back into (a failed line's callbacks are done) */
    if (run_init) {
        pthread_cond_destroy(&run.cv);
        pthread_mutex_destroy(&run.mu);
    }
    free(run.slots);
    free(run.ready);
    kite_model_free(model);
    return status;
}
