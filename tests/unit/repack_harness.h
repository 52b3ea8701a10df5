/*
 * repack_harness.h - shared by the load-time repacking tests (test_x16.c,
 * test_r4.c): the logits of a few tokens of a model file, loaded with or
 * without repacking, to compare the two loads.
 */
#ifndef KITE_TESTS_REPACK_HARNESS_H
#define KITE_TESTS_REPACK_HARNESS_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kite.h"

#define REPACK_N_TOK 7 /* tokens evaluated in one batch */

/* Logits [REPACK_N_TOK][n_vocab] (malloc'd; NULL on any failure) of a fixed
 * token batch on the model at path; *n_repacked and *n_vocab from its info. */
static inline float *repack_logits_of(const char *path, bool no_repack, int *n_repacked, int32_t *n_vocab) {
    kite_model_params mp = kite_model_default_params();
    mp.no_repack = no_repack;
    kite_model *m = NULL;
    kite_ctx *ctx = NULL;
    float *out = NULL;
    if (kite_model_load(path, &mp, &m) != KITE_OK) return NULL;
    kite_model_info info;
    kite_model_get_info(m, &info);
    *n_repacked = info.n_repacked;
    *n_vocab = info.n_vocab;
    kite_ctx_params cp = {.n_ctx = 64, .n_threads = 2};
    const kite_token toks[REPACK_N_TOK] = {1, 17, 42, 99, 7, 250, 3};
    if (kite_ctx_new(m, &cp, &ctx) == KITE_OK && kite_ctx_eval(ctx, toks, REPACK_N_TOK, true) == KITE_OK &&
        (out = malloc((size_t)info.n_vocab * REPACK_N_TOK * sizeof(float))) != NULL)
        for (int i = 0; i < REPACK_N_TOK; i++)
            memcpy(out + (size_t)i * info.n_vocab, kite_ctx_logits(ctx, i), (size_t)info.n_vocab * sizeof(float));
    kite_ctx_free(ctx);
    kite_model_free(m);
    return out;
}

#endif
