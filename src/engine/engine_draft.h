/*
 * engine_draft.h - model drafters of the serving engine: a draft model or
 * the target with layers skipped (self-speculative), drafting for many
 * sequences at once (issue 6; docs/engine.md "Model drafters").
 *
 * DESIGN
 *   The drafter owns a second paged context (ctx_new_sized) on the draft
 *   model - or on the target model with kite_ctx_set_skip_layers - and a
 *   block pool of its own with the engine's block size.  Each sequence
 *   keeps a draft block table and n_cached, the positions of its history
 *   whose draft K/V are in it.  edraft_run drafts for a set of sequences
 *   with batched forward passes:
 *     pass 1      every sequence catches up on its uncached history (one
 *                 fwd_seq each; a chunk never straddles n_path, so the
 *                 rows are those of the target's own attention paths and a
 *                 draft equal to the target reproduces its logits bit for
 *                 bit) and yields its first draft token from its last row;
 *     passes 2..  one token each: the previous draft token in, the next
 *                 draft token out, until every sequence has its k.
 *   A draft token is the argmax (temperature 0, ties to the lowest id, as
 *   the target's greedy sampler) or a draw from q, the sequence's draft
 *   sampler distribution (the request's chain without penalties); the q
 *   rows are kept for the rejection rule (spec_accept).
 *
 *   Rollback is lazy: the tokens fed at draft positions are remembered, and
 *   at the next edraft_run (or edraft_sync) the cache keeps the history
 *   positions plus the leading fed drafts that the history now contains;
 *   the table is truncated there (kv_truncate: blocks past it go back to
 *   the pool, nothing is copied).  So a draft that was cut by the
 *   scheduler, verified, or never verified (preemption) all roll back the
 *   same way.
 *
 *   Memory: the context, pool, logits rows and q rows ([n_parallel]
 *   [draft_max][n_vocab] floats) are allocated in edraft_new; edraft_run
 *   allocates nothing (each request's draft sampler is made at submit).  Blocks: before
 *   any forward, each sequence in order takes the blocks for its catch-up
 *   and k-1 draft positions; a sequence short of blocks drafts less, or
 *   not at all when it cannot get even one draft token, and one whose
 *   catch-up exceeds the remaining budget catches up part of the way
 *   without drafting (edraft_run counts both).  Full blocks of history join the pool's prefix cache
 *   (when enabled), so sequences sharing a prompt share draft blocks too.
 *
 * THREAD SAFETY
 *   edraft_seq_init may run on any thread (it touches only the sequence);
 *   everything else runs on the engine thread.
 */
#ifndef KITE_SERVE_ENGINE_DRAFT_H
#define KITE_SERVE_ENGINE_DRAFT_H

#include <stdbool.h>
#include <stdint.h>

#include "kite.h"
#include "sampler/sampler_internal.h"
#include "engine/kv_blocks.h"
#include "spec/adapt.h"

typedef struct edrafter edrafter;

/* Per-sequence draft state, embedded in the engine's request. */
typedef struct edraft_seq {
    kv_table kv;                 /* draft block table */
    int32_t n_cached;            /* positions with draft K/V: history, then fed draft tokens */
    int32_t base;                /* history length at the last draft (fed[i] is at position base + i) */
    int32_t n_fed;               /* draft tokens fed at positions base.. (n_cached - base when > 0) */
    kite_token fed[SPEC_MAX_DRAFT]; /* those tokens */
    kite_sampler *smp;           /* the request's sampler chain without penalties (owned) */
    sampler_rng rng;             /* draws from q */
    bool greedy;                 /* temperature <= 0 */
    const float *q;              /* after edraft_run: [n_draft][n_vocab] q rows (sampling), or NULL */
} edraft_seq;

/* One sequence's drafting request for edraft_run. */
typedef struct edraft_job {
    edraft_seq *ds;
    const kite_token *hist;      /* [n_hist] prompt + generated tokens (the last one pending) */
    int32_t n_hist;
    int32_t n_path;              /* positions < n_path are computed on the prompt attention path */
    int32_t k;                   /* in: tokens wanted (>= 1); out: tokens drafted (0..k) */
    kite_token *out;             /* [k] drafted tokens */
    kite_gen *gen;               /* the request's generation when it has a grammar: drafts are drawn from
                                    the draft model's logits masked with a draft state of it
                                    (kite_gen_draft_*), and end with a token that ends the generation;
                                    NULL: unmasked */
} edraft_job;

typedef struct edraft_config {
    kite_model *target;          /* borrowed */
    kite_model *draft_model;     /* borrowed; NULL: self-speculative */
    const bool *skip_layers;     /* self-speculative: [n_skip] flags (copied) */
    int32_t n_skip;
    int32_t n_parallel;          /* most sequences per edraft_run */
    int32_t n_ctx;               /* longest sequence (positions) */
    int32_t block_size;
    int32_t step_tokens;         /* catch-up tokens per edraft_run */
    int32_t draft_max;           /* longest draft */
    int64_t kv_mem_bytes;        /* draft pool; 0: n_blocks blocks */
    int32_t n_blocks;            /* default pool size (the target pool's) */
    int32_t n_threads;
    bool prefix_cache;
} edraft_config;

/* Checks the drafter (vocabulary of a draft model as spec_check_vocab, the
 * layer flags of a self drafter, learned-position limits) and allocates
 * everything.  Returns a kite_status (message set); *out unchanged on error. */
int edraft_new(const edraft_config *c, edrafter **out /* OUT */);
void edraft_free(edrafter *d); /* NULL is a no-op; tables must be released first */

/* Sets up s for a request sampled with sp (any thread).  KITE_OK or KITE_E_NOMEM. */
int edraft_seq_init(edrafter *d, edraft_seq *s, const kite_sampler_params *sp);
/* Releases s's blocks (d NULL: frees only, the pool is gone) and sampler. */
void edraft_seq_free(edrafter *d, edraft_seq *s);
/* Drops s's blocks but keeps it usable (it catches up again later). */
void edraft_seq_drop(edrafter *d, edraft_seq *s);

/* Drafts for jobs[0..n) (n <= n_parallel, at most one job per sequence)
 * with batched forward passes; each job's k becomes the count drafted and
 * its ds->q the q rows (sampling) or NULL.  Returns the number of jobs that
 * got fewer tokens than asked for lack of blocks or budget. */
int32_t edraft_run(edrafter *d, edraft_job *jobs, int32_t n);

int32_t edraft_blocks_used(const edrafter *d);  /* referenced draft blocks */
double edraft_seconds(const edrafter *d);       /* wall time spent in edraft_run */

#endif
