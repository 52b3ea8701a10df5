/*
 * serve.c - `kite serve`: the OpenAI-compatible HTTP server (tools/http,
 * docs/http.md).
 *
 * Thin driver: parses flags, loads the model, starts the server, prints
 * "kite serve: listening on http://HOST:PORT" once ready (tests wait for
 * that line; with --port 0 it names the port the system chose), then waits
 * for SIGINT/SIGTERM, drains (server_drain: new requests get 503, running
 * ones finish within --drain-timeout) and shuts down with status 0.  The signals are blocked before any
 * thread starts, so only sigwait here receives them.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config/config.h"
#include "kite.h"
#include "http/server.h"
#include "spec/spec.h"

typedef struct serve_opts {
    server_params sp;
    const char *model, *alias, *draft, *skip, *lookahead;
    int64_t kv_mem_mib; /* --kv-mem; 0: the engine's default */
    bool use_mmap;
    uint64_t mem_budget; /* --mem-budget (the served model; a draft model is loaded whole) */
} serve_opts;

static const cli_opt serve_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(serve_opts, model)},
    {.names = "-a, --alias", .arg = "NAME",
     .help = "serve the model under this name (/v1/models; requests may give it or the file name)", .kind = CLI_STR,
     CLI_AT(serve_opts, alias), .def_doc = "the file name"},
    {.names = "--host", .arg = "ADDR", .help = "address to bind (the default is loopback only)", .kind = CLI_STR,
     CLI_AT(serve_opts, sp.host), .show_default = true},
    {.names = "--port", .arg = "N", .help = "TCP port; 0 = any free port", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.port), .min = 0, .max = 65535, .show_default = true},
    {.names = "--parallel, -np", .arg = "N", .help = "sequences decoded together", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.engine.n_parallel), .min = 1, .max = 1024, .def_doc = "4"},
    {.names = "-c, --ctx-size, --ctx", .arg = "N", .help = "positions per sequence", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.engine.n_ctx), .min = 0, .max = 1 << 20, .def_doc = "the model's context"},
    {.names = "--kv-mem", .arg = "MIB", .help = "KV cache pool in MiB", .kind = CLI_INT,
     CLI_AT(serve_opts, kv_mem_mib), .min = 1, .max = 1 << 20, .def_doc = "ctx x parallel positions"},
    {.names = "--api-key", .arg = "KEY", .help = "require 'Authorization: Bearer KEY' (also $KITE_API_KEY)",
     .kind = CLI_STR, CLI_AT(serve_opts, sp.api_key)},
    {.names = "--allowed-hosts", .arg = "LIST",
     .help = "more Host names to accept, comma-separated; * = any (DNS-rebinding guard)",
     .kind = CLI_STR, CLI_AT(serve_opts, sp.allowed_hosts), .def_doc = "the bound address and loopback names"},
    {.names = "--cors", .arg = "ORIGINS",
     .help = "browser origins allowed cross-origin, comma-separated; * = any",
     .kind = CLI_STR, CLI_AT(serve_opts, sp.cors), .def_doc = "no CORS"},
    {.names = "--chat-template", .arg = "NAME", .help = "llama2, llama3, chatml, mistral, zephyr, gemma",
     .kind = CLI_STR, CLI_AT(serve_opts, sp.chat_template), .def_doc = "detected from the model, else chatml"},
    {.names = "-t, --threads", .arg = "N", .help = "engine threads", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.engine.n_threads), .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    {.names = "--timeout", .arg = "S", .help = "per-request deadline in seconds, time in the queue included",
     .kind = CLI_INT, CLI_AT(serve_opts, sp.timeout_s), .min = 1, .max = 86400, .show_default = true},
    {.names = "--idle-timeout", .arg = "S", .help = "close a connection silent for S seconds", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.idle_timeout_s), .min = 1, .max = 86400, .show_default = true},
    {.names = "--header-timeout", .arg = "S", .help = "the whole request head must arrive within S seconds",
     .kind = CLI_INT, CLI_AT(serve_opts, sp.header_timeout_s), .min = 1, .max = 3600, .show_default = true},
    {.names = "--body-timeout", .arg = "S", .help = "the whole body must arrive within S seconds after the head",
     .kind = CLI_INT, CLI_AT(serve_opts, sp.body_timeout_s), .min = 1, .max = 86400, .show_default = true},
    {.names = "--max-conns", .arg = "N", .help = "connections held at once (more get 503)", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.max_connections), .min = 1, .max = 1 << 20, .show_default = true},
    {.names = "--max-conns-per-ip", .arg = "N", .help = "connections per client address (more get 429); -1 = no limit",
     .kind = CLI_INT, CLI_AT(serve_opts, sp.max_conns_per_ip), .min = -1, .max = 1 << 20, .show_default = true},
    {.names = "--queue", .arg = "N", .help = "generation and embedding requests waiting beyond --parallel (more get 503); -1 = none",
     .kind = CLI_INT, CLI_AT(serve_opts, sp.queue), .min = -1, .max = 1 << 20, .show_default = true},
    {.names = "--drain-timeout", .arg = "S", .help = "on SIGTERM/SIGINT, how long running requests may finish",
     .kind = CLI_INT, CLI_AT(serve_opts, sp.drain_timeout_s), .min = 1, .max = 86400, .show_default = true},
    {.names = "--max-body", .arg = "BYTES", .help = "request body limit", .kind = CLI_INT,
     CLI_AT(serve_opts, sp.max_body), .min = 1024, .max = (int64_t)1 << 30, .show_default = true},
    {.names = "--no-prefix-cache", .help = "do not share KV blocks between common prompt prefixes",
     .kind = CLI_FLAG, CLI_AT(serve_opts, sp.engine.no_prefix_cache)},
    {.names = "--mmap", .help = "map the model file instead of reading it into memory", .kind = CLI_FLAG,
     CLI_AT(serve_opts, use_mmap)},
    CLI_OPT_MEM_BUDGET(serve_opts, mem_budget),
    CLI_OPT_F16_COMPUTE,
    {.names = "-q, --quiet", .help = "no per-request log lines", .kind = CLI_FLAG, CLI_AT(serve_opts, sp.quiet)},
    {.kind = CLI_SECTION, .help = "Speculative decoding, per request (lossless; docs/engine.md):"},
    CLI_OPTS_DRAFT(serve_opts, draft, skip, sp.engine.spec_lookup_n, lookahead, sp.engine.spec_draft_max),
};

const cli_spec cli_spec_serve = {
    .cmd = "serve",
    .usage = "usage: kite serve [-m MODEL] [options]\n"
             "\n"
             "OpenAI-compatible HTTP server with a chat page at /.  Without -m, serves the\n"
             "bundled model (models/stories260K.gguf).  See docs/http.md.\n",
    CLI_TABLE(serve_opts_table, serve_opts),
};

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.sp = server_default_params()};
    const char *env_key = getenv("KITE_API_KEY");
    if (env_key && *env_key) o.sp.api_key = env_key;
    int prc = cli_parse(&cli_spec_serve, argc, argv, &o);
    if (prc >= 0) return prc;
    server_params sp = o.sp;
    const char *model_path = o.model, *draft_path = o.draft, *skip_list = o.skip;
    const bool use_mmap = o.use_mmap;
    if (o.kv_mem_mib) sp.engine.kv_mem_bytes = o.kv_mem_mib << 20;
    if (o.lookahead) { /* checked by cli_parse */
        spec_params la = spec_default_params();
        spec_parse_lookahead(o.lookahead, &la);
        sp.engine.spec_la_window = la.la_window;
        sp.engine.spec_la_ngram = la.la_ngram;
        sp.engine.spec_la_pool = la.la_pool;
    }
    if ((sp.engine.spec_lookup_n > 0) + (draft_path != NULL) + (skip_list != NULL) + (o.lookahead != NULL) > 1)
        return cli_usage_error("serve", "give at most one of --lookup, --draft-model, --draft-skip-layers and --lookahead");
    if (!model_path) model_path = cli_default_model(argv[0]);
    sp.model_file = base_name(model_path);
    sp.model_id = o.alias && o.alias[0] ? o.alias : sp.model_file;

    /* block the signals before any thread exists; sigwait below takes them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    kite_model_params mp = config_model_params();
    mp.use_mmap = use_mmap;
    kite_model *model = NULL, *draft = NULL;
    bool *skip = NULL;
    mp.mem_budget = o.mem_budget;
    int st = kite_model_load(model_path, &mp, &model);
    mp.mem_budget = 0;
    if (st != KITE_OK) {
        fprintf(stderr, "kite serve: %s\n", kite_last_error());
        return 1;
    }
    {
        kite_model_info mi;
        kite_model_get_info(model, &mi);
        cli_warn_ctx("serve", sp.engine.n_ctx, mi.n_ctx_train);
    }
    if (draft_path && (st = kite_model_load(draft_path, &mp, &draft)) != KITE_OK) {
        fprintf(stderr, "kite serve: --draft-model: %s\n", kite_last_error());
        kite_model_free(model);
        return 1;
    }
    if (skip_list) {
        kite_model_info info;
        kite_model_get_info(model, &info);
        skip = calloc((size_t)info.n_layer, sizeof *skip);
        if (!skip || spec_parse_layers(skip_list, info.n_layer, skip) != KITE_OK) {
            fprintf(stderr, "kite serve: --draft-skip-layers: %s\n", skip ? kite_last_error() : "out of memory");
            free(skip);
            kite_model_free(model);
            return 2;
        }
        sp.engine.spec_skip_layers = skip;
        sp.engine.n_spec_skip = info.n_layer;
    }
    sp.engine.spec_draft_model = draft;
    server *srv = NULL;
    st = server_start(model, &sp, &srv);
    if (st != KITE_OK) {
        fprintf(stderr, "kite serve: %s\n", kite_last_error());
        kite_model_free(draft);
        free(skip);
        kite_model_free(model);
        return st == KITE_E_ARG ? 2 : 1;
    }
    const char *host = sp.host;
    fprintf(stderr, "kite serve: model %s, listening on http://%s%s%s:%d%s\n", sp.model_id,
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", (int)server_port(srv),
            sp.api_key && *sp.api_key ? " (API key required)" : "");
    fflush(stderr);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kite serve: %s, draining (at most %d s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            (int)sp.drain_timeout_s);
    fflush(stderr);
    server_drain(srv);
    fprintf(stderr, "kite serve: shutting down\n");
    server_stop(srv);
    kite_model_free(draft);
    free(skip);
    kite_model_free(model);
    return 0;
}
