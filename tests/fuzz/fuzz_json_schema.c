/*
 * fuzz_json_schema.c - libFuzzer target for the JSON Schema to GBNF converter.
 *
 * Input: schema text, optionally followed by a NUL byte and a document to feed.
 * Invariants:
 *   1. grammar_json_schema_to_gbnf() succeeds or returns a negative status whose
 *      message starts with "json_schema" (it names the keyword or byte offset);
 *   2. on success the GBNF it wrote compiles (grammar_parse: KITE_OK, or
 *      KITE_E_RANGE for a grammar past the compile limits): the converter never
 *      writes text its own parser rejects;
 *   3. the document is fed to a matcher of that grammar without a broken invariant.
 * Seeds: tests/fuzz/corpus/fuzz_json_schema/, replayed by test_json_schema.c.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "kite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_JS_REQUIRE(cond)                                                                          \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "fuzz_json_schema: invariant failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                                   \
        }                                                                                              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    char *gbnf = NULL;
    int rc = grammar_json_schema_to_gbnf((const char *)data, slen, &gbnf);
    if (rc != KITE_OK) {
        FUZZ_JS_REQUIRE(rc < 0 && gbnf == NULL);
        FUZZ_JS_REQUIRE(strncmp(kite_last_error(), "json_schema", 11) == 0);
        return 0;
    }
    FUZZ_JS_REQUIRE(gbnf != NULL);
    grammar *g = NULL;
    rc = grammar_parse(gbnf, strlen(gbnf), NULL, &g);
    if (rc != KITE_OK) fprintf(stderr, "fuzz_json_schema: %s\n%s\n", kite_last_error(), gbnf);
    FUZZ_JS_REQUIRE(rc == KITE_OK || rc == KITE_E_RANGE);
    if (g && nul) {
        grammar_matcher_params prm = grammar_matcher_default_params();
        prm.max_stacks = 64;
        prm.max_nodes = 1u << 14;
        prm.max_expand = 4096;
        grammar_matcher *m = NULL;
        rc = grammar_matcher_new(g, &prm, &m);
        FUZZ_JS_REQUIRE(rc == KITE_OK || rc == KITE_E_RANGE);
        if (m) {
            rc = grammar_matcher_accept_bytes(m, nul + 1, size - slen - 1);
            FUZZ_JS_REQUIRE(rc == KITE_OK || rc == KITE_E_STATE || rc == KITE_E_RANGE);
        }
        grammar_matcher_free(m);
    }
    grammar_free(g);
    free(gbnf);
    return 0;
}
