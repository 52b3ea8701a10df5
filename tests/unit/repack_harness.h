/*
 * repack_harness.h - helpers of the load-time repacking test (test_x16.c):
 * random plain weight rows of a type, and the logits of a few tokens of a
 * model file, loaded with or without repacking, to compare the two loads.
 */
#ifndef KITE_TESTS_REPACK_HARNESS_H
#define KITE_TESTS_REPACK_HARNESS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kite.h"
#include "tensor/dtype.h"

static uint64_t g_rng = 0x1234567u;
static inline float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* nr plain rows of ne0 random values of type t (scales spread over 2^-4..2^4). */
static inline unsigned char *make_rows(uint32_t t, int64_t nr, int64_t ne0, size_t *rb) {
    *rb = dtype_row_size(t, ne0);
    unsigned char *d = malloc(*rb * (size_t)nr);
    float *x = malloc((size_t)ne0 * sizeof(float));
    for (int64_t r = 0; r < nr; r++) {
        for (int64_t i = 0; i < ne0; i++) x[i] = frand() * ldexpf(1.0f, (int)((i / 32 + r) % 9) - 4);
        dtype_get(t)->from_float(x, d + (size_t)r * *rb, ne0);
    }
    if (t == KITE_DTYPE_Q8_0) /* extreme weights: -128 and +127 */
        for (int64_t r = 0; r < nr; r += 3) {
            d[(size_t)r * *rb + 2] = 0x80;
            d[(size_t)r * *rb + 3] = 0x7f;
        }
    free(x);
    return d;
}

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
