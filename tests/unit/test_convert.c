/*
 * test_convert.c - llama2.c -> GGUF conversion (tools/convert/llama2c.c).
 *
 * Synthetic llama2.c models in every format (v0 tied/untied, v1, v2 int8)
 * and a synthetic tokenizer are written to a mkdtemp() directory, converted,
 * and read back with the GGUF reader: keys, tensor names, types, shapes and
 * bytes are checked against values computed here independently.  Malformed
 * inputs must fail with a clear message.  With the fixtures in
 * tests/data/convert, stories260K and the Llama 2 vocabulary must convert to
 * files whose tensors / tokenizer arrays equal models/stories260K.gguf and
 * models/vocab-llama2.gguf (and tests/data/tokenizer/vocab-llama2-spm.gguf).
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "harness.h"
#include "convert/llama2c.h"
#include "tensor/dtype.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* ---- synthetic llama2.c files -------------------------------------------- */

enum { EMB, RATT, WQ, WK, WV, WO, RFFN, W1, W2, W3, RFIN, FREQ, WCLS, NKIND };

typedef struct syn {
    int version; /* 0, 1, 2 */
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    bool shared;
    int32_t group_size; /* v2 */
} syn;

static const syn base = {0, 8, 12, 2, 2, 1, 6, 4, true, 4};

static void shape(const syn *s, int kind, int64_t *rows, int64_t *cols) {
    int64_t hs = s->dim / s->n_heads, kv = hs * s->n_kv_heads;
    *rows = 1;
    *cols = s->dim;
    switch (kind) {
    case EMB: case WCLS: *rows = s->vocab; break;
    case WQ: case WO: *rows = s->dim; break;
    case WK: case WV: *rows = kv; break;
    case W1: case W3: *rows = s->hidden; break;
    case W2: *rows = s->dim; *cols = s->hidden; break;
    case FREQ: *cols = (int64_t)s->seq_len * hs; break;
    default: break;
    }
}

static bool per_layer(int kind) { return kind != EMB && kind != RFIN && kind != FREQ && kind != WCLS; }

/* Distinct, exactly representable values per (kind, layer, index). */
static float ref_val(int kind, int layer, int64_t i) {
    return (float)((kind * 31 + layer * 7 + i) % 97) * 0.125f - 6.0f;
}
static int8_t q_val(int kind, int layer, int64_t i) { return (int8_t)((kind * 31 + layer * 7 + i) % 255 - 127); }
static float scale_val(int kind, int layer, int64_t g) {
    return 0.5f + 0.25f * (float)(g % 4) + 0.0625f * (float)kind + 0.001f * (float)layer;
}

/* The value the converter must produce for element i. */
static float expect_val(const syn *s, int kind, int layer, int64_t i) {
    int64_t rows, cols;
    shape(s, kind, &rows, &cols);
    if (s->version == 2 && rows > 1) return (float)q_val(kind, layer, i) * scale_val(kind, layer, i / s->group_size);
    return ref_val(kind, layer, i);
}

static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }

static void put_seg(FILE *f, const syn *s, int kind, int layer) {
    int64_t rows, cols;
    shape(s, kind, &rows, &cols);
    int64_t n = rows * cols;
    if (s->version == 2 && rows > 1) {
        for (int64_t i = 0; i < n; i++) {
            int8_t q = q_val(kind, layer, i);
            fwrite(&q, 1, 1, f);
        }
        for (int64_t g = 0; g < n / s->group_size; g++) {
            float sc = scale_val(kind, layer, g);
            fwrite(&sc, 4, 1, f);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float v = ref_val(kind, layer, i);
            fwrite(&v, 4, 1, f);
        }
    }
}

static void write_model(const char *path, const syn *s) {
    static const int o0[] = {EMB, RATT, WQ, WK, WV, WO, RFFN, W1, W2, W3, RFIN, FREQ, WCLS};
    static const int o12[] = {RATT, RFFN, RFIN, EMB, WQ, WK, WV, WO, W1, W2, W3, WCLS};
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    int32_t hdr[7] = {s->dim, s->hidden, s->n_layers, s->n_heads, s->n_kv_heads, s->vocab, s->seq_len};
    if (s->version == 0) {
        if (!s->shared) hdr[5] = -hdr[5];
        fwrite(hdr, 4, 7, f);
    } else {
        uint8_t h[256] = {0};
        uint32_t magic = LLAMA2C_MAGIC;
        int32_t ver = s->version;
        memcpy(h, &magic, 4);
        memcpy(h + 4, &ver, 4);
        memcpy(h + 8, hdr, 28);
        h[36] = s->shared ? 1 : 0;
        if (s->version == 2) memcpy(h + 37, &s->group_size, 4);
        fwrite(h, 1, 256, f);
    }
    const int *order = s->version == 0 ? o0 : o12;
    size_t n = s->version == 0 ? 13 : 12;
    for (size_t k = 0; k < n; k++) {
        int kind = order[k];
        if (kind == WCLS && s->shared) continue;
        int nl = per_layer(kind) ? s->n_layers : 1;
        for (int l = 0; l < nl; l++) put_seg(f, s, kind, l);
    }
    fclose(f);
}

static const char *const syn_tokens[] = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x41>", " a", "b c", "<0xzz>", "x"};
static const char *const syn_expect[] = {"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81" "a",
                                         "b\xe2\x96\x81" "c", "<0xzz>", "x"};
static const int32_t syn_types[] = {2, 3, 3, 6, 1, 1, 1, 1};

static void write_tokenizer(const char *path, int n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    put_i32(f, 6);
    for (int i = 0; i < n; i++) {
        float score = -0.5f * (float)i;
        fwrite(&score, 4, 1, f);
        put_i32(f, (int32_t)strlen(syn_tokens[i]));
        fwrite(syn_tokens[i], 1, strlen(syn_tokens[i]), f);
    }
    fclose(f);
}

/* ---- checks ---------------------------------------------------------------- */

static uint32_t u32_key(const gguf_ctx *g, const char *key) {
    uint32_t v = 0xdeadbeef;
    CHECK_MSG(gguf_get_u32(g, key, &v) == KITE_OK, "key %s: %s", key, kite_last_error());
    return v;
}

static void check_vocab(const gguf_ctx *g, int n) {
    gguf_str s;
    CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == KITE_OK && gguf_str_eq(s, "llama"));
    gguf_array toks, scores, types;
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks), KITE_OK);
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, &scores), KITE_OK);
    CHECK_EQ_INT(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types), KITE_OK);
    CHECK_EQ_INT(toks.n, n);
    CHECK_EQ_INT(scores.n, n);
    CHECK_EQ_INT(types.n, n);
    if (toks.n != (uint64_t)n || scores.n != (uint64_t)n || types.n != (uint64_t)n) return;
    for (int i = 0; i < n; i++) {
        CHECK_MSG(gguf_str_eq(((const gguf_str *)toks.data)[i], syn_expect[i]), "token %d", i);
        CHECK(((const float *)scores.data)[i] == -0.5f * (float)i);
        CHECK_EQ_INT(((const int32_t *)types.data)[i], syn_types[i]);
    }
    CHECK_EQ_INT(u32_key(g, "tokenizer.ggml.unknown_token_id"), 0);
    CHECK_EQ_INT(u32_key(g, "tokenizer.ggml.bos_token_id"), 1);
    CHECK_EQ_INT(u32_key(g, "tokenizer.ggml.eos_token_id"), 2);
}

static void check_tensor(const gguf_ctx *g, const syn *s, const char *name, int kind, int layer, uint32_t out_type) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "tensor %s missing", name);
    if (!t) return;
    int64_t rows, cols;
    shape(s, kind, &rows, &cols);
    uint32_t type = rows == 1 ? KITE_DTYPE_F32 : out_type;
    CHECK_MSG(t->type == type, "%s: type %u, want %u", name, t->type, type);
    CHECK_EQ_INT(t->n_dims, rows == 1 ? 1 : 2);
    CHECK_EQ_INT(t->ne[0], cols);
    CHECK_EQ_INT(t->ne[1], rows);
    if (t->type != type || t->ne[0] != cols || t->ne[1] != rows) return;
    int bad = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        float want = expect_val(s, kind, layer, i);
        if (type == KITE_DTYPE_F32) {
            float got;
            memcpy(&got, (const uint8_t *)t->data + 4 * i, 4);
            bad += memcmp(&got, &want, 4) != 0;
        } else {
            uint16_t got;
            memcpy(&got, (const uint8_t *)t->data + 2 * i, 2);
            bad += got != (type == KITE_DTYPE_F16 ? fp32_to_fp16(want) : fp32_to_bf16(want));
        }
    }
    CHECK_MSG(bad == 0, "%s: %d elements differ", name, bad);
}

static void check_model(const char *path, const syn *s, uint32_t out_type) {
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, NULL, &g);
    CHECK_MSG(rc == KITE_OK, "open %s: %s", path, kite_last_error());
    if (rc) return;
    gguf_str str;
    CHECK(gguf_get_str(g, "general.architecture", &str) == KITE_OK && gguf_str_eq(str, "llama"));
    CHECK(gguf_get_str(g, "general.name", &str) == KITE_OK && gguf_str_eq(str, "model"));
    CHECK_EQ_INT(u32_key(g, "general.file_type"), out_type == KITE_DTYPE_F32 ? 0 : out_type == KITE_DTYPE_F16 ? 1 : 32);
    CHECK_EQ_INT(u32_key(g, "llama.context_length"), s->seq_len);
    CHECK_EQ_INT(u32_key(g, "llama.embedding_length"), s->dim);
    CHECK_EQ_INT(u32_key(g, "llama.feed_forward_length"), s->hidden);
    CHECK_EQ_INT(u32_key(g, "llama.block_count"), s->n_layers);
    CHECK_EQ_INT(u32_key(g, "llama.attention.head_count"), s->n_heads);
    CHECK_EQ_INT(u32_key(g, "llama.attention.head_count_kv"), s->n_kv_heads);
    CHECK_EQ_INT(u32_key(g, "llama.rope.dimension_count"), s->dim / s->n_heads);
    CHECK_EQ_INT(u32_key(g, "llama.vocab_size"), s->vocab);
    float f = 0;
    CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == KITE_OK && f == 1e-5f);
    CHECK(gguf_get_f32(g, "llama.rope.freq_base", &f) == KITE_OK && f == 10000.0f);
    check_vocab(g, s->vocab);

    CHECK_EQ_INT(g->n_tensors, 3 + 9 * s->n_layers);
    check_tensor(g, s, "token_embd.weight", EMB, 0, out_type);
    check_tensor(g, s, "output_norm.weight", RFIN, 0, out_type);
    check_tensor(g, s, "output.weight", s->shared ? EMB : WCLS, 0, out_type);
    static const struct {
        const char *n;
        int kind;
    } lt[] = {{"attn_norm", RATT}, {"attn_q", WQ},       {"attn_k", WK},   {"attn_v", WV}, {"attn_output", WO},
              {"ffn_norm", RFFN},  {"ffn_gate", W1},     {"ffn_down", W2}, {"ffn_up", W3}};
    for (int l = 0; l < s->n_layers; l++)
        for (size_t i = 0; i < sizeof lt / sizeof lt[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, lt[i].n);
            check_tensor(g, s, name, lt[i].kind, l, out_type);
        }
    gguf_close(g);
}

/* Writes s as "model.bin" + a 6-token tokenizer, converts and checks. */
static void roundtrip(const syn *s, uint32_t out_type) {
    const char *model = tmp_path("model.bin"), *tok = tmp_path("tok.bin"), *out = tmp_path("out.gguf");
    write_model(model, s);
    write_tokenizer(tok, s->vocab);
    llama2c_config cfg;
    CHECK_EQ_INT(llama2c_read_config(model, &cfg), KITE_OK);
    CHECK_EQ_INT(cfg.version, s->version);
    CHECK_EQ_INT(cfg.vocab_size, s->vocab);
    CHECK_EQ_INT(cfg.shared_classifier, s->shared);
    llama2c_convert_params p = {.model_path = model, .tokenizer_path = tok, .out_type = out_type};
    int rc = llama2c_convert(&p, out);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    if (rc == KITE_OK) check_model(out, s, out_type);
}

TEST(test_v0_tied) { roundtrip(&base, KITE_DTYPE_F32); }

TEST(test_v0_untied) {
    syn s = base;
    s.shared = false;
    roundtrip(&s, KITE_DTYPE_F32);
}

TEST(test_v1) {
    syn s = base;
    s.version = 1;
    roundtrip(&s, KITE_DTYPE_F32);
    s.shared = false;
    roundtrip(&s, KITE_DTYPE_F32);
}

TEST(test_v2) {
    syn s = base;
    s.version = 2;
    roundtrip(&s, KITE_DTYPE_F32);
    s.shared = false;
    s.group_size = 8;
    roundtrip(&s, KITE_DTYPE_F32);
}

TEST(test_f16_bf16) {
    syn s = base;
    s.shared = false;
    roundtrip(&s, KITE_DTYPE_F16);
    roundtrip(&s, KITE_DTYPE_BF16);
    s.version = 2;
    roundtrip(&s, KITE_DTYPE_F16);
}

/* Converts (model, tok) and expects status code with msg in the message. */
static void expect_fail(const char *model, const char *tok, int code, const char *msg) {
    llama2c_convert_params p = {.model_path = model, .tokenizer_path = tok, .out_type = KITE_DTYPE_F32};
    llama2c_conv *cv = NULL;
    int rc = llama2c_conv_new(&p, &cv);
    CHECK_EQ_INT(rc, code);
    CHECK(cv == NULL);
    CHECK_CONTAINS(kite_last_error(), msg);
    llama2c_conv_free(cv);
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

static void truncate_file(const char *path, off_t size) { CHECK(truncate(path, size) == 0); }

TEST(test_malformed_model) {
    const char *model = tmp_path("bad.bin"), *tok = tmp_path("tok6.bin");
    write_tokenizer(tok, 6);
    /* truncated by 4 bytes: exact expected size in the message */
    write_model(model, &base);
    struct stat st;
    CHECK(stat(model, &st) == 0);
    truncate_file(model, st.st_size - 4);
    char want[128];
    snprintf(want, sizeof want, "expected %lld bytes for dim=8", (long long)st.st_size);
    expect_fail(model, tok, KITE_E_FORMAT, want);
    CHECK_CONTAINS(kite_last_error(), "bad.bin");
    snprintf(want, sizeof want, "but file has %lld", (long long)st.st_size - 4);
    CHECK_CONTAINS(kite_last_error(), want);
    /* one byte too many */
    write_model(model, &base);
    FILE *f = fopen(model, "ab");
    fputc(0, f);
    fclose(f);
    expect_fail(model, tok, KITE_E_FORMAT, "expected");
    /* bad header values */
    struct {
        syn s;
        const char *msg;
    } cases[] = {
        {{0, -8, 12, 2, 2, 1, 6, 4, true, 4}, "dim = -8 must be positive"},
        {{0, 8, 0, 2, 2, 1, 6, 4, true, 4}, "hidden_dim = 0"},
        {{0, 8, 12, 2, 3, 1, 6, 4, true, 4}, "not a multiple of n_heads"},
        {{0, 8, 12, 2, 2, 3, 6, 4, true, 4}, "not a multiple of n_kv_heads"},
        {{0, 8, 12, 2, 8, 1, 6, 4, true, 4}, "must be even"},
        {{0, 8, 12, 2, 2, 1, 6, -4, true, 4}, "seq_len = -4"},
        {{2, 8, 12, 2, 2, 1, 6, 4, true, 0}, "group_size 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        syn s = cases[i].s;
        int32_t hdr[7] = {s.dim, s.hidden, s.n_layers, s.n_heads, s.n_kv_heads, s.vocab, s.seq_len};
        uint8_t h[300] = {0};
        if (s.version == 0) {
            write_bytes(model, hdr, sizeof hdr);
        } else {
            uint32_t magic = LLAMA2C_MAGIC;
            int32_t ver = s.version;
            memcpy(h, &magic, 4);
            memcpy(h + 4, &ver, 4);
            memcpy(h + 8, hdr, 28);
            memcpy(h + 37, &s.group_size, 4);
            write_bytes(model, h, sizeof h);
        }
        expect_fail(model, tok, KITE_E_FORMAT, cases[i].msg);
    }
    /* dims whose products overflow 64 bits: an error, no crash, no huge allocation */
    int32_t huge[7] = {2000000000, 2000000000, 2000000000, 2, 2, 2000000000, 2000000000};
    write_bytes(model, huge, sizeof huge);
    expect_fail(model, tok, KITE_E_FORMAT, "overflow");
    /* large but not overflowing: a size mismatch */
    int32_t big[7] = {65536, 65536, 65536, 2, 2, 65536, 65536};
    write_bytes(model, big, sizeof big);
    expect_fail(model, tok, KITE_E_FORMAT, "expected");
    /* v2 group size that does not divide the tensors */
    syn s2 = base;
    s2.version = 2;
    s2.group_size = 4;
    write_model(model, &s2);
    f = fopen(model, "r+b");
    int32_t gs = 5;
    fseek(f, 37, SEEK_SET);
    fwrite(&gs, 4, 1, f);
    fclose(f);
    expect_fail(model, tok, KITE_E_FORMAT, "group_size 5");
    /* unknown version, bad shared flag, tiny files, missing file */
    uint8_t h[256] = {0};
    uint32_t magic = LLAMA2C_MAGIC;
    int32_t ver = 3;
    memcpy(h, &magic, 4);
    memcpy(h + 4, &ver, 4);
    write_bytes(model, h, sizeof h);
    expect_fail(model, tok, KITE_E_UNSUPPORTED, "version 3");
    ver = 1;
    memcpy(h + 4, &ver, 4);
    h[36] = 7;
    write_bytes(model, h, sizeof h);
    expect_fail(model, tok, KITE_E_FORMAT, "shared_classifier");
    write_bytes(model, h, 100);
    expect_fail(model, tok, KITE_E_FORMAT, "256-byte");
    write_bytes(model, h, 10);
    expect_fail(model, tok, KITE_E_FORMAT, "28-byte");
    expect_fail(tmp_path("missing.bin"), tok, KITE_E_IO, "missing.bin");
}

TEST(test_malformed_tokenizer) {
    const char *model = tmp_path("m.bin"), *tok = tmp_path("t.bin");
    write_model(model, &base);
    write_tokenizer(tok, 5); /* one short */
    expect_fail(model, tok, KITE_E_FORMAT, "truncated at token 5");
    write_tokenizer(tok, 7); /* one too many */
    expect_fail(model, tok, KITE_E_FORMAT, "more tokens than the model's vocab_size 6");
    write_tokenizer(tok, 6);
    struct stat st;
    CHECK(stat(tok, &st) == 0);
    truncate_file(tok, st.st_size - 1); /* last token's bytes cut */
    expect_fail(model, tok, KITE_E_FORMAT, "token 5: length 3 exceeds the file");
    /* a negative length */
    uint8_t b[16] = {0};
    int32_t len = -5;
    memcpy(b + 8, &len, 4);
    write_bytes(tok, b, sizeof b);
    expect_fail(model, tok, KITE_E_FORMAT, "token 0: length -5");
    write_bytes(tok, b, 2);
    expect_fail(model, tok, KITE_E_FORMAT, "too small");
}

TEST(test_vocab_only) {
    const char *tok = tmp_path("v.bin"), *out = tmp_path("v.gguf");
    write_tokenizer(tok, 8);
    llama2c_convert_params p = {.tokenizer_path = tok, .out_type = KITE_DTYPE_F32};
    CHECK_EQ_INT(llama2c_convert(&p, out), KITE_OK);
    gguf_ctx *g = NULL;
    CHECK_EQ_INT(gguf_open(out, NULL, &g), KITE_OK);
    if (g) {
        CHECK_EQ_INT(g->n_tensors, 0);
        check_vocab(g, 8);
        gguf_str s;
        CHECK(gguf_get_str(g, "general.name", &s) == KITE_OK && gguf_str_eq(s, "v"));
        /* only general.* and tokenizer.* keys */
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const gguf_str k = g->kv[i].key;
            bool ok = (k.len > 8 && !memcmp(k.ptr, "general.", 8)) || (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10));
            CHECK_MSG(ok, "unexpected key %.*s", (int)k.len, k.ptr);
        }
        gguf_close(g);
    }
    /* --vocab-size: the first N tokens; hparams add llama.* keys */
    llama2c_hparams hp = {4096, 11008, 32, 32, 32, 4096};
    p.vocab_size = 3;
    p.hparams = &hp;
    p.name = "tiny";
    CHECK_EQ_INT(llama2c_convert(&p, out), KITE_OK);
    g = NULL;
    CHECK_EQ_INT(gguf_open(out, NULL, &g), KITE_OK);
    if (g) {
        check_vocab(g, 3);
        CHECK_EQ_INT(u32_key(g, "llama.embedding_length"), 4096);
        CHECK_EQ_INT(u32_key(g, "llama.rope.dimension_count"), 128);
        gguf_str s;
        CHECK(gguf_get_str(g, "general.name", &s) == KITE_OK && gguf_str_eq(s, "tiny"));
        gguf_close(g);
    }
    /* more tokens requested than the file has */
    p.vocab_size = 9;
    llama2c_conv *cv = NULL;
    CHECK_EQ_INT(llama2c_conv_new(&p, &cv), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "truncated at token 8");
    /* bad output type */
    p.vocab_size = 0;
    p.out_type = KITE_DTYPE_Q4_0;
    CHECK_EQ_INT(llama2c_conv_new(&p, &cv), KITE_E_ARG);
}

/* ---- real fixtures ------------------------------------------------------------ */

static bool exists(const char *path) { return access(path, R_OK) == 0; }

/* Every tensor of a equals b's (name, type, shape, bytes), same count. */
static void check_same_tensors(const gguf_ctx *a, const gguf_ctx *b) {
    CHECK_EQ_INT(a->n_tensors, b->n_tensors);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *t = &a->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const gguf_tensor *u = gguf_find_tensor(b, name);
        CHECK_MSG(u != NULL, "tensor %s missing", name);
        if (!u) continue;
        CHECK_MSG(t->type == u->type && t->n_dims == u->n_dims && !memcmp(t->ne, u->ne, sizeof t->ne) &&
                      t->nbytes == u->nbytes && !memcmp(t->data, u->data, (size_t)t->nbytes),
                  "tensor %s differs", name);
    }
}

static void check_same_vocab(const gguf_ctx *a, const gguf_ctx *b) {
    static const struct {
        const char *key;
        uint32_t type;
        size_t size;
    } arrs[] = {{"tokenizer.ggml.scores", GGUF_VT_FLOAT32, 4}, {"tokenizer.ggml.token_type", GGUF_VT_INT32, 4}};
    gguf_array x, y;
    CHECK_EQ_INT(gguf_get_arr(a, "tokenizer.ggml.tokens", GGUF_VT_STRING, &x), KITE_OK);
    CHECK_EQ_INT(gguf_get_arr(b, "tokenizer.ggml.tokens", GGUF_VT_STRING, &y), KITE_OK);
    CHECK_EQ_INT(x.n, y.n);
    int diff = 0;
    for (uint64_t i = 0; i < x.n && x.n == y.n; i++) {
        gguf_str s = ((const gguf_str *)x.data)[i], t = ((const gguf_str *)y.data)[i];
        diff += s.len != t.len || memcmp(s.ptr, t.ptr, (size_t)s.len) != 0;
    }
    CHECK_MSG(diff == 0, "%d tokens differ", diff);
    for (size_t k = 0; k < 2; k++) {
        CHECK_EQ_INT(gguf_get_arr(a, arrs[k].key, arrs[k].type, &x), KITE_OK);
        CHECK_EQ_INT(gguf_get_arr(b, arrs[k].key, arrs[k].type, &y), KITE_OK);
        CHECK_MSG(x.n == y.n && !memcmp(x.data, y.data, (size_t)x.n * arrs[k].size), "%s differs", arrs[k].key);
    }
    static const char *ids[] = {"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id",
                                "tokenizer.ggml.eos_token_id"};
    for (size_t k = 0; k < 3; k++) CHECK_EQ_INT(u32_key(a, ids[k]), u32_key(b, ids[k]));
}

static gguf_ctx *open_or_fail(const char *path) {
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, NULL, &g);
    CHECK_MSG(rc == KITE_OK, "open %s: %s", path, kite_last_error());
    return g;
}

TEST(test_stories260K) {
    const char *model = "tests/data/convert/stories260K.bin", *tok = "tests/data/convert/tok512.bin";
    const char *ref = "models/stories260K.gguf";
    if (!exists(model) || !exists(tok) || !exists(ref)) {
        printf("    (skipped: fixtures not found)\n");
        return;
    }
    const char *out = tmp_path("stories260K.gguf");
    llama2c_convert_params p = {.model_path = model, .tokenizer_path = tok, .out_type = KITE_DTYPE_F32};
    int rc = llama2c_convert(&p, out);
    CHECK_MSG(rc == KITE_OK, "%s", kite_last_error());
    gguf_ctx *a = open_or_fail(out), *b = open_or_fail(ref);
    if (a && b) {
        check_same_tensors(a, b);
        check_same_vocab(a, b);
        CHECK_EQ_INT(a->n_kv, b->n_kv);
    }
    gguf_close(a);
    gguf_close(b);
    /* the whole file is byte-identical to the committed model */
    size_t na = 0, nb = 0;
    char *fa = harness_read_file(out, &na), *fb = harness_read_file(ref, &nb);
    CHECK(fa && fb && na == nb && memcmp(fa, fb, na) == 0);
    free(fa);
    free(fb);
}

TEST(test_vocab_llama2) {
    const char *tok = "tests/data/convert/tokenizer.bin", *ref = "models/vocab-llama2.gguf";
    const char *spm = "tests/data/tokenizer/vocab-llama2-spm.gguf";
    if (!exists(tok) || !exists(ref)) {
        printf("    (skipped: fixtures not found)\n");
        return;
    }
    const char *out = tmp_path("vocab.gguf");
    llama2c_hparams hp = {4096, 11008, 32, 32, 32, 4096};
    llama2c_convert_params p = {.tokenizer_path = tok, .out_type = KITE_DTYPE_F32, .name = "llama2-spm",
                                .hparams = &hp};
    int rc = llama2c_convert(&p, out);
    CHECK_MSG(rc == KITE_OK, "%s", kite_last_error());
    gguf_ctx *a = open_or_fail(out), *b = open_or_fail(ref);
    if (a && b) check_same_vocab(a, b);
    gguf_close(b);
    if (a && exists(spm)) { /* the SentencePiece-made reference vocabulary */
        gguf_ctx *c = open_or_fail(spm);
        if (c) check_same_vocab(a, c);
        gguf_close(c);
    }
    gguf_close(a);
}

static void cleanup(void) {
    static const char *names[] = {"model.bin", "tok.bin", "out.gguf", "bad.bin", "tok6.bin", "missing.bin",
                                  "m.bin", "t.bin", "v.bin", "v.gguf", "stories260K.gguf", "vocab.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    rmdir(tmpdir);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kite-test-convert-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_v0_tied);
    RUN(test_v0_untied);
    RUN(test_v1);
    RUN(test_v2);
    RUN(test_f16_bf16);
    RUN(test_malformed_model);
    RUN(test_malformed_tokenizer);
    RUN(test_vocab_only);
    RUN(test_stories260K);
    RUN(test_vocab_llama2);
    cleanup();
    return harness_summary(__FILE__);
}
