/*
 * ops_ref.c - reference element-wise and per-row kernels (the
 * specification the SIMD versions in x86_avx2/ops_avx2.c and
 * x86_avx512/ops_avx512.c are tested against, tests/unit/test_ops.c):
 * RMSNorm, LayerNorm, softmax, SwiGLU, GELU (tanh form), bias add, exp.
 * Plain C with libm, sequential sums; single-threaded, reentrant, no
 * allocation.  Contracts: kernels.h (kern_rmsnorm, ...), ops_simd.h.
 */
#include <math.h>

#include "kernels/ops_simd.h"

void kern_rmsnorm_ref(float *out, const float *x, const float *gain, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    ss /= (float)n;
    ss += eps;
    const float s = 1.0f / sqrtf(ss);
    for (int64_t i = 0; i < n; i++) out[i] = gain[i] * (s * x[i]);
}

void kern_softmax_ref(float *x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void kern_swiglu_ref(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
    }
}

void kern_layernorm_ref(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    const float mean = sum / (float)n;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float d = x[i] - mean;
        ss += d * d;
    }
    const float s = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) {
        const float v = gain[i] * ((x[i] - mean) * s);
        out[i] = bias ? v + bias[i] : v;
    }
}

void kern_gelu_ref(float *x, int64_t n) {
    const float c = 0.79788456080286535588f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(c * v * (1.0f + 0.044715f * v * v)));
    }
}

void kern_add_ref(float *x, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += b[i];
}

void kern_exp_ref(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}
