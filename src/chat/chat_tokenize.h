/*
 * chat_tokenize.h - tokenizing chat prompts whose text contains special
 * tokens ("<|im_start|>", "<s>", "<|eot_id|>", ...).
 *
 * DESIGN
 *   kite_tokenize encodes text as text: control tokens are never produced
 *   from it (the byte-level BPE cuts out user-defined tokens only), so the
 *   markers written by chat_apply would become plain pieces such as
 *   "<", "|", "im", "_start", ...  A chat_tokenizer takes the texts of the
 *   vocabulary's control, user-defined and unknown tokens (token types 3, 4
 *   and 2 of tokenizer.ggml.token_type), cuts them out of the text (at each
 *   position the longest one that matches; scanning left to right) and
 *   encodes the pieces between them with kite_tokenize.  This is what
 *   llama.cpp does with parse_special: for SentencePiece vocabularies every
 *   piece after a special token gets the dummy-prefix space again.
 *   Without tokenizer.ggml.token_type only the BOS and EOS texts are special.
 *
 * OWNERSHIP
 *   A chat_tokenizer borrows its model (the token texts point into the GGUF
 *   image): free it before the model.
 *
 * THREAD SAFETY
 *   Immutable after chat_tokenizer_new; chat_tokenize is reentrant.
 */
#ifndef KITE_CHAT_TOKENIZE_H
#define KITE_CHAT_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>

#include "kite.h"

typedef struct chat_tokenizer chat_tokenizer;

/* Collects the special tokens of model's vocabulary.  Returns KITE_OK,
 * KITE_E_ARG (NULL model), KITE_E_FORMAT (token_type array of the wrong
 * length) or KITE_E_NOMEM; *out unchanged on error.  Cost: O(n_vocab). */
int chat_tokenizer_new(const kite_model *model, chat_tokenizer **out /* OUT */);
void chat_tokenizer_free(chat_tokenizer *ct); /* NULL is a no-op */

/* Number of special token texts it matches. */
size_t chat_tokenizer_n_special(const chat_tokenizer *ct);
/* Length in bytes of the longest special token text (0 if none). */
size_t chat_tokenizer_max_special_len(const chat_tokenizer *ct);

/* kite_tokenize's contract (add_bos, cap, *n_out, KITE_E_RANGE when the
 * output does not fit), but special token texts in text become their ids. */
int chat_tokenize(const chat_tokenizer *ct, const char *text, size_t len, bool add_bos, kite_token *out,
                  size_t cap, size_t *n_out /* OUT */);

/* Id of the special token whose text is exactly s, or -1. */
kite_token chat_tokenizer_special_id(const chat_tokenizer *ct, const char *s);

#endif
