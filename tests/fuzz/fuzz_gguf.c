/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Parses the input with gguf_open_memory() and, when it is accepted, walks
 * every key/value pair (recursively into nested arrays, touching every
 * element), calls each typed getter on every key, looks every key and tensor
 * up by name and reads every tensor's first and last data byte: the reader's
 * contract is that all of this is in bounds once open succeeded.  Seeds are
 * in tests/fuzz/corpus/fuzz_gguf/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk(const gguf_value *v, int depth) {
    KITE_ASSERT(depth <= 8);
    if (v->type == GGUF_VT_STRING) {
        if (v->v.str.len) sink += (uint8_t)v->v.str.ptr[0] + (uint8_t)v->v.str.ptr[v->v.str.len - 1];
        return;
    }
    if (v->type != GGUF_VT_ARRAY) {
        sink += v->v.u8;
        return;
    }
    const gguf_array *a = &v->v.arr;
    for (uint64_t i = 0; i < a->n; i++) {
        switch (a->elem_type) {
        case GGUF_VT_STRING: {
            gguf_value s = {.type = GGUF_VT_STRING, .v.str = ((const gguf_str *)a->data)[i]};
            walk(&s, depth);
            break;
        }
        case GGUF_VT_ARRAY: walk(&((const gguf_value *)a->data)[i], depth + 1); break;
        case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: sink += ((const uint8_t *)a->data)[i]; break;
        case GGUF_VT_UINT16: case GGUF_VT_INT16: sink += ((const uint16_t *)a->data)[i]; break;
        case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: sink += ((const uint32_t *)a->data)[i]; break;
        default: sink += ((const uint64_t *)a->data)[i]; break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_ctx *g = NULL;
    if (gguf_open_memory(data, size, "fuzz.gguf", &g) != 0) {
        KITE_ASSERT(g == NULL && kite_last_error()[0] != '\0');
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        walk(&kv->value, 1);
        char *key = gguf_str_dup(kv->key);
        if (!key) continue;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        float f;
        bool b;
        gguf_str s;
        gguf_array a;
        (void)gguf_get_u32(g, key, &u32);
        (void)gguf_get_i32(g, key, &i32);
        (void)gguf_get_u64(g, key, &u64);
        (void)gguf_get_f32(g, key, &f);
        (void)gguf_get_bool(g, key, &b);
        (void)gguf_get_str(g, key, &s);
        (void)gguf_get_arr(g, key, GGUF_VT_COUNT, &a);
        (void)gguf_get_arr(g, key, GGUF_VT_STRING, &a);
        /* a key with an embedded NUL is found under its prefix, if at all */
        if (strlen(key) == kv->key.len) KITE_ASSERT(gguf_get(g, key) == &kv->value);
        free(key);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const uint8_t *p = t->data;
        KITE_ASSERT(t->nbytes > 0);
        sink += p[0] + p[t->nbytes - 1];
        char *name = gguf_str_dup(t->name);
        if (!name) continue;
        if (strlen(name) == t->name.len) KITE_ASSERT(gguf_find_tensor(g, name) == t);
        free(name);
    }
    gguf_close(g);
    return 0;
}
