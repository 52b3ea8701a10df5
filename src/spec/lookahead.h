/*
 * lookahead.h - lookahead (Jacobi) drafting: a window of parallel guesses
 * refined by every verification pass, and a pool of n-grams harvested from
 * those passes (issue 6 item 5; docs/spec.md, "Lookahead").
 *
 * DESIGN
 *   Jacobi decoding treats the next W tokens as unknowns and iterates
 *   y_i <- argmax p(. | prefix, y_1..y_{i-1}) for all i at once; the tokens
 *   that stop changing are what greedy decoding would produce.  Here each
 *   verification pass of the speculative decoder (spec.c) is one Jacobi
 *   iteration: the draft is the window of W guesses for the positions after
 *   the pending token, the target scores all of them in one causal pass, the
 *   prefix that matches is accepted (lossless as for any drafter), and the
 *   pass's predictions beyond the accepted point become the next window.
 *
 *   n-gram pool: each pass also yields, for every scored position i, the
 *   n-gram (input_i, pred_i, pred_{i+1}, ..., pred_{i+N-2}): the token there
 *   and the model's predictions that followed it in this iteration.  They are
 *   stored by first token, at most G per token (oldest replaced); so are the
 *   exact n-grams of the prompt and of the accepted text (text repeats
 *   itself, and those continuations are right more often).  When the
 *   pending token has entries, the newest one replaces the first N-1 guesses
 *   of the window in the next draft; the window's later guesses keep their
 *   positions.
 *
 *   Against the paper (Fu et al., 2024): their lookahead branch keeps N-1
 *   levels of a 2-D window and verifies up to G candidates beside it in one
 *   pass with a custom attention mask; kite's forward pass is causal per
 *   sequence, so one candidate is verified per pass and the window rides in
 *   the same causal sequence.  The output is exact either way (only drafts
 *   change); see docs/spec.md for what this costs in acceptance.
 *
 * OWNERSHIP
 *   spec_la owns its arrays (spec_la_free).  No allocation after init.
 */
#ifndef KITE_SPEC_LOOKAHEAD_H
#define KITE_SPEC_LOOKAHEAD_H

#include <stdint.h>

#include "kite.h"

#define SPEC_LA_BUCKETS 4096 /* n-gram pool: distinct first tokens kept (power of two) */

typedef struct spec_la {
    int32_t W, N, G;       /* window, n-gram size (>= 2), candidates per first token */
    kite_token *window;    /* [W] guesses for the W positions after the pending token */
    kite_token *keys;      /* [SPEC_LA_BUCKETS] first token of a bucket, -1 = empty */
    kite_token *grams;     /* [SPEC_LA_BUCKETS][G][N-1] continuations */
    uint8_t *count;        /* [SPEC_LA_BUCKETS] continuations stored */
    uint8_t *next;         /* [SPEC_LA_BUCKETS] ring position of the next write */
    int64_t n_pool_drafts; /* drafts that used a pool n-gram */
} spec_la;

/* W in 1..SPEC_MAX_DRAFT, N in 2..W+1, G in 1..255.  The first window is
 * the prompt's last W tokens (repeated when the prompt is shorter): guesses
 * that cost nothing and are often right in text that repeats its input.
 * Returns a kite_status. */
int spec_la_init(spec_la *la, int32_t W, int32_t N, int32_t G, const kite_token *prompt, int32_t n_prompt);
void spec_la_free(spec_la *la);

/* The draft for pending token x: min(k, W) tokens to out; *from_pool tells
 * whether a pool n-gram was used (its N-1 tokens come first). */
int32_t spec_la_draft(spec_la *la, kite_token x, int32_t k, kite_token *out /* OUT */, int *from_pool);

/* After a pass over in[0..n] (in[0] the pending token, in[1..n] the draft)
 * whose row i predicted pred[i] (argmax), with j drafts accepted: harvests
 * the pass's n-grams and sets the next window to pred[j+1..n] followed by
 * the old window's remaining guesses. */
void spec_la_update(spec_la *la, const kite_token *in, const kite_token *pred, int32_t n, int32_t j);

/* Adds the n-grams of hist that end in positions [from, n_hist) (the
 * prompt at the start, then each step's accepted tokens). */
void spec_la_add_history(spec_la *la, const kite_token *hist, int32_t n_hist, int32_t from);

/* Continuations stored for first token x (test and statistics helper):
 * copies up to cap of them, newest first, each N-1 tokens, and returns how
 * many there are. */
int32_t spec_la_lookup(const spec_la *la, kite_token x, kite_token *out, int32_t cap);

#endif
