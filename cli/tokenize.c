/*
 * tokenize.c - `kite tokenize`: print the token ids of a text as a JSON array.
 *
 * Output: one line, ids separated by ", " (e.g. "[1, 15043, 3186]"; "[]" for
 * an empty text), the same spacing as Python's json.dumps.  The text is taken
 * verbatim ("-" reads all of stdin, NUL bytes and a trailing newline
 * included); special-token text becomes the special tokens unless
 * --no-parse-special, as llama-tokenize does.  BOS only with --bos.  Only the
 * vocabulary of the model is loaded (vocab_only).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config/config.h"
#include "kite.h"

typedef struct tokenize_opts {
    const char *model;
    const char *text;
    bool text_set;
    bool bos;
    bool no_parse_special;
} tokenize_opts;

/* TEXT, or "--" before a TEXT that starts with '-'. */
static int tokenize_arg(void *state, const char *cmd, int argc, char **argv, int *i) {
    tokenize_opts *o = state;
    const char *a = argv[*i];
    if (!strcmp(a, "--") && *i + 1 < argc && !o->text_set) {
        o->text = argv[++*i];
        o->text_set = true;
        return 0;
    }
    if (cli_is_option(a)) return cli_usage_error(cmd, "unknown option '%s'", a);
    if (o->text_set) return cli_usage_error(cmd, "unexpected argument '%s' (quote the text)", a);
    o->text = a;
    o->text_set = true;
    return 0;
}

static const cli_opt tokenize_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model or vocab-only GGUF", .kind = CLI_STR,
     CLI_AT(tokenize_opts, model), .def_doc = "the bundled model"},
    {.names = "--bos", .help = "prepend the BOS token", .kind = CLI_FLAG, CLI_AT(tokenize_opts, bos)},
    CLI_OPT_NO_PARSE_SPECIAL(tokenize_opts, no_parse_special),
};

const cli_spec cli_spec_tokenize = {
    .cmd = "tokenize",
    .usage = "usage: kite tokenize [-m MODEL] [--bos] [--no-parse-special] TEXT\n"
             "\n"
             "Prints the token ids of TEXT as a JSON array on one line, e.g. [15043, 3186].\n"
             "TEXT is taken verbatim; '-' reads all of standard input (including any final\n"
             "newline); put -- before a TEXT that starts with '-'.  Special-token text such\n"
             "as <s> becomes the special token, as llama-tokenize does, unless\n"
             "--no-parse-special.\n",
    CLI_TABLE(tokenize_opts_table, tokenize_opts),
    .other = tokenize_arg,
};

/* Reads all of stdin into a malloc'd buffer. NULL on error. */
static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    tokenize_opts o = {0};
    int prc = cli_parse(&cli_spec_tokenize, argc, argv, &o);
    if (prc >= 0) return prc;
    if (!o.text_set) return cli_usage_error("tokenize", "missing TEXT");
    const char *model_path = o.model ? o.model : cli_default_model(argv[0]), *text = o.text;
    const bool bos = o.bos, parse_special = !o.no_parse_special;

    int status = 1;
    kite_model *model = NULL;
    kite_token *ids = NULL;
    char *input = NULL;
    size_t len;
    if (!strcmp(text, "-")) {
        if (!(input = read_stdin(&len))) {
            fprintf(stderr, "kite tokenize: cannot read standard input\n");
            goto done;
        }
        text = input;
    } else {
        len = strlen(text);
    }

    kite_model_params mp = config_model_params();
    mp.vocab_only = true;
    if (kite_model_load(model_path, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite tokenize: %s\n", kite_last_error());
        goto done;
    }
    size_t n = 0, cap = len + 2;
    ids = malloc(cap * sizeof *ids);
    int rc = ids ? cli_tokenize_text(model, text, len, bos, parse_special, ids, cap, &n) : KITE_E_NOMEM;
    if (rc == KITE_E_RANGE && n > cap) { /* rare: more than one token per byte */
        kite_token *bigger = realloc(ids, n * sizeof *ids);
        if (bigger) {
            ids = bigger;
            cap = n;
            rc = cli_tokenize_text(model, text, len, bos, parse_special, ids, cap, &n);
        }
    }
    if (rc != KITE_OK) {
        fprintf(stderr, "kite tokenize: %s\n", rc == KITE_E_NOMEM ? "out of memory" : kite_last_error());
        goto done;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)ids[i]);
    puts("]");
    status = fflush(stdout) == 0 ? 0 : 1;
done:
    free(ids);
    free(input);
    kite_model_free(model);
    return status;
}
