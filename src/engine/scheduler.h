/*
 * scheduler.h - iteration-level continuous batching over the paged KV pool
 * (issue 5; docs/engine.md).
 *
 * DESIGN
 *   A sequence's state is its token list (prompt, then generated tokens) and
 *   n_computed, the positions whose K/V are in its blocks.  The tokens
 *   n_computed..n_toks-1 are pending: a whole prompt right after admission, a
 *   single token while decoding, everything again after a preemption.  So
 *   prefill, decode and recompute are the same operation.
 *
 *   sched_plan builds one step:
 *     1. admission in queue order: the head of the waiting queue is admitted while
 *        fewer than n_parallel sequences run, the pending tokens of the
 *        running ones leave some of the step budget, and the pool can hold its
 *        pending tokens plus one block of growth per running sequence; its
 *        prompt first takes the longest cached prefix (kv_match_prefix, at
 *        most n_toks - 1 tokens so the last one is computed for its logits).
 *        The blocks for the rest are reserved, not taken: each prefill chunk
 *        takes its own, and every other allocation (admissions, decode
 *        growth, drafts) sees the pool less the running sequences'
 *        reservations, so a prefill never waits for blocks and no slot is
 *        held before its token is computed.  The queue head that does not
 *        fit blocks the ones behind it (no overtaking).
 *        The queue is fair per client (sched_seq.client): sched_enqueue
 *        gives a new sequence the round max(vnow, the round of its client's
 *        last waiting sequence) + 1, where vnow is the round of the last
 *        admitted one, and inserts it after every waiting sequence of a
 *        round <= its own.  So admission goes round-robin across the
 *        clients with waiting sequences (in order of arrival within a
 *        round), FIFO within a client; a lone client is plain FCFS.  A
 *        preempted sequence goes back to the front with its round (<= vnow,
 *        ahead of every new one).  Enqueueing costs O(n_wait).
 *     2. decode: every running sequence with one pending token gets it, in
 *        admission order; when its next block cannot be had, the newest
 *        running sequence is preempted (blocks released, n_computed 0, back
 *        to the queue front) until it can - or it is itself the newest.
 *     3. prefill: the remaining budget of step_tokens goes to sequences with
 *        longer pending runs, oldest first, in chunks (chunked prefill).
 *   Each planned item wants the logits of its last token only when that
 *   token is the last pending one.
 *
 *   Sliding windows (sched.first_read set: every layer windowed): after a
 *   step advances a sequence, its blocks wholly below the first position
 *   its next pass reads go back to the pool (cached for prefix reuse when
 *   keyed), so a sequence holds about window + one tile + its pending tokens
 *   of blocks however long it grows.  Later passes start at n_computed or
 *   after, never before (a rollback only drops draft positions), so no pass
 *   reads a released block.
 *
 *   Speculative drafts (docs/engine.md): after step 2 has given every decode
 *   sequence its pending token, a sequence the engine gave a draft gets its
 *   item extended by up to n_draft drafted tokens, oldest first, within the
 *   remaining step budget and only with blocks the pool has spare (draft
 *   less, never preempt, for a draft); such an item wants the logits of all
 *   its tokens.  Draft positions are written through kv_prepare_write like
 *   any others, so a shared block is copied before a draft touches it.
 *
 *   Bit-exactness: attention rounds differently on the prompt path (used for
 *   a whole prompt) and the decode path (one token at a time), so an item
 *   never straddles position n_path: a recomputed or chunked sequence gets
 *   exactly the rows a lone, uninterrupted run computes, and prefix-cache
 *   blocks carry the same distinction (kv_blocks.h, "Modes").
 *
 * THREAD SAFETY
 *   None: the engine thread owns the scheduler, its sequences and the pool.
 */
#ifndef KITE_SERVE_SCHEDULER_H
#define KITE_SERVE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "kite.h"
#include "engine/kv_blocks.h"

/* The scheduler's view of one sequence (embedded in the engine's request). */
typedef struct sched_seq {
    kite_token *toks;          /* [cap] prompt then generated tokens */
    int32_t n_toks;
    int32_t n_computed;        /* positions with K/V in `kv` */
    kv_table kv;
    int64_t order;             /* admission serial: larger = newer */
    int32_t n_cached;          /* prompt tokens matched at first admission */
    bool admitted_once;
    bool running;
    int32_t n_prompt;
    int32_t n_path;            /* positions 0..n_path-1 are computed on the prompt attention path
                                  (what a lone run of the prompt uses), later ones on the decode path */
    struct sched_seq *q_prev, *q_next; /* waiting-queue links */
    const kite_token *draft;   /* [n_draft] speculative draft to follow the pending token, set by the
                                  engine before each sched_plan (used only for a decode item) */
    int32_t n_draft;           /* 0: no draft */
    uint64_t client;           /* fair-queueing key (engine_req.client); sequences of one client are FIFO */
    int64_t round;             /* fair-queueing round given by sched_enqueue (admission order key) */
    bool embed;                /* prompt only, pooled: no prefix-cache match (every position is computed),
                                  no logits (items' n_out 0); done when n_computed == n_toks */
} sched_seq;

typedef struct sched_item {
    sched_seq *seq;
    int32_t n_tok;  /* tokens toks[n_computed .. n_computed + n_tok) */
    int32_t n_out;  /* 1: logits of the last token wanted */
    bool prompt_path; /* all n_tok positions are < n_path (an item never mixes the two paths) */
    int32_t n_draft;  /* speculative decode item: n_tok = 1 + n_draft tokens (pending token, then
                         seq->draft[0..n_draft)) and n_out = n_tok; 0 otherwise */
} sched_item;

typedef struct sched {
    kv_pool *kv;              /* borrowed */
    int32_t n_parallel;       /* max running */
    int32_t step_tokens;      /* token budget of a step (>= n_parallel) */
    kv_copy_fn copy;          /* copy-on-write of K/V rows */
    void *copy_user;
    sched_seq **running;      /* [n_parallel] admission order */
    int32_t n_running;
    sched_seq *wait_head, *wait_tail;
    int32_t n_wait;
    int64_t serial;
    int64_t vnow;             /* fair queueing: round of the last admitted sequence */
    /* sliding windows on every layer: the first position a pass from pos reads
     * (kern_attention_first_read); blocks below it are released after each
     * step (kv_drop_before).  NULL: keep every block (no window, or a global
     * layer needs them all). */
    int32_t (*first_read)(void *user, int32_t pos);
    void *first_read_user;
    int64_t preemptions;      /* counters for engine_stats */
    int64_t prefix_hit_tokens;
    int64_t tokens_in;
} sched;

int sched_init(sched *s, kv_pool *kv, int32_t n_parallel, int32_t step_tokens, kv_copy_fn copy, void *copy_user);
void sched_free(sched *s); /* the arrays; sequences belong to the caller */

/* Queues a new sequence (n_toks >= 1, n_computed 0, empty table; client
 * set): after the waiting sequences of its round or earlier (fair queueing
 * above).  O(n_wait). */
void sched_enqueue(sched *s, sched_seq *q);

/* Plans one step into items (capacity n_parallel); returns the count. */
int32_t sched_plan(sched *s, sched_item *items);

/* After the forward pass of a plan: advances n_computed and registers newly
 * full blocks in the prefix cache.  A draft item advances by its pending
 * token only; its draft positions wait for sched_keep_draft. */
void sched_advance(sched *s, const sched_item *items, int32_t n);

/* After verifying a draft item of q (and sched_advance): the first n_keep
 * drafted tokens were accepted and appended to q->toks, so their positions
 * (already written) count as computed; the rejected positions are dropped
 * by shrinking the block table (kv_truncate: blocks past the kept positions
 * go back to the pool, nothing is copied), then newly full blocks are
 * registered. */
void sched_keep_draft(sched *s, sched_seq *q, int32_t n_keep);

/* Takes a sequence out (finished or cancelled), running or waiting; its
 * blocks are released. */
void sched_remove(sched *s, sched_seq *q);

bool sched_idle(const sched *s); /* nothing running or waiting */

/* KV slots in distinct blocks held by running sequences, and of those the
 * slots holding a computed token (scratch: n_blocks ints). */
void sched_kv_usage(const sched *s, int32_t *scratch, int64_t *allocated, int64_t *used);

#endif
