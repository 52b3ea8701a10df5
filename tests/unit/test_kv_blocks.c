/*
 * test_kv_blocks.c - the paged KV block manager (src/engine/kv_blocks.c).
 *
 *   - allocation covers exactly the positions asked for; release returns
 *     blocks; counts (used / cached / free) add up after every operation;
 *   - prefix cache: full blocks registered by one sequence are matched by a
 *     later one (refcount 2), a different block or a different earlier block
 *     misses, a partial block is never matched;
 *   - collision safety: with a hash that maps everything to one key, lookups
 *     still only match equal tokens under the same parent;
 *   - copy-on-write: writing into a shared block copies it (copy callback
 *     sees new <- old) and leaves the other owner's block untouched;
 *   - LRU: cached blocks are evicted least recently released first, a
 *     sequence's tail before its head, and a reused cached block leaves the
 *     LRU list; an evicted parent orphans its cached children;
 *   - modes (how many positions were computed on the prompt path) are part
 *     of a block's identity;
 *   - truncation frees tail blocks and a later write into a kept keyed block
 *     drops its key; the duplicate-block swap on commit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "engine/kv_blocks.h"

#define BS 4

static void check_counts(const kv_pool *p) {
    CHECK_EQ_INT(kv_pool_n_used(p) + kv_pool_n_cached(p) + kv_pool_n_free(p), kv_pool_n_blocks(p));
}

static kv_pool *new_pool(int32_t n_blocks, bool prefix) {
    kv_pool *p = NULL;
    CHECK_EQ_INT(kv_pool_new(n_blocks, BS, prefix, &p), KITE_OK);
    return p;
}

/* Gives t room for n positions starting at pos0 and commits tokens[0..pos0+n). */
static int write_and_commit(kv_pool *p, kv_table *t, const kite_token *tokens, int32_t pos0, int32_t n) {
    int rc = kv_prepare_write(p, t, pos0, n, NULL, NULL);
    if (rc == KITE_OK) kv_commit(p, t, tokens, pos0 + n, 0);
    return rc;
}

TEST(alloc_release_counts) {
    kv_pool *p = new_pool(8, true);
    kv_table t;
    kv_table_init(&t);
    CHECK_EQ_INT(kv_write_cost(p, &t, 0, 5), 2);
    CHECK_EQ_INT(kv_prepare_write(p, &t, 0, 5, NULL, NULL), KITE_OK);
    CHECK_EQ_INT(t.n_blocks, 2);
    CHECK_EQ_INT(kv_pool_n_used(p), 2);
    CHECK_EQ_INT(kv_block_refcount(p, t.blocks[0]), 1);
    CHECK(t.blocks[0] != t.blocks[1]);
    /* growing inside the last block costs nothing */
    CHECK_EQ_INT(kv_write_cost(p, &t, 5, 3), 0);
    CHECK_EQ_INT(kv_write_cost(p, &t, 5, 4), 1);
    /* more than the pool: refused, table unchanged */
    CHECK_EQ_INT(kv_prepare_write(p, &t, 5, 100, NULL, NULL), KITE_E_RANGE);
    CHECK_EQ_INT(t.n_blocks, 2);
    check_counts(p);
    kv_release(p, &t);
    CHECK_EQ_INT(t.n_blocks, 0);
    CHECK_EQ_INT(kv_pool_n_used(p), 0);
    CHECK_EQ_INT(kv_pool_n_free(p), 8); /* nothing committed: nothing cached */
    check_counts(p);
    kv_table_free(p, &t);
    kv_pool_free(p);
}

TEST(prefix_hit_and_miss) {
    kv_pool *p = new_pool(16, true);
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    kv_table t1, t2, t3, t4;
    kv_table_init(&t1);
    kv_table_init(&t2);
    kv_table_init(&t3);
    kv_table_init(&t4);
    CHECK_EQ_INT(write_and_commit(p, &t1, a, 0, 10), KITE_OK);
    CHECK_EQ_INT(t1.n_keyed, 2); /* 2 full blocks, the third is partial */
    /* same prompt: the two full blocks are shared */
    CHECK_EQ_INT(kv_match_prefix(p, &t2, a, 10, 0), 8);
    CHECK_EQ_INT(t2.n_blocks, 2);
    CHECK_EQ_INT(t2.blocks[0], t1.blocks[0]);
    CHECK_EQ_INT(t2.blocks[1], t1.blocks[1]);
    CHECK_EQ_INT(kv_block_refcount(p, t1.blocks[0]), 2);
    /* only 5 tokens offered: one block */
    kv_release(p, &t2);
    CHECK_EQ_INT(kv_match_prefix(p, &t2, a, 7, 0), 4);
    /* a different first block misses entirely; a different second block matches one */
    const kite_token b[] = {1, 2, 3, 9, 5, 6, 7, 8};
    const kite_token c[] = {1, 2, 3, 4, 5, 6, 7, 0};
    CHECK_EQ_INT(kv_match_prefix(p, &t3, b, 8, 0), 0);
    CHECK_EQ_INT(kv_match_prefix(p, &t4, c, 8, 0), 4);
    /* same second block after a different first block: no match (the parent differs) */
    kv_release(p, &t3);
    const kite_token d[] = {0, 0, 0, 0, 5, 6, 7, 8};
    CHECK_EQ_INT(write_and_commit(p, &t3, d, 0, 8), KITE_OK);
    CHECK(t3.blocks[1] != t1.blocks[1]);
    check_counts(p);
    kv_table_free(p, &t1);
    kv_table_free(p, &t2);
    kv_table_free(p, &t3);
    kv_table_free(p, &t4);
    /* released full blocks stay cached and still match */
    CHECK_EQ_INT(kv_pool_n_used(p), 0);
    CHECK_EQ_INT(kv_pool_n_cached(p), 4);
    CHECK_EQ_INT(kv_match_prefix(p, &t1, a, 10, 0), 8);
    CHECK_EQ_INT(kv_pool_n_cached(p), 2);
    kv_table_free(p, &t1);
    kv_pool_free(p);
}

TEST(no_prefix_cache) {
    kv_pool *p = new_pool(8, false);
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_table t1, t2;
    kv_table_init(&t1);
    kv_table_init(&t2);
    CHECK_EQ_INT(write_and_commit(p, &t1, a, 0, 8), KITE_OK);
    CHECK_EQ_INT(kv_match_prefix(p, &t2, a, 8, 0), 0);
    kv_table_free(p, &t1);
    CHECK_EQ_INT(kv_pool_n_free(p), 8);
    kv_table_free(p, &t2);
    kv_pool_free(p);
}

static uint64_t hash_const(uint64_t parent_key, const kite_token *tokens, int32_t n) {
    (void)parent_key;
    (void)tokens;
    (void)n;
    return 42;
}

TEST(collision_safety) {
    kv_pool *p = new_pool(16, true);
    kv_pool_set_hash(p, hash_const); /* every block collides */
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    const kite_token b[] = {1, 2, 3, 5, 5, 6, 7, 8};
    const kite_token c[] = {1, 2, 3, 4, 9, 9, 9, 9};
    kv_table ta, tb, tc, tx;
    kv_table_init(&ta);
    kv_table_init(&tb);
    kv_table_init(&tc);
    kv_table_init(&tx);
    CHECK_EQ_INT(write_and_commit(p, &ta, a, 0, 8), KITE_OK);
    CHECK_EQ_INT(write_and_commit(p, &tb, b, 0, 8), KITE_OK);
    /* b's first block differs: not a's, although the keys are equal */
    CHECK(tb.blocks[0] != ta.blocks[0]);
    CHECK(tb.blocks[1] != ta.blocks[1]); /* same tokens, other parent */
    CHECK_EQ_INT(kv_match_prefix(p, &tc, c, 8, 0), 4);
    CHECK_EQ_INT(tc.blocks[0], ta.blocks[0]);
    CHECK_EQ_INT(kv_match_prefix(p, &tx, b, 8, 0), 8);
    CHECK_EQ_INT(tx.blocks[0], tb.blocks[0]);
    CHECK_EQ_INT(tx.blocks[1], tb.blocks[1]);
    kv_table_free(p, &ta);
    kv_table_free(p, &tb);
    kv_table_free(p, &tc);
    kv_table_free(p, &tx);
    check_counts(p);
    kv_pool_free(p);
}

typedef struct copy_log {
    int32_t n;
    int32_t dst[8], src[8];
} copy_log;

static void log_copy(void *user, int32_t dst, int32_t src) {
    copy_log *l = user;
    if (l->n < 8) {
        l->dst[l->n] = dst;
        l->src[l->n] = src;
    }
    l->n++;
}

TEST(copy_on_write) {
    kv_pool *p = new_pool(8, true);
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_table t1, t2;
    kv_table_init(&t1);
    kv_table_init(&t2);
    CHECK_EQ_INT(write_and_commit(p, &t1, a, 0, 8), KITE_OK);
    CHECK_EQ_INT(kv_match_prefix(p, &t2, a, 8, 0), 8);
    const int32_t shared = t2.blocks[1];
    /* t2 rolls back into its second block and writes there: it gets a copy */
    kv_truncate(p, &t2, 6);
    CHECK_EQ_INT(t2.n_blocks, 2);
    CHECK_EQ_INT(t2.n_keyed, 1);
    CHECK_EQ_INT(kv_write_cost(p, &t2, 6, 1), 1);
    copy_log log = {0};
    CHECK_EQ_INT(kv_prepare_write(p, &t2, 6, 1, log_copy, &log), KITE_OK);
    CHECK_EQ_INT(log.n, 1);
    CHECK_EQ_INT(log.src[0], shared);
    CHECK_EQ_INT(log.dst[0], t2.blocks[1]);
    CHECK(t2.blocks[1] != shared);
    CHECK_EQ_INT(t1.blocks[1], shared);
    CHECK_EQ_INT(kv_block_refcount(p, shared), 1);
    CHECK(kv_block_is_keyed(p, shared)); /* t1's block keeps its key */
    CHECK(!kv_block_is_keyed(p, t2.blocks[1]));
    CHECK_EQ_INT(kv_block_refcount(p, t2.blocks[0]), 2); /* the first block is still shared */
    /* a private keyed block written after truncation loses its key, no copy */
    kv_truncate(p, &t1, 5);
    log.n = 0;
    CHECK_EQ_INT(kv_prepare_write(p, &t1, 5, 1, log_copy, &log), KITE_OK);
    CHECK_EQ_INT(log.n, 0);
    CHECK_EQ_INT(t1.blocks[1], shared);
    CHECK(!kv_block_is_keyed(p, shared));
    /* so the old second block no longer matches */
    kv_table t3;
    kv_table_init(&t3);
    CHECK_EQ_INT(kv_match_prefix(p, &t3, a, 8, 0), 4);
    check_counts(p);
    kv_table_free(p, &t1);
    kv_table_free(p, &t2);
    kv_table_free(p, &t3);
    kv_pool_free(p);
}

TEST(lru_eviction_order) {
    kv_pool *p = new_pool(4, true);
    const kite_token a[] = {1, 1, 1, 1, 2, 2, 2, 2};
    const kite_token b[] = {3, 3, 3, 3, 4, 4, 4, 4};
    kv_table ta, tb, tc;
    kv_table_init(&ta);
    kv_table_init(&tb);
    kv_table_init(&tc);
    CHECK_EQ_INT(write_and_commit(p, &ta, a, 0, 8), KITE_OK);
    CHECK_EQ_INT(write_and_commit(p, &tb, b, 0, 8), KITE_OK);
    const int32_t a0 = ta.blocks[0], a1 = ta.blocks[1], b0 = tb.blocks[0], b1 = tb.blocks[1];
    kv_release(p, &ta); /* LRU: a1, a0 */
    kv_release(p, &tb); /* LRU: a1, a0, b1, b0 */
    CHECK_EQ_INT(kv_pool_n_cached(p), 4);
    CHECK_EQ_INT(kv_pool_n_free(p), 0);
    /* reuse b's head: it leaves the LRU list */
    CHECK_EQ_INT(kv_match_prefix(p, &tc, b, 4, 0), 4);
    CHECK_EQ_INT(tc.blocks[0], b0);
    /* allocations evict a's tail first, then a's head, then b's tail */
    CHECK_EQ_INT(kv_prepare_write(p, &tc, 4, 1, NULL, NULL), KITE_OK);
    CHECK_EQ_INT(tc.blocks[1], a1);
    CHECK(!kv_block_is_keyed(p, a1));
    CHECK_EQ_INT(kv_prepare_write(p, &tc, 8, 1, NULL, NULL), KITE_OK);
    CHECK_EQ_INT(tc.blocks[2], a0);
    CHECK_EQ_INT(kv_prepare_write(p, &tc, 12, 1, NULL, NULL), KITE_OK);
    CHECK_EQ_INT(tc.blocks[3], b1);
    CHECK_EQ_INT(kv_pool_available(p), 0);
    CHECK_EQ_INT(kv_prepare_write(p, &tc, 16, 1, NULL, NULL), KITE_E_RANGE);
    /* nothing of a is cached any more */
    kv_table_free(p, &tc);
    kv_table_free(p, &ta); /* empty already; frees its arrays */
    CHECK_EQ_INT(kv_match_prefix(p, &ta, a, 8, 0), 0);
    check_counts(p);
    kv_table_free(p, &ta);
    kv_table_free(p, &tb);
    kv_pool_free(p);
}

TEST(orphaned_children_do_not_match) {
    /* a parent that loses its key and is registered again (rewritten after a
     * truncation) must not adopt the child cached under its previous life */
    kv_pool *p = new_pool(4, true);
    const kite_token a[] = {1, 1, 1, 1, 2, 2, 2, 2};
    kv_table t, tb;
    kv_table_init(&t);
    kv_table_init(&tb);
    CHECK_EQ_INT(write_and_commit(p, &t, a, 0, 8), KITE_OK);
    const int32_t a0 = t.blocks[0], a1 = t.blocks[1];
    kv_truncate(p, &t, 2);            /* a1 released: cached */
    CHECK(kv_block_is_keyed(p, a1));
    CHECK_EQ_INT(write_and_commit(p, &t, a, 2, 2), KITE_OK); /* a0 rewritten, registered again */
    CHECK_EQ_INT(t.blocks[0], a0);
    CHECK(kv_block_is_keyed(p, a0));
    CHECK_EQ_INT(kv_match_prefix(p, &tb, a, 8, 0), 4); /* a0 matches, the stale a1 does not */
    CHECK_EQ_INT(tb.blocks[0], a0);
    kv_table_free(p, &tb);
    kv_table_free(p, &t);
    check_counts(p);
    kv_pool_free(p);
}

TEST(duplicate_swap_on_commit) {
    kv_pool *p = new_pool(8, true);
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_table t1, t2;
    kv_table_init(&t1);
    kv_table_init(&t2);
    /* both allocate before either commits (same step), then both commit */
    CHECK_EQ_INT(kv_prepare_write(p, &t1, 0, 8, NULL, NULL), KITE_OK);
    CHECK_EQ_INT(kv_prepare_write(p, &t2, 0, 8, NULL, NULL), KITE_OK);
    CHECK_EQ_INT(kv_pool_n_used(p), 4);
    kv_commit(p, &t1, a, 8, 0);
    kv_commit(p, &t2, a, 8, 0);
    CHECK_EQ_INT(t2.blocks[0], t1.blocks[0]);
    CHECK_EQ_INT(t2.blocks[1], t1.blocks[1]);
    CHECK_EQ_INT(kv_pool_n_used(p), 2);
    CHECK_EQ_INT(kv_pool_n_free(p), 6);
    check_counts(p);
    kv_table_free(p, &t1);
    kv_table_free(p, &t2);
    kv_pool_free(p);
}

TEST(truncate_frees_tail) {
    kv_pool *p = new_pool(8, true);
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    kv_table t;
    kv_table_init(&t);
    CHECK_EQ_INT(write_and_commit(p, &t, a, 0, 13), KITE_OK);
    CHECK_EQ_INT(t.n_blocks, 4);
    kv_truncate(p, &t, 5);
    CHECK_EQ_INT(t.n_blocks, 2);
    CHECK_EQ_INT(t.n_keyed, 1);
    CHECK_EQ_INT(kv_pool_n_used(p), 2);
    CHECK_EQ_INT(kv_pool_n_cached(p), 1); /* the third block was full: cached */
    CHECK_EQ_INT(kv_pool_n_free(p), 5);   /* the partial fourth: free */
    kv_truncate(p, &t, 4);
    CHECK_EQ_INT(t.n_blocks, 1);
    /* regrow and recommit: the hash chain is rebuilt */
    CHECK_EQ_INT(write_and_commit(p, &t, a, 4, 9), KITE_OK);
    CHECK_EQ_INT(t.n_keyed, 3);
    check_counts(p);
    kv_table_free(p, &t);
    CHECK_EQ_INT(kv_pool_n_used(p), 0);
    kv_pool_free(p);
}

TEST(modes_do_not_mix) {
    /* rows computed on the prompt path never serve a sequence that would
     * compute them on the decode path, and vice versa */
    kv_pool *p = new_pool(8, true);
    const kite_token a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_table t1, t2, t3;
    kv_table_init(&t1);
    kv_table_init(&t2);
    kv_table_init(&t3);
    CHECK_EQ_INT(kv_prepare_write(p, &t1, 0, 8, NULL, NULL), KITE_OK);
    kv_commit(p, &t1, a, 8, 6); /* 6 prompt-path positions: modes 4 and 2 */
    CHECK_EQ_INT(kv_match_prefix(p, &t2, a, 8, 0), 0);
    CHECK_EQ_INT(kv_match_prefix(p, &t3, a, 8, 5), 4); /* first block mode 4, second 1 != 2 */
    kv_release(p, &t3);
    CHECK_EQ_INT(kv_match_prefix(p, &t3, a, 8, 6), 8);
    kv_table_free(p, &t1);
    kv_table_free(p, &t2);
    kv_table_free(p, &t3);
    check_counts(p);
    kv_pool_free(p);
}

/* A table grows into the block after its last one when that is free (so its
 * rows stay one run for the attention), else takes the free list's head. */
TEST(grows_into_next_block) {
    kv_pool *p = new_pool(8, false);
    kv_table a, b;
    kv_table_init(&a);
    kv_table_init(&b);
    CHECK_EQ_INT(kv_prepare_write(p, &a, 0, 2 * BS, NULL, NULL), KITE_OK); /* 0, 1 */
    CHECK_EQ_INT(kv_prepare_write(p, &b, 0, BS, NULL, NULL), KITE_OK);     /* 2 */
    CHECK_EQ_INT(kv_prepare_write(p, &a, 2 * BS, BS, NULL, NULL), KITE_OK); /* 2 taken: the head, 3 */
    CHECK_EQ_INT(a.blocks[2], 3);
    CHECK_EQ_INT(kv_prepare_write(p, &a, 3 * BS, BS, NULL, NULL), KITE_OK); /* 4 follows 3 */
    CHECK_EQ_INT(a.blocks[3], 4);
    kv_release(p, &b); /* 2 is now the free list's head */
    CHECK_EQ_INT(kv_prepare_write(p, &a, 4 * BS, BS, NULL, NULL), KITE_OK); /* still 5, not 2 */
    CHECK_EQ_INT(a.blocks[4], 5);
    CHECK_EQ_INT(kv_prepare_write(p, &b, 0, 3 * BS, NULL, NULL), KITE_OK); /* 2, then 6 and 7 (3 is a's) */
    CHECK_EQ_INT(b.blocks[0], 2);
    CHECK_EQ_INT(b.blocks[1], 6);
    CHECK_EQ_INT(b.blocks[2], 7);
    CHECK_EQ_INT(kv_pool_n_free(p), 0);
    check_counts(p);
    kv_table_free(p, &a);
    kv_table_free(p, &b);
    CHECK_EQ_INT(kv_pool_n_free(p), 8);
    kv_pool_free(p);
}

/* Sliding windows: kv_drop_before releases the blocks wholly below a
 * position (cached when keyed), marks their entries, and with the prefix
 * cache keeps the block before the first unregistered one. */
TEST(drop_before_window) {
    kite_token tk[8 * BS];
    for (int i = 0; i < 8 * BS; i++) tk[i] = 100 + i;
    for (int prefix = 0; prefix < 2; prefix++) {
        kv_pool *p = new_pool(8, prefix);
        kv_table t;
        kv_table_init(&t);
        CHECK_EQ_INT(write_and_commit(p, &t, tk, 0, 5 * BS + 1), KITE_OK); /* 6 blocks, 5 full */
        CHECK_EQ_INT(t.n_keyed, prefix ? 5 : 0);
        CHECK_EQ_INT(kv_drop_before(p, &t, 3 * BS + 1), 3); /* blocks 0..2 lie below */
        CHECK_EQ_INT(t.n_dropped, 3);
        for (int i = 0; i < 3; i++) CHECK_EQ_INT(t.blocks[i], KV_BLOCK_NONE);
        CHECK_EQ_INT(kv_pool_n_used(p), 3);
        CHECK_EQ_INT(kv_pool_n_cached(p), prefix ? 3 : 0);
        CHECK_EQ_INT(kv_drop_before(p, &t, 3 * BS + 1), 0);
        /* up to the last registered block's parent only (prefix cache) */
        CHECK_EQ_INT(kv_drop_before(p, &t, 5 * BS), prefix ? 1 : 2); /* blocks 0..4 lie below */
        check_counts(p);
        /* growing and truncating the tail still work */
        CHECK_EQ_INT(kv_prepare_write(p, &t, 5 * BS + 1, BS, NULL, NULL), KITE_OK);
        kv_truncate(p, &t, 5 * BS + 2);
        CHECK_EQ_INT(t.n_blocks, 6);
        kv_release(p, &t);
        CHECK_EQ_INT(kv_pool_n_used(p), 0);
        CHECK_EQ_INT(t.n_dropped, 0);
        check_counts(p);
        /* the released chain is still matched from its first block when cached */
        if (prefix) {
            CHECK_EQ_INT(kv_match_prefix(p, &t, tk, 5 * BS + 1, 0), 5 * BS);
            kv_release(p, &t);
        }
        kv_table_free(p, &t);
        kv_pool_free(p);
    }
}

TEST(bad_args) {
    kv_pool *p = NULL;
    CHECK_EQ_INT(kv_pool_new(0, 16, true, &p), KITE_E_ARG);
    CHECK_EQ_INT(kv_pool_new(4, 0, true, &p), KITE_E_ARG);
    CHECK(p == NULL);
    kv_pool_free(NULL);
}

TEST(hash_spreads) {
    /* the default key differs for one changed token, another parent, order */
    const kite_token a[] = {1, 2, 3, 4}, b[] = {1, 2, 3, 5}, c[] = {2, 1, 3, 4};
    const uint64_t ka = kv_hash_default(7, a, 4);
    CHECK(ka != kv_hash_default(7, b, 4));
    CHECK(ka != kv_hash_default(8, a, 4));
    CHECK(ka != kv_hash_default(7, c, 4));
    CHECK(ka == kv_hash_default(7, a, 4));
}

int main(void) {
    RUN(alloc_release_counts);
    RUN(prefix_hit_and_miss);
    RUN(no_prefix_cache);
    RUN(collision_safety);
    RUN(copy_on_write);
    RUN(lru_eviction_order);
    RUN(orphaned_children_do_not_match);
    RUN(duplicate_swap_on_commit);
    RUN(truncate_frees_tail);
    RUN(modes_do_not_mix);
    RUN(grows_into_next_block);
    RUN(drop_before_window);
    RUN(bad_args);
    RUN(hash_spreads);
    return harness_summary(__FILE__);
}
