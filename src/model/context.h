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
 *   KV cache: per layer, [n_ctx][n_head_kv * head_dim] float rows for K and
 *   for V; position p of layer l is row l*n_ctx + p.  Positions < n_past are
 *   valid.
 *
 * OWNERSHIP / THREADS
 *   The context borrows the model and owns everything else.  One thread
 *   drives a context; the pool's workers only run inside kite_ctx_eval.
 */
#ifndef KITE_MODEL_CONTEXT_H
#define KITE_MODEL_CONTEXT_H

#include "core/threadpool.h"
#include "model/model.h"

struct kite_ctx {
    kite_model *model;
    int32_t n_ctx;        /* positions the KV cache holds */
    int32_t n_batch;      /* max tokens per forward pass */
    int32_t n_threads;
    int32_t n_past;       /* positions currently cached */
    threadpool *tp;

    float *k_cache;       /* [n_layer][n_ctx][n_head_kv*head_dim] */
    float *v_cache;       /* same */

    /* per-batch activations, [n_batch][width] */
    float *x;             /* residual stream, width n_embd */
    float *xb;            /* normed input / branch output, width n_embd */
    float *q;             /* queries, width n_head*head_dim */
    float *att;           /* attention output, width n_head*head_dim */
    float *hb;            /* FFN gate, width n_ff */
    float *hb2;           /* FFN up, width n_ff */
    float *rope_cs;       /* [n_batch][n_rot] (cos, sin) pairs per position */
    float *inv_freq;      /* [n_rot/2] rotary frequencies */
    void *mm_scratch;     /* kern_matmul_scratch_bytes(n_threads, n_batch, max row length) bytes */
    float *att_scratch;   /* kern_attention_scratch_floats(n_batch queries, n_ctx) floats */
    float attn_phi;       /* split-KV unified max (docs/attention.md): ATTN_PHI_DEFAULT until calibrated */
    bool *skip_layers;    /* [n_layer] blocks the forward pass skips (residual passes through), or NULL
                             (self-speculative drafting, docs/spec.md); set by kite_ctx_set_skip_layers */

    bool profiling;       /* kite_ctx_set_profiling: time each op type in llama_forward */
    double prof_s[KITE_PROFILE_N_OPS]; /* seconds accumulated per op type (enum ctx_prof_op) */

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

/* Runs the forward pass for n <= n_batch tokens at positions n_past..;
 * writes logits for tokens [first_out, n) into out_logits rows 0..; does not
 * advance n_past (the caller does). */
void llama_forward(kite_ctx *ctx, const kite_token *tokens, int32_t n, int32_t first_out, float *out_logits);

#endif
