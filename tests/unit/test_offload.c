/*
 * test_offload.c - kite_model_params.mem_budget (src/model/offload.c).
 *
 *   - size parsing: suffixes, bad text; the fuzz_size corpus replayed;
 *   - logits with a budget are bit-identical to the unbounded run, token by
 *     token and as one prefill, at the minimum budget (one slot), two slots,
 *     some layers resident and everything resident: stories260K, and the
 *     scale tier's tl4-q4_0 (x16-repacked on the fly where the CPU repacks);
 *   - two contexts on one budgeted model, interleaved, each equal to its own
 *     unbounded run (the pass lock keeps the streamed layers in order);
 *   - too small a budget: KITE_E_ARG naming the minimum;
 *   - a read error (the file truncated under a loaded model): kite_ctx_eval
 *     returns KITE_E_IO with a message naming the layer, and so does every
 *     later call; nothing crashes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "model/offload.h"

#define MODEL "models/stories260K.gguf"
#define TL4 "build/scale/tl4-q4_0.gguf"
#define N_TOK 12

#include "fuzz/fuzz_size.c"

TEST(test_fuzz_corpus) { CHECK(harness_replay_dir("tests/fuzz/corpus/fuzz_size", LLVMFuzzerTestOneInput) >= 8); }

static char tmpdir[] = "/tmp/kite-test-offload-XXXXXX";

TEST(test_parse_size) {
    uint64_t v = 0;
    CHECK(offload_parse_size("4096", &v) == KITE_OK && v == 4096);
    CHECK(offload_parse_size("64k", &v) == KITE_OK && v == 65536);
    CHECK(offload_parse_size("512M", &v) == KITE_OK && v == 512ull << 20);
    CHECK(offload_parse_size("1.5G", &v) == KITE_OK && v == 3ull << 29);
    CHECK(offload_parse_size("2GiB", &v) == KITE_OK && v == 2ull << 30);
    CHECK(offload_parse_size("100MB", &v) == KITE_OK && v == 100ull << 20);
    const char *bad[] = {"", "abc", "0", "-5", "12Q", "5 M", " 5M", "1e400", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(offload_parse_size(bad[i], &v) == KITE_E_ARG, "'%s' accepted", bad[i]);
        CHECK(strlen(kite_last_error()) > 0);
    }
}

static kite_model *load(const char *path, uint64_t budget) {
    kite_model_params mp = kite_model_default_params();
    mp.mem_budget = budget;
    kite_model *m = NULL;
    if (kite_model_load(path, &mp, &m) != KITE_OK) return NULL;
    return m;
}

/* The minimum budget and one slot's bytes, from the too-small message. */
static bool min_budget(const char *path, uint64_t *min, uint64_t *slot) {
    kite_model_params mp = kite_model_default_params();
    mp.mem_budget = 1;
    kite_model *m = NULL;
    if (kite_model_load(path, &mp, &m) != KITE_E_ARG) {
        kite_model_free(m);
        return false;
    }
    const char *e = kite_last_error(), *a = strstr(e, "the minimum is "), *b = strstr(e, " bytes) for one");
    if (!a || !b || !strstr(e, "too small")) return false;
    const char *pa = strchr(a, '(');
    while (b > e && b[-1] >= '0' && b[-1] <= '9') b--;
    *min = strtoull(pa + 1, NULL, 10);
    *slot = strtoull(b, NULL, 10);
    return *min > 0 && *slot > 0;
}

/* Logits of N_TOK tokens, one decode step each ([N_TOK][n_vocab]), then of the
 * same tokens as one prefill (all_logits, appended). */
static float *run_logits(kite_model *m, int32_t *n_vocab) {
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    *n_vocab = mi.n_vocab;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    kite_ctx *c = NULL;
    if (kite_ctx_new(m, &cp, &c) != KITE_OK) return NULL;
    float *out = malloc(sizeof(float) * (size_t)mi.n_vocab * 2 * N_TOK);
    kite_token toks[N_TOK];
    for (int i = 0; i < N_TOK; i++) toks[i] = (kite_token)(1 + (i * 37) % (mi.n_vocab - 1));
    bool ok = out != NULL;
    for (int i = 0; i < N_TOK && ok; i++) {
        ok = kite_ctx_eval(c, &toks[i], 1, false) == KITE_OK;
        if (ok) memcpy(out + (size_t)i * mi.n_vocab, kite_ctx_logits(c, -1), sizeof(float) * (size_t)mi.n_vocab);
    }
    kite_ctx_free(c);
    c = NULL;
    if (ok && kite_ctx_new(m, &cp, &c) == KITE_OK) {
        ok = kite_ctx_eval(c, toks, N_TOK, true) == KITE_OK;
        for (int i = 0; i < N_TOK && ok; i++)
            memcpy(out + (size_t)(N_TOK + i) * mi.n_vocab, kite_ctx_logits(c, i), sizeof(float) * (size_t)mi.n_vocab);
        kite_ctx_free(c);
    } else {
        ok = false;
    }
    if (!ok) free(out);
    return ok ? out : NULL;
}

static void budgets_equal(const char *path) {
    kite_model *m0 = load(path, 0);
    CHECK_MSG(m0 != NULL, "%s: %s", path, kite_last_error());
    if (!m0) return;
    int32_t nv = 0;
    float *want = run_logits(m0, &nv);
    kite_model_info i0;
    kite_model_get_info(m0, &i0);
    kite_model_free(m0);
    CHECK(want != NULL);
    uint64_t mn = 0, slot = 0;
    CHECK_MSG(min_budget(path, &mn, &slot), "no minimum in '%s'", kite_last_error());
    /* mn + 2.5 slots: two slots, the second I/O worker's scratch (well under half a slot here), and one resident layer */
    const uint64_t budgets[] = {mn, mn + slot, mn + 2 * slot + slot / 2, 4 * i0.n_bytes + (64u << 20)};
    const int want_slots[] = {1, 2, 2, 0};
    for (size_t b = 0; b < sizeof budgets / sizeof *budgets && want; b++) {
        kite_model *m = load(path, budgets[b]);
        CHECK_MSG(m != NULL, "%s budget %llu: %s", path, (unsigned long long)budgets[b], kite_last_error());
        if (!m) continue;
        kite_model_info mi;
        kite_model_get_info(m, &mi);
        CHECK_STR_EQ(mi.residency, "offload");
        CHECK(mi.resident_bytes <= budgets[b]);
        CHECK_EQ_INT((int)(mi.ring_bytes / slot), want_slots[b]);
        if (want_slots[b] == 0) CHECK_EQ_INT(mi.n_resident_layers, mi.n_layer);
        else CHECK(mi.n_resident_layers < mi.n_layer);
        if (b == 2) CHECK(mi.n_resident_layers >= 1);
        int32_t n2 = 0;
        float *got = run_logits(m, &n2);
        CHECK(got != NULL);
        if (got)
            CHECK_MSG(memcmp(got, want, sizeof(float) * (size_t)nv * 2 * N_TOK) == 0,
                      "%s: logits at budget %llu (%d of %d layers resident) differ from the unbounded run", path,
                      (unsigned long long)budgets[b], mi.n_resident_layers, mi.n_layer);
        kite_offload_stats st;
        kite_model_offload_stats(m, &st);
        if (want_slots[b] > 0) CHECK(st.bytes_read > 0 && st.n_passes >= N_TOK + 1);
        else CHECK(st.bytes_read == 0);
        free(got);
        kite_model_free(m);
    }
    free(want);
}

TEST(test_stories_budgets) { budgets_equal(MODEL); }

TEST(test_tl4_budgets) {
    if (access(TL4, R_OK) != 0) SKIP_TEST("%s not made (make test makes it)", TL4);
    budgets_equal(TL4);
}

TEST(test_two_contexts) {
    uint64_t mn = 0, slot = 0;
    CHECK(min_budget(MODEL, &mn, &slot));
    kite_model *m0 = load(MODEL, 0), *m = load(MODEL, mn + slot);
    CHECK(m0 && m);
    if (!m0 || !m) {
        kite_model_free(m0);
        kite_model_free(m);
        return;
    }
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 1;
    kite_ctx *r[2] = {0}, *c[2] = {0};
    for (int k = 0; k < 2; k++) {
        CHECK(kite_ctx_new(m0, &cp, &r[k]) == KITE_OK);
        CHECK(kite_ctx_new(m, &cp, &c[k]) == KITE_OK);
    }
    for (int i = 0; i < 8 && r[0] && r[1] && c[0] && c[1]; i++)
        for (int k = 0; k < 2; k++) {
            const kite_token t = (kite_token)(5 + 11 * i + 100 * k);
            CHECK(kite_ctx_eval(r[k], &t, 1, false) == KITE_OK);
            CHECK(kite_ctx_eval(c[k], &t, 1, false) == KITE_OK);
            CHECK(memcmp(kite_ctx_logits(r[k], -1), kite_ctx_logits(c[k], -1), sizeof(float) * 512) == 0);
        }
    for (int k = 0; k < 2; k++) {
        kite_ctx_free(r[k]);
        kite_ctx_free(c[k]);
    }
    kite_model_free(m0);
    kite_model_free(m);
}

TEST(test_too_small) {
    kite_model_params mp = kite_model_default_params();
    mp.mem_budget = 1000;
    kite_model *m = NULL;
    CHECK_EQ_INT(kite_model_load(MODEL, &mp, &m), KITE_E_ARG);
    CHECK(m == NULL);
    CHECK_CONTAINS(kite_last_error(), "too small for " MODEL);
    CHECK_CONTAINS(kite_last_error(), "the minimum is");
}

TEST(test_read_error) {
    char path[128];
    snprintf(path, sizeof path, "%s/copy.gguf", tmpdir);
    size_t size = 0;
    char *buf = harness_read_file(MODEL, &size);
    CHECK(buf != NULL);
    if (!buf) return;
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, size, f) == size);
    if (f) fclose(f);
    free(buf);
    uint64_t mn = 0, slot = 0;
    CHECK(min_budget(path, &mn, &slot));
    kite_model *m = load(path, mn); /* one slot: the thread reads layer 0 and then waits */
    CHECK(m != NULL);
    if (!m) return;
    CHECK(truncate(path, (off_t)(size / 2)) == 0); /* the later layers are gone */
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    kite_ctx *c = NULL;
    CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
    const kite_token t = 1;
    int rc = kite_ctx_eval(c, &t, 1, false);
    CHECK_EQ_INT(rc, KITE_E_IO);
    CHECK_CONTAINS(kite_last_error(), "reading layer");
    CHECK(kite_ctx_logits(c, -1) == NULL);
    CHECK_EQ_INT(kite_ctx_eval(c, &t, 1, false), KITE_E_IO);
    kite_ctx_free(c);
    kite_model_free(m);
    unlink(path);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_parse_size);
    RUN(test_fuzz_corpus);
    RUN(test_stories_budgets);
    RUN(test_tl4_budgets);
    RUN(test_two_contexts);
    RUN(test_too_small);
    RUN(test_read_error);
    rmdir(tmpdir);
    return harness_summary("test_offload");
}
