/* stop.c - stop strings with hold-back over streamed text (see stop.h). */
#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int sbuf_append(sbuf *b, const char *s, size_t len) {
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + len + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return err_set(KITE_E_NOMEM, "out of memory for %zu bytes of text", cap);
        b->p = p;
        b->cap = cap;
    }
    if (len) memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
    return KITE_OK;
}

void sbuf_free(sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int stop_filter_init(stop_filter *f, const char *const *stops, int32_t n) {
    memset(f, 0, sizeof *f);
    if (n <= 0 || !stops) return KITE_OK;
    f->stops = calloc((size_t)n, sizeof *f->stops);
    f->lens = calloc((size_t)n, sizeof *f->lens);
    if (!f->stops || !f->lens) return err_set(KITE_E_NOMEM, "out of memory for %d stop strings", n);
    for (int32_t i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        size_t len = strlen(stops[i]);
        char *c = malloc(len + 1);
        if (!c) return err_set(KITE_E_NOMEM, "out of memory for a stop string");
        memcpy(c, stops[i], len + 1);
        f->stops[f->n_stop] = c;
        f->lens[f->n_stop++] = len;
    }
    return KITE_OK;
}

void stop_filter_free(stop_filter *f) {
    if (f->stops)
        for (int32_t i = 0; i < f->n_stop; i++) free(f->stops[i]);
    free(f->stops);
    free(f->lens);
    sbuf_free(&f->held);
    memset(f, 0, sizeof *f);
}

/* Earliest start of any stop string in h[0..n), or n if none. */
static size_t first_stop(const stop_filter *f, const char *h, size_t n) {
    size_t best = n;
    for (int32_t i = 0; i < f->n_stop; i++) {
        const size_t l = f->lens[i];
        for (size_t s = 0; s + l <= n && s < best; s++)
            if (memcmp(h + s, f->stops[i], l) == 0) {
                best = s;
                break;
            }
    }
    return best;
}

/* Length of the longest suffix of h[0..n) that is a proper prefix of a stop. */
static size_t held_suffix(const stop_filter *f, const char *h, size_t n) {
    size_t best = 0;
    for (int32_t i = 0; i < f->n_stop; i++) {
        const size_t l = f->lens[i];
        for (size_t k = (l - 1 < n ? l - 1 : n); k > best; k--)
            if (memcmp(h + n - k, f->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

int stop_filter_push(stop_filter *f, const char *text, size_t len, sbuf *out) {
    if (f->stopped) return 1;
    if (f->n_stop == 0) return sbuf_append(out, text, len);
    int rc = sbuf_append(&f->held, text, len);
    if (rc != KITE_OK) return rc;
    sbuf *h = &f->held;
    const size_t at = first_stop(f, h->p, h->n);
    if (at < h->n) {
        rc = sbuf_append(out, h->p, at);
        if (rc != KITE_OK) return rc;
        h->n = 0;
        h->p[0] = '\0';
        f->stopped = true;
        return 1;
    }
    const size_t keep = held_suffix(f, h->p, h->n);
    const size_t release = h->n - keep;
    rc = sbuf_append(out, h->p, release);
    if (rc != KITE_OK) return rc;
    memmove(h->p, h->p + release, keep);
    h->n = keep;
    h->p[keep] = '\0';
    return 0;
}

int stop_filter_finish(stop_filter *f, sbuf *out) {
    if (f->stopped || f->held.n == 0) return KITE_OK;
    int rc = sbuf_append(out, f->held.p, f->held.n);
    f->held.n = 0;
    f->held.p[0] = '\0';
    return rc;
}
