/*
 * roofline.h - analytic roofline model of the LLaMA forward pass
 * (`kite roofline`, docs/roofline.md).
 *
 * DESIGN
 *   rl_predict() lists every operation of one layer plus the model-level
 *   ones (embedding, output norm, output head) for a phase (prefill or
 *   decode) and counts, exactly and in closed form:
 *     flops      2 per multiply-add; element-wise ops by the per-element
 *                counts of docs/roofline.md (rmsnorm 4, rope 3, softmax 5,
 *                swiglu 5);
 *     bytes      weights (type_size/block_size of the weight type per
 *                element, so every GGUF type works), activations (atype
 *                bytes per element read and written), KV cache (kvtype
 *                bytes per element, read by attention, written by k/v);
 *   then predicts time = max(flops / peak, memory time) + call cost per op,
 *   where the peak is the atype's for matmuls, attn_gflops for attention
 *   and elem_gflops for element-wise ops (each defaulting to FP32), the
 *   memory time charges weight bytes at min(bandwidth, effective bandwidth
 *   of the weight type, kern_gbs) and other bytes at the bandwidth, and the
 *   call cost (matmuls and attention only, per forward call) is the
 *   measured intercept kern_call_us / attn_call_us, else launch_us.  Fused attention
 *   (FlashAttention) keeps scores in registers/cache: scores and softmax
 *   move no bytes.
 *
 *   Architectures: llama-family ops by default; MoE layers (n_expert > 0:
 *   mixtral, qwen3moe) cost a router and the top-k experts, reading at most
 *   min(n_expert, tokens per call * k) distinct experts per forward call;
 *   gpt2 has LayerNorm, learned positions, a fused QKV and a gate-less GELU
 *   FFN (docs/roofline.md).  Prefill matmuls run at the probed GEMM rate of
 *   their weight type (gemm_gops) where the profile has one.
 *
 *   Phases: prefill = batch sequences of `prompt` tokens from an empty
 *   cache, weights read once per chunk of RL_CHUNK tokens (kite's n_batch);
 *   decode = one step of `batch` sequences at the mean context
 *   prompt + gen/2; decode tok/s = batch / step time.
 *
 * OWNERSHIP / THREAD SAFETY
 *   Plain value types; rl_predict writes into a caller-owned rl_result.
 *   All functions are reentrant.
 */
#ifndef KITE_ROOFLINE_ROOFLINE_H
#define KITE_ROOFLINE_ROOFLINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tensor/dtype.h"

#define RL_CHUNK 512     /* prefill tokens per forward call (kite's n_batch) */
#define RL_MAX_OPS 28    /* ops per phase */

enum rl_atype { RL_A_F32 = 0, RL_A_BF16 = 1, RL_A_INT8 = 2 };
enum rl_phase { RL_PREFILL = 0, RL_DECODE = 1 };

typedef struct rl_shape {
    char name[64];
    int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_vocab;
    uint32_t wtype;       /* enum kite_dtype of the layer matrices */
    uint32_t out_type;    /* enum kite_dtype of the output head */
    /* architecture features (all zero: a llama-family shape with RMSNorm, RoPE and a SwiGLU FFN) */
    int64_t n_expert;      /* experts per MoE layer; 0 = dense FFN */
    int64_t n_expert_used; /* experts each token is routed to (top-k) */
    int64_t n_ff_exp;      /* an expert's FFN width; 0 = n_ff */
    uint32_t router_type;  /* enum kite_dtype of the router (ffn_gate_inp) when n_expert > 0 */
    bool gpt2;             /* LayerNorm (gain and bias), learned positions instead of RoPE, GELU FFN without
                              gate, fused QKV projection (gpt2) */
    bool gemma2;           /* post-attention and post-FFN norms, GeGLU, attention and final logit soft caps,
                              embeddings scaled (gemma2) */
    int64_t sliding_window; /* attention window of the windowed layers (positions); 0 = none */
    int64_t n_swa_layers;   /* layers that use it (the others attend to the whole context) */
} rl_shape;

typedef struct rl_hw {
    char name[128];
    double mem_bw_gbs;    /* read bandwidth, GB/s (1e9 B/s) */
    double fp32_gflops;   /* FP32 peak, GFLOP/s */
    double bf16_gflops;   /* BF16 matmul peak, GFLOP/s */
    double int8_gops;     /* INT8 matmul peak, GOP/s */
    double kern_gbs[KITE_DTYPE_COUNT]; /* effective bandwidth of a weight type: weight GB/s kern_matmul streams
                                          at one token out of cache; 0 = unknown (bandwidth only) */
    double kern_call_us[KITE_DTYPE_COUNT]; /* fixed time per kern_matmul call of a type, microseconds; 0 = launch_us */
    double attn_gflops;   /* rate of the attention kernel (scores, softmax, values), GFLOP/s; 0 = fp32_gflops */
    double attn_call_us;  /* fixed time per kern_attention call, microseconds; 0 = launch_us */
    double elem_gflops;   /* rate of element-wise ops (norms, RoPE, SwiGLU), GFLOP/s; 0 = fp32_gflops */
    double launch_us;     /* fixed cost per pooled op launch, microseconds (thread-pool round trip); used where
                             kern_call_us / attn_call_us are 0 */
    double gemm_gops[KITE_DTYPE_COUNT]; /* prefill matmul rate of a weight type: kern_matmul of RL_GEMM_TOK
                                           tokens on a matrix in the loader's layout (x16/x32 repacked where
                                           the loader repacks), GFLOP/s; 0 = the atype peak */
    int threads;          /* threads the numbers were measured with (0: n/a) */
    double measured_at;   /* when the profile was measured, Unix seconds; 0 = unknown (not a probe) */
    double avail_pct;     /* lowest core availability (% of threads x FMA peak) seen around the probe's
                             timings; 0 = unknown */
} rl_hw;

#define RL_GEMM_TOK 128           /* tokens of the prefill matmul probe (kite bench's default prompt) */
#define RL_MAX_AGE_S (7 * 86400.0) /* a probed profile older than this is measured again */
#define RL_AVAIL_MIN_PCT 70.0     /* one measured under less core availability is flagged (busy) */
enum { RL_HW_STALE = 1, RL_HW_BUSY = 2 };
/* What is suspect about a probed profile at Unix time now: RL_HW_STALE
 * (measured_at unknown or older than RL_MAX_AGE_S), RL_HW_BUSY (avail_pct
 * known and under RL_AVAIL_MIN_PCT); 0 for a profile that is not a probe
 * (threads == 0 and measured_at == 0: built-ins, hand-written files). */
unsigned rl_hw_suspect(const rl_hw *hw, double now);

typedef struct rl_setting {
    int64_t batch, prompt, gen;
    int atype;            /* enum rl_atype: activation bytes and matmul peak */
    uint32_t kvtype;      /* enum kite_dtype of the KV cache: f32, f16, q8_0, q4_0 */
} rl_setting;

typedef struct rl_op {
    const char *name;     /* "q_proj", ... (static) */
    int64_t count;        /* times per forward: n_layer for layer ops, 1 for model ops */
    bool matmul;          /* uses the atype peak (else FP32) */
    double flops;         /* per instance */
    double w_bytes, act_bytes, kv_bytes; /* per instance: weights, activations r+w, KV cache r+w */
    double intensity;     /* flops / bytes; 0 bytes -> INFINITY */
    double t_compute, t_memory, time; /* per instance, seconds; time = max + launch */
    bool compute_bound;
} rl_op;

typedef struct rl_phase_result {
    rl_op ops[RL_MAX_OPS];
    int n_ops;
    double flops, bytes, time;   /* whole forward (ops * count) */
    double t_compute, t_memory;  /* sums of per-op terms * count */
    bool compute_bound;          /* t_compute > t_memory */
} rl_phase_result;

typedef struct rl_result {
    rl_phase_result ph[2];       /* [enum rl_phase] */
    double ttft_s;               /* prefill time of all sequences */
    double prefill_tok_s;        /* batch*prompt / prefill time */
    double decode_tok_s;         /* batch / decode step time */
    double ridge;                /* matmul peak / bandwidth, FLOP/byte */
} rl_result;

/* Throughput mode (`kite batch`; batch.c): n_seq prompts of `prompt` tokens,
 * `gen` generated each, run `block` at a time, stream_bytes of weights read
 * from disk at disk_gbs per forward pass (0: none). */
typedef struct rl_batch_in {
    int64_t n_seq, prompt, gen;
    double stream_bytes, disk_gbs;
} rl_batch_in;
typedef struct rl_batch_out {
    int64_t block;               /* B (at most n_seq) */
    int64_t waves;               /* ceil(n_seq / B) */
    double t_prefill, t_step;    /* a wave's prefill, one decode step, seconds */
    double time_s, tok_s;        /* all prompts; generated tokens / time_s */
    bool disk_bound;             /* a decode step waits for the disk */
} rl_batch_out;
/* Predicted time of one block size; base gives atype and kvtype. */
int rl_batch_predict(const rl_shape *sh, const rl_hw *hw, const rl_setting *base, const rl_batch_in *in, int64_t block,
                     rl_batch_out *out /* OUT */);
/* The block size (1, 2, 4, ... and min(max_block, n_seq)) with the best
 * predicted throughput; of two within 2%, the larger. */
int rl_batch_choose(const rl_shape *sh, const rl_hw *hw, const rl_setting *base, const rl_batch_in *in,
                    int64_t max_block, rl_batch_out *best /* OUT */);

/* Bytes per element of dtype t (type_size / block_size); 0 for unknown. */
double rl_dtype_bpe(uint32_t t);
/* Bytes per activation element / matmul peak (GFLOP/s) of an atype. */
double rl_atype_bytes(int atype);
double rl_atype_peak(const rl_hw *hw, int atype);
const char *rl_atype_name(int atype);
int rl_atype_from_name(const char *s); /* -1 if unknown */

/* Fills sh from a named shape (synth's table).  KITE_OK or KITE_E_NOT_FOUND. */
int rl_shape_from_name(const char *name, uint32_t wtype, rl_shape *sh /* OUT */);
/* Fills sh from a GGUF model file (hparams + tensor types).  KITE_OK or an error. */
int rl_shape_from_file(const char *path, rl_shape *sh /* OUT */);

/* The model; returns KITE_OK or KITE_E_ARG for invalid sizes. */
int rl_predict(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, rl_result *r /* OUT */);

/* Smallest batch in [1, max_b] at which the decode op `op` (or, op == NULL,
 * the whole decode phase) is compute-bound; 0 if none. */
int64_t rl_decode_crossover(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const char *op, int64_t max_b);
/* Smallest prompt in [lo, hi] (doubling) at which prefill is compute-bound; 0 if none. */
int64_t rl_prefill_crossover(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, int64_t lo, int64_t hi);

/* Output: the per-op tables, the totals, and the JSON line. */
void rl_print_table(FILE *f, const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const rl_result *r);
void rl_print_json(FILE *f, const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const rl_result *r);

/* Straight line t = c + x / rate through two measurements (x1, t1), (x2, t2)
 * with x2 > x1 (x: bytes or FLOPs; t: seconds): *rate = (x2 - x1) / (t2 - t1)
 * and *c = t1 - x1 / rate.  When the points do not give a positive slope and
 * a non-negative intercept (noise), falls back to c = 0, rate = x2 / t2.
 * Returns false if there is no usable measurement (t2 <= 0 or x2 <= 0). */
bool rl_fit_line(double x1, double t1, double x2, double t2, double *c /* OUT */, double *rate /* OUT */);

/* ---- hardware profiles (hw.c) ---- */
/* Built-in profile by name (case-insensitive); NULL if none. */
const rl_hw *rl_hw_builtin(const char *name);
const char *rl_hw_builtin_list(void);
/* Parses the text format (docs/roofline.md).  KITE_OK, KITE_E_IO or KITE_E_FORMAT. */
int rl_hw_load(const char *path, rl_hw *hw /* OUT */);
int rl_hw_parse(const char *text, const char *what, rl_hw *hw /* OUT */);
int rl_hw_save(const char *path, const rl_hw *hw);
void rl_hw_write(FILE *f, const rl_hw *hw);

/* ---- measurement on this machine (measure.c) ---- */
/* The probed profile for n_threads threads: the one cached at path (the kite
 * CLI passes ~/.cache/kite/roofline-tN.txt) unless force, else measured
 * (bandwidth and FP32 from roofline/probe.h, cached at probe_path; kernel
 * rates and the BF16/INT8 matmul rates by timing kite's kernels) and cached
 * at path.  A cached profile that is stale (rl_hw_suspect: RL_HW_STALE) is
 * measured again; one measured busy is returned as it is, for the caller to
 * flag.  path, probe_path: NULL for no cache. */
int rl_hw_probe(int n_threads, bool force, const char *path, const char *probe_path, rl_hw *hw /* OUT */,
                bool *measured /* OUT, may be NULL */);

/* Measures the profile for n_threads threads now, without a cache: bandwidth
 * and FP32 peak from `probe` (roofline/probe.h), the kernel rates of the
 * n_types weight types at types (NULL: every type rl_hw_probe times) by
 * timing kite's kernels on weights in the loader's layout.  KITE_OK or
 * KITE_E_NOMEM. */
struct probe_result;
int rl_hw_measure(int n_threads, const struct probe_result *probe, const uint32_t *types, int n_types,
                  rl_hw *out /* OUT */);

/* The weight layout (WEIGHT_LAYOUT_*) rl_hw_measure times a rows x 2048
 * matrix of type t in: the one the loader gives the same matrix. */
uint32_t rl_probe_layout(uint32_t t, int64_t rows);

/* ---- SVG chart (svg.c) ---- */
int rl_svg_write(const char *path, const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const rl_result *r);

#endif
