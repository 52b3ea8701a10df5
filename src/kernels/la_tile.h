/*
 * la_tile.h - the parts of la_gemm.h's register tiles that do not depend on
 * the ISA (included by x86_avx2/la_gemm_avx2.c and x86_avx512/la_gemm_avx512.c
 * only): the edge store and the C prefetch.
 */
#ifndef KITE_KERNELS_LA_TILE_H
#define KITE_KERNELS_LA_TILE_H

#include <xmmintrin.h>

/* Adds the valid mv x nv part of a spilled tile (row stride NRC) to C. */
#define LA_ADD_TILE(tile, NRC, c, ldc, mv, nv)                                                                   \
    for (int i_ = 0; i_ < (mv); i_++)                                                                          \
        for (int j_ = 0; j_ < (nv); j_++) (c)[i_ * (ldc) + j_] += (tile)[i_ * (NRC) + j_]

/* The C tile is read only after the kc steps: fetching its lines first
 * overlaps their misses with the FMAs (test_linalg --bench). */
#define LA_PREFETCH_C(c, ldc, mv, rowbytes)                                                                      \
    for (int i_ = 0; i_ < (mv); i_++)                                                                          \
        for (int b_ = 0; b_ < (rowbytes); b_ += 64) _mm_prefetch((const char *)((c) + i_ * (ldc)) + b_, _MM_HINT_T0)

#endif
