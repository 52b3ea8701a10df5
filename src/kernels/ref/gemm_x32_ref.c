/*
 * gemm_x32_ref.c - scalar references of the 32-row interleaved f16 / bf16
 * kernels: the specification of their arithmetic (gemm_x32.h), one chain
 * per output in order of k.  The SIMD kernels equal them bit for bit: an
 * FMA rounds once, whether done by vfmadd or by fmaf, and a vdpbf16ps lane
 * is ref_bf16_dp_lane (ref.h).
 */
#include <math.h>
#include <string.h>

#include "kernels/gemm_x32.h"
#include "kernels/ref/ref.h"
#include "tensor/dtype.h"

void gemm_x32_f16_ref(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy) {
    const unsigned char *x = xp; /* [K][nt] floats */
    for (int64_t g = 0; g < ng; g++) {
        const uint16_t *grp = w + (size_t)g * (size_t)K * X32_ROWS;
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < X32_ROWS; i++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++) {
                    float xk;
                    memcpy(&xk, x + 4 * (size_t)(k * nt + t), sizeof xk);
                    acc = fmaf(fp16_to_fp32(grp[k * X32_ROWS + i]), xk, acc);
                }
                y[t * ldy + g * X32_ROWS + i] = acc;
            }
    }
}

void gemm_x32_bf16_ref(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy) {
    const unsigned char *x = xp; /* [K / 2][nt] bf16 pairs, element 2s first */
    for (int64_t g = 0; g < ng; g++) {
        const uint16_t *grp = w + (size_t)g * (size_t)K * X32_ROWS;
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < X32_ROWS; i++) {
                float acc = 0.0f;
                for (int64_t s = 0; s < K / 2; s++) {
                    const uint16_t *wp = grp + (s * X32_ROWS + i) * 2;
                    uint16_t a[2];
                    memcpy(a, x + 4 * (size_t)(s * nt + t), sizeof a);
                    acc = ref_bf16_dp_lane(acc, wp[0], wp[1], a[0], a[1]);
                }
                y[t * ldy + g * X32_ROWS + i] = acc;
            }
    }
}
