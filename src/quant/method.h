/*
 * method.h - the calibrated methods (GPTQ, AWQ) and group-wise grids behind
 * quant_model (internal to src/quant).
 *
 * DESIGN
 *   quant_model() asks qm_route() which path produces each tensor, prints
 *   it on the tensor's progress line, and lets qm_fill() produce the rows of
 *   every tensor not routed to plain RTN.  Routes:
 *     QM_RTN   the reference quantizer (quantize.c's own path);
 *     QM_GRID  group-wise RTN on the type's grid (--group 64/128, --bits);
 *     QM_GPTQ  GPTQ rows (gptq.c) with the Hessian of the layer's input;
 *     QM_AWQ   the layer's AWQ-scaled (folded) weights, then QM_GRID/RTN;
 *              the norms and the wv / w_up rows that absorb the scales are
 *              rewritten too.
 *   Tensors are found by their roles (model/arch.h: blk.N.attn_q.weight,
 *   ..., output.weight); everything else is RTN.  State is per layer: the
 *   calibration group holding the layer (calib.c), GPTQ factors of the
 *   layer's inputs, or the layer's folded AWQ weights; a new layer replaces
 *   it, so memory is bounded by one layer (plus the calibration group).
 *
 * OWNERSHIP / THREAD SAFETY
 *   qm_state owns the model it loads, the calibration and the per-layer
 *   state; it borrows the gguf ctx, the plan and the pool.  Driven by one
 *   thread (the writer's); rows fan out to the pool.
 */
#ifndef KITE_QUANT_METHOD_H
#define KITE_QUANT_METHOD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "quant/quantize.h"

enum qm_route { QM_RTN = 0, QM_GRID, QM_GPTQ, QM_AWQ };

typedef struct qm_state qm_state;

/* Prepares the method of p for the model in in_path (opened as `in`, with
 * plan).  Loads the model and tokenizes the calibration text when the
 * method needs them.  Returns KITE_OK or a status with the message set. */
int qm_new(const char *in_path, const gguf_ctx *in, const quant_choice *plan, const quant_params *p, threadpool *tp,
           qm_state **out /* OUT */);
void qm_free(qm_state *s); /* NULL is a no-op */

/* Route of tensor i (static: depends only on names, plan and params). */
int qm_route(const qm_state *s, uint64_t i);
/* Whether tensor i is a matrix GPTQ was asked for but cannot produce, written
 * with RTN because params.allow_fallback is set (qm_new fails otherwise). */
bool qm_fallback(const qm_state *s, uint64_t i);

/* Writes rows [row0, row0 + n_rows) of tensor i (route != QM_RTN) to dst
 * (the output type's row bytes each).  Returns KITE_OK or a status. */
int qm_fill(qm_state *s, uint64_t i, int64_t row0, int64_t n_rows, void *dst);

/* Prints where a GPTQ run's time went (calibration, Hessians, factors,
 * sweeps) to the log.  No-op for other methods. */
void qm_report(const qm_state *s);

#endif
