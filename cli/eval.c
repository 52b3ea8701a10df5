/*
 * eval.c - `kite eval`: multiple-choice tasks scored by log-likelihood
 * (HellaSwag / ARC style), reporting acc and acc_norm.
 *
 * A thin driver over src/eval (task reader, eval_mc_score) and the public
 * API; the task format and the scoring rule are in docs/quantization/evaluation.md.  One line
 * per item goes to stderr (unless -q), the summary to stdout; with --json
 * stdout ends with one JSON line.  Exit status: 0, 1 (bad task file, ...),
 * 2 (usage).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress/progress.h"
#include "config/config.h"
#include "eval/eval.h"
#include "kite.h"

typedef struct eval_opts {
    const char *model, *task;
    int64_t n_ctx, n_threads;
    bool json, quiet;
} eval_opts;

static const cli_opt eval_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(eval_opts, model),
     .def_doc = "the bundled model"},
    {.names = "--task", .arg = "FILE", .help = "JSON-lines task file (required)", .kind = CLI_STR,
     CLI_AT(eval_opts, task)},
    {.names = "-c, --ctx-size, --ctx", .arg = "N", .help = "context window", .kind = CLI_INT, CLI_AT(eval_opts, n_ctx), .min = 2,
     .max = 1 << 24, .def_doc = "the model's training context"},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads", .kind = CLI_INT, CLI_AT(eval_opts, n_threads),
     .min = 1, .max = 1024, .def_doc = "all CPUs"},
    {.names = "--json", .help = "end stdout with one line {\"items\", \"acc\", \"acc_norm\", ...}", .kind = CLI_FLAG,
     CLI_AT(eval_opts, json)},
    {.names = "-q, --quiet", .help = "no per-item lines and no progress on stderr", .kind = CLI_FLAG, CLI_AT(eval_opts, quiet)},
};

const cli_spec cli_spec_eval = {
    .cmd = "eval",
    .usage = "usage: kite eval [-m MODEL] --task FILE.jsonl [options]\n"
             "\n"
             "Multiple-choice evaluation by log-likelihood.  Each line of FILE is a JSON\n"
             "object {\"context\": \"...\", \"endings\": [\"...\", ...], \"label\": K}.  Every ending\n"
             "is scored by the sum of the log-probabilities of its tokens given BOS + the\n"
             "context (endings normally start with a space); acc counts items whose best\n"
             "ending is the label, acc_norm does the same after dividing each score by the\n"
             "ending's length in characters (as lm-evaluation-harness does).  See docs/quantization/evaluation.md.\n",
    CLI_TABLE(eval_opts_table, eval_opts),
    .unknown = "unknown argument",
};

/* Standard error of an accuracy p over n items (binomial). */
static double acc_err(double p, int32_t n) { return n > 1 ? sqrt(p * (1.0 - p) / (double)(n - 1)) : 0.0; }

int cmd_eval(int argc, char **argv) {
    eval_opts o = {0};
    int rc = cli_parse(&cli_spec_eval, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.task) return cli_usage_error("eval", "missing --task FILE");
    const char *model_path = o.model ? o.model : cli_default_model(argv[0]), *task_path = o.task;
    const int64_t n_ctx = o.n_ctx, n_threads = o.n_threads;
    const bool json = o.json, quiet = o.quiet;

    int status = 1;
    eval_mc_task task = {0};
    kite_model *model = NULL;
    kite_ctx *ctx = NULL;
    eval_mc_scores sc = {0};
    if (eval_mc_load(task_path, &task) != KITE_OK) {
        fprintf(stderr, "kite eval: %s\n", kite_last_error());
        goto done;
    }
    kite_model_params mp = config_model_params();
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_threads = (int32_t)n_threads;
    if (kite_model_load(model_path, &mp, &model) != KITE_OK || kite_ctx_new(model, &cp, &ctx) != KITE_OK) {
        fprintf(stderr, "kite eval: %s\n", kite_last_error());
        goto done;
    }
    sc.ll = malloc(sizeof *sc.ll * EVAL_MC_MAX_ENDINGS);
    sc.n_tokens = malloc(sizeof *sc.n_tokens * EVAL_MC_MAX_ENDINGS);
    sc.n_chars = malloc(sizeof *sc.n_chars * EVAL_MC_MAX_ENDINGS);
    if (!sc.ll || !sc.n_tokens || !sc.n_chars) {
        fprintf(stderr, "kite eval: out of memory\n");
        goto done;
    }
    int32_t correct = 0, correct_norm = 0;
    if (quiet) progress_set_quiet(true);
    progress pg;
    progress_begin(&pg, "kite eval", PROGRESS_ITEMS, "items");
    for (int32_t i = 0; i < task.n_items; i++) {
        const eval_mc_item *it = &task.items[i];
        if (eval_mc_score(ctx, model, it, &sc) != KITE_OK) {
            progress_end(&pg);
            fprintf(stderr, "kite eval: %s: item %d: %s\n", task_path, i + 1, kite_last_error());
            goto done;
        }
        correct += sc.pred == it->label;
        correct_norm += sc.pred_norm == it->label;
        char line[512];
        int n = snprintf(line, sizeof line, "[%d/%d] label %d pred %d%s pred_norm %d%s  ll", i + 1, task.n_items,
                         it->label, sc.pred, sc.pred == it->label ? " ok" : " --", sc.pred_norm,
                         sc.pred_norm == it->label ? " ok" : " --");
        for (int32_t k = 0; k < it->n_endings && n > 0 && (size_t)n < sizeof line; k++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %.3f", sc.ll[k]);
        progress_line(&pg, line);
        progress_update(&pg, (uint64_t)i + 1, (uint64_t)task.n_items);
    }
    progress_end(&pg);
    const double acc = (double)correct / task.n_items, acc_norm = (double)correct_norm / task.n_items;
    printf("model: %s\n", model_path);
    printf("task: %s: %d items\n", task_path, task.n_items);
    printf("acc      = %.4f +/- %.4f  (%d/%d)\n", acc, acc_err(acc, task.n_items), correct, task.n_items);
    printf("acc_norm = %.4f +/- %.4f  (%d/%d)\n", acc_norm, acc_err(acc_norm, task.n_items), correct_norm,
           task.n_items);
    if (json)
        printf("{\"items\": %d, \"acc\": %.6f, \"acc_norm\": %.6f, \"correct\": %d, \"correct_norm\": %d}\n",
               task.n_items, acc, acc_norm, correct, correct_norm);
    status = fflush(stdout) == 0 ? 0 : 1;
done:
    free(sc.ll);
    free(sc.n_tokens);
    free(sc.n_chars);
    kite_ctx_free(ctx);
    kite_model_free(model);
    eval_mc_free(&task);
    return status;
}
