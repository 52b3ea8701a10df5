/*
 * gguf.h - GGUF reader and writer (format versions 2 and 3, little-endian).
 *
 * DESIGN
 *   Reader: gguf_open() maps the file (or reads it into aligned heap memory),
 *   parses and validates the header, every key/value pair and the tensor
 *   table with checked arithmetic, and exposes them through the structs
 *   below.  Validation is complete at open time: once gguf_open() returned
 *   KITE_OK, every tensor's data lies inside the file, every string/array
 *   length is in bounds, no key or tensor name is duplicated, every tensor
 *   type is known and every tensor's byte size is consistent with its shape.
 *   Callers may therefore use the data pointers without further checks.
 *
 *   Strings (gguf_str) point into the mapped file and are NOT NUL-terminated.
 *   Arrays of scalars are copied into aligned memory owned by the gguf_ctx
 *   (metadata in the file is unaligned).  Arrays of strings are gguf_str
 *   arrays, nested arrays are gguf_value arrays, both owned by the gguf_ctx.
 *
 *   Writer: collects key/value pairs and tensors (data borrowed until write),
 *   then writes a GGUF v3 file with general.alignment (default 32) to a
 *   temporary file that is renamed over the destination on success, so an
 *   interrupted write never leaves a broken file.
 *
 * ERRORS
 *   Every failure returns a kite_status and sets kite_last_error() to a
 *   one-line message naming the file and the field, e.g.
 *   "x.gguf: kv[3] 'general.name': string length 4294967296 exceeds file size".
 *
 * THREAD SAFETY
 *   A gguf_ctx is immutable after open; concurrent readers are fine.
 */
#ifndef KITE_GGUF_H
#define KITE_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/progress.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* Metadata value types, as numbered in the file. Append-only. */
enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
};

const char *gguf_vtype_name(uint32_t vt); /* "uint32", ...; "?" if unknown */

typedef struct gguf_str {
    const char *ptr; /* not NUL-terminated; points into the file image (reader) */
    uint64_t len;    /* bytes */
} gguf_str;

typedef struct gguf_value gguf_value;

typedef struct gguf_array {
    uint32_t elem_type; /* enum gguf_vtype of the elements */
    uint64_t n;         /* element count */
    /* elem scalar: n packed elements (e.g. float[n]), aligned, owned by ctx;
     * GGUF_VT_STRING: gguf_str[n];  GGUF_VT_ARRAY: gguf_value[n] (each an array). */
    const void *data;
} gguf_array;

struct gguf_value {
    uint32_t type; /* enum gguf_vtype */
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        bool b;
        uint64_t u64;
        int64_t i64;
        double f64;
        gguf_str str;
        gguf_array arr;
    } v;
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;            /* 1..GGUF_MAX_DIMS */
    int64_t ne[GGUF_MAX_DIMS];  /* elements per dim, ne[0] contiguous; unused dims are 1 */
    uint32_t type;              /* enum kite_dtype (ggml type id) */
    uint64_t offset;            /* relative to the start of the data section */
    uint64_t nbytes;            /* size of the data */
    const void *data;           /* points into the file image */
} gguf_tensor;

typedef struct gguf_ctx {
    const char *path;           /* copy of the path, for messages */
    uint32_t version;           /* 2 or 3 */
    uint64_t n_kv;
    gguf_kv *kv;                /* [n_kv] */
    uint64_t n_tensors;
    gguf_tensor *tensors;       /* [n_tensors] */
    uint64_t alignment;         /* general.alignment or 32 */
    uint64_t data_offset;       /* file offset of the data section */
    const uint8_t *base;        /* whole file image */
    uint64_t size;              /* file size */
    void *priv;                 /* reader internals (mapping, arenas) */
} gguf_ctx;

typedef struct gguf_open_params {
    bool use_mmap;      /* true: mmap; false: read into 2 MiB-aligned anonymous memory */
} gguf_open_params;

/* Opens and fully validates path.  On success *out owns everything; release
 * with gguf_close().  On failure *out is unchanged and kite_last_error() says
 * what is wrong. params may be NULL (mmap). */
int gguf_open(const char *path, const gguf_open_params *params, gguf_ctx **out /* OUT */);
/* Same, for an image already in memory (used by tests and the fuzzer).  The
 * buffer is borrowed and must outlive the ctx.  name is used in messages. */
int gguf_open_memory(const void *buf, size_t size, const char *name, gguf_ctx **out /* OUT */);
void gguf_close(gguf_ctx *ctx); /* NULL is a no-op */
/* Where the file image lives: "heap" (read into anonymous, 2 MiB-aligned,
 * MADV_HUGEPAGE memory: use_mmap false, or a file under 64 bytes), "mmap"
 * (file mapping) or "memory" (gguf_open_memory).  Static string. */
const char *gguf_residency(const gguf_ctx *ctx);

/* What a model file looks like from its first bytes (gguf_sniff.c), for
 * messages that say more than "bad magic": the reader's magic error and the
 * llama2.c converter's header checks use it. */
enum gguf_sniff_kind {
    GGUF_SNIFF_UNKNOWN = 0,
    GGUF_SNIFF_GGUF,         /* "GGUF" magic */
    GGUF_SNIFF_TEXT,         /* printable ASCII / UTF-8 and whitespace only */
    GGUF_SNIFF_SPM,          /* a SentencePiece .model (protobuf ModelProto) */
    GGUF_SNIFF_ZIP,          /* a zip archive: PyTorch's .pt/.pth/.bin since 1.6 */
    GGUF_SNIFF_PICKLE,       /* a Python pickle: older PyTorch checkpoints */
    GGUF_SNIFF_SAFETENSORS,  /* u64 header length, then a JSON object */
    GGUF_SNIFF_LLAMA2C,      /* a llama2.c checkpoint (v1/v2 magic "ak42", or a plausible v0 header) */
    GGUF_SNIFF_LLAMA2C_TOK,  /* a llama2.c tokenizer.bin */
};
/* The kind of head[0..n) (the file's first bytes; 256 are plenty). */
int gguf_sniff(const void *head, size_t n);
/* "a text file", "a SentencePiece .model (protobuf)", ...; "" for UNKNOWN. */
const char *gguf_sniff_name(int kind);

/* ---- lookups (linear or hashed, O(1) amortised is not required) ---- */

/* Index of key, or -1. */
int64_t gguf_find_key(const gguf_ctx *ctx, const char *key);
const gguf_value *gguf_get(const gguf_ctx *ctx, const char *key); /* NULL if absent */
const gguf_tensor *gguf_find_tensor(const gguf_ctx *ctx, const char *name); /* NULL if absent */

/* Typed getters.  Return KITE_OK, KITE_E_NOT_FOUND (absent; *out unchanged,
 * message set naming the key) or KITE_E_FORMAT (present but wrong type or out
 * of range for the requested type; message names key and type).  Integer
 * getters accept any integer value type whose value fits. */
int gguf_get_u32(const gguf_ctx *ctx, const char *key, uint32_t *out);
int gguf_get_i32(const gguf_ctx *ctx, const char *key, int32_t *out);
int gguf_get_u64(const gguf_ctx *ctx, const char *key, uint64_t *out);
int gguf_get_f32(const gguf_ctx *ctx, const char *key, float *out); /* float32 or float64 */
int gguf_get_bool(const gguf_ctx *ctx, const char *key, bool *out);
int gguf_get_str(const gguf_ctx *ctx, const char *key, gguf_str *out);
/* Array whose elements have type elem_type (any, if elem_type == GGUF_VT_COUNT). */
int gguf_get_arr(const gguf_ctx *ctx, const char *key, uint32_t elem_type, gguf_array *out);

/* Compares a gguf_str with a NUL-terminated string. */
bool gguf_str_eq(gguf_str s, const char *cstr);
/* Copies s into a new NUL-terminated heap string (caller frees), NULL on OOM. */
char *gguf_str_dup(gguf_str s);

/* ---- writer -------------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void); /* NULL on OOM */
void gguf_writer_free(gguf_writer *w);

/* Setters copy key and value.  Setting an existing key replaces its value in
 * place (order of first insertion is kept).  Return KITE_OK or KITE_E_NOMEM /
 * KITE_E_ARG. */
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of n scalars of elem_type, packed as in the file. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
/* Array of n strings; lens may be NULL for NUL-terminated strings. */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                            const uint64_t *lens, uint64_t n);
/* Any value, deep-copied (used to copy metadata, incl. nested arrays, from a
 * reader ctx). */
int gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v);

/* Adds a tensor; name is copied, data is borrowed until gguf_writer_write()
 * returns.  ne has n_dims entries.  KITE_E_ARG on duplicate name, bad dims,
 * unknown type or a row length that is not a multiple of the block size. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                           uint32_t n_dims, const int64_t *ne, const void *data);

/* Streaming source of a tensor's data: writes rows [row0, row0 + n_rows) of
 * the tensor (a row is ne[0] elements, dtype_row_size(type, ne[0]) bytes;
 * rows are counted over ne[1]*ne[2]*ne[3]) into dst.  Called during
 * gguf_writer_write() in increasing row order.  Returns KITE_OK, or a
 * status with kite_last_error() set, which aborts the write (no file is
 * left behind) and is returned by gguf_writer_write(). */
typedef int (*gguf_tensor_fill_fn)(void *user, int64_t row0, int64_t n_rows, void *dst);

/* Like gguf_writer_add_tensor, but the data is produced by fill at write
 * time, a few MiB at a time, so files larger than memory can be written.
 * user is borrowed until gguf_writer_write() returns. */
int gguf_writer_add_tensor_cb(gguf_writer *w, const char *name, uint32_t type,
                              uint32_t n_dims, const int64_t *ne, gguf_tensor_fill_fn fill, void *user);

/* Progress of gguf_writer_write: reported after every tensor and every
 * filled chunk, in bytes of tensor data written out of the total (the
 * header not counted).  prog is copied; a zero one reports nothing. */
void gguf_writer_set_progress(gguf_writer *w, core_progress prog);

/* Writes the file (GGUF v3).  Writes to "<path>.tmp.<pid>.<n>" (removed on SIGINT/SIGTERM once
 * tmpf_install_signal_handlers ran, core/tmpfile.h) then renames. */
int gguf_writer_write(gguf_writer *w, const char *path);

#endif
