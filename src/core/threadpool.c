/*
 * threadpool.c - see threadpool.h.
 *
 * Protocol: the owner fills task/arg, resets `remaining` to n-1, then bumps
 * `generation` (release).  A worker that sees a new generation (acquire) runs
 * the task and decrements `remaining` (release); the owner, after running
 * part 0, waits until `remaining` is 0 (acquire).  Sleeping uses one mutex and
 * two condition variables; a sleeper re-checks the atomic under the mutex, and
 * the waker takes the mutex before broadcasting, so no wake-up is lost.
 * `generation` and `remaining` sit on separate cache lines because workers
 * write one and poll the other.
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/error.h"

/* Spin iterations before sleeping; about 50-100 us on current x86, longer
 * than the gap between two ops of a decode step on small models. */
#define TP_SPIN_ITERS 20000

struct threadpool {
    int n_threads;
    pthread_t *threads;           /* [n_threads - 1] */
    tp_task_fn task;
    void *arg;
    _Alignas(64) atomic_uint generation; /* bumped per task; odd/even doesn't matter */
    _Alignas(64) atomic_int remaining;   /* workers still running the task */
    _Alignas(64) atomic_bool stop;
    atomic_int sleepers;          /* workers blocked in cond_wait for a task */
    atomic_bool owner_sleeping;
    pthread_mutex_t mutex;
    pthread_cond_t work_cv;       /* new task or stop */
    pthread_cond_t done_cv;       /* remaining reached 0 */
};

typedef struct worker_arg {
    threadpool *tp;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    threadpool *tp = wa.tp;
    /* Not a load of `generation`: the owner may already have published the
     * first task before this thread got here.  Tasks start at generation 1. */
    unsigned seen = 0;
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&tp->stop, memory_order_acquire)) {
            if (++spins < TP_SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&tp->mutex);
            atomic_fetch_add(&tp->sleepers, 1);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->work_cv, &tp->mutex);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->mutex);
            spins = 0;
        }
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        seen = g;
        tp->task(tp->arg, wa.ith, tp->n_threads);
        /* seq_cst on both sides (here and owner_sleeping in tp_run) so that
         * either we see the owner asleep or the owner sees remaining == 0 */
        if (atomic_fetch_sub(&tp->remaining, 1) == 1 &&
            atomic_load(&tp->owner_sleeping)) {
            pthread_mutex_lock(&tp->mutex);
            pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mutex);
        }
    }
    return NULL;
}

threadpool *tp_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) goto oom;
    tp->n_threads = n_threads;
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->remaining, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->owner_sleeping, false);
    pthread_mutex_init(&tp->mutex, NULL);
    pthread_cond_init(&tp->work_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    if (n_threads > 1) {
        tp->threads = calloc((size_t)n_threads - 1, sizeof *tp->threads);
        if (!tp->threads) goto oom;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) goto oom_started;
        wa->tp = tp;
        wa->ith = i;
        if (pthread_create(&tp->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i; /* join only those started */
            tp_free(tp);
            err_set(KITE_E_NOMEM, "thread pool: cannot start thread %d of %d", i, n_threads);
            return NULL;
        }
        continue;
    oom_started:
        tp->n_threads = i;
        tp_free(tp);
        goto oom_set;
    }
    return tp;
oom:
    if (tp) {
        free(tp->threads);
        free(tp);
    }
oom_set:
    err_set(KITE_E_NOMEM, "thread pool: out of memory");
    return NULL;
}

void tp_free(threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mutex);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mutex);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i - 1], NULL);
    pthread_mutex_destroy(&tp->mutex);
    pthread_cond_destroy(&tp->work_cv);
    pthread_cond_destroy(&tp->done_cv);
    free(tp->threads);
    free(tp);
}

int tp_n_threads(const threadpool *tp) { return tp->n_threads; }

void tp_run(threadpool *tp, tp_task_fn fn, void *arg) {
    if (tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->task = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->remaining, tp->n_threads - 1, memory_order_relaxed);
    /* seq_cst: pairs with the sleepers++ / generation re-check of a worker
     * going to sleep, so either it sees the new task or we see it asleep */
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mutex);
        pthread_cond_broadcast(&tp->work_cv);
        pthread_mutex_unlock(&tp->mutex);
    }
    fn(arg, 0, tp->n_threads);
    int spins = 0;
    while (atomic_load_explicit(&tp->remaining, memory_order_acquire) > 0) {
        if (++spins < TP_SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&tp->mutex);
        atomic_store(&tp->owner_sleeping, true);
        while (atomic_load(&tp->remaining) > 0) pthread_cond_wait(&tp->done_cv, &tp->mutex);
        atomic_store(&tp->owner_sleeping, false);
        pthread_mutex_unlock(&tp->mutex);
    }
}

void tp_split(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}
