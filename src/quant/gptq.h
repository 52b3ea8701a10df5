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
 *                    Cholesky factor of (H + lambda I)^-1 (U^T U = H^-1).
 *     gptq_quantize_row: for each block of 128 columns, for each column i:
 *                    q = grid(w_i), e = (w_i - q) / U_ii, w_j -= e U_ij for
 *                    the later columns j of the block; after the block, one
 *                    lazy update of all columns right of it with the block's
 *                    errors (the same arithmetic as updating every column
 *                    each time, fewer passes over memory).
 *   Rows are independent given U, so they are quantized in parallel and in
 *   chunks (bounded memory).
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
    float *u;        /* [n][n] upper Cholesky factor of the damped inverse Hessian, permuted */
    int *perm;       /* [n] column visited at step i (identity without act-order) */
    double damp_used;/* dampening fraction that made H positive definite */
} gptq_factor;

/* Builds the factor from H (n x n, row-major, symmetric; not modified).
 * Dampening is multiplied by 10 (up to 4 times) if the damped H is still not
 * positive definite.  Returns KITE_OK, KITE_E_NOMEM, or KITE_E_ARG (H not
 * positive definite even then, or n <= 0); on failure *f is zeroed. */
int gptq_prepare(const double *h, int n, const gptq_params *p, gptq_factor *f /* OUT */);
void gptq_factor_free(gptq_factor *f);

/* Whether gptq_quantize_row supports type with `bits` grid levels: the
 * legacy grids (grid.h) and q3_K's super-block grid (bits 0; groups are its
 * fixed 16-element sub-blocks, parameters fitted per 256-element super-block,
 * rows a multiple of 256). */
bool gptq_supported(uint32_t type, int bits);

/* Floats of scratch gptq_quantize_row needs for an n-column row. */
size_t gptq_scratch_floats(int n);

/* Quantizes row w[0..n) (n a multiple of 32; of 256 for q3_K) onto p's grid with error
 * compensation; writes n/32 blocks of p->type to dst.  scratch: at least
 * gptq_scratch_floats(n) floats. */
void gptq_quantize_row(const float *w, const gptq_factor *f, const gptq_params *p, float *scratch, void *dst);

#endif
