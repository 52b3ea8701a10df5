/*
 * textbuf.h - a growable NUL-terminated text buffer for building prompts,
 * grammars and JSON answers.
 *
 * DESIGN
 *   Appends never fail loudly: an allocation failure sets `oom`, later
 *   appends do nothing, and the caller checks `oom` once at the end (one
 *   error path instead of one per append).  `p` is NULL until the first
 *   append, then always NUL-terminated; the caller owns it (free(b.p)).
 *   Capacity doubles from 256 bytes: amortized O(1) per byte.
 *
 * THREAD SAFETY
 *   A buffer belongs to one thread.
 */
#ifndef KITE_CORE_TEXTBUF_H
#define KITE_CORE_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct textbuf {
    char *p;    /* the text (NUL-terminated), or NULL before the first append */
    size_t len; /* bytes in p, without the NUL */
    size_t cap;
    bool oom;   /* an append could not allocate: the text is incomplete */
} textbuf;

/* Appends s[0..n). */
void textbuf_putn(textbuf *b, const char *s, size_t n);
/* Appends s without its leading and trailing ASCII white space. */
void textbuf_put_trim(textbuf *b, const char *s);
/* Appends the formatted text (any length). */
void textbuf_printf(textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline void textbuf_put(textbuf *b, const char *s) { textbuf_putn(b, s, strlen(s)); }

#endif
