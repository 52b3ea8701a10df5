/*
 * hf_cli.c - `kite convert --hf DIR -o OUT.gguf [--type T] [--name NAME]`.
 *
 * cli/convert.c hands over to hf_convert_cli() when --hf is among its
 * arguments; this file parses the flags (same conventions as the other
 * subcommands: usage errors exit 2 with "kite convert: ... (see 'kite
 * convert --help')", runtime errors exit 1 with one line) and prints one
 * summary line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "convert/hf_convert.h"
#include "kite.h"
#include "tensor/dtype.h"

#define CMD "convert"

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kite %s: ", CMD);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'kite %s --help')\n", CMD);
    return 2;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kite convert --hf DIR -o OUT.gguf [--type f32|f16|bf16|q8_0] [--name NAME]\n"
            "\n"
            "Converts a Hugging Face model directory (config.json, tokenizer.json, optional\n"
            "tokenizer_config.json, model.safetensors or model-*.safetensors with\n"
            "model.safetensors.index.json) to GGUF with llama.cpp's keys and tensor names.\n"
            "Architectures: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gpt2.\n"
            "\n"
            "  --hf DIR           the model directory\n"
            "  -o, --output OUT   output GGUF path (written to a temporary file, then renamed)\n"
            "  --type T           matrices as f32, f16, bf16 or q8_0 (default: bf16 if the\n"
            "                     checkpoint is bf16, else f16); norms and biases stay f32\n"
            "  --name NAME        general.name (default: the directory name)\n"
            "  -h, --help         show this help\n");
}

int hf_convert_cli(int argc, char **argv) {
    hf_convert_params p = {.out_type = HF_TYPE_AUTO};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = !strcmp(a, "--hf") || !strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--type") ||
                         !strcmp(a, "--name");
        if (has_value && i + 1 >= argc) return usage_error("%s needs a value", a);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--hf")) {
            if (p.dir) return usage_error("--hf given twice");
            p.dir = argv[++i];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            p.out_path = argv[++i];
        } else if (!strcmp(a, "--name")) {
            p.name = argv[++i];
        } else if (!strcmp(a, "--type")) {
            const char *t = argv[++i];
            if (!strcmp(t, "f32")) p.out_type = KITE_DTYPE_F32;
            else if (!strcmp(t, "f16")) p.out_type = KITE_DTYPE_F16;
            else if (!strcmp(t, "bf16")) p.out_type = KITE_DTYPE_BF16;
            else if (!strcmp(t, "q8_0")) p.out_type = KITE_DTYPE_Q8_0;
            else return usage_error("--type: expected f32, f16, bf16 or q8_0, got '%s'", t);
        } else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer") || !strcmp(a, "--vocab-size") ||
                   !strcmp(a, "--hparams")) {
            return usage_error("%s is for llama2.c checkpoints, not --hf (which reads DIR/tokenizer.json)", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option '%s'", a);
        } else {
            return usage_error("unexpected argument '%s' with --hf (the model is the directory)", a);
        }
    }
    if (!p.dir) return usage_error("--hf DIR is required");
    if (!p.out_path) return usage_error("-o OUT.gguf is required");
    hf_convert_info info;
    int rc = hf_convert(&p, &info);
    if (rc) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    printf("kite convert: wrote %s (%s from %s: %lld layers, %lld tokens (%s%s%s), %lld tensors, %s)\n", p.out_path,
           info.arch, info.model_type, (long long)info.n_layer, (long long)info.n_vocab, info.tokenizer,
           info.pre[0] ? " " : "", info.pre, (long long)info.n_tensors, dtype_name(info.out_type));
    return 0;
}
