/*
 * prompt.c - tokenizing the text a user gives `kite run` and `kite tokenize`.
 *
 * Special-token texts written in the text (control, user-defined and
 * unknown tokens: "<s>", "<|start_story|>", "<|im_start|>", ...) become their
 * ids by default, as llama.cpp's llama-cli, llama-tokenize and llama-server
 * do (parse_special); --no-parse-special encodes the text as plain text.
 * The splitting is chat_tokenize's (src/chat/chat_tokenize.c), the one
 * special-token splitter of the tree; this file only chooses.
 */
#include "cli.h"

#include "chat/chat_tokenize.h"

int cli_tokenize_text(const kite_model *model, const char *text, size_t len, bool add_bos, bool parse_special,
                      kite_token *out, size_t cap, size_t *n_out) {
    if (!parse_special) return kite_tokenize(model, text, len, add_bos, out, cap, n_out);
    chat_tokenizer *ct = NULL;
    int rc = chat_tokenizer_new(model, &ct);
    if (rc == KITE_OK) rc = chat_tokenize(ct, text, len, add_bos, out, cap, n_out);
    chat_tokenizer_free(ct);
    return rc;
}
