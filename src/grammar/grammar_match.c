/*
 * grammar_match.c - the matcher (parser stacks over the rule table), the
 * vocabulary trie and the token mask.
 *
 * DESIGN
 *   Stacks.  A stack is a chain of nodes {pos, parent}: pos is the element
 *   to match next, parent the node to continue with when pos's alternative
 *   ends (NIL: the root ends).  The matcher's state is a list of heads, each
 *   the top node of one stack whose pos is a character class, or NIL for "the
 *   root may end here".  Nodes are append-only in an arena and shared by the
 *   stacks that have the same tail, so a step creates only the nodes it
 *   changes and undoing a step is resetting two counters (n_nodes, n_heads).
 *
 *   Step.  advance() takes the heads whose class holds the code point, moves
 *   them one element on and expands each until its top is a class again:
 *   END pops to the parent, a reference pushes a continuation node (except in
 *   last position, where the continuation is the parent: right recursion
 *   and repetition loops keep a constant depth) and fans out to the
 *   alternatives.  The expansion is iterative (a work list) and bounded by
 *   max_expand steps; it terminates because the parser rejects left recursion.
 *   A hash table stamped with a per-step generation deduplicates the nodes
 *   {pos, parent} created by one step and the heads it yields, so equal stacks
 *   reached twice are kept once (the table is an optimisation: when full it
 *   stops deduplicating, it never changes which strings are accepted).
 *
 *   Bytes.  Code points arrive as UTF-8 bytes; an incomplete character is a
 *   {val, need, min} triple beside the heads, and a byte that starts or
 *   continues one is kept only if some head's class meets the range of code
 *   points still possible.  The heads change only when the character completes.
 *
 *   Accept.  accept_* steps on top of the live state and, on success, makes
 *   the new heads the state and compacts the arena (mark the nodes reachable
 *   from the heads, slide them down in place: a parent always has a lower id
 *   than its children), so the arena holds only live stacks between tokens.
 *
 *   Mask.  The vocabulary is a byte trie in preorder (node i: its byte, depth,
 *   the end of its subtree, the tokens ending there).  fill_mask visits it in
 *   order, keeping one level (heads range, partial character, arena tops) per
 *   depth: visiting node i steps from the level of depth[i] - 1, and a
 *   rejected node jumps to end[i], skipping every token it prefixes.
 *
 * INVARIANTS
 *   nodes[i].parent < i or NIL; heads [h0, h1) are live; n_nodes and n_heads
 *   are the arena tops, above which a step writes its scratch.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

#define NIL UINT32_MAX
#define REJECT 1 /* step result: the byte is not allowed (not an error) */

typedef struct {
    uint32_t pos, parent;
} gnode;

typedef struct {
    uint32_t pos, parent, self; /* self: an existing node for (pos, parent), or NIL */
} gwork;

/* One step's state: heads [h0, h1), a pending partial character, the arena
 * tops to reset to before stepping from it. */
typedef struct {
    uint32_t h0, h1, heads_top, nodes_top;
    uint32_t val, need, min;
} glevel;

struct grammar_matcher {
    const grammar *g;
    grammar_matcher_params prm;
    gnode *nodes;        /* (cap_nodes) arena */
    uint32_t *remap;     /* (cap_nodes) compaction scratch */
    unsigned char *mark; /* (cap_nodes) compaction scratch */
    uint32_t n_nodes, cap_nodes;
    uint32_t *heads; /* (cap_heads) node ids or NIL */
    uint32_t n_heads, cap_heads;
    glevel st;       /* the live state (nodes_top/heads_top unused) */
    gwork *work;     /* (cap_work) */
    uint32_t cap_work;
    uint64_t *hkey; /* (hmask + 1) dedupe table */
    uint32_t *hval, *hgen;
    uint32_t hmask, gen, h_used;
    glevel *lv; /* (cap_lv) mask walk levels */
    uint8_t *dp; /* (cap_lv) cache precompute: a level up to this depth let the rule end */
    uint32_t cap_lv;
};

grammar_matcher_params grammar_matcher_default_params(void) {
    grammar_matcher_params p = {.max_stacks = 1024, .max_nodes = 1u << 20, .max_expand = 1u << 16};
    return p;
}

/* ---- growth ----------------------------------------------------------------- */

static int grow_nodes(grammar_matcher *m) {
    if (m->cap_nodes >= m->prm.max_nodes)
        return err_set(KITE_E_RANGE, "grammar: parser stacks need more than %u nodes (max_nodes)", m->prm.max_nodes);
    uint32_t cap = m->cap_nodes * 2 > m->prm.max_nodes ? m->prm.max_nodes : m->cap_nodes * 2;
    gnode *n = realloc(m->nodes, (size_t)cap * sizeof *n);
    if (n) m->nodes = n;
    uint32_t *r = realloc(m->remap, (size_t)cap * sizeof *r);
    if (r) m->remap = r;
    unsigned char *k = realloc(m->mark, cap);
    if (k) m->mark = k;
    if (!n || !r || !k) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    m->cap_nodes = cap;
    return KITE_OK;
}

static int grow_heads(grammar_matcher *m) {
    uint32_t max = m->prm.max_nodes; /* every head but NIL is a distinct node of its level */
    if (m->cap_heads >= max) return err_set(KITE_E_RANGE, "grammar: more than %u stack heads in use", max);
    uint32_t cap = m->cap_heads * 2 > max ? max : m->cap_heads * 2;
    uint32_t *h = realloc(m->heads, (size_t)cap * sizeof *h);
    if (!h) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    m->heads = h;
    m->cap_heads = cap;
    return KITE_OK;
}

static int grow_work(grammar_matcher *m) {
    uint32_t cap = m->cap_work * 2;
    gwork *w = realloc(m->work, (size_t)cap * sizeof *w);
    if (!w) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    m->work = w;
    m->cap_work = cap;
    return KITE_OK;
}

/* ---- dedupe table -------------------------------------------------------------- */

static void gen_next(grammar_matcher *m) {
    if (++m->gen == 0) { /* wrapped: forget every stamp */
        memset(m->hgen, 0, ((size_t)m->hmask + 1) * sizeof *m->hgen);
        m->gen = 1;
    }
    m->h_used = 0;
}

static inline uint32_t hslot(uint64_t key) { return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32); }

/* Finds key; returns its value or NIL.  *slot: where to insert (NIL: table full). */
static inline uint32_t h_find(const grammar_matcher *m, uint64_t key, uint32_t *slot) {
    uint32_t i = hslot(key) & m->hmask;
    *slot = NIL;
    for (uint32_t probes = 0; probes <= m->hmask; probes++, i = (i + 1) & m->hmask) {
        if (m->hgen[i] != m->gen) {
            *slot = i;
            return NIL;
        }
        if (m->hkey[i] == key) return m->hval[i];
    }
    *slot = NIL;
    return NIL;
}

static inline void h_put(grammar_matcher *m, uint32_t slot, uint64_t key, uint32_t val) {
    if (slot == NIL || m->h_used * 2 > m->hmask) return; /* over half full: stop deduplicating */
    m->hgen[slot] = m->gen;
    m->hkey[slot] = key;
    m->hval[slot] = val;
    m->h_used++;
}

/* The node {pos, parent}, made once per step. */
static int get_node(grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t *out) {
    uint64_t key = (uint64_t)pos << 32 | parent;
    uint32_t slot, id = h_find(m, key, &slot);
    if (id != NIL) {
        *out = id;
        return KITE_OK;
    }
    if (m->n_nodes == m->cap_nodes) {
        int rc = grow_nodes(m);
        if (rc) return rc;
    }
    id = m->n_nodes++;
    m->nodes[id].pos = pos;
    m->nodes[id].parent = parent;
    h_put(m, slot, key, id);
    *out = id;
    return KITE_OK;
}

static int add_head(grammar_matcher *m, uint32_t id, uint32_t start) {
    uint64_t key = (1ull << 63) | id;
    uint32_t slot;
    if (h_find(m, key, &slot) != NIL) return KITE_OK;
    if (m->n_heads - start >= m->prm.max_stacks)
        return err_set(KITE_E_RANGE, "grammar: more than %u parser stacks at once (max_stacks)", m->prm.max_stacks);
    if (m->n_heads == m->cap_heads) {
        int rc = grow_heads(m);
        if (rc) return rc;
    }
    m->heads[m->n_heads++] = id;
    h_put(m, slot, key, 1);
    return KITE_OK;
}

/* ---- expansion ------------------------------------------------------------------ */

/* Expands the n_work items of m->work; heads go to m->heads from start. */
static int run_work(grammar_matcher *m, uint32_t n_work, uint32_t start) {
    const grammar *g = m->g;
    uint32_t steps = n_work;
    int rc = KITE_OK;
    while (n_work && !rc) {
        gwork w = m->work[--n_work];
        uint32_t e = g->elems[w.pos];
        switch (GE_KIND(e)) {
        case GE_K_END:
            if (w.parent == NIL) {
                rc = add_head(m, NIL, start);
            } else {
                m->work[n_work++] = (gwork){m->nodes[w.parent].pos, m->nodes[w.parent].parent, w.parent};
                steps++;
            }
            break;
        case GE_K_CLASS: {
            uint32_t id = w.self;
            if (id == NIL) rc = get_node(m, w.pos, w.parent, &id);
            if (!rc) rc = add_head(m, id, start);
            break;
        }
        default: {
            uint32_t r = GE_VAL(e), cont = w.parent;
            if (g->elems[w.pos + 1] != GE_END) rc = get_node(m, w.pos + 1, w.parent, &cont);
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && !rc; a++) {
                if (++steps > m->prm.max_expand) {
                    rc = err_set(KITE_E_RANGE, "grammar: expanding one character took more than %u steps (max_expand)",
                                 m->prm.max_expand);
                    break;
                }
                if (n_work == m->cap_work && (rc = grow_work(m))) break;
                m->work[n_work++] = (gwork){g->alts[a], cont, NIL};
            }
            break;
        }
        }
        if (!rc && steps > m->prm.max_expand)
            rc = err_set(KITE_E_RANGE, "grammar: expanding one character took more than %u steps (max_expand)",
                         m->prm.max_expand);
    }
    return rc;
}

/* New heads (at m->n_heads on) for the heads of `in` that accept cp. */
static int advance(grammar_matcher *m, const glevel *in, uint32_t cp, glevel *out) {
    const grammar *g = m->g;
    gen_next(m);
    uint32_t start = m->n_heads, n_work = 0;
    for (uint32_t h = in->h0; h < in->h1; h++) {
        uint32_t id = m->heads[h];
        if (id == NIL) continue;
        uint32_t pos = m->nodes[id].pos;
        if (!grammar_class_has(g, GE_VAL(g->elems[pos]), cp)) continue;
        if (n_work == m->cap_work) {
            int rc = grow_work(m);
            if (rc) return rc;
        }
        m->work[n_work++] = (gwork){pos + 1, m->nodes[id].parent, NIL};
    }
    if (!n_work) return REJECT;
    int rc = run_work(m, n_work, start);
    if (rc) return rc;
    *out = (glevel){start, m->n_heads, m->n_heads, m->n_nodes, 0, 0, 0};
    return out->h1 > out->h0 ? KITE_OK : REJECT;
}

/* Steps `in` over one byte into *out: KITE_OK, REJECT, or an error. */
static int step_byte(grammar_matcher *m, const glevel *in, uint8_t b, glevel *out) {
    m->n_heads = in->heads_top;
    m->n_nodes = in->nodes_top;
    uint32_t val, need, min;
    if (in->need == 0) {
        if (b < 0x80) return advance(m, in, b, out);
        if (b >= 0xC2 && b <= 0xDF) val = b & 0x1Fu, need = 1, min = 0x80;
        else if (b >= 0xE0 && b <= 0xEF) val = b & 0x0Fu, need = 2, min = 0x800;
        else if (b >= 0xF0 && b <= 0xF4) val = b & 0x07u, need = 3, min = 0x10000;
        else return REJECT;
    } else {
        if ((b & 0xC0) != 0x80) return REJECT;
        val = in->val << 6 | (b & 0x3Fu);
        need = in->need - 1;
        min = in->min;
        if (need == 0) {
            if (val < min || val > GRAMMAR_MAX_CP || (val >= 0xD800 && val <= 0xDFFF)) return REJECT;
            return advance(m, in, val, out);
        }
    }
    uint32_t lo = val << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < min) lo = min;
    if (hi > GRAMMAR_MAX_CP) hi = GRAMMAR_MAX_CP;
    if (lo > hi) return REJECT;
    const grammar *g = m->g;
    uint32_t h = in->h0;
    for (; h < in->h1; h++) {
        uint32_t id = m->heads[h];
        if (id != NIL && grammar_class_meets(g, GE_VAL(g->elems[m->nodes[id].pos]), lo, hi)) break;
    }
    if (h == in->h1) return REJECT;
    *out = *in;
    out->val = val;
    out->need = need;
    out->min = min;
    return KITE_OK;
}

/* ---- matcher ------------------------------------------------------------------ */

static glevel live_level(const grammar_matcher *m) {
    glevel l = m->st;
    l.heads_top = m->n_heads;
    l.nodes_top = m->n_nodes;
    return l;
}

/* Makes `l` (stepped from the live state) the state and compacts the arena. */
static void commit(grammar_matcher *m, const glevel *l) {
    uint32_t n = m->n_nodes = l->nodes_top;
    memset(m->mark, 0, n);
    for (uint32_t h = l->h0; h < l->h1; h++)
        for (uint32_t id = m->heads[h]; id != NIL && !m->mark[id]; id = m->nodes[id].parent) m->mark[id] = 1;
    uint32_t j = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!m->mark[i]) continue;
        uint32_t par = m->nodes[i].parent;
        m->nodes[j].pos = m->nodes[i].pos;
        m->nodes[j].parent = par == NIL ? NIL : m->remap[par];
        m->remap[i] = j++;
    }
    m->n_nodes = j;
    uint32_t k = 0;
    for (uint32_t h = l->h0; h < l->h1; h++) {
        uint32_t id = m->heads[h];
        m->heads[k++] = id == NIL ? NIL : m->remap[id];
    }
    m->n_heads = k;
    m->st = *l;
    m->st.h0 = 0;
    m->st.h1 = k;
}

static int matcher_alloc(grammar_matcher *m, uint32_t cap_nodes, uint32_t cap_heads) {
    m->cap_nodes = cap_nodes;
    m->cap_heads = cap_heads;
    m->cap_work = 64;
    uint32_t hsize = 256;
    while (hsize < 4 * m->prm.max_stacks && hsize < (1u << 20)) hsize *= 2;
    m->hmask = hsize - 1;
    m->nodes = malloc((size_t)cap_nodes * sizeof *m->nodes);
    m->remap = malloc((size_t)cap_nodes * sizeof *m->remap);
    m->mark = malloc(cap_nodes);
    m->heads = malloc((size_t)cap_heads * sizeof *m->heads);
    m->work = malloc((size_t)m->cap_work * sizeof *m->work);
    m->hkey = malloc((size_t)hsize * sizeof *m->hkey);
    m->hval = malloc((size_t)hsize * sizeof *m->hval);
    m->hgen = calloc(hsize, sizeof *m->hgen);
    m->gen = 0;
    if (!m->nodes || !m->remap || !m->mark || !m->heads || !m->work || !m->hkey || !m->hval || !m->hgen)
        return err_set(KITE_E_NOMEM, "grammar: out of memory");
    return KITE_OK;
}

int grammar_matcher_new(const grammar *g, const grammar_matcher_params *params, grammar_matcher **out) {
    if (!g || !out) return err_set(KITE_E_ARG, "grammar_matcher_new: NULL argument");
    grammar_matcher_params prm = params ? *params : grammar_matcher_default_params();
    if (!prm.max_stacks || prm.max_nodes < 16 || !prm.max_expand)
        return err_set(KITE_E_ARG, "grammar_matcher_new: max_stacks, max_expand must be > 0 and max_nodes >= 16");
    grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    m->g = g;
    m->prm = prm;
    int rc = matcher_alloc(m, 16, 16);
    if (!rc) {
        gen_next(m);
        uint32_t n_work = 0;
        for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1] && !rc; a++) {
            if (n_work == m->cap_work) rc = grow_work(m);
            if (!rc) m->work[n_work++] = (gwork){g->alts[a], NIL, NIL};
        }
        if (!rc) rc = run_work(m, n_work, 0);
    }
    if (rc) {
        grammar_matcher_free(m);
        return rc;
    }
    m->st = (glevel){0, m->n_heads, 0, 0, 0, 0, 0};
    *out = m;
    return KITE_OK;
}

int grammar_matcher_clone(const grammar_matcher *m, grammar_matcher **out) {
    if (!m || !out) return err_set(KITE_E_ARG, "grammar_matcher_clone: NULL argument");
    grammar_matcher *c = calloc(1, sizeof *c);
    if (!c) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    c->g = m->g;
    c->prm = m->prm;
    int rc = matcher_alloc(c, m->cap_nodes, m->cap_heads);
    if (rc) {
        grammar_matcher_free(c);
        return rc;
    }
    memcpy(c->nodes, m->nodes, (size_t)m->n_nodes * sizeof *c->nodes);
    memcpy(c->heads, m->heads, (size_t)m->n_heads * sizeof *c->heads);
    c->n_nodes = m->n_nodes;
    c->n_heads = m->n_heads;
    c->st = m->st;
    *out = c;
    return KITE_OK;
}

int grammar_matcher_copy(grammar_matcher *dst, const grammar_matcher *src) {
    if (!dst || !src) return err_set(KITE_E_ARG, "grammar_matcher_copy: NULL argument");
    if (dst->g != src->g) return err_set(KITE_E_ARG, "grammar_matcher_copy: the matchers have different grammars");
    if (dst == src) return KITE_OK;
    /* grow first (dst unchanged on failure); the caps are src's, which it stayed within */
    while (dst->cap_nodes < src->n_nodes) {
        int rc = grow_nodes(dst);
        if (rc) return rc;
    }
    while (dst->cap_heads < src->n_heads) {
        int rc = grow_heads(dst);
        if (rc) return rc;
    }
    memcpy(dst->nodes, src->nodes, (size_t)src->n_nodes * sizeof *dst->nodes);
    memcpy(dst->heads, src->heads, (size_t)src->n_heads * sizeof *dst->heads);
    dst->n_nodes = src->n_nodes;
    dst->n_heads = src->n_heads;
    dst->st = src->st;
    return KITE_OK;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    free(m->nodes);
    free(m->remap);
    free(m->mark);
    free(m->heads);
    free(m->work);
    free(m->hkey);
    free(m->hval);
    free(m->hgen);
    free(m->lv);
    free(m->dp);
    free(m);
}

int grammar_matcher_accept_codepoint(grammar_matcher *m, uint32_t cp) {
    if (!m) return err_set(KITE_E_ARG, "grammar_matcher_accept_codepoint: NULL matcher");
    if (cp > GRAMMAR_MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF))
        return err_set(KITE_E_ARG, "grammar: U+%04X is not a Unicode scalar value", (unsigned)cp);
    if (m->st.need) return err_set(KITE_E_STATE, "grammar: a partial UTF-8 character is pending");
    glevel in = live_level(m), outl;
    int rc = advance(m, &in, cp, &outl);
    if (rc) {
        m->n_heads = in.heads_top;
        m->n_nodes = in.nodes_top;
        return rc == REJECT ? err_set(KITE_E_STATE, "grammar: U+%04X is not allowed here", (unsigned)cp) : rc;
    }
    commit(m, &outl);
    return KITE_OK;
}

int grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes, size_t n) {
    if (!m || (!bytes && n)) return err_set(KITE_E_ARG, "grammar_matcher_accept_bytes: NULL argument");
    const uint8_t *s = bytes;
    glevel in = live_level(m), cur = in, nxt;
    for (size_t i = 0; i < n; i++) {
        int rc = step_byte(m, &cur, s[i], &nxt);
        if (rc) {
            m->n_heads = in.heads_top;
            m->n_nodes = in.nodes_top;
            return rc == REJECT ? err_set(KITE_E_STATE, "grammar: byte %zu (0x%02X) is not allowed here", i, s[i]) : rc;
        }
        cur = nxt;
    }
    if (n) commit(m, &cur);
    return KITE_OK;
}

bool grammar_matcher_is_accepting(const grammar_matcher *m) {
    if (!m || m->st.need) return false;
    for (uint32_t h = m->st.h0; h < m->st.h1; h++)
        if (m->heads[h] == NIL) return true;
    return false;
}

bool grammar_matcher_is_finished(const grammar_matcher *m) {
    if (!m || m->st.need) return false;
    for (uint32_t h = m->st.h0; h < m->st.h1; h++)
        if (m->heads[h] != NIL) return false;
    return true;
}

uint32_t grammar_matcher_n_stacks(const grammar_matcher *m) { return m ? m->st.h1 - m->st.h0 : 0; }

/* ---- vocabulary trie ------------------------------------------------------------ */

struct grammar_vocab {
    uint32_t n_tokens, n_nodes, max_depth;
    uint8_t *byte;      /* (n_nodes) */
    uint32_t *depth;    /* (n_nodes) 1 for children of the root */
    uint32_t *end;      /* (n_nodes) first node after the subtree */
    uint32_t *tok_first; /* (n_nodes) into tok_ids */
    uint32_t *tok_n;    /* (n_nodes) tokens ending here */
    uint32_t *tok_ids;  /* (n_e) token ids in trie order */
    uint32_t n_e;       /* tokens with bytes */
    uint32_t *sub_first; /* (n_nodes + 1) trie-order index of the first token at or after node i */
    uint8_t *tb;        /* token bytes in trie order */
    uint32_t *tb_off;   /* (n_e + 1) into tb */
};

typedef struct {
    const uint8_t *s;
    uint32_t len, id;
} ventry;

static int cmp_ventry(const void *a, const void *b) {
    const ventry *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->s, y->s, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int grammar_vocab_new(const char *const *tokens, const uint32_t *lens, uint32_t n_tokens, grammar_vocab **out) {
    if (!out || (n_tokens && (!tokens || !lens))) return err_set(KITE_E_ARG, "grammar_vocab_new: NULL argument");
    grammar_vocab *v = calloc(1, sizeof *v);
    ventry *e = calloc(n_tokens ? n_tokens : 1, sizeof *e);
    uint32_t *path = NULL;
    int rc = KITE_OK;
    if (!v || !e) {
        rc = err_set(KITE_E_NOMEM, "grammar: out of memory");
        goto fail;
    }
    v->n_tokens = n_tokens;
    uint64_t total = 0;
    uint32_t n_e = 0, max_len = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        if (!lens[i]) continue;
        if (!tokens[i]) {
            rc = err_set(KITE_E_ARG, "grammar_vocab_new: token %u is NULL with length %u", i, lens[i]);
            goto fail;
        }
        e[n_e++] = (ventry){(const uint8_t *)tokens[i], lens[i], i};
        total += lens[i];
        if (lens[i] > max_len) max_len = lens[i];
    }
    if (total >= UINT32_MAX) {
        rc = err_set(KITE_E_RANGE, "grammar_vocab_new: %llu token bytes in all (at most 4 GiB)",
                     (unsigned long long)total);
        goto fail;
    }
    qsort(e, n_e, sizeof *e, cmp_ventry);
    size_t cap = total ? (size_t)total : 1;
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->end = malloc(cap * sizeof *v->end);
    v->tok_first = malloc(cap * sizeof *v->tok_first);
    v->tok_n = malloc(cap * sizeof *v->tok_n);
    v->tok_ids = malloc((n_e ? n_e : 1) * sizeof *v->tok_ids);
    path = malloc(((size_t)max_len + 1) * sizeof *path);
    v->sub_first = malloc((cap + 1) * sizeof *v->sub_first);
    v->tb = malloc(cap);
    v->tb_off = malloc(((size_t)n_e + 1) * sizeof *v->tb_off);
    if (!v->byte || !v->depth || !v->end || !v->tok_first || !v->tok_n || !v->tok_ids || !path || !v->sub_first ||
        !v->tb || !v->tb_off) {
        rc = err_set(KITE_E_NOMEM, "grammar: out of memory");
        goto fail;
    }
    uint32_t n = 0, sp = 0, tb_n = 0;
    for (uint32_t k = 0; k < n_e; k++) {
        uint32_t lcp = 0;
        if (k) {
            uint32_t lim = e[k - 1].len < e[k].len ? e[k - 1].len : e[k].len;
            while (lcp < lim && e[k - 1].s[lcp] == e[k].s[lcp]) lcp++;
        }
        while (sp > lcp) v->end[path[--sp]] = n;
        for (; sp < e[k].len; sp++) {
            v->byte[n] = e[k].s[sp];
            v->depth[n] = sp + 1;
            v->tok_n[n] = 0;
            v->tok_first[n] = 0;
            path[sp] = n++;
        }
        uint32_t leaf = path[e[k].len - 1];
        if (!v->tok_n[leaf]) v->tok_first[leaf] = k;
        v->tok_n[leaf]++;
        v->tok_ids[k] = e[k].id;
        v->tb_off[k] = tb_n;
        memcpy(v->tb + tb_n, e[k].s, e[k].len);
        tb_n += e[k].len;
    }
    while (sp > 0) v->end[path[--sp]] = n;
    v->tb_off[n_e] = tb_n;
    v->n_nodes = n;
    v->n_e = n_e;
    /* tokens are numbered in preorder (a node's tokens before its descendants'), so a
     * subtree's tokens are the index range [sub_first[i], sub_first[end[i]]) */
    for (uint32_t i = 0, k = 0; i <= n; i++) {
        v->sub_first[i] = k;
        if (i < n) k += v->tok_n[i];
    }
    v->max_depth = max_len;
    free(path);
    free(e);
    *out = v;
    return KITE_OK;
fail:
    free(path);
    free(e);
    grammar_vocab_free(v);
    return rc;
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok_first);
    free(v->tok_n);
    free(v->tok_ids);
    free(v->sub_first);
    free(v->tb);
    free(v->tb_off);
    free(v);
}

uint32_t grammar_vocab_n_tokens(const grammar_vocab *v) { return v ? v->n_tokens : 0; }
uint32_t grammar_vocab_n_nodes(const grammar_vocab *v) { return v ? v->n_nodes : 0; }

/* ---- mask --------------------------------------------------------------------------- */

/* The per-depth walk levels, sized once per vocabulary. */
static int ensure_levels(grammar_matcher *m, const grammar_vocab *v) {
    if (m->cap_lv >= v->max_depth + 1) return KITE_OK;
    glevel *lv = realloc(m->lv, ((size_t)v->max_depth + 1) * sizeof *lv);
    if (lv) m->lv = lv;
    uint8_t *dp = realloc(m->dp, (size_t)v->max_depth + 1);
    if (dp) m->dp = dp;
    if (!lv || !dp) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    m->cap_lv = v->max_depth + 1;
    return KITE_OK;
}

int grammar_matcher_fill_mask(grammar_matcher *m, const grammar_vocab *v, uint32_t *mask) {
    if (!m || !v || (!mask && v->n_tokens)) return err_set(KITE_E_ARG, "grammar_matcher_fill_mask: NULL argument");
    memset(mask, 0, ((size_t)v->n_tokens + 31) / 32 * sizeof *mask);
    int rc = ensure_levels(m, v);
    if (rc) return rc;
    glevel *lv = m->lv;
    lv[0] = live_level(m);
    for (uint32_t i = 0; i < v->n_nodes;) {
        uint32_t d = v->depth[i];
        int r = step_byte(m, &lv[d - 1], v->byte[i], &lv[d]);
        if (r == REJECT) {
            i = v->end[i];
            continue;
        }
        if (r) {
            rc = r;
            break;
        }
        for (uint32_t k = v->tok_first[i], ke = k + v->tok_n[i]; k < ke; k++) {
            uint32_t t = v->tok_ids[k];
            mask[t >> 5] |= 1u << (t & 31);
        }
        i++;
    }
    m->n_heads = lv[0].heads_top;
    m->n_nodes = lv[0].nodes_top;
    return rc;
}

/* ---- mask cache (context-independent tokens, precomputed) --------------------------------
 *
 * An entry is keyed by the positions of a head's top `depth` stack frames (and whether the
 * stack goes deeper).  Computing it walks the whole trie from a stack of those frames alone,
 * with "the bottom frame ended" marked as a NIL head, and sorts every token into:
 *   accepted   some path consumes it without leaving the frames: allowed whatever lies below;
 *   rejected   every path fails inside the frames: never allowed;
 *   uncertain  no path succeeds inside, but one left the frames before the token's end:
 *              the answer depends on the frames below, checked at run time with the full
 *              stack (in trie order, sharing the steps of common prefixes).
 * When the key reaches the stack's bottom the frames are the whole context: nothing is
 * uncertain.  Accepted tokens are kept as a list or a bitset, whichever is smaller. */

typedef struct {
    uint32_t hash, n_key, trunc;
    uint32_t key[GRAMMAR_CACHE_MAX_DEPTH]; /* frame positions, top first */
    uint32_t n_acc;
    uint32_t *acc;  /* (n_acc) token ids, or NULL when bits */
    uint32_t *bits; /* (words) accepted bitset, or NULL */
    uint32_t n_unc;
    uint32_t *unc;      /* (n_unc) trie-order indices, ascending */
    uint16_t *unc_lcp;  /* (n_unc) bytes shared with the previous uncertain token */
} gc_entry;

struct grammar_mask_cache {
    const grammar *g;
    const grammar_vocab *v;
    grammar_mask_cache_params prm;
    pthread_mutex_t mu;
    gc_entry **tab; /* (tab_mask + 1) open addressing */
    uint32_t tab_mask;
    grammar_mask_cache_stats st;
};

grammar_mask_cache_params grammar_mask_cache_default_params(void) {
    grammar_mask_cache_params p = {.depth = GRAMMAR_CACHE_DEFAULT_DEPTH, .max_bytes = (size_t)256 << 20};
    return p;
}

int grammar_mask_cache_new(const grammar *g, const grammar_vocab *v, const grammar_mask_cache_params *params,
                           grammar_mask_cache **out) {
    if (!g || !v || !out) return err_set(KITE_E_ARG, "grammar_mask_cache_new: NULL argument");
    grammar_mask_cache_params prm = params ? *params : grammar_mask_cache_default_params();
    if (prm.depth < 1 || prm.depth > GRAMMAR_CACHE_MAX_DEPTH)
        return err_set(KITE_E_ARG, "grammar_mask_cache_new: depth %u outside 1..%d", prm.depth, GRAMMAR_CACHE_MAX_DEPTH);
    grammar_mask_cache *c = calloc(1, sizeof *c);
    if (!c) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    c->tab_mask = 255;
    c->tab = calloc(c->tab_mask + 1, sizeof *c->tab);
    if (!c->tab || pthread_mutex_init(&c->mu, NULL)) {
        free(c->tab);
        free(c);
        return err_set(KITE_E_NOMEM, "grammar: out of memory");
    }
    c->g = g;
    c->v = v;
    c->prm = prm;
    *out = c;
    return KITE_OK;
}

static void gc_entry_free(gc_entry *e) {
    if (!e) return;
    free(e->acc);
    free(e->bits);
    free(e->unc);
    free(e->unc_lcp);
    free(e);
}

void grammar_mask_cache_free(grammar_mask_cache *c) {
    if (!c) return;
    for (uint32_t i = 0; i <= c->tab_mask; i++) gc_entry_free(c->tab[i]);
    free(c->tab);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void grammar_mask_cache_get_stats(grammar_mask_cache *c, grammar_mask_cache_stats *out) {
    if (!c || !out) return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

static int gc_same(const gc_entry *e, uint32_t hash, const uint32_t *key, uint32_t n_key, uint32_t trunc) {
    return e->hash == hash && e->n_key == n_key && e->trunc == trunc &&
           !memcmp(e->key, key, n_key * sizeof *key);
}

/* Under c->mu. */
static gc_entry *gc_find(const grammar_mask_cache *c, uint32_t hash, const uint32_t *key, uint32_t n_key,
                         uint32_t trunc) {
    for (uint32_t i = hash & c->tab_mask;; i = (i + 1) & c->tab_mask) {
        gc_entry *e = c->tab[i];
        if (!e || gc_same(e, hash, key, n_key, trunc)) return e;
    }
}

/* Under c->mu: inserts e (not present), growing the table at half full. */
static int gc_insert(grammar_mask_cache *c, gc_entry *e) {
    if ((c->st.n_entries + 1) * 2 > c->tab_mask + 1) {
        uint32_t nmask = c->tab_mask * 2 + 1;
        gc_entry **nt = calloc((size_t)nmask + 1, sizeof *nt);
        if (!nt) return err_set(KITE_E_NOMEM, "grammar: out of memory");
        for (uint32_t i = 0; i <= c->tab_mask; i++) {
            gc_entry *x = c->tab[i];
            if (!x) continue;
            uint32_t j = x->hash & nmask;
            while (nt[j]) j = (j + 1) & nmask;
            nt[j] = x;
        }
        free(c->tab);
        c->tab = nt;
        c->tab_mask = nmask;
    }
    uint32_t i = e->hash & c->tab_mask;
    while (c->tab[i]) i = (i + 1) & c->tab_mask;
    c->tab[i] = e;
    c->st.n_entries++;
    return KITE_OK;
}

static int level_has_nil(const grammar_matcher *m, const glevel *l) {
    for (uint32_t h = l->h0; h < l->h1; h++)
        if (m->heads[h] == NIL) return 1;
    return 0;
}

/* Pushes a single-head level for node `id` above the arena tops. */
static int push_single(grammar_matcher *m, uint32_t id, glevel *out) {
    if (m->n_heads == m->cap_heads) {
        int rc = grow_heads(m);
        if (rc) return rc;
    }
    uint32_t h = m->n_heads++;
    m->heads[h] = id;
    *out = (glevel){h, h + 1, m->n_heads, m->n_nodes, 0, 0, 0};
    return KITE_OK;
}

static uint32_t lcp_bytes(const grammar_vocab *v, uint32_t a, uint32_t b) {
    const uint8_t *x = v->tb + v->tb_off[a], *y = v->tb + v->tb_off[b];
    uint32_t la = v->tb_off[a + 1] - v->tb_off[a], lb = v->tb_off[b + 1] - v->tb_off[b];
    uint32_t n = la < lb ? la : lb, i = 0;
    while (i < n && x[i] == y[i]) i++;
    return i;
}

enum { TK_REJ = 0, TK_ACC = 1, TK_UNC = 2 };

/* Computes the entry for the frames key[0..n_key) (top first) with m's arena as scratch;
 * m's state is unchanged.  Cost: one trie walk (a matcher step per visited node). */
static int gc_compute(grammar_matcher *m, const grammar_mask_cache *c, const uint32_t *key, uint32_t n_key,
                      uint32_t trunc, uint32_t hash, gc_entry **out) {
    const grammar_vocab *v = c->v;
    uint32_t nt = m->n_nodes, ht = m->n_heads;
    uint8_t *cls = calloc(v->n_e ? v->n_e : 1, 1);
    gc_entry *e = calloc(1, sizeof *e);
    int rc = KITE_OK;
    if (!cls || !e) {
        rc = err_set(KITE_E_NOMEM, "grammar: out of memory");
        goto fail;
    }
    uint32_t parent = NIL;
    for (uint32_t j = n_key; j-- > 0;) { /* bottom frame first: parents have lower ids */
        if (m->n_nodes == m->cap_nodes && (rc = grow_nodes(m))) goto fail;
        m->nodes[m->n_nodes] = (gnode){key[j], parent};
        parent = m->n_nodes++;
    }
    glevel *lv = m->lv;
    uint8_t *dp = m->dp;
    if ((rc = push_single(m, parent, &lv[0]))) goto fail;
    dp[0] = 0;
    for (uint32_t i = 0; i < v->n_nodes;) {
        uint32_t d = v->depth[i];
        int r = step_byte(m, &lv[d - 1], v->byte[i], &lv[d]);
        if (r == REJECT) {
            if (dp[d - 1]) memset(cls + v->sub_first[i], TK_UNC, v->sub_first[v->end[i]] - v->sub_first[i]);
            i = v->end[i];
            continue;
        }
        if (r) {
            rc = r;
            goto fail;
        }
        memset(cls + v->tok_first[i], TK_ACC, v->tok_n[i]);
        dp[d] = dp[d - 1] || (trunc && lv[d].need == 0 && level_has_nil(m, &lv[d]));
        i++;
    }
    uint32_t words = (v->n_tokens + 31) / 32;
    for (uint32_t k = 0; k < v->n_e; k++) {
        if (cls[k] == TK_ACC) e->n_acc++;
        else if (cls[k] == TK_UNC) e->n_unc++;
    }
    if (e->n_acc < words) {
        e->acc = malloc((e->n_acc ? e->n_acc : 1) * sizeof *e->acc);
        if (!e->acc) goto nomem;
    } else {
        e->bits = calloc(words, sizeof *e->bits);
        if (!e->bits) goto nomem;
    }
    if (e->n_unc) {
        e->unc = malloc(e->n_unc * sizeof *e->unc);
        e->unc_lcp = malloc(e->n_unc * sizeof *e->unc_lcp);
        if (!e->unc || !e->unc_lcp) goto nomem;
    }
    uint32_t na = 0, nu = 0;
    for (uint32_t k = 0; k < v->n_e; k++) {
        uint32_t t = v->tok_ids[k];
        if (cls[k] == TK_ACC) {
            if (e->acc) e->acc[na++] = t;
            else e->bits[t >> 5] |= 1u << (t & 31);
        } else if (cls[k] == TK_UNC) {
            uint32_t l = nu ? lcp_bytes(v, e->unc[nu - 1], k) : 0;
            e->unc_lcp[nu] = (uint16_t)(l > UINT16_MAX ? UINT16_MAX : l);
            e->unc[nu++] = k;
        }
    }
    e->hash = hash;
    e->n_key = n_key;
    e->trunc = trunc;
    memcpy(e->key, key, n_key * sizeof *key);
    free(cls);
    m->n_nodes = nt;
    m->n_heads = ht;
    *out = e;
    return KITE_OK;
nomem:
    rc = err_set(KITE_E_NOMEM, "grammar: out of memory");
    goto fail;
fail:
    free(cls);
    gc_entry_free(e);
    m->n_nodes = nt;
    m->n_heads = ht;
    return rc;
}

static size_t gc_bytes(const gc_entry *e, uint32_t words) {
    return sizeof *e + (e->acc ? (size_t)e->n_acc * 4 : (size_t)words * 4) + (size_t)e->n_unc * 6;
}

/* Checks e's uncertain tokens from the full stack of node id, setting the allowed ones. */
static int check_uncertain(grammar_matcher *m, const grammar_vocab *v, const gc_entry *e, uint32_t id,
                           uint32_t *mask) {
    glevel *lv = m->lv;
    int rc = push_single(m, id, &lv[0]);
    if (rc) return rc;
    uint32_t reached = 0, dead = UINT32_MAX, shared = UINT32_MAX;
    for (uint32_t j = 0; j < e->n_unc; j++) {
        uint32_t k = e->unc[j];
        if (e->unc_lcp[j] < shared) shared = e->unc_lcp[j];
        if (shared >= dead) continue; /* shares a rejected prefix with the last token checked */
        uint32_t t = v->tok_ids[k];
        if ((mask[t >> 5] >> (t & 31)) & 1u) continue; /* allowed through another head */
        const uint8_t *s = v->tb + v->tb_off[k];
        uint32_t len = v->tb_off[k + 1] - v->tb_off[k], d = reached < shared ? reached : shared;
        int r = KITE_OK;
        for (; d < len; d++) {
            r = step_byte(m, &lv[d], s[d], &lv[d + 1]);
            if (r) break;
        }
        if (r && r != REJECT) return r;
        reached = d;
        dead = d < len ? d + 1 : UINT32_MAX;
        shared = UINT32_MAX;
        if (d == len) mask[t >> 5] |= 1u << (t & 31);
    }
    return KITE_OK;
}

int grammar_matcher_fill_mask_cached(grammar_matcher *m, grammar_mask_cache *c, uint32_t *mask) {
    if (!m || !c || !mask) return err_set(KITE_E_ARG, "grammar_matcher_fill_mask_cached: NULL argument");
    if (m->g != c->g) return err_set(KITE_E_ARG, "grammar_matcher_fill_mask_cached: cache of another grammar");
    const grammar_vocab *v = c->v;
    if (m->st.need) { /* a token ended mid-character: entries assume a character boundary */
        pthread_mutex_lock(&c->mu);
        c->st.fallbacks++;
        pthread_mutex_unlock(&c->mu);
        return grammar_matcher_fill_mask(m, v, mask);
    }
    uint32_t words = (v->n_tokens + 31) / 32;
    memset(mask, 0, (size_t)words * sizeof *mask);
    int rc = ensure_levels(m, v);
    if (rc) return rc;
    uint32_t nt = m->n_nodes, ht = m->n_heads;
    for (uint32_t h = m->st.h0; h < m->st.h1 && !rc; h++) {
        uint32_t id = m->heads[h];
        if (id == NIL) continue;
        uint32_t key[GRAMMAR_CACHE_MAX_DEPTH], n_key = 0, x = id, hash = 2166136261u;
        while (x != NIL && n_key < c->prm.depth) {
            key[n_key++] = m->nodes[x].pos;
            hash = (hash ^ m->nodes[x].pos) * 16777619u;
            x = m->nodes[x].parent;
        }
        uint32_t trunc = x != NIL;
        hash = (hash ^ (n_key << 1 | trunc)) * 16777619u;
        pthread_mutex_lock(&c->mu);
        gc_entry *e = gc_find(c, hash, key, n_key, trunc);
        if (e) c->st.hits++;
        int full = !e && c->st.bytes >= c->prm.max_bytes;
        if (full) c->st.fallbacks++;
        pthread_mutex_unlock(&c->mu);
        if (full) return grammar_matcher_fill_mask(m, v, mask);
        if (!e) { /* computed outside the lock: another thread may do the same; the first one in wins */
            gc_entry *ne = NULL;
            if ((rc = gc_compute(m, c, key, n_key, trunc, hash, &ne))) break;
            pthread_mutex_lock(&c->mu);
            e = gc_find(c, hash, key, n_key, trunc);
            if (!e) {
                rc = gc_insert(c, ne);
                if (!rc) {
                    e = ne;
                    ne = NULL;
                    c->st.misses++;
                    c->st.bytes += gc_bytes(e, words);
                    c->st.n_uncertain += e->n_unc;
                }
            }
            pthread_mutex_unlock(&c->mu);
            gc_entry_free(ne);
            if (rc) break;
        }
        /* entries are immutable once in the table and freed only with the cache */
        if (e->acc)
            for (uint32_t i = 0; i < e->n_acc; i++) mask[e->acc[i] >> 5] |= 1u << (e->acc[i] & 31);
        else
            for (uint32_t w = 0; w < words; w++) mask[w] |= e->bits[w];
        if (e->n_unc) rc = check_uncertain(m, v, e, id, mask);
        m->n_nodes = nt;
        m->n_heads = ht;
    }
    m->n_nodes = nt;
    m->n_heads = ht;
    return rc;
}

uint32_t grammar_mask_apply(const uint32_t *mask, uint32_t n, const float *in, float *out) {
    uint32_t allowed = 0;
    for (uint32_t w = 0; w * 32 < n; w++) {
        uint32_t m = mask[w], base = w * 32, k = n - base < 32 ? n - base : 32;
        if (m == 0) {
            for (uint32_t i = 0; i < k; i++) out[base + i] = -INFINITY;
        } else if (m == UINT32_MAX && k == 32) {
            memcpy(out + base, in + base, 32 * sizeof *out);
            allowed += 32;
        } else {
            for (uint32_t i = 0; i < k; i++) out[base + i] = (m >> i) & 1u ? in[base + i] : -INFINITY;
            allowed += (uint32_t)__builtin_popcount(k == 32 ? m : m & ((1u << k) - 1));
        }
    }
    return allowed;
}
