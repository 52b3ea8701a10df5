/*
 * quantize.c - `kite quantize`: quantization of a GGUF model (RTN, GPTQ, AWQ).
 *
 *   kite quantize -m IN.gguf -o OUT.gguf --type TYPE [--method rtn|gptq|awq] [--mix MIX]
 *                 [--calib TEXT] [--calib-tokens N] [--group 32|64|128] [--bits N]
 *                 [--act-order] [--damp F] [--allow-requantize] [--allow-fallback] [-t THREADS]
 *
 * A thin driver over src/quant/quantize.c: parses flags, picks the pure type
 * or the llama.cpp recipe, runs the quantizer (progress on stderr) and prints
 * the size before and after.  The output never depends on -t.
 * docs/quantization/calibrated.md describes the methods.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "core/tmpfile.h"
#include "kite.h"
#include "quant/grid.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

#define CMD "quantize"

typedef struct quantize_opts {
    const char *in, *out, *type, *mix, *method, *calib;
    int64_t threads, calib_tokens, group, bits;
    float damp;
    bool allow_requant, act_order, allow_fallback;
} quantize_opts;

static int check_group(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    const int64_t group = ((const quantize_opts *)state)->group;
    (void)o, (void)flag, (void)vals, (void)n;
    if (group != 32 && group != 64 && group != 128) {
        cli_usage_error(cmd, "--group: %" PRId64 " is not 32, 64 or 128", group);
        return -1;
    }
    return 1;
}

static const cli_opt quantize_opts_table[] = {
    {.names = "-m, --model", .arg = "F", .help = "input model (f32/f16/bf16; quantized input needs --allow-requantize)",
     .kind = CLI_STR, CLI_AT(quantize_opts, in)},
    {.names = "-o, --output", .arg = "F", .help = "output path (written to a temporary file, then renamed)",
     .kind = CLI_STR, CLI_AT(quantize_opts, out)},
    {.names = "--type", .arg = "TYPE",
     .help = "every matrix gets TYPE: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k\n"
             "q3_k q4_k q5_k q6_k iq4_nl iq4_xs tq1_0 tq2_0; or a mix name (--mix)",
     .kind = CLI_STR, CLI_AT(quantize_opts, type)},
    {.names = "--mix", .arg = "MIX",
     .help = "llama.cpp's per-tensor recipe of that ftype (attn_v, ffn_down and\noutput get more bits): %s",
     .choices_fn = quant_recipe_list, .kind = CLI_STR, CLI_AT(quantize_opts, mix)},
    {.names = "--method", .arg = "M",
     .help = "rtn; gptq: error compensation with calibration Hessians\n"
             "(q4_0 q4_1 q5_0 q5_1 q8_0 q3_k matrices; others rtn); awq: activation-aware\n"
             "scales folded into the norms / wv / w_up, then rtn (any type)\n"
             "smoothquant | outliers: W8A8 paths, see --method smoothquant --help\n"
             "(kite types w8a8, llm_int8: docs/quantization/w8a8.md)",
     .kind = CLI_STR, CLI_AT(quantize_opts, method), .def = "rtn"},
    {.names = "--calib", .arg = "TEXT", .help = "calibration text file (required by gptq, awq and smoothquant)", .kind = CLI_STR,
     CLI_AT(quantize_opts, calib)},
    {.names = "--calib-tokens", .arg = "N", .help = "calibration tokens used", .kind = CLI_INT,
     CLI_AT(quantize_opts, calib_tokens), .min = 1, .max = INT64_C(1) << 32,
     .def_doc = CLI_XSTR(QUANT_CALIB_TOKENS_DEFAULT)},
    {.names = "--group", .arg = "G",
     .help = "q4_0..q8_0: one scale per G = 32, 64 or 128 weights (the\n"
             "same scale stored in each 32-block: standard file, block-type size)",
     .kind = CLI_INT, CLI_AT(quantize_opts, group), .min = 32, .max = 128, .fn = check_group, .example = "64",
     .def_doc = "32"},
    {.names = "--bits", .arg = "N",
     .help = "q4_0/q4_1 (2..3) and q5_0/q5_1 (2..4): a grid of 2^N levels in the\n"
             "standard blocks (quality of N bits, size of the container type)",
     .kind = CLI_INT, CLI_AT(quantize_opts, bits), .min = 2, .max = 8},
    {.names = "--act-order", .help = "gptq: quantize columns by descending Hessian diagonal", .kind = CLI_FLAG,
     CLI_AT(quantize_opts, act_order)},
    {.names = "--damp", .arg = "F", .help = "gptq: dampening, fraction of the mean Hessian diagonal",
     .kind = CLI_FLOAT, CLI_AT(quantize_opts, damp), .fmin = 1e-6f, .fmax = 10.0f, .def_doc = "0.01"},
    {.names = "--allow-requantize", .help = "accept already-quantized input (loses quality)", .kind = CLI_FLAG,
     CLI_AT(quantize_opts, allow_requant)},
    {.names = "--allow-fallback",
     .help = "gptq: write matrices GPTQ cannot produce (types without a GPTQ grid,\n"
             "inputs without calibration data) with rtn instead of failing; each one's\n"
             "progress line says so",
     .kind = CLI_FLAG, CLI_AT(quantize_opts, allow_fallback)},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads; no effect on the output", .kind = CLI_INT,
     CLI_AT(quantize_opts, threads), .min = 0, .max = 1024, .def_doc = "all online CPUs"},
};

const cli_spec cli_spec_quantize = {
    .cmd = CMD,
    .usage = "usage: kite quantize -m IN.gguf -o OUT.gguf --type TYPE [--method rtn|gptq|awq] [--mix MIX]\n"
             "                     [--calib TEXT] [--calib-tokens N] [--group 32|64|128] [--bits N]\n"
             "                     [--act-order] [--damp F] [--allow-requantize] [--allow-fallback]\n"
             "                     [-t THREADS]\n"
             "\n"
             "Re-encodes the weight matrices of a GGUF model.  rtn (default): round to nearest with\n"
             "kite's reference quantizers, byte-identical to llama.cpp's; norms and metadata are copied.\n"
             "gptq / awq: calibrated on TEXT, results stored in the same standard block types.\n",
    .epilog = "Rows whose length is not a multiple of the type's block fall back to a type that fits\n"
              "(llama.cpp's rules: q4_k->q5_0, q5_k->q5_1, q6_k->q8_0, ..., else f16); each fallback is\n"
              "printed.  docs/quantization/rtn.md has the tables; docs/quantization/calibrated.md the methods.\n",
    CLI_TABLE(quantize_opts_table, quantize_opts),
};

int cmd_quantize(int argc, char **argv) {
    tmpf_install_signal_handlers(); /* an interrupt removes the temporary files */
    /* --- W8A8 hook (quantize_w8.c): SmoothQuant and the outlier test model --- */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--method") && (!strcmp(argv[i + 1], "smoothquant") || !strcmp(argv[i + 1], "outliers")))
            return cmd_quantize_w8(argc, argv);
    /* --- end W8A8 hook --- */
    quantize_opts o = {0};
    int rc = cli_parse(&cli_spec_quantize, argc, argv, &o);
    if (rc >= 0) return rc;
    const char *in = o.in, *out = o.out, *type = o.type, *mix = o.mix, *method = o.method, *calib = o.calib;
    const int64_t threads = o.threads, calib_tokens = o.calib_tokens, group = o.group, bits = o.bits;
    const float damp = o.damp;
    const bool allow_requant = o.allow_requant, act_order = o.act_order;
    if (!in) return cli_usage_error(CMD, "-m IN.gguf is required");
    if (!out) return cli_usage_error(CMD, "-o OUT.gguf is required");
    if (!type && !mix) return cli_usage_error(CMD, "--type TYPE (or --mix MIX) is required");
    int meth;
    if (!strcmp(method, "rtn")) meth = QUANT_RTN;
    else if (!strcmp(method, "gptq")) meth = QUANT_GPTQ;
    else if (!strcmp(method, "awq")) meth = QUANT_AWQ;
    else
        return cli_usage_error(CMD, "--method: unknown method '%s' (rtn, gptq, awq; smoothquant and outliers for "
                               "the W8A8 types)", method);
    if (meth != QUANT_RTN && !calib)
        return cli_usage_error(CMD, "--method %s needs a calibration text (--calib TEXT)", method);
    if (meth == QUANT_RTN && calib)
        return cli_usage_error(CMD, "--calib is only used by --method gptq, awq and smoothquant");
    if (act_order && meth != QUANT_GPTQ) return cli_usage_error(CMD, "--act-order is a gptq option");
    if (o.allow_fallback && meth != QUANT_GPTQ) return cli_usage_error(CMD, "--allow-fallback is a gptq option");

    quant_params p = {.allow_requantize = allow_requant, .log = stderr, .method = meth, .calib_path = calib,
                      .calib_tokens = calib_tokens, .group = (int)group, .bits = (int)bits,
                      .act_order = act_order, .damp = damp, .no_repack = config_get()->no_repack,
                      .allow_fallback = o.allow_fallback};
    if (mix) {
        if (!(p.recipe = quant_recipe_find(mix)))
            return cli_usage_error(CMD, "--mix: unknown mix '%s' (%s)", mix, quant_recipe_list());
        if (type) { /* allowed when it names the mix's own base type */
            int t = dtype_from_name(type);
            if (t < 0 || (uint32_t)t != p.recipe->base)
                return cli_usage_error(CMD, "--type %s conflicts with --mix %s (whose base type is %s)", type, mix,
                                       dtype_name(p.recipe->base));
        }
    } else {
        int t = dtype_from_name(type);
        if (t >= 0) {
            const dtype_traits *tr = dtype_get((uint32_t)t);
            if (!tr || !tr->from_float)
                return cli_usage_error(CMD, "--type: %s has no reference quantizer in kite", type);
            p.type = (uint32_t)t;
            if (group > 32 && !qgrid_supported(p.type, 0))
                return cli_usage_error(CMD, "--group %" PRId64 ": %s has no group grid (only q4_0 q4_1 q5_0 q5_1 "
                                       "q8_0 do)", group, type);
            if (bits && !qgrid_supported(p.type, (int)bits)) {
                /* the types that do take this --bits, from the grid table itself */
                static const uint32_t legacy[] = {KITE_DTYPE_Q4_0, KITE_DTYPE_Q4_1, KITE_DTYPE_Q5_0, KITE_DTYPE_Q5_1,
                                                  KITE_DTYPE_Q8_0};
                char ok[64] = "";
                for (size_t k = 0; k < sizeof legacy / sizeof *legacy; k++)
                    if (qgrid_supported(legacy[k], (int)bits))
                        snprintf(ok + strlen(ok), sizeof ok - strlen(ok), " %s", dtype_name(legacy[k]));
                return cli_usage_error(CMD, "--bits %" PRId64 ": %s has no %" PRId64 "-bit grid (--bits %" PRId64
                                       " applies to:%s)", bits, type, bits, bits, ok[0] ? ok : " no type");
            }
        } else if (!(p.recipe = quant_recipe_find(type))) {
            return cli_usage_error(CMD, "--type: unknown type '%s'", type);
        }
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p.n_threads = threads > 0 ? (int)threads : (ncpu > 0 ? (int)ncpu : 1);

    quant_stats st;
    double t0 = time_now_s();
    if (quant_model(in, out, &p, &st) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    fprintf(stderr, "%s: %s, file_type %" PRIu32 ", %d of %d tensors converted (%d fell back), "
            "tensor data %.2f MB -> %.2f MB (%.1f%%), %.1f s\n",
            out, p.recipe ? p.recipe->name : dtype_name(p.type), st.ftype, st.n_converted, st.n_tensors,
            st.n_fallback, (double)st.bytes_in / 1e6, (double)st.bytes_out / 1e6,
            st.bytes_in ? 100.0 * (double)st.bytes_out / (double)st.bytes_in : 0.0, time_now_s() - t0);
    return 0;
}
