/*
 * model_helpers.h - small helpers shared by the model-level tests
 * (test_model.c, test_quant.c, test_spec.c): loading a model and making a
 * context under CHECK, the golden prompt ids and fields of the
 * one-object-per-line golden JSON files.
 *
 * static inline, built on json_mini.h and harness.h; results are malloc'd
 * where noted and the caller frees them.  No state.
 */
#ifndef KITE_TEST_MODEL_HELPERS_H
#define KITE_TEST_MODEL_HELPERS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "json_mini.h"
#include "kite.h"

/* Loads the model at path with default parameters; a failed CHECK (and
 * NULL) if it cannot. */
static inline kite_model *load_model_checked(const char *path) {
    kite_model *m = NULL;
    kite_model_params p = kite_model_default_params();
    int rc = kite_model_load(path, &p, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", path, kite_last_error());
    return m;
}

/* A context of n_ctx positions and n_threads threads; a failed CHECK (and
 * NULL) if it cannot be made. */
static inline kite_ctx *new_ctx_checked(kite_model *m, int n_ctx, int n_threads) {
    kite_ctx *c = NULL;
    kite_ctx_params p = kite_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    int rc = kite_ctx_new(m, &p, &c);
    CHECK_MSG(rc == KITE_OK, "ctx: %s", kite_last_error());
    return c;
}

/* Reads the "input_ids" array of the golden logits JSON at path into
 * ids[n_ids]; 0, or -1 if the file is missing or the array is not n_ids long. */
static inline int golden_input_ids(const char *path, int32_t *ids, size_t n_ids) {
    char *json = harness_read_file(path, NULL);
    if (!json) return -1;
    const char *p = strstr(json, "\"input_ids\":");
    int32_t *arr = NULL;
    size_t n = 0;
    int rc = -1;
    if (p) {
        p += strlen("\"input_ids\":");
        jm_ws(&p);
        if (jm_int_array(&p, &arr, &n) == 0 && n == n_ids) {
            memcpy(ids, arr, sizeof(int32_t) * n_ids);
            rc = 0;
        }
    }
    free(arr);
    free(json);
    return rc;
}

/* The value after "KEY": in line, or NULL if the key is absent. */
static inline const char *json_field(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

/* The integer array "KEY": [...] of line into *out (malloc'd), *n; 0 or -1. */
static inline int json_field_ids(const char *line, const char *key, int32_t **out, size_t *n) {
    const char *p = json_field(line, key);
    if (!p) return -1;
    return jm_int_array(&p, out, n);
}

#endif
