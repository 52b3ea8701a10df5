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

static const char *const sot_usage =
    "usage: kite sot [-m MODEL] -p QUESTION [options]\n"
    "\n"
    "Skeleton-of-Thought: the model first writes a numbered outline, then every\n"
    "point is expanded at the same time (one batched sequence per point) and the\n"
    "answer is assembled in order.  If the outline does not parse (fewer than 2\n"
    "numbered points), the question is answered by plain decoding (router).\n"
    "\n"
    "  -m, --model FILE          GGUF model (default: the bundled one)\n"
    "  -p, --prompt QUESTION     the question\n"
    "  -t, --threads N           threads (default: all online CPUs)\n"
    "  -c, --ctx-size N          positions per sequence (default: the model's, at most 4096)\n"
    "      --max-points N        expand at most N points (default 10, at most 15)\n"
    "      --skeleton-tokens N   token limit of the outline (default 200)\n"
    "      --point-tokens N      token limit of each point (default 128)\n"
    "      --skeleton TEXT       use TEXT as the outline instead of generating one\n"
    "      --skeleton-prompt T   override the outline prompt ({question})\n"
    "      --point-prompt T      override the point prompt ({question} {skeleton} {index} {point})\n"
    "      --chat-template NAME  wrap prompts as a chat turn in NAME's format (default: the\n"
    "                            model's template if it has one, else raw text)\n"
    "      --temp T              temperature (default 0: greedy); also --top-k, --top-p,\n"
    "                            --min-p, --repeat-penalty, --seed ... as in kite run\n"
    "      --compare             also time plain decoding of the same number of tokens\n"
    "      --json                end with one JSON line: fallback, points, answer, times\n";

typedef struct sot_opts {
    const char *model, *question, *chat_template;
    int64_t n_threads, n_ctx;
    bool compare, json;
    sot_params sp;
} sot_opts;

static int parse_args(int argc, char **argv, sot_opts *o) {
    const char *cmd = "sot";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int64_t iv;
        int rc;
#define VALUE()                                                                \
    do {                                                                       \
        if (!(v = cli_value(cmd, argc, argv, &i))) return 2;                   \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(sot_usage, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE();
            o->question = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1024, &o->n_threads)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 16, 1 << 20, &o->n_ctx)) return 2;
        } else if (!strcmp(a, "--max-points")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, SOT_MAX_POINTS - 1, &iv)) return 2;
            o->sp.max_points = (int32_t)iv;
        } else if (!strcmp(a, "--skeleton-tokens")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 1 << 16, &iv)) return 2;
            o->sp.skeleton_tokens = (int32_t)iv;
        } else if (!strcmp(a, "--point-tokens")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 1, 1 << 16, &iv)) return 2;
            o->sp.point_tokens = (int32_t)iv;
        } else if (!strcmp(a, "--skeleton")) {
            VALUE();
            o->sp.skeleton_text = v;
        } else if (!strcmp(a, "--skeleton-prompt")) {
            VALUE();
            o->sp.skeleton_prompt = v;
        } else if (!strcmp(a, "--point-prompt")) {
            VALUE();
            o->sp.point_prompt = v;
        } else if (!strcmp(a, "--chat-template")) {
            VALUE();
            o->chat_template = v;
        } else if ((rc = cli_sampler_option(cmd, argc, argv, &i, &o->sp.sampling, NULL)) != 0) {
            if (rc == 2) return 2;
        } else if (!strcmp(a, "--compare")) {
            o->compare = true;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
#undef VALUE
    }
    if (!o->question) return cli_usage_error(cmd, "-p QUESTION is required");
    return 0;
}

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
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
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
