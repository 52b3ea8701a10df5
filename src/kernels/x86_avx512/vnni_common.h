/*
 * vnni_common.h - helpers shared by the AVX-512 VNNI dot kernels
 * (vec_dot_quant_vnni.c, vec_dot_kquant_vnni.c): the inlining/unrolling
 * macros and an unaligned half load (their flat GEMMs use the one driver,
 * kernels/gemm_driver.h).
 *
 * Include only from .c files of this folder (compiled with AVX-512 flags);
 * dispatch.c must not see it.  No state; everything is inline or a macro.
 */
#ifndef KITE_KERNELS_VNNI_COMMON_H
#define KITE_KERNELS_VNNI_COMMON_H

#include <stdint.h>
#include <string.h>

#include "kernels/gemm_driver.h"

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

#endif
