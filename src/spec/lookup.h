/*
 * lookup.h - prompt-lookup drafting: propose the continuation of the most
 * recent earlier occurrence of the history's last n-gram.
 *
 * DESIGN
 *   For n = n_max down to 1: the last n tokens of the history are searched
 *   for, newest occurrence first, among earlier positions of the history
 *   (prompt + generated text); the tokens that followed the first match are
 *   the draft.  No model, no distribution: acceptance treats the draft as a
 *   point mass (accept.h).  O(n_hist * n_max) per call, no allocation.
 */
#ifndef KITE_SPEC_LOOKUP_H
#define KITE_SPEC_LOOKUP_H

#include <stdint.h>

#include "kite.h"

/* Writes up to k drafted tokens to out and returns their count (0: no
 * match).  hist[0..n_hist) is the history, n_max >= 1 the largest n-gram. */
int32_t spec_lookup_draft(const kite_token *hist, int32_t n_hist, int32_t n_max, int32_t k, kite_token *out /* OUT */);

#endif
