/*
 * vec_dot_float_neon.c - f32, f16 and bf16 weight rows with f32 activation
 * rows on NEON (level neon).  The reference's 8 lanes as two float32x4
 * (elements i..i+3 and i+4..i+7 of each step of 8), products added unfused
 * (vmulq then vaddq), reduced in the reference's order plus its sequential
 * tail: the same bits as ref/vec_dot_float.c.  f16 is widened by fcvtl and
 * bf16 by a 16-bit shift, both exact.  Rows are read bytewise (vld1q_u8):
 * they may sit at any address.
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "kernels/arm_neon/neon.h"
#include "tensor/dtype.h"

static inline float32x4_t ld4_f32(const unsigned char *p) { return vreinterpretq_f32_u8(vld1q_u8(p)); }

/* ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) */
static inline float reduce8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t s = vaddq_f32(lo, hi);
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) + (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
}

static inline float tail_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float tail_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}
static inline float tail_bf16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return bf16_to_fp32(h);
}

void vec_dot_f32_neon(int64_t n, float *out, const void *w, const void *a) {
    const unsigned char *wp = w, *ap = a;
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        lo = vaddq_f32(lo, vmulq_f32(ld4_f32(wp + 4 * i), ld4_f32(ap + 4 * i)));
        hi = vaddq_f32(hi, vmulq_f32(ld4_f32(wp + 4 * i + 16), ld4_f32(ap + 4 * i + 16)));
    }
    float tail = 0.0f;
    for (; i < n; i++) tail += tail_f32(wp + 4 * i) * tail_f32(ap + 4 * i);
    *out = reduce8(lo, hi) + tail;
}

void vec_dot_f16_f32_neon(int64_t n, float *out, const void *w, const void *a) {
    const unsigned char *wp = w, *ap = a;
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(wp + 2 * i));
        lo = vaddq_f32(lo, vmulq_f32(vcvt_f32_f16(vget_low_f16(h)), ld4_f32(ap + 4 * i)));
        hi = vaddq_f32(hi, vmulq_f32(vcvt_high_f32_f16(h), ld4_f32(ap + 4 * i + 16)));
    }
    float tail = 0.0f;
    for (; i < n; i++) tail += tail_f16(wp + 2 * i) * tail_f32(ap + 4 * i);
    *out = reduce8(lo, hi) + tail;
}

void vec_dot_bf16_f32_neon(int64_t n, float *out, const void *w, const void *a) {
    const unsigned char *wp = w, *ap = a;
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(wp + 2 * i));
        const float32x4_t w0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        const float32x4_t w1 = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
        lo = vaddq_f32(lo, vmulq_f32(w0, ld4_f32(ap + 4 * i)));
        hi = vaddq_f32(hi, vmulq_f32(w1, ld4_f32(ap + 4 * i + 16)));
    }
    float tail = 0.0f;
    for (; i < n; i++) tail += tail_bf16(wp + 2 * i) * tail_f32(ap + 4 * i);
    *out = reduce8(lo, hi) + tail;
}

KERN_DEFINE_GEMM(gemm_f32_neon, vec_dot_f32_neon)
KERN_DEFINE_GEMM(gemm_f16_f32_neon, vec_dot_f16_f32_neon)
KERN_DEFINE_GEMM(gemm_bf16_f32_neon, vec_dot_bf16_f32_neon)

#else
typedef int kite_empty_unit_vec_dot_float_neon; /* ISO C wants a declaration */
#endif
