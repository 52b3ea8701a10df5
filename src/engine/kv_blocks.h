/*
 * kv_blocks.h - paged KV block manager: a pool of fixed-size blocks, block
 * tables per sequence, reference counts, automatic prefix caching,
 * copy-on-write and LRU eviction (issue 5; docs/engine.md).
 *
 * DESIGN
 *   The KV cache of a serving context (ctx_new_sized) is n_blocks blocks of
 *   block_size positions.  This module only does the bookkeeping of block
 *   ids; the K/V rows themselves are touched by the forward pass and, for
 *   copy-on-write, by the kv_copy_fn the caller passes in.
 *
 *   A block is in one of three states:
 *     used    ref > 0: in the block table of at least one sequence;
 *     cached  ref == 0 but it carries a prefix-cache key: its rows are kept
 *             and it sits in an LRU list, to be reused by a later sequence
 *             with the same prefix or evicted (oldest first) when no free
 *             block is left;
 *     free    ref == 0 and no key: on the free list.
 *
 *   Prefix cache: a full block of a sequence is registered under
 *       key = hash(key of the previous block (or a seed), its block_size tokens)
 *   and remembers its tokens and its parent block (id and generation).  A
 *   lookup accepts a candidate only if its parent is the block matched just
 *   before and its tokens are equal, so a 64-bit hash collision can never
 *   hand a sequence the wrong rows; the hash only speeds the search.  A
 *   block's generation changes whenever it loses its key, which orphans the
 *   cached children of an evicted parent (they can no longer match and age
 *   out of the LRU list).  When a sequence completes a block that the cache
 *   already holds (another sequence computed the same prefix), its own copy
 *   is swapped for the cached one and freed.
 *
 *   Modes: the forward pass computes a prompt's positions on one attention
 *   path and generated ones on another, and the two round differently, so
 *   K/V rows depend on which path computed each position up to theirs.  A
 *   block therefore also records its mode (how many of its leading
 *   positions were on the prompt path); the mode is part of the key and of
 *   the comparison, and with the parent chain a hit reproduces the rows a
 *   sequence would compute itself bit for bit.
 *
 *   Writes: a sequence only writes positions that no other sequence shares.
 *   kv_prepare_write gives the sequence a private copy (copy-on-write) of any
 *   shared block in the range and drops the key of a private keyed block
 *   about to change (after a truncation into it).
 *
 *   Sliding windows (kv_drop_before): the leading entries of a table whose
 *   blocks have left every layer's window are KV_BLOCK_NONE; t->n_dropped
 *   counts them.  They are never read, written or matched.
 *
 * INVARIANTS
 *   ref[b] == number of table entries naming b; cached blocks are exactly the
 *   keyed blocks with ref 0 and are all in the LRU list; free + cached + used
 *   == n_blocks.  A table's first n_keyed entries are registered full blocks.
 *
 * THREAD SAFETY
 *   None: one thread (the engine thread) owns the pool and its tables.
 */
#ifndef KITE_SERVE_KV_BLOCKS_H
#define KITE_SERVE_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "kite.h"

typedef struct kv_pool kv_pool;

/* Prefix-cache key of a block from its parent's key and its tokens. */
typedef uint64_t (*kv_hash_fn)(uint64_t parent_key, const kite_token *tokens, int32_t n);

/* Copies the K/V rows of block src into block dst (every layer). */
typedef void (*kv_copy_fn)(void *user, int32_t dst, int32_t src);

/* The block table of one sequence. */
typedef struct kv_table {
    int32_t *blocks;   /* [cap] block id of positions [i*block_size, (i+1)*block_size) */
    uint64_t *keys;    /* [cap] prefix-cache key of blocks[i], valid for i < n_keyed */
    int32_t n_blocks;  /* entries in use */
    int32_t cap;       /* entries allocated */
    int32_t n_keyed;   /* leading entries that are registered (or matched) full blocks */
    int32_t n_dropped; /* leading entries released by kv_drop_before (KV_BLOCK_NONE) */
} kv_table;

/* Creates a pool of n_blocks (>= 1) blocks of block_size (>= 1) positions.
 * prefix_cache false: no matching, no registration, freed blocks go straight
 * to the free list.  Returns KITE_OK, KITE_E_ARG or KITE_E_NOMEM. */
int kv_pool_new(int32_t n_blocks, int32_t block_size, bool prefix_cache, kv_pool **out /* OUT */);
void kv_pool_free(kv_pool *p); /* NULL is a no-op */

/* Replaces the key function (tests force collisions with it); call before
 * anything is registered.  NULL restores the default 64-bit hash. */
void kv_pool_set_hash(kv_pool *p, kv_hash_fn fn);
/* The default key function (64-bit, every token and the parent key mixed in). */
uint64_t kv_hash_default(uint64_t parent_key, const kite_token *tokens, int32_t n);

int32_t kv_pool_block_size(const kv_pool *p);
int32_t kv_pool_n_blocks(const kv_pool *p);
int32_t kv_pool_n_used(const kv_pool *p);      /* ref > 0 */
int32_t kv_pool_n_cached(const kv_pool *p);    /* ref == 0, keyed */
int32_t kv_pool_n_free(const kv_pool *p);      /* ref == 0, unkeyed */
int32_t kv_pool_available(const kv_pool *p);   /* free + cached: what an allocation may take */
int32_t kv_block_refcount(const kv_pool *p, int32_t b);
bool kv_block_is_keyed(const kv_pool *p, int32_t b);

void kv_table_init(kv_table *t);
/* Releases the table's blocks (kv_release) and frees its arrays. */
void kv_table_free(kv_pool *p, kv_table *t);

/* For an empty table: finds the longest run of cached full blocks equal to
 * tokens[0..n) (whole blocks only) whose first n_path positions were
 * computed on the prompt path (see "Modes" above), references them and
 * appends them to t.
 * Returns the number of positions matched (a multiple of block_size), 0 on a
 * miss, or a negative status (KITE_E_NOMEM, table unchanged). */
int32_t kv_match_prefix(kv_pool *p, kv_table *t, const kite_token *tokens, int32_t n, int32_t n_path);

/* Number of blocks kv_prepare_write(t, pos0, n) would take from the pool:
 * new blocks to cover positions < pos0 + n plus copies of shared blocks. */
int32_t kv_write_cost(const kv_pool *p, const kv_table *t, int32_t pos0, int32_t n);

/* Makes positions [pos0, pos0+n) writable by this sequence: appends blocks
 * until the table covers pos0 + n positions and replaces every shared block
 * in the range by a private copy (copy(user, new, old)); a private keyed
 * block in the range loses its key.  pos0 must not exceed the positions the
 * table holds data for (the caller's n_computed).  Returns KITE_OK, or
 * KITE_E_RANGE when the pool has fewer than kv_write_cost blocks (table
 * unchanged) or KITE_E_NOMEM. */
int kv_prepare_write(kv_pool *p, kv_table *t, int32_t pos0, int32_t n, kv_copy_fn copy, void *user);

/* After positions < n_computed hold the K/V of tokens[0..n_computed), the
 * first n_path of them computed on the prompt path:
 * registers the table's full blocks not yet registered in the prefix cache
 * (swapping a block for an identical cached one when there is one). */
void kv_commit(kv_pool *p, kv_table *t, const kite_token *tokens, int32_t n_computed, int32_t n_path);

/* Drops every block of the table (ref--; a block reaching 0 becomes cached
 * if keyed, else free; the tail is queued for eviction before the head).
 * The table is left empty and reusable. */
void kv_release(kv_pool *p, kv_table *t);

/* Keeps only the blocks covering positions < n_pos (speculative rollback);
 * the later ones are released like kv_release. */
void kv_truncate(kv_pool *p, kv_table *t, int32_t n_pos);

/* Sliding windows: releases (like kv_release) the table's blocks that lie
 * wholly below position n_pos, which no later pass of the sequence reads
 * (the caller's promise), and marks their entries KV_BLOCK_NONE.  With the
 * prefix cache on, a block is released only once the block after it is
 * registered (kv_commit names a block's parent by its id).  Keys stay in
 * t->keys.  Returns the number of blocks released. */
#define KV_BLOCK_NONE (-1)
int32_t kv_drop_before(kv_pool *p, kv_table *t, int32_t n_pos);

#endif
