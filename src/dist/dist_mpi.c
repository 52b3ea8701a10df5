/*
 * dist_mpi.c - dist.h on Open MPI (or any MPI-3 library).
 *
 * Errors return to us (MPI_ERRORS_RETURN on the world communicator) so that
 * a peer that died is reported as one line naming this rank and the call,
 * and the whole job then ends (MPI_Abort): a rank never waits forever on a
 * collective whose peer is gone when the runtime can tell.
 *
 * A peer that hangs without dying is caught by the watchdog (dist_set_timeout).
 *
 * Messages larger than INT_MAX elements are sent in pieces (MPI counts are
 * int).
 */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

static bool g_joined;
static int g_rank, g_size = 1;

/* ---- watchdog: the start time of the call in flight (0: none) and its name,
 * polled by a thread; a call past the timeout ends this process (the launcher
 * ends the others).  _exit: the driving thread is stuck inside MPI, so no MPI
 * call and no atexit handler can run safely from here. */
static _Atomic double g_busy_since;
static const char *_Atomic g_busy_call;
static double g_timeout_s;
static bool g_watching;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        usleep(100 * 1000);
        const double since = atomic_load(&g_busy_since);
        if (since > 0 && now_s() - since > g_timeout_s) {
            const char *call = atomic_load(&g_busy_call);
            fprintf(stderr, "kite: rank %d of %d: %s has not finished after %.0f s: a peer is gone or hangs; "
                    "ending the job\n", g_rank, g_size, call ? call : "an MPI call", g_timeout_s);
            fflush(stderr);
            _exit(1);
        }
    }
    return NULL;
}

int dist_set_timeout(double seconds) {
    g_timeout_s = seconds;
    if (seconds <= 0 || g_watching || g_size == 1) return 0;
    pthread_t t;
    if (pthread_create(&t, NULL, watchdog, NULL)) return -1;
    pthread_detach(t);
    g_watching = true;
    return 0;
}

static void busy(const char *call) {
    if (!g_watching) return;
    atomic_store(&g_busy_call, call);
    atomic_store(&g_busy_since, now_s());
}
static void idle(void) {
    if (g_watching) atomic_store(&g_busy_since, 0.0);
}

static void check(int rc, const char *call) {
    if (rc == MPI_SUCCESS) return;
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    fprintf(stderr, "kite: rank %d of %d: %s failed (%.*s); ending the job\n", g_rank, g_size, call, len, err);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int dist_init(int *argc, char ***argv, bool launched) {
    if (!launched || g_joined) return 0;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "kite: MPI_Init_thread failed\n");
        return -1;
    }
    g_joined = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return 0;
}

void dist_finalize(void) {
    if (!g_joined) return;
    g_joined = false;
    MPI_Finalize();
}

int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }
bool dist_available(void) { return true; }

void dist_allreduce_sum_f32(float *buf, size_t n) {
    if (g_size == 1) return;
    busy("MPI_Allreduce");
    for (size_t i = 0; i < n;) {
        const int c = n - i > (size_t)INT_MAX ? INT_MAX : (int)(n - i);
        check(MPI_Allreduce(MPI_IN_PLACE, buf + i, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        i += (size_t)c;
    }
    idle();
}

static void bcast(void *buf, size_t bytes, int root) {
    for (size_t i = 0; i < bytes;) {
        const int c = bytes - i > (size_t)INT_MAX ? INT_MAX : (int)(bytes - i);
        check(MPI_Bcast((char *)buf + i, c, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
        i += (size_t)c;
    }
}

void dist_bcast(void *buf, size_t bytes, int root) {
    if (g_size == 1) return;
    busy("MPI_Bcast");
    bcast(buf, bytes, root);
    idle();
}

void dist_bcast_idle(void *buf, size_t bytes, int root) {
    if (g_size > 1) bcast(buf, bytes, root);
}

void dist_send(const void *buf, size_t bytes, int dest, int tag) {
    busy("MPI_Send");
    for (size_t i = 0; i < bytes;) {
        const int c = bytes - i > (size_t)INT_MAX ? INT_MAX : (int)(bytes - i);
        check(MPI_Send((const char *)buf + i, c, MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
        i += (size_t)c;
    }
    idle();
}

void dist_recv(void *buf, size_t bytes, int src, int tag) {
    busy("MPI_Recv");
    for (size_t i = 0; i < bytes;) {
        const int c = bytes - i > (size_t)INT_MAX ? INT_MAX : (int)(bytes - i);
        check(MPI_Recv((char *)buf + i, c, MPI_BYTE, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        i += (size_t)c;
    }
    idle();
}

void dist_abort(const char *msg, int code) {
    fprintf(stderr, "kite: rank %d of %d: %s\n", g_rank, g_size, msg);
    fflush(stderr);
    if (g_joined) MPI_Abort(MPI_COMM_WORLD, code);
}
