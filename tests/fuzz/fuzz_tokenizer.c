/*
 * fuzz_tokenizer.c - libFuzzer target: encode arbitrary bytes with the Llama 2
 * SentencePiece vocabulary, decode them back and check the invariants:
 *
 *   1. kite_tokenize succeeds (the vocabulary has byte fallback), every id
 *      is in range and none is a control/unknown token; the reported count
 *      equals the count written.
 *   2. concatenated token_to_piece, minus the one dummy-prefix space, equals
 *      the input byte for byte, unless the input contains U+2581 (which the
 *      escaping makes indistinguishable from a space).
 *   3. the streaming detok (BOS, ids, flush) emits only well-formed UTF-8,
 *      every chunk on its own, and the whole equals the input with each
 *      ill-formed subsequence replaced by U+FFFD (same U+2581 exception):
 *      the result does not depend on how characters are split over tokens.
 *
 * The vocabulary is loaded once (LLVMFuzzerInitialize) from
 * $KITE_FUZZ_VOCAB or tests/data/tokenizer/vocab-llama2-spm.gguf (run from
 * the repository root).  test_tokenizer.c includes this file to replay
 * tests/fuzz/corpus/fuzz_tokenizer/ as a regression test.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kite.h"
#include "model/model.h"
#include "tokenizer/vocab_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gguf_ctx *fuzz_tok_gguf;
static struct kite_model fuzz_tok_model;

#define FUZZ_TOK_REQUIRE(cond)                                                              \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_tokenizer: invariant failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (fuzz_tok_model.vocab) return 0;
    const char *path = getenv("KITE_FUZZ_VOCAB");
    if (!path || !*path) path = "tests/data/tokenizer/vocab-llama2-spm.gguf";
    if (gguf_open(path, NULL, &fuzz_tok_gguf) != KITE_OK ||
        vocab_load_gguf(fuzz_tok_gguf, &fuzz_tok_model.vocab) != KITE_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, kite_last_error());
        abort();
    }
    return 0;
}

static bool fuzz_tok_has_u2581(const uint8_t *s, size_t n) {
    for (size_t i = 0; i + 2 < n; i++)
        if (s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) return true;
    return false;
}

static bool fuzz_tok_valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l;
        if (utf8_check((const uint8_t *)s + i, n - i, &l) != UTF8_OK) return false;
        i += l;
    }
    return true;
}

/* s with every ill-formed subsequence replaced by U+FFFD; out has 3n+1 bytes. */
static size_t fuzz_tok_sanitize(const uint8_t *s, size_t n, char *out) {
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_tok_model.vocab) LLVMFuzzerInitialize(NULL, NULL);
    const kite_model *m = &fuzz_tok_model;
    const vocab *v = m->vocab;
    if (size > 1 << 16) return 0;

    /* 1. encode */
    size_t cap = 3 * size + 8, n = 0;
    kite_token *ids = malloc(cap * sizeof *ids);
    char *dec = malloc(cap * 4 + 16), *want = malloc(3 * size + 1), *str = malloc(3 * size + 16);
    FUZZ_TOK_REQUIRE(ids && dec && want && str);
    int rc = kite_tokenize(m, (const char *)data, size, false, ids, cap, &n);
    FUZZ_TOK_REQUIRE(rc == KITE_OK);
    FUZZ_TOK_REQUIRE(n <= cap);
    for (size_t i = 0; i < n; i++) {
        FUZZ_TOK_REQUIRE(ids[i] >= 0 && ids[i] < v->n_tokens);
        FUZZ_TOK_REQUIRE(v->types[ids[i]] != VOCAB_TT_CONTROL && v->types[ids[i]] != VOCAB_TT_UNKNOWN);
    }
    if (size == 0) FUZZ_TOK_REQUIRE(n == 0);
    size_t n2 = 0;
    FUZZ_TOK_REQUIRE(n == 0 || kite_tokenize(m, (const char *)data, size, false, ids, n - 1, &n2) == KITE_E_RANGE);
    FUZZ_TOK_REQUIRE(n == 0 || n2 == n);

    /* 2. pieces */
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        char buf[8];
        int l = kite_token_to_piece(m, ids[i], &p, buf);
        FUZZ_TOK_REQUIRE(l >= 0);
        memcpy(dec + d, p, (size_t)l);
        d += (size_t)l;
    }
    bool exact = !fuzz_tok_has_u2581(data, size);
    if (exact && size > 0) {
        FUZZ_TOK_REQUIRE(d >= 1 && dec[0] == ' ');
        FUZZ_TOK_REQUIRE(d - 1 == size && memcmp(dec + 1, data, size) == 0);
    }

    /* 3. streaming detok, with a buffer just large enough for any piece */
    kite_detok *dt;
    FUZZ_TOK_REQUIRE(kite_detok_new(m, &dt) == KITE_OK);
    char chunk[256];
    size_t s = 0;
    for (size_t i = 0; i <= n + 1; i++) {
        int r = i == 0 ? kite_detok_push(dt, kite_token_bos(m), chunk, sizeof chunk)
                : i <= n ? kite_detok_push(dt, ids[i - 1], chunk, sizeof chunk)
                         : kite_detok_flush(dt, chunk, sizeof chunk);
        FUZZ_TOK_REQUIRE(r >= 0 && chunk[r] == '\0');
        FUZZ_TOK_REQUIRE(fuzz_tok_valid_utf8(chunk, (size_t)r));
        FUZZ_TOK_REQUIRE(s + (size_t)r <= 3 * size + 16);
        memcpy(str + s, chunk, (size_t)r);
        s += (size_t)r;
    }
    kite_detok_free(dt);
    if (exact) {
        size_t w = fuzz_tok_sanitize(data, size, want);
        FUZZ_TOK_REQUIRE(s == w && memcmp(str, want, w) == 0);
    }

    free(str);
    free(want);
    free(dec);
    free(ids);
    return 0;
}
