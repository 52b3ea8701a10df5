/* args.c - strict flag-value parsing shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kite %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'kite %s --help')\n", cmd);
    return 2;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    *i += 1;
    return argv[*i];
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

int cli_sampler_option(const char *cmd, int argc, char **argv, int *i, kite_sampler_params *sp, bool *seed_set) {
    const char *a = argv[*i], *v;
    int64_t iv;
    float fv;
    static const char *const names[] = {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                        "--repeat-last-n", "--frequency-penalty", "--presence-penalty", "--seed"};
    size_t k = 0;
    while (k < sizeof names / sizeof names[0] && strcmp(a, names[k])) k++;
    if (k == sizeof names / sizeof names[0]) return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return 2;
    switch (k) {
    case 0: return cli_parse_f32(cmd, a, v, 0.0f, 100.0f, &sp->temperature) ? 1 : 2;
    case 1:
        if (!cli_parse_i64(cmd, a, v, 0, 1 << 30, &iv)) return 2;
        sp->top_k = (int32_t)iv;
        return 1;
    case 2: return cli_parse_f32(cmd, a, v, 0.0f, 1.0f, &sp->top_p) ? 1 : 2;
    case 3: return cli_parse_f32(cmd, a, v, 0.0f, 1.0f, &sp->min_p) ? 1 : 2;
    case 4:
        if (!cli_parse_f32(cmd, a, v, 0.0f, 100.0f, &fv)) return 2;
        if (!(fv > 0.0f)) return cli_usage_error(cmd, "%s: expected a number > 0 (1 = off), got '%s'", a, v);
        sp->repeat_penalty = fv;
        return 1;
    case 5:
        if (!cli_parse_i64(cmd, a, v, -1, 1 << 20, &iv)) return 2;
        sp->penalty_last_n = (int32_t)iv;
        return 1;
    case 6: return cli_parse_f32(cmd, a, v, -100.0f, 100.0f, &sp->frequency_penalty) ? 1 : 2;
    case 7: return cli_parse_f32(cmd, a, v, -100.0f, 100.0f, &sp->presence_penalty) ? 1 : 2;
    default:
        if (!cli_parse_u64(cmd, a, v, &sp->seed)) return 2;
        if (seed_set) *seed_set = true;
        return 1;
    }
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
