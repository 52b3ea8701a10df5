/*
 * quantize.c - `kite quantize`: quantization of a GGUF model (RTN, GPTQ, AWQ).
 *
 *   kite quantize [OPTIONS] IN.gguf [OUT.gguf] TYPE [NTHREADS]      (llama-quantize's form)
 *   kite quantize -m IN.gguf -o OUT.gguf --type TYPE [--pure] [--method rtn|gptq|awq|awq+gptq] [--mix MIX]
 *                 [--calib TEXT] [--calib-tokens N] [--group 32|64|128] [--bits N]
 *                 [--act-order] [--damp F] [--imatrix F] [--allow-requantize] [--allow-fallback] [-t THREADS]
 *
 * A thin driver over src/quant/quantize.c: parses flags, picks the recipe
 * (TYPE means what llama-quantize means: the ftype's per-tensor mix; --pure
 * gives every matrix the ftype's own type), runs the quantizer (progress on
 * stderr) and prints the size before and after.  The output never depends
 * on the thread count.  docs/quantization/rtn.md has the rules,
 * docs/quantization/calibrated.md the methods.
 */
#include <inttypes.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "core/tmpfile.h"
#include "kite.h"
#include "progress/progress.h"
#include "quant/grid.h"
#include "quant/imatrix.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

#define CMD "quantize"
#define MAX_POS 4

typedef struct quantize_opts {
    const char *in, *out, *type, *mix, *method, *calib, *imatrix;
    int64_t threads, calib_tokens, group, bits;
    float damp;
    const char *output_type, *token_embd_type;
    bool allow_requant, act_order, pure, leave_output, allow_fallback;
    const char *pos[MAX_POS]; /* IN [OUT] TYPE [NTHREADS] */
    int n_pos;
} quantize_opts;

/* llama-quantize's positionals, collected in order (resolved in cmd_quantize). */
static int quantize_positional(void *state, const char *cmd, int argc, char **argv, int *i) {
    quantize_opts *q = state;
    (void)argc;
    if (cli_is_option(argv[*i])) return cli_usage_error(cmd, "unknown option '%s'", argv[*i]);
    if (q->n_pos == MAX_POS) return cli_usage_error(cmd, "too many arguments ('%s'): IN.gguf [OUT.gguf] TYPE [NTHREADS]", argv[*i]);
    q->pos[q->n_pos++] = argv[*i];
    return 0;
}

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
    {.names = "-m, --model", .arg = "F", .help = "input model (f32/f16/bf16; quantized input needs --allow-requantize)\n(the same as the IN.gguf positional)",
     .kind = CLI_STR, CLI_AT(quantize_opts, in)},
    {.names = "-o, --output", .arg = "F", .help = "output path (written to a temporary file, then renamed)",
     .kind = CLI_STR, CLI_AT(quantize_opts, out)},
    {.names = "--type", .arg = "TYPE",
     .help = "what llama-quantize means by TYPE (case-insensitive): the ftype's\n"
             "per-tensor recipe (attn_v, ffn_down and output get more bits):\n%s;\n"
             "q3_k q4_k q5_k are q3_k_m q4_k_m q5_k_m; an ftype number (15) too;\n"
             "kite types without an ftype (w8a8, llm_int8) go to every matrix",
     .choices_fn = quant_recipe_list, .kind = CLI_STR, CLI_AT(quantize_opts, type)},
    {.names = "--pure", .help = "every matrix gets TYPE's own type (no per-tensor recipe), as llama-quantize --pure",
     .kind = CLI_FLAG, CLI_AT(quantize_opts, pure)},
    {.names = "--output-tensor-type", .arg = "T", .help = "output.weight gets type T (q8_0, q6_k, f16, ...)",
     .kind = CLI_STR, CLI_AT(quantize_opts, output_type)},
    {.names = "--token-embedding-type", .arg = "T", .help = "token_embd.weight gets type T", .kind = CLI_STR,
     CLI_AT(quantize_opts, token_embd_type)},
    {.names = "--leave-output-tensor", .help = "copy output.weight unchanged", .kind = CLI_FLAG,
     CLI_AT(quantize_opts, leave_output)},
    {.names = "--mix", .arg = "MIX", .help = "the same as --type MIX (older spelling, kept; use --type)", .kind = CLI_STR,
     CLI_AT(quantize_opts, mix)},
    {.names = "--method", .arg = "M",
     .help = "rtn; gptq: error compensation with calibration Hessians\n"
             "(q4_0 q4_1 q5_0 q5_1 q8_0 q3_k matrices; others: an error, or rtn with\n"
             "--allow-fallback); awq: activation-aware scales folded into the norms /\n"
             "wv / w_up, then rtn (any type); awq+gptq: awq's scales, then gptq on the\n"
             "scaled weights\n"
             "smoothquant | outliers: W8A8 paths, see --method smoothquant --help\n"
             "(kite types w8a8, llm_int8: docs/quantization/w8a8.md)",
     .kind = CLI_STR, CLI_AT(quantize_opts, method), .def = "rtn"},
    {.names = "--calib", .arg = "TEXT", .help = "calibration text file (required by gptq, awq, awq+gptq and smoothquant)", .kind = CLI_STR,
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
    {.names = "--imatrix", .arg = "F",
     .help = "importance matrix (kite imatrix or llama-imatrix file): rtn weights\n"
             "each column by it, as llama-quantize --imatrix (identical bytes)",
     .kind = CLI_STR, CLI_AT(quantize_opts, imatrix)},
    {.names = "--allow-requantize", .help = "accept already-quantized input (loses quality)", .kind = CLI_FLAG,
     CLI_AT(quantize_opts, allow_requant)},
    {.names = "--allow-fallback",
     .help = "gptq: write matrices GPTQ cannot produce (types without a GPTQ grid,\n"
             "inputs without calibration data) with rtn instead of failing; each one's\n"
             "progress line says so",
     .kind = CLI_FLAG, CLI_AT(quantize_opts, allow_fallback)},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads (the same as NTHREADS); no effect on the output",
     .kind = CLI_INT, CLI_AT(quantize_opts, threads), .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    CLI_OPT_QUIET,
};

const cli_spec cli_spec_quantize = {
    .cmd = CMD,
    .usage = "usage: kite quantize [OPTIONS] IN.gguf [OUT.gguf] TYPE [NTHREADS]\n"
             "       kite quantize -m IN.gguf -o OUT.gguf --type TYPE [--pure] [--method rtn|gptq|awq|awq+gptq]\n"
             "                     [--calib TEXT] [--calib-tokens N] [--group 32|64|128] [--bits N]\n"
             "                     [--act-order] [--damp F] [--allow-requantize] [--allow-fallback]\n"
             "                     [-t THREADS] [-q]\n"
             "\n"
             "Re-encodes the weight matrices of a GGUF model, taking llama-quantize's arguments: TYPE is\n"
             "its ftype name and without OUT.gguf the output is ggml-model-TYPE.gguf beside IN.gguf.\n"
             "rtn (default): round to nearest with kite's reference quantizers; the files are tensor for\n"
             "tensor identical to llama-quantize's (tests/unit/test_quantize.c); norms and metadata are\n"
             "copied.  gptq / awq: calibrated on TEXT, results stored in the same standard block types.\n",
    .epilog = "Rows whose length is not a multiple of the type's block fall back to a type that fits\n"
              "(llama.cpp's rules: q4_k->q5_0, q5_k->q5_1, q6_k->q8_0, ..., else f16); each fallback is\n"
              "printed.  docs/quantization/rtn.md has the tables; docs/quantization/calibrated.md the methods.\n",
    CLI_TABLE(quantize_opts_table, quantize_opts),
    .other = quantize_positional,
};

/* A ggml type for --output-tensor-type / --token-embedding-type (case-insensitive), or -1 after the error. */
static int override_type(const char *flag, const char *name) {
    int t = dtype_from_name(name);
    if (t < 0) return cli_usage_error(CMD, "%s: unknown type '%s'", flag, name), -1;
    const dtype_traits *tr = dtype_get((uint32_t)t);
    if (!tr || !tr->from_float) return cli_usage_error(CMD, "%s: %s has no reference quantizer in kite", flag, name), -1;
    return t;
}

static bool is_type_name(const char *s) { return quant_recipe_by_ftype_name(s) || dtype_from_name(s) >= 0; }

/* llama-quantize's default output: ggml-model-TYPE.gguf in IN's directory. */
static void default_out(const char *in, const char *type, char *buf, size_t cap) {
    const char *slash = strrchr(in, '/');
    const int dir = slash ? (int)(slash - in + 1) : 0;
    const quant_recipe *r = quant_recipe_by_ftype_name(type);
    const char *name = r && type[0] >= '0' && type[0] <= '9' ? r->name : type;
    char up[64];
    size_t k = 0;
    for (; name[k] && k + 1 < sizeof up; k++) up[k] = (char)toupper((unsigned char)name[k]);
    up[k] = '\0';
    snprintf(buf, cap, "%.*sggml-model-%s.gguf", dir, in, up);
}

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
    int64_t threads = o.threads;
    char out_buf[4096];
    if (o.n_pos > 0) { /* IN [OUT] TYPE [NTHREADS], as llama-quantize */
        if (o.in) return cli_usage_error(CMD, "IN.gguf given twice (-m and '%s')", o.pos[0]);
        o.in = o.pos[0];
        int k = 1;
        if (k < o.n_pos && !is_type_name(o.pos[k])) {
            if (o.out) return cli_usage_error(CMD, "OUT.gguf given twice (-o and '%s')", o.pos[k]);
            o.out = o.pos[k++];
        }
        if (k < o.n_pos) {
            if (o.type || o.mix) return cli_usage_error(CMD, "TYPE given twice (--type and '%s')", o.pos[k]);
            o.type = o.pos[k++];
        }
        if (k < o.n_pos && !cli_parse_i64(CMD, "NTHREADS", o.pos[k++], 0, 1024, &threads)) return 2;
        if (k < o.n_pos)
            return cli_usage_error(CMD, "unexpected argument '%s' (IN.gguf [OUT.gguf] TYPE [NTHREADS])", o.pos[k]);
        if (!o.out && o.type) {
            default_out(o.in, o.type, out_buf, sizeof out_buf);
            o.out = out_buf;
        }
    }
    const char *in = o.in, *out = o.out, *type = o.type, *mix = o.mix, *method = o.method, *calib = o.calib;
    const int64_t calib_tokens = o.calib_tokens, group = o.group, bits = o.bits;
    const float damp = o.damp;
    const bool allow_requant = o.allow_requant, act_order = o.act_order;
    if (!in) return cli_usage_error(CMD, "IN.gguf (or -m IN.gguf) is required");
    if (!type && !mix) return cli_usage_error(CMD, "TYPE (or --type TYPE) is required");
    if (!out) return cli_usage_error(CMD, "-o OUT.gguf is required");
    int meth;
    if (!strcmp(method, "rtn")) meth = QUANT_RTN;
    else if (!strcmp(method, "gptq")) meth = QUANT_GPTQ;
    else if (!strcmp(method, "awq")) meth = QUANT_AWQ;
    else if (!strcmp(method, "awq+gptq")) meth = QUANT_AWQ_GPTQ;
    else
        return cli_usage_error(CMD, "--method: unknown method '%s' (rtn, gptq, awq, awq+gptq; smoothquant and outliers for "
                               "the W8A8 types)", method);
    if (meth != QUANT_RTN && !calib)
        return cli_usage_error(CMD, "--method %s needs a calibration text (--calib TEXT)", method);
    if (meth == QUANT_RTN && calib)
        return cli_usage_error(CMD, "--calib is only used by --method gptq, awq, awq+gptq and smoothquant");
    if (act_order && meth != QUANT_GPTQ && meth != QUANT_AWQ_GPTQ)
        return cli_usage_error(CMD, "--act-order is a gptq (and awq+gptq) option");
    if (o.allow_fallback && meth != QUANT_GPTQ && meth != QUANT_AWQ_GPTQ)
        return cli_usage_error(CMD, "--allow-fallback is a gptq (and awq+gptq) option");

    quant_params p = {.allow_requantize = allow_requant, .log = stderr, .method = meth, .calib_path = calib,
                      .calib_tokens = calib_tokens, .group = (int)group, .bits = (int)bits,
                      .act_order = act_order, .damp = damp, .no_repack = config_get()->no_repack,
                      .pure = o.pure, .leave_output = o.leave_output, .allow_fallback = o.allow_fallback};
    if (mix && !(p.recipe = quant_recipe_by_ftype_name(mix)))
        return cli_usage_error(CMD, "--mix: unknown mix '%s' (%s)", mix, quant_recipe_list());
    if (type) {
        const quant_recipe *r = quant_recipe_by_ftype_name(type);
        if (p.recipe && r != p.recipe) {
            /* --type naming the mix's own base type is allowed (older spelling: --type q4_k --mix q4_k_m) */
            int t = dtype_from_name(type);
            if (t < 0 || (uint32_t)t != p.recipe->base)
                return cli_usage_error(CMD, "--type %s conflicts with --mix %s (whose base type is %s)", type, mix,
                                       dtype_name(p.recipe->base));
        } else if (r) {
            p.recipe = r;
        } else {
            int t = dtype_from_name(type);
            if (t < 0)
                return cli_usage_error(CMD, "--type: unknown type '%s' (%s; or w8a8, llm_int8)", type,
                                       quant_recipe_list());
            const dtype_traits *tr = dtype_get((uint32_t)t);
            if (!tr || !tr->from_float)
                return cli_usage_error(CMD, "--type: %s has no reference quantizer in kite", type);
            p.type = (uint32_t)t; /* a kite type without an llama.cpp ftype: every matrix */
        }
    }
    const uint32_t base = p.recipe ? p.recipe->base : p.type;
    if (group > 32 && !qgrid_supported(base, 0))
        return cli_usage_error(CMD, "--group %" PRId64 ": %s has no group grid (only q4_0 q4_1 q5_0 q5_1 q8_0 do)",
                               group, dtype_name(base));
    if (bits && !qgrid_supported(base, (int)bits)) {
        /* the types that do take this --bits, from the grid table itself */
        static const uint32_t legacy[] = {KITE_DTYPE_Q4_0, KITE_DTYPE_Q4_1, KITE_DTYPE_Q5_0, KITE_DTYPE_Q5_1,
                                          KITE_DTYPE_Q8_0};
        char ok[64] = "";
        for (size_t k = 0; k < sizeof legacy / sizeof *legacy; k++)
            if (qgrid_supported(legacy[k], (int)bits))
                snprintf(ok + strlen(ok), sizeof ok - strlen(ok), " %s", dtype_name(legacy[k]));
        return cli_usage_error(CMD, "--bits %" PRId64 ": %s has no %" PRId64 "-bit grid (--bits %" PRId64
                               " applies to:%s)", bits, dtype_name(base), bits, bits, ok[0] ? ok : " no type");
    }
    if (o.output_type) {
        const int t = override_type("--output-tensor-type", o.output_type);
        if (t < 0) return 2;
        p.set_output_type = true, p.output_type = (uint32_t)t;
    }
    if (o.token_embd_type) {
        const int t = override_type("--token-embedding-type", o.token_embd_type);
        if (t < 0) return 2;
        p.set_token_embd_type = true, p.token_embd_type = (uint32_t)t;
    }
    if (o.leave_output && o.output_type)
        return cli_usage_error(CMD, "--leave-output-tensor and --output-tensor-type exclude each other");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p.n_threads = threads > 0 ? (int)threads : (ncpu > 0 ? (int)ncpu : 1);

    imatrix *im = NULL;
    if (o.imatrix) {
        if (meth != QUANT_RTN || (group && group != 32) || bits)
            return cli_usage_error(CMD, "--imatrix weights rtn (the default method) on the types' own grids; gptq and "
                                   "awq take their statistics from --calib, --group/--bits grids none");
        if (imatrix_read(o.imatrix, &im)) {
            fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
            return 1;
        }
        p.imatrix = im;
        p.imatrix_path = o.imatrix;
        if (!progress_quiet())
            fprintf(stderr, "quantize: imatrix %s: %d entries%s%s, %d chunks\n", o.imatrix, im->n_entries,
                    im->dataset ? " from " : "", im->dataset ? im->dataset : "", im->chunks);
    }
    progress pg;
    progress_begin(&pg, "kite " CMD, PROGRESS_BYTES, NULL);
    p.progress = progress_sink(&pg);
    quant_stats st;
    double t0 = time_now_s();
    rc = quant_model(in, out, &p, &st);
    progress_end(&pg);
    imatrix_free(im);
    if (rc != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    const char *what = p.recipe ? p.recipe->name : dtype_name(p.type);
    fprintf(stderr, "%s: %s%s, file_type %" PRIu32 ", %d of %d tensors converted (%d fell back), "
            "tensor data %.2f MB -> %.2f MB (%.1f%%), %.1f s\n",
            out, what, p.pure && p.recipe ? " (pure)" : "", st.ftype, st.n_converted, st.n_tensors,
            st.n_fallback, (double)st.bytes_in / 1e6, (double)st.bytes_out / 1e6,
            st.bytes_in ? 100.0 * (double)st.bytes_out / (double)st.bytes_in : 0.0, time_now_s() - t0);
    return 0;
}
