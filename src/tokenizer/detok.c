/*
 * detok.c - streaming detokenizer (kite_detok_push/flush/free; the model-level
 * constructor kite_detok_new is in model/tokens.c, so this folder never sees
 * a kite_model).
 *
 * DESIGN
 *   Each push appends the decoded piece of one token (vocab_token_to_piece)
 *   to the bytes held back from earlier pushes and emits the longest prefix
 *   made of whole characters:
 *     - a well-formed UTF-8 character is copied;
 *     - an ill-formed sequence is replaced by one U+FFFD per maximal subpart
 *       (Unicode's "substitution of maximal subparts"), as soon as it is seen
 *       to be ill-formed, so bad bytes are never held;
 *     - a well-formed but incomplete tail (at most 3 bytes) is held back until
 *       the next push; flush turns it into one U+FFFD.
 *   Byte-fallback tokens (<0xE4><0xBD><0xA0>) therefore come out as one
 *   character.  The SentencePiece dummy prefix: when the previous token was
 *   BOS and this token's piece is text starting with ' ', that space is
 *   dropped (llama2.c run.c; a byte token <0x20> is kept).  Byte-level BPE
 *   ("gpt2") has no dummy prefix: its pieces (GPT-2 characters already
 *   mapped back to bytes by the vocab) pass through unchanged.
 *
 *   No allocation per token: the two scratch buffers are sized at creation
 *   from the longest decoded piece.
 *
 * INVARIANTS
 *   n_pend <= 3 and pend[0..n_pend) is a well-formed proper prefix of a
 *   character; every byte string returned is well-formed UTF-8.
 *
 * THREAD SAFETY
 *   One thread at a time per kite_detok; the vocab is only read.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/vocab_internal.h"

struct kite_detok {
    const vocab *v;   /* borrowed */
    uint8_t pend[4];  /* held-back bytes of an incomplete character */
    size_t n_pend;
    bool after_bos;   /* previous token was BOS: strip one leading space */
    uint8_t *in;      /* [in_cap] pend + piece */
    size_t in_cap;
    char *res;        /* [3 * in_cap] the text to emit */
};

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

int vocab_detok_new(const vocab *v, kite_detok **out) {
    if (!v || !out) return err_set(KITE_E_ARG, "kite_detok_new: NULL argument");
    kite_detok *d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    d->v = v;
    d->in_cap = d->v->max_dec_len + 4;
    d->in = malloc(d->in_cap);
    d->res = malloc(3 * d->in_cap);
    if (!d->in || !d->res) goto nomem;
    *out = d;
    return KITE_OK;
nomem:
    kite_detok_free(d);
    return err_set(KITE_E_NOMEM, "kite_detok_new: out of memory");
}

/* A push emits at most 3 bytes (U+FFFD) per input byte of in[0..in_cap). */
size_t vocab_detok_out_cap(const kite_detok *d) { return 3 * d->in_cap + 1; }

void kite_detok_free(kite_detok *d) {
    if (!d) return;
    free(d->res);
    free(d->in);
    free(d);
}

/* Commits res[0..n) to out if it fits (state untouched otherwise). */
static int deliver(const char *res, size_t n, char *out, size_t cap) {
    if (n + 1 > cap)
        return err_set(KITE_E_RANGE, "kite_detok: output buffer of %zu bytes is too small (need %zu)", cap, n + 1);
    memcpy(out, res, n);
    out[n] = '\0';
    return (int)n;
}

int kite_detok_push(kite_detok *d, kite_token t, char *out, size_t cap) {
    if (!d || !out || cap == 0) return err_set(KITE_E_ARG, "kite_detok_push: NULL argument or cap 0");
    const vocab *v = d->v;
    const char *piece;
    int plen = vocab_token_to_piece(v, t, &piece, NULL);
    if (plen < 0) return plen;
    size_t skip = d->after_bos && v->model == VOCAB_MODEL_SPM && plen > 0 && piece[0] == ' ' && v->types[t] != VOCAB_TT_BYTE ? 1 : 0;

    size_t m = d->n_pend;
    memcpy(d->in, d->pend, m);
    memcpy(d->in + m, piece + skip, (size_t)plen - skip);
    m += (size_t)plen - skip;

    size_t r = 0, i = 0, keep = 0;
    while (i < m) {
        size_t l;
        int s = utf8_check(d->in + i, m - i, &l);
        if (s == UTF8_OK) {
            memcpy(d->res + r, d->in + i, l);
            r += l;
        } else if (s == UTF8_BAD) {
            memcpy(d->res + r, replacement, 3);
            r += 3;
        } else { /* UTF8_SHORT: the rest is an incomplete character */
            keep = l;
            break;
        }
        i += l;
    }
    int rc = deliver(d->res, r, out, cap);
    if (rc < 0) return rc;
    memcpy(d->pend, d->in + i, keep);
    d->n_pend = keep;
    d->after_bos = t == v->bos;
    return rc;
}

int kite_detok_flush(kite_detok *d, char *out, size_t cap) {
    if (!d || !out || cap == 0) return err_set(KITE_E_ARG, "kite_detok_flush: NULL argument or cap 0");
    int rc = deliver(replacement, d->n_pend ? 3 : 0, out, cap);
    if (rc < 0) return rc;
    d->n_pend = 0;
    d->after_bos = false;
    return rc;
}
