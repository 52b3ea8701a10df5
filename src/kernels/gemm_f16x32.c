/*
 * gemm_f16x32.c - the 32-row interleaved f16 layout (gemm_f16x32.h):
 * repacking, reading rows back, packing activations, and the kernel choice.
 */
#include "kernels/gemm_f16x32.h"

#include <string.h>

#include "tensor/dtype.h"

bool kern_f16x32_pays(kern_level level) {
#if defined(__x86_64__) || defined(__i386__)
    return level >= KERN_LEVEL_AVX512;
#else
    (void)level;
    return false;
#endif
}

int64_t kern_f16x32_rows(const weight *w) {
    return w->layout == WEIGHT_LAYOUT_F16X32 ? w->ne[1] / F16X32_ROWS * F16X32_ROWS : 0;
}

size_t kern_f16x32_pack_tmp_bytes(int64_t ne0) { return (size_t)ne0 * F16X32_ROWS * sizeof(uint16_t); }

void kern_f16x32_pack(void *data, int64_t nr, int64_t ne0, void *tmp) {
    const size_t group_bytes = kern_f16x32_pack_tmp_bytes(ne0);
    uint16_t *t = tmp;
    for (int64_t g = 0; g < nr / F16X32_ROWS; g++) { /* a group fills exactly its 32 plain rows' bytes */
        uint16_t *grp = (uint16_t *)((char *)data + (size_t)g * group_bytes);
        memcpy(t, grp, group_bytes); /* the plain rows, one after another */
        /* in tiles of 64 columns: 32 short reads, 64 destination lines that stay in L1
         * (the plain k-then-i transpose took 1.7 s for TinyLlama's 2.2 GB) */
        for (int64_t k0 = 0; k0 < ne0; k0 += 64) {
            const int64_t k1 = ne0 - k0 < 64 ? ne0 : k0 + 64;
            for (int i = 0; i < F16X32_ROWS; i++)
                for (int64_t k = k0; k < k1; k++) grp[k * F16X32_ROWS + i] = t[i * ne0 + k];
        }
    }
}

void kern_f16x32_get_row(const void *data, int64_t ne0, int64_t row, float *dst) {
    const uint16_t *grp = (const uint16_t *)((const char *)data + (size_t)(row / F16X32_ROWS) *
                                                                     kern_f16x32_pack_tmp_bytes(ne0));
    const int i = (int)(row % F16X32_ROWS);
    for (int64_t k = 0; k < ne0; k++) dst[k] = fp16_to_fp32_inline(grp[k * F16X32_ROWS + i]);
}

void kern_f16x32_pack_act(const float *x, int64_t ne0, int nt, float *xp) {
    for (int64_t k = 0; k < ne0; k++)
        for (int t = 0; t < nt; t++) xp[k * nt + t] = x[(size_t)t * (size_t)ne0 + (size_t)k];
}

kern_gemm_f16x32_fn kern_gemm_f16x32_get(kern_level level) {
#if defined(__x86_64__) || defined(__i386__)
    if (level >= KERN_LEVEL_AVX512) return gemm_f16x32_avx512;
#else
    (void)level;
#endif
    return gemm_f16x32_ref;
}
