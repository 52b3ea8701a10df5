/* stop.c - stop strings with hold-back over streamed text (see stop.h):
 * stop_scan, the one matcher, and the filter of the serving engine. */
#include "generate/stop.h"

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

/* Length of stop string i (lens NULL: strlen). */
static size_t stop_len(const char *const *stops, const size_t *lens, int32_t i) {
    return lens ? lens[i] : strlen(stops[i]);
}

size_t stop_scan(const char *text, size_t len, const char *const *stops, const size_t *lens, int32_t n, bool *hit) {
    size_t best = len; /* earliest start of a full match */
    for (int32_t i = 0; i < n; i++) {
        const size_t l = stop_len(stops, lens, i);
        if (l == 0) continue;
        for (size_t s = 0; s + l <= len && s < best; s++)
            if (text[s] == stops[i][0] && memcmp(text + s, stops[i], l) == 0) {
                best = s;
                break;
            }
    }
    *hit = best < len;
    if (*hit) return best;
    size_t hold = 0; /* longest tail that is a proper prefix of a stop string */
    for (int32_t i = 0; i < n; i++) {
        const size_t l = stop_len(stops, lens, i);
        if (l == 0) continue;
        for (size_t k = (l - 1 < len ? l - 1 : len); k > hold; k--)
            if (memcmp(text + len - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return len - hold;
}

int stop_filter_push(stop_filter *f, const char *text, size_t len, sbuf *out) {
    if (f->stopped) return 1;
    if (f->n_stop == 0) return sbuf_append(out, text, len);
    int rc = sbuf_append(&f->held, text, len);
    if (rc != KITE_OK) return rc;
    sbuf *h = &f->held;
    bool hit;
    const size_t at = stop_scan(h->p, h->n, (const char *const *)f->stops, f->lens, f->n_stop, &hit);
    if (hit) {
        rc = sbuf_append(out, h->p, at);
        if (rc != KITE_OK) return rc;
        h->n = 0;
        h->p[0] = '\0';
        f->stopped = true;
        return 1;
    }
    const size_t release = at, keep = h->n - at;
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
