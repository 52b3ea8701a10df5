/*
 * json_mini.h - just enough JSON for the golden files of the tests: one
 * object per line whose values are strings (with \uXXXX escapes, surrogate
 * pairs included), arrays of integers, or anything else that is skipped
 * (numbers, true/false/null, nested arrays of scalars).
 *
 * Not a general parser: no nested objects.  Returns -1 on malformed input.
 * Strings come back malloc'd, NUL-appended, with their byte length (they may
 * contain NUL).
 */
#ifndef KITE_TEST_JSON_MINI_H
#define KITE_TEST_JSON_MINI_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline void jm_ws(const char **p) {
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') (*p)++;
}

static inline int jm_hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static inline size_t jm_put_utf8(char *d, uint32_t cp) {
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

/* *p at the opening quote; on success *p is past the closing quote. */
static inline int jm_string(const char **p, char **out, size_t *len) {
    const char *s = *p;
    if (*s != '"') return -1;
    s++;
    size_t cap = strlen(s) + 1;
    char *d = malloc(cap + 4);
    if (!d) return -1;
    size_t n = 0;
    for (;;) {
        char c = *s++;
        if (c == '\0') goto bad;
        if (c == '"') break;
        if (c != '\\') {
            d[n++] = c;
            continue;
        }
        c = *s++;
        switch (c) {
        case '"': d[n++] = '"'; break;
        case '\\': d[n++] = '\\'; break;
        case '/': d[n++] = '/'; break;
        case 'b': d[n++] = '\b'; break;
        case 'f': d[n++] = '\f'; break;
        case 'n': d[n++] = '\n'; break;
        case 'r': d[n++] = '\r'; break;
        case 't': d[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (jm_hex4(s, &cp)) goto bad;
            s += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (s[0] != '\\' || s[1] != 'u' || jm_hex4(s + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) goto bad;
                s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                goto bad;
            }
            n += jm_put_utf8(d + n, cp);
            break;
        }
        default: goto bad;
        }
    }
    d[n] = '\0';
    *out = d;
    *len = n;
    *p = s;
    return 0;
bad:
    free(d);
    return -1;
}

/* Array of integers; *out malloc'd (non-NULL even when empty). */
static inline int jm_int_array(const char **p, int32_t **out, size_t *n_out) {
    const char *s = *p;
    if (*s != '[') return -1;
    s++;
    size_t cap = 16, n = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return -1;
    jm_ws(&s);
    if (*s == ']') {
        s++;
        goto done;
    }
    for (;;) {
        jm_ws(&s);
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) goto bad;
        s = end;
        if (n == cap) {
            int32_t *b = realloc(a, 2 * cap * sizeof *a);
            if (!b) goto bad;
            a = b;
            cap *= 2;
        }
        a[n++] = (int32_t)v;
        jm_ws(&s);
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == ']') {
            s++;
            break;
        }
        goto bad;
    }
done:
    *out = a;
    *n_out = n;
    *p = s;
    return 0;
bad:
    free(a);
    return -1;
}

/* Skips a scalar or a flat array of scalars (no strings containing ']'). */
static inline int jm_skip(const char **p) {
    const char *s = *p;
    if (*s == '"') {
        char *tmp;
        size_t len;
        if (jm_string(&s, &tmp, &len)) return -1;
        free(tmp);
    } else if (*s == '[') {
        while (*s && *s != ']') s++;
        if (*s != ']') return -1;
        s++;
    } else {
        while (*s && *s != ',' && *s != '}') s++;
    }
    *p = s;
    return 0;
}

typedef struct jm_row {
    char *text;      /* malloc'd, NUL-appended */
    size_t text_len; /* bytes */
    int32_t *ids;    /* malloc'd */
    size_t n_ids;
} jm_row;

static inline void jm_row_free(jm_row *r) {
    free(r->text);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

/* Parses {"text": "...", "<ids_key>": [...], ...}. Both fields required. */
static inline int jm_row_parse(const char *line, const char *ids_key, jm_row *row) {
    const char *s = line;
    memset(row, 0, sizeof *row);
    jm_ws(&s);
    if (*s++ != '{') return -1;
    for (;;) {
        jm_ws(&s);
        if (*s == '}') break;
        char *key;
        size_t klen;
        if (jm_string(&s, &key, &klen)) goto bad;
        jm_ws(&s);
        if (*s++ != ':') {
            free(key);
            goto bad;
        }
        jm_ws(&s);
        int rc;
        if (!strcmp(key, "text") && !row->text) rc = jm_string(&s, &row->text, &row->text_len);
        else if (!strcmp(key, ids_key) && !row->ids) rc = jm_int_array(&s, &row->ids, &row->n_ids);
        else rc = jm_skip(&s);
        free(key);
        if (rc) goto bad;
        jm_ws(&s);
        if (*s == ',') s++;
    }
    if (!row->text || !row->ids) goto bad;
    return 0;
bad:
    jm_row_free(row);
    return -1;
}

#endif
