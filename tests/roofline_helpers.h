/*
 * roofline_helpers.h - what the roofline tests share: a synthetic hardware
 * profile (1 GB/s, 10 GFLOP/s at every precision) and finding an op by name.
 */
#ifndef KITE_TESTS_ROOFLINE_HELPERS_H
#define KITE_TESTS_ROOFLINE_HELPERS_H

#include <stdio.h>
#include <string.h>

#include "roofline/roofline.h"

static inline rl_hw synth_hw(void) {
    rl_hw h;
    memset(&h, 0, sizeof h);
    snprintf(h.name, sizeof h.name, "synthetic");
    h.mem_bw_gbs = 1, h.fp32_gflops = 10, h.bf16_gflops = 10, h.int8_gops = 10;
    return h;
}

/* The op `name` of a phase, or NULL. */
static inline const rl_op *find(const rl_phase_result *ph, const char *name) {
    for (int i = 0; i < ph->n_ops; i++)
        if (!strcmp(ph->ops[i].name, name)) return &ph->ops[i];
    return NULL;
}

#endif
