/*
 * fuzz_grammar.c - libFuzzer target for the GBNF parser and the matcher.
 *
 * Input: GBNF text, optionally followed by a NUL byte and bytes to feed.
 * Invariants:
 *   1. grammar_parse() succeeds or returns a negative status whose message
 *      starts with "grammar" (it names line:column or the limit);
 *   2. on success, a matcher (small caps, so a step stays cheap) is created
 *      or fails with KITE_E_RANGE;
 *   3. before each fed chunk (at most 3 bytes, at most 12 chunks), the token
 *      mask over a small vocabulary (every single byte, some multi-byte
 *      strings and partial UTF-8 characters) equals the brute-force answer:
 *      clone the matcher, accept the token's bytes, see if it survives;
 *   4. a rejected chunk leaves the state unchanged (the mask is the same).
 * Seeds: tests/fuzz/corpus/fuzz_grammar/.  test_grammar.c includes this file
 * to replay the corpus as a regression test.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "kite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_G_REQUIRE(cond)                                                                      \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "fuzz_grammar: invariant failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

#define FUZZ_G_MULTI 14
static const char *const fuzz_g_multi[FUZZ_G_MULTI] = {
    "ab", "true", "null", "\"a\"", "12", "{\"", "\xCE\xB1", "\xCE", "\xB1",
    "\xE6\x97\xA5", "\xE6\x97", "\xF0\x9F\x98\x80", "\xF0\x9F", " \n",
};

static grammar_vocab *fuzz_g_vocab(const char **tok, uint32_t *len) {
    static char bytes[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        tok[i] = &bytes[i];
        len[i] = 1;
    }
    for (int i = 0; i < FUZZ_G_MULTI; i++) {
        tok[256 + i] = fuzz_g_multi[i];
        len[256 + i] = (uint32_t)strlen(fuzz_g_multi[i]);
    }
    grammar_vocab *v = NULL;
    FUZZ_G_REQUIRE(grammar_vocab_new(tok, len, 256 + FUZZ_G_MULTI, &v) == KITE_OK);
    return v;
}

/* 1: mask computed and equal to brute force (and the cached masks at key depths 1 and 8
 * equal to it); 0: a cap was hit (skipped). */
static int fuzz_g_check_mask(grammar_matcher *m, const grammar_vocab *v, grammar_mask_cache *const *fz_caches,
                             const char **tok, const uint32_t *len, uint32_t *mask) {
    uint32_t n = grammar_vocab_n_tokens(v);
    int rc = grammar_matcher_fill_mask(m, v, mask);
    if (rc == KITE_E_RANGE) return 0;
    FUZZ_G_REQUIRE(rc == KITE_OK);
    for (int i = 0; i < 2; i++) {
        uint32_t cm[(256 + FUZZ_G_MULTI + 31) / 32];
        rc = grammar_matcher_fill_mask_cached(m, fz_caches[i], cm);
        if (rc == KITE_E_RANGE) return 0;
        FUZZ_G_REQUIRE(rc == KITE_OK);
        FUZZ_G_REQUIRE(memcmp(cm, mask, (n + 31) / 32 * sizeof *cm) == 0);
    }
    for (uint32_t t = 0; t < n; t++) {
        grammar_matcher *c = NULL;
        FUZZ_G_REQUIRE(grammar_matcher_clone(m, &c) == KITE_OK);
        int a = grammar_matcher_accept_bytes(c, tok[t], len[t]);
        grammar_matcher_free(c);
        if (a == KITE_E_RANGE) return 0;
        FUZZ_G_REQUIRE(a == KITE_OK || a == KITE_E_STATE);
        int bit = (int)((mask[t >> 5] >> (t & 31)) & 1u);
        FUZZ_G_REQUIRE(bit == (a == KITE_OK));
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    grammar *g = NULL;
    int rc = grammar_parse((const char *)data, glen, NULL, &g);
    if (rc != KITE_OK) {
        FUZZ_G_REQUIRE(rc < 0 && g == NULL);
        FUZZ_G_REQUIRE(strncmp(kite_last_error(), "grammar", 7) == 0);
        return 0;
    }
    grammar_matcher_params prm = grammar_matcher_default_params();
    prm.max_stacks = 64;
    prm.max_nodes = 1u << 14;
    prm.max_expand = 4096;
    grammar_matcher *m = NULL;
    rc = grammar_matcher_new(g, &prm, &m);
    if (rc != KITE_OK) {
        FUZZ_G_REQUIRE(rc == KITE_E_RANGE);
        grammar_free(g);
        return 0;
    }
    const char *tok[256 + FUZZ_G_MULTI];
    uint32_t len[256 + FUZZ_G_MULTI];
    grammar_vocab *v = fuzz_g_vocab(tok, len);
    grammar_mask_cache *fz_caches[2] = {NULL, NULL};
    grammar_mask_cache_params cp = grammar_mask_cache_default_params();
    cp.depth = 1;
    FUZZ_G_REQUIRE(grammar_mask_cache_new(g, v, &cp, &fz_caches[0]) == KITE_OK);
    FUZZ_G_REQUIRE(grammar_mask_cache_new(g, v, NULL, &fz_caches[1]) == KITE_OK);
    uint32_t mask[(256 + FUZZ_G_MULTI + 31) / 32], again[(256 + FUZZ_G_MULTI + 31) / 32];
    const uint8_t *in = nul ? nul + 1 : data + size;
    size_t n_in = nul ? size - glen - 1 : 0;
    for (int step = 0; step < 12; step++) {
        int have = fuzz_g_check_mask(m, v, fz_caches, tok, len, mask);
        if (!n_in) break;
        size_t chunk = n_in < 3 ? n_in : (size_t)(in[0] % 3) + 1;
        if (chunk > n_in) chunk = n_in;
        rc = grammar_matcher_accept_bytes(m, in, chunk);
        FUZZ_G_REQUIRE(rc == KITE_OK || rc == KITE_E_STATE || rc == KITE_E_RANGE);
        if (rc != KITE_OK) {
            if (have && grammar_matcher_fill_mask(m, v, again) == KITE_OK)
                FUZZ_G_REQUIRE(memcmp(mask, again, sizeof mask) == 0);
            break;
        }
        in += chunk;
        n_in -= chunk;
    }
    grammar_mask_cache_free(fz_caches[0]);
    grammar_mask_cache_free(fz_caches[1]);
    grammar_vocab_free(v);
    grammar_matcher_free(m);
    grammar_free(g);
    return 0;
}
