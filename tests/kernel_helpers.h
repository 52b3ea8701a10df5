/*
 * kernel_helpers.h - what the kernel tests (test_kernels.c, test_gemm.c)
 * share: the error budgets against the reference and a small xorshift
 * generator of test data.
 *
 * The includer defines KERNEL_TEST_SEED (a nonzero uint64 constant) before
 * including, so each test keeps its own reproducible sequence.  The state is
 * file-local; not thread-safe (tests fill their inputs on one thread).
 */
#ifndef KITE_TEST_KERNEL_HELPERS_H
#define KITE_TEST_KERNEL_HELPERS_H

#include <stdint.h>

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

#endif
