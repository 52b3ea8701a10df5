/*
 * test_imatrix.c - importance matrices (src/quant/imatrix.c): the reader on
 * llama-imatrix's files (tests/data/imatrix, written by the Feb 2025
 * llama.cpp snapshot), write -> read round trips byte for byte, every
 * truncation of a good file refused with a message naming the file, the
 * malformed cases named by field, collection on stories260K, tiny-k256 and
 * tiny-mixtral (expert slices) against llama-imatrix's values, and the
 * fuzz_imatrix corpus replayed.
 * llama-quantize's bytes with these files: tests/e2e/test_imatrix.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "model/model.h"
#include "quant/imatrix.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

#define DATA "tests/data/imatrix/"

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

TEST(test_reads_llama_files) {
    imatrix *m = NULL;
    CHECK_EQ_INT(imatrix_read(DATA "stories260K.imatrix", &m), KITE_OK);
    if (!m) return;
    CHECK_EQ_INT(m->n_entries, 35); /* 5 layers x 7 matrices */
    CHECK_EQ_INT(m->chunks, 55);
    CHECK(m->dataset && !strcmp(m->dataset, "calib.txt"));
    const imatrix_entry *e = imatrix_find(m, "blk.0.ffn_down.weight");
    CHECK(e && e->n == 172 && e->ncall == 55);
    if (e) CHECK(fabsf(e->qw[3] - e->values[3] / 55.0f) <= 1e-6f * e->values[3]);
    CHECK(imatrix_find(m, "blk.0.ffn_down") == NULL);
    imatrix_free(m);
    m = NULL;
    CHECK_EQ_INT(imatrix_read(DATA "tiny-mixtral.imatrix", &m), KITE_OK);
    e = m ? imatrix_find(m, "blk.1.ffn_down_exps.weight") : NULL;
    CHECK(e && e->n == 4 * 96); /* one slice per expert */
    imatrix_free(m);
}

TEST(test_round_trip) {
    size_t len = 0;
    uint8_t *ref = slurp(DATA "tiny-k256.imatrix", &len);
    CHECK(ref != NULL);
    if (!ref) return;
    imatrix *m = NULL;
    CHECK_EQ_INT(imatrix_parse(ref, len, "tiny-k256", &m), KITE_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/kite-test-imatrix-%d.dat", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    CHECK_EQ_INT(imatrix_write(m, path), KITE_OK);
    size_t len2 = 0;
    uint8_t *back = slurp(path, &len2);
    /* llama.cpp writes its map in its own order; kite keeps the order read */
    CHECK_EQ_INT((long long)len2, (long long)len);
    imatrix *m2 = NULL;
    CHECK(back && imatrix_parse(back, len2, "back", &m2) == KITE_OK);
    if (m && m2) {
        CHECK_EQ_INT(m2->n_entries, m->n_entries);
        for (int32_t i = 0; i < m->n_entries && i < m2->n_entries; i++) {
            CHECK(!strcmp(m->e[i].name, m2->e[i].name) && m->e[i].n == m2->e[i].n && m->e[i].ncall == m2->e[i].ncall);
            CHECK(!memcmp(m->e[i].values, m2->e[i].values, (size_t)m->e[i].n * 4));
        }
        CHECK(!strcmp(m2->dataset, m->dataset) && m2->chunks == m->chunks);
    }
    CHECK(memcmp(back, ref, 4) == 0);
    remove(path);
    /* every strict prefix is refused, naming the file, without a crash */
    int refused = 0;
    for (size_t n = 0; n < len; n += (n < 64 ? 1 : 97)) {
        imatrix *t = NULL;
        if (imatrix_parse(ref, n, "cut.imatrix", &t) != KITE_OK && t == NULL && strstr(kite_last_error(), "cut.imatrix"))
            refused++;
        imatrix_free(t);
    }
    CHECK(refused > 100);
    imatrix_free(m);
    imatrix_free(m2);
    free(ref);
    free(back);
}

/* Appends an entry to buf at *o. */
static void put_i32(uint8_t *buf, size_t *o, int32_t v) {
    memcpy(buf + *o, &v, 4);
    *o += 4;
}
static void put_entry(uint8_t *buf, size_t *o, const char *name, int32_t ncall, int32_t n, float v) {
    put_i32(buf, o, (int32_t)strlen(name));
    memcpy(buf + *o, name, strlen(name));
    *o += strlen(name);
    put_i32(buf, o, ncall);
    put_i32(buf, o, n);
    for (int32_t j = 0; j < n; j++) {
        memcpy(buf + *o, &v, 4);
        *o += 4;
    }
}

static void expect_bad(const uint8_t *buf, size_t n, const char *needle) {
    imatrix *m = NULL;
    const int rc = imatrix_parse(buf, n, "bad.dat", &m);
    CHECK_EQ_INT(rc, KITE_E_FORMAT);
    CHECK(m == NULL);
    if (!strstr(kite_last_error(), needle) || !strstr(kite_last_error(), "bad.dat"))
        fprintf(stderr, "    message '%s' lacks '%s'\n", kite_last_error(), needle);
    CHECK(strstr(kite_last_error(), needle) != NULL);
}

TEST(test_malformed) {
    uint8_t b[512];
    size_t o = 0;
    put_i32(b, &o, 0);
    expect_bad(b, o, "entry count 0");
    o = 0;
    put_i32(b, &o, 1000000);
    put_entry(b, &o, "a", 1, 1, 1.0f);
    expect_bad(b, o, "does not fit");
    o = 0;
    put_i32(b, &o, 2);
    put_entry(b, &o, "a", 1, 2, 1.0f);
    put_entry(b, &o, "a", 1, 2, 1.0f);
    expect_bad(b, o, "appears twice");
    o = 0;
    put_i32(b, &o, 1);
    put_entry(b, &o, "a", -1, 2, 1.0f);
    expect_bad(b, o, "negative call count");
    o = 0;
    put_i32(b, &o, 1);
    put_entry(b, &o, "a", 1, 2, NAN);
    expect_bad(b, o, "value 0");
    o = 0;
    put_i32(b, &o, 1);
    put_entry(b, &o, "a", 1, 2, -1.0f);
    expect_bad(b, o, "value 0");
    o = 0;
    put_i32(b, &o, 1);
    put_entry(b, &o, "a", 1, 0, 1.0f);
    put_i32(b, &o, 0);
    put_i32(b, &o, 0);
    expect_bad(b, o, "0 values");
    o = 0;
    put_i32(b, &o, 1);
    put_entry(b, &o, "a", 1, 1, 1.0f);
    put_i32(b, &o, 3);
    put_i32(b, &o, 10); /* dataset longer than the bytes left */
    memcpy(b + o, "abc", 3);
    o += 3;
    expect_bad(b, o, "dataset name length 10");
    o = 0;
    put_i32(b, &o, 1);
    put_entry(b, &o, "a", 1, 1, 1.0f);
    b[o++] = 7; /* one stray byte */
    expect_bad(b, o, "bytes after the entries");
    o = 0;
    put_i32(b, &o, 1);
    put_i32(b, &o, 3);
    memcpy(b + o, "a\0b", 3);
    o += 3;
    put_i32(b, &o, 1);
    put_i32(b, &o, 1);
    put_i32(b, &o, 0);
    expect_bad(b, o, "NUL");
    imatrix *m = NULL;
    CHECK_EQ_INT(imatrix_read("tests/data/imatrix/no-such-file", &m), KITE_E_IO);
    CHECK(strstr(kite_last_error(), "no-such-file") != NULL);
}

/* Loads the model at path (synthesized first as the fixtures' were, when
 * shape is not NULL: F32, seed 1, stories260K's vocabulary). */
static kite_model *load_model(const char *path, const char *shape) {
    if (shape) {
        const synth_shape *sh = synth_shape_find(shape);
        CHECK(sh != NULL);
        if (!sh) return NULL;
        synth_params sp = {.shape = *sh, .type = KITE_DTYPE_F32, .seed = 1, .n_threads = 1,
                           .vocab_from = "models/stories260K.gguf"};
        CHECK_EQ_INT(synth_write(&sp, path), KITE_OK);
    }
    kite_model *model = NULL;
    kite_model_params mp = kite_model_default_params();
    CHECK_EQ_INT(kite_model_load(path, &mp, &model), KITE_OK);
    return model;
}

/* kite's collection over the same text and chunks as llama-imatrix's file for
 * fixture `name`: the same entries (expert tensors included), values within
 * 2e-3 (llama.cpp's float sums and kernel rounding; kite sums in double), the
 * perplexity estimate within 0.01% of what llama-imatrix printed. */
static void collect_vs_llama(kite_model *model, const char *name, double llama_ppl) {
    size_t len = 0;
    char *text = (char *)slurp("tests/data/quant-calib/calib.txt", &len);
    char path[256];
    snprintf(path, sizeof path, DATA "%s.imatrix", name);
    imatrix *ref = NULL, *m = NULL;
    CHECK_EQ_INT(imatrix_read(path, &ref), KITE_OK);
    imatrix_params p = {.n_ctx = 128, .n_threads = 2, .dataset = "calib.txt"};
    double ppl = 0;
    CHECK(model && text && imatrix_collect(model, text, len, &p, &m, &ppl) == KITE_OK);
    if (m && ref) {
        CHECK_EQ_INT(m->n_entries, ref->n_entries);
        CHECK_EQ_INT(m->chunks, ref->chunks);
        double worst = 0;
        int matched = 0;
        for (int32_t i = 0; i < m->n_entries; i++) {
            const imatrix_entry *a = &m->e[i], *b = imatrix_find(ref, a->name);
            if (!b || b->n != a->n || b->ncall != a->ncall) continue;
            matched++;
            for (int32_t j = 0; j < a->n; j++) {
                const double d = fabs((double)a->qw[j] - (double)b->qw[j]) / fmax((double)b->qw[j], 1e-12);
                worst = d > worst ? d : worst;
            }
        }
        CHECK_EQ_INT(matched, ref->n_entries);
        if (worst > 2e-3) fprintf(stderr, "    %s: worst relative difference %.3g\n", name, worst);
        CHECK(worst <= 2e-3);
        if (fabs(ppl - llama_ppl) > 1e-4 * llama_ppl) fprintf(stderr, "    %s: ppl %.4f, llama %.4f\n", name, ppl, llama_ppl);
        CHECK(fabs(ppl - llama_ppl) <= 1e-4 * llama_ppl);
    }
    imatrix_free(m);
    imatrix_free(ref);
    free(text);
}

TEST(test_collect_matches_llama) {
    kite_model *model = load_model("models/stories260K.gguf", NULL);
    collect_vs_llama(model, "stories260K", 5.7295); /* llama-imatrix's "Final estimate" (README there) */
    /* shorter than one chunk: an error giving the token count */
    size_t len = 0;
    char *text = (char *)slurp("tests/data/quant-calib/calib.txt", &len);
    imatrix *none = NULL;
    imatrix_params p2 = {.n_ctx = 16384, .n_threads = 1};
    CHECK(model && imatrix_collect(model, text, len, &p2, &none, NULL) == KITE_E_ARG && none == NULL);
    CHECK(strstr(kite_last_error(), "less than one chunk") != NULL);
    free(text);
    kite_model_free(model);
}

/* The expert tensors: one slice per expert, the rows routed to it. */
TEST(test_collect_experts_match_llama) {
    char path[256];
    snprintf(path, sizeof path, "%s/kite-test-imatrix-mixtral-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    kite_model *model = load_model(path, "tiny-mixtral");
    collect_vs_llama(model, "tiny-mixtral", 830.3290);
    kite_model_free(model);
    remove(path);
    snprintf(path, sizeof path, "%s/kite-test-imatrix-k256-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    model = load_model(path, "tiny-k256");
    collect_vs_llama(model, "tiny-k256", 851.6612);
    kite_model_free(model);
    remove(path);
}

/* ---- fuzz corpus replay (tests/fuzz/fuzz_imatrix.c) ---- */

#include "fuzz/fuzz_imatrix.c"

TEST(fuzz_corpus_replay) { CHECK(harness_replay_dir("tests/fuzz/corpus/fuzz_imatrix", LLVMFuzzerTestOneInput) >= 6); }

int main(void) {
    RUN(test_reads_llama_files);
    RUN(test_round_trip);
    RUN(test_malformed);
    RUN(test_collect_matches_llama);
    RUN(test_collect_experts_match_llama);
    RUN(fuzz_corpus_replay);
    return harness_summary("tests/unit/test_imatrix.c");
}
