/*
 * test_roofline_probe.c - the roofline beyond the dense llama shape, and the
 * probe against the engine (issue 22, items 2 and 3):
 *   - MoE cost terms (router, top-k experts, distinct experts per forward
 *     call) on the tiny-mixtral and tiny-qwen3moe shapes, by hand;
 *   - gpt2 (LayerNorm, learned positions, fused QKV, GELU FFN without gate),
 *     by hand, and read from a synthesized file like the MoE shapes;
 *   - every KV type kite stores (f32, f16, q8_0, q4_0) prices the KV bytes;
 *   - the caches: the profile's measured_at / avail_pct / gemm_gops and the
 *     bandwidth probe's measured_at / read_avail round-trip; stale entries
 *     are measured again, busy ones flagged (probe_suspect, rl_hw_suspect);
 *   - predicted against measured on a small synthetic q8_0 model, within a
 *     factor of 2 (see test_predicted_vs_measured for why that bound).
 * Every file goes to a mkdtemp folder; the user's cache is never written.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/timing.h"
#include "harness.h"
#include "kite.h"
#include "model/model.h"
#include "tensor/dtype.h"
#include "roofline/probe.h"
#include "roofline/roofline.h"
#include "roofline_helpers.h"
#include "roofline/synth.h"

static char tmpdir[] = "/tmp/kite-test-roofprobe-XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static rl_result predict(const rl_shape *s, int64_t batch, int64_t prompt, uint32_t kvtype) {
    rl_hw hw = synth_hw();
    rl_setting st = {.batch = batch, .prompt = prompt, .gen = 2, .atype = RL_A_F32, .kvtype = kvtype};
    rl_result r;
    memset(&r, 0, sizeof r);
    CHECK(rl_predict(s, &hw, &st, &r) == KITE_OK);
    return r;
}

/* tiny-qwen3moe in f32: d = 64, 8 experts of width 32, top 2.  Per token:
 * router 2*64*8 = 1024 FLOPs over an 8 x 64 matrix (2048 B); each of gate,
 * up and down 2 * 2 experts * 64 * 32 = 8192 FLOPs.  Weight bytes of gate:
 * distinct experts read x 32 * 64 * 4 = x 8192 B, the distinct experts of a
 * forward call of t tokens being min(8, 2t): decode batch 1 -> 2, batch 3
 * -> 6, batch 8 -> 8; prefill of 4 tokens (one call) -> 8; prefill of 600
 * tokens (two calls of 512 and 88) -> 8 per call, 16 in all. */
TEST(test_moe_by_hand) {
    rl_shape s;
    CHECK(rl_shape_from_name("tiny-qwen3moe", KITE_DTYPE_F32, &s) == KITE_OK);
    CHECK_EQ_INT(s.n_expert, 8);
    CHECK_EQ_INT(s.n_expert_used, 2);
    CHECK_EQ_INT(s.n_ff_exp, 32);
    rl_result r = predict(&s, 1, 4, KITE_DTYPE_F32);
    const rl_phase_result *dec = &r.ph[RL_DECODE];
    const rl_op *ro = find(dec, "ffn_router"), *g = find(dec, "ffn_gate"), *dn = find(dec, "ffn_down");
    const rl_op *act = find(dec, "ffn_act");
    CHECK(ro && g && dn && act);
    if (!ro || !g || !dn || !act) return;
    CHECK_NEAR(ro->flops, 1024, 0);
    CHECK_NEAR(ro->w_bytes, 2048, 0);
    CHECK_NEAR(ro->act_bytes, 64 * 4 + 8 * 4, 0);
    CHECK_NEAR(g->flops, 8192, 0);
    CHECK_NEAR(g->w_bytes, 2 * 8192, 0);
    CHECK_NEAR(g->act_bytes, 2 * (64 + 32) * 4, 0);
    CHECK_NEAR(dn->flops, 8192, 0);
    CHECK_NEAR(act->flops, 5 * 2 * 32, 0);
    r = predict(&s, 3, 4, KITE_DTYPE_F32);
    CHECK_NEAR(find(&r.ph[RL_DECODE], "ffn_up")->w_bytes, 6 * 8192, 0);
    CHECK_NEAR(find(&r.ph[RL_DECODE], "ffn_up")->flops, 3 * 8192, 0);
    r = predict(&s, 8, 4, KITE_DTYPE_F32);
    CHECK_NEAR(find(&r.ph[RL_DECODE], "ffn_up")->w_bytes, 8 * 8192, 0);
    /* prefill runs each sequence in its own calls: 8 sequences of 4 tokens read 8 x 8 experts */
    CHECK_NEAR(find(&r.ph[RL_PREFILL], "ffn_gate")->w_bytes, 8 * 8 * 8192, 0);
    r = predict(&s, 1, 4, KITE_DTYPE_F32);
    CHECK_NEAR(find(&r.ph[RL_PREFILL], "ffn_gate")->w_bytes, 8 * 8192, 0);
    CHECK_NEAR(find(&r.ph[RL_PREFILL], "ffn_gate")->flops, 4 * 8192, 0);
    r = predict(&s, 1, 600, KITE_DTYPE_F32);
    CHECK_NEAR(find(&r.ph[RL_PREFILL], "ffn_down")->w_bytes, 16 * 8192, 0);
    CHECK_NEAR(find(&r.ph[RL_PREFILL], "ffn_router")->w_bytes, 2 * 2048, 0); /* read once per call */

    /* tiny-mixtral: 4 experts of the full width 96, top 2: an expert is
     * 96 * 64 * 4 = 24576 B; batch 1 reads 2, batch 2 and batch 5 all 4 */
    CHECK(rl_shape_from_name("tiny-mixtral", KITE_DTYPE_F32, &s) == KITE_OK);
    const int64_t want[][2] = {{1, 2}, {2, 4}, {5, 4}};
    for (int i = 0; i < 3; i++) {
        r = predict(&s, want[i][0], 4, KITE_DTYPE_F32);
        CHECK_NEAR(find(&r.ph[RL_DECODE], "ffn_gate")->w_bytes, (double)want[i][1] * 24576, 0);
    }
    /* a dense FFN of the same width reads its one matrix whatever the batch */
    rl_shape d = s;
    d.n_expert = d.n_expert_used = 0;
    r = predict(&d, 5, 4, KITE_DTYPE_F32);
    CHECK_NEAR(find(&r.ph[RL_DECODE], "ffn_gate")->w_bytes, 24576, 0);
    CHECK(find(&r.ph[RL_DECODE], "ffn_router") == NULL);
    s.n_expert_used = 9; /* more experts used than there are */
    rl_hw hw = synth_hw();
    rl_setting st = {.batch = 1, .prompt = 4, .gen = 2, .kvtype = KITE_DTYPE_F32};
    CHECK(rl_predict(&s, &hw, &st, &r) == KITE_E_ARG);
}

/* tiny-gpt2 in f32: d = 64, f = 256, 4 heads of 16, 4 KV heads (dq = dkv =
 * 64), vocab 512.  Decode of one token: qkv 2*64*192 = 24576 FLOPs over a
 * 192 x 64 matrix (49152 B), writing K and V rows (2*64*4 = 512 B);
 * LayerNorm 8*64 = 512 FLOPs reading gain and bias (512 B); learned positions
 * one f32 row (256 B); GELU 8*256 = 2048 FLOPs; no RoPE and no gate. */
TEST(test_gpt2_by_hand) {
    rl_shape s;
    CHECK(rl_shape_from_name("tiny-gpt2", KITE_DTYPE_F32, &s) == KITE_OK);
    CHECK(s.gpt2);
    rl_result r = predict(&s, 1, 4, KITE_DTYPE_F32);
    const rl_phase_result *dec = &r.ph[RL_DECODE];
    const rl_op *qkv = find(dec, "qkv_proj"), *n = find(dec, "attn_norm"), *pe = find(dec, "pos_embd");
    const rl_op *act = find(dec, "ffn_act"), *up = find(dec, "ffn_up");
    CHECK(qkv && n && pe && act && up);
    if (!qkv || !n || !pe || !act || !up) return;
    CHECK_NEAR(qkv->flops, 24576, 0);
    CHECK_NEAR(qkv->w_bytes, 49152, 0);
    CHECK_NEAR(qkv->kv_bytes, 512, 0);
    CHECK_NEAR(n->flops, 512, 0);
    CHECK_NEAR(n->w_bytes, 512, 0);
    CHECK_NEAR(pe->w_bytes, 256, 0);
    CHECK_NEAR(act->flops, 2048, 0);
    CHECK_NEAR(up->flops, 32768, 0);
    CHECK(!find(dec, "rope") && !find(dec, "ffn_gate") && !find(dec, "q_proj"));
    CHECK(r.decode_tok_s > 0 && isfinite(r.decode_tok_s) && r.prefill_tok_s > 0);
}

/* Shapes read from files: gpt2's fused QKV, the experts' count, width and
 * top-k from the stacked expert tensors and the GGUF keys. */
TEST(test_shapes_from_files) {
    static const char *const names[] = {"tiny-gpt2", "tiny-mixtral", "tiny-qwen3moe", "tiny-qwen3"};
    for (int i = 0; i < 4; i++) {
        const synth_shape *ss = synth_shape_find(names[i]);
        CHECK(ss != NULL);
        if (!ss) continue;
        synth_params p = {.shape = *ss, .type = KITE_DTYPE_F32, .seed = 1, .n_threads = 1};
        const char *path = tmp_path("shape.gguf");
        CHECK_MSG(synth_write(&p, path) == KITE_OK, "%s: %s", names[i], kite_last_error());
        rl_shape f, n;
        CHECK_MSG(rl_shape_from_file(path, &f) == KITE_OK, "%s: %s", names[i], kite_last_error());
        CHECK(rl_shape_from_name(names[i], KITE_DTYPE_F32, &n) == KITE_OK);
        CHECK_EQ_INT(f.gpt2, n.gpt2);
        CHECK_EQ_INT(f.n_expert, n.n_expert);
        CHECK_EQ_INT(f.n_expert_used, n.n_expert_used);
        CHECK_EQ_INT(f.n_ff_exp > 0 ? f.n_ff_exp : f.n_ff, n.n_ff_exp > 0 ? n.n_ff_exp : n.n_ff);
        CHECK_EQ_INT(f.head_dim, n.head_dim);
        rl_result r = predict(&f, 1, 8, KITE_DTYPE_F32);
        CHECK_MSG(r.decode_tok_s > 0 && r.prefill_tok_s > 0, "%s predicted", names[i]);
        unlink(path);
    }
}

/* Every KV type kite stores: the K/V bytes of k_proj are T * dkv * (type
 * bytes per element): f32 4, f16 2, q8_0 34/32, q4_0 18/32; tiny-llama3 has
 * 2 KV heads of 16 (dkv = 32). */
TEST(test_every_kvtype) {
    rl_shape s;
    CHECK(rl_shape_from_name("tiny-llama3", KITE_DTYPE_F32, &s) == KITE_OK);
    const uint32_t kt[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0};
    const double bpe[] = {4, 2, 34.0 / 32, 18.0 / 32};
    for (int i = 0; i < 4; i++) {
        rl_result r = predict(&s, 1, 4, kt[i]);
        CHECK_NEAR(find(&r.ph[RL_DECODE], "k_proj")->kv_bytes, 32 * bpe[i], 1e-9);
    }
}

/* The profile's probe fields round-trip; rl_hw_suspect reads them. */
TEST(test_profile_cache_fields) {
    rl_hw h = synth_hw(), g;
    const double now = (double)time(NULL);
    h.threads = 2;
    h.measured_at = now - 3600;
    h.avail_pct = 93.5;
    h.gemm_gops[KITE_DTYPE_Q8_0] = 123.25;
    const char *path = tmp_path("profile.txt");
    CHECK(rl_hw_save(path, &h) == KITE_OK);
    CHECK(rl_hw_load(path, &g) == KITE_OK);
    CHECK_NEAR(g.measured_at, h.measured_at, 0.5);
    CHECK_NEAR(g.avail_pct, 93.5, 1e-9);
    CHECK_NEAR(g.gemm_gops[KITE_DTYPE_Q8_0], 123.25, 1e-9);
    CHECK_EQ_INT(rl_hw_suspect(&g, now), 0);
    g.measured_at = now - RL_MAX_AGE_S - 1;
    CHECK_EQ_INT(rl_hw_suspect(&g, now), RL_HW_STALE);
    g.measured_at = now;
    g.avail_pct = RL_AVAIL_MIN_PCT - 1;
    CHECK_EQ_INT(rl_hw_suspect(&g, now), RL_HW_BUSY);
    g.measured_at = 0; /* a probed profile from before the field: age unknown */
    CHECK_EQ_INT(rl_hw_suspect(&g, now), RL_HW_STALE | RL_HW_BUSY);
    CHECK_EQ_INT(rl_hw_suspect(rl_hw_builtin("H200"), now), 0); /* data sheets do not age */

    /* a cached busy profile is used as it is (no minute-long re-measure on a loaded machine)
     * and flagged; its name must be the probe's */
    char cpu[128];
    probe_cpu_name(cpu, sizeof cpu);
    snprintf(h.name, sizeof h.name, "probe v3: %.90s, 2 threads", cpu);
    h.measured_at = now;
    h.avail_pct = 40;
    CHECK(rl_hw_save(path, &h) == KITE_OK);
    bool measured = true;
    CHECK(rl_hw_probe(2, false, path, NULL, &g, &measured) == KITE_OK);
    CHECK(!measured);
    CHECK_EQ_INT(rl_hw_suspect(&g, now), RL_HW_BUSY);
    unlink(path);
}

/* The bandwidth probe cache: measured_at and the availability round-trip; a
 * stale or busy entry is measured again by probe_get, a fresh calm one used. */
TEST(test_probe_cache_stale_busy) {
    probe_result r, c;
    CHECK(probe_measure(&r) == KITE_OK);
    const long long now = (long long)time(NULL);
    CHECK(r.measured_at >= now - 60 && r.measured_at <= now);
    for (int t = 1; t <= r.n_read; t++) CHECK(r.read_avail[t] > 0);
    const char *path = tmp_path("probe.txt");
    r.measured_at = now - 10;
    for (int t = 1; t <= r.n_read; t++) r.read_avail[t] = 0.95;
    r.read_busy[1] = 1;
    CHECK(probe_save(path, &r) == KITE_OK);
    CHECK(probe_load(path, &c) == KITE_OK);
    CHECK(c.measured_at == r.measured_at);
    CHECK_NEAR(c.read_avail[1], 0.95, 1e-6);
    CHECK_EQ_INT(c.read_busy[1], 1);
    CHECK_EQ_INT(probe_suspect(&c, now), 0);
    bool measured = true;
    CHECK(probe_get(path, &c, &measured) == KITE_OK);
    CHECK(!measured); /* fresh and calm: used */
    c.read_avail[r.n_read] = 0.5;
    CHECK_EQ_INT(probe_suspect(&c, now), PROBE_BUSY);
    c.read_avail[r.n_read] = 0.95;
    c.measured_at = now - PROBE_MAX_AGE_S - 5;
    CHECK_EQ_INT(probe_suspect(&c, now), PROBE_STALE);
    CHECK(probe_save(path, &c) == KITE_OK);
    CHECK(probe_get(path, &c, &measured) == KITE_OK);
    CHECK(measured); /* stale: measured again, and the fresh figures written back */
    CHECK(c.measured_at >= now);
    CHECK(probe_load(path, &r) == KITE_OK);
    CHECK(r.measured_at == c.measured_at);
    unlink(path);
}

/* The guard make test keeps: the probe times the layouts a loaded model's
 * matrices have (x16 / x32 repacked where the loader repacks), checked on a
 * one-layer model of each type whose matrices are as wide as the probe's
 * (2048 columns).  Deterministic, unlike the timed comparison below. */
TEST(test_probe_times_loaded_layouts) {
    const uint32_t types[] = {KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_0, KITE_DTYPE_F16, KITE_DTYPE_BF16, KITE_DTYPE_F32};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        synth_shape ss = {.name = "small", .n_embd = 2048, .n_ff = 512, .n_layer = 1, .n_head = 16, .n_head_kv = 4,
                          .n_vocab = 512, .n_ctx = 64, .rope_base = 10000.0f, .rms_eps = 1e-5f};
        synth_params p = {.shape = ss, .type = types[i], .seed = 1, .n_threads = 2};
        const char *path = tmp_path("layout.gguf");
        CHECK_MSG(synth_write(&p, path) == KITE_OK, "synth: %s", kite_last_error());
        kite_model *m = NULL;
        CHECK(kite_model_load(path, NULL, &m) == KITE_OK);
        if (!m) continue;
        const weight *w = &m->layers[0].w_up; /* 512 rows of 2048 columns */
        CHECK_EQ_INT(w->type, types[i]);
        uint32_t want = w->layout;
        uint32_t got = rl_probe_layout(types[i], w->ne[1]);
        CHECK_MSG(got == want, "%s: the probe times layout %u, the loader gives %u", dtype_get(types[i])->name,
                  (unsigned)got, (unsigned)want);
        kite_model_free(m);
        unlink(path);
    }
}

/* One probe-predict-measure round: writes the predicted and measured tok/s. */
static void predict_and_measure(const char *path, double *pre_pred, double *pre_meas, double *dec_pred,
                                double *dec_meas, double *avail) {
    *pre_pred = *pre_meas = *dec_pred = *dec_meas = *avail = 0;
    probe_result pr;
    CHECK(probe_measure(&pr) == KITE_OK);
    const uint32_t types[] = {KITE_DTYPE_Q8_0};
    rl_hw hw;
    CHECK(rl_hw_measure(1, &pr, types, 1, &hw) == KITE_OK);
    rl_shape sh;
    CHECK(rl_shape_from_file(path, &sh) == KITE_OK);
    const int64_t P = 128, N = 16;
    rl_setting st = {.batch = 1, .prompt = P, .gen = N, .atype = RL_A_INT8, .kvtype = KITE_DTYPE_F32};
    rl_result r;
    CHECK(rl_predict(&sh, &hw, &st, &r) == KITE_OK);

    kite_model *m = NULL;
    CHECK(kite_model_load(path, NULL, &m) == KITE_OK);
    if (!m) return;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)(P + N + 1);
    cp.n_threads = 1;
    kite_token toks[128];
    for (int i = 0; i < P; i++) toks[i] = (kite_token)(3 + (i * 37) % 4000);
    double best_pre = INFINITY, best_dec = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        kite_ctx *c = NULL;
        CHECK(kite_ctx_new(m, &cp, &c) == KITE_OK);
        if (!c) break;
        double t0 = time_now_s();
        CHECK(kite_ctx_eval(c, toks, (int32_t)P, false) == KITE_OK);
        double t1 = time_now_s();
        for (int i = 0; i < N; i++) CHECK(kite_ctx_eval(c, &toks[i], 1, false) == KITE_OK);
        double t2 = time_now_s();
        best_pre = fmin(best_pre, t1 - t0);
        best_dec = fmin(best_dec, (t2 - t1) / (double)N);
        kite_ctx_free(c);
    }
    kite_model_free(m);
    *pre_pred = r.prefill_tok_s, *pre_meas = (double)P / best_pre;
    *dec_pred = r.decode_tok_s, *dec_meas = 1.0 / best_dec;
    *avail = hw.avail_pct;
}

/* Predicted against measured on a small synthetic q8_0 model (1024 wide,
 * 4 layers, 66 MB: beyond the caches, so decode streams weights as a real
 * model does), 1 thread (a host taking one of two cores away leaves it its
 * core).  The profile is measured for q8_0 only (rl_hw_measure), then the
 * model runs a 128-token prefill and 16 decode steps, best of 3 each.
 * Bound: a factor of 2 either way, in one of up to 3 rounds.  Why not 25%:
 * this runs inside make test on a shared 2-core VM whose speed moves by
 * +-25% from minute to minute (docs/roofline.md, "Accuracy"), and probe and
 * run see different minutes; a probe taken while the host held back the
 * core (availability under 70%) can read 1.5x low, hence up to 3 rounds.
 * The failure this guards against, a probe of the wrong kernels, was a
 * factor of 2-3 (17.9 predicted vs 56.3 measured tok/s, issue 22).  The 25%
 * check is tests/acceptance/issue22_roofline.sh.
 * A timed check, so not part of make test (which runs test files side by
 * side; on a loaded host it failed): `test_roofline_probe --timed` runs it, as
 * tests/acceptance/issue22_roofline.sh does.  make test keeps the
 * deterministic layout check above. */
TEST(test_predicted_vs_measured) {
    synth_shape ss = {.name = "small-q8", .n_embd = 1024, .n_ff = 2816, .n_layer = 4, .n_head = 16, .n_head_kv = 4,
                      .n_vocab = 4096, .n_ctx = 512, .rope_base = 10000.0f, .rms_eps = 1e-5f};
    synth_params p = {.shape = ss, .type = KITE_DTYPE_Q8_0, .seed = 1, .n_threads = 2};
    const char *path = tmp_path("small-q8.gguf");
    CHECK_MSG(synth_write(&p, path) == KITE_OK, "synth: %s", kite_last_error());
    bool ok = false;
    for (int round = 0; round < 3 && !ok; round++) {
        double pp, pm, dp, dm, av;
        predict_and_measure(path, &pp, &pm, &dp, &dm, &av);
        ok = pp > 0 && dp > 0 && pm / pp >= 0.5 && pm / pp <= 2.0 && dm / dp >= 0.5 && dm / dp <= 2.0;
        printf("    small q8_0, 1 thread, round %d: prefill predicted %.1f measured %.1f tok/s (x%.2f), decode "
               "predicted %.1f measured %.1f tok/s (x%.2f); probe availability %.0f%%%s\n",
               round + 1, pp, pm, pp > 0 ? pm / pp : 0, dp, dm, dp > 0 ? dm / dp : 0, av, ok ? "" : ": outside 2x");
    }
    CHECK_MSG(ok, "prefill or decode predicted off by more than 2x in every round");
    unlink(path);
}

int main(int argc, char **argv) {
    const bool timed = argc > 1 && strcmp(argv[1], "--timed") == 0;
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_moe_by_hand);
    RUN(test_gpt2_by_hand);
    RUN(test_shapes_from_files);
    RUN(test_every_kvtype);
    RUN(test_profile_cache_fields);
    RUN(test_probe_cache_stale_busy);
    RUN(test_probe_times_loaded_layouts);
    if (timed) RUN(test_predicted_vs_measured);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
