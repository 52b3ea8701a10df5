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
 * THREAD SAFETY
 *   One thread (the owner) calls tp_run at a time; tasks must not call tp_run.
 */
#ifndef KITE_CORE_THREADPOOL_H
#define KITE_CORE_THREADPOOL_H

typedef struct threadpool threadpool;

/* Runs part ith of nth of a task. */
typedef void (*tp_task_fn)(void *arg, int ith, int nth);

/* Creates a pool of n_threads (>= 1) threads including the caller.
 * Returns NULL on failure (kite_last_error() set). */
threadpool *tp_new(int n_threads);
void tp_free(threadpool *tp); /* joins the workers; NULL is a no-op */
int tp_n_threads(const threadpool *tp);

/* Runs fn(arg, ith, nth) on every thread, ith = 0..nth-1; returns when all are done. */
void tp_run(threadpool *tp, tp_task_fn fn, void *arg);

/* Splits [0, n) into nth nearly equal contiguous ranges; range ith is [*lo, *hi). */
void tp_split(long n, int ith, int nth, long *lo, long *hi);

#endif
