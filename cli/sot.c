/*
 * sot.c - `kite sot`: answer a question with Skeleton-of-Thought
 * (src/sot, docs/sot.md): a skeleton of numbered points, then every point
 * expanded in parallel in the serving engine's batches.
 *
 * --compare also answers the question by plain decoding with the same
 * number of generated tokens (EOS ignored) on the same engine, and prints
 * both wall times and their ratio.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "kite.h"
#include "model/model.h"
#include "engine/engine.h"
#include "sot/sot.h"

typedef struct sot_opts {
    const char *model, *question, *chat_template;
    int64_t n_threads, n_ctx;
    bool compare, json, seed_set;
    sot_params sp;
} sot_opts;

static const cli_opt sot_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(sot_opts, model),
     .def_doc = "the bundled one"},
    {.names = "-p, --prompt", .arg = "QUESTION", .help = "the question", .kind = CLI_STR,
     CLI_AT(sot_opts, question)},
    {.names = "-t, --threads", .arg = "N", .help = "threads", .kind = CLI_INT, CLI_AT(sot_opts, n_threads),
     .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    {.names = "-c, --ctx-size", .arg = "N", .help = "positions per sequence", .kind = CLI_INT,
     CLI_AT(sot_opts, n_ctx), .min = 16, .max = 1 << 20, .def_doc = "the model's, at most 4096"},
    {.names = "--max-points", .arg = "N", .help = "expand at most N points (at most 15)", .kind = CLI_INT,
     CLI_AT(sot_opts, sp.max_points), .min = 1, .max = SOT_MAX_POINTS - 1, .def_doc = "10"},
    {.names = "--skeleton-tokens", .arg = "N", .help = "token limit of the outline", .kind = CLI_INT,
     CLI_AT(sot_opts, sp.skeleton_tokens), .min = 1, .max = 1 << 16, .def_doc = "200"},
    {.names = "--point-tokens", .arg = "N", .help = "token limit of each point", .kind = CLI_INT,
     CLI_AT(sot_opts, sp.point_tokens), .min = 1, .max = 1 << 16, .def_doc = "128"},
    {.names = "--skeleton", .arg = "TEXT", .help = "use TEXT as the outline instead of generating one",
     .kind = CLI_STR, CLI_AT(sot_opts, sp.skeleton_text)},
    {.names = "--skeleton-prompt", .arg = "T", .help = "override the outline prompt ({question})", .kind = CLI_STR,
     CLI_AT(sot_opts, sp.skeleton_prompt)},
    {.names = "--point-prompt", .arg = "T", .help = "override the point prompt ({question} {skeleton} {index} {point})",
     .kind = CLI_STR, CLI_AT(sot_opts, sp.point_prompt)},
    {.names = "--chat-template", .arg = "NAME", .help = "wrap prompts as a chat turn in NAME's format",
     .kind = CLI_STR, CLI_AT(sot_opts, chat_template),
     .def_doc = "the model's template if it has one, else raw text"},
    {.names = "--compare", .help = "also time plain decoding of the same number of tokens", .kind = CLI_FLAG,
     CLI_AT(sot_opts, compare)},
    {.names = "--json", .help = "end with one JSON line: fallback, points, answer, times", .kind = CLI_FLAG,
     CLI_AT(sot_opts, json)},
    {.kind = CLI_SECTION, .help = "Sampling (the outline and every point):"},
    CLI_OPTS_SAMPLER(sot_opts, sp.sampling, seed_set),
};

const cli_spec cli_spec_sot = {
    .cmd = "sot",
    .usage = "usage: kite sot [-m MODEL] -p QUESTION [options]\n"
             "\n"
             "Skeleton-of-Thought: the model first writes a numbered outline, then every\n"
             "point is expanded at the same time (one batched sequence per point) and the\n"
             "answer is assembled in order.  If the outline does not parse (fewer than 2\n"
             "numbered points), the question is answered by plain decoding (router).\n",
    CLI_TABLE(sot_opts_table, sot_opts),
};

/* Plain decoding of the question with exactly n_tokens generated (EOS
 * ignored), for --compare; returns seconds or a negative value. */
typedef struct plain_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} plain_wait;

static void plain_cb(void *user, const engine_event *ev) {
    plain_wait *w = user;
    if (ev->kind == ENGINE_EV_TEXT) return;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static double time_plain(engine *e, const kite_model *m, const char *question, int32_t n_tokens) {
    size_t n = 0, cap = strlen(question) + 8;
    kite_token *toks = malloc(sizeof *toks * cap);
    if (!toks || kite_tokenize(m, question, strlen(question), kite_token_bos(m) >= 0, toks, cap, &n) != KITE_OK) {
        free(toks);
        return -1.0;
    }
    engine_req req = {.prompt = toks, .n_prompt = (int32_t)n, .max_tokens = n_tokens, .ignore_eos = true,
                      .sampling = kite_sampler_default_params()};
    req.sampling.temperature = 0.0f;
    plain_wait w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    const double t0 = time_now_s();
    int rc = engine_submit(e, &req, plain_cb, &w, NULL);
    free(toks);
    if (rc != KITE_OK) return -1.0;
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    return time_now_s() - t0;
}

int cmd_sot(int argc, char **argv) {
    sot_opts o = {.sp = sot_default_params()};
    int rc = cli_parse(&cli_spec_sot, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.question) return cli_usage_error("sot", "-p QUESTION is required");
    if (!o.model) o.model = cli_default_model(argv[0]);

    kite_model *m = NULL;
    engine *e = NULL;
    sot_result r = {0};
    int status = 1;
    kite_model_params mp = config_model_params();
    if (kite_model_load(o.model, &mp, &m) != KITE_OK) {
        fprintf(stderr, "kite sot: %s\n", kite_last_error());
        return 1;
    }
    if (o.chat_template || gguf_get(m->gguf, "tokenizer.chat_template")) {
        if (chat_family_for_model(m, o.chat_template, &o.sp.chat_family) != KITE_OK) {
            fprintf(stderr, "kite sot: %s\n", kite_last_error());
            status = 2;
            goto done;
        }
    }
    engine_params ep = engine_default_params();
    ep.n_parallel = (o.sp.max_points > 0 ? o.sp.max_points : 10) + 1;
    ep.n_threads = (int32_t)o.n_threads;
    ep.n_ctx = (int32_t)(o.n_ctx ? o.n_ctx : (m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096));
    cli_warn_ctx("sot", o.n_ctx, m->hp.n_ctx_train);
    if (engine_new(m, &ep, &e) != KITE_OK) {
        fprintf(stderr, "kite sot: %s\n", kite_last_error());
        goto done;
    }
    if (sot_run(e, m, o.question, &o.sp, &r) != KITE_OK) {
        fprintf(stderr, "kite sot: %s\n", kite_last_error());
        goto done;
    }
    if (r.fallback)
        fprintf(stderr, "kite sot: the outline did not parse into numbered points; answered by plain decoding\n");
    else
        fprintf(stderr, "kite sot: outline of %d points in %.2f s, expanded in parallel in %.2f s\n", r.n_points,
                r.skeleton_s, r.expand_s);
    fputs(r.answer, stdout);
    if (r.answer[0] && r.answer[strlen(r.answer) - 1] != '\n') fputc('\n', stdout);
    const double sot_s = r.skeleton_s + r.expand_s;
    double plain_s = -1.0;
    if (o.compare && r.n_gen_total > 0) {
        plain_s = time_plain(e, m, o.question, r.n_gen_total);
        if (plain_s > 0)
            fprintf(stderr, "kite sot: %d tokens: skeleton-of-thought %.2f s, plain decoding %.2f s, speedup %.2fx\n",
                    r.n_gen_total, sot_s, plain_s, plain_s / sot_s);
    }
    if (o.json) {
        printf("{\"fallback\": %s, \"n_points\": %d, \"tokens\": %d, \"skeleton_s\": %.4f, \"expand_s\": %.4f, "
               "\"plain_s\": %.4f, \"skeleton\": ",
               r.fallback ? "true" : "false", r.n_points, r.n_gen_total, r.skeleton_s, r.expand_s, plain_s);
        cli_json_string(stdout, r.skeleton ? r.skeleton : "", r.skeleton ? strlen(r.skeleton) : 0);
        printf(", \"points\": [");
        for (int32_t i = 0; i < r.n_points; i++) {
            printf(i ? ", " : "");
            cli_json_string(stdout, r.points[i].title, strlen(r.points[i].title));
        }
        printf("], \"answer\": ");
        cli_json_string(stdout, r.answer, strlen(r.answer));
        printf("}\n");
    }
    status = 0;
done:
    sot_result_free(&r);
    engine_free(e);
    kite_model_free(m);
    return status;
}
