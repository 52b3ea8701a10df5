/*
 * kernels.h - compute kernels of the forward pass.
 *
 * DESIGN
 *   kern_matmul takes weights of any dtype that has a to_float in the traits
 *   table: types with SIMD/integer kernels go through the run-time selected
 *   kernel table (dispatch.h), the others are converted to float row by row.
 *   A weight byte is read from memory once per call whatever the batch size.
 *   Multi-threaded kernels split their output statically over the pool's
 *   threads (ith/nth); they allocate nothing.
 *
 * SHAPES
 *   Activations are row-major [n_tok][width] float arrays.
 */
#ifndef KITE_KERNELS_H
#define KITE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "tensor/weight.h"

/* y[t*ldy + r] = sum_c W[r][c] * x[t*W.ne[0] + c], for rows r < W.ne[1] and
 * t < n_tok, through the kernel table (dispatch.h; see matmul.c).  For
 * quantized weights with an integer kernel, x is first quantized to the
 * type's activation format (q8_0 / q8_K), so the result carries that
 * rounding.  scratch: at least kern_matmul_scratch_bytes(tp_n_threads(tp),
 * n_tok, W.ne[0]) bytes, 64-byte aligned (activation rows and per-thread row
 * buffers); nothing is allocated.  Results do not depend on the thread count
 * nor on n_tok (each y is one row-by-row dot product). */
void kern_matmul(threadpool *tp, const weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                 void *scratch);

/* Several matmuls on the same input in one pool round trip: y_i = W_i x for
 * every item (the q/k/v projections; gate and up).  The activations are
 * converted once, and each thread computes its share of every item's rows,
 * so small matrices no longer run alone on one thread while the others wait.
 * epilogue (may be NULL) then runs on each participating thread for the row
 * range [r0, r1) of item 0 that the thread computed in every item; it
 * requires all items to have the same row count (gate and up: SwiGLU on the
 * thread's own rows, no second barrier).  Items that cannot share the
 * activation rows (different widths or activation formats) fall back to
 * one kern_matmul each, and the epilogue then runs once over all rows.
 * Results are bit-identical to separate kern_matmul calls.  Same scratch
 * contract as kern_matmul, for the widest item. */
#define KERN_FUSED_MAX 4
typedef struct kern_mm_item {
    const weight *w;
    float *y;      /* [n_tok][ldy] output */
    int64_t ldy;
} kern_mm_item;
typedef void (*kern_rows_fn)(void *arg, int64_t r0, int64_t r1);
void kern_matmul_fused(threadpool *tp, const kern_mm_item *items, int n_items, const float *x, int64_t n_tok,
                       void *scratch, kern_rows_fn epilogue, void *epilogue_arg);

/* Scratch bytes kern_matmul needs for batches of up to n_tok_max tokens and
 * weights of up to max_cols columns, on n_threads threads. */
size_t kern_matmul_scratch_bytes(int n_threads, int64_t n_tok_max, int64_t max_cols);

/* dst[0..ne0) = row `row` of w as floats. */
void kern_get_row(const weight *w, int64_t row, float *dst);

/* Dot product in float with a fixed, size-independent summation order. */
float kern_dot_f32(const float *a, const float *b, int64_t n);

/* out = x / sqrt(mean(x^2) + eps) * gain, over n elements (out may be x). */
void kern_rmsnorm(float *out, const float *x, const float *gain, int64_t n, float eps);

/* LayerNorm (GPT-2): out = (x - mean) / sqrt(var + eps) * gain + bias over n
 * elements, var the biased (1/n) variance; bias may be NULL; out may be x. */
void kern_layernorm(float *out, const float *x, const float *gain, const float *bias, int64_t n, float eps);

/* In-place GELU, tanh approximation (ggml's, GPT-2's "gelu_new"):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float. */
void kern_gelu(float *x, int64_t n);

/* x[i] += b[i], i < n (bias add). */
void kern_add(float *x, const float *b, int64_t n);

/* In-place softmax of x[0..n). */
void kern_softmax(float *x, int64_t n);

/* gate[i] = silu(gate[i]) * up[i], silu(v) = v / (1 + exp(-v)). */
void kern_swiglu(float *gate, const float *up, int64_t n);

/* Rotary embedding of one head vector x[0..head_dim) in place, using the
 * (cos, sin) pairs of its position: cs[2*i], cs[2*i+1] for pair i < n_rot/2.
 * rope_type 0 (NORM) rotates (x[2i], x[2i+1]); 2 (NEOX) rotates (x[i], x[i + n_rot/2]). */
void kern_rope(float *x, const float *cs, int32_t n_rot, int rope_type);

/* kern_rope on n_heads head vectors of head_dim floats, one after the other
 * from x (the q or k row of a token): one call per row instead of per head,
 * same arithmetic. */
void kern_rope_heads(float *x, int32_t n_heads, int32_t head_dim, const float *cs, int32_t n_rot, int rope_type);

/* Attention (attention.c, attention_flash.c, attention_splitkv.c; the math
 * is in docs/attention.md).  Paths:
 *   ATTN_PATH_REF      per (token, head): scores in a row buffer, softmax,
 *                      weighted sum of V; the specification.
 *   ATTN_PATH_FLASH    prefill: fused tiled FlashAttention, per (query tile,
 *                      head) over KV tiles with an online softmax; no score
 *                      matrix beyond one q_tile x kv_tile tile per thread.
 *   ATTN_PATH_SPLITKV  decode: KV split into fixed kv_chunk-position chunks
 *                      (FlashDecoding) with FlashDecoding++'s unified
 *                      maximum phi; a chunk whose maximum score leaves
 *                      [phi - ATTN_PHI_RANGE, phi + ATTN_PHI_RANGE] (or whose
 *                      sums are not finite) is computed against its own
 *                      maximum instead and rescaled in the combine.
 * ATTN_PATH_AUTO takes SPLITKV for n_tok <= ATTN_SPLITKV_MAX_TOK, else FLASH.
 * Every path's result is independent of the thread count: chunk and tile
 * boundaries are fixed and partials are combined in chunk order. */
enum { ATTN_PATH_AUTO = 0, ATTN_PATH_REF = 1, ATTN_PATH_FLASH = 2, ATTN_PATH_SPLITKV = 3 };

#define ATTN_Q_TILE 32          /* default query rows per FlashAttention tile */
#define ATTN_KV_TILE 64         /* default KV positions per FlashAttention tile */
#define ATTN_KV_CHUNK 256       /* default KV positions per split-KV chunk */
#define ATTN_SPLITKV_MAX_TOK 4  /* AUTO uses split-KV up to this many queries */
#define ATTN_PHI_DEFAULT 0.0f   /* default unified maximum (scaled-score units) */
#define ATTN_PHI_RANGE 40.0f    /* |chunk max - phi| beyond this: that chunk takes the exact method */

/* attn_args.phi_mode */
enum {
    ATTN_PHI_UNIFIED = 0, /* FlashDecoding++: chunks against phi, combined without rescaling (default) */
    ATTN_PHI_EXACT = 1    /* FlashDecoding: every chunk against its own maximum, rescaled in the combine
                             (the exact method; a reference for benchmarks and tests) */
};

/* Optional statistics of the split-KV path, accumulated over calls (zero it
 * first).  row_max_lo/hi bound the rows' maximum scaled scores: what a
 * calibration run needs to pick phi for a model. */
typedef struct attn_stats {
    int64_t n_rows;       /* (token, head) rows through the split-KV path */
    int64_t n_fallback;   /* of those, rows with at least one chunk in n_recompute (combined with rescaling) */
    int64_t n_chunks;     /* (token, head, chunk) partials computed */
    int64_t n_recompute;  /* of those, chunks that left the unified-max path: maximum outside the phi window,
                             or sums not finite (then really computed twice); always 0 with ATTN_PHI_EXACT */
    float row_max_lo;     /* min over rows of the row's max scaled score (set on the first row) */
    float row_max_hi;     /* max over rows of the row's max scaled score */
} attn_stats;

typedef struct attn_args {
    const float *q;       /* [n_tok][n_head * head_dim] */
    const void *k_cache;  /* [n_ctx][n_head_kv][head_dim] values of type kv_type (for f32: floats); a
                             position's row is n_head_kv rows of head_dim values, each stored on its own
                             (for q8_0/q4_0: head_dim/32 blocks).  Position p is row p, or with a block
                             table row block_table[p / block_size] * block_size + p % block_size;
                             positions 0..pos0+n_tok-1 valid */
    const void *v_cache;  /* same layout and type */
    const int32_t *block_table; /* paged KV cache (serving engine), or NULL: row = position */
    int32_t block_size;   /* positions per block when block_table is set */
    float *out;           /* [n_tok][n_head * head_dim] */
    float *scratch;       /* kern_attention_scratch_floats(args, n_threads) floats */
    int32_t n_tok;
    int32_t pos0;         /* position of the first query */
    int32_t n_head;
    int32_t n_head_kv;    /* divides n_head; query head h reads kv head h / (n_head / n_head_kv) */
    int32_t head_dim;
    int32_t n_ctx;        /* KV cache positions (bounds pos0 + n_tok) */
    float scale;          /* usually 1/sqrt(head_dim) */
    /* optional; zero-initialised means the defaults */
    float phi;            /* split-KV unified maximum, scaled-score units; 0 = ATTN_PHI_DEFAULT */
    const float *phi_head; /* [n_head] per-head unified maxima (a calibration's), or NULL: phi for every head */
    int32_t phi_mode;     /* ATTN_PHI_UNIFIED (0) or ATTN_PHI_EXACT */
    attn_stats *stats;    /* split-KV statistics, or NULL */
    float *chunk_max;     /* OUT, or NULL: [n_tok][n_head][2] per (token, head) row the smallest and the
                             largest of its chunks' maximum scaled scores (split-KV only; the second is
                             the row's maximum): what `kite tune --attn-calib` collects */
    int32_t path;         /* ATTN_PATH_*; 0 = AUTO */
    int32_t q_tile;       /* FlashAttention tile sizes, 0 = ATTN_Q_TILE / ATTN_KV_TILE */
    int32_t kv_tile;
    int32_t kv_chunk;     /* split-KV chunk, 0 = ATTN_KV_CHUNK */
    int32_t window;       /* sliding window (Mistral): the query at position p attends to positions
                             max(0, p - window + 1) .. p; 0 = unlimited.  window >= p + 1 is the same
                             as 0, bit for bit (the same arithmetic runs) */
    float softcap;        /* attention logit soft cap (Gemma 2): every scaled score s becomes
                             softcap * tanh(s / softcap) before the softmax, on every path; 0 = none
                             (nothing runs: the arithmetic is that without the field) */
    int32_t kv_type;      /* element type of k_cache/v_cache: KITE_DTYPE_F32 (0, default), _F16, _Q8_0 or
                             _Q4_0 (head_dim a multiple of 32); rows are dequantized on the fly, per kv-head
                             row (docs/attention.md, "Quantized KV cache").  f32 runs the same arithmetic
                             as before the field existed, bit for bit */
} attn_args;

/* Causal scaled dot-product attention: query t attends to positions 0..pos0+t
 * (with a->window > 0 only the last `window` of them).
 * Runs on as many pool threads as the work justifies (tp_threads_for). */
void kern_attention(threadpool *tp, const attn_args *a);

/* The lowest cache position any path of kern_attention reads (though may not
 * use) for a query at position pos with a's window, head_dim and tile sizes:
 * the window start, rounded down to a FlashAttention KV tile (its tiles
 * start at multiples of kv_tile).  The serving engine frees the blocks
 * below it for every later pass of a sequence (docs/engine.md). */
int32_t kern_attention_first_read(const attn_args *a, int32_t pos);

/* Scratch floats kern_attention needs on n_threads threads for calls with up
 * to a->n_tok queries, a->n_ctx positions and a's n_head, head_dim and tile
 * sizes (pointers and the other fields are ignored). */
size_t kern_attention_scratch_floats(const attn_args *a, int n_threads);

#endif
