/*
 * adapt.h - adaptive draft length from the recent acceptance rate.
 *
 * RULE (docs/spec.md)
 *   a = exponential moving average (weight 0.3 for the newest step) of the
 *   per-token acceptance rate accepted / tested, where tested = accepted + 1
 *   if the step ended with a rejection, else accepted (the drafts after the
 *   first rejection were never tested).  If each draft is accepted with
 *   probability a, a run of a / (1 - a) acceptances is expected, so the next
 *   draft length is k = ceil(a / (1 - a)) + 1, clamped to [k_min, k_max]
 *   (a = 0.5 -> 2, 0.8 -> 5, 0.9 -> 10).  Starts at a = 0.6 (k = 3).
 *   Steps that tested nothing (no draft) leave k unchanged.
 */
#ifndef KITE_SPEC_ADAPT_H
#define KITE_SPEC_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

#define SPEC_MAX_DRAFT 16 /* largest draft length any drafter uses */

typedef struct spec_adapt {
    double rate;   /* EMA of the per-token acceptance rate, in [0, 1] */
    int32_t k;     /* current draft length, in [k_min, k_max] */
    int32_t k_min; /* >= 1 */
    int32_t k_max; /* <= SPEC_MAX_DRAFT */
    bool fixed;    /* true: k stays k_max (no adaptation) */
} spec_adapt;

/* Clamps the bounds to 1..SPEC_MAX_DRAFT and sets the initial k. */
void spec_adapt_init(spec_adapt *a, int32_t k_min, int32_t k_max, bool fixed);
/* Records one verification: accepted drafts, and whether a draft was rejected. */
void spec_adapt_update(spec_adapt *a, int32_t accepted, bool rejected);

#endif
