/*
 * test_arch.c - the architectures beyond plain llama (src/model/arch.c,
 * loader.c, llama.c, moe.c): Llama 3 rope scaling, Mistral's sliding window,
 * Qwen2 (QKV bias), Qwen3 (QK-norm), Qwen3-MoE and Mixtral (mixture of
 * experts), GPT-2 (LayerNorm, learned positions, GELU), Phi-3 (fused
 * q/k/v and gate/up, LongRoPE), Gemma 2 (GeGLU, post-norms, soft caps,
 * embedding scale, local/global layers).
 *
 * Every model is a tiny synthetic one written here by synth_write (shape
 * "tiny-<arch>", f32, seed 1: the bytes depend only on those), so no model
 * file is stored.  Three kinds of check:
 *
 *   1. llama.cpp reference logits (tests/data/arch/<shape>.logits.f32, raw
 *      float32 [N_TOK][n_vocab], recorded once with llama.cpp c392e5094 on
 *      the same GGUF; tests/data/arch/README.md has the commands).  Budget:
 *      max |kite - llama.cpp| <= REF_TOL * (max - min of the reference
 *      logits), REF_TOL_GPT2 for gpt2; the greedy token agrees everywhere.  Measured worst ratios are printed; f32 weights and an f32
 *      KV cache on both sides, so the difference is summation order, expf /
 *      powf differences and, for gpt2, ggml's GELU (an f16 lookup table).
 *      The llama.cpp snapshot predates qwen3/qwen3moe and ignores sliding
 *      windows, so those are covered by (2).
 *   2. A naive double-precision forward pass written here from the model
 *      definitions (ref_forward) for every tiny model, including the
 *      windowed and the qwen3 ones.  Budget NAIVE_TOL relative to the range.
 *   3. Properties: window >= context is bit-identical to no window; MoE with
 *      top-k = all experts equals the dense mixture; experts nobody chose are
 *      not read (their weights poisoned with NaN); a MoE sequence's logits do
 *      not depend on the batch it shares (bit-identical); the rope_freqs
 *      factors matter; LayerNorm and GELU against hand-worked values; loader
 *      errors name the tensor; profiling changes neither the logits nor what
 *      the calibration tap sees.
 *   4. The tensor role table (model/arch.h): every role of every
 *      architecture round-trips name -> (role, layer) -> name, names that
 *      are no role's fail cleanly, the supported list is the table's.
 */
#include <math.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "model/arch.h"
#include "model/context.h"
#include "model/forward.h"
#include "model/moe.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

#include "synth_harness.h"

#define N_TOK 10
/* Context size of kite_logits' contexts: it picks Phi-3's long LongRoPE
 * factors (above the original context of 32) in kite and the naive pass. */
#define REF_N_CTX 64
static const kite_token toks[N_TOK] = {1, 300, 301, 5, 400, 260, 17, 42, 511, 259};
#define REF_TOL 1e-5      /* vs llama.cpp, relative to the reference logit range (measured <= 2.1e-7) */
#define REF_TOL_GPT2 5e-4 /* gpt2: ggml's GELU reads an f16 table (input and output rounded to f16);
                             measured 8.4e-5 */
#define NAIVE_TOL 2e-5 /* vs the double-precision naive forward */

/* Every tiny synth shape, one per architecture variant. */
static const char *const all_shapes[] = {"tiny-llama3", "tiny-mistral",  "tiny-mixtral", "tiny-qwen2", "tiny-qwen3",
                                         "tiny-qwen3moe", "tiny-gpt2",   "tiny-phi3",    "tiny-swa",
                                         "tiny-gemma2"};
#define N_ALL_SHAPES (sizeof all_shapes / sizeof all_shapes[0])

static char tmpdir[] = "/tmp/kite-test-arch-XXXXXX";

static const char *model_path(const char *shape) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s.gguf", tmpdir, shape);
    return buf;
}

/* Writes (once) and loads the tiny model of a shape; NULL on failure (counted). */
static kite_model *load_shape(const char *shape) { return harness_synth_model(model_path(shape), shape); }

/* All N_TOK rows of logits of one prefill pass (caller frees). */
static float *kite_logits(kite_model *m, int32_t n_threads) {
    kite_ctx *c = NULL;
    kite_ctx_params cp = {.n_ctx = REF_N_CTX, .n_threads = n_threads};
    if (kite_ctx_new(m, &cp, &c) != KITE_OK) {
        CHECK_MSG(0, "ctx: %s", kite_last_error());
        return NULL;
    }
    const size_t V = (size_t)m->hp.n_vocab;
    float *out = malloc(sizeof(float) * N_TOK * V);
    CHECK(kite_ctx_eval(c, toks, N_TOK, true) == KITE_OK);
    for (int i = 0; i < N_TOK; i++) memcpy(out + i * V, kite_ctx_logits(c, i), sizeof(float) * V);
    kite_ctx_free(c);
    return out;
}

/* max |a - b| / (max - min of b) over n values. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double lo = INFINITY, hi = -INFINITY, d = 0.0;
    for (size_t i = 0; i < n; i++) {
        lo = fmin(lo, b[i]);
        hi = fmax(hi, b[i]);
        const double e = fabs((double)a[i] - (double)b[i]);
        d = isnan(e) ? INFINITY : fmax(d, e);
    }
    return d / (hi - lo);
}

/* ---- 1. llama.cpp reference logits ------------------------------------------ */

static float *read_ref(const char *shape, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/arch/%s.logits.f32", shape);
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "missing %s", path);
    if (!f) return NULL;
    float *r = malloc(sizeof(float) * n);
    const size_t got = fread(r, sizeof(float), n, f);
    fclose(f);
    CHECK_MSG(got == n, "%s: %zu floats, expected %zu", path, got, n);
    if (got != n) {
        free(r);
        return NULL;
    }
    return r;
}

static double worst_ref, worst_naive;

/* FNV-1a 64 of a file (0 if unreadable): the model llama.cpp saw must be the one synth writes now. */
static uint64_t file_fnv(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    int c;
    while ((c = getc(f)) != EOF) h = (h ^ (uint64_t)c) * 0x100000001b3ull;
    fclose(f);
    return h;
}

static const struct {
    const char *shape;
    uint64_t fnv;
} ref_models[] = {
    {"tiny-llama3", 0x108d89152184870dull},  {"tiny-mistral", 0x32947e8a9ba6afafull},
    {"tiny-mixtral", 0x3dbc149325ea4864ull}, {"tiny-qwen2", 0x4c0a59feed726c1dull},
    {"tiny-gpt2", 0x7f09ad4cd6186a6aull},    {"tiny-phi3", 0xdcd33cf1f9612ba4ull},
    {"tiny-gemma2", 0x94027cdbd46c34e7ull},
};

static void check_llamacpp(const char *shape, int n_pos, double tol) {
    kite_model *m = load_shape(shape);
    if (!m) return;
    const size_t V = (size_t)m->hp.n_vocab;
    const uint64_t h = file_fnv(model_path(shape));
    for (size_t i = 0; i < sizeof ref_models / sizeof ref_models[0]; i++)
        if (!strcmp(ref_models[i].shape, shape))
            CHECK_MSG(h == ref_models[i].fnv,
                      "%s: synth now writes a different file (FNV %016" PRIx64 "): regenerate "
                      "tests/data/arch/%s.logits.f32 (tests/data/arch/README.md)", shape, h, shape);
    float *ref = read_ref(shape, N_TOK * V);
    float *got = kite_logits(m, 2);
    if (ref && got) {
        const double r = rel_diff(got, ref, (size_t)n_pos * V);
        if (tol == REF_TOL && r > worst_ref) worst_ref = r;
        printf("    %-14s vs llama.cpp: max diff / range %.2e (positions 0..%d)\n", shape, r, n_pos - 1);
        CHECK_MSG(r <= tol, "%s: kite vs llama.cpp %.3g > %g of the logit range", shape, r, tol);
        for (int t = 0; t < n_pos; t++) { /* greedy choice agrees at every position */
            int a = 0, b = 0;
            for (size_t v = 1; v < V; v++) {
                if (got[t * V + v] > got[t * V + a]) a = (int)v;
                if (ref[t * V + v] > ref[t * V + b]) b = (int)v;
            }
            CHECK_MSG(a == b, "%s position %d: argmax %d vs llama.cpp %d", shape, t, a, b);
        }
    }
    free(ref);
    free(got);
    kite_model_free(m);
}

TEST(test_llamacpp_llama3_rope_freqs) { check_llamacpp("tiny-llama3", N_TOK, REF_TOL); }
TEST(test_llamacpp_qwen2) { check_llamacpp("tiny-qwen2", N_TOK, REF_TOL); }
TEST(test_llamacpp_mixtral) { check_llamacpp("tiny-mixtral", N_TOK, REF_TOL); }
TEST(test_llamacpp_gpt2) { check_llamacpp("tiny-gpt2", N_TOK, REF_TOL_GPT2); }
/* phi3: fused q/k/v and gate/up, NEOX rope with the long LongRoPE factors
 * (context 64 > 32) and attn_factor; the window (16) is beyond the 10 tokens
 * here: tests/e2e/test_arch_llamacpp.sh compares windows and short factors */
TEST(test_llamacpp_phi3) { check_llamacpp("tiny-phi3", N_TOK, REF_TOL); }
/* gemma2: GeGLU, post-norms, both soft caps, embedding scale, head_dim 32
 * != n_embd / n_head, 26 layers; the window of 8 on the even layers is
 * active from position 8 on (llama.cpp applies it for gemma2).  ggml's GELU
 * is its f16 table, as for gpt2 */
TEST(test_llamacpp_gemma2) { check_llamacpp("tiny-gemma2", N_TOK, REF_TOL_GPT2); }
/* llama.cpp ignores the window: positions < window (8) see their whole prefix */
TEST(test_llamacpp_mistral_inside_window) { check_llamacpp("tiny-mistral", 8, REF_TOL); }

/* ---- 2. naive double-precision forward ------------------------------------- */

static const float *wrow(const weight *w, int64_t r) { /* f32 weights only */
    return (const float *)((const char *)w->data + (size_t)r * w->row_bytes);
}

/* y[r] = W x for the rows of w (double accumulation). */
static void ref_mv(const weight *w, const double *x, double *y) {
    for (int64_t r = 0; r < w->ne[1]; r++) {
        const float *row = wrow(w, r);
        double s = 0.0;
        for (int64_t c = 0; c < w->ne[0]; c++) s += (double)row[c] * x[c];
        y[r] = s;
    }
}

static void ref_norm(const model_hparams *hp, const double *x, const float *g, const float *b, int n, double *y) {
    double mean = 0.0, ss = 0.0;
    if (hp->norm_type == NORM_LAYER) {
        for (int i = 0; i < n; i++) mean += x[i];
        mean /= n;
    }
    for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    const double s = 1.0 / sqrt(ss / n + hp->rms_eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] - mean) * s * g[i] + (b ? b[i] : 0.0);
}

static void ref_add(double *y, const float *b, int n) {
    if (b)
        for (int i = 0; i < n; i++) y[i] += b[i];
}

static void ref_rope(const kite_model *m, double *x, int pos) {
    const model_hparams *hp = &m->hp;
    const int half = hp->n_rot / 2;
    const float *lr = REF_N_CTX > hp->n_ctx_orig ? m->rope_long : m->rope_short;
    for (int i = 0; i < half; i++) {
        double f = pow(hp->rope_freq_base, -2.0 * i / hp->n_rot) * hp->rope_freq_scale;
        if (m->rope_freqs) f /= m->rope_freqs[i];
        if (lr) f /= lr[i];
        const double c = cos(pos * f) * hp->rope_attn_factor, s = sin(pos * f) * hp->rope_attn_factor;
        const int a = hp->rope_type == ROPE_NEOX ? i : 2 * i, b = hp->rope_type == ROPE_NEOX ? i + half : 2 * i + 1;
        const double x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static double silu(double v) { return v / (1.0 + exp(-v)); }
static double gelu(double v) { return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }
/* Gemma 2's soft cap c * tanh(v / c); c 0: none. */
static double softcap(double v, double c) { return c > 0.0 ? c * tanh(v / c) : v; }

/* FFN of one token (dense or MoE); x normed input, y output (n_embd). */
static void ref_ffn(const kite_model *m, const layer_weights *L, const double *x, double *y) {
    const model_hparams *hp = &m->hp;
    const int E = hp->n_embd;
    memset(y, 0, sizeof(double) * E);
    if (hp->n_expert > 0) {
        const int NE = hp->n_expert, K = hp->n_expert_used, FE = hp->n_ff_exp;
        double p[64], mx = -INFINITY, sum = 0.0, *g = malloc(sizeof(double) * FE * 2), *o = malloc(sizeof(double) * E);
        ref_mv(&L->gate_inp, x, p);
        for (int e = 0; e < NE; e++) mx = fmax(mx, p[e]);
        for (int e = 0; e < NE; e++) sum += p[e] = exp(p[e] - mx);
        int sel[64];
        double w[64], wsum = 0.0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < NE; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[j] = best;
            wsum += w[j] = p[best] / sum;
        }
        for (int j = 0; j < K; j++) {
            const weight wg = model_expert(&L->gate_exps, sel[j]), wu = model_expert(&L->up_exps, sel[j]),
                         wd = model_expert(&L->down_exps, sel[j]);
            ref_mv(&wg, x, g);
            ref_mv(&wu, x, g + FE);
            for (int i = 0; i < FE; i++) g[i] = silu(g[i]) * g[FE + i];
            ref_mv(&wd, g, o);
            const double wj = hp->expert_norm ? w[j] / wsum : w[j];
            for (int i = 0; i < E; i++) y[i] += wj * o[i];
        }
        free(g);
        free(o);
        return;
    }
    const int F = hp->n_ff;
    double *h = malloc(sizeof(double) * F * 2);
    ref_mv(&L->w_up, x, h + F);
    ref_add(h + F, L->b_up, F);
    if (hp->ffn_type == FFN_GELU) {
        for (int i = 0; i < F; i++) h[i] = gelu(h[F + i]);
    } else if (hp->ffn_type == FFN_GEGLU) { /* gemma2: gelu(gate) * up */
        ref_mv(&L->w_gate, x, h);
        for (int i = 0; i < F; i++) h[i] = gelu(h[i]) * h[F + i];
    } else {
        ref_mv(&L->w_gate, x, h);
        for (int i = 0; i < F; i++) h[i] = silu(h[i]) * h[F + i];
    }
    ref_mv(&L->w_down, h, y);
    ref_add(y, L->b_down, E);
    free(h);
}

/* Logits of every position of toks[0..n) (out: [n][n_vocab]). */
static void ref_forward(const kite_model *m, int n, float *out) {
    const model_hparams *hp = &m->hp;
    const int E = hp->n_embd, HD = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv;
    const int Q = H * HD, KV = HKV * HD, V = hp->n_vocab;
    double *x = calloc((size_t)n * E, sizeof(double)), *xn = malloc(sizeof(double) * E);
    double *q = malloc(sizeof(double) * (size_t)n * Q), *k = malloc(sizeof(double) * (size_t)n * KV);
    double *v = malloc(sizeof(double) * (size_t)n * KV), *att = malloc(sizeof(double) * Q);
    double *y = malloc(sizeof(double) * E), *s = malloc(sizeof(double) * n), *lg = malloc(sizeof(double) * V);
    for (int t = 0; t < n; t++) {
        const float *e = wrow(&m->tok_embd, toks[t]);
        for (int i = 0; i < E; i++)
            x[(size_t)t * E + i] = e[i] * (double)hp->embd_scale + (m->pos_embd.data ? wrow(&m->pos_embd, t)[i] : 0.0f);
    }
    /* attention scale: 1/sqrt(head_dim), gemma2 27B's 1/sqrt(n_embd / n_head) (46 layers) */
    const double qscale = strcmp(m->arch, "gemma2") == 0 && hp->n_layer == 46
                              ? 1.0 / sqrt((double)(E / H)) : 1.0 / sqrt((double)HD);
    for (int l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        for (int t = 0; t < n; t++) {
            ref_norm(hp, x + (size_t)t * E, L->attn_norm, L->attn_norm_b, E, xn);
            double *qt = q + (size_t)t * Q, *kt = k + (size_t)t * KV, *vt = v + (size_t)t * KV;
            ref_mv(&L->wq, xn, qt);
            ref_mv(&L->wk, xn, kt);
            ref_mv(&L->wv, xn, vt);
            ref_add(qt, L->bq, Q);
            ref_add(kt, L->bk, KV);
            ref_add(vt, L->bv, KV);
            for (int h = 0; h < H; h++) {
                if (L->q_norm) ref_norm(hp, qt + h * HD, L->q_norm, NULL, HD, qt + h * HD);
                if (hp->n_rot) ref_rope(m, qt + h * HD, t);
            }
            for (int h = 0; h < HKV; h++) {
                if (L->k_norm) ref_norm(hp, kt + h * HD, L->k_norm, NULL, HD, kt + h * HD);
                if (hp->n_rot) ref_rope(m, kt + h * HD, t);
            }
        }
        for (int t = 0; t < n; t++) {
            const int win = L->full_attn ? 0 : hp->sliding_window; /* tiny-swa: global layers 1 and 3 */
            const int lo = win > 0 && t - win + 1 > 0 ? t - win + 1 : 0;
            for (int h = 0; h < H; h++) {
                const int kh = h / (H / HKV);
                double mx = -INFINITY, sum = 0.0;
                for (int p = lo; p <= t; p++) {
                    double d = 0.0;
                    for (int i = 0; i < HD; i++) d += q[(size_t)t * Q + h * HD + i] * k[(size_t)p * KV + kh * HD + i];
                    s[p] = softcap(d * qscale, hp->attn_softcap);
                    mx = fmax(mx, s[p]);
                }
                for (int p = lo; p <= t; p++) sum += s[p] = exp(s[p] - mx);
                for (int i = 0; i < HD; i++) {
                    double o = 0.0;
                    for (int p = lo; p <= t; p++) o += s[p] * v[(size_t)p * KV + kh * HD + i];
                    att[h * HD + i] = o / sum;
                }
            }
            ref_mv(&L->wo, att, y);
            ref_add(y, L->bo, E);
            if (L->attn_post_norm) ref_norm(hp, y, L->attn_post_norm, NULL, E, y); /* gemma2 */
            for (int i = 0; i < E; i++) x[(size_t)t * E + i] += y[i];
        }
        for (int t = 0; t < n; t++) {
            ref_norm(hp, x + (size_t)t * E, L->ffn_norm, L->ffn_norm_b, E, xn);
            ref_ffn(m, L, xn, y);
            if (L->ffn_post_norm) ref_norm(hp, y, L->ffn_post_norm, NULL, E, y); /* gemma2 */
            for (int i = 0; i < E; i++) x[(size_t)t * E + i] += y[i];
        }
    }
    for (int t = 0; t < n; t++) {
        ref_norm(hp, x + (size_t)t * E, m->output_norm, m->output_norm_b, E, xn);
        ref_mv(&m->output, xn, lg);
        for (int i = 0; i < V; i++) out[(size_t)t * V + i] = (float)softcap(lg[i], hp->final_softcap);
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(y), free(s), free(lg);
}

TEST(test_naive_reference_all) {
    for (size_t i = 0; i < N_ALL_SHAPES; i++) {
        kite_model *m = load_shape(all_shapes[i]);
        if (!m) continue;
        const size_t V = (size_t)m->hp.n_vocab;
        float *ref = malloc(sizeof(float) * N_TOK * V);
        ref_forward(m, N_TOK, ref);
        float *got = kite_logits(m, 1);
        if (got) {
            const double r = rel_diff(got, ref, N_TOK * V);
            if (r > worst_naive) worst_naive = r;
            printf("    %-14s vs naive double forward: %.2e\n", all_shapes[i], r);
            CHECK_MSG(r <= NAIVE_TOL, "%s: kite vs naive forward %.3g > %g", all_shapes[i], r, NAIVE_TOL);
        }
        free(got);
        free(ref);
        kite_model_free(m);
    }
}

/* ---- 3. properties ----------------------------------------------------------- */

/* Digest of what a calibration tap saw: every call's (layer, point, rows,
 * width) and row bytes folded in call order (FNV-1a 64). */
static void tap_digest(void *user, int32_t layer, int point, const float *x, int32_t n_tok, int32_t width) {
    uint64_t *h = user;
    const int32_t head[4] = {layer, point, n_tok, width};
    const unsigned char *b = (const unsigned char *)head;
    for (size_t i = 0; i < sizeof head; i++) *h = (*h ^ b[i]) * 0x100000001b3ull;
    b = (const unsigned char *)x;
    for (size_t i = 0; i < sizeof(float) * (size_t)n_tok * (size_t)width; i++) *h = (*h ^ b[i]) * 0x100000001b3ull;
}

/* Profiling runs the fused q/k/v and gate/up matmuls one weight at a time
 * (llama.c, mm_timed): for every architecture the logits and everything
 * the calibration tap sees are bit-identical with it on and off, for a
 * prefill and a decode step, and every op time is >= 0. */
TEST(test_profiling_bit_identical_every_arch) {
    for (size_t i = 0; i < N_ALL_SHAPES; i++) {
        kite_model *m = load_shape(all_shapes[i]);
        if (!m) continue;
        const size_t V = (size_t)m->hp.n_vocab;
        kite_ctx *c[2] = {NULL, NULL};
        uint64_t h[2] = {0xcbf29ce484222325ull, 0xcbf29ce484222325ull};
        kite_ctx_params cp = {.n_ctx = 64, .n_threads = 2};
        bool same = true;
        for (int on = 0; on < 2; on++) {
            CHECK(kite_ctx_new(m, &cp, &c[on]) == KITE_OK);
            if (!c[on]) continue;
            ctx_set_tap(c[on], tap_digest, &h[on]);
            CHECK(kite_ctx_set_profiling(c[on], on == 1) == KITE_OK);
            CHECK(kite_ctx_eval(c[on], toks, N_TOK - 1, true) == KITE_OK);
        }
        if (c[0] && c[1]) {
            for (int r = 0; r < N_TOK - 1; r++)
                same &= memcmp(kite_ctx_logits(c[0], r), kite_ctx_logits(c[1], r), sizeof(float) * V) == 0;
            for (int on = 0; on < 2; on++) CHECK(kite_ctx_eval(c[on], toks + N_TOK - 1, 1, false) == KITE_OK);
            same &= memcmp(kite_ctx_logits(c[0], -1), kite_ctx_logits(c[1], -1), sizeof(float) * V) == 0;
            double sec[KITE_PROFILE_N_OPS];
            CHECK(kite_ctx_profile(c[1], sec, NULL, KITE_PROFILE_N_OPS) == KITE_PROFILE_N_OPS);
            bool nonneg = true;
            for (int k = 0; k < KITE_PROFILE_N_OPS; k++) nonneg &= sec[k] >= 0;
            CHECK_MSG(nonneg, "%s: negative op time", all_shapes[i]);
        }
        CHECK_MSG(same, "%s: logits differ with profiling on", all_shapes[i]);
        CHECK_MSG(h[0] == h[1], "%s: the tap sees other data with profiling on", all_shapes[i]);
        kite_ctx_free(c[0]);
        kite_ctx_free(c[1]);
        kite_model_free(m);
    }
}

/* tiny-mistral (window 8): a window >= the context is bit-identical to no
 * window; window 8 changes positions >= 8 only. */
TEST(test_window_vs_full) {
    kite_model *m = load_shape("tiny-mistral");
    if (!m) return;
    CHECK_EQ_INT(m->hp.sliding_window, 8);
    const size_t V = (size_t)m->hp.n_vocab;
    float *win = kite_logits(m, 2);
    m->hp.sliding_window = 0;
    float *full = kite_logits(m, 2);
    m->hp.sliding_window = N_TOK;
    float *wide = kite_logits(m, 2);
    m->hp.sliding_window = 1000;
    float *wider = kite_logits(m, 2);
    if (win && full && wide && wider) {
        CHECK(memcmp(full, wide, sizeof(float) * N_TOK * V) == 0);
        CHECK(memcmp(full, wider, sizeof(float) * N_TOK * V) == 0);
        CHECK(memcmp(full, win, sizeof(float) * 8 * V) == 0);
        CHECK(rel_diff(win + 8 * V, full + 8 * V, 2 * V) > 1e-3); /* the window really cuts */
    }
    free(win), free(full), free(wide), free(wider);
    kite_model_free(m);
}

/* Window decode (split-KV, one token at a time) agrees with the windowed
 * prefill (FlashAttention) and with a paged pool. */
TEST(test_window_decode_matches_prefill) {
    kite_model *m = load_shape("tiny-mistral");
    if (!m) return;
    const size_t V = (size_t)m->hp.n_vocab;
    float *pre = kite_logits(m, 2);
    kite_ctx *c = NULL;
    kite_ctx_params cp = {.n_ctx = 64, .n_threads = 2};
    CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
    double worst = 0.0;
    for (int t = 0; c && pre && t < N_TOK; t++) {
        CHECK(kite_ctx_eval(c, &toks[t], 1, false) == KITE_OK);
        const double r = rel_diff(kite_ctx_logits(c, -1), pre + t * V, V);
        worst = fmax(worst, r);
    }
    CHECK_MSG(worst <= 1e-5, "decode vs prefill with a window: %.3g", worst);
    kite_ctx_free(c);
    free(pre);
    kite_model_free(m);
}

/* Gemma 2 (tiny-gemma2: window 8 on the even layers, soft caps 2 and 10):
 * the prefill on each attention path (reference, FlashAttention, split-KV)
 * and token-by-token decode (split-KV, the windowed layers' KV in rings)
 * give the same logits; each soft cap changes them, and the final one bounds
 * every logit. */
TEST(test_gemma2_paths_and_caps) {
    kite_model *m = load_shape("tiny-gemma2");
    if (!m) return;
    const size_t V = (size_t)m->hp.n_vocab;
    CHECK(m->hp.sliding_window == 8 && m->hp.n_swa_layers == 13 && !m->layers[0].full_attn && m->layers[1].full_attn);
    CHECK(m->hp.attn_softcap == 4.0f && m->hp.final_softcap == 30.0f && m->hp.embd_scale == 8.0f);
    float *pre = kite_logits(m, 2); /* flash: 10 tokens > ATTN_SPLITKV_MAX_TOK */
    float *path_out = malloc(sizeof(float) * N_TOK * V);
    static const int paths[] = {ATTN_PATH_REF, ATTN_PATH_SPLITKV};
    for (int pi = 0; pi < 2 && pre; pi++) {
        kite_ctx *c = NULL;
        kite_ctx_params cp = {.n_ctx = REF_N_CTX, .n_threads = 2};
        CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
        if (!c) continue;
        llama_forward(c, toks, N_TOK, 0, paths[pi], path_out);
        const double r = rel_diff(path_out, pre, N_TOK * V);
        printf("    tiny-gemma2    prefill on path %d vs flash: %.2e\n", paths[pi], r);
        CHECK_MSG(r <= 1e-5, "path %d vs flash: %.3g", paths[pi], r);
        kite_ctx_free(c);
    }
    kite_ctx *c = NULL;
    kite_ctx_params cp = {.n_ctx = REF_N_CTX, .n_threads = 2};
    CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
    double worst = 0.0, top = 0.0;
    for (int t = 0; c && pre && t < N_TOK; t++) {
        CHECK(kite_ctx_eval(c, &toks[t], 1, false) == KITE_OK);
        worst = fmax(worst, rel_diff(kite_ctx_logits(c, -1), pre + t * V, V));
    }
    for (size_t i = 0; pre && i < N_TOK * V; i++) top = fmax(top, fabs(pre[i]));
    printf("    tiny-gemma2    token-by-token decode vs prefill: %.2e; max |logit| %.3g (cap 30)\n", worst, top);
    CHECK_MSG(worst <= 1e-5, "decode vs prefill: %.3g", worst);
    CHECK(top < 30.0 && top > 15.0);
    kite_ctx_free(c);
    /* without either cap the logits change (the caps are active on this model) */
    const float caps[2] = {m->hp.attn_softcap, m->hp.final_softcap};
    for (int k = 0; k < 2 && pre; k++) {
        if (k == 0) m->hp.attn_softcap = 0.0f;
        else m->hp.final_softcap = 0.0f;
        float *un = kite_logits(m, 2);
        const double r = un ? rel_diff(un, pre, N_TOK * V) : 0.0;
        printf("    tiny-gemma2    without the %s cap: %.2e\n", k == 0 ? "attention" : "final", r);
        CHECK_MSG(r > 1e-3, "the %s cap changes the logits by only %.3g", k == 0 ? "attention" : "final", r);
        free(un);
        m->hp.attn_softcap = caps[0];
        m->hp.final_softcap = caps[1];
    }
    free(path_out);
    free(pre);
    kite_model_free(m);
}

/* MoE with top-k = every expert equals the dense mixture sum_e p_e FFN_e(x). */
TEST(test_moe_all_experts_is_dense_mixture) {
    static const char *const shapes[] = {"tiny-mixtral", "tiny-qwen3moe"};
    for (int si = 0; si < 2; si++) {
        kite_model *m = load_shape(shapes[si]);
        if (!m) continue;
        m->hp.n_expert_used = m->hp.n_expert;
        kite_ctx *c = NULL;
        kite_ctx_params cp = {.n_ctx = 16, .n_threads = 2};
        CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
        const int E = m->hp.n_embd, NE = m->hp.n_expert, FE = m->hp.n_ff_exp, n = 5;
        float *x = malloc(sizeof(float) * n * E), *out = malloc(sizeof(float) * n * E);
        uint64_t st = 12345;
        for (int i = 0; i < n * E; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 4.0 - 2.0);
        }
        const layer_weights *L = &m->layers[1];
        moe_route(c, L, x, n);
        moe_experts(c, L, 0, x, n, out);
        double worst = 0.0;
        for (int t = 0; t < n; t++) {
            double xd[256], p[64], mx = -INFINITY, sum = 0.0, dense[256] = {0}, h[512], o[256];
            for (int i = 0; i < E; i++) xd[i] = x[t * E + i];
            ref_mv(&L->gate_inp, xd, p);
            for (int e = 0; e < NE; e++) mx = fmax(mx, p[e]);
            for (int e = 0; e < NE; e++) sum += p[e] = exp(p[e] - mx);
            for (int e = 0; e < NE; e++) {
                const weight wg = model_expert(&L->gate_exps, e), wu = model_expert(&L->up_exps, e),
                             wd = model_expert(&L->down_exps, e);
                ref_mv(&wg, xd, h);
                ref_mv(&wu, xd, h + FE);
                for (int i = 0; i < FE; i++) h[i] = silu(h[i]) * h[FE + i];
                ref_mv(&wd, h, o);
                for (int i = 0; i < E; i++) dense[i] += p[e] / sum * o[i];
            }
            double scale = 0.0;
            for (int i = 0; i < E; i++) scale = fmax(scale, fabs(dense[i]));
            for (int i = 0; i < E; i++) worst = fmax(worst, fabs(out[t * E + i] - dense[i]) / scale);
        }
        printf("    %-14s top-%d of %d vs dense mixture: %.2e\n", shapes[si], NE, NE, worst);
        CHECK_MSG(worst <= 1e-5, "%s: MoE with all experts vs dense mixture %.3g", shapes[si], worst);
        free(x), free(out);
        kite_ctx_free(c);
        kite_model_free(m);
    }
}

/* Experts no token chose are never read: poison one with NaN (the test owns
 * the heap image of the model) and the outputs stay finite and unchanged. */
TEST(test_moe_unchosen_experts_not_read) {
    kite_model *m = load_shape("tiny-mixtral");
    if (!m) return;
    kite_ctx *c = NULL;
    kite_ctx_params cp = {.n_ctx = 16, .n_threads = 1};
    CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
    if (!c) return;
    const int E = m->hp.n_embd, K = m->hp.n_expert_used, n = 1;
    float x[64], out[64], out2[64];
    for (int i = 0; i < E; i++) x[i] = sinf((float)i);
    const layer_weights *L = &m->layers[0];
    moe_route(c, L, x, n);
    moe_experts(c, L, 0, x, n, out);
    int unused = -1;
    for (int e = 0; e < m->hp.n_expert && unused < 0; e++) {
        int chosen = 0;
        for (int j = 0; j < K; j++) chosen |= c->moe_sel[j] == e;
        if (!chosen) unused = e;
    }
    CHECK(unused >= 0);
    const weight wg = model_expert(&L->gate_exps, unused), wd = model_expert(&L->down_exps, unused);
    float *pg = (float *)(uintptr_t)wg.data, *pd = (float *)(uintptr_t)wd.data;
    for (int64_t i = 0; i < wg.ne[0] * wg.ne[1]; i++) pg[i] = NAN;
    for (int64_t i = 0; i < wd.ne[0] * wd.ne[1]; i++) pd[i] = NAN;
    moe_route(c, L, x, n);
    moe_experts(c, L, 0, x, n, out2);
    CHECK(memcmp(out, out2, sizeof(float) * E) == 0);
    kite_ctx_free(c);
    kite_model_free(m);
}

/* A MoE sequence's logits do not depend on the batch: two sequences in one
 * llama_forward_batch (paged pool, tokens grouped by expert across both)
 * give bit-identical logits to each run alone. */
TEST(test_moe_batch_independent) {
    static const char *const shapes[] = {"tiny-mixtral", "tiny-qwen3moe"};
    for (int si = 0; si < 2; si++) {
        kite_model *m = load_shape(shapes[si]);
        if (!m) continue;
        const int V = m->hp.n_vocab;
        kite_ctx *pool = NULL;
        CHECK(ctx_new_sized(m, 32, 16, 4, 2, &pool) == KITE_OK);
        if (!pool) {
            kite_model_free(m);
            continue;
        }
        int32_t ta[4] = {0, 2, 4, 6}, tb[4] = {1, 3, 5, 7};
        float *alone = malloc(sizeof(float) * 2 * V), *both = malloc(sizeof(float) * 2 * V);
        fwd_seq a = {ta, 0, 6, 1, ATTN_PATH_FLASH}, b = {tb, 0, 5, 1, ATTN_PATH_FLASH};
        llama_forward_batch(pool, toks, &a, 1, alone);
        llama_forward_batch(pool, toks + 5, &b, 1, alone + V);
        kite_token both_toks[11];
        memcpy(both_toks, toks, sizeof(kite_token) * 6);
        memcpy(both_toks + 6, toks + 5, sizeof(kite_token) * 5);
        fwd_seq ab[2] = {a, b};
        llama_forward_batch(pool, both_toks, ab, 2, both);
        CHECK_MSG(memcmp(alone, both, sizeof(float) * 2 * V) == 0, "%s: batched logits differ", shapes[si]);
        free(alone), free(both);
        kite_ctx_free(pool);
        kite_model_free(m);
    }
}

/* The Llama 3 frequency factors are applied: without them the logits move. */
TEST(test_rope_freqs_matter) {
    kite_model *m = load_shape("tiny-llama3");
    if (!m) return;
    CHECK(m->rope_freqs != NULL);
    const size_t V = (size_t)m->hp.n_vocab;
    float *with = kite_logits(m, 1);
    m->rope_freqs = NULL;
    float *without = kite_logits(m, 1);
    if (with && without) CHECK(rel_diff(with + 5 * V, without + 5 * V, 5 * V) > 1e-3);
    free(with), free(without);
    kite_model_free(m);
}

TEST(test_layernorm_gelu_hand_values) {
    const float x[4] = {1, 2, 3, 4}, g1[4] = {1, 1, 1, 1}, g[4] = {1, 2, 1, 0.5f}, b[4] = {0, 1, 0, -1};
    float y[4];
    /* mean 2.5, variance 1.25: (x - 2.5) / sqrt(1.25) */
    static const double plain[4] = {-1.3416407865, -0.4472135955, 0.4472135955, 1.3416407865};
    static const double affine[4] = {-1.3416407865, 0.1055728090, 0.4472135955, -0.3291796068};
    kern_layernorm(y, x, g1, NULL, 4, 0.0f);
    for (int i = 0; i < 4; i++) CHECK_NEAR(y[i], plain[i], 1e-6);
    kern_layernorm(y, x, g, b, 4, 0.0f);
    for (int i = 0; i < 4; i++) CHECK_NEAR(y[i], affine[i], 1e-6);
    float z[4] = {5, 5, 5, 5}; /* constant row: 0 / sqrt(eps) = 0, plus bias */
    kern_layernorm(z, z, g, b, 4, 1e-5f);
    for (int i = 0; i < 4; i++) CHECK_NEAR(z[i], b[i], 0.0);
    /* 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), worked in double */
    float v[7] = {0, 1, -1, 2, -3, 0.5f, 5};
    static const double gelu[7] = {0.0, 0.8411919906, -0.1588080094, 1.9545976941, -0.0036373921, 0.3457140098,
                                   4.9999997708};
    kern_gelu(v, 7);
    for (int i = 0; i < 7; i++) CHECK_NEAR(v[i], gelu[i], 2e-7 * fmax(1.0, fabs(gelu[i])));
}

/* Replaces every occurrence of `from` by `to` (same length) in a file. */
static int patch_file(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    char *buf = malloc((size_t)n);
    fseek(f, 0, SEEK_SET);
    int hits = 0;
    if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
        const size_t k = strlen(from);
        for (long i = 0; i + (long)k <= n; i++)
            if (memcmp(buf + i, from, k) == 0) memcpy(buf + i, to, k), hits++;
        fseek(f, 0, SEEK_SET);
        fwrite(buf, 1, (size_t)n, f);
    }
    fclose(f);
    free(buf);
    return hits;
}

/* Loader errors are one line naming the tensor or key: a tiny-qwen3 file
 * relabelled "qwen2" (architecture and key prefixes) lacks the q bias qwen2
 * requires; relabelled "gpt99" it is an unknown architecture. */
TEST(test_loader_errors_name_the_tensor) {
    const synth_shape *s = synth_shape_find("tiny-qwen3");
    synth_params p = {.shape = *s, .type = KITE_DTYPE_F32, .seed = 1, .n_threads = 1};
    char path[256];
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    CHECK(synth_write(&p, path) == KITE_OK);
    CHECK(patch_file(path, "qwen3", "qwen2") > 5);
    kite_model *m = NULL;
    CHECK(kite_model_load(path, NULL, &m) == KITE_E_NOT_FOUND);
    CHECK_CONTAINS(kite_last_error(), "missing tensor 'blk.0.attn_q.bias'");
    CHECK(strchr(kite_last_error(), '\n') == NULL);
    CHECK(patch_file(path, "qwen2", "gpt99") > 5);
    CHECK(kite_model_load(path, NULL, &m) == KITE_E_UNSUPPORTED);
    CHECK_CONTAINS(kite_last_error(), "'gpt99' is not supported");
    CHECK_CONTAINS(kite_last_error(), arch_supported_list());
    p.shape.arch = "qwen3moe"; /* qwen3moe without experts: refused by synth */
    CHECK(synth_write(&p, path) == KITE_E_ARG);
    unlink(path);
}

/* ---- tensor roles (model/arch.h) ----------------------------------------- */

/* Every role of every architecture: name -> (role, layer) -> the same name. */
TEST(test_roles_round_trip) {
    static const int layers[] = {0, 1, 9, 10, 37, 4095};
    int n_checked = 0;
    for (size_t a = 0; arch_at(a); a++) {
        const arch_info *ai = arch_at(a);
        for (int r = 0; r < TR_COUNT; r++) {
            char name[ARCH_NAME_MAX], again[ARCH_NAME_MAX];
            const bool per_layer = arch_role_per_layer(r);
            for (size_t k = 0; k < (per_layer ? sizeof layers / sizeof layers[0] : 1); k++) {
                const int l = per_layer ? layers[k] : -1;
                if (!arch_has_role(ai, r)) {
                    CHECK_MSG(!arch_tensor_name(ai, r, l, name, sizeof name), "%s has no role %d", ai->name, r);
                    CHECK(arch_tensor_name(NULL, r, l, name, sizeof name) != NULL); /* any architecture's */
                    continue;
                }
                CHECK_MSG(arch_tensor_name(ai, r, l, name, sizeof name) == name, "%s role %d layer %d", ai->name, r,
                          l);
                int got_l = -2;
                const int got_r = arch_parse_name(name, &got_l);
                CHECK_MSG(got_r == r && got_l == l, "%s: parsed as role %d layer %d, expected %d %d", name, got_r,
                          got_l, r, l);
                CHECK(arch_tensor_name(ai, got_r, got_l, again, sizeof again) == again);
                CHECK_STR_EQ(again, name);
                /* the base and stem are the name's tail */
                const char *base = arch_role_base(r), *stem = arch_role_stem(r);
                CHECK(strlen(name) >= strlen(base) && !strcmp(name + strlen(name) - strlen(base), base));
                CHECK(!strncmp(base, stem, strlen(stem)) &&
                      (!strcmp(base + strlen(stem), ".weight") || !strcmp(base + strlen(stem), ".bias")));
                CHECK_EQ_INT(arch_name_layer(name), l);
                n_checked++;
            }
        }
    }
    CHECK(n_checked > 100);
    /* llama.cpp's spellings, pinned (the table is the only place they are written) */
    char buf[ARCH_NAME_MAX];
    CHECK_STR_EQ(arch_tensor_name(arch_find("llama"), TR_ATTN_Q, 3, buf, sizeof buf), "blk.3.attn_q.weight");
    CHECK_STR_EQ(arch_tensor_name(arch_find("gpt2"), TR_OUTPUT_NORM_B, -1, buf, sizeof buf), "output_norm.bias");
    CHECK_STR_EQ(arch_tensor_name(arch_find("qwen3moe"), TR_FFN_DOWN_EXPS, 47, buf, sizeof buf),
                 "blk.47.ffn_down_exps.weight");
    CHECK_STR_EQ(arch_tensor_name(arch_find("qwen2"), TR_ATTN_V_B, 0, buf, sizeof buf), "blk.0.attn_v.bias");
    CHECK_STR_EQ(arch_tensor_name(arch_find("gpt2"), TR_POS_EMBD, -1, buf, sizeof buf), "position_embd.weight");
    CHECK_STR_EQ(arch_tensor_name(arch_find("llama"), TR_ROPE_FREQS, -1, buf, sizeof buf), "rope_freqs.weight");
    CHECK_STR_EQ(arch_role_stem(TR_FFN_DOWN), "ffn_down");
    CHECK_STR_EQ(arch_role_base(TR_ATTN_OUT), "attn_output.weight");
}

/* Names that are no role's fail cleanly, as do impossible name requests. */
TEST(test_roles_unknown_names) {
    static const char *const bad[] = {
        "", "blk.", "blk.0", "blk.0.", "blk..attn_q.weight", "blk.x.attn_q.weight", "blk.-1.attn_q.weight",
        "blk.1000001.attn_q.weight", "blk.0.output.weight", "blk.0.token_embd.weight", "attn_q.weight",
        "blk.0.attn_q.weightx", "blk.0.attn_q", "blk.0.attn_q.bias.x", "output.weight.x", "output",
        "token_types.weight", "blk.0.ffn_down_shexp.weight", "BLK.0.attn_q.weight",
        "model.layers.0.self_attn.q_proj.weight",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int l = 7;
        CHECK_MSG(arch_parse_name(bad[i], &l) == TR_NONE && l == -1, "'%s' parsed as a role", bad[i]);
        CHECK(arch_parse_name(bad[i], NULL) == TR_NONE);
    }
    CHECK_EQ_INT(arch_name_layer("blk.12.ffn_down_shexp.weight"), 12); /* layer of any blk name */
    CHECK_EQ_INT(arch_name_layer("output.weight"), -1);
    CHECK_EQ_INT(arch_name_layer("blk.x.y"), -1);
    char buf[ARCH_NAME_MAX];
    const arch_info *llama = arch_find("llama");
    CHECK(!arch_tensor_name(llama, TR_ATTN_Q, -1, buf, sizeof buf));   /* per-layer role without a layer */
    CHECK(!arch_tensor_name(llama, TR_OUTPUT, 0, buf, sizeof buf));    /* global role with a layer */
    CHECK(!arch_tensor_name(llama, TR_NONE, 0, buf, sizeof buf));
    CHECK(!arch_tensor_name(NULL, TR_COUNT, 0, buf, sizeof buf));
    CHECK(!arch_tensor_name(llama, TR_ATTN_QKV, 0, buf, sizeof buf));  /* llama has separate q, k, v */
    CHECK(!arch_tensor_name(llama, TR_ATTN_Q, 0, buf, 8));             /* does not fit */
    CHECK(!arch_has_role(llama, TR_NONE) && !arch_has_role(llama, TR_COUNT));
    CHECK(!arch_role_base(TR_NONE) && !arch_role_stem(TR_COUNT));
    CHECK(arch_find("gpt99") == NULL && arch_find("") == NULL);
}

/* The supported list is the table's names, in order; the loader's error quotes it. */
TEST(test_supported_list_matches_table) {
    char want[256] = "";
    size_t n = 0;
    for (size_t a = 0; arch_at(a); a++, n++) {
        const arch_info *ai = arch_at(a);
        CHECK(arch_find(ai->name) == ai);
        if (a) strcat(want, ", ");
        strcat(want, ai->name);
    }
    CHECK_EQ_INT((int)n, 8);
    CHECK_STR_EQ(arch_supported_list(), want);
    CHECK_STR_EQ(arch_supported_list(), "llama, mistral, qwen2, qwen3, qwen3moe, gpt2, phi3, gemma2");
    CHECK(arch_at(n) == NULL);
}

/* Every built-in shape is valid and the real ones have their models'
 * published parameter counts (f32 bytes / 4; untied gpt2 counts its output). */
TEST(test_shapes_param_counts) {
    static const struct {
        const char *name;
        double params; /* billions */
    } want[] = {{"llama3.2-1b", 1.236}, {"mixtral-8x7b", 46.70}, {"qwen2-0.5b", 0.494},
                {"qwen3-0.6b", 0.596}, {"qwen3moe-30b-a3b", 30.53}, {"gpt2-124m", 0.163},
                {"mistral-7b-v0.1", 7.24}, {"gemma-2-2b", 2.614}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const synth_shape *s = synth_shape_find(want[i].name);
        CHECK_MSG(s != NULL, "shape %s", want[i].name);
        if (!s) continue;
        synth_params p = {.shape = *s, .type = KITE_DTYPE_F32, .seed = 1};
        CHECK_MSG(synth_check(&p) == KITE_OK, "%s: %s", want[i].name, kite_last_error());
        const double got = (double)synth_data_bytes(&p) / 4 / 1e9;
        CHECK_MSG(fabs(got - want[i].params) <= 0.01 * want[i].params, "%s: %.3fB parameters, expected %.3fB",
                  want[i].name, got, want[i].params);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_layernorm_gelu_hand_values);
    RUN(test_shapes_param_counts);
    RUN(test_roles_round_trip);
    RUN(test_roles_unknown_names);
    RUN(test_supported_list_matches_table);
    RUN(test_llamacpp_llama3_rope_freqs);
    RUN(test_llamacpp_qwen2);
    RUN(test_llamacpp_mixtral);
    RUN(test_llamacpp_gpt2);
    RUN(test_llamacpp_phi3);
    RUN(test_llamacpp_gemma2);
    RUN(test_llamacpp_mistral_inside_window);
    RUN(test_naive_reference_all);
    RUN(test_profiling_bit_identical_every_arch);
    RUN(test_window_vs_full);
    RUN(test_window_decode_matches_prefill);
    RUN(test_gemma2_paths_and_caps);
    RUN(test_moe_all_experts_is_dense_mixture);
    RUN(test_moe_unchosen_experts_not_read);
    RUN(test_moe_batch_independent);
    RUN(test_rope_freqs_matter);
    RUN(test_loader_errors_name_the_tensor);
    printf("    worst vs llama.cpp (gpt2, gemma2 apart: ggml's f16 GELU): %.2e of the logit range (budget %g); vs naive: %.2e (budget %g)\n",
           worst_ref, REF_TOL, worst_naive, NAIVE_TOL);
    for (size_t i = 0; i < N_ALL_SHAPES; i++) unlink(model_path(all_shapes[i]));
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
