/*
 * test_registry.c - the kernel registry (dispatch.h), walked entry by entry.
 *
 *   - every (level, type) entry of every level's table is either filled or
 *     named in expected_null() below with the reason the matmul falls back
 *     (the generic path, the flat GEMM, no repacked layout): an entry that
 *     appears or disappears without that list changing is a failure;
 *   - every filled entry of each level this CPU runs that is not the scalar
 *     level's own (a SIMD kernel) is compared with its scalar twin on odd
 *     sizes, so a newly registered kernel is tested without a new test:
 *       vec_dot  the scalar dot of the same (weight, activation) formats,
 *                within test_kernels.c's budgets (FLOAT_BUDGET, INT_BUDGET;
 *                bit for bit where the contract says so: W8A8, bf16 x bf16,
 *                every kernel of the AArch64 levels neon and dotprod);
 *       gemm, tiled  the same level's vec_dot, bit for bit (dispatch.h,
 *                gemm_tiled.h);
 *       act_from_f32  the scalar quantizer's bytes;
 *       x16, x32 and their option variants  the scalar reference, bit for
 *                bit (gemm_x16.h, gemm_x32.h ARITHMETIC);
 *       elt      the scalar ops within ELT_BUDGET (ops_simd.h: rounding only;
 *                test_ops.c holds the named per-op budgets);
 *       attn     the scalar loops, bit for bit (attention_simd.h).
 *   The per-kernel tests (test_kernels.c, test_gemm.c, test_x16.c,
 *   test_x32.c, test_ops.c, test_attention.c) go deeper on edge values;
 *   this one guarantees coverage of whatever the registry holds.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/attention_simd.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x16.h"
#include "kernels/gemm_x32.h"
#include "kernels/ops_simd.h"
#include "kernels/ref/ref.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#define KERNEL_TEST_SEED 0x5eed0f4e915731ull
#include "kernel_helpers.h"

#define ELT_BUDGET 1e-4 /* |simd - ref| <= ELT_BUDGET * (1 + |ref|): test_ops.c has the tight ones */

/* A new field in these tables needs a check below: their sizes pin the
 * field count (all pointers). */
_Static_assert(sizeof(attn_ops) == 13 * sizeof(void *), "attn_ops gained a field: check it in test_attn_entries");
_Static_assert(sizeof(kern_elt_ops) == 8 * sizeof(void *), "kern_elt_ops gained a field: check it in test_elt_entries");

enum { SLOT_DOT, SLOT_TILED, SLOT_X16, SLOT_X32, SLOT_X32_BF16_FMA, SLOT_X32_F16_WIDEN, SLOT_COUNT };
static const char *const slot_names[SLOT_COUNT] = {"vec_dot/gemm", "tiled", "x16", "x32", "x32_bf16_fma",
                                                   "x32_f16_widen"};

static bool is_one_of(uint32_t t, const uint32_t *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] == t) return true;
    return false;
}

/* The documented fallbacks: why entry (level, type, slot) is NULL, or NULL
 * where it must be filled. */
static const char *expected_null(kern_level l, uint32_t t, int slot) {
    static const uint32_t dot_types[] = {KITE_DTYPE_F32,  KITE_DTYPE_F16,  KITE_DTYPE_BF16,     KITE_DTYPE_Q4_0,
                                         KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_K, KITE_DTYPE_Q6_K,     KITE_DTYPE_W8A8,
                                         KITE_DTYPE_LLM_INT8, KITE_DTYPE_Q5_K, KITE_DTYPE_IQ4_XS, KITE_DTYPE_IQ4_NL,
                                         KITE_DTYPE_Q5_0, KITE_DTYPE_Q3_K, KITE_DTYPE_Q2_K, KITE_DTYPE_Q4_1,
                                         KITE_DTYPE_Q5_1, KITE_DTYPE_TQ1_0, KITE_DTYPE_TQ2_0};
    static const uint32_t float_types[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16};
    static const uint32_t vnni_tiled[] = {KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0};
    static const uint32_t x16_types[] = {KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, KITE_DTYPE_Q4_K,
                                         KITE_DTYPE_Q6_K, KITE_DTYPE_Q5_K, KITE_DTYPE_IQ4_XS, KITE_DTYPE_IQ4_NL,
                                         KITE_DTYPE_Q5_0, KITE_DTYPE_Q3_K, KITE_DTYPE_Q2_K, KITE_DTYPE_Q4_1,
                                         KITE_DTYPE_Q5_1};
    const bool x86 =
#if defined(__x86_64__) || defined(__i386__)
        true;
#else
        false;
#endif
    /* the x86 levels' SIMD registrations exist in x86 builds only (elsewhere those
     * levels are copies of scalar); the AArch64 levels fill no slot below */
    const bool x86_simd = x86 && l >= KERN_LEVEL_AVX2 && l <= KERN_LEVEL_AVX512BF16;
    switch (slot) {
    case SLOT_DOT:
        return is_one_of(t, dot_types, (int)(sizeof dot_types / sizeof dot_types[0])) ? NULL : "no dot kernel: kern_matmul's generic path (to_float, f32 dot)";
    case SLOT_TILED:
        if (!x86_simd) return "scalar and AArch64 levels: the flat GEMM (gemm_tiled_*_ref specify the tiled ones)";
        if (is_one_of(t, float_types, 3)) return NULL;
        if (l >= KERN_LEVEL_AVX512VNNI && is_one_of(t, vnni_tiled, 2)) return NULL;
        return "no tiled kernel at this level: the flat GEMM";
    case SLOT_X16:
        return is_one_of(t, x16_types, (int)(sizeof x16_types / sizeof x16_types[0])) ? NULL
                                                                                   : "no 16-row layout for this type";
    case SLOT_X32: return t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16 ? NULL : "no 32-row layout for this type";
    case SLOT_X32_BF16_FMA:
        return x86_simd && l == KERN_LEVEL_AVX512BF16 && t == KITE_DTYPE_BF16
                   ? NULL
                   : "no option variant: x32 is the only kernel (the FMA one below avx512bf16)";
    default:
        return x86_simd && l >= KERN_LEVEL_AVX512 && t == KITE_DTYPE_F16 ? NULL : "no widened f16 prefill at this level";
    }
}

static bool slot_filled(const kern_type_ops *op, int slot) {
    switch (slot) {
    case SLOT_DOT: return op->vec_dot != NULL;
    case SLOT_TILED: return op->tiled != NULL;
    case SLOT_X16: return op->x16 != NULL;
    case SLOT_X32: return op->x32 != NULL;
    case SLOT_X32_BF16_FMA: return op->x32_bf16_fma != NULL;
    default: return op->x32_f16_widen != NULL;
    }
}

TEST(test_every_entry_filled_or_documented) {
    int n_filled = 0, n_null = 0;
    for (int l = 0; l < KERN_LEVEL_COUNT; l++) {
        const kern_ops_table *kt = kern_table_unchecked((kern_level)l);
        CHECK(kt != NULL && kt->level == (kern_level)l && kt->elt && kt->attn);
        if (!kt) continue;
        CHECK_STR_EQ(kt->name, kern_level_name((kern_level)l));
        for (uint32_t t = 0; t < KITE_DTYPE_COUNT; t++) {
            const kern_type_ops *op = &kt->ops[t];
            if (!dtype_get(t)) { /* no such type: nothing may be registered */
                CHECK_MSG(!op->vec_dot && !op->tiled && !op->x16 && !op->x32, "%s: entry for unknown type %u",
                          kt->name, t);
                continue;
            }
            for (int s = 0; s < SLOT_COUNT; s++) {
                const char *why = expected_null((kern_level)l, t, s);
                const bool filled = slot_filled(op, s);
                CHECK_MSG(filled == (why == NULL), "%s %s %s: %s", kt->name, dtype_name(t), slot_names[s],
                          filled ? "filled but documented as a fallback (update expected_null)" : why);
                filled ? n_filled++ : n_null++;
            }
            CHECK_MSG((op->gemm != NULL) == (op->vec_dot != NULL), "%s %s: gemm iff vec_dot", kt->name, dtype_name(t));
            if (!op->vec_dot) CHECK_MSG(op->act_type == KITE_DTYPE_F32, "%s %s: generic path takes f32", kt->name,
                                        dtype_name(t));
            if (op->act_type != KITE_DTYPE_F32)
                CHECK_MSG(kt->act_from_f32[op->act_type] != NULL, "%s %s: no converter for its act_type %s",
                          kt->name, dtype_name(t), dtype_name(op->act_type));
            if (op->repack) CHECK_MSG(op->x16 || op->x32, "%s %s: repack without a layout kernel", kt->name,
                                      dtype_name(t));
        }
        if (kt->ops[KITE_DTYPE_BF16].x32) CHECK(kt->act_from_f32[KITE_DTYPE_BF16] != NULL); /* x32 bf16 rows */
    }
    printf("    %d entries filled, %d documented fallbacks over %d levels\n", n_filled, n_null, KERN_LEVEL_COUNT);
}

/* ---- SIMD entries against their scalar twins ---- */

static int n_twins[KERN_LEVEL_COUNT];

/* n elements of weight rows (type t; block types: whole blocks) */
static void fill_weights(uint32_t t, int64_t n, int nr, unsigned char *w, size_t stride) {
    float *wf = malloc((size_t)n * sizeof(float));
    void *tmp = malloc(dtype_row_size(t, n));
    for (int r = 0; r < nr; r++) {
        for (int64_t i = 0; i < n; i++) wf[i] = frand() * (i % 61 == 0 ? 8.0f : 1.0f);
        dtype_get(t)->from_float(wf, tmp, n);
        memcpy(w + (size_t)r * stride, tmp, dtype_row_size(t, n));
    }
    free(wf);
    free(tmp);
}

/* The scalar twin of a dot of weight type t with act_type at. */
static kern_vec_dot_fn scalar_dot(const kern_ops_table *ref, uint32_t t, uint32_t at) {
    if (ref->ops[t].act_type == at) return ref->ops[t].vec_dot;
    if (t == KITE_DTYPE_BF16 && at == KITE_DTYPE_BF16) return vec_dot_bf16_bf16_ref;
    return NULL;
}

static void check_dot_entries(const kern_ops_table *kt, const kern_ops_table *ref, uint32_t t) {
    const kern_type_ops *op = &kt->ops[t], *rop = &ref->ops[t];
    if (!op->vec_dot) return;
    const int bs = dtype_get(t)->block_size;
    const int act_bs = op->act_type == KITE_DTYPE_F32 ? 1 : dtype_get(op->act_type)->block_size;
    const int blk = bs > act_bs ? bs : act_bs;
    /* the AArch64 kernels compute the reference's bits (arm_neon/neon.h ARITHMETIC) */
    const bool arm = kt->level == KERN_LEVEL_NEON || kt->level == KERN_LEVEL_DOTPROD;
    const bool exact = t == KITE_DTYPE_W8A8 || t == KITE_DTYPE_LLM_INT8 || op->act_type == KITE_DTYPE_BF16 || arm;
    const double budget = bs == 1 ? FLOAT_BUDGET : INT_BUDGET;
    static const int64_t mults[] = {1, 3, 7, 37};
    for (int mi = 0; mi < 4; mi++) {
        const int64_t n = blk == 1 ? 2 * mults[mi] * 17 + 1 : mults[mi] * blk; /* odd lengths, odd block counts */
        const int nr = 9, nt = KERN_GEMM_MAX_TOK + 3;                         /* tiled: more than a flat group */
        const size_t wb = dtype_row_size(t, n), ab = kern_act_row_bytes(op->act_type, n);
        unsigned char *w = malloc(wb * nr), *a = malloc(ab * nt), *a_ref = malloc(ab * nt);
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc(sizeof(float) * (size_t)(nr * nt));
        fill_weights(t, n, nr, w, wb);
        for (int k = 0; k < nt; k++) {
            for (int64_t j = 0; j < n; j++) x[j] = frand() * (k % 3 == 2 ? 30.0f : 1.0f);
            if (op->act_type == KITE_DTYPE_F32) {
                memcpy(a + k * ab, x, ab);
                continue;
            }
            kt->act_from_f32[op->act_type](x, a + k * ab, n);
            ref->act_from_f32[op->act_type](x, a_ref + k * ab, n);
            if (kt->act_from_f32[op->act_type] != ref->act_from_f32[op->act_type]) {
                CHECK_MSG(memcmp(a + k * ab, a_ref + k * ab, ab) == 0,
                          "%s act_from_f32[%s] n=%lld: not the scalar bytes", kt->name, dtype_name(op->act_type),
                          (long long)n);
                n_twins[kt->level]++;
            }
        }
        /* vec_dot vs the scalar twin */
        const kern_vec_dot_fn twin = scalar_dot(ref, t, op->act_type);
        CHECK_MSG(twin != NULL, "%s %s: no scalar twin for act %s", kt->name, dtype_name(t), dtype_name(op->act_type));
        if (twin && op->vec_dot != twin) {
            for (int r = 0; r < nr; r++) {
                float v, vr;
                op->vec_dot(n, &v, w + r * wb, a + r * ab);
                twin(n, &vr, w + r * wb, a + r * ab);
                const double tol = exact ? 0.0 : budget * magnitude(t, op->act_type, n, w + r * wb, a + r * ab) + 1e-30;
                CHECK_MSG(fabs((double)v - vr) <= tol && (!exact || memcmp(&v, &vr, sizeof v) == 0),
                          "%s %s vec_dot n=%lld row %d: %.9g vs scalar %.9g", kt->name, dtype_name(t), (long long)n, r,
                          v, vr);
            }
            n_twins[kt->level]++;
        }
        /* gemm and tiled vs this level's vec_dot, bit for bit */
        for (int g = 0; g < 2; g++) {
            const bool tiled = g == 1;
            if (tiled ? !op->tiled : op->gemm == rop->gemm) continue;
            for (int rows = 1; rows <= nr; rows += rows < 5 ? 1 : 4) {
                const int toks = tiled ? nt : rows % 2 ? KERN_GEMM_MAX_TOK : 3;
                for (int q = 0; q < nr * nt; q++) y[q] = NAN;
                if (tiled) op->tiled(n, y, nr, w, wb, rows, a, ab, toks);
                else op->gemm(n, y, nr, w, wb, rows, a, ab, toks);
                for (int k = 0; k < toks; k++)
                    for (int r = 0; r < rows; r++) {
                        float v;
                        op->vec_dot(n, &v, w + r * wb, a + k * ab);
                        CHECK_MSG(memcmp(&v, &y[k * nr + r], sizeof v) == 0,
                                  "%s %s %s n=%lld %dx%d (%d,%d): %.9g vs %.9g", kt->name, dtype_name(t), tiled ? "tiled" : "gemm", (long long)n, rows, toks, r, k,
                                  y[k * nr + r], v);
                    }
            }
            n_twins[kt->level]++;
        }
        free(w);
        free(a);
        free(a_ref);
        free(x);
        free(y);
    }
}

/* x16: one group of 16 rows, nb blocks (one panel), nt tokens */
static void check_x16_entry(const kern_ops_table *kt, const kern_ops_table *ref, uint32_t t) {
    const kern_gemm_x16_fn f = kt->ops[t].x16, fr = ref->ops[t].x16;
    if (!f || f == fr) return;
    const uint32_t at = kern_x16_block_elems(t) == QK_K ? KITE_DTYPE_Q8_K : KITE_DTYPE_Q8_0;
    for (int64_t nb = 1; nb <= 7; nb += 3) {
        const int64_t n = nb * kern_x16_block_elems(t);
        const size_t wb = dtype_row_size(t, n), ab = dtype_row_size(at, n);
        unsigned char *w = malloc(wb * X16_ROWS), *a = malloc(ab * X16_MAX_TOK);
        void *tmp = malloc(kern_x16_pack_tmp_bytes(t, X16_ROWS, n));
        float *x = malloc((size_t)n * sizeof(float));
        int32_t corr[X16_MAX_TOK * 7 * 8];
        float da[X16_MAX_TOK * 7 * 8], y0[X16_MAX_TOK * X16_ROWS], y1[X16_MAX_TOK * X16_ROWS];
        const int64_t cs = n / 32; /* corr/da per 32-element block (q4_0, q8_0) */
        fill_weights(t, n, X16_ROWS, w, wb);
        kern_x16_pack(t, w, X16_ROWS, n, tmp);
        for (int k = 0; k < X16_MAX_TOK; k++) {
            for (int64_t j = 0; j < n; j++) x[j] = frand();
            ref->act_from_f32[at](x, a + k * ab, n);
            if (at == KITE_DTYPE_Q8_0)
                kern_x16_act_prep(a + k * ab, cs, kern_x16_offset(t), corr + k * cs, da + k * cs);
        }
        for (int nt = 1; nt <= X16_MAX_TOK; nt += 5)
            for (int acc = 0; acc < 2; acc++) {
                for (int q = 0; q < X16_MAX_TOK * X16_ROWS; q++) y0[q] = y1[q] = (float)(q % 5);
                fr(nb, y0, X16_ROWS, w, a, ab, corr, da, cs, nt, acc);
                f(nb, y1, X16_ROWS, w, a, ab, corr, da, cs, nt, acc);
                CHECK_MSG(memcmp(y0, y1, sizeof(float) * (size_t)(nt * X16_ROWS)) == 0,
                          "%s %s x16 nb=%lld nt=%d acc=%d", kt->name, dtype_name(t), (long long)nb, nt, acc);
            }
        n_twins[kt->level]++;
        free(w);
        free(a);
        free(tmp);
        free(x);
    }
}

/* x32 and its option variants: ng groups of 32 rows, K odd (f16) or even (bf16) */
static void check_x32_entries(const kern_ops_table *kt, const kern_ops_table *ref, uint32_t t) {
    const kern_type_ops *op = &kt->ops[t];
    const kern_gemm_x32_fn fr = ref->ops[t].x32;
    if (!op->x32 || (op->x32 == fr && !op->x32_bf16_fma && !op->x32_f16_widen)) return;
    const int64_t u = kern_x32_unit(t), K = t == KITE_DTYPE_BF16 ? 74 : 37, S = K / u, ng = 3, ldy = ng * 32 + 1;
    const int n_tok = X32_TOK + 5; /* the widened prefill's two token groups */
    uint16_t *w = malloc((size_t)(ng * 32 * K) * 2);
    void *tmp = malloc(kern_x32_pack_tmp_bytes(K));
    fill_weights(t, K, (int)ng * 32, (unsigned char *)w, (size_t)K * 2);
    kern_x32_pack(t, w, ng * 32, K, tmp);
    float *x = malloc((size_t)(n_tok * K) * sizeof(float));
    unsigned char *rows = malloc((size_t)(n_tok * K) * 4); /* f16: the floats; bf16: the bf16 rows */
    for (int64_t i = 0; i < n_tok * K; i++) x[i] = frand();
    if (t == KITE_DTYPE_BF16) ref->act_from_f32[KITE_DTYPE_BF16](x, rows, n_tok * K);
    else memcpy(rows, x, (size_t)(n_tok * K) * sizeof(float));
    const size_t rs = (size_t)S * 4; /* bytes per token row: S 4-byte units */
    unsigned char *xp = malloc((size_t)(n_tok * S) * 4), *xw = malloc((size_t)(n_tok * S) * 8);
    float *buf = malloc((size_t)(ng * 32 * K) * sizeof(float));
    float *y0 = malloc((size_t)(n_tok * ldy) * sizeof(float)), *y1 = malloc((size_t)(n_tok * ldy) * sizeof(float));
    /* token groups of X32_TOK packed one after the other (gemm_x32.h ACTIVATIONS) */
    for (int k = 0; k < n_tok; k += X32_TOK) {
        const int nt = n_tok - k < X32_TOK ? n_tok - k : X32_TOK;
        kern_x32_pack_act(rows + (size_t)k * rs, rs, S, nt, xp + (size_t)k * S * 4);
        kern_x32_pack_act_wide(rows + (size_t)k * rs, rs, S, nt, (float *)(void *)(xw + (size_t)k * S * 8));
    }
    for (int i = 0; i < n_tok * ldy; i++) y0[i] = NAN;
    for (int k = 0; k < n_tok; k += X32_TOK)
        fr(K, w, ng, xp + (size_t)k * S * 4, n_tok - k < X32_TOK ? n_tok - k : X32_TOK, y0 + k * ldy, ldy);
    for (int v = 0; v < 3; v++) { /* x32, x32_bf16_fma, x32_f16_widen */
        const kern_gemm_x32_fn f = v == 0 ? op->x32 : v == 1 ? op->x32_bf16_fma : NULL;
        const bool wide = v == 0 ? op->x32_wide : v == 1;
        if (v == 0 && f == fr) continue;
        if (v < 2 && !f) continue;
        if (v == 2 && !op->x32_f16_widen) continue;
        for (int i = 0; i < n_tok * ldy; i++) y1[i] = NAN;
        if (v == 2)
            op->x32_f16_widen(K, w, ng, xp, (size_t)S * 4, n_tok, y1, ldy, buf);
        else
            for (int k = 0; k < n_tok; k += X32_TOK)
                f(K, w, ng, wide ? xw + (size_t)k * S * 8 : xp + (size_t)k * S * 4,
                  n_tok - k < X32_TOK ? n_tok - k : X32_TOK, y1 + k * ldy, ldy);
        for (int k = 0; k < n_tok; k++)
            CHECK_MSG(memcmp(y0 + k * ldy, y1 + k * ldy, sizeof(float) * (size_t)(ng * 32)) == 0,
                      "%s %s x32 variant %d token %d: not the scalar bits", kt->name, dtype_name(t), v, k);
        n_twins[kt->level]++;
    }
    free(w);
    free(tmp);
    free(x);
    free(rows);
    free(xp);
    free(xw);
    free(buf);
    free(y0);
    free(y1);
}

TEST(test_type_entries_equal_scalar_twins) {
    const kern_ops_table *ref = kern_table_for_level(KERN_LEVEL_SCALAR);
    for (int l = 1; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        for (uint32_t t = 0; t < KITE_DTYPE_COUNT; t++) {
            if (!dtype_get(t)) continue;
            check_dot_entries(kt, ref, t);
            check_x16_entry(kt, ref, t);
            check_x32_entries(kt, ref, t);
        }
        printf("    level %-10s %d SIMD entries checked against their scalar twins\n", kt->name, n_twins[l]);
    }
    if (kern_level_max() == KERN_LEVEL_SCALAR) printf("    scalar only: no SIMD entries on this machine\n");
}

static bool near_elt(float v, float r) {
    if (isnan(r)) return isnan(v);
    return fabs((double)v - r) <= ELT_BUDGET * (1.0 + fabs((double)r));
}

TEST(test_elt_entries) {
    const kern_elt_ops *s = kern_table_for_level(KERN_LEVEL_SCALAR)->elt;
    enum { N = 37 }; /* odd: vector body plus a masked tail */
    float x[N], g[N], b[N], y0[N], y1[N];
    for (int i = 0; i < N; i++) x[i] = frand() * 4.0f, g[i] = 1.0f + frand() * 0.5f, b[i] = frand();
    for (int l = 1; l <= (int)kern_level_max(); l++) {
        if (!kern_level_supported((kern_level)l)) continue; /* another architecture's level */
        const kern_elt_ops *o = kern_table_for_level((kern_level)l)->elt;
        int n = 0;
#define ELT_CMP(NAME, CALL0, CALL1)                                                                             \
    if (o->NAME != s->NAME) {                                                                                   \
        memcpy(y0, x, sizeof x);                                                                                \
        memcpy(y1, x, sizeof x);                                                                                \
        CALL0;                                                                                                  \
        CALL1;                                                                                                  \
        for (int i = 0; i < N; i++)                                                                             \
            CHECK_MSG(near_elt(y1[i], y0[i]), "%s %s [%d]: %.9g vs scalar %.9g", o->name, #NAME, i, y1[i], y0[i]); \
        n++;                                                                                                    \
    }
        ELT_CMP(rmsnorm, s->rmsnorm(y0, x, g, N, 1e-5f), o->rmsnorm(y1, x, g, N, 1e-5f))
        ELT_CMP(layernorm, s->layernorm(y0, x, g, b, N, 1e-5f), o->layernorm(y1, x, g, b, N, 1e-5f))
        ELT_CMP(softmax, s->softmax(y0, N), o->softmax(y1, N))
        ELT_CMP(swiglu, s->swiglu(y0, g, N), o->swiglu(y1, g, N))
        ELT_CMP(gelu, s->gelu(y0, N), o->gelu(y1, N))
        ELT_CMP(add, s->add(y0, b, N), o->add(y1, b, N))
        ELT_CMP(exp, s->exp(y0, x, N), o->exp(y1, x, N))
#undef ELT_CMP
        CHECK(o->name != NULL);
        printf("    level %-10s %d element-wise entries (%s) checked against scalar\n",
               kern_level_name((kern_level)l), n, o->name);
    }
}

TEST(test_attn_entries) {
    const attn_ops *s = kern_table_for_level(KERN_LEVEL_SCALAR)->attn;
    enum { HD = 45, ROWS = 5, NQ = 3 }; /* odd head size: 8-lane body plus tail */
    static float q[HD], k[ROWS * HD], w[NQ * ROWS], y0[NQ * HD * ROWS], y1[NQ * HD * ROWS];
    static unsigned char qb[2 * 34];
    static uint16_t h[64];
    for (int i = 0; i < HD; i++) q[i] = frand();
    for (int i = 0; i < ROWS * HD; i++) k[i] = frand();
    for (int i = 0; i < NQ * ROWS; i++) w[i] = frand() * 2.0f - (float)(i % 3);
    for (int i = 0; i < 64; i++) h[i] = fp32_to_fp16(frand() * 3.0f);
    for (size_t i = 0; i < sizeof qb; i++) qb[i] = (unsigned char)rnd();
    qb[1] = qb[19] = qb[35] = 0x3c; /* finite f16 scales of both q4_0 (18 bytes) and q8_0 (34) blocks */
    const int32_t lo[NQ] = {0, 2, 4}, hi[NQ] = {5, 3, 4};
    for (int l = 1; l <= (int)kern_level_max(); l++) {
        if (!kern_level_supported((kern_level)l)) continue; /* another architecture's level */
        const attn_ops *o = kern_table_for_level((kern_level)l)->attn;
        int n = 0;
#define ATTN_CMP(NAME, ...)                                                                                     \
    if (o->NAME != s->NAME) {                                                                                   \
        const attn_ops *f_ = s;                                                                                 \
        float *y_ = y0;                                                                                         \
        for (int pass = 0; pass < 2; pass++, f_ = o, y_ = y1) {                                                 \
            for (int i = 0; i < NQ * HD * ROWS; i++) y_[i] = (float)(i % 7) * 0.25f;                            \
            __VA_ARGS__;                                                                                        \
        }                                                                                                       \
        CHECK_MSG(memcmp(y0, y1, sizeof y0) == 0, "%s attn %s: not the scalar bits", o->name, #NAME);          \
        n++;                                                                                                    \
    }
        ATTN_CMP(dot, y_[0] = f_->dot(q, k, HD))
        ATTN_CMP(dot_rows, f_->dot_rows(q, k, HD, ROWS, HD, y_))
        ATTN_CMP(axpy, f_->axpy(y_, 0.7f, k, HD))
        ATTN_CMP(axpy_rows, f_->axpy_rows(y_, w, k, HD, ROWS, HD))
        ATTN_CMP(axpy_rows_multi, f_->axpy_rows_multi(y_, HD, w, ROWS, lo, hi, NQ, k, HD, HD))
        ATTN_CMP(scale, f_->scale(y_, 1.3f, HD))
        ATTN_CMP(exp_sum, memcpy(y_, k, sizeof(float) * HD); y_[HD] = f_->exp_sum(y_, 0.5f, HD))
        ATTN_CMP(max, y_[0] = f_->max(k, HD))
        ATTN_CMP(transpose, f_->transpose(k, HD, ROWS, HD, y_, ROWS))
        ATTN_CMP(deq_f16, f_->deq_f16(h, y_, 64))
        ATTN_CMP(deq_q8_0, f_->deq_q8_0(qb, y_, 64))
        ATTN_CMP(deq_q4_0, f_->deq_q4_0(qb, y_, 64))
#undef ATTN_CMP
        CHECK(o->name != NULL);
        printf("    level %-10s %d attention entries (%s) checked against scalar\n", kern_level_name((kern_level)l),
               n, o->name);
    }
}

int main(void) {
    RUN(test_every_entry_filled_or_documented);
    RUN(test_type_entries_equal_scalar_twins);
    RUN(test_elt_entries);
    RUN(test_attn_entries);
    return harness_summary(__FILE__);
}
