/* textbuf.c - see textbuf.h. */
#include "core/textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Room for n more bytes and the NUL; false (and oom) when it cannot be had. */
static bool reserve(textbuf *b, size_t n) {
    if (b->oom) return false;
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) {
        if (cap > (size_t)-1 / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void textbuf_putn(textbuf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void textbuf_put_trim(textbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && is_space(s[i])) i++;
    while (n > i && is_space(s[n - 1])) n--;
    textbuf_putn(b, s + i, n - i);
}

void textbuf_printf(textbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) {
        if (n < 0) b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
