/*
 * kite.h - public API of kite, a CPU inference engine for GGUF language models.
 *
 * DESIGN
 *   All objects are opaque handles created by a *_load / *_new function and
 *   released by the matching *_free.  Parameters come in structs obtained from
 *   *_default_params() so that new fields never break callers.
 *
 *   Every fallible function returns a kite_status: KITE_OK (0) or a negative
 *   code.  On failure a one-line message naming the file/field at fault is
 *   available from kite_last_error() (per thread), and output parameters are
 *   left unchanged unless the contract says otherwise.
 *
 *   Configuration is passed, never discovered: the library reads no
 *   environment variable and no file other than the paths it is given.
 *   Model settings are in the params structs below.  Kernel settings (CPU
 *   level cap, kernel options, the `kite tune` table) are internal
 *   (kern_configure, src/kernels/dispatch.h); without them the library runs
 *   the CPU's best kernels with their defaults.  The kite CLI fills both from
 *   its KITE_* environment variables and cache files (tools/config/config.h).
 *
 * OWNERSHIP
 *   A kite_ctx borrows its kite_model: free every context before the model.
 *   Strings and arrays passed in are copied unless a comment says "borrowed".
 *
 * THREAD SAFETY
 *   A kite_model is immutable after load and may be shared by threads.
 *   A kite_ctx, kite_sampler or kite_detok must be used by one thread at a time.
 */
#ifndef KITE_H
#define KITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KITE_VERSION_MAJOR 0
#define KITE_VERSION_MINOR 1
#define KITE_VERSION_PATCH 0

const char *kite_version(void); /* "0.1.0" */

/* ---- status codes ------------------------------------------------------ */

typedef enum kite_status {
    KITE_OK = 0,
    KITE_E_IO = -1,          /* file could not be opened, read, mapped or written */
    KITE_E_FORMAT = -2,      /* malformed input (bad magic, truncated, overflow, ...) */
    KITE_E_UNSUPPORTED = -3, /* well-formed but not supported (version, type, arch) */
    KITE_E_NOMEM = -4,       /* allocation failed */
    KITE_E_ARG = -5,         /* invalid argument from the caller */
    KITE_E_NOT_FOUND = -6,   /* a required key / tensor / token is missing */
    KITE_E_RANGE = -7,       /* out of range: context full, id out of vocabulary */
    KITE_E_STATE = -8        /* operation not valid in the object's current state */
} kite_status;

/* Short static name of a status ("format error"). Never NULL. */
const char *kite_status_str(int status);

/* The message of the last failure on this thread, e.g.
 * "model.gguf: tensor 'blk.0.attn_q.weight': data extends past end of file".
 * Valid until the next kite call on this thread. Never NULL ("" if none). */
const char *kite_last_error(void);

/* ---- model ------------------------------------------------------------- */

typedef struct kite_model kite_model;

typedef struct kite_model_params {
    bool use_mmap;   /* map the file (true) or read weights into aligned heap memory */
    bool vocab_only; /* load only the tokenizer; tensors are not required */
    bool no_repack;  /* keep the file's row layout (A/B measurements; the kite CLI sets it for
                        KITE_REPACK=0).  By default q4_0, q8_0, q4_K and q6_K matrices
                        of a heap-resident model are repacked into 16-row interleaved groups where
                        the CPU's kernels gain from it (docs/kernels.md) */
    uint64_t mem_budget; /* bytes of weight memory the model may hold resident; 0 (default): no bound.
                            Layers beyond it stay on disk and are streamed in per forward pass by an
                            I/O thread (docs/offload.md); implies a file mapping (use_mmap is ignored).
                            Too small (less than the always-resident tensors plus one layer):
                            kite_model_load fails with KITE_E_ARG naming the minimum */
    int32_t tp_size; /* tensor parallelism (docs/distributed.md): this process holds and computes
                        1/tp_size of every layer's heads and FFN columns; 0 or 1: the whole model.
                        Must equal the size of the process group (mpirun -np) */
    int32_t tp_rank; /* this process's share, 0..tp_size-1 (its rank in the group) */
    int32_t f16_compute; /* how F16 matrices are multiplied (enum kite_f16_compute) */
} kite_model_params;

/* kite_model_params.f16_compute.  EXACT (the default): f16 weights are widened to
 * FP32 and every product is exact.  BF16 (opt-in, lossy): at load every F16 matrix
 * the forward pass multiplies (attention, FFN, experts, classifier; the token
 * embedding only when it is the tied classifier) is rounded to bf16 (nearest even)
 * in place and then runs the bf16 kernels, which also round the activations to
 * bf16: VDPBF16PS where the CPU has AVX512_BF16, about twice the prefill rate of
 * the exact path there (docs/kernels.md has the rates and the accuracy, KLD
 * against exact).  The weights must be in writable memory: heap residency
 * (use_mmap false), a memory budget or a tensor split; with a plain file mapping
 * kite_model_load fails with KITE_E_ARG.  Files of other types are unaffected. */
enum kite_f16_compute {
    KITE_F16_COMPUTE_EXACT = 0,
    KITE_F16_COMPUTE_BF16 = 1,
};

kite_model_params kite_model_default_params(void);

/* Loads a GGUF model from path.  With params->vocab_only only the tokenizer
 * is loaded (tokenizer functions work, kite_ctx_new fails); without it a
 * file with no tensors (a vocab-only GGUF) fails with KITE_E_STATE and
 * "PATH is a vocab-only GGUF (a vocabulary, no weights)".
 * On success *out owns the model; free it with kite_model_free.
 * Returns KITE_OK, or KITE_E_IO / KITE_E_FORMAT / KITE_E_UNSUPPORTED /
 * KITE_E_NOT_FOUND / KITE_E_STATE / KITE_E_NOMEM with *out unchanged. */
int kite_model_load(const char *path, const kite_model_params *params,
                    kite_model **out /* OUT: new model */);
void kite_model_free(kite_model *model); /* NULL is a no-op */

typedef struct kite_model_info {
    const char *arch;       /* general.architecture, e.g. "llama" (owned by model) */
    const char *name;       /* general.name or "" */
    int32_t n_vocab;
    int32_t n_ctx_train;    /* context length the model was trained with */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_ff;
    uint64_t n_params;      /* number of weight elements (0 for vocab-only) */
    uint64_t n_bytes;       /* bytes of tensor data */
    bool vocab_only;
    const char *residency;  /* where the weights live: "heap" (read into 2 MiB-aligned
                               anonymous memory, use_mmap false), "mmap" (file
                               mapping) or "offload" (mem_budget); static string */
    uint64_t mem_budget;    /* mem_budget in force (0: none), and with it: */
    int32_t n_resident_layers; /* layers held in memory (the first ones); n_layer - this are streamed */
    uint64_t resident_bytes; /* weight bytes held: resident tensors, float vectors, streaming ring */
    uint64_t ring_bytes;    /* of which the ring of streamed-layer slots */
    uint64_t stream_bytes;  /* bytes read from the file per forward pass: the streamed layers' reads */
    int32_t n_repacked;     /* weight matrices repacked at load (no_repack above); 0: none */
    double repack_ms;       /* time the repacking took (part of the load) */
    int32_t n_f16_as_bf16;  /* F16 matrices computed as bf16 (f16_compute BF16; streamed layers counted
                               once each); 0: none */
    int32_t tp_size;        /* ranks the layers are split over (kite_model_params.tp_size); 1: none */
    uint64_t n_bytes_split; /* tensor split: bytes of this rank's copies of its share of the layers */
    uint64_t n_bytes_layers; /* tensor split: bytes of the split matrices of the whole model */
    int32_t sliding_window; /* attention window of the windowed layers in positions; 0: none */
    int32_t n_swa_layers;   /* layers using it: n_layer (Mistral) or the local layers of an interleaved
                               local/global model ({arch}.attention.sliding_window_pattern) */
} kite_model_info;

void kite_model_get_info(const kite_model *model, kite_model_info *info /* OUT */);

/* Streaming counters of a model with a mem_budget (all zero without one). */
typedef struct kite_offload_stats {
    uint64_t bytes_read;  /* bytes the streaming thread has read from the file since the load */
    uint64_t n_passes;    /* forward passes run (each reads every streamed layer once) */
    bool direct;          /* reads bypass the page cache (O_DIRECT) */
} kite_offload_stats;
void kite_model_offload_stats(const kite_model *model, kite_offload_stats *stats /* OUT */);

/* ---- tokens ------------------------------------------------------------ */

typedef int32_t kite_token;

kite_token kite_token_bos(const kite_model *model); /* -1 if the vocabulary has none */
kite_token kite_token_eos(const kite_model *model); /* -1 if none */
bool kite_token_is_eog(const kite_model *model, kite_token t); /* end of generation (EOS, EOT) */

/* Encodes text[0..len) into tokens (no special-token parsing of the text).
 * add_bos prepends BOS when the vocabulary has one.  Writes at most cap
 * tokens; *n_out receives the full count even when it exceeds cap, in which
 * case KITE_E_RANGE is returned and the caller retries with a larger buffer. */
int kite_tokenize(const kite_model *model, const char *text, size_t len, bool add_bos,
                  kite_token *out, size_t cap, size_t *n_out /* OUT */);

/* The raw bytes a token stands for (byte-fallback tokens give their byte,
 * SentencePiece's U+2581 is turned into a space; control tokens give "").
 * Returns the length, or a negative status if t is out of range.  The pointer
 * *piece is owned by the model or points into buf (size >= 8). */
int kite_token_to_piece(const kite_model *model, kite_token t, const char **piece, char buf[8]);

/* Streaming detokenizer: feed tokens one by one, get text that only ever
 * contains whole UTF-8 characters (a character split over tokens is held back
 * until complete).  The leading dummy-prefix space of SentencePiece is
 * dropped after BOS, like llama.cpp and llama2.c do. */
typedef struct kite_detok kite_detok;
int kite_detok_new(const kite_model *model, kite_detok **out /* OUT */);
void kite_detok_free(kite_detok *d);
/* Appends the text completed by token t to out (NUL-terminated, at most cap-1
 * bytes).  Returns the number of bytes written (>= 0) or a negative status. */
int kite_detok_push(kite_detok *d, kite_token t, char *out, size_t cap);
/* Flushes held-back bytes of an incomplete character (as U+FFFD). */
int kite_detok_flush(kite_detok *d, char *out, size_t cap);

/* ---- inference context ------------------------------------------------- */

typedef struct kite_ctx kite_ctx;

/* Element types of the KV cache (kite_ctx_params.kv_type); the values are the
 * GGUF/ggml type ids.  q8_0 and q4_0 store each (position, kv head) row of
 * head_dim values as blocks of 32 with an f16 scale (ggml's block_q8_0 /
 * block_q4_0) and need head_dim % 32 == 0; f16 works for any head_dim. */
enum kite_kv_type { KITE_KV_F32 = 0, KITE_KV_F16 = 1, KITE_KV_Q4_0 = 2, KITE_KV_Q8_0 = 8 };

typedef struct kite_ctx_params {
    int32_t n_ctx;     /* KV cache length in tokens; 0 = model's training context */
    int32_t n_threads; /* worker threads; 0 = number of online CPUs */
    int32_t kv_type;   /* enum kite_kv_type; default KITE_KV_F32 (exact).  kite_ctx_new returns KITE_E_ARG
                          for another value or for q8_0/q4_0 with head_dim % 32 != 0.  Memory per cached
                          value: 4, 2, 1.0625 (q8_0), 0.5625 (q4_0) bytes; docs/attention.md */
    bool swa_full;     /* sliding-window models: keep every position of the windowed layers too (as
                          llama.cpp's --swa-full) instead of a ring of window + batch - 1 positions;
                          same output, more memory; any truncation then works.  Default false */
} kite_ctx_params;

kite_ctx_params kite_ctx_default_params(void);

/* Creates an inference context (KV cache, scratch buffers, thread pool).
 * Borrows model, which must outlive the context. */
int kite_ctx_new(kite_model *model, const kite_ctx_params *params, kite_ctx **out /* OUT */);
void kite_ctx_free(kite_ctx *ctx); /* tensor split, rank 0: also ends the other ranks' kite_ctx_follow */
/* Tensor-split model (kite_model_params.tp_size > 1) on a rank other than 0:
 * runs the forward passes rank 0's context makes, in lockstep, until rank 0
 * frees its context; every rank creates its context with the same
 * parameters.  Returns KITE_OK at once on rank 0 and for a model that is not
 * split; KITE_E_STATE when rank 0 asks for a pass this context cannot run. */
int kite_ctx_follow(kite_ctx *ctx);

/* Evaluates n tokens at positions kite_ctx_n_past()..+n-1 as one batch
 * (prefill when n > 1, decode when n == 1) and appends them to the KV cache.
 * Every position after the prompt (the first eval of an empty context) gets
 * the logits of decoding one token per eval, bit for bit, however the tokens
 * are batched: a multi-token pass (speculative verification) equals decoding
 * (docs/attention.md, "Which passes are bit-identical").
 * If all_logits, the logits of every position are kept (see kite_ctx_logits),
 * otherwise only those of the last one.  Returns KITE_E_RANGE (state
 * unchanged) if the context would overflow, KITE_E_RANGE for a token id
 * outside the vocabulary. */
int kite_ctx_eval(kite_ctx *ctx, const kite_token *tokens, int32_t n, bool all_logits);

/* Logits of the i-th token of the last kite_ctx_eval (i = -1: the last one).
 * n_vocab floats owned by ctx, valid until the next eval.  NULL if not kept. */
const float *kite_ctx_logits(const kite_ctx *ctx, int32_t i);

int32_t kite_ctx_n_past(const kite_ctx *ctx);
int32_t kite_ctx_n_ctx(const kite_ctx *ctx);
int32_t kite_ctx_n_threads(const kite_ctx *ctx); /* threads actually used */
/* Drops cached positions >= n_past (n_past <= current), e.g. to restart.
 * Returns KITE_OK, KITE_E_ARG (n_past out of range), or KITE_E_STATE (state
 * unchanged) when a windowed layer's ring no longer holds positions a token
 * at n_past would attend to (they were overwritten by later ones; see
 * swa_full): truncate to 0 and evaluate the tokens again.  Rolling back
 * within the last kite_ctx_eval (speculative decoding) always works. */
int kite_ctx_truncate(kite_ctx *ctx, int32_t n_past);
/* Bytes of the context's KV cache (K and V, every layer): n_ctx rows per
 * layer, or a ring of window + n_batch - 1 rows for a windowed layer
 * (docs/attention.md, "Sliding windows"). */
int64_t kite_ctx_kv_bytes(const kite_ctx *ctx);
/* Makes later evals skip the blocks of the layers with skip[l] true (the
 * residual stream passes through unchanged; their KV rows are not written).
 * For self-speculative drafting (docs/spec.md).  skip has n == n_layer flags
 * (copied); skip NULL or n 0 clears.  Cached positions computed under another
 * setting are not recomputed: set it on a fresh or truncated context.
 * Returns KITE_OK, KITE_E_ARG (n != n_layer, state unchanged) or KITE_E_NOMEM. */
int kite_ctx_set_skip_layers(kite_ctx *ctx, const bool *skip, int32_t n);

/* Per-op-type profiling of the forward pass (`kite bench --profile`,
 * docs/roofline.md).  While on, every kite_ctx_eval adds the wall-clock
 * time of each op type (all layers together) to an accumulator in ctx; the
 * timestamps come from a monotonic clock and are taken only while on, so
 * the logits are bit-identical with profiling on or off and the cost when
 * off is one untaken branch per op.  Turning it on (or on again) zeroes the
 * accumulators; turning it off keeps them readable.  The types are
 * KITE_PROFILE_N_OPS fixed names: embed, attn_norm, q_proj, k_proj, v_proj,
 * rope, attention, o_proj, ffn_norm, ffn_gate, ffn_up, ffn_act (SwiGLU),
 * ffn_down, out_norm, output, other (rotary tables, residual adds).  The
 * times cover the forward passes only (not eval's argument checks), so
 * their sum is slightly below the eval's wall time.
 * Returns KITE_OK or KITE_E_ARG (ctx NULL). */
#define KITE_PROFILE_N_OPS 16
int kite_ctx_set_profiling(kite_ctx *ctx, bool on);
/* Copies min(cap, KITE_PROFILE_N_OPS) accumulated times (seconds) into
 * seconds[] and the matching static names into names[] (either may be NULL)
 * and returns KITE_PROFILE_N_OPS (-1 if ctx is NULL).  All zeros before the
 * profiling was first turned on. */
int32_t kite_ctx_profile(const kite_ctx *ctx, double *seconds, const char **names, int32_t cap);

/* ---- embeddings (docs/model.md, "Embeddings") --------------------------- */

/* How the final hidden states of an input's tokens become one vector. */
typedef enum kite_pooling {
    KITE_POOLING_MEAN = 0, /* the mean over every token (BOS included), as llama.cpp's --pooling mean */
    KITE_POOLING_LAST = 1, /* the last token's: the only one that has seen the whole input (causal models) */
    KITE_POOLING_CLS = 2   /* the first token's (BERT's CLS).  In a causal model it has seen only itself:
                              every input that starts with BOS gets the same vector */
} kite_pooling;

typedef struct kite_embed_params {
    int32_t pooling;  /* enum kite_pooling; default KITE_POOLING_MEAN */
    bool normalize;   /* divide by the L2 norm (an all-zero vector stays zero); default true */
} kite_embed_params;

kite_embed_params kite_embed_default_params(void);

/* Embeds n_seq inputs: tokens holds input i's n_tok[i] (>= 1) tokens after
 * those of inputs 0..i-1; out[i * n_embd .. +n_embd) receives the pooled
 * final hidden state of input i, after the model's final norm (the
 * classifier is not run).  Each input is evaluated from an empty KV cache
 * in n_batch chunks, so its vector depends only on its own tokens: a call
 * with several inputs gives bit for bit the vectors of one call per input,
 * and the same thread count gives the same bits every time.  The context's
 * KV cache and scratch are used and it is left empty (n_past 0, no logits).
 * params NULL: the defaults.  Returns KITE_OK; KITE_E_ARG (NULL pointers,
 * n_seq < 1, an empty input, an unknown pooling), KITE_E_RANGE (an input
 * longer than n_ctx, a token outside the vocabulary), KITE_E_STATE (a paged
 * serving context), KITE_E_NOMEM, KITE_E_IO (a streamed layer could not be
 * read); on error out is unspecified and the context is left empty. */
int kite_ctx_embed_batch(kite_ctx *ctx, const kite_token *tokens, const int32_t *n_tok, int32_t n_seq,
                         const kite_embed_params *params, float *out /* OUT: n_seq * n_embd */);

/* kite_ctx_embed_batch of one input of n tokens. */
int kite_ctx_embed(kite_ctx *ctx, const kite_token *tokens, int32_t n, const kite_embed_params *params,
                   float *out /* OUT: n_embd */);

/* ---- sampler ----------------------------------------------------------- */

typedef struct kite_sampler kite_sampler;

/* One entry of kite_sampler_params.logit_bias (OpenAI's logit_bias). */
typedef struct kite_logit_bias {
    kite_token token;        /* in [0, n_vocab) */
    float bias;              /* added to the token's logit; <= -100 bans it (-inf), as OpenAI's -100 */
} kite_logit_bias;

typedef struct kite_sampler_params {
    float temperature;       /* <= 0: greedy (argmax) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; divides positive / multiplies negative logits */
    float frequency_penalty; /* 0: off; subtracts count * value */
    float presence_penalty;  /* 0: off; subtracts value once if seen */
    int32_t penalty_last_n;  /* window of recent tokens for the penalties; 0: off, -1: whole context */
    uint64_t seed;           /* same seed, same inputs -> same samples */
    const kite_logit_bias *logit_bias; /* [n_logit_bias] or NULL; copied by kite_sampler_new.  Applied
                                          to the logits first, before the penalties; a token listed
                                          twice gets the sum */
    int32_t n_logit_bias;
} kite_sampler_params;

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repeat_penalty 1, frequency/presence 0, penalty_last_n 64, seed 0xC0FFEE.
 * The chain is logit_bias -> penalties -> (temperature <= 0: argmax, ties to the lowest id)
 * -> top-k -> top-p -> min-p -> temperature -> softmax -> seeded draw
 * (xoshiro256**); the filters act on the temperature-1 distribution.
 * See docs/sampler.md. */
kite_sampler_params kite_sampler_default_params(void);

int kite_sampler_new(const kite_sampler_params *params, int32_t n_vocab,
                     kite_sampler **out /* OUT */);
void kite_sampler_free(kite_sampler *s);
/* Picks a token from logits (n_vocab floats, not modified). */
kite_token kite_sampler_sample(kite_sampler *s, const float *logits);
/* Records a token of the context (prompt or generated) for the penalties. */
void kite_sampler_accept(kite_sampler *s, kite_token t);
void kite_sampler_reset(kite_sampler *s); /* forget history, reseed */

/* Log-probabilities of a step (OpenAI's logprobs / top_logprobs). */
#define KITE_MAX_TOP_LOGPROBS 20
typedef struct kite_token_logprob {
    kite_token token;
    float logprob;           /* natural log; -INFINITY for a banned / grammar-masked token */
} kite_token_logprob;
typedef struct kite_logprobs {
    kite_token token;        /* the token asked about (the one sampled) */
    float logprob;
    int32_t n_top;           /* entries of top[] in use: min(n_top asked, tokens with p > 0) */
    kite_token_logprob top[KITE_MAX_TOP_LOGPROBS]; /* most likely first, ties to the lower id */
} kite_logprobs;
/* The log-probability of token and the n_top (0..KITE_MAX_TOP_LOGPROBS) most
 * likely tokens under the distribution s samples from before truncation:
 * log_softmax of logits after logit_bias and the penalties (with the
 * sampler's current history), at temperature 1 - not reshaped by
 * temperature, top-k, top-p or min-p (OpenAI's logprobs do not change with
 * temperature either).  Call it before kite_sampler_accept(token) of the
 * step.  Uses the sampler's scratch (invalidates sampler_candidates'
 * output); no allocation, O(n_vocab * (1 + small n_top insertions)).
 * Returns KITE_OK, or KITE_E_ARG (NULL, token or n_top out of range). */
int kite_sampler_logprobs(kite_sampler *s, const float *logits, kite_token token, int32_t n_top,
                          kite_logprobs *out /* OUT */);

/* ---- grammars: constrained decoding (docs/grammar.md) ------------------ */

/* A grammar compiled for one model's vocabulary: the rule table, a byte trie of
 * the vocabulary and a cache of precomputed token masks.  Give it to
 * kite_gen_params.grammar; one handle may serve any number of generations at
 * once (threads included: its cache is locked internally).  It borrows nothing
 * from the model but must only be used with generations of that model. */
typedef struct kite_grammar kite_grammar;

typedef enum kite_grammar_kind {
    KITE_GRAMMAR_GBNF = 0,        /* text: llama.cpp's GBNF, start rule "root" */
    KITE_GRAMMAR_JSON_SCHEMA = 1, /* text: a JSON Schema (the subset of docs/grammar.md) */
    KITE_GRAMMAR_JSON_OBJECT = 2  /* any JSON object; text is ignored (may be NULL) */
} kite_grammar_kind;

/* Compiles text (len bytes) of the given kind for model's vocabulary.
 * Returns KITE_OK with *out (free with kite_grammar_free), KITE_E_FORMAT (a
 * GBNF syntax error with line:column, invalid JSON, left recursion),
 * KITE_E_UNSUPPORTED (a JSON Schema keyword outside the subset, named in the
 * message), KITE_E_NOT_FOUND (an unresolved $ref), KITE_E_RANGE (limits),
 * KITE_E_ARG or KITE_E_NOMEM; *out unchanged on error.  Cost: a sort of the
 * vocabulary (~0.1 s at 128k tokens). */
int kite_grammar_new(const kite_model *model, int kind, const char *text, size_t len,
                     kite_grammar **out /* OUT */);
void kite_grammar_free(kite_grammar *g); /* NULL is a no-op; no generation may still use it */

/* A trigger of a lazy grammar (llama-server's lazy grammars). */
#define KITE_GRAMMAR_TRIGGER_MAX 64 /* bytes of a trigger's text at most */
typedef struct kite_grammar_trigger {
    const char *text; /* 1..KITE_GRAMMAR_TRIGGER_MAX bytes, NUL-terminated */
    bool at_start;    /* counts only at the output's start (white space before it allowed) */
} kite_grammar_trigger;

/* As kite_grammar_new, but lazy: a generation under it is free until its
 * output text holds one of triggers[0..n_triggers) (copied), and from that
 * trigger's first byte on the output must match the grammar.  For tool calls
 * a model may or may not make (tool_choice "auto"): the grammar is the calls'
 * syntax, the triggers their markup ("<tool_call>").  A trigger is found
 * across token boundaries; the token that completes it is judged whole: if
 * the grammar refuses the text from the trigger to the token's end, that
 * occurrence does not count and the output stays free.  Before the trigger
 * nothing is masked and the end tokens end the generation freely.  Drafts
 * (kite_gen_check_draft, kite_gen_draft_*) follow the same rule.  Returns as
 * kite_grammar_new, and KITE_E_ARG for n_triggers 0 or a bad trigger. */
int kite_grammar_new_lazy(const kite_model *model, int kind, const char *text, size_t len,
                          const kite_grammar_trigger *triggers, size_t n_triggers, kite_grammar **out /* OUT */);

/* ---- generation step --------------------------------------------------- */

/* A kite_gen holds the rules of one generation step, written once for
 * `kite run` (plain and speculative), `kite chat` and the serving engine:
 *
 *   sample (or take a token chosen elsewhere) -> stop rules -> record the
 *   token in the sampler -> streaming detokenize.
 *
 * Stop rules, in this order:
 *   1. unless ignore_eos: a generated BOS ends the generation (a new document
 *      would begin; llama2.c stops there too), then an end-of-generation
 *      token (kite_token_is_eog); a token that is both counts as BOS;
 *   2. one of the caller's stop tokens ends it (ignore_eos or not);
 *      such a token is not output: not counted, not recorded, not detokenized;
 *   3. otherwise the token is output; then n_predict output tokens end the
 *      generation (LENGTH), else a full context does (CONTEXT: the token would
 *      need position n_ctx or later to be evaluated).
 * The caller evaluates a token only while the generation goes on, so the
 * last output token is never evaluated.  Stop strings are the caller's
 * (they act on text: kite chat, the serving engine's stop filter).
 *
 * The detokenizer and its output buffer are allocated by kite_gen_new, so a
 * step allocates nothing.  One thread at a time per kite_gen. */
typedef enum kite_stop {
    KITE_STOP_NONE = 0,  /* the generation goes on */
    KITE_STOP_LENGTH,    /* n_predict tokens were output */
    KITE_STOP_EOG,       /* the model produced an end-of-generation token */
    KITE_STOP_BOS,       /* the model produced BOS */
    KITE_STOP_CONTEXT,   /* the last output token has no position left in the context */
    KITE_STOP_TOKEN,     /* the model produced one of the caller's stop tokens */
    KITE_STOP_GRAMMAR    /* the grammar is complete and allows no further text */
} kite_stop;

/* "", "length", "eog", "bos", "context", "stop token", "grammar" (static; "" for an unknown value). */
const char *kite_stop_name(int stop);

typedef struct kite_gen kite_gen;

typedef struct kite_gen_params {
    kite_sampler *sampler;   /* borrowed: samples in kite_gen_sample and records every output token;
                                NULL: only kite_gen_push, nothing recorded (a speculative decoder that
                                keeps its own sampler) */
    int64_t n_predict;       /* tokens to output at most; <= 0: none (the generation is over at once) */
    int32_t n_ctx;           /* context positions for the CONTEXT rule; 0: no such rule */
    bool ignore_eos;         /* BOS and end-of-generation tokens are output like any other */
    const kite_token *stop_tokens; /* [n_stop_tokens] tokens that end the generation; borrowed: valid
                                      until the generation ends or the next kite_gen_begin */
    int32_t n_stop_tokens;
    const kite_grammar *grammar; /* borrowed, or NULL: every output token keeps the text inside the
                                    grammar.  kite_gen_sample and kite_gen_pick choose only tokens it
                                    allows (end-of-generation and stop tokens only where the grammar
                                    can end); kite_gen_push refuses others; the generation ends
                                    (KITE_STOP_GRAMMAR) once the grammar allows nothing more */
} kite_gen_params;

/* Defaults: no sampler, n_predict 256, no context rule, no stop tokens. */
kite_gen_params kite_gen_default_params(void);

/* What a step did with one token. */
typedef struct kite_gen_step {
    kite_token token;   /* the token judged */
    int stop;           /* enum kite_stop: KITE_STOP_NONE while the generation goes on (evaluate token
                           next), else why it ended with this token */
    bool output;        /* the token is part of the output (counted, recorded, detokenized) */
    const char *text;   /* the text it completed: whole UTF-8 characters, NUL-terminated, "" if none;
                           owned by the kite_gen, valid until its next call */
    size_t len;         /* bytes of text */
    int64_t n_gen;      /* tokens output since kite_gen_begin, this one included */
} kite_gen_step;

/* Creates a generator for model's vocabulary (borrowed: it must outlive the
 * generator).  It starts stopped (KITE_STOP_LENGTH): call kite_gen_begin.
 * Returns KITE_OK, KITE_E_ARG or KITE_E_NOMEM (*out unchanged). */
int kite_gen_new(const kite_model *model, kite_gen **out /* OUT */);
void kite_gen_free(kite_gen *g); /* NULL is a no-op */

/* Starts a generation after n_past context positions (the prompt) with the
 * rules of p (copied; the arrays it points to are borrowed).  The
 * detokenizer keeps its state (call kite_gen_flush to end a text).
 * Returns KITE_OK or KITE_E_ARG (state unchanged). */
int kite_gen_begin(kite_gen *g, const kite_gen_params *p, int32_t n_past);

/* Detokenizes a prompt token: no rules, not counted, not recorded (record
 * prompt tokens with kite_sampler_accept).  For echoing the prompt, and so
 * that the first generated token is rendered after it (SentencePiece's
 * space after BOS).  out->output is false; stop and n_gen are the current
 * values.
 * Returns KITE_OK or the detokenizer's status (KITE_E_RANGE: token outside
 * the vocabulary). */
int kite_gen_echo(kite_gen *g, kite_token t, kite_gen_step *out /* OUT */);

/* One step from a logits row (n_vocab floats): samples with p.sampler, then
 * as kite_gen_push.  Returns KITE_OK, KITE_E_STATE (no sampler, or the
 * generation is over: nothing done) or the detokenizer's status. */
int kite_gen_sample(kite_gen *g, const float *logits, kite_gen_step *out /* OUT */);

/* The logits a sampler should see under p.grammar: logits itself without a
 * grammar, else a copy (owned by g, valid until its next call) with every token
 * the grammar does not allow next at -INFINITY.  For callers that sample or
 * judge drafts themselves (the serving engine's verification).  Cost: the
 * token mask (a few microseconds once cached) and one pass over the row.
 * Returns KITE_OK, KITE_E_STATE (over, or no token at all continues the
 * grammar), KITE_E_RANGE / KITE_E_NOMEM from the matcher. */
int kite_gen_masked_logits(kite_gen *g, const float *logits, const float **out /* OUT */);

/* Samples a token from logits with p.sampler under p.grammar, without pushing it
 * (kite_gen_sample is kite_gen_pick then kite_gen_push).  Returns as
 * kite_gen_masked_logits, or KITE_E_STATE without a sampler. */
int kite_gen_pick(kite_gen *g, const float *logits, kite_token *out /* OUT */);

/* Checks a speculative draft against the rules of the current state without
 * changing it: *n_ok receives the length of the longest prefix of
 * draft[0..n) that p.grammar allows, taken in order (a token that ends the
 * generation - end-of-generation, BOS, a stop token - counts only where the
 * grammar may end, and nothing after it, nor after a token that completes
 * the grammar, counts).  Without a grammar *n_ok = n; once the generation is
 * over, 0.  So a decoder can truncate a draft before verifying it: under
 * greedy acceptance, or a point-mass draft (prompt lookup), every dropped
 * token would have been rejected anyway.  Cost: a copy of the matcher's
 * live stacks and one matcher step per draft byte; a scratch matcher is
 * allocated at the first call of a generation.  Returns KITE_OK, KITE_E_ARG,
 * or KITE_E_RANGE / KITE_E_NOMEM from the matcher (*n_ok then 0). */
int kite_gen_check_draft(kite_gen *g, const kite_token *draft, int32_t n, int32_t *n_ok /* OUT */);

/* Drafting under the rules (a model drafter): kite_gen_draft_begin starts a
 * draft at the current state (the scratch matcher of kite_gen_check_draft,
 * which a later check resets); kite_gen_draft_masked_logits masks a draft
 * model's logits with the draft's state as kite_gen_masked_logits does with
 * the generation's (the same buffer: valid until the next call); and
 * kite_gen_draft_push advances the draft over t, *more false when t ends the
 * generation (draft no further).  The generation itself never moves.  A
 * draft drawn this way is all allowed, so the drafter's q is the masked
 * distribution and the rejection rule stays exact.  Without a grammar the
 * logits pass unmasked and *more is false only for an end token.  Returns
 * KITE_OK, KITE_E_STATE (the generation is over, no draft begun, t refused:
 * nothing done), KITE_E_ARG, KITE_E_RANGE / KITE_E_NOMEM from the matcher. */
int kite_gen_draft_begin(kite_gen *g);
int kite_gen_draft_masked_logits(kite_gen *g, const float *logits, const float **out /* OUT */);
int kite_gen_draft_push(kite_gen *g, kite_token t, bool *more /* OUT */);

/* One step with token t chosen elsewhere (a speculative verification):
 * applies the stop rules, records an output token in p.sampler (if any) and
 * detokenizes it.  Returns KITE_OK, KITE_E_STATE (the generation is over:
 * nothing done) or the detokenizer's status (KITE_E_RANGE: t outside the
 * vocabulary; KITE_E_STATE also for a token p.grammar does not allow here,
 * with the state unchanged). */
int kite_gen_push(kite_gen *g, kite_token t, kite_gen_step *out /* OUT */);

/* The stop reason so far (enum kite_stop; KITE_STOP_NONE while it goes on). */
int kite_gen_stopped(const kite_gen *g);

/* Ends the text: *text receives the held-back bytes of an incomplete
 * character (as U+FFFD) or "", *len their count (owned by g, valid until
 * its next call).  The detokenizer is then as new.  Returns KITE_OK or
 * KITE_E_ARG. */
int kite_gen_flush(kite_gen *g, const char **text /* OUT */, size_t *len /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* KITE_H */
