/*
 * vec_dot_float.c - scalar float dot products: f32, f16 and bf16 weight rows
 * with f32 activation rows (see ref.h for the summation order).
 *
 * f16/bf16 elements are widened exactly to float, so all three kernels round
 * only in the float sums.  Loads go through memcpy: rows may be unaligned.
 */
#include <string.h>

#include "kernels/ref/ref.h"
#include "tensor/dtype.h"

static inline float ld_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float ld_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}
static inline float ld_bf16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return bf16_to_fp32(h);
}

/* One body for the three types: LD(p) reads weight element at byte p, SZ is
 * its size in bytes. */
#define DOT8_BODY(LD, SZ)                                                                         \
    const unsigned char *wp = w, *ap = a;                                                         \
    float acc[8] = {0};                                                                           \
    int64_t i = 0;                                                                                \
    for (; i + 8 <= n; i += 8)                                                                    \
        for (int j = 0; j < 8; j++) acc[j] += LD(wp + (size_t)(i + j) * (SZ)) * ld_f32(ap + 4 * (size_t)(i + j)); \
    float tail = 0.0f;                                                                            \
    for (; i < n; i++) tail += LD(wp + (size_t)i * (SZ)) * ld_f32(ap + 4 * (size_t)i);           \
    *out = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;

void vec_dot_f32_ref(int64_t n, float *out, const void *w, const void *a) { DOT8_BODY(ld_f32, 4) }
void vec_dot_f16_f32_ref(int64_t n, float *out, const void *w, const void *a) { DOT8_BODY(ld_f16, 2) }
void vec_dot_bf16_f32_ref(int64_t n, float *out, const void *w, const void *a) { DOT8_BODY(ld_bf16, 2) }

KERN_DEFINE_GEMM(gemm_f32_ref, vec_dot_f32_ref)
KERN_DEFINE_GEMM(gemm_f16_f32_ref, vec_dot_f16_f32_ref)
KERN_DEFINE_GEMM(gemm_bf16_f32_ref, vec_dot_bf16_f32_ref)
