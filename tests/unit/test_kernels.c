/*
 * test_kernels.c - the kernel table (dispatch.h) and kern_matmul.
 *
 *   - dispatch: level names, the per-level getter, KITE_CPU_LEVEL capping
 *     (checked first, before anything builds the table) and an invalid value
 *     (checked in a forked child, which has its own first use).
 *   - every kernel of every level this CPU supports against the scalar
 *     reference (ref/), on odd sizes (float rows of 1..4099 elements, block
 *     rows of 1, 3, 7 and 65 blocks), rows at addresses offset by 1..3 bytes,
 *     and edge blocks (int8 -128 weights, +-127 activations, zero scales,
 *     subnormal half scales).  Budgets:
 *       FLOAT_BUDGET: |simd - ref| <= 1e-5 * sum|w*a| (+1e-30): both round
 *         only in float sums of n terms, in different orders.
 *       INT_BUDGET: |simd - ref| <= 2e-6 * sum|w*a| (+1e-30): the int32
 *         block sums are exact, only the float accumulation of the scaled
 *         block terms differs in order (q4_K/q6_K are in fact bit-identical).
 *     bf16 weights at avx512bf16 take bf16 activations: the vdpbf16ps kernel
 *     must equal vec_dot_bf16_bf16_ref (the instruction's model) bit for bit.
 *   - bf16 activations: act_from_f32[BF16] of every level writes the bytes of
 *     act_bf16_from_f32_ref (ties, subnormals, infinities, NaNs, overflow to
 *     infinity), and the vdpbf16ps dot equals the reference bit for bit on
 *     operands that exercise DAZ/FTZ (subnormal bf16 inputs, products and
 *     sums below FLT_MIN), huge values, infinities and NaN.
 *   - the flat GEMM equals vec_dot bit for bit for 1, 3 and 16 tokens, and
 *     for every row count 1..5, 9 and token count 1..16 with rows, strides
 *     and ldy at odd values (the register-blocked 4-row x 1..4-token
 *     micro-kernels and their remainders).
 *   - on a CPU with AVX-VNNI the avx2 table holds the vpdpbusd-ymm q4_0/q8_0
 *     kernels (avxvnni.h), so the checks above cover them (SKIP line otherwise).
 *   - kern_matmul of every computable weight type against a naive double
 *     matmul over the dequantized weights and the unquantized activations,
 *     within the activation quantization error (MATMUL budget below), with
 *     bit-identical results for 1 and 3 threads and for a batch versus token
 *     by token.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "core/cpu.h"
#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define KERNEL_TEST_SEED 0x9e3779b97f4a7c15ull
#include "kernel_helpers.h"
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/x86_avx2/avx2.h"
#include "kernels/x86_avx2/avxvnni.h"
#endif
#if defined(__aarch64__)
#include "kernels/arm_neon/neon.h"
#endif

static const uint32_t kernel_types[] = {KITE_DTYPE_F32,  KITE_DTYPE_F16,  KITE_DTYPE_BF16, KITE_DTYPE_Q4_0,
                                        KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_K, KITE_DTYPE_Q6_K, KITE_DTYPE_Q5_K,
                                        KITE_DTYPE_IQ4_XS, KITE_DTYPE_IQ4_NL, KITE_DTYPE_Q5_0, KITE_DTYPE_Q3_K,
                                        KITE_DTYPE_Q2_K, KITE_DTYPE_Q4_1, KITE_DTYPE_Q5_1, KITE_DTYPE_TQ1_0,
                                        KITE_DTYPE_TQ2_0};
#define N_KTYPES (int)(sizeof kernel_types / sizeof kernel_types[0])

static void put_half(unsigned char *p, uint16_t h) { memcpy(p, &h, 2); }

/* Fills n elements of weight row `dst` (type t) and float activations x;
 * `edge` selects edge blocks.  Returns the activation row in ops.act_type
 * written to act (via the scalar quantizer). */
static void make_row(uint32_t t, int64_t n, unsigned char *dst, float *x, int edge) {
    const dtype_traits *tr = dtype_get(t);
    float *wf = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        wf[i] = frand() * (edge == 1 ? 1e-3f : 1.0f);
        x[i] = frand() * 3.0f;
    }
    if (edge == 2) /* subnormal halves for f16 weights; tiny floats */
        for (int64_t i = 0; i < n; i++) wf[i] *= 1e-6f;
    if (edge == 3) /* activation blocks at their extremes: +-max and zeros */
        for (int64_t i = 0; i < n; i++) x[i] = (i / 32) % 3 == 0 ? 0.0f : (i & 1 ? 2.5f : -2.5f);
    void *tmp = malloc(dtype_row_size(t, n)); /* aligned: quantizers need not accept odd addresses */
    tr->from_float(wf, tmp, n);
    memcpy(dst, tmp, dtype_row_size(t, n));
    free(tmp);
    const size_t bs = (size_t)tr->type_size;
    const int64_t nb = n / tr->block_size;
    if (t == KITE_DTYPE_Q8_0 && edge >= 1) /* -128 and +127 weights */
        for (int64_t b = 0; b < nb; b++)
            for (int j = 0; j < 32; j += 3) dst[b * bs + 2 + j] = (unsigned char)(j % 2 ? 0x80 : 0x7f);
    if (edge == 2 && tr->block_size > 1) { /* zero and subnormal scales */
        for (int64_t b = 0; b < nb; b++) {
            unsigned char *blk = dst + b * bs;
            const uint16_t h = b % 2 ? 0x0001 : 0x0000;
            if (t == KITE_DTYPE_Q6_K) put_half(blk + offsetof(block_q6_K, d), h);
            else if (t == KITE_DTYPE_Q3_K) put_half(blk + offsetof(block_q3_K, d), h);
            else if (t == KITE_DTYPE_Q2_K) put_half(blk + offsetof(block_q2_K, d), h), put_half(blk + offsetof(block_q2_K, dmin), h);
            else if (t == KITE_DTYPE_TQ1_0) put_half(blk + offsetof(block_tq1_0, d), h);
            else if (t == KITE_DTYPE_TQ2_0) put_half(blk + offsetof(block_tq2_0, d), h);
            else put_half(blk, h); /* d is first in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, iq4_xs, iq4_nl */
        }
    }
    /* random bits: every scale, min, quant and high bit (after d, or d and dmin; q6_K's and
     * q3_K's d is last, q2_K's d and dmin) */
    const bool random_bits = t == KITE_DTYPE_Q4_0 || t == KITE_DTYPE_Q4_K || t == KITE_DTYPE_Q5_K ||
                             t == KITE_DTYPE_Q6_K || t == KITE_DTYPE_IQ4_XS || t == KITE_DTYPE_IQ4_NL ||
                             t == KITE_DTYPE_Q5_0 || t == KITE_DTYPE_Q3_K || t == KITE_DTYPE_Q2_K ||
                             t == KITE_DTYPE_Q4_1 || t == KITE_DTYPE_Q5_1 || t == KITE_DTYPE_TQ1_0 ||
                             t == KITE_DTYPE_TQ2_0; /* tq: any byte, also the 2-bit value 3 */
    const bool d_last = t == KITE_DTYPE_Q6_K || t == KITE_DTYPE_Q3_K || t == KITE_DTYPE_Q2_K ||
                        t == KITE_DTYPE_TQ1_0 || t == KITE_DTYPE_TQ2_0;
    const size_t j0 = d_last ? 0 : t == KITE_DTYPE_Q4_0 || t == KITE_DTYPE_Q4_K || t == KITE_DTYPE_Q5_K ||
                                           t == KITE_DTYPE_Q4_1 || t == KITE_DTYPE_Q5_1
                                       ? 4
                                       : 2;
    const size_t j1 = !d_last ? bs : t == KITE_DTYPE_Q2_K ? bs - 4 : bs - 2;
    if (edge == 1 && random_bits)
        for (int64_t b = 0; b < nb; b++)
            for (size_t j = j0; j < j1; j++)
                dst[b * bs + j] = (unsigned char)rnd();
    free(wf);
}

static int n_levels_tested;
static int n_kernel_checks[KERN_LEVEL_COUNT];

TEST(test_dispatch_names) {
    CHECK_STR_EQ(kern_level_name(KERN_LEVEL_SCALAR), "scalar");
    CHECK_STR_EQ(kern_level_name(KERN_LEVEL_AVX512VNNI), "avx512vnni");
    CHECK_STR_EQ(kern_level_name(KERN_LEVEL_AVX512BF16), "avx512bf16");
    CHECK_EQ_INT(kern_level_from_name("avx512bf16"), KERN_LEVEL_AVX512BF16);
    CHECK_EQ_INT(KERN_LEVEL_COUNT, KERN_LEVEL_DOTPROD + 1);
    CHECK_STR_EQ(kern_level_name(KERN_LEVEL_NEON), "neon");
    CHECK_EQ_INT(kern_level_from_name("dotprod"), KERN_LEVEL_DOTPROD);
    CHECK_EQ_INT(kern_level_parent(KERN_LEVEL_NEON), KERN_LEVEL_SCALAR);
    CHECK_EQ_INT(kern_level_parent(KERN_LEVEL_DOTPROD), KERN_LEVEL_NEON);
    CHECK_EQ_INT(kern_level_parent(KERN_LEVEL_AVX2), KERN_LEVEL_SCALAR);
    CHECK_EQ_INT(kern_level_parent(KERN_LEVEL_AVX512BF16), KERN_LEVEL_AVX512VNNI);
    CHECK_EQ_INT(kern_level_from_name("AVX2"), KERN_LEVEL_AVX2);
    CHECK_EQ_INT(kern_level_from_name("sse9"), -1);
    const kern_level max = kern_level_max();
    for (int l = 0; l < KERN_LEVEL_COUNT; l++) {
        const kern_ops_table *t = kern_table_for_level((kern_level)l);
        /* the levels on max's chain, and no other (the other architecture's) */
        bool on_chain = false;
        for (kern_level c = max;; c = kern_level_parent(c)) {
            on_chain |= c == (kern_level)l;
            if (c == KERN_LEVEL_SCALAR) break;
        }
        CHECK_EQ_INT(kern_level_supported((kern_level)l), on_chain);
        if (on_chain) {
            CHECK(t != NULL);
            if (t) CHECK_EQ_INT(t->level, l);
        } else {
            CHECK(t == NULL);
        }
    }
    const cpu_info *c = cpu_features();
    printf("    cpu: avx2 %d fma %d f16c %d avx512f/bw/dq/vl %d%d%d%d vnni %d bf16 %d neon %d dotprod %d; max level %s, "
           "active %s\n",
           c->avx2, c->fma, c->f16c, c->avx512f, c->avx512bw, c->avx512dq, c->avx512vl, c->avx512vnni,
           c->avx512bf16, c->neon, c->dotprod, kern_level_name(max), kern_table()->name);
#if defined(__aarch64__)
    CHECK(c->neon && max >= KERN_LEVEL_NEON && max == (c->dotprod ? KERN_LEVEL_DOTPROD : KERN_LEVEL_NEON));
#endif
    /* every type with a to_float is computable; pairings as documented */
    const kern_ops_table *t = kern_table_for_level(KERN_LEVEL_SCALAR);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q4_0].act_type, KITE_DTYPE_Q8_0);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q6_K].act_type, KITE_DTYPE_Q8_K);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_F16].act_type, KITE_DTYPE_F32);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q5_K].act_type, KITE_DTYPE_Q8_K);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_IQ4_XS].act_type, KITE_DTYPE_Q8_K);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q3_K].act_type, KITE_DTYPE_Q8_K);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q2_K].act_type, KITE_DTYPE_Q8_K);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q4_1].act_type, KITE_DTYPE_Q8_0);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_Q5_1].act_type, KITE_DTYPE_Q8_0);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_TQ1_0].act_type, KITE_DTYPE_Q8_K);
    CHECK_EQ_INT(t->ops[KITE_DTYPE_TQ2_0].act_type, KITE_DTYPE_Q8_K);
    CHECK(t->ops[KITE_DTYPE_IQ2_XXS].vec_dot == NULL); /* generic path */
    /* bf16 activations only for bf16 weights, only at avx512bf16 */
    for (int l = 0; l <= (int)max; l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        CHECK_EQ_INT(kt->ops[KITE_DTYPE_BF16].act_type, l == KERN_LEVEL_AVX512BF16 ? KITE_DTYPE_BF16 : KITE_DTYPE_F32);
        CHECK_EQ_INT(kt->ops[KITE_DTYPE_F16].act_type, KITE_DTYPE_F32);
        CHECK_EQ_INT(kt->ops[KITE_DTYPE_F32].act_type, KITE_DTYPE_F32);
    }
    CHECK_EQ_INT(max == KERN_LEVEL_AVX512BF16, c->avx512bf16 && max >= KERN_LEVEL_AVX512VNNI);
}

/* KITE_CPU_LEVEL=scalar read by the CLI's configuration (tools/config) and
 * passed to kern_configure before first use (in a child, which has its own
 * first use): the active table is scalar, the per-level getter still gives
 * every supported level; avx2 caps at min(avx2, max), avx512vnni at
 * min(avx512vnni, max) (the A/B switch for the bf16-activation level). */
TEST(test_env_cap_scalar) {
    static const char *const caps[] = {"scalar", "avx2", "avx512vnni", "neon", "dotprod"};
    static const kern_level levels[] = {KERN_LEVEL_SCALAR, KERN_LEVEL_AVX2, KERN_LEVEL_AVX512VNNI, KERN_LEVEL_NEON,
                                        KERN_LEVEL_DOTPROD};
    /* a cap walks down the running chain: the other architecture's levels give
     * the highest level of this one below them (on AArch64 an x86 cap is scalar) */
    const kern_level max = kern_level_max();
#if defined(__aarch64__)
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_AVX2), KERN_LEVEL_SCALAR);
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_AVX512BF16), KERN_LEVEL_SCALAR);
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_NEON), KERN_LEVEL_NEON);
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_DOTPROD), max);
#else
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_NEON), max);
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_AVX2), max < KERN_LEVEL_AVX2 ? max : KERN_LEVEL_AVX2);
#endif
    CHECK_EQ_INT(kern_level_capped(-1), max);
    CHECK_EQ_INT(kern_level_capped(KERN_LEVEL_SCALAR), KERN_LEVEL_SCALAR);
    for (int i = 0; i < 5; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("KITE_CPU_LEVEL", caps[i], 1);
            (void)config_get();
            const kern_level want = kern_level_capped(levels[i]);
            _exit(kern_table()->level == want && kern_table_for_level(kern_level_max()) != NULL ? 0 : 1);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "KITE_CPU_LEVEL=%s", caps[i]);
    }
}

/* An invalid value is ignored (with a warning): the child's table is the max. */
TEST(test_env_invalid) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("KITE_CPU_LEVEL", "turbo", 1);
        (void)config_get();
        _exit(kern_table()->level == kern_level_max() ? 0 : 1);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(test_act_quantizers_match_ggml_reference) {
    /* the activation quantizers are ggml's reference: compare with quants.h's */
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = frand() * 4.0f;
    x[7] = 0.0f;
    unsigned char a[2 * 292], b[2 * 292];
    act_quantize_q8_0_ref(x, a, 512);
    dtype_get(KITE_DTYPE_Q8_0)->from_float(x, b, 512);
    CHECK(memcmp(a, b, 16 * 34) == 0);
    act_quantize_q8_K_ref(x, a, 512);
    dtype_get(KITE_DTYPE_Q8_K)->from_float(x, b, 512);
    CHECK(memcmp(a, b, 2 * 292) == 0);
}

static void check_type_level(const kern_ops_table *kt, const kern_ops_table *ref, uint32_t t) {
    const dtype_traits *tr = dtype_get(t);
    const kern_type_ops *op = &kt->ops[t], *rop = &ref->ops[t];
    const bool is_bf16 = op->act_type == KITE_DTYPE_BF16; /* avx512bf16: bf16 x bf16, exact model */
    const bool is_int = op->act_type != KITE_DTYPE_F32 && !is_bf16;
    static const int64_t float_sizes[] = {1, 7, 31, 33, 100, 1000, 4099};
    static const int64_t block_counts[] = {1, 3, 7, 65};
    const int n_sizes = tr->block_size == 1 ? 7 : 4;
    for (int si = 0; si < n_sizes; si++) {
        const int64_t n = tr->block_size == 1 ? float_sizes[si] : block_counts[si] * tr->block_size;
        for (int edge = 0; edge < 4; edge++) {
            const int off = (si + edge) % 4; /* 0..3 bytes */
            const size_t wb = dtype_row_size(t, n), ab = kern_act_row_bytes(op->act_type, n);
            unsigned char *wbuf = malloc(wb + 8), *abuf = malloc(ab + 8);
            float *x = malloc((size_t)n * sizeof(float));
            unsigned char *w = wbuf + off, *a = abuf + (off + 1) % 4;
            make_row(t, n, w, x, edge);
            if (is_int || is_bf16) ref->act_from_f32[op->act_type](x, a, n);
            else memcpy(a, x, (size_t)n * sizeof(float));
            float got = NAN, want = NAN;
            op->vec_dot(n, &got, w, a);
            if (is_bf16) vec_dot_bf16_bf16_ref(n, &want, w, a);
            else rop->vec_dot(n, &want, w, a);
            const double mag = magnitude(t, op->act_type, n, w, a);
            const double tol = (is_int ? INT_BUDGET : FLOAT_BUDGET) * mag + 1e-30;
            CHECK_MSG(fabs((double)got - want) <= tol, "%s %s n=%lld edge=%d off=%d: %.9g vs ref %.9g (tol %.3g)",
                      kt->name, tr->name, (long long)n, edge, off, got, want, tol);
            if (t == KITE_DTYPE_Q4_K || t == KITE_DTYPE_Q5_K || t == KITE_DTYPE_Q6_K || t == KITE_DTYPE_IQ4_XS ||
                t == KITE_DTYPE_IQ4_NL || t == KITE_DTYPE_Q5_0 || t == KITE_DTYPE_Q3_K || t == KITE_DTYPE_Q2_K ||
                t == KITE_DTYPE_TQ1_0 || t == KITE_DTYPE_TQ2_0 || is_bf16) /* documented: same float expression as ref */
                CHECK_MSG(memcmp(&got, &want, sizeof got) == 0, "%s %s n=%lld edge=%d: not bit-identical",
                          kt->name, tr->name, (long long)n, edge);
            n_kernel_checks[kt->level]++;
            free(wbuf);
            free(abuf);
            free(x);
        }
    }
}

TEST(test_kernels_vs_reference_all_levels) {
    const kern_ops_table *ref = kern_table_for_level(KERN_LEVEL_SCALAR);
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        n_levels_tested++;
        for (int i = 0; i < N_KTYPES; i++) check_type_level(kt, ref, kernel_types[i]);
        printf("    level %-10s %d kernel checks\n", kt->name, n_kernel_checks[l]);
    }
}

/* the flat GEMM returns exactly vec_dot's values, for any token group */
TEST(test_gemm_equals_vec_dot) {
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        for (int i = 0; i < N_KTYPES; i++) {
            const uint32_t t = kernel_types[i];
            const kern_type_ops *op = &kt->ops[t];
            const int64_t n = 3 * (int64_t)(dtype_get(t)->block_size == 1 ? 37 : dtype_get(t)->block_size);
            const int nr = 5, nt = 16;
            const size_t wb = dtype_row_size(t, n), ab = kern_act_row_bytes(op->act_type, n);
            unsigned char *w = malloc(wb * nr), *a = malloc(ab * nt);
            float *x = malloc((size_t)n * sizeof(float));
            for (int r = 0; r < nr; r++) make_row(t, n, w + r * wb, x, 0);
            for (int k = 0; k < nt; k++) {
                for (int64_t j = 0; j < n; j++) x[j] = frand();
                if (op->act_type == KITE_DTYPE_F32) memcpy(a + k * ab, x, ab);
                else kt->act_from_f32[op->act_type](x, a + k * ab, n);
            }
            static const int groups[] = {1, 3, 16};
            for (int g = 0; g < 3; g++) {
                float y[16 * 8];
                op->gemm(n, y, 8, w, wb, nr, a, ab, groups[g]);
                for (int k = 0; k < groups[g]; k++)
                    for (int r = 0; r < nr; r++) {
                        float v;
                        op->vec_dot(n, &v, w + r * wb, a + k * ab);
                        CHECK_MSG(memcmp(&v, &y[k * 8 + r], sizeof v) == 0, "%s %s gemm(%d) r=%d t=%d", kt->name,
                                  dtype_name(t), groups[g], r, k);
                    }
            }
            free(w);
            free(a);
            free(x);
        }
    }
}

/* The register-blocked flat GEMMs (several weight rows x several tokens per
 * micro-kernel) on every row count 1..9 (full and partial row blocks), every
 * token count 1..16 (full and partial token groups), odd block counts, rows
 * and activation rows at odd addresses and an odd ldy: each output equals
 * vec_dot bit for bit (so results cannot depend on how rows or tokens are
 * grouped, nor on the thread count). */
TEST(test_gemm_shapes_unaligned) {
    int n_checks = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        for (int i = 0; i < N_KTYPES; i++) {
            const uint32_t t = kernel_types[i];
            const kern_type_ops *op = &kt->ops[t];
            const int bsz = dtype_get(t)->block_size;
            const int64_t n = bsz == 1 ? 67 : (int64_t)(bsz == 256 ? 3 : 5) * bsz; /* odd block counts */
            const int max_r = 9, max_t = KERN_GEMM_MAX_TOK, ldy = 11;
            const size_t wb = dtype_row_size(t, n) + 3, ab = kern_act_row_bytes(op->act_type, n) + 5; /* odd strides */
            unsigned char *wbuf = malloc(wb * max_r + 8), *abuf = malloc(ab * max_t + 8);
            unsigned char *w = wbuf + 1, *a = abuf + (op->act_type == KITE_DTYPE_Q8_K ? 4 : 3);
            float *x = malloc((size_t)n * sizeof(float)), *y = malloc(sizeof(float) * ldy * max_t);
            for (int r = 0; r < max_r; r++) make_row(t, n, w + r * wb, x, r % 4);
            const size_t ab_exact = kern_act_row_bytes(op->act_type, n);
            size_t a_stride = ab;
            if (op->act_type == KITE_DTYPE_Q8_K) a_stride = (ab_exact + 3) & ~(size_t)3; /* float d: 4-byte aligned */
            for (int k = 0; k < max_t; k++) {
                for (int64_t j = 0; j < n; j++) x[j] = frand() * (k % 3 == 2 ? 100.0f : 1.0f);
                if (op->act_type == KITE_DTYPE_F32) memcpy(a + k * a_stride, x, ab_exact);
                else kt->act_from_f32[op->act_type](x, a + k * a_stride, n);
            }
            for (int nr = 1; nr <= max_r; nr += (nr < 5 ? 1 : 4))
                for (int nt = 1; nt <= max_t; nt++) {
                    for (int q = 0; q < ldy * max_t; q++) y[q] = NAN;
                    op->gemm(n, y, ldy, w, wb, nr, a, a_stride, nt);
                    for (int k = 0; k < nt; k++)
                        for (int r = 0; r < nr; r++) {
                            float v;
                            op->vec_dot(n, &v, w + r * wb, a + k * a_stride);
                            CHECK_MSG(memcmp(&v, &y[k * ldy + r], sizeof v) == 0, "%s %s gemm nr=%d nt=%d r=%d t=%d",
                                      kt->name, dtype_name(t), nr, nt, r, k);
                            n_checks++;
                        }
                    for (int k = 0; k < nt; k++) /* nothing outside the nr x nt outputs is written */
                        for (int r = nr; r < ldy; r++) CHECK(isnan(y[k * ldy + r]));
                }
            free(wbuf);
            free(abuf);
            free(x);
            free(y);
        }
    }
    printf("    %d gemm outputs checked\n", n_checks);
}

/* kern_matmul vs a naive double matmul over dequantized weights and the
 * float activations.  Budget per output: the activation quantization error
 * sum_i |w_i| * amax(block of i) / 127 (q8_0: half a step amax/254 plus the
 * f16 rounding of d, <= amax/2000; q8_K: up to a whole step at the clamped
 * +127 end), plus FLOAT_BUDGET * sum|w*x| for the float sums. */
static void check_matmul_type(const kern_ops_table *kt, uint32_t t, threadpool *tp1, threadpool *tp3) {
    const dtype_traits *tr = dtype_get(t);
    const kern_type_ops *op = &kt->ops[t];
    const int64_t ne0 = tr->block_size == 1 ? 200 : 2 * (tr->block_size < 256 ? 256 : tr->block_size);
    const int64_t nr = 37, n_tok = 20;
    weight w = {.type = t, .ne = {ne0, nr}, .row_bytes = dtype_row_size(t, ne0)};
    unsigned char *wd = malloc(w.row_bytes * (size_t)nr);
    float *x = malloc((size_t)(n_tok * ne0) * sizeof(float)), *wf = malloc((size_t)(nr * ne0) * sizeof(float));
    for (int64_t r = 0; r < nr; r++) make_row(t, ne0, wd + r * w.row_bytes, x, 0);
    w.data = wd;
    for (int64_t i = 0; i < n_tok * ne0; i++) x[i] = frand() * 2.0f;
    for (int64_t r = 0; r < nr; r++) tr->to_float(wd + r * w.row_bytes, wf + r * ne0, ne0);
    const size_t sb = kern_matmul_scratch_bytes(3, n_tok, ne0);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    float *y1 = malloc((size_t)(n_tok * nr) * sizeof(float)), *y3 = malloc((size_t)(n_tok * nr) * sizeof(float));
    float *yd = malloc((size_t)(n_tok * nr) * sizeof(float));
    kern_matmul_with(kt, tp1, &w, x, n_tok, y1, nr, scratch);
    kern_matmul_with(kt, tp3, &w, x, n_tok, y3, nr, scratch);
    for (int64_t k = 0; k < n_tok; k++) kern_matmul_with(kt, tp3, &w, x + k * ne0, 1, yd + k * nr, nr, scratch);
    CHECK_MSG(memcmp(y1, y3, (size_t)(n_tok * nr) * sizeof(float)) == 0, "%s: 1 vs 3 threads differ", tr->name);
    CHECK_MSG(memcmp(y1, yd, (size_t)(n_tok * nr) * sizeof(float)) == 0, "%s: batch vs token by token differ",
              tr->name);
    const int qb = op->act_type == KITE_DTYPE_Q8_0 ? 32 : op->act_type == KITE_DTYPE_Q8_K ? 256
                 : op->act_type == KITE_DTYPE_W8A8 ? (int)ne0 : 0; /* W8A8: one activation scale per row */
    /* bf16 activations: round to nearest of 8 significant bits, |x - bf16(x)| <= 2^-8 |x| */
    const double bf16_rel = op->act_type == KITE_DTYPE_BF16 ? 1.0 / 256.0 : 0.0;
    double worst = 0;
    for (int64_t k = 0; k < n_tok; k++)
        for (int64_t r = 0; r < nr; r++) {
            const float *xr = x + k * ne0, *wr = wf + r * ne0;
            double s = 0, mag = 0, qerr = 0;
            for (int64_t i = 0; i < ne0; i++) {
                s += (double)wr[i] * xr[i];
                mag += fabs((double)wr[i] * xr[i]);
                qerr += bf16_rel * fabs((double)wr[i] * xr[i]);
            }
            if (qb)
                for (int64_t b = 0; b < ne0; b += qb) {
                    double amax = 0, sw = 0;
                    for (int j = 0; j < qb; j++) {
                        amax = fmax(amax, fabs(xr[b + j]));
                        sw += fabs(wr[b + j]);
                    }
                    qerr += sw * amax / 127.0;
                }
            const double tol = qerr + FLOAT_BUDGET * mag + 1e-30;
            const double e = fabs(y1[k * nr + r] - s);
            if (e / (tol) > worst) worst = e / tol;
            CHECK_MSG(e <= tol, "%s matmul t=%lld r=%lld: %.9g vs %.9g (tol %.3g)", tr->name, (long long)k,
                      (long long)r, y1[k * nr + r], s, tol);
        }
    if (kt->level == kern_level_max())
        printf("    matmul %-7s (%s, act %s): worst error %.3f of budget\n", tr->name,
               op->vec_dot ? kt->name : "generic", dtype_name(op->act_type), worst);
    free(wd);
    free(x);
    free(wf);
    free(scratch);
    free(y1);
    free(y3);
    free(yd);
}

TEST(test_matmul_all_types) {
    threadpool *tp1 = tp_new(1), *tp3 = tp_new(3);
    CHECK(tp1 && tp3);
    for (int l = 0; l <= (int)kern_level_max(); l++)
        for (uint32_t t = 0; t < KITE_DTYPE_COUNT && tp1 && tp3 && kern_level_supported((kern_level)l); t++) {
            const dtype_traits *tr = dtype_get(t);
            if (!tr || !tr->to_float || !tr->from_float || t == KITE_DTYPE_Q8_K || t == KITE_DTYPE_Q8_1) continue;
            check_matmul_type(kern_table_for_level((kern_level)l), t, tp1, tp3);
        }
    /* and through the public entry point (the active table) */
    const int64_t ne0 = 64, nr = 9;
    float *wf = malloc(ne0 * nr * sizeof(float)), x[64], y[9];
    for (int64_t i = 0; i < ne0 * nr; i++) wf[i] = frand();
    for (int64_t i = 0; i < ne0; i++) x[i] = frand();
    weight w = {.type = KITE_DTYPE_F32, .ne = {ne0, nr}, .row_bytes = ne0 * sizeof(float), .data = wf};
    void *scratch = aligned_alloc(64, (kern_matmul_scratch_bytes(3, 1, ne0) + 63) & ~(size_t)63);
    if (tp3) kern_matmul(tp3, &w, x, 1, y, nr, scratch);
    for (int64_t r = 0; tp3 && r < nr; r++) CHECK_NEAR(y[r], kern_dot_f32(wf + r * ne0, x, ne0), 1e-5);
    free(wf);
    free(scratch);
    tp_free(tp1);
    tp_free(tp3);
}

static float f_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* act_from_f32[BF16] (where a level has one) writes act_bf16_from_f32_ref's
 * bytes, and that is fp32_to_bf16 per element: ties to even, subnormals
 * rounded (not flushed), NaN quiet, the largest floats rounding to inf. */
TEST(test_bf16_act_converter) {
    enum { N = 16 * 9 + 5 }; /* a masked tail */
    float x[N];
    uint16_t ref[N], got[N + 1];
    int n_levels = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        if (!kern_level_supported((kern_level)l)) continue; /* another architecture's level */
        const kern_act_fn q = kern_table_for_level((kern_level)l)->act_from_f32[KITE_DTYPE_BF16];
        CHECK(q != NULL);
        if (!q) continue;
        n_levels++;
        for (int rep = 0; rep < 40; rep++) {
            for (int i = 0; i < N; i++) {
                const uint32_t r = rnd() | (rnd() << 16);
                switch ((rep + i) % 6) {
                case 0: x[i] = frand() * 10.0f; break;
                case 1: x[i] = f_of_bits(r); break; /* any bits: NaN, inf, subnormal */
                case 2: x[i] = f_of_bits((r & 0xffff0000u) | 0x8000u); break;           /* exact ties */
                case 3: x[i] = f_of_bits(r & 0x807fffffu); break;                       /* subnormals and zeros */
                case 4: x[i] = f_of_bits((r & 0x80000000u) | 0x7f7f8000u | (r & 0x7fffu)); break; /* near FLT_MAX */
                default: x[i] = f_of_bits((r & 0x80000000u) | 0x7f800000u | (rep % 2 ? (r & 0x7fffffu) : 0)); break;
                }
            }
            act_bf16_from_f32_ref(x, ref, N);
            got[N] = 0xA5A5;
            q(x, got, N);
            CHECK_MSG(memcmp(ref, got, sizeof ref) == 0 && got[N] == 0xA5A5,
                      "%s: bf16 activation bytes differ (rep %d)", kern_level_name((kern_level)l), rep);
            for (int i = 0; i < N; i++) CHECK(ref[i] == fp32_to_bf16(x[i]));
        }
    }
    CHECK(n_levels >= 1);
    /* ties to even */
    CHECK(fp32_to_bf16(f_of_bits(0x3f808000u)) == 0x3f80 && fp32_to_bf16(f_of_bits(0x3f818000u)) == 0x3f82);
    CHECK(fp32_to_bf16(f_of_bits(0x00000001u)) == 0x0000 && fp32_to_bf16(f_of_bits(0x00008000u)) == 0x0000 &&
          fp32_to_bf16(f_of_bits(0x00018000u)) == 0x0002);                                 /* subnormals rounded */
    CHECK(fp32_to_bf16(f_of_bits(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to inf */
    CHECK((fp32_to_bf16(f_of_bits(0x7f800001u)) & 0x7fc0) == 0x7fc0); /* NaN stays NaN, quiet */
}

/* The vdpbf16ps kernel (level avx512bf16) equals vec_dot_bf16_bf16_ref bit
 * for bit on operands chosen to exercise the instruction's rules: subnormal
 * bf16 inputs (DAZ), products and running sums below FLT_MIN (FTZ), huge
 * values, infinities and NaN, and random bit patterns; n covers a chunk
 * boundary and masked tails.  Skipped (and said so) without the level. */
TEST(test_bf16_dot_model) {
    const kern_ops_table *kt = kern_table_for_level(KERN_LEVEL_AVX512BF16);
    if (!kt) {
        printf("    avx512bf16 not supported here: vdpbf16ps model check not run\n");
        return;
    }
    static const int64_t ns[] = {1, 2, 31, 32, 33, 64, 95, 1001};
    uint16_t w[1001], a[1001];
    int n_checks = 0, n_nan = 0;
    for (int kind = 0; kind < 5; kind++)
        for (int ni = 0; ni < 8; ni++) {
            const int64_t n = ns[ni];
            for (int rep = 0; rep < 12; rep++) {
                for (int64_t i = 0; i < n; i++) {
                    const uint32_t r = rnd();
                    uint16_t wi = (uint16_t)r, ai = (uint16_t)(r >> 16);
                    if (kind == 0) { /* tiny: exponents 0..15, products and sums near FLT_MIN */
                        wi = (uint16_t)((wi & 0x807f) | ((rnd() % 16) << 7));
                        ai = (uint16_t)((ai & 0x807f) | ((60 + rnd() % 8) << 7));
                    } else if (kind == 1) { /* moderate, with some subnormal bf16 operands */
                        wi = fp32_to_bf16(frand());
                        ai = rnd() % 4 == 0 ? (uint16_t)(ai & 0x807f) : fp32_to_bf16(frand() * 3.0f);
                    } else if (kind == 2) { /* huge: overflow to inf, inf - inf = NaN */
                        wi = (uint16_t)((wi & 0x807f) | ((200 + rnd() % 54) << 7));
                        ai = (uint16_t)((ai & 0x807f) | ((100 + rnd() % 50) << 7));
                    } else if (kind == 3) { /* cancellation to exact zeros and tiny remainders */
                        wi = fp32_to_bf16((float)((int)(rnd() % 7) - 3) * 1e-20f);
                        ai = fp32_to_bf16((float)((int)(rnd() % 7) - 3) * 1e-19f);
                    } /* kind 4: any bits */
                    w[i] = wi;
                    a[i] = ai;
                }
                float got, want;
                kt->ops[KITE_DTYPE_BF16].vec_dot(n, &got, w, a);
                vec_dot_bf16_bf16_ref(n, &want, w, a);
                const bool same = memcmp(&got, &want, sizeof got) == 0 || (isnan(got) && isnan(want));
                n_nan += isnan(want);
                CHECK_MSG(same, "kind %d n=%lld rep %d: vdpbf16ps %a vs model %a", kind, (long long)n, rep, got, want);
                n_checks++;
            }
        }
    printf("    vdpbf16ps vs model: %d dots bit-identical (%d NaN)\n", n_checks, n_nan);
}

/* The avx2 level's q4_0/q8_0 variant: on a CPU with AVX-VNNI the avx2 table
 * (and avx512, which inherits it) must hold the vpdpbusd-ymm kernels, so the
 * reference and gemm checks above cover them; avx512vnni overrides them with
 * its zmm kernels.  Without AVX-VNNI the maddubs kernels stay (SKIP line). */
TEST(test_avx2_avxvnni_variant) {
#if defined(__x86_64__) || defined(__i386__)
    const kern_ops_table *t2 = kern_table_for_level(KERN_LEVEL_AVX2);
    if (!t2) SKIP_TEST("no avx2 level on this CPU; AVX-VNNI variant not tested");
    const bool vnni = cpu_features()->avxvnni;
    for (int l = KERN_LEVEL_AVX2; l <= (int)kern_level_max() && l <= KERN_LEVEL_AVX512; l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        const kern_type_ops *q4 = &kt->ops[KITE_DTYPE_Q4_0], *q8 = &kt->ops[KITE_DTYPE_Q8_0];
        if (vnni) {
            CHECK_MSG(q4->vec_dot == vec_dot_q4_0_q8_0_avxvnni && q4->gemm == gemm_q4_0_q8_0_avxvnni,
                      "%s: q4_0 is not the AVX-VNNI kernel", kt->name);
            CHECK_MSG(q8->vec_dot == vec_dot_q8_0_q8_0_avxvnni && q8->gemm == gemm_q8_0_q8_0_avxvnni,
                      "%s: q8_0 is not the AVX-VNNI kernel", kt->name);
        } else {
            CHECK(q4->vec_dot == vec_dot_q4_0_q8_0_avx2 && q8->vec_dot == vec_dot_q8_0_q8_0_avx2);
        }
    }
    const kern_ops_table *tv = kern_table_for_level(KERN_LEVEL_AVX512VNNI);
    if (tv) CHECK(tv->ops[KITE_DTYPE_Q4_0].vec_dot != vec_dot_q4_0_q8_0_avxvnni);
    CHECK_STR_EQ(t2->name, "avx2");
    if (vnni) { /* the vpmaddubsw kernels still run on CPUs without AVX-VNNI: test them here too */
        static kern_ops_table plain;
        plain = *t2;
        plain.ops[KITE_DTYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_avx2;
        plain.ops[KITE_DTYPE_Q4_0].gemm = gemm_q4_0_q8_0_avx2;
        plain.ops[KITE_DTYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx2;
        plain.ops[KITE_DTYPE_Q8_0].gemm = gemm_q8_0_q8_0_avx2;
        const kern_ops_table *ref = kern_table_for_level(KERN_LEVEL_SCALAR);
        check_type_level(&plain, ref, KITE_DTYPE_Q4_0);
        check_type_level(&plain, ref, KITE_DTYPE_Q8_0);
    }
    if (vnni)
        printf("    avx2 level: q4_0/q8_0 kernels avx2+avxvnni (vpdpbusd ymm), covered by the checks above; "
               "the vpmaddubsw ones checked against the reference here\n");
    else
        SKIP_TEST("this CPU has no AVX-VNNI; avx2 q4_0/q8_0 are the vpmaddubsw kernels, variant not tested");
#else
    SKIP_TEST("not x86; no AVX-VNNI variant");
#endif
}

/* The AArch64 levels hold their folder's kernels: neon the smull/sadalp
 * q4_0/q8_0 ones, dotprod the sdot ones over the same float kernels, and
 * the active level follows HWCAP_ASIMDDP (qemu -cpu cortex-a53: neon; -cpu
 * max: dotprod; make test-arm runs both). */
TEST(test_arm_levels) {
#if defined(__aarch64__)
    const kern_ops_table *n = kern_table_for_level(KERN_LEVEL_NEON), *d = kern_table_for_level(KERN_LEVEL_DOTPROD);
    CHECK(n != NULL);
    if (!n) return;
    CHECK(n->ops[KITE_DTYPE_Q4_0].vec_dot == vec_dot_q4_0_q8_0_neon && n->ops[KITE_DTYPE_Q4_0].gemm == gemm_q4_0_q8_0_neon);
    CHECK(n->ops[KITE_DTYPE_Q8_0].vec_dot == vec_dot_q8_0_q8_0_neon && n->ops[KITE_DTYPE_Q8_0].x16 == gemm_x16_q8_0_neon);
    CHECK(n->ops[KITE_DTYPE_F16].vec_dot == vec_dot_f16_f32_neon && n->act_from_f32[KITE_DTYPE_Q8_0] == act_quantize_q8_0_neon);
    CHECK(n->elt == &kern_elt_neon && n->attn == &kern_attn_neon);
    CHECK_EQ_INT(kern_table()->level, cpu_features()->dotprod ? KERN_LEVEL_DOTPROD : KERN_LEVEL_NEON);
    if (!d) { /* the neon checks above still count */
        printf("    neon table holds the arm_neon kernels; no dot product (HWCAP_ASIMDDP): dotprod not run\n");
        return;
    }
    CHECK(d->ops[KITE_DTYPE_Q4_0].vec_dot == vec_dot_q4_0_q8_0_dotprod && d->ops[KITE_DTYPE_Q4_0].x16 == gemm_x16_q4_0_dotprod);
    CHECK(d->ops[KITE_DTYPE_Q8_0].vec_dot == vec_dot_q8_0_q8_0_dotprod && d->ops[KITE_DTYPE_Q8_0].gemm == gemm_q8_0_q8_0_dotprod);
    CHECK(d->ops[KITE_DTYPE_F32].vec_dot == vec_dot_f32_neon && d->elt == n->elt); /* inherited from neon */
    printf("    neon and dotprod tables hold the arm_neon kernels (active %s)\n", kern_table()->name);
#else
    CHECK(!kern_level_supported(KERN_LEVEL_NEON) && !kern_level_supported(KERN_LEVEL_DOTPROD));
    SKIP_TEST("not AArch64: the neon and dotprod levels are not supported here");
#endif
}

int main(void) {
    RUN(test_env_invalid); /* forked children: each builds its own table */
    RUN(test_env_cap_scalar);
    RUN(test_dispatch_names);
    RUN(test_act_quantizers_match_ggml_reference);
    RUN(test_kernels_vs_reference_all_levels);
    RUN(test_gemm_equals_vec_dot);
    RUN(test_gemm_shapes_unaligned);
    RUN(test_avx2_avxvnni_variant);
    RUN(test_arm_levels);
    RUN(test_bf16_act_converter);
    RUN(test_bf16_dot_model);
    RUN(test_matmul_all_types);
    printf("    levels tested: %d\n", n_levels_tested);
    return harness_summary(__FILE__);
}
