/*
 * pretok.h - the pre-tokenizer of the byte-level BPE: splits text into the
 * chunks that BPE merges never cross, with the split regex selected by
 * tokenizer.ggml.pre (PCRE2, Unicode properties).
 *
 * THREAD SAFETY
 *   A pretok is immutable after pretok_new(); pretok_split() is reentrant
 *   (match data is per call).
 */
#ifndef KITE_TOKENIZER_PRETOK_H
#define KITE_TOKENIZER_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

enum pretok_kind {
    PRETOK_GPT2 = 0, /* "gpt-2" and the default: GPT-2's pattern */
    PRETOK_LLAMA3,   /* "llama-bpe" (Llama 3): \p{N}{1,3}, case-insensitive contractions */
    PRETOK_QWEN2,    /* "qwen2": like Llama 3 with single digits; NFC applies */
    PRETOK_TEKKEN    /* "tekken" (Mistral Nemo): case-aware letter runs */
};

typedef struct pretok pretok;

/* The kind for a tokenizer.ggml.pre name of n bytes; -1 if unknown. */
int pretok_kind_from_name(const char *name, size_t n);
const char *pretok_kind_name(int kind);

/* Compiles the pattern of kind (JIT when available).  KITE_E_ARG for a bad
 * kind, KITE_E_NOMEM, KITE_E_UNSUPPORTED if PCRE2 rejects the pattern (a
 * library built without Unicode support). */
int pretok_new(int kind, pretok **out /* OUT */);
void pretok_free(pretok *p);

/* Called for each chunk s[off, off+len) in order; a nonzero return stops
 * the split and is returned by pretok_split. */
typedef int (*pretok_fn)(void *ctx, size_t off, size_t len);

/* Splits s[0..n) into chunks that cover it exactly, in order: each regex
 * match is one chunk, and each run of bytes between matches (only ill-formed
 * UTF-8, which the patterns never match) is one chunk.  Returns KITE_OK, the
 * callback's nonzero value, or KITE_E_NOMEM. */
int pretok_split(const pretok *p, const char *s, size_t n, pretok_fn fn, void *ctx);

#endif
