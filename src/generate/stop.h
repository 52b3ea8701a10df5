/*
 * stop.h - stop strings over streamed text, with hold-back (docs/engine.md).
 * stop_scan is the one matcher: the serving engine's filter below and
 * kite chat (chat_stop_scan) use it.
 *
 * DESIGN
 *   Generated text arrives in pieces.  The filter keeps the not yet emitted
 *   tail ("held") and after each piece:
 *     1. if a stop string occurs in held, everything before its earliest
 *        occurrence is released and the filter reports a stop;
 *     2. otherwise the longest suffix of held that is a proper prefix of
 *        some stop string is kept back and the rest is released.
 *   So released text never contains a stop string nor the start of one that
 *   might still complete, and a match spanning several pieces is found.
 *   Stop strings and pieces are UTF-8; a held-back suffix starts where a
 *   stop string starts (a lead byte), so releases never split a character.
 *
 * OWNERSHIP / THREADS
 *   The filter copies the stop strings.  One thread at a time.
 */
#ifndef KITE_GENERATE_STOP_H
#define KITE_GENERATE_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Of text[0..len) (generated and not yet released), how many leading bytes
 * may be released now.  If a stop string occurs, *hit is set and the offset
 * of its earliest occurrence is returned (the text before it is the output).
 * Otherwise *hit is false and the result is len minus the longest tail that
 * is a proper prefix of a stop string (it may become one with more text).
 * stops[0..n) with their lengths lens[0..n) (lens NULL: strlen); empty
 * strings never match.  Cost: O(len * total stop length). */
size_t stop_scan(const char *text, size_t len, const char *const *stops, const size_t *lens, int32_t n,
                 bool *hit /* OUT */);

/* A growable byte buffer (NUL-terminated when p != NULL). */
typedef struct sbuf {
    char *p;
    size_t n;    /* bytes used */
    size_t cap;  /* bytes allocated */
} sbuf;

/* Appends s[0..len).  Returns KITE_OK or KITE_E_NOMEM (buffer unchanged). */
int sbuf_append(sbuf *b, const char *s, size_t len);
void sbuf_free(sbuf *b);

typedef struct stop_filter {
    char **stops;      /* [n_stop] copies, non-empty */
    size_t *lens;      /* [n_stop] */
    int32_t n_stop;
    sbuf held;         /* text not yet released */
    bool stopped;      /* a stop string was seen; later pushes are ignored */
} stop_filter;

/* Copies the n non-empty strings of stops (NULL entries or "" are skipped).
 * Returns KITE_OK or KITE_E_NOMEM (filter left freeable). */
int stop_filter_init(stop_filter *f, const char *const *stops, int32_t n);
void stop_filter_free(stop_filter *f);

/* Adds text[0..len) and appends what can be released to out.  Returns 1 if
 * a stop string completed (out then ends just before it; the rest is
 * dropped), 0 otherwise, or KITE_E_NOMEM. */
int stop_filter_push(stop_filter *f, const char *text, size_t len, sbuf *out);

/* End of generation: releases everything still held (no stop occurred). */
int stop_filter_finish(stop_filter *f, sbuf *out);

#endif
