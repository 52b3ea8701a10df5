/*
 * serve.c - `kite serve`: the OpenAI-compatible HTTP server (tools/http,
 * docs/http.md).
 *
 * Thin driver: parses flags, loads the model, starts the server, prints
 * "kite serve: listening on http://HOST:PORT" once ready (tests wait for
 * that line; with --port 0 it names the port the system chose), then waits
 * for SIGINT/SIGTERM and shuts down.  The signals are blocked before any
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

static const char *const serve_usage =
    "usage: kite serve [-m MODEL] [options]\n"
    "\n"
    "OpenAI-compatible HTTP server with a chat page at /.  Without -m, serves the\n"
    "bundled model (models/stories260K.gguf).  See docs/server.md.\n"
    "\n"
    "  -m, --model FILE        GGUF model\n"
    "      --host ADDR         address to bind (default 127.0.0.1, loopback only)\n"
    "      --port N            TCP port; 0 = any free port (default 8080)\n"
    "      --parallel N        sequences decoded together (default 4)\n"
    "  -c, --ctx N             positions per sequence (default: the model's context)\n"
    "      --kv-mem MIB        KV cache pool in MiB (default: ctx x parallel positions)\n"
    "      --api-key KEY       require 'Authorization: Bearer KEY' (also $KITE_API_KEY)\n"
    "      --chat-template NAME  llama2, llama3, chatml, mistral, zephyr, gemma\n"
    "                          (default: detected from the model, else chatml)\n"
    "  -t, --threads N         engine threads (default: all online CPUs)\n"
    "      --timeout S         idle connection timeout in seconds (default 30)\n"
    "      --max-body BYTES    request body limit (default 1048576)\n"
    "      --no-prefix-cache   do not share KV blocks between common prompt prefixes\n"
    "      --lookup N          speculative decoding: draft by n-gram lookup (n <= N) in\n"
    "                          each request's prompt and output (lossless; docs/serve.md)\n"
    "      --draft-model FILE  speculative decoding: draft with a smaller model of the same\n"
    "                          vocabulary (lossless; docs/serve.md)\n"
    "      --draft-skip-layers LIST  self-speculative: draft with the model itself, skipping\n"
    "                          layers LIST (e.g. 3 or 1-2)\n"
    "      --lookahead W,N,G   lookahead (Jacobi) drafting: W guesses per pass, N-grams,\n"
    "                          G kept per token (e.g. 8,4,8)\n"
    "      --draft-max K       longest draft per sequence and step, 1..16 (default 8;\n"
    "                          adaptive below it)\n"
    "      --mmap              map the model file instead of reading it into memory\n"
    "  -q, --quiet             no per-request log lines\n"
    "  -h, --help              this text\n";

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve";
    const char *model_path = NULL, *draft_path = NULL, *skip_list = NULL;
    bool use_mmap = false;
    server_params sp = server_default_params();
    const char *env_key = getenv("KITE_API_KEY");
    if (env_key && *env_key) sp.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int64_t iv;
#define VALUE()                                                                \
    do {                                                                       \
        if (!(v = cli_value(cmd, argc, argv, &i))) return 2;                   \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_usage, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            model_path = v;
        } else if (!strcmp(a, "--host")) {
            VALUE();
            sp.host = v;
        } else if (!strcmp(a, "--port")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 65535, &iv)) return 2;
            sp.port = (int32_t)iv;
        } else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 1024, &iv)) return 2;
            sp.engine.n_parallel = (int32_t)iv;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1 << 20, &iv)) return 2;
            sp.engine.n_ctx = (int32_t)iv;
        } else if (!strcmp(a, "--kv-mem")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 1 << 20, &iv)) return 2;
            sp.engine.kv_mem_bytes = iv << 20;
        } else if (!strcmp(a, "--api-key")) {
            VALUE();
            sp.api_key = v;
        } else if (!strcmp(a, "--chat-template")) {
            VALUE();
            sp.chat_template = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1024, &iv)) return 2;
            sp.engine.n_threads = (int32_t)iv;
        } else if (!strcmp(a, "--timeout")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 86400, &iv)) return 2;
            sp.timeout_s = (int32_t)iv;
        } else if (!strcmp(a, "--max-body")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1024, (int64_t)1 << 30, &iv)) return 2;
            sp.max_body = iv;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            sp.engine.no_prefix_cache = true;
        } else if (!strcmp(a, "--lookup")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 64, &iv)) return 2;
            sp.engine.spec_lookup_n = (int32_t)iv;
        } else if (!strcmp(a, "--draft-model")) {
            VALUE();
            draft_path = v;
        } else if (!strcmp(a, "--draft-skip-layers")) {
            VALUE();
            skip_list = v;
        } else if (!strcmp(a, "--lookahead")) {
            VALUE();
            spec_params la = spec_default_params();
            if (spec_parse_lookahead(v, &la) != KITE_OK) return cli_usage_error(cmd, "%s", kite_last_error());
            sp.engine.spec_la_window = la.la_window;
            sp.engine.spec_la_ngram = la.la_ngram;
            sp.engine.spec_la_pool = la.la_pool;
        } else if (!strcmp(a, "--draft-max")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 16, &iv)) return 2;
            sp.engine.spec_draft_max = (int32_t)iv;
        } else if (!strcmp(a, "--mmap")) {
            use_mmap = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            sp.quiet = true;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
#undef VALUE
    }
    if ((sp.engine.spec_lookup_n > 0) + (draft_path != NULL) + (skip_list != NULL) + (sp.engine.spec_la_window > 0) > 1)
        return cli_usage_error(cmd, "give at most one of --lookup, --draft-model, --draft-skip-layers and --lookahead");
    if (!model_path) model_path = cli_default_model(argv[0]);
    sp.model_id = base_name(model_path);

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
    int st = kite_model_load(model_path, &mp, &model);
    if (st != KITE_OK) {
        fprintf(stderr, "kite serve: %s\n", kite_last_error());
        return 1;
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
    fprintf(stderr, "kite serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(srv);
    kite_model_free(draft);
    free(skip);
    kite_model_free(model);
    return 0;
}
