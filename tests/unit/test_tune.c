/*
 * test_tune.c - the matmul variant table (src/kernels/tune.h): shape
 * classes, variant names, table parsing (valid and malformed), the
 * run-time lookup of a table read from $KITE_TUNE_FILE (tools/config, as the
 * CLI reads it) and passed in kern_config, and the invariant that makes
 * tuning safe: every variant gives bit-identical results.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/threadpool.h"
#include "harness.h"
#define KERNEL_TEST_SEED 0x74756e65ull
#include "kernel_helpers.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/tune.h"
#include "tensor/dtype.h"

/* Runs parse with stderr captured into err (cap bytes). */
static int parse_capture(kern_tune_table *t, const char *text, const char *src, char *err, size_t cap) {
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2), rc;
    if (!tmp || saved < 0) return -99;
    dup2(fileno(tmp), 2);
    rc = kern_tune_table_parse(t, text, src);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, cap - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return rc;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(test_classes) {
    CHECK_EQ_INT(kern_tune_pow2_class(1), 0);
    CHECK_EQ_INT(kern_tune_pow2_class(2), 1);
    CHECK_EQ_INT(kern_tune_pow2_class(3), 2);
    CHECK_EQ_INT(kern_tune_pow2_class(2048), 11);
    CHECK_EQ_INT(kern_tune_pow2_class(2049), 12);
    CHECK_EQ_INT(kern_tune_pow2_class(5632), 13);
    static const int64_t n[] = {1, 2, 4, 5, 8, 9, 16, 17, 64, 65, 100000};
    static const int cls[] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
    for (int i = 0; i < 11; i++) CHECK_EQ_INT(kern_tune_ntok_class(n[i]), cls[i]);
    for (int c = 0; c < KERN_TUNE_N_NTOK; c++) CHECK_EQ_INT(kern_tune_ntok_class(kern_tune_ntok_rep(c)), c);
    CHECK_STR_EQ(kern_tune_ntok_label(4), "17-64");
    CHECK_EQ_INT(kern_tune_thr_class(1), 0);
    CHECK_EQ_INT(kern_tune_thr_class(2), 1);
    CHECK_EQ_INT(kern_tune_thr_class(3), 2);
    CHECK_EQ_INT(kern_tune_thr_class(16), 4);
    CHECK_EQ_INT(kern_tune_thr_class(1000), 7);
    /* same class, same key; any field in another class, another key */
    const uint32_t k = kern_tune_key(KITE_DTYPE_Q4_0, 2048, 2048, 32, 2);
    CHECK(k == kern_tune_key(KITE_DTYPE_Q4_0, 1025, 2000, 17, 2));
    CHECK(k != kern_tune_key(KITE_DTYPE_Q8_0, 2048, 2048, 32, 2));
    CHECK(k != kern_tune_key(KITE_DTYPE_Q4_0, 2049, 2048, 32, 2));
    CHECK(k != kern_tune_key(KITE_DTYPE_Q4_0, 2048, 4096, 32, 2));
    CHECK(k != kern_tune_key(KITE_DTYPE_Q4_0, 2048, 2048, 65, 2));
    CHECK(k != kern_tune_key(KITE_DTYPE_Q4_0, 2048, 2048, 32, 4));
    CHECK(kern_tune_key(KITE_DTYPE_W8A8, 8, 8, 1, 1) != kern_tune_key(KITE_DTYPE_F32, 8, 8, 1, 1));
}

TEST(test_variant_names) {
    int n_sel = 0;
    for (int id = 0; id < KERN_TUNE_N_VARIANTS; id++) {
        kern_tune_choice c;
        const char *name = kern_tune_variant_name(id);
        CHECK(strcmp(name, "?") != 0);
        if (!strcmp(name, "unused")) continue; /* slots kern_tune_variant_id never returns */
        if (!kern_tune_choice_parse(name, &c)) continue; /* generic, x16 and odd tiled ids are not selectable */
        n_sel++;
        CHECK_STR_EQ(kern_tune_choice_name(&c), name);
        CHECK_EQ_INT(kern_tune_variant_id(c.regime, c.tile, c.threads), id);
    }
    CHECK_EQ_INT(n_sel, KERN_TUNE_N_TILES * KERN_TUNE_N_THR + KERN_TUNE_N_THR); /* flat x tiles x thr + tiled x thr */
    kern_tune_choice c;
    CHECK(kern_tune_choice_parse("default", &c) && c.regime == KERN_TUNE_DEFAULT);
    CHECK_STR_EQ(kern_tune_choice_name(kern_tune_default()), "default");
    CHECK(!kern_tune_choice_parse("flat-32K-auto", &c));
    CHECK(!kern_tune_choice_parse("generic-auto", &c));
    CHECK(!kern_tune_choice_parse("", &c));
    CHECK_STR_EQ(kern_tune_variant_name(kern_tune_variant_id(KERN_TUNE_FLAT, 0, KERN_TUNE_THR_ONE)), "flat-16K-1t");
    CHECK_STR_EQ(kern_tune_variant_name(kern_tune_variant_id(KERN_TUNE_TILED, 2, KERN_TUNE_THR_ALL)), "tiled-all");
    CHECK_EQ_INT((int)kern_tune_tile_bytes(KERN_TUNE_TILE_DEFAULT), 64 << 10); /* matmul.c's MM_TILE_BYTES */
}

TEST(test_parse_valid) {
    static const char text[] = "# a comment\n"
                               "\n"
                               "kite-tune 1\n"
                               "level avx2\n"
                               "q4_0 2048 2048 17-64 2 tiled-auto\n"
                               "q4_0 2048 2048 1 2 flat-64K-1t\r\n"
                               "  f32\t64\t64\t100\t3\tflat-16K-all  \n"
                               "q4_0 2000 1500 40 2 default\n" /* same class as line 5: replaces it */
                               "option decode-prefetch on\n"
                               "option f16-widen on\n"
                               "option f16-widen off\n" /* a later line replaces an earlier one */
                               "q8_0 4096 4096 9-16 17-32 flat-256K-auto"; /* no final newline */
    kern_tune_table *t = malloc(sizeof *t);
    char err[4096];
    kern_tune_table_init(t);
    CHECK_EQ_INT(parse_capture(t, text, "good.txt", err, sizeof err), 0);
    CHECK_STR_EQ(err, "");
    CHECK_EQ_INT(t->level, KERN_LEVEL_AVX2);
    CHECK_EQ_INT(t->n, 4);
    CHECK_EQ_INT(t->opt[KERN_OPT_DECODE_PREFETCH], 1);
    CHECK_EQ_INT(t->opt[KERN_OPT_F16_WIDEN], 0);
    CHECK_EQ_INT(t->opt[KERN_OPT_BF16_FMA], -1);
    const kern_tune_choice *c = kern_tune_table_find(t, kern_tune_key(KITE_DTYPE_Q4_0, 2048, 2048, 20, 2));
    CHECK(c && c->regime == KERN_TUNE_DEFAULT && c->tuned);
    c = kern_tune_table_find(t, kern_tune_key(KITE_DTYPE_Q4_0, 2048, 2048, 1, 2));
    CHECK(c && c->regime == KERN_TUNE_FLAT && c->tile == KERN_TUNE_TILE_DEFAULT && c->threads == KERN_TUNE_THR_ONE);
    c = kern_tune_table_find(t, kern_tune_key(KITE_DTYPE_F32, 33, 64, 128, 4));
    CHECK(c && c->regime == KERN_TUNE_FLAT && c->tile == 0 && c->threads == KERN_TUNE_THR_ALL);
    c = kern_tune_table_find(t, kern_tune_key(KITE_DTYPE_Q8_0, 4096, 4096, 16, 32));
    CHECK(c && c->tile == 2 && c->threads == KERN_TUNE_THR_AUTO);
    CHECK(kern_tune_table_find(t, kern_tune_key(KITE_DTYPE_Q4_0, 2048, 2048, 1, 1)) == NULL);
    /* formatting the entries and parsing them back gives the same table */
    char out[4096] = "kite-tune 1\nlevel avx2\n", line[256];
    for (int i = 0; i < t->n; i++) {
        CHECK(kern_tune_table_line(t, i, line, sizeof line));
        strcat(out, line);
        strcat(out, "\n");
    }
    kern_tune_table *t2 = malloc(sizeof *t2);
    kern_tune_table_init(t2);
    CHECK_EQ_INT(parse_capture(t2, out, "round.txt", err, sizeof err), 0);
    CHECK_EQ_INT(t2->n, t->n);
    CHECK(memcmp(t2->e, t->e, sizeof t->e[0] * (size_t)t->n) == 0);
    free(t2);
    free(t);
}

TEST(test_parse_malformed) {
    static const char text[] = "kite-tune 1\n"                        /* 1 */
                               "level avx2\n"                         /* 2 */
                               "q4_0 2048 2048 1 2\n"                 /* 3: too few fields */
                               "q9_9 2048 2048 1 2 default\n"         /* 4: unknown type */
                               "q4_0 0 2048 1 2 default\n"            /* 5: rows 0 */
                               "q4_0 2048 -5 1 2 default\n"           /* 6: k negative */
                               "q4_0 2048 2048 3-7 2 default\n"       /* 7: n_tok label */
                               "q4_0 2048 2048 1 two default\n"       /* 8: threads */
                               "q4_0 2048 2048 1 2 turbo\n"           /* 9: variant */
                               "q4_0 2048 2048 1 2 default extra\n"   /* 10: too many */
                               "level avx9000\n"                      /* 11: level */
                               "f32 64 64 1 1 flat-64K-all\n"         /* 12: fine */
                               "option warp-drive on\n"               /* 13: unknown option */
                               "option bf16-fma yes\n"                /* 14: value */
                               "option bf16-fma\n";                   /* 15: too few fields */
    kern_tune_table *t = malloc(sizeof *t);
    char err[8192];
    kern_tune_table_init(t);
    CHECK_EQ_INT(parse_capture(t, text, "bad.txt", err, sizeof err), 12);
    CHECK_EQ_INT(t->n, 1);
    CHECK_EQ_INT(t->level, KERN_LEVEL_AVX2);
    CHECK_EQ_INT(t->opt[KERN_OPT_BF16_FMA], -1);
    CHECK_EQ_INT(count_lines(err), 11); /* one line per malformed line for 10 of them, then a count */
    for (int l = 3; l <= 14; l++) {
        char needle[32];
        snprintf(needle, sizeof needle, "bad.txt:%d: ", l);
        if (l != 12 && l != 14) CHECK_CONTAINS(err, needle); /* 12 is fine; 14 is the 11th bad line */
    }
    CHECK_CONTAINS(err, "'q9_9'");
    CHECK_CONTAINS(err, "'turbo'");
    CHECK_CONTAINS(err, "'warp-drive'");
    CHECK_CONTAINS(err, "bad.txt: 2 more malformed lines ignored");
    free(t);
}

TEST(test_parse_bad_header) {
    kern_tune_table *t = malloc(sizeof *t);
    char err[2048];
    kern_tune_table_init(t);
    CHECK_EQ_INT(parse_capture(t, "kite-tune 2\nlevel avx2\nf32 64 64 1 1 default\n", "v2.txt", err, sizeof err), -1);
    CHECK_EQ_INT(t->n, 0);
    CHECK_CONTAINS(err, "v2.txt:1: not a kite tune table");
    CHECK_EQ_INT(count_lines(err), 1);
    CHECK_EQ_INT(parse_capture(t, "", "empty.txt", err, sizeof err), -1);
    CHECK_CONTAINS(err, "empty.txt: empty");
    CHECK_EQ_INT(parse_capture(t, "\x01\x02garbage\xff\n", "bin.txt", err, sizeof err), -1);
    /* a very long line and many bad lines: bounded report, no crash */
    char *big = malloc(64 << 10);
    strcpy(big, "kite-tune 1\nlevel scalar\n");
    size_t n = strlen(big);
    for (int i = 0; i < 300; i++) n += (size_t)sprintf(big + n, "f32 %d\n", i);
    memset(big + n, 'x', 1000);
    n += 1000;
    big[n] = '\0';
    CHECK_EQ_INT(parse_capture(t, big, "many.txt", err, sizeof err), 301);
    CHECK_EQ_INT(count_lines(err), 11);
    CHECK_CONTAINS(err, "many.txt: 291 more malformed lines ignored");
    free(big);
    free(t);
}

/* The run-time table: read from $KITE_TUNE_FILE by config_read (the CLI's
 * path), handed to kern_configure, applied only at its level, defaults
 * elsewhere. */
TEST(test_runtime_lookup) {
    static config cfg; /* kern_config.tune borrows its table */
    const kern_ops_table *kt = kern_table();
    char path[] = "/tmp/kite-test-tune-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fprintf(f, "kite-tune 1\nlevel %s\nf32 300 256 1 2 flat-16K-1t\nf32 300 256 40 2 tiled-all\nbogus line\n"
               "option decode-prefetch off\noption f16-widen on\n", kt->name);
    fclose(f);
    setenv("KITE_TUNE", "on", 1);
    setenv("KITE_TUNE_FILE", path, 1);
    static const char *const others[] = {"KITE_CPU_LEVEL", "KITE_DECODE_PREFETCH", "KITE_F16_WIDEN", "KITE_BF16_FMA",
                                         "KITE_INT8_THRESHOLD", "KITE_WORK_SHARING"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) unsetenv(others[i]);
    fflush(stderr);
    FILE *tmp = tmpfile();
    const int saved = dup(2);
    dup2(fileno(tmp), 2);
    config_read(&cfg); /* loads */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char err[1024];
    rewind(tmp);
    err[fread(err, 1, sizeof err - 1, tmp)] = '\0';
    fclose(tmp);
    CHECK(kern_configure(&cfg.kern));
    CHECK_EQ_INT(cfg.tune_state, 1);
    CHECK_EQ_INT(cfg.tune.n, 2);
    CHECK_EQ_INT(cfg.tune.level, (int)kt->level);
    CHECK_STR_EQ(cfg.tune_path, path);
    CHECK(kern_config_get()->tune == &cfg.tune);
    CHECK_EQ_INT(count_lines(err), 1);
    CHECK_CONTAINS(err, ":5: too few fields");
    /* options: the table's lines, else the vendor default; the environment would win (test_config, e2e) */
    CHECK_EQ_INT(cfg.tune.opt[KERN_OPT_DECODE_PREFETCH], 0);
    CHECK_EQ_INT(cfg.tune.opt[KERN_OPT_F16_WIDEN], 1);
    CHECK_EQ_INT(cfg.tune.opt[KERN_OPT_BF16_FMA], -1);
    CHECK(!kern_opt_on(KERN_OPT_DECODE_PREFETCH));
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_DECODE_PREFETCH), KERN_OPT_FROM_TUNE);
    CHECK(kern_opt_on(KERN_OPT_F16_WIDEN));
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_F16_WIDEN), KERN_OPT_FROM_TUNE);
    CHECK_EQ_INT(kern_opt_on(KERN_OPT_BF16_FMA), kern_opt_cpu_default(KERN_OPT_BF16_FMA));
    CHECK_EQ_INT(kern_opt_source_of(KERN_OPT_BF16_FMA), KERN_OPT_FROM_CPU);
    for (int o = 0; o < KERN_OPT_COUNT; o++) { /* back to the defaults for the tests below */
        kern_opt_set((kern_opt)o, kern_opt_cpu_default((kern_opt)o));
        CHECK_EQ_INT(kern_opt_source_of((kern_opt)o), KERN_OPT_FROM_SET);
        CHECK_EQ_INT(kern_opt_from_name(kern_opt_name((kern_opt)o)), o);
    }
    CHECK_EQ_INT(kern_opt_from_name("warp-drive"), -1);
    const kern_tune_choice *c = kern_tune_pick(kern_config_get()->tune, kt->level, KITE_DTYPE_F32, 300, 256, 1, 2);
    CHECK(c->tuned && c->regime == KERN_TUNE_FLAT && c->tile == 0 && c->threads == KERN_TUNE_THR_ONE);
    c = kern_tune_pick(kern_config_get()->tune, kt->level, KITE_DTYPE_F32, 257, 200, 64, 2);
    CHECK(c->tuned && c->regime == KERN_TUNE_TILED && c->threads == KERN_TUNE_THR_ALL);
    CHECK(kern_tune_pick(kern_config_get()->tune, kt->level, KITE_DTYPE_F32, 300, 256, 1, 1) == kern_tune_default()); /* other thread class */
    CHECK(kern_tune_pick(kern_config_get()->tune, kt->level, KITE_DTYPE_F16, 300, 256, 1, 2) == kern_tune_default());
    if (kt->level != KERN_LEVEL_SCALAR)
        CHECK(kern_tune_pick(kern_config_get()->tune, KERN_LEVEL_SCALAR, KITE_DTYPE_F32, 300, 256, 1, 2) == kern_tune_default());
    /* the counters see a tuned call through kern_matmul */
    threadpool *tp = tp_new(2);
    float *w = calloc(300 * 256, sizeof(float)), *x = calloc(256, sizeof(float)), *y = calloc(300, sizeof(float));
    const size_t sb = (kern_matmul_scratch_bytes(2, 1, 256) + 63) & ~(size_t)63;
    void *scratch = aligned_alloc(64, sb);
    weight wt = {.type = KITE_DTYPE_F32, .ne = {256, 300}, .row_bytes = 256 * sizeof(float), .data = w};
    uint64_t c0[2][KERN_TUNE_N_VARIANTS], c1[2][KERN_TUNE_N_VARIANTS];
    kern_tune_counts(c0);
    kern_matmul(tp, &wt, x, 1, y, 300, scratch);
    kern_tune_counts(c1);
    const int id = kern_tune_variant_id(KERN_TUNE_FLAT, 0, KERN_TUNE_THR_ONE);
    CHECK(c1[1][id] == c0[1][id] + 1);
    tp_free(tp);
    free(w);
    free(x);
    free(y);
    free(scratch);
    unlink(path);
}

/* Every selectable variant (and the default) returns the same bits, for
 * decode and prefill batch sizes, on 1 and 3 threads, at the active level
 * (all six types) and the scalar level (f32, q4_0). */
TEST(test_variants_bit_identical) {
    static const uint32_t types[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16, KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0,
                                     KITE_DTYPE_Q4_K};
    static const int64_t ntoks[] = {1, 5, 17, 33};
    const int64_t nr = 200, max_tok = 33; /* 200 rows: several 16K tiles per thread for every type */
    kern_tune_choice cand[KERN_TUNE_N_VARIANTS + 1];
    int n_cand = 0;
    cand[n_cand++] = *kern_tune_default();
    for (int id = 0; id < KERN_TUNE_N_VARIANTS; id++)
        if (kern_tune_choice_parse(kern_tune_variant_name(id), &cand[n_cand])) n_cand++;
    threadpool *tp[2] = {tp_new(1), tp_new(3)};
    const kern_level levels[2] = {kern_table()->level, KERN_LEVEL_SCALAR};
    int n_checked = 0;
    for (int li = 0; li < 2; li++) {
        if (li == 1 && levels[1] == levels[0]) break;
        const kern_ops_table *kt = kern_table_for_level(levels[li]);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const uint32_t t = types[ti];
            if (li == 1 && t != KITE_DTYPE_F32 && t != KITE_DTYPE_Q4_0) continue; /* scalar: slow, no tiled kernels */
            const int64_t k = 256;
            const size_t rb = dtype_row_size(t, k);
            char *wd = malloc(rb * (size_t)nr);
            float *row = malloc(sizeof(float) * (size_t)k), *x = malloc(sizeof(float) * (size_t)(max_tok * k));
            float *y0 = malloc(sizeof(float) * (size_t)(max_tok * nr)), *y1 = malloc(sizeof(float) * (size_t)(max_tok * nr));
            const size_t sb = (kern_matmul_scratch_bytes(3, max_tok, k) + 63) & ~(size_t)63;
            void *scratch = aligned_alloc(64, sb);
            for (int64_t r = 0; r < nr; r++) {
                for (int64_t j = 0; j < k; j++) row[j] = frand();
                dtype_get(t)->from_float(row, wd + rb * (size_t)r, k);
            }
            for (int64_t j = 0; j < max_tok * k; j++) x[j] = frand() * 3.0f;
            weight w = {.type = t, .ne = {k, nr}, .row_bytes = rb, .data = wd};
            for (int in = 0; in < 4; in++) {
                const int64_t nt = ntoks[in];
                const size_t bytes = sizeof(float) * (size_t)(nt * nr);
                kern_matmul_variant(kt, tp[0], &w, x, nt, y0, nr, scratch, &cand[0]);
                for (int ci = 0; ci < n_cand; ci++)
                    for (int p = 0; p < 2; p++) {
                        memset(y1, 0xff, bytes);
                        kern_matmul_variant(kt, tp[p], &w, x, nt, y1, nr, scratch, &cand[ci]);
                        CHECK_MSG(memcmp(y0, y1, bytes) == 0, "%s %s n_tok=%lld %s on %d threads differs from default",
                                  kt->name, dtype_name(t), (long long)nt, kern_tune_choice_name(&cand[ci]), p ? 3 : 1);
                        n_checked++;
                    }
            }
            free(wd);
            free(row);
            free(x);
            free(y0);
            free(y1);
            free(scratch);
        }
    }
    printf("    %d (level, type, n_tok, variant, threads) runs equal the default bit for bit\n", n_checked);
    tp_free(tp[0]);
    tp_free(tp[1]);
}

int main(void) {
    RUN(test_classes);
    RUN(test_variant_names);
    RUN(test_parse_valid);
    RUN(test_parse_malformed);
    RUN(test_parse_bad_header);
    RUN(test_runtime_lookup);
    RUN(test_variants_bit_identical);
    return harness_summary(__FILE__);
}
