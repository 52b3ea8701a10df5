/*
 * gguf_write.c - GGUF v3 writer.
 *
 * DESIGN
 *   The writer keeps deep copies of the key/value pairs (in insertion order;
 *   setting an existing key replaces the value in place) and a table of
 *   tensors whose data is borrowed until gguf_writer_write().  Writing lays
 *   the file out the way llama.cpp does: header, kvs, tensor infos, zero
 *   padding to the alignment, then each tensor's data followed by zero
 *   padding to the alignment; offsets are assigned sequentially in insertion
 *   order.  The alignment is general.alignment if the caller set it (it must
 *   be a uint32 power of two), else 32, and general.alignment is written only
 *   when set.  Because the layout is a pure function of the contents,
 *   read -> copy every kv and tensor -> write reproduces a file written by
 *   this writer byte for byte.
 *
 *   The output goes to "<path>.tmp.<pid>.<n>" (core/tmpfile.h: unique, and
 *   removed on SIGINT/SIGTERM), which is renamed over path on
 *   success and unlinked on any failure.
 *
 *   Tensors added with gguf_writer_add_tensor_cb() have no data until write
 *   time: the writer asks their fill callback for runs of whole rows into a
 *   4 MiB buffer, so a file much larger than memory (a 27 GB F32 7B model
 *   from `kite synth`) is streamed out with bounded memory.
 *
 * OWNERSHIP / THREAD SAFETY
 *   The writer owns its key strings, values and tensor names; tensor data
 *   and fill callbacks' user pointers are borrowed.  A writer must be used
 *   by one thread at a time.
 */
#include "core/tmpfile.h"
#include "gguf/gguf_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "tensor/dtype.h"

typedef struct wkv {
    char *key;        /* owned, NUL-terminated */
    gguf_value value; /* owned deep copy (strings NUL-terminated too) */
} wkv;

typedef struct wtensor {
    char *name;                /* owned */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;             /* enum kite_dtype */
    uint64_t nbytes;
    const void *data;          /* borrowed; NULL (and no fill) writes zeros */
    gguf_tensor_fill_fn fill;  /* streaming source (gguf_writer_add_tensor_cb), or NULL */
    void *fill_user;           /* borrowed, passed to fill */
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    core_progress progress;    /* gguf_writer_set_progress; zero: none */
};

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_set_progress(gguf_writer *w, core_progress prog) {
    if (w) w->progress = prog;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        gguf_value_free(&w->kv[i].value, true);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w);
}

/* ---- deep copy of values ------------------------------------------------ */

static int copy_str(gguf_str *dst, const char *p, uint64_t len) {
    if (len >= SIZE_MAX || (!p && len)) return KITE_E_ARG;
    char *s = malloc((size_t)len + 1);
    if (!s) return KITE_E_NOMEM;
    if (len) memcpy(s, p, (size_t)len);
    s[len] = '\0';
    dst->ptr = s;
    dst->len = len;
    return KITE_OK;
}

/* Deep-copies src into dst (zeroed by the caller); on failure dst holds what
 * was copied so far and must be released with gguf_value_free(dst, true). */
static int copy_value(gguf_value *dst, const gguf_value *src, int depth) {
    if (src->type >= GGUF_VT_COUNT) return KITE_E_ARG;
    if (src->type == GGUF_VT_STRING) {
        dst->type = GGUF_VT_STRING;
        return copy_str(&dst->v.str, src->v.str.ptr, src->v.str.len);
    }
    if (src->type != GGUF_VT_ARRAY) {
        *dst = *src;
        return KITE_OK;
    }
    const gguf_array *a = &src->v.arr;
    if (depth > GGUF_MAX_DEPTH || a->elem_type >= GGUF_VT_COUNT || (a->n && !a->data)) return KITE_E_ARG;
    dst->type = GGUF_VT_ARRAY;
    dst->v.arr.elem_type = a->elem_type;
    dst->v.arr.n = 0;
    dst->v.arr.data = NULL;
    if (a->n == 0) return KITE_OK;
    size_t esz = gguf_vtype_size(a->elem_type);
    size_t each = esz ? esz : a->elem_type == GGUF_VT_STRING ? sizeof(gguf_str) : sizeof(gguf_value);
    if (a->n > SIZE_MAX / each) return KITE_E_NOMEM;
    if (esz) {
        void *d = malloc((size_t)a->n * esz);
        if (!d) return KITE_E_NOMEM;
        memcpy(d, a->data, (size_t)a->n * esz);
        dst->v.arr.data = d;
        dst->v.arr.n = a->n;
        if (a->elem_type == GGUF_VT_BOOL)
            for (uint64_t i = 0; i < a->n; i++)
                if (((const uint8_t *)d)[i] > 1) return KITE_E_ARG;
        return KITE_OK;
    }
    void *d = calloc((size_t)a->n, each);
    if (!d) return KITE_E_NOMEM;
    dst->v.arr.data = d;
    dst->v.arr.n = a->n; /* zeroed entries are safe to free */
    for (uint64_t i = 0; i < a->n; i++) {
        int rc;
        if (a->elem_type == GGUF_VT_STRING) {
            const gguf_str *s = &((const gguf_str *)a->data)[i];
            rc = copy_str(&((gguf_str *)d)[i], s->ptr, s->len);
        } else {
            const gguf_value *sv = &((const gguf_value *)a->data)[i];
            if (sv->type != GGUF_VT_ARRAY) return KITE_E_ARG;
            rc = copy_value(&((gguf_value *)d)[i], sv, depth + 1);
        }
        if (rc) return rc;
    }
    return KITE_OK;
}

static int set_error(int rc, const char *key) {
    if (rc == KITE_E_NOMEM) return err_set(rc, "gguf writer: key '%s': out of memory", key ? key : "");
    return err_set(rc, "gguf writer: key '%s': invalid value", key ? key : "");
}

/* Stores a deep copy of v under key (replacing an existing value in place). */
static int set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    if (!w || !key || !v) return err_set(KITE_E_ARG, "gguf writer: NULL argument");
    gguf_value copy;
    memset(&copy, 0, sizeof copy);
    int rc = copy_value(&copy, v, 1);
    if (rc) {
        gguf_value_free(&copy, true);
        return set_error(rc, key);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            gguf_value_free(&w->kv[i].value, true);
            w->kv[i].value = copy;
            return KITE_OK;
        }
    }
    char *k = strdup(key);
    if (!k) goto nomem;
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) goto nomem;
        w->kv = nk;
        w->cap_kv = cap;
    }
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].value = copy;
    w->n_kv++;
    return KITE_OK;
nomem:
    free(k);
    gguf_value_free(&copy, true);
    return set_error(KITE_E_NOMEM, key);
}

int gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v) { return set_value(w, key, v); }

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t x) {
    gguf_value v = {.type = GGUF_VT_UINT32, .v.u32 = x};
    return set_value(w, key, &v);
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t x) {
    gguf_value v = {.type = GGUF_VT_INT32, .v.i32 = x};
    return set_value(w, key, &v);
}

int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t x) {
    gguf_value v = {.type = GGUF_VT_UINT64, .v.u64 = x};
    return set_value(w, key, &v);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float x) {
    gguf_value v = {.type = GGUF_VT_FLOAT32, .v.f32 = x};
    return set_value(w, key, &v);
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool x) {
    gguf_value v = {.type = GGUF_VT_BOOL, .v.b = x};
    return set_value(w, key, &v);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s) {
    if (!s) return err_set(KITE_E_ARG, "gguf writer: key '%s': NULL string", key ? key : "");
    gguf_value v = {.type = GGUF_VT_STRING, .v.str = {s, strlen(s)}};
    return set_value(w, key, &v);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    if (gguf_vtype_size(elem_type) == 0)
        return err_set(KITE_E_ARG, "gguf writer: key '%s': element type %s is not a scalar type", key ? key : "",
                       gguf_vtype_name(elem_type));
    gguf_value v = {.type = GGUF_VT_ARRAY, .v.arr = {elem_type, n, data}};
    return set_value(w, key, &v);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                            uint64_t n) {
    if (n && !strs) return err_set(KITE_E_ARG, "gguf writer: key '%s': NULL strings", key ? key : "");
    if (n > SIZE_MAX / sizeof(gguf_str)) return set_error(KITE_E_NOMEM, key);
    gguf_str *tmp = n ? malloc((size_t)n * sizeof *tmp) : NULL;
    if (n && !tmp) return set_error(KITE_E_NOMEM, key);
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(tmp);
            return err_set(KITE_E_ARG, "gguf writer: key '%s': string %" PRIu64 " is NULL", key ? key : "", i);
        }
        tmp[i].ptr = strs[i];
        tmp[i].len = lens ? lens[i] : strlen(strs[i]);
    }
    gguf_value v = {.type = GGUF_VT_ARRAY, .v.arr = {GGUF_VT_STRING, n, tmp}};
    int rc = set_value(w, key, &v);
    free(tmp);
    return rc;
}

/* ---- tensors -------------------------------------------------------------- */

/* Validates and appends a tensor with either borrowed data or a fill callback. */
static int add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                      const void *data, gguf_tensor_fill_fn fill, void *fill_user) {
    if (!w || !name || !ne) return err_set(KITE_E_ARG, "gguf writer: NULL argument");
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(KITE_E_ARG, "gguf writer: tensor '%s': n_dims %" PRIu32 " out of range 1..%d", name, n_dims,
                       GGUF_MAX_DIMS);
    const dtype_traits *tr = dtype_get(type);
    if (!tr) return err_set(KITE_E_ARG, "gguf writer: tensor '%s': unknown tensor type %" PRIu32, name, type);
    wtensor t = {.n_dims = n_dims, .type = type, .data = data, .fill = fill, .fill_user = fill_user};
    int64_t n_elem = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0 || __builtin_mul_overflow(n_elem, t.ne[d], &n_elem))
            return err_set(KITE_E_ARG, "gguf writer: tensor '%s': bad ne[%" PRIu32 "] = %" PRId64, name, d, t.ne[d]);
    }
    if (t.ne[0] % tr->block_size != 0)
        return err_set(KITE_E_ARG, "gguf writer: tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId32,
                       name, t.ne[0], tr->name, tr->block_size);
    uint64_t nb = (uint64_t)(t.ne[0] / tr->block_size), extra = 0;
    if (__builtin_mul_overflow(nb, (uint64_t)tr->type_size, &nb) || __builtin_mul_overflow(nb, (uint64_t)t.ne[1], &nb) ||
        __builtin_mul_overflow(nb, (uint64_t)t.ne[2], &nb) || __builtin_mul_overflow(nb, (uint64_t)t.ne[3], &nb) ||
        /* kite row-scaled types (dtype.h row_extra): a header per row */
        __builtin_mul_overflow((uint64_t)tr->row_extra, (uint64_t)t.ne[1], &extra) ||
        __builtin_mul_overflow(extra, (uint64_t)t.ne[2], &extra) || __builtin_mul_overflow(extra, (uint64_t)t.ne[3], &extra) ||
        __builtin_add_overflow(nb, extra, &nb))
        return err_set(KITE_E_ARG, "gguf writer: tensor '%s': data size overflows", name);
    t.nbytes = nb;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return err_set(KITE_E_ARG, "gguf writer: tensor '%s': duplicate name", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        wtensor *nt = realloc(w->tensors, cap * sizeof *nt);
        if (!nt) return err_set(KITE_E_NOMEM, "gguf writer: tensor '%s': out of memory", name);
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    t.name = strdup(name);
    if (!t.name) return err_set(KITE_E_NOMEM, "gguf writer: tensor '%s': out of memory", name);
    w->tensors[w->n_tensors++] = t;
    return KITE_OK;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                           const void *data) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}

int gguf_writer_add_tensor_cb(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                              gguf_tensor_fill_fn fill, void *user) {
    if (!fill) return err_set(KITE_E_ARG, "gguf writer: tensor '%s': NULL fill callback", name ? name : "?");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, user);
}

/* ---- output ---------------------------------------------------------------- */

typedef struct out {
    FILE *f;
    uint64_t pos; /* bytes written so far */
    bool err;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->err || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->err = true;
    o->pos += n;
}

static void put_u32(out *o, uint32_t x) {
    uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    put(o, b, 4);
}

static void put_u64(out *o, uint64_t x) {
    put_u32(o, (uint32_t)x);
    put_u32(o, (uint32_t)(x >> 32));
}

static void put_str(out *o, gguf_str s) {
    put_u64(o, s.len);
    put(o, s.ptr, (size_t)s.len);
}

static void put_zeros(out *o, uint64_t n) {
    static const uint8_t zeros[256];
    while (n > 0 && !o->err) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        put(o, zeros, k);
        n -= k;
    }
}

static void put_pad(out *o, uint64_t align) { put_zeros(o, (align - o->pos % align) % align); }

/* Streams a callback tensor: asks fill for runs of whole rows (about
 * FILL_CHUNK_BYTES at a time) into one reusable buffer and writes them.
 * Returns KITE_OK, the callback's status, or KITE_E_NOMEM; I/O errors are
 * left in o->err. */
#define FILL_CHUNK_BYTES ((size_t)4 << 20)
static int put_filled(out *o, const wtensor *t, const core_progress *prog, uint64_t done0, uint64_t total) {
    const size_t row_bytes = dtype_row_size(t->type, t->ne[0]);
    const int64_t n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    int64_t chunk = row_bytes >= FILL_CHUNK_BYTES ? 1 : (int64_t)(FILL_CHUNK_BYTES / row_bytes);
    if (chunk > n_rows) chunk = n_rows;
    void *buf = malloc((size_t)chunk * row_bytes);
    if (!buf) return err_set(KITE_E_NOMEM, "gguf writer: tensor '%s': out of memory for a %zu-byte chunk", t->name,
                             (size_t)chunk * row_bytes);
    int rc = KITE_OK;
    for (int64_t r = 0; r < n_rows && !o->err; r += chunk) {
        int64_t n = n_rows - r < chunk ? n_rows - r : chunk;
        if ((rc = t->fill(t->fill_user, r, n, buf)) != KITE_OK) break;
        put(o, buf, (size_t)n * row_bytes);
        core_progress_report(prog, done0 + (uint64_t)(r + n) * row_bytes, total, NULL);
    }
    free(buf);
    return rc;
}

/* Writes a value body (no type tag for array elements; the caller writes the tag). */
static void put_value(out *o, const gguf_value *v) {
    size_t sz = gguf_vtype_size(v->type);
    if (sz) {
        uint8_t b[8];
        uint64_t bits = 0;
        switch (v->type) {
        case GGUF_VT_UINT8: bits = v->v.u8; break;
        case GGUF_VT_INT8: bits = (uint8_t)v->v.i8; break;
        case GGUF_VT_UINT16: bits = v->v.u16; break;
        case GGUF_VT_INT16: bits = (uint16_t)v->v.i16; break;
        case GGUF_VT_UINT32: bits = v->v.u32; break;
        case GGUF_VT_INT32: bits = (uint32_t)v->v.i32; break;
        case GGUF_VT_FLOAT32: {
            uint32_t w;
            memcpy(&w, &v->v.f32, 4);
            bits = w;
            break;
        }
        case GGUF_VT_BOOL: bits = v->v.b ? 1 : 0; break;
        case GGUF_VT_UINT64: bits = v->v.u64; break;
        case GGUF_VT_INT64: bits = (uint64_t)v->v.i64; break;
        case GGUF_VT_FLOAT64: memcpy(&bits, &v->v.f64, 8); break;
        default: KITE_ASSERT(0);
        }
        for (size_t i = 0; i < sz; i++) b[i] = (uint8_t)(bits >> (8 * i));
        put(o, b, sz);
        return;
    }
    if (v->type == GGUF_VT_STRING) {
        put_str(o, v->v.str);
        return;
    }
    KITE_ASSERT(v->type == GGUF_VT_ARRAY);
    const gguf_array *a = &v->v.arr;
    put_u32(o, a->elem_type);
    put_u64(o, a->n);
    size_t esz = gguf_vtype_size(a->elem_type);
    if (esz) {
        put(o, a->data, (size_t)(a->n * esz)); /* packed little-endian in memory */
    } else if (a->elem_type == GGUF_VT_STRING) {
        for (uint64_t i = 0; i < a->n; i++) put_str(o, ((const gguf_str *)a->data)[i]);
    } else {
        for (uint64_t i = 0; i < a->n; i++) put_value(o, &((const gguf_value *)a->data)[i]);
    }
}

/* Alignment from general.alignment (validated) or the default. */
static int writer_alignment(const gguf_writer *w, uint64_t *align) {
    *align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        const gguf_value *v = &w->kv[i].value;
        if (v->type != GGUF_VT_UINT32 || v->v.u32 == 0 || (v->v.u32 & (v->v.u32 - 1)) != 0)
            return err_set(KITE_E_ARG, "gguf writer: key 'general.alignment': must be a uint32 power of two");
        *align = v->v.u32;
    }
    return KITE_OK;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    if (!w || !path) return err_set(KITE_E_ARG, "gguf writer: NULL argument");
    uint64_t align;
    int rc = writer_alignment(w, &align);
    if (rc) return rc;

    size_t tlen = strlen(path) + 48;
    char *tmp = malloc(tlen);
    if (!tmp) return err_set(KITE_E_NOMEM, "%s: out of memory", path);
    tmpf_name(tmp, tlen, path, "tmp"); /* fits: tlen leaves room for the tag, pid and counter */
    const int slot = tmpf_register(tmp); /* removed on SIGINT/SIGTERM (core/tmpfile.h) */
    out o = {.f = fopen(tmp, "wb")};
    if (!o.f) {
        rc = err_set(KITE_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        tmpf_unregister(slot);
        free(tmp);
        return rc;
    }

    put(&o, GGUF_MAGIC, 4);
    put_u32(&o, 3);
    put_u64(&o, w->n_tensors);
    put_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        gguf_str k = {w->kv[i].key, strlen(w->kv[i].key)};
        put_str(&o, k);
        put_u32(&o, w->kv[i].value.type);
        put_value(&o, &w->kv[i].value);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        gguf_str nm = {t->name, strlen(t->name)};
        put_str(&o, nm);
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
        put_u32(&o, t->type);
        put_u64(&o, off);
        uint64_t padded = t->nbytes + (align - t->nbytes % align) % align;
        if (__builtin_add_overflow(off, padded, &off)) {
            o.err = true;
            errno = EFBIG;
        }
    }
    put_pad(&o, align);
    int fill_rc = KITE_OK;
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < w->n_tensors; i++) total += w->tensors[i].nbytes;
    for (size_t i = 0; i < w->n_tensors && !o.err && fill_rc == KITE_OK; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->fill)
            fill_rc = put_filled(&o, t, &w->progress, done, total);
        else if (t->data)
            put(&o, t->data, (size_t)t->nbytes);
        else
            put_zeros(&o, t->nbytes);
        put_pad(&o, align);
        done += t->nbytes;
        core_progress_report(&w->progress, done, total, NULL);
    }

    if (fflush(o.f) != 0) o.err = true;
    int saved = errno;
    if (fclose(o.f) != 0 && !o.err) {
        o.err = true;
        saved = errno;
    }
    if (fill_rc != KITE_OK) {
        rc = fill_rc; /* the callback (or put_filled) set the message */
        goto fail;
    }
    if (o.err) {
        rc = err_set(KITE_E_IO, "%s: write failed: %s", tmp, strerror(saved));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = err_set(KITE_E_IO, "%s: cannot rename %s: %s", path, tmp, strerror(errno));
        goto fail;
    }
    tmpf_unregister(slot);
    free(tmp);
    return KITE_OK;
fail:
    unlink(tmp);
    tmpf_unregister(slot);
    free(tmp);
    return rc;
}
