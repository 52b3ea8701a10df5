/*
 * gemm_x32.c - the 32-row interleaved f16 / bf16 layout (gemm_x32.h):
 * repacking, reading rows back, packing activations (the kernels are in
 * the registry, dispatch.h).
 */
#include "kernels/gemm_x32.h"

#include <string.h>

#include "tensor/dtype.h"

int64_t kern_x32_rows(const weight *w) { return w->layout == WEIGHT_LAYOUT_X32 ? w->ne[1] / X32_ROWS * X32_ROWS : 0; }

size_t kern_x32_pack_tmp_bytes(int64_t ne0) { return (size_t)ne0 * X32_ROWS * sizeof(uint16_t); }

/* One group: unit s of row i (u halves) to unit s*32 + i, from the plain rows at t. */
#define X32_TRANSPOSE(T)                                                                                        \
    do {                                                                                                        \
        const T *src = (const T *)tmp;                                                                          \
        T *dst = (T *)grp;                                                                                      \
        for (int64_t s0 = 0; s0 < n_units; s0 += 64) {                                                          \
            const int64_t s1 = n_units - s0 < 64 ? n_units : s0 + 64;                                           \
            for (int i = 0; i < X32_ROWS; i++)                                                                  \
                for (int64_t s = s0; s < s1; s++) dst[s * X32_ROWS + i] = src[i * n_units + s];                 \
        }                                                                                                       \
    } while (0)

void kern_x32_pack(uint32_t type, void *data, int64_t nr, int64_t ne0, void *tmp) {
    const size_t group_bytes = kern_x32_pack_tmp_bytes(ne0);
    const int64_t n_units = ne0 / kern_x32_unit(type);
    for (int64_t g = 0; g < nr / X32_ROWS; g++) { /* a group fills exactly its 32 plain rows' bytes */
        void *grp = (char *)data + (size_t)g * group_bytes;
        memcpy(tmp, grp, group_bytes); /* the plain rows, one after another */
        /* in tiles of 64 units: 32 short reads, 64 destination lines that stay in L1
         * (a plain unit-then-row loop took 1.7 s for TinyLlama's 2.2 GB of f16) */
        if (kern_x32_unit(type) == 2) X32_TRANSPOSE(uint32_t);
        else X32_TRANSPOSE(uint16_t);
    }
}

void kern_x32_get_row(uint32_t type, const void *data, int64_t ne0, int64_t row, float *dst) {
    const size_t group_bytes = kern_x32_pack_tmp_bytes(ne0);
    const uint16_t *grp = (const uint16_t *)((const char *)data + (size_t)(row / X32_ROWS) * group_bytes);
    const int64_t i = row % X32_ROWS;
    if (type == KITE_DTYPE_BF16) /* pairs: elements 2s, 2s+1 at unit s * 32 + i */
        for (int64_t k = 0; k < ne0; k++) dst[k] = bf16_to_fp32(grp[((k / 2) * X32_ROWS + i) * 2 + k % 2]);
    else
        for (int64_t k = 0; k < ne0; k++) dst[k] = fp16_to_fp32_inline(grp[k * X32_ROWS + i]);
}

void kern_x32_pack_act(const void *src, size_t src_stride, int64_t n_units, int nt, void *dst) {
    unsigned char *d = dst; /* bytes: the units are floats or bf16 pairs */
    for (int t = 0; t < nt; t++) {
        const unsigned char *s = (const unsigned char *)src + (size_t)t * src_stride;
        for (int64_t k = 0; k < n_units; k++) memcpy(d + 4 * (size_t)(k * nt + t), s + 4 * (size_t)k, 4);
    }
}

void kern_x32_pack_act_wide(const void *src, size_t src_stride, int64_t n_units, int nt, float *dst) {
    for (int t = 0; t < nt; t++) {
        const unsigned char *s = (const unsigned char *)src + (size_t)t * src_stride;
        for (int64_t k = 0; k < n_units; k++) { /* a bf16 widens exactly to its bits << 16 */
            uint32_t u, f[2];
            memcpy(&u, s + 4 * (size_t)k, sizeof u);
            f[0] = u << 16;         /* the even element: the low half */
            f[1] = u & 0xFFFF0000u; /* the odd one: the high half */
            memcpy(dst + 2 * (k * nt + t), f, sizeof f);
        }
    }
}

#define X32_WIDEN_BYTES ((int64_t)256 << 10) /* 1 MiB ran about 2 % slower: the activations want L2 too */

int64_t kern_x32_widen_groups(int64_t ne0) {
    const int64_t g = X32_WIDEN_BYTES / (ne0 * X32_ROWS * (int64_t)sizeof(float));
    return g < 1 ? 1 : g > 4 ? 4 : g;
}

size_t kern_x32_widen_floats(int64_t ne0) {
    const int64_t one = ne0 * X32_ROWS, cap = X32_WIDEN_BYTES / (int64_t)sizeof(float);
    return (size_t)(one > cap ? one : cap); /* >= kern_x32_widen_groups(k) * 32 * k for every k <= ne0 */
}
