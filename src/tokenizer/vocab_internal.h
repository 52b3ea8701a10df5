/*
 * vocab_internal.h - the vocabulary tables shared by the encoders and the
 * detokenizer (private to src/tokenizer, the tests and the fuzzer).
 *
 * DESIGN
 *   struct vocab holds everything that does not depend on the tokenizer
 *   model: the piece texts (borrowed from the GGUF image), scores, token
 *   types, special ids, a hash map piece -> id, the byte-fallback table and
 *   the decoded ("▁" -> " ", or GPT-2 characters -> bytes) pieces used by
 *   token_to_piece.  The encoder is picked by `model`: VOCAB_MODEL_SPM
 *   dispatches to spm_tokenize() in spm.c, VOCAB_MODEL_BPE to bpe_tokenize()
 *   in bpe.c, which also builds the merge table and pre-tokenizer below.
 *
 *   vocab_build() makes a vocab from plain arrays; vocab_load_gguf() reads the
 *   GGUF keys into a vocab_spec and calls it.  Tests and the fuzzer use
 *   vocab_build() directly to make small vocabularies in memory.
 *
 * INVARIANTS (after vocab_build returned KITE_OK)
 *   0 < n_tokens <= INT32_MAX/2; every special id is -1 or < n_tokens;
 *   types[i] is one of enum vocab_ttype; byte_id[b] is -1 or a BYTE token.
 *
 * THREAD SAFETY
 *   Immutable after build; all readers are reentrant.
 */
#ifndef KITE_TOKENIZER_VOCAB_INTERNAL_H
#define KITE_TOKENIZER_VOCAB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kite.h"
#include "tokenizer/vocab.h"

/* Tokenizer model (tokenizer.ggml.model). */
enum vocab_model {
    VOCAB_MODEL_SPM = 1, /* "llama": SentencePiece BPE with byte fallback */
    VOCAB_MODEL_BPE = 2  /* "gpt2": byte-level BPE (bpe.c) */
};

/* Token types, numbered as in tokenizer.ggml.token_type (llama.cpp / sentencepiece). */
enum vocab_ttype {
    VOCAB_TT_UNDEFINED = 0, /* treated like NORMAL */
    VOCAB_TT_NORMAL = 1,
    VOCAB_TT_UNKNOWN = 2,
    VOCAB_TT_CONTROL = 3,
    VOCAB_TT_USER_DEFINED = 4,
    VOCAB_TT_UNUSED = 5,
    VOCAB_TT_BYTE = 6
};

#define VOCAB_MAX_EOG 8

struct pretok;

/* One entry of the BPE merge table: the pair (left id, right id) -> rank. */
typedef struct bpe_merge {
    uint64_t key;   /* (uint64)left << 32 | right; UINT64_MAX = empty slot */
    int32_t rank;   /* index in tokenizer.ggml.merges (lower merges first) */
    int32_t id;     /* the merged token */
} bpe_merge;

struct vocab {
    int model;                 /* enum vocab_model */
    int32_t n_tokens;
    const gguf_str *pieces;    /* [n_tokens] raw piece text, borrowed (GGUF image) */
    float *scores;             /* [n_tokens] merge priority (higher merges first), owned */
    uint8_t *types;            /* [n_tokens] enum vocab_ttype, owned */
    int32_t *map;              /* [map_mask+1] open-addressing hash piece -> id, -1 empty */
    uint64_t map_mask;         /* table size - 1 (power of two) */
    int32_t byte_id[256];      /* id of the byte-fallback token <0xNN>, or -1 */
    bool has_byte_fallback;    /* all 256 byte tokens present */
    bool has_unused;           /* some token is UNUSED (needs merge history) */
    char *dec;                 /* decoded pieces, NUL-separated, owned */
    uint64_t *dec_off;         /* [n_tokens] offset of the decoded piece in dec */
    uint32_t *dec_len;         /* [n_tokens] its length in bytes */
    size_t max_piece_len;      /* longest raw piece, bytes */
    size_t max_dec_len;        /* longest decoded piece, bytes */
    kite_token bos, eos, unk, pad; /* -1 if none */
    kite_token eog[VOCAB_MAX_EOG]; /* end-of-generation ids (eos, eot, eom, ...) */
    int n_eog;
    bool add_bos, add_eos;     /* tokenizer.ggml.add_bos_token / add_eos_token */
    bool add_space_prefix;     /* SentencePiece dummy prefix */
    /* byte-level BPE only (model VOCAB_MODEL_BPE; zero otherwise), built by bpe_init() */
    int pre;                   /* enum pretok_kind (tokenizer.ggml.pre) */
    struct pretok *pretok;     /* compiled split regex, owned */
    bool nfc;                  /* NFC-normalise text before splitting (qwen2) */
    bool ignore_merges;        /* a chunk that is itself a token is emitted whole (llama3) */
    int32_t bpe_byte_tok[256]; /* id of the one-character token of each byte, or -1 */
    bpe_merge *merges;         /* [merge_mask+1] open-addressing hash pair -> rank, owned */
    uint64_t merge_mask;       /* table size - 1 (power of two) */
    int32_t n_merges;          /* usable merges in the table */
    int32_t *user_ids;         /* [n_user] user-defined tokens matched in text, longest first, owned */
    int32_t n_user;
};

/* Everything vocab_build() needs; arrays are copied except `pieces`. */
typedef struct vocab_spec {
    const char *name;          /* for messages (the GGUF path) */
    int model;                 /* enum vocab_model */
    int32_t n_tokens;
    const gguf_str *pieces;    /* [n_tokens], borrowed: must outlive the vocab */
    const float *scores;       /* [n_tokens] or NULL (all 0) */
    const int32_t *types;      /* [n_tokens] or NULL (all NORMAL; bos/eos CONTROL, unk UNKNOWN) */
    int64_t bos, eos, unk, pad, eot, eom; /* -1: none */
    bool add_bos, add_eos, add_space_prefix;
    const gguf_str *merges;    /* [n_merges] "left right" (BPE only), borrowed */
    uint64_t n_merges;
    int pre;                   /* enum pretok_kind (BPE only) */
} vocab_spec;

/* A spec with no tokens, model SPM, llama defaults for the flags and every
 * special id -1. */
vocab_spec vocab_spec_default(void);

/* Validates spec and builds a vocab.  KITE_E_FORMAT (message names the field
 * and index) for bad types, ids out of range, malformed byte tokens;
 * KITE_E_NOMEM.  *out unchanged on error. */
int vocab_build(const vocab_spec *spec, vocab **out /* OUT */);

/* Id of the token whose raw text is s[0..n), or -1.  O(1) expected. */
int32_t vocab_find(const vocab *v, const char *s, size_t n);

/* Can a piece of this type be produced from text by the encoder? */
static inline bool vocab_type_mergeable(uint8_t t) {
    return t == VOCAB_TT_NORMAL || t == VOCAB_TT_UNDEFINED || t == VOCAB_TT_USER_DEFINED ||
           t == VOCAB_TT_UNUSED;
}

/* Binary heap of merge candidates (pair_heap.c), shared by spm.c and bpe.c:
 * heap is an array of elements of `size` bytes, *n of them in use; `before`
 * says whether a must come out before b.  push adds a copy of *item (the
 * array must have room); pop copies the first element to *top and removes
 * it (*n > 0). */
typedef bool (*vocab_heap_before_fn)(const void *a, const void *b);
void vocab_heap_push(void *heap, size_t *n, size_t size, const void *item, vocab_heap_before_fn before);
void vocab_heap_pop(void *heap, size_t *n, size_t size, void *top, vocab_heap_before_fn before);

/* SentencePiece BPE encoder (spm.c); same contract as vocab_tokenize. */
int spm_tokenize(const vocab *v, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                 size_t *n_out);

/* Byte-level BPE (bpe.c).  bpe_init() fills the BPE fields of v from s
 * (after the piece map and types are built): byte tokens, merge table,
 * user-defined token list, pre-tokenizer.  KITE_E_FORMAT for a merge that is
 * not "left right", KITE_E_NOMEM.  bpe_free() releases those fields. */
int bpe_init(vocab *v, const vocab_spec *s);
void bpe_free(vocab *v);
/* Decoded bytes of a BPE piece (each GPT-2 character -> its byte; other
 * characters are copied); dst NULL only counts.  Returns the length. */
size_t bpe_decode_piece(gguf_str p, char *dst);
/* Byte-level BPE encoder; same contract as vocab_tokenize. */
int bpe_tokenize(const vocab *v, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                 size_t *n_out);

/* ---- UTF-8 ------------------------------------------------------------- */

enum utf8_status {
    UTF8_OK,    /* a complete well-formed character of *len bytes */
    UTF8_SHORT, /* the n bytes are a well-formed prefix; more are needed */
    UTF8_BAD    /* ill-formed: *len bytes (the maximal subpart, >= 1) make one U+FFFD */
};

/* Classifies the character starting at s[0] (n >= 1 bytes available) under
 * the Unicode 15 well-formedness table (no overlongs, no surrogates, <= U+10FFFF). */
static inline int utf8_check(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) {
        *len = 1;
        return UTF8_OK;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *len = 1;
        return UTF8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return UTF8_SHORT;
        }
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
            *len = i;
            return UTF8_BAD;
        }
    }
    *len = need;
    return UTF8_OK;
}

#endif
