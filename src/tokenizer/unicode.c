/*
 * unicode.c - GPT-2 byte <-> character table, single code point UTF-8
 * helpers and NFC (see unicode.h).
 *
 * DESIGN
 *   The byte table is computed from its definition on each call (a few
 *   comparisons), so there is no global state to initialise.  NFC is
 *   delegated to utf8proc; text that is not valid UTF-8 is split into valid
 *   runs (normalised) and ill-formed bytes (copied), because utf8proc rejects
 *   the whole input otherwise.  Pure-ASCII runs are already NFC and are copied.
 *
 * THREAD SAFETY
 *   Reentrant.
 */
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/vocab_internal.h"

static int byte_is_printable(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t unicode_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    /* rank of b among the non-printable bytes */
    uint32_t k;
    if (b <= 0x20) k = b;                        /* 0x00..0x20: 33 bytes */
    else if (b <= 0xA0) k = 33 + (b - 0x7F);     /* 0x7F..0xA0: 34 bytes */
    else k = 67;                                 /* 0xAD */
    return 0x100 + k;
}

int unicode_cp_to_byte(uint32_t cp) {
    if (cp <= 0xFF) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 || cp > 0x100 + 67) return -1;
    uint32_t k = cp - 0x100;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7F + (k - 33));
    return 0xAD;
}

size_t unicode_put_utf8(uint32_t cp, char *d) {
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t unicode_get_utf8(const uint8_t *s, size_t n, uint32_t *cp) {
    size_t l;
    if (n == 0 || utf8_check(s, n, &l) != UTF8_OK) return 0;
    uint32_t c;
    switch (l) {
    case 1: c = s[0]; break;
    case 2: c = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); break;
    case 3: c = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); break;
    default:
        c = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
            (s[3] & 0x3F);
        break;
    }
    *cp = c;
    return l;
}

/* Appends src[0..n) to the growing buffer (*buf, *len, *cap). */
static int append(char **buf, size_t *len, size_t *cap, const char *src, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (*len + n + 1 > c) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return KITE_E_NOMEM;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = '\0';
    return KITE_OK;
}

int unicode_nfc(const char *s, size_t n, char **out, size_t *out_len) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    const uint8_t *u = (const uint8_t *)s;
    int rc = append(&buf, &len, &cap, "", 0);
    for (size_t i = 0; i < n && rc == KITE_OK;) {
        /* a maximal well-formed run [i, j), and whether it has non-ASCII */
        size_t j = i, l;
        int wide = 0;
        while (j < n && utf8_check(u + j, n - j, &l) == UTF8_OK) {
            wide |= u[j] >= 0x80;
            j += l;
        }
        if (j > i && wide) {
            utf8proc_uint8_t *d = NULL;
            utf8proc_ssize_t dn = utf8proc_map(u + i, (utf8proc_ssize_t)(j - i), &d, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (dn < 0) {
                free(d);
                rc = dn == UTF8PROC_ERROR_NOMEM ? KITE_E_NOMEM : append(&buf, &len, &cap, s + i, j - i);
            } else {
                rc = append(&buf, &len, &cap, (const char *)d, (size_t)dn);
                free(d);
            }
        } else if (j > i) {
            rc = append(&buf, &len, &cap, s + i, j - i);
        }
        if (rc == KITE_OK && j < n) { /* one ill-formed subpart */
            utf8_check(u + j, n - j, &l);
            rc = append(&buf, &len, &cap, s + j, l);
            j += l;
        }
        i = j;
    }
    if (rc != KITE_OK) {
        free(buf);
        return err_set(KITE_E_NOMEM, "out of memory in NFC normalisation (%zu bytes)", n);
    }
    *out = buf;
    *out_len = len;
    return KITE_OK;
}
