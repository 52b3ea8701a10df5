/*
 * ppl.c - `kite ppl`: perplexity of a model on a text, optionally saving
 * the log-probabilities or comparing them with a saved reference (KLD).
 *
 * A thin driver over src/eval (plans, scoring, the logits file) and the
 * public API; the conventions are in docs/quantization/evaluation.md.  Progress (running ppl
 * per window) goes to stderr, the summary to stdout; with --json stdout
 * ends with one JSON line.  Exit status: 0, 1 (bad file, mismatched
 * reference, ...), 2 (usage).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress/progress.h"
#include "config/config.h"
#include "core/error.h"
#include "eval/eval.h"
#include "kite.h"

typedef struct ppl_opts {
    const char *model, *text, *save, *base, *docs;
    int64_t n_ctx, n_batch, n_threads;
    uint64_t mem_budget; /* --mem-budget */
    int32_t kv_type; /* enum kite_kv_type */
    int32_t format;  /* enum eval_logits_format of --save-logits */
    bool json, half, quiet;
} ppl_opts;

static const char *const format_names[] = {"kite", "llamacpp", NULL};
static const int32_t format_values[] = {EVAL_LOGITS_KITE, EVAL_LOGITS_LLAMACPP};

static int check_docs(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)state, (void)flag, (void)n;
    if (!*vals[0]) return cli_usage_error(cmd, "--docs needs a non-empty separator"), -1;
    return 1;
}

static const cli_opt ppl_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(ppl_opts, model),
     .def_doc = "the bundled model"},
    {.names = "-f, --file", .arg = "TEXT", .help = "text file to score (required, except with a llama.cpp\n"
                                                "--kld-base file, which holds its tokens)",
     .kind = CLI_STR, CLI_AT(ppl_opts, text)},
    {.names = "-c, --ctx-size, --ctx", .arg = "N", .help = "window length in tokens, BOS included (default 128, or the\n"
                                             "model's training context if smaller; at most that context)",
     .kind = CLI_INT, CLI_AT(ppl_opts, n_ctx), .min = 2, .max = 1 << 24},
    {.names = "-b, --batch", .arg = "N", .help = "tokens per forward pass", .kind = CLI_INT,
     CLI_AT(ppl_opts, n_batch), .min = 1, .max = 1 << 24, .def_doc = "a whole window"},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads", .kind = CLI_INT, CLI_AT(ppl_opts, n_threads),
     .min = 1, .max = 1024, .def_doc = "all CPUs"},
    CLI_OPT_KV_TYPE(ppl_opts, kv_type, "KV cache type: f32, f16, q8_0 or q4_0 (compare\n"
                                       "with --kld-base against an f32 run)"),
    {.names = "--half", .help = "score only the second half of each full window (llama.cpp)", .kind = CLI_FLAG,
     CLI_AT(ppl_opts, half)},
    {.names = "--docs", .arg = "SEP",
     .help = "split the text on the string SEP into documents (each\n"
             "stripped of surrounding whitespace, empty ones skipped);\n"
             "one window per document, truncated to CTX tokens",
     .kind = CLI_STR, CLI_AT(ppl_opts, docs), .fn = check_docs, .example = "==="},
    {.names = "--save-logits", .arg = "F",
     .help = "write the log-probabilities of the scored positions to F\n(binary, format in docs/quantization/evaluation.md)",
     .kind = CLI_STR, CLI_AT(ppl_opts, save)},
    {.names = "--format", .arg = "FMT",
     .help = "--save-logits format: kite (float32 rows) or llamacpp (the\n"
             "file llama-perplexity --kl-divergence-base reads; implies\n"
             "llama.cpp's windows, see --kld-base)",
     .kind = CLI_ENUM, CLI_AT(ppl_opts, format), .choices = format_names, .values = format_values,
     .def_doc = "kite"},
    {.names = "--kld-base", .arg = "F",
     .help = "compare with F (written by --save-logits, normally from\n"
             "the F32 model, on the same text with the same options):\n"
             "mean KL(base || this), its standard error, top-1 agreement\n"
             "and the ppl difference.  F may also be a file written by\n"
             "llama-perplexity --kl-divergence-base (or --format llamacpp):\n"
             "then its tokens and -c are used, cut as llama.cpp cuts them",
     .kind = CLI_STR, CLI_AT(ppl_opts, base)},
    CLI_OPT_MEM_BUDGET(ppl_opts, mem_budget),
    CLI_OPT_F16_COMPUTE,
    {.names = "--json", .help = "end stdout with one line {\"ppl\", \"nll\", \"tokens\", \"kld\", \"top1\"}",
     .kind = CLI_FLAG, CLI_AT(ppl_opts, json)},
    {.names = "-q, --quiet", .help = "no per-window lines and no progress", .kind = CLI_FLAG, CLI_AT(ppl_opts, quiet)},
};

const cli_spec cli_spec_ppl = {
    .cmd = "ppl",
    .usage = "usage: kite ppl [-m MODEL] -f TEXT [options]\n"
             "\n"
             "Perplexity of MODEL on the text file TEXT ('-' = standard input).  The text is\n"
             "tokenized once and cut into consecutive, non-overlapping windows of CTX tokens;\n"
             "each window starts with BOS when the model has one (BOS + CTX-1 text tokens).\n"
             "Scoring: every token after the first of each window is scored (each text token\n"
             "exactly once), as in shared/golden/stories260K-ppl.json; --half scores only the\n"
             "second half of full windows, like llama.cpp's perplexity tool.  Log-softmax and\n"
             "sums are in double precision.  With a llama.cpp logits file (--kld-base F from\n"
             "llama-perplexity, or --format llamacpp) the windows are llama.cpp's: CTX text\n"
             "tokens with BOS written over the first, second halves scored, so either tool\n"
             "compares with the other's file.  See docs/quantization/evaluation.md.\n",
    CLI_TABLE(ppl_opts_table, ppl_opts),
    .unknown = "unknown argument",
};

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Adds the text tokens of text[0..len) to the plan. */
static int plan_text(eval_plan *p, const kite_model *m, const char *text, size_t len) {
    kite_token *ids = NULL;
    int64_t n = 0;
    int rc = eval_tokenize(m, text, len, &ids, &n);
    if (rc == KITE_OK) rc = eval_plan_add(p, ids, n);
    free(ids);
    return rc;
}

/* --docs: one plan_text per stripped, non-empty piece between separators;
 * sep NULL: the whole text. */
static int plan_docs(eval_plan *p, const kite_model *m, const char *text, size_t len, const char *sep) {
    if (!sep) return plan_text(p, m, text, len);
    const size_t sl = strlen(sep);
    size_t pos = 0;
    while (pos <= len) {
        size_t end = len;
        for (size_t i = pos; i + sl <= len; i++)
            if (!memcmp(text + i, sep, sl)) {
                end = i;
                break;
            }
        size_t a = pos, b = end;
        while (a < b && is_space(text[a])) a++;
        while (b > a && is_space(text[b - 1])) b--;
        if (b > a) {
            int rc = plan_text(p, m, text + a, b - a);
            if (rc != KITE_OK) return rc;
        }
        pos = end + sl;
        if (end == len) break;
    }
    return KITE_OK;
}

/* A JSON number, or null when not finite. */
static void json_num(double v) {
    if (isfinite(v)) printf("%.9g", v);
    else fputs("null", stdout);
}

typedef struct window_log {
    progress pg; /* the kept per-window lines and the updating line with the ETA */
    bool kld;
} window_log;

static void on_window(void *user, int32_t w, int32_t n_windows, const eval_stats *s) {
    window_log *wl = user;
    char line[160];
    int n = snprintf(line, sizeof line, "[%d/%d] ppl %.4f", w + 1, n_windows, eval_stats_ppl(s));
    if (wl->kld && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, "  kld %.6f  top1 %.2f%%", eval_stats_kld_mean(s),
                 eval_stats_top1(s));
    progress_line(&wl->pg, line);
    progress_update(&wl->pg, (uint64_t)w + 1, (uint64_t)n_windows);
}

/* --kld-base: opens the reference and checks it matches this run; --save-logits:
 * creates the output.  Returns 0, or 1 after printing the error. */
static int open_logits(const ppl_opts *o, const kite_model_info *info, int64_t n_ctx, uint32_t flags,
                       const eval_plan *plan, const kite_token *targets, const kite_token *chunk_tokens,
                       eval_logits_reader *base, eval_logits_writer **save) {
    if (base && eval_logits_read_match(base, (uint32_t)info->n_vocab, (uint32_t)n_ctx, flags, targets,
                                       (uint64_t)plan->n_scored) != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        return 1;
    }
    if (o->save) {
        eval_logits_header h = {.n_vocab = (uint32_t)info->n_vocab, .n_ctx = (uint32_t)n_ctx, .flags = flags,
                                .n_tokens = (uint64_t)plan->n_scored};
        if (o->format == EVAL_LOGITS_LLAMACPP ? eval_logits_write_open_llamacpp(o->save, &h, chunk_tokens,
                                                                                plan->n_windows, save) != KITE_OK
                                              : eval_logits_write_open(o->save, &h, targets, save) != KITE_OK) {
            fprintf(stderr, "kite ppl: %s\n", kite_last_error());
            return 1;
        }
    }
    return 0;
}

/* The summary on stdout (and the --json line). */
static void report(const ppl_opts *o, const kite_model_info *info, const eval_plan *plan, const eval_stats *s,
                   int n_threads, int64_t n_ctx, bool has_base) {
    const double ppl = eval_stats_ppl(s), nll = eval_stats_mean_nll(s);
    printf("model: %s (%s, %d threads)\n", o->model, info->name, n_threads);
    printf("text: %s: %lld tokens, %d windows of %lld, %lld scored (%s)", o->text ? o->text : o->base,
           (long long)plan->n_text, plan->n_windows, (long long)n_ctx, (long long)plan->n_scored,
           (plan->flags & EVAL_PLAN_LLAMACPP) ? "llama.cpp's windows: second half of each full window"
           : o->half                          ? "second half of each full window"
                                              : "every token after the first of each window");
    if (plan->n_truncated) printf(", %lld cut by --docs truncation", (long long)plan->n_truncated);
    printf("\nppl = %.6f +/- %.6f   (mean NLL %.6f nats)\n", ppl, eval_stats_ppl_err(s), nll);
    if (has_base) {
        const double bppl = eval_stats_base_ppl(s);
        printf("base ppl = %.6f   delta ppl = %+.6f (%+.4f%%)\n", bppl, ppl - bppl, 100.0 * (ppl - bppl) / bppl);
        printf("KLD(base || this) = %.6g +/- %.6g nats   top-1 agreement = %.3f%%\n", eval_stats_kld_mean(s),
               eval_stats_kld_err(s), eval_stats_top1(s));
    }
    if (o->save) printf("saved: %s (%lld rows x %d)\n", o->save, (long long)plan->n_scored, info->n_vocab);
    if (o->json) {
        fputs("{\"ppl\": ", stdout);
        json_num(ppl);
        fputs(", \"nll\": ", stdout);
        json_num(nll);
        printf(", \"tokens\": %lld, \"kld\": ", (long long)s->n);
        json_num(has_base ? eval_stats_kld_mean(s) : NAN);
        fputs(", \"top1\": ", stdout);
        json_num(has_base ? eval_stats_top1(s) : NAN);
        fputs("}\n", stdout);
    }
}

/* Below this many scored tokens the result gets a warning (the standard
 * error of a mean NLL over n tokens shrinks only as 1/sqrt(n)); a round
 * number chosen by hand, not by a measurement. */
#define PPL_FEW_TOKENS 200

/* The token stream llama-perplexity cuts into windows: BOS (when the model
 * has one) followed by the text's tokens, so the first window starts with a
 * real BOS and later ones get BOS written over their first token. */
static int lcpp_tokens(const kite_model *m, const char *text, size_t len, kite_token bos, kite_token **out,
                       int64_t *n) {
    kite_token *ids = NULL;
    int rc = eval_tokenize(m, text, len, &ids, n);
    if (rc != KITE_OK || bos < 0) {
        *out = ids;
        return rc;
    }
    kite_token *all = malloc(sizeof *all * (size_t)(*n + 1));
    if (!all) {
        free(ids);
        return err_set(KITE_E_NOMEM, "out of memory");
    }
    all[0] = bos;
    memcpy(all + 1, ids, sizeof *ids * (size_t)*n);
    free(ids);
    (*n)++;
    *out = all;
    return KITE_OK;
}

/* A llama.cpp --kld-base file holds the tokens it was cut from; a text given
 * with -f as well must tokenize to the same ones (else the comparison would
 * silently score another text).  Returns 0, or 1 after printing the error. */
static int check_chunks(const kite_model *m, const char *path, const char *text, size_t len, kite_token bos,
                        const kite_token *chunks, int64_t n) {
    kite_token *ids = NULL;
    int64_t got = 0;
    if (lcpp_tokens(m, text, len, bos, &ids, &got) != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        return 1;
    }
    int64_t i = 0;
    while (i < n && i < got && ids[i] == chunks[i]) i++;
    free(ids);
    if (i == n) return 0;
    if (i == got)
        fprintf(stderr, "kite ppl: %s: %lld tokens, the --kld-base file holds %lld (different text?)\n", path,
                (long long)got, (long long)n);
    else
        fprintf(stderr, "kite ppl: %s: token %lld differs from the --kld-base file's (different text or "
                "tokenizer)\n", path, (long long)i);
    return 1;
}

int cmd_ppl(int argc, char **argv) {
    ppl_opts args = {0};
    int prc = cli_parse(&cli_spec_ppl, argc, argv, &args);
    if (prc >= 0) return prc;
    const char *model_path = args.model, *text_path = args.text;
    const char *docs_sep = args.docs;
    int64_t n_ctx = args.n_ctx, n_batch = args.n_batch;
    const bool half = args.half;
    if (!text_path && !args.base) return cli_usage_error("ppl", "missing -f TEXT");
    if (half && docs_sep) return cli_usage_error("ppl", "--half and --docs cannot be combined");
    if (args.format == EVAL_LOGITS_LLAMACPP && !args.save)
        return cli_usage_error("ppl", "--format applies to --save-logits");
    if (args.format == EVAL_LOGITS_LLAMACPP && docs_sep)
        return cli_usage_error("ppl", "--docs cannot be combined with llama.cpp's windows (--format llamacpp)");
    if (!model_path) model_path = args.model = cli_default_model(argv[0]);

    int status = 1;
    kite_model *model = NULL;
    kite_ctx *ctx = NULL;
    eval_plan plan = {0};
    eval_logits_reader *base = NULL;
    eval_logits_writer *save = NULL;
    kite_token *targets = NULL, *text_ids = NULL;
    size_t text_len = 0;
    char *text = NULL;
    if (text_path && !(text = cli_read_file(text_path, &text_len))) {
        fprintf(stderr, "kite ppl: %s: cannot read: %s\n", text_path, strerror(errno));
        goto done;
    }
    if (args.base && eval_logits_read_open(args.base, &base) != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        goto done;
    }
    int32_t n_chunk = 0;
    const kite_token *chunks = base ? eval_logits_read_chunks(base, &n_chunk) : NULL;
    const bool lcpp = chunks || args.format == EVAL_LOGITS_LLAMACPP;
    if (lcpp && docs_sep) {
        status = cli_usage_error("ppl", "--docs cannot be combined with llama.cpp's windows (%s)",
                                 chunks ? "a llama.cpp --kld-base file" : "--format llamacpp");
        goto done;
    }
    if (!text && !chunks) {
        status = cli_usage_error("ppl", "missing -f TEXT (%s is a kite logits file, which holds no text)", args.base);
        goto done;
    }
    kite_model_params mp = config_model_params();
    mp.mem_budget = args.mem_budget;
    if (kite_model_load(model_path, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        goto done;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    const int64_t train = info.n_ctx_train > 0 ? info.n_ctx_train : 128;
    if (chunks) {
        const int64_t file_ctx = eval_logits_read_header(base)->n_ctx;
        if (n_ctx && n_ctx != file_ctx) {
            fprintf(stderr, "kite ppl: %s: written with -c %lld, this run asks for -c %lld\n", args.base,
                    (long long)file_ctx, (long long)n_ctx);
            goto done;
        }
        n_ctx = file_ctx;
    }
    if (!n_ctx) n_ctx = train < 128 ? train : 128;
    if (n_ctx > train) {
        status = cli_usage_error("ppl", "-c %lld exceeds the model's training context (%lld)", (long long)n_ctx,
                                 (long long)train);
        goto done;
    }
    if (n_batch > n_ctx) n_batch = n_ctx;
    const kite_token bos = kite_token_bos(model);
    const uint32_t flags = (bos >= 0 ? EVAL_PLAN_BOS : 0u) |
                           (lcpp ? EVAL_PLAN_LLAMACPP : half ? EVAL_PLAN_HALF : 0u) | (docs_sep ? EVAL_PLAN_DOCS : 0u);
    int rc = eval_plan_init(&plan, (int32_t)n_ctx, flags, bos);
    const kite_token *chunk_tokens = chunks; /* the text tokens of llama.cpp's windows */
    if (rc == KITE_OK && chunks) {
        if (text && check_chunks(model, text_path, text, text_len, bos, chunks, (int64_t)n_chunk * n_ctx)) goto done;
        rc = eval_plan_add(&plan, chunks, (int64_t)n_chunk * n_ctx);
    } else if (rc == KITE_OK && lcpp) {
        int64_t n = 0;
        rc = lcpp_tokens(model, text, text_len, bos, &text_ids, &n);
        if (rc == KITE_OK) rc = eval_plan_add(&plan, text_ids, n);
        chunk_tokens = text_ids;
    } else if (rc == KITE_OK) {
        rc = plan_docs(&plan, model, text, text_len, docs_sep);
    }
    if (rc != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        goto done;
    }
    if (plan.n_scored == 0) {
        fprintf(stderr, "kite ppl: %s: no token to score (%lld text tokens, -c %lld%s)\n",
                text_path ? text_path : args.base,
                (long long)plan.n_text, (long long)n_ctx,
                half || lcpp ? ", scoring second halves needs a full window" : "");
        goto done;
    }
    if (!(targets = malloc(sizeof *targets * (size_t)plan.n_scored))) {
        fprintf(stderr, "kite ppl: out of memory\n");
        goto done;
    }
    eval_plan_targets(&plan, targets);
    if (open_logits(&args, &info, n_ctx, flags, &plan, targets, chunk_tokens, base, &save)) goto done;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_threads = (int32_t)args.n_threads;
    cp.kv_type = args.kv_type;
    if (kite_ctx_new(model, &cp, &ctx) != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        goto done;
    }
    fprintf(stderr, "kite ppl: %s: %lld tokens, %d windows of %lld (%s), %lld scored%s\n",
            text_path ? text_path : args.base,
            (long long)plan.n_text, plan.n_windows, (long long)n_ctx, bos >= 0 ? "BOS first" : "no BOS",
            (long long)plan.n_scored, lcpp ? " (llama.cpp's windows, second halves)" : half ? " (second halves)" : "");
    if (args.quiet) progress_set_quiet(true);
    window_log wl = {.kld = base != NULL};
    progress_begin(&wl.pg, "kite ppl", PROGRESS_ITEMS, "windows");
    eval_ppl_opts o = {.n_vocab = info.n_vocab, .n_batch = (int32_t)n_batch, .save = save, .base = base,
                       .on_window = on_window, .user = &wl};
    eval_stats s;
    rc = eval_ppl_run(ctx, &plan, &o, &s);
    progress_end(&wl.pg);
    if (rc != KITE_OK) {
        fprintf(stderr, "kite ppl: %s\n", kite_last_error());
        goto done;
    }
    if (save) {
        rc = eval_logits_write_close(save);
        save = NULL;
        if (rc != KITE_OK) {
            fprintf(stderr, "kite ppl: %s\n", kite_last_error());
            goto done;
        }
    }

    report(&args, &info, &plan, &s, kite_ctx_n_threads(ctx), n_ctx, base != NULL);
    if (plan.n_scored < PPL_FEW_TOKENS)
        fprintf(stderr, "kite ppl: warning: only %lld tokens scored: too few for a reliable perplexity (the +/- is "
                "itself a rough estimate); use a text of at least %d tokens\n", (long long)plan.n_scored,
                PPL_FEW_TOKENS);
    status = fflush(stdout) == 0 ? 0 : 1;
done:
    eval_logits_write_abort(save);
    eval_logits_read_close(base);
    free(targets);
    free(text_ids);
    eval_plan_free(&plan);
    kite_ctx_free(ctx);
    kite_model_free(model);
    free(text);
    return status;
}
