/*
 * test_synth.c - `kite synth` models (src/roofline/synth.c), the streaming GGUF
 * writer callback it relies on, and heap weight residency.
 *
 * What is checked:
 *   - same seed and parameters -> byte-identical files, whatever the thread
 *     count; another seed -> different weights;
 *   - the file loads with kite_model_load (heap and mmap residency, reported
 *     in kite_model_info), and a forward pass gives finite logits of moderate
 *     magnitude (max |logit| between 0.5 and 50);
 *   - f16 / bf16 (and block types, when their quantizers exist) hold the same
 *     random values: logits close to the f32 file's;
 *   - the vocabulary: byte tokens, specials, round trip of a text;
 *   - a type without from_float fails clearly; shapes are validated;
 *   - gguf_writer_add_tensor_cb writes what gguf_writer_add_tensor writes,
 *     and a failing callback leaves no file behind;
 *   - the heap image is 2 MiB-aligned.
 * Models are tiny (stories260k shape, 1-2 layers): the test runs in well
 * under a second.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "harness.h"
#include "kite.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

static char tmpdir[] = "/tmp/kite-test-synth-XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static synth_params small_params(uint32_t type, int layers, uint64_t seed, int threads) {
    synth_params p = {.shape = *synth_shape_find("stories260k"), .type = type, .seed = seed, .n_threads = threads};
    p.shape.n_layer = layers;
    return p;
}

static bool files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = harness_read_file(a, &na), *y = harness_read_file(b, &nb);
    bool eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

/* Loads path, evaluates a fixed 8-token prompt, copies the last logits into
 * out (n_vocab floats).  Returns false on any failure. */
static bool forward(const char *path, bool use_mmap, float *out, int32_t n_vocab, kite_model_info *info,
                    char arch[16]) {
    kite_model_params mp = kite_model_default_params();
    mp.use_mmap = use_mmap;
    kite_model *m = NULL;
    kite_ctx *ctx = NULL;
    bool ok = false;
    if (kite_model_load(path, &mp, &m) != KITE_OK) {
        printf("    load: %s\n", kite_last_error());
        goto done;
    }
    kite_model_get_info(m, info);
    snprintf(arch, 16, "%s", info->arch);
    info->arch = info->name = NULL; /* owned by the model, freed below */
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    if (kite_ctx_new(m, &cp, &ctx) != KITE_OK) goto done;
    const kite_token toks[8] = {1, 300, 301, 17, 511, 260, 42, 400};
    if (kite_ctx_eval(ctx, toks, 8, false) != KITE_OK) goto done;
    memcpy(out, kite_ctx_logits(ctx, -1), sizeof(float) * (size_t)n_vocab);
    ok = true;
done:
    kite_ctx_free(ctx);
    kite_model_free(m);
    return ok;
}

static double max_abs(const float *x, int n, bool *finite) {
    double m = 0;
    *finite = true;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) *finite = false;
        if (fabs(x[i]) > m) m = fabs(x[i]);
    }
    return m;
}

TEST(test_same_seed_same_bytes_any_threads) {
    synth_params a = small_params(KITE_DTYPE_F32, 1, 7, 1), b = small_params(KITE_DTYPE_F32, 1, 7, 3),
                 c = small_params(KITE_DTYPE_F32, 1, 8, 2);
    CHECK_EQ_INT(synth_write(&a, tmp_path("a.gguf")), KITE_OK);
    CHECK_EQ_INT(synth_write(&b, tmp_path("b.gguf")), KITE_OK);
    CHECK_EQ_INT(synth_write(&c, tmp_path("c.gguf")), KITE_OK);
    CHECK(files_equal(tmp_path("a.gguf"), tmp_path("b.gguf")));
    CHECK(!files_equal(tmp_path("a.gguf"), tmp_path("c.gguf")));
    size_t n;
    char *x = harness_read_file(tmp_path("a.gguf"), &n);
    CHECK(x != NULL);
    free(x);
    /* data bytes: 1 layer of stories260k in f32 plus embeddings and output */
    const int64_t E = 64, F = 172, V = 512, KV = 32;
    uint64_t want = (uint64_t)(4 * (2 * E * V + E * E * 2 + 2 * E * KV + 3 * E * F + 3 * E));
    CHECK_EQ_INT(synth_data_bytes(&a), want);
    CHECK(n > want);
}

TEST(test_loads_and_runs_with_moderate_logits) {
    synth_params p = small_params(KITE_DTYPE_F32, 2, 11, 2);
    const char *path = tmp_path("f32.gguf");
    CHECK_EQ_INT(synth_write(&p, path), KITE_OK);
    float heap[512], mapped[512];
    kite_model_info info;
    char arch[16];
    CHECK(forward(path, false, heap, 512, &info, arch));
    CHECK_EQ_INT(info.n_layer, 2);
    CHECK_EQ_INT(info.n_vocab, 512);
    CHECK_EQ_INT(info.n_embd, 64);
    CHECK_EQ_INT(info.n_head_kv, 4);
    CHECK_STR_EQ(arch, "llama");
    CHECK_STR_EQ(info.residency, "heap");
    bool finite;
    double m = max_abs(heap, 512, &finite);
    CHECK(finite);
    CHECK_MSG(m > 0.5 && m < 50.0, "max |logit| = %g, expected O(1..10)", m);
    CHECK(forward(path, true, mapped, 512, &info, arch));
    CHECK_STR_EQ(info.residency, "mmap");
    CHECK(memcmp(heap, mapped, sizeof heap) == 0);
}

TEST(test_other_types_hold_the_same_values) {
    static const uint32_t types[] = {KITE_DTYPE_F16, KITE_DTYPE_BF16, KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0};
    static const double tol[] = {0.02, 0.1, 0.15, 1.5}; /* max |logit diff| vs f32; logits are O(3) */
    float ref[512], got[512];
    kite_model_info info;
    char arch[16];
    synth_params p = small_params(KITE_DTYPE_F32, 1, 5, 2);
    p.shape.n_ff = 256; /* stories260k's 172 is no multiple of a block size */
    CHECK_EQ_INT(synth_write(&p, tmp_path("ref.gguf")), KITE_OK);
    CHECK(forward(tmp_path("ref.gguf"), false, ref, 512, &info, arch));
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const dtype_traits *tr = dtype_get(types[k]);
        if (!tr->from_float || !tr->to_float) {
            printf("    (skipping %s: no reference quantizer yet)\n", tr->name);
            continue;
        }
        p.type = types[k];
        const char *path = tmp_path("typed.gguf");
        CHECK_EQ_INT(synth_write(&p, path), KITE_OK);
        if (!forward(path, false, got, 512, &info, arch)) {
            CHECK_MSG(0, "%s: forward failed", tr->name);
            continue;
        }
        double d = 0;
        for (int i = 0; i < 512; i++) d = fmax(d, fabs((double)got[i] - ref[i]));
        printf("    %s: max |logit - f32 logit| = %.3g (budget %g)\n", tr->name, d, tol[k]);
        CHECK_MSG(d < tol[k], "%s: max |logit - f32 logit| = %g (budget %g)", tr->name, d, tol[k]);
        gguf_ctx *g;
        CHECK_EQ_INT(gguf_open(path, NULL, &g), KITE_OK);
        const gguf_tensor *t = gguf_find_tensor(g, "blk.0.ffn_down.weight");
        CHECK(t && t->type == types[k]);
        t = gguf_find_tensor(g, "blk.0.ffn_norm.weight");
        CHECK(t && t->type == KITE_DTYPE_F32);
        gguf_close(g);
    }
}

TEST(test_vocabulary) {
    synth_params p = small_params(KITE_DTYPE_F32, 1, 1, 1);
    const char *path = tmp_path("vocab.gguf");
    CHECK_EQ_INT(synth_write(&p, path), KITE_OK);
    gguf_ctx *g;
    CHECK_EQ_INT(gguf_open(path, NULL, &g), KITE_OK);
    gguf_array a;
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &a), KITE_OK);
    CHECK_EQ_INT(a.n, 512);
    const gguf_str *s = a.data;
    CHECK(gguf_str_eq(s[0], "<unk>") && gguf_str_eq(s[1], "<s>") && gguf_str_eq(s[2], "</s>"));
    CHECK(gguf_str_eq(s[3], "<0x00>") && gguf_str_eq(s[3 + 0x41], "<0x41>") && gguf_str_eq(s[258], "<0xFF>"));
    CHECK(gguf_str_eq(s[259], "\xe2\x96\x81") && gguf_str_eq(s[260], "\xe2\x96\x81" "a") && gguf_str_eq(s[261], "a"));
    uint32_t u;
    CHECK_EQ_INT(gguf_get_u32(g, "llama.block_count", &u), KITE_OK);
    CHECK_EQ_INT(u, 1);
    gguf_close(g);

    kite_model *m;
    CHECK_EQ_INT(kite_model_load(path, NULL, &m), KITE_OK);
    kite_token ids[64];
    size_t n;
    const char *text = "hello world, 42!";
    CHECK_EQ_INT(kite_tokenize(m, text, strlen(text), true, ids, 64, &n), KITE_OK);
    CHECK(n > 2 && ids[0] == 1);
    kite_detok *d;
    CHECK_EQ_INT(kite_detok_new(m, &d), KITE_OK);
    char out[256] = "", piece[64];
    for (size_t i = 0; i < n; i++) {
        int k = kite_detok_push(d, ids[i], piece, sizeof piece);
        if (k > 0) strncat(out, piece, sizeof out - strlen(out) - 1);
    }
    CHECK_STR_EQ(out, text);
    kite_detok_free(d);
    kite_model_free(m);
}

TEST(test_checks) {
    synth_params p = small_params(KITE_DTYPE_I8, 1, 1, 1); /* a known type with no quantizer */
    CHECK_EQ_INT(synth_check(&p), KITE_E_UNSUPPORTED);
    CHECK_CONTAINS(kite_last_error(), "from_float");
    CHECK_EQ_INT(synth_write(&p, tmp_path("never.gguf")), KITE_E_UNSUPPORTED);
    CHECK(access(tmp_path("never.gguf"), F_OK) != 0);
    if (dtype_get(KITE_DTYPE_Q4_K)->from_float) { /* 64 is not a multiple of 256: kite quantize's fallback */
        p.type = KITE_DTYPE_Q4_K;
        CHECK_EQ_INT(synth_check(&p), KITE_OK);
        char fell[512];
        CHECK(synth_fallbacks(&p, fell, sizeof fell) > 0);
        CHECK_CONTAINS(fell, "token_embd q4_K->q5_0 (row 64)");
        p.type = KITE_DTYPE_F32;
        CHECK_EQ_INT(synth_fallbacks(&p, fell, sizeof fell), 0);
        CHECK(fell[0] == '\0');
    }
    p = small_params(KITE_DTYPE_F32, 1, 1, 1);
    p.shape.n_head_kv = 3;
    CHECK_EQ_INT(synth_check(&p), KITE_E_ARG);
    p = small_params(KITE_DTYPE_F32, 1, 1, 1);
    p.shape.n_vocab = 100;
    CHECK_EQ_INT(synth_check(&p), KITE_E_ARG);

    /* the real shapes are valid, with the sizes the brief gives */
    const synth_shape *t = synth_shape_find("tinyllama-1.1b");
    CHECK(t && t->n_embd == 2048 && t->n_ff == 5632 && t->n_layer == 22 && t->n_head == 32 && t->n_head_kv == 4 &&
          t->n_vocab == 32000 && t->n_ctx == 2048);
    const synth_shape *l3 = synth_shape_find("llama3-8b");
    CHECK(l3 && l3->n_vocab == 128256 && l3->n_head_kv == 8 && l3->rope_base == 500000.0f);
    CHECK(synth_shape_find("mistral-7b") && synth_shape_find("llama2-7b") && !synth_shape_find("gpt-5"));
    synth_params tp = {.shape = *t, .type = KITE_DTYPE_F16};
    CHECK_EQ_INT(synth_check(&tp), KITE_OK);
    /* TinyLlama F16: 1.1e9 parameters, 2 bytes each */
    uint64_t bytes = synth_data_bytes(&tp);
    CHECK_MSG(bytes > 2190000000u && bytes < 2210000000u, "tinyllama f16 data bytes %llu", (unsigned long long)bytes);
}

/* ---- the streaming writer extension ---------------------------------------- */

static int fill_iota(void *user, int64_t row0, int64_t n_rows, void *dst) {
    const int64_t *ne0 = user;
    float *f = dst;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < *ne0; i++) f[r * *ne0 + i] = (float)((row0 + r) * 1000 + i);
    return KITE_OK;
}

static int fill_fail(void *user, int64_t row0, int64_t n_rows, void *dst) {
    (void)user, (void)n_rows, (void)dst;
    return err_set(KITE_E_IO, "fill failed at row %lld", (long long)row0);
}

TEST(test_writer_fill_callback) {
    const int64_t ne[2] = {300, 5000}; /* 6 MB: more than one 4 MiB chunk */
    float *data = malloc(sizeof(float) * 300 * 5000);
    CHECK(data != NULL);
    if (!data) return;
    int64_t ne0 = ne[0];
    fill_iota(&ne0, 0, ne[1], data);
    gguf_writer *w1 = gguf_writer_new(), *w2 = gguf_writer_new();
    CHECK_EQ_INT(gguf_writer_add_tensor(w1, "t", KITE_DTYPE_F32, 2, ne, data), KITE_OK);
    CHECK_EQ_INT(gguf_writer_add_tensor_cb(w2, "t", KITE_DTYPE_F32, 2, ne, fill_iota, &ne0), KITE_OK);
    CHECK_EQ_INT(gguf_writer_write(w1, tmp_path("w1.gguf")), KITE_OK);
    CHECK_EQ_INT(gguf_writer_write(w2, tmp_path("w2.gguf")), KITE_OK);
    CHECK(files_equal(tmp_path("w1.gguf"), tmp_path("w2.gguf")));
    CHECK_EQ_INT(gguf_writer_add_tensor_cb(w2, "u", KITE_DTYPE_F32, 2, ne, NULL, NULL), KITE_E_ARG);
    gguf_writer_free(w1);
    gguf_writer_free(w2);
    free(data);

    gguf_writer *w3 = gguf_writer_new();
    CHECK_EQ_INT(gguf_writer_add_tensor_cb(w3, "t", KITE_DTYPE_F32, 2, ne, fill_fail, NULL), KITE_OK);
    CHECK_EQ_INT(gguf_writer_write(w3, tmp_path("w3.gguf")), KITE_E_IO);
    CHECK_CONTAINS(kite_last_error(), "fill failed at row 0");
    CHECK(access(tmp_path("w3.gguf"), F_OK) != 0);
    gguf_writer_free(w3);
}

TEST(test_heap_image_is_huge_page_aligned) {
    synth_params p = small_params(KITE_DTYPE_F32, 1, 3, 1);
    const char *path = tmp_path("align.gguf");
    CHECK_EQ_INT(synth_write(&p, path), KITE_OK);
    gguf_open_params gp = {.use_mmap = false};
    gguf_ctx *g;
    CHECK_EQ_INT(gguf_open(path, &gp, &g), KITE_OK);
    CHECK_EQ_INT((uintptr_t)g->base % ((uintptr_t)2 << 20), 0);
    CHECK_STR_EQ(gguf_residency(g), "heap");
    gguf_close(g);
    gp.use_mmap = true;
    CHECK_EQ_INT(gguf_open(path, &gp, &g), KITE_OK);
    CHECK_STR_EQ(gguf_residency(g), "mmap");
    gguf_close(g);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_same_seed_same_bytes_any_threads);
    RUN(test_loads_and_runs_with_moderate_logits);
    RUN(test_other_types_hold_the_same_values);
    RUN(test_vocabulary);
    RUN(test_checks);
    RUN(test_writer_fill_callback);
    RUN(test_heap_image_is_huge_page_aligned);
    static const char *const names[] = {"a.gguf",  "b.gguf",      "c.gguf",  "f32.gguf", "ref.gguf", "typed.gguf",
                                        "vocab.gguf", "w1.gguf",  "w2.gguf", "align.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
