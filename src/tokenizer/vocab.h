/*
 * vocab.h - the tokenizer vocabulary and the encode/decode entry points.
 *
 * DESIGN
 *   One `vocab` per model, built from the GGUF keys tokenizer.ggml.* and
 *   immutable afterwards.  The tokenizer model ("llama" = SentencePiece BPE
 *   in spm.c; "gpt2" = byte-level BPE in bpe.c) selects the encoder;
 *   the vocabulary tables (pieces, scores, token types, special ids) are shared
 *   by all of them.  Pieces point into the GGUF image (not copied).
 *
 * THREAD SAFETY
 *   Immutable after vocab_load_gguf(); encode/decode are reentrant.
 */
#ifndef KITE_TOKENIZER_VOCAB_H
#define KITE_TOKENIZER_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kite.h"

typedef struct vocab vocab;

/* Builds the vocabulary from a GGUF file's tokenizer.ggml.* keys.  The ctx
 * must outlive the vocab.  Errors name the key (KITE_E_NOT_FOUND when
 * tokenizer.ggml.tokens is missing, KITE_E_FORMAT for inconsistent arrays or
 * special ids out of range, KITE_E_UNSUPPORTED for an unknown tokenizer model). */
int vocab_load_gguf(const gguf_ctx *g, vocab **out /* OUT */);
void vocab_free(vocab *v);

int32_t vocab_n_tokens(const vocab *v);
kite_token vocab_bos(const vocab *v); /* -1 if none */
kite_token vocab_eos(const vocab *v); /* -1 if none */
bool vocab_is_eog(const vocab *v, kite_token t);

/* See kite_tokenize() in kite.h for the contract. */
int vocab_tokenize(const vocab *v, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                   size_t *n_out);
/* See kite_token_to_piece() in kite.h. */
int vocab_token_to_piece(const vocab *v, kite_token t, const char **piece, char buf[8]);
/* A streaming detokenizer over v (see kite_detok_new() in kite.h; v must
 * outlive it). */
int vocab_detok_new(const vocab *v, kite_detok **out /* OUT */);
/* Output buffer size (bytes, NUL included) with which no kite_detok_push or
 * kite_detok_flush on d fails for lack of room. */
size_t vocab_detok_out_cap(const kite_detok *d);

#endif
