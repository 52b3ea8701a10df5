/*
 * test_attention.c - every attention path against a naive double-precision
 * softmax (src/kernels/attention*.c).
 *
 * Error budget: |out - ref| <= max|v| * (2e-6 + 2^-21 * C), where C is the
 * largest scale * sum_d |q_d k_d| of the call (the magnitude that rounds the
 * float scores themselves: a score error e changes the weights by a factor
 * exp(e)).  With ordinary scores (C of a few units) that is the plain 2e-6
 * relative to max|v|; with q scaled by 1e3 the inputs' own rounding dominates.
 *
 * Covered: the reference path; FlashAttention with tile sizes from 1x1 to
 * 64x64, n_tok / pos0 combinations including pos0 > 0 (continuing a cache);
 * split-KV decode with chunks of 1..256 positions on 1, 2 and 3 threads; MHA,
 * GQA and MQA; head_dim 8, 12, 64, 128 and odd ones; bit-identical outputs
 * for 1, 2 and 3 threads; adversarial scores (q x 1e3, all equal, one
 * dominant, far above / below phi forcing the exact fallback, counted in
 * attn_stats); outputs never NaN; a paged cache (block tables with shuffled
 * blocks of 1, 3 and 16 positions) gives bit-identical results on every path;
 * sliding windows (attn_args.window) on every path against the windowed
 * reference, paged and contiguous alike, and a window covering the whole row
 * bit-identical to no window.  SIMD inner loops (attention_simd.h): at every
 * kernel level this CPU runs, each helper on its own (every f16 bit pattern,
 * exp inputs from -inf to +inf and NaN, odd lengths) and every path (REF,
 * FLASH, SPLITKV incl. its fallback) on every KV type, paged and contiguous,
 * with and without a window, give the scalar table's bits exactly.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/attention_impl.h"
#include "kernels/attention_simd.h"
#include "kernels/dispatch.h"
#include "tensor/dtype.h"
#include "kernels/kernels.h"

typedef struct acase {
    int n_tok, pos0, n_head, n_head_kv, head_dim, n_ctx;
    float q_mul;   /* queries scaled by this */
    int path, q_tile, kv_tile, kv_chunk;
    float phi;
    int window;    /* sliding window, 0 = none */
    float softcap; /* attention logit soft cap (Gemma 2), 0 = none */
    const float *phi_head; /* [n_head] per-head phi, or NULL */
    int phi_mode;  /* ATTN_PHI_UNIFIED / ATTN_PHI_EXACT */
    float *chunk_max; /* OUT [n_tok][n_head][2], or NULL */
} acase;

typedef struct abufs {
    float *q, *k, *v, *out;
    double c;      /* max scale * sum |q k| */
    double vmax;   /* max |v| */
} abufs;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(const acase *c, abufs *b) {
    const size_t qn = (size_t)c->n_tok * c->n_head * c->head_dim;
    const size_t kvn = (size_t)c->n_ctx * c->n_head_kv * c->head_dim;
    b->q = malloc(qn * sizeof(float));
    b->out = malloc(qn * sizeof(float));
    b->k = malloc(kvn * sizeof(float));
    b->v = malloc(kvn * sizeof(float));
    for (size_t i = 0; i < qn; i++) b->q[i] = frand() * c->q_mul;
    for (size_t i = 0; i < kvn; i++) {
        b->k[i] = frand();
        b->v[i] = frand();
    }
}

static void free_bufs(abufs *b) {
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->out);
}

/* Naive causal attention in double: returns the max |out - ref| and sets
 * b->c, b->vmax; counts non-finite outputs in *n_bad. */
static double compare_ref(const acase *c, abufs *b, int *n_bad) {
    const int hd = c->head_dim, QD = c->n_head * hd, KD = c->n_head_kv * hd, group = c->n_head / c->n_head_kv;
    const double scale = 1.0 / sqrt((double)hd);
    double *s = malloc(sizeof(double) * (size_t)(c->pos0 + c->n_tok));
    double err = 0.0, cmax = 0.0, vmax = 0.0;
    for (int p = 0; p < (c->pos0 + c->n_tok) * KD; p++) vmax = fmax(vmax, fabs((double)b->v[p]));
    *n_bad = 0;
    for (int t = 0; t < c->n_tok; t++)
        for (int h = 0; h < c->n_head; h++) {
            const float *q = b->q + (size_t)t * QD + (size_t)h * hd;
            const int kvh = h / group, n_kv = c->pos0 + t + 1;
            const int lo = c->window > 0 && n_kv - c->window > 0 ? n_kv - c->window : 0;
            double mx = -INFINITY;
            for (int p = lo; p < n_kv; p++) {
                const float *k = b->k + (size_t)p * KD + (size_t)kvh * hd;
                double d = 0.0, a = 0.0;
                for (int i = 0; i < hd; i++) {
                    d += (double)q[i] * k[i];
                    a += fabs((double)q[i] * k[i]);
                }
                s[p] = c->softcap > 0 ? c->softcap * tanh(d * scale / c->softcap) : d * scale;
                cmax = fmax(cmax, a * scale);
                mx = fmax(mx, s[p]);
            }
            double sum = 0.0;
            for (int p = lo; p < n_kv; p++) sum += s[p] = exp(s[p] - mx);
            for (int i = 0; i < hd; i++) {
                double o = 0.0;
                for (int p = lo; p < n_kv; p++) o += s[p] * b->v[(size_t)p * KD + (size_t)kvh * hd + i];
                o /= sum;
                const float got = b->out[(size_t)t * QD + (size_t)h * hd + i];
                if (!isfinite(got)) (*n_bad)++;
                err = fmax(err, fabs(got - o));
            }
        }
    free(s);
    b->c = cmax;
    b->vmax = vmax;
    return err;
}

static void run_attention(threadpool *tp, const acase *c, abufs *b, attn_stats *stats) {
    attn_args a = {.q = b->q, .k_cache = b->k, .v_cache = b->v, .out = b->out, .n_tok = c->n_tok,
                   .pos0 = c->pos0, .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
                   .n_ctx = c->n_ctx, .scale = 1.0f / sqrtf((float)c->head_dim), .phi = c->phi,
                   .stats = stats, .path = c->path, .q_tile = c->q_tile, .kv_tile = c->kv_tile,
                   .kv_chunk = c->kv_chunk, .window = c->window, .phi_head = c->phi_head,
                   .phi_mode = c->phi_mode, .chunk_max = c->chunk_max, .softcap = c->softcap};
    a.scratch = malloc(sizeof(float) * kern_attention_scratch_floats(&a, tp_n_threads(tp)));
    kern_attention(tp, &a);
    free(a.scratch);
}

static double worst_ratio; /* largest err / budget seen, for the log */

/* Runs case c on tp with the filled buffers b and checks it against the
 * reference; returns err/budget and frees b. */
static double check_bufs(threadpool *tp, const acase *c, abufs *bp, attn_stats *stats) {
    abufs b = *bp;
    run_attention(tp, c, &b, stats);
    int n_bad;
    const double err = compare_ref(c, &b, &n_bad);
    const double budget = b.vmax * (2e-6 + ldexp(1.0, -21) * b.c);
    CHECK_MSG(err <= budget && n_bad == 0,
              "window %d path %d n_tok %d pos0 %d heads %d/%d hd %d tiles %d/%d chunk %d q x%g phi %g threads %d: "
              "err %.3g > budget %.3g (C %.3g), %d non-finite",
              c->window, c->path, c->n_tok, c->pos0, c->n_head, c->n_head_kv, c->head_dim, c->q_tile, c->kv_tile, c->kv_chunk,
              (double)c->q_mul, (double)c->phi, tp_n_threads(tp), err, budget, b.c, n_bad);
    free_bufs(&b);
    const double r = err / budget;
    if (r > worst_ratio) worst_ratio = r;
    return r;
}

/* Runs case c on tp and checks it against the reference; returns err/budget. */
static double check_case(threadpool *tp, const acase *c, attn_stats *stats) {
    abufs b;
    fill(c, &b);
    return check_bufs(tp, c, &b, stats);
}

static threadpool *pools[4]; /* [n] has n threads */

static const int head_shapes[][3] = {
    /* n_head, n_head_kv, head_dim */
    {4, 4, 8}, {6, 2, 12}, {4, 1, 64}, {2, 1, 128}, {3, 3, 5}, {8, 2, 17},
};
#define N_SHAPES (int)(sizeof head_shapes / sizeof head_shapes[0])

TEST(test_reference_path) {
    for (int s = 0; s < N_SHAPES; s++) {
        acase c = {.n_tok = 7, .pos0 = 5, .n_head = head_shapes[s][0], .n_head_kv = head_shapes[s][1],
                   .head_dim = head_shapes[s][2], .n_ctx = 16, .q_mul = 1, .path = ATTN_PATH_REF};
        check_case(pools[1], &c, NULL);
        check_case(pools[3], &c, NULL);
    }
}

TEST(test_flash_tiles_and_positions) {
    static const int tiles[][2] = {{1, 1}, {3, 5}, {7, 16}, {32, 64}, {64, 8}, {0, 0}};
    static const int tok_pos[][2] = {{1, 0}, {2, 0}, {5, 0}, {37, 0}, {20, 13}, {9, 70}, {1, 90}};
    for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++)
        for (size_t pi = 0; pi < sizeof tok_pos / sizeof tok_pos[0]; pi++)
            for (int s = 0; s < N_SHAPES; s++) {
                acase c = {.n_tok = tok_pos[pi][0], .pos0 = tok_pos[pi][1], .n_head = head_shapes[s][0],
                           .n_head_kv = head_shapes[s][1], .head_dim = head_shapes[s][2], .n_ctx = 100,
                           .q_mul = 1, .path = ATTN_PATH_FLASH, .q_tile = tiles[ti][0], .kv_tile = tiles[ti][1]};
                check_case(pools[(ti + pi + (size_t)s) % 3 + 1], &c, NULL);
            }
}

TEST(test_splitkv_chunks_threads) {
    static const int chunks[] = {1, 5, 16, 64, 0};
    static const int tok_pos[][2] = {{1, 0}, {1, 1}, {1, 63}, {1, 64}, {1, 300}, {3, 40}, {4, 0}, {9, 20}};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++)
        for (size_t pi = 0; pi < sizeof tok_pos / sizeof tok_pos[0]; pi++)
            for (int s = 0; s < N_SHAPES; s++) {
                acase c = {.n_tok = tok_pos[pi][0], .pos0 = tok_pos[pi][1], .n_head = head_shapes[s][0],
                           .n_head_kv = head_shapes[s][1], .head_dim = head_shapes[s][2], .n_ctx = 320,
                           .q_mul = 1, .path = ATTN_PATH_SPLITKV, .kv_chunk = chunks[ci]};
                attn_stats st = {0};
                check_case(pools[(ci + pi + (size_t)s) % 3 + 1], &c, &st);
                CHECK_EQ_INT(st.n_rows, (int64_t)c.n_tok * c.n_head);
                CHECK_EQ_INT(st.n_fallback, 0);
            }
}

/* AUTO picks split-KV for small batches and flash for large ones; both agree. */
TEST(test_auto_path) {
    for (int n_tok = 1; n_tok <= 12; n_tok += 3) {
        acase c = {.n_tok = n_tok, .pos0 = 30, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ctx = 64, .q_mul = 1};
        attn_stats st = {0};
        check_case(pools[2], &c, &st);
        CHECK_EQ_INT(st.n_rows, n_tok <= ATTN_SPLITKV_MAX_TOK ? n_tok * 4 : 0);
    }
}

/* Big enough that tp_threads_for gives 3 threads: outputs bit-identical. */
TEST(test_thread_count_bit_identical) {
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    for (size_t pi = 0; pi < 3; pi++) {
        const int n_tok = paths[pi] == ATTN_PATH_SPLITKV ? 2 : 24;
        acase c = {.n_tok = n_tok, .pos0 = 700, .n_head = 8, .n_head_kv = 2, .head_dim = 64, .n_ctx = 724,
                   .q_mul = 1, .path = paths[pi], .kv_chunk = 64};
        const double work = (double)n_tok * (700 + n_tok) * 8 * 2 * 64;
        CHECK(tp_threads_for(pools[3], work) == 3);
        abufs b;
        fill(&c, &b);
        const size_t n = (size_t)n_tok * 8 * 64;
        float *first = malloc(n * sizeof(float));
        for (int t = 1; t <= 3; t++) {
            run_attention(pools[t], &c, &b, NULL);
            if (t == 1)
                memcpy(first, b.out, n * sizeof(float));
            else
                CHECK_MSG(memcmp(first, b.out, n * sizeof(float)) == 0, "path %d: %d threads differ from 1",
                          paths[pi], t);
        }
        int n_bad;
        const double err = compare_ref(&c, &b, &n_bad);
        CHECK(err <= b.vmax * (2e-6 + ldexp(1.0, -21) * b.c) && n_bad == 0);
        free(first);
        free_bufs(&b);
    }
}

/* Huge logits (q x 1e3), on every path: flash and reference subtract the true
 * max; split-KV's scores leave the phi window, so every row falls back. */
TEST(test_adversarial_huge_logits) {
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    for (size_t pi = 0; pi < 3; pi++)
        for (int s = 0; s < N_SHAPES; s++) {
            acase c = {.n_tok = 3, .pos0 = 40, .n_head = head_shapes[s][0], .n_head_kv = head_shapes[s][1],
                       .head_dim = head_shapes[s][2], .n_ctx = 64, .q_mul = 1e3f, .path = paths[pi],
                       .q_tile = 2, .kv_tile = 16, .kv_chunk = 16};
            attn_stats st = {0};
            check_case(pools[2], &c, &st);
            if (paths[pi] == ATTN_PATH_SPLITKV) {
                CHECK_EQ_INT(st.n_rows, 3 * c.n_head);
                CHECK(st.n_fallback > 0);
            }
        }
}

/* q = 0: every score is 0, the output is the mean of V; one key equal to a
 * large multiple of q dominates: the output is (nearly) that key's V. */
TEST(test_adversarial_equal_and_dominant) {
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    for (size_t pi = 0; pi < 3; pi++) {
        acase c = {.n_tok = 2, .pos0 = 50, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ctx = 64, .q_mul = 0,
                   .path = paths[pi], .q_tile = 3, .kv_tile = 7, .kv_chunk = 9};
        check_case(pools[1], &c, NULL);
        /* dominant: key 17 of kv head 1 = 30 * q of heads 2, 3 (token 0) */
        abufs b;
        c.q_mul = 1;
        fill(&c, &b);
        const int hd = 16, KD = 2 * hd;
        for (int i = 0; i < hd; i++) {
            b.q[2 * hd + i] = b.q[3 * hd + i] = b.q[2 * hd + i];
            b.k[17 * KD + hd + i] = 30.0f * b.q[2 * hd + i];
        }
        run_attention(pools[2], &c, &b, NULL);
        int n_bad;
        const double err = compare_ref(&c, &b, &n_bad);
        CHECK(err <= b.vmax * (2e-6 + ldexp(1.0, -21) * b.c) && n_bad == 0);
        free_bufs(&b);
    }
}

/* phi far below / above the scores: every row leaves the window and is
 * recomputed exactly (n_fallback == n_rows); just inside the window nothing
 * falls back and the result is still within budget. */
TEST(test_splitkv_phi_window_fallback) {
    static const float phis[] = {-200.0f, 200.0f, -1e30f, 1e30f};
    for (size_t i = 0; i < sizeof phis / sizeof phis[0]; i++) {
        acase c = {.n_tok = 2, .pos0 = 100, .n_head = 4, .n_head_kv = 4, .head_dim = 8, .n_ctx = 128, .q_mul = 1,
                   .path = ATTN_PATH_SPLITKV, .kv_chunk = 32, .phi = phis[i]};
        attn_stats st = {0};
        check_case(pools[3], &c, &st);
        CHECK_EQ_INT(st.n_rows, 8);
        CHECK_EQ_INT(st.n_fallback, 8);
        CHECK_EQ_INT(st.n_chunks, 8 * 4); /* n_kv 101, 102: 4 chunks of 32 */
        CHECK_EQ_INT(st.n_recompute, st.n_chunks);
        CHECK(st.row_max_lo <= st.row_max_hi);
    }
    /* scores of this case lie within about [-3, 3]: phi = +-(RANGE - 5) keeps every row inside */
    static const float inside[] = {ATTN_PHI_RANGE - 5.0f, -(ATTN_PHI_RANGE - 5.0f), 0.0f};
    for (size_t i = 0; i < 3; i++) {
        acase c = {.n_tok = 1, .pos0 = 100, .n_head = 4, .n_head_kv = 4, .head_dim = 8, .n_ctx = 128, .q_mul = 1,
                   .path = ATTN_PATH_SPLITKV, .kv_chunk = 32, .phi = inside[i]};
        attn_stats st = {0};
        check_case(pools[1], &c, &st);
        CHECK(st.row_max_hi < 5.0f && st.row_max_lo > -5.0f);
        CHECK_EQ_INT(st.n_fallback, 0);
        CHECK_EQ_INT(st.n_recompute, 0);
    }
}

/* One key far above the others (score ~ 80, the rest within +-3): only the
 * chunk holding it leaves the window of phi = 0 and takes the exact method;
 * the row is combined with rescaling and stays within budget, like the exact
 * mode (every chunk against its own maximum, nothing counted) on the same
 * input.  Chunk maxima ranges come out through attn_args.chunk_max. */
TEST(test_splitkv_chunk_recompute) {
    for (int mode = 0; mode < 2; mode++) {
        acase c = {.n_tok = 1, .pos0 = 300, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ctx = 320, .q_mul = 1,
                   .path = ATTN_PATH_SPLITKV, .kv_chunk = 32, .phi_mode = mode ? ATTN_PHI_EXACT : ATTN_PHI_UNIFIED};
        float cm[4][2];
        c.chunk_max = &cm[0][0];
        abufs b;
        fill(&c, &b);
        const int hd = 16, KD = 2 * hd;
        double qq = 0.0;
        for (int i = 0; i < hd; i++) {
            b.q[hd + i] = b.q[i];
            qq += (double)b.q[i] * b.q[i];
        }
        const float alpha = (float)(80.0 * 4.0 / qq); /* scale 1/4: score 80 */
        for (int i = 0; i < hd; i++) b.k[100 * KD + i] = alpha * b.q[i];
        attn_stats st = {0};
        check_bufs(pools[2], &c, &b, &st);
        CHECK_EQ_INT(st.n_rows, 4);
        CHECK_EQ_INT(st.n_chunks, 4 * 10);
        CHECK_EQ_INT(st.n_recompute, mode ? 0 : 2); /* chunk 3 of heads 0 and 1 */
        CHECK_EQ_INT(st.n_fallback, mode ? 0 : 2);
        CHECK(fabsf(cm[0][1] - 80.0f) < 1e-3f && fabsf(cm[1][1] - 80.0f) < 1e-3f);
        CHECK(cm[2][1] < 5.0f && cm[3][1] < 5.0f && st.row_max_hi == cm[0][1]);
        for (int h = 0; h < 4; h++) CHECK(cm[h][0] > -5.0f && cm[h][0] < 5.0f && cm[h][0] <= cm[h][1]);
    }
}

/* Per-head phi: heads whose phi is far from their scores take the exact
 * method in every chunk, the others in none. */
TEST(test_splitkv_phi_per_head) {
    static const float phs[4] = {0.0f, 200.0f, -200.0f, 1.5f};
    acase c = {.n_tok = 2, .pos0 = 150, .n_head = 4, .n_head_kv = 2, .head_dim = 12, .n_ctx = 160, .q_mul = 1,
               .path = ATTN_PATH_SPLITKV, .kv_chunk = 40, .phi_head = phs};
    for (int t = 1; t <= 3; t++) {
        attn_stats st = {0};
        check_case(pools[t], &c, &st);
        CHECK_EQ_INT(st.n_chunks, 8 * 4);
        CHECK_EQ_INT(st.n_recompute, 2 * 2 * 4); /* 2 tokens x heads 1, 2 x 4 chunks */
        CHECK_EQ_INT(st.n_fallback, 4);
    }
}

/* Sums that overflow against phi although the maximum is inside the window
 * (|v| huge, weights e^37..e^39): per chunk (v ~ 1e30) the job computes the
 * chunk again against its maximum; over the row (v = 1e20 everywhere, each
 * chunk just finite, their sum not) the combine does.  Outputs are finite and
 * within budget. */
TEST(test_splitkv_overflow_recompute) {
    {
        acase c = {.n_tok = 1, .pos0 = 200, .n_head = 2, .n_head_kv = 2, .head_dim = 8, .n_ctx = 224, .q_mul = 1,
                   .path = ATTN_PATH_SPLITKV, .kv_chunk = 32, .phi = -(ATTN_PHI_RANGE - 3.0f)};
        abufs b;
        fill(&c, &b);
        for (int i = 0; i < 224 * 2 * 8; i++) b.v[i] *= 1e30f;
        attn_stats st = {0};
        check_bufs(pools[2], &c, &b, &st);
        CHECK_EQ_INT(st.n_chunks, 2 * 7);
        CHECK_EQ_INT(st.n_recompute, st.n_chunks);
    }
    {
        acase c = {.n_tok = 1, .pos0 = 319, .n_head = 2, .n_head_kv = 2, .head_dim = 8, .n_ctx = 320, .q_mul = 0,
                   .path = ATTN_PATH_SPLITKV, .kv_chunk = 32, .phi = -39.0f};
        abufs b;
        fill(&c, &b);
        for (int i = 0; i < 320 * 2 * 8; i++) b.v[i] = 1e20f; /* chunk: 32 e^39 1e20 = 2.8e38; row: 10 of them */
        attn_stats st = {0};
        check_bufs(pools[1], &c, &b, &st);
        CHECK_EQ_INT(st.n_chunks, 2 * 10);
        CHECK_EQ_INT(st.n_recompute, st.n_chunks);
    }
}

/* The vectorisable exp of the softmax weights: within 2 ulp of double exp on
 * [-87, 88] (every 97th float, plus every float of [-1, 1] near 0 ... 2^-10
 * steps), clamped (never inf or NaN) outside, NaN in gives NaN. */
TEST(test_exp) {
    double worst = 0.0;
    float at = 0.0f;
    for (float x = ATTN_EXP_FLUSH; x < 88.0f; x += 1.0f / 1024.0f * (fabsf(x) < 1.0f ? 1.0f : 97.0f)) {
        const double r = exp((double)x);
        const float e = attn_exp(x);
        const double ulp = (double)nextafterf((float)r, INFINITY) - (double)(float)r;
        const double u = fabs((double)e - r) / ulp;
        if (u > worst) {
            worst = u;
            at = x;
        }
    }
    CHECK_MSG(worst <= 2.0, "attn_exp: %.2f ulp at %g", worst, (double)at);
    printf("    attn_exp max error %.2f ulp (at %g)\n", worst, (double)at);
    /* below the flush threshold: exactly +0 (no subnormal products downstream) */
    CHECK(attn_exp(ATTN_EXP_FLUSH) > 1e-35f);
    CHECK(attn_exp(nextafterf(ATTN_EXP_FLUSH, -INFINITY)) == 0.0f && !signbit(attn_exp(-81.0f)));
    CHECK(attn_exp(-87.0f) == 0.0f && attn_exp(-1e30f) == 0.0f && attn_exp(-INFINITY) == 0.0f);
    CHECK(isfinite(attn_exp(1e30f)) && attn_exp(1e30f) > 1e38f);
    CHECK(isnan(attn_exp(NAN)));
    float row[21];
    for (int i = 0; i < 21; i++) row[i] = (float)i - 10.0f;
    double sum = 0.0;
    for (int i = 0; i < 21; i++) sum += exp((double)i - 10.0 - 3.0);
    const float got = attn_exp_sum(row, 3.0f, 21);
    CHECK_NEAR(got, sum, 4e-7 * sum);
    CHECK_NEAR(row[20], exp(7.0), 2.4e-7 * exp(7.0));
}

/* Paged KV cache: the same K/V rows scattered over shuffled blocks and read
 * through a block table give bit-identical outputs on every path. */
TEST(test_block_table_bit_identical) {
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    static const int block_sizes[] = {1, 3, 16};
    static const int tok_pos[][2] = {{1, 0}, {1, 47}, {3, 20}, {17, 5}};
    for (int window = 0; window <= 9; window += 9) /* also through a sliding window */
    for (size_t bi = 0; bi < 3; bi++)
        for (size_t pi = 0; pi < 3; pi++)
            for (size_t ti = 0; ti < 4; ti++) {
                const int bs = block_sizes[bi];
                acase c = {.n_tok = tok_pos[ti][0], .pos0 = tok_pos[ti][1], .n_head = 6, .n_head_kv = 2,
                           .head_dim = 12, .n_ctx = 96, .q_mul = 1, .path = paths[pi], .q_tile = 4,
                           .kv_tile = 8, .kv_chunk = 7, .window = window};
                abufs b;
                fill(&c, &b);
                const int kd = c.n_head_kv * c.head_dim, n_blocks = c.n_ctx / bs;
                int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
                for (int i = 0; i < n_blocks; i++) table[i] = i;
                for (int i = n_blocks - 1; i > 0; i--) { /* Fisher-Yates with the test's generator */
                    const int j = (int)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
                    const int32_t tmp = table[i];
                    table[i] = table[j];
                    table[j] = tmp;
                }
                float *pk = malloc(sizeof(float) * (size_t)c.n_ctx * kd);
                float *pv = malloc(sizeof(float) * (size_t)c.n_ctx * kd);
                for (int p = 0; p < c.n_ctx; p++) {
                    const size_t row = (size_t)table[p / bs] * bs + (size_t)(p % bs);
                    memcpy(pk + row * kd, b.k + (size_t)p * kd, sizeof(float) * (size_t)kd);
                    memcpy(pv + row * kd, b.v + (size_t)p * kd, sizeof(float) * (size_t)kd);
                }
                const size_t n = (size_t)c.n_tok * c.n_head * c.head_dim;
                run_attention(pools[2], &c, &b, NULL);
                float *plain = malloc(n * sizeof(float));
                memcpy(plain, b.out, n * sizeof(float));
                attn_args a = {.q = b.q, .k_cache = pk, .v_cache = pv, .block_table = table, .block_size = bs,
                               .out = b.out, .n_tok = c.n_tok, .pos0 = c.pos0, .n_head = c.n_head,
                               .n_head_kv = c.n_head_kv, .head_dim = c.head_dim, .n_ctx = c.n_ctx,
                               .scale = 1.0f / sqrtf((float)c.head_dim), .path = c.path, .q_tile = c.q_tile,
                               .kv_tile = c.kv_tile, .kv_chunk = c.kv_chunk, .window = c.window};
                a.scratch = malloc(sizeof(float) * kern_attention_scratch_floats(&a, 2));
                kern_attention(pools[2], &a);
                CHECK_MSG(memcmp(plain, b.out, n * sizeof(float)) == 0,
                          "path %d block %d n_tok %d pos0 %d window %d: paged output differs", c.path, bs,
                          c.n_tok, c.pos0, c.window);
                free(a.scratch);
                free(plain);
                free(pk);
                free(pv);
                free(table);
                free_bufs(&b);
            }
}

/* Sliding window (Mistral): every path against the reference restricted to
 * positions max(0, p - W + 1)..p, for windows shorter than, equal to and
 * longer than the rows, with tile and chunk sizes that put the window start
 * inside, at and beyond tile/chunk boundaries. */
TEST(test_sliding_window) {
    static const int windows[] = {1, 2, 5, 8, 16, 33, 200};
    static const int tok_pos[][2] = {{1, 0}, {1, 40}, {3, 17}, {12, 0}, {20, 30}, {70, 3}};
    static const int tiles[][3] = {{0, 0, 0}, {4, 8, 7}, {1, 1, 1}, {5, 3, 16}};
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
        for (size_t tp_i = 0; tp_i < sizeof tok_pos / sizeof tok_pos[0]; tp_i++)
            for (size_t pi = 0; pi < 3; pi++)
                for (size_t ti = 0; ti < 4; ti++) {
                    if (paths[pi] == ATTN_PATH_SPLITKV && tok_pos[tp_i][0] > 12) continue; /* keep it quick */
                    acase c = {.n_tok = tok_pos[tp_i][0], .pos0 = tok_pos[tp_i][1], .n_head = 6, .n_head_kv = 2,
                               .head_dim = 12, .n_ctx = 96, .q_mul = 1, .path = paths[pi],
                               .q_tile = tiles[ti][0], .kv_tile = tiles[ti][1], .kv_chunk = tiles[ti][2],
                               .window = windows[w]};
                    check_case(pools[1 + (int)(ti % 3)], &c, NULL);
                }
}

/* Gemma 2's attention logit soft cap (attn_args.softcap): every path, with
 * and without a window, every head shape (the grouped split-KV jobs of GQA
 * and the per-head ones), against the capped double reference; queries
 * scaled x4 so that the caps of 0.5 and 3 bite and 50 nearly does not. */
TEST(test_softcap_every_path) {
    static const float caps[] = {0.5f, 3.0f, 50.0f};
    static const int tok_pos[][2] = {{1, 0}, {1, 40}, {3, 17}, {12, 0}, {20, 30}};
    static const int tiles[][3] = {{0, 0, 0}, {4, 8, 7}, {5, 3, 16}};
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    for (size_t ci = 0; ci < 3; ci++)
        for (int window = 0; window <= 7; window += 7)
            for (int sh = 0; sh < N_SHAPES; sh++)
                for (size_t tp_i = 0; tp_i < sizeof tok_pos / sizeof tok_pos[0]; tp_i++)
                    for (size_t pi = 0; pi < 3; pi++) {
                        const size_t ti = (tp_i + pi + (size_t)sh) % 3;
                        acase c = {.n_tok = tok_pos[tp_i][0], .pos0 = tok_pos[tp_i][1], .n_head = head_shapes[sh][0],
                                   .n_head_kv = head_shapes[sh][1], .head_dim = head_shapes[sh][2], .n_ctx = 64,
                                   .q_mul = 4, .path = paths[pi], .q_tile = tiles[ti][0], .kv_tile = tiles[ti][1],
                                   .kv_chunk = tiles[ti][2], .window = window, .softcap = caps[ci]};
                        check_case(pools[1 + (int)((tp_i + ci) % 3)], &c, NULL);
                    }
    /* a cap changes the result (the reference above would then be checking the uncapped arithmetic) */
    acase c = {.n_tok = 3, .pos0 = 17, .n_head = 4, .n_head_kv = 2, .head_dim = 12, .n_ctx = 64, .q_mul = 4,
               .path = ATTN_PATH_FLASH};
    abufs b0, b1;
    fill(&c, &b0);
    fill(&c, &b1); /* then b0's values copied in */
    memcpy(b1.q, b0.q, sizeof(float) * 3 * 4 * 12);
    memcpy(b1.k, b0.k, sizeof(float) * 64 * 2 * 12);
    memcpy(b1.v, b0.v, sizeof(float) * 64 * 2 * 12);
    run_attention(pools[1], &c, &b0, NULL);
    c.softcap = 0.5f;
    run_attention(pools[1], &c, &b1, NULL);
    double d = 0.0;
    for (int i = 0; i < 3 * 4 * 12; i++) { /* not an fmax reduction: it stops aarch64 gcc 12 (an ICE) */
        const double e = fabs((double)b0.out[i] - b1.out[i]);
        if (e > d) d = e;
    }
    CHECK_MSG(d > 1e-3, "soft cap 0.5 changed the output by only %.3g", d);
    free_bufs(&b0);
    free_bufs(&b1);
}

/* A window at least as long as every row is the same computation as no
 * window: bit-identical outputs on every path. */
TEST(test_window_ge_context_bit_identical) {
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    for (size_t pi = 0; pi < 3; pi++)
        for (int wi = 0; wi < 3; wi++) {
            acase c = {.n_tok = 9, .pos0 = 30, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_ctx = 64,
                       .q_mul = 1, .path = paths[pi], .q_tile = 4, .kv_tile = 8, .kv_chunk = 16};
            abufs b;
            fill(&c, &b);
            const size_t n = (size_t)c.n_tok * c.n_head * c.head_dim;
            run_attention(pools[2], &c, &b, NULL);
            float *full = malloc(n * sizeof(float));
            memcpy(full, b.out, n * sizeof(float));
            c.window = wi == 0 ? c.pos0 + c.n_tok : wi == 1 ? c.n_ctx : 1 << 30;
            run_attention(pools[2], &c, &b, NULL);
            CHECK_MSG(memcmp(full, b.out, n * sizeof(float)) == 0, "path %d window %d differs from no window",
                      c.path, c.window);
            free(full);
            free_bufs(&b);
        }
}

/* a and b hold the same floats bit for bit, except that a NaN matches any NaN
 * (which NaN an operation on two NaNs returns is the compiler's choice of
 * operand order, in scalar code too). */
static int same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

/* The level's helpers against the scalar table's, bit for bit. */
static void simd_helpers_check(const attn_ops *sc, const attn_ops *op) {
    enum { N = 300, LD = 131 };
    float *x = malloc(sizeof(float) * N * LD), *y0 = malloc(sizeof(float) * N * 2), *y1 = y0 + N;
    float w[N];
    for (int i = 0; i < N * LD; i++) x[i] = frand() * 3.0f;
    for (int i = 0; i < N; i++) w[i] = frand();
    static const int lens[] = {1, 7, 8, 9, 17, 33, 40, 64, 80, 100, 128, 131};
    for (int li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++) {
        const int n = lens[li];
        uint32_t b0, b1;
        float f0 = sc->dot(x, x + LD, n), f1 = op->dot(x, x + LD, n);
        memcpy(&b0, &f0, 4);
        memcpy(&b1, &f1, 4);
        CHECK_MSG(b0 == b1, "%s dot n %d", op->name, n);
        for (int rows = 1; rows <= 19; rows += 3) {
            sc->dot_rows(w, x, LD, rows, n, y0);
            op->dot_rows(w, x, LD, rows, n, y1);
            CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)rows), "%s dot_rows %d x %d", op->name, rows, n);
            for (int i = 0; i < n; i++) y0[i] = y1[i] = x[i];
            sc->axpy_rows(y0, w, x + 3, LD, rows, n);
            op->axpy_rows(y1, w, x + 3, LD, rows, n);
            CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)n), "%s axpy_rows %d x %d", op->name, rows, n);
        }
        /* several query rows at once (FlashAttention's score and V sums): random ranges, empty ones,
         * shared ones; 19 rows make groups of 8 and 4 and leftovers */
        if (n <= 131) {
            enum { NQ = 19, LDW = 41 };
            static float m0[NQ * 136], m1[NQ * 136], wq[NQ * LDW];
            int32_t lo[NQ], hi[NQ];
            for (int i = 0; i < NQ * LDW; i++) wq[i] = frand();
            for (int trial = 0; trial < 4; trial++) {
                for (int i = 0; i < NQ; i++) {
                    const int a0 = (int)((frand() + 1.0f) * 10.0f), a1 = (int)((frand() + 1.0f) * 20.0f);
                    lo[i] = trial == 0 ? 0 : trial == 1 ? a0 : a0 < a1 ? a0 : a1;
                    hi[i] = trial == 0 ? 30 + i % 9 : trial == 1 ? 40 : a0 < a1 ? a1 : a0;
                    if (trial == 3 && i % 5 == 0) hi[i] = lo[i]; /* empty rows */
                }
                for (int i = 0; i < NQ * 136; i++) m0[i] = m1[i] = frand();
                sc->axpy_rows_multi(m0, 136, wq, LDW, lo, hi, NQ, x + 5, LD, n);
                op->axpy_rows_multi(m1, 136, wq, LDW, lo, hi, NQ, x + 5, LD, n);
                CHECK_MSG(!memcmp(m0, m1, sizeof m0), "%s axpy_rows_multi trial %d n %d", op->name, trial, n);
            }
        }
        /* max (NaN and signed zeros take the sequential rule) and the K-tile transpose */
        for (int kind = 0; kind < 4; kind++) {
            static float mb[N];
            for (int i = 0; i < n; i++) mb[i] = kind == 3 ? -fabsf(x[i]) : x[i];
            if (kind == 1 && n > 2) mb[n / 2] = NAN;
            if (kind == 2) mb[0] = NAN;
            if (kind == 3 && n > 3) mb[1] = 0.0f, mb[n - 1] = -0.0f;
            const float m0 = sc->max(mb, n), m1 = op->max(mb, n);
            CHECK_MSG(same_bits(&m0, &m1, 1), "%s max kind %d n %d: %g vs %g", op->name, kind, n, (double)m0,
                      (double)m1);
        }
        for (int rows = 1; rows <= 19; rows += 6) {
            enum { LDT = 150 };
            static float t0[136 * LDT], t1[136 * LDT];
            memset(t0, 0, sizeof t0);
            memset(t1, 0, sizeof t1);
            sc->transpose(x + 2, LD, rows, n, t0 + 1, LDT);
            op->transpose(x + 2, LD, rows, n, t1 + 1, LDT);
            CHECK_MSG(!memcmp(t0, t1, sizeof t0), "%s transpose %d x %d", op->name, rows, n);
        }
        sc->axpy(y0, 0.37f, x, n);
        op->axpy(y1, 0.37f, x, n);
        sc->scale(y0, -1.3f, n);
        op->scale(y1, -1.3f, n);
        CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)n), "%s axpy/scale n %d", op->name, n);
    }
    /* exp: the whole float line (every 4099th pattern), the clamps, infinities and NaN */
    static const float special[] = {INFINITY, -INFINITY, NAN, -NAN, 88.0f, 88.01f, -87.33f, -87.34f, 0.0f, -0.0f,
                                    1e-30f, -1e-30f, 3.4e38f, -3.4e38f};
    for (uint32_t base = 0; base < 0xffffffffu - N * 4099u; base += N * 4099u) {
        for (int i = 0; i < N; i++) {
            const uint32_t bits = base + (uint32_t)i * 4099u;
            memcpy(&y0[i], &bits, 4);
        }
        if (base == 0) memcpy(y0 + 5, special, sizeof special);
        memcpy(y1, y0, sizeof(float) * N);
        const float s0 = sc->exp_sum(y0, 0.5f, N - 3), s1 = op->exp_sum(y1, 0.5f, N - 3);
        const int same = same_bits(y0, y1, N) && same_bits(&s0, &s1, 1);
        CHECK_MSG(same, "%s exp_sum at %08x", op->name, (unsigned)base);
        if (!same) break;
    }
    /* every f16 pattern (NaN payloads, subnormals, infinities) */
    uint16_t *h = malloc(sizeof(uint16_t) * 65536);
    float *d0 = malloc(sizeof(float) * 65536 * 2), *d1 = d0 + 65536;
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    sc->deq_f16(h, d0, 65536 - 5);
    op->deq_f16(h, d1, 65536 - 5);
    CHECK_MSG(!memcmp(d0, d1, sizeof(float) * (65536 - 5)), "%s deq_f16", op->name); /* NaN payloads too */
    /* q8_0 / q4_0 rows of 2048 random bytes with random f16 scales (NaN and inf included) */
    unsigned char *qb = (unsigned char *)h;
    for (int i = 0; i < 65536 * 2; i++) qb[i] = (unsigned char)(frand() * 128.0f + 128.0f);
    sc->deq_q8_0(qb, d0, 64 * 32);
    op->deq_q8_0(qb, d1, 64 * 32);
    CHECK_MSG(!memcmp(d0, d1, sizeof(float) * 64 * 32), "%s deq_q8_0", op->name);
    sc->deq_q4_0(qb, d0, 64 * 32);
    op->deq_q4_0(qb, d1, 64 * 32);
    CHECK_MSG(!memcmp(d0, d1, sizeof(float) * 64 * 32), "%s deq_q4_0", op->name);
    free(h);
    free(d0);
    free(x);
    free(y0);
}

/* K or V cache of n_ctx positions, n_kv heads of hd values, in kv_type. */
static void *simd_cache(int kv_type, int n_ctx, int n_kv, int hd) {
    const dtype_traits *tr = kv_type == KITE_DTYPE_F32 ? NULL : dtype_get((uint32_t)kv_type);
    const size_t hb = tr ? (size_t)(hd / tr->block_size) * tr->type_size : sizeof(float) * (size_t)hd;
    unsigned char *m = malloc(hb * (size_t)n_kv * (size_t)n_ctx);
    float row[128];
    for (int r = 0; r < n_ctx * n_kv; r++) {
        for (int d = 0; d < hd; d++) row[d] = frand();
        if (tr)
            tr->from_float(row, m + (size_t)r * hb, hd);
        else
            memcpy(m + (size_t)r * hb, row, hb);
    }
    return m;
}

/* Every path, KV type, paged or not, windowed or not: each level's table
 * gives the scalar table's output bits. */
TEST(test_simd_bit_identical) {
    const attn_ops *sc = attn_ops_for_level(KERN_LEVEL_SCALAR);
    CHECK(sc != NULL && attn_ops_active() != NULL);
    int n_levels = 0;
    for (int l = 1; l < KERN_LEVEL_COUNT; l++) {
        const attn_ops *op = attn_ops_for_level((kern_level)l);
        if (!op) continue;
        n_levels++;
        simd_helpers_check(sc, op);
    }
    printf("    %d SIMD level(s) checked against scalar\n", n_levels);
    if (!n_levels) return;
    static const int kv_types[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0};
    static const int hds[] = {40, 64, 80, 128, 8, 16}; /* 8, 16: axpy_rows_multi's row groups */
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_FLASH, ATTN_PATH_SPLITKV};
    const int n_head = 4, n_head_kv = 2, bs = 16, n_ctx = 160; /* 10 blocks */
    static const float simd_phis[4] = {0.0f, 45.0f, -60.0f, 2.0f}; /* split-KV: some chunks in, some out */
    int32_t table[10];
    for (int i = 0; i < 10; i++) table[i] = (i * 7) % 10; /* shuffled blocks */
    for (int ti = 0; ti < 4; ti++)
        for (int hi = 0; hi < 6; hi++) {
            const int hd = hds[hi], kvt = kv_types[ti];
            if (kvt != KITE_DTYPE_F32 && kvt != KITE_DTYPE_F16 && hd % 32) continue;
            void *k = simd_cache(kvt, n_ctx, n_head_kv, hd), *v = simd_cache(kvt, n_ctx, n_head_kv, hd);
            const size_t qn = (size_t)37 * n_head * hd;
            float *q = malloc(sizeof(float) * qn), *o0 = malloc(sizeof(float) * qn * 2), *o1 = o0 + qn;
            for (size_t i = 0; i < qn; i++) q[i] = frand() * (hi == 3 ? 40.0f : 1.0f); /* hd 128: fallback rows */
            for (int pi = 0; pi < 3; pi++)
                for (int var = 0; var < 4; var++) {
                    const int paged = var & 1, window = var & 2 ? 29 : 0;
                    const int n_tok = paths[pi] == ATTN_PATH_SPLITKV ? 1 + (var == 3) * 2 : paths[pi] == ATTN_PATH_FLASH ? 37 : 5;
                    const int pos0 = paths[pi] == ATTN_PATH_FLASH ? 19 + var : 136 + var; /* odd and even n_ctx */
                    attn_args a = {.q = q, .k_cache = k, .v_cache = v, .block_table = paged ? table : NULL,
                                   .block_size = bs, .n_tok = n_tok, .pos0 = pos0, .n_head = n_head,
                                   .n_head_kv = n_head_kv, .head_dim = hd, .n_ctx = n_ctx,
                                   .scale = 1.0f / sqrtf((float)hd), .path = paths[pi], .q_tile = var == 1 ? 7 : 0,
                                   .kv_tile = var == 1 ? 24 : 0, .kv_chunk = var >= 2 ? 48 : 0, .window = window,
                                   .kv_type = kvt, .phi_head = var & 1 ? simd_phis : NULL,
                                   .phi_mode = var == 2 ? ATTN_PHI_EXACT : ATTN_PHI_UNIFIED};
                    threadpool *tp = pools[1 + var % 2];
                    a.scratch = malloc(sizeof(float) * kern_attention_scratch_floats(&a, tp_n_threads(tp)));
                    a.out = o0;
                    kern_attention_with(sc, tp, &a);
                    for (int l = 1; l < KERN_LEVEL_COUNT; l++) {
                        const attn_ops *op = attn_ops_for_level((kern_level)l);
                        if (!op) continue;
                        a.out = o1;
                        kern_attention_with(op, tp, &a);
                        CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)n_tok * n_head * hd),
                                  "level %s path %d kv %d hd %d paged %d window %d n_tok %d pos0 %d",
                                  kern_level_name((kern_level)l), paths[pi], kvt, hd, paged, window, n_tok, pos0);
                    }
                    free(a.scratch);
                }
            free(q);
            free(o0);
            free(k);
            free(v);
        }
}

int main(void) {
    for (int n = 1; n <= 3; n++) pools[n] = tp_new(n);
    RUN(test_exp);
    RUN(test_reference_path);
    RUN(test_flash_tiles_and_positions);
    RUN(test_splitkv_chunks_threads);
    RUN(test_auto_path);
    RUN(test_thread_count_bit_identical);
    RUN(test_adversarial_huge_logits);
    RUN(test_adversarial_equal_and_dominant);
    RUN(test_splitkv_phi_window_fallback);
    RUN(test_splitkv_chunk_recompute);
    RUN(test_splitkv_phi_per_head);
    RUN(test_splitkv_overflow_recompute);
    RUN(test_block_table_bit_identical);
    RUN(test_sliding_window);
    RUN(test_softcap_every_path);
    RUN(test_window_ge_context_bit_identical);
    RUN(test_simd_bit_identical);
    printf("    worst error / budget: %.3f\n", worst_ratio);
    for (int n = 1; n <= 3; n++) tp_free(pools[n]);
    return harness_summary(__FILE__);
}
