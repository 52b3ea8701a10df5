/*
 * kv_blocks.c - paged KV block manager (see kv_blocks.h for the design).
 *
 * Data structures, all indexed by block id and allocated once:
 *   - blk[]: state of each block (reference count, key, parent, links);
 *   - tokens[]: block_size tokens per keyed block (for the exact comparison
 *     behind every prefix-cache hit);
 *   - a free list (LIFO, doubly linked through blk[].next / .prev, so that a
 *     given free block can be taken out: a sequence grows into the block
 *     after its last one when that is free, which keeps its rows
 *     consecutive and the attention's runs long, attn_row_run_n);
 *   - an LRU list of cached blocks (doubly linked; head = least recently
 *     released = first to evict);
 *   - a chained hash table of keyed blocks (buckets[] + blk[].hnext), with
 *     at least as many buckets as blocks.
 * Nothing is allocated after kv_pool_new except block-table growth.
 */
#include "engine/kv_blocks.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Key of the (absent) parent of a sequence's first block. */
#define KV_SEED_KEY 0x6b6974652d6b7631ULL /* "kite-kv1" */

typedef struct kv_block {
    uint64_t key;        /* prefix-cache key (valid when keyed) */
    int32_t ref;         /* table entries naming this block */
    int32_t parent;      /* keyed: block before it in its sequence, -1 for a first block */
    uint32_t parent_gen; /* keyed: parent's gen when this block was registered */
    uint32_t gen;        /* incremented each time the block loses its key */
    int32_t mode;        /* keyed: leading positions of the block computed on the prompt path */
    int32_t prev, next;  /* LRU links when cached, free-list links when free */
    int32_t hnext;       /* next keyed block in the same hash bucket, -1 ends */
    bool keyed;
} kv_block;

struct kv_pool {
    int32_t n_blocks;
    int32_t block_size;   /* positions per block */
    bool prefix_cache;
    kv_hash_fn hash;
    kv_block *blk;        /* [n_blocks] */
    kite_token *tokens;   /* [n_blocks][block_size] tokens of keyed blocks */
    int32_t *buckets;     /* [bucket_mask + 1] first keyed block of each bucket, -1 empty */
    uint64_t bucket_mask;
    int32_t free_head;    /* -1 when no free block */
    int32_t n_free;
    int32_t lru_head;     /* oldest cached block, -1 when none */
    int32_t lru_tail;     /* newest cached block */
    int32_t n_cached;
    int32_t n_used;
};

/* ---- hashing ------------------------------------------------------------ */

/* A bijective 64-bit finaliser (xor-shift / odd-multiply rounds). */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}

uint64_t kv_hash_default(uint64_t parent_key, const kite_token *tokens, int32_t n) {
    uint64_t h = mix64(parent_key ^ ((uint64_t)(uint32_t)n << 32));
    for (int32_t i = 0; i < n; i++) h = mix64(h + 0x9e3779b97f4a7c15ULL + (uint64_t)(uint32_t)tokens[i]);
    return h;
}

/* ---- pool ------------------------------------------------------------- */

int kv_pool_new(int32_t n_blocks, int32_t block_size, bool prefix_cache, kv_pool **out) {
    if (n_blocks < 1 || block_size < 1 || !out || block_size > (1 << 16) || n_blocks > (1 << 28))
        return err_set(KITE_E_ARG, "kv_pool_new: n_blocks %d and block_size %d must be positive (and sane)",
                       n_blocks, block_size);
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(KITE_E_NOMEM, "kv_pool_new: out of memory");
    uint64_t nb = 1;
    while (nb < (uint64_t)n_blocks) nb <<= 1;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->prefix_cache = prefix_cache;
    p->hash = kv_hash_default;
    p->bucket_mask = nb - 1;
    p->blk = calloc((size_t)n_blocks, sizeof *p->blk);
    p->tokens = malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
    p->buckets = malloc((size_t)nb * sizeof *p->buckets);
    if (!p->blk || !p->tokens || !p->buckets) {
        kv_pool_free(p);
        return err_set(KITE_E_NOMEM, "kv_pool_new: out of memory for %d blocks", n_blocks);
    }
    for (uint64_t i = 0; i < nb; i++) p->buckets[i] = -1;
    /* free list in id order: block 0 is handed out first */
    for (int32_t b = 0; b < n_blocks; b++) {
        p->blk[b].next = b + 1 < n_blocks ? b + 1 : -1;
        p->blk[b].prev = b - 1;
        p->blk[b].hnext = -1;
        p->blk[b].parent = -1;
    }
    p->free_head = 0;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    *out = p;
    return KITE_OK;
}

void kv_pool_free(kv_pool *p) {
    if (!p) return;
    free(p->buckets);
    free(p->tokens);
    free(p->blk);
    free(p);
}

void kv_pool_set_hash(kv_pool *p, kv_hash_fn fn) { p->hash = fn ? fn : kv_hash_default; }
int32_t kv_pool_block_size(const kv_pool *p) { return p->block_size; }
int32_t kv_pool_n_blocks(const kv_pool *p) { return p->n_blocks; }
int32_t kv_pool_n_used(const kv_pool *p) { return p->n_used; }
int32_t kv_pool_n_cached(const kv_pool *p) { return p->n_cached; }
int32_t kv_pool_n_free(const kv_pool *p) { return p->n_free; }
int32_t kv_pool_available(const kv_pool *p) { return p->n_free + p->n_cached; }
int32_t kv_block_refcount(const kv_pool *p, int32_t b) { return b >= 0 && b < p->n_blocks ? p->blk[b].ref : -1; }
bool kv_block_is_keyed(const kv_pool *p, int32_t b) { return b >= 0 && b < p->n_blocks && p->blk[b].keyed; }

/* ---- lists and the hash table ------------------------------------------- */

static void lru_unlink(kv_pool *p, int32_t b) {
    kv_block *k = &p->blk[b];
    if (k->prev >= 0) p->blk[k->prev].next = k->next; else p->lru_head = k->next;
    if (k->next >= 0) p->blk[k->next].prev = k->prev; else p->lru_tail = k->prev;
    k->prev = k->next = -1;
    p->n_cached--;
}

static void lru_push_tail(kv_pool *p, int32_t b) {
    kv_block *k = &p->blk[b];
    k->next = -1;
    k->prev = p->lru_tail;
    if (p->lru_tail >= 0) p->blk[p->lru_tail].next = b; else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

static void hash_insert(kv_pool *p, int32_t b) {
    int32_t *head = &p->buckets[p->blk[b].key & p->bucket_mask];
    p->blk[b].hnext = *head;
    *head = b;
}

/* Takes block b's key away: out of the hash table, generation bumped so the
 * cached children registered under it can no longer match. */
static void unkey(kv_pool *p, int32_t b) {
    kv_block *k = &p->blk[b];
    if (!k->keyed) return;
    int32_t *link = &p->buckets[k->key & p->bucket_mask];
    while (*link != b) {
        KITE_ASSERT(*link >= 0);
        link = &p->blk[*link].hnext;
    }
    *link = k->hnext;
    k->hnext = -1;
    k->keyed = false;
    k->gen++;
}

/* Positions of block i computed on the prompt path when the first n_path
 * positions of the sequence were. */
static int32_t block_mode(const kv_pool *p, int32_t i, int32_t n_path) {
    const int32_t m = n_path - i * p->block_size;
    return m <= 0 ? 0 : m > p->block_size ? p->block_size : m;
}

/* Key of a block from its parent's key, its mode and its tokens. */
static uint64_t block_key(const kv_pool *p, uint64_t parent_key, int32_t mode, const kite_token *tokens) {
    return p->hash(parent_key ^ ((uint64_t)(uint32_t)mode * 0x9e3779b97f4a7c15ULL), tokens, p->block_size);
}

/* The keyed block with this key, parent, mode and tokens, or -1. */
static int32_t find(const kv_pool *p, uint64_t key, int32_t parent, uint32_t parent_gen, int32_t mode,
                    const kite_token *tokens) {
    const size_t bs = (size_t)p->block_size;
    for (int32_t b = p->buckets[key & p->bucket_mask]; b >= 0; b = p->blk[b].hnext) {
        const kv_block *k = &p->blk[b];
        if (k->key == key && k->parent == parent && (parent < 0 || k->parent_gen == parent_gen) && k->mode == mode &&
            memcmp(p->tokens + (size_t)b * bs, tokens, bs * sizeof *tokens) == 0)
            return b;
    }
    return -1;
}

/* Takes free block b out of the free list. */
static void free_unlink(kv_pool *p, int32_t b) {
    kv_block *k = &p->blk[b];
    if (k->prev >= 0) p->blk[k->prev].next = k->next; else p->free_head = k->next;
    if (k->next >= 0) p->blk[k->next].prev = k->prev;
    p->n_free--;
}

/* A block with ref 1 for a new owner: block `want` if it is free, else a
 * free one, else the least recently released cached one (evicted: its key
 * dropped).  -1 if none. */
static int32_t alloc_block_at(kv_pool *p, int32_t want) {
    int32_t b = want >= 0 && want < p->n_blocks && p->blk[want].ref == 0 && !p->blk[want].keyed ? want
                                                                                               : p->free_head;
    if (b >= 0) {
        free_unlink(p, b);
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_unlink(p, b);
        unkey(p, b);
    } else {
        return -1;
    }
    p->blk[b].next = p->blk[b].prev = -1;
    p->blk[b].ref = 1;
    p->n_used++;
    return b;
}

static int32_t alloc_block(kv_pool *p) { return alloc_block_at(p, -1); }

static void incref(kv_pool *p, int32_t b) {
    if (p->blk[b].ref == 0) { /* a cached block comes back into use */
        KITE_ASSERT(p->blk[b].keyed);
        lru_unlink(p, b);
        p->n_used++;
    }
    p->blk[b].ref++;
}

static void decref(kv_pool *p, int32_t b) {
    kv_block *k = &p->blk[b];
    KITE_ASSERT(k->ref > 0);
    if (--k->ref > 0) return;
    p->n_used--;
    if (k->keyed && p->prefix_cache) {
        lru_push_tail(p, b);
    } else {
        unkey(p, b);
        k->next = p->free_head;
        k->prev = -1;
        if (p->free_head >= 0) p->blk[p->free_head].prev = b;
        p->free_head = b;
        p->n_free++;
    }
}

/* ---- tables ------------------------------------------------------------- */

void kv_table_init(kv_table *t) { memset(t, 0, sizeof *t); }

void kv_table_free(kv_pool *p, kv_table *t) {
    if (!t) return;
    if (p) kv_release(p, t);
    free(t->blocks);
    free(t->keys);
    kv_table_init(t);
}

static int table_reserve(kv_table *t, int32_t n) {
    if (n <= t->cap) return KITE_OK;
    int32_t cap = t->cap ? t->cap : 8;
    while (cap < n) cap *= 2;
    int32_t *blocks = realloc(t->blocks, (size_t)cap * sizeof *blocks);
    if (!blocks) return err_set(KITE_E_NOMEM, "kv: out of memory for a block table of %d entries", cap);
    t->blocks = blocks;
    uint64_t *keys = realloc(t->keys, (size_t)cap * sizeof *keys);
    if (!keys) return err_set(KITE_E_NOMEM, "kv: out of memory for a block table of %d entries", cap);
    t->keys = keys;
    t->cap = cap;
    return KITE_OK;
}

int32_t kv_match_prefix(kv_pool *p, kv_table *t, const kite_token *tokens, int32_t n, int32_t n_path) {
    KITE_ASSERT(t->n_blocks == 0);
    if (!p->prefix_cache || n < p->block_size) return 0;
    const int32_t bs = p->block_size, n_full = n / bs;
    if (table_reserve(t, n_full) != KITE_OK) return KITE_E_NOMEM;
    uint64_t key = KV_SEED_KEY;
    int32_t parent = -1;
    uint32_t pgen = 0;
    int32_t i = 0;
    for (; i < n_full; i++) {
        const kite_token *tk = tokens + (size_t)i * bs;
        const int32_t mode = block_mode(p, i, n_path);
        const uint64_t k = block_key(p, key, mode, tk);
        const int32_t b = find(p, k, parent, pgen, mode, tk);
        if (b < 0) break;
        incref(p, b);
        t->blocks[i] = b;
        t->keys[i] = k;
        key = k;
        parent = b;
        pgen = p->blk[b].gen;
    }
    t->n_blocks = t->n_keyed = i;
    return i * bs;
}

int32_t kv_write_cost(const kv_pool *p, const kv_table *t, int32_t pos0, int32_t n) {
    const int32_t bs = p->block_size;
    const int32_t end_blk = (pos0 + n + bs - 1) / bs;
    int32_t cost = end_blk > t->n_blocks ? end_blk - t->n_blocks : 0;
    for (int32_t i = pos0 / bs; i < end_blk && i < t->n_blocks; i++)
        if (p->blk[t->blocks[i]].ref > 1) cost++;
    return cost;
}

int kv_prepare_write(kv_pool *p, kv_table *t, int32_t pos0, int32_t n, kv_copy_fn copy, void *user) {
    const int32_t bs = p->block_size;
    KITE_ASSERT(pos0 >= 0 && n >= 0 && pos0 <= t->n_blocks * bs);
    if (n == 0) return KITE_OK;
    const int32_t cost = kv_write_cost(p, t, pos0, n);
    if (cost > kv_pool_available(p))
        return err_set(KITE_E_RANGE, "kv: %d blocks needed, %d available", cost, kv_pool_available(p));
    const int32_t first = pos0 / bs, end_blk = (pos0 + n + bs - 1) / bs;
    KITE_ASSERT(first >= t->n_dropped);
    int rc = table_reserve(t, end_blk);
    if (rc != KITE_OK) return rc;
    for (int32_t i = first; i < t->n_blocks && i < end_blk; i++) {
        const int32_t old = t->blocks[i];
        if (p->blk[old].ref > 1) { /* shared: write into a private copy */
            const int32_t nb = alloc_block(p);
            KITE_ASSERT(nb >= 0);
            if (copy) copy(user, nb, old);
            decref(p, old);
            t->blocks[i] = nb;
        } else {
            unkey(p, old); /* private but its registered contents are about to change */
        }
    }
    if (t->n_keyed > first) t->n_keyed = first;
    while (t->n_blocks < end_blk) { /* preferably right after the previous block: one run of rows */
        const int32_t last = t->n_blocks > 0 ? t->blocks[t->n_blocks - 1] : KV_BLOCK_NONE;
        const int32_t nb = alloc_block_at(p, last >= 0 ? last + 1 : -1);
        KITE_ASSERT(nb >= 0);
        t->blocks[t->n_blocks++] = nb;
    }
    return KITE_OK;
}

void kv_commit(kv_pool *p, kv_table *t, const kite_token *tokens, int32_t n_computed, int32_t n_path) {
    if (!p->prefix_cache) return;
    const int32_t bs = p->block_size;
    int32_t n_full = n_computed / bs;
    if (n_full > t->n_blocks) n_full = t->n_blocks;
    for (int32_t i = t->n_keyed; i < n_full; i++) {
        const int32_t parent = i > 0 ? t->blocks[i - 1] : -1;
        const uint32_t pgen = parent >= 0 ? p->blk[parent].gen : 0;
        const uint64_t pkey = i > 0 ? t->keys[i - 1] : KV_SEED_KEY;
        const kite_token *tk = tokens + (size_t)i * bs;
        const int32_t mode = block_mode(p, i, n_path);
        const uint64_t k = block_key(p, pkey, mode, tk);
        const int32_t b = t->blocks[i];
        kv_block *kb = &p->blk[b];
        if (kb->keyed) {
            /* still registered (a truncation kept it and nothing wrote it) */
            if (!(kb->key == k && kb->parent == parent && (parent < 0 || kb->parent_gen == pgen) && kb->mode == mode))
                break;
        } else {
            const int32_t c = find(p, k, parent, pgen, mode, tk);
            if (c >= 0 && kb->ref == 1) {
                /* the cache already holds this block: share it, free ours */
                incref(p, c);
                decref(p, b);
                t->blocks[i] = c;
            } else {
                kb->keyed = true;
                kb->key = k;
                kb->parent = parent;
                kb->parent_gen = pgen;
                kb->mode = mode;
                memcpy(p->tokens + (size_t)b * bs, tk, (size_t)bs * sizeof *tk);
                hash_insert(p, b);
            }
        }
        t->keys[i] = k;
        t->n_keyed = i + 1;
    }
}

void kv_truncate(kv_pool *p, kv_table *t, int32_t n_pos) {
    const int32_t bs = p->block_size;
    const int32_t keep = (n_pos + bs - 1) / bs;
    /* tail first, so the tail is the first to be evicted */
    while (t->n_blocks > keep) {
        const int32_t b = t->blocks[--t->n_blocks];
        if (b != KV_BLOCK_NONE) decref(p, b);
    }
    if (t->n_keyed > n_pos / bs) t->n_keyed = n_pos / bs;
    if (t->n_dropped > t->n_blocks) t->n_dropped = t->n_blocks;
}

int32_t kv_drop_before(kv_pool *p, kv_table *t, int32_t n_pos) {
    int32_t end = n_pos / p->block_size; /* blocks [0, end) lie wholly below n_pos */
    if (end > t->n_blocks) end = t->n_blocks;
    if (p->prefix_cache && end > t->n_keyed - 1) end = t->n_keyed - 1;
    int32_t n = 0;
    for (; t->n_dropped < end; t->n_dropped++, n++) {
        decref(p, t->blocks[t->n_dropped]);
        t->blocks[t->n_dropped] = KV_BLOCK_NONE;
    }
    return n;
}

void kv_release(kv_pool *p, kv_table *t) { kv_truncate(p, t, 0); }
