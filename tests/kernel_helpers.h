/*
 * kernel_helpers.h - what the kernel tests (test_kernels.c, test_gemm.c,
 * test_registry.c, ...) share: the error budgets against the reference, the
 * magnitude they scale by, and a small xorshift generator of test data.
 *
 * The includer defines KERNEL_TEST_SEED (a nonzero uint64 constant) before
 * including, so each test keeps its own reproducible sequence.  The state is
 * file-local; not thread-safe (tests fill their inputs on one thread).
 */
#ifndef KITE_TEST_KERNEL_HELPERS_H
#define KITE_TEST_KERNEL_HELPERS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "tensor/dtype.h"

#ifndef KERNEL_TEST_SEED
#error "define KERNEL_TEST_SEED before including kernel_helpers.h"
#endif

#define FLOAT_BUDGET 1e-5
#define INT_BUDGET 2e-6

static uint64_t rng_state = KERNEL_TEST_SEED;
static inline uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
/* Uniform in [-1, 1] on a grid of 1e-6. */
static inline float frand(void) { return (float)((int32_t)(rnd() % 2000001) - 1000000) / 1000000.0f; }

/* sum |w_i * a_i| over the dequantized weight and activation rows */
static inline double magnitude(uint32_t wt, uint32_t at, int64_t n, const void *w, const void *a) {
    float *wf = malloc((size_t)n * sizeof(float)), *af = malloc((size_t)n * sizeof(float));
    /* aligned copies: the dequantizers need not accept odd addresses */
    const size_t wb = dtype_row_size(wt, n), ab = kern_act_row_bytes(at, n);
    void *wc = malloc(wb), *ac = malloc(ab);
    memcpy(wc, w, wb);
    memcpy(ac, a, ab);
    dtype_get(wt)->to_float(wc, wf, n);
    if (at == KITE_DTYPE_F32) memcpy(af, ac, (size_t)n * sizeof(float));
    else dtype_get(at)->to_float(ac, af, n);
    free(wc);
    free(ac);
    double m = 0;
    for (int64_t i = 0; i < n; i++) m += fabs((double)wf[i] * af[i]);
    free(wf);
    free(af);
    return m;
}

#endif
