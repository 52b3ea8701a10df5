/*
 * test_attn_phi.c - calibrated unified maxima through the model and the
 * context (kite.attention.unified_max, ctx_set_attn_phi, the statistics and
 * calibration hooks; docs/attention.md "Choosing phi").
 *
 *   - the loader reads kite.attention.unified_max per layer and per head and
 *     refuses another length, a non-finite value or another element type,
 *     naming the key;
 *   - decode on stories260K at a context of two split-KV chunks: the
 *     default phi, the exact method, phi far above and far below every
 *     score (every chunk leaves the unified path, counted) and mixed
 *     per-head values give logits within float rounding of each other;
 *     the counts add up (chunks = rows x chunks per row);
 *   - the calibration hook sees every layer once per pass with lo <= hi;
 *   - ctx_set_attn_phi's argument errors leave the context unchanged.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/context.h"
#include "model/model.h"

#define MODEL_F32 "models/stories260K.gguf"
#define KEY "kite.attention.unified_max"

static char tmpdir[] = "/tmp/kite-test-phi-XXXXXX";

/* A copy of MODEL_F32 with KEY set to n values of elem_type (n 0: no key). */
static int write_with_key(const char *path, uint32_t elem_type, const void *vals, uint64_t n) {
    gguf_ctx *in = NULL;
    const gguf_open_params gp = {.use_mmap = true};
    if (gguf_open(MODEL_F32, &gp, &in) != KITE_OK) return -1;
    gguf_writer *w = gguf_writer_new();
    int rc = w ? KITE_OK : KITE_E_NOMEM;
    for (uint64_t i = 0; i < in->n_kv && rc == KITE_OK; i++) {
        char *key = gguf_str_dup(in->kv[i].key);
        rc = gguf_writer_set_value(w, key, &in->kv[i].value);
        free(key);
    }
    if (rc == KITE_OK && n) rc = gguf_writer_set_arr(w, KEY, elem_type, vals, n);
    for (uint64_t i = 0; i < in->n_tensors && rc == KITE_OK; i++) {
        const gguf_tensor *t = &in->tensors[i];
        char *name = gguf_str_dup(t->name);
        rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
        free(name);
    }
    if (rc == KITE_OK) rc = gguf_writer_write(w, path);
    gguf_writer_free(w);
    gguf_close(in);
    return rc;
}

static kite_model *load(const char *path, int *rc) {
    kite_model_params mp = kite_model_default_params();
    kite_model *m = NULL;
    *rc = kite_model_load(path, &mp, &m);
    return m;
}

TEST(test_loader_key) {
    char path[256];
    snprintf(path, sizeof path, "%s/phi.gguf", tmpdir);
    int rc;
    kite_model *m = load(MODEL_F32, &rc);
    CHECK(rc == KITE_OK && m && m->attn_phi == NULL);
    const int NL = m ? m->hp.n_layer : 0, NH = m ? m->hp.n_head : 0;
    kite_model_free(m);
    CHECK(NL == 5 && NH == 8);
    float per_layer[5] = {1.5f, -2.0f, 0.0f, 7.25f, 3.0f};
    CHECK_EQ_INT(write_with_key(path, GGUF_VT_FLOAT32, per_layer, 5), KITE_OK);
    m = load(path, &rc);
    CHECK(rc == KITE_OK && m && m->attn_phi);
    if (m && m->attn_phi)
        for (int l = 0; l < NL; l++)
            for (int h = 0; h < NH; h++) CHECK(m->attn_phi[l * NH + h] == per_layer[l]);
    kite_model_free(m);
    float per_head[40];
    for (int i = 0; i < 40; i++) per_head[i] = (float)i * 0.5f - 10.0f;
    CHECK_EQ_INT(write_with_key(path, GGUF_VT_FLOAT32, per_head, 40), KITE_OK);
    m = load(path, &rc);
    CHECK(rc == KITE_OK && m && m->attn_phi && memcmp(m->attn_phi, per_head, sizeof per_head) == 0);
    kite_model_free(m);
    /* refused: another length, a NaN, integers */
    CHECK_EQ_INT(write_with_key(path, GGUF_VT_FLOAT32, per_head, 7), KITE_OK);
    m = load(path, &rc);
    CHECK(rc == KITE_E_FORMAT && !m);
    CHECK_CONTAINS(kite_last_error(), KEY);
    CHECK_CONTAINS(kite_last_error(), "7 values");
    per_layer[2] = NAN;
    CHECK_EQ_INT(write_with_key(path, GGUF_VT_FLOAT32, per_layer, 5), KITE_OK);
    m = load(path, &rc);
    CHECK(rc == KITE_E_FORMAT && !m);
    CHECK_CONTAINS(kite_last_error(), "not finite");
    const uint32_t ints[5] = {1, 2, 3, 4, 5};
    CHECK_EQ_INT(write_with_key(path, GGUF_VT_UINT32, ints, 5), KITE_OK);
    m = load(path, &rc);
    CHECK(rc == KITE_E_FORMAT && !m);
    CHECK_CONTAINS(kite_last_error(), KEY);
    unlink(path);
}

typedef struct tap_rec {
    int calls, bad;
    int32_t last_layer;
} tap_rec;

static void tap(void *user, int32_t layer, const float *cm, int32_t n_tok, int32_t n_head) {
    tap_rec *r = user;
    if (layer != r->last_layer + 1) r->bad++;
    r->last_layer = layer == 4 ? -1 : layer;
    for (int32_t i = 0; i < n_tok * n_head; i++)
        if (!(cm[2 * i] <= cm[2 * i + 1])) r->bad++;
    r->calls++;
}

#define N_PRE 300  /* cached positions: rows of 2 chunks of ATTN_KV_CHUNK (256) */
#define N_DEC 8

/* Decodes N_DEC tokens after the N_PRE cached ones with the given phi table
 * and mode; logits of every step into out [N_DEC][n_vocab]. */
static void decode(kite_ctx *ctx, const float *phi, int32_t n, int32_t mode, attn_stats *st, float *out) {
    CHECK_EQ_INT(ctx_set_attn_phi(ctx, phi, n, mode), KITE_OK);
    ctx->n_past = N_PRE;
    ctx_set_attn_stats(ctx, st);
    const int32_t nv = ctx->model->hp.n_vocab;
    for (int s = 0; s < N_DEC; s++) {
        const kite_token t = (kite_token)(3 + 17 * s % 400);
        CHECK_EQ_INT(kite_ctx_eval(ctx, &t, 1, false), KITE_OK);
        memcpy(out + (size_t)s * nv, kite_ctx_logits(ctx, 0), sizeof(float) * (size_t)nv);
    }
    ctx_set_attn_stats(ctx, NULL);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        m = d > m || d != d ? (d != d ? INFINITY : d) : m;
    }
    return m;
}

TEST(test_decode_modes) {
    int rc;
    kite_model *m = load(MODEL_F32, &rc);
    CHECK(rc == KITE_OK);
    if (!m) return;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = N_PRE + N_DEC;
    cp.n_threads = 2;
    kite_ctx *ctx = NULL;
    CHECK_EQ_INT(kite_ctx_new(m, &cp, &ctx), KITE_OK);
    if (!ctx) {
        kite_model_free(m);
        return;
    }
    kite_token toks[N_PRE];
    for (int i = 0; i < N_PRE; i++) toks[i] = (kite_token)(i == 0 ? 1 : 3 + (i * 37) % 500);
    /* prefill through the calibration hook: split-KV, every layer once per pass */
    tap_rec rec = {.last_layer = -1};
    CHECK_EQ_INT(ctx_set_attn_tap(ctx, tap, &rec), KITE_OK);
    CHECK_EQ_INT(kite_ctx_eval(ctx, toks, N_PRE, false), KITE_OK);
    CHECK_EQ_INT(ctx_set_attn_tap(ctx, NULL, NULL), KITE_OK);
    CHECK(rec.calls >= 5 && rec.calls % 5 == 0 && rec.bad == 0);
    const size_t nv = (size_t)m->hp.n_vocab, NL = (size_t)m->hp.n_layer, NH = (size_t)m->hp.n_head;
    float *ref = malloc(sizeof(float) * nv * N_DEC), *got = malloc(sizeof(float) * nv * N_DEC);
    float *phi = malloc(sizeof(float) * NL * NH);
    attn_stats s0 = {0}, se = {0}, sh = {0}, sl = {0}, sm = {0};
    decode(ctx, NULL, 0, ATTN_PHI_UNIFIED, &s0, ref);
    /* rows: N_DEC tokens x layers x heads; each sees 2 chunks (positions 300..307) */
    const int64_t rows = (int64_t)N_DEC * (int64_t)(NL * NH);
    CHECK_EQ_INT(s0.n_rows, rows);
    CHECK_EQ_INT(s0.n_chunks, 2 * rows);
    /* stories260K has an attention sink: some rows' maximum is above 40, so phi = 0 sends the chunks
     * holding it off the unified path (the partial, rescaled combine runs on a trained model) */
    printf("    phi 0: %lld of %lld chunks off, row max [%g, %g]\n", (long long)s0.n_recompute,
           (long long)s0.n_chunks, (double)s0.row_max_lo, (double)s0.row_max_hi);
    CHECK(s0.row_max_hi > ATTN_PHI_RANGE && s0.n_recompute > 0 && s0.n_recompute < s0.n_chunks / 4);
    decode(ctx, NULL, 0, ATTN_PHI_EXACT, &se, got);
    CHECK_EQ_INT(se.n_recompute, 0);
    CHECK_EQ_INT(se.n_chunks, 2 * rows);
    CHECK_MSG(max_diff(ref, got, nv * N_DEC) < 1e-4, "exact vs unified: %g", max_diff(ref, got, nv * N_DEC));
    for (size_t i = 0; i < NL * NH; i++) phi[i] = 150.0f;
    decode(ctx, phi, (int32_t)(NL * NH), ATTN_PHI_UNIFIED, &sh, got);
    CHECK_EQ_INT(sh.n_recompute, sh.n_chunks);
    CHECK_EQ_INT(sh.n_fallback, rows);
    CHECK_MSG(max_diff(ref, got, nv * N_DEC) < 1e-4, "phi 150: %g", max_diff(ref, got, nv * N_DEC));
    for (size_t i = 0; i < NL * NH; i++) phi[i] = -1e30f;
    decode(ctx, phi, (int32_t)(NL * NH), ATTN_PHI_UNIFIED, &sl, got);
    CHECK_EQ_INT(sl.n_recompute, sl.n_chunks);
    CHECK_MSG(max_diff(ref, got, nv * N_DEC) < 1e-4, "phi -1e30: %g", max_diff(ref, got, nv * N_DEC));
    /* mixed: even heads far off, odd heads near the scores */
    for (size_t i = 0; i < NL * NH; i++) phi[i] = i % 2 ? 4.0f : -90.0f;
    decode(ctx, phi, (int32_t)(NL * NH), ATTN_PHI_UNIFIED, &sm, got);
    CHECK(sm.n_recompute >= sm.n_chunks / 2 && sm.n_recompute < sm.n_chunks);
    CHECK_MSG(max_diff(ref, got, nv * N_DEC) < 1e-4, "mixed: %g", max_diff(ref, got, nv * N_DEC));
    /* back to the model's values: the first run's logits again, bit for bit */
    decode(ctx, NULL, 0, ATTN_PHI_UNIFIED, NULL, got);
    CHECK(memcmp(ref, got, sizeof(float) * nv * N_DEC) == 0);
    /* errors leave the context as it was */
    CHECK_EQ_INT(ctx_set_attn_phi(ctx, phi, 3, ATTN_PHI_UNIFIED), KITE_E_ARG);
    CHECK_EQ_INT(ctx_set_attn_phi(ctx, NULL, 0, 7), KITE_E_ARG);
    CHECK_EQ_INT(ctx_set_attn_phi(ctx, NULL, 5, ATTN_PHI_UNIFIED), KITE_E_ARG);
    CHECK(ctx->attn_phi_head == NULL && ctx->attn_phi_mode == ATTN_PHI_UNIFIED);
    free(ref);
    free(got);
    free(phi);
    kite_ctx_free(ctx);
    kite_model_free(m);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        printf("mkdtemp failed\n");
        return 1;
    }
    RUN(test_loader_key);
    RUN(test_decode_modes);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
