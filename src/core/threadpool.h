/*
 * threadpool.h - persistent worker threads for data-parallel ops.
 *
 * DESIGN
 *   tp_new(n) starts n-1 workers; the calling thread is worker 0.  tp_run()
 *   publishes one task (function + argument), runs it as ith = 0 itself and
 *   returns when all n threads have finished it.  Each op partitions its own
 *   work statically from (ith, nth), so there is no per-op allocation and no
 *   work queue.  Workers wait for a task by spinning for a short while (ops
 *   of one forward pass follow each other within microseconds), then sleep on
 *   a condition variable so an idle pool costs no CPU.  The caller waits for
 *   completion the same way.
 *
 *   Small-op policy: a pool must never cost more than it gains.  An op asks
 *   tp_threads_for(tp, work) how many threads its work justifies and runs on
 *   that many with tp_run_n(); below TP_MIN_WORK_PER_THREAD work units per
 *   thread it runs on the calling thread alone (no atomics, no wake-up), and
 *   the workers are not woken at all.  Results must not depend on nth (kite's
 *   kernels fix their summation order independently of the thread count), so
 *   the policy changes speed only.
 *
 * THREAD SAFETY
 *   One thread (the owner) calls tp_run / tp_run_n at a time; tasks must not
 *   call them.
 */
#ifndef KITE_CORE_THREADPOOL_H
#define KITE_CORE_THREADPOOL_H

typedef struct threadpool threadpool;

/* Runs part ith of nth of a task. */
typedef void (*tp_task_fn)(void *arg, int ith, int nth);

/* Work units: one unit is one float multiply-add of a scalar reference
 * kernel (a matmul of n_tok x K by N is n_tok*K*N units; attention is about
 * 2*head_dim units per (query, key, head)).  Splitting an op over one more
 * thread pays only above this many units per thread.  Chosen with
 * `build/tests/test_threadpool --bench` (tests/unit/test_threadpool.c) on the
 * 2-core development VM (AMD EPYC, gcc 12 -O2, load ~3 from other jobs): a
 * hot 2-thread tp_run round trip took 2.7 us and a scalar multiply-add
 * 0.42 ns, so a second thread starts to pay at about 2 * 2.7 us / 0.42 ns =
 * 13k units.  The threshold is set 2.5x above that (an op goes to 2 threads
 * from 65k units) because a worker may have gone to sleep (a futex wake
 * costs 10-50 us) and on a shared VM a worker can be descheduled. */
#define TP_MIN_WORK_PER_THREAD 32768.0

/* Creates a pool of n_threads (>= 1) threads including the caller.
 * Returns NULL on failure (kite_last_error() set). */
threadpool *tp_new(int n_threads);
void tp_free(threadpool *tp); /* joins the workers; NULL is a no-op; the pool must be idle */
int tp_n_threads(const threadpool *tp);

/* Runs fn(arg, ith, nth) on every thread, ith = 0..nth-1; returns when all are done. */
void tp_run(threadpool *tp, tp_task_fn fn, void *arg);

/* Like tp_run, on the first nth threads only (nth is clamped to
 * [1, tp_n_threads]); fn sees that nth.  nth == 1 calls fn(arg, 0, 1) on the
 * caller with no synchronisation at all.  Threads ith >= nth stay idle. */
void tp_run_n(threadpool *tp, tp_task_fn fn, void *arg, int nth);

/* How many threads an op of `work` units should use: 1 below
 * 2*TP_MIN_WORK_PER_THREAD, otherwise floor(work / TP_MIN_WORK_PER_THREAD)
 * capped at tp_n_threads.  Cost O(1). */
int tp_threads_for(const threadpool *tp, double work);

/* Splits [0, n) into nth nearly equal contiguous ranges; range ith is [*lo, *hi). */
void tp_split(long n, int ith, int nth, long *lo, long *hi);

#endif
