/* dist_none.c - the one-rank group of a build without MPI (dist.h): every
 * collective is the identity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

int dist_init(int *argc, char ***argv, bool launched) {
    (void)argc;
    (void)argv;
    (void)launched;
    return 0;
}
void dist_finalize(void) {}
int dist_rank(void) { return 0; }
int dist_size(void) { return 1; }
bool dist_available(void) { return false; }
void dist_allreduce_sum_f32(float *buf, size_t n) {
    (void)buf;
    (void)n;
}
void dist_bcast(void *buf, size_t bytes, int root) {
    (void)buf;
    (void)bytes;
    (void)root;
}
/* With one rank there is no peer: a send or receive is a broken invariant. */
void dist_send(const void *buf, size_t bytes, int dest, int tag) {
    (void)buf;
    (void)bytes;
    (void)tag;
    fprintf(stderr, "kite: dist_send to rank %d in a one-rank group\n", dest);
    abort();
}
void dist_recv(void *buf, size_t bytes, int src, int tag) {
    (void)buf;
    (void)bytes;
    (void)tag;
    fprintf(stderr, "kite: dist_recv from rank %d in a one-rank group\n", src);
    abort();
}
void dist_abort(const char *msg, int code) {
    fprintf(stderr, "kite: %s\n", msg);
    exit(code);
}
int dist_set_timeout(double seconds) {
    (void)seconds;
    return 0;
}
void dist_bcast_idle(void *buf, size_t bytes, int root) {
    (void)buf;
    (void)bytes;
    (void)root;
}
