/*
 * awq.h - activation-aware weight quantization (Lin et al., 2023): a
 * per-input-channel scale search folded into the preceding operation.
 *
 * DESIGN
 *   For a linear group (matrices sharing one input: wq/wk/wv, w_gate/w_up,
 *   or a single wo, w_down, output) with calibration inputs X and per-channel
 *   mean |x| s_x, AWQ scales input channel j by s_j: the file stores
 *   Q(W diag(s)) and the preceding operation produces X diag(s)^-1, so
 *   salient channels (large activations) lose less to rounding.  The search:
 *       s(alpha) = max(s_x, 1e-4)^alpha, normalised by sqrt(max s * min s),
 *       alpha = 0, 1/n_grid, ..., (n_grid-1)/n_grid,
 *   minimising  sum over the group's rows and the sampled rows of X of
 *       ( (W - Q(W diag s) diag s^-1) x )^2.
 *   alpha = 0 gives s = 1 exactly, i.e. RTN; a larger alpha is kept only if
 *   it is strictly better.  Q is the quantization the file will get
 *   (awq_fake_quant_row: the type's grid in groups, or its reference
 *   quantizer), so the search sees the real rounding.
 *
 *   Folding (done by the caller, quant/quantize.c): attn_norm / ffn_norm /
 *   output_norm divided by s; wv rows divided by the wo scale (tied across
 *   the query heads sharing a KV head); w_up rows divided by the w_down
 *   scale.  The graph is unchanged and the full-precision output is the same
 *   up to float rounding (tests/unit/test_awq.c).
 *
 * THREAD SAFETY
 *   No state.
 */
#ifndef KITE_QUANT_AWQ_H
#define KITE_QUANT_AWQ_H

#include <stddef.h>
#include <stdint.h>

#define AWQ_N_GRID 20 /* alpha steps, as in the AWQ paper's search */

typedef struct awq_mat {
    const float *w;   /* [rows][n] row-major */
    int64_t rows;
    uint32_t type;    /* output type of this matrix (any type with a reference quantizer) */
} awq_mat;

typedef struct awq_params {
    int n_grid;       /* alpha steps (<= 0: AWQ_N_GRID) */
    int bits;         /* grid bits for the grid types (0: native) */
    int group;        /* parameter group for the grid types (32, 64, 128) */
} awq_params;

typedef struct awq_result {
    float alpha;      /* chosen alpha (0: RTN) */
    double err;       /* output error at alpha */
    double err_rtn;   /* output error at alpha = 0 */
} awq_result;

/* Quantizes x[0..n) to type (grid in groups of `group` with `bits` for the
 * grid types, else the reference quantizer) into blocks (dtype_row_size
 * bytes) and dequantizes it into out. */
void awq_fake_quant_row(uint32_t type, int bits, int group, const float *x, int64_t n, void *blocks, float *out);

/* Output error sum_t ||(W - Weff) x_t||^2 of one matrix whose effective
 * weights (after quantization, in the original basis) are weff. */
double awq_output_error(const float *w, const float *weff, int64_t rows, int64_t n, const float *x, int32_t n_x);

/* Searches alpha for the group mats[0..n_mats) of input width n with sampled
 * inputs x[n_x][n] and channel magnitudes sx[n]; writes the chosen scales to
 * s[n].  Returns KITE_OK or KITE_E_NOMEM. */
int awq_search(const awq_mat *mats, int n_mats, int64_t n, const float *x, int32_t n_x, const float *sx,
               const awq_params *p, float *s /* OUT: [n] */, awq_result *res /* OUT */);

#endif
