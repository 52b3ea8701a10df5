/*
 * convert.c - `kite convert`: llama2.c checkpoint + tokenizer -> GGUF.
 *
 *   kite convert MODEL.bin --tokenizer TOK.bin -o OUT.gguf [--type f32|f16|bf16] [--name NAME]
 *   kite convert --tokenizer TOK.bin -o OUT.gguf [--vocab-size N] [--hparams SPEC] [--name NAME]
 *
 * A thin driver over tools/convert/llama2c.c: it parses flags, fills
 * llama2c_convert_params and prints one summary line.  Without MODEL.bin
 * the output is a vocab-only GGUF (general.* and tokenizer.* keys, plus the
 * llama.* hyperparameters only when --hparams is given).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "convert/hf_convert.h"
#include "kite.h"
#include "convert/llama2c.h"
#include "progress/progress.h"
#include "tensor/dtype.h"

#define CMD "convert"

static bool parse_hparams(const char *s, llama2c_hparams *h) {
    if (!strcmp(s, "llama2-7b")) {
        *h = (llama2c_hparams){4096, 11008, 32, 32, 32, 4096};
        return true;
    }
    int32_t v[6];
    const char *p = s;
    for (int i = 0; i < 6; i++) {
        char tok[32];
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if ((i < 5) != (comma != NULL) || n == 0 || n >= sizeof tok) goto bad;
        memcpy(tok, p, n);
        tok[n] = '\0';
        int64_t x;
        if (!cli_parse_i64(CMD, "--hparams", tok, 1, INT32_MAX, &x)) return false;
        v[i] = (int32_t)x;
        p = comma ? comma + 1 : p + n;
    }
    *h = (llama2c_hparams){v[0], v[1], v[2], v[3], v[4], v[5]};
    if (h->dim % h->n_heads != 0 || h->n_heads % h->n_kv_heads != 0) {
        cli_usage_error(CMD, "--hparams: DIM must be a multiple of HEADS and HEADS of KV_HEADS");
        return false;
    }
    return true;
bad:
    cli_usage_error(CMD, "--hparams: expected DIM,HIDDEN,LAYERS,HEADS,KV_HEADS,CONTEXT or llama2-7b, got '%s'", s);
    return false;
}

typedef struct convert_opts {
    llama2c_convert_params p;
    llama2c_hparams hp;
    const char *out;
    bool have_vocab_size;
} convert_opts;

static int convert_hparams(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    convert_opts *c = state;
    (void)o, (void)cmd, (void)flag, (void)n;
    if (!parse_hparams(vals[0], &c->hp)) return -1;
    c->p.hparams = &c->hp;
    return 1;
}

/* MODEL.bin, at most once. */
static int convert_arg(void *state, const char *cmd, int argc, char **argv, int *i) {
    convert_opts *c = state;
    const char *a = argv[*i];
    (void)argc;
    if (cli_is_option(a)) return cli_usage_error(cmd, "unknown option '%s'", a);
    if (c->p.model_path) return cli_usage_error(cmd, "more than one MODEL.bin ('%s' and '%s')", c->p.model_path, a);
    c->p.model_path = a;
    return 0;
}

/* -m MODEL.bin: the same as the positional. */
static int convert_model(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    convert_opts *c = state;
    (void)o, (void)flag, (void)n;
    if (c->p.model_path)
        return cli_usage_error(cmd, "more than one MODEL.bin ('%s' and '%s')", c->p.model_path, vals[0]);
    c->p.model_path = vals[0];
    return 1;
}

static const char *const out_type_names[] = {"f32", "f16", "bf16", NULL};
static const int32_t out_type_values[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16};

static const cli_opt convert_opts_table[] = {
    {.names = "-m, --model", .arg = "MODEL.bin", .help = "the llama2.c checkpoint (the same as giving MODEL.bin)",
     .kind = CLI_FN, .nargs = 1, .fn = convert_model, .example = "m.bin"},
    {.names = "-z, --tokenizer", .arg = "TOK",
     .help = "llama2.c tokenizer .bin (required); in model mode it must have\nexactly the model's vocab_size tokens",
     .kind = CLI_STR, CLI_AT(convert_opts, p.tokenizer_path)},
    {.names = "-o, --output", .arg = "OUT", .help = "output GGUF path (written to a temporary file, then renamed)",
     .kind = CLI_STR, CLI_AT(convert_opts, out)},
    {.names = "--type", .arg = "T", .help = "f32, f16 or bf16 for the matrices; norm vectors stay f32",
     .kind = CLI_ENUM, CLI_AT(convert_opts, p.out_type), .choices = out_type_names, .values = out_type_values,
     .def = "f32"},
    {.names = "--name", .arg = "NAME", .help = "general.name", .kind = CLI_STR, CLI_AT(convert_opts, p.name),
     .def_doc = "the input file name without .bin"},
    {.kind = CLI_SECTION, .help = "vocab-only mode (no MODEL.bin):"},
    {.names = "--vocab-size", .arg = "N", .help = "read the first N tokens", .kind = CLI_INT,
     CLI_AT(convert_opts, p.vocab_size), .min = 1, .max = INT32_MAX - 1, CLI_SEEN(convert_opts, have_vocab_size),
     .def_doc = "read to the end of the file"},
    {.names = "--hparams", .arg = "SPEC",
     .help = "also write llama.* hyperparameters, which llama.cpp needs to load\n"
             "a vocab-only file: DIM,HIDDEN,LAYERS,HEADS,KV_HEADS,CONTEXT or the\n"
             "preset llama2-7b (= 4096,11008,32,32,32,4096)",
     .kind = CLI_FN, .nargs = 1, .fn = convert_hparams, .example = "llama2-7b"},
    CLI_OPT_QUIET,
};

const cli_spec cli_spec_convert = {
    .cmd = CMD,
    .usage = "usage: kite convert MODEL.bin --tokenizer TOK.bin -o OUT.gguf [--type f32|f16|bf16] [--name NAME]\n"
             "       kite convert --tokenizer TOK.bin -o OUT.gguf [--vocab-size N] [--hparams SPEC] [--name NAME]\n"
             "       kite convert --hf DIR -o OUT.gguf [--type f32|f16|bf16|q8_0] [--name NAME]\n"
             "\n"
             "Converts a llama2.c checkpoint (legacy v0, v1 fp32 or v2 int8, auto-detected) and its\n"
             "tokenizer .bin to a GGUF file for architecture \"llama\", following llama.cpp's\n"
             "conventions (so llama.cpp can run it too).  Sizes are checked exactly against the file.\n"
             "MODEL.bin is the llama2.c model; omit it to write a vocab-only GGUF.  With --hf it converts\n"
             "a Hugging Face directory instead: `kite convert --hf --help` lists those options (a real\n"
             "one to try: tests/data/hf-tinystories656k).\n",
    CLI_TABLE(convert_opts_table, convert_opts),
    .other = convert_arg,
};

int cmd_convert(int argc, char **argv) {
    /* Hugging Face directories: their own option table (convert_hf.c) */
    if (cli_find_arg(argc, argv, "--hf")) {
        if (cli_find_arg(argc, argv, "--help") || cli_find_arg(argc, argv, "-h")) { /* before --hf takes it as DIR */
            cli_usage(stdout, &cli_spec_convert_hf, NULL);
            return 0;
        }
        return convert_hf(argc, argv);
    }
    convert_opts o = {0};
    int prc = cli_parse(&cli_spec_convert, argc, argv, &o);
    if (prc >= 0) return prc;
    llama2c_convert_params p = o.p;
    const char *out = o.out;
    const bool have_vocab_size = o.have_vocab_size;
    if (!p.tokenizer_path) return cli_usage_error(CMD, "--tokenizer TOK.bin is required");
    if (!out) return cli_usage_error(CMD, "-o OUT.gguf is required");
    if (p.model_path && (have_vocab_size || p.hparams))
        return cli_usage_error(CMD, "--vocab-size and --hparams are for vocab-only output (no MODEL.bin); "
                                    "a model's header gives both");
    if (!p.model_path && p.out_type != KITE_DTYPE_F32)
        return cli_usage_error(CMD, "--type needs MODEL.bin (a vocab-only file has no tensors)");

    llama2c_conv *cv = NULL;
    int rc = llama2c_conv_new(&p, &cv);
    if (rc) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    llama2c_config cfg = {0};
    const llama2c_config *c = llama2c_conv_config(cv) ? &cfg : NULL;
    if (c) cfg = *llama2c_conv_config(cv);
    int32_t n_vocab = llama2c_conv_n_vocab(cv);
    progress pg;
    progress_begin(&pg, "kite " CMD, PROGRESS_BYTES, NULL);
    gguf_writer_set_progress(llama2c_conv_writer(cv), progress_sink(&pg));
    rc = gguf_writer_write(llama2c_conv_writer(cv), out);
    progress_end(&pg);
    llama2c_conv_free(cv);
    if (rc) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    if (c)
        printf("kite convert: wrote %s (llama2.c v%d: dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d "
               "vocab_size=%d seq_len=%d, %s classifier, %s)\n",
               out, (int)c->version, (int)c->dim, (int)c->hidden_dim, (int)c->n_layers, (int)c->n_heads,
               (int)c->n_kv_heads, (int)c->vocab_size, (int)c->seq_len, c->shared_classifier ? "shared" : "separate",
               dtype_name(p.out_type));
    else
        printf("kite convert: wrote %s (vocab-only, %d tokens%s)\n", out, (int)n_vocab,
               p.hparams ? ", with llama.* hyperparameters" : "");
    return 0;
}
