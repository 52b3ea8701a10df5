/*
 * threadpool.c - see threadpool.h.
 *
 * Protocol.  The owner writes task/arg, stores `remaining` = nth-1, then
 * publishes `state` = (generation << 16) | nth with a sequentially consistent
 * store.  Generation and nth travel in one atomic word so that a worker
 * always reads the nth of the generation it sees: a worker with ith >= nth
 * only notes the generation and goes back to waiting, touching nothing else
 * (the owner does not wait for it and may already be writing the next task).
 * A worker with ith < nth runs the task and decrements `remaining` (release);
 * the owner cannot publish again before every participant has done so, so a
 * participant never sees task/arg change under it and never misses a
 * generation it takes part in.  The owner runs part 0, then waits until
 * `remaining` is 0 (acquire).
 *
 * Waiting spins for TP_SPIN_ITERS pause instructions, then sleeps: one mutex
 * and two condition variables.  A sleeper announces itself (sleepers++ or
 * owner_sleeping = true, seq_cst) and re-checks the atomic under the mutex;
 * the waker changes the atomic (seq_cst), then looks at the announcement and
 * takes the mutex before signalling, so no wake-up is lost.
 *
 * Cache lines: `state` (written by the owner, polled by workers) and
 * `remaining` (written by workers, polled by the owner) each have a line of
 * their own; the sleep bookkeeping, touched only on the slow path, shares a
 * third.  Nothing is allocated after tp_new.
 */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"

/* Spin iterations before sleeping.  Longer than the gap between two ops of a
 * decode step (a few us), short enough that a pool left idle between tokens
 * of a slow caller stops burning a core within about 0.1-1 ms (a pause is
 * 10-150 cycles depending on the core). */
#define TP_SPIN_ITERS 20000

/* Pauses between two sched_yield calls while spinning (see spin_pause). */
#define TP_YIELD_EVERY 16

#define TP_NTH_BITS 16
#define TP_NTH_MASK ((UINT64_C(1) << TP_NTH_BITS) - 1)

struct threadpool {
    int n_threads;
    pthread_t *threads;           /* [n_threads - 1] */
    uint64_t generation;          /* owner-only copy of the last published generation */
    tp_task_fn task;              /* valid for participants of the current generation */
    void *arg;
    _Alignas(64) _Atomic uint64_t state; /* (generation << 16) | nth of the current task */
    _Alignas(64) atomic_int remaining;   /* participants (other than the owner) still running */
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
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* One step of a spin wait.  Every TP_YIELD_EVERY steps it yields the core:
 * when there are more runnable threads than cores (a shared VM, or more
 * threads than cores) the thread we wait for may be queued behind us, and
 * pausing alone would burn our whole time slice before it runs.  On an idle
 * machine sched_yield returns at once, so the hot path barely changes. */
static inline void spin_pause(int spins) {
    if (spins % TP_YIELD_EVERY == 0)
        sched_yield();
    else
        cpu_relax();
}

/* Waits until `state` carries a generation other than seen (or stop); returns it. */
static uint64_t wait_for_task(threadpool *tp, uint64_t seen) {
    uint64_t s;
    int spins = 0;
    while (((s = atomic_load_explicit(&tp->state, memory_order_acquire)) >> TP_NTH_BITS) == seen &&
           !atomic_load_explicit(&tp->stop, memory_order_relaxed)) {
        if (++spins < TP_SPIN_ITERS) {
            spin_pause(spins);
            continue;
        }
        pthread_mutex_lock(&tp->mutex);
        atomic_fetch_add(&tp->sleepers, 1);
        while ((atomic_load(&tp->state) >> TP_NTH_BITS) == seen && !atomic_load(&tp->stop))
            pthread_cond_wait(&tp->work_cv, &tp->mutex);
        atomic_fetch_sub(&tp->sleepers, 1);
        pthread_mutex_unlock(&tp->mutex);
        spins = 0;
    }
    return s;
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    threadpool *tp = wa.tp;
    /* Not a load of `state`: the owner may already have published the first
     * task before this thread got here.  Tasks start at generation 1. */
    uint64_t seen = 0;
    for (;;) {
        const uint64_t s = wait_for_task(tp, seen);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        seen = s >> TP_NTH_BITS;
        const int nth = (int)(s & TP_NTH_MASK);
        if (wa.ith >= nth) continue; /* not a participant: touch nothing else */
        tp->task(tp->arg, wa.ith, nth);
        /* seq_cst on both sides (here and owner_sleeping in tp_run_n) so that
         * either we see the owner asleep or the owner sees remaining == 0 */
        if (atomic_fetch_sub(&tp->remaining, 1) == 1 && atomic_load(&tp->owner_sleeping)) {
            pthread_mutex_lock(&tp->mutex);
            pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mutex);
        }
    }
    return NULL;
}

threadpool *tp_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if ((uint64_t)n_threads > TP_NTH_MASK) n_threads = (int)TP_NTH_MASK;
    threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) goto oom;
    tp->n_threads = n_threads;
    atomic_init(&tp->state, 0);
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
        if (!wa) {
            tp->n_threads = i; /* join only those started */
            tp_free(tp);
            goto oom_set;
        }
        wa->tp = tp;
        wa->ith = i;
        if (pthread_create(&tp->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i;
            tp_free(tp);
            err_set(KITE_E_NOMEM, "thread pool: cannot start thread %d of %d", i, n_threads);
            return NULL;
        }
    }
    return tp;
oom:
    if (tp) {
        pthread_mutex_destroy(&tp->mutex);
        pthread_cond_destroy(&tp->work_cv);
        pthread_cond_destroy(&tp->done_cv);
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

int tp_threads_for(const threadpool *tp, double work) {
    if (!(work >= 2.0 * TP_MIN_WORK_PER_THREAD) || tp->n_threads == 1) return 1;
    const double n = work / TP_MIN_WORK_PER_THREAD;
    return n >= (double)tp->n_threads ? tp->n_threads : (int)n;
}

void tp_run_n(threadpool *tp, tp_task_fn fn, void *arg, int nth) {
    if (nth > tp->n_threads) nth = tp->n_threads;
    if (nth <= 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->task = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->remaining, nth - 1, memory_order_relaxed);
    tp->generation++;
    /* seq_cst: pairs with the sleepers++ / state re-check of a worker going
     * to sleep, so either it sees the new task or we see it asleep */
    atomic_store(&tp->state, (tp->generation << TP_NTH_BITS) | (uint64_t)nth);
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mutex);
        pthread_cond_broadcast(&tp->work_cv);
        pthread_mutex_unlock(&tp->mutex);
    }
    fn(arg, 0, nth);
    int spins = 0;
    while (atomic_load_explicit(&tp->remaining, memory_order_acquire) > 0) {
        if (++spins < TP_SPIN_ITERS) {
            spin_pause(spins);
            continue;
        }
        pthread_mutex_lock(&tp->mutex);
        atomic_store(&tp->owner_sleeping, true);
        while (atomic_load(&tp->remaining) > 0) pthread_cond_wait(&tp->done_cv, &tp->mutex);
        atomic_store(&tp->owner_sleeping, false);
        pthread_mutex_unlock(&tp->mutex);
    }
}

void tp_run(threadpool *tp, tp_task_fn fn, void *arg) { tp_run_n(tp, fn, arg, tp->n_threads); }

void tp_split(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}
