/*
 * error.h - recording failures for kite_last_error().
 *
 * Library code reports a failure by returning err_set(code, "fmt", ...): the
 * formatted one-line message is kept in thread-local storage and the code is
 * returned, so a failure path reads `return err_set(KITE_E_FORMAT, "%s: ...", path);`.
 * Broken internal invariants (never untrusted input) use KITE_ASSERT, which
 * aborts with file:line.
 */
#ifndef KITE_CORE_ERROR_H
#define KITE_CORE_ERROR_H

#include <stdio.h>
#include <stdlib.h>

#include "kite.h"

#if defined(__GNUC__)
#define KITE_PRINTF(fmt_idx, args_idx) __attribute__((format(printf, fmt_idx, args_idx)))
#else
#define KITE_PRINTF(fmt_idx, args_idx)
#endif

/* Stores the message for kite_last_error() and returns code. */
int err_set(int code, const char *fmt, ...) KITE_PRINTF(2, 3);
/* Prefixes the current message with "prefix: " (adds context on the way up). */
void err_prefix(const char *prefix);
void err_clear(void);

#define KITE_ASSERT(cond)                                                          \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n",       \
                    __FILE__, __LINE__, #cond);                                    \
            abort();                                                               \
        }                                                                          \
    } while (0)

#endif
