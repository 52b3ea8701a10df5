/*
 * tokenizer_golden.h - helpers shared by the tokenizer tests
 * (test_tokenizer.c for SentencePiece, test_tokenizer_bpe.c for byte-level
 * BPE) to check encoder output and piece round trips against golden data.
 *
 * Design: static inline functions, so each test includes its own copy and
 * unused ones cost nothing.  Results are malloc'd; the caller frees them.
 * Not thread-safe beyond what kite_tokenize/kite_token_to_piece are.
 */
#ifndef KITE_TEST_TOKENIZER_GOLDEN_H
#define KITE_TEST_TOKENIZER_GOLDEN_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kite.h"
#include "tokenizer/vocab_internal.h"

/* Tokenizes into a malloc'd array (grown on KITE_E_RANGE); NULL and *n = 0 on
 * error (the message is printed). */
static inline kite_token *tokenize(const kite_model *m, const char *text, size_t len, bool bos, size_t *n) {
    size_t cap = len + 8;
    kite_token *ids = malloc(cap * sizeof *ids);
    int rc = kite_tokenize(m, text, len, bos, ids, cap, n);
    if (rc == KITE_E_RANGE) {
        cap = *n;
        ids = realloc(ids, cap * sizeof *ids);
        rc = kite_tokenize(m, text, len, bos, ids, cap, n);
    }
    if (rc != KITE_OK) {
        printf("    tokenize failed: %s\n", kite_last_error());
        free(ids);
        *n = 0;
        return NULL;
    }
    return ids;
}

static inline bool ids_equal(const kite_token *a, size_t na, const int32_t *b, size_t nb) {
    if (na != nb) return false;
    for (size_t i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* Prints up to 64 ids after a label. */
static inline void print_ids(const char *label, const kite_token *a, size_t n) {
    printf("      %s:", label);
    for (size_t i = 0; i < n && i < 64; i++) printf(" %d", (int)a[i]);
    printf("\n");
}

static inline bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l;
        if (utf8_check((const uint8_t *)s + i, n - i, &l) != UTF8_OK) return false;
        i += l;
    }
    return true;
}

/* Concatenated token_to_piece of ids, NUL-appended, length in *len; with
 * strip_dummy the one leading space of SentencePiece's dummy prefix is
 * removed (byte-level BPE has none).  NULL if a piece cannot be decoded. */
static inline char *decode_pieces(const kite_model *m, const kite_token *ids, size_t n, bool strip_dummy,
                                  size_t *len) {
    size_t cap = 64, used = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const char *p;
        char buf[8];
        int l = kite_token_to_piece(m, ids[i], &p, buf);
        if (l < 0) {
            free(s);
            return NULL;
        }
        while (used + (size_t)l + 1 > cap) s = realloc(s, cap *= 2);
        memcpy(s + used, p, (size_t)l);
        used += (size_t)l;
    }
    s[used] = '\0';
    if (strip_dummy && used > 0 && s[0] == ' ') memmove(s, s + 1, used--);
    *len = used;
    return s;
}

/* Parses the space-separated decimal ids of line (a llama.cpp .out line)
 * into want[cap]; returns how many (those past cap are dropped). */
static inline size_t parse_ids(const char *line, int32_t *want, size_t cap) {
    size_t n_want = 0;
    for (const char *q = line; *q;) {
        char *e;
        long v = strtol(q, &e, 10);
        if (e == q) break;
        if (n_want < cap) want[n_want++] = (int32_t)v;
        q = e;
    }
    return n_want;
}

/* Feeds every file of the fuzz corpus dir to the fuzz target `one` (whose
 * invariants abort on a violation, which tests/run.sh reports as a crash);
 * checks that dir and each file can be read and returns the file count. */
static inline int replay_fuzz_corpus(const char *dir, int (*one)(const uint8_t *data, size_t size)) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) return 0;
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t size;
        char *buf = harness_read_file(path, &size);
        CHECK_MSG(buf != NULL, "cannot read %s", path);
        if (!buf) continue;
        one((const uint8_t *)buf, size);
        free(buf);
        n_files++;
    }
    closedir(d);
    return n_files;
}

#endif
