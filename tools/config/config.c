/*
 * config.c - the environment and the cache files, read for the library
 * (contract in config.h).
 *
 * DESIGN
 *   config_read reads every variable once, in the order the library used to
 *   meet them (level cap, tune table, kernel options), so the warnings come
 *   out in the same order; config_get keeps one static config for the
 *   process and hands it to kern_configure.
 */
#include "config/config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

#define MAX_TUNE_FILE_BYTES (4u << 20) /* a table larger than this is not one of ours */

static const char *const opt_envs[KERN_OPT_COUNT] = {"KITE_DECODE_PREFETCH", "KITE_BF16_FMA", "KITE_F16_WIDEN"};

bool config_cache_file(const char *name, char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME");
    int n;
    if (x && x[0] == '/') {
        n = snprintf(buf, cap, "%s/kite/%s", x, name);
    } else {
        const char *h = getenv("HOME");
        if (!h || !h[0]) return false;
        n = snprintf(buf, cap, "%s/.cache/kite/%s", h, name);
    }
    return n > 0 && (size_t)n < cap;
}

bool config_tune_path(kern_level level, char *buf, size_t cap) {
    const char *env = getenv("KITE_TUNE_FILE");
    if (env && env[0]) return (size_t)snprintf(buf, cap, "%s", env) < cap;
    char name[64];
    snprintf(name, sizeof name, "tune-%s.txt", kern_level_name(level));
    return config_cache_file(name, buf, cap);
}

bool config_roofline_path(int n_threads, char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    char dir[400];
    if (x && *x)
        snprintf(dir, sizeof dir, "%s/kite", x);
    else if (h && *h)
        snprintf(dir, sizeof dir, "%s/.cache/kite", h);
    else
        return false;
    mkdir(dir, 0755); /* may exist; a failure shows up when saving */
    snprintf(buf, cap, "%s/roofline-t%d.txt", dir, n_threads);
    return true;
}

/* Reads a whole file into a NUL-terminated heap buffer, or NULL (errno set). */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (!f) return NULL;
    if (!(buf = malloc(MAX_TUNE_FILE_BYTES + 1))) goto fail;
    const size_t n = fread(buf, 1, MAX_TUNE_FILE_BYTES + 1, f);
    if (ferror(f) || n > MAX_TUNE_FILE_BYTES) {
        errno = n > MAX_TUNE_FILE_BYTES ? EFBIG : EIO;
        goto fail;
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

/* KITE_TUNE, KITE_TUNE_FILE and the cache file, for kernel level `level`. */
static void read_tune(config *c, kern_level level) {
    kern_tune_table_init(&c->tune);
    const char *off = getenv("KITE_TUNE");
    if (off && (!strcmp(off, "off") || !strcmp(off, "0"))) {
        c->tune_state = -1;
        return;
    }
    const char *env = getenv("KITE_TUNE_FILE");
    const bool explicit_path = env && env[0];
    if (!config_tune_path(level, c->tune_path, sizeof c->tune_path)) {
        c->tune_path[0] = '\0';
        return;
    }
    char *text = read_text(c->tune_path);
    if (!text) {
        if (explicit_path || errno != ENOENT)
            fprintf(stderr, "kite: %s: cannot read the tune table (%s); using the built-in defaults\n", c->tune_path,
                    strerror(errno));
        return;
    }
    if (kern_tune_table_parse(&c->tune, text, c->tune_path) >= 0) {
        if (c->tune.level < 0) {
            fprintf(stderr, "kite: %s: no 'level' line; table ignored\n", c->tune_path);
            kern_tune_table_init(&c->tune);
        } else if (c->tune.level != (int)level) {
            fprintf(stderr, "kite: %s: tuned for kernel level %s, running %s; table ignored\n", c->tune_path,
                    kern_level_name((kern_level)c->tune.level), kern_level_name(level));
            kern_tune_table_init(&c->tune);
        } else {
            c->tune_state = 1;
        }
    }
    free(text);
}

void config_read(config *c) {
    memset(c, 0, sizeof *c);
    c->kern = kern_config_default();

    /* the level cap, and with it the level whose table applies */
    const char *lv = getenv("KITE_CPU_LEVEL");
    if (lv && *lv) {
        const int cap = kern_level_from_name(lv);
        if (cap < 0)
            fprintf(stderr, "kite: KITE_CPU_LEVEL=%s is not one of scalar, avx2, avx512, avx512vnni, avx512bf16, neon, dotprod: ignored\n",
                    lv);
        c->kern.level_cap = cap;
    }
    const kern_level level = kern_level_capped(c->kern.level_cap);

    read_tune(c, level);
    if (c->tune_state > 0) c->kern.tune = &c->tune;

    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        const char *env = getenv(opt_envs[o]);
        if (!env || !*env) continue;
        if (!strcmp(env, "0") || !strcmp(env, "1"))
            c->kern.opt[o] = (int8_t)(env[0] == '1');
        else
            fprintf(stderr, "kite: %s=%s is not 0 or 1: ignored\n", opt_envs[o], env);
    }

    const char *th = getenv("KITE_INT8_THRESHOLD");
    if (th && *th) {
        char *end = NULL;
        const float v = strtof(th, &end);
        if (end != th && *end == '\0' && v >= 0.0f) c->kern.int8_threshold = v; /* strtof parses "inf" */
    }
    const char *ws = getenv("KITE_WORK_SHARING");
    c->kern.work_sharing = !(ws && ws[0] == '0');

    const char *rp = getenv("KITE_REPACK");
    c->no_repack = rp && !strcmp(rp, "0");
    const char *fc = getenv("KITE_F16_COMPUTE");
    c->f16_compute = KITE_F16_COMPUTE_EXACT;
    if (fc && *fc) {
        const int v = config_parse_f16_compute(fc);
        if (v >= 0) c->f16_compute = v;
        else fprintf(stderr, "kite: KITE_F16_COMPUTE=%s is not exact or bf16: ignored\n", fc);
    }
    /* progress display (tools/progress): KITE_PROGRESS=off|plain|tty, KITE_PROGRESS_PERIOD=SECONDS */
    c->progress_mode = -1;
    c->progress_period = 2.0;
    const char *pm = getenv("KITE_PROGRESS");
    if (pm && *pm) {
        if (!strcmp(pm, "off") || !strcmp(pm, "0")) c->progress_mode = 0;
        else if (!strcmp(pm, "plain")) c->progress_mode = 1;
        else if (!strcmp(pm, "tty")) c->progress_mode = 2;
        else fprintf(stderr, "kite: KITE_PROGRESS=%s is not off, plain or tty: ignored\n", pm);
    }
    const char *pp = getenv("KITE_PROGRESS_PERIOD");
    if (pp && *pp) {
        char *end = NULL;
        const double v = strtod(pp, &end);
        if (end != pp && *end == '\0' && v >= 0.0 && v < 1e6) c->progress_period = v;
        else fprintf(stderr, "kite: KITE_PROGRESS_PERIOD=%s is not a number of seconds: ignored\n", pp);
    }
    const char *pf = getenv("KITE_PROBE_FILE");
    if (pf && *pf && strlen(pf) < sizeof c->probe_path) {
        snprintf(c->probe_path, sizeof c->probe_path, "%s", pf);
        c->have_probe_path = c->probe_pinned = true;
    } else {
        if (pf && *pf) fprintf(stderr, "kite: KITE_PROBE_FILE is too long: ignored\n");
        c->have_probe_path = config_cache_file("probe.txt", c->probe_path, sizeof c->probe_path);
    }
}

static config g_config;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init(void) {
    config_read(&g_config);
    (void)kern_configure(&g_config.kern); /* before any kernel ran: cannot be refused */
}

const config *config_get(void) {
    pthread_once(&g_once, init);
    return &g_config;
}

int config_parse_f16_compute(const char *s) {
    if (!strcmp(s, "exact")) return KITE_F16_COMPUTE_EXACT;
    if (!strcmp(s, "bf16")) return KITE_F16_COMPUTE_BF16;
    return -1;
}

static int g_f16_compute = -1; /* config_set_f16_compute; -1: KITE_F16_COMPUTE decides */

void config_set_f16_compute(int mode) { g_f16_compute = mode; }

kite_model_params config_model_params(void) {
    kite_model_params p = kite_model_default_params();
    p.no_repack = config_get()->no_repack;
    p.f16_compute = g_f16_compute >= 0 ? g_f16_compute : config_get()->f16_compute;
    return p;
}

int config_tune_source(char *path, size_t cap, int *level_out) {
    const config *c = config_get();
    if (path && cap) snprintf(path, cap, "%s", c->tune_state < 0 ? "" : c->tune_path);
    if (level_out) *level_out = c->tune_state > 0 ? c->tune.level : -1;
    return c->tune_state < 0 ? -1 : c->tune_state > 0 ? c->tune.n : 0;
}

int config_probe_get(probe_result *r, bool *measured) {
    const config *c = config_get();
    if (c->probe_pinned && probe_load(c->probe_path, r) == KITE_OK) {
        if (measured) *measured = false;
        return KITE_OK;
    }
    return probe_get(c->have_probe_path ? c->probe_path : NULL, r, measured);
}

int config_probe_save(const probe_result *r) {
    const config *c = config_get();
    if (!c->have_probe_path)
        return err_set(KITE_E_IO, "no cache folder for the probe results: neither XDG_CACHE_HOME nor HOME is set");
    return probe_save(c->probe_path, r);
}
