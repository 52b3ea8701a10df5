/*
 * safetensors.h - reader for Hugging Face .safetensors files (single or sharded).
 *
 * DESIGN
 *   A .safetensors file is: an 8-byte little-endian header length N, N bytes
 *   of JSON (an object mapping tensor name -> {"dtype", "shape",
 *   "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
 *   strings), then the raw tensor bytes; offsets are relative to the first
 *   byte after the header.  st_parse() validates all of it against the
 *   buffer (untrusted input): header length within the file, JSON well
 *   formed, every field present with the right type, dtype known (F32, F16,
 *   BF16 are supported; others are reported as unsupported), at most 4 dims,
 *   byte size == product(shape) * element size with checked arithmetic,
 *   offsets inside the data section, no two tensors overlapping, no holes,
 *   no duplicate names.  After KITE_OK every tensor's data pointer is safe
 *   to read for nbytes.
 *
 *   st_model_open() opens a Hugging Face model directory: either
 *   model.safetensors, or model.safetensors.index.json whose "weight_map"
 *   names the shard of every tensor (each shard is mapped and parsed; the
 *   map and the shards must agree exactly).  Files are mmapped read-only.
 *
 * ERRORS
 *   One-line messages naming the file and the field, e.g.
 *   "m.safetensors: tensor 'w': data_offsets [0, 48] hold 48 bytes but F32 shape [4, 4] needs 64".
 *
 * OWNERSHIP / THREADS
 *   An st_model owns its mappings and tensor table; tensors borrow from it.
 *   Immutable after open: concurrent readers are fine.
 */
#ifndef KITE_TOOLS_HF_SAFETENSORS_H
#define KITE_TOOLS_HF_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 4
/* Largest JSON header accepted (the format's own reference reader uses 100 MB). */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct st_tensor {
    char *name;               /* owned, NUL-terminated */
    uint32_t dtype;           /* enum kite_dtype: F32, F16 or BF16 */
    uint32_t n_dims;          /* 0..ST_MAX_DIMS (0: a scalar) */
    int64_t shape[ST_MAX_DIMS]; /* row-major, shape[n_dims-1] contiguous (PyTorch order) */
    uint64_t nbytes;          /* bytes of data */
    const uint8_t *data;      /* points into the file image */
    const char *file;         /* file name it came from, for messages (borrowed from the owner) */
} st_tensor;

/* Parses and validates one safetensors image of size bytes.  On success
 * *out is an array of *n_out tensors (sorted by name, data pointing into buf)
 * to be released with st_tensors_free().  name is used in messages.  Returns
 * KITE_OK, KITE_E_FORMAT (malformed), KITE_E_UNSUPPORTED (dtype other than
 * F32/F16/BF16) or KITE_E_NOMEM; *out unchanged on error. */
int st_parse(const void *buf, size_t size, const char *name, st_tensor **out /* OUT */, size_t *n_out /* OUT */);
void st_tensors_free(st_tensor *t, size_t n);

/* A copy of untrusted text fit for a one-line message: at most 80 bytes,
 * control characters and bytes >= 0x7f shown as '?', "..." when cut.
 * Returns buf. */
#define ST_PRINTABLE_MAX 96
const char *st_printable(const char *s, char buf[ST_PRINTABLE_MAX]);

typedef struct st_model st_model;

/* Opens dir/model.safetensors.index.json (sharded) or dir/model.safetensors.
 * Returns KITE_OK, KITE_E_IO, KITE_E_NOT_FOUND (neither file), KITE_E_FORMAT,
 * KITE_E_UNSUPPORTED or KITE_E_NOMEM; *out unchanged on error. */
int st_model_open(const char *dir, st_model **out /* OUT */);
void st_model_free(st_model *m); /* NULL is a no-op */

size_t st_model_n_tensors(const st_model *m);
const st_tensor *st_model_tensor(const st_model *m, size_t i); /* sorted by name */
const st_tensor *st_model_find(const st_model *m, const char *name); /* NULL if absent; O(log n) */

#endif
