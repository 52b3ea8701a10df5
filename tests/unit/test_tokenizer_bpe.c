/*
 * test_tokenizer_bpe.c - byte-level BPE ("gpt2" tokenizer model) against the
 * golden data in tests/data/tokenizer/ (GPT-2, Llama 3, Qwen3 vocabularies;
 * see tests/data/tokenizer/README.md): every jsonl row and every llama.cpp
 * test-tokenizer-0 case, decode(encode(x)) == x (after NFC for Qwen), the
 * streaming detok, edge cases, an in-memory vocabulary, speed, and a replay
 * of the fuzz corpus.  Each big vocabulary is loaded once.
 */
#include <time.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "json_mini.h"
#include "tokenizer_golden.h"
#include "kite.h"
#include "model/model.h"
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_internal.h"

#define TOK_DATA "tests/data/tokenizer/"

typedef struct loaded {
    const char *path;
    gguf_ctx *g;
    struct kite_model m; /* only .vocab is used by the tokenizer API */
    double load_s;
} loaded;

static loaded gpt2 = {TOK_DATA "vocab-gpt2.gguf", NULL, {0}, 0};
static loaded llama3 = {TOK_DATA "vocab-llama3.gguf", NULL, {0}, 0};
static loaded qwen3 = {TOK_DATA "vocab-qwen3.gguf", NULL, {0}, 0};

/* CPU time of this thread: the timed checks below guard against quadratic
 * behaviour (minutes), they are not speed claims, so their bounds are loose
 * and other processes' load does not count */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool load(loaded *l) {
    if (l->m.vocab) return true;
    double t0 = now_s();
    int rc = gguf_open(l->path, NULL, &l->g);
    if (rc == KITE_OK) rc = vocab_load_gguf(l->g, &l->m.vocab);
    l->load_s = now_s() - t0;
    if (rc) {
        printf("    cannot load %s: %s\n", l->path, kite_last_error());
        gguf_close(l->g);
        l->g = NULL;
        return false;
    }
    return true;
}

static void unload(loaded *l) {
    vocab_free(l->m.vocab);
    gguf_close(l->g);
    l->g = NULL;
    l->m.vocab = NULL;
}

/* BOS (when the vocab has one) + ids through a detok; *ok false if a chunk
 * is not valid UTF-8. */
static char *detok_stream(const kite_model *m, const kite_token *ids, size_t n, size_t *len, bool *ok) {
    kite_detok *d;
    *ok = kite_detok_new(m, &d) == KITE_OK;
    if (!*ok) return NULL;
    size_t cap = 256, used = 0, chunk_cap = 3 * (m->vocab->max_dec_len + 4) + 1;
    char *s = malloc(cap), *chunk = malloc(chunk_cap);
    for (size_t i = 0; i <= n + 1; i++) {
        int r;
        if (i == 0) {
            if (kite_token_bos(m) < 0) continue;
            r = kite_detok_push(d, kite_token_bos(m), chunk, chunk_cap);
        } else if (i <= n) {
            r = kite_detok_push(d, ids[i - 1], chunk, chunk_cap);
        } else {
            r = kite_detok_flush(d, chunk, chunk_cap);
        }
        if (r < 0) {
            *ok = false;
            break;
        }
        if (!valid_utf8(chunk, (size_t)r)) *ok = false;
        while (used + (size_t)r + 1 > cap) s = realloc(s, cap *= 2);
        memcpy(s + used, chunk, (size_t)r);
        used += (size_t)r;
    }
    s[used] = '\0';
    *len = used;
    free(chunk);
    kite_detok_free(d);
    return s;
}

/* The text decode(encode(x)) must give: x, or NFC(x) when the vocab normalises. */
static char *expected_text(const loaded *l, const char *text, size_t len, size_t *out_len) {
    char *e;
    if (l->m.vocab->nfc) {
        if (unicode_nfc(text, len, &e, out_len) != KITE_OK) return NULL;
        return e;
    }
    e = malloc(len + 1);
    memcpy(e, text, len);
    e[len] = '\0';
    *out_len = len;
    return e;
}

/* Checks one text: ids (if want != NULL), piece round trip and streaming detok. */
static int check_text(loaded *l, const char *text, size_t len, const int32_t *want, size_t n_want, const char *what) {
    int bad = 0;
    size_t n, dlen, slen, elen;
    bool ok;
    kite_token *ids = tokenize(&l->m, text, len, false, &n);
    if (want && !ids_equal(ids, n, want, n_want)) {
        bad = 1;
        printf("    %s \"%.60s\": encode mismatch\n", what, text);
        print_ids("got ", ids, n);
        print_ids("want", want, n_want);
    }
    char *exp = expected_text(l, text, len, &elen);
    char *dec = decode_pieces(&l->m, ids, n, false, &dlen);
    CHECK_MSG(dec && exp && dlen == elen && memcmp(dec, exp, dlen) == 0, "%s \"%.40s\": pieces give \"%s\"", what, text,
              dec ? dec : "(null)");
    if (valid_utf8(text, len)) {
        char *str = detok_stream(&l->m, ids, n, &slen, &ok);
        CHECK_MSG(ok, "%s: detok chunk not valid UTF-8 or error", what);
        CHECK_MSG(str && slen == elen && memcmp(str, exp, slen) == 0, "%s \"%.40s\": detok gives \"%s\"", what, text,
                  str ? str : "(null)");
        free(str);
    }
    free(exp);
    free(dec);
    free(ids);
    return bad;
}

/* ---- golden: jsonl ------------------------------------------------------------ */

static void check_jsonl(loaded *l, const char *jsonl, int min_rows) {
    CHECK(load(l));
    if (!l->m.vocab) return;
    size_t size;
    char *buf = harness_read_file(jsonl, &size);
    CHECK_MSG(buf != NULL, "cannot read %s", jsonl);
    if (!buf) return;
    int n_rows = 0, bad = 0;
    char *line = buf;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line) {
            jm_row r;
            CHECK_MSG(jm_row_parse(line, "ids", &r) == 0, "%s: bad line %d", jsonl, n_rows + 1);
            char what[32];
            snprintf(what, sizeof what, "row %d", n_rows + 1);
            bad += check_text(l, r.text, r.text_len, r.ids, r.n_ids, what);
            jm_row_free(&r);
            n_rows++;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
    printf("    %s: %d rows, %d mismatches\n", jsonl, n_rows, bad);
    CHECK(n_rows >= min_rows);
    CHECK_EQ_INT(bad, 0);
}

TEST(golden_gpt2) { check_jsonl(&gpt2, TOK_DATA "tokenizer-gpt2.jsonl", 40); }
TEST(golden_llama3) { check_jsonl(&llama3, TOK_DATA "tokenizer-llama3.jsonl", 40); }
TEST(golden_qwen3) { check_jsonl(&qwen3, TOK_DATA "tokenizer-qwen3.jsonl", 40); }

/* ---- golden: llama.cpp test-tokenizer-0 cases ------------------------------------ */

static void check_llamacpp(loaded *l, const char *base) {
    CHECK(load(l));
    if (!l->m.vocab) return;
    char pi[256], po[256];
    snprintf(pi, sizeof pi, TOK_DATA "%s.inp", base);
    snprintf(po, sizeof po, TOK_DATA "%s.out", base);
    size_t inp_size, out_size;
    char *inp = harness_read_file(pi, &inp_size);
    char *outs = harness_read_file(po, &out_size);
    CHECK(inp && outs);
    int n_cases = 0, bad = 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outs;
    while (inp && outs) {
        char *end = strstr(p, sep);
        if (!end) break;
        char *nl = strchr(o, '\n');
        CHECK(nl != NULL);
        if (!nl) break;
        *nl = '\0';
        int32_t want[1024];
        size_t n_want = parse_ids(o, want, sizeof want / sizeof *want);
        char what[32];
        snprintf(what, sizeof what, "case %d", n_cases + 1);
        bad += check_text(l, p, (size_t)(end - p), want, n_want, what);
        n_cases++;
        p = end + sizeof sep - 1;
        o = nl + 1;
    }
    printf("    %s: %d cases, %d mismatches\n", base, n_cases, bad);
    CHECK_EQ_INT(n_cases, 46);
    CHECK_EQ_INT(bad, 0);
    free(inp);
    free(outs);
}

TEST(llamacpp_gpt2) { check_llamacpp(&gpt2, "ggml-vocab-gpt-2.gguf"); }
TEST(llamacpp_llama3) { check_llamacpp(&llama3, "ggml-vocab-llama-bpe.gguf"); }
/* Qwen2's cases with the Qwen3 vocabulary (same regular tokens and merges). */
TEST(llamacpp_qwen2) { check_llamacpp(&qwen3, "ggml-vocab-qwen2.gguf"); }

/* ---- vocabulary facts, BOS, specials ------------------------------------------- */

static void expect_ids(const kite_model *m, const char *text, bool bos, const int32_t *want, size_t n_want,
                       const char *what) {
    size_t n;
    kite_token *ids = tokenize(m, text, strlen(text), bos, &n);
    bool eq = ids_equal(ids, n, want, n_want);
    CHECK_MSG(eq, "%s: unexpected ids", what);
    if (!eq) {
        print_ids("got ", ids, n);
        print_ids("want", want, n_want);
    }
    free(ids);
}

TEST(vocab_facts_and_specials) {
    CHECK(load(&gpt2) && load(&llama3) && load(&qwen3));
    if (!gpt2.m.vocab || !llama3.m.vocab || !qwen3.m.vocab) return;
    CHECK_EQ_INT(gpt2.m.vocab->model, VOCAB_MODEL_BPE);
    CHECK_EQ_INT(gpt2.m.vocab->pre, PRETOK_GPT2);
    CHECK_EQ_INT(llama3.m.vocab->pre, PRETOK_LLAMA3);
    CHECK_EQ_INT(qwen3.m.vocab->pre, PRETOK_QWEN2);
    CHECK(qwen3.m.vocab->nfc && !llama3.m.vocab->nfc && !gpt2.m.vocab->nfc);
    CHECK(llama3.m.vocab->n_merges > 280000 - 10);
    printf("    merges: gpt2 %d, llama3 %d, qwen3 %d\n", (int)gpt2.m.vocab->n_merges, (int)llama3.m.vocab->n_merges,
           (int)qwen3.m.vocab->n_merges);
    for (int b = 0; b < 256; b++) {
        CHECK(gpt2.m.vocab->bpe_byte_tok[b] >= 0 && llama3.m.vocab->bpe_byte_tok[b] >= 0 &&
              qwen3.m.vocab->bpe_byte_tok[b] >= 0);
    }
    /* BOS follows tokenizer.ggml.add_bos_token: Llama 3 yes, Qwen no */
    const int32_t l3[] = {128000, 9906, 1917};
    expect_ids(&llama3.m, "Hello world", true, l3, 3, "llama3 BOS");
    expect_ids(&llama3.m, "Hello world", false, l3 + 1, 2, "llama3 no BOS");
    const int32_t qw[] = {9707, 1879};
    expect_ids(&qwen3.m, "Hello world", true, qw, 2, "qwen3 add_bos_token false");
    expect_ids(&gpt2.m, "", true, NULL, 0, "gpt2 empty");
    CHECK_EQ_INT(kite_token_bos(&llama3.m), 128000);
    CHECK(kite_token_is_eog(&llama3.m, 128009)); /* <|eot_id|> */
    CHECK(kite_token_is_eog(&gpt2.m, 50256));    /* <|endoftext|> */
    /* control tokens are never parsed from text */
    size_t n;
    kite_token *ids = tokenize(&llama3.m, "<|begin_of_text|>hi<|eot_id|>", strlen("<|begin_of_text|>hi<|eot_id|>"), false, &n);
    for (size_t i = 0; i < n; i++) CHECK_MSG(ids[i] < 128000, "control id %d from text", (int)ids[i]);
    free(ids);
    ids = tokenize(&gpt2.m, "<|endoftext|>", 13, false, &n);
    for (size_t i = 0; i < n; i++) CHECK_MSG(ids[i] != 50256, "control id from text");
    free(ids);
    /* user-defined tokens (Qwen3's <think>, <tool_call>, ...) are matched in text */
    int32_t think = vocab_find(qwen3.m.vocab, "<think>", 7);
    CHECK(think >= 0 && qwen3.m.vocab->types[think] == VOCAB_TT_USER_DEFINED);
    CHECK(qwen3.m.vocab->n_user == 12);
    if (think >= 0) {
        ids = tokenize(&qwen3.m, "a<think>b", 9, false, &n);
        CHECK(n == 3 && ids[1] == think);
        free(ids);
        static const char user_text[] = "x <think>\n</think> y<tool_call>";
        check_text(&qwen3, user_text, sizeof user_text - 1, NULL, 0, "user-defined round trip");
    }
    /* token_to_piece: GPT-2 characters back to bytes, control tokens empty */
    const char *p;
    char buf[8];
    CHECK_EQ_INT(kite_token_to_piece(&gpt2.m, 220, &p, buf), 1); /* "Ġ" */
    CHECK(p[0] == ' ');
    CHECK_EQ_INT(kite_token_to_piece(&gpt2.m, 50256, &p, buf), 0);
    CHECK_EQ_INT(kite_token_to_piece(&gpt2.m, 50257, &p, buf), KITE_E_RANGE);
    /* buffer too small */
    kite_token two[2];
    CHECK_EQ_INT(kite_tokenize(&llama3.m, "Hello world again", 17, true, two, 2, &n), KITE_E_RANGE);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(two[0], 128000);
}

/* ---- edge cases: bytes that are not valid UTF-8, NUL, all bytes ----------------- */

TEST(edge_cases) {
    loaded *all[] = {&gpt2, &llama3, &qwen3};
    static const char invalid[] = "\xff\xfe bad \xc3 \xe4\xbd \x80\x80 \xed\xa0\x80 \xf4\x90\x80\x80 end\xe4";
    char bytes[256];
    for (int i = 0; i < 256; i++) bytes[i] = (char)i;
    for (size_t k = 0; k < 3; k++) {
        CHECK(load(all[k]));
        if (!all[k]->m.vocab) continue;
        check_text(all[k], "", 0, NULL, 0, "empty");
        check_text(all[k], "a\0b\0\0c", 6, NULL, 0, "NUL bytes");
        check_text(all[k], invalid, sizeof invalid - 1, NULL, 0, "invalid UTF-8");
        check_text(all[k], bytes, 256, NULL, 0, "all bytes");
        static const char spaces[] = "   \n\n \t\r\n  x  ";
        static const char mixed[] = "e\xcc\x81 caf\xc3\xa9 \xef\xbb\xbf\xe2\x80\x8b 1234567 I'M it'S";
        check_text(all[k], spaces, sizeof spaces - 1, NULL, 0, "spaces");
        check_text(all[k], mixed, sizeof mixed - 1, NULL, 0, "mixed");
    }
}

/* NFC (Qwen): decomposed and composed text give the same ids. */
TEST(nfc_qwen) {
    CHECK(load(&qwen3) && load(&llama3));
    if (!qwen3.m.vocab || !llama3.m.vocab) return;
    size_t na, nb;
    kite_token *a = tokenize(&qwen3.m, "caf\xc3\xa9", 5, false, &na);
    kite_token *b = tokenize(&qwen3.m, "cafe\xcc\x81", 6, false, &nb);
    CHECK(ids_equal(a, na, b, nb));
    free(a);
    free(b);
    a = tokenize(&llama3.m, "caf\xc3\xa9", 5, false, &na); /* no NFC for Llama 3 */
    b = tokenize(&llama3.m, "cafe\xcc\x81", 6, false, &nb);
    CHECK(!ids_equal(a, na, b, nb));
    free(a);
    free(b);
    /* without NFC, the decomposed golden row gives llama.cpp's ids (llamacpp_ids) */
    static const char nfd[] = "e\xcc\x81 vs \xc3\xa9 (decomposed vs precomposed)";
    const int32_t hf[] = {963, 6165, 3958, 320, 450, 92734, 6165, 855, 92734, 8};
    const int32_t lcpp[] = {68, 53839, 6165, 3958, 320, 450, 92734, 6165, 855, 92734, 8};
    a = tokenize(&qwen3.m, nfd, sizeof nfd - 1, false, &na);
    CHECK(ids_equal(a, na, hf, 10));
    free(a);
    qwen3.m.vocab->nfc = false;
    a = tokenize(&qwen3.m, nfd, sizeof nfd - 1, false, &na);
    qwen3.m.vocab->nfc = true;
    CHECK(ids_equal(a, na, lcpp, 11));
    free(a);
    char *o;
    size_t ol;
    CHECK_EQ_INT(unicode_nfc("a\xff" "e\xcc\x81\xc3", 6, &o, &ol), KITE_OK); /* bad bytes kept */
    CHECK(ol == 5 && memcmp(o, "a\xff\xc3\xa9\xc3", 5) == 0);
    free(o);
}

/* ---- unicode table ------------------------------------------------------------- */

TEST(byte_table) {
    int seen[324] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = unicode_byte_to_cp((uint8_t)b);
        CHECK(cp < 324);
        if (cp >= 324) continue;
        seen[cp]++;
        CHECK_EQ_INT(unicode_cp_to_byte(cp), b);
    }
    for (int c = 0; c < 324; c++) CHECK(seen[c] <= 1);
    CHECK_EQ_INT(unicode_byte_to_cp(' '), 0x120);
    CHECK_EQ_INT(unicode_byte_to_cp('\n'), 0x10A);
    CHECK_EQ_INT(unicode_byte_to_cp(0xAD), 0x143);
    CHECK_EQ_INT(unicode_byte_to_cp('A'), 'A');
    CHECK_EQ_INT(unicode_cp_to_byte(0x144), -1);
    CHECK_EQ_INT(unicode_cp_to_byte(0x20), -1);
    CHECK_EQ_INT(pretok_kind_from_name("qwen2", 5), PRETOK_QWEN2);
    CHECK_EQ_INT(pretok_kind_from_name("tekken", 6), PRETOK_TEKKEN);
}

/* Every pattern compiles, and its chunks cover the text exactly. */
typedef struct split_acc {
    size_t next; /* expected offset of the next chunk */
    int n;
    bool ok;
} split_acc;

static int split_cb(void *ctx, size_t off, size_t len) {
    split_acc *a = ctx;
    if (off != a->next || len == 0) a->ok = false;
    a->next = off + len;
    a->n++;
    return 0;
}

TEST(pretok_kinds) {
    static const char text[] = "Hello WORLD it's\r\n\n  12345 caf\xc3\xa9\xff x/y  ";
    /* gpt-2: ... "\r\n\n " " 12345" ...; llama-bpe: "\r\n\n" " " " " "123" "45" ...; digits one by one in qwen2/tekken */
    const int want_n[] = {12, 14, 17, 17};
    for (int k = PRETOK_GPT2; k <= PRETOK_TEKKEN; k++) {
        pretok *p = NULL;
        CHECK_EQ_INT(pretok_new(k, &p), KITE_OK);
        if (!p) continue;
        split_acc a = {0, 0, true};
        CHECK_EQ_INT(pretok_split(p, text, sizeof text - 1, split_cb, &a), KITE_OK);
        CHECK(a.ok && a.next == sizeof text - 1);
        printf("    %s: %d chunks\n", pretok_kind_name(k), a.n);
        CHECK_EQ_INT(a.n, want_n[k]);
        pretok_free(p);
    }
    CHECK_EQ_INT(pretok_new(99, NULL), KITE_E_ARG);
    CHECK_EQ_INT(pretok_kind_from_name("qwen", 4), -1);
}

/* ---- in-memory vocabulary: ranks, ties, unknown bytes, bad merges ----------------- */

TEST(mini_vocab) {
    /* characters: a b c, then merged pieces */
    static const char *texts[] = {"a", "b", "c", "ab", "bc", "abc", "<u>", "<|x|>"};
    gguf_str pieces[8];
    for (int i = 0; i < 8; i++) {
        pieces[i].ptr = texts[i];
        pieces[i].len = strlen(texts[i]);
    }
    static const char *mtexts[] = {"b c", "a b", "a bc", "ab c", "zz q"};
    gguf_str merges[5];
    for (int i = 0; i < 5; i++) {
        merges[i].ptr = mtexts[i];
        merges[i].len = strlen(mtexts[i]);
    }
    const int32_t types[] = {1, 1, 1, 1, 1, 1, 2, 3};
    vocab_spec s = vocab_spec_default();
    s.model = VOCAB_MODEL_BPE;
    s.n_tokens = 8;
    s.pieces = pieces;
    s.types = types;
    s.merges = merges;
    s.n_merges = 5;
    s.pre = PRETOK_GPT2;
    s.unk = 6;
    s.add_space_prefix = false;
    struct kite_model m;
    memset(&m, 0, sizeof m);
    CHECK_EQ_INT(vocab_build(&s, &m.vocab), KITE_OK);
    if (!m.vocab) return;
    CHECK_EQ_INT(m.vocab->n_merges, 4); /* "zz q" has no tokens */
    const int32_t abc[] = {5};           /* "b c" (rank 0) first, then "a bc" */
    expect_ids(&m, "abc", false, abc, 1, "abc");
    const int32_t abab[] = {3, 3};
    expect_ids(&m, "abab", false, abab, 2, "abab");
    const int32_t unk[] = {0, 6, 1}; /* 'x' has no token: unknown */
    expect_ids(&m, "axb", false, unk, 3, "unknown byte");
    vocab_free(m.vocab);
    /* no unknown token: an error, not a crash */
    s.unk = -1;
    CHECK_EQ_INT(vocab_build(&s, &m.vocab), KITE_OK);
    size_t n;
    kite_token out[8];
    CHECK_EQ_INT(kite_tokenize(&m, "x", 1, false, out, 8, &n), KITE_E_NOT_FOUND);
    vocab_free(m.vocab);
    /* a merge without a space */
    static const char bad_text[] = "abc";
    gguf_str bad = {.ptr = bad_text, .len = 3};
    s.merges = &bad;
    s.n_merges = 1;
    m.vocab = NULL;
    CHECK_EQ_INT(vocab_build(&s, &m.vocab), KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "tokenizer.ggml.merges[0]");
}

/* ---- speed ------------------------------------------------------------------------ */

TEST(load_and_encode_speed) {
    /* loading is measured on the first load() of each vocabulary */
    CHECK(load(&llama3));
    if (!llama3.m.vocab) return;
    printf("    load: gpt2 %.3f s, llama3 %.3f s, qwen3 %.3f s\n", gpt2.load_s, llama3.load_s, qwen3.load_s);
    unload(&llama3);
    CHECK(load(&llama3));
    if (!llama3.m.vocab) return;
    printf("    llama3 reload: %.3f s\n", llama3.load_s);
    CHECK(llama3.load_s < 4.0);
    size_t len = 100 * 1024;
    char *text = malloc(len);
    static const char para[] = "The quick brown fox jumps over the lazy dog. Привет, мир! 你好世界 🙂 12345\n";
    for (size_t i = 0; i < len; i++) text[i] = para[i % (sizeof para - 1)];
    while (len > 0 && ((uint8_t)text[len - 1] & 0xC0) == 0x80) len--;
    len--;
    loaded *all[] = {&gpt2, &llama3, &qwen3};
    for (int k = 0; k < 3; k++) {
        if (!load(all[k])) continue;
        double t0 = now_s();
        size_t n;
        kite_token *ids = tokenize(&all[k]->m, text, len, false, &n);
        double sec = now_s() - t0;
        printf("    %s 100 KB: %zu tokens in %.3f CPU s\n", all[k]->path, n, sec);
        CHECK(ids != NULL);
        CHECK(sec < 3.0);
        free(ids);
    }
    memset(text, 'a', len); /* one 100 KB chunk */
    double t0 = now_s();
    size_t n;
    kite_token *ids = tokenize(&llama3.m, text, len, false, &n);
    double sec = now_s() - t0;
    printf("    llama3 100 KB of 'a': %zu tokens in %.3f s\n", n, sec);
    CHECK(sec < 3.0);
    free(ids);
    free(text);
}

/* ---- fuzz corpus replay ------------------------------------------------------------- */

#include "fuzz/fuzz_tokenizer_bpe.c"

TEST(fuzz_corpus_replay) {
    CHECK(load(&qwen3) && load(&llama3) && load(&gpt2));
    if (!qwen3.m.vocab || !llama3.m.vocab || !gpt2.m.vocab) return;
    fuzz_bpe_use(&qwen3.m, &llama3.m, &gpt2.m);
    int n_files = replay_fuzz_corpus("tests/fuzz/corpus/fuzz_tokenizer_bpe", LLVMFuzzerTestOneInput);
    CHECK(n_files >= 5);
}

int main(void) {
    RUN(golden_gpt2);
    RUN(golden_llama3);
    RUN(golden_qwen3);
    RUN(llamacpp_gpt2);
    RUN(llamacpp_llama3);
    RUN(llamacpp_qwen2);
    RUN(vocab_facts_and_specials);
    RUN(edge_cases);
    RUN(nfc_qwen);
    RUN(byte_table);
    RUN(pretok_kinds);
    RUN(mini_vocab);
    RUN(load_and_encode_speed);
    RUN(fuzz_corpus_replay);
    unload(&gpt2);
    unload(&llama3);
    unload(&qwen3);
    return harness_summary(__FILE__);
}
