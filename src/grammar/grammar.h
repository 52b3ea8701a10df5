/*
 * grammar.h - grammar-constrained decoding: a GBNF parser, a matcher over
 * Unicode code points and a per-step token mask over a vocabulary trie.
 *
 * DESIGN
 *   grammar_parse() compiles llama.cpp's GBNF syntax into an immutable rule
 *   table (docs/grammar.md): every rule is a list of alternatives, each a
 *   sequence of elements ending in END; an element is a character class (a
 *   sorted set of code point ranges) or a reference to a rule.  Groups and
 *   the repetition operators * + ? {m} {m,} {m,n} are rewritten into new
 *   rules at compile time, so the matcher only sees classes and references.
 *
 *   A grammar_matcher is the persistent parser state: a set of parser stacks
 *   (as llama.cpp's grammar sampler keeps), stored as a graph-structured stack
 *   (nodes shared by their tails, so a clone or a trial step copies only the
 *   stack tops).  Each stack's top is a character class still to be matched;
 *   the empty stack means the root can end here.  Left recursion is detected
 *   at compile time and reported as an error (as llama.cpp does), which is
 *   also what guarantees that expanding a stack terminates.
 *
 *   A grammar_vocab holds the vocabulary's token byte strings as a byte-level
 *   trie in preorder.  grammar_matcher_fill_mask() walks it once, stepping the
 *   matcher byte by byte and undoing the steps on the way back up, so a prefix
 *   shared by many tokens is matched once and a rejected prefix skips its
 *   whole subtree (the XGrammar approach, without its precomputed masks yet).
 *
 * MEMORY
 *   A matcher's arrays grow geometrically up to the caps of its params and
 *   never shrink, so a steady state allocates nothing per token.  Exceeding
 *   a cap is an error (KITE_E_RANGE), never a silent truncation.
 *
 * THREAD SAFETY
 *   A grammar and a grammar_vocab are immutable after creation and may be
 *   shared by threads.  A matcher is used by one thread at a time.
 *
 * ERRORS
 *   Every fallible function returns KITE_OK or a negative kite_status with a
 *   one-line message for kite_last_error(); parse errors name line:column.
 */
#ifndef KITE_GRAMMAR_GRAMMAR_H
#define KITE_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite.h"

typedef struct grammar grammar;
typedef struct grammar_matcher grammar_matcher;
typedef struct grammar_vocab grammar_vocab;

/* Caps that bound a matcher's memory and work (docs/grammar.md, "Limits"). */
typedef struct {
    uint32_t max_stacks; /* parser stacks alive at once (after one step); default 1024 */
    uint32_t max_nodes;  /* stack nodes in the matcher's arena, 8 bytes each; default 1<<20 */
    uint32_t max_expand; /* expansion steps per code point; default 1<<16 */
} grammar_matcher_params;

grammar_matcher_params grammar_matcher_default_params(void);

/* Compiles GBNF text (len bytes, need not be NUL-terminated) with start rule
 * `root` (NULL: "root").  Returns KITE_OK with a new grammar in *out (free
 * with grammar_free), KITE_E_FORMAT for a syntax error, an undefined rule, a
 * missing start rule or left recursion (the message names line:column or
 * the rule), KITE_E_RANGE when the grammar exceeds the compile limits
 * (docs/grammar.md) or KITE_E_NOMEM; *out is unchanged on error. */
int grammar_parse(const char *text, size_t len, const char *root, grammar **out /* OUT */);
void grammar_free(grammar *g);

uint32_t grammar_n_rules(const grammar *g);    /* after the rewriting of groups and repetitions */
uint32_t grammar_n_elements(const grammar *g); /* rule table size, END markers included */

/* A matcher at the start of g's root rule.  g must outlive it.  params NULL:
 * the defaults.  KITE_E_ARG for a zero cap, KITE_E_RANGE when the first
 * expansion exceeds a cap, KITE_E_NOMEM. */
int grammar_matcher_new(const grammar *g, const grammar_matcher_params *params, grammar_matcher **out /* OUT */);
/* An independent copy of m's state (for speculative drafts, brute-force checks). */
int grammar_matcher_clone(const grammar_matcher *m, grammar_matcher **out /* OUT */);
/* Sets dst's state to src's (both of the same grammar; dst's caps should be
 * src's), reusing dst's arrays: once they have grown to the grammar's needs
 * a copy allocates nothing, so a speculative decoder can try its drafts on a
 * scratch matcher every step.  Cost: a copy of src's live stack nodes.
 * KITE_OK, KITE_E_ARG (NULL, another grammar), KITE_E_RANGE / KITE_E_NOMEM
 * while growing (dst unchanged). */
int grammar_matcher_copy(grammar_matcher *dst, const grammar_matcher *src);
void grammar_matcher_free(grammar_matcher *m);

/* Advances over one code point.  KITE_OK; KITE_E_STATE if the grammar does
 * not allow it here or a partial UTF-8 character is pending; KITE_E_RANGE if
 * a cap is exceeded; KITE_E_ARG for a value above U+10FFFF or a surrogate.
 * The state is unchanged on every error. */
int grammar_matcher_accept_codepoint(grammar_matcher *m, uint32_t cp);

/* Advances over n bytes of UTF-8, all or nothing.  A character may be split
 * over calls: trailing bytes of an incomplete character are kept (when some
 * stack can still accept a character starting with them) and completed by
 * the next call.  KITE_OK; KITE_E_STATE if the bytes are not allowed (or are
 * not UTF-8); KITE_E_RANGE if a cap is exceeded.  Unchanged on error. */
int grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes, size_t n);

/* True when the root rule can end here (and no partial character is pending):
 * the caller may then allow the end-of-generation token. */
bool grammar_matcher_is_accepting(const grammar_matcher *m);
/* True when no further character is allowed (only the end remains). */
bool grammar_matcher_is_finished(const grammar_matcher *m);
uint32_t grammar_matcher_n_stacks(const grammar_matcher *m);

/* Builds the trie of a vocabulary: token i is the byte string tokens[i] of
 * lens[i] bytes (copied; the arrays need not outlive the call).  Empty
 * tokens (control tokens) never get a mask bit: the caller decides about
 * end-of-generation tokens with grammar_matcher_is_accepting().  KITE_E_ARG
 * for NULL arrays with n_tokens > 0, KITE_E_NOMEM. */
int grammar_vocab_new(const char *const *tokens, const uint32_t *lens, uint32_t n_tokens,
                      grammar_vocab **out /* OUT */);
void grammar_vocab_free(grammar_vocab *v);
uint32_t grammar_vocab_n_tokens(const grammar_vocab *v);
uint32_t grammar_vocab_n_nodes(const grammar_vocab *v); /* trie nodes */

/* Writes the allowed-token bitset: bit (i % 32) of mask[i / 32] is set when
 * token i's bytes can be accepted from m's state (a token may end inside a
 * character if that character can still be completed).  mask has
 * (n_tokens + 31) / 32 words, every bit written.  m is used as scratch and
 * left as it was.  Cost: one matcher step per visited trie node; nothing is
 * allocated once the matcher's arrays have grown to the grammar's needs.
 * KITE_OK, KITE_E_RANGE (a cap exceeded; mask contents undefined). */
int grammar_matcher_fill_mask(grammar_matcher *m, const grammar_vocab *v, uint32_t *mask /* OUT */);

/* out[t] = in[t] where bit t of mask is set, else -INFINITY, for t < n; returns the number
 * of allowed tokens.  Whole words at a time (all clear: a fill; all set: a copy), so a
 * mostly-empty or mostly-full mask costs about a memcpy of the row. */
uint32_t grammar_mask_apply(const uint32_t *mask, uint32_t n, const float *in, float *out /* OUT */);

/* ---- mask cache: XGrammar's adaptive token mask cache ---------------------------------
 * A cache belongs to one (grammar, vocabulary) pair and is shared by every matcher of that
 * grammar (a server keeps one per compiled grammar).  For a stack head it stores, keyed by
 * the positions of the head's top `depth` stack frames, which tokens are allowed whatever
 * lies below those frames (accepted), never allowed (rejected) or depend on the frames
 * below (uncertain: checked at run time against the full stack).  Entries are computed on
 * first use (one trie walk each) and kept until the cache is freed (docs/grammar.md). */
#define GRAMMAR_CACHE_MAX_DEPTH 16
#define GRAMMAR_CACHE_DEFAULT_DEPTH 8 /* bench/grammar_bench.c --depth 2..12 on Llama 3: 8 leaves ~0 uncertain tokens per entry */

typedef struct grammar_mask_cache grammar_mask_cache;

typedef struct {
    uint32_t depth;   /* stack frames in a key, 1..GRAMMAR_CACHE_MAX_DEPTH */
    size_t max_bytes; /* entries stop being added past this; such steps walk the trie (default 256 MiB) */
} grammar_mask_cache_params;

typedef struct {
    uint32_t n_entries;
    size_t bytes;         /* entries' memory */
    uint64_t n_uncertain; /* uncertain tokens over all entries */
    uint64_t hits, misses; /* head lookups */
    uint64_t fallbacks;   /* steps that walked the whole trie (mid-character state, cache full) */
} grammar_mask_cache_stats;

grammar_mask_cache_params grammar_mask_cache_default_params(void);

/* A cache for g over v; both must outlive it.  params NULL: the defaults.  KITE_E_ARG for a
 * depth out of range, KITE_E_NOMEM. */
int grammar_mask_cache_new(const grammar *g, const grammar_vocab *v, const grammar_mask_cache_params *params,
                           grammar_mask_cache **out /* OUT */);
void grammar_mask_cache_free(grammar_mask_cache *c);
void grammar_mask_cache_get_stats(grammar_mask_cache *c, grammar_mask_cache_stats *out /* OUT */);

/* The same mask as grammar_matcher_fill_mask(m, v, mask), v being c's vocabulary, computed
 * from c's entries: per stack head, the entry's accepted tokens plus those of its uncertain
 * tokens the full stack accepts.  A missing entry is computed first (one trie walk).  When a
 * partial character is pending, or the cache is full, the whole trie is walked instead.
 * Thread-safe on c (a mutex guards lookups); m is used by one thread.  KITE_E_ARG when m's
 * grammar is not c's, KITE_E_RANGE (a cap exceeded), KITE_E_NOMEM; mask undefined on error. */
int grammar_matcher_fill_mask_cached(grammar_matcher *m, grammar_mask_cache *c, uint32_t *mask /* OUT */);

#endif
