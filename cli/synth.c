/*
 * synth.c - `kite synth`: a random-weight GGUF model of a real shape.
 *
 *   kite synth --shape NAME --type TYPE -o OUT.gguf [--layers N] [--seed S] [-t THREADS]
 *
 * A thin driver over src/roofline/synth.c: parses flags, checks the type has a
 * reference quantizer, writes the file and prints one summary line.  The
 * output depends only on the shape, --layers, --type and --seed (never on -t).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/timing.h"
#include "core/tmpfile.h"
#include "kite.h"
#include "progress/progress.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

#define CMD "synth"

typedef struct synth_opts {
    const char *shape, *type, *out, *vocab;
    int64_t layers, threads;
    uint64_t seed;
} synth_opts;

static const cli_opt synth_opts_table[] = {
    {.names = "--shape", .arg = "NAME", .help = "%s", .choices_fn = synth_shape_list, .kind = CLI_STR,
     CLI_AT(synth_opts, shape)},
    {.names = "--type", .arg = "TYPE",
     .help = "matrix type: any type kite can quantize to (f32, f16, bf16, and the\n"
             "block formats once they have a reference quantizer), q4_k_m or\n"
             "q5_k_m (llama.cpp's Q4_K_M / Q5_K_M mixes with q6_K); norm vectors stay f32;\n"
             "rows the type's block does not fit get kite quantize's fallback\n"
             "type (q4_k->q5_0, q6_k->q8_0, ..., else f16), listed on stderr",
     .kind = CLI_STR, CLI_AT(synth_opts, type)},
    {.names = "-o, --output", .arg = "F", .help = "output path (written to a temporary file, then renamed)",
     .kind = CLI_STR, CLI_AT(synth_opts, out)},
    {.names = "--layers", .arg = "N", .help = "override the layer count (smaller files for quick benchmarks)",
     .kind = CLI_INT, CLI_AT(synth_opts, layers), .min = 1, .max = 4096},
    {.names = "-s, --seed", .arg = "S", .help = "PRNG seed; same seed and flags -> same bytes", .kind = CLI_U64,
     CLI_AT(synth_opts, seed), .def = "1"},
    {.names = "--vocab", .arg = "F.gguf",
     .help = "take the tokenizer (tokenizer.* keys) and vocabulary size of F,\ne.g. a real Llama 3 or Qwen3 vocabulary on a tiny shape",
     .kind = CLI_STR, CLI_AT(synth_opts, vocab)},
    {.names = "-t, --threads", .arg = "N", .help = "generator threads; no effect on the output", .kind = CLI_INT,
     CLI_AT(synth_opts, threads), .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    CLI_OPT_QUIET,
};

const cli_spec cli_spec_synth = {
    .cmd = CMD,
    .usage = "usage: kite synth --shape NAME --type TYPE -o OUT.gguf [--layers N] [-s SEED] [-t THREADS] [-q]\n"
             "\n"
             "Writes a GGUF model with the architecture (llama, qwen2, qwen3, qwen3moe, gpt2, phi3,\n"
             "gemma2; Mixtral experts, Mistral sliding window, Llama 3 rope factors), hyperparameters and\n"
             "vocabulary "
             "size of a real model and deterministic random weights, scaled so that activations stay\n"
             "finite and logits are O(1): for benchmarks and tests without downloads.  tiny-* shapes\n"
             "are small test models (2 layers; tiny-gemma2 26, as llama.cpp requires).  llama.cpp\n"
             "loads them too (its Feb 2025 snapshot: not qwen3*).\n",
    CLI_TABLE(synth_opts_table, synth_opts),
};

int cmd_synth(int argc, char **argv) {
    tmpf_install_signal_handlers(); /* an interrupt removes the temporary output */
    synth_opts o = {0};
    int rc = cli_parse(&cli_spec_synth, argc, argv, &o);
    if (rc >= 0) return rc;
    const char *shape = o.shape, *type = o.type, *out = o.out;
    const int64_t layers = o.layers, threads = o.threads;
    const uint64_t seed = o.seed;
    if (!shape) return cli_usage_error(CMD, "--shape NAME is required (%s)", synth_shape_list());
    if (!type) return cli_usage_error(CMD, "--type TYPE is required");
    if (!out) return cli_usage_error(CMD, "-o OUT.gguf is required");
    const synth_shape *s = synth_shape_find(shape);
    if (!s) return cli_usage_error(CMD, "--shape: unknown shape '%s' (%s)", shape, synth_shape_list());

    synth_params p = {.shape = *s, .seed = seed, .mix = SYNTH_MIX_PURE};
    if (layers > 0) p.shape.n_layer = (int32_t)layers;
    if (o.vocab) {
        if (synth_vocab_size(o.vocab, &p.shape.n_vocab) != KITE_OK) {
            fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
            return 1;
        }
        p.vocab_from = o.vocab;
    }
    if (!strcmp(type, "q4_k_m") || !strcmp(type, "Q4_K_M")) {
        p.mix = SYNTH_MIX_Q4_K_M;
        p.type = KITE_DTYPE_Q4_K;
    } else if (!strcmp(type, "q5_k_m") || !strcmp(type, "Q5_K_M")) {
        p.mix = SYNTH_MIX_Q5_K_M;
        p.type = KITE_DTYPE_Q5_K;
    } else {
        int t = dtype_from_name(type);
        if (t < 0) return cli_usage_error(CMD, "--type: unknown type '%s'", type);
        p.type = (uint32_t)t;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p.n_threads = threads > 0 ? (int)threads : (ncpu > 0 ? (int)ncpu : 1);

    if (synth_check(&p) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    char fell[1024];
    int n_fell = synth_fallbacks(&p, fell, sizeof fell);
    if (n_fell > 0) /* like kite quantize: rows a block does not fit get llama.cpp's fallback type */
        fprintf(stderr, "kite %s: %d tensors fell back to a type that fits their row length: %s\n", CMD, n_fell, fell);
    double t0 = time_now_s();
    progress pg;
    progress_begin(&pg, "kite " CMD, PROGRESS_BYTES, NULL);
    p.progress = progress_sink(&pg);
    rc = synth_write(&p, out);
    progress_end(&pg);
    if (rc != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    printf("%s: shape %s, %d layers, type %s, seed %" PRIu64 ", %.1f MB of tensor data, %.1f s\n", out, s->name,
           p.shape.n_layer, p.mix == SYNTH_MIX_Q4_K_M ? "q4_k_m" : p.mix == SYNTH_MIX_Q5_K_M ? "q5_k_m" : dtype_name(p.type), seed,
           (double)synth_data_bytes(&p) / 1e6, time_now_s() - t0);
    return 0;
}
