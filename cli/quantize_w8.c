/*
 * quantize_w8.c - the SmoothQuant and outlier-model paths of `kite quantize`
 * (reached from cmd_quantize's hook when --method is smoothquant or
 * outliers; docs/quantization/w8a8.md):
 *
 *   kite quantize -m IN -o OUT --method smoothquant --calib TEXT [--alpha A]
 *                 [--type w8a8] [--calib-tokens N] [-t N]
 *   kite quantize -m IN -o OUT --method outliers [--factor F] [--channels N]
 *
 * A thin driver over src/quant/smoothquant.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "kite.h"
#include "quant/smoothquant.h"
#include "tensor/dtype.h"

#define CMD "quantize"

typedef struct w8_opts {
    const char *in, *out, *type, *method, *calib;
    float alpha, factor;
    int64_t threads, calib_tokens, channels;
} w8_opts;

static int w8_unknown(void *state, const char *cmd, int argc, char **argv, int *i) {
    const char *method = ((const w8_opts *)state)->method;
    (void)argc;
    return cli_usage_error(cmd, "unknown option '%s' for --method %s", argv[*i], method ? method : "?");
}

static const cli_opt w8_opts_table[] = {
    {.names = "-m, --model", .arg = "IN", .help = "input model", .kind = CLI_STR, CLI_AT(w8_opts, in)},
    {.names = "-o, --output", .arg = "OUT", .help = "output path", .kind = CLI_STR, CLI_AT(w8_opts, out)},
    {.names = "--method", .arg = "M", .help = "smoothquant or outliers", .kind = CLI_STR, CLI_AT(w8_opts, method)},
    {.kind = CLI_SECTION, .help = "smoothquant:"},
    {.names = "--calib", .arg = "TEXT", .help = "calibration text file (required)", .kind = CLI_STR,
     CLI_AT(w8_opts, calib)},
    {.names = "--alpha", .arg = "A", .help = "migration strength A of the scales", .kind = CLI_FLOAT,
     CLI_AT(w8_opts, alpha), .fmin = 0.0f, .fmax = 1.0f, .show_default = true},
    {.names = "--type", .arg = "TYPE", .help = "matrix type (w8a8, llm_int8, or any type with a quantizer)",
     .kind = CLI_STR, CLI_AT(w8_opts, type), .def = "w8a8"},
    {.names = "--calib-tokens", .arg = "N", .help = "calibration tokens used", .kind = CLI_INT,
     CLI_AT(w8_opts, calib_tokens), .min = 1, .max = INT64_C(1) << 32},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads", .kind = CLI_INT, CLI_AT(w8_opts, threads),
     .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    {.kind = CLI_SECTION, .help = "outliers:"},
    {.names = "--factor", .arg = "F", .help = "scale of the outlier channels", .kind = CLI_FLOAT,
     CLI_AT(w8_opts, factor), .fmin = 1e-3f, .fmax = 1e4f, .def = "30"},
    {.names = "--channels", .arg = "N", .help = "outlier channels per input", .kind = CLI_INT,
     CLI_AT(w8_opts, channels), .min = 0, .max = 1 << 20, .def = "4"},
};

const cli_spec cli_spec_quantize_w8 = {
    .cmd = CMD,
    .usage = "usage: kite quantize -m IN.gguf -o OUT.gguf --method smoothquant --calib TEXT [--alpha A]\n"
             "                     [--type w8a8|llm_int8|...] [--calib-tokens N] [-t N]\n"
             "       kite quantize -m IN.gguf -o OUT.gguf --method outliers [--factor F] [--channels N]\n\n"
             "smoothquant: per-input-channel scales s = max|x|^A / max|w|^(1-A) from a\n"
             "  calibration run, folded into the norms / wv / w_up, then every matrix quantized to TYPE\n"
             "  (default w8a8: per-row int8 weights, per-token int8 activations; a kite type).\n"
             "outliers: writes a function-preserving F32 copy of IN whose normed activations have outlier\n"
             "  channels (N channels of every attn/ffn input scaled up by F, and\n"
             "  the weight columns reading them scaled down by F): a test model for W8A8 methods.\n",
    CLI_TABLE(w8_opts_table, w8_opts),
    .other = w8_unknown,
};

int cmd_quantize_w8(int argc, char **argv) {
    w8_opts o = {.alpha = SQ_ALPHA_DEFAULT};
    int prc = cli_parse(&cli_spec_quantize_w8, argc, argv, &o);
    if (prc >= 0) return prc;
    const char *in = o.in, *out = o.out, *type = o.type, *method = o.method, *calib = o.calib;
    const float alpha = o.alpha, factor = o.factor;
    const int64_t threads = o.threads, calib_tokens = o.calib_tokens, channels = o.channels;
    if (!in || !out) return cli_usage_error(CMD, "-m IN and -o OUT are required");
    const bool smooth = method && !strcmp(method, "smoothquant");
    if (!smooth && !(method && !strcmp(method, "outliers")))
        return cli_usage_error(CMD, "--method %s is not handled here", method ? method : "?");
    const int t = dtype_from_name(type);
    if (t < 0 || !dtype_get((uint32_t)t)->from_float)
        return cli_usage_error(CMD, "--type: unknown type or one without a quantizer: '%s'", type);
    if (smooth && !calib) return cli_usage_error(CMD, "--method smoothquant needs a calibration text (--calib TEXT)");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const double t0 = time_now_s();
    int rc;
    if (smooth) {
        sq_params p = {.alpha = alpha, .calib_path = calib, .calib_tokens = calib_tokens, .log = stderr,
                       .n_threads = threads > 0 ? (int)threads : (ncpu > 0 ? (int)ncpu : 1),
                       .no_repack = config_get()->no_repack};
        rc = sq_quantize(in, out, (uint32_t)t, &p);
    } else {
        rc = sq_make_outliers(in, out, factor, (int32_t)channels);
    }
    if (rc != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    if (smooth) fprintf(stderr, "%s: smoothquant (alpha %.2f) + %s, %.1f s\n", out, (double)alpha, type, time_now_s() - t0);
    else fprintf(stderr, "%s: outlier model (%" PRId64 " channels x %.1f), %.1f s\n", out, channels, (double)factor,
                 time_now_s() - t0);
    return 0;
}
