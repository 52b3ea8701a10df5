/*
 * forward.h - the forward pass (llama.c): a batch of tokens from one or more
 * sequences through every layer of the model, K/V into the cache, logits out.
 *
 * DESIGN
 *   Every buffer the pass touches is the context's (context.h), allocated
 *   with it; the pass allocates nothing.  The context, the KV cache
 *   (kv_cache.h) and the mixture-of-experts FFN (moe.h) are below it; the
 *   context's kite_ctx_eval, the serving engine and the tests call it.
 *
 * THREADS
 *   Runs on the thread driving the context; matmuls and attention use its
 *   pool.  Calibration taps and profiling run on the driving thread.
 */
#ifndef KITE_MODEL_FORWARD_H
#define KITE_MODEL_FORWARD_H

#include "model/context.h"

/* One sequence's share of a multi-sequence batch (llama_forward_batch). */
typedef struct fwd_seq {
    const int32_t *block_table; /* KV block of each kv_block positions of the sequence, covering positions
                                   0..pos0+n_tok-1; NULL: the context's contiguous cache (single sequence) */
    int32_t pos0;               /* positions of this sequence already in the cache */
    int32_t n_tok;              /* tokens of this sequence in the batch (consecutive, >= 1) */
    int32_t n_out;              /* logits wanted for its last n_out tokens (0..n_tok) */
    int32_t attn_path;          /* ATTN_PATH_* for its attention; 0 = AUTO (by n_tok).  The paths round
                                   differently, so a prompt prefilled in chunks gives the same bits as in
                                   one pass only if every chunk uses the path the whole prompt would:
                                   FLASH when the prompt is longer than ATTN_SPLITKV_MAX_TOK. */
} fwd_seq;

/* Forward pass over a batch of several sequences (every architecture of
 * arch.c; a model with learned positions, gpt2, requires pos0 + n_tok <=
 * hp.n_ctx_train for every sequence): tokens[] holds each
 * sequence's n_tok tokens in seqs order (sum of n_tok <= n_batch); linear
 * layers run over all of them at once, attention per sequence.  K/V of the
 * new tokens are written to their positions' cache rows.  Logit rows are
 * written to out_logits in order: each sequence's n_out rows.  At most one
 * sequence may have block_table == NULL, and only when it is the only one. */
void llama_forward_batch(kite_ctx *ctx, const kite_token *tokens, const fwd_seq *seqs, int32_t n_seq,
                         float *out_logits);

/* Runs the forward pass for n <= n_batch tokens at positions n_past.. of the
 * context's own cache, attention on path attn_path (ATTN_PATH_*; 0 = AUTO);
 * writes logits for tokens [first_out, n) into out_logits rows 0..; does not
 * advance n_past (the caller does). */
void llama_forward(kite_ctx *ctx, const kite_token *tokens, int32_t n, int32_t first_out, int32_t attn_path,
                   float *out_logits);

/* After a pass of a model with a memory budget: KITE_OK, or KITE_E_IO with the
 * message of the streaming thread's read error (the pass's logits are then
 * garbage and the caller must not use them; every later pass fails too). */
int llama_forward_failed(const kite_model *m);

/* Embedding pooling (model/embed.c), shared by kite_ctx_embed and the serving
 * engine so that both do the same arithmetic.  embed_pool_rows takes n_rows
 * residual rows x (the stream after the last layer, ctx->x of a pass) of an
 * input of n tokens, the first at position pos0, and pools them with the
 * model's final norm: MEAN adds each normed row to sum[n_embd] (double; the
 * caller zeroes it before position 0), LAST and CLS norm their row into out.
 * scratch: n_embd floats.  embed_pool_end then writes the mean into out and
 * L2-normalises it if asked.  Cost: O(n_rows * n_embd); no allocation. */
void embed_pool_rows(const kite_model *m, const float *x, int32_t n_rows, int32_t pos0, int32_t n, int32_t pooling,
                     double *sum, float *out, float *scratch);
void embed_pool_end(int32_t n_embd, int32_t n, int32_t pooling, bool normalize, const double *sum, float *out);

/* Tensor-split model (model.h tp_size > 1), ranks other than 0: runs the
 * passes rank 0's llama_forward_batch announces, in lockstep (its K/V into
 * this rank's cache, no logits), until rank 0 frees its context
 * (llama_follow_quit).  KITE_OK at once on rank 0 and for an unsplit model;
 * KITE_E_STATE if rank 0 asks for a pass this context cannot run. */
int llama_follow(kite_ctx *ctx);
/* Rank 0 of a tensor-split model: ends the other ranks' llama_follow (kite_ctx_free calls it). */
void llama_follow_quit(kite_ctx *ctx);

#endif
