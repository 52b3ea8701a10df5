/*
 * gen_grammar.c - kite_grammar_new / kite_grammar_free (kite.h): compile a GBNF grammar, a
 * JSON Schema or "any JSON object" for a model's vocabulary.
 *
 * DESIGN
 *   The trie holds every token's decoded bytes (vocab_token_to_piece: SentencePiece pieces
 *   with their spaces, byte-level BPE pieces as raw bytes, byte-fallback tokens as single
 *   bytes, so a token may end inside a UTF-8 character).  Control and unknown tokens have
 *   no bytes and never get a mask bit: end-of-generation is decided by generate.c from the
 *   grammar's state.  Building the trie costs one sort of the vocabulary (~0.1 s at 128k
 *   tokens, docs/grammar.md); mask cache entries are computed on first use.
 *
 * THREAD SAFETY
 *   A handle is immutable after creation except for its mask cache (internally locked).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "generate/gen_grammar.h"
#include "grammar/json_schema.h"
#include "model/model.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_internal.h" /* token types: unknown tokens stay out of the trie */

int kite_grammar_new(const kite_model *model, int kind, const char *text, size_t len, kite_grammar **out) {
    if (!model || !model->vocab || !out || (!text && len && kind != KITE_GRAMMAR_JSON_OBJECT))
        return err_set(KITE_E_ARG, "kite_grammar_new: NULL argument");
    char *gbnf = NULL;
    const char *src = text;
    size_t src_len = len;
    int rc = KITE_OK;
    switch (kind) {
    case KITE_GRAMMAR_GBNF: break;
    case KITE_GRAMMAR_JSON_SCHEMA:
        if ((rc = grammar_json_schema_to_gbnf(text ? text : "", len, &gbnf))) return rc;
        src = gbnf;
        src_len = strlen(gbnf);
        break;
    case KITE_GRAMMAR_JSON_OBJECT:
        src = grammar_json_object_gbnf();
        src_len = strlen(src);
        break;
    default: return err_set(KITE_E_ARG, "kite_grammar_new: unknown kind %d", kind);
    }
    kite_grammar *kg = calloc(1, sizeof *kg);
    const vocab *voc = model->vocab;
    uint32_t n = (uint32_t)vocab_n_tokens(voc);
    const char **tok = calloc(n ? n : 1, sizeof *tok);
    uint32_t *lens = calloc(n ? n : 1, sizeof *lens);
    if (!kg || !tok || !lens) {
        rc = err_set(KITE_E_NOMEM, "kite_grammar_new: out of memory");
        goto done;
    }
    if ((rc = grammar_parse(src, src_len, NULL, &kg->g))) goto done;
    for (uint32_t t = 0; t < n; t++) {
        char buf[8];
        int l = vocab_token_to_piece(voc, (kite_token)t, &tok[t], buf);
        /* pieces live in the vocabulary (buf is unused by it); unknown tokens render as a
         * placeholder that is not text the model meant, so they are left out like control ones */
        lens[t] = l > 0 && voc->types[t] != VOCAB_TT_UNKNOWN ? (uint32_t)l : 0;
    }
    if ((rc = grammar_vocab_new(tok, lens, n, &kg->gv))) goto done;
    if ((rc = grammar_mask_cache_new(kg->g, kg->gv, NULL, &kg->cache))) goto done;
    kg->n_vocab = (int32_t)n;
    kg->vocab = voc;
done:
    free(tok);
    free(lens);
    free(gbnf);
    if (rc) {
        kite_grammar_free(kg);
        return rc;
    }
    *out = kg;
    return KITE_OK;
}

int kite_grammar_new_lazy(const kite_model *model, int kind, const char *text, size_t len,
                          const kite_grammar_trigger *triggers, size_t n_triggers, kite_grammar **out) {
    if (!triggers || !n_triggers || n_triggers > 256 || !out)
        return err_set(KITE_E_ARG, "kite_grammar_new_lazy: 1..256 triggers are required");
    for (size_t i = 0; i < n_triggers; i++) {
        size_t l = triggers[i].text ? strlen(triggers[i].text) : 0;
        if (!l || l > KITE_GRAMMAR_TRIGGER_MAX)
            return err_set(KITE_E_ARG, "kite_grammar_new_lazy: trigger %zu: its text must have 1..%d bytes", i,
                           KITE_GRAMMAR_TRIGGER_MAX);
    }
    kite_grammar *kg = NULL;
    int rc = kite_grammar_new(model, kind, text, len, &kg);
    if (rc) return rc;
    kg->trig = malloc(n_triggers * sizeof *kg->trig);
    kg->trig_len = malloc(n_triggers * sizeof *kg->trig_len);
    kg->trig_start = malloc(n_triggers * sizeof *kg->trig_start);
    if (!kg->trig || !kg->trig_len || !kg->trig_start) {
        kite_grammar_free(kg);
        return err_set(KITE_E_NOMEM, "kite_grammar_new_lazy: out of memory");
    }
    for (size_t i = 0; i < n_triggers; i++) {
        kg->trig_len[i] = (uint32_t)strlen(triggers[i].text);
        memcpy(kg->trig[i], triggers[i].text, kg->trig_len[i]);
        kg->trig_start[i] = triggers[i].at_start;
    }
    kg->n_trig = (uint32_t)n_triggers;
    *out = kg;
    return KITE_OK;
}

void kite_grammar_free(kite_grammar *kg) {
    if (!kg) return;
    free(kg->trig);
    free(kg->trig_len);
    free(kg->trig_start);
    grammar_mask_cache_free(kg->cache);
    grammar_vocab_free(kg->gv);
    grammar_free(kg->g);
    free(kg);
}
