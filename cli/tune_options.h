/*
 * tune_options.h - the kernel options step of `kite tune` (tune_options.c):
 * times each kern_opt (src/kernels/dispatch.h) on and off on the whole model
 * and records the faster setting in the table.
 */
#ifndef KITE_CLI_TUNE_OPTIONS_H
#define KITE_CLI_TUNE_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/tune.h"

typedef struct tune_opt_params {
    const char *model;     /* GGUF path; loaded as `kite run` loads it */
    int threads;           /* pool threads */
    int rounds;            /* timed rounds per option (each runs off and on) */
    bool quick;            /* shorter tests (tests of the command; noisy choices) */
    int64_t min_mib;       /* decode-prefetch is timed only on models with at least this many MiB */
    double expect;         /* FMA GFLOP/s all threads should reach; 0: no availability checks */
    const uint32_t *types; /* weight types of the model's matrices */
    int n_types;
} tune_opt_params;

/* Times the options that apply to the model (see tune_options.c), prints a
 * summary table on stdout and sets table->opt[] for each clear winner.
 * Returns 0, or 1 after printing an error. */
int tune_options(const tune_opt_params *p, kern_tune_table *table);

#endif
