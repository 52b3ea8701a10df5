/*
 * test_scale.c - the scale tier (issue 22): 4-layer TinyLlama-shape
 * synthetic models at q4_0, q8_0, q4_K_M and f16 (n_embd 2048, n_ff 5632,
 * 32 heads over 4 kv heads, 32000-token vocabulary), where every pass that
 * must reproduce token-by-token decoding gives its logits bit for bit:
 *
 *   verify    multi-token passes after the prompt (k = 1..17 tokens: the flat,
 *             x16/x32 and tiled GEMMs) and the speculative decoder's first
 *             pass, which evaluates the prompt's last token with the drafts;
 *   threads   1, 2 and 3 threads;
 *   batched   the serving engine's forward pass: paged KV, the prompts of two
 *             sequences prefilled in chunks side by side, then mixed batches
 *             of a k-token verify item and another sequence's decode token;
 *   spec      greedy speculative decoding with every drafter (lookup, draft
 *             model, self-speculative, lookahead) against plain greedy;
 *   levels    verify, threads and batched again at every CPU level below the
 *             best (KITE_CPU_LEVEL's levels), each in a child process forked
 *             before any kernel runs (the level is fixed per process).
 *
 * The models are made once by the Makefile (`kite synth ... --layers 4` into
 * build/scale/, KITE_SCALE_DIR overrides); a missing model fails the test.
 * `test_scale --full` is the acceptance size (tests/acceptance/
 * issue22_spec_lossless.sh): every drafter on 10 prompts x 128 tokens per
 * type, the other passes on 2 of them, every type at every level (24
 * tokens).  make test runs 1 prompt x 18 tokens, and one type per level
 * child (SIZES below): about 30 s of CPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/context.h"
#include "model/forward.h"
#include "spec/spec.h"

#define N_TYPES 4
static const char *const types[N_TYPES] = {"q4_0", "q8_0", "q4_k_m", "f16"};

/* SIZES: make test / --full */
typedef struct sizes {
    int n_prompts;   /* prompts per model decoded with every drafter */
    int pass_prompts; /* of those, prompts whose verify, threads and batched passes are checked */
    int n_gen;       /* greedy tokens per prompt (>= 18 for the 17-token pass) */
    int n_thr_tok;   /* tokens compared at 1 and 3 threads */
    int all_levels;  /* 1: every type at every level; 0: one type per level child (level_type) */
    int level_gen[KERN_LEVEL_COUNT]; /* greedy tokens per prompt in the level children (18: up to the
                                        17-token pass, the tiled GEMMs of the unrepacked avx2/avx512 levels) */
    int level_np;    /* their prompt length */
} sizes;
static const sizes small = {1, 1, 18, 3, 0, {7, 18, 18, 7, 7}, 12};
static const sizes full = {10, 2, 128, 128, 1, {24, 24, 24, 24, 24}, 40};
/* make test's child of level lv checks types[level_type[lv]] only (the parent, at the best level, checks
 * them all; --full every type at every level) */
static const int level_type[KERN_LEVEL_COUNT] = {1, 2, 3, 0, 1};
static sizes S;
static char g_dir[512];
static kite_model *g_models[N_TYPES];

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Prompt p: the first len (<= 40) of 40 ids, an 8-token phrase three times
 * between other ids, so that lookup finds n-grams (deterministic, xorshift). */
static int g_np = 40;
static void make_prompt(int p, kite_token *out, int *n) {
    uint32_t s = 0x9E3779B9u * (uint32_t)(p + 1);
    kite_token phrase[8];
    for (int i = 0; i < 8; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        phrase[i] = (kite_token)(100 + s % 31000);
    }
    int k = 0;
    out[k++] = 1; /* BOS */
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 5; i++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            out[k++] = (kite_token)(100 + s % 31000);
        }
        for (int i = 0; i < 8; i++) out[k++] = phrase[i];
    }
    out[k++] = phrase[0];
    out[k++] = phrase[1];
    *n = k < g_np ? k : g_np;
}

static kite_ctx *new_ctx(kite_model *m, int n_threads) {
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = n_threads;
    kite_ctx *c = NULL;
    CHECK_MSG(kite_ctx_new(m, &cp, &c) == KITE_OK, "ctx: %s", kite_last_error());
    return c;
}

/* Plain greedy decoding: one eval of the prompt, then one token per eval.
 * ids[i] is the argmax of logits row i (row 0 from the prompt's last token,
 * row i from feeding ids[i-1]). */
typedef struct ref_run {
    int np, n_gen, V;
    kite_token prompt[64];
    kite_token *ids;
    float *logits; /* [n_gen][V] */
} ref_run;

static int ref_decode(kite_model *m, int p, int n_gen, int n_threads, ref_run *r) {
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    r->V = mi.n_vocab;
    r->n_gen = n_gen;
    make_prompt(p, r->prompt, &r->np);
    r->ids = malloc(sizeof *r->ids * (size_t)n_gen);
    r->logits = malloc(sizeof(float) * (size_t)n_gen * (size_t)r->V);
    kite_ctx *c = new_ctx(m, n_threads);
    if (!c || !r->ids || !r->logits) return 0;
    int ok = kite_ctx_eval(c, r->prompt, r->np, false) == KITE_OK;
    for (int i = 0; ok && i < n_gen; i++) {
        if (i > 0) ok = kite_ctx_eval(c, &r->ids[i - 1], 1, false) == KITE_OK;
        if (!ok) break;
        memcpy(r->logits + (size_t)i * r->V, kite_ctx_logits(c, -1), sizeof(float) * (size_t)r->V);
        r->ids[i] = argmax(r->logits + (size_t)i * r->V, r->V);
    }
    kite_ctx_free(c);
    CHECK_MSG(ok, "reference decode: %s", kite_last_error());
    return ok;
}

static void ref_free(ref_run *r) {
    free(r->ids);
    free(r->logits);
}

/* Rows [0, n) of got against reference rows [row0, row0 + n): bit for bit. */
static int same_rows(const char *what, const char *type, const ref_run *r, int row0, const float *got, int n) {
    for (int i = 0; i < n; i++) {
        const float *a = r->logits + (size_t)(row0 + i) * r->V, *b = got + (size_t)i * r->V;
        if (memcmp(a, b, sizeof(float) * (size_t)r->V) != 0) {
            int v = 0;
            while (v < r->V && memcmp(&a[v], &b[v], sizeof(float)) == 0) v++;
            CHECK_MSG(0, "%s %s: logits row %d (generated token %d) differ at id %d: %.9g vs %.9g", type, what,
                      row0 + i, row0 + i, v, (double)a[v], (double)b[v]);
            return 0;
        }
    }
    return 1;
}

/* Multi-token passes after the prompt against decode: for each k, the first
 * o = k % 5 generated tokens in one pass, then k tokens in one pass (every
 * row compared); then the speculative decoder's layout (prompt minus its last
 * token, then that token and k more in one pass). */
static void check_verify(const char *type, kite_model *m, const ref_run *r, int n_threads) {
    static const int ks[] = {1, 3, 5, 12, 16, 17};
    kite_ctx *c = new_ctx(m, n_threads);
    if (!c) return;
    if (kite_ctx_eval(c, r->prompt, r->np, false) != KITE_OK ||
        !same_rows("prompt pass", type, r, 0, kite_ctx_logits(c, -1), 1))
        goto out;
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
        const int k = ks[j];
        int o = k % 5;
        if (o + k + 1 > r->n_gen) o = 0;
        if (o + k + 1 > r->n_gen) continue;
        kite_ctx_truncate(c, r->np);
        if (o > 0) {
            CHECK(kite_ctx_eval(c, r->ids, o, true) == KITE_OK);
            if (!same_rows("pass of the first tokens", type, r, 1, kite_ctx_logits(c, 0), o)) goto out;
        }
        char what[64];
        snprintf(what, sizeof what, "%d-token pass", k);
        CHECK(kite_ctx_eval(c, r->ids + o, k, true) == KITE_OK);
        if (!same_rows(what, type, r, o + 1, kite_ctx_logits(c, 0), k)) goto out;
    }
    /* the speculative decoder's first pass: the prompt's last token with 5 drafts */
    kite_ctx_truncate(c, 0);
    kite_token v[6] = {r->prompt[r->np - 1]};
    memcpy(v + 1, r->ids, 5 * sizeof *v);
    CHECK(ctx_set_prompt(c, r->np) == KITE_OK);
    CHECK(kite_ctx_eval(c, r->prompt, r->np - 1, false) == KITE_OK);
    CHECK(kite_ctx_eval(c, v, 6, true) == KITE_OK);
    same_rows("first verification pass", type, r, 0, kite_ctx_logits(c, 0), 6);
out:
    kite_ctx_free(c);
}

/* Plain decoding at another thread count: the same bits. */
static void check_threads(const char *type, kite_model *m, const ref_run *r, int p, int n_threads) {
    ref_run t = {0};
    if (ref_decode(m, p, S.n_thr_tok < r->n_gen ? S.n_thr_tok : r->n_gen, n_threads, &t)) {
        char what[32];
        snprintf(what, sizeof what, "decode at -t %d", n_threads);
        same_rows(what, type, r, 0, t.logits, t.n_gen);
    }
    ref_free(&t);
}

/* The serving engine's forward pass (paged KV, several sequences per pass):
 * sequences A (reference a) and B (reference b) prefilled in chunks side by
 * side on the prompt path, then passes of A's next k tokens (a verify item)
 * beside B's next token, all on the decode path. */
static void check_batched(const char *type, kite_model *m, const ref_run *a, const ref_run *b, int n_threads) {
    enum { BLK = 16, N_CTX = 1024 };
    kite_ctx *c = NULL;
    if (ctx_new_sized(m, N_CTX, 64, BLK, n_threads, &c) != KITE_OK) {
        CHECK_MSG(0, "paged ctx: %s", kite_last_error());
        return;
    }
    int32_t bt_a[N_CTX / BLK / 2], bt_b[N_CTX / BLK / 2];
    for (int i = 0; i < N_CTX / BLK / 2; i++) bt_a[i] = 2 * i + 1, bt_b[i] = 2 * i; /* interleaved blocks */
    float *lg = malloc(sizeof(float) * 20 * (size_t)a->V);
    kite_token tok[64];
    const int ca = a->np / 3 + 1, cb = b->np * 2 / 3; /* first chunk lengths */
    fwd_seq f[2] = {{.block_table = bt_a, .pos0 = 0, .n_tok = ca, .n_out = 0, .attn_path = ATTN_PATH_FLASH},
                    {.block_table = bt_b, .pos0 = 0, .n_tok = cb, .n_out = 0, .attn_path = ATTN_PATH_FLASH}};
    memcpy(tok, a->prompt, ca * sizeof *tok);
    memcpy(tok + ca, b->prompt, cb * sizeof *tok);
    llama_forward_batch(c, tok, f, 2, lg);
    f[0] = (fwd_seq){.block_table = bt_a, .pos0 = ca, .n_tok = a->np - ca, .n_out = 1, .attn_path = ATTN_PATH_FLASH};
    f[1] = (fwd_seq){.block_table = bt_b, .pos0 = cb, .n_tok = b->np - cb, .n_out = 1, .attn_path = ATTN_PATH_FLASH};
    memcpy(tok, a->prompt + ca, (size_t)(a->np - ca) * sizeof *tok);
    memcpy(tok + a->np - ca, b->prompt + cb, (size_t)(b->np - cb) * sizeof *tok);
    llama_forward_batch(c, tok, f, 2, lg);
    if (!same_rows("batched chunked prefill (A)", type, a, 0, lg, 1) ||
        !same_rows("batched chunked prefill (B)", type, b, 0, lg + a->V, 1))
        goto out;
    /* A: tokens [ga, ga + k) of its continuation as one item (rows = a's rows ga+1..); B: one token */
    for (int ga = 0, gb = 0, k = 3; ga + k + 1 <= a->n_gen && gb + 2 <= b->n_gen; ga += k, gb++, k = k % 16 + 3) {
        f[0] = (fwd_seq){.block_table = bt_a, .pos0 = a->np + ga, .n_tok = k, .n_out = k, .attn_path = ATTN_PATH_SPLITKV};
        f[1] = (fwd_seq){.block_table = bt_b, .pos0 = b->np + gb, .n_tok = 1, .n_out = 1, .attn_path = ATTN_PATH_SPLITKV};
        memcpy(tok, a->ids + ga, (size_t)k * sizeof *tok);
        tok[k] = b->ids[gb];
        llama_forward_batch(c, tok, f, 2, lg);
        if (!same_rows("batched verify item (A)", type, a, ga + 1, lg, k) ||
            !same_rows("batched decode (B)", type, b, gb + 1, lg + (size_t)k * a->V, 1))
            break;
    }
out:
    free(lg);
    kite_ctx_free(c);
}

/* Greedy speculative decoding with drafter dr: the ids of plain greedy. */
static void check_spec(const char *type, kite_model *m, const ref_run *r, spec_drafter dr, kite_model *draft) {
    kite_ctx *c = new_ctx(m, 2);
    if (!c) return;
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    bool skip[64] = {false};
    skip[1] = skip[2] = true;
    kite_sampler_params sp = kite_sampler_default_params();
    sp.temperature = 0;
    spec_params p = spec_default_params();
    p.drafter = dr;
    p.draft_model = draft;
    p.skip_layers = skip;
    p.n_skip = mi.n_layer;
    spec_decoder *d = NULL;
    kite_token *got = malloc(sizeof *got * (size_t)(r->n_gen + SPEC_MAX_DRAFT + 1));
    int n = 0, rc = spec_new(c, &sp, &p, &d);
    if (rc == KITE_OK) rc = spec_begin(d, r->prompt, r->np);
    while (rc == KITE_OK && n < r->n_gen) {
        int32_t k = 0;
        rc = spec_step(d, r->n_gen - n, got + n, &k);
        n += k;
    }
    static const char *const names[] = {"", "draft model", "self-speculative", "lookup", "lookahead"};
    CHECK_MSG(rc == KITE_OK, "%s %s: %s", type, names[dr], kite_last_error());
    int first = -1;
    for (int i = 0; i < r->n_gen && first < 0; i++)
        if (got[i] != r->ids[i]) first = i;
    CHECK_MSG(first < 0, "%s %s: token %d is %d, plain greedy gives %d", type, names[dr], first,
              first >= 0 ? got[first] : 0, first >= 0 ? r->ids[first] : 0);
    if (d && rc == KITE_OK && S.n_prompts > 1) {
        const spec_stats *st = spec_get_stats(d);
        printf("    %-6s %-16s %3lld passes, %lld/%lld drafts accepted\n", type, names[dr], (long long)st->n_steps,
               (long long)st->n_accepted, (long long)st->n_drafted);
    }
    spec_free(d);
    free(got);
    kite_ctx_free(c);
}

static kite_model *model(int i) {
    if (g_models[i]) return g_models[i];
    char path[640];
    snprintf(path, sizeof path, "%s/tl4-%s.gguf", g_dir, types[i]);
    kite_model_params mp = kite_model_default_params();
    int rc = kite_model_load(path, &mp, &g_models[i]);
    CHECK_MSG(rc == KITE_OK, "load %s: %s (make test generates it with kite synth)", path, kite_last_error());
    return rc == KITE_OK ? g_models[i] : NULL;
}

/* For types[ti] where only[ti] (every type: only NULL), n_gen greedy tokens
 * per prompt: verify, threads and batched passes on the first n_pass prompts,
 * every drafter on the first n_spec. */
static void check_types(const bool *only, int n_gen, int n_pass, int n_spec) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        if (only && !only[ti]) continue;
        kite_model *m = model(ti);
        /* draft model: the same weights at another type (q8_0 drafts for q4_0, q4_0 for the rest) */
        kite_model *draft = n_spec > 0 ? model(ti == 0 ? 1 : 0) : NULL;
        if (!m || (n_spec > 0 && !draft)) continue;
        for (int p = 0; p < n_pass || p < n_spec; p++) {
            ref_run a = {0}, b = {0};
            if (!ref_decode(m, p, n_gen, 2, &a)) goto next;
            if (p < n_pass) {
                check_verify(types[ti], m, &a, p % 2 ? 1 : 2);
                if (p == 0) {
                    check_threads(types[ti], m, &a, p, 1);
                    check_threads(types[ti], m, &a, p, 3);
                }
                if (ref_decode(m, p + 100, n_gen, 2, &b)) check_batched(types[ti], m, &a, &b, 3 - p % 3);
                if (ti == 3 && p == 0) { /* f16 prefill with the widened-block kernel (an option) too */
                    const bool was = kern_opt_on(KERN_OPT_F16_WIDEN);
                    kern_opt_set(KERN_OPT_F16_WIDEN, !was);
                    check_verify("f16 (f16-widen toggled)", m, &a, 2);
                    kern_opt_set(KERN_OPT_F16_WIDEN, was);
                }
            }
            if (p < n_spec) {
                check_spec(types[ti], m, &a, SPEC_DRAFT_LOOKUP, NULL);
                check_spec(types[ti], m, &a, SPEC_DRAFT_MODEL, draft);
                check_spec(types[ti], m, &a, SPEC_DRAFT_SELF, NULL);
                check_spec(types[ti], m, &a, SPEC_DRAFT_LOOKAHEAD, NULL);
            }
        next:
            ref_free(&a);
            ref_free(&b);
        }
    }
}

static void check_type(int ti) {
    bool only[N_TYPES] = {false};
    only[ti] = true;
    check_types(only, S.n_gen, S.pass_prompts, S.n_prompts);
}
TEST(test_scale_q4_0) { check_type(0); }
TEST(test_scale_q8_0) { check_type(1); }
TEST(test_scale_q4_k_m) { check_type(2); }
TEST(test_scale_f16) { check_type(3); }

/* Children, one per level below the best: verify, threads and batched there
 * (the drafters only at the best level: spec.c has no per-level code, and
 * what it needs from the levels is exactly these passes). */
static int run_level_children(void) {
    int bad = 0;
    for (int lv = KERN_LEVEL_SCALAR; lv < (int)kern_level_max(); lv++) {
        fflush(stdout);
        const pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            kern_config cfg = kern_config_default();
            cfg.level_cap = lv;
            if (!kern_configure(&cfg) || kern_table()->level != (kern_level)lv) _exit(2);
            bool only[N_TYPES] = {false};
            for (int i = 0; i < N_TYPES; i++) only[i] = S.all_levels || i == level_type[lv];
            g_np = S.level_np;
            check_types(only, S.level_gen[lv], S.pass_prompts, 0);
            printf("  level %-10s %s\n", kern_level_name((kern_level)lv), harness_failed_checks ? "FAILED" : "ok");
            fflush(stdout);
            _exit(harness_failed_checks ? 1 : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("    level %s: FAILED (status %d)\n", kern_level_name((kern_level)lv), st);
            bad++;
        }
    }
    return bad;
}

static int g_level_failures;
TEST(test_scale_levels) {
    CHECK_MSG(g_level_failures == 0, "%d CPU level(s) failed (their checks are printed above)", g_level_failures);
}

int main(int argc, char **argv) {
    S = argc > 1 && strcmp(argv[1], "--full") == 0 ? full : small;
    const char *dir = getenv("KITE_SCALE_DIR");
    snprintf(g_dir, sizeof g_dir, "%s", dir && *dir ? dir : "build/scale");
    g_level_failures = run_level_children(); /* first: no kernel has run in this process yet */
    RUN(test_scale_levels);
    RUN(test_scale_q4_0);
    RUN(test_scale_q8_0);
    RUN(test_scale_q4_k_m);
    RUN(test_scale_f16);
    for (int i = 0; i < N_TYPES; i++) kite_model_free(g_models[i]);
    return harness_summary("tests/unit/test_scale.c");
}
