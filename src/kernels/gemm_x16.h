/*
 * gemm_x16.h - q4_0 / q4_1 / q5_0 / q5_1 / q8_0 / iq4_nl / q2_K / q3_K / q4_K / q5_K / q6_K / iq4_xs weights repacked at load time into
 * groups of 16 interleaved rows, and the matmul kernels for that layout.
 *
 * WHY
 *   The plain-layout VNNI kernels (vec_dot_quant_vnni.c) spend about 4
 *   vector instructions per (row, token, pair of blocks) on scaling: each
 *   vpdpbusd leaves 8 int32 lanes per block that are converted, scaled and
 *   accumulated separately.  With 16 rows interleaved, one int32 lane holds
 *   one row's whole block sum after 8 vpdpbusd, so the float work (convert,
 *   d_w*d_a, FMA) is done once per (16 rows, token, block) on 16 useful
 *   lanes, and the activation operand is a 4-byte broadcast.  Decode spends
 *   about a third of the instructions per weight byte; batches and prefill
 *   reach a far larger share of the vpdpbusd peak.
 *
 * LAYOUT (WEIGHT_LAYOUT_X16, weight.h)
 *   Rows are taken in groups of X16_ROWS = 16 from the start of the view;
 *   rows past the last full group (ne[1] % 16 of them) stay in the plain
 *   layout, after the groups' bytes, at their plain offsets.  The groups
 *   are cut along K into panels of kern_x16_panel_blocks(type) blocks (17-27
 *   KiB per group; the last panel may be narrower) and stored panel by
 *   panel: panel 0 of every group, then panel 1 of every group, ...
 *   (kern_x16_panel_offset).  WHY panels: a group's activation blocks are
 *   touched once per group, and when a group is longer than about 30 KiB
 *   the weight stream evicts them from L1 in between: the q4_0 kernel ran
 *   at 22.5 GB/s on one thread for K = 5632 (50 KiB groups) against 28.6
 *   for K = 2048 and for K = 5632 with the activations confined to 64
 *   blocks (scratch microbenchmark, 576 MB).  Panel by panel, a thread's
 *   groups are still one forward run per panel.  Matrices of up to one
 *   panel (K <= 2048 for q4_0/q4_K/q6_K, 1024 for q8_0) are one run of
 *   groups, each group in the bytes of its 16 plain rows.
 *   Within a group-panel of nb blocks, block b is
 *     scales: 16 f16 (32 bytes), row i's at byte 2i;
 *     quants: QB bytes:
 *       q4_0 (QB = 256): 4 chunks j of 64 bytes; chunk j holds, for row i at
 *            byte 4i, the block's qs[4j..4j+3] (low nibbles: elements
 *            4j..4j+3, high nibbles: 16+4j..16+4j+3);
 *       q8_0 (QB = 512): 8 chunks j; chunk j holds row i's qs[4j..4j+3] with
 *            the sign bit flipped (w + 128, unsigned) at byte 4i;
 *       q5_0 (QB = 320): 64 bytes of fifth bits, then q4_0's 4 chunks of
 *            nibbles; row i's 4 bytes at byte 4i of the first 64 hold its
 *            qh transposed: bit m of byte k is the fifth bit of element
 *            4m + k (m < 4: chunk m's low nibbles) or 16 + 4(m - 4) + k
 *            (m >= 4: chunk m - 4's high nibbles) (kern_x16_q5_0_qh);
 *       iq4_nl (QB = 256): q4_0's chunks (the blocks have q4_0's bytes: d,
 *            then the nibbles in q4_0's element order), each nibble q
 *            standing for u = kite_iq4nl_values[q] + 128.
 *   q4_1 and q5_1 (QB as q4_0 / q5_0) have a min as well: their group block b
 *   is [16 f16 d][16 f16 m][quants] (320 / 384 bytes, whole lines), the
 *   blocks one after the other (kern_x16_q1_offset), the quants as q4_0's /
 *   q5_0's with no offset (u = q, 0..15 / 0..31).
 *   The other types' blocks go in pairs, one after the other:
 *     [scales b][scales b+1][quants b][quants b+1]   (b even)
 *   with an odd last block as [scales][quants] (kern_x16_scale_offset,
 *   kern_x16_quant_offset).  WHY pairs: a group is then read as one forward
 *   stream, which this VM's prefetchers follow far better than the earlier
 *   layout's two streams (all scales, then all quants): one thread reading
 *   the same bytes went from 21 to 34 GB/s, and the q4_0 decode kernel from
 *   19 to 27 GB/s (BENCHMARKS.md); and a pair is whole cache lines
 *   (576 / 1088 bytes), so the 64-byte quant chunks stay line-aligned.
 *   The types become unsigned weights u = w + off (off = 8 for q4_0, 16
 *   for q5_0, 128 for q8_0 and iq4_nl) times signed q8_0 activations, the
 *   vpdpbusd operand order.
 *
 *   q4_K (256-element super-blocks, q8_K activations) has its own block
 *   format, X16K_BLOCK_BYTES = 16 * 144 bytes per group block b, the blocks
 *   one after the other (each is whole cache lines already):
 *     X16K_D     16 f16 d, row i's at byte 2i;
 *     X16K_DMIN  16 f16 dmin;
 *     X16K_SC    8 chunks j of 16 bytes: row i's sc_j | (m_j >> 4) << 6 at
 *                byte i (sc_j, m_j: the 6-bit scale and min of sub-block j);
 *     X16K_ML    4 chunks p of 16 bytes: (m_2p & 15) | (m_2p+1 & 15) << 4;
 *     X16K_QS    32 chunks c of 64 bytes: row i's qs[4c..4c+3] at byte 4i
 *                (low nibbles: sub-block 2(c/8), elements 4(c%8)..+3; high
 *                nibbles: sub-block 2(c/8)+1, the same elements).
 *   q6_K (256-element super-blocks, q8_K activations): X16Q6_BLOCK_BYTES =
 *   16 * 210 bytes per group block b, in three parts:
 *     SC  16 chunks g of 16 bytes: row i's int8 scale g at byte i;
 *     QS  4 steps s = 2h + kk (h: 128-element half, kk: 0..1) of 768
 *         bytes, each [A][H][B] of 4 chunks of 64 bytes; chunk k' (k =
 *         4kk + k') holds at byte 4i row i's
 *           A: ql[64h + 4k ..+3]   H: qh[32h + 4k ..+3]   B: ql[64h + 32 + 4k ..+3]
 *         so that A's low nibbles with H's bits 0-1 are elements
 *         128h + 4k..+3 (scale group 8h + kk), B's low nibbles with bits
 *         2-3 elements +32 (group +2), A's high nibbles with bits 4-5
 *         elements +64 (group +4), B's high nibbles with bits 6-7 +96
 *         (group +6) (ggml's q6_K element order);
 *     D   16 f16 d;
 *   as [SC][QS][D] for an even b and [D][SC][QS] for an odd one
 *   (kern_x16q6_offset): blocks are 52.5 lines, and so every 64-byte chunk
 *   stays line-aligned.
 *   q3_K: X16Q3_BLOCK_BYTES = 16 * 110 bytes per group block b, in four parts:
 *     SC  12 chunks j of 16 bytes: row i's plain scales[j] at byte i (the
 *         file's 6-bit packing: chunks 0-7 hold the low nibbles of scales
 *         j and j + 8, chunks 8-11 the top 2 bits of j, j + 4, j + 8, j + 12);
 *     HM  8 chunks c of 64 bytes: row i's hmask[4c..4c+3] at byte 4i;
 *     QS  16 chunks c of 64 bytes: row i's qs[4c..4c+3] at byte 4i;
 *     D   16 f16 d;
 *   as [SC][HM][QS][D] for an even b and [D][HM][QS][SC] for an odd one
 *   (kern_x16q3_offset; blocks are 27.5 lines, and so every 64-byte chunk
 *   stays line-aligned).  Element 128h + 32j + l (l < 32) has its low bits
 *   at bits 2j..2j+1 of qs[32h + l] and its third bit at bit 4h + j of
 *   hmask[l] (ggml's q3_K order), so chunk 8h + c of QS and chunk c of HM
 *   hold elements 128h + 32j + 4c..+3 of every j: the unsigned value
 *   u = low | third << 2 (0..7, the weight u - 4) of 16 rows x 4 elements
 *   is two shifts, an AND and one vpternlogd away.
 *   q2_K: X16Q2_BLOCK_BYTES = 16 * 84 bytes per group block, whole lines:
 *     X16Q2_D     16 f16 d;   X16Q2_DMIN  16 f16 dmin;
 *     X16Q2_SC    16 chunks g of 16 bytes: row i's scales[g] at byte i
 *                 (4-bit scale, 4-bit min of elements 16g..16g+15);
 *     X16Q2_QS    q3_K's QS (the 2-bit fields in the same order).
 *   WHY: the plain k-quant kernels are partly bound by instructions (q4_K:
 *   41 GB/s on one thread from L2, the q4_0 x16 kernel 96-104): they
 *   unpack the scales per row and reduce 8 lanes per row and token.  Here
 *   the scales of 16 rows unpack with one extending load (and an AND, for
 *   q4_K), and each int32 lane holds one row.
 *
 * ARITHMETIC (every level; the scalar reference is exact to the bit)
 *   For row i, token t: f = 0; for each block b in order (panel after
 *   panel: the kernel continues f from y for every panel but the first):
 *     s = corr[t][b] + sum_k u[i][b][k] * a[t][b][k]   (int32, exact)
 *     f = fma((float)s, d_w[i][b] * d_a[t][b], f)
 *   with corr[t][b] = -off * sum_k a[t][b][k] and d_a the activation block's
 *   scale as float (kern_x16_act_prep, once per matmul call).  The order
 *   depends only on nb: results are identical for any batch grouping,
 *   thread count and for prefill versus decode, as kern_matmul promises.
 *   (They differ in the last bits from the plain-layout kernels, whose
 *   float order is another; each layout is tested against the same
 *   budget.)
 *   q4_1 / q5_1 take the same s with corr = 0, and the min term after it:
 *     f = fma((float)s, d_w * d_a, f);  f = fma(m_w, d_a * (float)sum_a, f)
 *   with sum_a = sum_k a[t][b][k] (kern_x16_act_prep's corr with off = -1).
 *   q4_K, per block b (a: the token's q8_K block, dy its float d):
 *     isum = sum_j sc_j * sum_{k in j} q[k] * a.qs[k]            (int32, exact)
 *     msum = sum_j m_j * (a.bsums[2j] + a.bsums[2j+1])          (int32, exact)
 *     f = fma(-(float)msum, dmin * dy, f);  f = fma((float)isum, d * dy, f)
 *   (|isum| <= 8*63*32*15*128 < 2^25; no correction terms: q is unsigned.)
 *   q6_K, per block b (u: the unsigned 6-bit values, sc_g signed):
 *     isum = sum_g sc_g * sum_{k in g} u[k] * a.qs[k]
 *     csum = sum_g sc_g * a.bsums[g]
 *     f = fma((float)(isum - 32 * csum), d * dy, f)                 (int32, exact)
 *   (|isum| <= 16*128*16*63*128 < 2^29, |32 csum| < 2^28.)
 *   q3_K, per block b (u = low | third << 2, s_g = the 6-bit scale - 32):
 *     isum = sum_g s_g * sum_{k in g} u[k] * a.qs[k]
 *     csum = sum_g s_g * a.bsums[g]
 *     f = fma((float)(isum - 4 * csum), d * dy, f)                  (int32, exact)
 *   (|isum| <= 16*32*16*7*127 < 2^23.)
 *   q2_K, per block b (u: the 2-bit values, sc_g and m_g the 4-bit scale
 *   and min of scale group g):
 *     isum = sum_g sc_g * sum_{k in g} u[k] * a.qs[k],  msum = sum_g m_g * a.bsums[g]
 *     f = fma(-(float)msum, dmin * dy, f);  f = fma((float)isum, d * dy, f)   (q4_K's order)
 *
 * THREAD SAFETY: pure functions.
 */
#ifndef KITE_KERNELS_GEMM_X16_H
#define KITE_KERNELS_GEMM_X16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"
#include "tensor/weight.h"

#define X16_ROWS 16    /* rows per interleaved group */
#define X16_MAX_TOK 16 /* tokens per kernel pass (register budget: 16 accumulators); callers loop */

#define X16_SCALE_BYTES (X16_ROWS * 2) /* one block's 16 f16 scales */

/* q4_K group block: byte offsets of its parts and its size (LAYOUT above) */
#define X16K_D 0
#define X16K_DMIN 32
#define X16K_SC 64
#define X16K_ML 192
#define X16K_QS 256
#define X16K_BLOCK_BYTES (X16K_QS + 32 * 64) /* = 16 plain q4_K blocks */

/* q5_K group block: q4_K's parts, then the fifth bits (LAYOUT above) */
#define X16Q5_QH X16K_BLOCK_BYTES
#define X16Q5_BLOCK_BYTES (X16Q5_QH + 8 * 64) /* = 16 plain q5_K blocks */

/* iq4_xs group block (LAYOUT above) */
#define X16I4_D 0
#define X16I4_SL 32
#define X16I4_SH 96
#define X16I4_QS 128
#define X16I4_BLOCK_BYTES (X16I4_QS + 32 * 64) /* = 16 plain iq4_xs blocks */

/* q6_K group block: its size and the offsets of its parts (LAYOUT above) */
#define X16Q6_BLOCK_BYTES (16 * 210)
enum { X16Q6_SC, X16Q6_QS, X16Q6_D };
static inline size_t kern_x16q6_offset(int64_t b, int part) {
    static const size_t even[3] = {0, 256, 256 + 3072}, odd[3] = {32, 288, 0};
    return (size_t)b * X16Q6_BLOCK_BYTES + (b & 1 ? odd : even)[part];
}

/* q3_K group block: its size and the offsets of its parts (LAYOUT above) */
#define X16Q3_BLOCK_BYTES (16 * 110)
enum { X16Q3_SC, X16Q3_HM, X16Q3_QS, X16Q3_D };
static inline size_t kern_x16q3_offset(int64_t b, int part) {
    static const size_t even[4] = {0, 192, 704, 1728}, odd[4] = {1568, 32, 544, 0};
    return (size_t)b * X16Q3_BLOCK_BYTES + (b & 1 ? odd : even)[part];
}

/* q2_K group block (LAYOUT above) */
#define X16Q2_D 0
#define X16Q2_DMIN 32
#define X16Q2_SC 64
#define X16Q2_QS 320
#define X16Q2_BLOCK_BYTES (X16Q2_QS + 16 * 64) /* = 16 plain q2_K blocks */

/* Elements per block of a type with the layout: 256 for the k-quants and
 * iq4_xs (q8_K activations), else 32. */
static inline int64_t kern_x16_block_elems(uint32_t type) {
    return type == KITE_DTYPE_Q2_K || type == KITE_DTYPE_Q3_K || type == KITE_DTYPE_Q4_K || type == KITE_DTYPE_Q5_K ||
                   type == KITE_DTYPE_Q6_K || type == KITE_DTYPE_IQ4_XS
               ? 256
               : 32;
}

/* Quant bytes of one block in a group (QB): 256 for q4_0, q4_1 and iq4_nl, 320 for
 * q5_0 and q5_1, 512 for q8_0. */
static inline size_t kern_x16_quant_bytes(uint32_t type) {
    return type == KITE_DTYPE_Q4_0 || type == KITE_DTYPE_Q4_1 || type == KITE_DTYPE_IQ4_NL ? 256
           : type == KITE_DTYPE_Q5_0 || type == KITE_DTYPE_Q5_1                              ? 320
                                                                                             : 512;
}

/* q4_1 / q5_1: a group block's bytes and the offsets of its parts (LAYOUT above). */
#define X16Q1_D 0
#define X16Q1_M 32
#define X16Q1_QS 64
static inline size_t kern_x16_q1_block_bytes(uint32_t type) { return type == KITE_DTYPE_Q5_1 ? 384 : 320; }
static inline bool kern_x16_has_min(uint32_t type) { return type == KITE_DTYPE_Q4_1 || type == KITE_DTYPE_Q5_1; }

/* q5_0's qh (bit e: element e's fifth bit) transposed as the layout stores
 * it (bit m of byte k: element 4m + k for m < 4, 16 + 4(m - 4) + k else),
 * and back. */
uint32_t kern_x16_q5_0_qh(uint32_t qh);
uint32_t kern_x16_q5_0_qh_inverse(uint32_t t);

/* Byte offsets of block b's scales and quants inside a group of nb blocks
 * with qb quant bytes per block (the pair order above). */
static inline size_t kern_x16_scale_offset(size_t qb, int64_t nb, int64_t b) {
    const size_t pair = (size_t)(b & ~(int64_t)1) * (X16_SCALE_BYTES + qb);
    return (b | 1) < nb ? pair + (size_t)(b & 1) * X16_SCALE_BYTES : pair;
}
static inline size_t kern_x16_quant_offset(size_t qb, int64_t nb, int64_t b) {
    const size_t pair = (size_t)(b & ~(int64_t)1) * (X16_SCALE_BYTES + qb);
    return (b | 1) < nb ? pair + 2 * X16_SCALE_BYTES + (size_t)(b & 1) * qb : pair + X16_SCALE_BYTES;
}

/* True for weight types that have the layout (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_K, q3_K, q4_K, q5_K,
 * q6_K, iq4_xs). */
bool kern_x16_type(uint32_t type);
/* Whether load-time repacking pays at a level for some type (the registry's repack flags:
 * set where a SIMD kernel for the layout exists; elsewhere only the scalar reference would run). */
bool kern_x16_pays(kern_level level);
/* Whether a type's weights are repacked at a level: its own repack flag (the avx2 level repacks q4_0
 * only, the VNNI levels every x16 type). */
bool kern_x16_pays_type(kern_level level, uint32_t type);
/* Rows of w held in interleaved groups: ne[1] rounded down to 16 for an
 * X16 weight, 0 for a plain one. */
int64_t kern_x16_rows(const weight *w);
/* Activation offset of a type: 8 (q4_0), 16 (q5_0) or 128 (q8_0, iq4_nl); -1 for q4_1 and q5_1 (corr is
 * then the activation block's sum, for the min term); 0 for the q8_K types. */
int32_t kern_x16_offset(uint32_t type);

/* Blocks per panel: 64 (q4_0, q5_0, iq4_nl), 32 (q8_0), 8 (the q8_K types). */
int64_t kern_x16_panel_blocks(uint32_t type);
/* Byte offset, from the start of the view, of group g's panel that starts
 * at block b0 (a multiple of the panel width), in a matrix of n_groups
 * groups of rows of nb blocks. */
size_t kern_x16_panel_offset(uint32_t type, int64_t nb, int64_t n_groups, int64_t g, int64_t b0);

/* Scratch bytes kern_x16_pack needs: 16 plain rows, and for a matrix of
 * several panels one bit per 16-row block (its in-place permutation). */
size_t kern_x16_pack_tmp_bytes(uint32_t type, int64_t nr, int64_t ne0);
/* Repacks nr rows of ne0 columns of `type` at data (plain layout) in place,
 * with kern_x16_pack_tmp_bytes of scratch at tmp.  Rows past the last full
 * group are left as they are. */
void kern_x16_pack(uint32_t type, void *data, int64_t nr, int64_t ne0, void *tmp);
/* Plain bytes of block b (blk) / of the whole row (row_out) of a grouped
 * row (row < nr / 16 * 16) of the repacked matrix at data. */
void kern_x16_row_block(uint32_t type, const void *data, int64_t nr, int64_t ne0, int64_t row, int64_t b, void *blk);
void kern_x16_unpack_row(uint32_t type, const void *data, int64_t nr, int64_t ne0, int64_t row, void *row_out);
/* Block b of row i of the group-panel at grp (nb blocks): plain bytes into
 * blk (one plain block). */
void kern_x16_get_block(uint32_t type, const void *grp, int64_t nb, int64_t b, int i, void *blk);
/* The k-quant block formats (gemm_x16_kquant.c): row i's plain block at blk
 * into group block b at grp, and back. */
void kern_x16k_put_block(uint32_t type, void *grp, int64_t b, int i, const void *blk);
void kern_x16k_get_block(uint32_t type, const void *grp, int64_t b, int i, void *blk);

/* corr[b] = -off * sum(qs of block b), da[b] = float(d of block b), b < nb,
 * for one q8_0 activation row (q4_0, q8_0; the k-quants read their q8_K
 * rows only). */
void kern_x16_act_prep(const void *q8row, int64_t nb, int32_t off, int32_t *corr, float *da);

/* y[t*ldy + i] for i < 16 rows of the group-panel at grp (nb blocks) and
 * t < nt tokens (1 <= nt <= X16_MAX_TOK): token t's q8_0 (q8_K) blocks of
 * the panel at a + t*a_stride, their corr/da at corr + t*c_stride,
 * da + t*c_stride (q4_0, q8_0; the k-quant kernels ignore corr and da).
 * acc: continue the sums already in y (every panel but a row's first). */
/* (kern_gemm_x16_fn, dispatch.h) */

/* The kernel of a type at a level (its registry entry): the VNNI one where
 * the level has it, else the scalar reference; NULL for a type without the
 * layout. */
kern_gemm_x16_fn kern_gemm_x16_get(kern_level level, uint32_t type);

#define KERN_GEMM_X16_DECL(NAME)                                                                           \
    void NAME(int64_t nb, float *y, int64_t ldy, const void *grp, const void *a, size_t a_stride,        \
              const int32_t *corr, const float *da, int64_t c_stride, int nt, int acc)
KERN_GEMM_X16_DECL(gemm_x16_q4_0_ref);
KERN_GEMM_X16_DECL(gemm_x16_q8_0_ref);
KERN_GEMM_X16_DECL(gemm_x16_q4_0_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q4_0_avx2);
KERN_GEMM_X16_DECL(gemm_x16_q8_0_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q4_K_ref);
KERN_GEMM_X16_DECL(gemm_x16_q4_K_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q6_K_ref);
KERN_GEMM_X16_DECL(gemm_x16_q6_K_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q5_0_ref);
KERN_GEMM_X16_DECL(gemm_x16_q5_0_vnni);
KERN_GEMM_X16_DECL(gemm_x16_iq4_nl_ref);
KERN_GEMM_X16_DECL(gemm_x16_iq4_nl_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q5_K_ref);
KERN_GEMM_X16_DECL(gemm_x16_q5_K_vnni);
KERN_GEMM_X16_DECL(gemm_x16_iq4_xs_ref);
KERN_GEMM_X16_DECL(gemm_x16_iq4_xs_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q3_K_ref);
KERN_GEMM_X16_DECL(gemm_x16_q3_K_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q2_K_ref);
KERN_GEMM_X16_DECL(gemm_x16_q2_K_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q4_1_ref);
KERN_GEMM_X16_DECL(gemm_x16_q4_1_vnni);
KERN_GEMM_X16_DECL(gemm_x16_q5_1_ref);
KERN_GEMM_X16_DECL(gemm_x16_q5_1_vnni);

#endif
