/*
 * test_generate.c - the generation step (kite_gen_*, src/generate): the stop
 * rules in their order (BOS, EOG, stop tokens, length, context), what is
 * output, counted and recorded, and the streaming text.
 */
#include "harness.h"
#include "model_helpers.h"

#define MODEL "models/stories260K.gguf"

static kite_model *load_vocab(void) {
    kite_model *m = NULL;
    kite_model_params p = kite_model_default_params();
    p.vocab_only = true;
    CHECK_EQ_INT(kite_model_load(MODEL, &p, &m), KITE_OK);
    return m;
}

/* A word token of the vocabulary (neither BOS nor EOG). */
#define WORD 300

TEST(test_stop_rules) {
    kite_model *m = load_vocab();
    if (!m) return;
    const kite_token bos = kite_token_bos(m), eos = kite_token_eos(m);
    CHECK(bos >= 0 && eos >= 0 && bos != eos);
    CHECK(!kite_token_is_eog(m, WORD) && WORD != bos);
    kite_gen *g = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &g), KITE_OK);
    CHECK_EQ_INT(kite_gen_stopped(g), KITE_STOP_LENGTH); /* nothing begun */
    kite_gen_step st;
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_E_STATE);

    kite_gen_params p = kite_gen_default_params();
    p.n_predict = 3;
    /* BOS and EOG end the generation and are not output */
    CHECK_EQ_INT(kite_gen_begin(g, &p, 4), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK(st.output && st.stop == KITE_STOP_NONE && st.n_gen == 1 && st.token == WORD);
    CHECK_EQ_INT(kite_gen_push(g, bos, &st), KITE_OK);
    CHECK(!st.output && st.stop == KITE_STOP_BOS && st.n_gen == 1 && st.len == 0);
    CHECK_EQ_INT(kite_gen_stopped(g), KITE_STOP_BOS);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_E_STATE);
    CHECK_EQ_INT(kite_gen_begin(g, &p, 4), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, eos, &st), KITE_OK);
    CHECK(!st.output && st.stop == KITE_STOP_EOG && st.n_gen == 0);
    CHECK_STR_EQ(kite_stop_name(st.stop), "eog");

    /* ignore_eos: both are output; the length limit still holds */
    p.ignore_eos = true;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 4), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, bos, &st), KITE_OK);
    CHECK(st.output && st.stop == KITE_STOP_NONE);
    CHECK_EQ_INT(kite_gen_push(g, eos, &st), KITE_OK);
    CHECK(st.output && st.stop == KITE_STOP_NONE);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK(st.output && st.stop == KITE_STOP_LENGTH && st.n_gen == 3);
    CHECK_STR_EQ(kite_stop_name(st.stop), "length");
    p.ignore_eos = false;

    /* a caller's stop token, even under ignore_eos */
    const kite_token stops[2] = {WORD + 1, WORD + 2};
    p.stop_tokens = stops;
    p.n_stop_tokens = 2;
    p.ignore_eos = true;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 4), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, WORD + 2, &st), KITE_OK);
    CHECK(!st.output && st.stop == KITE_STOP_TOKEN && st.n_gen == 0);
    CHECK_STR_EQ(kite_stop_name(st.stop), "stop token");
    p.stop_tokens = NULL;
    p.n_stop_tokens = 0;
    p.ignore_eos = false;

    /* context: the third token after 8 positions of 10 has no position */
    p.n_predict = 100;
    p.n_ctx = 10;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 8), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK_EQ_INT(st.stop, KITE_STOP_NONE);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK(st.output && st.stop == KITE_STOP_CONTEXT && st.n_gen == 3);
    CHECK_STR_EQ(kite_stop_name(st.stop), "context");
    /* the length limit wins over a full context at the same token */
    p.n_predict = 3;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 8), KITE_OK);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK_EQ_INT(st.stop, KITE_STOP_LENGTH);

    /* n_predict 0: over at once; bad tokens and arguments change nothing */
    p.n_predict = 0;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 0), KITE_OK);
    CHECK_EQ_INT(kite_gen_stopped(g), KITE_STOP_LENGTH);
    p.n_predict = 5;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 0), KITE_OK);
    CHECK_EQ_INT(kite_gen_push(g, -1, &st), KITE_E_RANGE);
    CHECK_EQ_INT(kite_gen_push(g, 1 << 20, &st), KITE_E_RANGE);
    CHECK_EQ_INT(kite_gen_stopped(g), KITE_STOP_NONE);
    float logits[4] = {0};
    CHECK_EQ_INT(kite_gen_sample(g, logits, &st), KITE_E_STATE); /* no sampler */
    kite_gen_params bad = p;
    bad.n_stop_tokens = 1; /* without an array */
    CHECK_EQ_INT(kite_gen_begin(g, &bad, 0), KITE_E_ARG);
    CHECK_EQ_INT(kite_gen_begin(g, &p, -1), KITE_E_ARG);
    CHECK_EQ_INT(kite_gen_push(g, WORD, &st), KITE_OK);
    CHECK(st.n_gen == 1 && st.stop == KITE_STOP_NONE);
    CHECK_EQ_INT(kite_gen_new(NULL, &g), KITE_E_ARG);
    CHECK_STR_EQ(kite_stop_name(KITE_STOP_NONE), "");
    CHECK_STR_EQ(kite_stop_name(99), "");
    kite_gen_free(g);
    kite_gen_free(NULL);
    kite_model_free(m);
}

/* The step's text is the streaming detokenizer's, byte for byte; echoed
 * prompt tokens set its state but are not counted; flush ends a text. */
TEST(test_text) {
    kite_model *m = load_vocab();
    if (!m) return;
    static const char text[] = "Once upon a time, there was a little girl.";
    kite_token ids[64];
    size_t n = 0;
    CHECK_EQ_INT(kite_tokenize(m, text, strlen(text), true, ids, 64, &n), KITE_OK);
    CHECK(n > 3);
    kite_gen *g = NULL;
    kite_detok *d = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &g), KITE_OK);
    CHECK_EQ_INT(kite_detok_new(m, &d), KITE_OK);
    kite_gen_params p = kite_gen_default_params();
    p.n_predict = (int64_t)n;
    CHECK_EQ_INT(kite_gen_begin(g, &p, 1), KITE_OK);
    char got[256] = "", want[256] = "", piece[256];
    size_t n_got = 0, n_want = 0;
    kite_gen_step st;
    CHECK_EQ_INT(kite_gen_echo(g, ids[0], &st), KITE_OK); /* BOS: the next space is dropped */
    CHECK(!st.output && st.n_gen == 0 && st.stop == KITE_STOP_NONE);
    CHECK(kite_detok_push(d, ids[0], piece, sizeof piece) >= 0);
    for (size_t i = 1; i < n; i++) {
        CHECK_EQ_INT(kite_gen_push(g, ids[i], &st), KITE_OK);
        CHECK(st.len == strlen(st.text));
        memcpy(got + n_got, st.text, st.len);
        n_got += st.len;
        int k = kite_detok_push(d, ids[i], piece, sizeof piece);
        CHECK(k >= 0);
        memcpy(want + n_want, piece, (size_t)k);
        n_want += (size_t)k;
    }
    CHECK_EQ_INT((int)n_got, (int)n_want);
    CHECK(memcmp(got, want, n_got) == 0);
    CHECK(memcmp(got, text, n_got) == 0 && n_got == strlen(text));
    const char *tail = NULL;
    size_t n_tail = 99;
    CHECK_EQ_INT(kite_gen_flush(g, &tail, &n_tail), KITE_OK);
    CHECK(n_tail == 0 && tail && tail[0] == '\0');

    /* an incomplete character is held back, then flushed as U+FFFD */
    kite_token lead = -1;
    kite_model_info info;
    kite_model_get_info(m, &info);
    for (kite_token t = 0; t < info.n_vocab && lead < 0; t++) {
        const char *pc;
        char buf[8];
        if (kite_token_to_piece(m, t, &pc, buf) == 1 && (unsigned char)pc[0] == 0xE4) lead = t;
    }
    CHECK(lead >= 0); /* the bundled vocabulary has byte-fallback tokens */
    if (lead >= 0) {
        p.n_predict = 5;
        CHECK_EQ_INT(kite_gen_begin(g, &p, 1), KITE_OK);
        CHECK_EQ_INT(kite_gen_push(g, lead, &st), KITE_OK);
        CHECK(st.output && st.len == 0);
        CHECK_EQ_INT(kite_gen_flush(g, &tail, &n_tail), KITE_OK);
        CHECK(n_tail == 3 && memcmp(tail, "\xEF\xBF\xBD", 3) == 0);
        CHECK_EQ_INT(kite_gen_flush(g, &tail, &n_tail), KITE_OK);
        CHECK_EQ_INT((int)n_tail, 0);
    }
    kite_detok_free(d);
    kite_gen_free(g);
    kite_model_free(m);
}

/* With a sampler, kite_gen_sample is sample + accept: the same tokens as a
 * hand-written loop, penalties (which read the recorded history) included. */
TEST(test_sampler_record) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 128, 1);
    kite_model_info info;
    kite_model_get_info(m, &info);
    kite_sampler_params sp = kite_sampler_default_params();
    sp.seed = 1234;
    sp.repeat_penalty = 1.3f;
    sp.penalty_last_n = -1;
    kite_sampler *s1 = NULL, *s2 = NULL;
    CHECK_EQ_INT(kite_sampler_new(&sp, info.n_vocab, &s1), KITE_OK);
    CHECK_EQ_INT(kite_sampler_new(&sp, info.n_vocab, &s2), KITE_OK);
    kite_gen *g = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &g), KITE_OK);
    if (!c || !s1 || !s2 || !g) goto done;
    const kite_token bos = kite_token_bos(m);
    enum { N = 40 };
    kite_token want[N], got[N];
    int n_want = 0, n_got = 0;
    /* by hand */
    kite_sampler_accept(s1, bos);
    CHECK_EQ_INT(kite_ctx_eval(c, &bos, 1, false), KITE_OK);
    while (n_want < N) {
        kite_token t = kite_sampler_sample(s1, kite_ctx_logits(c, -1));
        if (t == bos || kite_token_is_eog(m, t)) break;
        kite_sampler_accept(s1, t);
        want[n_want++] = t;
        if (n_want == N) break;
        CHECK_EQ_INT(kite_ctx_eval(c, &t, 1, false), KITE_OK);
    }
    /* with kite_gen */
    kite_ctx_truncate(c, 0);
    kite_gen_params p = kite_gen_default_params();
    p.sampler = s2;
    p.n_predict = N;
    p.n_ctx = kite_ctx_n_ctx(c);
    CHECK_EQ_INT(kite_gen_begin(g, &p, 1), KITE_OK);
    kite_sampler_accept(s2, bos);
    CHECK_EQ_INT(kite_ctx_eval(c, &bos, 1, false), KITE_OK);
    while (kite_gen_stopped(g) == KITE_STOP_NONE) {
        kite_gen_step st;
        CHECK_EQ_INT(kite_gen_sample(g, kite_ctx_logits(c, -1), &st), KITE_OK);
        if (!st.output) break;
        got[n_got++] = st.token;
        if (st.stop != KITE_STOP_NONE) break;
        CHECK_EQ_INT(kite_ctx_eval(c, &st.token, 1, false), KITE_OK);
    }
    CHECK_EQ_INT(n_got, n_want);
    CHECK(n_got > 0 && memcmp(got, want, (size_t)n_got * sizeof *got) == 0);
done:
    kite_gen_free(g);
    kite_sampler_free(s1);
    kite_sampler_free(s2);
    kite_ctx_free(c);
    kite_model_free(m);
}

int main(void) {
    RUN(test_stop_rules);
    RUN(test_text);
    RUN(test_sampler_record);
    return harness_summary(__FILE__);
}
