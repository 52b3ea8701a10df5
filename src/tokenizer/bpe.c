/*
 * bpe.c - byte-level BPE encoder ("gpt2" tokenizer model: GPT-2, Llama 3,
 * Qwen2/3, ...).
 *
 * DESIGN
 *   bpe_init() (at load) prepares:
 *     - bpe_byte_tok[256]: the token of each byte's GPT-2 character
 *       (unicode_byte_to_cp), the starting symbols of every chunk;
 *     - the merge table: tokenizer.ggml.merges[i] = "left right" becomes
 *       (id(left), id(right)) -> (rank i, id(left+right)) in an open-addressing
 *       hash (load <= 1/2).  Merges whose parts are not tokens are dropped; a
 *       repeated pair keeps its first (lowest) rank;
 *     - the user-defined tokens (type 4), longest first;
 *     - the pre-tokenizer of tokenizer.ggml.pre (pretok.c).
 *   bpe_tokenize():
 *     1. user-defined token texts are cut out of the text first (earliest
 *        match, longest on ties) and emitted as their ids.  Control tokens are
 *        never matched: kite_tokenize does not parse specials from text;
 *     2. each remaining segment is NFC-normalised when the vocabulary asks for
 *        it (qwen2), then split into chunks by the pre-tokenizer regex;
 *     3. each chunk: if ignore_merges (llama3) and the whole chunk is a token,
 *        that token; otherwise one symbol per byte, and a min-heap of adjacent
 *        pairs that have a merge, ordered by rank, ties to the leftmost.  Pop,
 *        skip if stale (either side changed: checked by the ids pushed), merge,
 *        push the two new neighbour pairs.  A byte without a token gives the
 *        unknown token (KITE_E_NOT_FOUND without one).
 *   BOS is added when the caller asks and tokenizer.ggml.add_bos_token is set.
 *
 * COST
 *   O(n log n) in the chunk length (n-1 merges at most, 3n heap pushes, each
 *   merge lookup one hash probe sequence).  Load: 3 piece lookups per merge.
 *
 * THREAD SAFETY
 *   Reentrant: per-call scratch only.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

#define BPE_EMPTY UINT64_MAX
#define BPE_DEAD (-2) /* symbol merged into its left neighbour */

/* ---- merge table ----------------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static const bpe_merge *merge_find(const vocab *v, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    for (uint64_t i = pair_hash(k) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const bpe_merge *m = &v->merges[i];
        if (m->key == k) return m;
        if (m->key == BPE_EMPTY) return NULL;
    }
}

size_t bpe_decode_piece(gguf_str p, char *dst) {
    size_t n = 0;
    const uint8_t *s = (const uint8_t *)p.ptr;
    for (uint64_t i = 0; i < p.len;) {
        uint32_t cp;
        size_t l = unicode_get_utf8(s + i, (size_t)(p.len - i), &cp);
        int b = l ? unicode_cp_to_byte(cp) : -1;
        if (b >= 0) {
            if (dst) dst[n] = (char)b;
            n++;
            i += l;
        } else { /* not a GPT-2 character (or ill-formed): copy the byte(s) */
            if (l == 0) l = 1;
            if (dst) memcpy(dst + n, s + i, l);
            n += l;
            i += l;
        }
    }
    return n;
}

static int cmp_len_desc(const void *a, const void *b, const vocab *v) {
    uint64_t la = v->pieces[*(const int32_t *)a].len, lb = v->pieces[*(const int32_t *)b].len;
    if (la != lb) return la > lb ? -1 : 1;
    return *(const int32_t *)a < *(const int32_t *)b ? -1 : 1;
}

/* insertion sort: only a handful of user-defined tokens */
static void sort_user(vocab *v) {
    for (int32_t i = 1; i < v->n_user; i++) {
        int32_t x = v->user_ids[i], j = i;
        while (j > 0 && cmp_len_desc(&x, &v->user_ids[j - 1], v) < 0) {
            v->user_ids[j] = v->user_ids[j - 1];
            j--;
        }
        v->user_ids[j] = x;
    }
}

int bpe_init(vocab *v, const vocab_spec *s) {
    int rc;
    char *buf = NULL;
    if (s->n_merges && !s->merges) return err_set(KITE_E_ARG, "%s: BPE spec has merges but no array", s->name);
    v->pre = s->pre;
    v->nfc = s->pre == PRETOK_QWEN2;
    v->ignore_merges = s->pre == PRETOK_LLAMA3 || s->pre == PRETOK_TEKKEN;
    if ((rc = pretok_new(s->pre, &v->pretok))) return rc;

    for (int b = 0; b < 256; b++) {
        char c[4];
        size_t l = unicode_put_utf8(unicode_byte_to_cp((uint8_t)b), c);
        int32_t id = vocab_find(v, c, l);
        v->bpe_byte_tok[b] = id >= 0 && vocab_type_mergeable(v->types[id]) ? id : -1;
    }

    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->types[i] == VOCAB_TT_USER_DEFINED && v->pieces[i].len > 0) v->n_user++;
    if (v->n_user) {
        v->user_ids = malloc((size_t)v->n_user * sizeof *v->user_ids);
        if (!v->user_ids) goto nomem;
        int32_t k = 0;
        for (int32_t i = 0; i < v->n_tokens; i++)
            if (v->types[i] == VOCAB_TT_USER_DEFINED && v->pieces[i].len > 0) v->user_ids[k++] = i;
        sort_user(v);
    }

    if (s->n_merges > INT32_MAX / 4)
        return err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.merges has %llu entries (too many)", s->name,
                       (unsigned long long)s->n_merges);
    uint64_t cap = 16;
    while (cap < 2 * s->n_merges) cap <<= 1;
    v->merges = malloc(cap * sizeof *v->merges);
    buf = malloc(v->max_piece_len + 1);
    if (!v->merges || !buf) goto nomem;
    for (uint64_t i = 0; i < cap; i++) v->merges[i].key = BPE_EMPTY;
    v->merge_mask = cap - 1;
    for (uint64_t r = 0; r < s->n_merges; r++) {
        gguf_str m = s->merges[r];
        const char *sp = m.len > 2 ? memchr(m.ptr + 1, ' ', (size_t)m.len - 1) : NULL;
        if (!sp || sp + 1 >= m.ptr + m.len) {
            rc = err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.merges[%llu] = '%.*s' is not \"left right\"", s->name,
                         (unsigned long long)r, (int)(m.len > 40 ? 40 : m.len), m.len ? m.ptr : "");
            goto fail;
        }
        size_t nl = (size_t)(sp - m.ptr), nr = (size_t)m.len - nl - 1;
        if (nl + nr > v->max_piece_len) continue;
        int32_t a = vocab_find(v, m.ptr, nl), b = vocab_find(v, sp + 1, nr);
        memcpy(buf, m.ptr, nl);
        memcpy(buf + nl, sp + 1, nr);
        int32_t id = vocab_find(v, buf, nl + nr);
        if (a < 0 || b < 0 || id < 0) continue;
        uint64_t k = pair_key(a, b);
        uint64_t j = pair_hash(k) & v->merge_mask;
        while (v->merges[j].key != BPE_EMPTY && v->merges[j].key != k) j = (j + 1) & v->merge_mask;
        if (v->merges[j].key == k) continue; /* keep the lower rank */
        v->merges[j].key = k;
        v->merges[j].rank = (int32_t)r;
        v->merges[j].id = id;
        v->n_merges++;
    }
    free(buf);
    return KITE_OK;
nomem:
    rc = err_set(KITE_E_NOMEM, "%s: out of memory building the BPE tables", s->name);
fail:
    free(buf);
    return rc; /* the caller's vocab_free() releases what was built */
}

void bpe_free(vocab *v) {
    pretok_free(v->pretok);
    free(v->merges);
    free(v->user_ids);
    v->pretok = NULL;
    v->merges = NULL;
    v->user_ids = NULL;
}

/* ---- encoder state ------------------------------------------------------------ */

typedef struct bpe_sym {
    int32_t id;   /* token of the symbol; -1 no token (unknown byte); BPE_DEAD merged away */
    int32_t prev; /* neighbours, -1 at the ends */
    int32_t next;
} bpe_sym;

typedef struct bpe_pair {
    int32_t rank;  /* of the merge */
    int32_t left;  /* symbol indices */
    int32_t right;
    int32_t lid;   /* ids of both sides when pushed (stale check) */
    int32_t rid;
    int32_t id;    /* merged token */
} bpe_pair;

typedef struct bpe_state {
    const vocab *v;
    const char *text;    /* the segment being split (possibly NFC'd copy) */
    bpe_sym *sym;        /* [cap_sym] */
    bpe_pair *heap;      /* [3 * cap_sym] */
    char *mapped;        /* [2 * cap_sym] chunk in GPT-2 characters (ignore_merges) */
    size_t cap_sym;
    size_t n_heap;
    kite_token *out;
    size_t cap;
    size_t n_out;        /* tokens produced so far (may exceed cap) */
} bpe_state;

static void emit(bpe_state *st, kite_token t) {
    if (st->n_out < st->cap) st->out[st->n_out] = t;
    st->n_out++;
}

static bool pair_before(const void *pa, const void *pb) {
    const bpe_pair *a = pa, *b = pb;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void try_pair(bpe_state *st, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int32_t a = st->sym[l].id, b = st->sym[r].id;
    if (a < 0 || b < 0) return;
    const bpe_merge *m = merge_find(st->v, a, b);
    if (!m) return;
    bpe_pair p = {m->rank, l, r, a, b, m->id};
    vocab_heap_push(st->heap, &st->n_heap, sizeof p, &p, pair_before);
}

static int reserve(bpe_state *st, size_t n) {
    if (n <= st->cap_sym) return KITE_OK;
    size_t c = st->cap_sym ? st->cap_sym : 64;
    while (c < n) c *= 2;
    bpe_sym *s = realloc(st->sym, c * sizeof *s);
    if (s) st->sym = s;
    bpe_pair *h = realloc(st->heap, 3 * c * sizeof *h);
    if (h) st->heap = h;
    char *m = realloc(st->mapped, 2 * c);
    if (m) st->mapped = m;
    if (!s || !h || !m) return err_set(KITE_E_NOMEM, "out of memory (chunk of %zu bytes)", n);
    st->cap_sym = c;
    return KITE_OK;
}

/* Encodes one pre-tokenizer chunk text[off, off+n). */
static int encode_chunk(void *ctx, size_t off, size_t n) {
    bpe_state *st = ctx;
    const vocab *v = st->v;
    const uint8_t *s = (const uint8_t *)st->text + off;
    int rc = reserve(st, n);
    if (rc) return rc;
    if (v->ignore_merges && n > 1) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += unicode_put_utf8(unicode_byte_to_cp(s[i]), st->mapped + m);
        int32_t id = vocab_find(v, st->mapped, m);
        if (id >= 0 && vocab_type_mergeable(v->types[id]) && v->types[id] != VOCAB_TT_USER_DEFINED) {
            emit(st, id);
            return KITE_OK;
        }
    }
    for (size_t i = 0; i < n; i++) {
        st->sym[i].id = v->bpe_byte_tok[s[i]];
        st->sym[i].prev = (int32_t)i - 1;
        st->sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    st->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(st, (int32_t)i, (int32_t)i + 1);
    while (st->n_heap > 0) {
        bpe_pair p;
        vocab_heap_pop(st->heap, &st->n_heap, sizeof p, &p, pair_before);
        bpe_sym *l = &st->sym[p.left], *r = &st->sym[p.right];
        if (l->id != p.lid || r->id != p.rid || l->next != p.right) continue; /* stale */
        l->id = p.id;
        r->id = BPE_DEAD;
        l->next = r->next;
        if (r->next >= 0) st->sym[r->next].prev = p.left;
        try_pair(st, l->prev, p.left);
        try_pair(st, p.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = st->sym[i].next) {
        int32_t id = st->sym[i].id;
        if (id < 0) {
            if (v->unk < 0)
                return err_set(KITE_E_NOT_FOUND, "cannot tokenize byte 0x%02X: no token and no unknown token",
                               s[i]);
            id = v->unk;
        }
        emit(st, id);
    }
    return KITE_OK;
}

/* NFC (when asked), pre-tokenize and encode text[0..n) (no special tokens in it). */
static int encode_segment(bpe_state *st, const char *text, size_t n) {
    if (n == 0) return KITE_OK;
    char *norm = NULL;
    size_t nn = n;
    int rc;
    if (st->v->nfc) {
        if ((rc = unicode_nfc(text, n, &norm, &nn))) return rc;
        text = norm;
    }
    st->text = text;
    rc = pretok_split(st->v->pretok, text, nn, encode_chunk, st);
    free(norm);
    return rc;
}

/* First occurrence of needle[0..m) (m >= 1) in hay[0..n), or NULL. */
static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    const char *end = hay + n;
    for (const char *p = hay; (size_t)(end - p) >= m; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) - m + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
    }
    return NULL;
}

/* Earliest user-defined token in t[from..n) (longest on ties): its id and
 * position, or -1. */
static int32_t find_user(const vocab *v, const char *t, size_t n, size_t from, size_t *pos) {
    int32_t best = -1;
    size_t best_pos = n;
    for (int32_t k = 0; k < v->n_user; k++) {
        gguf_str p = v->pieces[v->user_ids[k]];
        if (p.len > n - from) continue;
        const char *hit = find_bytes(t + from, n - from, p.ptr, (size_t)p.len);
        if (hit && (size_t)(hit - t) < best_pos) { /* ties: the longer one came first */
            best_pos = (size_t)(hit - t);
            best = v->user_ids[k];
        }
    }
    *pos = best_pos;
    return best;
}

int bpe_tokenize(const vocab *v, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                 size_t *n_out) {
    bpe_state st;
    memset(&st, 0, sizeof st);
    st.v = v;
    st.out = out;
    st.cap = cap;
    int rc = KITE_OK;
    if (len > (size_t)INT32_MAX / 4)
        return err_set(KITE_E_RANGE, "text of %zu bytes is too long (max %d)", len, INT32_MAX / 4);
    if (add_bos && v->add_bos && v->bos >= 0) emit(&st, v->bos);
    size_t at = 0;
    while (at < len) {
        size_t pos = len;
        int32_t user = v->n_user ? find_user(v, text, len, at, &pos) : -1;
        if ((rc = encode_segment(&st, text + at, pos - at))) goto done;
        if (user < 0) break;
        emit(&st, user);
        at = pos + (size_t)v->pieces[user].len;
    }
    *n_out = st.n_out;
    if (st.n_out > cap)
        rc = err_set(KITE_E_RANGE, "%zu tokens do not fit in a buffer of %zu", st.n_out, cap);
done:
    free(st.sym);
    free(st.heap);
    free(st.mapped);
    return rc;
}
