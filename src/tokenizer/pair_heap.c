/*
 * pair_heap.c - the binary heap of candidate merges shared by the
 * SentencePiece (spm.c) and byte-level BPE (bpe.c) encoders.
 *
 * DESIGN
 *   A plain array heap over elements of any size, ordered by a caller's
 *   "comes before" predicate (the encoders order by score or rank, ties by
 *   the left symbol index, so the merge order is deterministic).  Elements are
 *   moved with memcpy; the caller owns the array and sizes it for every push.
 *
 * INVARIANTS
 *   heap[0..n) satisfies: no child comes before its parent.
 *
 * THREAD SAFETY
 *   No state of its own; reentrant on distinct arrays.
 */
#include <string.h>

#include "tokenizer/vocab_internal.h"

#define AT(i) (base + (i) * size)

void vocab_heap_push(void *heap, size_t *n, size_t size, const void *item, vocab_heap_before_fn before) {
    unsigned char *base = heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(item, AT(parent))) break;
        memcpy(AT(i), AT(parent), size);
        i = parent;
    }
    memcpy(AT(i), item, size);
}

void vocab_heap_pop(void *heap, size_t *n, size_t size, void *top, vocab_heap_before_fn before) {
    unsigned char *base = heap;
    memcpy(top, AT(0), size);
    size_t m = --(*n), i = 0;
    const unsigned char *last = AT(m); /* outside heap[0..m) now, so never overwritten below */
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && before(AT(c + 1), AT(c))) c++;
        if (!before(AT(c), last)) break;
        memcpy(AT(i), AT(c), size);
        i = c;
    }
    if (m > 0) memcpy(AT(i), last, size);
}
