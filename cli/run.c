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
 *
 * With a drafter (--draft-model, --draft-skip-layers, --lookup, --lookahead) decoding goes
 * through the speculative decoder (src/spec, docs/spec.md): same output at
 * --temp 0, same distribution otherwise, and stderr gets its statistics.
 * --spec-compare first decodes plainly (silently) from the same prompt, then
 * speculatively, and prints both speeds and their ratio.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "kite.h"
#include "spec/spec.h"

typedef struct run_opts {
    const char *model;
    const char *prompt;
    const char *prompt_file;
    int64_t n_predict;
    int64_t n_ctx;
    int64_t n_threads;
    int32_t kv_type;         /* --kv-type, enum kite_kv_type */
    bool swa_full;           /* --swa-full: windowed layers keep every position (no ring) */
    kite_sampler_params sp;
    bool seed_set;
    bool no_bos;
    bool no_parse_special;   /* --no-parse-special: special-token text stays text */
    bool ignore_eos;
    bool use_mmap;
    uint64_t mem_budget;     /* --mem-budget: kite_model_params.mem_budget */
    bool json;
    const char *dump_logits;
    const char *draft_model; /* --draft-model */
    const char *draft_skip;  /* --draft-skip-layers LIST */
    int64_t lookup_n;        /* --lookup N; 0 = off */
    const char *lookahead;   /* --lookahead W,N,G, or NULL */
    int64_t draft_max;       /* --draft-max K */
    bool spec_compare;
    const char *grammar_file; /* --grammar-file F: GBNF */
    const char *grammar;      /* --grammar STR: GBNF */
    const char *json_schema;  /* --json-schema F|STR: a file, or inline when it starts with '{' */
    bool json_object;         /* --json-object: any JSON object */
    const char *logit_bias;   /* --logit-bias ID=BIAS[,ID=BIAS...] (parsed into bias[] by parse_args) */
    kite_logit_bias bias[256];
    const char *split_mode;   /* --split-mode none|tensor|layer (docs/distributed.md) */
    int64_t dist_timeout;     /* --dist-timeout S: the watchdog of a split run; 0 = off */
} run_opts;


static const cli_opt run_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(run_opts, model)},
    {.names = "-p, --prompt", .arg = "TEXT", .help = "prompt", .kind = CLI_STR, CLI_AT(run_opts, prompt),
     .def_doc = "empty, i.e. only BOS"},
    {.names = "-f, --file", .arg = "FILE", .help = "read the prompt from FILE", .kind = CLI_STR,
     CLI_AT(run_opts, prompt_file)},
    {.names = "-n, --n-predict", .arg = "N", .help = "tokens to generate", .kind = CLI_INT,
     CLI_AT(run_opts, n_predict), .min = 0, .max = 1 << 24, .def = "256"},
    {.names = "-c, --ctx-size", .arg = "N", .help = "context length", .kind = CLI_INT, CLI_AT(run_opts, n_ctx),
     .min = 0, .max = 1 << 20, .def_doc = "the model's, at most 4096"},
    {.names = "-t, --threads", .arg = "N", .help = "threads", .kind = CLI_INT, CLI_AT(run_opts, n_threads),
     .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    CLI_OPT_KV_TYPE(run_opts, kv_type, "KV cache type: f32, f16, q8_0 or q4_0\n(q8_0/q4_0 need head_dim % 32 == 0)"),
    {.names = "--swa-full", .help = "sliding-window models: keep every position of the windowed\nlayers "
     "instead of a ring of window + batch - 1 (same output)", .kind = CLI_FLAG, CLI_AT(run_opts, swa_full)},
    CLI_OPTS_SAMPLER(run_opts, sp, seed_set),
    {.names = "--no-bos", .help = "do not prepend BOS", .kind = CLI_FLAG, CLI_AT(run_opts, no_bos)},
    CLI_OPT_NO_PARSE_SPECIAL(run_opts, no_parse_special),
    {.names = "--ignore-eos", .help = "keep generating after end-of-generation tokens", .kind = CLI_FLAG,
     CLI_AT(run_opts, ignore_eos)},
    {.names = "--mmap", .help = "map the model file instead of reading it into memory", .kind = CLI_FLAG,
     CLI_AT(run_opts, use_mmap)},
    CLI_OPT_MEM_BUDGET(run_opts, mem_budget),
    CLI_OPT_F16_COMPUTE,
    CLI_OPT_SPLIT_MODE(run_opts, split_mode, dist_timeout),
    {.names = "--json",
     .help = "end the output with one JSON line: prompt_ids, ids, text,\nprefill_tok_s, decode_tok_s, kv_bytes",
     .kind = CLI_FLAG, CLI_AT(run_opts, json)},
    {.names = "--logit-bias", .arg = "ID=BIAS,...",
     .help = "add BIAS (-100..100) to token ID's logit; -100 bans it\n(OpenAI's logit_bias; up to 256 pairs)",
     .kind = CLI_STR, CLI_AT(run_opts, logit_bias), .example = "13=-100,42=2.5"},
    {.names = "--dump-logits", .arg = "FILE",
     .help = "write float32 logits of every evaluated position\n(row-major [positions x vocab])", .kind = CLI_STR,
     CLI_AT(run_opts, dump_logits)},
    {.kind = CLI_SECTION, .help = "Constrained output (docs/grammar.md; one of):"},
    {.names = "--grammar-file", .arg = "FILE", .help = "GBNF grammar file (llama.cpp syntax, start rule root)",
     .kind = CLI_STR, CLI_AT(run_opts, grammar_file)},
    {.names = "--grammar", .arg = "GBNF", .help = "GBNF grammar text", .kind = CLI_STR, CLI_AT(run_opts, grammar)},
    {.names = "--json-schema", .arg = "FILE|JSON",
     .help = "output valid against a JSON Schema (inline when it starts with '{')", .kind = CLI_STR,
     CLI_AT(run_opts, json_schema)},
    {.names = "--json-object", .help = "output is one JSON object (--json is the report line)", .kind = CLI_FLAG,
     CLI_AT(run_opts, json_object)},
    {.kind = CLI_SECTION,
     .help = "Speculative decoding (lossless: same output at --temp 0, same distribution otherwise):"},
    CLI_OPTS_DRAFT(run_opts, draft_model, draft_skip, lookup_n, lookahead, draft_max),
    {.names = "--spec-compare",
     .help = "decode plainly first (not printed), then speculatively;\nprint both speeds and the speedup",
     .kind = CLI_FLAG, CLI_AT(run_opts, spec_compare)},
};

const cli_spec cli_spec_run = {
    .cmd = "run",
    .usage = "usage: kite run [-m MODEL] [-p PROMPT | -f FILE] [options]\n"
             "\n"
             "Generates text.  Without -m, uses the bundled model (models/stories260K.gguf).\n",
    CLI_TABLE(run_opts_table, run_opts),
};

/* --logit-bias "ID=BIAS[,ID=BIAS...]" into o->bias / o->sp; 0 or a usage error.
 * Ids beyond the vocabulary are refused by kite_sampler_new, naming the id. */
static int parse_logit_bias(run_opts *o) {
    const char *p = o->logit_bias;
    int32_t n = 0;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9') goto bad;
        long long id = strtoll(p, &end, 10);
        if (*end != '=' || id > INT32_MAX) goto bad;
        p = end + 1;
        double b = strtod(p, &end);
        if (end == p || !isfinite(b) || b < -100.0 || b > 100.0 || (*end && *end != ',')) goto bad;
        if (n == (int32_t)(sizeof o->bias / sizeof o->bias[0]))
            return cli_usage_error("run", "--logit-bias: at most %d pairs", n);
        o->bias[n++] = (kite_logit_bias){(kite_token)id, (float)b};
        p = *end ? end + 1 : end;
    }
    o->sp.logit_bias = o->bias;
    o->sp.n_logit_bias = n;
    return 0;
bad:
    return cli_usage_error("run", "--logit-bias expects ID=BIAS[,ID=BIAS...] with token ids and biases in "
                                  "[-100, 100], got '%s'", o->logit_bias);
}

/* cli_parse, then the checks across options; -1: go on, else the exit status. */
static int parse_args(int argc, char **argv, run_opts *o) {
    const char *cmd = "run";
    int rc = cli_parse(&cli_spec_run, argc, argv, o);
    if (rc >= 0) return rc;
    if (o->prompt && o->prompt_file) return cli_usage_error(cmd, "give either -p or -f, not both");
    const int n_drafters =
        (o->draft_model != NULL) + (o->draft_skip != NULL) + (o->lookup_n > 0) + (o->lookahead != NULL);
    if (n_drafters > 1)
        return cli_usage_error(cmd, "give at most one of --draft-model, --draft-skip-layers, --lookup and --lookahead");
    if (n_drafters == 0 && (o->spec_compare || o->draft_max))
        return cli_usage_error(cmd, "--spec-compare and --draft-max need a drafter (--draft-model, "
                                    "--draft-skip-layers, --lookup or --lookahead)");
    if (n_drafters && o->dump_logits)
        return cli_usage_error(cmd, "--dump-logits is not available with speculative decoding");
    const int n_grammars = (o->grammar_file != NULL) + (o->grammar != NULL) + (o->json_schema != NULL) + o->json_object;
    if (n_grammars > 1)
        return cli_usage_error(cmd, "give at most one of --grammar-file, --grammar, --json-schema and --json-object");
    if (o->logit_bias && (rc = parse_logit_bias(o)) != 0) return rc;
    if (o->split_mode && strcmp(o->split_mode, "none") && (n_drafters || o->spec_compare))
        return cli_usage_error(cmd, "speculative decoding is not available with --split-mode yet");
    return -1;
}

/* Writes the logits rows of the last eval (n rows) to the dump file. */
static bool dump_rows(FILE *f, const kite_ctx *ctx, int32_t n, int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++) {
        const float *l = kite_ctx_logits(ctx, i);
        if (!l || fwrite(l, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) return false;
    }
    return true;
}

/* Plain decoding of up to n_predict tokens after the prompt, printing
 * nothing: the reference speed of --spec-compare (tokens per second from
 * the end of prefill to the last token).  Leaves ctx empty, smp reset and
 * gen's detokenizer as new. */
static int plain_reference(kite_ctx *ctx, kite_sampler *smp, kite_gen *gen, const kite_grammar *grammar,
                           const kite_token *prompt, size_t n_prompt, int64_t n_predict, bool ignore_eos,
                           double *tok_s, int64_t *n_out) {
    kite_gen_params gp = kite_gen_default_params();
    gp.sampler = smp;
    gp.n_predict = n_predict;
    gp.n_ctx = kite_ctx_n_ctx(ctx);
    gp.ignore_eos = ignore_eos;
    gp.grammar = grammar;
    int rc = kite_gen_begin(gen, &gp, (int32_t)n_prompt);
    int64_t n = 0;
    for (size_t i = 0; i < n_prompt; i++) kite_sampler_accept(smp, prompt[i]);
    if (rc == KITE_OK) rc = kite_ctx_eval(ctx, prompt, (int32_t)n_prompt, false);
    double t0 = time_now_s();
    while (rc == KITE_OK && kite_gen_stopped(gen) == KITE_STOP_NONE) {
        kite_gen_step st;
        if ((rc = kite_gen_sample(gen, kite_ctx_logits(ctx, -1), &st)) != KITE_OK) break;
        n = st.n_gen;
        if (st.stop != KITE_STOP_NONE) break;
        rc = kite_ctx_eval(ctx, &st.token, 1, false);
    }
    double dt = time_now_s() - t0;
    *tok_s = dt > 0 ? (double)n / dt : 0.0;
    *n_out = n;
    const char *tail;
    size_t n_tail;
    kite_gen_flush(gen, &tail, &n_tail);
    kite_ctx_truncate(ctx, 0);
    kite_sampler_reset(smp);
    return rc;
}

/* Creates the speculative decoder for the drafter o asks for (loading the
 * draft model into *draft); prints the error and returns non-zero on failure. */
static int spec_setup(const run_opts *o, kite_model *model, kite_ctx *ctx, kite_model **draft, spec_decoder **sd) {
    kite_model_info info;
    kite_model_get_info(model, &info);
    spec_params sp = spec_default_params();
    sp.seed = o->sp.seed ^ 0x5EC5EC5EC5EC5ECull;
    if (o->draft_max) sp.draft_max = (int32_t)o->draft_max;
    bool *skip = NULL;
    int rc = KITE_OK;
    if (o->draft_model) {
        kite_model_params mp = config_model_params();
        mp.use_mmap = o->use_mmap;
        if ((rc = kite_model_load(o->draft_model, &mp, draft)) != KITE_OK) goto fail;
        sp.drafter = SPEC_DRAFT_MODEL;
        sp.draft_model = *draft;
    } else if (o->draft_skip) {
        skip = calloc((size_t)info.n_layer, sizeof *skip);
        if (!skip) {
            fprintf(stderr, "kite run: out of memory\n");
            return 1;
        }
        if ((rc = spec_parse_layers(o->draft_skip, info.n_layer, skip)) != KITE_OK) goto fail;
        sp.drafter = SPEC_DRAFT_SELF;
        sp.skip_layers = skip;
        sp.n_skip = info.n_layer;
    } else if (o->lookahead) {
        sp.drafter = SPEC_DRAFT_LOOKAHEAD;
        if ((rc = spec_parse_lookahead(o->lookahead, &sp)) != KITE_OK) goto fail;
    } else {
        sp.drafter = SPEC_DRAFT_LOOKUP;
        sp.lookup_n = (int32_t)o->lookup_n;
    }
    rc = spec_new(ctx, &o->sp, &sp, sd);
fail:
    free(skip);
    if (rc != KITE_OK) fprintf(stderr, "kite run: %s\n", kite_last_error());
    return rc != KITE_OK;
}

/* One `kite run`: the handles and figures its stages share (run_open,
 * run_prefill, run_decode, run_report, run_close). */
typedef struct run_session {
    run_opts *o;
    kite_model *model;
    kite_ctx *ctx;
    kite_sampler *smp;
    kite_gen *gen;
    kite_model *draft;   /* --draft-model */
    spec_decoder *sd;    /* NULL: plain decoding */
    kite_grammar *grammar; /* --grammar*, --json-schema, --json-object, or NULL */
    kite_model_info info;
    int32_t n_ctx;
    kite_token *ids;     /* [n_prompt + n_predict + 1]: the prompt, then the generated ids */
    size_t n_prompt, n_gen;
    char *prompt_buf;    /* -f FILE */
    FILE *dump;          /* --dump-logits */
    cli_text text;       /* the generated text, for --json */
    int64_t n_decode_evals;
    double t_load, t_prefill, t_decode; /* seconds */
    double ref_tok_s;    /* --spec-compare: plain decoding's speed and tokens */
    int64_t ref_tokens;
    bool follower;       /* a rank > 0 of a tensor split: runs rank 0's passes (kite_ctx_follow) */
} run_session;

/* Prints the library's last error; returns 1 (the exit status). */
static int run_fail(void) {
    fprintf(stderr, "kite run: %s\n", kite_last_error());
    return 1;
}

/* Compiles the grammar the options ask for; returns 0, or 1 after printing the error. */
static int run_grammar(run_session *s) {
    const run_opts *o = s->o;
    int kind = KITE_GRAMMAR_GBNF;
    const char *text = NULL, *path = NULL;
    if (o->grammar_file) path = o->grammar_file;
    else if (o->grammar) text = o->grammar;
    else if (o->json_object) kind = KITE_GRAMMAR_JSON_OBJECT;
    else if (o->json_schema) {
        kind = KITE_GRAMMAR_JSON_SCHEMA;
        const char *p = o->json_schema;
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        if (*p == '{') text = o->json_schema;
        else path = o->json_schema;
    } else {
        return 0;
    }
    char *buf = NULL;
    size_t len = text ? strlen(text) : 0;
    if (path && !(buf = cli_read_file(path, &len))) {
        fprintf(stderr, "kite run: cannot read '%s'\n", path);
        return 1;
    }
    int rc = kite_grammar_new(s->model, kind, buf ? buf : text, len, &s->grammar);
    free(buf);
    return rc != KITE_OK ? run_fail() : 0;
}

/* Reads the prompt, loads the model and its context, sampler and generator,
 * tokenizes BOS + prompt, opens --dump-logits and sets up speculation.
 * Returns 0, or 1 after printing the error. */
static int run_open(run_session *s) {
    run_opts *o = s->o;
    const char *prompt = o->prompt ? o->prompt : "";
    size_t prompt_len = strlen(prompt);
    if (o->prompt_file) {
        s->prompt_buf = cli_read_file(o->prompt_file, &prompt_len);
        if (!s->prompt_buf) {
            fprintf(stderr, "kite run: cannot read prompt file '%s'\n", o->prompt_file);
            return 1;
        }
        prompt = s->prompt_buf;
    }
    const double t0 = time_now_s();
    kite_model_params mp = config_model_params();
    mp.use_mmap = o->use_mmap;
    mp.mem_budget = o->mem_budget;
    const int split = cli_split_mode("run", o->split_mode, (double)o->dist_timeout, &mp);
    if (split >= 0) return split;
    if (kite_model_load(o->model, &mp, &s->model) != KITE_OK) return run_fail();
    kite_model_get_info(s->model, &s->info);
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = o->n_ctx ? (int32_t)o->n_ctx : (s->info.n_ctx_train < 4096 ? s->info.n_ctx_train : 4096);
    cli_warn_ctx("run", o->n_ctx, s->info.n_ctx_train);
    cp.n_threads = (int32_t)o->n_threads;
    cp.kv_type = o->kv_type;
    cp.swa_full = o->swa_full;
    if (kite_ctx_new(s->model, &cp, &s->ctx) != KITE_OK ||
        kite_sampler_new(&o->sp, s->info.n_vocab, &s->smp) != KITE_OK || kite_gen_new(s->model, &s->gen) != KITE_OK)
        return run_fail();
    s->follower = mp.tp_size > 1 && mp.tp_rank > 0;
    if (s->follower) return 0; /* tensor split: this rank computes its share of rank 0's passes, nothing else */
    if (run_grammar(s)) return 1;
    s->t_load = time_now_s() - t0;
    s->n_ctx = kite_ctx_n_ctx(s->ctx);

    const size_t cap = prompt_len + 8;
    s->ids = malloc(sizeof *s->ids * (cap + (size_t)o->n_predict + 1));
    if (!s->ids) {
        fprintf(stderr, "kite run: out of memory\n");
        return 1;
    }
    if (cli_tokenize_text(s->model, prompt, prompt_len, !o->no_bos, !o->no_parse_special, s->ids, cap,
                          &s->n_prompt) != KITE_OK)
        return run_fail();
    if (s->n_prompt == 0) /* a usage error (exit 2), found only once the prompt is tokenized */
        return cli_usage_error("run", "empty prompt and --no-bos: nothing to evaluate");
    if ((int64_t)s->n_prompt > s->n_ctx) {
        fprintf(stderr, "kite run: the prompt has %zu tokens but the context holds only %d (raise -c)\n", s->n_prompt,
                s->n_ctx);
        return 1;
    }
    if (o->dump_logits && !(s->dump = fopen(o->dump_logits, "wb"))) {
        fprintf(stderr, "kite run: cannot open '%s' for writing\n", o->dump_logits);
        return 1;
    }
    const bool use_spec = o->draft_model || o->draft_skip || o->lookup_n > 0 || o->lookahead;
    if (use_spec && spec_setup(o, s->model, s->ctx, &s->draft, &s->sd)) return 1;
    /* drafts checked against the grammar, every verified row masked (spec.h) */
    if (s->sd && s->grammar && spec_set_grammar(s->sd, s->grammar, o->ignore_eos) != KITE_OK) return run_fail();
    if (o->spec_compare && plain_reference(s->ctx, s->smp, s->gen, s->grammar, s->ids, s->n_prompt, o->n_predict,
                                           o->ignore_eos, &s->ref_tok_s, &s->ref_tokens) != KITE_OK)
        return run_fail();
    return 0;
}

/* Prints the prompt as the detokenizer renders it, then evaluates it
 * (speculative: all but the last prompt token, which the first
 * verification pass evaluates).  Returns 0 or 1. */
static int run_prefill(run_session *s) {
    kite_gen_step step;
    for (size_t i = 0; i < s->n_prompt; i++) {
        if (kite_gen_echo(s->gen, s->ids[i], &step) == KITE_OK) fwrite(step.text, 1, step.len, stdout);
        kite_sampler_accept(s->smp, s->ids[i]);
    }
    fflush(stdout);
    const double t1 = time_now_s();
    if (s->sd ? spec_begin(s->sd, s->ids, (int32_t)s->n_prompt) != KITE_OK
              : kite_ctx_eval(s->ctx, s->ids, (int32_t)s->n_prompt, s->dump != NULL) != KITE_OK)
        return run_fail();
    s->t_prefill = time_now_s() - t1;
    if (s->dump && !dump_rows(s->dump, s->ctx, (int32_t)s->n_prompt, s->info.n_vocab)) {
        fprintf(stderr, "kite run: writing '%s' failed\n", s->o->dump_logits);
        return 1;
    }
    return 0;
}

/* run_decode_* results besides the library's statuses (which are <= 0). */
enum { RUN_E_TEXT = 1 /* out of memory for the --json text */, RUN_E_DUMP = 2 /* --dump-logits write failed */ };

/* Writes an output token's text to stdout (and to the --json text). */
static bool run_emit(run_session *s, const kite_gen_step *step) {
    s->ids[s->n_prompt + s->n_gen++] = step->token;
    if (step->len == 0) return true;
    fwrite(step->text, 1, step->len, stdout);
    return !s->o->json || cli_text_append(&s->text, step->text, step->len);
}

/* Speculative decoding: every verification pass's tokens through kite_gen's
 * stop rules (the decoder keeps its own sampler).  Returns KITE_OK,
 * RUN_E_TEXT or the library's status. */
static int run_decode_spec(run_session *s) {
    kite_gen_step step;
    while (kite_gen_stopped(s->gen) == KITE_STOP_NONE) {
        kite_token out[SPEC_MAX_DRAFT + 1];
        int32_t got = 0;
        const double td = time_now_s();
        int rc = spec_step(s->sd, (int32_t)(s->o->n_predict - (int64_t)s->n_gen), out, &got);
        if (rc != KITE_OK) return rc;
        s->t_decode += time_now_s() - td;
        for (int32_t i = 0; i < got && kite_gen_stopped(s->gen) == KITE_STOP_NONE; i++) {
            if ((rc = kite_gen_push(s->gen, out[i], &step)) != KITE_OK) return rc;
            if (!step.output) break;
            if (!run_emit(s, &step)) return RUN_E_TEXT;
        }
        fflush(stdout);
    }
    return KITE_OK;
}

/* Plain decoding: sample, output, evaluate the token, until a stop rule
 * (the last token is not evaluated).  Returns as run_decode_spec. */
static int run_decode_plain(run_session *s) {
    kite_gen_step step;
    while (kite_gen_stopped(s->gen) == KITE_STOP_NONE) {
        int rc = kite_gen_sample(s->gen, kite_ctx_logits(s->ctx, -1), &step);
        if (rc != KITE_OK) return rc;
        if (!step.output) break;
        if (!run_emit(s, &step)) return RUN_E_TEXT;
        if (step.len > 0) fflush(stdout);
        if (step.stop != KITE_STOP_NONE) break;
        const double td = time_now_s();
        if ((rc = kite_ctx_eval(s->ctx, &step.token, 1, s->dump != NULL)) != KITE_OK) return rc;
        s->t_decode += time_now_s() - td;
        s->n_decode_evals++;
        if (s->dump && !dump_rows(s->dump, s->ctx, 1, s->info.n_vocab)) return RUN_E_DUMP;
    }
    return KITE_OK;
}

/* Generates under kite_gen's stop rules, then the detokenizer's tail and a
 * newline.  Returns 0 or 1 after printing the error. */
static int run_decode(run_session *s) {
    kite_gen_params gp = kite_gen_default_params();
    gp.sampler = s->sd ? NULL : s->smp;
    gp.n_predict = s->o->n_predict;
    gp.n_ctx = s->n_ctx;
    gp.ignore_eos = s->o->ignore_eos;
    gp.grammar = s->grammar;
    if (kite_gen_begin(s->gen, &gp, (int32_t)s->n_prompt) != KITE_OK) return run_fail();
    int rc = s->sd ? run_decode_spec(s) : run_decode_plain(s);
    const char *tail;
    size_t n_tail = 0;
    if (rc == KITE_OK && kite_gen_flush(s->gen, &tail, &n_tail) == KITE_OK && n_tail > 0) {
        fwrite(tail, 1, n_tail, stdout);
        if (s->o->json && !cli_text_append(&s->text, tail, n_tail)) rc = RUN_E_TEXT;
    }
    if (rc == RUN_E_TEXT) fprintf(stderr, "kite run: out of memory\n");
    else if (rc == RUN_E_DUMP) fprintf(stderr, "kite run: writing '%s' failed\n", s->o->dump_logits);
    else if (rc != KITE_OK) run_fail();
    if (rc != KITE_OK) return 1;
    fputc('\n', stdout);
    fflush(stdout);
    return 0;
}

/* The statistics lines on stderr and the --json line on stdout. */
static void run_report(run_session *s) {
    const run_opts *o = s->o;
    const char *stop_reason = kite_stop_name(kite_gen_stopped(s->gen));
    const double prefill_tok_s = s->t_prefill > 0 ? (double)s->n_prompt / s->t_prefill : 0.0;
    /* speculative: every generated token came out of a timed step */
    const double decode_tok_s =
        s->t_decode > 0 ? (double)(s->sd ? (int64_t)s->n_gen : s->n_decode_evals) / s->t_decode : 0.0;
    if (s->sd) s->n_decode_evals = spec_get_stats(s->sd)->n_steps;
    char repacked[64] = "";
    if (s->info.n_repacked > 0)
        snprintf(repacked, sizeof repacked, " (%d matrices repacked, %.0f ms)", s->info.n_repacked,
                 s->info.repack_ms);
    fprintf(stderr,
            "kite run: load %.1f ms, weights %s%s | prompt %zu tokens, %.1f ms, %.1f tok/s | generated %zu tokens (%" PRId64
            " decode steps, %.1f ms, %.1f tok/s) | stop: %s | threads %d | seed %" PRIu64 "\n",
            s->t_load * 1e3, s->info.residency, repacked, s->n_prompt, s->t_prefill * 1e3, prefill_tok_s, s->n_gen,
            s->n_decode_evals, s->t_decode * 1e3, decode_tok_s, stop_reason, kite_ctx_n_threads(s->ctx), o->sp.seed);
    if (s->info.mem_budget > 0) {
        kite_offload_stats st;
        kite_model_offload_stats(s->model, &st);
        fprintf(stderr,
                "kite run: --mem-budget %.1f MiB: %d of %d layers resident, %.1f MiB of weights held (ring %.1f MiB), "
                "%.1f MB streamed%s over %" PRIu64 " passes\n",
                (double)s->info.mem_budget / 1048576.0, s->info.n_resident_layers, s->info.n_layer,
                (double)s->info.resident_bytes / 1048576.0, (double)s->info.ring_bytes / 1048576.0,
                (double)st.bytes_read / 1e6, st.direct ? " (O_DIRECT)" : "", st.n_passes);
    }
    if (s->info.tp_size > 1)
        fprintf(stderr, "kite run: tensor split over %d ranks: rank 0 holds %.1f MiB of copies (its share of the layers' "
                "%.1f MiB, and the classifier; file %.1f MiB), peak resident %.1f MiB\n", s->info.tp_size,
                (double)s->info.n_bytes_split / (1 << 20), (double)s->info.n_bytes_layers / (1 << 20),
                (double)s->info.n_bytes / (1 << 20), (double)cli_peak_rss_bytes() / (1 << 20));
    if (s->info.sliding_window > 0)
        fprintf(stderr, "kite run: KV cache %.2f MiB for %d positions (window %d on %d of %d layers%s)\n",
                (double)kite_ctx_kv_bytes(s->ctx) / (1 << 20), s->n_ctx, s->info.sliding_window,
                s->info.n_swa_layers, s->info.n_layer, o->swa_full ? ", --swa-full" : "");
    double accept_rate = 0.0, tok_per_pass = 0.0;
    if (s->sd) {
        const spec_stats *st = spec_get_stats(s->sd);
        accept_rate = st->n_drafted ? (double)st->n_accepted / (double)st->n_drafted : 0.0;
        tok_per_pass = st->n_steps ? (double)st->n_generated / (double)st->n_steps : 0.0;
        fprintf(stderr,
                "kite run: speculative (%s): %" PRId64 " verification passes, %.2f tokens/pass | acceptance %.1f%% "
                "(%" PRId64 " of %" PRId64 " drafted) | draft %.1f ms, verify %.1f ms | %.1f tok/s\n",
                o->draft_model  ? "draft model"
                : o->draft_skip ? "self, layers skipped"
                : o->lookahead  ? "lookahead"
                                : "prompt lookup",
                st->n_steps, tok_per_pass, 100.0 * accept_rate, st->n_accepted, st->n_drafted, st->t_draft_s * 1e3,
                st->t_verify_s * 1e3, decode_tok_s);
        if (o->spec_compare)
            fprintf(stderr,
                    "kite run: spec-compare: plain %.1f tok/s (%" PRId64 " tokens), speculative %.1f tok/s (%zu tokens), "
                    "speedup %.2fx\n",
                    s->ref_tok_s, s->ref_tokens, decode_tok_s, s->n_gen,
                    s->ref_tok_s > 0 ? decode_tok_s / s->ref_tok_s : 0.0);
    }
    if (!o->json) return;
    printf("{\"prompt_ids\": ");
    cli_json_ids(stdout, s->ids, s->n_prompt);
    printf(", \"ids\": ");
    cli_json_ids(stdout, s->ids + s->n_prompt, s->n_gen);
    printf(", \"text\": ");
    cli_json_string(stdout, s->text.p ? s->text.p : "", s->text.len);
    printf(", \"prefill_tok_s\": %.3f, \"decode_tok_s\": %.3f, \"load_ms\": %.3f, \"stop\": \"%s\"", prefill_tok_s,
           decode_tok_s, s->t_load * 1e3, stop_reason);
    if (s->sd) printf(", \"spec_accept_rate\": %.4f, \"spec_tokens_per_pass\": %.4f", accept_rate, tok_per_pass);
    if (o->spec_compare) printf(", \"plain_decode_tok_s\": %.3f", s->ref_tok_s);
    printf(", \"kv_bytes\": %" PRId64 "}\n", kite_ctx_kv_bytes(s->ctx));
}

static void run_close(run_session *s) {
    if (s->dump) fclose(s->dump);
    free(s->text.p);
    free(s->ids);
    free(s->prompt_buf);
    kite_gen_free(s->gen);
    kite_grammar_free(s->grammar);
    kite_sampler_free(s->smp);
    spec_free(s->sd);
    kite_ctx_free(s->ctx);
    kite_model_free(s->draft);
    kite_model_free(s->model);
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.sp = kite_sampler_default_params()};
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.seed_set) o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (!o.model) o.model = cli_default_model(argv[0]);
    run_session s = {.o = &o};
    int status = run_open(&s); /* 2 for a usage error found late (empty prompt with --no-bos) */
    if (!status && s.follower) {
        status = kite_ctx_follow(s.ctx) != KITE_OK ? run_fail() : 0;
        run_close(&s);
        return status;
    }
    if (!status) status = run_prefill(&s) || run_decode(&s);
    if (!status) {
        run_report(&s);
        FILE *dump = s.dump;
        s.dump = NULL;
        if (dump && fclose(dump) != 0) {
            fprintf(stderr, "kite run: writing '%s' failed\n", o.dump_logits);
            status = 1;
        }
    }
    run_close(&s);
    return status;
}
