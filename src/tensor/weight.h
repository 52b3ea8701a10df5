/*
 * weight.h - a view of a weight tensor in the model file.
 *
 * A vector (ne[1] == 1) or a row-major matrix of ne[1] rows of ne[0]
 * elements (ggml convention: ne[0] is contiguous), of any dtype.  Kernels
 * read rows through the dtype traits, so the model code never depends on the
 * storage type.  The loader may repack rows into a kernel-friendly layout
 * (layout != 0); only the kernels (kern_matmul, kern_get_row) read rows.
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
    uint32_t layout;  /* WEIGHT_LAYOUT_*: how the rows are stored (0: as in the file) */
} weight;

enum {
    WEIGHT_LAYOUT_PLAIN = 0, /* rows one after another, as in GGUF */
    WEIGHT_LAYOUT_X16 = 1,   /* rows of a kern_x16_type interleaved in groups of 16 (kernels/gemm_x16.h) */
    WEIGHT_LAYOUT_X32 = 2    /* f16/bf16 rows interleaved in groups of 32 (kernels/gemm_x32.h) */
};

#endif
