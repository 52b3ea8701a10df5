/*
 * unicode.h - the Unicode helpers of the byte-level BPE tokenizer: GPT-2's
 * byte <-> printable-character table, UTF-8 encode/decode of one code point,
 * and NFC normalisation (through utf8proc).
 *
 * THREAD SAFETY
 *   Pure functions over constant tables; reentrant.
 */
#ifndef KITE_TOKENIZER_UNICODE_H
#define KITE_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* GPT-2's bytes_to_unicode(): byte b stands for this code point in the
 * vocabulary's piece texts.  The printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF map to themselves; the other 68 get U+0100, U+0101, ... in
 * byte order (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ'). */
uint32_t unicode_byte_to_cp(uint8_t b);

/* The inverse: the byte that code point cp stands for, or -1. */
int unicode_cp_to_byte(uint32_t cp);

/* Writes cp (<= U+10FFFF) as UTF-8 into d (>= 4 bytes); returns the length. */
size_t unicode_put_utf8(uint32_t cp, char *d);

/* Decodes the well-formed character at s[0..n) into *cp and returns its byte
 * length, or 0 if s does not start with a well-formed character. */
size_t unicode_get_utf8(const uint8_t *s, size_t n, uint32_t *cp);

/* NFC of s[0..n): each maximal well-formed UTF-8 run is normalised (utf8proc,
 * stable composition); ill-formed bytes are copied unchanged.  *out is
 * malloc'd (NUL-terminated; free() it) with length *out_len.  KITE_OK or
 * KITE_E_NOMEM. */
int unicode_nfc(const char *s, size_t n, char **out /* OUT */, size_t *out_len /* OUT */);

#endif
