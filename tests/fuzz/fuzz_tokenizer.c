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
#include "tokenizer_checks.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gguf_ctx *fuzz_tok_gguf;
static struct kite_model fuzz_tok_model;

#define FUZZ_TOK_REQUIRE(cond) FUZZ_REQUIRE("fuzz_tokenizer", cond)

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_tok_model.vocab) LLVMFuzzerInitialize(NULL, NULL);
    const kite_model *m = &fuzz_tok_model;
    if (size > 1 << 16) return 0;

    /* 1. encode */
    size_t cap = 3 * size + 8, n = 0;
    kite_token *ids = malloc(cap * sizeof *ids);
    char *dec = malloc(cap * 4 + 16), *want = malloc(3 * size + 1), *str = malloc(3 * size + 16);
    FUZZ_TOK_REQUIRE(ids && dec && want && str);
    n = fuzz_check_encode("fuzz_tokenizer", m, (const char *)data, size, ids, cap);

    /* 2. pieces */
    size_t d = fuzz_check_pieces("fuzz_tokenizer", m, ids, n, dec, cap * 4 + 16);
    bool exact = !fuzz_tok_has_u2581(data, size);
    if (exact && size > 0) {
        FUZZ_TOK_REQUIRE(d >= 1 && dec[0] == ' ');
        FUZZ_TOK_REQUIRE(d - 1 == size && memcmp(dec + 1, data, size) == 0);
    }

    /* 3. streaming detok, with a buffer just large enough for any piece */
    char chunk[256];
    size_t s = fuzz_check_detok("fuzz_tokenizer", m, ids, n, true, chunk, sizeof chunk, str, 3 * size + 16);
    if (exact) {
        size_t w = fuzz_sanitize(data, size, want);
        FUZZ_TOK_REQUIRE(s == w && memcmp(str, want, w) == 0);
    }

    free(str);
    free(want);
    free(dec);
    free(ids);
    return 0;
}
