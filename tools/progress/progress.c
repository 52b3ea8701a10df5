/*
 * progress.c - the CLI's progress display (see progress.h for the design).
 */
#include "progress/progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/timing.h"

#define TTY_REDRAW_S 0.1 /* at most 10 redraws a second: cheap, still looks live */

static bool g_quiet;

void progress_set_quiet(bool quiet) { g_quiet = quiet; }
bool progress_quiet(void) { return g_quiet; }

int progress_mode_now(void) {
    if (g_quiet) return PROGRESS_OFF;
    const int m = config_get()->progress_mode;
    if (m >= 0) return m;
    return isatty(fileno(stderr)) ? PROGRESS_TTY : PROGRESS_PLAIN;
}

void progress_begin(progress *p, const char *label, int unit, const char *noun) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->noun = noun;
    p->unit = unit;
    p->mode = progress_mode_now();
    p->f = stderr;
    p->period = config_get()->progress_period;
    p->t0 = p->t_last = time_now_s();
}

/* "12 s", "3 min 05 s", "1 h 02 min" */
static void fmt_dur(double s, char *buf, size_t cap) {
    if (s < 0) s = 0;
    if (s < 10) snprintf(buf, cap, "%.1f s", s);
    else if (s < 60) snprintf(buf, cap, "%.0f s", s);
    else if (s < 3600) snprintf(buf, cap, "%d min %02d s", (int)(s / 60), (int)s % 60);
    else snprintf(buf, cap, "%d h %02d min", (int)(s / 3600), (int)(s / 60) % 60);
}

static void fmt_count(const progress *p, uint64_t v, char *buf, size_t cap) {
    if (p->unit == PROGRESS_BYTES) snprintf(buf, cap, "%.1f MB", (double)v / 1e6);
    else snprintf(buf, cap, "%" PRIu64, v);
}

void progress_format(const progress *p, double now, char *buf, size_t cap) {
    char el[32], eta[32], a[32], b[32];
    const double elapsed = now - p->t0;
    fmt_dur(elapsed, el, sizeof el);
    fmt_count(p, p->done, a, sizeof a);
    const char *noun = p->unit == PROGRESS_ITEMS && p->noun ? p->noun : "";
    const char *sep = *noun ? " " : "";
    if (p->total == 0) {
        snprintf(buf, cap, "%s: %s%s%s done, %s", p->label, a, sep, noun, el);
        return;
    }
    fmt_count(p, p->total, b, sizeof b);
    const double frac = p->done >= p->total ? 1.0 : (double)p->done / (double)p->total;
    if (p->done > 0 && p->done < p->total) {
        fmt_dur(elapsed * (1.0 - frac) / frac, eta, sizeof eta);
        snprintf(buf, cap, "%s: %3.0f%% (%s of %s%s%s), %s, ETA %s", p->label, 100.0 * frac, a, b, sep, noun, el,
                 eta);
    } else {
        snprintf(buf, cap, "%s: %3.0f%% (%s of %s%s%s), %s", p->label, 100.0 * frac, a, b, sep, noun, el);
    }
}

static void draw(progress *p, double now) {
    char line[256];
    progress_format(p, now, line, sizeof line);
    if (p->mode == PROGRESS_TTY) {
        fprintf(p->f, "\r%s\033[K", line);
        p->drawn = true;
    } else {
        fprintf(p->f, "%s\n", line);
        p->printed = true;
    }
    fflush(p->f);
    p->t_last = now;
}

void progress_update(progress *p, uint64_t done, uint64_t total) {
    p->done = done;
    p->total = total;
    if (p->mode == PROGRESS_OFF) return;
    const double now = time_now_s();
    const double wait = p->mode == PROGRESS_TTY ? (p->period < TTY_REDRAW_S ? p->period : TTY_REDRAW_S) : p->period;
    if (now - p->t_last >= wait) draw(p, now);
}

void progress_line(progress *p, const char *line) {
    if (p->mode == PROGRESS_OFF) return;
    if (p->drawn) fputs("\r\033[K", p->f);
    fprintf(p->f, "%s\n", line);
    if (p->drawn) draw(p, time_now_s()); /* the line stays below what was kept */
    fflush(p->f);
}

void progress_clear(progress *p) {
    if (p->mode == PROGRESS_TTY && p->drawn) {
        fputs("\r\033[K", p->f);
        fflush(p->f);
        p->drawn = false;
    }
}

void progress_end(progress *p) {
    if (p->mode == PROGRESS_TTY && p->drawn) fputs("\r\033[K", p->f);
    else if (p->mode == PROGRESS_PLAIN && p->printed) draw(p, time_now_s());
    fflush(p->f);
    p->drawn = p->printed = false;
    p->mode = PROGRESS_OFF;
}

static void sink_fn(void *user, uint64_t done, uint64_t total, const char *line) {
    progress *p = user;
    if (line) progress_line(p, line);
    if (total) progress_update(p, done, total);
}

core_progress progress_sink(progress *p) { return (core_progress){.fn = sink_fn, .user = p}; }
