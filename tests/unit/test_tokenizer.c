/*
 * test_tokenizer.c - SentencePiece BPE encoder, token_to_piece and the
 * streaming detokenizer against golden data (tests/data/tokenizer/, copied
 * from shared/golden; see tests/data/tokenizer/README.md), plus edge cases,
 * in-memory vocabularies and GGUF validation errors.
 */
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "json_mini.h"
#include "tokenizer_golden.h"
#include "kite.h"
#include "model/model.h"
#include "tokenizer/vocab_internal.h"

#ifndef TOK_DATA
#define TOK_DATA "tests/data/tokenizer/"
#endif
/* Llama 2 vocabulary (32000) as llama.cpp's own vocab-only file has it. */
#ifndef VOCAB_LLAMA2_PATH
#define VOCAB_LLAMA2_PATH TOK_DATA "vocab-llama2-spm.gguf"
#endif
/* The same vocabulary converted by `kite convert` from llama2.c's tokenizer.bin (bundled). */
#define VOCAB_LLAMA2_KITE_PATH "models/vocab-llama2.gguf"
/* tok512 vocabulary of the bundled model stories260K. */
#ifndef VOCAB_TOK512_PATH
#define VOCAB_TOK512_PATH "models/stories260K.gguf"
#endif

/* ---- fixtures -------------------------------------------------------------- */

typedef struct loaded {
    gguf_ctx *g;
    struct kite_model m; /* only .vocab is used by the tokenizer API */
} loaded;

static loaded llama2, llama2_kite, tok512;

static bool load(const char *path, loaded *l) {
    if (l->m.vocab) return true;
    int rc = gguf_open(path, NULL, &l->g);
    if (rc) {
        printf("    cannot open %s: %s\n", path, kite_last_error());
        return false;
    }
    rc = vocab_load_gguf(l->g, &l->m.vocab);
    if (rc) {
        printf("    cannot load vocab of %s: %s\n", path, kite_last_error());
        gguf_close(l->g);
        l->g = NULL;
        return false;
    }
    return true;
}

static void unload(loaded *l) {
    vocab_free(l->m.vocab);
    gguf_close(l->g);
    memset(l, 0, sizeof *l);
}

typedef struct rows {
    jm_row *r;
    size_t n;
} rows;

static rows read_jsonl(const char *path) {
    rows rs = {NULL, 0};
    size_t size;
    char *buf = harness_read_file(path, &size);
    if (!buf) {
        printf("    cannot read %s\n", path);
        return rs;
    }
    size_t cap = 0;
    for (size_t i = 0; i < size; i++) cap += buf[i] == '\n';
    rs.r = calloc(cap + 1, sizeof *rs.r);
    char *line = buf;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line) {
            if (jm_row_parse(line, "ids", &rs.r[rs.n]) == 0) rs.n++;
            else printf("    %s: bad line %zu\n", path, rs.n + 1);
        }
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
    return rs;
}

static void rows_free(rows *rs) {
    for (size_t i = 0; i < rs->n; i++) jm_row_free(&rs->r[i]);
    free(rs->r);
}

/* Streams BOS + ids through a detok with a small output buffer; returns the
 * text; *ok false if a chunk was not valid UTF-8. */
static char *detok_stream(const kite_model *m, const kite_token *ids, size_t n, size_t *len, bool *ok) {
    kite_detok *d;
    *ok = true;
    if (kite_detok_new(m, &d) != KITE_OK) {
        *ok = false;
        return NULL;
    }
    size_t cap = 256, used = 0;
    char *s = malloc(cap);
    char chunk[128];
    for (size_t i = 0; i <= n + 1; i++) {
        int r;
        if (i == 0) r = kite_detok_push(d, kite_token_bos(m), chunk, sizeof chunk);
        else if (i <= n) r = kite_detok_push(d, ids[i - 1], chunk, sizeof chunk);
        else r = kite_detok_flush(d, chunk, sizeof chunk);
        if (r < 0) {
            *ok = false;
            break;
        }
        if (!valid_utf8(chunk, (size_t)r) || chunk[r] != '\0') *ok = false;
        while (used + (size_t)r + 1 > cap) s = realloc(s, cap *= 2);
        memcpy(s + used, chunk, (size_t)r);
        used += (size_t)r;
    }
    s[used] = '\0';
    *len = used;
    kite_detok_free(d);
    return s;
}

/* ---- golden ---------------------------------------------------------------- */

static void check_golden(loaded *l, const char *vocab_path, const char *jsonl) {
    CHECK(load(vocab_path, l));
    if (!l->m.vocab) return;
    rows rs = read_jsonl(jsonl);
    CHECK(rs.n >= 40);
    int bad = 0;
    for (size_t i = 0; i < rs.n; i++) {
        jm_row *r = &rs.r[i];
        size_t n;
        kite_token *ids = tokenize(&l->m, r->text, r->text_len, false, &n);
        if (!ids_equal(ids, n, r->ids, r->n_ids)) {
            bad++;
            printf("    row %zu \"%.60s\": encode mismatch\n", i + 1, r->text);
            print_ids("got ", ids, n);
            print_ids("want", r->ids, r->n_ids);
        }
        free(ids);
    }
    CHECK_EQ_INT(bad, 0);
    rows_free(&rs);
}

TEST(golden_llama2_encode) { check_golden(&llama2, VOCAB_LLAMA2_PATH, TOK_DATA "tokenizer-llama2.jsonl"); }
TEST(golden_llama2_encode_bundled_vocab) {
    check_golden(&llama2_kite, VOCAB_LLAMA2_KITE_PATH, TOK_DATA "tokenizer-llama2.jsonl");
}
TEST(golden_tok512_encode) { check_golden(&tok512, VOCAB_TOK512_PATH, TOK_DATA "tokenizer-tok512.jsonl"); }

/* llama.cpp's test-tokenizer-0 cases for the Llama 2 vocabulary. */
TEST(golden_llamacpp_spm) {
    CHECK(load(VOCAB_LLAMA2_PATH, &llama2));
    if (!llama2.m.vocab) return;
    size_t inp_size, out_size;
    char *inp = harness_read_file(TOK_DATA "ggml-vocab-llama-spm.gguf.inp", &inp_size);
    char *outs = harness_read_file(TOK_DATA "ggml-vocab-llama-spm.gguf.out", &out_size);
    CHECK(inp && outs);
    if (!inp || !outs) goto done;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outs;
    int n_cases = 0, bad = 0;
    for (;;) {
        char *end = strstr(p, sep);
        if (!end) break;
        char *nl = strchr(o, '\n');
        CHECK(nl != NULL);
        if (!nl) break;
        *nl = '\0';
        int32_t want[512];
        size_t n_want = parse_ids(o, want, sizeof want / sizeof *want);
        size_t n;
        kite_token *ids = tokenize(&llama2.m, p, (size_t)(end - p), false, &n);
        if (!ids_equal(ids, n, want, n_want)) {
            bad++;
            printf("    case %d \"%.*s\": mismatch\n", n_cases + 1, (int)(end - p > 60 ? 60 : end - p), p);
            print_ids("got ", ids, n);
            print_ids("want", want, n_want);
        }
        /* round trip */
        size_t dlen;
        char *dec = decode_pieces(&llama2.m, ids, n, true, &dlen);
        CHECK_MSG(dec && dlen == (size_t)(end - p) && memcmp(dec, p, dlen) == 0, "case %d: round trip",
                  n_cases + 1);
        free(dec);
        free(ids);
        n_cases++;
        p = end + sizeof sep - 1;
        o = nl + 1;
    }
    CHECK_EQ_INT(n_cases, 46);
    CHECK_EQ_INT(bad, 0);
done:
    free(inp);
    free(outs);
}

/* decode(encode(x)) == x and the streaming detok gives x in valid chunks. */
static void check_roundtrip(loaded *l, const char *vocab_path, const char *jsonl) {
    CHECK(load(vocab_path, l));
    if (!l->m.vocab) return;
    rows rs = read_jsonl(jsonl);
    for (size_t i = 0; i < rs.n; i++) {
        jm_row *r = &rs.r[i];
        size_t dlen, slen;
        bool ok;
        char *dec = decode_pieces(&l->m, r->ids, r->n_ids, true, &dlen);
        CHECK_MSG(dec && dlen == r->text_len && memcmp(dec, r->text, dlen) == 0, "row %zu \"%.40s\": pieces give \"%s\"",
                  i + 1, r->text, dec ? dec : "(null)");
        char *str = detok_stream(&l->m, r->ids, r->n_ids, &slen, &ok);
        CHECK_MSG(ok, "row %zu: detok chunk not valid UTF-8 or error", i + 1);
        CHECK_MSG(str && slen == r->text_len && memcmp(str, r->text, slen) == 0, "row %zu \"%.40s\": detok gives \"%s\"",
                  i + 1, r->text, str ? str : "(null)");
        free(dec);
        free(str);
    }
    rows_free(&rs);
}

TEST(roundtrip_llama2) { check_roundtrip(&llama2, VOCAB_LLAMA2_PATH, TOK_DATA "tokenizer-llama2.jsonl"); }
TEST(roundtrip_tok512) { check_roundtrip(&tok512, VOCAB_TOK512_PATH, TOK_DATA "tokenizer-tok512.jsonl"); }

/* ---- edge cases on the real vocabularies ---------------------------------- */

static void expect_ids(const kite_model *m, const char *text, size_t len, bool bos, const int32_t *want,
                       size_t n_want, const char *what) {
    size_t n;
    kite_token *ids = tokenize(m, text, len, bos, &n);
    bool eq = ids_equal(ids, n, want, n_want);
    CHECK_MSG(eq, "%s: unexpected ids", what);
    if (!eq) {
        print_ids("got ", ids, n);
        print_ids("want", want, n_want);
    }
    free(ids);
}

static void expect_roundtrip(const kite_model *m, const char *text, size_t len, const char *what) {
    size_t n, dlen;
    kite_token *ids = tokenize(m, text, len, false, &n);
    CHECK_MSG(ids || len == 0, "%s: tokenize failed", what);
    char *dec = decode_pieces(m, ids, n, true, &dlen);
    CHECK_MSG(dec && dlen == len && memcmp(dec, text, len) == 0, "%s: round trip differs", what);
    free(dec);
    free(ids);
}

TEST(edge_cases) {
    CHECK(load(VOCAB_LLAMA2_PATH, &llama2));
    if (!llama2.m.vocab) return;
    const kite_model *m = &llama2.m;
    const int32_t bos_only[] = {1};
    expect_ids(m, "", 0, false, NULL, 0, "empty");
    expect_ids(m, "", 0, true, bos_only, 1, "empty + BOS");
    expect_ids(m, NULL, 0, false, NULL, 0, "NULL, 0");
    const int32_t hello[] = {1, 15043, 3186};
    expect_ids(m, "Hello world", 11, true, hello, 3, "BOS Hello world");
    const int32_t three_spaces[] = {268};
    expect_ids(m, "   ", 3, false, three_spaces, 1, "only spaces");
    expect_roundtrip(m, "                                        ", 40, "40 spaces");
    expect_roundtrip(m, "a\0b\0\0c", 6, "NUL bytes");
    static const char invalid[] = "\xff\xfe bad \xc3 \xe4\xbd \x80\x80 \xed\xa0\x80 \xf4\x90\x80\x80 end\xe4";
    expect_roundtrip(m, invalid, sizeof invalid - 1, "invalid UTF-8");
    /* every byte from 1 to 255 */
    char all[256];
    for (int i = 0; i < 256; i++) all[i] = (char)i;
    expect_roundtrip(m, all, 256, "all bytes");
    /* an invalid byte is a symbol of its own: "\xC3" + "a" is not merged, "a" still merges */
    size_t n;
    kite_token *ids = tokenize(m, "\xc3" "and", 4, false, &n);
    const int32_t want_bad[] = {29871, 198, 392}; /* "▁", <0xC3>, "and" */
    CHECK(ids_equal(ids, n, want_bad, 3));
    if (!ids_equal(ids, n, want_bad, 3)) print_ids("got", ids, n);
    free(ids);
    /* control tokens are never produced from text */
    const char *specials[] = {"<s>", "</s>", "<unk>", "<0x41>", "a<s>b</s>"};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        ids = tokenize(m, specials[k], strlen(specials[k]), false, &n);
        for (size_t i = 0; i < n; i++) {
            CHECK_MSG(ids[i] > 258, "\"%s\" gave special/byte id %d", specials[k], (int)ids[i]);
        }
        free(ids);
        expect_roundtrip(m, specials[k], strlen(specials[k]), specials[k]);
    }
}

TEST(buffer_too_small) {
    CHECK(load(VOCAB_LLAMA2_PATH, &llama2));
    if (!llama2.m.vocab) return;
    kite_token ids[2] = {-7, -7};
    size_t n = 0;
    CHECK_EQ_INT(kite_tokenize(&llama2.m, "Hello world", 11, true, ids, 2, &n), KITE_E_RANGE);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 15043);
    CHECK_EQ_INT(kite_tokenize(&llama2.m, "Hello world", 11, true, NULL, 0, &n), KITE_E_RANGE);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(kite_tokenize(&llama2.m, NULL, 3, true, ids, 2, &n), KITE_E_ARG);
    CHECK_EQ_INT(kite_tokenize(NULL, "a", 1, true, ids, 2, &n), KITE_E_ARG);
}

TEST(long_text_is_fast) {
    CHECK(load(VOCAB_LLAMA2_PATH, &llama2));
    if (!llama2.m.vocab) return;
    size_t len = 100 * 1024;
    char *text = malloc(len);
    static const char para[] = "The quick brown fox jumps over the lazy dog. Привет, мир! 你好世界 🙂 12345\n";
    for (size_t i = 0; i < len; i++) text[i] = para[i % (sizeof para - 1)];
    while (len > 0 && ((uint8_t)text[len - 1] & 0xC0) == 0x80) len--; /* whole characters */
    len--;
    /* CPU time of this thread, not the wall clock: a guard against quadratic
     * behaviour (which takes minutes here), not a speed claim, so the bound is
     * loose and other processes' load does not count */
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    size_t n;
    kite_token *ids = tokenize(&llama2.m, text, len, true, &n);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("    100 KB: %zu tokens in %.3f CPU s\n", n, sec);
    CHECK(ids != NULL);
    CHECK(sec < 3.0);
    /* one long word without spaces: no piece longer than max_piece_len is searched */
    memset(text, 'a', len);
    free(ids);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    ids = tokenize(&llama2.m, text, len, false, &n);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("    100 KB of 'a': %zu tokens in %.3f CPU s\n", n, sec);
    CHECK(sec < 3.0);
    free(ids);
    free(text);
}

TEST(token_to_piece) {
    CHECK(load(VOCAB_LLAMA2_PATH, &llama2));
    if (!llama2.m.vocab) return;
    const kite_model *m = &llama2.m;
    const char *p;
    char buf[8];
    CHECK_EQ_INT(kite_token_bos(m), 1);
    CHECK_EQ_INT(kite_token_eos(m), 2);
    CHECK(kite_token_is_eog(m, 2));
    CHECK(!kite_token_is_eog(m, 1));
    CHECK(!kite_token_is_eog(m, 15043));
    CHECK_EQ_INT(kite_token_to_piece(m, 15043, &p, buf), 6);
    CHECK_STR_EQ(p, " Hello");
    CHECK_EQ_INT(kite_token_to_piece(m, 1, &p, buf), 0); /* <s> control */
    CHECK_EQ_INT(kite_token_to_piece(m, 2, &p, buf), 0);
    CHECK_EQ_INT(kite_token_to_piece(m, 13, &p, buf), 1); /* <0x0A> */
    CHECK_EQ_INT(p[0], '\n');
    CHECK_EQ_INT(kite_token_to_piece(m, 3, &p, buf), 1); /* <0x00> */
    CHECK_EQ_INT(p[0], 0);
    CHECK_EQ_INT(kite_token_to_piece(m, 0, &p, buf), 5); /* <unk> */
    CHECK_STR_EQ(p, " \xE2\x81\x87 ");
    CHECK_EQ_INT(kite_token_to_piece(m, 32000, &p, buf), KITE_E_RANGE);
    CHECK_CONTAINS(kite_last_error(), "32000");
    CHECK_EQ_INT(kite_token_to_piece(m, -1, &p, buf), KITE_E_RANGE);
}

/* ---- streaming detok ------------------------------------------------------- */

static int push(kite_detok *d, kite_token t, char *out) { return kite_detok_push(d, t, out, 64); }

TEST(detok_rules) {
    CHECK(load(VOCAB_LLAMA2_PATH, &llama2));
    if (!llama2.m.vocab) return;
    const kite_model *m = &llama2.m;
    kite_detok *d;
    char out[64];
    CHECK_EQ_INT(kite_detok_new(m, &d), KITE_OK);
    /* after BOS the dummy space goes; later spaces stay */
    CHECK_EQ_INT(push(d, 1, out), 0);
    CHECK_EQ_INT(push(d, 15043, out), 5);
    CHECK_STR_EQ(out, "Hello");
    CHECK_EQ_INT(push(d, 3186, out), 6);
    CHECK_STR_EQ(out, " world");
    /* a character split over byte tokens: 你 = E4 BD A0 */
    CHECK_EQ_INT(push(d, 3 + 0xE4, out), 0);
    CHECK_EQ_INT(push(d, 3 + 0xBD, out), 0);
    CHECK_EQ_INT(push(d, 3 + 0xA0, out), 3);
    CHECK_STR_EQ(out, "\xE4\xBD\xA0");
    /* an invalid byte comes out at once */
    CHECK_EQ_INT(push(d, 3 + 0xFF, out), 3);
    CHECK_STR_EQ(out, "\xEF\xBF\xBD");
    /* a lead byte followed by a non-continuation: U+FFFD then the text */
    CHECK_EQ_INT(push(d, 3 + 0xE4, out), 0);
    CHECK_EQ_INT(push(d, 15043, out), 9);
    CHECK_STR_EQ(out, "\xEF\xBF\xBD Hello");
    /* incomplete tail at flush */
    CHECK_EQ_INT(push(d, 3 + 0xF0, out), 0);
    CHECK_EQ_INT(push(d, 3 + 0x9F, out), 0);
    CHECK_EQ_INT(kite_detok_flush(d, out, sizeof out), 3);
    CHECK_STR_EQ(out, "\xEF\xBF\xBD");
    CHECK_EQ_INT(kite_detok_flush(d, out, sizeof out), 0);
    CHECK_STR_EQ(out, "");
    /* a byte-token space after BOS is kept */
    CHECK_EQ_INT(push(d, 1, out), 0);
    CHECK_EQ_INT(push(d, 3 + 0x20, out), 1);
    CHECK_STR_EQ(out, " ");
    /* without BOS the leading space stays */
    CHECK_EQ_INT(push(d, 15043, out), 6);
    CHECK_STR_EQ(out, " Hello");
    /* errors leave the state unchanged */
    CHECK_EQ_INT(push(d, 32000, out), KITE_E_RANGE);
    CHECK_EQ_INT(push(d, -5, out), KITE_E_RANGE);
    CHECK_EQ_INT(push(d, 3 + 0xE4, out), 0);
    CHECK_EQ_INT(kite_detok_push(d, 15043, out, 4), KITE_E_RANGE); /* needs 10 */
    CHECK_EQ_INT(kite_detok_push(d, 15043, NULL, 4), KITE_E_ARG);
    CHECK_EQ_INT(kite_detok_push(d, 15043, out, 10), 9);
    CHECK_STR_EQ(out, "\xEF\xBF\xBD Hello");
    kite_detok_free(d);
    kite_detok_free(NULL);
    CHECK_EQ_INT(kite_detok_new(NULL, &d), KITE_E_ARG);
}

/* ---- in-memory vocabularies ------------------------------------------------ */

typedef struct mini {
    gguf_str pieces[300];
    float scores[300];
    int32_t types[300];
    char bytes[256][7];
    int n;
    vocab_spec spec;
    vocab *v;
    struct kite_model m;
} mini;

static int mini_add(mini *mv, const char *text, float score, int type) {
    mv->pieces[mv->n].ptr = text;
    mv->pieces[mv->n].len = strlen(text);
    mv->scores[mv->n] = score;
    mv->types[mv->n] = type;
    return mv->n++;
}

/* <unk> <s> </s> [256 byte tokens if with_bytes] then the given pieces. */
static void mini_init(mini *mv, bool with_bytes) {
    memset(mv, 0, sizeof *mv);
    mini_add(mv, "<unk>", 0, VOCAB_TT_UNKNOWN);
    mini_add(mv, "<s>", 0, VOCAB_TT_CONTROL);
    mini_add(mv, "</s>", 0, VOCAB_TT_CONTROL);
    if (with_bytes)
        for (int b = 0; b < 256; b++) {
            snprintf(mv->bytes[b], sizeof mv->bytes[b], "<0x%02X>", b);
            mini_add(mv, mv->bytes[b], 0, VOCAB_TT_BYTE);
        }
}

static int mini_build(mini *mv) {
    mv->spec = vocab_spec_default();
    mv->spec.name = "mini";
    mv->spec.n_tokens = mv->n;
    mv->spec.pieces = mv->pieces;
    mv->spec.scores = mv->scores;
    mv->spec.types = mv->types;
    mv->spec.unk = 0;
    mv->spec.bos = 1;
    mv->spec.eos = 2;
    int rc = vocab_build(&mv->spec, &mv->v);
    mv->m.vocab = mv->v;
    return rc;
}

#define U "\xE2\x96\x81" /* ▁ */

TEST(mini_merges_and_ties) {
    mini mv;
    mini_init(&mv, true);
    int a = mini_add(&mv, "a", -1, 1), sp = mini_add(&mv, U, -1, 1);
    mini_add(&mv, "b", -1, 1);
    mini_add(&mv, "ab", -2, 1);
    int ba = mini_add(&mv, "ba", -2, 1);
    int uab = mini_add(&mv, U "ab", -3, 1);
    CHECK_EQ_INT(mini_build(&mv), KITE_OK);
    /* "▁aba": "ab" and "ba" tie -> the leftmost "ab" wins, then "▁ab" */
    const int32_t w1[] = {uab, a};
    expect_ids(&mv.m, "aba", 3, false, w1, 2, "tie leftmost");
    /* "▁▁ba": neither "▁▁" nor "▁b" is a piece */
    const int32_t w2[] = {sp, sp, ba};
    expect_ids(&mv.m, " ba", 3, false, w2, 3, "spaces");
    /* characters without a piece -> bytes; control text is never produced */
    const int32_t w3[] = {sp, 3 + 'z', 3 + '<', 3 + 's', 3 + '>'};
    expect_ids(&mv.m, "z<s>", 4, false, w3, 5, "byte fallback");
    vocab_free(mv.v);
}

TEST(mini_no_space_prefix_and_unk) {
    mini mv;
    mini_init(&mv, false);
    int a = mini_add(&mv, "a", -1, 1);
    CHECK_EQ_INT(mini_build(&mv), KITE_OK);
    vocab_free(mv.v);
    mv.spec.add_space_prefix = false;
    CHECK_EQ_INT(vocab_build(&mv.spec, &mv.v), KITE_OK);
    mv.m.vocab = mv.v;
    /* no byte tokens: one <unk> per unknown character */
    const int32_t w[] = {a, 0, a, 0};
    expect_ids(&mv.m, "a\xE4\xBD\xA0" "a\xff", 6, false, w, 4, "unk fallback");
    vocab_free(mv.v);
    /* neither bytes nor unk: an error, not a crash */
    mv.spec.unk = -1;
    mv.types[0] = VOCAB_TT_CONTROL;
    CHECK_EQ_INT(vocab_build(&mv.spec, &mv.v), KITE_OK);
    mv.m.vocab = mv.v;
    size_t n;
    kite_token out[8];
    CHECK_EQ_INT(kite_tokenize(&mv.m, "ab", 2, false, out, 8, &n), KITE_E_NOT_FOUND);
    CHECK_CONTAINS(kite_last_error(), "0x62");
    vocab_free(mv.v);
}

/* An UNUSED piece is merged through but split back into its parts. */
TEST(mini_unused_resegment) {
    mini mv;
    mini_init(&mv, true);
    mini_add(&mv, "a", -1, 1);
    mini_add(&mv, "b", -1, 1);
    int c = mini_add(&mv, "c", -1, 1), sp = mini_add(&mv, U, -1, 1);
    int ab = mini_add(&mv, "ab", -2, 1);
    mini_add(&mv, "abc", -3, VOCAB_TT_UNUSED);
    mini_add(&mv, "bc", -9, 1);
    mini_add(&mv, U "abc", -4, VOCAB_TT_UNUSED);
    CHECK_EQ_INT(mini_build(&mv), KITE_OK);
    CHECK(mv.v->has_unused);
    /* ▁ a b c -> ab -> abc (unused) -> ▁abc (unused) -> split: ▁ | abc -> ab | c */
    const int32_t w[] = {sp, ab, c};
    expect_ids(&mv.m, "abc", 3, false, w, 3, "unused resegmented");
    vocab_free(mv.v);
}

TEST(mini_validation) {
    mini mv;
    mini_init(&mv, true);
    mini_add(&mv, "a", -1, 1);
    mv.types[5] = 9;
    CHECK_EQ_INT(mini_build(&mv), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "token_type[5]");
    mini bad;
    mini_init(&bad, false);
    mini_add(&bad, "<0xZZ>", 0, VOCAB_TT_BYTE);
    CHECK_EQ_INT(mini_build(&bad), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "tokens[3]");
    mini_init(&bad, false);
    bad.spec = vocab_spec_default();
    bad.spec.n_tokens = bad.n;
    bad.spec.pieces = bad.pieces;
    bad.spec.eos = 3;
    CHECK_EQ_INT(vocab_build(&bad.spec, &bad.v), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "eos_token_id");
    /* no types array: specials and <0xNN> are inferred */
    bad.spec.eos = 2;
    bad.spec.bos = 1;
    bad.spec.unk = 0;
    CHECK_EQ_INT(vocab_build(&bad.spec, &bad.v), KITE_OK);
    CHECK_EQ_INT(bad.v->types[1], VOCAB_TT_CONTROL);
    CHECK_EQ_INT(bad.v->types[0], VOCAB_TT_UNKNOWN);
    vocab_free(bad.v);
}

/* ---- fuzz corpus replay ----------------------------------------------------- */

#include "fuzz/fuzz_tokenizer.c"

/* Every file of the fuzz corpus goes through the fuzz target's invariants
 * (a violation aborts, which tests/run.sh reports as a crash). */
TEST(fuzz_corpus_replay) {
    int n_files = replay_fuzz_corpus("tests/fuzz/corpus/fuzz_tokenizer", LLVMFuzzerTestOneInput);
    CHECK(n_files >= 5);
}

/* ---- GGUF validation -------------------------------------------------------- */

static int load_from_writer(gguf_writer *w, vocab **v, gguf_ctx **g) {
    char path[] = "/tmp/kite-test-tok-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -100;
    close(fd);
    int rc = gguf_writer_write(w, path);
    if (rc == KITE_OK) rc = gguf_open(path, NULL, g);
    unlink(path);
    if (rc) return rc;
    rc = vocab_load_gguf(*g, v);
    return rc;
}

TEST(gguf_errors) {
    static const char *toks[] = {"<unk>", "<s>", "</s>", "a", U};
    const float scores[] = {0, 0, 0, -1, -2};
    const int32_t types[] = {2, 3, 3, 1, 1};
    struct {
        const char *what;
        int expect;
        const char *msg;
    } cases[] = {
        {"ok", KITE_OK, ""},
        {"no model", KITE_E_NOT_FOUND, "tokenizer.ggml.model"},
        {"gpt2", KITE_E_NOT_FOUND, "tokenizer.ggml.merges"}, /* gpt2 is supported: merges are required */
        {"no tokens", KITE_E_NOT_FOUND, "tokenizer.ggml.tokens"},
        {"short scores", KITE_E_FORMAT, "tokenizer.ggml.scores"},
        {"bos range", KITE_E_FORMAT, "bos_token_id"},
        {"types float", KITE_E_FORMAT, "tokenizer.ggml.token_type"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gguf_writer *w = gguf_writer_new();
        const char *what = cases[k].what;
        if (strcmp(what, "no model")) gguf_writer_set_str(w, "tokenizer.ggml.model", strcmp(what, "gpt2") ? "llama" : "gpt2");
        if (strcmp(what, "no tokens")) gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 5);
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, scores, strcmp(what, "short scores") ? 5 : 4);
        if (strcmp(what, "types float")) gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, types, 5);
        else gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_FLOAT32, scores, 5);
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", strcmp(what, "bos range") ? 1 : 5);
        vocab *v = NULL;
        gguf_ctx *g = NULL;
        int rc = load_from_writer(w, &v, &g);
        CHECK_MSG(rc == cases[k].expect, "%s: rc %d (%s), want %d", what, rc, kite_last_error(), cases[k].expect);
        if (rc != KITE_OK) CHECK_CONTAINS(kite_last_error(), cases[k].msg);
        if (rc == KITE_OK && v) {
            struct kite_model m;
            memset(&m, 0, sizeof m);
            m.vocab = v;
            const int32_t want[] = {1, 4, 3, 3};
            expect_ids(&m, "aa", 2, true, want, 4, "gguf mini");
        }
        vocab_free(v);
        gguf_close(g);
        gguf_writer_free(w);
    }
}

int main(void) {
    RUN(golden_llama2_encode);
    RUN(golden_llama2_encode_bundled_vocab);
    RUN(golden_tok512_encode);
    RUN(golden_llamacpp_spm);
    RUN(roundtrip_llama2);
    RUN(roundtrip_tok512);
    RUN(edge_cases);
    RUN(buffer_too_small);
    RUN(long_text_is_fast);
    RUN(token_to_piece);
    RUN(detok_rules);
    RUN(mini_merges_and_ties);
    RUN(mini_no_space_prefix_and_unk);
    RUN(mini_unused_resegment);
    RUN(mini_validation);
    RUN(gguf_errors);
    RUN(fuzz_corpus_replay);
    unload(&llama2);
    unload(&tok512);
    unload(&llama2_kite);
    vocab_free(fuzz_tok_model.vocab);
    gguf_close(fuzz_tok_gguf);
    return harness_summary(__FILE__);
}
