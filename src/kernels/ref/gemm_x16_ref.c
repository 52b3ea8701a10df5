/*
 * gemm_x16_ref.c - scalar reference of the 16-row interleaved q4_0 / q8_0
 * kernel (gemm_x16.h): the specification the SIMD kernel equals bit for bit.
 * Block sums are exact in int32 (|s| <= 32*15*128 + 8*32*128 for q4_0,
 * 32*255*128 + 128*32*128 for q8_0); the float steps are a product rounded
 * to float and one fused multiply-add, as the SIMD kernel does them.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/gemm_x16.h"
#include "tensor/dtype.h"

/* One token's 16 outputs.  Weights as unsigned u (q4_0 nibble, q8_0 w+128),
 * element order of the block. */
static void x16_ref(int is_q4, int64_t nb, float *y, const unsigned char *g, const unsigned char *a,
                    const int32_t *corr, const float *da) {
    const size_t qb = is_q4 ? 256 : 512;
    for (int i = 0; i < X16_ROWS; i++) {
        float f = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *q = g + kern_x16_quant_offset(qb, nb, b);
            const signed char *qa = (const signed char *)(a + (size_t)b * 34 + 2); /* q8_0: d, then qs */
            int32_t s = corr[b];
            if (is_q4) {
                for (int j = 0; j < 4; j++)
                    for (int k = 0; k < 4; k++) {
                        const unsigned v = q[64 * j + 4 * i + k];
                        s += (int32_t)(v & 15) * qa[4 * j + k] + (int32_t)(v >> 4) * qa[16 + 4 * j + k];
                    }
            } else {
                for (int j = 0; j < 8; j++)
                    for (int k = 0; k < 4; k++) s += (int32_t)q[64 * j + 4 * i + k] * qa[4 * j + k];
            }
            uint16_t h;
            memcpy(&h, g + kern_x16_scale_offset(qb, nb, b) + 2 * (size_t)i, 2);
            const float d = fp16_to_fp32(h) * da[b];
            f = fmaf((float)s, d, f);
        }
        y[i] = f;
    }
}

static void x16_ref_tokens(int is_q4, int64_t nb, float *y, int64_t ldy, const void *grp, const void *a,
                           size_t a_stride, const int32_t *corr, const float *da, int64_t c_stride, int nt) {
    for (int t = 0; t < nt; t++)
        x16_ref(is_q4, nb, y + (int64_t)t * ldy, grp, (const unsigned char *)a + (size_t)t * a_stride,
                corr + (int64_t)t * c_stride, da + (int64_t)t * c_stride);
}

KERN_GEMM_X16_DECL(gemm_x16_q4_0_ref) { x16_ref_tokens(1, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt); }

KERN_GEMM_X16_DECL(gemm_x16_q8_0_ref) { x16_ref_tokens(0, nb, y, ldy, grp, a, a_stride, corr, da, c_stride, nt); }
