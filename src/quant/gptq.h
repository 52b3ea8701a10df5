/*
 * gptq.h - GPTQ: error-compensating quantization of a linear layer's rows
 * onto a GGUF block type's own grid (Frantar et al., 2022).
 *
 * DESIGN
 *   For a layer y = W x with calibration inputs X, GPTQ quantizes W one
 *   column (input channel) at a time, left to right in an order shared by all
 *   rows, and after each column spreads the rounding error over the columns
 *   not yet quantized so that ||W X - Q X|| stays small.  Everything needed
 *   comes from the Hessian H = 2 X X^T / n of the layer's inputs:
 *     gptq_prepare:  H + lambda I (lambda = damp * mean diag H; zero diagonal
 *                    entries -- dead inputs -- set to 1), optional act-order
 *                    permutation (descending diag H), then U = the upper
 *                    Cholesky factor of (H + lambda I)^-1 (U^T U = H^-1),
 *                    blocked and threaded (linalg.h: la_gptq_factor).
 *     gptq_quantize_rows: a chunk of rows at a time; for each block of 128
 *                    columns, for each row, for each column i: q = grid(w_i),
 *                    e = (w_i - q) / U_ii, w_j -= e U_ij for the later columns
 *                    j of the block (vector axpy); after the block, one lazy
 *                    update of all columns right of it with the block's
 *                    errors of every row of the chunk: W[:, b1:] -= E U[b0:b1,
 *                    b1:], a GEMM (the same arithmetic as updating every
 *                    column each time, U read once per chunk instead of once
 *                    per row).
 *   Rows are independent given U, so chunks are quantized in parallel (one
 *   per thread, each with its own scratch).  A row's bytes do not depend on
 *   the chunk it is in, the thread count or the CPU level (la_gemm.h).
 *
 *   Grid (grid.h): at the first column of each group the group's parameters
 *   are computed from the current (error-updated) weights the way the
 *   type's RTN quantizer does; the group's columns are then rounded to that
 *   fixed grid.  With act-order the columns of a group are no longer
 *   visited together, so the parameters of every group are computed from the
 *   original weights before the sweep ("static groups").
 *
 *   With a diagonal H, U is diagonal, no error moves, and the bytes are the
 *   RTN bytes (tests/unit/test_gptq.c).
 *
 * THREAD SAFETY
 *   No state; U and perm are read-only during gptq_quantize_row, which may
 *   run on many rows at once (each with its own scratch).
 */
#ifndef KITE_QUANT_GPTQ_H
#define KITE_QUANT_GPTQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GPTQ_BLOCK 128        /* columns per lazy-update block */
#define GPTQ_DAMP_DEFAULT 0.01 /* dampening, fraction of the mean diagonal (the GPTQ paper's default) */

typedef struct gptq_params {
    uint32_t type;   /* grid type (gptq_supported) */
    int bits;        /* grid bits, 0: the type's own */
    int group;       /* elements per parameter group: 32, 64 or 128 */
    bool act_order;  /* visit columns by descending H diagonal */
    double damp;     /* lambda = damp * mean(diag H); <= 0: GPTQ_DAMP_DEFAULT */
} gptq_params;

/* The factor the row sweeps need, for an n-column layer. */
typedef struct gptq_factor {
    int n;           /* columns (layer input width) */
    const struct kern_la_ops *la; /* GEMM tiles of the sweeps (the active registry level) */
    float *u;        /* [n][n] upper Cholesky factor of the damped inverse Hessian, permuted */
    int *perm;       /* [n] column visited at step i (identity without act-order) */
    double damp_used;/* dampening fraction that made H positive definite */
} gptq_factor;

struct la_ctx;

/* Builds the factor from H (n x n, row-major, symmetric; not modified) on
 * la (its pool and kernels; NULL: a one-thread context of the active level).
 * Dampening is multiplied by 10 (up to 4 times) if the damped H is still not
 * positive definite.  Returns KITE_OK, KITE_E_NOMEM, or KITE_E_ARG (H not
 * positive definite even then, non-finite, or n <= 0); on failure *f is
 * zeroed. */
int gptq_prepare(const double *h, int n, const gptq_params *p, struct la_ctx *la, gptq_factor *f /* OUT */);
void gptq_factor_free(gptq_factor *f);

/* Whether gptq_quantize_row supports type with `bits` grid levels: the
 * legacy grids (grid.h) and q3_K's super-block grid (bits 0; groups are its
 * fixed 16-element sub-blocks, parameters fitted per 256-element super-block,
 * rows a multiple of 256). */
bool gptq_supported(uint32_t type, int bits);

#define GPTQ_CHUNK_ROWS 128 /* rows per lazy-update GEMM: U is packed once per chunk */

/* Floats of scratch gptq_quantize_rows needs for chunks of up to `rows`
 * rows of n columns (rows <= GPTQ_CHUNK_ROWS). */
size_t gptq_scratch_floats(int n, int rows);

/* Quantizes rows w[r * ldw + 0..n), r < n_rows (n a multiple of 32; of 256
 * for q3_K), onto p's grid with error compensation; row r's n/32 blocks of
 * p->type go to dst + r * dst_stride bytes.  scratch: at least
 * gptq_scratch_floats(n, min(n_rows, GPTQ_CHUNK_ROWS)) floats. */
void gptq_quantize_rows(const float *w, size_t ldw, int n_rows, const gptq_factor *f, const gptq_params *p,
                        float *scratch, void *dst, size_t dst_stride);

/* One row: gptq_quantize_rows with n_rows 1 (scratch: gptq_scratch_floats(n, 1)). */
void gptq_quantize_row(const float *w, const gptq_factor *f, const gptq_params *p, float *scratch, void *dst);

#endif
