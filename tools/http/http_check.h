/*
 * http_check.h - pure checks and repairs of untrusted HTTP bytes for
 * `kite serve` (issue 23): UTF-8 repair and character-safe truncation of
 * what goes into response bodies, the JSON `\u0000` scan, and the
 * Content-Type, Host and Origin matching of the browser-facing checks, and
 * the request-head checks of the gate (gate.c).
 *
 * THREADS
 *   Pure functions of their arguments; any thread.  None allocates except
 *   http_utf8_sanitize.
 */
#ifndef KITE_TOOLS_HTTP_CHECK_H
#define KITE_TOOLS_HTTP_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* true if s[0..n) is well-formed UTF-8 (Unicode's table: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
bool http_utf8_valid(const char *s, size_t n);

/* A copy of s[0..n) in which every ill-formed sequence (its maximal subpart,
 * as Unicode recommends) is replaced by U+FFFD.  malloc'd, NUL-terminated;
 * *out_len gets its length.  NULL on out of memory.  Cost: O(n). */
char *http_utf8_sanitize(const char *s, size_t n, size_t *out_len /* OUT */);

/* The longest prefix of s[0..n) of at most max bytes that does not end
 * inside a well-formed character (ill-formed bytes count as one byte each). */
size_t http_utf8_prefix(const char *s, size_t n, size_t max);

/* Copies the NUL-terminated src into dst (cap >= 1 bytes), truncated with
 * http_utf8_prefix so that no character is split. */
void http_utf8_copy(char *dst, size_t cap, const char *src);

/* true if a JSON text contains the escape \u0000 inside a string (cJSON
 * would end the C string there).  Scans strings and escapes only; any other
 * JSON error is left to the parser.  Cost: O(n). */
bool http_json_has_nul(const char *s, size_t n);

/* true if a Content-Type value is application/json, any letter case, alone
 * or followed by parameters ("application/json; charset=utf-8"). */
bool http_ctype_is_json(const char *ctype);

/* true if name (no port) equals one entry of the comma-separated list,
 * ignoring letter case and white space around entries; an entry "*" matches
 * everything.  NULL or "" list matches nothing. */
bool http_list_has(const char *list, const char *name, size_t name_len);

/* Splits a Host header value into its host part: "h:port" -> "h",
 * "[::1]:8080" -> "[::1]", "h" -> "h".  Sets *len to the host part's length
 * and returns false for an empty or malformed value (bad port, junk after
 * "]", white space or control bytes). */
bool http_host_name(const char *host, size_t *len /* OUT */);

/* true if the Host header value names an allowed host: the built-in
 * loopback names (localhost, 127.0.0.1, [::1]), bound (the bound address,
 * may be NULL; an IPv6 address given without brackets matches "[addr]"), or
 * an entry of extra (http_list_has; "*" allows any well-formed Host). */
bool http_host_allowed(const char *host, const char *bound, const char *extra);

/* Length of the request head at the start of h[0..n) - through its blank
 * line (CRLF CRLF, or LF LF as RFC 9112 tolerates) - or 0 if it has not
 * ended yet.  Cost: O(n). */
size_t http_head_end(const char *h, size_t n);

/* The checks a complete request head h[0..n) (http_head_end bytes) must
 * pass before libmicrohttpd parses it: a request line "METHOD TARGET
 * HTTP/1.x" (505 for another HTTP version, 414 for a target over max_uri
 * bytes), header lines "Name: value" (no folding, no NUL), at most
 * max_headers bytes of them (431), Content-Length a decimal number of at
 * most 18 digits and, if repeated, the same (400), Transfer-Encoding only
 * "chunked" (501) and never with Content-Length (400: request smuggling).
 * Returns 0 if the head may go on, else the HTTP status, with a message in
 * msg[0..msg_cap).  Cost: O(n). */
int http_head_check(const char *h, size_t n, size_t max_uri, size_t max_headers, char *msg, size_t msg_cap);

/* true if a head h[0..n) that passed http_head_check has a Transfer-Encoding
 * header (then "chunked"). */
bool http_head_chunked(const char *h, size_t n);

/* Scans a chunked body b[0..n) (the bytes after the head) by the rules
 * libmicrohttpd 0.9.75 reads it with, so that the gate can refuse what
 * libmicrohttpd would answer with HTML: each chunk a size of 1-15 hex digits
 * ended by CRLF or LF (no chunk extensions: 0.9.75 refuses them), that many
 * bytes, CRLF or LF; after the 0 chunk, trailer lines "Name: value" and an
 * empty line.  Returns 1 when the body is complete (*used = its length), 0
 * when what is there is valid but incomplete, -1 when malformed (a message
 * in msg[0..msg_cap)).  Cost: O(n) plus the chunks skipped. */
int http_chunked_scan(const char *b, size_t n, size_t *used /* OUT */, char *msg, size_t msg_cap);

#endif
