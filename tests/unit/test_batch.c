/*
 * test_batch.c - the multi-sequence forward pass (llama_forward_batch over a
 * paged KV pool, src/model/llama.c) and the calibration tap.
 *
 * The contract the serving engine relies on: a sequence's logits do not
 * depend on which other sequences share its batch or where its KV blocks
 * live.  Checked bit for bit against kite_ctx_eval runs of each sequence
 * alone (contiguous cache): three sequences with different prompt lengths
 * are prefilled in one mixed batch (one of them in two chunks, each forced
 * onto the attention path of an unchunked pass: fwd_seq.attn_path), then decoded
 * together for several steps, with their blocks interleaved and shuffled in
 * the pool.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/forward.h"
#include "model_helpers.h"

#define MODEL "models/stories260K.gguf"
#define BS 4      /* positions per block: small, so sequences span several */
#define N_SEQ 3
#define STEPS 6   /* decode steps after the prompts */

static const kite_token prompts[N_SEQ][9] = {
    {1, 403, 407, 261, 450},
    {1, 66, 300, 42, 17, 99, 12, 400, 7},
    {1, 31},
};
static const int prompt_len[N_SEQ] = {5, 9, 2};

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

TEST(test_batch_equals_single) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    const int V = m->hp.n_vocab, total = 9 + STEPS;
    /* reference: each sequence alone, greedy, logits of every step */
    float *ref = malloc(sizeof(float) * (size_t)N_SEQ * (STEPS + 1) * V);
    kite_token next[N_SEQ][STEPS + 1];
    for (int s = 0; s < N_SEQ; s++) {
        kite_ctx *c = new_ctx_checked(m, 64, 1);
        CHECK(kite_ctx_eval(c, prompts[s], prompt_len[s], false) == KITE_OK);
        for (int k = 0; k <= STEPS; k++) {
            const float *lg = kite_ctx_logits(c, -1);
            memcpy(ref + ((size_t)s * (STEPS + 1) + k) * V, lg, sizeof(float) * V);
            next[s][k] = argmax(lg, V);
            if (k < STEPS) CHECK(kite_ctx_eval(c, &next[s][k], 1, false) == KITE_OK);
        }
        kite_ctx_free(c);
    }

    /* batched: a pool of 3 * ceil(total / BS) blocks, tables interleaved and reversed */
    const int per_seq = (total + BS - 1) / BS, n_blocks = N_SEQ * per_seq;
    kite_ctx *pool = NULL;
    CHECK(ctx_new_sized(m, n_blocks * BS, 16, BS, 2, &pool) == KITE_OK);
    int32_t table[N_SEQ][16];
    for (int s = 0; s < N_SEQ; s++)
        for (int b = 0; b < per_seq; b++) table[s][b] = n_blocks - 1 - (b * N_SEQ + s);
    float *out = malloc(sizeof(float) * N_SEQ * 2 * V);

    /* step 1: seq 0 whole, seq 1 first 4 tokens (no logits), seq 2 whole */
    kite_token toks[32];
    int n = 0;
    memcpy(toks + n, prompts[0], sizeof(kite_token) * 5), n += 5;
    memcpy(toks + n, prompts[1], sizeof(kite_token) * 4), n += 4;
    memcpy(toks + n, prompts[2], sizeof(kite_token) * 2), n += 2;
    /* seq 1's 9-token prompt is prefilled in two chunks (4 + 5): both use FLASH, the path of one 9-token pass */
    fwd_seq sq[N_SEQ] = {{table[0], 0, 5, 1, 0}, {table[1], 0, 4, 0, ATTN_PATH_FLASH}, {table[2], 0, 2, 2, 0}};
    llama_forward_batch(pool, toks, sq, N_SEQ, out);
    CHECK(memcmp(out, ref + (size_t)0 * (STEPS + 1) * V, sizeof(float) * V) == 0);
    /* seq 2 asked for 2 rows: the last one is the prompt's next-token logits */
    CHECK(memcmp(out + 2 * (size_t)V, ref + (size_t)2 * (STEPS + 1) * V, sizeof(float) * V) == 0);

    /* step 2: seq 1's remaining 5 prompt tokens alongside decode tokens of 0 and 2 */
    int pos[N_SEQ] = {5, 4, 2};
    n = 0;
    toks[n++] = next[0][0];
    memcpy(toks + n, prompts[1] + 4, sizeof(kite_token) * 5), n += 5;
    toks[n++] = next[2][0];
    fwd_seq sq2[N_SEQ] = {{table[0], pos[0], 1, 1, 0}, {table[1], pos[1], 5, 1, ATTN_PATH_FLASH}, {table[2], pos[2], 1, 1, 0}};
    llama_forward_batch(pool, toks, sq2, N_SEQ, out);
    CHECK(memcmp(out, ref + ((size_t)0 * (STEPS + 1) + 1) * V, sizeof(float) * V) == 0);
    CHECK(memcmp(out + V, ref + ((size_t)1 * (STEPS + 1) + 0) * V, sizeof(float) * V) == 0);
    CHECK(memcmp(out + 2 * (size_t)V, ref + ((size_t)2 * (STEPS + 1) + 1) * V, sizeof(float) * V) == 0);
    pos[0] = 6, pos[1] = 9, pos[2] = 3;
    int step[N_SEQ] = {2, 1, 2}; /* next reference row of each sequence */

    /* decode together until each has produced STEPS tokens */
    for (int it = 0; it < STEPS - 1; it++) {
        fwd_seq sd[N_SEQ];
        for (int s = 0; s < N_SEQ; s++) {
            toks[s] = next[s][step[s] - 1];
            sd[s] = (fwd_seq){table[s], pos[s], 1, 1, 0};
        }
        llama_forward_batch(pool, toks, sd, N_SEQ, out);
        for (int s = 0; s < N_SEQ; s++) {
            CHECK_MSG(memcmp(out + (size_t)s * V, ref + ((size_t)s * (STEPS + 1) + step[s]) * V,
                             sizeof(float) * V) == 0,
                      "seq %d decode step %d differs from the single-sequence run", s, step[s]);
            pos[s]++;
            step[s]++;
        }
    }
    CHECK(kite_ctx_eval(pool, toks, 1, false) == KITE_E_STATE); /* pools refuse the single-sequence API */
    free(out);
    free(ref);
    kite_ctx_free(pool);
    kite_model_free(m);
}

typedef struct tap_log {
    int calls[TAP_COUNT];
    int rows[TAP_COUNT];
    int width[TAP_COUNT];
    int max_layer;
} tap_log;

static void tap_fn(void *user, int32_t layer, int point, const float *x, int32_t n_tok, int32_t width) {
    tap_log *t = user;
    (void)x;
    t->calls[point]++;
    t->rows[point] += n_tok;
    t->width[point] = width;
    if (layer > t->max_layer) t->max_layer = layer;
}

TEST(test_tap_points) {
    kite_model *m = load_model_checked(MODEL);
    if (!m) return;
    kite_ctx *c = new_ctx_checked(m, 32, 1);
    tap_log t = {.max_layer = -1};
    ctx_set_tap(c, tap_fn, &t);
    CHECK(kite_ctx_eval(c, prompts[1], 9, false) == KITE_OK);
    const model_hparams *hp = &m->hp;
    CHECK_EQ_INT(t.calls[TAP_ATTN_IN], hp->n_layer);
    CHECK_EQ_INT(t.rows[TAP_ATTN_IN], 9 * hp->n_layer);
    CHECK_EQ_INT(t.width[TAP_ATTN_IN], hp->n_embd);
    CHECK_EQ_INT(t.width[TAP_WO_IN], hp->n_head * hp->head_dim);
    CHECK_EQ_INT(t.width[TAP_FFN_IN], hp->n_embd);
    CHECK_EQ_INT(t.width[TAP_DOWN_IN], hp->n_ff);
    CHECK_EQ_INT(t.rows[TAP_OUTPUT_IN], 1); /* only the last row's logits were asked for */
    CHECK_EQ_INT(t.max_layer, hp->n_layer);
    ctx_set_tap(c, NULL, NULL);
    CHECK(kite_ctx_eval(c, prompts[2], 2, false) == KITE_OK);
    CHECK_EQ_INT(t.calls[TAP_ATTN_IN], hp->n_layer); /* removed: no more calls */
    kite_ctx_free(c);
    kite_model_free(m);
}

int main(void) {
    RUN(test_batch_equals_single);
    RUN(test_tap_points);
    return harness_summary(__FILE__);
}
