/*
 * model.h - the loaded model: hyperparameters, weights, vocabulary.
 *
 * DESIGN
 *   kite_model_load() opens the GGUF file (src/gguf), reads the tokenizer
 *   (src/tokenizer) and, unless the file is vocab-only, the hyperparameters
 *   of its architecture and a `weight` view of every tensor through the
 *   per-architecture name table (src/model/arch.c, docs/architectures.md).
 *   Weight views point into the file image: nothing is copied except 1-D
 *   vectors (norm weights, biases, rope factors), which are converted to float
 *   once at load time because they are tiny and read on every token.  Tensors
 *   an architecture does not have are NULL pointers / views with data NULL.
 *
 *   A `weight` carries its ggml type; the kernels (src/kernels) dispatch on it
 *   through the dtype traits table, so block-quantized types slot in without
 *   touching the forward pass.
 *
 * OWNERSHIP
 *   The model owns the gguf_ctx (and with it the mapping), the vocab and the
 *   layer array.  It is immutable after load.
 */
#ifndef KITE_MODEL_MODEL_H
#define KITE_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "kite.h"
#include "tensor/weight.h"

struct vocab;

enum rope_type {
    ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama, llama2.c */
    ROPE_NEOX = 2  /* rotate halves (x[i], x[i + d/2]): gpt-neox, qwen2, ... */
};

enum norm_type { NORM_RMS = 0, NORM_LAYER = 1 };   /* RMSNorm(x)*g  /  LayerNorm(x)*g + b */
/* down(silu(gate x) * up x)  /  down(gelu(up x + b)) + b  /  down(gelu(gate x) * up x) (gemma2; tanh GELU) */
enum ffn_type { FFN_SWIGLU = 0, FFN_GELU = 1, FFN_GEGLU = 2 };

typedef struct model_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;       /* model width (dim) */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;    /* < n_head: grouped-query attention; 1: multi-query */
    int32_t head_dim;     /* per-head width of q and k (and v) */
    int32_t n_ff;         /* FFN hidden width */
    int32_t n_rot;        /* rotary dimensions per head (<= head_dim); 0: no rope (gpt2) */
    float rms_eps;        /* epsilon of the norms (RMSNorm, or LayerNorm for NORM_LAYER) */
    float rope_freq_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    float rope_attn_factor; /* rope.scaling.attn_factor: cos and sin are scaled by it (Phi-3 LongRoPE); 1: none */
    int32_t n_ctx_orig;     /* rope.scaling.original_context_length (default n_ctx_train): a context longer
                               than this uses rope_factors_long, else rope_factors_short */
    int rope_type;         /* enum rope_type */
    /* architecture features (all zero for a plain llama) */
    int norm_type;         /* enum norm_type */
    int ffn_type;          /* enum ffn_type (dense FFN; with n_expert > 0 each expert is SwiGLU) */
    int32_t n_expert;      /* experts per MoE layer; 0: dense FFN */
    int32_t n_expert_used; /* top-k experts per token (<= n_expert) */
    int32_t n_ff_exp;      /* hidden width of one expert */
    bool expert_norm;      /* renormalise the top-k router probabilities to sum 1 */
    int32_t sliding_window; /* attention window in positions (Mistral, the local layers of Gemma-2/3-style
                               models); 0: unlimited */
    float attn_scale;       /* factor on q.k before the softmax (and the soft cap): 1/sqrt(head_dim), or
                               Gemma 2 27B's 1/sqrt(n_embd/n_head) (llama.cpp's rule by layer count) */
    float attn_softcap;     /* {arch}.attn_logit_softcapping: scores become c*tanh(s/c) (gemma2); 0: none */
    float final_softcap;    /* {arch}.final_logit_softcapping: logits become c*tanh(z/c) (gemma2); 0: none */
    float embd_scale;       /* token embeddings are multiplied by it (gemma2: sqrt(n_embd)); 1: none */
    int32_t n_swa_layers;   /* layers that use the window: n_layer (all, Mistral) unless
                               {arch}.attention.sliding_window_pattern marks some global
                               (layer_weights.full_attn); 0 when sliding_window is 0 */
} model_hparams;

typedef struct layer_weights {
    bool full_attn;         /* a global layer of an interleaved local/global model
                               ({arch}.attention.sliding_window_pattern): no window, its KV cache keeps
                               every position; false for every layer of a Mistral-style model */
    const float *attn_norm; /* (n_embd) norm gain, float copy */
    const float *attn_norm_b; /* (n_embd) LayerNorm bias, or NULL */
    weight wq;              /* (n_head*head_dim rows, n_embd cols); gpt2: rows 0.. of attn_qkv */
    weight wk;              /* (n_head_kv*head_dim, n_embd) */
    weight wv;              /* (n_head_kv*head_dim, n_embd) */
    weight wo;              /* (n_embd, n_head*head_dim) */
    const float *bq;        /* (n_head*head_dim) bias or NULL (qwen2, gpt2) */
    const float *bk;        /* (n_head_kv*head_dim) or NULL */
    const float *bv;        /* (n_head_kv*head_dim) or NULL */
    const float *bo;        /* (n_embd) or NULL (gpt2) */
    const float *q_norm;    /* (head_dim) per-head RMSNorm gain of q before rope, or NULL (qwen3) */
    const float *k_norm;    /* (head_dim) same for k */
    const float *ffn_norm;  /* (n_embd) */
    const float *ffn_norm_b; /* (n_embd) LayerNorm bias or NULL */
    const float *attn_post_norm; /* (n_embd) RMSNorm gain on the attention output before the residual add,
                                    or NULL (gemma2's post_attention_norm) */
    const float *ffn_post_norm;  /* (n_embd) same on the FFN output (gemma2's post_ffw_norm), or NULL */
    weight w_gate;          /* (n_ff, n_embd); absent for gpt2 and MoE layers */
    weight w_up;            /* (n_ff, n_embd) */
    weight w_down;          /* (n_embd, n_ff) */
    const float *b_up;      /* (n_ff) or NULL (gpt2) */
    const float *b_down;    /* (n_embd) or NULL (gpt2) */
    weight gate_inp;        /* (n_expert rows, n_embd) router, or absent (dense) */
    weight gate_exps;       /* expert 0 of ffn_gate_exps: (n_ff_exp rows, n_embd); expert e is the same
                               view at data + e * ne[1] * row_bytes (model_expert) */
    weight up_exps;         /* (n_ff_exp, n_embd) per expert */
    weight down_exps;       /* (n_embd, n_ff_exp) per expert */
} layer_weights;

/* View of expert e of a 3-D expert tensor bound as expert 0's 2-D view. */
static inline weight model_expert(const weight *w, int32_t e) {
    weight v = *w;
    v.data = (const char *)w->data + (size_t)e * (size_t)w->ne[1] * w->row_bytes;
    return v;
}

struct kite_model {
    char *path;
    char *arch;            /* general.architecture */
    char *name;            /* general.name or "" */
    gguf_ctx *gguf;
    struct vocab *vocab;
    bool vocab_only;
    model_hparams hp;
    weight tok_embd;       /* (n_vocab rows, n_embd cols) */
    const float *output_norm; /* (n_embd) */
    const float *output_norm_b; /* (n_embd) LayerNorm bias, or NULL */
    weight pos_embd;       /* (n_ctx_train rows, n_embd) learned positions (gpt2), or absent */
    const float *rope_freqs; /* (n_rot/2) Llama 3 rope frequency factors (rope_freqs.weight): pair i's
                                frequency is divided by rope_freqs[i]; NULL: none */
    const float *rope_long;  /* (n_rot/2) Phi-3 LongRoPE factors, used like rope_freqs when the context */
    const float *rope_short; /* exceeds hp.n_ctx_orig (long) or not (short); NULL: none */
    weight output;         /* (n_vocab, n_embd); == tok_embd when tied */
    layer_weights *layers; /* [n_layer] */
    float *vectors;        /* owned storage of every float copy above */
    uint64_t n_params;
    uint64_t n_bytes;
    float *attn_phi;       /* [n_layer][n_head] split-KV unified maxima from kite.attention.unified_max
                              (`kite tune --attn-calib`), or NULL: ATTN_PHI_DEFAULT */
    int32_t tp_size;       /* tensor parallelism (shard.c): 1, or the ranks the layers are split over; with
                              tp_size > 1 hp holds this rank's share (n_head, n_head_kv, n_ff) and hp_full
                              the file's figures */
    int32_t tp_rank;
    model_hparams hp_full; /* == hp when tp_size is 1 */
    void *shard_data;      /* owned storage of this rank's slices of the split matrices, or NULL */
    size_t shard_bytes;
    size_t shard_full_bytes; /* the split matrices' bytes in the file (all ranks' shares) */
    int32_t n_repacked;    /* matrices repacked at load (model_repack) */
    double repack_ms;
    size_t n_vector_bytes; /* bytes of `vectors` */
    struct offload *offload; /* kite_model_params.mem_budget in force (offload.h), or NULL: every layer
                                is m->layers[l] in the file image */
    int32_t n_resident;    /* layers 0..n_resident-1 are in memory (n_layer without a budget); the others
                              are streamed (offload.h) and their m->layers views point into an unread mapping */
    bool repack_streamed;  /* the loader repacks: the I/O thread repacks each streamed layer the same way */
    bool f16_as_bf16;      /* kite_model_params.f16_compute BF16: the I/O thread rounds each streamed layer's
                              F16 matrices to bf16 (before repacking) as model_to_bf16 did the resident ones */
    int32_t n_f16_as_bf16; /* F16 matrices computed as bf16 (model_to_bf16) */
};

/* kite_model_params.f16_compute BF16 (repack.c): rounds the F16 matrices of the resident
 * layers and a writable classifier (a tied token embedding with it) to bf16 in place,
 * nearest even, and retypes them BF16, so that model_repack and the kernels treat
 * them as a bf16 file's.  Before model_repack; the image must be writable (as for
 * model_repack).  model_layer_to_bf16 does one layer (n_exp views for expert tensors;
 * a streamed layer's slot, offload.c) and returns how many matrices it rounded. */
int model_to_bf16(kite_model *m);
/* The n f16 values at data as bf16, in place: fp32_to_bf16(fp16_to_fp32(h)) for every h. */
void model_f16_to_bf16_row(void *data, size_t n);
int model_layer_to_bf16(layer_weights *L, int n_exp);

/* Repacks the model's x16-type matrices (kern_x16_type) into the interleaved layout of
 * kernels/gemm_x16.h and its f16 and bf16 matrices into that of kernels/gemm_x32.h,
 * in place, when the active kernel level gains from it (repack.c; the loader
 * skips it for kite_model_params.no_repack).  The file image must be private,
 * writable memory (heap residency; a tensor-split model: its layer matrices are
 * its own copies, and the classifier of its mapped file stays plain).  Returns a kite_status. */
int model_repack(kite_model *m);
/* Repacks one plain matrix in place exactly as model_repack would (same
 * layout choice for its type, shape and the active kernel level), for
 * callers that time the kernels decode and prefill run (roofline probe,
 * kite tune).  w->data must be writable.  Returns the layout w now has
 * (WEIGHT_LAYOUT_PLAIN when the level gains nothing, or out of memory). */
uint32_t model_repack_matrix(weight *w);
/* For streamed layers (offload.c): the scratch model_repack_layer needs for L,
 * and the in-place repacking of L's matrices (n_exp views for expert tensors)
 * with the layouts model_repack would give them; tmp preallocated, nothing is
 * allocated per call. */
size_t model_repack_layer_tmp(const layer_weights *L);
void model_repack_layer(layer_weights *L, int n_exp, void *tmp, size_t tmp_bytes);

/* Keeps this rank's share of every layer for tensor parallelism (shard.c):
 * q/k/v and gate/up rows (output features) of heads / FFN columns
 * [rank*n/size, (rank+1)*n/size), the matching columns (input features) of
 * o and down, copied into m->shard_data, and hp reduced to the share.  Before
 * model_repack.  Fails (KITE_E_UNSUPPORTED, naming the tensor or figure) when
 * a count does not divide by size or a slice would cut a quantized block.
 * Returns a kite_status. */
int model_shard_tensor(kite_model *m, int32_t rank, int32_t size);

/* The one message for a vocab-only file where weights are needed: records
 * "PATH is a vocab-only GGUF (a vocabulary, no weights)" and returns
 * KITE_E_STATE.  Used by the loader (a file without tensors, vocab_only not
 * asked for), kite_ctx_new and engine_new. */
int model_err_vocab_only(const char *path);

#endif
