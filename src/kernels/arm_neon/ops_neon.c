/*
 * ops_neon.c - the element-wise / per-row kernels of ops_simd.h on NEON
 * (levels neon and dotprod), as 16 virtual lanes: four float32x4 holding
 * elements i..i+3, i+4..i+7, i+8..i+11, i+12..i+15 of each step of 16.
 *
 * Bits: the same float operations in the same order as
 * x86_avx512/ops_avx512.c (and so x86_avx2/ops_avx2.c): FMA where that file
 * fuses, the ops_exp polynomial of kernels/exp_poly.h, sums with element i in
 * lane i % 16 reduced in hsum16's tree, the tail (n % 16 elements) through
 * the same vector code on a zero-padded copy with its padding lanes masked
 * out of every sum.  So an AArch64 build gives x86's SIMD bits, which differ
 * from the references by rounding only (ops_simd.h; test_ops.c budgets).
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/arm_neon/neon.h"
#include "kernels/exp_poly.h"
#include "kernels/ops_simd.h"

typedef struct v16 {
    float32x4_t v[4];
} v16;

static inline v16 ld16(const float *p) {
    v16 r;
    for (int k = 0; k < 4; k++) r.v[k] = vld1q_f32(p + 4 * k);
    return r;
}
static inline void st16(float *p, v16 a) {
    for (int k = 0; k < 4; k++) vst1q_f32(p + 4 * k, a.v[k]);
}
static inline v16 dup16(float f) {
    v16 r;
    for (int k = 0; k < 4; k++) r.v[k] = vdupq_n_f32(f);
    return r;
}
/* the tail: n < 16 elements of p, the other lanes pad */
static inline v16 ld16_tail(const float *p, int64_t n, float pad) {
    float b[16];
    for (int k = 0; k < 16; k++) b[k] = k < n ? p[k] : pad;
    return ld16(b);
}
static inline void st16_tail(float *p, int64_t n, v16 a) {
    float b[16];
    st16(b, a);
    memcpy(p, b, sizeof(float) * (size_t)n);
}
/* lanes < n all ones */
static inline void mask16(int64_t n, uint32x4_t m[4]) {
    uint32_t b[16];
    for (int k = 0; k < 16; k++) b[k] = k < n ? 0xffffffffu : 0u;
    for (int k = 0; k < 4; k++) m[k] = vld1q_u32(b + 4 * k);
}

#define MAP16(a, b, OP)                                                                                     \
    do {                                                                                                    \
        for (int k_ = 0; k_ < 4; k_++) (a).v[k_] = OP((a).v[k_], (b).v[k_]);                                \
    } while (0)

/* ((l_j + l_{j+8}) then (j, j+4), (j, j+2), (0, 1)): hsum16 of ops_avx512.c */
static inline float hsum16(v16 a) {
    const float32x4_t q = vaddq_f32(vaddq_f32(a.v[0], a.v[2]), vaddq_f32(a.v[1], a.v[3]));
    const float d0 = vgetq_lane_f32(q, 0) + vgetq_lane_f32(q, 2), d1 = vgetq_lane_f32(q, 1) + vgetq_lane_f32(q, 3);
    return d0 + d1;
}

/* ops_exp (kernels/exp_poly.h): clamp, n = nearest-even(x log2 e), r = x - n ln2
 * by two FMAs, the fused polynomial, times 2^(n - n/2) and 2^(n/2) */
static inline float32x4_t ops_exp4(float32x4_t x) {
    x = vminq_f32(vdupq_n_f32(OPS_EXP_HI), x);
    x = vmaxq_f32(vdupq_n_f32(OPS_EXP_LO), x);
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(KERN_EXP_LOG2E)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(KERN_EXP_LN2_HI)); /* x - n ln2_hi, fused */
    r = vfmaq_f32(r, n, vdupq_n_f32(KERN_EXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(KERN_EXP_C7);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C6), p, r);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C5), p, r);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C4), p, r);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C3), p, r);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C2), p, r);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C1), p, r);
    p = vfmaq_f32(vdupq_n_f32(KERN_EXP_C0), p, r);
    const int32x4_t ni = vcvtnq_s32_f32(n); /* n is integral: |n| <= 152 */
    const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* silu(g) * u = g * (1 / (1 + exp(-g))) * u */
static inline float32x4_t swiglu4(float32x4_t g, float32x4_t u) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t e = ops_exp4(vnegq_f32(g));
    return vmulq_f32(vmulq_f32(g, vdivq_f32(one, vaddq_f32(one, e))), u);
}

/* v / (1 + exp(-2u)), u = (c v) (1 + (0.044715 v) v) */
static inline float32x4_t gelu4(float32x4_t v) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t w = vaddq_f32(one, vmulq_f32(vmulq_f32(vdupq_n_f32(0.044715f), v), v));
    const float32x4_t u = vmulq_f32(vmulq_f32(vdupq_n_f32(0.79788456080286535588f), v), w);
    const float32x4_t e = ops_exp4(vmulq_f32(u, vdupq_n_f32(-2.0f)));
    return vdivq_f32(v, vaddq_f32(one, e));
}

static void kern_swiglu_neon(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(gate + i, swiglu4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i < n) { /* element-wise: a lane's value depends on its inputs only */
        float g[4] = {0}, u[4] = {0};
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(g, swiglu4(vld1q_f32(g), vld1q_f32(u)));
        memcpy(gate + i, g, sizeof(float) * (size_t)(n - i));
    }
}

static void kern_gelu_neon(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, gelu4(vld1q_f32(x + i)));
    if (i < n) {
        float b[4] = {0};
        memcpy(b, x + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(b, gelu4(vld1q_f32(b)));
        memcpy(x + i, b, sizeof(float) * (size_t)(n - i));
    }
}

static void kern_exp_neon(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, ops_exp4(vld1q_f32(x + i)));
    if (i < n) {
        float b[4] = {0};
        memcpy(b, x + i, sizeof(float) * (size_t)(n - i));
        vst1q_f32(b, ops_exp4(vld1q_f32(b)));
        memcpy(y + i, b, sizeof(float) * (size_t)(n - i));
    }
}

static void kern_add_neon(float *x, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vaddq_f32(vld1q_f32(x + i), vld1q_f32(b + i)));
    for (; i < n; i++) x[i] += b[i];
}

/* out[i] = gain[i] * ((x[i] - sub) * s) (+ bias[i]); sub only for layernorm */
static void scale_rows(float *out, const float *x, const float *gain, const float *bias, int64_t n, int layer,
                       float sub, float s) {
    const float32x4_t sv = vdupq_n_f32(s), mv = vdupq_n_f32(sub);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t xv = vld1q_f32(x + i);
        const float32x4_t d = layer ? vsubq_f32(xv, mv) : xv;
        float32x4_t v = vmulq_f32(vld1q_f32(gain + i), vmulq_f32(d, sv));
        if (bias) v = vaddq_f32(v, vld1q_f32(bias + i));
        vst1q_f32(out + i, v);
    }
    for (; i < n; i++) { /* the same operations, one lane */
        const float d = layer ? x[i] - sub : x[i];
        const float v = gain[i] * (d * s);
        out[i] = bias ? v + bias[i] : v;
    }
}

static void kern_rmsnorm_neon(float *out, const float *x, const float *gain, int64_t n, float eps) {
    v16 acc = dup16(0.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const v16 v = ld16(x + i);
        for (int k = 0; k < 4; k++) acc.v[k] = vfmaq_f32(acc.v[k], v.v[k], v.v[k]);
    }
    if (i < n) { /* zero lanes add 0 * 0 */
        const v16 v = ld16_tail(x + i, n - i, 0.0f);
        for (int k = 0; k < 4; k++) acc.v[k] = vfmaq_f32(acc.v[k], v.v[k], v.v[k]);
    }
    float ss = hsum16(acc);
    ss /= (float)n;
    ss += eps;
    scale_rows(out, x, gain, NULL, n, 0, 0.0f, 1.0f / sqrtf(ss));
}

static void kern_layernorm_neon(float *out, const float *x, const float *gain, const float *bias, int64_t n,
                                float eps) {
    v16 acc = dup16(0.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const v16 v = ld16(x + i);
        MAP16(acc, v, vaddq_f32);
    }
    if (i < n) {
        const v16 v = ld16_tail(x + i, n - i, 0.0f);
        MAP16(acc, v, vaddq_f32);
    }
    const float mean = hsum16(acc) / (float)n;
    const float32x4_t mv = vdupq_n_f32(mean);
    acc = dup16(0.0f);
    for (i = 0; i + 16 <= n; i += 16) {
        const v16 v = ld16(x + i);
        for (int k = 0; k < 4; k++) {
            const float32x4_t d = vsubq_f32(v.v[k], mv);
            acc.v[k] = vfmaq_f32(acc.v[k], d, d);
        }
    }
    if (i < n) {
        uint32x4_t m[4];
        mask16(n - i, m);
        const v16 v = ld16_tail(x + i, n - i, 0.0f);
        for (int k = 0; k < 4; k++) {
            const float32x4_t d = vbslq_f32(m[k], vsubq_f32(v.v[k], mv), vdupq_n_f32(0.0f)); /* 0 in the pad */
            acc.v[k] = vfmaq_f32(acc.v[k], d, d);
        }
    }
    const float s = 1.0f / sqrtf(hsum16(acc) / (float)n + eps);
    scale_rows(out, x, gain, bias, n, 1, mean, s);
}

static void kern_softmax_neon(float *x, int64_t n) {
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) mx = vmaxq_f32(mx, vld1q_f32(x + i));
    float m = vmaxvq_f32(mx);
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    const float32x4_t mv = vdupq_n_f32(m);
    v16 acc = dup16(0.0f);
    for (i = 0; i + 16 <= n; i += 16) {
        v16 e = ld16(x + i);
        for (int k = 0; k < 4; k++) e.v[k] = ops_exp4(vsubq_f32(e.v[k], mv));
        st16(x + i, e);
        MAP16(acc, e, vaddq_f32);
    }
    if (i < n) { /* the pad lanes keep their sums */
        uint32x4_t msk[4];
        mask16(n - i, msk);
        v16 e = ld16_tail(x + i, n - i, 0.0f);
        for (int k = 0; k < 4; k++) {
            e.v[k] = ops_exp4(vsubq_f32(e.v[k], mv));
            acc.v[k] = vbslq_f32(msk[k], vaddq_f32(acc.v[k], e.v[k]), acc.v[k]);
        }
        st16_tail(x + i, n - i, e);
    }
    const float32x4_t inv = vdupq_n_f32(1.0f / hsum16(acc));
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), inv));
    for (; i < n; i++) x[i] *= vgetq_lane_f32(inv, 0);
}

const kern_elt_ops kern_elt_neon = {
    .name = "neon", .rmsnorm = kern_rmsnorm_neon, .layernorm = kern_layernorm_neon, .softmax = kern_softmax_neon,
    .swiglu = kern_swiglu_neon, .gelu = kern_gelu_neon, .add = kern_add_neon, .exp = kern_exp_neon,
};

#else
typedef int kite_empty_unit_ops_neon; /* ISO C wants a declaration */
#endif
