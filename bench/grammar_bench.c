/*
 * bench/grammar_bench.c - cost of the grammar token mask per decoding step
 * (docs/grammar.md, "Measured cost").
 *
 * For each vocabulary GGUF given: build the trie (timed once), then for each
 * grammar (generic JSON, a hand-written schema-shaped grammar, and the JSON
 * Schema converter's grammar for a nested object with enums, an array and
 * strings: "json-schema"), tokenize a document with the
 * vocabulary's own tokenizer and walk it token by token: before each token,
 * time grammar_matcher_fill_mask_cached() with one mask cache per grammar,
 * then accept the token's bytes.  The walk is repeated REPS times: the first
 * is cold (entries computed on first use: cold_ms_total) and also times the
 * uncached trie walk (walk_us_median) and checks both masks are equal; the
 * others are the steady state (mask_us_*).  apply_us_mean: writing the
 * masked logits row a sampler reads (grammar_mask_apply).  One JSON line per
 * (vocabulary, grammar), in thread CPU time.  Single-threaded.
 *
 *   make grammar-bench      (or: build/grammar_bench [--reps N] [--depth D] VOCAB.gguf ...)
 *   build/grammar_bench --print-schema   (the json-schema GBNF on stdout, the document on stderr)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "tokenizer/vocab.h"

/* Thread CPU time: the build VM is shared, and wall time there mostly
 * measures the other processes; the mask is single-threaded. */
static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char json_gbnf[] =
    "root   ::= ws value ws\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array  ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char   ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n\\r]*\n";

static const char schema_gbnf[] =
    "root    ::= ws ( \"{\" ws \"\\\"name\\\"\" ws \":\" ws string ws \",\" ws \"\\\"role\\\"\" ws \":\" ws role ws \",\" ws\n"
    "            \"\\\"tags\\\"\" ws \":\" ws tags ws \",\" ws \"\\\"address\\\"\" ws \":\" ws address ws \"}\" )\n"
    "role    ::= \"\\\"admin\\\"\" | \"\\\"user\\\"\" | \"\\\"guest\\\"\"\n"
    "tags    ::= \"[\" ws ( string ( ws \",\" ws string ){0,7} ws )? \"]\"\n"
    "address ::= \"{\" ws \"\\\"city\\\"\" ws \":\" ws string ws \",\" ws \"\\\"zip\\\"\" ws \":\" ws [0-9]{5} ws \"}\"\n"
    "string  ::= \"\\\"\" char* \"\\\"\"\n"
    "char    ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "ws      ::= [ \\t\\n]{0,4}\n";

/* The schema the benchmark asks for (a nested object with enums, arrays and strings),
 * through the JSON Schema converter: the grammar kite serve would use for it. */
static const char bench_schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"integer\",\"minimum\":10000,\"maximum\":99999}},\"required\":[\"city\",\"zip\"]},"
    "\"active\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"role\",\"tags\",\"address\"]}";

static const char doc[] = "{\"name\": \"Ada Lovelace\", \"role\": \"admin\", \"tags\": [\"math\", \"poetry\", "
                          "\"engines\"], \"address\": {\"city\": \"London\", \"zip\": 12345}}";

/* Steps of a walk: rep 0 is cold (every cache entry is computed on first use), the
 * later reps warm (a server's steady state with its per-grammar cache). */
static int bench_one(const char *path, const char *gname, const char *gtext, const vocab *voc,
                     const grammar_vocab *gv, const char *const *tok, const uint32_t *len, double trie_ms, int reps,
                     uint32_t depth) {
    grammar *g = NULL;
    grammar_matcher *m = NULL;
    grammar_mask_cache *cache = NULL;
    uint32_t n = grammar_vocab_n_tokens(gv), words = (n + 31) / 32;
    uint32_t *mask = calloc(words, sizeof *mask), *ref = calloc(words, sizeof *ref);
    kite_token ids[512];
    size_t n_ids = 0;
    int rc = grammar_parse(gtext, strlen(gtext), strncmp(gtext, "bench-root ::=", 14) ? NULL : "bench-root", &g);
    if (!rc) rc = vocab_tokenize(voc, doc, strlen(doc), false, ids, 512, &n_ids);
    grammar_mask_cache_params cp = grammar_mask_cache_default_params();
    cp.depth = depth;
    if (!rc) rc = grammar_mask_cache_new(g, gv, &cp, &cache);
    double *t_mask = calloc((size_t)reps * (n_ids + 1), sizeof *t_mask);
    double *t_walk = calloc(n_ids + 1, sizeof *t_walk);
    double t_acc = 0, allowed = 0, t_cold = 0, t_apply = 0;
    float *logits = calloc(n ? n : 1, sizeof *logits), *masked = calloc(n ? n : 1, sizeof *masked);
    size_t n_t = 0, n_w = 0;
    for (int r = 0; r < reps && !rc; r++) {
        rc = grammar_matcher_new(g, NULL, &m);
        for (size_t i = 0; i < n_ids && !rc; i++) {
            double t0 = now_us();
            rc = grammar_matcher_fill_mask_cached(m, cache, mask);
            double t1 = now_us();
            grammar_mask_apply(mask, n, logits, masked); /* what a sampler then reads */
            t_apply += now_us() - t1;
            if (r == 0) t_cold += t1 - t0;
            else t_mask[n_t++] = t1 - t0;
            uint32_t t = (uint32_t)ids[i];
            if (!rc && !((mask[t >> 5] >> (t & 31)) & 1u)) {
                /* the tokenizer's split may not be a grammar-valid token path only with a leading space (SPM) */
                rc = len[t] ? KITE_E_STATE : KITE_OK;
                if (rc) fprintf(stderr, "%s: token %u of the document not in the mask\n", gname, (unsigned)i);
            }
            if (r == 0 && !rc) { /* the uncached trie walk: its time, and the same mask */
                double w0 = now_us();
                rc = grammar_matcher_fill_mask(m, gv, ref);
                t_walk[n_w++] = now_us() - w0;
                if (!rc && memcmp(ref, mask, words * sizeof *mask)) {
                    fprintf(stderr, "%s: step %zu: the cached mask differs from the trie walk\n", gname, i);
                    rc = KITE_E_STATE;
                }
                for (uint32_t w = 0; w < words; w++) allowed += __builtin_popcount(mask[w]);
            }
            double t2 = now_us();
            if (!rc) rc = grammar_matcher_accept_bytes(m, tok[t], len[t]);
            t_acc += now_us() - t2;
        }
        if (!rc && !grammar_matcher_is_accepting(m)) rc = err_set(KITE_E_STATE, "document not complete");
        grammar_matcher_free(m);
        m = NULL;
    }
    if (!rc && n_t == 0) rc = err_set(KITE_E_ARG, "--reps 2 or more: rep 1 is the cold one");
    if (rc) {
        fprintf(stderr, "grammar_bench: %s %s: %s\n", path, gname, kite_last_error());
    } else {
        double mean = 0;
        for (size_t i = 0; i < n_t; i++) mean += t_mask[i] / (double)n_t;
        qsort(t_mask, n_t, sizeof *t_mask, cmp_double);
        qsort(t_walk, n_w, sizeof *t_walk, cmp_double);
        grammar_mask_cache_stats st;
        grammar_mask_cache_get_stats(cache, &st);
        printf("{\"vocab\": \"%s\", \"grammar\": \"%s\", \"n_tokens\": %u, \"trie_nodes\": %u, \"trie_build_ms\": %.1f, "
               "\"steps\": %zu, \"reps\": %d, \"depth\": %u, \"mask_us_median\": %.1f, \"mask_us_p90\": %.1f, "
               "\"mask_us_max\": %.1f, \"mask_us_mean\": %.1f, \"cold_ms_total\": %.1f, \"walk_us_median\": %.1f, "
               "\"cache_entries\": %u, \"cache_kib\": %.0f, \"uncertain_per_entry\": %.1f, \"accept_us_mean\": %.2f, "
               "\"apply_us_mean\": %.1f, "
               "\"allowed_mean\": %.0f}\n",
               path, gname, n, grammar_vocab_n_nodes(gv), trie_ms, n_ids, reps, depth, t_mask[n_t / 2],
               t_mask[(n_t * 9) / 10], t_mask[n_t - 1], mean, t_cold / 1e3, t_walk[n_w / 2], st.n_entries,
               (double)st.bytes / 1024.0, st.n_entries ? (double)st.n_uncertain / st.n_entries : 0.0,
               t_acc / (double)(n_t + n_w), t_apply / (double)(n_t + n_w), allowed / (double)n_ids);
    }
    free(t_mask);
    free(t_walk);
    free(logits);
    free(masked);
    free(mask);
    free(ref);
    grammar_mask_cache_free(cache);
    grammar_free(g);
    return rc;
}

int main(int argc, char **argv) {
    int reps = 5, status = 0;
    uint32_t depth = GRAMMAR_CACHE_DEFAULT_DEPTH;
    char *schema_gbnf_text = NULL;
    char *conv = NULL;
    if (grammar_json_schema_to_gbnf(bench_schema, strlen(bench_schema), &conv)) {
        fprintf(stderr, "grammar_bench: %s\n", kite_last_error());
        return 1;
    }
    /* SentencePiece tokenizes the document with a leading space: a start rule allows one */
    static const char lead[] = "bench-root ::= \" \"? root\n";
    schema_gbnf_text = malloc(strlen(conv) + sizeof lead);
    if (!schema_gbnf_text) return 1;
    memcpy(schema_gbnf_text, lead, sizeof lead - 1);
    memcpy(schema_gbnf_text + sizeof lead - 1, conv, strlen(conv) + 1);
    free(conv);
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--print-schema")) { /* the schema grammar and the document, for other engines */
            printf("%s", schema_gbnf_text);
            fprintf(stderr, "%s\n", doc);
            free(schema_gbnf_text);
            return 0;
        }
        if (!strcmp(argv[a], "--depth") && a + 1 < argc) {
            depth = (uint32_t)atoi(argv[++a]);
            continue;
        }
        if (!strcmp(argv[a], "--reps") && a + 1 < argc) {
            reps = atoi(argv[++a]);
            if (reps < 1) reps = 1;
            continue;
        }
        gguf_ctx *gg = NULL;
        vocab *voc = NULL;
        if (gguf_open(argv[a], NULL, &gg) || vocab_load_gguf(gg, &voc)) {
            fprintf(stderr, "grammar_bench: %s: %s\n", argv[a], kite_last_error());
            gguf_close(gg);
            status = 1;
            continue;
        }
        uint32_t n = (uint32_t)vocab_n_tokens(voc);
        const char **tok = calloc(n, sizeof *tok);
        uint32_t *len = calloc(n, sizeof *len);
        char *bufs = calloc(n, 8); /* a byte token's piece is written here: it must outlive the loop */
        for (uint32_t t = 0; tok && len && bufs && t < n; t++) {
            int l = vocab_token_to_piece(voc, (kite_token)t, &tok[t], bufs + (size_t)t * 8);
            len[t] = l > 0 ? (uint32_t)l : 0;
        }
        grammar_vocab *gv = NULL;
        double t0 = now_us();
        int rc = grammar_vocab_new(tok, len, n, &gv);
        double trie_ms = (now_us() - t0) / 1e3;
        if (!rc) {
            status |= bench_one(argv[a], "json", json_gbnf, voc, gv, tok, len, trie_ms, reps, depth) != 0;
            status |= bench_one(argv[a], "schema", schema_gbnf, voc, gv, tok, len, trie_ms, reps, depth) != 0;
            status |= bench_one(argv[a], "json-schema", schema_gbnf_text, voc, gv, tok, len, trie_ms, reps, depth) != 0;
        } else {
            status = 1;
        }
        grammar_vocab_free(gv);
        free(tok);
        free(bufs);
        free(len);
        vocab_free(voc);
        gguf_close(gg);
    }
    free(schema_gbnf_text);
    return status;
}
