/*
 * attention_neon.c - the attention inner loops of attention_simd.h on NEON
 * (levels neon and dotprod): the scalar loops' bits (attention_impl.h).
 *
 * As the x86 tables: every 8-lane partial sum in its own lane (two
 * float32x4: elements i..i+3 and i+4..i+7 of each step of 8), products and
 * sums as separate instructions, the reductions ((a0+a4)+(a1+a5)) +
 * ((a2+a6)+(a3+a7)) + tail, the tails through attention_impl.h's own scalar
 * code, attn_exp as the same float operations (unfused) and the same bit
 * selections, the dequantizers the same conversions and one multiply.  The
 * rows entries keep a slice of y in registers across rows; per element the
 * additions run in row order, as the scalar loops do.  max and transpose
 * stay the scalar ones (exact either way).
 */
#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels/arm_neon/neon.h"
#include "kernels/attention_impl.h"
#include "kernels/attention_simd.h"

static inline float reduce8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t s = vaddq_f32(lo, hi);
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) + (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
}

static float attn_dot_neon(const float *a, const float *b, int32_t n) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
        hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4)));
    }
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return reduce8(lo, hi) + tail;
}

static void attn_dot_rows_neon(const float *q, const float *k, size_t ldk, int32_t n_rows, int32_t n, float *s) {
    for (int32_t r = 0; r < n_rows; r++) s[r] = attn_dot_neon(q, k + (size_t)r * ldk, n);
}

static void attn_axpy_neon(float *y, float w, const float *x, int32_t n) {
    const float32x4_t wv = vdupq_n_f32(w);
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_f32(wv, vld1q_f32(x + i))));
    for (; i < n; i++) y[i] += w * x[i];
}

static void attn_axpy_rows_neon(float *y, const float *w, const float *x, size_t ldx, int32_t n_rows, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) { /* 16 elements of y stay in registers over the rows */
        float32x4_t y0 = vld1q_f32(y + i), y1 = vld1q_f32(y + i + 4), y2 = vld1q_f32(y + i + 8),
                    y3 = vld1q_f32(y + i + 12);
        for (int32_t r = 0; r < n_rows; r++) {
            const float *xr = x + (size_t)r * ldx + i;
            const float32x4_t wv = vdupq_n_f32(w[r]);
            y0 = vaddq_f32(y0, vmulq_f32(wv, vld1q_f32(xr)));
            y1 = vaddq_f32(y1, vmulq_f32(wv, vld1q_f32(xr + 4)));
            y2 = vaddq_f32(y2, vmulq_f32(wv, vld1q_f32(xr + 8)));
            y3 = vaddq_f32(y3, vmulq_f32(wv, vld1q_f32(xr + 12)));
        }
        vst1q_f32(y + i, y0);
        vst1q_f32(y + i + 4, y1);
        vst1q_f32(y + i + 8, y2);
        vst1q_f32(y + i + 12, y3);
    }
    if (i < n)
        for (int32_t r = 0; r < n_rows; r++) attn_axpy_neon(y + i, w[r], x + (size_t)r * ldx + i, n - i);
}

static void attn_axpy_rows_multi_neon(float *y, size_t ldy, const float *w, size_t ldw, const int32_t *lo,
                                      const int32_t *hi, int32_t n_q, const float *x, size_t ldx, int32_t n) {
    for (int32_t i = 0; i < n_q; i++)
        if (hi[i] > lo[i])
            attn_axpy_rows_neon(y + (size_t)i * ldy, w + (size_t)i * ldw + lo[i], x + (size_t)lo[i] * ldx, ldx,
                                hi[i] - lo[i], n);
}

static void attn_scale_neon(float *y, float w, int32_t n) {
    const float32x4_t wv = vdupq_n_f32(w);
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(vld1q_f32(y + i), wv));
    for (; i < n; i++) y[i] *= w;
}

/* attn_exp (attention_impl.h), four lanes: the same operations */
static inline float32x4_t attn_exp4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(KERN_EXP_ATTN_LO), hi = vdupq_n_f32(KERN_EXP_ATTN_HI);
    const uint32x4_t flush = vcltq_f32(x, vdupq_n_f32(ATTN_EXP_FLUSH)); /* NaN: false */
    x = vbslq_f32(vcltq_f32(x, lo), lo, x);
    x = vbslq_f32(vcgtq_f32(x, hi), hi, x);
    const float32x4_t round = vdupq_n_f32(12582912.0f);
    const float32x4_t t = vaddq_f32(vmulq_f32(x, vdupq_n_f32(KERN_EXP_LOG2E)), round);
    const float32x4_t n = vsubq_f32(t, round);
    float32x4_t r = vsubq_f32(x, vmulq_f32(n, vdupq_n_f32(KERN_EXP_LN2_HI)));
    r = vaddq_f32(r, vmulq_f32(n, vdupq_n_f32(KERN_EXP_LN2_LO)));
    float32x4_t p = vdupq_n_f32(KERN_EXP_C7);
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C6));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C5));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C4));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C3));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C2));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C1));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(KERN_EXP_C0));
    const uint32x4_t sb =
        vshlq_n_u32(vaddq_u32(vsubq_u32(vreinterpretq_u32_f32(t), vdupq_n_u32(0x4b400000u)), vdupq_n_u32(127u)), 23);
    const float32x4_t e = vmulq_f32(p, vreinterpretq_f32_u32(sb));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), flush));
}

static float attn_exp_sum_neon(float *x, float sub, int32_t n) {
    const float32x4_t sv = vdupq_n_f32(sub);
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t e0 = attn_exp4(vsubq_f32(vld1q_f32(x + i), sv));
        const float32x4_t e1 = attn_exp4(vsubq_f32(vld1q_f32(x + i + 4), sv));
        vst1q_f32(x + i, e0);
        vst1q_f32(x + i + 4, e1);
        lo = vaddq_f32(lo, e0);
        hi = vaddq_f32(hi, e1);
    }
    float tail = 0.0f;
    for (; i < n; i++) {
        x[i] = attn_exp(x[i] - sub);
        tail += x[i];
    }
    return reduce8(lo, hi) + tail;
}

/* f16 to float: fcvtl, except NaN lanes, which take fp16_to_fp32_inline's
 * bits (the payload moved, not quieted) */
static inline float32x4_t f16x4_to_f32(uint16x4_t h) {
    const float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u16(h));
    const uint32x4_t hw = vmovl_u16(h);
    const uint32x4_t em = vandq_u32(hw, vdupq_n_u32(0x7fffu));
    const uint32x4_t nan = vcgtq_u32(em, vdupq_n_u32(0x7c00u));
    const uint32x4_t nb = vorrq_u32(vshlq_n_u32(vandq_u32(hw, vdupq_n_u32(0x8000u)), 16),
                                    vaddq_u32(vshlq_n_u32(em, 13), vdupq_n_u32((uint32_t)(255 - 31) << 23)));
    return vbslq_f32(nan, vreinterpretq_f32_u32(nb), f);
}

static void attn_deq_f16_neon(const uint16_t *x, float *y, int32_t n) {
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, f16x4_to_f32(vld1_u16(x + i)));
    for (; i < n; i++) y[i] = fp16_to_fp32_inline(x[i]);
}

static void attn_deq_q8_0_neon(const unsigned char *x, float *y, int32_t n) {
    for (int32_t b = 0; b < n / 32; b++, x += 34, y += 32) {
        uint16_t dh;
        memcpy(&dh, x, sizeof dh);
        const float32x4_t d = vdupq_n_f32(fp16_to_fp32_inline(dh));
        for (int h = 0; h < 2; h++) {
            const int8x16_t q = vld1q_s8((const int8_t *)(const void *)(x + 2 + 16 * h));
            const int16x8_t q0 = vmovl_s8(vget_low_s8(q)), q1 = vmovl_high_s8(q);
            float *yh = y + 16 * h;
            vst1q_f32(yh, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q0))), d));
            vst1q_f32(yh + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q0)), d));
            vst1q_f32(yh + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q1))), d));
            vst1q_f32(yh + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q1)), d));
        }
    }
}

static void attn_deq_q4_0_neon(const unsigned char *x, float *y, int32_t n) {
    for (int32_t b = 0; b < n / 32; b++, x += 18, y += 32) {
        uint16_t dh;
        memcpy(&dh, x, sizeof dh);
        const float32x4_t d = vdupq_n_f32(fp16_to_fp32_inline(dh));
        const uint8x16_t q = vld1q_u8(x + 2);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
        for (int h = 0; h < 2; h++) {
            const int8x16_t v = h ? hi : lo; /* elements 0..15, then 16..31 */
            const int16x8_t v0 = vmovl_s8(vget_low_s8(v)), v1 = vmovl_high_s8(v);
            float *yh = y + 16 * h;
            vst1q_f32(yh, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(v0))), d));
            vst1q_f32(yh + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(v0)), d));
            vst1q_f32(yh + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(v1))), d));
            vst1q_f32(yh + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(v1)), d));
        }
    }
}

const attn_ops kern_attn_neon = {
    .name = "neon", .dot = attn_dot_neon, .dot_rows = attn_dot_rows_neon, .axpy = attn_axpy_neon,
    .axpy_rows = attn_axpy_rows_neon, .axpy_rows_multi = attn_axpy_rows_multi_neon, .scale = attn_scale_neon,
    .exp_sum = attn_exp_sum_neon, .max = attn_max_ref, .transpose = attn_transpose_ref,
    .deq_f16 = attn_deq_f16_neon, .deq_q8_0 = attn_deq_q8_0_neon, .deq_q4_0 = attn_deq_q4_0_neon,
};

#else
typedef int kite_empty_unit_attention_neon; /* ISO C wants a declaration */
#endif
