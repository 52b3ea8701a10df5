/*
 * test_kv_window.c - sliding-window KV memory (kite_ctx rings, kv_cache.h;
 * docs/attention.md, "Sliding windows").
 *
 * On tiny-mistral (window 8 on both layers) and tiny-swa (window 4 on layers
 * 0 and 2, layers 1 and 3 global: {arch}.attention.sliding_window_pattern):
 *   - KV bytes: a windowed layer's share is window + n_batch - 1 rows
 *     whatever n_ctx (1024 .. 8192), a global layer's n_ctx rows; swa_full
 *     keeps n_ctx rows everywhere;
 *   - the ring computes the same bits as the full cache (swa_full, the
 *     pre-ring code path): a multi-chunk prefill (> n_batch tokens), 1-token
 *     decodes to 3 times the ring, then full n_batch chunks on a wrapped
 *     ring, every logit row compared,
 *     on f32 and (tiny-swa, head_dim 32) q8_0 caches;
 *   - rollback: truncating within the last eval (speculative decoding) and
 *     re-evaluating gives the full cache's bits; truncating to a position
 *     whose window the ring has overwritten returns KITE_E_STATE and leaves
 *     the context as it was; truncate(0) then restarts it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "model/context.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

#include "synth_harness.h"

static char tmpdir[] = "/tmp/kite-test-kvwin-XXXXXX";

static kite_model *load_shape(const char *shape) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, shape);
    return harness_synth_model(path, shape);
}

static kite_ctx *new_ctx(kite_model *m, int32_t n_ctx, int32_t kv_type, bool swa_full) {
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    cp.kv_type = kv_type;
    cp.swa_full = swa_full;
    kite_ctx *c = NULL;
    int rc = kite_ctx_new(m, &cp, &c);
    CHECK_MSG(rc == KITE_OK, "ctx: %s", kite_last_error());
    return c;
}

static kite_token tok_at(int32_t i, int32_t n_vocab) { return (kite_token)(3 + (i * 7919 + i / 5) % (n_vocab - 3)); }

TEST(test_kv_bytes_flat_past_window) {
    static const char *const shapes[] = {"tiny-mistral", "tiny-swa"};
    for (int si = 0; si < 2; si++) {
        kite_model *m = load_shape(shapes[si]);
        if (!m) continue;
        kite_model_info mi;
        kite_model_get_info(m, &mi);
        CHECK_EQ_INT(mi.n_swa_layers, si == 0 ? 2 : 2);
        CHECK_EQ_INT(mi.n_layer, si == 0 ? 2 : 4);
        const int64_t row = (int64_t)m->hp.n_head_kv * m->hp.head_dim * 4; /* f32 row, K or V */
        const int64_t ring = m->hp.sliding_window + 512 - 1;             /* n_batch 512 */
        const int32_t n_global = mi.n_layer - mi.n_swa_layers;
        for (int32_t n_ctx = 1024; n_ctx <= 8192; n_ctx *= 2) {
            kite_ctx *c = new_ctx(m, n_ctx, KITE_KV_F32, false), *f = new_ctx(m, n_ctx, KITE_KV_F32, true);
            if (c && f) {
                const int64_t want = 2 * row * (mi.n_swa_layers * ring + (int64_t)n_global * n_ctx);
                printf("    %-12s n_ctx %5d: KV %7.3f MiB (ring), %7.3f MiB (swa_full)\n", shapes[si], n_ctx,
                       (double)kite_ctx_kv_bytes(c) / (1 << 20), (double)kite_ctx_kv_bytes(f) / (1 << 20));
                CHECK_MSG(kite_ctx_kv_bytes(c) == want, "%s n_ctx %d: %lld bytes, want %lld", shapes[si], n_ctx,
                          (long long)kite_ctx_kv_bytes(c), (long long)want);
                CHECK(kite_ctx_kv_bytes(f) == 2 * row * mi.n_layer * (int64_t)n_ctx);
            }
            kite_ctx_free(c);
            kite_ctx_free(f);
        }
        /* n_ctx no larger than the ring: no ring, nothing to save */
        kite_ctx *c = new_ctx(m, 256, KITE_KV_F32, false);
        if (c) CHECK(kite_ctx_kv_bytes(c) == 2 * row * mi.n_layer * 256);
        kite_ctx_free(c);
        kite_model_free(m);
    }
}

/* Evaluates n tokens from i0 at the context's position, all logits, and
 * compares them (bits) with the same eval on ref.  Returns false on error. */
static bool eval_both(kite_ctx *c, kite_ctx *ref, int32_t i0, int32_t n, int32_t n_vocab, const char *what) {
    kite_token *t = calloc((size_t)n, sizeof *t); /* calloc: gcc -O1 (SAN=1) cannot see the loop fills it */
    CHECK(t != NULL);
    if (!t) return false;
    for (int32_t i = 0; i < n; i++) t[i] = tok_at(i0 + i, n_vocab);
    const int a = kite_ctx_eval(c, t, n, true), b = kite_ctx_eval(ref, t, n, true);
    free(t);
    CHECK_MSG(a == KITE_OK && b == KITE_OK, "%s: eval %d %d: %s", what, a, b, kite_last_error());
    if (a != KITE_OK || b != KITE_OK) return false;
    for (int32_t i = 0; i < n; i++)
        if (memcmp(kite_ctx_logits(c, i), kite_ctx_logits(ref, i), sizeof(float) * (size_t)n_vocab) != 0) {
            CHECK_MSG(0, "%s: logits of position %d differ from the full cache", what, kite_ctx_n_past(c) - n + i);
            return false;
        }
    return true;
}

TEST(test_ring_bits_equal_full_cache) {
    static const char *const shapes[] = {"tiny-mistral", "tiny-swa", "tiny-swa"};
    static const int32_t types[] = {KITE_KV_F32, KITE_KV_F32, KITE_KV_Q8_0};
    for (int si = 0; si < 3; si++) {
        kite_model *m = load_shape(shapes[si]);
        if (!m) continue;
        const int32_t V = m->hp.n_vocab, n_ctx = 4096;
        kite_ctx *c = new_ctx(m, n_ctx, types[si], false), *f = new_ctx(m, n_ctx, types[si], true);
        char what[64];
        snprintf(what, sizeof what, "%s kv %d", shapes[si], types[si]);
        if (c && f) CHECK(c->kv_ring > 0 && f->kv_ring == 0);
        if (c && f && c->kv_ring > 0) {
            const int32_t ring = c->kv_ring;
            bool ok = eval_both(c, f, 0, 700, V, what); /* two chunks: 512 + 188 */
            for (int32_t i = 700; ok && i < 3 * ring; i++) ok = eval_both(c, f, i, 1, V, what);
            ok = ok && eval_both(c, f, 3 * ring, 1100, V, what); /* full 512-token chunks after a wrap */
            /* speculative-style rollback: a 9-token verify pass, keep 3 of it */
            int32_t n = kite_ctx_n_past(c);
            ok = ok && eval_both(c, f, n, 9, V, what);
            CHECK(kite_ctx_truncate(c, n + 3) == KITE_OK && kite_ctx_truncate(f, n + 3) == KITE_OK);
            for (int32_t i = 0; ok && i < 20; i++) ok = eval_both(c, f, n + 3 + i + 1000, 1, V, what);
            /* a longer pass right before a rollback to its start */
            n = kite_ctx_n_past(c);
            ok = ok && eval_both(c, f, 77, 300, V, what);
            CHECK(kite_ctx_truncate(c, n) == KITE_OK && kite_ctx_truncate(f, n) == KITE_OK);
            ok = ok && eval_both(c, f, 5000, 40, V, what);
            /* far back: the ring has overwritten that window */
            const int32_t before = kite_ctx_n_past(c);
            CHECK_EQ_INT(kite_ctx_truncate(c, 100), KITE_E_STATE);
            CHECK_EQ_INT(kite_ctx_n_past(c), before);
            ok = ok && eval_both(c, f, 6000, 3, V, what); /* state unchanged: it goes on */
            CHECK(kite_ctx_truncate(f, 100) == KITE_OK); /* a full cache can */
            CHECK(kite_ctx_truncate(c, 0) == KITE_OK && kite_ctx_truncate(f, 0) == KITE_OK);
            ok = ok && eval_both(c, f, 9, 600, V, what);
            printf("    %-12s kv type %d: ring of %d rows, %d positions compared, %s\n", shapes[si], types[si], ring,
                   3 * ring + 2100, ok ? "bit-identical" : "DIFFERENT");
        }
        kite_ctx_free(c);
        kite_ctx_free(f);
        kite_model_free(m);
    }
}

/* The per-layer pattern is read: tiny-swa's global layers see everything
 * (its window of 4 cuts only layers 0 and 2). */
TEST(test_swa_pattern_read) {
    kite_model *m = load_shape("tiny-swa");
    if (!m) return;
    CHECK_EQ_INT(m->hp.sliding_window, 4);
    CHECK_EQ_INT(m->hp.n_swa_layers, 2);
    for (int l = 0; l < 4; l++) CHECK_EQ_INT(m->layers[l].full_attn, l % 2 == 1);
    kite_model_free(m);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_swa_pattern_read);
    RUN(test_kv_bytes_flat_past_window);
    RUN(test_ring_bits_equal_full_cache);
    char path[300];
    static const char *const shapes[] = {"tiny-mistral", "tiny-swa"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, shapes[i]);
        unlink(path);
    }
    rmdir(tmpdir);
    return harness_summary("test_kv_window");
}
