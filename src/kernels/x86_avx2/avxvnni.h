/*
 * avxvnni.h - q4_0 and q8_0 integer dots with AVX-VNNI (VEX-encoded 256-bit
 * vpdpbusd, e.g. Intel Alder Lake and later, AMD Zen 5): a variant of the
 * avx2 level, selected by dispatch.c's avx2 table when cpu_features()
 * reports avxvnni (the level name stays "avx2").  Compiled with the avx2
 * flags plus -mavxvnni (vec_dot_quant_avxvnni.c); call only on such CPUs.
 * Contracts as in dispatch.h; gemm returns vec_dot's value bit for bit.
 */
#ifndef KITE_KERNELS_AVXVNNI_H
#define KITE_KERNELS_AVXVNNI_H

#include <stddef.h>
#include <stdint.h>

void vec_dot_q4_0_q8_0_avxvnni(int64_t n, float *out, const void *w, const void *a);
void vec_dot_q8_0_q8_0_avxvnni(int64_t n, float *out, const void *w, const void *a);
void gemm_q4_0_q8_0_avxvnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                            const void *a, size_t a_stride, int nt);
void gemm_q8_0_q8_0_avxvnni(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                            const void *a, size_t a_stride, int nt);

#endif
