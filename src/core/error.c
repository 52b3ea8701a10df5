/* error.c - thread-local last-error message and status names. */
#include "core/error.h"

#include <stdarg.h>
#include <string.h>

#define ERR_MSG_MAX 512

static _Thread_local char err_msg[ERR_MSG_MAX];

const char *kite_version(void) { return "0.1.0"; }

const char *kite_status_str(int status) {
    switch (status) {
    case KITE_OK: return "ok";
    case KITE_E_IO: return "I/O error";
    case KITE_E_FORMAT: return "format error";
    case KITE_E_UNSUPPORTED: return "unsupported";
    case KITE_E_NOMEM: return "out of memory";
    case KITE_E_ARG: return "invalid argument";
    case KITE_E_NOT_FOUND: return "not found";
    case KITE_E_RANGE: return "out of range";
    case KITE_E_STATE: return "invalid state";
    default: return "unknown error";
    }
}

const char *kite_last_error(void) { return err_msg; }

int err_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return code;
}

void err_prefix(const char *prefix) {
    char tmp[ERR_MSG_MAX];
    memcpy(tmp, err_msg, sizeof tmp);
    size_t n = strlen(prefix);
    if (n + 2 >= ERR_MSG_MAX) n = ERR_MSG_MAX - 3;
    memcpy(err_msg, prefix, n);
    err_msg[n] = ':';
    err_msg[n + 1] = ' ';
    size_t rest = ERR_MSG_MAX - n - 3;
    size_t m = strnlen(tmp, rest);
    memcpy(err_msg + n + 2, tmp, m);
    err_msg[n + 2 + m] = '\0';
}

void err_clear(void) { err_msg[0] = '\0'; }
