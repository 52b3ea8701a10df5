/*
 * test_sot.c - Skeleton-of-Thought (src/sot): skeleton parsing, prompt
 * templates, and a run over the real serving engine with a given (stub)
 * skeleton: the points come back expanded and in order, each expansion equal
 * to greedy decoding of its prompt alone; an outline that does not parse
 * falls back to plain decoding.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model_helpers.h"
#include "engine/engine.h"
#include "sot/sot.h"

#define MODEL "models/stories260K.gguf"
#define POINT_TOKENS 12

TEST(test_parse) {
    char *t[SOT_MAX_POINTS];
    int32_t n = sot_parse_skeleton("1. First thing\n2. Second thing\n3. Third", t, 10);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_STR_EQ(t[0], "First thing");
        CHECK_STR_EQ(t[2], "Third");
    }
    for (int32_t i = 0; i < n; i++) free(t[i]);
    /* preamble skipped, ")" and Markdown bold accepted, blank lines inside, prose ends the list */
    n = sot_parse_skeleton("Sure!\n**1.** Intro:\n\n2) Body  \n3. End\nThat is all.\n4. late", t, 10);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_STR_EQ(t[0], "Intro");
        CHECK_STR_EQ(t[1], "Body");
    }
    for (int32_t i = 0; i < n; i++) free(t[i]);
    CHECK_EQ_INT(sot_parse_skeleton("no list at all", t, 10), 0);
    CHECK_EQ_INT(sot_parse_skeleton("2. starts at two\n3. three", t, 10), 0);
    n = sot_parse_skeleton("1. a\n2. b\n3. c\n4. d", t, 2); /* max */
    CHECK_EQ_INT(n, 2);
    for (int32_t i = 0; i < n; i++) free(t[i]);
    n = sot_parse_skeleton("1. a\n3. skipped two", t, 10); /* numbering broken */
    CHECK_EQ_INT(n, 1);
    for (int32_t i = 0; i < n; i++) free(t[i]);
}

TEST(test_fill) {
    char *s = sot_fill("Q={question} S={skeleton} {index}. {point} {other}", "why", "1. a", 7, "pt");
    CHECK_STR_EQ(s, "Q=why S=1. a 7. pt {other}");
    free(s);
    s = sot_fill("{question}{point}", NULL, NULL, 0, NULL);
    CHECK_STR_EQ(s, "");
    free(s);
}

/* Greedy decoding of text alone (kite_ctx), cut at the first "\n\n", trimmed. */
static char *greedy_alone(kite_model *m, const char *text, int max_tokens) {
    kite_ctx *c = new_ctx_checked(m, 512, 1);
    kite_detok *d = NULL;
    kite_token toks[512];
    size_t n = 0;
    char *out = calloc(1, 4096);
    size_t len = 0;
    if (!c || !out || kite_detok_new(m, &d) != KITE_OK) goto done;
    CHECK(kite_tokenize(m, text, strlen(text), true, toks, 512, &n) == KITE_OK);
    CHECK(kite_ctx_eval(c, toks, (int32_t)n, false) == KITE_OK);
    kite_model_info info;
    kite_model_get_info(m, &info);
    for (int k = 0; k < max_tokens; k++) {
        const float *lg = kite_ctx_logits(c, -1);
        kite_token best = 0;
        for (int32_t v = 1; v < info.n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        if (kite_token_is_eog(m, best)) break;
        char piece[64];
        const int w = kite_detok_push(d, best, piece, sizeof piece);
        if (w > 0 && len + (size_t)w < 4000) memcpy(out + len, piece, (size_t)w), len += (size_t)w;
        out[len] = '\0';
        if (strstr(out, "\n\n")) break;
        if (kite_ctx_eval(c, &best, 1, false) != KITE_OK) break;
    }
    char *cut = strstr(out, "\n\n");
    if (cut) *cut = '\0';
done:
    kite_detok_free(d);
    kite_ctx_free(c);
    if (!out) return NULL;
    /* trim */
    char *b = out;
    while (*b == ' ' || *b == '\n') b++;
    size_t l = strlen(b);
    while (l && (b[l - 1] == ' ' || b[l - 1] == '\n')) b[--l] = '\0';
    memmove(out, b, l + 1);
    return out;
}

TEST(test_stub_skeleton_expanded_in_order) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    engine *e = NULL;
    engine_params ep = engine_default_params();
    ep.n_parallel = 4;
    ep.n_ctx = 512;
    ep.n_threads = 2;
    CHECK(engine_new(m, &ep, &e) == KITE_OK);
    if (!e) goto done;
    sot_params p = sot_default_params();
    p.skeleton_text = "1. The cat\n2. The big dog\n3. A little bird";
    p.point_prompt = "Once upon a time, {point}";
    p.point_tokens = POINT_TOKENS;
    sot_result r;
    CHECK(sot_run(e, m, "Tell me about animals.", &p, &r) == KITE_OK);
    CHECK(!r.fallback);
    CHECK_EQ_INT(r.n_points, 3);
    if (r.n_points == 3) {
        static const char *titles[3] = {"The cat", "The big dog", "A little bird"};
        const char *pos = r.answer;
        for (int i = 0; i < 3; i++) {
            CHECK_STR_EQ(r.points[i].title, titles[i]);
            char prompt[128];
            snprintf(prompt, sizeof prompt, "Once upon a time, %s", titles[i]);
            char *ref = greedy_alone(m, prompt, POINT_TOKENS);
            CHECK_MSG(ref && !strcmp(ref, r.points[i].text), "point %d: engine '%s' vs alone '%s'", i + 1,
                      r.points[i].text, ref ? ref : "(null)");
            free(ref);
            char head[64];
            snprintf(head, sizeof head, "%d. %s", i + 1, titles[i]);
            const char *at = strstr(pos, head);
            CHECK_MSG(at != NULL, "answer lacks '%s' after the previous point", head);
            if (at) pos = at + strlen(head);
        }
    }
    sot_result_free(&r);

    /* router: an outline without numbered points -> plain decoding of the question */
    p.skeleton_text = "just some words";
    p.plain_tokens = POINT_TOKENS;
    CHECK(sot_run(e, m, "Once upon a time", &p, &r) == KITE_OK);
    CHECK(r.fallback);
    CHECK_EQ_INT(r.n_points, 0);
    char *ref = greedy_alone(m, "Once upon a time", POINT_TOKENS);
    CHECK_MSG(ref && r.answer && !strcmp(ref, r.answer), "fallback '%s' vs alone '%s'", r.answer ? r.answer : "",
              ref ? ref : "");
    free(ref);
    sot_result_free(&r);
done:
    engine_free(e);
    kite_model_free(m);
}

int main(void) {
    RUN(test_parse);
    RUN(test_fill);
    RUN(test_stub_skeleton_expanded_in_order);
    return harness_summary(__FILE__);
}
