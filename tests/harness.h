/*
 * harness.h - a tiny unit-test harness (one header, no dependencies).
 *
 * A test file defines static void functions with TEST(name), and a main()
 * that lists them with RUN(name) and returns harness_summary("file").
 * Checks print both operands on failure and let the test go on; a test with
 * any failed check counts as failed.  A test that cannot run on this machine
 * (a missing CPU feature) calls SKIP_TEST("why") and returns: it is reported
 * as skipped and counted neither as passed nor as failed.  Tests run from the
 * repository root, so
 * data lives at "tests/data/...", "models/..." (see tests/run.sh).
 */
#ifndef KITE_TEST_HARNESS_H
#define KITE_TEST_HARNESS_H

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_failed_checks;
static int harness_tests_passed;
static int harness_tests_failed;
static int harness_tests_skipped;
static int harness_skip_now; /* set by SKIP_TEST in the running test */

/* Inside a TEST: report why it cannot run here and leave the test. */
#define SKIP_TEST(...)                                                          \
    do {                                                                        \
        printf("    SKIP: ");                                                   \
        printf(__VA_ARGS__);                                                    \
        printf("\n");                                                           \
        harness_skip_now = 1;                                                   \
        return;                                                                 \
    } while (0)

#define TEST(name) static void name(void)

#define RUN(name)                                                               \
    do {                                                                        \
        int before_ = harness_failed_checks;                                    \
        harness_skip_now = 0;                                                   \
        name();                                                                 \
        if (harness_failed_checks == before_ && harness_skip_now) {             \
            harness_tests_skipped++;                                            \
            printf("  skip  %s\n", #name);                                      \
        } else if (harness_failed_checks == before_) {                          \
            harness_tests_passed++;                                             \
            printf("  ok    %s\n", #name);                                      \
        } else {                                                                \
            harness_tests_failed++;                                             \
            printf("  FAIL  %s\n", #name);                                      \
        }                                                                       \
        fflush(stdout);                                                         \
    } while (0)

#define FAIL_AT_(...)                                                           \
    do {                                                                        \
        harness_failed_checks++;                                                \
        printf("    %s:%d: ", __FILE__, __LINE__);                              \
        printf(__VA_ARGS__);                                                    \
        printf("\n");                                                           \
    } while (0)

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) FAIL_AT_("CHECK(%s) failed", #cond);                       \
    } while (0)

#define CHECK_MSG(cond, ...)                                                    \
    do {                                                                        \
        if (!(cond)) FAIL_AT_(__VA_ARGS__);                                     \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                      \
    do {                                                                        \
        long long a_ = (long long)(a), b_ = (long long)(b);                     \
        if (a_ != b_) FAIL_AT_("%s == %s: %lld != %lld", #a, #b, a_, b_);       \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                   \
    do {                                                                        \
        double a_ = (double)(a), b_ = (double)(b);                              \
        if (!(fabs(a_ - b_) <= (tol)))                                          \
            FAIL_AT_("|%s - %s| <= %g: %.9g vs %.9g", #a, #b, (double)(tol), a_, b_); \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                      \
    do {                                                                        \
        const char *a_ = (a), *b_ = (b);                                        \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                  \
            FAIL_AT_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",  \
                     b_ ? b_ : "(null)");                                       \
    } while (0)

/* Substring check, for error messages. */
#define CHECK_CONTAINS(hay, needle)                                             \
    do {                                                                        \
        const char *h_ = (hay), *n_ = (needle);                                 \
        if (!h_ || !strstr(h_, n_))                                             \
            FAIL_AT_("\"%s\" contains \"%s\"", h_ ? h_ : "(null)", n_);         \
    } while (0)

static inline int harness_summary(const char *file) {
    if (harness_tests_skipped) printf("%s: %d skipped (not counted)\n", file, harness_tests_skipped);
    printf("%s: %d passed, %d failed\n", file, harness_tests_passed, harness_tests_failed);
    return harness_tests_failed ? 1 : 0;
}

/* Reads a whole file into a malloc'd buffer (NUL-appended). NULL on error. */
static inline char *harness_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (size) *size = (size_t)n;
    }
    return buf;
}

/* Runs fn on every file of dir (a fuzz corpus: fn aborts on a broken
 * invariant); returns the number of files run, -1 if dir cannot be opened.
 */
static inline int harness_replay_dir(const char *dir, int (*fn)(const uint8_t *, size_t)) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        char *img = harness_read_file(path, &n);
        if (!img) continue;
        n_files++;
        fn((const uint8_t *)img, n);
        free(img);
    }
    closedir(d);
    return n_files;
}

#endif
