/*
 * convert_hf.c - `kite convert --hf DIR -o OUT.gguf [--type T] [--name NAME]`.
 *
 * cli/convert.c hands over to convert_hf() when --hf is among its arguments;
 * this file declares the flags (cli_spec_convert_hf: usage errors exit 2 with
 * "kite convert: ... (see 'kite convert --help')", runtime errors exit 1 with
 * one line), calls the importer (tools/convert/hf_convert.h) and prints one
 * summary line.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "convert/hf_convert.h"
#include "gguf/gguf.h"
#include "kite.h"
#include "progress/progress.h"
#include "tensor/dtype.h"

#define CMD "convert"

/* --hf DIR, once. */
static int hf_dir_arg(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)n;
    hf_convert_params *p = state;
    if (p->dir) {
        cli_usage_error(cmd, "%s given twice", flag);
        return -1;
    }
    p->dir = vals[0];
    return 1;
}

/* --type f32|f16|bf16|q8_0 (the importer's own message for anything else). */
static int hf_type_arg(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)n;
    static const struct {
        const char *name;
        uint32_t type;
    } types[] = {{"f32", KITE_DTYPE_F32}, {"f16", KITE_DTYPE_F16}, {"bf16", KITE_DTYPE_BF16}, {"q8_0", KITE_DTYPE_Q8_0}};
    for (size_t i = 0; i < CLI_N(types); i++)
        if (!strcmp(vals[0], types[i].name)) {
            ((hf_convert_params *)state)->out_type = types[i].type;
            return 1;
        }
    cli_usage_error(cmd, "%s: expected f32, f16, bf16 or q8_0, got '%s'", flag, vals[0]);
    return -1;
}

/* Arguments no row matches: the llama2.c flags (refused with the reason),
 * an unknown option, or a stray positional. */
static int hf_other(void *state, const char *cmd, int argc, char **argv, int *i) {
    (void)state, (void)argc;
    static const char *const llama2c_flags[] = {"-z", "--tokenizer", "--vocab-size", "--hparams"};
    const char *a = argv[*i];
    for (size_t k = 0; k < CLI_N(llama2c_flags); k++)
        if (!strcmp(a, llama2c_flags[k]))
            return cli_usage_error(cmd, "%s is for llama2.c checkpoints, not --hf (which reads DIR/tokenizer.json)", a);
    if (cli_is_option(a)) return cli_usage_error(cmd, "unknown option '%s'", a);
    return cli_usage_error(cmd, "unexpected argument '%s' with --hf (the model is the directory)", a);
}

static const cli_opt convert_hf_opts[] = {
    {.names = "--hf", .arg = "DIR", .help = "the model directory", .kind = CLI_FN, .nargs = 1, .fn = hf_dir_arg,
     .example = "dir"},
    {.names = "-o, --output", .arg = "OUT", .help = "output GGUF path (written to a temporary file, then renamed)",
     .kind = CLI_STR, CLI_AT(hf_convert_params, out_path)},
    {.names = "--type", .arg = "T",
     .help = "matrices as f32, f16, bf16 or q8_0; norms and biases stay f32",
     .def_doc = "bf16 if the checkpoint is bf16, else f16", .kind = CLI_FN, .nargs = 1, .fn = hf_type_arg,
     .example = "f16"},
    {.names = "--name", .arg = "NAME", .help = "general.name", .def_doc = "the directory name", .kind = CLI_STR,
     CLI_AT(hf_convert_params, name)},
    CLI_OPT_QUIET,
};

const cli_spec cli_spec_convert_hf = {
    .cmd = CMD,
    .usage = "usage: kite convert --hf DIR -o OUT.gguf [--type f32|f16|bf16|q8_0] [--name NAME]\n"
             "\n"
             "Converts a Hugging Face model directory (config.json, tokenizer.json, optional\n"
             "tokenizer_config.json, model.safetensors or model-*.safetensors with\n"
             "model.safetensors.index.json) to GGUF with llama.cpp's keys and tensor names.\n"
             "Architectures: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gpt2, gemma2, phi3.\n",
    CLI_TABLE(convert_hf_opts, hf_convert_params),
    .other = hf_other,
};

int convert_hf(int argc, char **argv) {
    hf_convert_params p = {.out_type = HF_TYPE_AUTO};
    int rc = cli_parse(&cli_spec_convert_hf, argc, argv, &p);
    if (rc >= 0) return rc;
    if (!p.dir) return cli_usage_error(CMD, "--hf DIR is required");
    if (!p.out_path) return cli_usage_error(CMD, "-o OUT.gguf is required");
    FILE *f = fopen(p.dir, "rb"); /* a file where the directory belongs: say what it looks like */
    if (f) {
        unsigned char head[256];
        size_t n = fread(head, 1, sizeof head, f);
        fclose(f);
        if (n > 0) { /* fread fails on a directory */
            const char *kind = gguf_sniff_name(gguf_sniff(head, n));
            fprintf(stderr, "kite %s: --hf %s is a file%s%s, not a Hugging Face model directory (config.json, "
                    "*.safetensors, tokenizer.json)\n", CMD, p.dir, *kind ? ": it looks like " : "", kind);
            return 1;
        }
    }
    hf_convert_info info;
    progress pg;
    progress_begin(&pg, "kite " CMD, PROGRESS_BYTES, NULL);
    p.progress = progress_sink(&pg);
    rc = hf_convert(&p, &info);
    progress_end(&pg);
    if (rc) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    printf("kite convert: wrote %s (%s from %s: %lld layers, %lld tokens (%s%s%s), %lld tensors, %s)\n", p.out_path,
           info.arch, info.model_type, (long long)info.n_layer, (long long)info.n_vocab, info.tokenizer,
           info.pre[0] ? " " : "", info.pre, (long long)info.n_tensors, dtype_name(info.out_type));
    return 0;
}
