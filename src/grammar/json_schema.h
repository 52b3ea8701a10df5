/*
 * json_schema.h - JSON Schema to GBNF, for structured output (docs/grammar.md, "JSON Schema").
 *
 * DESIGN
 *   grammar_json_schema_to_gbnf() parses a schema (its own small strict JSON reader: the
 *   library does not depend on cJSON) and writes a GBNF grammar whose strings are exactly
 *   the compact-or-spaced JSON documents the schema accepts, within the subset below.
 *   Anything outside the subset is an error naming the keyword and where it is, never a
 *   looser grammar: a client that asked for a constraint gets it or a clear refusal.
 *
 *   Supported: type (one or a list), enum, const, anyOf, oneOf (as anyOf), allOf with one
 *   member, $ref to a local JSON pointer (#, #/$defs/..., #/definitions/...; recursion
 *   allowed), properties / required / additionalProperties (false when absent and
 *   properties are given, as llama.cpp does; true or a schema allows more keys after the
 *   declared ones), items / prefixItems / minItems / maxItems, minLength / maxLength,
 *   format date, time, date-time, uuid, integer minimum / maximum / exclusive bounds,
 *   number minimum 0, nullable; annotations (title, description, default, examples, ...)
 *   are ignored.
 *
 *   Numbers are bounded (at most 16 integer digits, 16 fraction digits, 3 exponent digits)
 *   and whitespace between tokens is one space or a newline and up to 4 spaces or tabs
 *   (llama.cpp allows 20; outlines one space), so a sampled output cannot grow without end
 *   inside a number or between tokens and a bounded schema has a short bounded output; the
 *   root has no trailing whitespace, so the grammar is finished right after the closing
 *   bracket.
 *
 * THREAD SAFETY
 *   Pure functions; no global state.
 */
#ifndef KITE_GRAMMAR_JSON_SCHEMA_H
#define KITE_GRAMMAR_JSON_SCHEMA_H

#include <stddef.h>

/* Converts schema (len bytes of JSON) to GBNF text with start rule "root".  KITE_OK with
 * *out a malloc'ed NUL-terminated string (free it); KITE_E_FORMAT for invalid JSON or a
 * keyword with a value of the wrong kind, KITE_E_UNSUPPORTED for a keyword or value
 * outside the subset (the message names it and its JSON pointer, e.g.
 * `json_schema: #/properties/name: unsupported keyword "pattern"`) or a $ref cycle that
 * reaches itself before matching a character (left recursion), KITE_E_NOT_FOUND for a
 * $ref that does not resolve, KITE_E_RANGE for bounds above 4096 or integers beyond
 * +-10^15, KITE_E_NOMEM.  *out is unchanged on error. */
int grammar_json_schema_to_gbnf(const char *schema, size_t len, char **out /* OUT */);

/* The GBNF of any JSON object (`kite run --json`, response_format json_object), with the
 * same bounded numbers and whitespace.  Static storage. */
const char *grammar_json_object_gbnf(void);

#endif
