/*
 * gemm_f16x32_ref.c - scalar reference of the 32-row interleaved f16 kernel:
 * the specification of its arithmetic (gemm_f16x32.h), one fmaf chain per
 * output in order of k.  The SIMD kernel equals it bit for bit: an FMA
 * rounds once, whether done by vfmadd or by fmaf.
 */
#include <math.h>

#include "kernels/gemm_f16x32.h"
#include "tensor/dtype.h"

void gemm_f16x32_ref(int64_t K, const uint16_t *w, int64_t ng, const float *xp, int nt, float *y, int64_t ldy) {
    for (int64_t g = 0; g < ng; g++) {
        const uint16_t *grp = w + (size_t)g * (size_t)K * F16X32_ROWS;
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < F16X32_ROWS; i++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++)
                    acc = fmaf(fp16_to_fp32(grp[k * F16X32_ROWS + i]), xp[k * nt + t], acc);
                y[t * ldy + g * F16X32_ROWS + i] = acc;
            }
    }
}
