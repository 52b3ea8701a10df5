/*
 * test_cli_opts.c - the option tables of the CLI (cli/cli.h, cli/args.c).
 *
 * Over every table in cli_specs: the defaults parse, every spelling of every
 * row accepts a valid value (and integer and float rows store it in their
 * field), --help lists every spelling, and every command's --help exits 0.
 * A small table of its own pins the parser's behaviour: kinds, defaults,
 * "seen" flags, lists, enums, the one-line usage errors and the help layout.
 * Links the CLI objects without main.o (build/libkite-cli.a).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "../../cli/cli.h"
#include "harness.h"

/* ---- capturing stdout / stderr -------------------------------------------------- */

typedef struct capture {
    int fd, saved;
    char path[64];
} capture;

/* Sends fd to a fresh temporary file. */
static capture capture_begin(int fd) {
    capture c = {.fd = fd};
    fflush(stdout);
    fflush(stderr);
    snprintf(c.path, sizeof c.path, "/tmp/kite-cli-opts.XXXXXX");
    const int t = mkstemp(c.path);
    c.saved = dup(fd);
    dup2(t, fd);
    close(t);
    return c;
}

/* Restores the descriptor and returns what was written (malloc'd, NUL-terminated). */
static char *capture_end(capture *c) {
    fflush(stdout);
    fflush(stderr);
    dup2(c->saved, c->fd);
    close(c->saved);
    size_t n = 0;
    char *text = harness_read_file(c->path, &n);
    unlink(c->path);
    if (!text) text = calloc(1, 1);
    return text;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Calls cli_parse with stdout and stderr captured; *out / *err get them (free them). */
static int parse_captured(const cli_spec *s, int argc, char **argv, void *state, char **out, char **err) {
    capture so = capture_begin(1), se = capture_begin(2);
    const int rc = cli_parse(s, argc, argv, state);
    char *e = capture_end(&se);
    char *o = capture_end(&so);
    if (out) *out = o;
    else free(o);
    if (err) *err = e;
    else free(e);
    return rc;
}

/* ---- the tables of the CLI --------------------------------------------------------- */

/* The k-th ", "-separated spelling of names into buf; false past the last. */
static bool spelling(const char *names, int k, char *buf, size_t cap) {
    const char *p = names;
    for (int i = 0; i < k; i++) {
        p = strstr(p, ", ");
        if (!p) return false;
        p += 2;
    }
    const char *e = strstr(p, ", ");
    snprintf(buf, cap, "%.*s", (int)(e ? (size_t)(e - p) : strlen(p)), p);
    return true;
}

static bool has_spelling(const char *names, const char *name) {
    char buf[64];
    for (int k = 0; spelling(names, k, buf, sizeof buf); k++)
        if (!strcmp(buf, name)) return true;
    return false;
}

/* A valid value list for row o into vals (backed by buf); returns the count. */
static int valid_values(const cli_opt *o, char *buf, size_t cap, char **vals) {
    if (o->kind == CLI_FN && o->nargs == 0) return 0; /* a flag handled by fn (-q) */
    if (o->example) {
        snprintf(buf, cap, "%s", o->example);
        int n = 0;
        for (char *t = strtok(buf, " "); t && n < 4; t = strtok(NULL, " ")) vals[n++] = t;
        return n;
    }
    switch (o->kind) {
    case CLI_FLAG: return 0;
    case CLI_INT: snprintf(buf, cap, "%lld", (long long)o->max); break;
    case CLI_LIST: snprintf(buf, cap, "%lld,%lld", (long long)o->min, (long long)o->max); break;
    case CLI_U64: snprintf(buf, cap, "12345"); break;
    case CLI_FLOAT: snprintf(buf, cap, "%.9g", (double)o->fmax); break;
    case CLI_ENUM: snprintf(buf, cap, "%s", o->choices[0]); break;
    default: snprintf(buf, cap, "x"); break;
    }
    vals[0] = buf;
    return 1;
}

TEST(defaults_parse) {
    for (size_t i = 0; i < cli_n_specs; i++) {
        const cli_spec *s = cli_specs[i];
        void *st = calloc(1, s->state_size);
        char *argv[] = {(char *)s->cmd, NULL};
        char *err = NULL;
        const int rc = parse_captured(s, 1, argv, st, NULL, &err);
        CHECK_MSG(rc == -1, "%s (table %zu): defaults: rc %d: %s", s->cmd, i, rc, err);
        free(err);
        free(st);
    }
}

TEST(every_option_accepted) {
    int n_checked = 0;
    for (size_t i = 0; i < cli_n_specs; i++) {
        const cli_spec *s = cli_specs[i];
        for (size_t r = 0; r < s->n_opts; r++) {
            const cli_opt *o = &s->opts[r];
            if (o->kind == CLI_SECTION) continue;
            CHECK_MSG(o->kind != CLI_FN || o->example || o->nargs == 0, "%s %s: a CLI_FN row needs .example", s->cmd,
                      o->names);
            char name[64], buf[128];
            for (int k = 0; spelling(o->names, k, name, sizeof name); k++) {
                char *argv[8] = {(char *)s->cmd, name};
                const int nv = valid_values(o, buf, sizeof buf, argv + 2);
                void *st = calloc(1, s->state_size);
                char *err = NULL;
                const int rc = parse_captured(s, 2 + nv, argv, st, NULL, &err);
                CHECK_MSG(rc == -1, "%s %s %s: rc %d: %s", s->cmd, name, nv ? argv[2] : "", rc, err);
                if (rc == -1 && !o->fn && o->kind == CLI_INT) {
                    int64_t v = 0;
                    if (o->size == sizeof v) memcpy(&v, (char *)st + o->off, sizeof v);
                    else {
                        int32_t w;
                        memcpy(&w, (char *)st + o->off, sizeof w);
                        v = w;
                    }
                    CHECK_MSG(v == o->max, "%s %s: stored %lld, given %lld", s->cmd, name, (long long)v,
                              (long long)o->max);
                }
                if (rc == -1 && !o->fn && o->kind == CLI_FLOAT) {
                    float v;
                    memcpy(&v, (char *)st + o->off, sizeof v);
                    CHECK_MSG(v == o->fmax, "%s %s: stored %g", s->cmd, name, (double)v);
                }
                n_checked++;
                free(err);
                free(st);
            }
        }
    }
    CHECK(n_checked > 150);
}

TEST(help_lists_every_option) {
    for (size_t i = 0; i < cli_n_specs; i++) {
        const cli_spec *s = cli_specs[i];
        capture so = capture_begin(1);
        cli_usage(stdout, s, NULL);
        char *text = capture_end(&so);
        char want[64];
        snprintf(want, sizeof want, "usage: kite %s", s->cmd);
        CHECK_MSG(!strncmp(text, want, strlen(want)), "%s: help starts '%.40s'", s->cmd, text);
        CHECK_CONTAINS(text, "  -h, --help");
        for (size_t r = 0; r < s->n_opts; r++) {
            char name[64];
            const cli_opt *o = &s->opts[r];
            if (o->kind == CLI_SECTION) {
                CHECK_CONTAINS(text, o->help);
                continue;
            }
            for (int k = 0; spelling(o->names, k, name, sizeof name); k++) CHECK_CONTAINS(text, name);
            /* no spelling twice in a table (the parser would never reach the second) */
            for (size_t q = r + 1; q < s->n_opts; q++)
                for (int k = 0; s->opts[q].kind != CLI_SECTION && spelling(s->opts[q].names, k, name, sizeof name);
                     k++)
                    CHECK_MSG(!has_spelling(o->names, name), "%s: %s twice", s->cmd, name);
        }
        free(text);
    }
}

/* Every command's --help (and that of the modes bench and quantize hand over to) exits 0. */
TEST(command_help_exits_0) {
    for (size_t i = 0; i < cli_n_commands; i++) {
        char *argv[] = {(char *)cli_commands[i].name, "--help", NULL};
        capture so = capture_begin(1);
        const int rc = cli_commands[i].fn(2, argv);
        char *text = capture_end(&so);
        CHECK_MSG(rc == 0, "kite %s --help: exit %d", cli_commands[i].name, rc);
        CHECK_MSG(!strncmp(text, "usage: kite ", 12), "kite %s --help: '%.40s'", cli_commands[i].name, text);
        free(text);
    }
    static char *modes[][5] = {
        {"bench", "--parallel", "1", "--help"},
        {"bench", "--spec-verify", "--help"},
        {"bench", "--lut-gemm", "--help"},
        {"quantize", "--method", "smoothquant", "--help"},
    };
    int (*const fns[])(int, char **) = {cmd_bench, cmd_bench, cmd_bench, cmd_quantize};
    for (size_t m = 0; m < CLI_N(modes); m++) {
        int argc = 0;
        while (modes[m][argc]) argc++;
        capture so = capture_begin(1);
        const int rc = fns[m](argc, modes[m]);
        char *text = capture_end(&so);
        CHECK_MSG(rc == 0, "kite %s %s --help: exit %d", modes[m][0], modes[m][1], rc);
        CHECK_CONTAINS(text, modes[m][1]);
        free(text);
    }
}

/* ---- the parser, on a table of its own ---------------------------------------------- */

typedef struct demo {
    int64_t n;
    int32_t small;
    uint64_t seed;
    float temp;
    const char *path;
    int32_t kind;
    int32_t list[4];
    int n_list;
    bool flag, seed_seen;
    int fn_calls;
    const char *pair[2];
} demo;

static int demo_pair(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    demo *d = state;
    (void)o, (void)cmd, (void)flag, (void)n;
    d->pair[0] = vals[0];
    d->pair[1] = vals[1];
    d->fn_calls++;
    return 2;
}

static int demo_even(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)n;
    if (((demo *)state)->small % 2) return cli_usage_error(cmd, "%s: %s is odd", flag, vals[0]), -1;
    return 1;
}

static const char *demo_choices(void) { return "alpha|beta"; }

static const char *const kind_names[] = {"one", "two", "three", NULL};
static const int32_t kind_values[] = {10, 20, 30};

static const cli_opt demo_opts[] = {
    {.names = "-n, --number, --num", .arg = "N", .help = "a count", .kind = CLI_INT, CLI_AT(demo, n), .min = -5,
     .max = 100, .def = "7"},
    {.names = "--small", .arg = "S", .help = "an even number", .kind = CLI_INT, CLI_AT(demo, small), .min = 0,
     .max = 10, .fn = demo_even},
    {.names = "--seed", .arg = "S", .kind = CLI_U64, CLI_AT(demo, seed), CLI_SEEN(demo, seed_seen),
     .def_doc = "from the clock"},
    {.names = "--temp", .arg = "T", .help = "temperature", .kind = CLI_FLOAT, CLI_AT(demo, temp), .fmin = 0.0f,
     .fmax = 2.0f, .show_default = true},
    {.kind = CLI_SECTION, .help = "Other things:"},
    {.names = "-p, --path", .arg = "FILE", .help = "one of %s", .choices_fn = demo_choices, .kind = CLI_STR,
     CLI_AT(demo, path)},
    {.names = "--kind", .arg = "K", .kind = CLI_ENUM, CLI_AT(demo, kind), .choices = kind_names,
     .values = kind_values, .icase = true, .def = "two"},
    {.names = "--list", .arg = "LIST", .kind = CLI_LIST, CLI_AT(demo, list), CLI_COUNT(demo, n_list), .min = 1,
     .max = 9},
    {.names = "--flag", .help = "a flag", .kind = CLI_FLAG, CLI_AT(demo, flag)},
    {.names = "--pair", .arg = "A B", .kind = CLI_FN, .nargs = 2, .fn = demo_pair, .example = "a b"},
};

static const cli_spec demo_spec = {
    .cmd = "demo",
    .usage = "usage: kite demo [options]\n",
    .epilog = "The end.\n",
    .opts = demo_opts,
    .n_opts = CLI_N(demo_opts),
    .state_size = sizeof(demo),
};

TEST(parser_kinds_and_defaults) {
    demo d = {.temp = 0.5f};
    char *argv[] = {"demo", "--num", "-5", "--small", "4", "--seed", "18446744073709551615", "--temp", "1.5",
                    "-p", "-h", "--kind", "THREE", "--list", "1,9,3", "--flag", "--pair", "x", "--y"};
    CHECK_EQ_INT(cli_parse(&demo_spec, CLI_N(argv), argv, &d), -1);
    CHECK_EQ_INT(d.n, -5);
    CHECK_EQ_INT(d.small, 4);
    CHECK(d.seed == UINT64_MAX);
    CHECK(d.seed_seen);
    CHECK_NEAR(d.temp, 1.5, 0);
    CHECK_STR_EQ(d.path, "-h"); /* a value is taken whatever it looks like */
    CHECK_EQ_INT(d.kind, 30);
    CHECK_EQ_INT(d.n_list, 3);
    CHECK_EQ_INT(d.list[1], 9);
    CHECK(d.flag);
    CHECK_EQ_INT(d.fn_calls, 1);
    CHECK_STR_EQ(d.pair[1], "--y");

    demo e = {0};
    char *none[] = {"demo"};
    CHECK_EQ_INT(cli_parse(&demo_spec, 1, none, &e), -1);
    CHECK_EQ_INT(e.n, 7);     /* .def parsed into the field */
    CHECK_EQ_INT(e.kind, 20); /* an enum default */
    CHECK(!e.seed_seen);
}

/* Every usage error: exit 2 and one line "kite demo: ... (see 'kite demo --help')". */
TEST(parser_errors) {
    static const struct {
        const char *args[4];
        const char *needle;
    } cases[] = {
        {{"--num", "101"}, "kite demo: --num: expected an integer in [-5, 100], got '101'"},
        {{"-n", "1x"}, "kite demo: -n: expected an integer in [-5, 100], got '1x'"},
        {{"--small", "3"}, "kite demo: --small: 3 is odd"},
        {{"--seed", "-1"}, "kite demo: --seed: expected a non-negative integer, got '-1'"},
        {{"--temp", "nan"}, "kite demo: --temp: expected a number in [0, 2], got 'nan'"},
        {{"--kind", "four"}, "kite demo: --kind: expected one, two or three, got 'four'"},
        {{"--list", "1,10"}, "kite demo: --list: expected an integer in [1, 9], got '10'"},
        {{"--list", "1,2,3,4,5"}, "kite demo: --list: at most 4 values"},
        {{"--bogus"}, "kite demo: unknown option '--bogus' (see 'kite demo --help')"},
        {{"positional"}, "unknown option 'positional'"},
        {{"--num"}, "kite demo: --num needs a value"},
        {{"--pair", "a"}, "kite demo: a needs a value"},
    };
    for (size_t c = 0; c < CLI_N(cases); c++) {
        char *argv[6] = {"demo"};
        int argc = 1;
        for (int k = 0; k < 4 && cases[c].args[k]; k++) argv[argc++] = (char *)cases[c].args[k];
        demo d = {0};
        char *err = NULL;
        const int rc = parse_captured(&demo_spec, argc, argv, &d, NULL, &err);
        CHECK_MSG(rc == 2, "%s: rc %d", cases[c].needle, rc);
        CHECK_MSG(count_lines(err) == 1, "%s: %d lines: %s", cases[c].needle, count_lines(err), err);
        CHECK_CONTAINS(err, cases[c].needle);
        CHECK_CONTAINS(err, " (see 'kite demo --help')\n");
        free(err);
    }
}

TEST(parser_help) {
    demo d = {.temp = 0.25f};
    char *argv[] = {"demo", "--temp", "1", "--help", "--bogus"};
    char *out = NULL, *err = NULL;
    CHECK_EQ_INT(parse_captured(&demo_spec, CLI_N(argv), argv, &d, &out, &err), 0);
    CHECK_STR_EQ(err, "");
    CHECK_STR_EQ(out, "usage: kite demo [options]\n"
                      "\n"
                      "  -n, --number, --num N   a count (default 7)\n"
                      "      --small S           an even number\n"
                      "      --seed S            (default: from the clock)\n"
                      "      --temp T            temperature (default 0.25)\n"
                      "\n"
                      "Other things:\n"
                      "  -p, --path FILE         one of alpha|beta\n"
                      "      --kind K            (default two)\n"
                      "      --list LIST\n"
                      "      --flag              a flag\n"
                      "      --pair A B\n"
                      "  -h, --help              this text\n"
                      "\n"
                      "The end.\n");
    free(out);
    free(err);
}

int main(void) {
    RUN(defaults_parse);
    RUN(every_option_accepted);
    RUN(help_lists_every_option);
    RUN(command_help_exits_0);
    RUN(parser_kinds_and_defaults);
    RUN(parser_errors);
    RUN(parser_help);
    return harness_summary("test_cli_opts");
}
