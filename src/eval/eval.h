/*
 * eval.h - evaluation harness: perplexity, KL divergence against a saved
 * reference, multiple-choice log-likelihood tasks (`kite ppl`, `kite eval`).
 *
 * DESIGN
 *   Four small parts, one file each (docs/quantization/evaluation.md has the conventions):
 *
 *   stats.c        row math in double precision: log-softmax, NLL of a
 *                  target, argmax, KL(base || this) of two log-prob rows,
 *                  and an accumulator (eval_stats) of NLL / KLD / top-1.
 *   logits_file.c  the binary file of saved log-probabilities (--save-logits,
 *                  --kld-base): writer, and a reader that treats the file as
 *                  untrusted input (every field checked, exact size, rows
 *                  checked as they are read).
 *   ppl.c          window plans (which tokens each forward pass sees and
 *                  which positions are scored) and the perplexity loop over
 *                  a kite_ctx through the public API only.
 *   mc.c, json.c   multiple-choice tasks: a strict little JSON-lines reader
 *                  and the scoring of each ending by the sum of its token
 *                  log-probabilities given the context.
 *
 *   Scoring convention (also in `kite ppl --help`): a window is BOS (when the
 *   model has one) followed by up to n_ctx-1 text tokens; the text is cut
 *   into consecutive, non-overlapping windows, so every text token is in
 *   exactly one window.  By default every token after the first of a window
 *   is scored (targets at window index 1..len-1), which is the convention of
 *   shared/golden/stories260K-ppl.json and of llama2.c-style evaluation.
 *   EVAL_PLAN_HALF scores only the second half (targets n_ctx/2+1..n_ctx-1)
 *   of full windows, like llama.cpp's perplexity tool.
 *
 * ERRORS
 *   Fallible functions return a kite_status and set kite_last_error() to one
 *   line naming the file / field / item at fault; outputs are unchanged on
 *   error unless stated.
 *
 * THREAD SAFETY
 *   No global state.  Plans, stats, readers, writers and tasks belong to one
 *   thread at a time; the row functions are pure.
 */
#ifndef KITE_EVAL_H
#define KITE_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite.h"

/* ---- row math (stats.c) ----------------------------------------------- */

/* log(sum_i exp(x[i])) in double, shifted by the maximum (n >= 1). */
double eval_logsumexp(const float *x, int32_t n);
/* out[i] = x[i] - logsumexp(x), computed in double, stored as float (out may
 * alias x).  Returns the logsumexp. */
double eval_log_softmax(const float *x, int32_t n, float *out /* OUT: [n] */);
/* -log softmax(x)[target] in double (0 <= target < n). */
double eval_nll(const float *logits, int32_t n, int32_t target);
/* Index of the largest value; ties go to the lowest index. */
int32_t eval_argmax(const float *x, int32_t n);
/* KL(base || this) = sum_i p_base[i] * (base_logp[i] - logp[i]) for two rows
 * of natural-log probabilities, in double.  Terms with p_base == 0 are 0. */
double eval_kld_row(const float *base_logp, const float *logp, int32_t n);

/* Running totals of a perplexity run. */
typedef struct eval_stats {
    int64_t n;            /* scored tokens */
    double nll_sum;       /* sum of -log p(target), nats */
    double nll_sq;        /* sum of squares of the per-token NLL (for the error) */
    int64_t n_kld;        /* tokens compared with a base (0: no base) */
    double kld_sum;       /* sum of KL(base || this), nats */
    double kld_sq;        /* sum of squares of the per-token KLD */
    int64_t top1_same;    /* tokens whose argmax equals the base's */
    double base_nll_sum;  /* sum of the base's -log p(target) */
} eval_stats;

/* Adds one scored token: nll of the target, and when base_logp is not NULL
 * its comparison with the base row (logp: this run's log-probs, n entries). */
void eval_stats_add(eval_stats *s, double nll, const float *logp, const float *base_logp, int32_t n,
                    int32_t target);

double eval_stats_mean_nll(const eval_stats *s); /* NaN if n == 0 */
double eval_stats_ppl(const eval_stats *s);      /* exp(mean NLL) */
/* Standard error of the ppl estimate: ppl * stderr(mean NLL) (delta method;
 * 0 if n < 2). */
double eval_stats_ppl_err(const eval_stats *s);
double eval_stats_kld_mean(const eval_stats *s); /* NaN if n_kld == 0 */
double eval_stats_kld_err(const eval_stats *s);  /* stderr of the mean; 0 if n_kld < 2 */
double eval_stats_top1(const eval_stats *s);     /* percent of agreeing argmax; NaN if n_kld == 0 */
double eval_stats_base_ppl(const eval_stats *s); /* exp(base mean NLL); NaN if n_kld == 0 */

/* ---- logits file (logits_file.c) -------------------------------------- */

/* Layout (all little-endian; see docs/quantization/evaluation.md):
 *   0  char[8]  magic "KITELOGP"
 *   8  u32      version (1)
 *  12  u32      n_vocab
 *  16  u32      n_ctx (window length the run used)
 *  20  u32      flags (EVAL_PLAN_*)
 *  24  u64      n_tokens (scored positions)
 *  32  i32      ids[n_tokens]: the target token of each scored position
 *      f32      logp[n_tokens][n_vocab]: natural-log probabilities
 * The file size must be exactly 32 + 4*n_tokens*(1 + n_vocab).
 *
 * The reader also takes the file llama.cpp's `llama-perplexity
 * --kl-divergence-base` writes and reads (EVAL_LOGITS_LLAMACPP), and the
 * writer can write one (llama.cpp build 4748's layout, little-endian):
 *   0  char[8]  "_logits_"
 *   8  u32      n_ctx;  12 i32 n_vocab;  16 i32 n_chunk
 *  20  i32      tokens[n_chunk * n_ctx]: the text tokens, chunk after chunk
 *               (the reader puts BOS over each chunk's first, as llama.cpp does)
 *      then per chunk, per scored position (n_ctx - 1 - n_ctx/2 of them, the
 *      second half of the chunk), nv = 2*((n_vocab + 1)/2) + 4 u16 words:
 *      f32 scale, f32 min_logp, then u16 q[n_vocab] (+ padding to even):
 *      logp[i] = min_logp + scale * q[i]; q = 0 means "at or below the floor"
 *      (16 nats below the maximum).  Such a file is scored with the plan flag
 *      EVAL_PLAN_LLAMACPP. */
#define EVAL_LOGITS_MAGIC "KITELOGP"
#define EVAL_LOGITS_VERSION 1u
#define EVAL_LOGITS_HEADER_BYTES 32u
#define EVAL_LOGITS_MAX_VOCAB (1u << 24) /* larger n_vocab is rejected as corrupt */

typedef struct eval_logits_header {
    uint32_t version;
    uint32_t n_vocab;
    uint32_t n_ctx;
    uint32_t flags;    /* EVAL_PLAN_* of the run that wrote it */
    uint64_t n_tokens; /* rows */
} eval_logits_header;

enum eval_logits_format {
    EVAL_LOGITS_KITE = 0,    /* "KITELOGP": float32 rows of every scored position */
    EVAL_LOGITS_LLAMACPP = 1 /* "_logits_": llama-perplexity's 16-bit rows */
};

typedef struct eval_logits_writer eval_logits_writer;
typedef struct eval_logits_reader eval_logits_reader;

/* Creates "<path>.tmp.<pid>" and writes the header and ids[h->n_tokens]
 * (each in [0, n_vocab)).  Returns KITE_OK, KITE_E_ARG or KITE_E_IO. */
int eval_logits_write_open(const char *path, const eval_logits_header *h, const kite_token *ids,
                           eval_logits_writer **out /* OUT */);
/* The llama.cpp layout: tokens[n_chunk * n_ctx] are the text tokens the
 * chunks were cut from (as in the plan, but with each chunk's first text token
 * where the plan has BOS), h->n_tokens must be n_chunk * (n_ctx - 1 - n_ctx/2)
 * and h->flags must hold EVAL_PLAN_LLAMACPP.  Rows are encoded as
 * llama-perplexity encodes them (16 bits per entry, a 16-nat range). */
int eval_logits_write_open_llamacpp(const char *path, const eval_logits_header *h, const kite_token *tokens,
                                    int32_t n_chunk, eval_logits_writer **out /* OUT */);
/* Appends one row of n_vocab log-probs.  KITE_E_STATE past n_tokens rows. */
int eval_logits_write_row(eval_logits_writer *w, const float *logp);
/* Checks that n_tokens rows were written, flushes and renames the file over
 * path.  Frees w in every case; on failure nothing is left at path. */
int eval_logits_write_close(eval_logits_writer *w);
/* Drops a writer and its temporary file (NULL is a no-op). */
void eval_logits_write_abort(eval_logits_writer *w);

/* Opens and validates path: magic, version, n_vocab in [1, 2^24], n_ctx >= 1,
 * known flags, n_tokens >= 1, exact file size, every id in [0, n_vocab).
 * Returns KITE_OK, KITE_E_IO (cannot open/read) or KITE_E_FORMAT. */
int eval_logits_read_open(const char *path, eval_logits_reader **out /* OUT */);
const eval_logits_header *eval_logits_read_header(const eval_logits_reader *r);
int eval_logits_read_format(const eval_logits_reader *r); /* enum eval_logits_format */
/* llama.cpp files: the text tokens of the chunks ([*n_chunk * n_ctx]); NULL
 * (and *n_chunk 0) for kite files. */
const kite_token *eval_logits_read_chunks(const eval_logits_reader *r, int32_t *n_chunk /* OUT */);
const kite_token *eval_logits_read_ids(const eval_logits_reader *r); /* [n_tokens] */
/* Reads the next row into out[n_vocab]; KITE_E_FORMAT if a value is NaN or
 * above 1e-3 (not a log-probability), KITE_E_IO on a short read,
 * KITE_E_STATE past the last row.  A llama.cpp row is decoded to
 * min_logp + scale*q; entries at or below -16 nats other than the row's
 * target become -inf, so that the KLD leaves them out as llama-perplexity
 * does (their probability is under 1.2e-7 each). */
int eval_logits_read_row(eval_logits_reader *r, float *out /* OUT: [n_vocab] */);
/* Checks that the file describes the same run: n_vocab, n_ctx, flags and the
 * n target ids.  KITE_E_FORMAT with a message naming the first difference.
 * For a llama.cpp file, whose header records no flags, only the
 * EVAL_PLAN_LLAMACPP bit of flags is compared. */
int eval_logits_read_match(const eval_logits_reader *r, uint32_t n_vocab, uint32_t n_ctx, uint32_t flags,
                           const kite_token *ids, uint64_t n);
void eval_logits_read_close(eval_logits_reader *r); /* NULL is a no-op */

/* ---- perplexity (ppl.c) ------------------------------------------------ */

enum eval_plan_flags {
    EVAL_PLAN_BOS = 1u,  /* windows start with BOS */
    EVAL_PLAN_HALF = 2u, /* score only the second half of full windows (llama.cpp) */
    EVAL_PLAN_DOCS = 4u, /* one window per document, truncated to n_ctx (golden protocol) */
    /* llama-perplexity's windows: n_ctx consecutive text tokens, BOS (with
     * EVAL_PLAN_BOS) written over the first; the second half is scored
     * (targets n_ctx/2 + 1 .. n_ctx - 1); partial windows are skipped.  Not
     * combinable with HALF or DOCS. */
    EVAL_PLAN_LLAMACPP = 8u
};
#define EVAL_PLAN_KNOWN_FLAGS 15u

/* Which tokens each forward pass sees and which of them are scored. */
typedef struct eval_plan {
    int32_t n_ctx;        /* window length in tokens, BOS included */
    uint32_t flags;       /* EVAL_PLAN_* */
    kite_token bos;       /* BOS id when EVAL_PLAN_BOS */
    int32_t n_windows;
    int64_t *win_off;     /* [n_windows + 1] offsets of each window in tokens[] */
    int32_t *first;       /* [n_windows] window index of the first scored target (>= 1) */
    kite_token *tokens;   /* [win_off[n_windows]] the windows, concatenated */
    int64_t n_scored;     /* targets over all windows */
    int64_t n_text;       /* text tokens given to eval_plan_add */
    int64_t n_unscored;   /* text tokens never scored (first of a BOS-less window, the first
                             half in HALF mode, a partial last window in HALF mode, or cut by
                             DOCS truncation) */
    int64_t n_truncated;  /* of which: text tokens cut off by DOCS truncation (never evaluated) */
    int64_t cap_tok;      /* capacity of tokens[] */
    int32_t cap_win;      /* capacity of the window arrays */
} eval_plan;

/* Starts an empty plan.  n_ctx >= 2 (>= 3 with BOS); flags EVAL_PLAN_*;
 * bos is used when flags has EVAL_PLAN_BOS.  KITE_E_ARG otherwise. */
int eval_plan_init(eval_plan *p, int32_t n_ctx, uint32_t flags, kite_token bos);
/* Appends the windows of text[0..n) (text tokens, no BOS): consecutive
 * windows of n_ctx - (BOS ? 1 : 0) text tokens, or with EVAL_PLAN_DOCS one
 * window holding the first of them (the rest is counted in n_truncated),
 * or with EVAL_PLAN_LLAMACPP windows of n_ctx text tokens.
 * Returns KITE_OK or KITE_E_NOMEM (plan unchanged). */
int eval_plan_add(eval_plan *p, const kite_token *text, int64_t n);
/* Writes the n_scored target ids in scoring order to out. */
void eval_plan_targets(const eval_plan *p, kite_token *out /* OUT: [n_scored] */);
void eval_plan_free(eval_plan *p);

/* Called after each window with the running totals (for progress lines). */
typedef void (*eval_window_fn)(void *user, int32_t window, int32_t n_windows, const eval_stats *s);

typedef struct eval_ppl_opts {
    int32_t n_vocab;            /* logits row length (kite_model_info.n_vocab) */
    int32_t n_batch;            /* tokens per kite_ctx_eval call; <= 0: a whole window */
    eval_logits_writer *save;   /* receives each scored row's log-probs, or NULL */
    eval_logits_reader *base;   /* rows to compare with (validated by the caller with
                                   eval_logits_read_match), or NULL */
    eval_window_fn on_window;   /* or NULL */
    void *user;
} eval_ppl_opts;

/* Runs the plan on ctx (whose n_ctx must be >= the plan's): for each window,
 * truncates the cache to 0 and evaluates the window with all logits, then
 * scores its targets into *s (which is zeroed first).  Uses only the public
 * API.  Returns KITE_OK, KITE_E_ARG, KITE_E_NOMEM, the kite_ctx_eval status,
 * or the logits reader's / writer's status. */
int eval_ppl_run(kite_ctx *ctx, const eval_plan *p, const eval_ppl_opts *o, eval_stats *s /* OUT */);

/* Tokenizes text[0..len) (no BOS) into a malloc'd array *out of *n ids.
 * Returns KITE_OK or the kite_tokenize status / KITE_E_NOMEM. */
int eval_tokenize(const kite_model *m, const char *text, size_t len, kite_token **out /* OUT */,
                  int64_t *n /* OUT */);

/* ---- multiple-choice tasks (json.c, mc.c) ------------------------------ */

typedef struct eval_mc_item {
    char *context;        /* NUL-terminated UTF-8 (JSON escapes decoded) */
    char **endings;       /* [n_endings] NUL-terminated */
    size_t *ending_len;   /* [n_endings] bytes (an ending may hold \u0000) */
    size_t context_len;   /* bytes */
    int32_t n_endings;    /* >= 2 */
    int32_t label;        /* index of the right ending */
} eval_mc_item;

typedef struct eval_mc_task {
    eval_mc_item *items;
    int32_t n_items;
} eval_mc_task;

#define EVAL_MC_MAX_ENDINGS 64

/* Parses a JSON-lines task from text[0..len) (name for messages): one object
 * per non-blank line with "context" (string), "endings" (array of 2..64
 * strings) and "label" (integer index into endings); other keys are ignored.
 * Strict JSON (RFC 8259; nesting depth <= 32).  KITE_E_FORMAT names the line:
 * "task.jsonl:3: label 4 out of range (4 endings)".  KITE_E_FORMAT also for a
 * file without items. */
int eval_mc_parse(const char *text, size_t len, const char *name, eval_mc_task *out /* OUT */);
/* Reads path and parses it (KITE_E_IO if it cannot be read). */
int eval_mc_load(const char *path, eval_mc_task *out /* OUT */);
void eval_mc_free(eval_mc_task *t);

/* Scores of one item. */
typedef struct eval_mc_scores {
    double *ll;          /* [n_endings] sum of log p of the ending's tokens given the context */
    int32_t *n_tokens;   /* [n_endings] tokens scored for each ending */
    int32_t *n_chars;    /* [n_endings] Unicode characters of each ending (acc_norm divisor) */
    int32_t pred;        /* argmax of ll (ties: lowest index) */
    int32_t pred_norm;   /* argmax of ll / n_chars */
} eval_mc_scores;

/* Scores item it on ctx (model m for tokenization): each ending e is the
 * continuation of BOS + tokens(context + e) after the longest common prefix
 * with BOS + tokens(context) (at least one token is scored); its log-
 * likelihood is the sum of the log-probs of those tokens.  sc's arrays must
 * hold it->n_endings entries.  KITE_E_RANGE if a sequence is longer than the
 * context window. */
int eval_mc_score(kite_ctx *ctx, const kite_model *m, const eval_mc_item *it, eval_mc_scores *sc /* OUT */);

#endif
