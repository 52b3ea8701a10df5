/*
 * test_x32.c - the 32-row interleaved f16 / bf16 layout (kernels/gemm_x32.h)
 * and its load-time use (model/repack.c).
 *
 *   - repacking gives each row back through kern_get_row (rows in groups
 *     and the plain tail rows), and puts element k of row i where the
 *     layout says;
 *   - the scalar references follow their chains (checked against a
 *     double-precision sum), and the SIMD kernels equal them bit for bit for
 *     every token count 1..X32_TOK, 1-6 groups and odd K (f16) or K not a
 *     multiple of 32 (bf16), with extreme and subnormal weights;
 *   - kern_matmul on repacked weights, at every level: within FLOAT_BUDGET
 *     (bf16: plus the activation rounding) of a double reference;
 *     bit-identical for 1 and 3 threads, for a batch versus token by token
 *     and for a fused call versus single ones; the grouped rows equal the
 *     reference at every level, and the tail rows equal kern_matmul on the
 *     plain weight;
 *   - synthesized f16 and bf16 models load repacked where the level gains
 *     from it, and their logits match the plain-layout load within a bound.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x32.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/model.h"
#include "roofline/synth.h"
#include "repack_harness.h"
#include "tensor/dtype.h"

#define FLOAT_BUDGET 1e-5 /* test_kernels.c's budget for float sums: |y - ref| <= 1e-5 * sum|w*x| */

static const uint32_t k_types[2] = {KITE_DTYPE_F16, KITE_DTYPE_BF16};

static uint16_t to_half(uint32_t t, float v) { return t == KITE_DTYPE_BF16 ? fp32_to_bf16(v) : fp32_to_fp16(v); }

/* nr random rows of ne0 halves of type t (plain), with a few extreme values. */
static uint16_t *make_rows16(uint32_t t, int64_t nr, int64_t ne0) {
    uint16_t *w = malloc((size_t)(nr * ne0) * sizeof *w);
    for (int64_t i = 0; i < nr * ne0; i++) w[i] = to_half(t, frand() * ldexpf(1.0f, (int)(i % 7) - 3));
    w[0] = t == KITE_DTYPE_BF16 ? 0x4780 : 0x7bff; /* 65536, 65504 (f16: its largest) */
    w[nr * ne0 - 1] = 0x0001;                        /* smallest subnormal (bf16: flushed by vdpbf16ps) */
    if (nr * ne0 > 40) w[40] = 0x8000;               /* -0 */
    if (t == KITE_DTYPE_BF16 && nr > 5) /* DAZ / FTZ: row 3 subnormal (products flushed to 0), row 5 at */
        for (int64_t k = 0; k < ne0; k++) { /* FLT_MIN (products under 1 in size are subnormal, flushed) */
            w[3 * ne0 + k] = (uint16_t)((k % 2 ? 0x8000 : 0) | (1 + k % 127));
            w[5 * ne0 + k] = (uint16_t)(k % 3 ? 0x0080 : 0x8080);
        }
    return w;
}

/* Sizes with K that the type allows: bf16 needs an even K. */
static int64_t k_for(uint32_t t, int64_t k) { return t == KITE_DTYPE_BF16 && k % 2 ? k + 1 : k; }

/* Activation units of nt tokens (x: [nt][K] floats): f16 the floats, bf16
 * the bf16 pairs (xr: x rounded to bf16, the values the kernel sees). */
static void act_units(uint32_t t, const float *x, int64_t K, int nt, float *xr, void *units) {
    if (t == KITE_DTYPE_BF16) {
        uint16_t *h = units;
        for (int64_t i = 0; i < nt * K; i++) {
            h[i] = fp32_to_bf16(x[i]);
            xr[i] = bf16_to_fp32(h[i]);
        }
    } else {
        memcpy(units, x, (size_t)(nt * K) * sizeof(float));
        memcpy(xr, x, (size_t)(nt * K) * sizeof(float));
    }
}

TEST(test_pack_get_row) {
    const int64_t shapes[][2] = {{32, 1}, {37, 5}, {101, 130}, {64, 2051}};
    for (int ti = 0; ti < 2; ti++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const uint32_t t = k_types[ti];
            const int64_t nr = shapes[s][0], ne0 = k_for(t, shapes[s][1]), u = kern_x32_unit(t);
            uint16_t *plain = make_rows16(t, nr, ne0), *packed = malloc((size_t)(nr * ne0) * 2);
            void *tmp = malloc(kern_x32_pack_tmp_bytes(ne0));
            memcpy(packed, plain, (size_t)(nr * ne0) * 2);
            kern_x32_pack(t, packed, nr, ne0, tmp);
            weight w = {.type = t, .ne = {ne0, nr}, .row_bytes = (size_t)ne0 * 2, .data = packed,
                        .layout = WEIGHT_LAYOUT_X32};
            CHECK_EQ_INT((int)kern_x32_rows(&w), (int)(nr / 32 * 32));
            float *got = malloc((size_t)ne0 * sizeof(float)), *want = malloc((size_t)ne0 * sizeof(float));
            for (int64_t r = 0; r < nr; r++) {
                kern_get_row(&w, r, got);
                dtype_get(t)->to_float(plain + r * ne0, want, ne0);
                CHECK_MSG(memcmp(got, want, (size_t)ne0 * sizeof(float)) == 0, "%s %lld x %lld: row %lld",
                          dtype_name(t), (long long)nr, (long long)ne0, (long long)r);
            }
            if (nr >= 64 && ne0 > 3) /* the layout itself: row 33's element 3 in group 1 */
                CHECK(packed[ne0 * 32 + ((3 / u) * 32 + 1) * u + 3 % u] == plain[33 * ne0 + 3]);
            if (nr % 32) /* tail rows stay where they were */
                CHECK(memcmp(packed + nr / 32 * 32 * ne0, plain + nr / 32 * 32 * ne0, (size_t)(nr % 32 * ne0) * 2) ==
                      0);
            free(plain);
            free(packed);
            free(tmp);
            free(got);
            free(want);
        }
}

/* The references against a double-precision sum, and the SIMD kernels against the references. */
TEST(test_kernel_equals_ref) {
    const int64_t ks[] = {1, 7, 37, 130, 2051};
    int n = 0;
    double worst = 0;
    const kern_level simd_level[2] = {KERN_LEVEL_AVX512, KERN_LEVEL_AVX512BF16};
    const bool pf0 = kern_decode_prefetch();
    for (int ti = 0; ti < 2; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            const uint32_t ty = k_types[ti];
            const int64_t K = k_for(ty, ks[ki]), ng = 6, ldy = ng * 32 + 3, S = K / kern_x32_unit(ty);
            const bool simd = kern_level_max() >= simd_level[ti];
            uint16_t *w = make_rows16(ty, ng * 32, K);
            void *tmp = malloc(kern_x32_pack_tmp_bytes(K));
            float *wf = malloc((size_t)(ng * 32 * K) * sizeof(float));
            dtype_get(ty)->to_float(w, wf, ng * 32 * K);
            if (ty == KITE_DTYPE_BF16) /* vdpbf16ps treats subnormal inputs as zeros */
                for (int64_t i = 0; i < ng * 32 * K; i++) wf[i] = fabsf(wf[i]) < FLT_MIN ? 0.0f : wf[i];
            kern_x32_pack(ty, w, ng * 32, K, tmp);
            const size_t nx = (size_t)(X32_TOK * K);
            float *x = malloc(nx * sizeof(float)), *xr = malloc(nx * sizeof(float));
            void *units = malloc(nx * 4), *xp = malloc(nx * 4);
            /* bf16: K / 2 pairs x 2 floats per token; f16: the widened groups */
            float *xw = malloc((nx > (size_t)(ng * 32 * K) ? nx : (size_t)(ng * 32 * K)) * 4);
            for (size_t i = 0; i < nx; i++) x[i] = frand() * (i % 97 == 0 ? 50.0f : 1.0f);
            act_units(ty, x, K, X32_TOK, xr, units);
            float *y0 = malloc((size_t)(X32_TOK * ldy) * 4), *y1 = malloc((size_t)(X32_TOK * ldy) * 4);
            for (int nt = 1; nt <= X32_TOK; nt++) {
                kern_x32_pack_act(units, (size_t)S * 4, S, nt, xp);
                if (ty == KITE_DTYPE_BF16) kern_x32_pack_act_wide(units, (size_t)S * 4, S, nt, xw);
                for (int64_t g = 1; g <= ng; g += g < 3 ? 1 : 3) { /* 1, 2, 3, 6 groups: the wide tile and leftovers */
                    for (int64_t i = 0; i < X32_TOK * ldy; i++) y0[i] = y1[i] = NAN;
                    kern_gemm_x32_get(KERN_LEVEL_SCALAR, ty)(K, w, g, xp, nt, y0, ldy);
                    for (int t = 0; t < nt; t++)
                        for (int64_t r = 0; r < g * 32; r++) {
                            double sum = 0, mag = 0;
                            for (int64_t k = 0; k < K; k++) {
                                sum += (double)wf[r * K + k] * xr[t * K + k];
                                mag += fabs((double)wf[r * K + k] * xr[t * K + k]);
                            }
                            const double e = fabs(y0[t * ldy + r] - sum) / (FLOAT_BUDGET * mag + 1e-30);
                            if (e > worst) worst = e;
                            CHECK_MSG(e <= 1, "%s ref K %lld nt %d row %lld: %.9g vs %.9g", dtype_name(ty),
                                      (long long)K, nt, (long long)r, y0[t * ldy + r], sum);
                        }
                    /* every SIMD kernel of the type: f16 as it is and with the block widened (prefill on
                     * Intel); bf16 with vdpbf16ps (pairs) and with FMAs (widened activations) */
                    for (int v = 0; v < 2; v++) {
                        const bool wide = v == 1;
                        if (wide ? kern_level_max() < KERN_LEVEL_AVX512 : !simd) continue;
                        const kern_gemm_x32_fn fn = ty == KITE_DTYPE_F16 ? gemm_x32_f16_avx512
                                                    : wide               ? gemm_x32_bf16f_avx512
                                                                         : gemm_x32_bf16_avx512bf16;
                        for (int pf = 0; pf < 2; pf++) { /* decode prefetch off and on (dispatch.h) */
                            kern_decode_prefetch_set(pf);
                            for (int64_t i = 0; i < X32_TOK * ldy; i++) y1[i] = NAN;
                            if (ty == KITE_DTYPE_F16 && wide) /* one token group: xp_row is not used */
                                gemm_x32_f16_widened_avx512(K, w, g, xp, 0, nt, y1, ldy, xw);
                            else
                                fn(K, w, g, wide ? (const void *)xw : xp, nt, y1, ldy);
                            CHECK_MSG(memcmp(y0, y1, (size_t)(X32_TOK * ldy) * 4) == 0,
                                      "%s%s K %lld groups %lld nt %d prefetch %d", dtype_name(ty),
                                      wide ? " (widened)" : "", (long long)K, (long long)g, nt, pf);
                            n++;
                        }
                    }
                    kern_decode_prefetch_set(pf0);
                }
            }
            free(w);
            free(tmp);
            free(wf);
            free(x);
            free(xr);
            free(units);
            free(xp);
            free(xw);
            free(y0);
            free(y1);
        }
    printf("    references: worst error %.3f of FLOAT_BUDGET; %d SIMD calls bit-identical to them\n", worst, n);
    if (kern_level_max() < KERN_LEVEL_AVX512BF16)
        SKIP_TEST("this CPU lacks AVX-512 (BF16): the references were checked, not every SIMD kernel");
}

/* kern_matmul (single and fused) on a repacked weight of type ty at level l. */
static void check_matmul(kern_level l, uint32_t ty, threadpool *tp1, threadpool *tp3, float *y_level0) {
    const kern_ops_table *kt = kern_table_for_level(l);
    g_rng = 0xF16u + ty; /* the same data at every level */
    const int64_t ne0 = 130, nr = 3 * 32 + 11, n_tok = 29; /* 3 groups + 11 tail rows; 2 full token groups + 5 */
    uint16_t *plain = make_rows16(ty, nr, ne0), *packed = malloc((size_t)(nr * ne0) * 2);
    void *tmp = malloc(kern_x32_pack_tmp_bytes(ne0));
    memcpy(packed, plain, (size_t)(nr * ne0) * 2);
    kern_x32_pack(ty, packed, nr, ne0, tmp);
    weight wp = {.type = ty, .ne = {ne0, nr}, .row_bytes = (size_t)ne0 * 2, .data = plain};
    weight w = wp;
    w.data = packed;
    w.layout = WEIGHT_LAYOUT_X32;
    float *x = malloc((size_t)(n_tok * ne0) * sizeof(float)), *wf = malloc((size_t)(nr * ne0) * sizeof(float));
    for (int64_t i = 0; i < n_tok * ne0; i++) x[i] = frand() * 2.0f;
    dtype_get(ty)->to_float(plain, wf, nr * ne0);
    const size_t sb = kern_matmul_scratch_bytes(3, n_tok, ne0);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    const size_t ny = (size_t)(n_tok * nr) * sizeof(float);
    float *y1 = malloc(ny), *y3 = malloc(ny), *yd = malloc(ny), *yf = malloc(2 * ny), *yp = malloc(ny);
    kern_matmul_with(kt, tp1, &w, x, n_tok, y1, nr, scratch);
    kern_matmul_with(kt, tp3, &w, x, n_tok, y3, nr, scratch);
    for (int64_t k = 0; k < n_tok; k++) kern_matmul_with(kt, tp3, &w, x + k * ne0, 1, yd + k * nr, nr, scratch);
    kern_matmul_with(kt, tp3, &wp, x, n_tok, yp, nr, scratch);
    const kern_mm_item items[2] = {{&w, yf, nr}, {&w, yf + n_tok * nr, nr}};
    kern_matmul_fused_with(kt, tp3, items, 2, x, n_tok, scratch, NULL, NULL);
    const char *tn = dtype_name(ty);
    CHECK_MSG(memcmp(y1, y3, ny) == 0, "%s %s: 1 vs 3 threads differ", kt->name, tn);
    CHECK_MSG(memcmp(y1, yd, ny) == 0, "%s %s: batch vs token by token differ", kt->name, tn);
    CHECK_MSG(memcmp(y1, yf, ny) == 0 && memcmp(y1, yf + n_tok * nr, ny) == 0, "%s %s: fused differs", kt->name, tn);
    /* bf16 activations: each is rounded by up to 2^-8 of itself (8 significant bits), a bound
     * the one large weight of row 0 nearly reaches (0.74 of it) */
    const double act_round = ty == KITE_DTYPE_BF16 ? 1.0 / 256 : 0.0;
    double worst = 0;
    for (int64_t k = 0; k < n_tok; k++) {
        for (int64_t r = 0; r < nr; r++) {
            double sum = 0, mag = 0;
            for (int64_t i = 0; i < ne0; i++) {
                sum += (double)wf[r * ne0 + i] * x[k * ne0 + i];
                mag += fabs((double)wf[r * ne0 + i] * x[k * ne0 + i]);
            }
            const double e = fabs(y1[k * nr + r] - sum) / ((FLOAT_BUDGET + act_round) * mag + 1e-30);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1, "%s %s t=%lld r=%lld: %.9g vs %.9g", kt->name, tn, (long long)k, (long long)r,
                      y1[k * nr + r], sum);
        }
        CHECK_MSG(memcmp(y1 + k * nr + 96, yp + k * nr + 96, 11 * sizeof(float)) == 0, "%s %s: tail rows, token %lld",
                  kt->name, tn, (long long)k);
    }
    if (l == KERN_LEVEL_SCALAR) memcpy(y_level0, y1, ny);
    else /* grouped rows follow the reference exactly at every level */
        for (int64_t k = 0; k < n_tok; k++)
            CHECK_MSG(memcmp(y1 + k * nr, y_level0 + k * nr, 96 * sizeof(float)) == 0, "%s %s vs scalar, token %lld",
                      kt->name, tn, (long long)k);
    if (l == kern_level_max()) printf("    matmul x32 %s (%s): worst error %.3f of budget\n", tn, kt->name, worst);
    free(plain);
    free(packed);
    free(tmp);
    free(x);
    free(wf);
    free(scratch);
    free(y1);
    free(y3);
    free(yd);
    free(yf);
    free(yp);
}

TEST(test_matmul_levels) {
    threadpool *tp1 = tp_new(1), *tp3 = tp_new(3);
    CHECK(tp1 && tp3);
    float *y0 = malloc((size_t)(29 * 107) * sizeof(float));
    for (int ti = 0; ti < 2 && tp1 && tp3; ti++)
        for (int l = 0; l <= (int)kern_level_max(); l++) check_matmul((kern_level)l, k_types[ti], tp1, tp3, y0);
    free(y0);
    tp_free(tp1);
    tp_free(tp3);
}

TEST(test_model_repack) {
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t ty = k_types[ti];
        char path[64];
        snprintf(path, sizeof path, "/tmp/kite-test-x32-%d-%d.gguf", (int)getpid(), ti);
        synth_params sp = {.shape = *synth_shape_find("tiny-llama3"), .type = ty, .seed = 7};
        CHECK_EQ_INT(synth_write(&sp, path), KITE_OK);
        int n0 = -1, n1 = -1;
        int32_t nv = 0;
        float *plain = repack_logits_of(path, true, &n0, &nv), *packed = repack_logits_of(path, false, &n1, &nv);
        CHECK(plain && packed);
        CHECK_EQ_INT(n0, 0);
        if (kern_x32_pays(kern_table()->level, ty, sp.shape.n_embd, X32_ROWS)) CHECK(n1 > 0);
        else CHECK_EQ_INT(n1, 0);
        double worst = 0, mag = 0;
        for (size_t i = 0; plain && packed && i < (size_t)nv * REPACK_N_TOK; i++) {
            worst = fmax(worst, fabs((double)plain[i] - packed[i]));
            mag = fmax(mag, fabs((double)plain[i]));
        }
        /* Another float summation order through every layer: a few ulps of the
         * logits' scale for f16.  bf16 activations are rounded to 8 bits before
         * every matmul, so a last-bit difference can move one by 2^-8 of itself
         * in a later layer: that much room (relative to the largest logit).  A
         * layout or kernel error is far larger than either. */
        const double bound = ty == KITE_DTYPE_BF16 ? 4e-3 * mag : 1e-4 * mag + 1e-6;
        CHECK_MSG(worst <= bound, "%s: max |plain - repacked| %.3g (max |logit| %.3g)", dtype_name(ty), worst, mag);
        printf("    %s model: %d matrices repacked, max logit difference %.3g (max |logit| %.3g)\n", dtype_name(ty), n1,
               worst, mag);
        free(plain);
        free(packed);
        unlink(path);
    }
}

/* The kernel options choose the bf16 and f16 kernels (dispatch.h kern_opt):
 * both settings are reachable, and below avx512bf16 the FMA kernel is the
 * only bf16 one whatever the option says. */
TEST(test_options_pick_kernels) {
    const bool bf0 = kern_opt_on(KERN_OPT_BF16_FMA), f0 = kern_opt_on(KERN_OPT_F16_WIDEN);
    for (int on = 0; on < 2; on++) {
        kern_opt_set(KERN_OPT_BF16_FMA, on);
        kern_opt_set(KERN_OPT_F16_WIDEN, on);
        CHECK(!kern_x32_bf16_wide(KERN_LEVEL_AVX2));
        CHECK(kern_x32_f16_widen(KERN_LEVEL_AVX2) == NULL);
#if defined(__x86_64__) || defined(__i386__)
        CHECK(kern_x32_bf16_wide(KERN_LEVEL_AVX512VNNI));
        CHECK_EQ_INT(kern_x32_bf16_wide(KERN_LEVEL_AVX512BF16), on);
        CHECK(kern_gemm_x32_get(KERN_LEVEL_AVX512BF16, KITE_DTYPE_BF16) ==
              (on ? gemm_x32_bf16f_avx512 : gemm_x32_bf16_avx512bf16));
        CHECK((kern_x32_f16_widen(KERN_LEVEL_AVX512) != NULL) == on);
#endif
    }
    kern_opt_set(KERN_OPT_BF16_FMA, bf0);
    kern_opt_set(KERN_OPT_F16_WIDEN, f0);
}

/* f16_compute BF16's rounding (repack.c), every f16 value: the float's bf16, nearest even,
 * NaN quiet: what `kite quantize` writes for a bf16 copy of an F16 file. */
static void test_f16_to_bf16_all(void) {
    uint16_t *h = malloc(65536 * sizeof *h);
    CHECK(h);
    if (!h) return;
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    model_f16_to_bf16_row(h, 65536);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) bad += h[i] != fp32_to_bf16(fp16_to_fp32((uint16_t)i));
    CHECK(bad == 0);
    CHECK(h[0x3c00] == 0x3f80); /* 1.0 */
    CHECK(h[0x3c01] == 0x3f80); /* 1 + 2^-10: below half a bf16 step, down */
    CHECK(h[0x3c04] == 0x3f80); /* 1 + 2^-8: exactly half, to even */
    CHECK(h[0x3c0c] == 0x3f82); /* 1 + 3 * 2^-8: half, to even (up) */
    CHECK(h[0x0001] == 0x3380); /* the smallest subnormal, 2^-24, a normal bf16 */
    CHECK(h[0x7c00] == 0x7f80 && h[0xfc00] == 0xff80); /* +-inf */
    CHECK((h[0x7e00] & 0x7fc0) == 0x7fc0);              /* NaN stays a quiet NaN */
    free(h);
}

int main(void) {
    RUN(test_f16_to_bf16_all);
    RUN(test_pack_get_row);
    RUN(test_options_pick_kernels);
    RUN(test_kernel_equals_ref);
    RUN(test_matmul_levels);
    RUN(test_model_repack);
    return harness_summary(__FILE__);
}
