/*
 * sampler_internal.h - internals of the sampler chain, exposed for tests.
 *
 * The public API is in include/kite.h.  This header gives tests access to the
 * pseudo-random generator and to the candidate set that survives the chain's
 * filters, so that top-k / top-p / min-p and the penalties can be checked
 * exactly without drawing.  Nothing here is part of the public API.
 */
#ifndef KITE_SAMPLER_INTERNAL_H
#define KITE_SAMPLER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kite.h"

/* One entry of the candidate buffer. */
typedef struct sampler_cand {
    int32_t id;  /* token id */
    float logit; /* after penalties, before temperature */
    float p;     /* probability after temperature + softmax over the survivors
                    (filled by the final stage; 1 for greedy) */
} sampler_cand;

/* xoshiro256** (Blackman & Vigna, 2018), state seeded by splitmix64.
 * Pure 64-bit integer arithmetic: identical streams on every platform. */
typedef struct sampler_rng {
    uint64_t s[4];
} sampler_rng;

/* One step of splitmix64: advances *state by the golden gamma and returns the
 * mixed value.  splitmix64 from state 0 yields 0xe220a8397b1dcdaf first. */
uint64_t sampler_splitmix64(uint64_t *state);
/* Fills the four state words with four successive splitmix64(seed) outputs. */
void sampler_rng_seed(sampler_rng *r, uint64_t seed);
uint64_t sampler_rng_next(sampler_rng *r);
/* Uniform double in [0, 1) from the top 53 bits of the next output. */
double sampler_rng_uniform(sampler_rng *r);

/* Runs the chain on logits (n_vocab floats, not modified) up to, but not
 * including, the random draw: penalties, then either greedy (one candidate,
 * the argmax, p = 1) or top-k, top-p, min-p, temperature and softmax.
 * *out points at the surviving candidates inside s (valid until the next call
 * on s); the return value is their count (>= 1).  Survivors are ordered best
 * first when top-k or top-p ran, otherwise by id.  Does not touch the RNG. */
size_t sampler_candidates(kite_sampler *s, const float *logits, const sampler_cand **out /* OUT */);

#endif
