/*
 * cli.h - subcommands of the kite CLI and shared argument parsing.
 *
 * The CLI drives the library through the public API (include/kite.h) where
 * that API covers the job (run, chat, tokenize, ppl).  The tool commands go
 * further and use the library's internal module headers directly, as
 * llama.cpp's tools use ggml's: the serving engine (engine/), speculative
 * decoding (spec/), the kernel table and tune table (kernels/), the
 * quantizers (quant/), the tensor role names (model/arch.h), the roofline,
 * probe and synthetic models (roofline/), the GGUF reader/writer (gguf/),
 * and the tools/ modules (http/, convert/, config/: the environment and
 * cache files, read once in main.c).
 * Those headers are internal: they may change with the library, and
 * programs outside this tree should use kite.h.  Each subcommand lives
 * in cli/<name>.c and returns the process exit status: 0 success, 1 runtime
 * failure (bad file, ...), 2 usage error.  Errors are one line on stderr,
 * "kite <cmd>: <what>".
 */
#ifndef KITE_CLI_H
#define KITE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "kite.h"

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_roofline(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_quantize_w8(int argc, char **argv); /* quantize_w8.c: --method smoothquant|outliers */
int cmd_serve(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_imatrix(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_sot(int argc, char **argv);
int cmd_tune(int argc, char **argv); /* tune.c: matmul variant table for this machine */
int cmd_embed(int argc, char **argv);
/* `kite bench --lut-gemm` (cli/bench_lut.c): LUT-GEMM vs dequantize-then-multiply. */
int bench_lut_gemm(int argc, char **argv);
/* `kite bench --parallel LIST` (cli/bench_serve.c): serving-engine throughput and KV waste. */
int bench_serve(int argc, char **argv);
/* `kite bench --spec-verify` / `--spec DRAFTER` (cli/bench_spec.c): speculative decoding. */
int bench_spec(int argc, char **argv);
/* `kite bench --attn-ctx LIST` (cli/bench_attn.c): split-KV decode attention by unified-max mode. */
int bench_attn(int argc, char **argv);
/* Fills ctx's KV cache with n_pos positions for a benchmark at depth (kite bench -d): a real prefill of
 * the first P of toks (P <= n_pos), then positions P.. n_pos - 1 repeat those rows (cli/bench_attn.c);
 * n_past is n_pos after it.  KITE_E_UNSUPPORTED for a cache with a sliding-window ring. */
int bench_fill_cache(kite_ctx *ctx, const kite_token *toks, int32_t P, int32_t n_pos);
/* `kite convert --hf DIR` (cli/convert_hf.c): a Hugging Face directory. */
int convert_hf(int argc, char **argv);

/* Path of the bundled model: $KITE_MODEL, else <binary dir>/../models/
 * stories260K.gguf (build/kite in the repository), else the source tree the
 * binary was built from, else the relative path models/stories260K.gguf. */
const char *cli_default_model(const char *argv0);

/* Strict numeric parsing of flag values: the whole string must be a number in
 * [lo, hi].  On failure prints "kite CMD: FLAG: ..." and returns false. */
bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f32(const char *cmd, const char *flag, const char *s, float lo, float hi, float *out);

/* Growable NUL-terminated byte buffer (generated text for --json and kite batch); zero-init
 * is empty, free(p) releases it.  cli_text_append: false on out of memory (b unchanged). */
typedef struct cli_text {
    char *p;
    size_t len, cap;
} cli_text;
bool cli_text_append(cli_text *b, const char *s, size_t n);
/* All of f (cli_read_stream) or of the file at path (cli_read_file; "-" is
 * standard input) in a malloc'd NUL-terminated buffer, *len its length without
 * the NUL; NULL on a read error or out of memory (errno says which for open). */
char *cli_read_stream(FILE *f, size_t *len);
char *cli_read_file(const char *path, size_t *len);
bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);

/* Median of v[0..n) (sorts v in place); 0 for n <= 0. */
double cli_median(double *v, int n);

/* Parses a comma-separated list of integers in [lo, hi] ("1,2,4") into
 * out[0..cap); returns the count, or -1 after printing a usage error. */
int cli_parse_i64_list(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out,
                       int cap);

/* ---- option tables --------------------------------------------------------
 *
 * DESIGN
 *   Each subcommand declares its options once, as rows of a cli_opt table
 *   (spellings, kind, range, default, help) in a cli_spec; cli_parse turns
 *   argv into the command's state struct from it, and cli_usage prints the
 *   --help text from the same rows, so a flag, its accepted values and its
 *   default are written in one place.  Rows address their field by offset
 *   (CLI_AT(T, field), nested fields allowed: CLI_AT(T, sp.seed)).
 *   Parsing: first every row's .def is parsed into its field, exactly as if
 *   it had been given (so defaults obey the ranges), then argv from left to
 *   right; a value-taking option takes the next argument whatever it looks
 *   like; -h / --help prints the usage on stdout and ends parsing.  Checks
 *   across options (required ones, exclusions) stay in the command, after
 *   cli_parse.
 * INVARIANTS
 *   Every error is one line on stderr, "kite CMD: ... (see 'kite CMD --help')",
 *   and makes cli_parse return 2.  The kinds and the messages are those the
 *   commands printed before tables (tests/e2e check them).
 *   tests/unit/test_cli_opts.c feeds every row of every table (cli_specs) a
 *   valid value (.example for CLI_FN rows) and checks --help lists it.
 */
typedef enum cli_kind {
    CLI_FLAG,    /* bool field set to true; no value */
    CLI_INT,     /* int32_t or int64_t field (by size): an integer in [min, max] */
    CLI_U64,     /* uint64_t field: any non-negative integer */
    CLI_FLOAT,   /* float field: a finite number in [fmin, fmax] */
    CLI_STR,     /* const char * field: the argument itself (a path, a name, a text) */
    CLI_ENUM,    /* int32_t field: values[k] for the k-th of choices (case-insensitive with icase) */
    CLI_LIST,    /* int32_t array field: comma-separated integers in [min, max]; their count in count_off */
    CLI_FN,      /* fn handles it (nargs values; CLI_NARGS_REST: whatever follows) */
    CLI_SECTION, /* not an option: a heading (help) in the --help text */
} cli_kind;

#define CLI_NARGS_REST (-1)

typedef struct cli_opt cli_opt;
struct cli_opt {
    const char *names;           /* every spelling, ", "-separated ("-c, --ctx-size"); the first names
                                    the option in list and enum messages */
    const char *arg;             /* the value's name in --help ("N"), NULL for none */
    const char *help;            /* '\n' starts a continuation line; one "%s" is replaced by choices_fn() */
    cli_kind kind;
    size_t off, size;            /* the field: CLI_AT(T, field) */
    int64_t min, max;            /* CLI_INT, CLI_LIST */
    float fmin, fmax;            /* CLI_FLOAT */
    const char *def;             /* default, parsed into the field before argv; "(default DEF)" */
    const char *def_doc;         /* default in words, nothing parsed: "(default: DEF_DOC)" */
    bool show_default;           /* "(default X)" with X the field's value before parsing (library defaults) */
    bool icase;                  /* CLI_ENUM: case-insensitive names */
    const char *const *choices;  /* CLI_ENUM: names, NULL-terminated */
    const int32_t *values;       /* CLI_ENUM: the value of each name */
    size_t count_off;            /* CLI_LIST: offset of its int count (CLI_COUNT(T, f)) */
    size_t seen;                 /* CLI_SEEN(T, f): a bool set when the option is given (offset + 1) */
    int nargs;                   /* CLI_FN: values taken (0, 1, 2) or CLI_NARGS_REST */
    /* CLI_FN: handles the option (spelled flag) with vals[0..n); returns how many values it took
     * (CLI_NARGS_REST; fixed nargs: any count >= 0), or -1 after printing a usage error.
     * Other kinds: an extra check, called with the one value after it is stored in the field
     * (not for .def); -1 (after printing the error) rejects it. */
    int (*fn)(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n);
    const char *(*choices_fn)(void); /* replaces "%s" in help */
    const char *example;         /* a valid value for tests/unit/test_cli_opts.c (rows with .fn) */
};

#define CLI_AT(T, f) .off = offsetof(T, f), .size = sizeof(((T *)0)->f)
#define CLI_COUNT(T, f) .count_off = offsetof(T, f)
#define CLI_SEEN(T, f) .seen = offsetof(T, f) + 1
#define CLI_XSTR_(x) #x
#define CLI_XSTR(x) CLI_XSTR_(x) /* a numeric macro as a string, for help texts and defaults */
#define CLI_N(a) (sizeof(a) / sizeof((a)[0]))
/* In a cli_spec: the rows and the state type they fill. */
#define CLI_TABLE(rows, T) .opts = rows, .n_opts = CLI_N(rows), .state_size = sizeof(T)

typedef struct cli_spec {
    const char *cmd;           /* "run": messages say "kite run: ..." */
    const char *usage;         /* --help: the usage lines and the description, printed first */
    const char *epilog;        /* --help: printed after the options, or NULL */
    const cli_opt *opts;
    size_t n_opts;
    size_t state_size;         /* sizeof the state struct (defaults shown by --help are a copy) */
    const char *unknown;       /* an unknown option: "UNKNOWN 'ARG'UNKNOWN_TAIL"; NULL: "unknown option" */
    const char *unknown_tail;
    /* Arguments no row matches (positionals); NULL: the unknown-option error.  May take more of
     * argv by advancing *i; returns 0, or 2 after printing a usage error. */
    int (*other)(void *state, const char *cmd, int argc, char **argv, int *i);
} cli_spec;

/* Parses argv[1..argc) into state (see DESIGN above).  Returns -1 when the
 * command should go on, else its exit status: 0 after --help, 2 after a
 * usage error.  state is left partly filled on error. */
int cli_parse(const cli_spec *s, int argc, char **argv, void *state);

/* The --help text of s; defaults (a state after the command's initialiser
 * and the rows' .def) gives the show_default values, NULL omits them. */
void cli_usage(FILE *f, const cli_spec *s, const void *defaults);

/* The index of the first argv[1..argc) equal to name, else 0: how a command
 * finds the flag that hands the arguments to another table's mode. */
int cli_find_arg(int argc, char **argv, const char *name);

/* True if arg is spelled like an option ("-x...", not "-" alone). */
bool cli_is_option(const char *arg);

/* The option table of each command (in its cli/<name>.c) and of the modes
 * bench, quantize and convert hand over to. */
extern const cli_spec cli_spec_run, cli_spec_info, cli_spec_convert, cli_spec_tokenize, cli_spec_synth,
    cli_spec_bench, cli_spec_bench_lut, cli_spec_bench_serve, cli_spec_bench_spec, cli_spec_bench_attn, cli_spec_tune,
    cli_spec_roofline, cli_spec_chat, cli_spec_serve, cli_spec_sot, cli_spec_quantize, cli_spec_quantize_w8,
    cli_spec_ppl, cli_spec_eval, cli_spec_imatrix, cli_spec_convert_hf, cli_spec_batch, cli_spec_embed;

/* Every spec, for tests/unit/test_cli_opts.c (cli/commands.c). */
extern const cli_spec *const cli_specs[];
extern const size_t cli_n_specs;

/* The commands of `kite` (cli/commands.c): name, entry point, one-line summary. */
typedef struct cli_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} cli_command;
extern const cli_command cli_commands[];
extern const size_t cli_n_commands;

/* Rows shared by several tables. */

/* --mem-budget SIZE into a uint64_t field (kite_model_params.mem_budget, docs/offload.md). */
int cli_opt_mem_budget(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n);
#define CLI_OPT_MEM_BUDGET(T, f)                                                                               \
    {.names = "--mem-budget", .arg = "SIZE",                                                                   \
     .help = "hold at most SIZE bytes of weights in memory (512M, 2G):\n"                                       \
             "layers beyond it are streamed from disk per token",                                              \
     .kind = CLI_FN, .nargs = 1, CLI_AT(T, f), .fn = cli_opt_mem_budget, .example = "512M",                    \
     .def_doc = "no bound"}

/* --f16-compute exact|bf16: kite_model_params.f16_compute of the models the command loads
 * (config_set_f16_compute; over KITE_F16_COMPUTE). */
int cli_opt_f16_compute(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n);
#define CLI_OPT_F16_COMPUTE                                                                                    \
    {.names = "--f16-compute", .arg = "MODE",                                                                  \
     .help = "F16 matrices: exact (FP32 products) or bf16 (rounded to bf16 at load,\n"                          \
             "bf16 dot products: faster prefill, lossy; docs/kernels.md)",                                     \
     .kind = CLI_FN, .nargs = 1, .fn = cli_opt_f16_compute, .example = "bf16", .def_doc = "exact"}

/* --kv-type T into an int32_t field (enum kite_kv_type). */
extern const char *const cli_kv_type_names[];
extern const int32_t cli_kv_type_values[];
#define CLI_OPT_KV_TYPE(T, f, help_)                                                                           \
    {.names = "--kv-type", .arg = "T", .kind = CLI_ENUM, CLI_AT(T, f), .choices = cli_kv_type_names,          \
     .values = cli_kv_type_values, .icase = true, .def = "f32", .help = help_}

/* -q, --quiet: no progress display (tools/progress/progress.h) for the command. */
int cli_opt_quiet(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n);
#define CLI_OPT_QUIET                                                                                          \
    {.names = "-q, --quiet", .help = "no progress on stderr (errors and the result are still printed)",        \
     .kind = CLI_FN, .nargs = 0, .fn = cli_opt_quiet}

/* kite_tokenize's contract (add_bos, cap, *n_out, KITE_E_RANGE with the full
 * count when out is too small), but with parse_special the texts of the
 * vocabulary's special tokens in text become their ids (chat_tokenize), as
 * llama.cpp's tools do by default (cli/prompt.c). */
int cli_tokenize_text(const kite_model *model, const char *text, size_t len, bool add_bos, bool parse_special,
                      kite_token *out, size_t cap, size_t *n_out /* OUT */);
/* --no-parse-special into a bool field (run, tokenize). */
#define CLI_OPT_NO_PARSE_SPECIAL(T, f)                                                                         \
    {.names = "--no-parse-special", .kind = CLI_FLAG, CLI_AT(T, f),                                           \
     .help = "encode special-token text (<s>, <|im_start|>, ...) as plain\ntext instead of as the special tokens"}

/* The sampler flags of run, chat and sot into a kite_sampler_params field sp
 * (its values before parsing, the library's or the command's defaults, are
 * shown as defaults); seen: a bool set when --seed is given. */
int cli_opt_repeat_penalty(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n);
#define CLI_OPTS_SAMPLER(T, sp, seed_seen)                                                                     \
    {.names = "--temp", .arg = "T", .help = "temperature; 0 = greedy", .kind = CLI_FLOAT,                      \
     CLI_AT(T, sp.temperature), .fmin = 0.0f, .fmax = 100.0f, .show_default = true},                          \
    {.names = "--top-k", .arg = "K", .help = "keep the K most likely tokens; 0 = off", .kind = CLI_INT,      \
     CLI_AT(T, sp.top_k), .min = 0, .max = 1 << 30, .show_default = true},                                    \
    {.names = "--top-p", .arg = "P", .help = "nucleus sampling; 1 = off", .kind = CLI_FLOAT,                   \
     CLI_AT(T, sp.top_p), .fmin = 0.0f, .fmax = 1.0f, .show_default = true},                                  \
    {.names = "--min-p", .arg = "P", .help = "drop tokens below P * max probability; 0 = off",                \
     .kind = CLI_FLOAT, CLI_AT(T, sp.min_p), .fmin = 0.0f, .fmax = 1.0f, .show_default = true},               \
    {.names = "--repeat-penalty", .arg = "R", .help = "penalise repeated tokens; 1 = off", .kind = CLI_FLOAT,  \
     CLI_AT(T, sp.repeat_penalty), .fmin = 0.0f, .fmax = 100.0f, .fn = cli_opt_repeat_penalty,                \
     .example = "1.1", .show_default = true},                                                                  \
    {.names = "--repeat-last-n", .arg = "N", .help = "window for the penalties; -1 = whole context",          \
     .kind = CLI_INT, CLI_AT(T, sp.penalty_last_n), .min = -1, .max = 1 << 20, .show_default = true},         \
    {.names = "--frequency-penalty", .arg = "F", .kind = CLI_FLOAT, CLI_AT(T, sp.frequency_penalty),          \
     .fmin = -100.0f, .fmax = 100.0f, .show_default = true},                                                   \
    {.names = "--presence-penalty", .arg = "P", .kind = CLI_FLOAT, CLI_AT(T, sp.presence_penalty),            \
     .fmin = -100.0f, .fmax = 100.0f, .show_default = true},                                                   \
    {.names = "-s, --seed", .arg = "S", .help = "random seed", .kind = CLI_U64, CLI_AT(T, sp.seed),          \
     CLI_SEEN(T, seed_seen), .def_doc = "from the clock, printed on stderr"}

/* The drafters of speculative decoding (run, serve, bench --parallel): the
 * --draft-model and --draft-skip-layers arguments and --lookahead's W,N,G
 * (checked here, parsed again by the command) into const char * fields,
 * --lookup N and --draft-max K into integer fields (0: not given). */
int cli_opt_lookahead(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n);
#define CLI_OPTS_DRAFT(T, model, skip, lookup, lookahead, draft_max)                                           \
    {.names = "--draft-model", .arg = "FILE", .help = "draft with a smaller model of the same vocabulary",    \
     .kind = CLI_STR, CLI_AT(T, model)},                                                                       \
    {.names = "--draft-skip-layers", .arg = "LIST",                                                            \
     .help = "self-speculative: draft with the model itself,\nskipping layers LIST (e.g. 2,3 or 1-3)",         \
     .kind = CLI_STR, CLI_AT(T, skip)},                                                                        \
    {.names = "--lookup", .arg = "N", .help = "draft by n-gram lookup (n <= N) in the prompt and output",     \
     .kind = CLI_INT, CLI_AT(T, lookup), .min = 1, .max = 64},                                                 \
    {.names = "--lookahead", .arg = "W,N,G",                                                                   \
     .help = "lookahead (Jacobi) decoding: a window of W guesses refined\nby each pass, N-grams from the "     \
             "passes, G kept per token\n(e.g. 8,4,8; no draft model)",                                          \
     .kind = CLI_STR, CLI_AT(T, lookahead), .fn = cli_opt_lookahead, .example = "8,4,8"},                     \
    {.names = "--draft-max", .arg = "K", .help = "longest draft, 1..16 (default 8; adaptive below it)",       \
     .kind = CLI_INT, CLI_AT(T, draft_max), .min = 1, .max = 16}

/* JSON output helpers: a string (escaped; bytes >= 0x80 are passed through,
 * so valid UTF-8 in gives valid JSON out) and an array of ids "[1, 2, 3]". */
void cli_json_string(FILE *f, const char *s, size_t len);
void cli_json_ids(FILE *f, const int32_t *ids, size_t n);

/* Warns on stderr (llama.cpp does too) when a -c of n_ctx positions is
 * above the model's trained context n_ctx_train (0: unknown, no warning). */
void cli_warn_ctx(const char *cmd, int64_t n_ctx, int32_t n_ctx_train);

/* Prints the usage error line and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- distributed inference (cli/dist.c, docs/distributed.md) ---- */
/* Joins the process group when mpirun started this process (one rank
 * otherwise); ranks > 0 get stdout on /dev/null.  0, or -1 after a message. */
int cli_dist_init(int *argc, char ***argv);
/* --split-mode none|tensor|layer of command cmd into mp (tp_size, tp_rank),
 * and the watchdog of --dist-timeout (seconds, 0: off) when split; -1: go
 * on, else the exit status after the message. */
int cli_split_mode(const char *cmd, const char *mode, double timeout_s, kite_model_params *mp);
/* This process's peak resident memory (getrusage), bytes; 0 if unknown. */
uint64_t cli_peak_rss_bytes(void);
/* The --split-mode and --dist-timeout options of a command's table (fields:
 * const char *, int64_t). */
#define CLI_OPT_SPLIT_MODE(T, field, timeout)                                                                             \
    {.names = "--split-mode", .arg = "MODE",                                                                    \
     .help = "none, or tensor: split every layer's heads and FFN over the\nranks of mpirun -np N "              \
             "(docs/distributed.md)", .kind = CLI_STR, CLI_AT(T, field), .def = "none"},                        \
    {.names = "--dist-timeout", .arg = "S",                                                                     \
     .help = "split: a rank whose all-reduce or transfer waits S seconds\nends the job (a peer hangs); 0: "      \
             "never", .kind = CLI_INT, CLI_AT(T, timeout), .min = 0, .max = 86400, .def = "120"}

#endif
