/* ops.c - element-wise and per-row reference kernels (single-threaded, per row):
 * RMSNorm, LayerNorm, softmax, SwiGLU, GELU (tanh form), bias add, RoPE. */
#include <math.h>

#include "kernels/kernels.h"

void kern_rmsnorm(float *out, const float *x, const float *gain, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    ss /= (float)n;
    ss += eps;
    const float s = 1.0f / sqrtf(ss);
    for (int64_t i = 0; i < n; i++) out[i] = gain[i] * (s * x[i]);
}

void kern_softmax(float *x, int64_t n) {
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

void kern_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
    }
}

void kern_rope(float *x, const float *cs, int32_t n_rot, int rope_type) {
    const int32_t half = n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int32_t a = rope_type == 2 ? i : 2 * i;
        const int32_t b = rope_type == 2 ? i + half : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void kern_layernorm(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps) {
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

void kern_gelu(float *x, int64_t n) {
    const float c = 0.79788456080286535588f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(c * v * (1.0f + 0.044715f * v * v)));
    }
}

void kern_add(float *x, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += b[i];
}
