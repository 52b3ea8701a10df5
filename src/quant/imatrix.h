/*
 * imatrix.h - importance matrices: the mean square of every input channel of
 * every linear layer over a calibration text, in llama.cpp's file format, so
 * that `kite imatrix` files feed llama-quantize and llama-imatrix files feed
 * `kite quantize --imatrix` (docs/quantization/imatrix.md).
 *
 * FILE FORMAT (llama-imatrix of the Feb 2025 snapshot, little-endian)
 *   int32 n_entries (>= 1), then per entry:
 *     int32 len, char name[len]        the weight tensor ("blk.0.attn_q.weight")
 *     int32 ncall                      forward calls it saw (chunks)
 *     int32 nval, float values[nval]   sum(x^2) / count * ncall per column;
 *                                      experts of a 3-D tensor one after another
 *   then optionally: int32 chunks (the largest ncall), int32 len, char dataset[len].
 *   Readers divide values by ncall: what quantizers use is the mean square.
 *
 * DESIGN
 *   imatrix_parse() treats the bytes as untrusted (every length checked
 *   against the bytes left, names unique and non-empty, values finite and
 *   >= 0): a bad file is KITE_E_FORMAT naming the file, the entry and the
 *   field.  imatrix_collect() runs the model over the text in chunks of
 *   n_ctx tokens, each from an empty cache with its first token replaced by
 *   BOS (llama-imatrix's chunking), and accumulates x^2 in double through the
 *   forward-pass taps (model/context.h), one accumulator per tap point shared
 *   by the tensors that read the same input (q, k, v; gate, up, router), and
 *   per expert for the 3-D expert tensors (the rows routed to each).
 *
 * OWNERSHIP / THREAD SAFETY
 *   An imatrix owns its entries.  Read-only use from any thread; building
 *   one is single-threaded (the forward pass fans out to its own pool).
 */
#ifndef KITE_QUANT_IMATRIX_H
#define KITE_QUANT_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/progress.h"
#include "kite.h"

#define IMATRIX_NAME_MAX 4096 /* longest tensor name accepted */

typedef struct imatrix_entry {
    char *name;     /* tensor name */
    int32_t ncall;  /* chunks it saw */
    int32_t n;      /* values: ne[0] of the tensor (times n_expert for 3-D tensors) */
    float *values;  /* [n] as in the file: mean square * ncall */
    float *qw;      /* [n] the importance quantizers use: values / ncall (values when ncall is 0) */
} imatrix_entry;

typedef struct imatrix {
    imatrix_entry *e;
    int32_t n_entries;
    int32_t chunks;   /* the file's chunk count (0 when the file has no trailer) */
    char *dataset;    /* the calibration file's name from the trailer, or NULL */
} imatrix;

/* Parses an imatrix file's bytes; what names it in messages.  *out is the
 * caller's (imatrix_free).  Returns KITE_OK, KITE_E_FORMAT (message names
 * what, the entry and the field), KITE_E_NOMEM. */
int imatrix_parse(const uint8_t *buf, size_t len, const char *what, imatrix **out /* OUT */);
/* Reads and parses path.  KITE_E_IO when it cannot be read. */
int imatrix_read(const char *path, imatrix **out /* OUT */);
/* Writes m to path in the format above, through a temporary file renamed
 * at the end (removed on failure and on SIGINT/SIGTERM).  KITE_E_IO. */
int imatrix_write(const imatrix *m, const char *path);
void imatrix_free(imatrix *m); /* NULL is a no-op */

/* The entry called name, or NULL. */
const imatrix_entry *imatrix_find(const imatrix *m, const char *name);

typedef struct imatrix_params {
    int32_t n_ctx;         /* tokens per chunk (0: 512, llama-imatrix's default; capped at the model's) */
    int32_t n_chunks;      /* chunks to run (0: all the text gives) */
    bool process_output;   /* also collect output.weight (llama-imatrix --process-output) */
    int n_threads;         /* forward-pass threads (<= 0: the context default, all CPUs) */
    const char *dataset;   /* recorded in the trailer (the text's file name), may be NULL */
    FILE *log;             /* notes (tensors not collected), or NULL */
    core_progress progress; /* chunks done of the total, after each chunk */
} imatrix_params;

/* Collects the importance matrix of model (its GGUF tensor table names the
 * entries) over text[0..len).  *ppl gets the
 * perplexity of the second half of every chunk (llama-imatrix's estimate;
 * may be NULL).  Returns KITE_OK, KITE_E_ARG (text shorter than 2 chunks'
 * worth is fine; shorter than one chunk is not: the message gives the
 * token count), KITE_E_STATE (the architecture's forward pass has no taps),
 * or the loader's / context's status. */
int imatrix_collect(kite_model *model, const char *text, size_t len, const imatrix_params *p,
                    imatrix **out /* OUT */, double *ppl /* OUT, may be NULL */);

#endif
