/*
 * progress.h - how library code reports the progress of long work (writing
 * a model, quantizing, converting) without writing to a terminal itself.
 *
 * DESIGN
 *   A caller that wants progress passes a core_progress: fn is called with
 *   the units done so far out of total (bytes, rows, items: the caller of
 *   fn says which), and optionally a line of text to keep (a per-tensor log
 *   line, a note).  The library never prints progress on its own; the CLI
 *   turns these calls into an updating terminal line or periodic plain lines
 *   (tools/progress/progress.h).  A zero core_progress (fn NULL) reports
 *   nothing.
 * THREAD SAFETY
 *   fn is called from the thread that runs the operation, never from its
 *   worker threads, so a renderer needs no locking.
 */
#ifndef KITE_CORE_PROGRESS_H
#define KITE_CORE_PROGRESS_H

#include <stdint.h>

typedef struct core_progress {
    /* done <= total; line: NULL, or one line without its newline to print above
     * the progress (the renderer decides whether and how) */
    void (*fn)(void *user, uint64_t done, uint64_t total, const char *line);
    void *user; /* borrowed, passed to fn */
} core_progress;

/* Calls p->fn when set. */
static inline void core_progress_report(const core_progress *p, uint64_t done, uint64_t total, const char *line) {
    if (p && p->fn) p->fn(p->user, done, total, line);
}

#endif
