/*
 * progress.h - the CLI's display of long work: one updating line with the
 * percentage, elapsed time and ETA on a terminal, plain periodic lines
 * otherwise, nothing with -q.
 *
 * DESIGN
 *   A command starts a progress with a label ("kite synth") and the unit of
 *   its counts (PROGRESS_BYTES, PROGRESS_ITEMS), then reports (done, total)
 *   as it goes, directly or through progress_sink() handed to library code
 *   as a core_progress.  The mode is chosen once per process:
 *     - off: -q on the command line (progress_set_quiet) or KITE_PROGRESS=off;
 *     - tty: stderr is a terminal (or KITE_PROGRESS=tty): "\r<line>\e[K" at
 *       most 10 times a second (or every KITE_PROGRESS_PERIOD when shorter),
 *       erased by progress_end;
 *     - plain: otherwise (or KITE_PROGRESS=plain): a full line every
 *       KITE_PROGRESS_PERIOD seconds (default 2; the first after one
 *       period, so work shorter than that prints nothing), plus a last line
 *       at progress_end when any was printed.
 *   Kept lines (progress_line, or a line passed through the sink) erase the
 *   terminal line, print, and let the next update redraw it; -q drops them.
 *   Everything goes to stderr, so stdout stays the command's result.
 * THREAD SAFETY
 *   A progress is used by one thread (library callers report from the
 *   calling thread, core/progress.h); the quiet flag is set before work starts.
 */
#ifndef KITE_TOOLS_PROGRESS_H
#define KITE_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/progress.h"

enum progress_unit { PROGRESS_ITEMS = 0, PROGRESS_BYTES = 1 };
enum progress_mode { PROGRESS_OFF = 0, PROGRESS_PLAIN = 1, PROGRESS_TTY = 2 };

typedef struct progress {
    const char *label; /* borrowed: "kite synth" */
    const char *noun;  /* PROGRESS_ITEMS: what is counted ("tensors", "windows"); borrowed */
    int unit;          /* enum progress_unit */
    int mode;          /* enum progress_mode */
    FILE *f;           /* stderr */
    double t0, t_last; /* start, last line or redraw (seconds) */
    double period;     /* plain mode: seconds between lines */
    uint64_t done, total;
    bool drawn;        /* tty: a line is on screen */
    bool printed;      /* plain: at least one line printed */
} progress;

/* -q: every progress after this call is off (kept lines too). */
void progress_set_quiet(bool quiet);
bool progress_quiet(void);

/* The mode a progress would get now (off / plain / tty, see DESIGN). */
int progress_mode_now(void);

/* Starts p; unit PROGRESS_ITEMS counts noun (may be NULL). */
void progress_begin(progress *p, const char *label, int unit, const char *noun);
/* done of total so far; total 0 means unknown (no percentage or ETA). */
void progress_update(progress *p, uint64_t done, uint64_t total);
/* Prints line (no newline at its end) above the progress; dropped when off. */
void progress_line(progress *p, const char *line);
/* Erases the terminal line (tty mode) so the caller can print; the next update redraws it. */
void progress_clear(progress *p);
/* Ends p: erases the terminal line; in plain mode prints a last line if any was printed. */
void progress_end(progress *p);

/* A core_progress that feeds p (library code reports through it). */
core_progress progress_sink(progress *p);

/* The text of one progress line into buf (tests): "LABEL: 42% (3 of 7 NOUN), 1.2 s, ETA 1.6 s". */
void progress_format(const progress *p, double now, char *buf, size_t cap);

#endif
