/*
 * weight.h - a view of a weight tensor in the model file.
 *
 * A vector (ne[1] == 1) or a row-major matrix of ne[1] rows of ne[0]
 * elements (ggml convention: ne[0] is contiguous), of any dtype.  Kernels
 * read rows through the dtype traits, so the model code never depends on the
 * storage type.
 */
#ifndef KITE_TENSOR_WEIGHT_H
#define KITE_TENSOR_WEIGHT_H

#include <stddef.h>
#include <stdint.h>

typedef struct weight {
    uint32_t type;    /* enum kite_dtype */
    int64_t ne[2];    /* ne[0] = columns (input dim), ne[1] = rows (output dim) */
    size_t row_bytes; /* bytes per row */
    const void *data; /* into the file image; NULL if absent (optional tensor) */
} weight;

#endif
