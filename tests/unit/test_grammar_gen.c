/*
 * test_grammar_gen.c - grammar-constrained generation through kite_gen (kite.h,
 * src/generate/, docs/grammar.md) on the SentencePiece vocabularies (the bundled
 * model's, Llama 2's) and the byte-level BPE ones (Llama 3, Qwen3), vocabulary only:
 * random logits stand in for a model, so every token of the vocabulary, multi-byte
 * characters split across tokens included, gets its chance.
 *
 * Checks: every sampled token is one the grammar allows (an independent matcher fed
 * the same bytes never refuses), the cached mask equals the trie walk on the first
 * steps, the generation ends by the grammar and its text is accepted whole by the
 * schema's grammar and by the generic JSON-object grammar; kite_gen_push refuses a
 * token the grammar does not allow (state unchanged) and an end token where the grammar
 * cannot end; greedy decoding is deterministic; masked logits keep end tokens only
 * where the grammar can end; a grammar of another vocabulary is refused.
 */
#include <math.h>

#include "generate/gen_grammar.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "harness.h"
#include "model_helpers.h"

static const char schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\",\"f\\u00f6x\"]},\"age\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":30},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":4},\"maxItems\":2},"
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"kind\",\"age\"],\"additionalProperties\":false}";

static kite_model *load_vocab_only(const char *path) {
    kite_model *m = NULL;
    kite_model_params p = kite_model_default_params();
    p.vocab_only = true;
    int rc = kite_model_load(path, &p, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", path, kite_last_error());
    return m;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* 1 when text is accepted whole (and complete) by GBNF src. */
static int text_ok(const char *src, const char *text, size_t len) {
    grammar *g = NULL;
    grammar_matcher *m = NULL;
    int ok = grammar_parse(src, strlen(src), NULL, &g) == KITE_OK && grammar_matcher_new(g, NULL, &m) == KITE_OK &&
             grammar_matcher_accept_bytes(m, text, len) == KITE_OK && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    grammar_free(g);
    return ok;
}

/* Generates under the schema with random logits; checks as in the header.  Returns the steps. */
static int decode_one(kite_model *m, const kite_grammar *kg, uint64_t seed, uint64_t logit_seed, float temp,
                      char *text, size_t cap, size_t *len, int check_steps) {
    kite_model_info info;
    kite_model_get_info(m, &info);
    int32_t n_vocab = info.n_vocab;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    uint32_t *ref = malloc(((size_t)n_vocab + 31) / 32 * sizeof *ref);
    kite_sampler_params sp = kite_sampler_default_params();
    sp.temperature = temp;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    kite_sampler *smp = NULL;
    kite_gen *gen = NULL;
    grammar_matcher *shadow = NULL;
    int steps = 0;
    *len = 0;
    if (!logits || !ref || kite_sampler_new(&sp, n_vocab, &smp) || kite_gen_new(m, &gen) ||
        grammar_matcher_new(kg->g, NULL, &shadow)) {
        CHECK_MSG(0, "setup: %s", kite_last_error());
        goto done;
    }
    kite_gen_params gp = kite_gen_default_params();
    gp.sampler = smp;
    gp.n_predict = 600;
    gp.grammar = kg;
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
    uint64_t s = logit_seed * 0x9E3779B97F4A7C15ull + 1;
    while (kite_gen_stopped(gen) == KITE_STOP_NONE) {
        for (int32_t t = 0; t < n_vocab; t++) logits[t] = (float)(rng_next(&s) >> 40) / (float)(1 << 24) * 8.0f;
        if (steps < check_steps) { /* the mask the step uses against the uncached trie walk */
            const float *row;
            CHECK_EQ_INT(kite_gen_masked_logits(gen, logits, &row), KITE_OK);
            CHECK_EQ_INT(grammar_matcher_fill_mask(shadow, kg->gv, ref), KITE_OK);
            int bad = 0;
            for (int32_t t = 0; t < n_vocab; t++) {
                bool bit = (ref[t >> 5] >> (t & 31)) & 1u;
                bool end = kite_token_is_eog(m, t) && grammar_matcher_is_accepting(shadow);
                if ((row[t] != -INFINITY) != (bit || end)) bad++;
            }
            CHECK_MSG(bad == 0, "step %d: %d tokens masked wrongly", steps, bad);
        }
        kite_gen_step st;
        int rc = kite_gen_sample(gen, logits, &st);
        CHECK_MSG(rc == KITE_OK, "step %d: %s", steps, kite_last_error());
        if (rc) break;
        steps++;
        if (!st.output) break;
        const char *piece;
        char buf[8];
        int n = kite_token_to_piece(m, st.token, &piece, buf);
        CHECK_MSG(n > 0 && grammar_matcher_accept_bytes(shadow, piece, (size_t)n) == KITE_OK,
                  "step %d: token %d refused by an independent matcher", steps, st.token);
        if (n > 0 && *len + (size_t)n < cap) {
            memcpy(text + *len, piece, (size_t)n);
            *len += (size_t)n;
        }
    }
    text[*len] = 0;
    int stop = kite_gen_stopped(gen);
    CHECK_MSG(stop == KITE_STOP_GRAMMAR || stop == KITE_STOP_EOG, "stop %s after %d steps: %s", kite_stop_name(stop),
              steps, text);
done:
    grammar_matcher_free(shadow);
    kite_gen_free(gen);
    kite_sampler_free(smp);
    free(ref);
    free(logits);
    return steps;
}

static void decode_vocab(const char *path, int seeds) {
    kite_model *m = load_vocab_only(path);
    if (!m) return;
    kite_grammar *kg = NULL;
    CHECK_EQ_INT(kite_grammar_new(m, KITE_GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &kg), KITE_OK);
    char *gbnf = NULL;
    CHECK_EQ_INT(grammar_json_schema_to_gbnf(schema, strlen(schema), &gbnf), KITE_OK);
    static char text[8192];
    for (int i = 0; kg && gbnf && i < seeds; i++) {
        size_t len = 0;
        int steps = decode_one(m, kg, (uint64_t)i + 1, (uint64_t)i + 1, 1.0f, text, sizeof text, &len, i == 0 ? 12 : 0);
        CHECK_MSG(text_ok(gbnf, text, len), "%s seed %d: not valid for the schema: %s", path, i + 1, text);
        CHECK_MSG(text_ok(grammar_json_object_gbnf(), text, len), "%s seed %d: not a JSON object: %s", path, i + 1, text);
        CHECK(steps > 5);
    }
    /* greedy: the same logits give the same text whatever the sampler's seed */
    char a[8192], b[8192];
    size_t la = 0, lb = 0;
    if (kg) {
        decode_one(m, kg, 7, 100, 0.0f, a, sizeof a, &la, 0);
        decode_one(m, kg, 8, 100, 0.0f, b, sizeof b, &lb, 0);
        CHECK_MSG(la == lb && !memcmp(a, b, la), "greedy differs: %s | %s", a, b);
    }
    free(gbnf);
    kite_grammar_free(kg);
    kite_model_free(m);
}

TEST(decode_spm_stories) { decode_vocab("models/stories260K.gguf", 6); }
TEST(decode_spm_llama2) { decode_vocab("tests/data/tokenizer/vocab-llama2-spm.gguf", 2); }
TEST(decode_bpe_llama3) { decode_vocab("tests/data/tokenizer/vocab-llama3.gguf", 2); }
TEST(decode_bpe_qwen3) { decode_vocab("tests/data/tokenizer/vocab-qwen3.gguf", 2); }

/* The token whose piece is exactly str, or -1. */
static kite_token piece_token(kite_model *m, const char *str) {
    kite_model_info info;
    kite_model_get_info(m, &info);
    for (kite_token t = 0; t < info.n_vocab; t++) {
        const char *p;
        char buf[8];
        int n = kite_token_to_piece(m, t, &p, buf);
        if (n == (int)strlen(str) && !memcmp(p, str, (size_t)n)) return t;
    }
    return -1;
}

TEST(push_refusals) {
    kite_model *m = load_vocab_only("models/stories260K.gguf");
    if (!m) return;
    static const char g_text[] = "root ::= \"ab\" [0-9]+";
    kite_grammar *kg = NULL;
    CHECK_EQ_INT(kite_grammar_new(m, KITE_GRAMMAR_GBNF, g_text, strlen(g_text), &kg), KITE_OK);
    kite_gen *gen = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &gen), KITE_OK);
    if (!kg || !gen) goto done;
    const kite_token a = piece_token(m, "a"), ab = piece_token(m, "ab"), b = piece_token(m, "b"),
                     d5 = piece_token(m, "5");
    kite_model_info info;
    kite_model_get_info(m, &info);
    CHECK(a >= 0 && b >= 0 && d5 >= 0);
    kite_gen_params gp = kite_gen_default_params();
    gp.n_predict = 10;
    gp.grammar = kg;
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
    kite_gen_step st;
    CHECK_EQ_INT(kite_gen_push(gen, b, &st), KITE_E_STATE); /* "b" first: refused */
    CHECK_EQ_INT(kite_gen_push(gen, kite_token_eos(m), &st), KITE_E_STATE); /* cannot end yet */
    CHECK_EQ_INT(kite_gen_stopped(gen), KITE_STOP_NONE);
    CHECK_EQ_INT(kite_gen_push(gen, a, &st), KITE_OK); /* the refusals changed nothing */
    CHECK_EQ_INT(kite_gen_push(gen, b, &st), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(gen, a, &st), KITE_E_STATE);
    /* masked logits: digits only, EOS not yet; then EOS too */
    float *logits = calloc((size_t)info.n_vocab, sizeof *logits);
    const float *row = NULL;
    CHECK_EQ_INT(kite_gen_masked_logits(gen, logits, &row), KITE_OK);
    if (row) {
        CHECK(row[d5] == 0.0f && row[a] == -INFINITY && row[kite_token_eos(m)] == -INFINITY);
        if (ab >= 0) CHECK(row[ab] == -INFINITY);
    }
    CHECK_EQ_INT(kite_gen_push(gen, d5, &st), KITE_OK);
    CHECK_EQ_INT(kite_gen_masked_logits(gen, logits, &row), KITE_OK);
    if (row) CHECK(row[kite_token_eos(m)] == 0.0f && row[d5] == 0.0f);
    CHECK_EQ_INT(kite_gen_push(gen, kite_token_eos(m), &st), KITE_OK);
    CHECK_EQ_INT(st.stop, KITE_STOP_EOG);
    /* a grammar that ends by itself: KITE_STOP_GRAMMAR right after its last token */
    kite_grammar *fin = NULL;
    CHECK_EQ_INT(kite_grammar_new(m, KITE_GRAMMAR_GBNF, "root ::= \"5\"", 12, &fin), KITE_OK);
    gp.grammar = fin;
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(gen, d5, &st), KITE_OK);
    CHECK(st.output && st.stop == KITE_STOP_GRAMMAR);
    CHECK_STR_EQ(kite_stop_name(KITE_STOP_GRAMMAR), "grammar");
    /* a grammar compiled for another vocabulary */
    kite_model *other = load_vocab_only("tests/data/tokenizer/vocab-llama2-spm.gguf");
    kite_grammar *og = NULL;
    if (other) CHECK_EQ_INT(kite_grammar_new(other, KITE_GRAMMAR_JSON_OBJECT, NULL, 0, &og), KITE_OK);
    gp.grammar = og;
    if (og) CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_E_ARG);
    /* compile errors */
    kite_grammar *bad = NULL;
    CHECK_EQ_INT(kite_grammar_new(m, KITE_GRAMMAR_GBNF, "root ::= x", 10, &bad), KITE_E_FORMAT);
    CHECK_EQ_INT(kite_grammar_new(m, KITE_GRAMMAR_JSON_SCHEMA, "{\"not\":{}}", 10, &bad), KITE_E_UNSUPPORTED);
    CHECK(bad == NULL);
    kite_grammar_free(og);
    kite_model_free(other);
    kite_grammar_free(fin);
    free(logits);
done:
    kite_gen_free(gen);
    kite_grammar_free(kg);
    kite_model_free(m);
}

/* ---- lazy grammars (kite_grammar_new_lazy) ---- */


/* Pushes tokens toks[0..n); returns how many were taken before a refusal (KITE_E_STATE) or
 * the end (the ending token counted). */
static int32_t push_all(kite_gen *gen, const kite_token *toks, int32_t n) {
    int32_t k = 0;
    for (; k < n && kite_gen_stopped(gen) == KITE_STOP_NONE; k++) {
        kite_gen_step st;
        int rc = kite_gen_push(gen, toks[k], &st);
        if (rc == KITE_E_STATE) break;
        CHECK_MSG(rc == KITE_OK, "push: %s", kite_last_error());
    }
    return k;
}

TEST(lazy_rules) {
    kite_model *m = load_vocab_only("models/stories260K.gguf");
    if (!m) return;
    const kite_token lt = piece_token(m, "<"), x = piece_token(m, "x"), gt = piece_token(m, ">"),
                     d5 = piece_token(m, "5"), a = piece_token(m, "a"), sp = piece_token(m, " "),
                     br = piece_token(m, "{"), eos = kite_token_eos(m);
    CHECK(lt >= 0 && x >= 0 && gt >= 0 && d5 >= 0 && a >= 0 && sp >= 0 && br >= 0);
    kite_model_info info;
    kite_model_get_info(m, &info);
    static const char g_text[] = "root ::= \"<x>\" [0-9] [0-9]? \">\"";
    const kite_grammar_trigger trig[] = {{"<x>", false}};
    kite_grammar *kg = NULL, *bad = NULL;
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, g_text, strlen(g_text), trig, 1, &kg), KITE_OK);
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, g_text, strlen(g_text), trig, 0, &bad), KITE_E_ARG);
    const kite_grammar_trigger empty[] = {{"", false}};
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, g_text, strlen(g_text), empty, 1, &bad), KITE_E_ARG);
    CHECK(bad == NULL);
    kite_gen *gen = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &gen), KITE_OK);
    float *logits = calloc((size_t)info.n_vocab, sizeof *logits);
    if (!kg || !gen || !logits) goto done;
    kite_gen_params gp = kite_gen_default_params();
    gp.n_predict = 40;
    gp.grammar = kg;
    /* free text, a trigger split over three tokens, then the grammar in force */
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
    const float *row = NULL;
    CHECK_EQ_INT(kite_gen_masked_logits(gen, logits, &row), KITE_OK);
    CHECK(row == logits); /* nothing masked before the trigger */
    const kite_token t1[] = {a, x, gt, lt, x, gt};
    CHECK_EQ_INT(push_all(gen, t1, 6), 6);
    CHECK_EQ_INT(kite_gen_masked_logits(gen, logits, &row), KITE_OK);
    if (row) CHECK(row != logits && row[d5] == 0.0f && row[a] == -INFINITY && row[eos] == -INFINITY);
    kite_gen_step st;
    CHECK_EQ_INT(kite_gen_push(gen, a, &st), KITE_E_STATE);
    CHECK_EQ_INT(kite_gen_push(gen, eos, &st), KITE_E_STATE);
    const kite_token t2[] = {d5, d5, gt};
    CHECK_EQ_INT(push_all(gen, t2, 3), 3);
    CHECK_EQ_INT(kite_gen_stopped(gen), KITE_STOP_GRAMMAR);
    /* before a trigger the end tokens end freely */
    CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
    const kite_token t3[] = {lt, x, eos};
    CHECK_EQ_INT(push_all(gen, t3, 3), 3);
    CHECK_EQ_INT(kite_gen_stopped(gen), KITE_STOP_EOG);
    /* a token completing the trigger with text the grammar refuses: that occurrence does not count */
    kite_grammar *kg2 = NULL;
    static const char g2[] = "root ::= \"a5\"";
    const kite_grammar_trigger ta[] = {{"a", false}};
    const kite_token ab = piece_token(m, "ab");
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, g2, strlen(g2), ta, 1, &kg2), KITE_OK);
    gp.grammar = kg2;
    if (kg2 && ab >= 0) {
        CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
        const kite_token t4[] = {ab, x, a};
        CHECK_EQ_INT(push_all(gen, t4, 3), 3);
        CHECK_EQ_INT(kite_gen_push(gen, x, &st), KITE_E_STATE); /* in force since the lone "a" */
        CHECK_EQ_INT(kite_gen_push(gen, d5, &st), KITE_OK);
        CHECK_EQ_INT(st.stop, KITE_STOP_GRAMMAR);
    }
    /* at_start: only after white space at the output's start */
    kite_grammar *kg3 = NULL;
    static const char g3[] = "root ::= \"{5\"";
    const kite_grammar_trigger tb[] = {{"{", true}};
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, g3, strlen(g3), tb, 1, &kg3), KITE_OK);
    gp.grammar = kg3;
    if (kg3) {
        CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
        const kite_token t5[] = {sp, sp, br, d5};
        CHECK_EQ_INT(push_all(gen, t5, 4), 4);
        CHECK_EQ_INT(kite_gen_stopped(gen), KITE_STOP_GRAMMAR);
        CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
        const kite_token t6[] = {a, br, a, br, x};
        CHECK_EQ_INT(push_all(gen, t6, 5), 5);
        CHECK_EQ_INT(kite_gen_stopped(gen), KITE_STOP_NONE);
        /* a long white lead (past the tail) still counts as the start */
        gp.n_predict = 200;
        CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
        kite_token t7[100];
        for (int i = 0; i < 98; i++) t7[i] = sp;
        t7[98] = br;
        t7[99] = a;
        CHECK_EQ_INT(push_all(gen, t7, 100), 99); /* "a" refused after "{" */
    }
    kite_grammar_free(kg3);
    kite_grammar_free(kg2);
done:
    free(logits);
    kite_gen_free(gen);
    kite_grammar_free(kg);
    kite_model_free(m);
}

/* Random drafts over the trigger's pieces: kite_gen_check_draft and the kite_gen_draft_* walk
 * agree with pushing the tokens one by one, from every state a generation reaches. */
TEST(lazy_drafts_agree) {
    kite_model *m = load_vocab_only("models/stories260K.gguf");
    if (!m) return;
    const kite_token pool[] = {piece_token(m, "<"), piece_token(m, "x"), piece_token(m, ">"), piece_token(m, "5"),
                               piece_token(m, "a"), piece_token(m, " "), piece_token(m, "{"), kite_token_eos(m)};
    const int n_pool = (int)(sizeof pool / sizeof pool[0]);
    for (int i = 0; i < n_pool; i++) CHECK(pool[i] >= 0);
    static const char g_text[] = "root ::= ( \"<x>\" | \"{\" ) ( [0-9] | \" \" )* \">\"";
    const kite_grammar_trigger trig[] = {{"<x>", false}, {"{", true}};
    kite_grammar *kg = NULL;
    CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, g_text, strlen(g_text), trig, 2, &kg), KITE_OK);
    kite_gen *gen = NULL, *ref = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &gen), KITE_OK);
    CHECK_EQ_INT(kite_gen_new(m, &ref), KITE_OK);
    kite_model_info info;
    kite_model_get_info(m, &info);
    float *logits = calloc((size_t)info.n_vocab, sizeof *logits);
    if (!kg || !gen || !ref || !logits) goto done;
    kite_gen_params gp = kite_gen_default_params();
    gp.n_predict = 64;
    gp.grammar = kg;
    uint64_t s = 12345;
    int mismatches = 0, triggered = 0, walks = 0;
    for (int round = 0; round < 300; round++) {
        /* a prefix pushed for real, then a draft from there */
        kite_token pre[8], draft[10];
        const int n_pre = (int)(rng_next(&s) % 8);
        for (int i = 0; i < n_pre; i++) pre[i] = pool[rng_next(&s) % (uint64_t)(n_pool - 1)];
        for (int i = 0; i < 10; i++) draft[i] = pool[rng_next(&s) % (uint64_t)n_pool];
        CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
        CHECK_EQ_INT(kite_gen_begin(ref, &gp, 1), KITE_OK);
        const int32_t took = push_all(gen, pre, n_pre);
        push_all(ref, pre, took);
        if (kite_gen_stopped(gen) != KITE_STOP_NONE) continue;
        int32_t n_ok = -1;
        CHECK_EQ_INT(kite_gen_check_draft(gen, draft, 10, &n_ok), KITE_OK);
        const int32_t n_push = push_all(ref, draft, 10);
        if (n_ok != n_push) mismatches++;
        /* the model drafter's walk: masked rows allow exactly the tokens draft_push takes */
        CHECK_EQ_INT(kite_gen_draft_begin(gen), KITE_OK);
        int32_t k = 0;
        for (bool more = true; k < 10 && more; k++) {
            const float *row = NULL;
            CHECK_EQ_INT(kite_gen_draft_masked_logits(gen, logits, &row), KITE_OK);
            if (!row || row[draft[k]] == -INFINITY) break;
            if (kite_gen_draft_push(gen, draft[k], &more) != KITE_OK) {
                mismatches++;
                break;
            }
        }
        walks++;
        if (k != n_ok) mismatches++;
        if (kite_gen_stopped(ref) == KITE_STOP_GRAMMAR) triggered++;
    }
    CHECK_MSG(mismatches == 0, "%d of %d drafts: check, walk and pushes disagree", mismatches, walks);
    CHECK_MSG(triggered > 0, "no draft completed the grammar (the test's pool does not reach it)");
done:
    free(logits);
    kite_gen_free(ref);
    kite_gen_free(gen);
    kite_grammar_free(kg);
    kite_model_free(m);
}

int main(void) {
    RUN(decode_spm_stories);
    RUN(decode_spm_llama2);
    RUN(decode_bpe_llama3);
    RUN(decode_bpe_qwen3);
    RUN(push_refusals);
    RUN(lazy_rules);
    RUN(lazy_drafts_agree);
    return harness_summary("test_grammar_gen");
}
