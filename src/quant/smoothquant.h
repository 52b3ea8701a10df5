/*
 * smoothquant.h - SmoothQuant (migrating activation outliers into the
 * weights) and the function-preserving outlier transformation used to
 * build a test model with outlier channels (docs/quantization/w8a8.md).
 *
 * DESIGN
 *   Both are a per-input-channel rescaling of the linear layers' inputs
 *   folded into the model: for an input point with scales s (one per
 *   channel j), the activations become X_j / s_j and the weights' columns
 *   W[:, j] * s_j, so X W^T is unchanged in exact arithmetic.  The 1/s goes
 *   into what produces X:
 *     attn_in  (wq, wk, wv)     attn_norm gain (and bias) / s
 *     ffn_in   (w_gate, w_up)   ffn_norm gain (and bias) / s
 *     down_in  (w_down)         rows of w_up / s (silu(g) * u is linear in u)
 *     wo_in    (wo)             rows of wv / s, only when n_head == n_head_kv
 *                               (each wo input channel is one wv row) and wv
 *                               has no bias; otherwise wo is not smoothed
 *   SmoothQuant: s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), max|X_j| from
 *   a calibration run (calib.h), max|W_j| over the rows of all matrices
 *   reading that input; s_j = 1 where either is 0; clamped to
 *   [SQ_S_MIN, SQ_S_MAX].  Outlier transformation: s_j = 1 / factor on a
 *   few fixed channels of attn_in and ffn_in in every layer (so those
 *   channels of the normed activations are factor times larger).
 *
 *   The result is written as a GGUF file: every rewritten tensor in F32,
 *   all other tensors and all metadata copied unchanged, rows streamed
 *   (bounded memory: one chunk of rows at a time).  sq_quantize() then
 *   quantizes that file with quant_model() to W8A8.
 *
 *   Tensors are found by their llama names (blk.N.attn_norm.weight, ...);
 *   a layer missing one of them (mixture of experts: no ffn_gate) skips that
 *   point.
 *
 * OWNERSHIP / THREAD SAFETY
 *   No global state; the functions open, load and free everything they use.
 */
#ifndef KITE_QUANT_SMOOTHQUANT_H
#define KITE_QUANT_SMOOTHQUANT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SQ_ALPHA_DEFAULT 0.5f
#define SQ_S_MIN 1e-4f
#define SQ_S_MAX 1e4f

typedef struct sq_params {
    float alpha;             /* migration strength in [0, 1] */
    const char *calib_path;  /* calibration text */
    int64_t calib_tokens;    /* tokens of it to use; 0: all */
    int n_threads;           /* threads (<= 0: 1) */
    FILE *log;               /* progress and per-point statistics, or NULL */
    bool no_repack;          /* the calibration model keeps the file's layout (kite_model_params) */
} sq_params;

/* Writes the SmoothQuant-smoothed model of in_path to out_path (F32 for the
 * rewritten tensors).  Returns KITE_OK or a status with the message set
 * (KITE_E_ARG: bad alpha, no calibration text). */
int sq_smooth_model(const char *in_path, const char *out_path, const sq_params *p);

/* Smooths in_path and quantizes it to out_type (normally KITE_DTYPE_W8A8)
 * into out_path, through a temporary "<out_path>.smooth.<pid>.<n>" file (unique; removed on
 * SIGINT/SIGTERM, core/tmpfile.h) that is
 * removed afterwards. */
int sq_quantize(const char *in_path, const char *out_path, uint32_t out_type, const sq_params *p);

/* The outlier transformation: n_channels channels (j_k = (5 + 37 k) mod
 * n_embd, k < n_channels) of attn_in and ffn_in in every layer scaled up by
 * factor (> 0), the matching weight columns down.  Function-preserving up to
 * float rounding. */
int sq_make_outliers(const char *in_path, const char *out_path, float factor, int32_t n_channels);

#endif
