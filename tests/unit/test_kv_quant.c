/*
 * test_kv_quant.c - the quantized KV cache (attn_args.kv_type,
 * kite_ctx_params.kv_type; docs/attention.md, "Quantized KV cache").
 *
 * The kernels' branch-free half-to-float against fp16_to_fp32 on every input.
 * Kernel level, for f16, q8_0 and q4_0 caches on the reference, FlashAttention
 * and split-KV paths (MHA and GQA, head_dim 32/64/96, contiguous, paged and
 * through sliding windows):
 *   - exactness of the on-the-fly dequantization: the output equals, bit for
 *     bit, the same path run on an f32 cache holding the dequantized rows;
 *   - error against the f32 cache of the original values, two budgets:
 *       analytic: with dv = max |v - v'| and ds = max over (query, position)
 *       of scale * sum_d |q_d (k_d - k'_d)| (both measured on the data),
 *       |out - out'| <= (exp(2 ds) - 1) max|v'| + dv + 1e-5 max|v|
 *       (the softmax weights move by a factor in [e^-2ds, e^2ds], so their
 *       L1 change is <= e^2ds - 1; the last term is float rounding);
 *     and a stated empirical budget relative to max|v| on uniform random
 *       data: f16 1e-3, q8_0 1e-2, q4_0 1.5e-1 (measured worst: 2.4e-4,
 *       4.2e-3, 1.2e-1; printed by the test);
 *   - bit-identical outputs on 1, 2 and 3 threads (split-KV runs one job per
 *     (row, kv head, chunk) on quantized caches: GQA shapes check that its
 *     bits equal the per-head jobs of the f32 path);
 *   - a paged cache (shuffled blocks of 3 and 16 positions) gives the same
 *     bits as the contiguous one.
 * Model level, on a synthetic llama with head_dim 32 (the bundled
 * stories260K has head_dim 8, too small for blocks of 32): logits of a
 * prefill against the f32 cache (max error, top-1 agreement), greedy
 * continuations, a paged pool (llama_forward_batch with a shuffled block
 * table) bit-identical to the contiguous context, ctx_kv_copy_rows; and
 * kite_ctx_new refusing q8_0/q4_0 for head_dim 8 (stories260K) with one line,
 * while f16 works there.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/attention_impl.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

static const int kv_types[] = {KITE_DTYPE_F16, KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0};
/* relative to max|v|, per kv_types entry.  Per element, f16 rounds to 2^-11
 * relative, q8_0 to amax/254 (+ the f16 scale's rounding), q4_0 up to amax/8
 * (its -8..7 range clamps the extreme of the sign opposite to the block's
 * signed maximum); a query that sees one position returns that V row, so
 * the output error reaches those figures.  The budgets leave ~2x margin. */
static const double empirical_budget[] = {1e-3, 1e-2, 1.5e-1};
static double worst_rel[3];                                   /* measured err / max|v| per type */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct kcase {
    int n_tok, pos0, n_head, n_head_kv, head_dim, n_ctx, path, window;
} kcase;

/* One case's data: f32 q/k/v, the caches quantized to type t (qk, qv), their
 * dequantized f32 copies (dk, dv). */
typedef struct kbufs {
    float *q, *k, *v, *dk, *dv;
    uint8_t *qk, *qv;
    size_t row_bytes; /* bytes of one position's row in type t */
} kbufs;

static void make_bufs(const kcase *c, int t, kbufs *b) {
    const size_t KD = (size_t)c->n_head_kv * c->head_dim, kvn = (size_t)c->n_ctx * KD;
    const size_t qn = (size_t)c->n_tok * c->n_head * c->head_dim;
    const dtype_traits *tr = dtype_get((uint32_t)t);
    b->row_bytes = dtype_row_size((uint32_t)t, (int64_t)KD);
    b->q = malloc(qn * sizeof(float));
    b->k = malloc(kvn * sizeof(float));
    b->v = malloc(kvn * sizeof(float));
    b->dk = malloc(kvn * sizeof(float));
    b->dv = malloc(kvn * sizeof(float));
    b->qk = malloc((size_t)c->n_ctx * b->row_bytes);
    b->qv = malloc((size_t)c->n_ctx * b->row_bytes);
    for (size_t i = 0; i < qn; i++) b->q[i] = frand();
    for (size_t i = 0; i < kvn; i++) b->k[i] = frand();
    for (size_t i = 0; i < kvn; i++) b->v[i] = frand();
    for (int p = 0; p < c->n_ctx; p++) { /* one position's row: each kv head's head_dim values on their own */
        tr->from_float(b->k + (size_t)p * KD, b->qk + (size_t)p * b->row_bytes, (int64_t)KD);
        tr->from_float(b->v + (size_t)p * KD, b->qv + (size_t)p * b->row_bytes, (int64_t)KD);
        tr->to_float(b->qk + (size_t)p * b->row_bytes, b->dk + (size_t)p * KD, (int64_t)KD);
        tr->to_float(b->qv + (size_t)p * b->row_bytes, b->dv + (size_t)p * KD, (int64_t)KD);
    }
}

static void free_bufs(kbufs *b) {
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->dk);
    free(b->dv);
    free(b->qk);
    free(b->qv);
}

/* Runs attention of case c over caches k/v of type t; returns the output (caller frees). */
static float *attend(threadpool *tp, const kcase *c, const float *q, const void *k, const void *v, int t,
                     const int32_t *table, int bs) {
    const size_t qn = (size_t)c->n_tok * c->n_head * c->head_dim;
    float *out = malloc(qn * sizeof(float));
    attn_args a = {.q = q, .k_cache = k, .v_cache = v, .block_table = table, .block_size = bs, .out = out,
                   .n_tok = c->n_tok, .pos0 = c->pos0, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
                   .head_dim = c->head_dim, .n_ctx = c->n_ctx, .scale = 1.0f / sqrtf((float)c->head_dim),
                   .path = c->path, .q_tile = 8, .kv_tile = 16, .kv_chunk = 24, .window = c->window, .kv_type = t};
    a.scratch = malloc(sizeof(float) * kern_attention_scratch_floats(&a, tp_n_threads(tp)));
    kern_attention(tp, &a);
    free(a.scratch);
    return out;
}

/* The analytic budget of the header for case c (measured dv, ds). */
static double analytic_budget(const kcase *c, const kbufs *b, double *vmax_out) {
    const int hd = c->head_dim, KD = c->n_head_kv * hd, QD = c->n_head * hd, group = c->n_head / c->n_head_kv;
    const double scale = 1.0 / sqrt((double)hd);
    double dv = 0.0, vmax = 0.0, vqmax = 0.0, ds = 0.0;
    for (size_t i = 0; i < (size_t)c->n_ctx * KD; i++) {
        dv = fmax(dv, fabs((double)b->v[i] - b->dv[i]));
        vmax = fmax(vmax, fabs((double)b->v[i]));
        vqmax = fmax(vqmax, fabs((double)b->dv[i]));
    }
    for (int t = 0; t < c->n_tok; t++)
        for (int h = 0; h < c->n_head; h++)
            for (int p = 0; p <= c->pos0 + t; p++) {
                const float *q = b->q + (size_t)t * QD + (size_t)h * hd;
                const size_t o = (size_t)p * KD + (size_t)(h / group) * hd;
                double s = 0.0;
                for (int d = 0; d < hd; d++) s += fabs((double)q[d] * ((double)b->k[o + d] - b->dk[o + d]));
                ds = fmax(ds, s * scale);
            }
    *vmax_out = vmax;
    return (exp(2.0 * ds) - 1.0) * vqmax + dv + 1e-5 * vmax;
}

static int bits_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* The kernels' inline half-to-float equals fp16_to_fp32 on all 65536 inputs
 * (bits compared; NaNs keep their payload). */
TEST(test_half_to_float_exhaustive) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = fp16_to_fp32_inline((uint16_t)h), b = fp16_to_fp32((uint16_t)h);
        bad += memcmp(&a, &b, sizeof a) != 0;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Every path x type x shape: exact dequantization, both error budgets,
 * thread-count independence. */
TEST(test_kernel_paths) {
    static const kcase shapes[] = {
        /* n_tok pos0 heads kv  hd  n_ctx path window */
        {1, 0, 4, 4, 32, 64, 0, 0},    {1, 63, 4, 2, 64, 64, 0, 0},   {3, 40, 4, 1, 32, 64, 0, 0},
        {1, 70, 2, 2, 96, 80, 0, 9},   {20, 0, 4, 2, 32, 40, 0, 0},   {17, 30, 2, 1, 64, 64, 0, 0},
        {12, 40, 4, 2, 32, 64, 0, 13},
    };
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    threadpool *pools[3] = {tp_new(1), tp_new(2), tp_new(3)};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ti = 0; ti < 3; ti++)
            for (size_t pi = 0; pi < 3; pi++) {
                kcase c = shapes[si];
                c.path = paths[pi];
                const int t = kv_types[ti];
                kbufs b;
                make_bufs(&c, t, &b);
                const size_t n = (size_t)c.n_tok * c.n_head * c.head_dim;
                float *exact = attend(pools[1], &c, b.q, b.k, b.v, KITE_DTYPE_F32, NULL, 0);
                float *deq = attend(pools[1], &c, b.q, b.dk, b.dv, KITE_DTYPE_F32, NULL, 0);
                float *got[3];
                for (int th = 0; th < 3; th++) got[th] = attend(pools[th], &c, b.q, b.qk, b.qv, t, NULL, 0);
                CHECK_MSG(bits_equal(got[1], deq, n), "%s path %d shape %zu: differs from f32 on the dequantized rows",
                          dtype_name((uint32_t)t), c.path, si);
                CHECK_MSG(bits_equal(got[0], got[1], n) && bits_equal(got[2], got[1], n),
                          "%s path %d shape %zu: thread count changes the bits", dtype_name((uint32_t)t), c.path, si);
                double vmax, err = 0.0;
                const double budget = analytic_budget(&c, &b, &vmax);
                for (size_t i = 0; i < n; i++) err = fmax(err, fabs((double)got[1][i] - exact[i]));
                worst_rel[ti] = fmax(worst_rel[ti], err / vmax);
                CHECK_MSG(err <= budget, "%s path %d shape %zu: error %.3g > analytic budget %.3g",
                          dtype_name((uint32_t)t), c.path, si, err, budget);
                CHECK_MSG(err <= empirical_budget[ti] * vmax, "%s path %d shape %zu: error %.3g > %.0e * max|v| %.3g",
                          dtype_name((uint32_t)t), c.path, si, err, empirical_budget[ti], vmax);
                for (int th = 0; th < 3; th++) free(got[th]);
                free(exact);
                free(deq);
                free_bufs(&b);
            }
    for (int i = 0; i < 3; i++) tp_free(pools[i]);
    printf("    worst |out - out_f32| / max|v|: f16 %.2e (budget 1e-3), q8_0 %.2e (1e-2), q4_0 %.2e (1.5e-1)\n",
           worst_rel[0], worst_rel[1], worst_rel[2]);
}

/* Quantized rows scattered through a shuffled block table give the bits of
 * the contiguous quantized cache, on every path, with and without a window. */
TEST(test_paged_equals_contiguous) {
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    static const int block_sizes[] = {3, 16};
    static const int tok_pos[][2] = {{1, 47}, {3, 20}, {17, 5}};
    threadpool *tp = tp_new(2);
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t pi = 0; pi < 3; pi++)
            for (size_t bi = 0; bi < 2; bi++)
                for (size_t k = 0; k < 3; k++) {
                    const int bs = block_sizes[bi], t = kv_types[ti];
                    kcase c = {tok_pos[k][0], tok_pos[k][1], 4, 2, 32, 96, paths[pi], k == 1 ? 7 : 0};
                    kbufs b;
                    make_bufs(&c, t, &b);
                    const int n_blocks = c.n_ctx / bs;
                    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
                    for (int i = 0; i < n_blocks; i++) table[i] = i;
                    for (int i = n_blocks - 1; i > 0; i--) {
                        const int j = (int)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
                        const int32_t tmp = table[i];
                        table[i] = table[j];
                        table[j] = tmp;
                    }
                    uint8_t *pk = malloc((size_t)c.n_ctx * b.row_bytes), *pv = malloc((size_t)c.n_ctx * b.row_bytes);
                    for (int p = 0; p < c.n_ctx; p++) {
                        const size_t row = (size_t)table[p / bs] * bs + (size_t)(p % bs);
                        memcpy(pk + row * b.row_bytes, b.qk + (size_t)p * b.row_bytes, b.row_bytes);
                        memcpy(pv + row * b.row_bytes, b.qv + (size_t)p * b.row_bytes, b.row_bytes);
                    }
                    float *plain = attend(tp, &c, b.q, b.qk, b.qv, t, NULL, 0);
                    float *paged = attend(tp, &c, b.q, pk, pv, t, table, bs);
                    CHECK_MSG(bits_equal(plain, paged, (size_t)c.n_tok * c.n_head * c.head_dim),
                              "%s path %d block %d case %zu: paged differs", dtype_name((uint32_t)t), c.path, bs, k);
                    free(plain);
                    free(paged);
                    free(pk);
                    free(pv);
                    free(table);
                    free_bufs(&b);
                }
    tp_free(tp);
}

/* ---- model level ----------------------------------------------------------- */

#define N_PROMPT 48
#define N_GEN 24

static char tmpdir[] = "/tmp/kite-test-kvq-XXXXXX";
static char model_file[256];

/* tiny-llama3 with 2 query heads and 1 kv head of head_dim 32 (GQA), F32 weights. */
static kite_model *load_hd32(void) {
    if (access(model_file, R_OK) != 0) {
        const synth_shape *s = synth_shape_find("tiny-llama3");
        CHECK(s != NULL);
        if (!s) return NULL;
        synth_params p = {.shape = *s, .type = KITE_DTYPE_F32, .seed = 7, .n_threads = 1};
        p.shape.n_head = 2;
        p.shape.n_head_kv = 1;
        int rc = synth_write(&p, model_file);
        CHECK_MSG(rc == KITE_OK, "synth: %s", kite_last_error());
        if (rc) return NULL;
    }
    kite_model *m = NULL;
    int rc = kite_model_load(model_file, NULL, &m);
    CHECK_MSG(rc == KITE_OK, "load: %s", kite_last_error());
    return rc == KITE_OK ? m : NULL;
}

static void prompt_tokens(kite_token *ids, int n, int32_t n_vocab) {
    uint64_t s = 12345;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (kite_token)(3 + (s >> 33) % (uint64_t)(n_vocab - 3));
    }
}

/* Prefill logits (all rows) and a greedy continuation of N_GEN tokens with a
 * KV cache of type t on n_threads threads. */
static int run_model(kite_model *m, int t, int n_threads, float *logits, kite_token *gen) {
    const int32_t V = m->hp.n_vocab;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = N_PROMPT + N_GEN + 1;
    cp.n_threads = n_threads;
    cp.kv_type = t;
    kite_ctx *ctx = NULL;
    int rc = kite_ctx_new(m, &cp, &ctx);
    CHECK_MSG(rc == KITE_OK, "ctx %s: %s", dtype_name((uint32_t)t), kite_last_error());
    if (rc) return rc;
    kite_token ids[N_PROMPT];
    prompt_tokens(ids, N_PROMPT, V);
    rc = kite_ctx_eval(ctx, ids, N_PROMPT, true);
    for (int i = 0; !rc && i < N_PROMPT; i++) memcpy(logits + (size_t)i * V, kite_ctx_logits(ctx, i), sizeof(float) * V);
    for (int g = 0; !rc && g < N_GEN; g++) {
        const float *l = kite_ctx_logits(ctx, -1);
        kite_token best = 0;
        for (int32_t j = 1; j < V; j++)
            if (l[j] > l[best]) best = j;
        gen[g] = best;
        rc = kite_ctx_eval(ctx, &best, 1, false);
    }
    kite_ctx_free(ctx);
    CHECK(rc == KITE_OK);
    return rc;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Whole model: logit error and top-1 agreement against the f32 cache; the
 * f32 cache through kite_ctx_params is the old behaviour (default params give
 * the same bits); results independent of the thread count. */
TEST(test_model_vs_f32) {
    kite_model *m = load_hd32();
    if (!m) return;
    const int32_t V = m->hp.n_vocab;
    CHECK_EQ_INT(m->hp.head_dim, 32);
    const size_t n = (size_t)N_PROMPT * V;
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *got1 = malloc(n * sizeof(float));
    kite_token gen_ref[N_GEN], gen[N_GEN], gen1[N_GEN];
    if (run_model(m, KITE_DTYPE_F32, 2, ref, gen_ref)) goto done;
    {   /* default params = f32 */
        kite_ctx_params dp = kite_ctx_default_params();
        CHECK_EQ_INT(dp.kv_type, KITE_KV_F32);
    }
    /* budgets on max |logit error| over the 48 x 512 logits (~N(0,1) here), top-1 agreement of the 48
     * prefill rows and the greedy prefix equal to f32's; measured (printed): f16 1.0e-3, 48/48, 24/24;
     * q8_0 2.7e-2, 47/48, 24/24; q4_0 3.9e-1, 43/48, 8/24 */
    static const double logit_tol[] = {4e-3, 6e-2, 8e-1};
    static const int min_top1[] = {N_PROMPT, N_PROMPT - 3, N_PROMPT * 3 / 4};
    static const int min_gen[] = {N_GEN, N_GEN / 2, 0};
    for (size_t ti = 0; ti < 3; ti++) {
        const int t = kv_types[ti];
        if (run_model(m, t, 2, got, gen) || run_model(m, t, 1, got1, gen1)) break;
        CHECK_MSG(bits_equal(got, got1, n) && memcmp(gen, gen1, sizeof gen) == 0,
                  "%s: 1 and 2 threads differ", dtype_name((uint32_t)t));
        double err = 0.0;
        int top1 = 0, same_gen = 0;
        for (size_t i = 0; i < n; i++) err = fmax(err, fabs((double)got[i] - ref[i]));
        for (int i = 0; i < N_PROMPT; i++) top1 += argmax(got + (size_t)i * V, V) == argmax(ref + (size_t)i * V, V);
        while (same_gen < N_GEN && gen[same_gen] == gen_ref[same_gen]) same_gen++;
        printf("    %-5s max |logit - f32| %.2e, top-1 agreement %d/%d, greedy: first %d/%d tokens equal\n",
               dtype_name((uint32_t)t), err, top1, N_PROMPT, same_gen, N_GEN);
        CHECK_MSG(err <= logit_tol[ti], "%s: logit error %.3g > %.1g", dtype_name((uint32_t)t), err, logit_tol[ti]);
        CHECK_MSG(top1 >= min_top1[ti], "%s: top-1 agreement %d < %d", dtype_name((uint32_t)t), top1, min_top1[ti]);
        CHECK_MSG(same_gen >= min_gen[ti], "%s: greedy prefix %d < %d", dtype_name((uint32_t)t), same_gen, min_gen[ti]);
    }
done:
    free(ref);
    free(got);
    free(got1);
    kite_model_free(m);
}

/* A paged q8_0 pool fed through llama_forward_batch with a shuffled block
 * table gives the contiguous q8_0 context's logits bit for bit; then
 * ctx_kv_copy_rows moves a block and the copy reads the same. */
TEST(test_model_paged_and_copy) {
    kite_model *m = load_hd32();
    if (!m) return;
    const int32_t V = m->hp.n_vocab, BS = 4, n_blocks = 16;
    kite_token ids[N_PROMPT];
    prompt_tokens(ids, N_PROMPT, V);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    kite_ctx *flat = NULL, *pool = NULL;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 2;
    cp.kv_type = KITE_KV_Q8_0;
    CHECK(kite_ctx_new(m, &cp, &flat) == KITE_OK);
    CHECK(ctx_new_sized_kv(m, n_blocks * BS, 32, BS, 2, KITE_DTYPE_Q8_0, &pool) == KITE_OK);
    if (!flat || !pool) goto done;
    CHECK(ctx_kv_row_bytes(pool) == (size_t)m->hp.n_head_kv * 34); /* one q8_0 block per kv head (hd 32) */
    CHECK(kite_ctx_eval(flat, ids, 20, false) == KITE_OK);
    memcpy(a, kite_ctx_logits(flat, -1), sizeof(float) * V);
    int32_t table[5] = {11, 2, 15, 7, 0}; /* 20 positions = 5 blocks */
    fwd_seq sq = {table, 0, 20, 1, ATTN_PATH_FLASH};
    llama_forward_batch(pool, ids, &sq, 1, b);
    CHECK_MSG(bits_equal(a, b, (size_t)V), "paged q8_0 prefill differs from contiguous");
    /* copy-on-write: blocks 15 and 7 (positions 8..15) to 3 and 9; decode one token through the new table */
    ctx_kv_copy_rows(pool, 3 * BS, 15 * BS, BS);
    ctx_kv_copy_rows(pool, 9 * BS, 7 * BS, BS);
    int32_t table2[6] = {11, 2, 3, 9, 0, 5};
    CHECK(kite_ctx_eval(flat, ids + 20, 1, false) == KITE_OK);
    memcpy(a, kite_ctx_logits(flat, -1), sizeof(float) * V);
    fwd_seq sq2 = {table2, 20, 1, 1, 0};
    llama_forward_batch(pool, ids + 20, &sq2, 1, b);
    CHECK_MSG(bits_equal(a, b, (size_t)V), "decode after ctx_kv_copy_rows differs");
done:
    kite_ctx_free(flat);
    kite_ctx_free(pool);
    free(a);
    free(b);
    kite_model_free(m);
}

/* head_dim 8 (stories260K): q8_0/q4_0 refused with a one-line message, f16 works. */
TEST(test_refuse_small_head_dim) {
    kite_model *m = NULL;
    if (kite_model_load("models/stories260K.gguf", NULL, &m) != KITE_OK) {
        CHECK_MSG(0, "load stories260K: %s", kite_last_error());
        return;
    }
    CHECK_EQ_INT(m->hp.head_dim, 8);
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    kite_ctx *ctx = NULL;
    static const int bad[] = {KITE_KV_Q8_0, KITE_KV_Q4_0};
    for (int i = 0; i < 2; i++) {
        cp.kv_type = bad[i];
        CHECK_EQ_INT(kite_ctx_new(m, &cp, &ctx), KITE_E_ARG);
        CHECK(ctx == NULL);
        CHECK_CONTAINS(kite_last_error(), "multiple of 32");
        CHECK(strchr(kite_last_error(), '\n') == NULL);
        CHECK_EQ_INT(ctx_new_sized_kv(m, 16, 4, 4, 1, bad[i], &ctx), KITE_E_ARG);
    }
    cp.kv_type = 3; /* q4_1: not a KV type */
    CHECK_EQ_INT(kite_ctx_new(m, &cp, &ctx), KITE_E_ARG);
    cp.kv_type = KITE_KV_F16;
    CHECK_EQ_INT(kite_ctx_new(m, &cp, &ctx), KITE_OK);
    if (ctx) {
        kite_token ids[4] = {1, 400, 30, 70};
        CHECK(kite_ctx_eval(ctx, ids, 4, false) == KITE_OK);
        CHECK(ctx_kv_row_bytes(ctx) == (size_t)m->hp.n_head_kv * 8 * 2);
    }
    kite_ctx_free(ctx);
    kite_model_free(m);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(model_file, sizeof model_file, "%s/tiny-hd32.gguf", tmpdir);
    RUN(test_half_to_float_exhaustive);
    RUN(test_kernel_paths);
    RUN(test_paged_equals_contiguous);
    RUN(test_model_vs_f32);
    RUN(test_model_paged_and_copy);
    RUN(test_refuse_small_head_dim);
    unlink(model_file);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
