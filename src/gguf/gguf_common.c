/*
 * gguf_common.c - GGUF value type names/sizes, string helpers and the value
 * destructor shared by gguf_read.c and gguf_write.c.
 *
 * Thread safety: all functions are pure or only touch their arguments.
 */
#include "gguf/gguf_internal.h"

#include <stdlib.h>
#include <string.h>

const char *gguf_vtype_name(uint32_t vt) {
    static const char *const names[GGUF_VT_COUNT] = {
        [GGUF_VT_UINT8] = "uint8",     [GGUF_VT_INT8] = "int8",     [GGUF_VT_UINT16] = "uint16",
        [GGUF_VT_INT16] = "int16",     [GGUF_VT_UINT32] = "uint32", [GGUF_VT_INT32] = "int32",
        [GGUF_VT_FLOAT32] = "float32", [GGUF_VT_BOOL] = "bool",     [GGUF_VT_STRING] = "string",
        [GGUF_VT_ARRAY] = "array",     [GGUF_VT_UINT64] = "uint64", [GGUF_VT_INT64] = "int64",
        [GGUF_VT_FLOAT64] = "float64",
    };
    return vt < GGUF_VT_COUNT ? names[vt] : "?";
}

size_t gguf_vtype_size(uint32_t vt) {
    switch (vt) {
    case GGUF_VT_UINT8:
    case GGUF_VT_INT8:
    case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16:
    case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32:
    case GGUF_VT_INT32:
    case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64:
    case GGUF_VT_INT64:
    case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

char *gguf_str_dup(gguf_str s) {
    if (s.len >= SIZE_MAX) return NULL;
    char *p = malloc((size_t)s.len + 1);
    if (!p) return NULL;
    if (s.len) memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

void gguf_value_free(gguf_value *v, bool own_strings) {
    if (!v) return;
    if (v->type == GGUF_VT_STRING) {
        if (own_strings) free((void *)v->v.str.ptr);
    } else if (v->type == GGUF_VT_ARRAY) {
        gguf_array *a = &v->v.arr;
        if (a->elem_type == GGUF_VT_STRING && own_strings && a->data) {
            const gguf_str *s = a->data;
            for (uint64_t i = 0; i < a->n; i++) free((void *)s[i].ptr);
        } else if (a->elem_type == GGUF_VT_ARRAY && a->data) {
            gguf_value *sub = (gguf_value *)a->data;
            for (uint64_t i = 0; i < a->n; i++) gguf_value_free(&sub[i], own_strings);
        }
        free((void *)a->data);
    }
    memset(v, 0, sizeof *v);
}
