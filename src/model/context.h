/*
 * context.h - inference context: KV cache, scratch buffers, thread pool.
 *
 * DESIGN
 *   Everything a forward pass touches is allocated in kite_ctx_new, sized for
 *   n_ctx positions and batches of up to n_batch tokens; kite_ctx_eval splits
 *   longer inputs into n_batch chunks.  Decode therefore allocates nothing.
 *   The only buffer that can grow is `logits` when the caller asks for the
 *   logits of every position of a batch longer than any before.
 *
 *   KV cache: per layer, n_ctx rows of kv_row_bytes for K and for V, of
 *   type kv_type; layout, store and copy in kv_cache.h.  Positions < n_past
 *   are valid.  The forward pass that fills them is forward.h.
 *
 * OWNERSHIP / THREADS
 *   The context borrows the model and owns everything else.  One thread
 *   drives a context; the pool's workers only run inside kite_ctx_eval.
 */
#ifndef KITE_MODEL_CONTEXT_H
#define KITE_MODEL_CONTEXT_H

#include "core/threadpool.h"
#include "model/model.h"

/* Points of the forward pass where a calibration tap sees a linear layer's
 * input (what GPTQ, AWQ and SmoothQuant need; src/quant). */
enum ctx_tap_point {
    TAP_ATTN_IN,   /* input of wq, wk, wv (attn-normed x), width n_embd */
    TAP_WO_IN,     /* input of wo (attention output), width n_head*head_dim */
    TAP_FFN_IN,    /* input of w_gate, w_up (ffn-normed x), width n_embd */
    TAP_DOWN_IN,   /* input of w_down (activated FFN hidden), width n_ff */
    TAP_OUTPUT_IN, /* input of the output head (final-normed x), width n_embd; layer = n_layer */
    TAP_COUNT
};
/* Called on the driving thread with n_tok rows of `width` floats (row-major);
 * x is valid only during the call and must not be modified. */
typedef void (*ctx_tap_fn)(void *user, int32_t layer, int point, const float *x, int32_t n_tok, int32_t width);

/* Mixture-of-experts counterpart (ctx_set_expert_tap): the n_tok rows routed
 * to expert `expert` of layer `layer`, at TAP_FFN_IN (input of its gate and
 * up, width n_embd) and TAP_DOWN_IN (its activated hidden, width n_ff_exp).
 * A row appears once per (token, slot) that chose the expert. */
typedef void (*ctx_expert_tap_fn)(void *user, int32_t layer, int32_t expert, int point, const float *x, int32_t n_tok,
                                  int32_t width);

/* Attention calibration hook (ctx_set_attn_tap): after layer `layer`'s
 * attention, chunk_max[n_tok][n_head][2] holds per (token, head) row the
 * smallest and largest chunk maximum of split-KV (attn_args.chunk_max; while
 * the hook is installed every pass runs split-KV).  Valid only during the call. */
typedef void (*ctx_attn_tap_fn)(void *user, int32_t layer, const float *chunk_max, int32_t n_tok, int32_t n_head);

struct attn_stats;

struct kite_ctx {
    kite_model *model;
    int32_t n_ctx;        /* positions the KV cache holds */
    int32_t n_batch;      /* max tokens per forward pass */
    kite_token *follow_tok; /* [n_batch] tokens of the pass rank 0 announced (tensor split, ranks > 0; llama_follow) */
    int32_t n_threads;
    int32_t n_past;       /* positions currently cached */
    int32_t n_path;       /* positions < n_path are the prompt's and kite_ctx_eval runs their attention on the
                             prefill path (FLASH), every other position on the decode path (split-KV), so a
                             position's bits never depend on how the evals were batched (docs/attention.md,
                             "Which passes are bit-identical").  Set by the first eval of an empty context
                             (its n tokens when n > ATTN_SPLITKV_MAX_TOK, else 0) unless ctx_set_prompt
                             fixed it first; kite_ctx_truncate(ctx, 0) clears it */
    bool path_fixed;      /* n_path was set by ctx_set_prompt: the next eval at n_past 0 keeps it */
    bool attn_by_size;    /* kite_ctx_eval picks the attention path by pass size (ATTN_PATH_AUTO) instead of
                             by n_path: for evaluators that never decode (ppl, multiple choice), whose scores
                             then do not depend on what an earlier sequence left in n_path */
    threadpool *tp;

    uint8_t *k_cache;     /* per layer, n_ctx rows (kv_ring for a windowed layer with a ring) of
                             kv_row_bytes: n_head_kv*head_dim values of kv_type; kv_cache.h */
    uint8_t *v_cache;     /* same */
    size_t *kv_row0;      /* [n_layer] first row of layer l in k_cache / v_cache */
    int32_t kv_ring;      /* rows of each windowed layer's ring (window + n_batch - 1), or 0: every layer
                             keeps n_ctx rows (no window, paged pool, swa_full, or n_ctx <= that) */
    int32_t *ring_table;  /* [ceil(n_ctx / kv_ring)] zeros: a ring is one block of kv_ring rows, so
                             position p is row p % kv_ring through the block-table addressing */
    int32_t ring_hi;      /* highest position written since the cache was last emptied; -1: none */
    int64_t kv_bytes;     /* bytes of k_cache + v_cache */
    int32_t kv_type;      /* KITE_DTYPE_F32 (default), _F16, _Q8_0 or _Q4_0 (kv_cache.h) */
    size_t kv_row_bytes;  /* bytes of one cache row (one position of one layer) */

    /* per-batch activations, [n_batch][width] */
    float *x;             /* residual stream, width n_embd */
    float *xb;            /* normed input / branch output, width n_embd */
    float *q;             /* queries, width n_head*head_dim */
    float *kb;            /* keys of the batch before they go to the cache, width n_head_kv*head_dim */
    float *vb;            /* values, same */
    float *att;           /* attention output, width n_head*head_dim */
    float *hb;            /* FFN gate, width n_ff */
    float *hb2;           /* FFN up, width n_ff */
    float *rope_cs;       /* [n_batch][n_rot] (cos, sin) pairs per position */
    float *inv_freq;      /* [n_rot/2] rotary frequencies */
    float rope_mscale;    /* factor on every rotary cos and sin (hp.rope_attn_factor) */
    void *mm_scratch;     /* kern_matmul_scratch_bytes(n_threads, n_batch, max row length) bytes */
    float *att_scratch;   /* kern_attention_scratch_floats(n_batch queries, n_ctx) floats */
    float attn_phi;       /* split-KV unified max (docs/attention.md) where attn_phi_head is NULL:
                             ATTN_PHI_DEFAULT */
    const float *attn_phi_head; /* [n_layer][n_head] per-layer, per-head unified maxima: the model's
                             (kite.attention.unified_max) or ctx_set_attn_phi's; NULL: attn_phi everywhere */
    float *attn_phi_own;  /* ctx_set_attn_phi's copy (owned), or NULL */
    int32_t attn_phi_mode; /* ATTN_PHI_UNIFIED (default) or ATTN_PHI_EXACT (benchmarks) */
    struct attn_stats *attn_stats; /* split-KV statistics summed over every layer, or NULL */
    ctx_attn_tap_fn attn_tap; /* calibration hook (ctx_set_attn_tap), or NULL */
    void *attn_tap_user;
    float *attn_chunk_max; /* [n_batch][n_head][2] chunk maxima ranges for attn_tap (owned), or NULL */
    bool *skip_layers;    /* [n_layer] blocks the forward pass skips (residual passes through), or NULL
                             (self-speculative drafting, docs/spec.md); set by kite_ctx_set_skip_layers */

    int32_t kv_block;     /* positions per KV block when block tables are used (ctx_new_sized); the cache of
                             layer l is then n_ctx / kv_block blocks of kv_block rows */
    ctx_tap_fn tap;       /* calibration hook (ctx_set_tap), or NULL */
    void *tap_user;
    ctx_expert_tap_fn expert_tap; /* per-expert calibration hook (ctx_set_expert_tap), or NULL */
    void *expert_tap_user;
    int32_t lr_from, lr_to;   /* ctx_set_layer_range: only layers [lr_from, lr_to) run (0, INT32_MAX: all) */
    int32_t lr_rows;          /* rows of lr_x_in / lr_x_out: the batch the range applies to */
    const float *lr_x_in;     /* [lr_rows][n_embd] residual stream entering layer lr_from, or NULL */
    float *lr_x_out;          /* [lr_rows][n_embd] gets the stream leaving layer lr_to - 1, or NULL */

    bool profiling;       /* kite_ctx_set_profiling: time each op type of the forward pass */
    double prof_s[KITE_PROFILE_N_OPS]; /* seconds accumulated per op type (enum ctx_prof_op) */

    /* mixture of experts (model n_expert > 0; NULL otherwise), moe.c */
    float *moe_logits;    /* [n_batch][n_expert] router probabilities */
    int32_t *moe_sel;     /* [n_batch][n_expert_used] chosen experts, by descending probability */
    float *moe_w;         /* [n_batch][n_expert_used] their weights */
    float *moe_x;         /* [n_batch][n_embd] one expert's token rows (gathered), then its output */
    float *moe_acc;       /* [n_batch][n_embd] weighted sum of the experts' outputs */
    int32_t *moe_tok;     /* [n_batch] token of each gathered row */
    float *moe_tw;        /* [n_batch] that token's weight for the expert */

    float *logits;        /* [logits_cap][n_vocab] */
    int32_t logits_cap;   /* rows allocated */
    int32_t n_logits;     /* rows valid after the last eval */
    int32_t logits_first; /* index (in the last eval's tokens) of row 0 */
};

/* Op types of the per-op profile, in the order of kite_ctx_profile's names. */
enum ctx_prof_op {
    PROF_EMBED, PROF_ATTN_NORM, PROF_Q_PROJ, PROF_K_PROJ, PROF_V_PROJ, PROF_ROPE, PROF_ATTENTION, PROF_O_PROJ,
    PROF_FFN_NORM, PROF_FFN_GATE, PROF_FFN_UP, PROF_FFN_ACT, PROF_FFN_DOWN, PROF_OUT_NORM, PROF_OUTPUT, PROF_OTHER,
    PROF_COUNT
};

/* A context whose KV cache is a pool of n_ctx positions (a multiple of
 * kv_block) addressed through block tables, for batches of up to n_batch
 * tokens.  No sequence may be longer than n_ctx positions (the attention
 * scratch is sized by it).  kite_ctx_eval refuses it (KITE_E_STATE). */
/* Sets the rotary frequencies for sequences of at most n_ctx positions:
 * Phi-3 LongRoPE takes its long factors when n_ctx exceeds the model's
 * original context.  ctx_create uses the cache size; a paged context whose
 * pool holds many sequences (the serving engine) sets its per-sequence
 * n_ctx, so that a sequence gets the rows a context of that size computes. */
void ctx_set_rope_n_ctx(kite_ctx *c, int32_t n_ctx);

int ctx_new_sized(kite_model *model, int32_t n_ctx, int32_t n_batch, int32_t kv_block, int32_t n_threads,
                  kite_ctx **out);

/* ctx_new_sized with a KV cache of type kv_type (KITE_DTYPE_F32, _F16, _Q8_0
 * or _Q4_0); ctx_new_sized is this with KITE_DTYPE_F32.  KITE_E_ARG when the
 * type is not one of those or needs head_dim % 32 == 0 and the model's
 * head_dim is not (message names both). */
int ctx_new_sized_kv(kite_model *model, int32_t n_ctx, int32_t n_batch, int32_t kv_block, int32_t n_threads,
                     int32_t kv_type, kite_ctx **out);

/* Declares that the next tokens evaluated on this empty context (n_past 0)
 * begin a prompt of n_prompt tokens, of which the caller may evaluate only a
 * part now (the speculative decoder prefills n_prompt - 1 and evaluates the
 * last one in its first verification pass): the prompt's positions then run
 * on the path one eval of the whole prompt would take, so the logits equal
 * plain decoding's bit for bit.  KITE_E_STATE if n_past != 0. */
int ctx_set_prompt(kite_ctx *ctx, int32_t n_prompt);

/* Installs (or with fn NULL removes) the calibration tap. */
void ctx_set_tap(kite_ctx *ctx, ctx_tap_fn fn, void *user);
/* Installs (or with fn NULL removes) the per-expert calibration tap. */
void ctx_set_expert_tap(kite_ctx *ctx, ctx_expert_tap_fn fn, void *user);
/* Calibration passes layer group by layer group (quant/calib.c): the next
 * forward passes run only layers [from, to); for from > 0 the residual
 * stream entering layer from is x_in (rows x n_embd, the batch's tokens in
 * order) instead of the embedding, and x_out (may equal x_in; NULL: none)
 * gets the stream leaving layer to - 1.  Every forward pass must then have
 * exactly `rows` tokens (asserted).  The head still runs on what the stream
 * holds.  from 0, to >= n_layer and no buffers restores normal passes. */
void ctx_set_layer_range(kite_ctx *ctx, int32_t from, int32_t to, int32_t rows, const float *x_in, float *x_out);

/* Unified maxima for split-KV decode: phi[n_layer * n_head] (layer-major) is
 * copied; phi NULL with n 0 restores the model's (kite.attention.unified_max,
 * else ATTN_PHI_DEFAULT).  mode: ATTN_PHI_UNIFIED or ATTN_PHI_EXACT (every
 * chunk against its own maximum: a reference).  KITE_E_ARG for another n or
 * mode, KITE_E_NOMEM; the context is unchanged on error. */
int ctx_set_attn_phi(kite_ctx *ctx, const float *phi, int32_t n, int32_t mode);

/* Statistics of every split-KV call of later evals are added to *stats
 * (NULL: none).  The caller owns stats and zeroes it. */
void ctx_set_attn_stats(kite_ctx *ctx, struct attn_stats *stats);

/* Installs (or with fn NULL removes) the attention calibration hook.
 * KITE_E_NOMEM if its row buffer cannot be allocated (hook unchanged). */
int ctx_set_attn_tap(kite_ctx *ctx, ctx_attn_tap_fn fn, void *user);

#endif
