/*
 * gemm_tiled.h - register- and cache-tiled GEMM for prefill (many
 * activation rows): the compute-bound regime of kern_matmul.
 *
 * DESIGN
 *   y[t*ldy + r] = dot(weight row r, activation row t) for r < nr, t < nt,
 *   with nt unbounded (kern_matmul calls it when n_tok > KERN_GEMM_MAX_TOK,
 *   once per thread for the thread's rows and all tokens).
 *   - Register tiling: a micro-kernel computes an MR-row x NR-token block of
 *     outputs, each output in its own SIMD accumulator; every weight vector
 *     loaded (and widened / unpacked) is used NR times, every activation
 *     vector MR times.
 *   - Cache tiling: rows are taken in blocks of about GEMM_TILED_L2_BYTES of
 *     weights; within a block, token groups of NR rows loop outside the
 *     row micro-tiles, so the weight block stays in L2 while the activations
 *     stream, and a token group's NR activation rows stay in L1/L2.
 *   Float weights (f32/f16/bf16) take f32 activations; widening f16/bf16 is
 *   exact, so only the float sums round.  At level avx512bf16, bf16 weights
 *   take bf16 activations instead (VDPBF16PS; x86_avx512/bf16_avx512bf16.c,
 *   one accumulator per output along K, same kernel as the flat path).
 *   q8_0/q4_0 weights take the q8_0 activation rows kern_matmul builds;
 *   each block's int8 sum is exact in int32 (vpdpbusd), then scaled and
 *   accumulated in float as the flat VNNI kernel does.
 *
 * INVARIANTS
 *   Every output's summation order along K depends only on n (never on the
 *   tile it falls in, nr, nt or the thread count), and it is the order of
 *   the same level's flat kernel (vec_dot): results are bit-identical for
 *   any thread split and to token-by-token decode (kernels.h's contract,
 *   checked by test_kernels.c and test_gemm.c).  The micro-kernels
 *   replicate the flat kernels' accumulator layout; a change there must be
 *   mirrored here (at avx512 and up the float and bf16 x bf16 flat and
 *   tiled GEMMs are one micro-kernel, one accumulator per output).
 *
 * THREAD SAFETY
 *   Kernels are reentrant and allocate nothing.
 */
#ifndef KITE_KERNELS_GEMM_TILED_H
#define KITE_KERNELS_GEMM_TILED_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"

#define GEMM_TILED_L2_BYTES (256 << 10) /* weight bytes per cache block (fits L2 beside activations) */
/* The AVX-512 float and bf16 x bf16 kernels take blocks twice that size: a
 * token group's activations are re-read once per block, and with 512 KiB
 * (on a 1 MiB L2) F16 and BF16 pp128 of the TinyLlama shape ran 4 % faster
 * (medians of 7 and 4 alternated pairs; docs/notes/kernels-history.md, "Row blocks"). */
#define GEMM_TILED_FLOAT_BYTES (512 << 10)

/* kern_gemm_tiled_fn (dispatch.h): kern_gemm_fn's contract except that
 * nt >= 1 is unbounded and nr >= 1 any count.  n is a multiple of the
 * weight type's block size (1 for float types).  Strides in bytes.
 * The registry (kern_type_ops.tiled) holds each level's kernels. */

/* The level's tiled kernel for weight `type` (its registry entry), or NULL
 * where there is none (the scalar level never has one: kern_matmul keeps the
 * flat path there). */
kern_gemm_tiled_fn kern_gemm_tiled_get(kern_level level, uint32_t type);

#define KERN_GEMM_TILED_DECL(NAME)                                                                      \
    void NAME(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a, \
              size_t a_stride, int nt)

/* Scalar references (ref/gemm_tiled_ref.c): the specification, one flat
 * reference dot (ref.h) per output.  The SIMD kernels equal their level's
 * flat vec_dot bit for bit and the reference within the kernel budgets. */
KERN_GEMM_TILED_DECL(gemm_tiled_f32_ref);
KERN_GEMM_TILED_DECL(gemm_tiled_f16_ref);
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_ref);
KERN_GEMM_TILED_DECL(gemm_tiled_q8_0_ref);
KERN_GEMM_TILED_DECL(gemm_tiled_q4_0_ref);
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_bf16_ref); /* bf16 activations (level avx512bf16) */

/* x86 kernels (x86_avx2/gemm_tiled_avx2.c; x86_avx512/vec_dot_float_avx512.c
 * for f32/f16/bf16, the same micro-kernel as the flat path; q8_0/q4_0 in
 * x86_avx512/gemm_tiled_avx512.c). */
KERN_GEMM_TILED_DECL(gemm_tiled_f32_avx2);
KERN_GEMM_TILED_DECL(gemm_tiled_f16_avx2);
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_avx2);
KERN_GEMM_TILED_DECL(gemm_tiled_f32_avx512);
KERN_GEMM_TILED_DECL(gemm_tiled_f16_avx512);
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_avx512);
KERN_GEMM_TILED_DECL(gemm_tiled_q8_0_vnni);
KERN_GEMM_TILED_DECL(gemm_tiled_q4_0_vnni);
KERN_GEMM_TILED_DECL(gemm_tiled_bf16_bf16_avx512bf16); /* x86_avx512/bf16_avx512bf16.c */

#endif
