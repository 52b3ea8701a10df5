/*
 * progress.h - kite quantize's progress: per tensor and overall, with ETA
 * (internal to src/quant; kept to this file pair so it can move onto a
 * shared progress module).
 *
 * DESIGN
 *   Work is counted in the units quantize.c already estimates per tensor
 *   (rows x row length x cost per element: ~64 for RTN, the row length for
 *   GPTQ's sweep); the ETA is elapsed / done * remaining.
 *     - stderr a terminal: one status line, redrawn in place ("\r", erase to
 *       end of line) at most 10 times a second; the log stream handed to the
 *       rest of the quantizer (qprog_log) erases the status line before each
 *       line it prints and redraws it after, so tensor and calibration lines
 *       scroll above it;
 *     - otherwise: plain lines ("progress: ..."), at most one per 10 s.
 *   A tensor that took a second or more gets a line with its wall and CPU
 *   time when the next one starts (or at qprog_free).
 *
 * THREAD SAFETY
 *   Driven by the writer's thread only.
 */
#ifndef KITE_QUANT_PROGRESS_H
#define KITE_QUANT_PROGRESS_H

#include <stdbool.h>
#include <stdio.h>

typedef struct qprog qprog;

/* A progress over `total` work units, printed to out (NULL: no progress).
 * Returns NULL on OOM or out NULL (then every call below is a no-op). */
qprog *qprog_new(FILE *out, double total);
void qprog_free(qprog *p); /* clears the status line; NULL is a no-op */

/* The stream to print log lines to: out itself, or on a terminal a stream
 * that keeps the status line below the log. */
FILE *qprog_log(qprog *p, FILE *out);

/* Sets the total work (once it is known). */
void qprog_set_total(qprog *p, double total);

/* Tensor `index` of `count` named `name` starts, worth `work` units. */
void qprog_tensor(qprog *p, int index, int count, const char *name, double work);
/* `done` (0..1) of the current tensor is finished. */
void qprog_advance(qprog *p, double done);

#endif
