/*
 * calib.h - calibration: run the full-precision model over a text and
 * collect, per linear layer input, what GPTQ and AWQ need.
 *
 * DESIGN
 *   The text is tokenized once and cut into windows (BOS + window-1 tokens,
 *   each evaluated from an empty KV cache).  A tap on the context
 *   (ctx_set_tap, model/context.h) sees the input rows of every linear layer
 *   as the forward pass computes them; for each (layer, tap point) it keeps
 *     - the Hessian H = 2 X X^T / n_rows (double, width x width), if asked;
 *     - mean |x| and max |x| per input channel (AWQ, SmoothQuant);
 *     - a reservoir sample of up to n_samples input rows (AWQ's search),
 *       drawn with a fixed-seed generator (deterministic).
 *   Tap points (enum ctx_tap_point): TAP_ATTN_IN (wq/wk/wv), TAP_WO_IN,
 *   TAP_FFN_IN (w_gate/w_up), TAP_DOWN_IN; TAP_OUTPUT_IN is filed as layer
 *   n_layer (the output head).
 *
 *   Memory is bounded: the statistics of as many consecutive layers as fit
 *   in mem_limit are collected in one pass over the windows; when all layers
 *   (plus the head) do not fit, calib_load() collects the group of layers
 *   holding the one asked for, with another pass, dropping the previous
 *   group.  A caller visiting layers in order therefore makes
 *   ceil((n_layer + 1) / layers_per_pass) passes.
 *
 * OWNERSHIP
 *   calib borrows the model (which must outlive it) and copies the tokens.
 *
 * THREAD SAFETY
 *   One thread drives a calib; it runs its own context and thread pool.
 */
#ifndef KITE_QUANT_CALIB_H
#define KITE_QUANT_CALIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kite.h"

#define CALIB_MEM_LIMIT_DEFAULT ((size_t)1 << 30) /* 1 GiB of statistics per pass */

typedef struct calib_params {
    int32_t window;      /* tokens per window including BOS; 0: min(256, n_ctx_train) */
    bool hessian;        /* collect H per point (GPTQ) */
    bool no_head;        /* leave out the head (layer n_layer): no pass computes every position's logits,
                            which for a 32000-token vocabulary costs more than a layer */
    int32_t n_samples;   /* input rows kept per point (AWQ); 0: none */
    size_t mem_limit;    /* bytes of statistics per pass; 0: CALIB_MEM_LIMIT_DEFAULT */
    int n_threads;       /* threads of the forward pass and the accumulation (<= 0: 1) */
    FILE *log;           /* progress lines, or NULL */
} calib_params;

typedef struct calib_point {
    int32_t width;       /* input width of the layer */
    int64_t n_rows;      /* rows (tokens) seen */
    double *h;           /* [width][width] 2 X X^T / n_rows, or NULL (not asked) */
    double *mean_abs;    /* [width] mean |x| */
    float *max_abs;      /* [width] max |x| */
    float *samples;      /* [n_samp][width] sampled input rows, or NULL */
    int32_t n_samp;      /* rows in samples */
} calib_point;

typedef struct calib calib;

/* Tokenizes text[0..len) with the model's vocabulary (no BOS; windows add
 * their own) and keeps the first max_tokens tokens (0: all).  *out is
 * malloc'd (caller frees).  Returns KITE_OK, the tokenizer's status, or
 * KITE_E_ARG (no tokens). */
int calib_tokenize(const kite_model *model, const char *text, size_t len, int64_t max_tokens,
                   kite_token **out /* OUT */, int64_t *n_out /* OUT */);

/* A calibration over tokens[0..n_tokens) (copied).  Nothing runs yet.
 * Returns KITE_OK, KITE_E_ARG (vocab-only model, no tokens), KITE_E_NOMEM. */
int calib_new(kite_model *model, const kite_token *tokens, int64_t n_tokens, const calib_params *p,
              calib **out /* OUT */);
void calib_free(calib *c); /* NULL is a no-op */

/* Layers (the head counting as layer n_layer) collected per pass. */
int32_t calib_layers_per_pass(const calib *c);
/* Seconds spent in passes (forward and statistics), and of them in the
 * Hessian GEMMs with their floating-point operations and process CPU seconds. */
void calib_stats(const calib *c, double *pass_s /* OUT */, double *hess_s /* OUT */, double *hess_flops /* OUT */,
                 double *hess_cpu_s /* OUT */);
/* Windows and tokens a pass evaluates. */
int32_t calib_n_windows(const calib *c);

/* Makes the statistics of `layer` (0..n_layer) available, running a pass
 * over its group of layers if they are not.  Returns KITE_OK,
 * KITE_E_ARG (layer out of range), KITE_E_NOMEM, KITE_E_STATE (the forward
 * pass delivered no rows to any layer of the group: taps not wired), or the context's
 * status. */
int calib_load(calib *c, int32_t layer);

/* The statistics of (layer, point) after calib_load(c, layer), or NULL
 * (layer not loaded, point not applicable, or no rows reached it: e.g.
 * TAP_DOWN_IN of a mixture-of-experts layer). */
const calib_point *calib_get(const calib *c, int32_t layer, int point);

#endif
