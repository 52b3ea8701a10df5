/*
 * dist.h - the process group a model is split over (docs/distributed.md).
 *
 * DESIGN
 *   The one place that knows about the distributed runtime.  dist_mpi.c
 *   implements it on Open MPI (built when the Makefile finds mpicc, or with
 *   MPI=1); dist_none.c is the one-rank group of every other build, so the
 *   rest of the code calls these functions without #ifdefs.  Buffers are the
 *   caller's, contiguous, allocated once: nothing here allocates per call.
 *
 *   A failed collective cannot be recovered in the middle of a forward pass
 *   (the other ranks hold the rest of the layer): dist_mpi.c prints one line
 *   naming the rank and the call and ends the job (MPI_Abort), which is the
 *   one exception to "library code does not exit".
 *
 * THREADS
 *   Call from the thread driving the context only (MPI_THREAD_FUNNELED).
 */
#ifndef KITE_DIST_DIST_H
#define KITE_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>

/* Joins the group when the process was started by a launcher (mpirun sets
 * its variables; the CLI checks them and passes launched).  Without one, or
 * in a build without MPI, the group is this process alone.  Returns 0, or -1
 * after printing why the runtime could not start. */
int dist_init(int *argc, char ***argv, bool launched);
void dist_finalize(void); /* no-op unless dist_init joined a group */

int dist_rank(void); /* 0..dist_size()-1; 0 without a group */
int dist_size(void); /* ranks in the group; 1 without one */
bool dist_available(void); /* the build has a distributed runtime (MPI) */

/* Watchdog: a collective or transfer that has not finished after seconds
 * (> 0) means a peer hangs: this rank prints one line naming itself, the call
 * and the time and exits (status 1), and the launcher then ends the other
 * ranks.  0 (the default) turns it off.  dist_bcast_idle is not watched (a
 * rank waiting for rank 0's next request may wait as long as rank 0 likes).
 * Starts a thread on first use; returns 0, or -1 if it cannot. */
int dist_set_timeout(double seconds);
void dist_bcast_idle(void *buf, size_t bytes, int root);

/* buf[0..n) = the sum over ranks of every rank's buf (in place, every rank). */
void dist_allreduce_sum_f32(float *buf, size_t n);
/* bytes of buf from root to every rank. */
void dist_bcast(void *buf, size_t bytes, int root);
/* Blocking point-to-point transfer of bytes with a tag. */
void dist_send(const void *buf, size_t bytes, int dest, int tag);
void dist_recv(void *buf, size_t bytes, int src, int tag);
/* Ends every rank of the job with code, after printing msg on this one. */
void dist_abort(const char *msg, int code);

#endif
