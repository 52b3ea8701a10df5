/*
 * spm.c - SentencePiece BPE encoder ("llama" tokenizer model).
 *
 * DESIGN
 *   Same result as sentencepiece's BPE model, llama.cpp's llm_tokenizer_spm
 *   and llama2.c's encode() on well-formed text:
 *     1. text -> " " + text when add_space_prefix (the dummy prefix; also for
 *        text that already starts with a space; empty text gives no tokens),
 *        then every ' ' becomes U+2581 "▁".
 *     2. split into symbols: one per well-formed UTF-8 character; every byte
 *        of an ill-formed or truncated sequence is a symbol of its own.
 *     3. a max-heap holds every adjacent pair whose concatenation is a
 *        mergeable piece (normal, user-defined or unused; never control,
 *        unknown or byte), ordered by the piece's score, ties to the leftmost
 *        pair.  Pop the best pair, skip it if either side changed since it
 *        was pushed (stale), merge it and push the two new neighbour pairs.
 *     4. emit each remaining symbol's id.  A symbol that is an UNUSED piece
 *        is split back into the two symbols it was merged from (recursively,
 *        from the recorded merge tree), as sentencepiece does.  A single
 *        character that is not a mergeable piece becomes its bytes as <0xNN>
 *        tokens, or one unknown token if the vocabulary lacks byte tokens.
 *
 * COST
 *   O(n log n) time and O(n) memory in the byte length n of the text:
 *   at most n-1 merges, each pushing at most 2 pairs, each pair one hash
 *   lookup of at most max_piece_len bytes.
 *
 * THREAD SAFETY
 *   Reentrant: all state is in per-call scratch (malloc'd, freed on return).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/vocab_internal.h"

typedef struct spm_sym {
    size_t off;     /* byte offset of the symbol in the escaped text */
    uint32_t n;     /* byte length; 0 once merged into its left neighbour */
    int32_t prev;   /* index of the left neighbour, -1 at the start */
    int32_t next;   /* index of the right neighbour, -1 at the end */
    int32_t node;   /* merge-tree node of the current content (only with unused tokens) */
} spm_sym;

typedef struct spm_pair {
    float score;    /* score of the merged piece */
    int32_t left;   /* symbol indices */
    int32_t right;
    uint32_t size;  /* n(left) + n(right) when pushed, to detect stale pairs */
} spm_pair;

typedef struct spm_node {
    size_t off;     /* text span of the node */
    uint32_t n;
    int32_t left;   /* child nodes, -1 for a leaf (an initial character) */
    int32_t right;
} spm_node;

typedef struct spm_state {
    const vocab *v;
    const char *text;  /* escaped text */
    spm_sym *sym;
    spm_pair *heap;
    size_t n_heap;
    spm_node *nodes;   /* NULL unless v->has_unused */
    int32_t n_nodes;
    kite_token *out;
    size_t cap;
    size_t n_out;      /* tokens produced so far (may exceed cap) */
} spm_state;

/* ---- heap ---------------------------------------------------------------- */

static bool pair_before(const void *pa, const void *pb) {
    const spm_pair *a = pa, *b = pb;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* ---- merging ------------------------------------------------------------- */

static void try_add_pair(spm_state *st, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const vocab *v = st->v;
    size_t size = (size_t)st->sym[l].n + st->sym[r].n;
    if (size > v->max_piece_len) return;
    int32_t id = vocab_find(v, st->text + st->sym[l].off, size);
    if (id < 0 || !vocab_type_mergeable(v->types[id])) return;
    spm_pair p = {v->scores[id], l, r, (uint32_t)size};
    vocab_heap_push(st->heap, &st->n_heap, sizeof p, &p, pair_before);
}

static void merge_all(spm_state *st) {
    while (st->n_heap > 0) {
        spm_pair p;
        vocab_heap_pop(st->heap, &st->n_heap, sizeof p, &p, pair_before);
        spm_sym *l = &st->sym[p.left], *r = &st->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size || l->next != p.right) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) st->sym[r->next].prev = p.left;
        if (st->nodes) {
            spm_node nd = {l->off, l->n, l->node, r->node};
            st->nodes[st->n_nodes] = nd;
            l->node = st->n_nodes++;
        }
        try_add_pair(st, l->prev, p.left);
        try_add_pair(st, p.left, l->next);
    }
}

/* ---- output -------------------------------------------------------------- */

static void emit(spm_state *st, kite_token t) {
    if (st->n_out < st->cap) st->out[st->n_out] = t;
    st->n_out++;
}

/* A character that is not a piece: byte fallback, else unk. */
static int emit_bytes(spm_state *st, size_t off, uint32_t n) {
    const vocab *v = st->v;
    const uint8_t *s = (const uint8_t *)st->text + off;
    bool all = true;
    for (uint32_t i = 0; i < n; i++) all = all && v->byte_id[s[i]] >= 0;
    if (all) {
        for (uint32_t i = 0; i < n; i++) emit(st, v->byte_id[s[i]]);
        return KITE_OK;
    }
    if (v->unk >= 0) {
        emit(st, v->unk);
        return KITE_OK;
    }
    return err_set(KITE_E_NOT_FOUND,
                   "cannot tokenize byte 0x%02X: no piece, no byte token <0x%02X> and the vocabulary has no unknown token",
                   s[0], s[0]);
}

enum { SPAN_BYTES = -1, SPAN_SPLIT = -2 };

/* What to emit for a text span: a piece id, SPAN_BYTES (a character without
 * an emittable piece) or SPAN_SPLIT (a merged UNUSED piece). */
static int32_t classify_span(const spm_state *st, size_t off, uint32_t n, bool leaf) {
    int32_t id = vocab_find(st->v, st->text + off, n);
    if (id >= 0 && vocab_type_mergeable(st->v->types[id])) {
        if (st->v->types[id] != VOCAB_TT_UNUSED) return id;
        if (!leaf) return SPAN_SPLIT;
    }
    return SPAN_BYTES;
}

/* Emits symbol i.  UNUSED pieces are split along the merge tree, left child
 * first, with an explicit stack (the tree has at most 2*n_sym nodes). */
static int emit_symbol(spm_state *st, int32_t i, int32_t *stack) {
    size_t off = st->sym[i].off;
    uint32_t n = st->sym[i].n;
    int32_t node = st->sym[i].node, top = 0;
    for (;;) {
        bool leaf = !st->nodes || st->nodes[node].left < 0;
        int32_t what = classify_span(st, off, n, leaf);
        if (what >= 0) {
            emit(st, what);
        } else if (what == SPAN_BYTES) {
            int rc = emit_bytes(st, off, n);
            if (rc) return rc;
        } else {
            stack[top++] = st->nodes[node].right;
            stack[top++] = st->nodes[node].left;
        }
        if (top == 0) return KITE_OK;
        node = stack[--top];
        off = st->nodes[node].off;
        n = st->nodes[node].n;
    }
}

/* ---- entry --------------------------------------------------------------- */

int spm_tokenize(const vocab *v, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                 size_t *n_out) {
    int rc = KITE_OK;
    char *buf = NULL;
    int32_t *stack = NULL;
    spm_state st;
    memset(&st, 0, sizeof st);
    st.v = v;
    st.out = out;
    st.cap = cap;

    if (add_bos && v->bos >= 0) emit(&st, v->bos);
    if (len == 0) goto done;

    /* 1. dummy prefix and space escaping */
    size_t n_space = 0;
    for (size_t i = 0; i < len; i++) n_space += text[i] == ' ';
    const bool prefix = v->add_space_prefix;
    if (len > (size_t)INT32_MAX / 4) {
        rc = err_set(KITE_E_RANGE, "text of %zu bytes is too long (max %d)", len, INT32_MAX / 4);
        goto fail;
    }
    size_t elen = len + 2 * n_space + (prefix ? 3 : 0);
    buf = malloc(elen);
    if (!buf) goto nomem;
    size_t e = 0;
    if (prefix) {
        memcpy(buf, "\xE2\x96\x81", 3);
        e = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + e, "\xE2\x96\x81", 3);
            e += 3;
        } else {
            buf[e++] = text[i];
        }
    }
    st.text = buf;

    /* 2. characters (counted first: the scratch below is sized by them) */
    size_t cnt = 0;
    for (size_t off = 0, clen; off < elen; off += clen, cnt++)
        if (utf8_check((const uint8_t *)buf + off, elen - off, &clen) != UTF8_OK) clen = 1;
    st.sym = malloc(cnt * sizeof *st.sym);
    st.heap = malloc(3 * cnt * sizeof *st.heap); /* n-1 initial pairs + 2 per merge */
    if (!st.sym || !st.heap) goto nomem;
    if (v->has_unused) {
        st.nodes = malloc(2 * cnt * sizeof *st.nodes); /* leaves + one per merge */
        stack = malloc(2 * cnt * sizeof *stack);
        if (!st.nodes || !stack) goto nomem;
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < elen;) {
        size_t clen;
        if (utf8_check((const uint8_t *)buf + off, elen - off, &clen) != UTF8_OK) clen = 1;
        spm_sym s = {off, (uint32_t)clen, n_sym - 1, off + clen < elen ? n_sym + 1 : -1, n_sym};
        st.sym[n_sym] = s;
        if (st.nodes) {
            spm_node nd = {off, (uint32_t)clen, -1, -1};
            st.nodes[n_sym] = nd;
        }
        n_sym++;
        off += clen;
    }
    st.n_nodes = n_sym;

    /* 3. merges */
    for (int32_t i = 1; i < n_sym; i++) try_add_pair(&st, i - 1, i);
    merge_all(&st);

    /* 4. ids */
    for (int32_t i = 0; i != -1; i = st.sym[i].next)
        if ((rc = emit_symbol(&st, i, stack))) goto fail;

done:
    *n_out = st.n_out;
    if (st.n_out > cap)
        rc = err_set(KITE_E_RANGE, "%zu tokens do not fit in a buffer of %zu", st.n_out, cap);
    goto out;
nomem:
    rc = err_set(KITE_E_NOMEM, "out of memory for a text of %zu bytes", len);
fail:
out:
    free(stack);
    free(st.nodes);
    free(st.heap);
    free(st.sym);
    free(buf);
    return rc;
}
