/*
 * tune_options.c - the kernel options step of `kite tune`: times each
 * machine-wide kernel option (kern_opt, src/kernels/dispatch.h) on and off
 * on the whole model, as a run uses it, and records the faster setting in
 * the tune table ("option NAME on|off").
 *
 * DESIGN
 *   Why whole-model runs: decode prefetch only matters for weights streamed
 *   from memory, and one matrix timed again and again stays in the caches
 *   (the shape step of `kite tune` times exactly that).  So the model is
 *   loaded as `kite run` loads it (heap, repacked) and the tests are real
 *   evaluations: tg = TG_TOKENS single-token steps after a PROMPT-token
 *   prompt, pp = one PP_TOKENS-token prefill.
 *   Which options are timed, and on what:
 *     decode-prefetch  tg; needs repacked matrices (q4_0/q8_0/k-quants x16,
 *                      f16/bf16 x32) at avx512 or above and at least
 *                      min_mib MiB of weights (smaller models stay in the
 *                      caches, where prefetch decides nothing);
 *     bf16-fma         pp and tg; bf16 matrices at avx512bf16;
 *     f16-widen        pp; f16 matrices at avx512 or above.
 *   Each round runs every test once with the option off and once on, the
 *   order alternating between rounds; a round is kept when the FMA check
 *   around it saw at least AVAIL_MIN of the expected rate (else it is run
 *   again, up to twice the rounds in all, and the summary marks the
 *   option).  A setting is picked when it is at least MARGIN faster (per
 *   token, medians) in some test and not MARGIN slower in any; otherwise
 *   the table keeps what it had for the option.  The options never change a
 *   result, so a wrong pick costs speed only.
 *
 * THREAD SAFETY
 *   A command: one thread; kern_opt_set runs between evaluations only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress/progress.h"
#include "config/config.h"
#include "roofline/probe.h"
#include "core/timing.h"
#include "kernels/dispatch.h"
#include "kernels/tune.h"
#include "kite.h"
#include "tensor/dtype.h"
#include "tune_options.h"

#define CMD "tune"
#define PROMPT 16
#define TG_TOKENS 8
#define PP_TOKENS 64
#define MAX_OPT_ROUNDS 32
#define MARGIN 0.03
#define AVAIL_MIN 0.70
#define CHECK_MS 5.0

enum { TEST_PP = 0, TEST_TG = 1, N_TESTS = 2 };

typedef struct opt_plan {
    bool test[N_TESTS];
    const char *skip; /* why the option is not timed, or NULL */
} opt_plan;

static bool has_type(const uint32_t *types, int n, uint32_t t) {
    for (int i = 0; i < n; i++)
        if (types[i] == t) return true;
    return false;
}

static opt_plan plan_for(kern_opt o, const tune_opt_params *p, const kite_model_info *mi) {
    const kern_level lv = kern_table()->level;
    const bool x86 = lv >= KERN_LEVEL_AVX2 && lv <= KERN_LEVEL_AVX512BF16; /* the options are x86 kernels' */
    opt_plan pl = {{false, false}, NULL};
    switch (o) {
    case KERN_OPT_DECODE_PREFETCH:
        if (!x86 || lv < KERN_LEVEL_AVX512) pl.skip = "no prefetching kernel below avx512";
        else if (mi->n_repacked == 0) pl.skip = "no repacked matrices (KITE_REPACK=0, or types without a layout)";
        else if (mi->n_bytes < (uint64_t)p->min_mib << 20) pl.skip = "model below --min-mib: it stays in the caches";
        pl.test[TEST_TG] = true;
        break;
    case KERN_OPT_BF16_FMA:
        if (!x86 || lv < KERN_LEVEL_AVX512BF16) pl.skip = "kernel level below avx512bf16: the FMA kernel is the only one";
        else if (!has_type(p->types, p->n_types, KITE_DTYPE_BF16)) pl.skip = "no bf16 matrices";
        else if (mi->n_repacked == 0) pl.skip = "no repacked matrices";
        pl.test[TEST_PP] = pl.test[TEST_TG] = true;
        break;
    case KERN_OPT_F16_WIDEN:
        if (!x86 || lv < KERN_LEVEL_AVX512) pl.skip = "no widened kernel below avx512";
        else if (!has_type(p->types, p->n_types, KITE_DTYPE_F16)) pl.skip = "no f16 matrices";
        else if (mi->n_repacked == 0) pl.skip = "no repacked matrices";
        pl.test[TEST_PP] = true;
        break;
    default:
        pl.skip = "?";
    }
    return pl;
}

/* Seconds per token of one test, or < 0 on error. */
static double run_test(kite_ctx *ctx, const kite_token *ids, int test, int pp, int tg) {
    if (test == TEST_PP) {
        if (kite_ctx_truncate(ctx, 0) != KITE_OK) return -1.0;
        const double t0 = time_now_s();
        if (kite_ctx_eval(ctx, ids, pp, false) != KITE_OK) return -1.0;
        return (time_now_s() - t0) / pp;
    }
    if (kite_ctx_truncate(ctx, PROMPT) != KITE_OK) return -1.0; /* the prompt stays cached */
    const double t0 = time_now_s();
    for (int i = 0; i < tg; i++)
        if (kite_ctx_eval(ctx, &ids[PROMPT + i], 1, false) != KITE_OK) return -1.0;
    return (time_now_s() - t0) / tg;
}

/* Picks 1 (on) or 0 (off) from the medians med[setting][test], or -1. */
static int pick(const opt_plan *pl, double med[2][N_TESTS]) {
    for (int s = 0; s < 2; s++) {
        bool faster = false, slower = false;
        for (int t = 0; t < N_TESTS; t++) {
            if (!pl->test[t]) continue;
            faster = faster || med[s][t] < med[!s][t] * (1.0 - MARGIN);
            slower = slower || med[s][t] > med[!s][t] * (1.0 + MARGIN);
        }
        if (faster && !slower) return s;
    }
    return -1;
}

int tune_options(const tune_opt_params *p, kern_tune_table *table) {
    kite_model *model = NULL;
    kite_ctx *ctx = NULL;
    kite_token ids[PROMPT + PP_TOKENS + TG_TOKENS];
    int status = 1;
    const int rounds = p->rounds < 1 ? 1 : p->rounds > MAX_OPT_ROUNDS / 2 ? MAX_OPT_ROUNDS / 2 : p->rounds;
    const int pp = p->quick ? 16 : PP_TOKENS, tg = p->quick ? 2 : TG_TOKENS;
    kite_model_params mp = config_model_params(); /* heap and repacked, as `kite run` */
    if (kite_model_load(p->model, &mp, &model) != KITE_OK) {
        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
        return 1;
    }
    kite_model_info mi;
    kite_model_get_info(model, &mi);
    progress pg;
    progress_begin(&pg, "kite " CMD " options", PROGRESS_ITEMS, "rounds");
    opt_plan plans[KERN_OPT_COUNT];
    bool any = false;
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        plans[o] = plan_for((kern_opt)o, p, &mi);
        any = any || !plans[o].skip;
    }
    printf("\n| %-15s | %-4s | %9s | %9s | %-8s | %7s | %5s |\n", "option", "test", "off ms/t", "on ms/t", "picked",
           "speedup", "avail");
    printf("|-----------------|------|----------:|----------:|----------|--------:|------:|\n");
    if (any) {
        kite_ctx_params cp = kite_ctx_default_params();
        cp.n_ctx = PROMPT + PP_TOKENS + TG_TOKENS + 1;
        cp.n_threads = p->threads;
        if (kite_ctx_new(model, &cp, &ctx) != KITE_OK) {
            fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
            goto done;
        }
        uint64_t s = 0x2545F4914F6CDD1Dull;
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            ids[i] = (kite_token)(s % (uint64_t)mi.n_vocab);
        }
        if (kite_ctx_eval(ctx, ids, PROMPT, false) != KITE_OK) { /* warm-up; the tg prompt */
            fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
            goto done;
        }
    }
    int n_timed = 0, i_timed = 0;
    for (int o = 0; o < KERN_OPT_COUNT; o++) n_timed += !plans[o].skip;
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        const opt_plan *pl = &plans[o];
        const kern_opt opt = (kern_opt)o;
        if (pl->skip) {
            printf("| %-15s | %-4s | %9s | %9s | %-8s | %7s | %5s |  not timed: %s\n", kern_opt_name(opt), "-", "-",
                   "-", table->opt[o] < 0 ? "-" : table->opt[o] ? "on (kept)" : "off (kept)", "-", "-", pl->skip);
            continue;
        }
        static double v[2][N_TESTS][MAX_OPT_ROUNDS];
        int kept = 0, tried = 0;
        double worst = 1.0;
        while (kept < rounds && tried < 2 * rounds) {
            const double a0 = p->expect > 0 ? probe_fma_check(p->threads, CHECK_MS) / p->expect : 1.0;
            for (int k = 0; k < 2; k++) {
                const int setting = (k + tried) % 2; /* off first, then on first, ... */
                kern_opt_set(opt, setting == 1);
                for (int t = 0; t < N_TESTS; t++) {
                    if (!pl->test[t]) continue;
                    const double spt = run_test(ctx, ids, t, pp, tg);
                    if (spt < 0) {
                        fprintf(stderr, "kite %s: %s\n", CMD, kite_last_error());
                        goto done;
                    }
                    v[setting][t][kept] = spt;
                }
            }
            const double a1 = p->expect > 0 ? probe_fma_check(p->threads, CHECK_MS) / p->expect : 1.0;
            const double av = a0 < a1 ? a0 : a1;
            tried++;
            /* a busy round is dropped while enough tries are left for the rounds still wanted */
            if (av >= AVAIL_MIN || 2 * rounds - tried < rounds - kept) {
                if (av < worst) worst = av;
                kept++;
            }
            progress_update(&pg, (uint64_t)(i_timed * rounds + kept), (uint64_t)(n_timed * rounds));
        }
        double med[2][N_TESTS] = {{0}};
        for (int s = 0; s < 2; s++)
            for (int t = 0; t < N_TESTS; t++)
                if (pl->test[t]) med[s][t] = cli_median(v[s][t], kept);
        const int best = pick(pl, med);
        if (best >= 0) table->opt[o] = (int8_t)best;
        i_timed++;
        progress_clear(&pg); /* the table rows go where the line was */
        char avail[16];
        if (p->expect > 0)
            snprintf(avail, sizeof avail, "%.0f%%%s", 100.0 * worst, worst < AVAIL_MIN ? "*" : "");
        else
            snprintf(avail, sizeof avail, "-");
        for (int t = 0; t < N_TESTS; t++) {
            if (!pl->test[t]) continue;
            char name[16], picked[16];
            snprintf(name, sizeof name, "%s%d", t == TEST_PP ? "pp" : "tg", t == TEST_PP ? pp : tg);
            snprintf(picked, sizeof picked, "%s", best == 1 ? "on" : best == 0 ? "off" : "no change");
            const double sp = best >= 0 ? med[!best][t] / med[best][t] : med[0][t] / med[1][t];
            printf("| %-15s | %-4s | %9.3f | %9.3f | %-8s | %6.2fx | %5s |\n", kern_opt_name(opt), name,
                   med[0][t] * 1e3, med[1][t] * 1e3, picked, sp, avail);
        }
        if (worst < AVAIL_MIN)
            fprintf(stderr, "kite %s: %s was timed on a busy machine (avail *): run again when it is idle\n", CMD,
                    kern_opt_name(opt));
    }
    progress_end(&pg);
    printf("(ms/t: median milliseconds per token over %d rounds, option off and on alternated; picked: the setting\n"
           " at least %.0f%% faster in a test and not slower in any, else the table keeps its line; speedup: picked\n"
           " over the other, or off over on)\n",
           rounds, 100.0 * MARGIN);
    status = 0;
done:
    progress_end(&pg);
    kite_ctx_free(ctx);
    kite_model_free(model);
    return status;
}
