/*
 * imatrix.c - `kite imatrix`: the importance matrix of a model over a text,
 * written in llama.cpp's imatrix format (src/quant/imatrix.h), for
 * `kite quantize --imatrix` and llama-quantize --imatrix alike.
 *
 *   kite imatrix -m MODEL -f TEXT [-o imatrix.dat] [-c 512] [--chunks N]
 *                [--process-output] [-t N]
 *
 * llama-imatrix's options and defaults: chunks of 512 tokens, each started
 * with BOS; the estimate of the perplexity over the second halves of the
 * chunks is printed at the end (it is the same model over the same text).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config/config.h"
#include "core/tmpfile.h"
#include "kite.h"
#include "progress/progress.h"
#include "quant/imatrix.h"

#define CMD "imatrix"

typedef struct imatrix_opts {
    const char *model, *text, *out;
    int64_t n_ctx, chunks, threads;
    bool process_output, quiet;
} imatrix_opts;

static const cli_opt imatrix_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model (the unquantized one, as for llama-imatrix)", .kind = CLI_STR,
     CLI_AT(imatrix_opts, model), .def_doc = "the bundled model"},
    {.names = "-f, --file", .arg = "TEXT", .help = "calibration text (required)", .kind = CLI_STR,
     CLI_AT(imatrix_opts, text)},
    {.names = "-o, --output, --output-file", .arg = "F", .help = "imatrix file to write (temporary file, then renamed)",
     .kind = CLI_STR, CLI_AT(imatrix_opts, out), .def_doc = "imatrix.dat"},
    {.names = "-c, --ctx-size", .arg = "N", .help = "tokens per chunk, BOS written over the first", .kind = CLI_INT,
     CLI_AT(imatrix_opts, n_ctx), .min = 2, .max = 1 << 20, .def_doc = "512"},
    {.names = "--chunks", .arg = "N", .help = "chunks to run", .kind = CLI_INT, CLI_AT(imatrix_opts, chunks), .min = 1,
     .max = 1 << 30, .def_doc = "all the text gives"},
    {.names = "--process-output", .help = "also collect output.weight (llama-imatrix --process-output)",
     .kind = CLI_FLAG, CLI_AT(imatrix_opts, process_output)},
    {.names = "-t, --threads", .arg = "N", .help = "worker threads; no effect on the output", .kind = CLI_INT,
     CLI_AT(imatrix_opts, threads), .min = 1, .max = 1024, .def_doc = "all CPUs"},
    {.names = "-q, --quiet", .help = "no progress", .kind = CLI_FLAG, CLI_AT(imatrix_opts, quiet)},
};

const cli_spec cli_spec_imatrix = {
    .cmd = CMD,
    .usage = "usage: kite imatrix [-m MODEL] -f TEXT [-o imatrix.dat] [options]\n"
             "\n"
             "Runs MODEL over TEXT in chunks of -c tokens (each from an empty cache, BOS\n"
             "written over its first token) and writes, for every weight matrix of the\n"
             "layers, the mean square of each input column: the importance matrix of\n"
             "llama.cpp's llama-imatrix, in its file format, so llama-quantize --imatrix\n"
             "reads it and kite quantize --imatrix reads llama-imatrix's files.\n"
             "Expert tensors get one slice per expert (the rows routed to it).\n"
             "See docs/quantization/imatrix.md.\n",
    CLI_TABLE(imatrix_opts_table, imatrix_opts),
    .unknown = "unknown argument",
};

int cmd_imatrix(int argc, char **argv) {
    imatrix_opts o = {0};
    int rc = cli_parse(&cli_spec_imatrix, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.text) return cli_usage_error(CMD, "missing -f TEXT (the calibration text)");
    const char *model_path = o.model ? o.model : cli_default_model(argv[0]);
    const char *out = o.out ? o.out : "imatrix.dat";
    if (o.quiet) progress_set_quiet(true);
    tmpf_install_signal_handlers(); /* an interrupt leaves no temporary file */
    size_t len = 0;
    char *text = cli_read_file(o.text, &len);
    if (!text) {
        fprintf(stderr, "kite imatrix: %s: cannot read: %s\n", o.text, strerror(errno));
        return 1;
    }
    kite_model *model = NULL;
    imatrix *m = NULL;
    int status = 1;
    kite_model_params mp = config_model_params();
    if (kite_model_load(model_path, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite imatrix: %s\n", kite_last_error());
        goto done;
    }
    kite_model_info info;
    kite_model_get_info(model, &info);
    const int32_t n_ctx = o.n_ctx ? (int32_t)o.n_ctx : 512;
    if (info.n_ctx_train > 0 && n_ctx > info.n_ctx_train)
        fprintf(stderr, "kite imatrix: warning: the model was trained on %d tokens of context (-c %d)\n",
                info.n_ctx_train, n_ctx);
    progress pr;
    progress_begin(&pr, "kite imatrix", PROGRESS_ITEMS, "chunks");
    imatrix_params ip = {.n_ctx = n_ctx, .n_chunks = (int32_t)o.chunks, .process_output = o.process_output,
                         .n_threads = (int)o.threads,
                         .dataset = o.text, /* as given, like llama-imatrix */ .log = stderr, .progress = progress_sink(&pr)};
    double ppl = 0;
    rc = imatrix_collect(model, text, len, &ip, &m, &ppl);
    progress_end(&pr);
    if (rc) {
        fprintf(stderr, "kite imatrix: %s\n", kite_last_error());
        goto done;
    }
    if (imatrix_write(m, out)) {
        fprintf(stderr, "kite imatrix: %s\n", kite_last_error());
        goto done;
    }
    printf("imatrix: %d entries from %d chunks of %d tokens written to %s (estimated ppl %.4f)\n", m->n_entries,
           m->chunks, n_ctx, out, ppl);
    status = 0;
done:
    imatrix_free(m);
    kite_model_free(model);
    free(text);
    return status;
}
