/*
 * test_eval.c - the evaluation harness (src/eval): row math on hand-worked
 * rows, window plans, the logits file (round trip and every corruption the
 * reader must catch), the JSON-lines task reader, and model-level checks:
 *
 *   - a model whose output matrix is zero (uniform next-token distribution)
 *     has perplexity exactly n_vocab (512);
 *   - stories260K against its own saved log-probs: KLD 0, top-1 100%;
 *   - the golden protocol (shared/golden/stories260K-ppl.json, copied to
 *     tests/data/eval): the first stories' token ids equal the golden ids and
 *     each story's NLL sum agrees within GOLD_NLL_TOL;
 *   - multiple-choice scores (with KV reuse between endings) equal a naive
 *     from-scratch evaluation of each ending.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/eval.h"
#include "gguf/gguf.h"
#include "harness.h"
#include "json_mini.h"
#include "kite.h"
#include "model_helpers.h"
#include "tensor/dtype.h"

#define MODEL "models/stories260K.gguf"
#define GOLD_PPL "tests/data/eval/stories260K-ppl.json"
#define GOLD_TEXT "tests/data/eval/tinystories-valid-sample.txt"
#define MC_TASK "tests/data/eval/tinystories-mc.jsonl"
#define N_VOCAB 512
/* Per-story NLL sums (nats, 233..511 predicted tokens) vs run.c: kite's
 * logits are within 1e-4 of run.c's (test_model.c), which moves each token's
 * NLL by at most ~2e-4.  Measured on the development machine: |diff| <=
 * 7e-5 per story, so 1e-3 leaves room for other kernel summation orders. */
#define GOLD_NLL_TOL 1e-3
#define GOLD_STORIES 4

static char tmpdir[] = "/tmp/kite-test-eval-XXXXXX";

static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

static bool one_line(const char *msg) { return msg && *msg && !strchr(msg, '\n'); }

/* ---- row math ---------------------------------------------------------- */

TEST(log_softmax_hand_worked) {
    const float x[2] = {0.0f, (float)log(3.0)}; /* p = 1/4, 3/4 */
    float out[2];
    double lse = eval_log_softmax(x, 2, out);
    CHECK_NEAR(lse, log(4.0), 1e-7);
    CHECK_NEAR(out[0], log(0.25), 1e-7);
    CHECK_NEAR(out[1], log(0.75), 1e-7);
    CHECK_NEAR(eval_nll(x, 2, 0), log(4.0), 1e-7);
    CHECK_NEAR(eval_nll(x, 2, 1), log(4.0 / 3.0), 1e-7);
    /* large logits: shifted by the max, no overflow */
    const float big[3] = {1000.0f, 1000.0f, 1000.0f};
    CHECK_NEAR(eval_logsumexp(big, 3), 1000.0 + log(3.0), 1e-9);
    CHECK_NEAR(eval_nll(big, 3, 2), log(3.0), 1e-9);
    const float neg[2] = {-1e30f, 0.0f};
    CHECK_NEAR(eval_nll(neg, 2, 1), 0.0, 1e-12);
    /* in place */
    float y[4] = {1, 2, 3, 4};
    eval_log_softmax(y, 4, y);
    double s = 0;
    for (int i = 0; i < 4; i++) s += exp((double)y[i]);
    CHECK_NEAR(s, 1.0, 1e-6);
    CHECK_NEAR(y[3] - y[0], 3.0, 1e-6);
}

TEST(argmax_and_kld_hand_worked) {
    const float t[5] = {1, 3, 3, -2, 0};
    CHECK_EQ_INT(eval_argmax(t, 5), 1); /* tie -> lowest index */
    const float p[2] = {(float)log(0.5), (float)log(0.5)};
    const float q[2] = {(float)log(0.25), (float)log(0.75)};
    /* 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3) */
    CHECK_NEAR(eval_kld_row(p, q, 2), 0.5 * log(4.0 / 3.0), 1e-7);
    /* p ln(p/q) + (1-p) ln((1-p)/(1-q)) with p = 0.75, q = 0.25 */
    CHECK_NEAR(eval_kld_row(q + 0, p, 2), 0.25 * log(0.5) + 0.75 * log(1.5), 1e-7);
    const float r[2] = {(float)log(0.75), (float)log(0.25)};
    CHECK_NEAR(eval_kld_row(r, q, 2), 0.75 * log(3.0) + 0.25 * log(1.0 / 3.0), 1e-7);
    CHECK_NEAR(eval_kld_row(q, q, 2), 0.0, 0.0);
    /* zero-probability entries of the base contribute nothing */
    const float z[3] = {-INFINITY, 0.0f, -INFINITY};
    const float u[3] = {(float)log(0.2), (float)log(0.5), (float)log(0.3)};
    CHECK_NEAR(eval_kld_row(z, u, 3), log(2.0), 1e-7);
}

TEST(stats_accumulate) {
    eval_stats s = {0};
    CHECK(isnan(eval_stats_mean_nll(&s)));
    CHECK(isnan(eval_stats_kld_mean(&s)));
    const float base[2] = {(float)log(0.5), (float)log(0.5)};
    const float a[2] = {(float)log(0.25), (float)log(0.75)};
    eval_stats_add(&s, 1.0, a, base, 2, 0);
    eval_stats_add(&s, 3.0, base, base, 2, 1);
    CHECK_EQ_INT(s.n, 2);
    CHECK_NEAR(eval_stats_mean_nll(&s), 2.0, 1e-12);
    CHECK_NEAR(eval_stats_ppl(&s), exp(2.0), 1e-9);
    /* sample sd of {1, 3} = sqrt(2); stderr = 1; ppl err = ppl * 1 */
    CHECK_NEAR(eval_stats_ppl_err(&s), exp(2.0), 1e-9);
    CHECK_NEAR(eval_stats_kld_mean(&s), 0.25 * log(4.0 / 3.0), 1e-7);
    CHECK_NEAR(eval_stats_kld_err(&s), 0.25 * log(4.0 / 3.0), 1e-7);
    /* argmax of a is 1, of base 0 (tie) -> 1 of 2 agree */
    CHECK_NEAR(eval_stats_top1(&s), 50.0, 1e-12);
    CHECK_NEAR(eval_stats_base_ppl(&s), 2.0, 1e-6); /* both targets have p = 1/2 */
}

/* ---- plans ------------------------------------------------------------- */

static bool targets_are(const eval_plan *p, const kite_token *want, int64_t n) {
    if (p->n_scored != n) return false;
    kite_token got[64];
    eval_plan_targets(p, got);
    return n == 0 || !memcmp(got, want, sizeof *got * (size_t)n);
}

TEST(plan_windows) {
    const kite_token text[7] = {10, 11, 12, 13, 14, 15, 16};
    eval_plan p;
    /* BOS, n_ctx 4: [B 10 11 12] [B 13 14 15] [B 16]; every text token scored */
    CHECK_EQ_INT(eval_plan_init(&p, 4, EVAL_PLAN_BOS, 1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 7), KITE_OK);
    CHECK_EQ_INT(p.n_windows, 3);
    CHECK_EQ_INT(p.win_off[3], 10);
    CHECK_EQ_INT(p.tokens[4], 1);
    CHECK_EQ_INT(p.tokens[8], 1);
    CHECK(targets_are(&p, text, 7));
    CHECK_EQ_INT(p.n_unscored, 0);
    eval_plan_free(&p);

    /* llama.cpp halves, n_ctx 4: first = 3; the partial window is skipped */
    CHECK_EQ_INT(eval_plan_init(&p, 4, EVAL_PLAN_BOS | EVAL_PLAN_HALF, 1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 7), KITE_OK);
    CHECK_EQ_INT(p.n_windows, 2);
    CHECK(targets_are(&p, (const kite_token[]){12, 15}, 2));
    CHECK_EQ_INT(p.n_unscored, 5);
    eval_plan_free(&p);

    /* llama-perplexity's windows, n_ctx 3: [B 11 12] [B 14 15] (BOS written over
     * 10 and 13), targets n_ctx/2 + 1 = 2 on; 16 is a partial window */
    CHECK_EQ_INT(eval_plan_init(&p, 3, EVAL_PLAN_BOS | EVAL_PLAN_LLAMACPP, 1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 7), KITE_OK);
    CHECK_EQ_INT(p.n_windows, 2);
    CHECK_EQ_INT(p.win_off[2], 6);
    CHECK_EQ_INT(p.tokens[0], 1);
    CHECK_EQ_INT(p.tokens[1], 11);
    CHECK_EQ_INT(p.tokens[3], 1);
    CHECK(targets_are(&p, (const kite_token[]){12, 15}, 2));
    CHECK_EQ_INT(p.n_unscored, 5);
    eval_plan_free(&p);
    /* without BOS the window keeps its first token */
    CHECK_EQ_INT(eval_plan_init(&p, 3, EVAL_PLAN_LLAMACPP, -1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 7), KITE_OK);
    CHECK_EQ_INT(p.tokens[0], 10);
    CHECK(targets_are(&p, (const kite_token[]){12, 15}, 2));
    eval_plan_free(&p);
    CHECK_EQ_INT(eval_plan_init(&p, 3, EVAL_PLAN_LLAMACPP | EVAL_PLAN_HALF, -1), KITE_E_ARG);
    CHECK_EQ_INT(eval_plan_init(&p, 3, EVAL_PLAN_LLAMACPP | EVAL_PLAN_DOCS, -1), KITE_E_ARG);

    /* no BOS, n_ctx 3: [10 11 12] [13 14 15] [16]: the first of each window is
     * context only, the lone last token gives no window */
    CHECK_EQ_INT(eval_plan_init(&p, 3, 0, -1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 7), KITE_OK);
    CHECK_EQ_INT(p.n_windows, 2);
    CHECK(targets_are(&p, (const kite_token[]){11, 12, 14, 15}, 4));
    CHECK_EQ_INT(p.n_unscored, 3);
    eval_plan_free(&p);

    /* documents: one truncated window each */
    CHECK_EQ_INT(eval_plan_init(&p, 4, EVAL_PLAN_BOS | EVAL_PLAN_DOCS, 1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 5), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text + 5, 2), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, text, 0), KITE_OK);
    CHECK_EQ_INT(p.n_windows, 2);
    CHECK(targets_are(&p, (const kite_token[]){10, 11, 12, 15, 16}, 5));
    CHECK_EQ_INT(p.n_truncated, 2);
    CHECK_EQ_INT(p.n_text, 7);
    eval_plan_free(&p);

    /* many windows (growth of the arrays) */
    kite_token big[3000];
    for (int i = 0; i < 3000; i++) big[i] = i % 500 + 3;
    CHECK_EQ_INT(eval_plan_init(&p, 3, EVAL_PLAN_BOS, 1), KITE_OK);
    CHECK_EQ_INT(eval_plan_add(&p, big, 3000), KITE_OK);
    CHECK_EQ_INT(p.n_windows, 1500);
    CHECK_EQ_INT(p.n_scored, 3000);
    eval_plan_free(&p);

    CHECK_EQ_INT(eval_plan_init(&p, 2, EVAL_PLAN_BOS, 1), KITE_E_ARG);
    CHECK_EQ_INT(eval_plan_init(&p, 8, 64, 1), KITE_E_ARG);
}

/* ---- logits file --------------------------------------------------------- */

#define LF_V 5
#define LF_N 3

static void lf_row(int r, float *out) {
    float x[LF_V];
    for (int i = 0; i < LF_V; i++) x[i] = (float)((r + 1) * (i - 2)) * 0.5f;
    eval_log_softmax(x, LF_V, out);
}

static int write_lf(const char *path) {
    const kite_token ids[LF_N] = {4, 0, 2};
    eval_logits_header h = {.n_vocab = LF_V, .n_ctx = 7, .flags = EVAL_PLAN_BOS, .n_tokens = LF_N};
    eval_logits_writer *w = NULL;
    int rc = eval_logits_write_open(path, &h, ids, &w);
    if (rc != KITE_OK) return rc;
    float row[LF_V];
    for (int r = 0; r < LF_N; r++) {
        lf_row(r, row);
        if ((rc = eval_logits_write_row(w, row)) != KITE_OK) {
            eval_logits_write_abort(w);
            return rc;
        }
    }
    return eval_logits_write_close(w);
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(buf, 1, n, f) == n);
    fclose(f);
}

/* Opens path (and reads all rows); returns the first failing status. */
static int read_all_rows(const char *path) {
    eval_logits_reader *r = NULL;
    int rc = eval_logits_read_open(path, &r);
    if (rc != KITE_OK) return rc;
    float row[64];
    const uint64_t n = eval_logits_read_header(r)->n_tokens;
    for (uint64_t i = 0; i < n && rc == KITE_OK; i++) rc = eval_logits_read_row(r, row);
    eval_logits_read_close(r);
    return rc;
}

TEST(logits_file_round_trip) {
    char path[256];
    tmp_path(path, sizeof path, "rt.logp");
    CHECK_EQ_INT(write_lf(path), KITE_OK);
    size_t size = 0;
    char *buf = harness_read_file(path, &size);
    CHECK_EQ_INT(size, 32 + 4 * LF_N * (1 + LF_V));
    CHECK(buf && !memcmp(buf, "KITELOGP", 8));
    free(buf);
    eval_logits_reader *r = NULL;
    CHECK_EQ_INT(eval_logits_read_open(path, &r), KITE_OK);
    if (!r) return;
    const eval_logits_header *h = eval_logits_read_header(r);
    CHECK_EQ_INT(h->version, 1);
    CHECK_EQ_INT(h->n_vocab, LF_V);
    CHECK_EQ_INT(h->n_ctx, 7);
    CHECK_EQ_INT(h->flags, EVAL_PLAN_BOS);
    CHECK_EQ_INT(h->n_tokens, LF_N);
    CHECK_EQ_INT(eval_logits_read_ids(r)[0], 4);
    CHECK_EQ_INT(eval_logits_read_ids(r)[2], 2);
    const kite_token ids[LF_N] = {4, 0, 2}, other[LF_N] = {4, 1, 2};
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, 7, EVAL_PLAN_BOS, ids, LF_N), KITE_OK);
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V + 1, 7, EVAL_PLAN_BOS, ids, LF_N), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "n_vocab 5, but the model has 6");
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, 8, EVAL_PLAN_BOS, ids, LF_N), KITE_E_FORMAT);
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, 7, EVAL_PLAN_BOS | EVAL_PLAN_HALF, ids, LF_N), KITE_E_FORMAT);
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, 7, EVAL_PLAN_BOS, ids, LF_N - 1), KITE_E_FORMAT);
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, 7, EVAL_PLAN_BOS, other, LF_N), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "token 1 is 0, this run has 1");
    CHECK(one_line(kite_last_error()));
    float row[LF_V], want[LF_V];
    for (int i = 0; i < LF_N; i++) {
        CHECK_EQ_INT(eval_logits_read_row(r, row), KITE_OK);
        lf_row(i, want);
        CHECK(!memcmp(row, want, sizeof row));
    }
    CHECK_EQ_INT(eval_logits_read_row(r, row), KITE_E_STATE);
    eval_logits_read_close(r);

    /* the writer refuses more rows than announced and a short file */
    eval_logits_header h2 = {.n_vocab = LF_V, .n_ctx = 7, .flags = 0, .n_tokens = 1};
    eval_logits_writer *w = NULL;
    char p2[256];
    tmp_path(p2, sizeof p2, "short.logp");
    CHECK_EQ_INT(eval_logits_write_open(p2, &h2, ids, &w), KITE_OK);
    CHECK_EQ_INT(eval_logits_write_close(w), KITE_E_STATE); /* 0 of 1 rows */
    CHECK(access(p2, F_OK) != 0);                            /* nothing left behind */
    const kite_token bad_id[1] = {LF_V};
    CHECK_EQ_INT(eval_logits_write_open(p2, &h2, bad_id, &w), KITE_E_ARG);
}

/* llama.cpp layout: 2 chunks of n_ctx 5 -> 5 - 1 - 2 = 2 rows each. */
#define LC_CTX 5
#define LC_CHUNKS 2
#define LC_ROWS (LC_CHUNKS * (LC_CTX - 1 - LC_CTX / 2))

static int write_lc(const char *path, const float rows[LC_ROWS][LF_V]) {
    const kite_token toks[LC_CHUNKS * LC_CTX] = {1, 2, 3, 4, 0, 1, 4, 3, 2, 1};
    eval_logits_header h = {.n_vocab = LF_V, .n_ctx = LC_CTX, .flags = EVAL_PLAN_BOS | EVAL_PLAN_LLAMACPP,
                            .n_tokens = LC_ROWS};
    eval_logits_writer *w = NULL;
    int rc = eval_logits_write_open_llamacpp(path, &h, toks, LC_CHUNKS, &w);
    if (rc != KITE_OK) return rc;
    for (int r = 0; r < LC_ROWS; r++)
        if ((rc = eval_logits_write_row(w, rows[r])) != KITE_OK) {
            eval_logits_write_abort(w);
            return rc;
        }
    return eval_logits_write_close(w);
}

TEST(logits_file_llamacpp) {
    char path[256];
    tmp_path(path, sizeof path, "lc.logits");
    float rows[LC_ROWS][LF_V];
    for (int r = 0; r < LC_ROWS; r++) lf_row(r, rows[r]);
    rows[3][0] = -30.0f; /* below the 16-nat floor (not the target, 1): held as the floor, read as -inf */
    CHECK_EQ_INT(write_lc(path, (const float(*)[LF_V])rows), KITE_OK);
    size_t size = 0;
    unsigned char *img = (unsigned char *)harness_read_file(path, &size);
    /* 20-byte header, 10 tokens, 4 rows of nv = 2*3 + 4 = 10 u16 words */
    CHECK_EQ_INT(size, 20 + 4 * LC_CHUNKS * LC_CTX + LC_ROWS * 2 * 10);
    CHECK(img && !memcmp(img, "_logits_", 8) && img[8] == LC_CTX && img[12] == LF_V && img[16] == LC_CHUNKS);
    eval_logits_reader *r = NULL;
    CHECK_EQ_INT(eval_logits_read_open(path, &r), KITE_OK);
    if (!r || !img) return;
    CHECK_EQ_INT(eval_logits_read_format(r), EVAL_LOGITS_LLAMACPP);
    int32_t n_chunk = 0;
    const kite_token *chunks = eval_logits_read_chunks(r, &n_chunk);
    CHECK_EQ_INT(n_chunk, LC_CHUNKS);
    CHECK(chunks && chunks[0] == 1 && chunks[9] == 1);
    const eval_logits_header *h = eval_logits_read_header(r);
    CHECK_EQ_INT(h->n_tokens, LC_ROWS);
    CHECK_EQ_INT(h->n_ctx, LC_CTX);
    /* targets: window indices 3 and 4 of each chunk */
    const kite_token want_ids[LC_ROWS] = {4, 0, 2, 1};
    CHECK(!memcmp(eval_logits_read_ids(r), want_ids, sizeof want_ids));
    /* only the llama.cpp bit of the flags is compared (the file has no BOS record) */
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, LC_CTX, EVAL_PLAN_LLAMACPP, want_ids, LC_ROWS), KITE_OK);
    CHECK_EQ_INT(eval_logits_read_match(r, LF_V, LC_CTX, EVAL_PLAN_BOS | EVAL_PLAN_HALF, want_ids, LC_ROWS),
                 KITE_E_FORMAT);
    float row[LF_V];
    for (int i = 0; i < LC_ROWS; i++) {
        CHECK_EQ_INT(eval_logits_read_row(r, row), KITE_OK);
        for (int v = 0; v < LF_V; v++) {
            if (i == 3 && v == 0) {
                CHECK_MSG(isinf(row[v]) && row[v] < 0, "row 3 entry 0 below the floor reads %g", (double)row[v]);
                continue;
            }
            /* 16 bits over the row's range: within half a step of 16/65535 nats */
            CHECK_MSG(fabsf(row[v] - rows[i][v]) < 2e-4f, "row %d entry %d: %g, wrote %g", i, v, (double)row[v],
                      (double)rows[i][v]);
        }
    }
    CHECK_EQ_INT(eval_logits_read_row(r, row), KITE_E_STATE);
    eval_logits_read_close(r);

    /* corruptions: header fields, sizes, tokens, row scales */
    char bad[256];
    tmp_path(bad, sizeof bad, "lc-bad.logits");
    unsigned char *c = malloc(size + 8);
    CHECK(c != NULL);
    if (!c) return;
    struct {
        const char *what;
        size_t off;
        unsigned char v;
        long dsize;
        int want;
        const char *needle;
    } cases[] = {
        {"n_ctx 2", 8, 2, 0, KITE_E_FORMAT, "n_ctx"},
        {"n_vocab 0", 12, 0, 0, KITE_E_FORMAT, "n_vocab"},
        {"n_vocab negative", 15, 0x80, 0, KITE_E_FORMAT, "n_vocab"},
        {"n_chunk 0", 16, 0, 0, KITE_E_FORMAT, "n_chunk"},
        {"n_chunk huge", 18, 0x7f, 0, KITE_E_FORMAT, "truncated"},
        {"token out of range", 20, 9, 0, KITE_E_FORMAT, "tokens[0]"},
        {"truncated row", SIZE_MAX, 0, -1, KITE_E_FORMAT, "truncated"},
        {"truncated header", SIZE_MAX, 0, -(long)size + 12, KITE_E_FORMAT, "truncated header"},
        {"trailing data", SIZE_MAX, 0, 2, KITE_E_FORMAT, "trailing"},
        {"NaN scale", 20 + 4 * LC_CHUNKS * LC_CTX + 3, 0x7f, 0, KITE_E_FORMAT, "not a llama.cpp"},
        {"positive minimum", 20 + 4 * LC_CHUNKS * LC_CTX + 7, 0x40, 0, KITE_E_FORMAT, "not a llama.cpp"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(c, img, size);
        size_t n = size;
        if (cases[k].off != SIZE_MAX) {
            c[cases[k].off] = cases[k].v;
            if (!strcmp(cases[k].what, "NaN scale")) c[cases[k].off - 1] = 0xc0;
            if (!strcmp(cases[k].what, "positive minimum")) c[cases[k].off - 1] = 0;
        }
        if (cases[k].dsize < 0) n = size - (size_t)(-cases[k].dsize);
        if (cases[k].dsize > 0) {
            memset(c + size, 0, (size_t)cases[k].dsize);
            n = size + (size_t)cases[k].dsize;
        }
        write_bytes(bad, c, n);
        int rc = read_all_rows(bad);
        CHECK_MSG(rc == cases[k].want, "%s: status %d, want %d (%s)", cases[k].what, rc, cases[k].want,
                  kite_last_error());
        CHECK_MSG(strstr(kite_last_error(), cases[k].needle) != NULL, "%s: message '%s' lacks '%s'", cases[k].what,
                  kite_last_error(), cases[k].needle);
        CHECK_MSG(one_line(kite_last_error()), "%s: not one line", cases[k].what);
    }
    free(c);
    free(img);
    /* the writer checks its header */
    eval_logits_header h2 = {.n_vocab = LF_V, .n_ctx = LC_CTX, .flags = EVAL_PLAN_LLAMACPP, .n_tokens = 3};
    eval_logits_writer *w = NULL;
    const kite_token toks[LC_CHUNKS * LC_CTX] = {0};
    CHECK_EQ_INT(eval_logits_write_open_llamacpp(path, &h2, toks, LC_CHUNKS, &w), KITE_E_ARG);
}

TEST(logits_file_corrupt) {
    char good[256], bad[256];
    tmp_path(good, sizeof good, "good.logp");
    tmp_path(bad, sizeof bad, "bad.logp");
    CHECK_EQ_INT(write_lf(good), KITE_OK);
    size_t size = 0;
    unsigned char *img = (unsigned char *)harness_read_file(good, &size);
    CHECK(img != NULL);
    if (!img) return;
    unsigned char *c = malloc(size + 8);
    struct {
        const char *what;
        size_t off;       /* byte to change (SIZE_MAX: none) */
        unsigned char v;
        long dsize;       /* bytes removed (<0) or appended (>0) */
        int want;
        const char *needle;
    } cases[] = {
        {"bad magic", 0, 'X', 0, KITE_E_FORMAT, "bad magic"},
        {"version", 8, 2, 0, KITE_E_UNSUPPORTED, "version 2"},
        {"n_vocab 0", 12, 0, 0, KITE_E_FORMAT, "n_vocab"},
        {"n_vocab huge", 15, 0x40, 0, KITE_E_FORMAT, "n_vocab"},
        {"n_ctx 0", 16, 0, 0, KITE_E_FORMAT, "n_ctx"},
        {"flags", 20, 0x80, 0, KITE_E_FORMAT, "flags"},
        {"n_tokens 0", 24, 0, 0, KITE_E_FORMAT, "n_tokens"},
        {"n_tokens huge", 31, 0x7f, 0, KITE_E_FORMAT, "truncated"},
        {"id out of range", 32, 9, 0, KITE_E_FORMAT, "ids[0]"},
        {"truncated row", SIZE_MAX, 0, -1, KITE_E_FORMAT, "truncated"},
        {"truncated header", SIZE_MAX, 0, -(long)size + 20, KITE_E_FORMAT, "truncated header"},
        {"empty", SIZE_MAX, 0, -(long)size, KITE_E_FORMAT, "truncated header"},
        {"trailing data", SIZE_MAX, 0, 4, KITE_E_FORMAT, "trailing"},
        {"NaN entry", 32 + 4 * LF_N + 4 * 2 + 3, 0x7f, 0, KITE_E_FORMAT, "not a log-probability"},
        {"positive entry", 32 + 4 * LF_N + 4 * LF_V + 3, 0x40, 0, KITE_E_FORMAT, "not a log-probability"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(c, img, size);
        size_t n = size;
        if (cases[k].off != SIZE_MAX) {
            if (cases[k].off == 24) memset(c + 24, 0, 8);
            else c[cases[k].off] = cases[k].v;
            if (cases[k].off == 32 + 4 * LF_N + 4 * 2 + 3) c[cases[k].off - 1] = 0xc0; /* 0x7fc0.... = NaN */
        }
        if (cases[k].dsize < 0) n = size - (size_t)(-cases[k].dsize);
        if (cases[k].dsize > 0) {
            memset(c + size, 0, (size_t)cases[k].dsize);
            n = size + (size_t)cases[k].dsize;
        }
        write_bytes(bad, c, n);
        int rc = read_all_rows(bad);
        CHECK_MSG(rc == cases[k].want, "%s: status %d, want %d (%s)", cases[k].what, rc, cases[k].want,
                  kite_last_error());
        CHECK_MSG(strstr(kite_last_error(), cases[k].needle) != NULL, "%s: message '%s' lacks '%s'", cases[k].what,
                  kite_last_error(), cases[k].needle);
        CHECK_MSG(one_line(kite_last_error()), "%s: not one line", cases[k].what);
    }
    eval_logits_reader *r = NULL;
    CHECK_EQ_INT(eval_logits_read_open("/nonexistent/x.logp", &r), KITE_E_IO);
    CHECK_EQ_INT(eval_logits_read_open(tmpdir, &r), KITE_E_IO); /* a directory */
    free(c);
    free((void *)img);
}

/* ---- JSON-lines tasks ---------------------------------------------------- */

TEST(mc_parse_valid) {
    const char *text = "\n"
                       "{\"context\": \"A \\\"b\\\"\\n\\u00e9\\ud83d\\ude00\", \"label\": 1, \"x\": {\"y\": [1, -2.5e3, "
                       "true, null, \"]\"]}, \"endings\": [\" one\", \" two\\u0000x\"]}\r\n"
                       "   \n"
                       "{\"endings\":[\"a\",\"b\",\"c\"],\"label\":0,\"context\":\"\"}";
    eval_mc_task t = {0};
    CHECK_EQ_INT(eval_mc_parse(text, strlen(text), "t.jsonl", &t), KITE_OK);
    CHECK_EQ_INT(t.n_items, 2);
    if (t.n_items != 2) return;
    CHECK_STR_EQ(t.items[0].context, "A \"b\"\n\xc3\xa9\xf0\x9f\x98\x80");
    CHECK_EQ_INT(t.items[0].context_len, 12);
    CHECK_EQ_INT(t.items[0].n_endings, 2);
    CHECK_EQ_INT(t.items[0].label, 1);
    CHECK_EQ_INT(t.items[0].ending_len[1], 6);
    CHECK(!memcmp(t.items[0].endings[1], " two\0x", 6));
    CHECK_EQ_INT(t.items[1].n_endings, 3);
    CHECK_STR_EQ(t.items[1].endings[2], "c");
    eval_mc_free(&t);

    CHECK_EQ_INT(eval_mc_load(MC_TASK, &t), KITE_OK);
    CHECK_EQ_INT(t.n_items, 20);
    eval_mc_free(&t);
}

TEST(mc_parse_errors) {
    char deep[200];
    memset(deep, '[', 40);
    snprintf(deep, sizeof deep, "{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0, \"x\": %.40s}",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
    struct {
        const char *text;
        const char *needle;
    } cases[] = {
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"]}", ":1: missing \"label\""},
        {"\n{\"endings\": [\"a\", \"b\"], \"label\": 0}", ":2: missing \"context\""},
        {"{\"context\": \"c\", \"label\": 0}", "missing \"endings\""},
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 2}", "label 2 out of range (2 endings)"},
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": -1}", "label -1 out of range"},
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 1.5}", "must be an integer"},
        {"{\"context\": \"c\", \"endings\": [\"a\"], \"label\": 0}", "1 ending(s), need at least 2"},
        {"{\"context\": \"c\", \"endings\": [\"a\", 3], \"label\": 0}", "array of strings"},
        {"{\"context\": 5, \"endings\": [\"a\", \"b\"], \"label\": 0}", "\"context\" must be a string"},
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0} x", "trailing characters"},
        {"{\"context\": \"c\\q\", \"endings\": [\"a\", \"b\"], \"label\": 0}", "bad escape"},
        {"{\"context\": \"c\\ud800\", \"endings\": [\"a\", \"b\"], \"label\": 0}", "unpaired surrogate"},
        {"{\"context\": \"c\\u12\"}", "bad \\u escape"},
        {"{\"context\": \"c\tx\", \"endings\": [\"a\", \"b\"], \"label\": 0}", "control character"},
        {"{\"context\": \"c\", \"context\": \"d\", \"endings\": [\"a\", \"b\"], \"label\": 0}", "duplicate key"},
        {"{\"context\": \"unterminated", "unterminated string"},
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0, \"x\": tru}", "bad number"},
        {"[1, 2]", "expected a JSON object"},
        {"{\"context\" \"c\"}", "expected ':'"},
        {"{\"context\": \"c\",}", "expected a string"},
        {"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0, \"x\": 01}", "expected ',' or '}'"},
        {deep, "nesting deeper than 32"},
        {"\n  \n", "no items"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        eval_mc_task t = {0};
        int rc = eval_mc_parse(cases[k].text, strlen(cases[k].text), "t.jsonl", &t);
        CHECK_MSG(rc == KITE_E_FORMAT, "case %zu: status %d", k, rc);
        CHECK_MSG(strstr(kite_last_error(), cases[k].needle) != NULL, "case %zu: '%s' lacks '%s'", k,
                  kite_last_error(), cases[k].needle);
        CHECK_MSG(one_line(kite_last_error()), "case %zu: not one line", k);
        CHECK(t.items == NULL && t.n_items == 0);
    }
    eval_mc_task t = {0};
    CHECK_EQ_INT(eval_mc_load("/nonexistent/task.jsonl", &t), KITE_E_IO);
}

/* ---- model-level ---------------------------------------------------------- */

/* Copies MODEL to path with output.weight set to zero: uniform outputs. */
static int write_uniform_model(const char *path) {
    gguf_ctx *g = NULL;
    int rc = gguf_open(MODEL, NULL, &g);
    if (rc != KITE_OK) return rc;
    gguf_writer *w = gguf_writer_new();
    float *zeros = NULL;
    char name[256];
    for (uint64_t i = 0; i < g->n_kv && rc == KITE_OK; i++) {
        snprintf(name, sizeof name, "%.*s", (int)g->kv[i].key.len, g->kv[i].key.ptr);
        if (!strcmp(name, "general.alignment")) continue;
        rc = gguf_writer_set_value(w, name, &g->kv[i].value);
    }
    for (uint64_t i = 0; i < g->n_tensors && rc == KITE_OK; i++) {
        const gguf_tensor *t = &g->tensors[i];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const void *data = t->data;
        if (!strcmp(name, "output.weight")) {
            CHECK_EQ_INT(t->type, KITE_DTYPE_F32);
            zeros = calloc((size_t)(t->ne[0] * t->ne[1]), sizeof(float));
            data = zeros;
        }
        rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data);
    }
    CHECK(zeros != NULL);
    if (rc == KITE_OK) rc = gguf_writer_write(w, path);
    gguf_writer_free(w);
    free(zeros);
    gguf_close(g);
    return rc;
}

/* Plan over the first tokens of the golden text (stream mode). */
static int plan_sample(const kite_model *m, eval_plan *p, int32_t n_ctx, uint32_t extra, size_t n_bytes) {
    size_t len = 0;
    char *text = harness_read_file(GOLD_TEXT, &len);
    if (!text) return KITE_E_IO;
    if (len > n_bytes) len = n_bytes;
    kite_token *ids = NULL;
    int64_t n = 0;
    int rc = eval_tokenize(m, text, len, &ids, &n);
    if (rc == KITE_OK) rc = eval_plan_init(p, n_ctx, EVAL_PLAN_BOS | extra, kite_token_bos(m));
    if (rc == KITE_OK) rc = eval_plan_add(p, ids, n);
    free(ids);
    free(text);
    return rc;
}

TEST(uniform_model_ppl_is_vocab_size) {
    char path[256];
    tmp_path(path, sizeof path, "uniform.gguf");
    CHECK_EQ_INT(write_uniform_model(path), KITE_OK);
    kite_model *m = load_model_checked(path);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 64, 1);
    eval_plan p;
    CHECK_EQ_INT(plan_sample(m, &p, 64, 0, 1500), KITE_OK);
    CHECK(p.n_scored > 200);
    eval_ppl_opts o = {.n_vocab = N_VOCAB, .n_batch = 24};
    eval_stats s;
    CHECK_EQ_INT(eval_ppl_run(c, &p, &o, &s), KITE_OK);
    CHECK_EQ_INT(s.n, p.n_scored);
    CHECK_NEAR(eval_stats_ppl(&s), 512.0, 512.0 * 1e-9);
    CHECK_NEAR(eval_stats_ppl_err(&s), 0.0, 1e-3);
    eval_plan_free(&p);
    kite_ctx_free(c);
    kite_model_free(m);
}

static void count_windows(void *user, int32_t w, int32_t n, const eval_stats *s) {
    (void)s;
    int *calls = user;
    CHECK_EQ_INT(w, *calls);
    CHECK(w < n);
    (*calls)++;
}

TEST(kld_against_own_logits_is_zero) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 128, 2);
    eval_plan p;
    CHECK_EQ_INT(plan_sample(m, &p, 96, 0, 2500), KITE_OK);
    kite_token *tg = malloc(sizeof *tg * (size_t)p.n_scored);
    eval_plan_targets(&p, tg);
    char path[256];
    tmp_path(path, sizeof path, "self.logp");
    eval_logits_header h = {.n_vocab = N_VOCAB, .n_ctx = 96, .flags = p.flags, .n_tokens = (uint64_t)p.n_scored};
    eval_logits_writer *w = NULL;
    CHECK_EQ_INT(eval_logits_write_open(path, &h, tg, &w), KITE_OK);
    int calls = 0;
    eval_ppl_opts o = {.n_vocab = N_VOCAB, .save = w, .on_window = count_windows, .user = &calls};
    eval_stats s1, s2;
    CHECK_EQ_INT(eval_ppl_run(c, &p, &o, &s1), KITE_OK);
    CHECK_EQ_INT(calls, p.n_windows);
    CHECK_EQ_INT(eval_logits_write_close(w), KITE_OK);
    const double ppl = eval_stats_ppl(&s1);
    CHECK(ppl > 2.0 && ppl < 30.0);

    eval_logits_reader *r = NULL;
    CHECK_EQ_INT(eval_logits_read_open(path, &r), KITE_OK);
    if (r) {
        CHECK_EQ_INT(eval_logits_read_match(r, N_VOCAB, 96, p.flags, tg, (uint64_t)p.n_scored), KITE_OK);
        /* a different batch split must not change the result beyond rounding */
        eval_ppl_opts o2 = {.n_vocab = N_VOCAB, .n_batch = 17, .base = r};
        CHECK_EQ_INT(eval_ppl_run(c, &p, &o2, &s2), KITE_OK);
        CHECK_EQ_INT(s2.n_kld, p.n_scored);
        CHECK_NEAR(eval_stats_kld_mean(&s2), 0.0, 1e-9);
        CHECK_NEAR(eval_stats_top1(&s2), 100.0, 0.0);
        CHECK_NEAR(eval_stats_base_ppl(&s2), ppl, ppl * 1e-6);
        CHECK_NEAR(eval_stats_ppl(&s2), ppl, ppl * 1e-5);
        eval_logits_read_close(r);
    }
    /* a reader already at its end makes the run fail cleanly */
    CHECK_EQ_INT(eval_logits_read_open(path, &r), KITE_OK);
    if (r) {
        float *row = malloc(sizeof(float) * N_VOCAB);
        for (int64_t i = 0; i < p.n_scored; i++) eval_logits_read_row(r, row);
        free(row);
        eval_ppl_opts o3 = {.n_vocab = N_VOCAB, .base = r};
        CHECK_EQ_INT(eval_ppl_run(c, &p, &o3, &s2), KITE_E_STATE);
        eval_logits_read_close(r);
    }
    free(tg);
    eval_plan_free(&p);
    kite_ctx_free(c);
    kite_model_free(m);
}

static bool is_space_c(char ch) { return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r'; }

typedef struct story_nll {
    double prev;    /* nll_sum after the previous window */
    double nll[GOLD_STORIES];
    int64_t n[GOLD_STORIES];
    int64_t prev_n;
} story_nll;

static void per_story(void *user, int32_t w, int32_t n_windows, const eval_stats *s) {
    (void)n_windows;
    story_nll *st = user;
    if (w < GOLD_STORIES) {
        st->nll[w] = s->nll_sum - st->prev;
        st->n[w] = s->n - st->prev_n;
    }
    st->prev = s->nll_sum;
    st->prev_n = s->n;
}

TEST(golden_stories_ppl) {
    char *gold = harness_read_file(GOLD_PPL, NULL);
    char *text = harness_read_file(GOLD_TEXT, NULL);
    CHECK(gold && text);
    kite_model *m = load_model_checked(MODEL);
    if (!gold || !text || !m) goto out;
    kite_ctx *c = new_ctx_checked(m, 512, 2);
    eval_plan p;
    CHECK_EQ_INT(eval_plan_init(&p, 512, EVAL_PLAN_BOS | EVAL_PLAN_DOCS, kite_token_bos(m)), KITE_OK);
    const char *q = strstr(gold, "\"per_story\"");
    CHECK(q != NULL);
    double want_nll[GOLD_STORIES];
    int64_t want_n[GOLD_STORIES];
    const char *t = text;
    for (int k = 0; k < GOLD_STORIES && q; k++) {
        /* the story's text: up to the separator, stripped */
        const char *sep = strstr(t, "<|endoftext|>");
        const char *a = t, *b = sep ? sep : t + strlen(t);
        while (a < b && is_space_c(*a)) a++;
        while (b > a && is_space_c(b[-1])) b--;
        t = sep ? sep + strlen("<|endoftext|>") : b;
        kite_token *ids = NULL;
        int64_t n = 0;
        CHECK_EQ_INT(eval_tokenize(m, a, (size_t)(b - a), &ids, &n), KITE_OK);
        /* golden: "n_predicted": N, "nll_sum": X, "ids": [1, ...] */
        const char *f = strstr(q, "\"n_predicted\": ");
        const char *g = f ? strstr(f, "\"nll_sum\": ") : NULL;
        const char *h = g ? strstr(g, "\"ids\": ") : NULL;
        CHECK(h != NULL);
        if (!h) {
            free(ids);
            break;
        }
        want_n[k] = strtoll(f + strlen("\"n_predicted\": "), NULL, 10);
        want_nll[k] = strtod(g + strlen("\"nll_sum\": "), NULL);
        h += strlen("\"ids\": ");
        int32_t *gid = NULL;
        size_t gn = 0;
        CHECK_EQ_INT(jm_int_array(&h, &gid, &gn), 0);
        q = h;
        /* golden ids are BOS + the first 511 text tokens */
        const size_t cmp = gn - 1 < (size_t)n ? gn - 1 : (size_t)n;
        CHECK_MSG(gn >= 2 && gid[0] == 1 && !memcmp(gid + 1, ids, sizeof *ids * cmp), "story %d: token ids differ", k);
        CHECK_EQ_INT(eval_plan_add(&p, ids, n), KITE_OK);
        free(gid);
        free(ids);
    }
    story_nll st = {0};
    eval_ppl_opts o = {.n_vocab = N_VOCAB, .on_window = per_story, .user = &st};
    eval_stats s;
    CHECK_EQ_INT(eval_ppl_run(c, &p, &o, &s), KITE_OK);
    for (int k = 0; k < GOLD_STORIES; k++) {
        CHECK_EQ_INT(st.n[k], want_n[k]);
        CHECK_NEAR(st.nll[k], want_nll[k], GOLD_NLL_TOL);
        printf("    story %d: %lld tokens, NLL %.6f (golden %.6f, diff %.2e)\n", k, (long long)st.n[k], st.nll[k],
               want_nll[k], st.nll[k] - want_nll[k]);
    }
    eval_plan_free(&p);
    kite_ctx_free(c);
out:
    kite_model_free(m);
    free(gold);
    free(text);
}

/* Naive score of one ending: fresh cache, whole sequence, sum over the
 * tokens after the common prefix with the context. */
static double naive_ll(kite_ctx *c, const kite_model *m, const char *ctx_text, const char *ending) {
    kite_token *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    char joined[1024];
    snprintf(joined, sizeof joined, "%s%s", ctx_text, ending);
    eval_tokenize(m, ctx_text, strlen(ctx_text), &a, &na);
    eval_tokenize(m, joined, strlen(joined), &b, &nb);
    kite_token seq[512];
    seq[0] = kite_token_bos(m);
    memcpy(seq + 1, b, sizeof *b * (size_t)nb);
    int64_t s = 0;
    while (s < na && s < nb && a[s] == b[s]) s++;
    kite_ctx_truncate(c, 0);
    CHECK_EQ_INT(kite_ctx_eval(c, seq, (int32_t)nb + 1, true), KITE_OK);
    double ll = 0;
    for (int64_t j = s + 1; j <= nb; j++) ll -= eval_nll(kite_ctx_logits(c, (int32_t)j - 1), N_VOCAB, seq[j]);
    free(a);
    free(b);
    return ll;
}

TEST(mc_scores_match_naive) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 512, 1);
    eval_mc_task t = {0};
    CHECK_EQ_INT(eval_mc_load(MC_TASK, &t), KITE_OK);
    double ll[EVAL_MC_MAX_ENDINGS];
    int32_t nt[EVAL_MC_MAX_ENDINGS], nc[EVAL_MC_MAX_ENDINGS];
    eval_mc_scores sc = {.ll = ll, .n_tokens = nt, .n_chars = nc};
    int correct = 0;
    for (int32_t i = 0; i < t.n_items; i++) {
        const eval_mc_item *it = &t.items[i];
        CHECK_EQ_INT(eval_mc_score(c, m, it, &sc), KITE_OK);
        correct += sc.pred == it->label;
        if (i < 3)
            for (int32_t k = 0; k < it->n_endings; k++) {
                CHECK_NEAR(ll[k], naive_ll(c, m, it->context, it->endings[k]), 1e-3);
                CHECK(nt[k] >= 1);
                CHECK_EQ_INT(nc[k], (int32_t)strlen(it->endings[k]));
            }
    }
    /* the plausible endings are far likelier for this model (17/20 measured) */
    CHECK_MSG(correct >= 14, "only %d of %d correct", correct, t.n_items);
    /* an item too long for the window */
    kite_ctx *small = new_ctx_checked(m, 8, 1);
    CHECK_EQ_INT(eval_mc_score(small, m, &t.items[0], &sc), KITE_E_RANGE);
    CHECK(one_line(kite_last_error()));
    kite_ctx_free(small);
    eval_mc_free(&t);
    kite_ctx_free(c);
    kite_model_free(m);
}

/* ---- fuzz corpus replay ------------------------------------------------------ */

#include "fuzz/fuzz_logits.c"

TEST(fuzz_logits_corpus_replay) {
    /* each call aborts on a broken invariant; the corpus has 3 seeds */
    CHECK(harness_replay_dir("tests/fuzz/corpus/fuzz_logits", LLVMFuzzerTestOneInput) >= 3);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(log_softmax_hand_worked);
    RUN(argmax_and_kld_hand_worked);
    RUN(stats_accumulate);
    RUN(plan_windows);
    RUN(logits_file_round_trip);
    RUN(logits_file_llamacpp);
    RUN(logits_file_corrupt);
    RUN(mc_parse_valid);
    RUN(mc_parse_errors);
    RUN(uniform_model_ppl_is_vocab_size);
    RUN(kld_against_own_logits_is_zero);
    RUN(golden_stories_ppl);
    RUN(mc_scores_match_naive);
    RUN(fuzz_logits_corpus_replay);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return harness_summary(__FILE__);
}
