/*
 * gemm_r4.c - the 4-row block-interleaved layout of q4_K / q6_K weights:
 * repacking, row extraction and kernel selection (layout in gemm_r4.h).
 */
#include "kernels/gemm_r4.h"

#include <string.h>

#include "core/error.h"
#include "tensor/dtype.h"

bool kern_r4_type(uint32_t type) { return type == KITE_DTYPE_Q4_K || type == KITE_DTYPE_Q6_K; }

bool kern_r4_pays(kern_level level) {
#if defined(__x86_64__) || defined(__i386__)
    return level >= KERN_LEVEL_AVX512VNNI;
#else
    (void)level;
    return false;
#endif
}

int64_t kern_r4_rows(const weight *w) { return w->layout == WEIGHT_LAYOUT_R4 ? w->ne[1] / R4_ROWS * R4_ROWS : 0; }

void kern_r4_pack(uint32_t type, void *data, int64_t nr, int64_t ne0, void *tmp) {
    const dtype_traits *tr = dtype_get(type);
    KITE_ASSERT(kern_r4_type(type) && tr && ne0 % tr->block_size == 0);
    const int64_t nb = ne0 / tr->block_size;
    const size_t bb = (size_t)tr->type_size, rb = (size_t)nb * bb, gb = rb * R4_ROWS;
    unsigned char *p = data;
    for (int64_t g = 0; g + R4_ROWS <= nr; g += R4_ROWS, p += gb) {
        memcpy(tmp, p, gb);
        const unsigned char *rows = tmp;
        for (int i = 0; i < R4_ROWS; i++)
            for (int64_t b = 0; b < nb; b++)
                memcpy(p + (size_t)(R4_ROWS * b + i) * bb, rows + (size_t)i * rb + (size_t)b * bb, bb);
    }
}

void kern_r4_unpack_row(const void *grp, int i, int64_t nb, size_t block_bytes, void *row_out) {
    const unsigned char *g = grp;
    unsigned char *o = row_out;
    for (int64_t b = 0; b < nb; b++)
        memcpy(o + (size_t)b * block_bytes, g + (size_t)(R4_ROWS * b + i) * block_bytes, block_bytes);
}

kern_gemm_r4_fn kern_gemm_r4_get(kern_level level, uint32_t type) {
    if (!kern_r4_type(type)) return NULL;
#if defined(__x86_64__) || defined(__i386__)
    if (level >= KERN_LEVEL_AVX512VNNI) return type == KITE_DTYPE_Q4_K ? gemm_r4_q4_K_vnni : gemm_r4_q6_K_vnni;
#else
    (void)level;
#endif
    return NULL;
}
