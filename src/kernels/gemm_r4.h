/*
 * gemm_r4.h - q4_K / q6_K weights repacked at load time into groups of 4
 * rows interleaved block by block, and the flat-GEMM kernel for that layout.
 *
 * WHY
 *   The k-quant micro-kernels walk 4 rows side by side, one 256-element
 *   block of each per step.  In the file's layout those are 4 streams a row
 *   apart, which this VM's hardware prefetchers follow badly; a software
 *   prefetch of the next row group made up part of it.  Interleaved, the 4
 *   blocks a step reads are adjacent and a thread's rows are one forward
 *   stream.  Measured with a scratch microbenchmark (q4_K, 571 MB, calls of
 *   5632 rows, variants alternated in one process): 20.5 -> 27.6 GB/s on one
 *   thread, 37.6 -> 50.4 GB/s on two (docs/kernels.md).
 *
 * LAYOUT (WEIGHT_LAYOUT_R4, weight.h)
 *   Rows in groups of R4_ROWS = 4 from the start of the view; block b of row
 *   i (i < 4) of a group is at  group + (4 * b + i) * block_bytes.  A group
 *   takes exactly the bytes of its 4 plain rows (in-place repacking, row
 *   offsets keep their meaning at group boundaries); rows past the last full
 *   group stay plain.  The blocks themselves are unchanged.
 *
 * ARITHMETIC
 *   The kernels are the plain-layout k-quant kernels with other strides, so
 *   every output is bit-identical to the plain layout's at the same level
 *   (tests/unit/test_r4.c), unlike the x16 layout.
 *
 * THREAD SAFETY: pure functions.
 */
#ifndef KITE_KERNELS_GEMM_R4_H
#define KITE_KERNELS_GEMM_R4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"
#include "tensor/weight.h"

#define R4_ROWS 4 /* rows per interleaved group */

/* True for weight types that have the layout (q4_K, q6_K). */
bool kern_r4_type(uint32_t type);
/* Whether load-time repacking pays at a level (where the VNNI k-quant
 * kernels exist; below, rows would have to be gathered back first). */
bool kern_r4_pays(kern_level level);
/* Rows of w held in groups: ne[1] rounded down to 4 for an R4 weight, 0 for
 * any other layout. */
int64_t kern_r4_rows(const weight *w);

/* Repacks nr rows of ne0 columns of `type` at data (plain layout) in place;
 * tmp: 4 plain rows of scratch.  Rows past the last full group stay. */
void kern_r4_pack(uint32_t type, void *data, int64_t nr, int64_t ne0, void *tmp);
/* Plain bytes of row i (0..3) of the group at grp (rows of nb blocks of
 * block_bytes) into row_out. */
void kern_r4_unpack_row(const void *grp, int i, int64_t nb, size_t block_bytes, void *row_out);

/* y[t*ldy + 4g + i] for the n_groups groups from grp (consecutive, each 4
 * rows of n elements) and t < nt tokens (q8_K rows at a + t*a_stride). */
typedef void (*kern_gemm_r4_fn)(int64_t n, float *y, int64_t ldy, const void *grp, int64_t n_groups,
                                const void *a, size_t a_stride, int nt);

/* The kernel of a type at a level, or NULL where the level has none (the
 * caller then gathers each group's rows and uses the plain GEMM). */
kern_gemm_r4_fn kern_gemm_r4_get(kern_level level, uint32_t type);

#define KERN_GEMM_R4_DECL(NAME)                                                                        \
    void NAME(int64_t n, float *y, int64_t ldy, const void *grp, int64_t n_groups, const void *a,     \
              size_t a_stride, int nt)
KERN_GEMM_R4_DECL(gemm_r4_q4_K_vnni);
KERN_GEMM_R4_DECL(gemm_r4_q6_K_vnni);

#endif
