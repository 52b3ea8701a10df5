/*
 * config.h - what kite's programs take from the environment and the cache
 * folder, read in one place and handed to the library as values.
 *
 * DESIGN
 *   The library (src/) reads no environment variable and no file it is not
 *   given (include/kite.h).  The kite CLI and the tools call config_get()
 *   once, before any kernel runs: it reads
 *     KITE_CPU_LEVEL        kernel level cap (scalar|avx2|avx512|avx512vnni|avx512bf16)
 *     KITE_DECODE_PREFETCH, KITE_BF16_FMA, KITE_F16_WIDEN   kernel options, 0|1
 *     KITE_TUNE=off|0       no tune table (the test suite runs so)
 *     KITE_TUNE_FILE        the tune table, else the cache file tune-<level>.txt
 *     KITE_INT8_THRESHOLD   LLM.int8() outlier threshold (a float >= 0, "inf")
 *     KITE_WORK_SHARING=0   static matmul split
 *     KITE_REPACK=0         keep the file's row layout (kite_model_params.no_repack)
 *     KITE_F16_COMPUTE      exact|bf16: kite_model_params.f16_compute (the commands'
 *                           --f16-compute overrides it, config_set_f16_compute)
 *   and the tune table file, fills a kern_config (kernels/dispatch.h) and
 *   calls kern_configure.  Precedence of a kernel option: its variable, else
 *   the table's "option" line, else the CPU vendor's default.  Unknown
 *   values of KITE_CPU_LEVEL and the option variables are reported once on
 *   stderr and ignored, as are an unreadable $KITE_TUNE_FILE, a malformed
 *   table and a table of another kernel level; a missing cache file means
 *   the built-in defaults, silently.  A bad KITE_INT8_THRESHOLD is ignored
 *   silently.
 *
 *   Cache folder: $XDG_CACHE_HOME/kite when XDG_CACHE_HOME is an absolute
 *   path, else $HOME/.cache/kite (tune tables, the probe cache).  Roofline
 *   profiles accept any non-empty XDG_CACHE_HOME (as they always have) and
 *   create the folder when its path is formed.
 *
 * THREAD SAFETY
 *   config_get's first call must not race with another; afterwards the
 *   configuration is read-only.  config_read is reentrant on distinct
 *   structs (it reads the environment, which nobody may change meanwhile).
 */
#ifndef KITE_TOOLS_CONFIG_H
#define KITE_TOOLS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/dispatch.h"
#include "kernels/tune.h"
#include "kite.h"
#include "roofline/probe.h"

typedef struct config {
    kern_config kern;     /* what kern_configure gets; kern.tune = &tune when a table was loaded */
    kern_tune_table tune; /* the table read (tune_state 1) */
    int tune_state;       /* -1 KITE_TUNE=off, 0 no usable table (built-in defaults), 1 loaded */
    char tune_path[1024]; /* where the table was looked for; "" when off or no path could be formed */
    bool no_repack;       /* KITE_REPACK=0 */
    int f16_compute;      /* KITE_F16_COMPUTE: enum kite_f16_compute (default exact) */
    int progress_mode;    /* KITE_PROGRESS: -1 unset (a terminal on stderr decides), 0 off, 1 plain lines, 2 terminal line */
    double progress_period; /* KITE_PROGRESS_PERIOD: seconds between plain lines (default 2; 0: every update) */
    bool have_probe_path;
    char probe_path[1024]; /* the probe cache file (have_probe_path) */
    bool probe_pinned;     /* probe_path is $KITE_PROBE_FILE: its results are used as they are */
} config;

/* Fills *c from the environment and the tune table file, reporting bad
 * values on stderr (see above).  Does not configure the kernels.  After a
 * copy of *c, kern.tune must be pointed at the copy's table again. */
void config_read(config *c /* OUT */);

/* The process's configuration: on the first call read (config_read) and
 * passed to the kernels (kern_configure).  Never NULL. */
const config *config_get(void);

/* Load parameters: kite_model_default_params() with no_repack from KITE_REPACK and
 * f16_compute from KITE_F16_COMPUTE or config_set_f16_compute. */
kite_model_params config_model_params(void);
/* --f16-compute MODE (cli/args.c): overrides KITE_F16_COMPUTE for this process's
 * later config_model_params calls.  Not thread-safe: call while parsing options. */
void config_set_f16_compute(int mode);
/* "exact" / "bf16" -> enum kite_f16_compute, -1 for anything else. */
int config_parse_f16_compute(const char *s);

/* Path of a file in the cache folder into buf; false when neither variable
 * gives a folder or the path does not fit. */
bool config_cache_file(const char *name, char *buf, size_t cap);

/* The tune table a level reads and `kite tune` writes: $KITE_TUNE_FILE if
 * set, else the cache file tune-<level>.txt; false if there is none. */
bool config_tune_path(kern_level level, char *buf, size_t cap);

/* Where the tune table in force came from: writes the path (or "" when
 * tuning is off or no path could be formed) into path and returns the
 * number of entries loaded (0: defaults everywhere), or -1 for KITE_TUNE=off.
 * *level_out (may be NULL) gets the table's level or -1. */
int config_tune_source(char *path, size_t cap, int *level_out);

/* The probe cache (roofline/probe.h) at its cache file: probe_get and
 * probe_save with config_get()'s path.  Without a cache folder, get
 * measures without caching and save fails (KITE_E_IO, message set).
 * KITE_PROBE_FILE=F replaces the cache file by F, whose results are then
 * used whatever their age and the load they were taken under (measured and
 * written only when F is missing or unreadable): what the test suite uses,
 * so that each bench call on a busy machine does not measure again. */
int config_probe_get(probe_result *r /* OUT */, bool *measured /* OUT, may be NULL */);
int config_probe_save(const probe_result *r);

/* The roofline profile cache file for n_threads (creating its folder); false
 * when neither variable gives a folder. */
bool config_roofline_path(int n_threads, char *buf, size_t cap);

#endif
