/*
 * gguf_internal.h - helpers shared by the GGUF reader and writer (not an API
 * for other modules: include gguf/gguf.h instead).
 *
 * Holds the fixed sizes of metadata value types, the nesting limit for
 * arrays, and the value destructor used by both sides (a gguf_value whose
 * arrays were allocated by this module owns them recursively).
 */
#ifndef KITE_GGUF_INTERNAL_H
#define KITE_GGUF_INTERNAL_H

#include "gguf/gguf.h"

/* Deepest allowed array nesting: a top-level array is depth 1. */
#define GGUF_MAX_DEPTH 8

/* Bytes of one element of a scalar value type in the file (bool: 1);
 * 0 for string, array and unknown types. */
size_t gguf_vtype_size(uint32_t vt);

/* Frees the arrays a value owns (recursively; for string arrays only the
 * gguf_str table, not the bytes, when own_strings is false).  The value
 * itself is not freed. */
void gguf_value_free(gguf_value *v, bool own_strings);

#endif
