/*
 * engine.h - the serving engine: many sequences, one model, continuous
 * batching over a paged KV cache (issue 5; docs/engine.md).
 *
 * DESIGN
 *   engine_new starts one engine thread.  Each iteration ("step") it admits
 *   waiting requests (round-robin across engine_req.client, FCFS within
 *   one; at most n_parallel running), builds one mixed batch - one decode
 *   token per running sequence plus chunks of prompts being prefilled,
 *   within step_tokens - runs ONE forward pass over it
 *   (llama_forward_batch, attention per sequence through its block table),
 *   samples, and reports new text through each request's callback.  When KV
 *   blocks run out the newest running sequence is preempted (its blocks
 *   freed, recomputed later).  Blocks are reference counted; full blocks of a
 *   prompt are kept in a prefix cache keyed by a hash of their tokens and of
 *   the prefix before them, so requests sharing a prompt prefix share them
 *   (copy-on-write on divergence, LRU eviction of unreferenced cached blocks).
 *
 *   Speculative decoding (spec_lookup_n > 0; docs/engine.md): before each
 *   step every decoding sequence drafts up to its adaptive k tokens by
 *   prompt lookup over its own prompt and output; its decode item becomes
 *   [pending token, drafts] with logits for every position (drafts take
 *   the step budget and spare KV blocks only), and after the pass the drafts
 *   are verified in order with the request's own sampler - at temperature 0
 *   the output is token for token plain decoding, otherwise distributed as
 *   plain sampling - and the rejected positions are rolled back by
 *   shrinking the block table.
 *
 *   Model drafters (spec_draft_model, or spec_skip_layers: the target with
 *   those layers skipped; engine_draft.h): a second paged context with its
 *   own block pool drafts for all decoding sequences at once - one batched
 *   pass catches each up on its history, then one batched pass per draft
 *   token - and the drafts are verified as above, with the draft's q rows in
 *   the rejection rule at temperature > 0.  Lookahead (spec_la_window > 0;
 *   spec/lookahead.h): each sequence keeps a Jacobi window and an n-gram
 *   pool, refined by its own verification passes; its drafts are always W
 *   tokens (when the budget allows) and point masses.  At most one of
 *   spec_lookup_n, spec_draft_model, spec_skip_layers and spec_la_window
 *   may be set.
 *
 *   Embedding requests (engine_req.embed) are sequences whose prompt is
 *   prefilled in the same batches as everything else and then pooled
 *   (model/forward.h, embed_pool_rows) from the residual rows of the pass -
 *   no logits row, no sampling; they finish when their last chunk is
 *   computed.  A sequence's rows do not depend on what shares its pass, so
 *   the vector equals kite_ctx_embed's bit for bit.
 *
 *   Detokenization and stop sequences are handled here, so every front end
 *   (HTTP server, `kite bench --parallel`, tests) gets the same text.  Text
 *   that may be the start of a stop sequence is held back until it is
 *   decided.
 *
 * THREADS / OWNERSHIP
 *   engine_submit, engine_cancel and engine_get_stats may be called from any
 *   thread.  Callbacks run on the engine thread, one at a time; they must not
 *   block for long and must not call engine_* functions other than
 *   engine_cancel.  The engine borrows the model (which must outlive it) and
 *   copies everything a request points to.
 */
#ifndef KITE_SERVE_ENGINE_H
#define KITE_SERVE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite.h"

typedef struct engine engine;

/* Default KV block size: 2 positions.  A sequence wastes at most the unused
 * tail of its last block (block_size - 1 slots), so short requests need
 * small blocks: `kite bench --parallel 16 -p 16 -n 32` measured a mean KV
 * waste of 8.4-10.4% with 16, 3.9-4.8% with 4 and 0.1-1.3% with 2
 * (docs/engine.md, "KV waste").  Blocks of a sequence are allocated in
 * order where the pool allows and attention reads consecutive blocks as one
 * run (attn_row_run_n), so small blocks cost little on long prompts. */
#define ENGINE_BLOCK_SIZE 2

typedef struct engine_params {
    int32_t n_parallel;    /* max running sequences; 0 = 4 */
    int32_t n_ctx;         /* max positions of one sequence (prompt + generated); 0 = model's n_ctx_train */
    int64_t kv_mem_bytes;  /* KV pool size; 0 = n_ctx * n_parallel positions */
    int32_t block_size;    /* KV positions per block; 0 = ENGINE_BLOCK_SIZE */
    int32_t step_tokens;   /* token budget of one step (chunked prefill); 0 = 512 */
    int32_t n_threads;     /* 0 = all online CPUs */
    bool no_prefix_cache;  /* disable prefix sharing (benchmarks, debugging) */
    int32_t spec_lookup_n; /* speculative decoding with prompt lookup: largest n-gram; 0 = off */
    int32_t spec_draft_max; /* upper bound on a sequence's draft length, 1..SPEC_MAX_DRAFT (16); 0 = 8;
                               lookahead drafts W tokens instead */
    kite_model *spec_draft_model; /* speculative decoding with a draft model (same vocabulary; borrowed, must
                                     outlive the engine), or NULL */
    const bool *spec_skip_layers; /* self-speculative: [n_spec_skip == n_layer] flags of the target's layers
                                     the draft skips (copied), or NULL */
    int32_t n_spec_skip;
    int64_t spec_draft_kv_bytes;  /* model drafters' KV pool; 0 = as many positions as the target's pool */
    int32_t spec_la_window;       /* lookahead (Jacobi) drafting: W guesses per pass, 1..16; 0 = off */
    int32_t spec_la_ngram;        /* N, n-gram size, 2..W+1 */
    int32_t spec_la_pool;         /* G, n-grams kept per first token, 1..255 */
} engine_params;

typedef struct engine_req {
    const kite_token *prompt;   /* n_prompt >= 1 tokens, BOS included if wanted */
    int32_t n_prompt;
    int32_t max_tokens;         /* generated-token limit (>= 1); clipped to n_ctx - n_prompt */
    kite_sampler_params sampling;
    const char *const *stop;    /* stop strings (not included in the output), or NULL */
    int32_t n_stop;
    bool ignore_eos;
    kite_grammar *grammar;      /* or NULL: output constrained by it (kite_gen_params.grammar), drafts
                                   judged on the grammar-masked distribution.  engine_submit takes
                                   ownership when it succeeds (freed with the request, after its last
                                   step: a cancel cannot free it under the engine thread); on failure
                                   the caller keeps it.  The per-request hook for tools' argument
                                   constraints as well */
    bool logprobs;              /* report each output token's log-probability (engine_event.logprobs) */
    int32_t top_logprobs;       /* and its 0..KITE_MAX_TOP_LOGPROBS most likely alternatives */
    bool embed;                 /* an embedding: the prompt (n_prompt <= n_ctx) is prefilled only - no
                                   classifier, no sampling, never a prefix-cache match (every position's
                                   hidden state is pooled) - and DONE carries the pooled final hidden
                                   state (engine_event.embedding).  max_tokens, sampling, stop,
                                   ignore_eos, logprobs are ignored; grammar must be NULL */
    kite_embed_params embed_params; /* embed: pooling and normalisation (kite_embed_default_params) */
    uint64_t client;            /* who sent it, for fair queueing (sched_seq.client): the waiting queue
                                   admits round-robin across clients, FIFO within one; 0 (the default)
                                   is a client like any other, so callers that never set it get FCFS */
} engine_req;

enum engine_event_kind {
    ENGINE_EV_TEXT = 1,  /* new output text (may be empty when only a token was produced) */
    ENGINE_EV_DONE = 2,  /* finished; the last event of a request */
    ENGINE_EV_ERROR = 3  /* failed (e.g. prompt longer than the context); also the last event */
};

typedef struct engine_event {
    int kind;                   /* enum engine_event_kind */
    const char *text;           /* TEXT: UTF-8 bytes, valid only during the callback */
    size_t len;
    const kite_token *tokens;   /* TEXT: tokens produced since the previous event */
    int32_t n_tokens;
    const kite_logprobs *logprobs; /* TEXT with n_tokens 1 of a request with logprobs: that token's
                                      (kite_sampler_logprobs: the distribution after logit_bias,
                                      penalties and the grammar mask, temperature 1), else NULL */
    const char *finish_reason;  /* DONE: "stop" (EOS or stop string), "length", "cancelled" */
    int32_t n_prompt;           /* usage: prompt tokens */
    int32_t n_gen;              /* usage: generated tokens so far */
    int32_t n_cached;           /* prompt tokens served from the prefix cache */
    double queue_s;             /* seconds from engine_submit to the first admission to the running set
                                   (0 while still waiting) */
    int status;                 /* ERROR: a kite_status */
    const char *message;        /* ERROR: one line */
    const float *embedding;     /* DONE of an embed request: n_embd floats, valid only during the callback */
    int32_t n_embd;
} engine_event;

typedef void (*engine_cb)(void *user, const engine_event *ev);

typedef struct engine_stats {
    int64_t requests_total;      /* submitted (embedding inputs included) */
    int64_t embed_total;         /* of those, embedding requests (engine_req.embed) */
    int64_t requests_done;       /* finished in any way */
    int64_t tokens_in;           /* prompt tokens of admitted requests */
    int64_t tokens_out;          /* generated tokens */
    int64_t prefix_hit_tokens;   /* prompt tokens not recomputed thanks to the prefix cache */
    int64_t preemptions;
    int64_t steps;               /* forward passes */
    int32_t queue_len;           /* waiting requests */
    int32_t running;             /* sequences in the running set */
    int32_t kv_blocks_total;
    int32_t kv_blocks_used;      /* referenced by a running sequence */
    int32_t kv_blocks_cached;    /* unreferenced, kept for prefix reuse */
    int64_t kv_slots_allocated;  /* token slots in blocks held by running sequences */
    int64_t kv_slots_used;       /* of those, slots holding a token */
    int64_t spec_drafted;        /* speculative: drafted tokens verified by a forward pass */
    int64_t spec_accepted;       /* of those, accepted (kept as output) */
    int64_t spec_verify_passes;  /* sequence-steps that verified at least one draft */
    int64_t spec_pool_drafts;    /* lookahead: drafts that began with a pool n-gram */
    double spec_draft_s;         /* model drafters: seconds spent in draft forward passes */
    int32_t kv_draft_blocks_used; /* model drafters: draft KV blocks held by sequences */
} engine_stats;

engine_params engine_default_params(void);

/* Creates the engine and starts its thread.  Returns a kite_status. */
int engine_new(kite_model *model, const engine_params *params, engine **out /* OUT */);
/* Cancels every request (their callbacks get DONE "cancelled"), joins the
 * thread and frees everything.  NULL is a no-op. */
void engine_free(engine *e);

/* Queues a request; *id (optional) receives its id.  Errors in the request
 * itself (empty prompt, token outside the vocabulary, prompt that cannot fit
 * n_ctx) are returned here as a kite_status with kite_last_error() set, and
 * the callback is never called.  Otherwise the callback gets TEXT events and
 * exactly one final DONE or ERROR event. */
int engine_submit(engine *e, const engine_req *req, engine_cb cb, void *user, uint64_t *id /* OUT */);

/* Cancels a request (e.g. its client disconnected): its sequence leaves the
 * batch and its blocks are freed at the next step.  After engine_cancel
 * returns, the callback is never called again for that request (not even
 * DONE).  Unknown or finished ids are ignored. */
void engine_cancel(engine *e, uint64_t id);

void engine_get_stats(engine *e, engine_stats *out /* OUT */);

/* Test and debugging hook: called on the engine thread with the logits row
 * (n_vocab floats, valid only during the call) each request is about to
 * sample from, and that request's callback user pointer.  With speculative
 * decoding these are the rows that decided an output token (a draft's row
 * up to the first rejection, then the row of the replacement or bonus
 * token): the same sequence of rows as plain decoding.  Tests compare the
 * rows bit for bit with plain kite_ctx_eval decoding.  Install it before
 * submitting requests; fn NULL removes it. */
typedef void (*engine_logits_fn)(void *hook_user, void *req_user, const float *logits, int32_t n_vocab);
void engine_set_logits_hook(engine *e, engine_logits_fn fn, void *hook_user);

#endif
