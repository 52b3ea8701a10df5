/*
 * args.c - option tables (cli_parse, cli_usage; the design is in cli.h),
 * strict flag-value parsing and the rows several subcommands share.
 */
#include "config/config.h"
#include "model/offload.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config/config.h"
#include "model/offload.h"
#include "spec/spec.h"
#include "progress/progress.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kite %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'kite %s --help')\n", cmd);
    return 2;
}

bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: expected an integer in [%lld, %lld], got '%s'", flag, (long long)lo,
                        (long long)hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (s[0] == '-') goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end != '\0') goto bad;
    *out = v;
    return true;
bad:
    cli_usage_error(cmd, "%s: expected a non-negative integer, got '%s'", flag, s);
    return false;
}

bool cli_parse_f32(const char *cmd, const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: expected a number in [%g, %g], got '%s'", flag, (double)lo, (double)hi, s);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_default_model(const char *argv0) {
    static char buf[4096 + 64];
    const char *env = getenv("KITE_MODEL");
    if (env && *env) return env;
    /* build/kite -> <repo>/models/stories260K.gguf */
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, sizeof buf, "%s/../models/stories260K.gguf", exe);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    (void)argv0;
#ifdef KITE_SOURCE_MODEL
    if (access(KITE_SOURCE_MODEL, R_OK) == 0) return KITE_SOURCE_MODEL;
#endif
    return "models/stories260K.gguf";
}

bool cli_text_append(cli_text *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

char *cli_read_stream(FILE *f, size_t *len) {
    cli_text b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (!cli_text_append(&b, chunk, n)) {
            free(b.p);
            return NULL;
        }
    if (ferror(f) || !cli_text_append(&b, "", 0)) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

char *cli_read_file(const char *path, size_t *len) {
    if (!strcmp(path, "-")) return cli_read_stream(stdin, len);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = cli_read_stream(f, len);
    fclose(f);
    return b;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cli_median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int cli_parse_i64_list(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out,
                       int cap) {
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf) {
        cli_usage_error(cmd, "%s: list too long", flag);
        return -1;
    }
    int n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == cap) {
            cli_usage_error(cmd, "%s: at most %d values", flag, cap);
            return -1;
        }
        if (!cli_parse_i64(cmd, flag, tok, lo, hi, &out[n])) return -1;
        n++;
    }
    if (n == 0) {
        cli_usage_error(cmd, "%s: expected a comma-separated list, got '%s'", flag, s);
        return -1;
    }
    return n;
}

/* ---- rows shared by several tables ------------------------------------------ */

const char *const cli_kv_type_names[] = {"f32", "f16", "q8_0", "q4_0", NULL};
const int32_t cli_kv_type_values[] = {KITE_KV_F32, KITE_KV_F16, KITE_KV_Q8_0, KITE_KV_Q4_0};

_Static_assert(SPEC_MAX_DRAFT == 16, "CLI_OPTS_DRAFT's --draft-max range and help say 16");

int cli_opt_quiet(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)state, (void)cmd, (void)flag, (void)vals, (void)n;
    progress_set_quiet(true);
    return 0;
}

int cli_opt_repeat_penalty(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)n;
    float v;
    memcpy(&v, (char *)state + o->off, sizeof v);
    if (!(v > 0.0f)) {
        cli_usage_error(cmd, "%s: expected a number > 0 (1 = off), got '%s'", flag, vals[0]);
        return -1;
    }
    return 1;
}

int cli_opt_mem_budget(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)n;
    uint64_t v;
    if (offload_parse_size(vals[0], &v) != KITE_OK) {
        cli_usage_error(cmd, "%s: %s", flag, kite_last_error());
        return -1;
    }
    memcpy((char *)state + o->off, &v, sizeof v);
    return 1;
}

int cli_opt_f16_compute(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)state, (void)n;
    const int v = config_parse_f16_compute(vals[0]);
    if (v < 0) {
        cli_usage_error(cmd, "%s: expected exact or bf16, got '%s'", flag, vals[0]);
        return -1;
    }
    config_set_f16_compute(v);
    return 1;
}

int cli_opt_lookahead(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)state, (void)flag, (void)n;
    spec_params tmp = spec_default_params();
    if (spec_parse_lookahead(vals[0], &tmp) != KITE_OK) {
        cli_usage_error(cmd, "%s", kite_last_error());
        return -1;
    }
    return 1;
}

/* ---- option tables ------------------------------------------------------------ */

#define HELP_COL 26 /* --help: where the option descriptions start */

int cli_find_arg(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return i;
    return 0;
}

bool cli_is_option(const char *arg) { return arg[0] == '-' && arg[1] != '\0'; }

/* True if arg is one of the ", "-separated spellings in names. */
static bool name_matches(const char *names, const char *arg) {
    const size_t n = strlen(arg);
    for (const char *p = names; *p;) {
        const char *e = strstr(p, ", ");
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !memcmp(p, arg, n)) return true;
        if (!e) break;
        p = e + 2;
    }
    return false;
}

/* The first spelling of o into buf: the name list and enum messages use it. */
static const char *first_name(const cli_opt *o, char *buf, size_t cap) {
    const char *e = strstr(o->names, ", ");
    const size_t len = e ? (size_t)(e - o->names) : strlen(o->names);
    snprintf(buf, cap, "%.*s", (int)len, o->names);
    return buf;
}

static void store_int(void *p, size_t size, int64_t v) {
    if (size == sizeof(int64_t)) {
        memcpy(p, &v, sizeof v);
    } else {
        const int32_t w = (int32_t)v;
        memcpy(p, &w, sizeof w);
    }
}

static int64_t load_int(const void *p, size_t size) {
    if (size == sizeof(int64_t)) {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    int32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

static int values_taken(const cli_opt *o) {
    switch (o->kind) {
    case CLI_FLAG: return 0;
    case CLI_FN: return o->nargs;
    default: return 1;
    }
}

/* Stores value v of row o (spelled flag) in state; false after printing the error. */
static bool apply(const cli_spec *s, const cli_opt *o, const char *flag, const char *v, void *state) {
    void *field = (char *)state + o->off;
    char name[64];
    switch (o->kind) {
    case CLI_FLAG: *(bool *)field = true; return true;
    case CLI_INT: {
        int64_t x;
        if (!cli_parse_i64(s->cmd, flag, v, o->min, o->max, &x)) return false;
        store_int(field, o->size, x);
        return true;
    }
    case CLI_U64: {
        uint64_t x;
        if (!cli_parse_u64(s->cmd, flag, v, &x)) return false;
        memcpy(field, &x, sizeof x);
        return true;
    }
    case CLI_FLOAT: {
        float x;
        if (!cli_parse_f32(s->cmd, flag, v, o->fmin, o->fmax, &x)) return false;
        memcpy(field, &x, sizeof x);
        return true;
    }
    case CLI_STR: memcpy(field, &v, sizeof v); return true;
    case CLI_ENUM: {
        int k = 0;
        while (o->choices[k] && (o->icase ? strcasecmp(o->choices[k], v) : strcmp(o->choices[k], v))) k++;
        if (o->choices[k]) {
            store_int(field, sizeof(int32_t), o->values ? o->values[k] : k);
            return true;
        }
        char list[256];
        size_t n = 0;
        list[0] = '\0';
        for (int j = 0; o->choices[j] && n < sizeof list; j++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", j == 0 ? "" : o->choices[j + 1] ? ", " : " or ",
                                  o->choices[j]);
        cli_usage_error(s->cmd, "%s: expected %s, got '%s'", first_name(o, name, sizeof name), list, v);
        return false;
    }
    case CLI_LIST: {
        int64_t tmp[64];
        int cap = (int)(o->size / sizeof(int32_t));
        if (cap > (int)CLI_N(tmp)) cap = (int)CLI_N(tmp);
        const int n = cli_parse_i64_list(s->cmd, first_name(o, name, sizeof name), v, o->min, o->max, tmp, cap);
        if (n < 0) return false;
        for (int k = 0; k < n; k++) store_int((int32_t *)field + k, sizeof(int32_t), tmp[k]);
        memcpy((char *)state + o->count_off, &n, sizeof n);
        return true;
    }
    case CLI_FN: {
        char *vals[1] = {(char *)v};
        return o->fn(o, state, s->cmd, flag, vals, v ? 1 : 0) >= 0;
    }
    case CLI_SECTION: break;
    }
    return true;
}

int cli_parse(const cli_spec *s, int argc, char **argv, void *state) {
    for (size_t k = 0; k < s->n_opts; k++) {
        const cli_opt *o = &s->opts[k];
        char name[64];
        if (o->def && !apply(s, o, first_name(o, name, sizeof name), o->def, state)) return 2;
    }
    /* --help shows the defaults, not what the arguments before it changed */
    void *defaults = malloc(s->state_size ? s->state_size : 1);
    if (defaults) memcpy(defaults, state, s->state_size);
    int rc = -1;
    for (int i = 1; i < argc && rc < 0; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_usage(stdout, s, defaults);
            rc = 0;
            break;
        }
        const cli_opt *o = NULL;
        for (size_t k = 0; k < s->n_opts && !o; k++)
            if (s->opts[k].kind != CLI_SECTION && name_matches(s->opts[k].names, a)) o = &s->opts[k];
        if (!o) {
            if (s->other)
                rc = s->other(state, s->cmd, argc, argv, &i) ? 2 : -1;
            else
                rc = cli_usage_error(s->cmd, "%s '%s'%s", s->unknown ? s->unknown : "unknown option", a,
                                     s->unknown_tail ? s->unknown_tail : "");
            continue;
        }
        const int nv = values_taken(o);
        if (nv == CLI_NARGS_REST) {
            const int took = o->fn(o, state, s->cmd, a, argv + i + 1, argc - i - 1);
            if (took < 0) rc = 2;
            else i += took;
        } else {
            for (int k = 0; k < nv && rc < 0; k++)
                if (i + 1 + k >= argc) rc = cli_usage_error(s->cmd, "%s needs a value", argv[i + k]);
            if (rc >= 0) break;
            char **vals = argv + i + 1;
            i += nv;
            if (o->kind == CLI_FN) {
                if (o->fn(o, state, s->cmd, a, vals, nv) < 0) rc = 2;
            } else if (!apply(s, o, a, nv ? vals[0] : NULL, state) ||
                       (o->fn && o->fn(o, state, s->cmd, a, vals, nv) < 0)) {
                rc = 2;
            }
        }
        if (rc < 0 && o->seen) *((bool *)((char *)state + o->seen - 1)) = true;
    }
    free(defaults);
    return rc;
}

#define HELP_WIDTH 100 /* --help: a default that would end a line past this goes on the next one */

/* Writes the help text h of o from column col, continuation lines indented
 * to HELP_COL and "%s" replaced by o->choices_fn(); returns the column where
 * it ends. */
static int put_help(FILE *f, const cli_opt *o, const char *h, int col) {
    for (const char *p = h; *p; p++) {
        if (*p == '\n') {
            col = fprintf(f, "\n%*s", HELP_COL, "") - 1;
        } else if (p[0] == '%' && p[1] == 's' && o->choices_fn) {
            col += fprintf(f, "%s", o->choices_fn());
            p++;
        } else {
            fputc(*p, f);
            col++;
        }
    }
    return col;
}

/* The value of field o in defaults as text for "(default X)"; false if none. */
static bool default_text(const cli_opt *o, const void *defaults, char *buf, size_t cap) {
    const void *field = (const char *)defaults + o->off;
    switch (o->kind) {
    case CLI_INT: snprintf(buf, cap, "%lld", (long long)load_int(field, o->size)); return true;
    case CLI_U64: {
        uint64_t v;
        memcpy(&v, field, sizeof v);
        snprintf(buf, cap, "%llu", (unsigned long long)v);
        return true;
    }
    case CLI_FLOAT: {
        float v;
        memcpy(&v, field, sizeof v);
        snprintf(buf, cap, "%g", (double)v);
        return true;
    }
    case CLI_STR: {
        const char *v;
        memcpy(&v, field, sizeof v);
        if (v) snprintf(buf, cap, "%s", v);
        return v != NULL;
    }
    case CLI_ENUM: {
        const int32_t v = (int32_t)load_int(field, sizeof(int32_t));
        for (int k = 0; o->choices[k]; k++)
            if ((o->values ? o->values[k] : k) == v) {
                snprintf(buf, cap, "%s", o->choices[k]);
                return true;
            }
        return false;
    }
    default: return false;
    }
}

static void put_row(FILE *f, const cli_opt *o, const void *defaults) {
    if (o->kind == CLI_SECTION) {
        fprintf(f, "\n%s\n", o->help);
        return;
    }
    const bool short_first = o->names[0] == '-' && o->names[1] != '-' && (o->names[2] == ',' || !o->names[2]);
    char def[160] = "", val[128];
    if (o->def)
        snprintf(def, sizeof def, "(default %s)", o->def);
    else if (o->def_doc) /* a number reads "(default 4)", words "(default: all online CPUs)" */
        snprintf(def, sizeof def, "(default%s %s)", o->def_doc[0] >= '0' && o->def_doc[0] <= '9' ? "" : ":",
                 o->def_doc);
    else if (o->show_default && defaults && default_text(o, defaults, val, sizeof val))
        snprintf(def, sizeof def, "(default %s)", val);
    const char *h = o->help ? o->help : "";
    int col = fprintf(f, "  %s%s%s%s", short_first ? "" : "    ", o->names, o->arg ? " " : "", o->arg ? o->arg : "");
    if (*h || *def) col += fprintf(f, "%*s", col < HELP_COL - 1 ? HELP_COL - col : 2, "");
    col = put_help(f, o, h, col);
    if (*def && *h && col + 1 + (int)strlen(def) > HELP_WIDTH)
        fprintf(f, "\n%*s%s", HELP_COL, "", def);
    else if (*def)
        fprintf(f, "%s%s", *h ? " " : "", def);
    fputc('\n', f);
}

void cli_usage(FILE *f, const cli_spec *s, const void *defaults) {
    fputs(s->usage, f);
    fputc('\n', f);
    for (size_t k = 0; k < s->n_opts; k++) put_row(f, &s->opts[k], defaults);
    fprintf(f, "  -h, --help%*sthis text\n", HELP_COL - 12, "");
    if (s->epilog) fprintf(f, "\n%s", s->epilog);
}

void cli_warn_ctx(const char *cmd, int64_t n_ctx, int32_t n_ctx_train) {
    if (n_ctx_train > 0 && n_ctx > n_ctx_train)
        fprintf(stderr, "kite %s: warning: -c %lld is above the model's trained context (%d): past %d positions "
                "the output is likely to degrade\n", cmd, (long long)n_ctx, (int)n_ctx_train, (int)n_ctx_train);
}
