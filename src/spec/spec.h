/*
 * spec.h - lossless speculative decoding: draft k tokens cheaply, score them
 * with the target model in one batched eval, keep the longest acceptable
 * prefix plus one token from the target.  See docs/spec.md.
 *
 * DESIGN
 *   History h[0..n) = prompt + generated tokens.  Invariant between steps:
 *   the target context caches h[0..n-1); the last token h[n-1] is "pending"
 *   (not evaluated yet), so a step evaluates [h[n-1], d1..dk] at positions
 *   n-1..n+k-1 with all logits: row i scores d(i+1), row k gives a bonus
 *   token when every draft is accepted.  After j acceptances the target is
 *   truncated to n + j positions (kite_ctx_truncate: rolls back the rejected
 *   drafts) and the step's last token becomes the new pending one.
 *
 *   Drafters:
 *     SPEC_DRAFT_MODEL   a smaller model with the same vocabulary, its own
 *                        context, kept in sync by truncation;
 *     SPEC_DRAFT_SELF    the target model with some layers skipped, in a
 *                        second context on the same (immutable) kite_model;
 *     SPEC_DRAFT_LOOKUP  n-gram prompt lookup over the history (lookup.h);
 *     SPEC_DRAFT_LOOKAHEAD  lookahead (Jacobi) decoding: a window of guesses
 *                        refined by each pass plus an n-gram pool
 *                        (lookahead.h); the draft is always W tokens.
 *   Model drafters draw from their own sampler chain (the target's
 *   temperature/top-k/top-p/min-p, no penalties): q; lookup drafts are point
 *   masses, and so are lookahead drafts.
 *
 *   Acceptance: temperature <= 0: a draft is kept while it equals the target's
 *   argmax, so the output is token for token plain greedy decoding.
 *   Otherwise the rejection rule (accept.h) with p the target sampler's
 *   distribution, so every output token is distributed exactly as plain
 *   sampling's.  Penalties: positions are verified in order and each
 *   accepted token is recorded in the target sampler before the next
 *   position's p is computed, so p sees exactly the history plain decoding
 *   would (penalties stay exact; the draft's q ignores them, which costs
 *   acceptance, not correctness).
 *
 *   Grammar (spec_set_grammar): the decoder keeps a kite_gen of the grammar
 *   in step with the history.  A draft is cut at the first token the
 *   grammar refuses (checked on a scratch copy of the matcher, so a refused
 *   draft costs no rollback); verification masks each row with the state
 *   the tokens accepted before it reached and advances it only over
 *   accepted tokens, so greedy output under a grammar is token for token
 *   plain greedy output under it.
 *
 *   Draft length: adaptive (adapt.h) unless fixed; also capped by the space
 *   left in the context and by the caller's max_new.
 *
 * OWNERSHIP / THREADS
 *   The decoder borrows the target context and the draft model; it owns its
 *   samplers, the draft context and its buffers.  One thread at a time.
 */
#ifndef KITE_SPEC_SPEC_H
#define KITE_SPEC_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "kite.h"
#include "spec/adapt.h"

typedef enum spec_drafter {
    SPEC_DRAFT_MODEL = 1, /* draft_model */
    SPEC_DRAFT_SELF,      /* target with skip_layers */
    SPEC_DRAFT_LOOKUP,    /* n-gram lookup, lookup_n */
    SPEC_DRAFT_LOOKAHEAD  /* Jacobi window + n-gram pool, la_window / la_ngram / la_pool */
} spec_drafter;

typedef struct spec_params {
    spec_drafter drafter;
    kite_model *draft_model;  /* SPEC_DRAFT_MODEL: borrowed, same vocabulary as the target */
    const bool *skip_layers;  /* SPEC_DRAFT_SELF: [n_skip] flags, n_skip == target n_layer; copied */
    int32_t n_skip;
    int32_t lookup_n;         /* SPEC_DRAFT_LOOKUP: largest n-gram, >= 1 */
    int32_t la_window;        /* SPEC_DRAFT_LOOKAHEAD: W, guesses per pass (the draft length) */
    int32_t la_ngram;         /* N, n-gram size (2..W+1) */
    int32_t la_pool;          /* G, n-grams kept per first token */
    int32_t draft_max;        /* upper bound on k, 1..SPEC_MAX_DRAFT */
    int32_t draft_min;        /* lower bound on k, >= 1 */
    bool fixed_k;             /* true: always draft draft_max (no adaptation) */
    uint64_t seed;            /* acceptance / draft RNG streams */
} spec_params;

/* Defaults: lookup 3, lookahead 8,4,8, k in [1, 8] adaptive, seed 0x5EC.
 * drafter must be set. */
spec_params spec_default_params(void);

typedef struct spec_stats {
    int64_t n_steps;     /* verification passes */
    int64_t n_drafted;   /* drafted tokens scored */
    int64_t n_accepted;  /* drafted tokens accepted */
    int64_t n_generated; /* tokens produced (accepted + one per step) */
    int64_t n_pool_drafts; /* lookahead: passes whose draft began with a pool n-gram */
    double t_draft_s;    /* seconds spent drafting */
    double t_verify_s;   /* seconds spent in target evals of steps */
} spec_stats;

typedef struct spec_decoder spec_decoder;

/* Checks the drafter (vocabulary match for a draft model: n_vocab and a
 * sample of token strings; layer count for skip flags), creates the draft
 * context and samplers.  target must be empty (n_past 0).  sp: the target's
 * sampler parameters (penalties included). */
int spec_new(kite_ctx *target, const kite_sampler_params *sp, const spec_params *p, spec_decoder **out /* OUT */);
void spec_free(spec_decoder *d);

/* Constrains the output to grammar (borrowed: it must outlive d): drafts
 * are checked against the grammar's state and cut at the first token it
 * refuses (kite_gen_check_draft), and every verified row is masked with the
 * state the accepted tokens before it reached, so the output is what plain
 * decoding under the grammar gives: token for token at temperature 0,
 * distributed alike otherwise.  ignore_eos as kite_gen_params'.  A step
 * then also ends with a token that ends the generation (the grammar
 * complete, or an end-of-generation token where it may end).  Once, before
 * spec_begin.  Returns KITE_OK, KITE_E_ARG (another model's grammar),
 * KITE_E_STATE or KITE_E_NOMEM. */
int spec_set_grammar(spec_decoder *d, const kite_grammar *grammar, bool ignore_eos);

/* Feeds the prompt (n >= 1 tokens): records it for the penalties and
 * evaluates all but the last token in the target (prefill).  Once. */
int spec_begin(spec_decoder *d, const kite_token *prompt, int32_t n);

/* One draft + verification step: writes 1..k+1 new tokens (at most max_new
 * >= 1) to out and their count to *n_out.  Returns KITE_E_RANGE when the
 * target context is full (nothing produced), or an eval's status (with a
 * grammar also the matcher's: KITE_E_STATE once the generation is over or
 * no token continues the grammar). */
int spec_step(spec_decoder *d, int32_t max_new, kite_token *out /* OUT: [SPEC_MAX_DRAFT + 1] */,
              int32_t *n_out /* OUT */);

const spec_stats *spec_get_stats(const spec_decoder *d);
int32_t spec_draft_len(const spec_decoder *d); /* current adaptive k */

/* KITE_OK if draft tokenizes like target (n_vocab and the strings of a
 * sample of tokens: the first 32 ids and 64 spread over the rest), else
 * KITE_E_UNSUPPORTED naming the first difference.  Used by spec_new and by
 * the serving engine's draft model (engine/engine_draft.c). */
int spec_check_vocab(const kite_model *target, const kite_model *draft);

/* Parses "W,N,G" (lookahead) into p's la_* fields.  KITE_OK or KITE_E_ARG. */
int spec_parse_lookahead(const char *s, spec_params *p);

/* Parses a layer list "2,3" / "1-3,5" into flags[0..n_layer).  Returns
 * KITE_OK or KITE_E_ARG (message names the bad item). */
int spec_parse_layers(const char *list, int32_t n_layer, bool *flags /* OUT */);

#endif
