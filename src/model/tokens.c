/*
 * tokens.c - the public "tokens" functions of kite.h: thin wrappers that
 * check the model handle and call vocab_* on model->vocab (the streaming
 * detokenizer itself is tokenizer/detok.c).  They live in model/ because
 * tokenizer/ knows vocabularies only, never models.  Reentrant; the model is
 * only read.
 */
#include "core/error.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

kite_token kite_token_bos(const kite_model *model) {
    return model && model->vocab ? vocab_bos(model->vocab) : -1;
}

kite_token kite_token_eos(const kite_model *model) {
    return model && model->vocab ? vocab_eos(model->vocab) : -1;
}

bool kite_token_is_eog(const kite_model *model, kite_token t) {
    return model && model->vocab && vocab_is_eog(model->vocab, t);
}

int kite_tokenize(const kite_model *model, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                  size_t *n_out) {
    if (!model || !model->vocab) return err_set(KITE_E_ARG, "kite_tokenize: NULL model");
    return vocab_tokenize(model->vocab, text, len, add_bos, out, cap, n_out);
}

int kite_token_to_piece(const kite_model *model, kite_token t, const char **piece, char buf[8]) {
    if (!model || !model->vocab) return err_set(KITE_E_ARG, "kite_token_to_piece: NULL model");
    return vocab_token_to_piece(model->vocab, t, piece, buf);
}

int kite_detok_new(const kite_model *model, kite_detok **out) {
    if (!model || !model->vocab || !out) return err_set(KITE_E_ARG, "kite_detok_new: NULL argument");
    return vocab_detok_new(model->vocab, out);
}
