/*
 * test_grammar.c - the GBNF parser, the matcher and the token mask
 * (src/grammar/, docs/grammar.md).
 *
 * Hand-written grammars: literals, classes, negated classes, repetition
 * bounds, nested groups, Unicode classes, characters split over calls, a
 * JSON grammar on valid and invalid documents, parse errors with line and
 * column, left recursion, the caps; token masks against a brute-force
 * reference (clone, feed the token's bytes, see if it survives) on a small
 * vocabulary and on the Llama 2 vocabulary; the fuzz corpus replayed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "harness.h"
#include "kite.h"
#include "tokenizer/vocab.h"

static grammar *parse(const char *text) {
    grammar *g = NULL;
    int rc = grammar_parse(text, strlen(text), NULL, &g);
    CHECK_MSG(rc == KITE_OK, "parse failed (%d): %s", rc, kite_last_error());
    return g;
}

/* 1 when the whole string is accepted and the root can end there. */
static int matches(const grammar *g, const char *s) {
    grammar_matcher *m = NULL;
    if (grammar_matcher_new(g, NULL, &m) != KITE_OK) return -1;
    int ok = grammar_matcher_accept_bytes(m, s, strlen(s)) == KITE_OK && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

/* 1 when s is a viable prefix (accepted, maybe not complete). */
static int prefix_ok(const grammar *g, const char *s) {
    grammar_matcher *m = NULL;
    if (grammar_matcher_new(g, NULL, &m) != KITE_OK) return -1;
    int ok = grammar_matcher_accept_bytes(m, s, strlen(s)) == KITE_OK;
    grammar_matcher_free(m);
    return ok;
}

#define EXPECT_MATCH(g, s) CHECK_MSG(matches(g, s) == 1, "expected a match: \"%s\"", s)
#define EXPECT_NO_MATCH(g, s) CHECK_MSG(matches(g, s) == 0, "expected no match: \"%s\"", s)

TEST(literals) {
    grammar *g = parse("root ::= \"abc\" | \"ab\\n\\t\\\\\\\"\" | \"\\x41\\u00e9\\U0001F600\"\n");
    if (!g) return;
    EXPECT_MATCH(g, "abc");
    EXPECT_MATCH(g, "ab\n\t\\\"");
    EXPECT_MATCH(g, "A\xC3\xA9\xF0\x9F\x98\x80");
    EXPECT_NO_MATCH(g, "ab");
    EXPECT_NO_MATCH(g, "abcd");
    EXPECT_NO_MATCH(g, "abd");
    EXPECT_NO_MATCH(g, "");
    CHECK_EQ_INT(prefix_ok(g, "ab"), 1);
    grammar_free(g);
}

TEST(classes) {
    grammar *g = parse("root ::= [a-c0-9_]+ [^x-z\\n] .\n");
    if (!g) return;
    EXPECT_MATCH(g, "a9_!?");
    EXPECT_MATCH(g, "cA\xE6\x97\xA5"); /* . is any character, 日 included */
    EXPECT_NO_MATCH(g, "ayb");        /* y in the negated class */
    EXPECT_NO_MATCH(g, "a\nb");
    EXPECT_NO_MATCH(g, "dAb");
    EXPECT_NO_MATCH(g, "aA");
    grammar_free(g);
    g = parse("root ::= [-a] [a-] [\\]\\[] [^\\^]\n");
    if (!g) return;
    EXPECT_MATCH(g, "-a]b");
    EXPECT_MATCH(g, "a-[a");
    EXPECT_NO_MATCH(g, "aa]^");
    grammar_free(g);
}

TEST(repetition_bounds) {
    grammar *g = parse("root ::= \"a\"{2,4} \"b\"{3} \"c\"{2,} \"d\"{,2} \"e\"{0}\n");
    if (!g) return;
    EXPECT_MATCH(g, "aabbbcc");
    EXPECT_MATCH(g, "aaaabbbcccccdd");
    EXPECT_NO_MATCH(g, "abbbcc");     /* a{2,4}: one is too few */
    EXPECT_NO_MATCH(g, "aaaaabbbcc"); /* five too many */
    EXPECT_NO_MATCH(g, "aabbcc");
    EXPECT_NO_MATCH(g, "aabbbbcc");
    EXPECT_NO_MATCH(g, "aabbbc");
    EXPECT_NO_MATCH(g, "aabbbccddd");
    EXPECT_NO_MATCH(g, "aabbbcce");
    grammar_free(g);
    g = parse("root ::= (\"ab\" | \"c\")? \"x\"* \"y\"+\n");
    if (!g) return;
    EXPECT_MATCH(g, "y");
    EXPECT_MATCH(g, "abxxyy");
    EXPECT_MATCH(g, "cy");
    EXPECT_NO_MATCH(g, "abcy");
    EXPECT_NO_MATCH(g, "x");
    grammar_free(g);
}

TEST(nested_groups) {
    grammar *g = parse("root ::= ( \"x\" ( \"y\" | \"z\" ( \"w\" )? )* )+ \"!\"\n"
                       "# a comment line\n");
    if (!g) return;
    EXPECT_MATCH(g, "x!");
    EXPECT_MATCH(g, "xyzwzx!");
    EXPECT_MATCH(g, "xzzwyxy!");
    EXPECT_NO_MATCH(g, "!");
    EXPECT_NO_MATCH(g, "xw!");
    EXPECT_NO_MATCH(g, "xyz");
    grammar_free(g);
    /* rules referenced before their definition; newlines inside groups and after | */
    g = parse("root ::= greeting (\n  \" \" name\n)*\ngreeting ::= \"hi\" |\n  \"yo\"\nname ::= [A-Z] [a-z]*\n");
    if (!g) return;
    EXPECT_MATCH(g, "hi Ann Bo");
    EXPECT_MATCH(g, "yo");
    EXPECT_NO_MATCH(g, "hi ann");
    grammar_free(g);
}

TEST(unicode_classes) {
    grammar *g = parse("root ::= [α-ω]+ \"日本\" [^\\u0000-\\u00FF]\n");
    if (!g) return;
    EXPECT_MATCH(g, "\xCE\xB1\xCF\x89\xE6\x97\xA5\xE6\x9C\xAC\xF0\x9F\x98\x80"); /* αω日本😀 */
    EXPECT_NO_MATCH(g, "a\xE6\x97\xA5\xE6\x9C\xAC\xC4\x80");
    EXPECT_NO_MATCH(g, "\xCE\x91\xE6\x97\xA5\xE6\x9C\xAC\xC4\x80"); /* Α (capital) is outside α-ω */
    EXPECT_NO_MATCH(g, "\xCE\xB1\xE6\x97\xA5\xE6\x9C\xAC" "A");      /* A is in U+0000-U+00FF */
    EXPECT_NO_MATCH(g, "\xCE\xB1\xE6\x97\xA5\xE6\x9C\xAC\xC3\xA9");  /* é too */
    grammar_free(g);
}

TEST(split_characters) {
    grammar *g = parse("root ::= [α-ω]+\n");
    if (!g) return;
    grammar_matcher *m = NULL;
    CHECK_EQ_INT(grammar_matcher_new(g, NULL, &m), KITE_OK);
    if (!m) return;
    const char *ab = "\xCE\xB1\xCE\xB2"; /* αβ, one byte per call */
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, ab, 1), KITE_OK);
    CHECK(!grammar_matcher_is_accepting(m)); /* half a character pending */
    CHECK_EQ_INT(grammar_matcher_accept_codepoint(m, 0x3B3), KITE_E_STATE);
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, ab + 1, 2), KITE_OK); /* ends α, starts β */
    CHECK(!grammar_matcher_is_accepting(m));
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "A", 1), KITE_E_STATE); /* not a continuation */
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, ab + 3, 1), KITE_OK);
    CHECK(grammar_matcher_is_accepting(m));
    /* a lead byte no class can complete: Α..Ο are U+0391.., lead 0xCE too, but
     * 0xCF 0xBF = U+03FF is outside; 0xD0 (U+0400..) is rejected at once */
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "\xD0", 1), KITE_E_STATE);
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "\xCF\xBF", 2), KITE_E_STATE);
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "\xCF", 1), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "\x89", 1), KITE_OK); /* ω */
    CHECK(grammar_matcher_is_accepting(m));
    CHECK_EQ_INT(grammar_matcher_accept_codepoint(m, 0x3B1), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_accept_codepoint(m, 'a'), KITE_E_STATE);
    CHECK_EQ_INT(grammar_matcher_accept_codepoint(m, 0xD800), KITE_E_ARG);
    /* invalid UTF-8 is never accepted, even where . allows anything */
    grammar_matcher_free(m);
    grammar_free(g);
    g = parse("root ::= .*\n");
    if (!g) return;
    CHECK_EQ_INT(prefix_ok(g, "\xC0\x80"), 0);         /* overlong */
    CHECK_EQ_INT(prefix_ok(g, "\xED\xA0\x80"), 0);     /* surrogate */
    CHECK_EQ_INT(prefix_ok(g, "\xF4\x90\x80\x80"), 0); /* above U+10FFFF */
    CHECK_EQ_INT(prefix_ok(g, "\x80"), 0);
    CHECK_EQ_INT(prefix_ok(g, "\xE6\x97"), 1);
    grammar_free(g);
}

static const char *json_grammar(void) {
    static char *text;
    if (!text) text = harness_read_file("tests/data/grammar/json.gbnf", NULL);
    return text;
}

TEST(json_documents) {
    const char *text = json_grammar();
    CHECK(text != NULL);
    if (!text) return;
    grammar *g = parse(text);
    if (!g) return;
    static const char *valid[] = {
        "{\"a\": [1, -2.5e+3, true, false, null], \"b\\n\\u00e9\": {\"c\": \"\xE6\x97\xA5\xE6\x9C\xAC\"}}",
        "[]", "{}", "  \"x\"  ", "0", "-0.5E-7", "[[[]], {\"k\": {}}]", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
        "{\n  \"list\": [ 1 , 2 ],\n  \"s\": \"\"\n}\n", "123456789012345678901234567890",
    };
    static const char *invalid[] = {
        "{\"a\" 1}", "[1,]", "01", "{\"a\":tru}", "\"\\x\"", "[1 2]", "\"unterminated", "{'a':1}",
        "1.", "-", "\"a\tb\"", "{\"a\":1,}", "[", "nul", "\"\\u12G4\"", "{\"a\":1}}", "+1", ".5",
    };
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) EXPECT_MATCH(g, valid[i]);
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) EXPECT_NO_MATCH(g, invalid[i]);
    CHECK_EQ_INT(prefix_ok(g, "{\"key\": [1, 2"), 1);
    CHECK_EQ_INT(prefix_ok(g, "{\"key\" ]"), 0);
    /* one byte at a time gives the same answers */
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) {
        grammar_matcher *m = NULL;
        CHECK_EQ_INT(grammar_matcher_new(g, NULL, &m), KITE_OK);
        if (!m) break;
        int ok = 1;
        for (const char *p = valid[i]; *p && ok; p++) ok = grammar_matcher_accept_bytes(m, p, 1) == KITE_OK;
        CHECK_MSG(ok && grammar_matcher_is_accepting(m), "byte by byte: %s", valid[i]);
        CHECK(grammar_matcher_n_stacks(m) <= 8);
        grammar_matcher_free(m);
    }
    grammar_free(g);
}

/* Parses, expects status rc and a message containing want. */
static void expect_error(const char *text, int rc, const char *want) {
    grammar *g = NULL;
    int got = grammar_parse(text, strlen(text), NULL, &g);
    CHECK_MSG(got == rc, "\"%s\": status %d, want %d (%s)", text, got, rc, kite_last_error());
    CHECK(g == NULL);
    CHECK_CONTAINS(kite_last_error(), want);
    grammar_free(g);
}

TEST(parse_errors) {
    expect_error("root ::= foo\n", KITE_E_FORMAT, "grammar:1:10: rule 'foo' is used but never defined");
    expect_error("a ::= \"x\"\n", KITE_E_FORMAT, "no start rule 'root'");
    expect_error("", KITE_E_FORMAT, "no start rule 'root'");
    expect_error("root ::= \"x\"\nroot ::= \"y\"\n", KITE_E_FORMAT, "grammar:2:1: rule 'root' is defined twice");
    expect_error("root ::= \"abc\n", KITE_E_FORMAT, "grammar:1:10: unterminated string literal");
    expect_error("root ::= [abc\n", KITE_E_FORMAT, "grammar:1:10: unterminated character class");
    expect_error("root ::= \"a\\qb\"\n", KITE_E_FORMAT, "grammar:1:12: unknown escape '\\q'");
    expect_error("root ::= \"\\x4\"\n", KITE_E_FORMAT, "expected 2 hex digits");
    expect_error("root ::= \"\\U00110000\"\n", KITE_E_FORMAT, "above U+10FFFF");
    expect_error("root ::= [z-a]\n", KITE_E_FORMAT, "grammar:1:11: character range is reversed");
    expect_error("root ::= []\n", KITE_E_FORMAT, "empty character class");
    expect_error("root ::= \"a\"{3,2}\n", KITE_E_FORMAT, "grammar:1:13: repetition bounds {3,2} are reversed");
    expect_error("root ::= \"a\"{2\n", KITE_E_FORMAT, "expected '}'");
    expect_error("root ::= \"a\"{99999}\n", KITE_E_RANGE, "repetition bound above");
    expect_error("root ::= * \"a\"\n", KITE_E_FORMAT, "grammar:1:10: '*' has no element to repeat");
    expect_error("root ::= \"a\"**\n", KITE_E_FORMAT, "grammar:1:14: '*' has no element to repeat");
    expect_error("root ::= ( \"a\"\n", KITE_E_FORMAT, "grammar:1:10: expected ')'");
    expect_error("root ::= \"a\" )\n", KITE_E_FORMAT, "grammar:1:14: unmatched ')'");
    expect_error("root \"a\"\n", KITE_E_FORMAT, "grammar:1:6: expected '::=' after rule name 'root'");
    expect_error("\n\n  ::= \"a\"\n", KITE_E_FORMAT, "grammar:3:3: expected a rule name");
    expect_error("root ::= \"a\" @\n", KITE_E_FORMAT, "grammar:1:14: unexpected character '@'");
    expect_error("root ::= \"\xFF\"\n", KITE_E_FORMAT, "invalid UTF-8");
    expect_error("root ::= \"a\"\n  b ::= c\n", KITE_E_FORMAT, "grammar:2:9: rule 'c' is used but never defined");
    /* columns count characters, not bytes */
    expect_error("root ::= \"\xCE\xB1\" ~\n", KITE_E_FORMAT, "grammar:1:14: unexpected character '~'");
    /* nesting is bounded (no stack overflow on hostile input) */
    char deep[1200];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 500; i++) deep[n++] = '(';
    deep[n] = '\0';
    expect_error(deep, KITE_E_RANGE, "nested more than");
}

TEST(left_recursion) {
    expect_error("root ::= root \"a\" | \"a\"\n", KITE_E_FORMAT, "grammar:1:1: rule 'root' is left-recursive");
    expect_error("root ::= \"x\" expr\nexpr ::= term | expr \"+\" term\nterm ::= [0-9]\n", KITE_E_FORMAT,
                 "grammar:2:1: rule 'expr' is left-recursive");
    /* through a nullable prefix and through two rules */
    expect_error("root ::= a\na ::= b? c\nb ::= \"b\"\nc ::= d? a \"x\" | \"c\"\nd ::= \"d\"\n", KITE_E_FORMAT,
                 "left-recursive");
    /* a repeated body that matches the empty string loops the same way */
    expect_error("root ::= (\"a\"?)* \"b\"\n", KITE_E_FORMAT, "rule 'root' is left-recursive");
    /* right recursion and recursion after a character are fine */
    grammar *g = parse("root ::= \"(\" root \")\" | list\nlist ::= [a-z] list | \"\"\n");
    if (!g) return;
    EXPECT_MATCH(g, "((abc))");
    EXPECT_MATCH(g, "");
    EXPECT_NO_MATCH(g, "((a)");
    /* deep nesting keeps one stack; a long right-recursive list stays flat */
    grammar_matcher *m = NULL;
    CHECK_EQ_INT(grammar_matcher_new(g, NULL, &m), KITE_OK);
    if (m) {
        for (int i = 0; i < 3000; i++) CHECK_EQ_INT(grammar_matcher_accept_codepoint(m, 'q'), KITE_OK);
        CHECK_EQ_INT(grammar_matcher_n_stacks(m), 2); /* [a-z] next, or the end */
        CHECK(grammar_matcher_is_accepting(m));
        grammar_matcher_free(m);
    }
    grammar_free(g);
}

TEST(caps) {
    grammar *g = parse("root ::= \"a\" \"b\" | \"a\" \"c\" | \"a\" \"d\"\n");
    if (!g) return;
    grammar_matcher_params p = grammar_matcher_default_params();
    p.max_stacks = 2;
    grammar_matcher *m = NULL;
    CHECK_EQ_INT(grammar_matcher_new(g, &p, &m), KITE_E_RANGE);
    CHECK_CONTAINS(kite_last_error(), "more than 2 parser stacks");
    CHECK(m == NULL);
    p.max_stacks = 0;
    CHECK_EQ_INT(grammar_matcher_new(g, &p, &m), KITE_E_ARG);
    grammar_free(g);
    /* stacks grow with ambiguity; the cap stops it and leaves the state as it was */
    g = parse("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\"\n");
    if (!g) return;
    p = grammar_matcher_default_params();
    p.max_nodes = 16;
    CHECK_EQ_INT(grammar_matcher_new(g, &p, &m), KITE_OK);
    if (!m) return;
    int rc = KITE_OK, i = 0;
    for (; i < 200 && rc == KITE_OK; i++) rc = grammar_matcher_accept_codepoint(m, 'a');
    CHECK_EQ_INT(rc, KITE_OK); /* deduplication keeps the count constant: no growth over 200 steps */
    CHECK_MSG(grammar_matcher_n_stacks(m) == 7, /* six "a" positions and the end */ "%u stacks", grammar_matcher_n_stacks(m));
    grammar_matcher_free(m);
    grammar_free(g);
    /* a grammar whose expansion fans out past max_expand */
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "root ::= a0\n");
    for (int k = 0; k < 20; k++) n += (size_t)snprintf(text + n, sizeof text - n, "a%d ::= a%d a%d | \"x\"\n", k, k + 1, k + 1);
    n += (size_t)snprintf(text + n, sizeof text - n, "a20 ::= \"y\" | \"\"\n");
    (void)n;
    g = parse(text);
    if (!g) return;
    p = grammar_matcher_default_params();
    p.max_expand = 1000;
    rc = grammar_matcher_new(g, &p, &m);
    CHECK_EQ_INT(rc, KITE_E_RANGE);
    CHECK_CONTAINS(kite_last_error(), "max_expand");
    grammar_free(g);
}

TEST(clone_is_independent) {
    grammar *g = parse("root ::= \"ab\" | \"ac\"\n");
    if (!g) return;
    grammar_matcher *m = NULL, *c = NULL;
    CHECK_EQ_INT(grammar_matcher_new(g, NULL, &m), KITE_OK);
    if (!m) return;
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "a", 1), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_clone(m, &c), KITE_OK);
    if (c) {
        CHECK_EQ_INT(grammar_matcher_accept_bytes(c, "b", 1), KITE_OK);
        CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "c", 1), KITE_OK);
        CHECK(grammar_matcher_is_accepting(c));
        CHECK(grammar_matcher_is_accepting(m));
        CHECK(grammar_matcher_is_finished(m));
        CHECK_EQ_INT(grammar_matcher_accept_bytes(c, "b", 1), KITE_E_STATE);
    }
    grammar_matcher_free(c);
    grammar_matcher_free(m);
    grammar_free(g);
}

/* grammar_matcher_copy: grows a small destination to a deep state, the copies then move
 * independently, a copy back to the start works, and another grammar's matcher is refused. */
TEST(copy_into_existing) {
    grammar *g = parse("root ::= \"(\" root \")\" | \"x\"\n"), *h = parse("root ::= \"y\"\n");
    if (!g || !h) return;
    grammar_matcher *m = NULL, *d = NULL, *start = NULL, *other = NULL;
    CHECK_EQ_INT(grammar_matcher_new(g, NULL, &m), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_new(g, NULL, &d), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_new(g, NULL, &start), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_new(h, NULL, &other), KITE_OK);
    if (!m || !d || !start || !other) goto done;
    for (int i = 0; i < 40; i++) CHECK_EQ_INT(grammar_matcher_accept_bytes(m, "(", 1), KITE_OK); /* > 16 nodes */
    CHECK_EQ_INT(grammar_matcher_copy(d, m), KITE_OK);
    CHECK_EQ_INT(grammar_matcher_accept_bytes(d, "x", 1), KITE_OK);
    for (int i = 0; i < 40; i++) CHECK_EQ_INT(grammar_matcher_accept_bytes(d, ")", 1), KITE_OK);
    CHECK(grammar_matcher_is_finished(d) && grammar_matcher_is_accepting(d));
    CHECK(!grammar_matcher_is_accepting(m));
    CHECK_EQ_INT(grammar_matcher_accept_bytes(m, ")", 1), KITE_E_STATE); /* m did not move */
    CHECK_EQ_INT(grammar_matcher_copy(d, start), KITE_OK);               /* back to the start */
    CHECK_EQ_INT(grammar_matcher_accept_bytes(d, "x", 1), KITE_OK);
    CHECK(grammar_matcher_is_finished(d));
    CHECK_EQ_INT(grammar_matcher_copy(d, other), KITE_E_ARG);
    CHECK(grammar_matcher_is_finished(d)); /* unchanged */
    CHECK_EQ_INT(grammar_matcher_copy(NULL, m), KITE_E_ARG);
done:
    grammar_matcher_free(other);
    grammar_matcher_free(start);
    grammar_matcher_free(d);
    grammar_matcher_free(m);
    grammar_free(h);
    grammar_free(g);
}

/* ---- masks against brute force --------------------------------------------- */

/* Mask caches at key depths 1, 2 and 4 (1 leaves the most tokens uncertain, so the run-time
 * check of the full stack is exercised hardest), kept across the steps of one test so that
 * later steps hit entries computed by earlier ones; NULL entries: not in use. */
static grammar_mask_cache *caches[3];

static void caches_new(const grammar *g, const grammar_vocab *v) {
    static const uint32_t depth[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        grammar_mask_cache_params p = grammar_mask_cache_default_params();
        p.depth = depth[i];
        caches[i] = NULL;
        CHECK_EQ_INT(grammar_mask_cache_new(g, v, &p, &caches[i]), KITE_OK);
    }
}

static void caches_free(void) {
    for (int i = 0; i < 3; i++) {
        grammar_mask_cache_free(caches[i]);
        caches[i] = NULL;
    }
}

/* Compares fill_mask (and fill_mask_cached through each cache in use) with clone + accept
 * for every token; returns the number of allowed tokens. */
static int check_mask(grammar_matcher *m, const grammar_vocab *v, const char *const *tok, const uint32_t *len,
                      const char *where) {
    uint32_t n = grammar_vocab_n_tokens(v), words = (n + 31) / 32;
    uint32_t *mask = calloc(words, sizeof *mask), *cm = calloc(words, sizeof *cm);
    int allowed = 0, bad = 0;
    CHECK_EQ_INT(grammar_matcher_fill_mask(m, v, mask), KITE_OK);
    for (int i = 0; i < 3; i++) {
        if (!caches[i]) continue;
        CHECK_EQ_INT(grammar_matcher_fill_mask_cached(m, caches[i], cm), KITE_OK);
        uint32_t w = 0;
        while (w < words && cm[w] == mask[w]) w++;
        CHECK_MSG(w == words, "%s: cache %d differs from the trie walk in word %u (%08x, %08x)", where, i, w,
                  w < words ? cm[w] : 0, w < words ? mask[w] : 0);
    }
    free(cm);
    for (uint32_t t = 0; t < n; t++) {
        grammar_matcher *c = NULL;
        if (grammar_matcher_clone(m, &c) != KITE_OK) {
            bad++;
            break;
        }
        int ok = len[t] > 0 && grammar_matcher_accept_bytes(c, tok[t], len[t]) == KITE_OK;
        grammar_matcher_free(c);
        int bit = (int)((mask[t >> 5] >> (t & 31)) & 1u);
        allowed += bit;
        if (bit != ok && bad++ < 5) FAIL_AT_("%s: token %u (%u bytes): mask %d, brute force %d", where, t, len[t], bit, ok);
    }
    CHECK_EQ_INT(bad, 0);
    free(mask);
    return allowed;
}

TEST(mask_small_vocab) {
    static const char *toks[] = {
        "", "{", "}", "{\"", "\"", "\":", ", ", "true", "tr", "ue", "null", "1", "12", "-", ".5", "e+", "[", "]",
        "\xCE", "\xB1", "\xCE\xB1", "\xE6\x97", "\xA5", "\xE6\x97\xA5\"", "\\u", "00e9", "\\", "n", " ", "\n",
        "a", "ab", "abc", "\"a\"", "\x80", "\xFF", "fal", "se", "}}", "]]", "0", "01",
    };
    uint32_t n = sizeof toks / sizeof *toks, len[64];
    for (uint32_t i = 0; i < n; i++) len[i] = (uint32_t)strlen(toks[i]);
    grammar_vocab *v = NULL;
    CHECK_EQ_INT(grammar_vocab_new(toks, len, n, &v), KITE_OK);
    const char *text = json_grammar();
    grammar *g = text ? parse(text) : NULL;
    grammar_matcher *m = NULL;
    if (!v || !g || grammar_matcher_new(g, NULL, &m) != KITE_OK) goto done;
    caches_new(g, v);
    /* walk a document, token by token, checking the mask before each */
    static const char *doc[] = {"{\"", "a", "\":", " ", "[", "1", "2", ", ", "tr", "ue", ", ", "\"",
                                "\xCE", "\xB1", "\xE6\x97", "\xA5\"", ", ", "-", "0", ".5", "e+", "1", "]", "}"};
    for (size_t i = 0; i < sizeof doc / sizeof *doc; i++) {
        char where[64];
        snprintf(where, sizeof where, "before piece %zu", i);
        int allowed = check_mask(m, v, toks, len, where);
        CHECK(allowed > 0);
        CHECK_MSG(grammar_matcher_accept_bytes(m, doc[i], strlen(doc[i])) == KITE_OK, "piece %zu", i);
    }
    CHECK(grammar_matcher_is_accepting(m));
    CHECK_EQ_INT(check_mask(m, v, toks, len, "at the end"), 2); /* " " and "\n" */
    grammar_mask_cache_stats st;
    grammar_mask_cache_get_stats(caches[0], &st);
    CHECK(st.misses > 0 && st.hits > 0 && st.n_uncertain > 0);
    CHECK(st.fallbacks > 0); /* the pieces ending mid-character */
done:
    caches_free();
    grammar_matcher_free(m);
    grammar_free(g);
    grammar_vocab_free(v);
}

TEST(mask_llama2_vocab) {
    gguf_ctx *gg = NULL;
    vocab *voc = NULL;
    if (gguf_open("tests/data/tokenizer/vocab-llama2-spm.gguf", NULL, &gg) != KITE_OK ||
        vocab_load_gguf(gg, &voc) != KITE_OK) {
        CHECK_MSG(0, "cannot load the Llama 2 vocabulary: %s", kite_last_error());
        gguf_close(gg);
        return;
    }
    uint32_t n = (uint32_t)vocab_n_tokens(voc);
    const char **tok = calloc(n, sizeof *tok);
    uint32_t *len = calloc(n, sizeof *len);
    char *bufs = calloc(n, 8); /* a byte token's piece is written here: it must outlive the loop */
    for (uint32_t t = 0; tok && len && bufs && t < n; t++) {
        int l = vocab_token_to_piece(voc, (kite_token)t, &tok[t], bufs + (size_t)t * 8);
        len[t] = l > 0 ? (uint32_t)l : 0;
    }
    grammar_vocab *v = NULL;
    CHECK_EQ_INT(grammar_vocab_new(tok, len, n, &v), KITE_OK);
    const char *text = json_grammar();
    grammar *g = text ? parse(text) : NULL;
    grammar_matcher *m = NULL;
    if (v && g && grammar_matcher_new(g, NULL, &m) == KITE_OK) {
        caches_new(g, v);
        /* states: start, inside a key, after the colon, inside a number, mid-character in a string */
        static const char *steps[] = {"", "{\"na", "me\": ", "-12", ".5, \"s\": \"\xE6", "\x97"};
        for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
            CHECK_EQ_INT(grammar_matcher_accept_bytes(m, steps[i], strlen(steps[i])), KITE_OK);
            char where[64];
            snprintf(where, sizeof where, "llama2 step %zu", i);
            int allowed = check_mask(m, v, tok, len, where);
            CHECK(allowed > 0);
        }
        caches_free();
    }
    grammar_matcher_free(m);
    grammar_free(g);
    grammar_vocab_free(v);
    free(tok);
    free(bufs);
    free(len);
    vocab_free(voc);
    gguf_close(gg);
}

/* ---- fuzz corpus replay ------------------------------------------------------ */

#include "fuzz/fuzz_grammar.c"

TEST(fuzz_corpus_replay) {
    int n_files = harness_replay_dir("tests/fuzz/corpus/fuzz_grammar", LLVMFuzzerTestOneInput);
    CHECK_MSG(n_files >= 6, "%d corpus files", n_files);
}

int main(void) {
    RUN(literals);
    RUN(classes);
    RUN(repetition_bounds);
    RUN(nested_groups);
    RUN(unicode_classes);
    RUN(split_characters);
    RUN(json_documents);
    RUN(parse_errors);
    RUN(left_recursion);
    RUN(caps);
    RUN(clone_is_independent);
    RUN(copy_into_existing);
    RUN(mask_small_vocab);
    RUN(mask_llama2_vocab);
    RUN(fuzz_corpus_replay);
    return harness_summary("test_grammar");
}
