/*
 * ops_avx512.c - the element-wise / per-row kernels of ops_simd.h on 512-bit
 * vectors (16 lanes), with masked tails.
 *
 * Bits: x86_avx2/ops_avx2.c computes exactly the same values (the same
 * operations in the same order, FMA where this file uses FMA); ops_simd.h
 * says how both differ from the references.  Element-wise loops run the tail
 * (n % 16 elements) through the same vector code under a mask, so an
 * element's result never depends on its index or on n.  Sums keep element i
 * in lane i % 16 and reduce in the fixed tree of hsum16.
 *
 * ops_exp16 (ops_exp, x86_avx512/exp_avx512.h; the contract in
 * kernels/exp_poly.h): the fused polynomial, clamped to [OPS_EXP_LO,
 * OPS_EXP_HI].  Accuracy: tests/unit/test_ops.c (test_exp_accuracy).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>

#include "kernels/ops_simd.h"
#include "kernels/x86_avx512/exp_avx512.h"

static inline __mmask16 tail_mask(int64_t r) { return (__mmask16)((1u << r) - 1u); } /* 0 < r < 16 */


/* ((l_j + l_{j+8}) then (j, j+4), (j, j+2), (0, 1)) */
static inline float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

/* silu(g) * u = g * (1 / (1 + exp(-g))) * u */
static inline __m512 swiglu16(__m512 g, __m512 u) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = ops_exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN))));
    return _mm512_mul_ps(_mm512_mul_ps(g, _mm512_div_ps(one, _mm512_add_ps(one, e))), u);
}

/* v / (1 + exp(-2u)), u = (c v) (1 + (0.044715 v) v) */
static inline __m512 gelu16(__m512 v) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 w = _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), v), v));
    const __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.79788456080286535588f), v), w);
    const __m512 e = ops_exp16(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)));
    return _mm512_div_ps(v, _mm512_add_ps(one, e));
}

void kern_swiglu_avx512(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(gate + i, swiglu16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(gate + i, m, swiglu16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void kern_gelu_avx512(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void kern_exp_avx512(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, ops_exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, ops_exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void kern_add_avx512(float *x, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

/* out[i] = gain[i] * ((x[i] - sub) * s) (+ bias[i]); sub is only subtracted
 * for layernorm (layer != 0) */
static void scale_rows(float *out, const float *x, const float *gain, const float *bias, int64_t n, int layer,
                       float sub, float s) {
    const __m512 sv = _mm512_set1_ps(s), mv = _mm512_set1_ps(sub);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = i + 16 <= n ? (__mmask16)0xffff : tail_mask(n - i);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 d = layer ? _mm512_sub_ps(xv, mv) : xv;
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, gain + i), _mm512_mul_ps(d, sv));
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

void kern_rmsnorm_avx512(float *out, const float *x, const float *gain, int64_t n, float eps) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    float ss = hsum16(acc);
    ss /= (float)n;
    ss += eps;
    scale_rows(out, x, gain, NULL, n, 0, 0.0f, 1.0f / sqrtf(ss));
}

void kern_layernorm_avx512(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
    if (i < n) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
    const float mean = hsum16(acc) / (float)n;
    const __m512 mv = _mm512_set1_ps(mean);
    acc = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), mv);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), mv); /* 0 in the masked lanes */
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    const float s = 1.0f / sqrtf(hsum16(acc) / (float)n + eps);
    scale_rows(out, x, gain, bias, n, 1, mean, s);
}

void kern_softmax_avx512(float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = i + 16 <= n ? (__mmask16)0xffff : tail_mask(n - i);
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, m, x + i));
    }
    const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = i + 16 <= n ? (__mmask16)0xffff : tail_mask(n - i);
        const __m512 e = ops_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / hsum16(acc));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = i + 16 <= n ? (__mmask16)0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

#endif
