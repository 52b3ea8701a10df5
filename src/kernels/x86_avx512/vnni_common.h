/*
 * vnni_common.h - helpers shared by the AVX-512 VNNI dot kernels
 * (vec_dot_quant_vnni.c, vec_dot_kquant_vnni.c): the inlining/unrolling
 * macros, an unaligned half load and the flat-GEMM driver that tiles
 * rows x tokens over a register-blocked micro-kernel.
 *
 * Include only from .c files of this folder (compiled with AVX-512 flags);
 * dispatch.c must not see it.  No state; everything is inline or a macro.
 */
#ifndef KITE_KERNELS_VNNI_COMMON_H
#define KITE_KERNELS_VNNI_COMMON_H

#include <stdint.h>
#include <string.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))
/* The micro-kernels' row/token loops must be fully unrolled so that their
 * per-row vectors (unpacked weights, scales, accumulators) stay in registers
 * (gcc otherwise kept them in stack arrays: measured slower). */
#define KITE_PRAGMA(x) _Pragma(#x)
#define KITE_UNROLL KITE_PRAGMA(GCC unroll 4)

/* The 16-bit word at p (any alignment). */
static ALWAYS_INLINE uint16_t ld_u16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* Inside VNNI_DEFINE_GEMM: KERNEL on NR rows at wr for the tn (1..4) tokens
 * at at, written at yt + r; NR and the token count are compile-time
 * constants in each call, so the kernel is specialised. */
#define VNNI_GEMM_TOKENS(KERNEL, NR)                                                 \
    switch (tn) {                                                                    \
    case 1: KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 1); break;       \
    case 2: KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 2); break;       \
    case 3: KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 3); break;       \
    default: KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 4); break;      \
    }

/* Remainder rows, one at a time: all tn tokens in one call ... */
#define VNNI_GEMM_TAIL_GROUPED(KERNEL) VNNI_GEMM_TOKENS(KERNEL, 1)
/* ... or one call per token. */
#define VNNI_GEMM_TAIL_SINGLE(KERNEL)                                                                    \
    for (int k = 0; k < tn; k++)                                                                         \
        KERNEL(nb, yt + (int64_t)k * ldy + r, ldy, wr, w_stride, at + (size_t)k * a_stride, a_stride, 1, 1);

/* Defines the kern_gemm_fn NAME over KERNEL(nb, y, ldy, w, ws, a, as, NR, NT)
 * for blocks of QK values: tokens in groups of up to 4, rows in fours, then
 * the remaining rows by TAIL (VNNI_GEMM_TAIL_GROUPED or _SINGLE). */
#define VNNI_DEFINE_GEMM(NAME, KERNEL, QK, TAIL)                                                       \
    void NAME(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a, \
              size_t a_stride, int nt) {                                                               \
        const int64_t nb = n / (QK);                                                                   \
        const unsigned char *wp = w, *ap = a;                                                          \
        for (int t = 0; t < nt; t += 4) {                                                              \
            const int tn = nt - t < 4 ? nt - t : 4;                                                    \
            const unsigned char *at = ap + (size_t)t * a_stride;                                       \
            float *yt = y + (int64_t)t * ldy;                                                          \
            int r = 0;                                                                                 \
            for (; r + 4 <= nr; r += 4) {                                                              \
                const unsigned char *wr = wp + (size_t)r * w_stride;                                   \
                VNNI_GEMM_TOKENS(KERNEL, 4)                                                            \
            }                                                                                          \
            for (; r < nr; r++) {                                                                      \
                const unsigned char *wr = wp + (size_t)r * w_stride;                                   \
                TAIL(KERNEL)                                                                           \
            }                                                                                          \
        }                                                                                              \
    }

#endif
