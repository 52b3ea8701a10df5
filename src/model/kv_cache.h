/*
 * kv_cache.h - the context's KV cache rows: type check, row size, store, copy.
 *
 * DESIGN
 *   Per layer, n_ctx rows for K and for V (allocated with the context,
 *   context.c); row r of layer l is at byte offset (kv_row0[l] + r) *
 *   kv_row_bytes of k_cache / v_cache (kv_row0[l] = l * n_ctx without
 *   rings).  A row holds n_head_kv * head_dim
 *   values of type kv_type: f32 (default), f16, q8_0 or q4_0, each kv head's
 *   head_dim values quantized on their own (head_dim % 32 == 0 for the block
 *   types).  A sequence's position p is row p of the contiguous cache, or,
 *   through a block table of kv_block-row blocks, row
 *   table[p / kv_block] * kv_block + p % kv_block (the addressing attention
 *   uses, attn_args.block_table).  Rows are written only by ctx_kv_store and
 *   copied only by ctx_kv_copy_rows; attention reads them in place
 *   (attn_args.kv_type).
 *
 *   Sliding windows: in a contiguous context (kite_ctx_new) a windowed
 *   layer (hp.sliding_window > 0, not layer_weights.full_attn) keeps a ring
 *   of kv_ring = window + n_batch - 1 rows when that is less than n_ctx:
 *   position p is row p % kv_ring.  It is addressed as a block table of one
 *   block (ring_table, all zeros, block size kv_ring), so attention and the
 *   store run the paged code unchanged and compute the same bits as with a
 *   full cache.  A batch writes all its rows before attending, and its first
 *   query reads window - 1 earlier positions: hence window + n_batch - 1.
 *   Positions before a query's window may be read by a tile (FlashAttention
 *   starts at a tile boundary) but never enter a result, so their ring rows
 *   holding later positions do not matter.  kite_ctx_truncate refuses a
 *   rollback to a position whose window has been overwritten (ring_hi).
 *   Global layers of an interleaved model keep n_ctx rows.
 *
 * THREADS
 *   Called on the thread driving the context; nothing is allocated.
 */
#ifndef KITE_MODEL_KV_CACHE_H
#define KITE_MODEL_KV_CACHE_H

#include "model/context.h"

/* KITE_OK if a KV cache of type kv_type works for model (see ctx_new_sized_kv),
 * else KITE_E_ARG with a one-line message. */
int ctx_kv_type_check(const kite_model *model, int32_t kv_type);

/* The block table (and in *block_size its block size) through which layer
 * `layer` of a sequence with block_table (NULL: the contiguous cache) is
 * addressed: block_table itself, the ring's table for a windowed layer with
 * a ring, or NULL (row = position). */
const int32_t *ctx_kv_layer_table(const kite_ctx *ctx, int32_t layer, const int32_t *block_table,
                                  int32_t *block_size /* OUT */);

/* Byte offset of layer `layer`'s first row in k_cache and v_cache. */
size_t ctx_kv_layer_offset(const kite_ctx *ctx, int32_t layer);

/* Bytes of one KV cache row (one position of one layer, K or V). */
size_t ctx_kv_row_bytes(const kite_ctx *ctx);

/* Writes the K and V rows of layer `layer` for positions pos0..pos0+n_tok-1
 * of one sequence (block_table NULL: the contiguous cache) from k and v,
 * [n_tok][n_head_kv * head_dim] floats each, converted/quantized to kv_type
 * (f32 is a copy).  Cost: O(n_tok * n_head_kv * head_dim). */
void ctx_kv_store(kite_ctx *ctx, int32_t layer, const int32_t *block_table, int32_t pos0, int32_t n_tok,
                  const float *k, const float *v);

/* Copies cache rows src_row..src_row+n_rows-1 to dst_row.. (K and V, every
 * layer), whatever the KV type; rows are layer-relative (0..n_ctx-1).  The
 * ranges may overlap (memmove). */
void ctx_kv_copy_rows(kite_ctx *ctx, int32_t dst_row, int32_t src_row, int32_t n_rows);

#endif
