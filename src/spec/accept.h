/*
 * accept.h - lossless acceptance rules of speculative decoding.
 *
 * DESIGN
 *   Pure functions over dense probability vectors of n_vocab floats, so the
 *   rule can be tested on crafted distributions without a model:
 *     - spec_probs: the distribution the sampler chain would draw from
 *       (penalties, top-k, top-p, min-p, temperature, softmax), zeros outside
 *       the survivors;
 *     - spec_accept: the rejection rule of speculative sampling.  A token d
 *       drafted from q is kept with probability min(1, p(d)/q(d)); otherwise
 *       a replacement is drawn from max(0, p - q) renormalised.  With q a
 *       point mass on d (a drafter without a distribution, e.g. prompt
 *       lookup) this is: keep with probability p(d), else draw from p with d
 *       removed.  Either way the kept-or-replaced token is distributed
 *       exactly as p.
 *   Random numbers come from the caller's xoshiro256** stream (sampler.h),
 *   at most two outputs per call.
 *
 * THREAD SAFETY
 *   Stateless; the rng and buffers belong to the caller.
 */
#ifndef KITE_SPEC_ACCEPT_H
#define KITE_SPEC_ACCEPT_H

#include <stdbool.h>
#include <stdint.h>

#include "kite.h"
#include "sampler/sampler_internal.h"

/* Writes into probs (n_vocab floats) the distribution kite_sampler_sample
 * would draw from for these logits with s's current penalty history (for a
 * greedy sampler: 1 at the argmax).  Does not touch s's RNG or history. */
void spec_probs(kite_sampler *s, const float *logits, int32_t n_vocab, float *probs /* OUT */);

/* Draws an index from the non-negative weights w[0..n) (need not sum to 1).
 * If no weight is positive returns 0.
 * One RNG output. */
kite_token spec_draw(const float *w, int32_t n, sampler_rng *rng);

/* The rejection rule for drafted token d (0 <= d < n).  p: target
 * distribution; q: draft distribution d was drawn from, or NULL for a point
 * mass on d.  scratch: n floats.  Returns true if d is accepted; otherwise
 * false with *replacement drawn from norm(max(0, p - q)) (from p when that
 * residual is empty, which only rounding can cause). */
bool spec_accept(const float *p, const float *q, kite_token d, int32_t n, sampler_rng *rng, float *scratch,
                 kite_token *replacement /* OUT */);

#endif
