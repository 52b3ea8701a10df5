/*
 * http_check.c - UTF-8 repair, JSON NUL scan, Content-Type / Host / Origin
 * matching (contracts in http_check.h).
 *
 * DESIGN
 *   Character classification is the tokenizer's utf8_check (Unicode's
 *   well-formedness table, maximal subparts), so the server and the
 *   detokenizer agree on what one U+FFFD stands for.
 */
#include "http/http_check.h"

#include <stdint.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tokenizer/vocab_internal.h"

bool http_utf8_valid(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t l;
        if (utf8_check(p + i, n - i, &l) != UTF8_OK) return false;
        i += l;
    }
    return true;
}

char *http_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    const uint8_t *p = (const uint8_t *)s;
    /* each ill-formed byte becomes at most 3 bytes */
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        size_t l = 1;
        int st = p[i] < 0x80 ? UTF8_OK : utf8_check(p + i, n - i, &l);
        if (st == UTF8_OK) {
            memcpy(o, p + i, l);
            o += l;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
        i += l;
    }
    *o = '\0';
    *out_len = (size_t)(o - out);
    return out;
}

size_t http_utf8_prefix(const char *s, size_t n, size_t max) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = 1;
        if (p[i] >= 0x80 && utf8_check(p + i, n - i, &l) != UTF8_OK) l = 1;
        if (i + l > max) break;
        i += l;
    }
    return i;
}

void http_utf8_copy(char *dst, size_t cap, const char *src) {
    size_t k = http_utf8_prefix(src, strlen(src), cap - 1);
    memcpy(dst, src, k);
    dst[k] = '\0';
}

bool http_json_has_nul(const char *s, size_t n) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!in_str) {
            if (c == '"') in_str = true;
            continue;
        }
        if (c == '"') {
            in_str = false;
        } else if (c == '\\') {
            if (i + 1 >= n) return false;
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return true;
            i++; /* skip the escaped character (a 'u' escape's hex digits are plain bytes) */
        }
    }
    return false;
}

static bool is_ows(char c) { return c == ' ' || c == '\t'; }

bool http_ctype_is_json(const char *ctype) {
    if (!ctype) return false;
    while (is_ows(*ctype)) ctype++;
    if (strncasecmp(ctype, "application/json", 16)) return false;
    const char *q = ctype + 16;
    while (is_ows(*q)) q++;
    return *q == '\0' || *q == ';';
}

bool http_list_has(const char *list, const char *name, size_t name_len) {
    if (!list) return false;
    for (const char *p = list; *p;) {
        while (*p == ',' || is_ows(*p)) p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && is_ows(t[-1])) t--;
        size_t l = (size_t)(t - p);
        if ((l == 1 && *p == '*') || (l == name_len && l && !strncasecmp(p, name, l))) return true;
        p = e;
    }
    return false;
}

bool http_host_name(const char *host, size_t *len) {
    if (!host) return false;
    size_t n = strlen(host), h;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)host[i] <= ' ' || host[i] == 0x7f || host[i] == '/' || host[i] == '@') return false;
    if (n && host[0] == '[') {
        const char *rb = memchr(host, ']', n);
        if (!rb) return false;
        h = (size_t)(rb - host) + 1;
        if (h == 2) return false;
    } else {
        const char *colon = memchr(host, ':', n);
        h = colon ? (size_t)(colon - host) : n;
    }
    if (h == 0) return false;
    if (h < n) {
        /* ":port", digits only (an empty port is allowed by RFC 3986) */
        if (host[h] != ':' || n - h - 1 > 5) return false;
        for (size_t i = h + 1; i < n; i++)
            if (host[i] < '0' || host[i] > '9') return false;
    }
    *len = h;
    return true;
}

bool http_host_allowed(const char *host, const char *bound, const char *extra) {
    size_t h;
    if (!http_host_name(host, &h)) return false;
    if (http_list_has("localhost,127.0.0.1,[::1]", host, h)) return true;
    if (http_list_has(extra, host, h)) return true;
    if (!bound || !bound[0]) return false;
    size_t bl = strlen(bound);
    if (h == bl && !strncasecmp(host, bound, h)) return true;
    /* an IPv6 address is bound as "::1" but sent as "[::1]" */
    return h == bl + 2 && host[0] == '[' && !strncasecmp(host + 1, bound, bl);
}

/* ---- request heads (the gate, gate.c) ---- */

size_t http_head_end(const char *h, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (h[i] != '\n') continue;
        if (h[i + 1] == '\n') return i + 2;
        if (h[i + 1] == '\r' && i + 2 < n && h[i + 2] == '\n') return i + 3;
    }
    return 0;
}

static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int head_fail(char *msg, size_t cap, int status, const char *text) {
    snprintf(msg, cap, "%s", text);
    return status;
}

int http_head_check(const char *h, size_t n, size_t max_uri, size_t max_headers, char *msg, size_t msg_cap) {
    size_t i = 0;
    /* RFC 9112 2.2: empty lines before the request line are ignored */
    while (i < n && (h[i] == '\r' || h[i] == '\n')) i++;
    size_t m0 = i;
    while (i < n && is_tchar((unsigned char)h[i])) i++;
    if (i == m0 || i - m0 > 16 || i >= n || h[i] != ' ')
        return head_fail(msg, msg_cap, 400, "Malformed request line: expected 'METHOD /path HTTP/1.1'.");
    size_t t0 = ++i;
    while (i < n && (unsigned char)h[i] > ' ' && h[i] != 0x7f) i++;
    if (i == t0 || i >= n || h[i] != ' ')
        return head_fail(msg, msg_cap, i - t0 > max_uri ? 414 : 400,
                         i - t0 > max_uri ? "The request URI is too long." :
                                                   "Malformed request line: expected 'METHOD /path HTTP/1.1'.");
    if (i - t0 > max_uri) {
        snprintf(msg, msg_cap, "The request URI is %zu bytes; the limit is %zu bytes.", i - t0, max_uri);
        return 414;
    }
    i++;
    size_t v0 = i;
    while (i < n && h[i] != '\r' && h[i] != '\n') i++;
    size_t vl = i - v0;
    if (vl != 8 || memcmp(h + v0, "HTTP/1.", 7) || (h[v0 + 7] != '0' && h[v0 + 7] != '1')) {
        if (vl >= 5 && !memcmp(h + v0, "HTTP/", 5))
            return head_fail(msg, msg_cap, 505, "Only HTTP/1.0 and HTTP/1.1 are supported.");
        return head_fail(msg, msg_cap, 400, "Malformed request line: expected 'METHOD /path HTTP/1.1'.");
    }
    if (i < n && h[i] == '\r') i++;
    if (i >= n || h[i] != '\n') return head_fail(msg, msg_cap, 400, "Malformed request line.");
    i++;
    size_t hdr0 = i;
    bool have_cl = false, have_te = false;
    unsigned long long cl = 0;
    while (i < n && h[i] != '\r' && h[i] != '\n') {
        size_t l0 = i;
        if (h[i] == ' ' || h[i] == '\t')
            return head_fail(msg, msg_cap, 400, "Header lines may not be folded (obsolete line folding).");
        while (i < n && is_tchar((unsigned char)h[i])) i++;
        size_t nl = i - l0;
        if (!nl || i >= n || h[i] != ':')
            return head_fail(msg, msg_cap, 400, "Malformed header line: expected 'Name: value'.");
        i++;
        while (i < n && (h[i] == ' ' || h[i] == '\t')) i++;
        size_t val0 = i;
        while (i < n && h[i] != '\r' && h[i] != '\n') {
            if (h[i] == 0) return head_fail(msg, msg_cap, 400, "A header value contains a NUL byte.");
            i++;
        }
        size_t ve = i;
        while (ve > val0 && (h[ve - 1] == ' ' || h[ve - 1] == '\t')) ve--;
        if (i < n && h[i] == '\r') i++;
        if (i >= n || h[i] != '\n') return head_fail(msg, msg_cap, 400, "Malformed header line.");
        i++;
        if (nl == 14 && !strncasecmp(h + l0, "Content-Length", 14)) {
            /* digits only, one value (a repeated header must repeat it):
             * anything else is how request smuggling starts */
            unsigned long long v = 0;
            size_t k = val0;
            if (k == ve) return head_fail(msg, msg_cap, 400, "Invalid Content-Length: empty.");
            for (; k < ve; k++) {
                if (h[k] < '0' || h[k] > '9' || k - val0 >= 18)
                    return head_fail(msg, msg_cap, 400, "Invalid Content-Length: expected a decimal number of bytes.");
                v = v * 10 + (unsigned)(h[k] - '0');
            }
            if (have_cl && v != cl)
                return head_fail(msg, msg_cap, 400, "Invalid Content-Length: given twice with different values.");
            have_cl = true;
            cl = v;
        } else if (nl == 17 && !strncasecmp(h + l0, "Transfer-Encoding", 17)) {
            if (have_te) return head_fail(msg, msg_cap, 400, "Transfer-Encoding given twice.");
            have_te = true;
            if (ve - val0 != 7 || strncasecmp(h + val0, "chunked", 7))
                return head_fail(msg, msg_cap, 501, "Only 'Transfer-Encoding: chunked' is supported.");
        }
    }
    if (i - hdr0 > max_headers) {
        snprintf(msg, msg_cap, "The request headers are %zu bytes; the limit is %zu bytes.", i - hdr0, max_headers);
        return 431;
    }
    if (have_cl && have_te)
        return head_fail(msg, msg_cap, 400, "A request may not have both Content-Length and Transfer-Encoding.");
    return 0;
}

bool http_head_chunked(const char *h, size_t n) {
    for (size_t i = 0; i + 18 <= n; i++)
        if ((i == 0 || h[i - 1] == '\n') && !strncasecmp(h + i, "Transfer-Encoding:", 18)) return true;
    return false;
}

/* Skips a line ending (CRLF or LF) at b[*i]: 1 done, 0 need more bytes, -1 not a line ending. */
static int skip_eol(const char *b, size_t n, size_t *i) {
    if (*i >= n) return 0;
    if (b[*i] == '\n') {
        (*i)++;
        return 1;
    }
    if (b[*i] != '\r') return -1;
    if (*i + 1 >= n) return 0;
    if (b[*i + 1] != '\n') return -1;
    *i += 2;
    return 1;
}

static int chunk_fail(char *msg, size_t cap, const char *what) {
    snprintf(msg, cap, "Malformed chunked body: %s.", what);
    return -1;
}

int http_chunked_scan(const char *b, size_t n, size_t *used, char *msg, size_t msg_cap) {
    size_t i = 0;
    *used = 0;
    for (;;) { /* a chunk */
        size_t d0 = i;
        unsigned long long size = 0;
        while (i < n && isxdigit((unsigned char)b[i])) {
            if (i - d0 >= 15) return chunk_fail(msg, msg_cap, "a chunk size longer than 15 hex digits");
            size = size * 16 + (unsigned)(isdigit((unsigned char)b[i]) ? b[i] - '0' : (b[i] | 0x20) - 'a' + 10);
            i++;
        }
        if (i >= n) return 0;
        if (i == d0) return chunk_fail(msg, msg_cap, "expected a chunk size in hex digits");
        if (b[i] == ';') return chunk_fail(msg, msg_cap, "chunk extensions are not supported");
        int e = skip_eol(b, n, &i);
        if (e <= 0) return e ? chunk_fail(msg, msg_cap, "a chunk size must end the line") : 0;
        if (!size) break;
        if (size > n - i) return 0; /* its bytes are still coming */
        i += (size_t)size;
        e = skip_eol(b, n, &i);
        if (e <= 0) return e ? chunk_fail(msg, msg_cap, "a chunk's bytes must be followed by a line end") : 0;
    }
    for (;;) { /* trailer lines, then the empty line */
        if (i >= n) return 0;
        if (b[i] == '\r' || b[i] == '\n') {
            int e = skip_eol(b, n, &i);
            if (e <= 0) return e ? chunk_fail(msg, msg_cap, "a bad line end after the last chunk") : 0;
            *used = i;
            return 1;
        }
        size_t l0 = i;
        while (i < n && is_tchar((unsigned char)b[i])) i++;
        if (i >= n) return 0;
        if (i == l0 || b[i] != ':') return chunk_fail(msg, msg_cap, "a trailer line must be 'Name: value'");
        while (i < n && b[i] != '\r' && b[i] != '\n') {
            if (b[i] == 0) return chunk_fail(msg, msg_cap, "a NUL byte in a trailer");
            i++;
        }
        int e = skip_eol(b, n, &i);
        if (e <= 0) return e ? chunk_fail(msg, msg_cap, "a bad line end in a trailer") : 0;
    }
}
