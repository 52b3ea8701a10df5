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

static void usage(FILE *f) {
    fprintf(f,
            "usage: kite quantize -m IN.gguf -o OUT.gguf --method smoothquant --calib TEXT [--alpha A]\n"
            "                     [--type w8a8|llm_int8|...] [--calib-tokens N] [-t N]\n"
            "       kite quantize -m IN.gguf -o OUT.gguf --method outliers [--factor F] [--channels N]\n\n"
            "smoothquant: per-input-channel scales s = max|x|^A / max|w|^(1-A) (A default %.2f) from a\n"
            "  calibration run, folded into the norms / wv / w_up, then every matrix quantized to TYPE\n"
            "  (default w8a8: per-row int8 weights, per-token int8 activations; a kite type).\n"
            "outliers: writes a function-preserving F32 copy of IN whose normed activations have outlier\n"
            "  channels (N channels, default 4, of every attn/ffn input scaled up by F, default 30, and\n"
            "  the weight columns reading them scaled down by F): a test model for W8A8 methods.\n",
            (double)SQ_ALPHA_DEFAULT);
}

int cmd_quantize_w8(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = "w8a8", *method = NULL, *calib = NULL;
    float alpha = SQ_ALPHA_DEFAULT, factor = 30.0f;
    int64_t threads = 0, calib_tokens = 0, channels = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(in = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--type")) {
            if (!(type = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--method")) {
            if (!(method = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calib")) {
            if (!(calib = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--alpha")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_f32(CMD, a, v, 0.0f, 1.0f, &alpha)) return 2;
        } else if (!strcmp(a, "--factor")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_f32(CMD, a, v, 1e-3f, 1e4f, &factor)) return 2;
        } else if (!strcmp(a, "--channels")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 0, 1 << 20, &channels)) return 2;
        } else if (!strcmp(a, "--calib-tokens")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 1, INT64_C(1) << 32, &calib_tokens))
                return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 0, 1024, &threads)) return 2;
        } else {
            return cli_usage_error(CMD, "unknown option '%s' for --method %s", a, method ? method : "?");
        }
    }
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
