/*
 * test_json_schema.c - JSON Schema to GBNF (src/grammar/json_schema.c, docs/grammar.md).
 *
 * Each schema is converted, compiled and run on documents it must accept and documents it
 * must reject (missing required properties, unknown keys, item counts out of bounds, enum
 * and const misses, integers outside ranges, every integer of a window against the bounds,
 * lengths, formats, recursion through $ref); unsupported keywords and bad input give the
 * status and a message naming the keyword and its JSON pointer; the fuzz corpus replayed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "harness.h"
#include "kite.h"

static grammar *schema_grammar(const char *schema) {
    char *gbnf = NULL;
    int rc = grammar_json_schema_to_gbnf(schema, strlen(schema), &gbnf);
    CHECK_MSG(rc == KITE_OK, "convert failed (%d): %s: %s", rc, kite_last_error(), schema);
    if (rc) return NULL;
    grammar *g = NULL;
    rc = grammar_parse(gbnf, strlen(gbnf), NULL, &g);
    CHECK_MSG(rc == KITE_OK, "GBNF does not compile (%d): %s\n%s", rc, kite_last_error(), gbnf);
    free(gbnf);
    return g;
}

/* 1: accepted and complete; 0: not. */
static int accepts(const grammar *g, const char *doc) {
    grammar_matcher *m = NULL;
    if (!g || grammar_matcher_new(g, NULL, &m) != KITE_OK) return -1;
    int ok = grammar_matcher_accept_bytes(m, doc, strlen(doc)) == KITE_OK && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

#define YES(g, d) CHECK_MSG(accepts(g, d) == 1, "expected accepted: %s", d)
#define NO(g, d) CHECK_MSG(accepts(g, d) == 0, "expected rejected: %s", d)

TEST(object_properties) {
    grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                                "\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"}},"
                                "\"required\":[\"name\",\"ok\"]}");
    YES(g, "{\"name\":\"Ada\",\"ok\":true}");
    YES(g, "{\"name\":\"Ada\",\"age\":36,\"ok\":false}");
    YES(g, "{ \"name\" : \"A\\\"da\" ,\n  \"ok\" : true }");
    NO(g, "{\"name\":\"Ada\"}");              /* ok is required */
    NO(g, "{\"ok\":true}");                   /* name is required */
    NO(g, "{\"name\":\"Ada\",\"ok\":true,}"); /* trailing comma */
    NO(g, "{\"name\":\"Ada\",\"ok\":true,\"x\":1}"); /* additionalProperties false when properties are given */
    NO(g, "{\"name\":\"Ada\",\"age\":3.5,\"ok\":true}");
    NO(g, "{\"name\":\"Ada\",\"ok\":true} ");  /* nothing after the root */
    grammar_free(g);
    g = schema_grammar("{\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"number\"}}}");
    YES(g, "{}");
    YES(g, "{\"a\":null}");
    YES(g, "{\"b\":-1.5e+3}");
    YES(g, "{\"a\":null,\"b\":0}");
    NO(g, "{,\"b\":0}");
    NO(g, "{\"b\":0,\"a\":null}"); /* properties come in schema order */
    grammar_free(g);
}

TEST(additional_properties) {
    grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
                                "\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"string\"}}");
    YES(g, "{\"id\":1}");
    YES(g, "{\"id\":1,\"x\":\"y\",\"z\":\"w\"}");
    NO(g, "{\"id\":1,\"x\":2}");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"object\"}"); /* any object */
    YES(g, "{}");
    YES(g, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}");
    NO(g, "[]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"object\",\"additionalProperties\":true,\"properties\":{\"k\":{\"const\":1}}}");
    YES(g, "{\"k\":1,\"more\":[true]}");
    YES(g, "{\"more\":false}");
    NO(g, "{\"k\":2}");             /* a declared key is not an extra one */
    NO(g, "{\"k\":1,\"k\":2}");
    YES(g, "{\"k\":1,\"kk\":2,\"\":3,\"j\":4}");
    grammar_free(g);
    g = schema_grammar("{\"properties\":{\"ab\":{\"const\":1},\"a\":{\"const\":2},\"\u00e9t\\u00e9\":{\"const\":3}},"
                       "\"additionalProperties\":{\"type\":\"integer\"}}");
    YES(g, "{\"ab\":1,\"a\":2,\"\xC3\xA9t\xC3\xA9\":3}");
    YES(g, "{\"b\":5,\"abc\":6,\"\xC3\xA9t\":7}");
    NO(g, "{\"a\":5}");
    NO(g, "{\"ab\":5}");
    NO(g, "{\"\xC3\xA9t\xC3\xA9\":5}");
    grammar_free(g);
}

TEST(arrays) {
    grammar *g = schema_grammar("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}");
    YES(g, "[1]");
    YES(g, "[1, 2,3]");
    NO(g, "[]");
    NO(g, "[1,2,3,4]");
    NO(g, "[1,\"a\"]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"maxItems\":0}");
    YES(g, "[]");
    NO(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"minItems\":2}");
    YES(g, "[1,\"x\"]");
    YES(g, "[1,2,3,4,5,6]");
    NO(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}");
    YES(g, "[\"a\",1]");
    NO(g, "[\"a\",1,2]");
    NO(g, "[1,\"a\"]");
    grammar_free(g);
}

TEST(enum_const) {
    grammar *g = schema_grammar("{\"enum\":[\"red\",\"gr\\\"een\",1.5,null,{\"k\":[true]},\"\\u65e5\"]}");
    YES(g, "\"red\"");
    YES(g, "\"gr\\\"een\"");
    YES(g, "1.5");
    YES(g, "null");
    YES(g, "{\"k\":[true]}");
    YES(g, "\"\xE6\x97\xA5\"");
    NO(g, "\"blue\"");
    NO(g, "1");
    grammar_free(g);
    g = schema_grammar("{\"const\":\"only\"}");
    YES(g, "\"only\"");
    NO(g, "\"onl\"");
    grammar_free(g);
}

static void int_window(const char *schema, long long lo, long long hi, long long from, long long to) {
    grammar *g = schema_grammar(schema);
    if (!g) return;
    for (long long v = from; v <= to; v++) {
        char d[32];
        snprintf(d, sizeof d, "%lld", v);
        int want = v >= lo && v <= hi;
        CHECK_MSG(accepts(g, d) == want, "%s: %lld %s", schema, v, want ? "rejected" : "accepted");
    }
    NO(g, "01");
    NO(g, "-0");
    NO(g, "1.0");
    grammar_free(g);
}

TEST(integer_ranges) {
    int_window("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}", -5, 120, -30, 300);
    int_window("{\"type\":\"integer\",\"minimum\":18}", 18, 1000000, -30, 1200);
    int_window("{\"type\":\"integer\",\"exclusiveMinimum\":0}", 1, 1000000, -30, 1200);
    int_window("{\"type\":\"integer\",\"maximum\":-3}", -1000000, -3, -1200, 30);
    int_window("{\"type\":\"integer\",\"minimum\":-250,\"exclusiveMaximum\":-19}", -250, -20, -400, 30);
    int_window("{\"type\":\"integer\",\"minimum\":1000,\"maximum\":1099}", 1000, 1099, 900, 1300);
    int_window("{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7, -10, 30);
    grammar *g = schema_grammar("{\"type\":\"integer\",\"minimum\":0}");
    YES(g, "9999999999999999"); /* 16 digits: the bound of every unbounded number */
    NO(g, "99999999999999999");
    grammar_free(g);
}

TEST(strings_and_formats) {
    grammar *g = schema_grammar("{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}");
    YES(g, "\"ab\"");
    YES(g, "\"\xCE\xB1\xCE\xB2\\n\""); /* lengths count characters, an escape is one */
    YES(g, "\"abcd\"");
    NO(g, "\"a\"");
    NO(g, "\"abcde\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}");
    YES(g, "\"2024-02-29\"");
    NO(g, "\"2024-13-01\"");
    NO(g, "\"2024-1-01\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"date-time\"}");
    YES(g, "\"2024-02-29T23:59:59Z\"");
    YES(g, "\"2024-02-29T08:15:00.123+02:00\"");
    NO(g, "\"2024-02-29 08:15:00Z\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"uuid\"}");
    YES(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    NO(g, "\"123e4567e89b12d3a456426614174000\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"number\",\"minimum\":0}");
    YES(g, "0.5");
    NO(g, "-0.5");
    grammar_free(g);
}

TEST(refs_anyof_types) {
    grammar *g = schema_grammar(
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
        "\"$ref\":\"#/$defs/node\"}");
    YES(g, "{\"v\":1}");
    YES(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3,\"kids\":[{\"v\":4}]}]}");
    NO(g, "{\"v\":1,\"kids\":[{}]}");
    grammar_free(g);
    g = schema_grammar("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}]}");
    YES(g, "[\"a\",[[\"b\"]],[]]");
    NO(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"type\":[\"integer\",\"null\"]}");
    YES(g, "12");
    YES(g, "null");
    NO(g, "true");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"nullable\":true,\"title\":\"t\",\"description\":\"d\"}");
    YES(g, "null");
    YES(g, "\"x\"");
    grammar_free(g);
    g = schema_grammar("{\"definitions\":{\"a b\":{\"enum\":[1,2]}},\"oneOf\":[{\"$ref\":\"#/definitions/a b\"}]}");
    YES(g, "2");
    NO(g, "3");
    grammar_free(g);
    g = schema_grammar("{}");
    YES(g, "[1,{\"a\":\"b\"}]");
    grammar_free(g);
}

TEST(finished_after_root) {
    grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}");
    grammar_matcher *m = NULL;
    if (g && grammar_matcher_new(g, NULL, &m) == KITE_OK) {
        CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "{\"a\": 7}", 8), KITE_OK);
        CHECK(grammar_matcher_is_finished(m)); /* end of generation is the only way on */
    }
    grammar_matcher_free(m);
    grammar_free(g);
    const char *obj = grammar_json_object_gbnf();
    grammar *o = NULL;
    CHECK_EQ_INT(grammar_parse(obj, strlen(obj), NULL, &o), KITE_OK);
    YES(o, "{\"a\":[1,2,{\"b\":\"\\u00e9\"}],\"c\":-0.5e-7}");
    NO(o, "[1]");
    NO(o, "\"s\"");
    grammar_free(o);
}

static void expect_error(const char *schema, int status, const char *needle) {
    char *gbnf = NULL;
    int rc = grammar_json_schema_to_gbnf(schema, strlen(schema), &gbnf);
    CHECK_MSG(rc == status, "%s: status %d, want %d (%s)", schema, rc, status, kite_last_error());
    CHECK(gbnf == NULL);
    CHECK_CONTAINS(kite_last_error(), needle);
    free(gbnf);
}

TEST(errors) {
    expect_error("{\"type\":\"string\",\"pattern\":\"^a$\"}", KITE_E_UNSUPPORTED, "unsupported keyword \"pattern\"");
    expect_error("{\"properties\":{\"x\":{\"type\":\"array\",\"uniqueItems\":true}}}", KITE_E_UNSUPPORTED,
                 "#/properties/x: unsupported keyword \"uniqueItems\"");
    expect_error("{\"type\":\"string\",\"format\":\"hostname\"}", KITE_E_UNSUPPORTED, "\"format\" \"hostname\"");
    expect_error("{\"type\":\"number\",\"maximum\":3}", KITE_E_UNSUPPORTED, "\"maximum\"");
    expect_error("{\"allOf\":[{},{}]}", KITE_E_UNSUPPORTED, "\"allOf\"");
    expect_error("{\"not\":{}}", KITE_E_UNSUPPORTED, "\"not\"");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", KITE_E_NOT_FOUND, "does not resolve");
    expect_error("{\"$ref\":\"http://example.com/s.json\"}", KITE_E_NOT_FOUND, "does not resolve");
    expect_error("{\"type\":\"strin\"}", KITE_E_FORMAT, "unknown type \"strin\"");
    /* $ref cycles that match nothing first (fuzz_json_schema found the first in CI) */
    expect_error("{\"$defs\":{\"n\":{\"type\":\"object\"}},\"$ref\":\"#\"}", KITE_E_UNSUPPORTED, "$ref cycle");
    expect_error("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},"
                 "\"$ref\":\"#/$defs/a\"}", KITE_E_UNSUPPORTED, "$ref cycle");
    expect_error("{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"]}", KITE_E_UNSUPPORTED,
                 "required property \"a\"");
    expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", KITE_E_FORMAT, "no integer");
    expect_error("{\"type\":\"array\",\"maxItems\":5000}", KITE_E_RANGE, "above 4096");
    expect_error("{\"type\":", KITE_E_FORMAT, "json_schema: byte");
    expect_error("{\"a\":1,\"a\":2}", KITE_E_FORMAT, "duplicate key");
    expect_error("{\"type\":\"string\"} x", KITE_E_FORMAT, "text after");
    expect_error("[1]", KITE_E_FORMAT, "must be an object");
    char deep[1024];
    size_t n = 0;
    for (int i = 0; i < 70; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"items\":");
    expect_error(deep, KITE_E_FORMAT, "nested deeper");
}

/* ---- fuzz corpus replay ---------------------------------------------------------------- */

#include "fuzz/fuzz_json_schema.c"

TEST(fuzz_corpus_replay) {
    int n_files = harness_replay_dir("tests/fuzz/corpus/fuzz_json_schema", LLVMFuzzerTestOneInput);
    CHECK_MSG(n_files >= 8, "%d corpus files", n_files);
}

int main(void) {
    RUN(object_properties);
    RUN(additional_properties);
    RUN(arrays);
    RUN(enum_const);
    RUN(integer_ranges);
    RUN(strings_and_formats);
    RUN(refs_anyof_types);
    RUN(finished_after_root);
    RUN(errors);
    RUN(fuzz_corpus_replay);
    return harness_summary("test_json_schema");
}
