/*
 * progress.c - kite quantize's status line / progress lines (progress.h).
 *
 * The terminal log stream is a fopencookie() stream (glibc, musl): each
 * line written to it first erases the status line, and the status line is
 * redrawn after the line.
 */
#define _GNU_SOURCE
#include "quant/progress.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/timing.h"

struct qprog {
    FILE *out;
    FILE *log;          /* cookie stream (terminal) or NULL */
    bool tty, shown;    /* shown: the status line is on screen */
    double t0, total, done_before; /* work of finished tensors */
    double work, frac;  /* current tensor */
    int index, count;
    char name[96];
    double t_tensor, u_tensor; /* wall and CPU time the current tensor started */
    double last;        /* time of the last print */
};

static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

static void status_text(const qprog *p, char *buf, size_t n) {
    const double now = time_now_s() - p->t0;
    const double done = p->done_before + p->frac * p->work;
    const double all = p->total > 0 ? done / p->total : 0;
    char el[16], eta[16];
    fmt_time(el, sizeof el, now);
    fmt_time(eta, sizeof eta, all > 0.001 ? now / all * (1 - all) : -1);
    snprintf(buf, n, "[%3d/%3d] %s %3.0f%% | overall %3.0f%%, elapsed %s, ETA %s", p->index, p->count, p->name,
             100 * p->frac, 100 * all, el, eta);
}

static void draw(qprog *p) {
    char buf[256];
    status_text(p, buf, sizeof buf);
    fprintf(p->out, "\r%s\033[K", buf);
    fflush(p->out);
    p->shown = true;
}

static void erase(qprog *p) {
    if (!p->shown) return;
    fputs("\r\033[K", p->out);
    p->shown = false;
}

static ssize_t log_write(void *cookie, const char *buf, size_t n) {
    qprog *p = cookie;
    erase(p);
    fwrite(buf, 1, n, p->out);
    if (n && buf[n - 1] == '\n' && p->count > 0) draw(p);
    else fflush(p->out);
    return (ssize_t)n;
}

/* The finished tensor's time, when it was long enough to matter. */
static void tensor_done(qprog *p) {
    if (p->count == 0) return;
    const double dt = time_now_s() - p->t_tensor, du = time_cpu_s() - p->u_tensor;
    if (dt < 1.0) return;
    erase(p);
    fprintf(p->out, "[%3d/%3d] %s: %.1f s (cpu %.1f s)\n", p->index, p->count, p->name, dt, du);
}

qprog *qprog_new(FILE *out, double total) {
    if (!out) return NULL;
    qprog *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->out = out;
    p->tty = isatty(fileno(out)) && getenv("TERM") && strcmp(getenv("TERM"), "dumb") != 0;
    p->t0 = p->last = time_now_s();
    p->total = total;
    if (p->tty) {
        cookie_io_functions_t io = {.write = log_write};
        if ((p->log = fopencookie(p, "w", io))) setvbuf(p->log, NULL, _IOLBF, 0);
    }
    return p;
}

FILE *qprog_log(qprog *p, FILE *out) { return p && p->log ? p->log : out; }

void qprog_free(qprog *p) {
    if (!p) return;
    tensor_done(p);
    if (p->log) fclose(p->log);
    erase(p);
    fflush(p->out);
    free(p);
}

void qprog_set_total(qprog *p, double total) {
    if (p) p->total = total;
}

void qprog_tensor(qprog *p, int index, int count, const char *name, double work) {
    if (!p) return;
    tensor_done(p);
    p->t_tensor = time_now_s();
    p->u_tensor = time_cpu_s();
    p->done_before += p->frac * p->work;
    p->index = index;
    p->count = count;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->work = work;
    p->frac = 0;
    if (p->tty) draw(p);
}

void qprog_advance(qprog *p, double done) {
    if (!p) return;
    p->frac = done < 0 ? 0 : (done > 1 ? 1 : done);
    const double now = time_now_s();
    if (p->tty) {
        if (now - p->last >= 0.1) {
            draw(p);
            p->last = now;
        }
    } else if (now - p->last >= 10.0) {
        char buf[256];
        status_text(p, buf, sizeof buf);
        fprintf(p->out, "progress: %s\n", buf);
        p->last = now;
    }
}
