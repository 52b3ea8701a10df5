/*
 * test_threadpool.c - the persistent thread pool (src/core/threadpool.c).
 *
 *   - every ith of every task runs exactly once, over 100k tiny tasks, for
 *     pools of 1, 2, 3 and 8 threads (8 > cores: workers get preempted);
 *   - tp_run_n runs parts 0..nth-1 only and leaves the other threads idle;
 *   - the sleep/wake path: pauses longer than the spin window between tasks;
 *   - tp_free on an idle pool (fresh, just used, asleep);
 *   - tp_threads_for's small-op policy and tp_split's ranges.
 *
 * `test_threadpool --bench` instead prints the figures TP_MIN_WORK_PER_THREAD
 * was chosen from: the round trip of an empty task on a hot pool, and the
 * cost of one scalar multiply-add.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "core/threadpool.h"
#include "harness.h"

#define MAX_T 8

typedef struct count_task {
    long runs[MAX_T];      /* per ith, written only by thread ith */
    int nth_seen[MAX_T];   /* nth each part was given */
    atomic_long total;     /* parts run, all threads */
} count_task;

static void count_part(void *arg, int ith, int nth) {
    count_task *c = arg;
    c->runs[ith]++;
    c->nth_seen[ith] = nth;
    atomic_fetch_add_explicit(&c->total, 1, memory_order_relaxed);
}

static void check_counts(int n_threads, int n_tasks) {
    threadpool *tp = tp_new(n_threads);
    CHECK(tp != NULL);
    if (!tp) return;
    CHECK_EQ_INT(tp_n_threads(tp), n_threads);
    count_task c = {{0}, {0}, 0};
    for (int i = 0; i < n_tasks; i++) tp_run(tp, count_part, &c);
    for (int i = 0; i < n_threads; i++) {
        CHECK_EQ_INT(c.runs[i], n_tasks);
        CHECK_EQ_INT(c.nth_seen[i], n_threads);
    }
    CHECK_EQ_INT(atomic_load(&c.total), (long)n_tasks * n_threads);
    tp_free(tp);
}

TEST(test_every_part_once_1) { check_counts(1, 100000); }
TEST(test_every_part_once_2) { check_counts(2, 100000); }
TEST(test_every_part_once_3) { check_counts(3, 100000); }
/* 8 threads on 2 cores: preemption mid-spin; fewer tasks to stay fast */
TEST(test_every_part_once_8) { check_counts(8, 20000); }

/* tp_run_n with a varying nth: parts ith < nth run once per task, others never. */
TEST(test_run_n_subsets) {
    threadpool *tp = tp_new(3);
    CHECK(tp != NULL);
    if (!tp) return;
    count_task c = {{0}, {0}, 0};
    long expect[MAX_T] = {0};
    long expect_total = 0;
    for (int i = 0; i < 30000; i++) {
        const int nth = i % 5; /* 0 and 1 run on the caller; 4 is clamped to 3 */
        tp_run_n(tp, count_part, &c, nth);
        const int eff = nth < 1 ? 1 : nth > 3 ? 3 : nth;
        for (int k = 0; k < eff; k++) expect[k]++;
        expect_total += eff;
        if (c.nth_seen[0] != eff) {
            CHECK_EQ_INT(c.nth_seen[0], eff);
            break;
        }
    }
    for (int k = 0; k < 3; k++) CHECK_EQ_INT(c.runs[k], expect[k]);
    CHECK_EQ_INT(atomic_load(&c.total), expect_total);
    tp_free(tp);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Pauses of 3 ms (well past the spin window) between tasks: workers and the
 * owner go to sleep and must be woken every time; also a slow part 0 so the
 * owner finishes last, and a slow worker so the owner sleeps waiting. */
typedef struct slow_task {
    int slow_ith;
    long runs[MAX_T];
} slow_task;

static void slow_part(void *arg, int ith, int nth) {
    (void)nth;
    slow_task *s = arg;
    if (ith == s->slow_ith) sleep_us(3000);
    s->runs[ith]++;
}

TEST(test_sleep_wake) {
    threadpool *tp = tp_new(3);
    CHECK(tp != NULL);
    if (!tp) return;
    slow_task s = {.slow_ith = -1};
    const int n = 40;
    for (int i = 0; i < n; i++) {
        sleep_us(3000);            /* workers fall asleep */
        s.slow_ith = i % 4 - 1;    /* none, owner, worker 1, worker 2 */
        tp_run(tp, slow_part, &s); /* a slow worker makes the owner sleep */
    }
    for (int k = 0; k < 3; k++) CHECK_EQ_INT(s.runs[k], n);
    tp_free(tp);
}

TEST(test_free_idle) {
    tp_free(NULL);
    for (int n = 1; n <= 4; n++) {
        threadpool *tp = tp_new(n); /* freed before any worker ran anything */
        CHECK(tp != NULL);
        tp_free(tp);
    }
    threadpool *tp = tp_new(2);
    CHECK(tp != NULL);
    if (!tp) return;
    count_task c = {{0}, {0}, 0};
    tp_run(tp, count_part, &c);
    sleep_us(20000); /* worker asleep in cond_wait */
    tp_free(tp);
    CHECK_EQ_INT(atomic_load(&c.total), 2);
    tp = tp_new(2);
    CHECK(tp != NULL);
    if (!tp) return;
    tp_run(tp, count_part, &c);
    tp_free(tp); /* worker still spinning */
    CHECK_EQ_INT(atomic_load(&c.total), 4);
}

TEST(test_threads_for_policy) {
    threadpool *tp = tp_new(4);
    CHECK(tp != NULL);
    if (!tp) return;
    const double u = TP_MIN_WORK_PER_THREAD;
    CHECK_EQ_INT(tp_threads_for(tp, 0), 1);
    CHECK_EQ_INT(tp_threads_for(tp, u), 1);
    CHECK_EQ_INT(tp_threads_for(tp, 2 * u - 1), 1);
    CHECK_EQ_INT(tp_threads_for(tp, 2 * u), 2);
    CHECK_EQ_INT(tp_threads_for(tp, 3.5 * u), 3);
    CHECK_EQ_INT(tp_threads_for(tp, 1e12), 4);
    CHECK_EQ_INT(tp_threads_for(tp, -5), 1);
    tp_free(tp);
    tp = tp_new(1);
    CHECK_EQ_INT(tp_threads_for(tp, 1e12), 1);
    tp_free(tp);
}

TEST(test_split) {
    for (long n = 0; n < 50; n++)
        for (int nth = 1; nth <= 8; nth++) {
            long next = 0;
            for (int i = 0; i < nth; i++) {
                long lo, hi;
                tp_split(n, i, nth, &lo, &hi);
                CHECK_EQ_INT(lo, next);
                CHECK(hi - lo == n / nth || hi - lo == n / nth + 1);
                next = hi;
            }
            CHECK_EQ_INT(next, n);
        }
}

/* ---- --bench ------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void empty_part(void *arg, int ith, int nth) {
    (void)arg;
    (void)ith;
    (void)nth;
}

static float bench_x[4096], bench_y[4096];
static volatile float bench_sink;

static int bench(void) {
    for (int n = 2; n <= 3; n++) {
        threadpool *tp = tp_new(n);
        if (!tp) return 1;
        const int iters = 50000;
        for (int i = 0; i < 1000; i++) tp_run(tp, empty_part, NULL);
        double best = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            const double t0 = now_s();
            for (int i = 0; i < iters; i++) tp_run(tp, empty_part, NULL);
            const double dt = (now_s() - t0) / iters;
            if (dt < best) best = dt;
        }
        printf("hot tp_run round trip, %d threads: %.3f us (best of 5 x %d)\n", n, best * 1e6, iters);
        tp_free(tp);
    }
    for (int i = 0; i < 4096; i++) bench_x[i] = bench_y[i] = 1e-3f * (float)(i % 7);
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_s();
        for (int r = 0; r < 2000; r++) {
            float acc[8] = {0};
            for (int i = 0; i < 4096; i += 8)
                for (int j = 0; j < 8; j++) acc[j] += bench_x[i + j] * bench_y[i + j];
            bench_sink = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
        }
        const double dt = (now_s() - t0) / (2000.0 * 4096);
        if (dt < best) best = dt;
    }
    printf("scalar-reference multiply-add (8 partial sums, in L1): %.3f ns\n", best * 1e9);
    printf("TP_MIN_WORK_PER_THREAD = %.0f units\n", (double)TP_MIN_WORK_PER_THREAD);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench();
    RUN(test_every_part_once_1);
    RUN(test_every_part_once_2);
    RUN(test_every_part_once_3);
    RUN(test_every_part_once_8);
    RUN(test_run_n_subsets);
    RUN(test_sleep_wake);
    RUN(test_free_idle);
    RUN(test_threads_for_policy);
    RUN(test_split);
    return harness_summary(__FILE__);
}
