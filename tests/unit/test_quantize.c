/*
 * test_quantize.c - tests of the RTN model quantizer (src/quant/).
 *
 *   - the recipe rules on a synthetic 32-layer model (attn_v / ffn_down
 *     "more bits" layers of Q4_K_M, Q3_K_M's first layers, the classifier);
 *   - the fallback table for rows that do not fit a block;
 *   - stories260K quantized by kite to q4_k_m, q5_k_m, q6_k, q3_k_m and
 *     tq1_0 has, tensor for tensor, the type AND the bytes of llama.cpp's
 *     files for the same ftype (tests/data/quant-models, made by
 *     llama_model_quantize, July 2025), and the same general.file_type;
 *   - pure types (q8_0 / q4_0 with f16 fallback for ffn_down), the output
 *     does not depend on the thread count, requantizing needs the flag, and a
 *     failed write leaves no file behind.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#include "gguf/gguf.h"
#include "kite.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

#define MODEL "models/stories260K.gguf"
#define REFDIR "tests/data/quant-models/"

static char tmpdir[] = "/tmp/kite-test-quantize-XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static bool files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = harness_read_file(a, &na), *y = harness_read_file(b, &nb);
    bool eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

static int quantize_to(const char *out, const char *recipe, uint32_t type, int threads) {
    quant_params p = {.recipe = recipe ? quant_recipe_find(recipe) : NULL, .type = type, .n_threads = threads};
    return quant_model(MODEL, out, &p, NULL);
}

/* ---- rules ----------------------------------------------------------------- */

TEST(test_recipe_table) {
    CHECK(quant_recipe_find("q4_k_m") != NULL);
    CHECK(quant_recipe_find("Q4_K_M") != NULL);
    CHECK(quant_recipe_find("q4_k") == NULL);
    CHECK(quant_recipe_find("iq2_xxs") == NULL);
    CHECK_EQ_INT(quant_recipe_find("q4_k_m")->ftype, 15);
    CHECK_EQ_INT(quant_recipe_find("q4_k_s")->ftype, 14);
    CHECK_EQ_INT(quant_recipe_find("q5_k_m")->ftype, 17);
    CHECK_EQ_INT(quant_recipe_find("q3_k_m")->ftype, 12);
    CHECK_EQ_INT(quant_recipe_find("q6_k")->ftype, 18);
    CHECK_EQ_INT(quant_recipe_find("q8_0")->ftype, 7);
    CHECK_EQ_INT(quant_recipe_find("q4_0")->ftype, 2);
    CHECK_EQ_INT(quant_recipe_find("bf16")->ftype, 32);
    CHECK_EQ_INT(quant_recipe_find("tq1_0")->ftype, 36);
    CHECK_EQ_INT(quant_ftype_of_type(KITE_DTYPE_Q4_K), 14);
    CHECK_EQ_INT(quant_ftype_of_type(KITE_DTYPE_F16), 1);
    CHECK_EQ_INT(quant_ftype_of_type(KITE_DTYPE_IQ2_XXS), -1);
}

TEST(test_fallback_table) {
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q4_K, 4096), KITE_DTYPE_Q4_K);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q4_K, 64), KITE_DTYPE_Q5_0);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q5_K, 64), KITE_DTYPE_Q5_1);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q6_K, 64), KITE_DTYPE_Q8_0);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q2_K, 64), KITE_DTYPE_IQ4_NL);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q3_K, 96), KITE_DTYPE_IQ4_NL);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_IQ4_XS, 64), KITE_DTYPE_IQ4_NL);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_TQ1_0, 64), KITE_DTYPE_Q4_0);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_TQ2_0, 64), KITE_DTYPE_Q4_0);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q4_K, 172), KITE_DTYPE_F16);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q6_K, 172), KITE_DTYPE_F16);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q8_0, 172), KITE_DTYPE_F16);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_Q4_0, 172), KITE_DTYPE_F16);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_IQ4_NL, 48), KITE_DTYPE_F16);
    CHECK_EQ_INT(quant_fallback(KITE_DTYPE_F16, 7), KITE_DTYPE_F16);
    CHECK(quant_tensor_is_matrix("blk.0.attn_q.weight", 2));
    CHECK(!quant_tensor_is_matrix("blk.0.attn_norm.weight", 2));
    CHECK(!quant_tensor_is_matrix("blk.0.attn_q.weight", 1));
    CHECK(!quant_tensor_is_matrix("blk.0.attn_q.bias", 2));
    CHECK(!quant_tensor_is_matrix("rope_freqs", 1));
}

TEST(test_q4_k_m_layers) {
    /* Llama-2-7B-like: 32 layers, no GQA.  more bits: layers 0-3, 28-31 and
     * 4 + 3k + 2 = 6, 9, ..., 27 */
    quant_model_info mi = {.n_layer = 32, .n_gqa = 1, .n_attn_v = 32, .has_output = true};
    const quant_recipe *r = quant_recipe_find("q4_k_m");
    for (int l = 0; l < 32; l++) {
        bool more = l < 4 || l >= 28 || (l - 4) % 3 == 2;
        uint32_t want = more ? KITE_DTYPE_Q6_K : KITE_DTYPE_Q4_K;
        CHECK_EQ_INT(quant_recipe_type(r, &mi, "blk.x.attn_v.weight", 4096, l), want);
        CHECK_EQ_INT(quant_recipe_type(r, &mi, "blk.x.ffn_down.weight", 11008, l), want);
        CHECK_EQ_INT(quant_recipe_type(r, &mi, "blk.x.attn_q.weight", 4096, l), KITE_DTYPE_Q4_K);
        CHECK_EQ_INT(quant_recipe_type(r, &mi, "blk.x.ffn_up.weight", 4096, l), KITE_DTYPE_Q4_K);
    }
    CHECK_EQ_INT(quant_recipe_type(r, &mi, "output.weight", 4096, 0), KITE_DTYPE_Q6_K);
    CHECK_EQ_INT(quant_recipe_type(r, &mi, "output.weight", 4000, 0), KITE_DTYPE_Q8_0);
    CHECK_EQ_INT(quant_recipe_type(r, &mi, "token_embd.weight", 4096, 0), KITE_DTYPE_Q4_K);
    mi.has_output = false; /* tied embeddings: token_embd is the classifier */
    CHECK_EQ_INT(quant_recipe_type(r, &mi, "token_embd.weight", 4096, 0), KITE_DTYPE_Q6_K);

    const quant_recipe *q3 = quant_recipe_find("q3_k_m");
    mi.has_output = true;
    CHECK_EQ_INT(quant_recipe_type(q3, &mi, "blk.x.attn_v.weight", 4096, 1), KITE_DTYPE_Q5_K);
    CHECK_EQ_INT(quant_recipe_type(q3, &mi, "blk.x.attn_v.weight", 4096, 2), KITE_DTYPE_Q4_K);
    CHECK_EQ_INT(quant_recipe_type(q3, &mi, "blk.x.ffn_down.weight", 4096, 1), KITE_DTYPE_Q5_K);
    CHECK_EQ_INT(quant_recipe_type(q3, &mi, "blk.x.ffn_down.weight", 4096, 2), KITE_DTYPE_Q4_K);
    CHECK_EQ_INT(quant_recipe_type(q3, &mi, "blk.x.attn_output.weight", 4096, 5), KITE_DTYPE_Q4_K);
    CHECK_EQ_INT(quant_recipe_type(q3, &mi, "blk.x.attn_q.weight", 4096, 5), KITE_DTYPE_Q3_K);
    const quant_recipe *q2 = quant_recipe_find("q2_k");
    mi.n_gqa = 8;
    CHECK_EQ_INT(quant_recipe_type(q2, &mi, "blk.x.attn_v.weight", 4096, 3), KITE_DTYPE_Q4_K);
    CHECK_EQ_INT(quant_recipe_type(q2, &mi, "blk.x.ffn_down.weight", 4096, 3), KITE_DTYPE_Q3_K);
    /* f16 has no rules, even for the classifier */
    CHECK_EQ_INT(quant_recipe_type(quant_recipe_find("f16"), &mi, "output.weight", 4096, 0), KITE_DTYPE_F16);
}

/* ---- against llama.cpp's files -------------------------------------------------- */

/* Quantizes stories260K with recipe and compares it tensor by tensor with
 * llama.cpp's file: same names, types and data bytes, same file_type. */
static void check_against(const char *recipe, const char *ref_name) {
    char ref_path[256];
    snprintf(ref_path, sizeof ref_path, REFDIR "%s", ref_name);
    const char *out = tmp_path("mix.gguf");
    CHECK_EQ_INT(quantize_to(out, recipe, 0, 2), KITE_OK);
    gguf_ctx *a = NULL, *b = NULL;
    CHECK_EQ_INT(gguf_open(out, NULL, &a), KITE_OK);
    CHECK_EQ_INT(gguf_open(ref_path, NULL, &b), KITE_OK);
    if (!a || !b) goto done;
    CHECK_EQ_INT(a->n_tensors, b->n_tensors);
    uint32_t fa = 0, fb = 1, qv = 0;
    CHECK_EQ_INT(gguf_get_u32(a, "general.file_type", &fa), KITE_OK);
    CHECK_EQ_INT(gguf_get_u32(b, "general.file_type", &fb), KITE_OK);
    CHECK_EQ_INT(fa, fb);
    CHECK_EQ_INT(gguf_get_u32(a, "general.quantization_version", &qv), KITE_OK);
    CHECK_EQ_INT(qv, 2);
    int type_bad = 0, data_bad = 0;
    for (uint64_t i = 0; i < b->n_tensors; i++) {
        const gguf_tensor *tb = &b->tensors[i];
        char *name = gguf_str_dup(tb->name);
        const gguf_tensor *ta = name ? gguf_find_tensor(a, name) : NULL;
        CHECK_MSG(ta != NULL, "%s: %s missing", recipe, name ? name : "?");
        if (ta && ta->type != tb->type) {
            if (type_bad++ < 3)
                CHECK_MSG(0, "%s: %s: kite %s, llama.cpp %s", recipe, name, dtype_name(ta->type), dtype_name(tb->type));
        } else if (ta && (ta->nbytes != tb->nbytes || memcmp(ta->data, tb->data, (size_t)tb->nbytes) != 0)) {
            if (data_bad++ < 3) CHECK_MSG(0, "%s: %s (%s): data differs", recipe, name, dtype_name(tb->type));
        }
        free(name);
    }
    CHECK_EQ_INT(type_bad, 0);
    CHECK_EQ_INT(data_bad, 0);
done:
    gguf_close(a);
    gguf_close(b);
    unlink(out);
}

TEST(test_q4_k_m_equals_llamacpp) { check_against("q4_k_m", "stories260K-Q4_K_M.gguf"); }
TEST(test_q5_k_m_equals_llamacpp) { check_against("q5_k_m", "stories260K-Q5_K_M.gguf"); }
TEST(test_q6_k_equals_llamacpp) { check_against("q6_k", "stories260K-Q6_K.gguf"); }
TEST(test_q3_k_m_equals_llamacpp) { check_against("q3_k_m", "stories260K-Q3_K_M.gguf"); }
TEST(test_tq1_0_equals_llamacpp) { check_against("tq1_0", "stories260K-TQ1_0.gguf"); }

/* Counts of each output type in a file. */
static void type_counts(const char *path, int counts[KITE_DTYPE_COUNT]) {
    memset(counts, 0, sizeof(int) * KITE_DTYPE_COUNT);
    gguf_ctx *c = NULL;
    if (gguf_open(path, NULL, &c) != KITE_OK) return;
    for (uint64_t i = 0; i < c->n_tensors; i++)
        if (c->tensors[i].type < KITE_DTYPE_COUNT) counts[c->tensors[i].type]++;
    gguf_close(c);
}

TEST(test_pure_types) {
    int n[KITE_DTYPE_COUNT];
    const char *out = tmp_path("pure.gguf");
    CHECK_EQ_INT(quantize_to(out, NULL, KITE_DTYPE_Q8_0, 1), KITE_OK);
    type_counts(out, n);
    CHECK_EQ_INT(n[KITE_DTYPE_F32], 11);
    CHECK_EQ_INT(n[KITE_DTYPE_F16], 5); /* ffn_down: 172 columns */
    CHECK_EQ_INT(n[KITE_DTYPE_Q8_0], 32);
    CHECK_EQ_INT(quantize_to(out, NULL, KITE_DTYPE_Q4_0, 1), KITE_OK);
    type_counts(out, n);
    CHECK_EQ_INT(n[KITE_DTYPE_F16], 5);
    CHECK_EQ_INT(n[KITE_DTYPE_Q4_0], 32);
    CHECK_EQ_INT(quantize_to(out, NULL, KITE_DTYPE_Q4_K, 1), KITE_OK); /* pure: output q4_K -> q5_0 too */
    type_counts(out, n);
    CHECK_EQ_INT(n[KITE_DTYPE_Q5_0], 32);
    CHECK_EQ_INT(quantize_to(out, NULL, KITE_DTYPE_BF16, 1), KITE_OK);
    type_counts(out, n);
    CHECK_EQ_INT(n[KITE_DTYPE_BF16], 37);
    gguf_ctx *c = NULL;
    CHECK_EQ_INT(gguf_open(out, NULL, &c), KITE_OK);
    uint32_t ft = 0;
    if (c) CHECK_EQ_INT(gguf_get_u32(c, "general.file_type", &ft), KITE_OK);
    CHECK_EQ_INT(ft, 32);
    gguf_close(c);
    /* a type without a reference quantizer is refused before writing */
    CHECK_EQ_INT(quantize_to(tmp_path("iq2.gguf"), NULL, KITE_DTYPE_IQ2_XXS, 1), KITE_E_ARG);
    CHECK(access(tmp_path("iq2.gguf"), F_OK) != 0);
    unlink(out);
}

TEST(test_threads_do_not_change_bytes) {
    CHECK_EQ_INT(quantize_to(tmp_path("t1.gguf"), "q4_k_m", 0, 1), KITE_OK);
    CHECK_EQ_INT(quantize_to(tmp_path("t3.gguf"), "q4_k_m", 0, 3), KITE_OK);
    CHECK(files_equal(tmp_path("t1.gguf"), tmp_path("t3.gguf")));
    unlink(tmp_path("t1.gguf"));
    unlink(tmp_path("t3.gguf"));
}

TEST(test_requantize_needs_flag) {
    quant_params p = {.type = KITE_DTYPE_Q8_0, .n_threads = 1};
    const char *out = tmp_path("rq.gguf");
    CHECK_EQ_INT(quant_model(REFDIR "stories260K-Q4_K_M.gguf", out, &p, NULL), KITE_E_UNSUPPORTED);
    CHECK_CONTAINS(kite_last_error(), "--allow-requantize");
    CHECK(access(out, F_OK) != 0);
    p.allow_requantize = true;
    quant_stats st;
    CHECK_EQ_INT(quant_model(REFDIR "stories260K-Q4_K_M.gguf", out, &p, &st), KITE_OK);
    int n[KITE_DTYPE_COUNT];
    type_counts(out, n);
    CHECK_EQ_INT(n[KITE_DTYPE_Q8_0], 32);
    CHECK_EQ_INT(n[KITE_DTYPE_F16], 5); /* f16 ffn_down -> q8_0 does not fit -> f16: copied */
    CHECK_EQ_INT(st.n_converted, 29); /* its 3 q8_0 tensors are copied as they are */
    unlink(out);
}

/* No file named "<base>.tmp.*" in tmpdir. */
static bool no_tmp_left(const char *base) {
    DIR *d = opendir(tmpdir);
    if (!d) return false;
    bool ok = true;
    struct dirent *e;
    size_t n = strlen(base);
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, base, n) && !strncmp(e->d_name + n, ".tmp.", 5)) ok = false;
    closedir(d);
    return ok;
}

TEST(test_failed_write_leaves_nothing) {
    /* the output path is a directory: the rename fails at the very end */
    const char *dir = tmp_path("adir");
    CHECK_EQ_INT(mkdir(dir, 0755), 0);
    CHECK(quantize_to(dir, "q4_k_m", 0, 1) != KITE_OK);
    CHECK(no_tmp_left("adir"));
    rmdir(dir);
    /* a missing directory */
    CHECK_EQ_INT(quantize_to(tmp_path("nodir/x.gguf"), "q4_k_m", 0, 1), KITE_E_IO);
    /* a missing input */
    quant_params p = {.type = KITE_DTYPE_Q8_0};
    CHECK(quant_model("tests/data/no-such-model.gguf", tmp_path("x.gguf"), &p, NULL) != KITE_OK);
    CHECK_CONTAINS(kite_last_error(), "no-such-model.gguf");
    CHECK(access(tmp_path("x.gguf"), F_OK) != 0);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_recipe_table);
    RUN(test_fallback_table);
    RUN(test_q4_k_m_layers);
    RUN(test_q4_k_m_equals_llamacpp);
    RUN(test_q5_k_m_equals_llamacpp);
    RUN(test_q6_k_equals_llamacpp);
    RUN(test_q3_k_m_equals_llamacpp);
    RUN(test_tq1_0_equals_llamacpp);
    RUN(test_pure_types);
    RUN(test_threads_do_not_change_bytes);
    RUN(test_requantize_needs_flag);
    RUN(test_failed_write_leaves_nothing);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
