/*
 * synth_harness.h - a tiny synthetic model for the tests: the built-in shape
 * written once to `path` by kite synth's generator (F32 weights, seed 1),
 * then loaded.  Include after harness.h.
 */
#ifndef KITE_TESTS_SYNTH_HARNESS_H
#define KITE_TESTS_SYNTH_HARNESS_H

#include <unistd.h>

#include "kite.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

/* The model of shape at path (written first if absent); NULL on failure (counted). */
static inline kite_model *harness_synth_model(const char *path, const char *shape) {
    if (access(path, R_OK) != 0) {
        const synth_shape *s = synth_shape_find(shape);
        CHECK_MSG(s != NULL, "no synth shape %s", shape);
        if (!s) return NULL;
        synth_params p = {.shape = *s, .type = KITE_DTYPE_F32, .seed = 1, .n_threads = 1};
        int rc = synth_write(&p, path);
        CHECK_MSG(rc == KITE_OK, "synth %s: %s", shape, kite_last_error());
        if (rc) return NULL;
    }
    kite_model *m = NULL;
    int rc = kite_model_load(path, NULL, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", shape, kite_last_error());
    return rc == KITE_OK ? m : NULL;
}

#endif
