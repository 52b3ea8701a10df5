/*
 * gemm_x32.h - f16 and bf16 weights repacked at load time into groups of 32
 * interleaved rows, and the outer-product matmul kernels for that layout.
 *
 * WHY
 *   The plain-row f16/bf16 kernels (x86_avx512/vec_dot_float_avx512.c,
 *   bf16_avx512bf16.c) put K in the 16 lanes of a register: each output's
 *   sum is spread over 16 lanes and reduced at the end, and a 4 x 6 register
 *   tile loads 4 weight and 6 activation vectors per 24 FMAs.  In prefill the
 *   activation rows then come from L2 again for every 4 rows, and the f16
 *   kernel stayed at about 77-80 % of the FMA peak per thread whatever the
 *   blocking (docs/notes/kernels-history.md, "F16 prefill: where the time goes").  Here 16
 *   *rows* share a register instead: per step, two loads give 32 rows'
 *   weights, and each token's activation is one broadcast for two FMAs (f16:
 *   one element, vfmadd231ps) or two dot-product pairs (bf16: two elements,
 *   vdpbf16ps).  There is no horizontal reduction, and per FLOP about a fifth
 *   of the cache traffic (an estimate, docs/notes/kernels-history.md).  In decode, a
 *   thread streams a few groups side by side, each a forward run of whole
 *   64-byte lines.
 *
 * LAYOUT (WEIGHT_LAYOUT_X32, weight.h)
 *   Rows are taken in groups of X32_ROWS = 32 from the start of the view; the
 *   rows past the last full group (ne[1] % 32) stay in the plain layout at
 *   their plain offsets.  A group sits in the bytes of its 32 plain rows
 *   (K * 64 bytes at g * K * 64) as S = K / u steps of 32 units, a unit being
 *   u consecutive elements of one row (u = kern_x32_unit: 1 for f16, 2 for
 *   bf16, the pair one vdpbf16ps lane takes):
 *     element k of row 32g + i is half ((k / u) * 32 + i) * u + k % u
 *   of the group.  bf16 needs an even K (every real model has one).
 *
 * ACTIVATIONS
 *   The kernels read a token group's activations packed as [S][nt] 4-byte
 *   units (kern_x32_pack_act): f16 takes floats x[t][k] (S = K); bf16 takes
 *   the bf16 pairs (x[t][2s], x[t][2s+1]) of the rows act_from_f32 made, one
 *   uint32 each (S = K / 2), or, for the FMA kernel, the same pairs widened
 *   to two floats each (8 bytes, kern_x32_pack_act_wide).  kern_matmul
 *   packs a batch once per call, in groups of X32_TOK tokens (the last one
 *   smaller), group j at unit offset j * X32_TOK * S; one token is its own
 *   packing and is read in place (except widened bf16, packed too).
 *
 * ARITHMETIC (every level; the scalar references are exact to the bit)
 *   For row r, token t:  acc = 0;  for each step s = 0..S-1 in order:
 *     f16:  acc = fmaf(w[r][s], x[t][s], acc)          (one rounding)
 *     bf16: acc = VDPBF16PS lane (ref.h, ref_bf16_dp_lane): the odd element's
 *           product, then the even one's, each a rounded FMA, DAZ/FTZ
 *   bf16 has two SIMD kernels with the same bits: vdpbf16ps on the pairs
 *   (avx512bf16), and FP32 FMAs on the pairs split into floats, odd element
 *   first, under MXCSR DAZ/FTZ (any avx512 level; kern_x32_bf16_wide).
 *   WHY both: an Intel Xeon (family 6 model 207) ran zmm vdpbf16ps at about
 *   a quarter of its zmm FMA rate (1.0-1.2 against 4.7-5.1 G instructions/s
 *   on one thread), half the FLOPs of plain f32 FMA, while on AMD Zen 5 it
 *   gave the bf16 tile 341-405 GFLOP/s against 203-215 for f16.  Intel CPUs
 *   therefore take the FMA kernel by default, the others vdpbf16ps
 *   (KERN_OPT_BF16_FMA, dispatch.h: `kite tune` can time the choice).
 *   Likewise f16 prefill on Intel: vcvtph2ps shares the FMA ports there (the
 *   f16 tile ran 133-140 GFLOP/s from L2 on one thread, the bf16 FMA tile
 *   159-161), so a block of groups is widened to floats once and every
 *   token group runs over the floats (kern_x32_f16_widen, KERN_OPT_F16_WIDEN):
 *   same chains.
 *   The order depends only on K: results are identical for any batch
 *   grouping, token-group size, thread count, and for prefill versus decode.
 *   (It is another order than the plain-row kernels'; both are tested
 *   against the same float budget.)  The tail rows run the plain kernels,
 *   which keep that promise on their own.
 *
 * THREAD SAFETY: pure functions.
 */
#ifndef KITE_KERNELS_GEMM_X32_H
#define KITE_KERNELS_GEMM_X32_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"
#include "tensor/weight.h"

#define X32_ROWS 32 /* rows per interleaved group: two zmm registers of floats */
#define X32_TOK 12  /* tokens per packed group: 24 accumulators, 2 weight and 1 broadcast register */

/* Elements per unit: 1 for f16, 2 for bf16. */
static inline int64_t kern_x32_unit(uint32_t type) { return type == KITE_DTYPE_BF16 ? 2 : 1; }

/* The type and shape can have the layout, and a level gains from it (the
 * registry's repack flag): f16 from avx512 on, bf16 (even K) at avx512bf16,
 * where the SIMD kernels exist (lower levels would only run the scalar
 * references). */
bool kern_x32_pays(kern_level level, uint32_t type, int64_t ne0, int64_t nr);
/* Rows of w held in 32-row groups: ne[1] rounded down to 32 for an X32
 * weight, 0 for any other. */
int64_t kern_x32_rows(const weight *w);

/* Scratch bytes kern_x32_pack needs: one group of 32 plain rows. */
size_t kern_x32_pack_tmp_bytes(int64_t ne0);
/* Repacks the nr plain rows of ne0 columns of `type` (f16 or bf16) at data
 * in place, with kern_x32_pack_tmp_bytes of scratch at tmp.  Rows past the
 * last full group are left as they are. */
void kern_x32_pack(uint32_t type, void *data, int64_t nr, int64_t ne0, void *tmp);
/* Row `row` (< nr / 32 * 32) of the repacked matrix at data, as floats. */
void kern_x32_get_row(uint32_t type, const void *data, int64_t ne0, int64_t row, float *dst);

/* Packs nt token rows of n_units 4-byte units (src, rows src_stride bytes
 * apart) as [n_units][nt] at dst. */
void kern_x32_pack_act(const void *src, size_t src_stride, int64_t n_units, int nt, void *dst);
/* The same for bf16 pairs widened: unit (s, t) becomes two floats, the even
 * element then the odd one, at dst[2 * (s * nt + t)] ([n_units][nt][2]). */
void kern_x32_pack_act_wide(const void *src, size_t src_stride, int64_t n_units, int nt, float *dst);
/* Whether the level's bf16 kernel takes widened activations (8 bytes per
 * pair, kern_x32_pack_act_wide) rather than the pairs (4 bytes): the FMA
 * kernel, at avx512 and avx512vnni, and at avx512bf16 where
 * KERN_OPT_BF16_FMA is on. */
bool kern_x32_bf16_wide(kern_level level);

/* y[t*ldy + 32g + i] for ng consecutive groups g of the matrix at w (each
 * K * 32 halves), rows i < 32, tokens t < nt (1 <= nt <= X32_TOK), from the
 * packed activations xp ([K / u][nt] units). */
/* (kern_gemm_x32_fn, dispatch.h) */

/* The kernel of a type at a level, with the options applied (the registry's
 * x32, or x32_bf16_fma while KERN_OPT_BF16_FMA is on): the SIMD one where
 * the level has it, else the scalar reference; NULL for a type without the
 * layout. */
kern_gemm_x32_fn kern_gemm_x32_get(kern_level level, uint32_t type);

void gemm_x32_f16_ref(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy);
void gemm_x32_bf16_ref(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy);
void gemm_x32_f16_avx512(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy);
void gemm_x32_bf16_avx512bf16(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y,
                              int64_t ldy);
/* f16 prefill with the block widened first: converts the ng groups at w
 * (f16) to floats in buf (ng * 32 * K floats), then runs every token group
 * of the n_tok packed ones (group j at xp + j * X32_TOK * xp_row, y rows
 * from y + j * X32_TOK * ldy) over them with FP32 FMAs: the same chains, so
 * the same bits, as gemm_x32_f16_avx512 (kern_x32_f16_widen). */
void gemm_x32_f16_widened_avx512(int64_t K, const uint16_t *w, int64_t ng, const void *xp, size_t xp_row,
                                 int64_t n_tok, float *y, int64_t ldy, float *buf);
/* The level's widened f16 prefill, or NULL where the plain f16 kernel runs:
 * at avx512 and above where KERN_OPT_F16_WIDEN is on (see ARITHMETIC). */
kern_x32_f16_widened_fn kern_x32_f16_widen(kern_level level);
/* Groups per widened block (about 256 KiB of floats: it stays in L2 while
 * every token group runs over it), and the scratch floats per thread, which
 * bound ng * 32 * K for every K up to ne0. */
int64_t kern_x32_widen_groups(int64_t ne0);
size_t kern_x32_widen_floats(int64_t ne0);

/* bf16 weights, widened activations (kern_x32_pack_act_wide), FP32 FMAs. */
void gemm_x32_bf16f_avx512(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy);

#endif
