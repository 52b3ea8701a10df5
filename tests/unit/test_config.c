/*
 * test_config.c - configuration is passed, not discovered (include/kite.h,
 * kernels/dispatch.h kern_config, tools/config/config.h).
 *
 *   - the library reads no environment variable and no file it is not
 *     given: with HOME and XDG_CACHE_HOME pointing at a folder that holds a
 *     tune table of this machine's level (entries and option lines that
 *     would change the picks), and every KITE_* variable the CLI knows set to
 *     a value that would change behaviour, the kernels keep their defaults
 *     (top level, vendor options, no tune table, the LLM.int8() threshold,
 *     work sharing), a model loads repacked where the level gains, and
 *     nothing is printed on stderr;
 *   - the same environment read the CLI's way (config_get, in a child, which
 *     has its own first kernel use) changes each of them, the level cap
 *     first: a table of another level is reported and ignored; with no cap
 *     the cache folder's table applies; KITE_TUNE=off turns it off; bad
 *     values are reported and ignored (env > tune table > vendor).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x16.h"
#include "kernels/int8_gemm.h"
#include "kernels/tune.h"
#include "repack_harness.h"
#include "roofline/synth.h"

static char g_dir[64];        /* the fake home and cache folder */
static char g_table[128];     /* its tune table for the top level */
static char g_model[128];     /* a q8_0 model */
static bool g_flip[KERN_OPT_COUNT]; /* the option values the environment asks for: not the vendor's */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* The fake home: <dir>/kite/tune-<max>.txt (XDG_CACHE_HOME) and the same under
 * <dir>/.cache/kite (HOME), each with an f32 entry and option lines that
 * contradict the vendor defaults. */
static void make_home(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kite-test-config-XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
    char path[160], text[512];
    const char *lv = kern_level_name(kern_level_max());
    int n = snprintf(text, sizeof text, "kite-tune 1\nlevel %s\nf32 300 256 1 2 flat-16K-1t\n", lv);
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        g_flip[o] = !kern_opt_cpu_default((kern_opt)o);
        n += snprintf(text + n, sizeof text - (size_t)n, "option %s %s\n", kern_opt_name((kern_opt)o),
                      g_flip[o] ? "on" : "off");
    }
    snprintf(path, sizeof path, "%s/kite", g_dir);
    mkdir(path, 0755);
    snprintf(g_table, sizeof g_table, "%s/kite/tune-%s.txt", g_dir, lv);
    write_file(g_table, text);
    snprintf(path, sizeof path, "%s/.cache", g_dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/.cache/kite", g_dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/.cache/kite/tune-%s.txt", g_dir, lv);
    write_file(path, text);
    snprintf(g_model, sizeof g_model, "%s/q8_0.gguf", g_dir);
    synth_params sp = {.shape = *synth_shape_find("tiny-llama3"), .type = KITE_DTYPE_Q8_0, .seed = 3};
    CHECK_EQ_INT(synth_write(&sp, g_model), KITE_OK);
}

/* Every variable the CLI reads, at a value that would change something. */
static void set_env(void) {
    setenv("HOME", g_dir, 1);
    setenv("XDG_CACHE_HOME", g_dir, 1);
    setenv("KITE_CPU_LEVEL", "scalar", 1);
    setenv("KITE_TUNE", "on", 1);
    setenv("KITE_TUNE_FILE", g_table, 1);
    static const char *const opt_envs[KERN_OPT_COUNT] = {"KITE_DECODE_PREFETCH", "KITE_BF16_FMA", "KITE_F16_WIDEN"};
    for (int o = 0; o < KERN_OPT_COUNT; o++) setenv(opt_envs[o], g_flip[o] ? "1" : "0", 1);
    setenv("KITE_INT8_THRESHOLD", "0", 1);
    setenv("KITE_WORK_SHARING", "0", 1);
    setenv("KITE_REPACK", "0", 1);
    unsetenv("KITE_PROBE_FILE"); /* the probe cache folder's file (home_and_off_child sets it) */
}

/* Runs fn with stderr captured into err. */
static void capture_stderr(void (*fn)(void), char *err, size_t cap) {
    fflush(stderr);
    FILE *tmp = tmpfile();
    const int saved = dup(2);
    CHECK(tmp && saved >= 0);
    if (!tmp || saved < 0) return;
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    err[fread(err, 1, cap - 1, tmp)] = '\0';
    fclose(tmp);
}

static void library_defaults(void) {
    const kern_ops_table *kt = kern_table();
    CHECK_EQ_INT(kt->level, kern_level_max());
    const kern_config *c = kern_config_get();
    CHECK(c->tune == NULL);
    CHECK(c->work_sharing);
    CHECK_EQ_INT(c->level_cap, -1);
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        CHECK_EQ_INT(kern_opt_on((kern_opt)o), kern_opt_cpu_default((kern_opt)o));
        CHECK_EQ_INT(kern_opt_source_of((kern_opt)o), KERN_OPT_FROM_CPU);
    }
    CHECK(kern_llm_int8_threshold() == LLM_INT8_THRESHOLD_DEFAULT);
    CHECK(kern_tune_pick(c->tune, kt->level, KITE_DTYPE_F32, 300, 256, 1, 2) == kern_tune_default());
    int n_repacked = -1;
    int32_t n_vocab = 0;
    float *logits = repack_logits_of(g_model, false, &n_repacked, &n_vocab);
    CHECK(logits != NULL);
    if (kern_x16_pays_type(kt->level, KITE_DTYPE_Q8_0)) CHECK(n_repacked > 0); /* KITE_REPACK=0 is not the library's */
    else CHECK_EQ_INT(n_repacked, 0);
    free(logits);
}

TEST(test_library_reads_no_environment) {
    char err[4096];
    capture_stderr(library_defaults, err, sizeof err);
    CHECK_STR_EQ(err, ""); /* no warning about any variable: none was read */
}

/* In a child: config_get() reads the environment and configures the kernels. */
static void cli_config_child(void) {
    const config *cf = config_get();
    const kern_ops_table *kt = kern_table();
    CHECK_EQ_INT(kt->level, KERN_LEVEL_SCALAR);
    /* the table is of the top level, the cap runs scalar: reported and ignored */
    CHECK_EQ_INT(cf->tune_state, kern_level_max() == KERN_LEVEL_SCALAR ? 1 : 0);
    CHECK_STR_EQ(cf->tune_path, g_table);
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        CHECK_EQ_INT(kern_opt_on((kern_opt)o), g_flip[o]);
        CHECK_EQ_INT(kern_opt_source_of((kern_opt)o), KERN_OPT_FROM_ENV);
    }
    CHECK(kern_llm_int8_threshold() == 0.0f);
    CHECK(!kern_config_get()->work_sharing);
    CHECK(config_model_params().no_repack);
    char probe[256];
    snprintf(probe, sizeof probe, "%s/kite/probe.txt", g_dir);
    CHECK(cf->have_probe_path);
    CHECK_STR_EQ(cf->probe_path, probe);
}

static void run_child(void (*fn)(void), const char *what, char *err, size_t cap) {
    fflush(stdout);
    fflush(stderr);
    char path[] = "/tmp/kite-test-config-err-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn();
        fflush(stdout);
        fflush(stderr);
        _exit(harness_failed_checks ? 1 : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: a check failed in the child", what);
    const ssize_t n = pread(fd, err, cap - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

TEST(test_cli_config_reads_environment) {
    char err[4096];
    run_child(cli_config_child, "config_get", err, sizeof err);
    if (kern_level_max() != KERN_LEVEL_SCALAR) {
        char want[256];
        snprintf(want, sizeof want, "kite: %s: tuned for kernel level %s, running scalar; table ignored\n", g_table,
                 kern_level_name(kern_level_max()));
        CHECK_STR_EQ(err, want);
    }
}

/* No cap and no KITE_TUNE_FILE: the cache folder's table applies, options
 * from it unless their variable says otherwise; bad values are reported. */
static void cache_table_child(void) {
    unsetenv("KITE_CPU_LEVEL");
    unsetenv("KITE_TUNE_FILE");
    unsetenv("KITE_DECODE_PREFETCH");
    setenv("KITE_BF16_FMA", "yes", 1);
    const config *cf = config_get();
    const kern_ops_table *kt = kern_table();
    CHECK_EQ_INT(kt->level, kern_level_max());
    CHECK_EQ_INT(cf->tune_state, 1);
    CHECK_EQ_INT(cf->tune.n, 1);
    CHECK(kern_config_get()->tune == &cf->tune);
    CHECK_STR_EQ(cf->tune_path, g_table); /* XDG_CACHE_HOME/kite/tune-<level>.txt */
    const kern_tune_choice *c = kern_tune_pick(kern_config_get()->tune, kt->level, KITE_DTYPE_F32, 300, 256, 1, 2);
    CHECK(c->tuned && c->regime == KERN_TUNE_FLAT && c->tile == 0 && c->threads == KERN_TUNE_THR_ONE);
    CHECK_EQ_INT(kern_opt_on(KERN_OPT_DECODE_PREFETCH), g_flip[KERN_OPT_DECODE_PREFETCH]);
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_DECODE_PREFETCH), KERN_OPT_FROM_TUNE);
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_BF16_FMA), KERN_OPT_FROM_TUNE); /* "yes" ignored */
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_F16_WIDEN), KERN_OPT_FROM_ENV);
    char src[1024];
    int level = -2;
    CHECK_EQ_INT(config_tune_source(src, sizeof src, &level), 1);
    CHECK_EQ_INT(level, (int)kt->level);
}

/* HOME only (XDG_CACHE_HOME relative: not a cache folder), and KITE_TUNE=off. */
static void home_and_off_child(void) {
    unsetenv("KITE_CPU_LEVEL");
    unsetenv("KITE_TUNE_FILE");
    setenv("XDG_CACHE_HOME", "relative/cache", 1);
    static config cf;
    config_read(&cf);
    char want[256];
    snprintf(want, sizeof want, "%s/.cache/kite/tune-%s.txt", g_dir, kern_level_name(kern_level_max()));
    CHECK_STR_EQ(cf.tune_path, want);
    CHECK_EQ_INT(cf.tune_state, 1);
    setenv("KITE_TUNE", "off", 1);
    config_read(&cf);
    CHECK_EQ_INT(cf.tune_state, -1);
    CHECK(cf.kern.tune == NULL);
    CHECK(config_get()->kern.tune == NULL);
    CHECK(kern_config_get()->tune == NULL);
    CHECK_EQ_INT(config_tune_source(NULL, 0, NULL), -1);
    /* KITE_PROBE_FILE replaces the probe cache file and pins it */
    CHECK(!cf.probe_pinned);
    setenv("KITE_PROBE_FILE", "/nowhere/probe.txt", 1);
    config_read(&cf);
    CHECK(cf.have_probe_path && cf.probe_pinned);
    CHECK_STR_EQ(cf.probe_path, "/nowhere/probe.txt");
    unsetenv("KITE_PROBE_FILE");
}

TEST(test_cli_config_cache_folder) {
    char err[4096];
    run_child(cache_table_child, "cache folder", err, sizeof err);
    CHECK_STR_EQ(err, "kite: KITE_BF16_FMA=yes is not 0 or 1: ignored\n");
    run_child(home_and_off_child, "HOME, KITE_TUNE=off", err, sizeof err);
    CHECK_STR_EQ(err, "");
}

/* A missing KITE_TUNE_FILE and an unknown level are reported, then ignored. */
static void bad_values_child(void) {
    setenv("KITE_CPU_LEVEL", "turbo", 1);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/none.txt", g_dir);
    setenv("KITE_TUNE_FILE", missing, 1);
    setenv("KITE_INT8_THRESHOLD", "lots", 1);
    const config *cf = config_get();
    CHECK_EQ_INT(kern_table()->level, kern_level_max());
    CHECK_EQ_INT(cf->tune_state, 0);
    CHECK(kern_llm_int8_threshold() == LLM_INT8_THRESHOLD_DEFAULT);
}

TEST(test_cli_config_bad_values) {
    char err[4096];
    run_child(bad_values_child, "bad values", err, sizeof err);
    CHECK_CONTAINS(err, "kite: KITE_CPU_LEVEL=turbo is not one of scalar, avx2, avx512, avx512vnni, avx512bf16, neon, dotprod: ignored\n");
    CHECK_CONTAINS(err, "none.txt: cannot read the tune table (No such file or directory); using the built-in defaults\n");
}

/* The level cap is fixed by the first kern_table(): a different one is refused. */
TEST(test_configure_after_first_use) {
    kern_config c = kern_config_default();
    CHECK(kern_configure(&c)); /* same level: accepted */
    c.level_cap = KERN_LEVEL_SCALAR;
    if (kern_level_max() != KERN_LEVEL_SCALAR) CHECK(!kern_configure(&c));
    CHECK_EQ_INT(kern_table()->level, kern_level_max());
    c = kern_config_default();
    c.opt[KERN_OPT_DECODE_PREFETCH] = 1;
    CHECK(kern_configure(&c));
    CHECK(kern_opt_on(KERN_OPT_DECODE_PREFETCH));
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_DECODE_PREFETCH), KERN_OPT_FROM_ENV);
    c = kern_config_default();
    CHECK(kern_configure(&c));
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_DECODE_PREFETCH), KERN_OPT_FROM_CPU);
}

static void remove_home(void) {
    char path[200];
    snprintf(path, sizeof path, "%s/.cache/kite/tune-%s.txt", g_dir, kern_level_name(kern_level_max()));
    unlink(path);
    snprintf(path, sizeof path, "%s/.cache/kite", g_dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/.cache", g_dir);
    rmdir(path);
    unlink(g_table);
    unlink(g_model);
    snprintf(path, sizeof path, "%s/kite", g_dir);
    rmdir(path);
    rmdir(g_dir);
}

int main(void) {
    make_home(); /* kern_level_max and the vendor defaults: no configuration is fixed by them */
    set_env();
    /* forked children first: each has its own first kernel use (the parent has had none yet) */
    RUN(test_cli_config_reads_environment);
    RUN(test_cli_config_cache_folder);
    RUN(test_cli_config_bad_values);
    RUN(test_library_reads_no_environment);
    RUN(test_configure_after_first_use);
    remove_home();
    return harness_summary(__FILE__);
}
