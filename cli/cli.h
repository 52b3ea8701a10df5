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
int cmd_sot(int argc, char **argv);
int cmd_tune(int argc, char **argv); /* tune.c: matmul variant table for this machine */
/* `kite bench --lut-gemm` (cli/bench_lut.c): LUT-GEMM vs dequantize-then-multiply. */
int bench_lut_gemm(int argc, char **argv);
/* `kite bench --parallel LIST` (cli/bench_serve.c): serving-engine throughput and KV waste. */
int bench_serve(int argc, char **argv);
/* `kite bench --spec-verify` / `--spec DRAFTER` (cli/bench_spec.c): speculative decoding. */
int bench_spec(int argc, char **argv);

/* Path of the bundled model: $KITE_MODEL, else <binary dir>/../models/
 * stories260K.gguf (build/kite in the repository), else the source tree the
 * binary was built from, else the relative path models/stories260K.gguf. */
const char *cli_default_model(const char *argv0);

/* Strict numeric parsing of flag values: the whole string must be a number in
 * [lo, hi].  On failure prints "kite CMD: FLAG: ..." and returns false. */
bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_f32(const char *cmd, const char *flag, const char *s, float lo, float hi, float *out);
bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);

/* The sampler flags shared by run, chat and sot (--temp --top-k --top-p
 * --min-p --repeat-penalty --repeat-last-n --frequency-penalty
 * --presence-penalty --seed): if argv[*i] is one, parses its value into sp
 * (advancing *i; --seed also sets *seed_set when given) and returns 1;
 * returns 0 if it is not a sampler flag, 2 after printing a usage error. */
int cli_sampler_option(const char *cmd, int argc, char **argv, int *i, kite_sampler_params *sp, bool *seed_set);

/* Median of v[0..n) (sorts v in place); 0 for n <= 0. */
double cli_median(double *v, int n);

/* Parses a comma-separated list of integers in [lo, hi] ("1,2,4") into
 * out[0..cap); returns the count, or -1 after printing a usage error. */
int cli_parse_i64_list(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out,
                       int cap);

/* Returns argv[*i + 1] and advances *i, or prints "kite CMD: FLAG needs a value". */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* JSON output helpers: a string (escaped; bytes >= 0x80 are passed through,
 * so valid UTF-8 in gives valid JSON out) and an array of ids "[1, 2, 3]". */
void cli_json_string(FILE *f, const char *s, size_t len);
void cli_json_ids(FILE *f, const int32_t *ids, size_t n);

/* Prints the usage error line and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
