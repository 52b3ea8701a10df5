/*
 * run.c - `kite run`: generate text from a prompt.
 *
 * Flow: load model -> context -> tokenize (BOS + prompt) -> prefill the
 * prompt as one batch -> sample / print / feed back one token at a time
 * (decode) until -n tokens, an end-of-generation token, a generated BOS (a
 * new document: llama2.c stops there too) or a full context.  Text goes to
 * stdout as it is produced (whole UTF-8 characters only); timings go to
 * stderr.  The last sampled token is printed but never evaluated, so
 * --dump-logits holds one row per evaluated position.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/timing.h"
#include "kite.h"

static const char *const run_usage =
    "usage: kite run [-m MODEL] [-p PROMPT | -f FILE] [options]\n"
    "\n"
    "Generates text.  Without -m, uses the bundled model (models/stories260K.gguf).\n"
    "\n"
    "  -m, --model FILE        GGUF model\n"
    "  -p, --prompt TEXT       prompt (default: empty, i.e. only BOS)\n"
    "  -f, --file FILE         read the prompt from FILE\n"
    "  -n, --n-predict N       tokens to generate (default 256)\n"
    "  -c, --ctx-size N        context length (default: the model's, at most 4096)\n"
    "  -t, --threads N         threads (default: all online CPUs)\n"
    "      --temp T            temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K           keep the K most likely tokens; 0 = off (default 40)\n"
    "      --top-p P           nucleus sampling; 1 = off (default 0.95)\n"
    "      --min-p P           drop tokens below P * max probability; 0 = off (default 0.05)\n"
    "      --repeat-penalty R  penalise repeated tokens; 1 = off (default 1)\n"
    "      --repeat-last-n N   window for the penalties; -1 = whole context (default 64)\n"
    "      --frequency-penalty F  (default 0)\n"
    "      --presence-penalty P   (default 0)\n"
    "      --seed S            random seed (default: from the clock, printed on stderr)\n"
    "      --no-bos            do not prepend BOS\n"
    "      --ignore-eos        keep generating after end-of-generation tokens\n"
    "      --mmap              map the model file instead of reading it into memory\n"
    "      --json              end the output with one JSON line: prompt_ids, ids, text,\n"
    "                          prefill_tok_s, decode_tok_s\n"
    "      --dump-logits FILE  write float32 logits of every evaluated position\n"
    "                          (row-major [positions x vocab])\n"
    "  -h, --help              this text\n";

typedef struct run_opts {
    const char *model;
    const char *prompt;
    const char *prompt_file;
    int64_t n_predict;
    int64_t n_ctx;
    int64_t n_threads;
    kite_sampler_params sp;
    bool seed_set;
    bool no_bos;
    bool ignore_eos;
    bool use_mmap;
    bool json;
    const char *dump_logits;
} run_opts;

/* Growable byte buffer for the generated text (JSON output). */
typedef struct text_buf {
    char *p;
    size_t len, cap;
} text_buf;

static bool text_append(text_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

static int parse_args(int argc, char **argv, run_opts *o) {
    const char *cmd = "run";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int64_t iv;
        float fv;
#define VALUE()                                                                \
    do {                                                                       \
        if (!(v = cli_value(cmd, argc, argv, &i))) return 2;                   \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_usage, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE();
            o->prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VALUE();
            o->prompt_file = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1 << 24, &o->n_predict)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1 << 20, &o->n_ctx)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1024, &o->n_threads)) return 2;
        } else if (!strcmp(a, "--temp")) {
            VALUE();
            if (!cli_parse_f32(cmd, a, v, 0.0f, 100.0f, &o->sp.temperature)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, 0, 1 << 30, &iv)) return 2;
            o->sp.top_k = (int32_t)iv;
        } else if (!strcmp(a, "--top-p")) {
            VALUE();
            if (!cli_parse_f32(cmd, a, v, 0.0f, 1.0f, &o->sp.top_p)) return 2;
        } else if (!strcmp(a, "--min-p")) {
            VALUE();
            if (!cli_parse_f32(cmd, a, v, 0.0f, 1.0f, &o->sp.min_p)) return 2;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VALUE();
            if (!cli_parse_f32(cmd, a, v, 0.0f, 100.0f, &fv)) return 2;
            if (!(fv > 0.0f)) return cli_usage_error(cmd, "%s: expected a number > 0 (1 = off), got '%s'", a, v);
            o->sp.repeat_penalty = fv;
        } else if (!strcmp(a, "--repeat-last-n")) {
            VALUE();
            if (!cli_parse_i64(cmd, a, v, -1, 1 << 20, &iv)) return 2;
            o->sp.penalty_last_n = (int32_t)iv;
        } else if (!strcmp(a, "--frequency-penalty")) {
            VALUE();
            if (!cli_parse_f32(cmd, a, v, -100.0f, 100.0f, &o->sp.frequency_penalty)) return 2;
        } else if (!strcmp(a, "--presence-penalty")) {
            VALUE();
            if (!cli_parse_f32(cmd, a, v, -100.0f, 100.0f, &o->sp.presence_penalty)) return 2;
        } else if (!strcmp(a, "--seed")) {
            VALUE();
            if (!cli_parse_u64(cmd, a, v, &o->sp.seed)) return 2;
            o->seed_set = true;
        } else if (!strcmp(a, "--no-bos")) {
            o->no_bos = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if (!strcmp(a, "--mmap")) {
            o->use_mmap = true;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--dump-logits")) {
            VALUE();
            o->dump_logits = v;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
#undef VALUE
    }
    if (o->prompt && o->prompt_file) return cli_usage_error(cmd, "give either -p or -f, not both");
    return 0;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    text_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (!text_append(&b, chunk, n)) {
            free(b.p);
            fclose(f);
            return NULL;
        }
    bool err = ferror(f);
    fclose(f);
    if (err || !text_append(&b, "", 0)) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* Writes the logits rows of the last eval (n rows) to the dump file. */
static bool dump_rows(FILE *f, const kite_ctx *ctx, int32_t n, int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++) {
        const float *l = kite_ctx_logits(ctx, i);
        if (!l || fwrite(l, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) return false;
    }
    return true;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.n_predict = 256, .sp = kite_sampler_default_params()};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.seed_set) o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (!o.model) o.model = cli_default_model(argv[0]);

    int status = 1;
    kite_model *model = NULL;
    kite_ctx *ctx = NULL;
    kite_sampler *smp = NULL;
    kite_detok *dt = NULL;
    kite_token *ids = NULL;
    char *prompt_buf = NULL;
    FILE *dump = NULL;
    text_buf gen_text = {0};

    size_t prompt_len = 0;
    const char *prompt = o.prompt ? o.prompt : "";
    prompt_len = strlen(prompt);
    if (o.prompt_file) {
        prompt_buf = read_all(o.prompt_file, &prompt_len);
        if (!prompt_buf) {
            fprintf(stderr, "kite run: cannot read prompt file '%s'\n", o.prompt_file);
            goto done;
        }
        prompt = prompt_buf;
    }

    double t0 = time_now_s();
    kite_model_params mp = kite_model_default_params();
    mp.use_mmap = o.use_mmap;
    if (kite_model_load(o.model, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite run: %s\n", kite_last_error());
        goto done;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = o.n_ctx ? (int32_t)o.n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    cp.n_threads = (int32_t)o.n_threads;
    if (kite_ctx_new(model, &cp, &ctx) != KITE_OK || kite_sampler_new(&o.sp, info.n_vocab, &smp) != KITE_OK ||
        kite_detok_new(model, &dt) != KITE_OK) {
        fprintf(stderr, "kite run: %s\n", kite_last_error());
        goto done;
    }
    double t_load = time_now_s() - t0;
    const int32_t n_ctx = kite_ctx_n_ctx(ctx);

    /* tokenize: BOS + prompt */
    size_t n_prompt = 0;
    size_t cap = prompt_len + 8;
    ids = malloc(sizeof *ids * (cap + (size_t)o.n_predict + 1));
    if (!ids) {
        fprintf(stderr, "kite run: out of memory\n");
        goto done;
    }
    if (kite_tokenize(model, prompt, prompt_len, !o.no_bos, ids, cap, &n_prompt) != KITE_OK) {
        fprintf(stderr, "kite run: %s\n", kite_last_error());
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "kite run: empty prompt and --no-bos: nothing to evaluate\n");
        goto done;
    }
    if ((int64_t)n_prompt > n_ctx) {
        fprintf(stderr, "kite run: the prompt has %zu tokens but the context holds only %d (raise -c)\n", n_prompt,
                n_ctx);
        goto done;
    }
    if (o.dump_logits && !(dump = fopen(o.dump_logits, "wb"))) {
        fprintf(stderr, "kite run: cannot open '%s' for writing\n", o.dump_logits);
        goto done;
    }

    /* print the prompt as the detokenizer renders it */
    char piece[8192];
    for (size_t i = 0; i < n_prompt; i++) {
        int n = kite_detok_push(dt, ids[i], piece, sizeof piece);
        if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
        kite_sampler_accept(smp, ids[i]);
    }
    fflush(stdout);

    /* prefill */
    double t1 = time_now_s();
    if (kite_ctx_eval(ctx, ids, (int32_t)n_prompt, dump != NULL) != KITE_OK) {
        fprintf(stderr, "kite run: %s\n", kite_last_error());
        goto done;
    }
    double t_prefill = time_now_s() - t1;
    if (dump && !dump_rows(dump, ctx, (int32_t)n_prompt, info.n_vocab)) goto dump_err;

    /* decode */
    const kite_token bos = kite_token_bos(model);
    size_t n_gen = 0;
    int64_t n_decode_evals = 0;
    double t_decode = 0.0;
    const char *stop_reason = "length";
    while ((int64_t)n_gen < o.n_predict) {
        kite_token t = kite_sampler_sample(smp, kite_ctx_logits(ctx, -1));
        if (!o.ignore_eos && (kite_token_is_eog(model, t) || (t == bos && bos >= 0))) {
            stop_reason = t == bos ? "bos" : "eog";
            break;
        }
        kite_sampler_accept(smp, t);
        ids[n_prompt + n_gen++] = t;
        int n = kite_detok_push(dt, t, piece, sizeof piece);
        if (n > 0) {
            fwrite(piece, 1, (size_t)n, stdout);
            fflush(stdout);
            if (o.json && !text_append(&gen_text, piece, (size_t)n)) goto oom;
        }
        if ((int64_t)n_gen == o.n_predict) break;
        if (kite_ctx_n_past(ctx) >= n_ctx) {
            stop_reason = "context";
            break;
        }
        double td = time_now_s();
        if (kite_ctx_eval(ctx, &t, 1, dump != NULL) != KITE_OK) {
            fprintf(stderr, "kite run: %s\n", kite_last_error());
            goto done;
        }
        t_decode += time_now_s() - td;
        n_decode_evals++;
        if (dump && !dump_rows(dump, ctx, 1, info.n_vocab)) goto dump_err;
    }
    {
        int n = kite_detok_flush(dt, piece, sizeof piece);
        if (n > 0) {
            fwrite(piece, 1, (size_t)n, stdout);
            if (o.json && !text_append(&gen_text, piece, (size_t)n)) goto oom;
        }
    }
    fputc('\n', stdout);
    fflush(stdout);

    const double prefill_tok_s = t_prefill > 0 ? (double)n_prompt / t_prefill : 0.0;
    const double decode_tok_s = t_decode > 0 ? (double)n_decode_evals / t_decode : 0.0;
    fprintf(stderr,
            "kite run: load %.1f ms, weights %s | prompt %zu tokens, %.1f ms, %.1f tok/s | generated %zu tokens (%" PRId64
            " decode steps, %.1f ms, %.1f tok/s) | stop: %s | threads %d | seed %" PRIu64 "\n",
            t_load * 1e3, info.residency, n_prompt, t_prefill * 1e3, prefill_tok_s, n_gen, n_decode_evals, t_decode * 1e3,
            decode_tok_s, stop_reason, kite_ctx_n_threads(ctx), o.sp.seed);
    if (o.json) {
        printf("{\"prompt_ids\": ");
        cli_json_ids(stdout, ids, n_prompt);
        printf(", \"ids\": ");
        cli_json_ids(stdout, ids + n_prompt, n_gen);
        printf(", \"text\": ");
        cli_json_string(stdout, gen_text.p ? gen_text.p : "", gen_text.len);
        printf(", \"prefill_tok_s\": %.3f, \"decode_tok_s\": %.3f, \"load_ms\": %.3f, \"stop\": \"%s\"}\n",
               prefill_tok_s, decode_tok_s, t_load * 1e3, stop_reason);
    }
    if (dump && fclose(dump) != 0) {
        dump = NULL;
        goto dump_err;
    }
    dump = NULL;
    status = 0;
    goto done;
dump_err:
    fprintf(stderr, "kite run: writing '%s' failed\n", o.dump_logits);
    goto done;
oom:
    fprintf(stderr, "kite run: out of memory\n");
done:
    if (dump) fclose(dump);
    free(gen_text.p);
    free(ids);
    free(prompt_buf);
    kite_detok_free(dt);
    kite_sampler_free(smp);
    kite_ctx_free(ctx);
    kite_model_free(model);
    return status;
}
