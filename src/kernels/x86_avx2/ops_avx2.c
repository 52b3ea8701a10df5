/*
 * ops_avx2.c - the element-wise / per-row kernels of ops_simd.h on 256-bit
 * vectors, giving the same bits as x86_avx512/ops_avx512.c.
 *
 * How the bits stay the same: ops_exp8 (exp_avx2.h), swiglu8 and gelu8 are
 * the avx512 files' ops_exp16/swiglu16/gelu16 instruction for instruction
 * (8 lanes instead of 16;
 * FMA where it uses FMA); element-wise tails run the same code under a
 * vmaskmov mask.  Sums keep 16 virtual lanes as two ymm halves (lo: lanes
 * 0-7, hi: lanes 8-15), element i in lane i % 16, and hsum16 adds lo + hi
 * first, then reduces 8 lanes in the avx512 file's order.  Masked-off lanes
 * add +0, as the avx512 file's zero-masked lanes do.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <math.h>

#include "kernels/ops_simd.h"
#include "kernels/x86_avx2/exp_avx2.h"

/* lanes j < r set (r may be <= 0 or >= 8) */
static inline __m256i mask8(int64_t r) {
    const int ri = r < 0 ? 0 : r > 8 ? 8 : (int)r;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(ri), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}


/* 16 virtual lanes (lo = 0-7, hi = 8-15) in the avx512 file's hsum16 order */
static inline float hsum16(__m256 lo, __m256 hi) {
    const __m256 h = _mm256_add_ps(lo, hi);
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

static inline __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = ops_exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_mul_ps(_mm256_mul_ps(g, _mm256_div_ps(one, _mm256_add_ps(one, e))), u);
}

static inline __m256 gelu8(__m256 v) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 w = _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), v), v));
    const __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286535588f), v), w);
    const __m256 e = ops_exp8(_mm256_mul_ps(u, _mm256_set1_ps(-2.0f)));
    return _mm256_div_ps(v, _mm256_add_ps(one, e));
}

void kern_swiglu_avx2(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i m = mask8(n - i);
        _mm256_maskstore_ps(gate + i, m, swiglu8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
    }
}

void kern_gelu_avx2(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = mask8(n - i);
        _mm256_maskstore_ps(x + i, m, gelu8(_mm256_maskload_ps(x + i, m)));
    }
}

void kern_exp_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ops_exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = mask8(n - i);
        _mm256_maskstore_ps(y + i, m, ops_exp8(_mm256_maskload_ps(x + i, m)));
    }
}

void kern_add_avx2(float *x, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(b + i)));
    if (i < n) {
        const __m256i m = mask8(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_add_ps(_mm256_maskload_ps(x + i, m), _mm256_maskload_ps(b + i, m)));
    }
}

/* out[i] = gain[i] * ((x[i] - sub) * s) (+ bias[i]); sub is only subtracted
 * for layernorm (layer != 0), as in the avx512 file */
static void scale_rows(float *out, const float *x, const float *gain, const float *bias, int64_t n, int layer,
                       float sub, float s) {
    const __m256 sv = _mm256_set1_ps(s), mv = _mm256_set1_ps(sub);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = mask8(n - i);
        const __m256 xv = _mm256_maskload_ps(x + i, m);
        const __m256 d = layer ? _mm256_sub_ps(xv, mv) : xv;
        __m256 v = _mm256_mul_ps(_mm256_maskload_ps(gain + i, m), _mm256_mul_ps(d, sv));
        if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + i, m));
        _mm256_maskstore_ps(out + i, m, v);
    }
}

void kern_rmsnorm_avx2(float *out, const float *x, const float *gain, int64_t n, float eps) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        lo = _mm256_fmadd_ps(a, a, lo);
        hi = _mm256_fmadd_ps(b, b, hi);
    }
    if (i < n) {
        const __m256 a = _mm256_maskload_ps(x + i, mask8(n - i));
        lo = _mm256_fmadd_ps(a, a, lo);
        if (n - i > 8) {
            const __m256 b = _mm256_maskload_ps(x + i + 8, mask8(n - i - 8));
            hi = _mm256_fmadd_ps(b, b, hi);
        }
    }
    float ss = hsum16(lo, hi);
    ss /= (float)n;
    ss += eps;
    scale_rows(out, x, gain, NULL, n, 0, 0.0f, 1.0f / sqrtf(ss));
}

void kern_layernorm_avx2(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + i));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + i + 8));
    }
    if (i < n) {
        lo = _mm256_add_ps(lo, _mm256_maskload_ps(x + i, mask8(n - i)));
        if (n - i > 8) hi = _mm256_add_ps(hi, _mm256_maskload_ps(x + i + 8, mask8(n - i - 8)));
    }
    const float mean = hsum16(lo, hi) / (float)n;
    const __m256 mv = _mm256_set1_ps(mean);
    lo = hi = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_sub_ps(_mm256_loadu_ps(x + i), mv), b = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mv);
        lo = _mm256_fmadd_ps(a, a, lo);
        hi = _mm256_fmadd_ps(b, b, hi);
    }
    if (i < n) {
        const __m256i ma = mask8(n - i);
        const __m256 a = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, ma), mv), _mm256_castsi256_ps(ma));
        lo = _mm256_fmadd_ps(a, a, lo);
        if (n - i > 8) {
            const __m256i mb = mask8(n - i - 8);
            const __m256 b = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i + 8, mb), mv), _mm256_castsi256_ps(mb));
            hi = _mm256_fmadd_ps(b, b, hi);
        }
    }
    const float s = 1.0f / sqrtf(hsum16(lo, hi) / (float)n + eps);
    scale_rows(out, x, gain, bias, n, 1, mean, s);
}

void kern_softmax_avx2(float *x, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 mx = ninf;
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = mask8(n - i);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
    }
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    const __m256 mv = _mm256_set1_ps(_mm_cvtss_f32(q));
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < n; i += 16) {
        const __m256i ma = mask8(n - i);
        const __m256 a = _mm256_and_ps(ops_exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, ma), mv)), _mm256_castsi256_ps(ma));
        _mm256_maskstore_ps(x + i, ma, a);
        lo = _mm256_add_ps(lo, a);
        if (n - i > 8) {
            const __m256i mb = mask8(n - i - 8);
            const __m256 b =
                _mm256_and_ps(ops_exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i + 8, mb), mv)), _mm256_castsi256_ps(mb));
            _mm256_maskstore_ps(x + i + 8, mb, b);
            hi = _mm256_add_ps(hi, b);
        }
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum16(lo, hi));
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = mask8(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
}

#endif
