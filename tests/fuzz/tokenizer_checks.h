/*
 * tokenizer_checks.h - the invariant checks shared by the tokenizer fuzz
 * targets (fuzz_tokenizer.c for SentencePiece, fuzz_tokenizer_bpe.c for
 * byte-level BPE): encode succeeds with valid ids and a consistent count,
 * pieces concatenate, and the streaming detok emits well-formed UTF-8.
 *
 * Design: static inline functions; a failed invariant prints the target's
 * name, the condition and the line, then abort()s (what libFuzzer wants).
 * Buffers are the caller's.  No global state.
 */
#ifndef KITE_FUZZ_TOKENIZER_CHECKS_H
#define KITE_FUZZ_TOKENIZER_CHECKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite.h"
#include "model/model.h"
#include "tokenizer/vocab_internal.h"

/* Aborts with "who: invariant failed: cond (line N)" unless cond holds. */
#define FUZZ_REQUIRE(who, cond)                                                             \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s: invariant failed: %s (line %d)\n", who, #cond, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static inline bool fuzz_valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l;
        if (utf8_check((const uint8_t *)s + i, n - i, &l) != UTF8_OK) return false;
        i += l;
    }
    return true;
}

/* s with every ill-formed subsequence replaced by U+FFFD; out has 3n+1 bytes. */
static inline size_t fuzz_sanitize(const uint8_t *s, size_t n, char *out) {
    size_t r = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        if (utf8_check(s + i, n - i, &l) == UTF8_OK) {
            memcpy(out + r, s + i, l);
            r += l;
        } else {
            memcpy(out + r, "\xEF\xBF\xBD", 3);
            r += 3;
        }
        i += l;
    }
    return r;
}

/* Invariant 1: encodes text (no BOS) into ids[cap]; returns the count.  It
 * must succeed with every id in range and neither control nor unknown, and a
 * buffer one too small must give KITE_E_RANGE with the same count. */
static inline size_t fuzz_check_encode(const char *who, const kite_model *m, const char *text, size_t size,
                                       kite_token *ids, size_t cap) {
    const vocab *v = m->vocab;
    size_t n = 0;
    int rc = kite_tokenize(m, text, size, false, ids, cap, &n);
    FUZZ_REQUIRE(who, rc == KITE_OK);
    FUZZ_REQUIRE(who, n <= cap);
    for (size_t i = 0; i < n; i++) {
        FUZZ_REQUIRE(who, ids[i] >= 0 && ids[i] < v->n_tokens);
        FUZZ_REQUIRE(who, v->types[ids[i]] != VOCAB_TT_CONTROL && v->types[ids[i]] != VOCAB_TT_UNKNOWN);
    }
    if (size == 0) FUZZ_REQUIRE(who, n == 0);
    size_t n2 = 0;
    FUZZ_REQUIRE(who, n == 0 || kite_tokenize(m, text, size, false, ids, n - 1, &n2) == KITE_E_RANGE);
    FUZZ_REQUIRE(who, n == 0 || n2 == n);
    return n;
}

/* Concatenates token_to_piece of ids[n] into dec[dec_cap]; returns the length.
 * Every id must decode and the pieces must fit. */
static inline size_t fuzz_check_pieces(const char *who, const kite_model *m, const kite_token *ids, size_t n,
                                       char *dec, size_t dec_cap) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        char buf[8];
        int l = kite_token_to_piece(m, ids[i], &p, buf);
        FUZZ_REQUIRE(who, l >= 0 && d + (size_t)l <= dec_cap);
        memcpy(dec + d, p, (size_t)l);
        d += (size_t)l;
    }
    return d;
}

/* Invariant 3: streams (BOS when bos,) ids[n] and a flush through a detok into
 * str[str_cap] using chunk[chunk_cap]; returns the length.  Every chunk must
 * be NUL-terminated well-formed UTF-8 and the whole must fit. */
static inline size_t fuzz_check_detok(const char *who, const kite_model *m, const kite_token *ids, size_t n, bool bos,
                                      char *chunk, size_t chunk_cap, char *str, size_t str_cap) {
    kite_detok *dt;
    FUZZ_REQUIRE(who, kite_detok_new(m, &dt) == KITE_OK);
    size_t s = 0;
    for (size_t i = bos ? 0 : 1; i <= n + 1; i++) {
        int r = i == 0   ? kite_detok_push(dt, kite_token_bos(m), chunk, chunk_cap)
                : i <= n ? kite_detok_push(dt, ids[i - 1], chunk, chunk_cap)
                         : kite_detok_flush(dt, chunk, chunk_cap);
        FUZZ_REQUIRE(who, r >= 0 && chunk[r] == '\0');
        FUZZ_REQUIRE(who, fuzz_valid_utf8(chunk, (size_t)r));
        FUZZ_REQUIRE(who, s + (size_t)r <= str_cap);
        memcpy(str + s, chunk, (size_t)r);
        s += (size_t)r;
    }
    kite_detok_free(dt);
    return s;
}

#endif
