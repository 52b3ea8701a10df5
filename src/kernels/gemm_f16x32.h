/*
 * gemm_f16x32.h - f16 weights repacked at load time into groups of 32
 * interleaved rows, and the outer-product matmul kernel for that layout.
 *
 * WHY
 *   The plain-row f16 kernels (x86_avx512/vec_dot_float_avx512.c) put K in
 *   the 16 lanes of a register: each output's sum is spread over 16 lanes
 *   and reduced at the end, and a 4 x 6 register tile loads 4 weight and 6
 *   activation vectors per 24 FMAs.  In prefill the activation rows then
 *   come from L2 again for every 4 rows, and the kernel stayed at about
 *   77-80 % of the FMA peak per thread whatever the blocking
 *   (docs/kernels.md, "F16 prefill: where the time goes").  Here 16 *rows*
 *   share a register instead: per k, two loads give 32 rows' weights, and
 *   each token's x[k] is one broadcast for two FMAs.  There is no
 *   horizontal reduction, and per FLOP about a fifth of the cache traffic.
 *   In decode, a thread streams a few groups side by side, each a forward
 *   run of whole 64-byte lines (the prototypes in bench/proto/ measured
 *   1.10-1.17x in prefill and 1.14-1.53x in decode).
 *
 * LAYOUT (WEIGHT_LAYOUT_F16X32, weight.h)
 *   Rows are taken in groups of F16X32_ROWS = 32 from the start of the
 *   view.  Group g holds its 32 rows' elements k = 0..K-1 as [K][32]
 *   halves: element k of row 32g + i is at half index 32k + i of the group,
 *   and the group sits in the bytes of its 32 plain rows (K * 64 bytes at
 *   g * K * 64).  Rows past the last full group (ne[1] % 32) stay in the
 *   plain layout at their plain offsets.
 *
 * ACTIVATIONS
 *   The kernel reads a token group's activations packed as [K][nt] floats
 *   (kern_f16x32_pack_act): x[t][k] at index k * nt + t.  kern_matmul packs
 *   a batch once per call, in groups of F16X32_TOK tokens (the last one
 *   smaller), group j at float offset j * F16X32_TOK * K; one token is its
 *   own packing and is read in place.
 *
 * ARITHMETIC (every level; the scalar reference is exact to the bit)
 *   For row r, token t:  acc = 0;  for k = 0..K-1 in order:
 *     acc = fmaf(w[r][k], x[t][k], acc)       (one rounding per step)
 *   The order depends only on K: results are identical for any batch
 *   grouping, token-group size, thread count, and for prefill versus
 *   decode.  (It is another order than the plain-row kernels'; both are
 *   tested against the same float budget.)  The tail rows run the plain f16
 *   kernels, which keep that promise on their own.
 *
 * THREAD SAFETY: pure functions.
 */
#ifndef KITE_KERNELS_GEMM_F16X32_H
#define KITE_KERNELS_GEMM_F16X32_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"
#include "tensor/weight.h"

#define F16X32_ROWS 32 /* rows per interleaved group: two zmm registers of floats */
#define F16X32_TOK 12  /* tokens per packed group: 24 accumulators, 2 weight and 1 broadcast register */

/* Whether load-time repacking pays at a level (avx512 and above, where the
 * SIMD kernel exists; lower levels would only run the scalar reference). */
bool kern_f16x32_pays(kern_level level);
/* Rows of w held in 32-row groups: ne[1] rounded down to 32 for an F16X32
 * weight, 0 for any other. */
int64_t kern_f16x32_rows(const weight *w);

/* Scratch bytes kern_f16x32_pack needs: one group of 32 plain rows. */
size_t kern_f16x32_pack_tmp_bytes(int64_t ne0);
/* Repacks the nr plain f16 rows of ne0 columns at data in place, with
 * kern_f16x32_pack_tmp_bytes of scratch at tmp.  Rows past the last full
 * group are left as they are. */
void kern_f16x32_pack(void *data, int64_t nr, int64_t ne0, void *tmp);
/* Row `row` (< nr / 32 * 32) of the repacked matrix at data, as floats. */
void kern_f16x32_get_row(const void *data, int64_t ne0, int64_t row, float *dst);

/* Packs nt token rows of ne0 floats (x, rows ne0 apart) as [ne0][nt] at xp. */
void kern_f16x32_pack_act(const float *x, int64_t ne0, int nt, float *xp);

/* y[t*ldy + 32g + i] for ng consecutive groups g of the matrix at w (each
 * K * 32 halves), rows i < 32, tokens t < nt (1 <= nt <= F16X32_TOK), from
 * the packed activations xp ([K][nt]). */
typedef void (*kern_gemm_f16x32_fn)(int64_t K, const uint16_t *w, int64_t ng, const float *xp, int nt, float *y,
                                    int64_t ldy);

/* The kernel at a level: the avx512 one where the level has it, else the
 * scalar reference. */
kern_gemm_f16x32_fn kern_gemm_f16x32_get(kern_level level);

void gemm_f16x32_ref(int64_t K, const uint16_t *w, int64_t ng, const float *xp, int nt, float *y, int64_t ldy);
void gemm_f16x32_avx512(int64_t K, const uint16_t *w, int64_t ng, const float *xp, int nt, float *y, int64_t ldy);

#endif
