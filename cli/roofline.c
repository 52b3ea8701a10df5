/*
 * roofline.c - `kite roofline`: per-op roofline analysis of prefill and
 * decode for a model file or a named shape on a hardware profile, with
 * sweeps, an SVG (and gnuplot PNG) chart and a predicted-vs-measured
 * comparison on this machine (a real forward pass with the context's
 * per-op profile, kite_ctx_set_profiling).  The model is src/roofline/ (docs/roofline.md).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "kite.h"
#include "roofline/roofline.h"
#include "roofline/synth.h"

#define CMD "roofline"

static bool parse_range(const char *s, const char *key, int64_t *lo, int64_t *hi) {
    size_t n = strlen(key);
    if (strncmp(s, key, n) || s[n] != '=') return false;
    char *end;
    long long a = strtoll(s + n + 1, &end, 10);
    if (strncmp(end, "..", 2)) return false;
    long long b = strtoll(end + 2, &end, 10);
    if (*end || a < 1 || b < a || b > (1 << 24)) return false;
    *lo = a;
    *hi = b;
    return true;
}

static bool is_int_kernel(uint32_t t) {
    return t == KITE_DTYPE_Q4_0 || t == KITE_DTYPE_Q8_0 || t == KITE_DTYPE_Q4_K || t == KITE_DTYPE_Q5_K ||
           t == KITE_DTYPE_Q6_K || t == KITE_DTYPE_IQ4_XS;
}

/* int8 for the types kite runs on int8 dot kernels, bf16 for 16-bit weights
 * (tensor-core style matmul), else f32. */
static int default_atype(uint32_t t) {
    if (is_int_kernel(t)) return RL_A_INT8;
    if (t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16) return RL_A_BF16;
    return RL_A_F32;
}

/* tok/s of phase p with the weights and atype replaced. */
static double variant(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, uint32_t wt, int at, int p) {
    rl_shape s2 = *sh;
    rl_setting t2 = *st;
    s2.wtype = s2.out_type = wt;
    t2.atype = at;
    rl_result r;
    if (rl_predict(&s2, hw, &t2, &r) != KITE_OK) return 0;
    return p == RL_PREFILL ? r.prefill_tok_s : r.decode_tok_s;
}

static void print_sweep(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, int64_t blo, int64_t bhi,
                        int64_t plo, int64_t phi) {
    rl_result r;
    rl_setting s2 = *st;
    if (bhi > 0) {
        printf("\n## decode sweep (prompt %" PRId64 ", gen %" PRId64 ")\n\n", st->prompt, st->gen);
        printf("| batch | bound | compute/memory | decode tok/s | W4A16 (q4_0, bf16) | W8A8 (q8_0, int8) |\n");
        printf("|---:|---|---:|---:|---:|---:|\n");
        for (int64_t b = blo; b <= bhi; b *= 2) {
            s2.batch = b;
            if (rl_predict(sh, hw, &s2, &r) != KITE_OK) return;
            const rl_phase_result *ph = &r.ph[RL_DECODE];
            double w4 = variant(sh, hw, &s2, KITE_DTYPE_Q4_0, RL_A_BF16, RL_DECODE);
            double w8 = variant(sh, hw, &s2, KITE_DTYPE_Q8_0, RL_A_INT8, RL_DECODE);
            printf("| %" PRId64 " | %s | %.2f | %.1f | %.1f (x%.2f) | %.1f (x%.2f) |\n", b,
                   ph->compute_bound ? "compute" : "memory", ph->t_compute / ph->t_memory, r.decode_tok_s, w4,
                   w4 / r.decode_tok_s, w8, w8 / r.decode_tok_s);
        }
        s2.batch = st->batch;
        int64_t x = rl_decode_crossover(sh, hw, st, NULL, bhi);
        int64_t xq = rl_decode_crossover(sh, hw, st, "ffn_up", bhi);
        if (x)
            printf("\ndecode turns compute-bound at batch %" PRId64 " (ffn_up alone at %" PRId64 ")\n", x, xq);
        else
            printf("\ndecode stays memory-bound up to batch %" PRId64 " (ffn_up alone turns at %" PRId64
                   "; 0 = never: attention's KV reads grow with the batch)\n", bhi, xq);
    }
    if (phi > 0) {
        s2.batch = st->batch;
        printf("\n## prefill sweep (batch %" PRId64 ")\n\n", st->batch);
        printf("| prompt | bound | compute/memory | TTFT s | prefill tok/s | W4A16 (q4_0, bf16) | W8A8 (q8_0, int8) |\n");
        printf("|---:|---|---:|---:|---:|---:|---:|\n");
        for (int64_t p = plo; p <= phi; p *= 2) {
            s2.prompt = p;
            if (rl_predict(sh, hw, &s2, &r) != KITE_OK) return;
            const rl_phase_result *ph = &r.ph[RL_PREFILL];
            double w4 = variant(sh, hw, &s2, KITE_DTYPE_Q4_0, RL_A_BF16, RL_PREFILL);
            double w8 = variant(sh, hw, &s2, KITE_DTYPE_Q8_0, RL_A_INT8, RL_PREFILL);
            printf("| %" PRId64 " | %s | %.2f | %.4g | %.1f | %.1f (x%.2f) | %.1f (x%.2f) |\n", p,
                   ph->compute_bound ? "compute" : "memory", ph->t_compute / ph->t_memory, r.ttft_s, r.prefill_tok_s,
                   w4, w4 / r.prefill_tok_s, w8, w8 / r.prefill_tok_s);
        }
        int64_t x = rl_prefill_crossover(sh, hw, st, plo, phi);
        if (x)
            printf("\nprefill is compute-bound from prompt %" PRId64 "\n", x);
        else
            printf("\nprefill stays memory-bound up to prompt %" PRId64 "\n", phi);
    }
    printf("\nReading: in a memory-bound regime time follows bytes, so weight-only quantization (fewer weight\n"
           "bytes) helps and low-precision compute does not; in a compute-bound regime time follows the\n"
           "matmul peak, so weight-activation quantization (INT8 compute) helps and weight-only does not.\n");
}

/* Measured seconds of a profile op type for the predicted op `name`: the
 * fused attention kernel covers attn_scores + softmax + attn_values. */
static const char *profile_op_of(const char *name) {
    if (!strcmp(name, "attn_scores") || !strcmp(name, "softmax") || !strcmp(name, "attn_values")) return "attention";
    if (!strcmp(name, "pos_embd")) return "embed"; /* gpt2's learned positions are added in the embedding step */
    return name;
}

#define DECODE_REPS 3 /* decode runs of --compare (odd: one has the median total) */

/* Runs `model` here through the public API with per-op profiling on
 * (kite_ctx_set_profiling): prefill of st->prompt random tokens into an empty
 * context (best total of 3 runs, after a warm-up), then DECODE_REPS runs of
 * st->gen decode steps from there (context prompt..prompt+gen, mean as
 * predicted), reporting the mean per step of the run with the median total.
 * Prints predicted vs measured per op type and in total. */
static int compare(const char *model_path, const rl_setting *st, const rl_result *r, int n_threads) {
    if (st->batch != 1) return cli_usage_error(CMD, "--compare runs one sequence: use --batch 1");
    int status = 1;
    kite_model *m = NULL;
    kite_ctx *ctx = NULL;
    kite_token *ids = NULL;
    kite_model_params mp = config_model_params();
    if (kite_model_load(model_path, &mp, &m) != KITE_OK) goto fail;
    kite_model_info mi;
    kite_model_get_info(m, &mi);
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = (int32_t)(st->prompt + st->gen + 1);
    cp.n_threads = n_threads;
    if (kite_ctx_new(m, &cp, &ctx) != KITE_OK) goto fail;
    int64_t n_ids = st->prompt + st->gen;
    if (!(ids = malloc(sizeof *ids * (size_t)n_ids))) goto fail;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n_ids; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        ids[i] = (kite_token)(seed % (uint64_t)mi.n_vocab);
    }
    double meas[2][KITE_PROFILE_N_OPS] = {{0}}, cur[KITE_PROFILE_N_OPS];
    const char *names[KITE_PROFILE_N_OPS];
    kite_ctx_profile(ctx, NULL, names, KITE_PROFILE_N_OPS);
    double best = INFINITY;
    for (int rep = -1; rep < 3; rep++) { /* rep -1: warm-up */
        if (kite_ctx_truncate(ctx, 0) != KITE_OK || kite_ctx_set_profiling(ctx, true) != KITE_OK ||
            kite_ctx_eval(ctx, ids, (int32_t)st->prompt, false) != KITE_OK)
            goto fail;
        kite_ctx_profile(ctx, cur, NULL, KITE_PROFILE_N_OPS);
        double tot = 0;
        for (int i = 0; i < KITE_PROFILE_N_OPS; i++) tot += cur[i];
        if (rep >= 0 && tot < best) best = tot, memcpy(meas[RL_PREFILL], cur, sizeof cur);
    }
    /* decode: DECODE_REPS runs of st->gen steps from the prompt; the run
     * with the median total is reported (one run on a shared machine can
     * catch a burst of someone else's load) */
    double dec[DECODE_REPS][KITE_PROFILE_N_OPS], dec_tot[DECODE_REPS];
    for (int rep = 0; rep < DECODE_REPS; rep++) {
        if (kite_ctx_truncate(ctx, (int32_t)st->prompt) != KITE_OK || kite_ctx_set_profiling(ctx, true) != KITE_OK)
            goto fail;
        for (int64_t i = 0; i < st->gen; i++)
            if (kite_ctx_eval(ctx, &ids[st->prompt + i], 1, false) != KITE_OK) goto fail;
        kite_ctx_profile(ctx, dec[rep], NULL, KITE_PROFILE_N_OPS);
        dec_tot[rep] = 0;
        for (int i = 0; i < KITE_PROFILE_N_OPS; i++) dec_tot[rep] += dec[rep][i];
    }
    kite_ctx_set_profiling(ctx, false);
    int med = 0;
    for (int a = 0; a < DECODE_REPS; a++) { /* the run with as many totals below it as above */
        int below = 0, above = 0;
        for (int b = 0; b < DECODE_REPS; b++) {
            below += b != a && (dec_tot[b] < dec_tot[a] || (dec_tot[b] == dec_tot[a] && b < a));
            above += b != a && (dec_tot[b] > dec_tot[a] || (dec_tot[b] == dec_tot[a] && b > a));
        }
        if (below == above) med = a;
    }
    for (int i = 0; i < KITE_PROFILE_N_OPS; i++)
        meas[RL_DECODE][i] = dec[med][i] / (st->gen > 0 ? (double)st->gen : 1.0);

    for (int p = 0; p < 2; p++) {
        if (p == RL_DECODE && st->gen == 0) break;
        const rl_phase_result *ph = &r->ph[p];
        printf("\n## %s: predicted vs measured (a real forward pass, kite_ctx profile, %d threads)\n\n",
               p ? "decode (per step)" : "prefill", n_threads);
        if (p == RL_DECODE) {
            printf("Decode runs (ms per step):");
            for (int k = 0; k < DECODE_REPS; k++) printf(" %.3f", dec_tot[k] / (double)st->gen * 1e3);
            printf("; the median run is shown.\n\n");
        }
        printf("| op type | predicted ms | measured ms | measured/predicted |\n|---|---:|---:|---:|\n");
        double pt = 0, mt = 0;
        for (int j = 0; j < KITE_PROFILE_N_OPS; j++) {
            double pr = 0;
            bool modelled = false;
            for (int i = 0; i < ph->n_ops; i++)
                if (!strcmp(profile_op_of(ph->ops[i].name), names[j])) {
                    pr += ph->ops[i].time * (double)ph->ops[i].count;
                    modelled = true;
                }
            pt += pr;
            mt += meas[p][j];
            if (modelled)
                printf("| %s | %.3f | %.3f | %.2f |\n", names[j], pr * 1e3, meas[p][j] * 1e3,
                       pr > 0 ? meas[p][j] / pr : 0.0);
            else
                printf("| %s (not modelled) | - | %.3f | - |\n", names[j], meas[p][j] * 1e3);
        }
        double toks = p ? 1.0 : (double)st->prompt;
        printf("| **total** | %.3f | %.3f | %.2f |\n", pt * 1e3, mt * 1e3, mt / pt);
        printf("\n%s: predicted %.2f tok/s, measured %.2f tok/s\n", p ? "decode" : "prefill", toks / pt, toks / mt);
    }
    status = 0;
fail:
    if (status) fprintf(stderr, "kite %s: --compare: %s\n", CMD, kite_last_error());
    free(ids);
    kite_ctx_free(ctx);
    kite_model_free(m);
    return status;
}

static bool have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

static int write_png(const char *png, const rl_hw *hw, const rl_result *r) {
    char dat[64], gp[64];
    snprintf(dat, sizeof dat, "/tmp/kite-roofline-%d.dat", (int)getpid());
    snprintf(gp, sizeof gp, "/tmp/kite-roofline-%d.gp", (int)getpid());
    FILE *f = fopen(dat, "w");
    if (!f) return 1;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < r->ph[p].n_ops; i++) {
            const rl_op *o = &r->ph[p].ops[i];
            if (o->flops > 0 && isfinite(o->intensity))
                fprintf(f, "%g %g %s%s\n", o->intensity, o->flops / o->time / 1e9, p ? "d:" : "p:", o->name);
        }
    fclose(f);
    if (!(f = fopen(gp, "w"))) return 1;
    fprintf(f, "set terminal png size 1000,650\nset output '%s'\nset logscale xy\nset xlabel 'FLOP/byte'\n"
               "set ylabel 'GFLOP/s'\nbw=%g\nf32=%g\nbf=%g\ni8=%g\nset xrange [1e-2:1e4]\n"
               "plot (x*bw<f32?x*bw:f32) t 'FP32 roof', (x*bw<bf?x*bw:bf) t 'BF16 roof', "
               "(x*bw<i8?x*bw:i8) t 'INT8 roof', '%s' u 1:2 w p pt 7 t 'ops', '' u 1:2:3 w labels offset 1,0.5 "
               "font ',7' notitle\n",
            png, hw->mem_bw_gbs, hw->fp32_gflops, hw->bf16_gflops > 0 ? hw->bf16_gflops : hw->fp32_gflops,
            hw->int8_gops > 0 ? hw->int8_gops : hw->fp32_gflops, dat);
    fclose(f);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "gnuplot %s", gp);
    int rc = system(cmd);
    remove(dat);
    remove(gp);
    if (rc != 0) fprintf(stderr, "kite %s: gnuplot failed\n", CMD);
    return rc != 0;
}

typedef struct roofline_opts {
    const char *model, *shape, *hwname, *wtype, *atype, *kvtype, *svg, *png;
    int64_t batch, prompt, gen, layers, threads;
    int64_t blo, bhi, plo, phi;
    bool json, cmp, reprobe, sweep;
} roofline_opts;

/* --sweep [batch=LO..HI] [prompt=LO..HI]: takes the following arguments that hold '='. */
static int opt_sweep(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    roofline_opts *r = state;
    (void)o, (void)flag;
    int k = 0;
    r->sweep = true;
    for (; k < n && strchr(vals[k], '='); k++)
        if (!parse_range(vals[k], "batch", &r->blo, &r->bhi) && !parse_range(vals[k], "prompt", &r->plo, &r->phi))
            return cli_usage_error(cmd, "--sweep: '%s' is not batch=LO..HI or prompt=LO..HI", vals[k]), -1;
    if (!r->bhi && !r->phi) r->blo = 1, r->bhi = 256, r->plo = 128, r->phi = 32768;
    return k;
}

static const cli_opt roofline_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model: hyperparameters and weight types from the file",
     .kind = CLI_STR, CLI_AT(roofline_opts, model)},
    {.names = "--shape", .arg = "NAME", .help = "any shape of kite synth: %s", .choices_fn = synth_shape_list,
     .kind = CLI_STR, CLI_AT(roofline_opts, shape), .def_doc = "tinyllama-1.1b"},
    {.names = "--layers", .arg = "N", .help = "override the layer count (compare with `kite synth --layers N`)",
     .kind = CLI_INT, CLI_AT(roofline_opts, layers), .min = 1, .max = 4096},
    {.names = "--hw", .arg = "X",
     .help = "%s, a profile file, or probe (this machine,\nmeasured once and cached)",
     .choices_fn = rl_hw_builtin_list, .kind = CLI_STR, CLI_AT(roofline_opts, hwname), .def = "probe"},
    {.names = "-t, --threads", .arg = "N", .help = "threads for probe and --compare", .kind = CLI_INT,
     CLI_AT(roofline_opts, threads), .min = 1, .max = 256, .def_doc = "online CPUs"},
    {.names = "--batch", .arg = "B", .help = "sequences per batch", .kind = CLI_INT, CLI_AT(roofline_opts, batch),
     .min = 1, .max = 1 << 20, .def = "1"},
    {.names = "--prompt", .arg = "L", .help = "prompt tokens", .kind = CLI_INT, CLI_AT(roofline_opts, prompt),
     .min = 1, .max = 1 << 24, .def = "128"},
    {.names = "--gen", .arg = "N", .help = "generated tokens; decode is costed at context L + N/2", .kind = CLI_INT,
     CLI_AT(roofline_opts, gen), .min = 0, .max = 1 << 24, .def = "32"},
    {.names = "--wtype", .arg = "T", .help = "weight type: any GGUF type name", .kind = CLI_STR,
     CLI_AT(roofline_opts, wtype), .def_doc = "the file's, else f16"},
    {.names = "--atype", .arg = "T",
     .help = "f32|bf16|int8: activation bytes and matmul peak (default int8 for\n"
             "q4_0/q8_0/q4_K/q6_K, which kite runs on int8 dot kernels, bf16 for\n"
             "f16/bf16 weights, else f32)",
     .kind = CLI_STR, CLI_AT(roofline_opts, atype)},
    {.names = "--kvtype", .arg = "T", .help = "f32|f16|q8_0|q4_0 KV cache (f32 is kite's default)", .kind = CLI_STR,
     CLI_AT(roofline_opts, kvtype), .def = "f32"},
    {.names = "--json", .help = "end with one JSON line (prefill_tok_s, decode_tok_s, ttft_s, ops)",
     .kind = CLI_FLAG, CLI_AT(roofline_opts, json)},
    {.names = "--sweep", .arg = "A [B]",
     .help = "batch=LO..HI and/or prompt=LO..HI (doubling): bound regimes, crossovers\n"
             "and the effect of W4A16 vs W8A8 quantization (default batch=1..256 prompt=128..32768)",
     .kind = CLI_FN, .nargs = CLI_NARGS_REST, .fn = opt_sweep, .example = "batch=1..4"},
    {.names = "--svg", .arg = "FILE", .help = "write the roofline chart as SVG", .kind = CLI_STR,
     CLI_AT(roofline_opts, svg)},
    {.names = "--png", .arg = "FILE", .help = "the chart through gnuplot (an error if gnuplot is not installed)",
     .kind = CLI_STR, CLI_AT(roofline_opts, png)},
    {.names = "--compare",
     .help = "run -m MODEL here with per-op profiling (batch 1); print predicted vs\nmeasured per op type and in total",
     .kind = CLI_FLAG, CLI_AT(roofline_opts, cmp)},
    {.names = "--reprobe", .help = "measure the probe profile again", .kind = CLI_FLAG,
     CLI_AT(roofline_opts, reprobe)},
};

const cli_spec cli_spec_roofline = {
    .cmd = CMD,
    .usage = "usage: kite roofline [-m MODEL | --shape NAME] [--hw NAME|FILE|probe] [--batch B] [--prompt L]\n"
             "                     [--gen N] [--wtype T] [--atype T] [--kvtype T] [--layers N] [-t THREADS]\n"
             "                     [--json] [--sweep batch=A..B prompt=C..D] [--svg FILE] [--png FILE]\n"
             "                     [--compare] [--reprobe]\n"
             "\n"
             "Per-op FLOPs, bytes, arithmetic intensity, bound and predicted time for prefill and decode\n"
             "(docs/roofline.md).\n",
    CLI_TABLE(roofline_opts_table, roofline_opts),
};

int cmd_roofline(int argc, char **argv) {
    roofline_opts o = {.threads = sysconf(_SC_NPROCESSORS_ONLN)};
    if (o.threads < 1) o.threads = 1;
    int prc = cli_parse(&cli_spec_roofline, argc, argv, &o);
    if (prc >= 0) return prc;
    const char *model = o.model, *shape = o.shape, *hwname = o.hwname, *wtype = o.wtype, *atype = o.atype;
    const char *kvtype = o.kvtype, *svg = o.svg, *png = o.png;
    const int64_t batch = o.batch, prompt = o.prompt, gen = o.gen, layers = o.layers, threads = o.threads;
    const int64_t blo = o.blo, bhi = o.bhi, plo = o.plo, phi = o.phi;
    const bool json = o.json, cmp = o.cmp, reprobe = o.reprobe, sweep = o.sweep;
    if (model && shape) return cli_usage_error(CMD, "-m and --shape exclude each other");
    if (png && !have_gnuplot()) { /* checked first: an error before any work, never a silent skip */
        fprintf(stderr, "kite %s: --png %s needs gnuplot, which is not installed (apt-get install gnuplot; "
                "--svg FILE needs nothing)\n", CMD, png);
        return 1;
    }
    if (cmp && !model)
        return cli_usage_error(CMD, "--compare runs a model: give -m FILE (e.g. one made by `kite synth --shape NAME`)");

    rl_shape sh;
    int rc;
    if (model) {
        rc = rl_shape_from_file(model, &sh);
    } else {
        rc = rl_shape_from_name(shape ? shape : "tinyllama-1.1b", KITE_DTYPE_F16, &sh);
    }
    if (rc != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return rc == KITE_E_NOT_FOUND && !model ? 2 : 1;
    }
    if (layers) sh.n_layer = layers;
    if (wtype) {
        int t = dtype_from_name(wtype);
        if (t < 0 || rl_dtype_bpe((uint32_t)t) <= 0) return cli_usage_error(CMD, "--wtype: unknown type '%s'", wtype);
        sh.wtype = sh.out_type = (uint32_t)t;
    }
    rl_setting st = {.batch = batch, .prompt = prompt, .gen = gen, .atype = default_atype(sh.wtype)};
    if (atype && (st.atype = rl_atype_from_name(atype)) < 0)
        return cli_usage_error(CMD, "--atype: '%s' is not f32, bf16 or int8", atype);
    int kt = dtype_from_name(kvtype);
    if (kt != KITE_DTYPE_F32 && kt != KITE_DTYPE_F16 && kt != KITE_DTYPE_Q8_0 && kt != KITE_DTYPE_Q4_0)
        return cli_usage_error(CMD, "--kvtype: '%s' is not f32, f16, q8_0 or q4_0", kvtype);
    st.kvtype = (uint32_t)kt;

    rl_hw hw;
    const rl_hw *bi = rl_hw_builtin(hwname);
    if (bi) {
        hw = *bi;
    } else if (!strcmp(hwname, "probe")) {
        bool measured = false;
        if (!json) fprintf(stderr, "kite %s: probing this machine (cached after the first run)...\n", CMD);
        char path[512];
        const config *cf = config_get();
        if ((rc = rl_hw_probe((int)threads, reprobe, config_roofline_path((int)threads, path, sizeof path) ? path : NULL,
                              cf->have_probe_path ? cf->probe_path : NULL, &hw, &measured)) != KITE_OK) {
            fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
            return 1;
        }
        /* a profile measured while the host held back cores is used, and said to be suspect */
        if (rl_hw_suspect(&hw, (double)time(NULL)) & RL_HW_BUSY)
            fprintf(stderr, "kite %s: note: the probe saw %.0f%% core availability (under %.0f%%): its rates, and "
                            "the predictions, may read low; measure again with --reprobe on a calmer machine\n",
                    CMD, hw.avail_pct, RL_AVAIL_MIN_PCT);
    } else if ((rc = rl_hw_load(hwname, &hw)) != KITE_OK) {
        fprintf(stderr, "kite %s: --hw: %s (built-ins: %s, probe)\n", CMD, kite_last_error(), rl_hw_builtin_list());
        return 1;
    }

    rl_result r;
    if ((rc = rl_predict(&sh, &hw, &st, &r)) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    rl_print_table(stdout, &sh, &hw, &st, &r);
    if (sweep) print_sweep(&sh, &hw, &st, blo, bhi, plo, phi);
    if (svg && (rc = rl_svg_write(svg, &sh, &hw, &st, &r)) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    if (png && write_png(png, &hw, &r)) return 1;
    if (cmp && compare(model, &st, &r, (int)threads)) return 1;
    if (json) rl_print_json(stdout, &sh, &hw, &st, &r);
    return 0;
}
