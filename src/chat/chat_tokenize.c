/*
 * chat_tokenize.c - special-token-aware tokenization of chat prompts (see
 * chat_tokenize.h for the contract).
 *
 * DESIGN
 *   The special token texts are kept in one array sorted by first byte, then
 *   by length (longest first), then by id; first[c]..first[c+1] is the run
 *   that starts with byte c.  Matching at a position tries that run in order,
 *   so the first hit is the longest special there.  Text between specials
 *   goes to kite_tokenize piece by piece (no BOS); BOS comes from tokenizing
 *   the empty text with add_bos, so kite_tokenize's rule (vocabulary has a
 *   BOS, tokenizer.ggml.add_bos_token) decides.
 *
 * COST
 *   Matching: O(len * k) byte compares where k is the number of specials
 *   sharing a first byte (all of them start with '<' or '[' in practice:
 *   256 for Llama 3, about 26 for Qwen3), each compare stopping at the first
 *   differing byte.  Encoding: kite_tokenize's cost on each piece.
 */
#include "chat/chat_tokenize.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

typedef struct special {
    const char *text; /* points into the GGUF image, not NUL-terminated */
    size_t len;       /* bytes, > 0 */
    kite_token id;
} special;

struct chat_tokenizer {
    const kite_model *model; /* borrowed */
    special *sp;             /* [n_sp] sorted: first byte, longer first, lower id first */
    size_t n_sp;
    size_t first[257];       /* sp[first[c] .. first[c+1]) start with byte c */
};

/* Token types of tokenizer.ggml.token_type matched in text. */
enum { TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4 };

static int special_cmp(const void *pa, const void *pb) {
    const special *a = pa, *b = pb;
    unsigned char ca = (unsigned char)a->text[0], cb = (unsigned char)b->text[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int chat_tokenizer_new(const kite_model *model, chat_tokenizer **out) {
    if (!model || !model->gguf || !out) return err_set(KITE_E_ARG, "chat_tokenizer_new: NULL argument");
    const gguf_ctx *g = model->gguf;
    gguf_array toks, types;
    int rc = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks);
    if (rc != KITE_OK) return rc;
    bool have_types = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types) == KITE_OK;
    err_clear();
    if (have_types && types.n != toks.n)
        return err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries, tokens %llu", g->path,
                       (unsigned long long)types.n, (unsigned long long)toks.n);
    chat_tokenizer *ct = calloc(1, sizeof *ct);
    if (!ct) return err_set(KITE_E_NOMEM, "chat_tokenizer_new: out of memory");
    ct->model = model;
    const gguf_str *pieces = toks.data;
    const int32_t *tt = have_types ? types.data : NULL;
    const kite_token bos = kite_token_bos(model), eos = kite_token_eos(model);
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        n = 0;
        for (uint64_t i = 0; i < toks.n; i++) {
            bool is_sp = tt ? (tt[i] == TT_CONTROL || tt[i] == TT_USER_DEFINED || tt[i] == TT_UNKNOWN)
                            : ((kite_token)i == bos || (kite_token)i == eos);
            if (!is_sp || pieces[i].len == 0) continue;
            if (pass == 1) ct->sp[n] = (special){pieces[i].ptr, (size_t)pieces[i].len, (kite_token)i};
            n++;
        }
        if (pass == 0 && n && !(ct->sp = malloc(n * sizeof *ct->sp))) {
            free(ct);
            return err_set(KITE_E_NOMEM, "chat_tokenizer_new: out of memory");
        }
    }
    ct->n_sp = n;
    if (n) qsort(ct->sp, n, sizeof *ct->sp, special_cmp);
    size_t k = 0;
    for (int c = 0; c < 256; c++) {
        ct->first[c] = k;
        while (k < n && (unsigned char)ct->sp[k].text[0] == c) k++;
    }
    ct->first[256] = n;
    *out = ct;
    return KITE_OK;
}

void chat_tokenizer_free(chat_tokenizer *ct) {
    if (!ct) return;
    free(ct->sp);
    free(ct);
}

size_t chat_tokenizer_n_special(const chat_tokenizer *ct) { return ct ? ct->n_sp : 0; }

size_t chat_tokenizer_max_special_len(const chat_tokenizer *ct) {
    size_t m = 0;
    for (size_t i = 0; ct && i < ct->n_sp; i++)
        if (ct->sp[i].len > m) m = ct->sp[i].len;
    return m;
}

/* The longest special token starting at text[0] (len bytes left), or NULL. */
static const special *match_at(const chat_tokenizer *ct, const char *text, size_t len) {
    unsigned char c = (unsigned char)text[0];
    for (size_t k = ct->first[c]; k < ct->first[c + 1]; k++) {
        const special *s = &ct->sp[k];
        if (s->len <= len && !memcmp(s->text, text, s->len)) return s;
    }
    return NULL;
}

kite_token chat_tokenizer_special_id(const chat_tokenizer *ct, const char *s) {
    if (!ct || !s || !*s) return -1;
    size_t len = strlen(s);
    const special *m = match_at(ct, s, len);
    return m && m->len == len ? m->id : -1;
}

/* Appends the tokens of text[0..len) (no BOS) at out[*n..], counting past cap. */
static int encode_piece(const chat_tokenizer *ct, const char *text, size_t len, kite_token *out, size_t cap,
                        size_t *n) {
    size_t got = 0;
    kite_token *dst = *n < cap ? out + *n : NULL;
    size_t room = *n < cap ? cap - *n : 0;
    int rc = kite_tokenize(ct->model, text, len, false, dst, room, &got);
    if (rc != KITE_OK && rc != KITE_E_RANGE) return rc;
    *n += got;
    return KITE_OK;
}

int chat_tokenize(const chat_tokenizer *ct, const char *text, size_t len, bool add_bos, kite_token *out,
                  size_t cap, size_t *n_out) {
    if (!ct || !n_out || (!text && len) || (!out && cap))
        return err_set(KITE_E_ARG, "chat_tokenize: NULL argument");
    size_t n = 0;
    int rc;
    if (add_bos) { /* the empty text with add_bos: BOS or nothing, as kite_tokenize decides */
        rc = kite_tokenize(ct->model, "", 0, true, out, cap, &n);
        if (rc != KITE_OK && rc != KITE_E_RANGE) return rc;
    }
    size_t start = 0; /* start of the pending plain text */
    for (size_t i = 0; i < len;) {
        const special *s = ct->n_sp ? match_at(ct, text + i, len - i) : NULL;
        if (!s) {
            i++;
            continue;
        }
        if (i > start && (rc = encode_piece(ct, text + start, i - start, out, cap, &n)) != KITE_OK) return rc;
        if (n < cap) out[n] = s->id;
        n++;
        i += s->len;
        start = i;
    }
    if (len > start && (rc = encode_piece(ct, text + start, len - start, out, cap, &n)) != KITE_OK) return rc;
    *n_out = n;
    if (n > cap)
        return err_set(KITE_E_RANGE, "chat_tokenize: %zu tokens do not fit in a buffer of %zu", n, cap);
    return KITE_OK;
}
