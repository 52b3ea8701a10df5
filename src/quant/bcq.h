/*
 * bcq.h - binary-coding quantization (BCQ) and the LUT-GEMM matrix-vector
 * product (issue 4 item 7; docs/quantization/calibrated.md, "LUT-GEMM").
 *
 * DESIGN
 *   A weight row is cut into groups of `group` columns; within a group
 *       w ~= sum_{i<q} alpha_i * b_i,   b_i in {-1, +1}^group,
 *   with q binary planes and q scales per group (Xu et al. 2018; used by
 *   LUT-GEMM, Park et al. 2024).  bcq_fit finds them by a greedy start
 *   (b_i = sign(residual), alpha_i = mean |residual|) and alternating least
 *   squares: the alphas of fixed planes by the q x q normal equations, then
 *   each weight's signs by trying all 2^q patterns against fixed alphas.
 *   Each half-step cannot raise the group's squared error, so the error is
 *   non-increasing over iterations, and more planes never fit worse.
 *
 *   LUT GEMV: y = W x.  For every 8 consecutive inputs a table of the 256
 *   sums +-x_0 +- ... +- x_7 (all sign patterns) is built once per input
 *   vector; a plane's 8 sign bits are then an index into it, so each row
 *   costs one lookup per (plane, 8 columns) instead of 8 multiply-adds, and
 *   the tables are shared by all rows.
 *
 * LAYOUT
 *   planes: [rows][q][cols8 / 8] bytes, bit j of byte c = sign of column
 *   8c + j (1: +1, 0: -1); cols8 = cols rounded up to 8 (padding columns
 *   are not fitted and always meet x = 0: bcq_lut_gemv pads x with zeros).
 *   alpha: [rows][n_groups][q] floats.
 */
#ifndef KITE_QUANT_BCQ_H
#define KITE_QUANT_BCQ_H

#include <stddef.h>
#include <stdint.h>

#define BCQ_MAX_BITS 8

typedef struct bcq_matrix {
    int32_t rows, cols;   /* logical shape */
    int32_t cols8;        /* cols rounded up to a multiple of 8 */
    int32_t bits;         /* q, 1..BCQ_MAX_BITS */
    int32_t group;        /* columns per scale group, a multiple of 8 */
    int32_t n_groups;     /* cols8 / group, rounded up */
    uint8_t *planes;      /* [rows][bits][cols8 / 8] */
    float *alpha;         /* [rows][n_groups][bits] */
} bcq_matrix;

/* Allocates an empty (zeroed) matrix; returns a kite_status. */
int bcq_alloc(bcq_matrix *m, int32_t rows, int32_t cols, int32_t bits, int32_t group);
void bcq_free(bcq_matrix *m);

/* Fits row-major w[rows][cols] into m (allocated with the same shape) with
 * `iters` alternating-least-squares rounds (0: greedy only).  Returns the
 * total squared reconstruction error. */
double bcq_fit(bcq_matrix *m, const float *w, int32_t iters);

/* Row r reconstructed into out[cols8] (padding columns get arbitrary values). */
void bcq_dequant_row(const bcq_matrix *m, int32_t r, float *out);

/* Scratch floats lut_gemv needs for m: (cols8 / 8) * 256 tables + cols8. */
size_t bcq_lut_scratch_floats(const bcq_matrix *m);

/* y[rows] = W x with the lookup tables (x: cols floats).  scratch: see
 * bcq_lut_scratch_floats. */
void bcq_lut_gemv(const bcq_matrix *m, const float *x, float *y, float *scratch);

/* The baseline: y = W x by dequantizing each row into row_buf[cols8] and
 * taking a dot product. */
void bcq_dequant_gemv(const bcq_matrix *m, const float *x, float *y, float *row_buf);

#endif
