/*
 * fuzz_tokenizer_bpe.c - libFuzzer target for the byte-level BPE tokenizer.
 * The first input byte picks the vocabulary (GPT-2, Llama 3 or Qwen3, i.e.
 * the gpt-2, llama-bpe and qwen2 pre-tokenizers); the rest is the text.
 * Invariants:
 *
 *   1. kite_tokenize succeeds, every id is in range and none is a control or
 *      unknown token (all 256 bytes have a token); the count reported with a
 *      buffer one too small is the same and gives KITE_E_RANGE.
 *   2. the concatenated token_to_piece equals the text byte for byte, or its
 *      NFC form for Qwen (ill-formed bytes are kept as they are).
 *   3. the streaming detok emits only well-formed UTF-8, every chunk on its
 *      own, and the whole equals (2) with each ill-formed subsequence replaced
 *      by U+FFFD.
 *
 * The vocabularies are loaded once from tests/data/tokenizer/ (run from the
 * repository root).  test_tokenizer_bpe.c includes this file to replay
 * tests/fuzz/corpus/fuzz_tokenizer_bpe/ and hands it its loaded vocabularies
 * with fuzz_bpe_use().
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
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"
#include "tokenizer_checks.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_BPE_N 3
static const kite_model *fuzz_bpe_models[FUZZ_BPE_N];
static struct kite_model fuzz_bpe_own[FUZZ_BPE_N];
static gguf_ctx *fuzz_bpe_gguf[FUZZ_BPE_N];

#define FUZZ_BPE_REQUIRE(cond) FUZZ_REQUIRE("fuzz_tokenizer_bpe", cond)

/* Uses already loaded vocabularies (the unit test's) instead of loading. */
static void fuzz_bpe_use(const kite_model *a, const kite_model *b, const kite_model *c) {
    fuzz_bpe_models[0] = a;
    fuzz_bpe_models[1] = b;
    fuzz_bpe_models[2] = c;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const char *const paths[FUZZ_BPE_N] = {"tests/data/tokenizer/vocab-qwen3.gguf",
                                                 "tests/data/tokenizer/vocab-llama3.gguf",
                                                 "tests/data/tokenizer/vocab-gpt2.gguf"};
    for (int k = 0; k < FUZZ_BPE_N; k++) {
        if (fuzz_bpe_models[k]) continue;
        if (gguf_open(paths[k], NULL, &fuzz_bpe_gguf[k]) != KITE_OK ||
            vocab_load_gguf(fuzz_bpe_gguf[k], &fuzz_bpe_own[k].vocab) != KITE_OK) {
            fprintf(stderr, "fuzz_tokenizer_bpe: cannot load %s: %s\n", paths[k], kite_last_error());
            abort();
        }
        fuzz_bpe_models[k] = &fuzz_bpe_own[k];
    }
    return 0;
}

/* got == want byte for byte, or - for an NFC vocabulary - NFC(got) == want
 * (want is already in NFC). */
static bool fuzz_bpe_same_text(const vocab *v, const char *got, size_t glen, const char *want, size_t wlen) {
    if (glen == wlen && memcmp(got, want, wlen) == 0) return true;
    if (!v->nfc) return false;
    char *norm = NULL;
    size_t nlen = 0;
    bool same = unicode_nfc(got, glen, &norm, &nlen) == KITE_OK && nlen == wlen && memcmp(norm, want, wlen) == 0;
    free(norm);
    return same;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 1 << 14) return 0;
    if (!fuzz_bpe_models[data[0] % FUZZ_BPE_N]) LLVMFuzzerInitialize(NULL, NULL);
    const kite_model *m = fuzz_bpe_models[data[0] % FUZZ_BPE_N];
    const vocab *v = m->vocab;
    const char *text = (const char *)data + 1;
    size = size - 1;

    /* expected text: the input, NFC'd when the vocabulary normalises */
    char *exp = NULL;
    size_t elen = size;
    if (v->nfc) {
        FUZZ_BPE_REQUIRE(unicode_nfc(text, size, &exp, &elen) == KITE_OK);
    } else {
        exp = malloc(size + 1);
        FUZZ_BPE_REQUIRE(exp);
        memcpy(exp, text, size);
    }

    /* 1. encode */
    size_t cap = elen + 8, n = 0;
    kite_token *ids = malloc(cap * sizeof *ids);
    char *dec = malloc(3 * elen + 16), *want = malloc(3 * elen + 1), *str = malloc(3 * elen + 16);
    size_t chunk_cap = 3 * (v->max_dec_len + 4) + 1;
    char *chunk = malloc(chunk_cap);
    FUZZ_BPE_REQUIRE(ids && dec && want && str && chunk);
    n = fuzz_check_encode("fuzz_tokenizer_bpe", m, text, size, ids, cap);

    /* 2. pieces.  With NFC the decoded text need only be canonically
     * equivalent to the input: added tokens are matched before normalisation
     * (as Hugging Face does), so a combining mark right after one, e.g.
     * "<tool_response>" U+0338, is not composed with the token's last
     * character; NFC of the decoded text then equals NFC of the input. */
    size_t d = fuzz_check_pieces("fuzz_tokenizer_bpe", m, ids, n, dec, 3 * elen + 16);
    FUZZ_BPE_REQUIRE(fuzz_bpe_same_text(v, dec, d, exp, elen));

    /* 3. streaming detok */
    size_t s = fuzz_check_detok("fuzz_tokenizer_bpe", m, ids, n, false, chunk, chunk_cap, str, 3 * elen + 16);
    size_t w = fuzz_sanitize((const uint8_t *)exp, elen, want);
    FUZZ_BPE_REQUIRE(fuzz_bpe_same_text(v, str, s, want, w));

    free(chunk);
    free(str);
    free(want);
    free(dec);
    free(ids);
    free(exp);
    return 0;
}
