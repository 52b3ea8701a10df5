/*
 * quantize.c - `kite quantize`: quantization of a GGUF model (RTN, GPTQ, AWQ).
 *
 *   kite quantize -m IN.gguf -o OUT.gguf --type TYPE [--method rtn|gptq|awq] [--mix MIX]
 *                 [--calib TEXT] [--calib-tokens N] [--group 32|64|128] [--bits N]
 *                 [--act-order] [--damp F] [--allow-requantize] [-t THREADS]
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
#include "kite.h"
#include "quant/grid.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

#define CMD "quantize"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kite quantize -m IN.gguf -o OUT.gguf --type TYPE [--method rtn|gptq|awq] [--mix MIX]\n"
            "                     [--calib TEXT] [--calib-tokens N] [--group 32|64|128] [--bits N]\n"
            "                     [--act-order] [--damp F] [--allow-requantize] [-t THREADS]\n"
            "\n"
            "Re-encodes the weight matrices of a GGUF model.  rtn (default): round to nearest with\n"
            "kite's reference quantizers, byte-identical to llama.cpp's; norms and metadata are copied.\n"
            "gptq / awq: calibrated on TEXT, results stored in the same standard block types.\n"
            "\n"
            "  -m, --model F      input model (f32/f16/bf16; quantized input needs --allow-requantize)\n"
            "  -o, --output F     output path (written to a temporary file, then renamed)\n"
            "  --type TYPE        every matrix gets TYPE: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k\n"
            "                     q3_k q4_k q5_k q6_k iq4_nl iq4_xs tq1_0 tq2_0; or a mix name (below)\n"
            "  --mix MIX          llama.cpp's per-tensor recipe of that ftype (attn_v, ffn_down and\n"
            "                     output get more bits): %s\n"
            "  --method M         rtn (default); gptq: error compensation with calibration Hessians\n"
            "                     (q4_0 q4_1 q5_0 q5_1 q8_0 q3_k matrices; others rtn); awq: activation-aware\n"
            "                     scales folded into the norms / wv / w_up, then rtn (any type)\n"
            "                     smoothquant | outliers: W8A8 paths, see --method smoothquant --help\n"
            "                     (kite types w8a8, llm_int8: docs/quantization-w8a8.md)\n"
            "  --calib TEXT       calibration text file (required by gptq and awq)\n"
            "  --calib-tokens N   calibration tokens used (default %d)\n"
            "  --group G          q4_0..q8_0: one scale per G = 32 (default), 64 or 128 weights (the\n"
            "                     same scale stored in each 32-block: standard file, block-type size)\n"
            "  --bits N           q4_0/q4_1 (2..3) and q5_0/q5_1 (2..4): a grid of 2^N levels in the\n"
            "                     standard blocks (quality of N bits, size of the container type)\n"
            "  --act-order        gptq: quantize columns by descending Hessian diagonal\n"
            "  --damp F           gptq: dampening, fraction of the mean Hessian diagonal (default 0.01)\n"
            "  --allow-requantize accept already-quantized input (loses quality)\n"
            "  -t, --threads N    worker threads (default: all online CPUs); no effect on the output\n"
            "  -h, --help         show this help\n"
            "\n"
            "Rows whose length is not a multiple of the type's block fall back to a type that fits\n"
            "(llama.cpp's rules: q4_k->q5_0, q5_k->q5_1, q6_k->q8_0, ..., else f16); each fallback is\n"
            "printed.  docs/quantize.md has the tables; docs/quantization.md the methods.\n",
            quant_recipe_list(), QUANT_CALIB_TOKENS_DEFAULT);
}

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = NULL, *mix = NULL, *method = "rtn", *calib = NULL;
    int64_t threads = 0, calib_tokens = 0, group = 0, bits = 0;
    float damp = 0.0f;
    bool allow_requant = false, act_order = false;
    /* --- W8A8 hook (quantize_w8.c): SmoothQuant and the outlier test model --- */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--method") && (!strcmp(argv[i + 1], "smoothquant") || !strcmp(argv[i + 1], "outliers")))
            return cmd_quantize_w8(argc, argv);
    /* --- end W8A8 hook --- */
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
        } else if (!strcmp(a, "--mix")) {
            if (!(mix = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--method")) {
            if (!(method = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calib")) {
            if (!(calib = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calib-tokens")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 1, INT64_C(1) << 32, &calib_tokens))
                return 2;
        } else if (!strcmp(a, "--group")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 32, 128, &group)) return 2;
            if (group != 32 && group != 64 && group != 128)
                return cli_usage_error(CMD, "--group: %" PRId64 " is not 32, 64 or 128", group);
        } else if (!strcmp(a, "--bits")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 2, 8, &bits)) return 2;
        } else if (!strcmp(a, "--act-order")) {
            act_order = true;
        } else if (!strcmp(a, "--damp")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_f32(CMD, a, v, 1e-6f, 10.0f, &damp)) return 2;
        } else if (!strcmp(a, "--allow-requantize")) {
            allow_requant = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 0, 1024, &threads)) return 2;
        } else {
            return cli_usage_error(CMD, "unknown option '%s'", a);
        }
    }
    if (!in) return cli_usage_error(CMD, "-m IN.gguf is required");
    if (!out) return cli_usage_error(CMD, "-o OUT.gguf is required");
    if (!type && !mix) return cli_usage_error(CMD, "--type TYPE (or --mix MIX) is required");
    int meth;
    if (!strcmp(method, "rtn")) meth = QUANT_RTN;
    else if (!strcmp(method, "gptq")) meth = QUANT_GPTQ;
    else if (!strcmp(method, "awq")) meth = QUANT_AWQ;
    else return cli_usage_error(CMD, "--method: unknown method '%s' (rtn, gptq, awq)", method);
    if (meth != QUANT_RTN && !calib)
        return cli_usage_error(CMD, "--method %s needs a calibration text (--calib TEXT)", method);
    if (meth == QUANT_RTN && calib) return cli_usage_error(CMD, "--calib is only used by --method gptq|awq");
    if (act_order && meth != QUANT_GPTQ) return cli_usage_error(CMD, "--act-order is a gptq option");

    quant_params p = {.allow_requantize = allow_requant, .log = stderr, .method = meth, .calib_path = calib,
                      .calib_tokens = calib_tokens, .group = (int)group, .bits = (int)bits,
                      .act_order = act_order, .damp = damp, .no_repack = config_get()->no_repack};
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
            if ((group > 32 || bits) && !qgrid_supported(p.type, (int)bits))
                return cli_usage_error(CMD, "--group/--bits: %s has no group grid (q4_0 q4_1 q5_0 q5_1 q8_0; "
                                       "--bits below the type's own)", type);
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
