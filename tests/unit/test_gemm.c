/*
 * test_gemm.c - the tiled prefill GEMM (kernels/gemm_tiled.h) and its hook
 * in kern_matmul.
 *
 *   - selector: no tiled kernel at the scalar level; f32/f16/bf16 from avx2
 *     on, q8_0/q4_0 at avx512vnni, bf16 x bf16 activations at avx512bf16
 *     (where this CPU has the level).
 *   - every tiled kernel of every level this CPU supports, for token counts
 *     17, 33, 100 (not multiples of any micro-tile), row counts 1, 5, 13,
 *     K = multiples of the block size that are not multiples of the SIMD
 *     chunk (float: 1, 7, 100, 200, 520, 1000, 1024, 1040, 2048, 2064, 2100
 *     - around the avx512 float kernels' K blocks: rows of up to 2048
 *     elements are one block, longer ones blocks of 1024; q8_0/q4_0: 1, 3,
 *     7, 65 blocks),
 *     weights at byte offsets 0..3 and ldy > nr:
 *       * bit-identical to the level's flat kernel (vec_dot): the tiled
 *         kernels reproduce its summation order (kernels.h promises results
 *         independent of the batch grouping);
 *       * against the scalar reference (gemm_tiled_*_ref; at avx512bf16,
 *         bf16 weights: gemm_tiled_bf16_bf16_ref, bit for bit) within
 *         FLOAT_BUDGET / INT_BUDGET (the budgets of test_kernels.c):
 *         FLOAT_BUDGET: |tiled - ref| <= 1e-5 * sum|w*a| (+1e-30), float sums
 *           of n terms in different orders;
 *         INT_BUDGET: |tiled - ref| <= 2e-6 * sum|w*a| (+1e-30), exact int32
 *           block sums, scaled block terms summed in another order.
 *   - kern_matmul_with at every level for 17, 33 and 100 tokens (the tiled
 *     path): bit-identical for 1, 2 and 3 threads and to token by token.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_tiled.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

#define KERNEL_TEST_SEED 0x2545f4914f6cdd1dull
#include "kernel_helpers.h"

static const uint32_t tiled_types[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16, KITE_DTYPE_Q8_0,
                                       KITE_DTYPE_Q4_0};
#define N_TTYPES (int)(sizeof tiled_types / sizeof tiled_types[0])

static kern_gemm_tiled_fn ref_for(const kern_ops_table *kt, uint32_t t) {
    if (kt->ops[t].act_type == KITE_DTYPE_BF16) return gemm_tiled_bf16_bf16_ref; /* avx512bf16 */
    switch (t) {
    case KITE_DTYPE_F32: return gemm_tiled_f32_ref;
    case KITE_DTYPE_F16: return gemm_tiled_f16_ref;
    case KITE_DTYPE_BF16: return gemm_tiled_bf16_ref;
    case KITE_DTYPE_Q8_0: return gemm_tiled_q8_0_ref;
    default: return gemm_tiled_q4_0_ref;
    }
}

TEST(test_selector) {
    for (int i = 0; i < N_TTYPES; i++) CHECK(kern_gemm_tiled_get(KERN_LEVEL_SCALAR, tiled_types[i]) == NULL);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512VNNI, KITE_DTYPE_Q4_K) == NULL);
#if defined(__x86_64__) || defined(__i386__)
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX2, KITE_DTYPE_F16) != NULL);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX2, KITE_DTYPE_Q8_0) == NULL);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512, KITE_DTYPE_BF16) != NULL);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512VNNI, KITE_DTYPE_Q4_0) != NULL);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512VNNI, KITE_DTYPE_Q8_0) != NULL);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512BF16, KITE_DTYPE_BF16) == gemm_tiled_bf16_bf16_avx512bf16);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512VNNI, KITE_DTYPE_BF16) == gemm_tiled_bf16_avx512);
    CHECK(kern_gemm_tiled_get(KERN_LEVEL_AVX512BF16, KITE_DTYPE_F16) == gemm_tiled_f16_avx512);
#endif
}

/* nr weight rows of n elements (type t) at byte offset off of a buffer, and
 * nt activation rows in the type's act format; |w|*|x| sums per output for
 * the budgets come from the float copies. */
typedef struct case_data {
    unsigned char *wbuf, *w; /* w = wbuf + off */
    unsigned char *a;        /* nt rows of ab bytes */
    float *wf, *xf;          /* float weights (dequantized) [nr][n], activations [nt][n] */
    size_t wb, ab;
} case_data;

static void make_case(const kern_ops_table *kt, uint32_t t, int64_t n, int nr, int nt, int off, case_data *c) {
    const dtype_traits *tr = dtype_get(t);
    const uint32_t act = kt->ops[t].act_type;
    c->wb = dtype_row_size(t, n);
    c->ab = kern_act_row_bytes(act, n);
    c->wbuf = malloc(c->wb * (size_t)nr + 4);
    c->w = c->wbuf + off;
    c->a = malloc(c->ab * (size_t)nt);
    c->wf = malloc((size_t)(n * nr) * sizeof(float));
    c->xf = malloc((size_t)(n * nt) * sizeof(float));
    void *tmp = malloc(c->wb);
    for (int r = 0; r < nr; r++) {
        for (int64_t i = 0; i < n; i++) c->wf[r * n + i] = frand();
        tr->from_float(c->wf + r * n, tmp, n);
        memcpy(c->w + (size_t)r * c->wb, tmp, c->wb);
        tr->to_float(tmp, c->wf + r * n, n);
    }
    free(tmp);
    for (int k = 0; k < nt; k++) {
        float *x = c->xf + (int64_t)k * n;
        for (int64_t i = 0; i < n; i++) x[i] = frand() * 3.0f;
        if (act == KITE_DTYPE_F32) memcpy(c->a + (size_t)k * c->ab, x, c->ab);
        else kt->act_from_f32[act](x, c->a + (size_t)k * c->ab, n);
    }
}

static void free_case(case_data *c) {
    free(c->wbuf);
    free(c->a);
    free(c->wf);
    free(c->xf);
}

/* Returns the number of failing outputs (reports the first). */
static int check_case(const kern_ops_table *kt, uint32_t t, kern_gemm_tiled_fn g, int64_t n, int nr, int nt,
                      int off, double *worst) {
    case_data c;
    make_case(kt, t, n, nr, nt, off, &c);
    const int64_t ldy = nr + 3;
    float *y = malloc((size_t)(ldy * nt) * sizeof(float)), *yr = malloc((size_t)(ldy * nt) * sizeof(float));
    g(n, y, ldy, c.w, c.wb, nr, c.a, c.ab, nt);
    ref_for(kt, t)(n, yr, ldy, c.w, c.wb, nr, c.a, c.ab, nt);
    const bool exact = kt->ops[t].act_type == KITE_DTYPE_BF16; /* vdpbf16ps: the reference's bits */
    const double budget = dtype_get(t)->block_size == 1 ? FLOAT_BUDGET : INT_BUDGET;
    int bad = 0;
    for (int k = 0; k < nt; k++)
        for (int r = 0; r < nr; r++) {
            const float v = y[k * ldy + r];
            float flat;
            kt->ops[t].vec_dot(n, &flat, c.w + (size_t)r * c.wb, c.a + (size_t)k * c.ab);
            double mag = 0;
            for (int64_t i = 0; i < n; i++) mag += fabs((double)c.wf[r * n + i] * c.xf[(int64_t)k * n + i]);
            const double err = fabs((double)v - yr[k * ldy + r]), lim = budget * mag + 1e-30;
            if (err / lim > *worst) *worst = err / lim;
            const bool ref_ok = exact ? memcmp(&v, &yr[k * ldy + r], sizeof v) == 0 : err <= lim;
            if ((memcmp(&v, &flat, sizeof v) != 0 || !ref_ok) && bad++ == 0)
                FAIL_AT_("%s %s n=%lld nr=%d nt=%d off=%d r=%d t=%d: tiled %.9g flat %.9g ref %.9g", kt->name,
                         dtype_name(t), (long long)n, nr, nt, off, r, k, v, flat, yr[k * ldy + r]);
        }
    free(y);
    free(yr);
    free_case(&c);
    return bad;
}

TEST(test_tiled_vs_flat_and_reference) {
    /* float K around the avx512 kernels' K blocking: one block up to 2048
     * elements (1040, 2048), blocks of 1024 above (2064: a 16-element last
     * block; 2100) */
    static const int64_t float_k[] = {1, 7, 100, 200, 520, 1000, 1024, 1040, 2048, 2064, 2100},
                         int_blocks[] = {1, 3, 7, 65};
    static const int nts[] = {17, 33, 100}, nrs[] = {1, 5, 13};
    int n_kernels = 0;
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        for (int i = 0; i < N_TTYPES; i++) {
            const uint32_t t = tiled_types[i];
            const kern_gemm_tiled_fn g = kern_gemm_tiled_get((kern_level)l, t);
            if (!g) continue;
            n_kernels++;
            const int is_float = dtype_get(t)->block_size == 1;
            const int nk = is_float ? (int)(sizeof float_k / sizeof float_k[0]) : 4;
            double worst = 0;
            for (int ik = 0; ik < nk; ik++) {
                const int64_t n = is_float ? float_k[ik] : 32 * int_blocks[ik];
                for (int it = 0; it < 3; it++)
                    for (int ir = 0; ir < 3; ir++) {
                        if (n >= 520 && nts[it] == 100 && nrs[ir] == 13) continue; /* keep the run short */
                        check_case(kt, t, g, n, nrs[ir], nts[it], (ik + it + ir) % 4, &worst);
                    }
            }
            printf("    %-10s %-5s tiled: == flat, worst error %.3f of budget\n", kt->name, dtype_name(t), worst);
        }
    }
    printf("    tiled kernels tested: %d\n", n_kernels);
}

/* kern_matmul through the hook: 1, 2, 3 threads and token by token agree bit
 * for bit. */
TEST(test_matmul_prefill_hook) {
    threadpool *tp[3] = {tp_new(1), tp_new(2), tp_new(3)};
    static const int64_t ntoks[] = {17, 33, 100};
    for (int l = 0; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        for (int i = 0; i < N_TTYPES; i++) {
            const uint32_t t = tiled_types[i];
            const int64_t ne0 = dtype_get(t)->block_size == 1 ? 200 : 96, nr = 37;
            case_data c;
            make_case(kt, t, ne0, (int)nr, 1, 0, &c);
            weight w = {.type = t, .ne = {ne0, nr}, .row_bytes = c.wb, .data = c.w};
            const size_t sb = kern_matmul_scratch_bytes(3, 100, ne0);
            void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
            float *x = malloc((size_t)(100 * ne0) * sizeof(float));
            for (int64_t j = 0; j < 100 * ne0; j++) x[j] = frand() * 2.0f;
            float *y[3], *yd = malloc((size_t)(100 * nr) * sizeof(float));
            for (int k = 0; k < 3; k++) y[k] = malloc((size_t)(100 * nr) * sizeof(float));
            for (int in = 0; in < 3; in++) {
                const int64_t nt = ntoks[in];
                for (int k = 0; k < 3; k++) kern_matmul_with(kt, tp[k], &w, x, nt, y[k], nr, scratch);
                for (int64_t k = 0; k < nt; k++) kern_matmul_with(kt, tp[1], &w, x + k * ne0, 1, yd + k * nr, nr, scratch);
                const size_t bytes = (size_t)(nt * nr) * sizeof(float);
                CHECK_MSG(memcmp(y[0], y[1], bytes) == 0 && memcmp(y[0], y[2], bytes) == 0,
                          "%s %s n_tok=%lld: 1/2/3 threads differ", kt->name, dtype_name(t), (long long)nt);
                CHECK_MSG(memcmp(y[0], yd, bytes) == 0, "%s %s n_tok=%lld: batch vs token by token differ",
                          kt->name, dtype_name(t), (long long)nt);
            }
            for (int k = 0; k < 3; k++) free(y[k]);
            free(yd);
            free(x);
            free(scratch);
            free_case(&c);
        }
    }
    for (int k = 0; k < 3; k++) tp_free(tp[k]);
}

int main(void) {
    RUN(test_selector);
    RUN(test_tiled_vs_flat_and_reference);
    RUN(test_matmul_prefill_hook);
    return harness_summary(__FILE__);
}
