/*
 * test_r4.c - the 4-row block-interleaved q4_K / q6_K layout
 * (kernels/gemm_r4.h) and its load-time use (model/repack.c).
 *
 *   - repacking keeps every row: kern_get_row of a repacked weight equals
 *     the plain row, for grouped rows and the plain tail; unpacking a group
 *     gives back the plain bytes;
 *   - kern_matmul on the repacked weight equals kern_matmul on the plain one
 *     bit for bit, at every level (the R4 kernel at avx512vnni and up, the
 *     gather fallback below), for 1-40 tokens, 1 and 3 threads, and odd and
 *     even block counts;
 *   - a synthesized Q4_K_M model loads repacked (n_repacked > 0 where the
 *     level has the kernel) with logits bit-identical to the plain load.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_r4.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/synth.h"
#include "repack_harness.h"
#include "tensor/dtype.h"

static const uint32_t k_types[] = {KITE_DTYPE_Q4_K, KITE_DTYPE_Q6_K};

TEST(test_pack_rows) {
    for (int ti = 0; ti < 2; ti++)
        for (int64_t nb = 1; nb <= 3; nb++) {
            const uint32_t t = k_types[ti];
            const int64_t ne0 = nb * 256, nr = 23; /* 5 groups + 3 plain rows */
            size_t rb;
            unsigned char *plain = make_rows(t, nr, ne0, &rb), *packed = malloc(rb * (size_t)nr);
            unsigned char *tmp = malloc(rb * R4_ROWS), *row = malloc(rb);
            memcpy(packed, plain, rb * (size_t)nr);
            kern_r4_pack(t, packed, nr, ne0, tmp);
            if (nb > 1) /* one block per row: the layouts coincide */
                CHECK_MSG(memcmp(packed, plain, rb * R4_ROWS) != 0, "%s nb %lld: nothing moved", dtype_name(t),
                          (long long)nb);
            CHECK(memcmp(packed + rb * 20, plain + rb * 20, rb * 3) == 0); /* the tail stays plain */
            for (int64_t g = 0; g + R4_ROWS <= nr; g += R4_ROWS)
                for (int i = 0; i < R4_ROWS; i++) {
                    kern_r4_unpack_row(packed + (size_t)g * rb, i, nb, (size_t)dtype_get(t)->type_size, row);
                    CHECK_MSG(memcmp(row, plain + (size_t)(g + i) * rb, rb) == 0, "%s row %lld", dtype_name(t),
                              (long long)(g + i));
                }
            weight wp = {.type = t, .ne = {ne0, nr}, .row_bytes = rb, .data = plain};
            weight wr = wp;
            wr.data = packed;
            wr.layout = WEIGHT_LAYOUT_R4;
            CHECK_EQ_INT((int)kern_r4_rows(&wr), 20);
            float *a = malloc((size_t)ne0 * sizeof(float)), *b = malloc((size_t)ne0 * sizeof(float));
            for (int64_t r = 0; r < nr; r++) {
                kern_get_row(&wp, r, a);
                kern_get_row(&wr, r, b);
                CHECK_MSG(memcmp(a, b, (size_t)ne0 * sizeof(float)) == 0, "%s get_row %lld", dtype_name(t),
                          (long long)r);
            }
            free(a);
            free(b);
            free(plain);
            free(packed);
            free(tmp);
            free(row);
        }
}

/* kern_matmul on plain and repacked copies of the same rows at level l. */
static int check_level(kern_level l, uint32_t t, int64_t nb, threadpool *tp1, threadpool *tp3) {
    const kern_ops_table *kt = kern_table_for_level(l);
    const int64_t ne0 = nb * 256, nr = 45, n_tok_max = 40; /* 11 groups + 1 plain row */
    size_t rb;
    unsigned char *plain = make_rows(t, nr, ne0, &rb), *packed = malloc(rb * (size_t)nr), *tmp = malloc(rb * 4);
    memcpy(packed, plain, rb * (size_t)nr);
    kern_r4_pack(t, packed, nr, ne0, tmp);
    const weight wp = {.type = t, .ne = {ne0, nr}, .row_bytes = rb, .data = plain};
    const weight wr = {.type = t, .ne = {ne0, nr}, .row_bytes = rb, .data = packed, .layout = WEIGHT_LAYOUT_R4};
    float *x = malloc((size_t)(n_tok_max * ne0) * sizeof(float));
    for (int64_t i = 0; i < n_tok_max * ne0; i++) x[i] = frand() * (i % 89 == 0 ? 30.0f : 1.0f);
    const size_t sb = kern_matmul_scratch_bytes(3, n_tok_max, ne0), ny = (size_t)(n_tok_max * nr) * sizeof(float);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    float *y0 = malloc(ny), *y1 = malloc(ny);
    const int64_t toks[] = {1, 2, 3, 4, 5, 16, 17, 40};
    int n = 0;
    for (size_t k = 0; k < sizeof toks / sizeof *toks; k++)
        for (int th = 0; th < 2; th++) {
            threadpool *tp = th ? tp3 : tp1;
            memset(y0, 0xA5, ny);
            memset(y1, 0x5A, ny);
            kern_matmul_with(kt, tp, &wp, x, toks[k], y0, nr, scratch);
            kern_matmul_with(kt, tp, &wr, x, toks[k], y1, nr, scratch);
            CHECK_MSG(memcmp(y0, y1, (size_t)(toks[k] * nr) * sizeof(float)) == 0,
                      "%s %s nb %lld: %lld tokens, %d threads: repacked differs from plain", kt->name,
                      dtype_name(t), (long long)nb, (long long)toks[k], th ? 3 : 1);
            n++;
        }
    free(plain);
    free(packed);
    free(tmp);
    free(x);
    free(scratch);
    free(y0);
    free(y1);
    return n;
}

TEST(test_matmul_equals_plain) {
    threadpool *tp1 = tp_new(1), *tp3 = tp_new(3);
    CHECK(tp1 && tp3);
    int n = 0;
    for (int ti = 0; ti < 2 && tp1 && tp3; ti++)
        for (int64_t nb = 1; nb <= 2; nb++)
            for (int l = 0; l <= (int)kern_level_max(); l++) n += check_level((kern_level)l, k_types[ti], nb, tp1, tp3);
    printf("    %d matmul calls bit-identical to the plain layout (levels scalar..%s; R4 kernel from avx512vnni)\n", n,
           kern_table_for_level(kern_level_max())->name);
    tp_free(tp1);
    tp_free(tp3);
}

TEST(test_model_repack) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/kite-test-r4-%d.gguf", (int)getpid());
    synth_params sp = {.shape = *synth_shape_find("tiny-llama3"), .mix = SYNTH_MIX_Q4_K_M, .seed = 11};
    sp.shape.n_embd = 256; /* k-quant rows are multiples of 256 */
    sp.shape.n_ff = 512;
    CHECK_EQ_INT(synth_write(&sp, path), KITE_OK);
    int n0 = -1, n1 = -1;
    int32_t nv = 0;
    float *plain = repack_logits_of(path, true, &n0, &nv), *packed = repack_logits_of(path, false, &n1, &nv);
    CHECK(plain && packed);
    CHECK_EQ_INT(n0, 0);
    if (kern_r4_pays(kern_table()->level)) CHECK(n1 > 0);
    else CHECK_EQ_INT(n1, 0);
    CHECK(plain && packed && memcmp(plain, packed, (size_t)nv * REPACK_N_TOK * sizeof(float)) == 0);
    printf("    Q4_K_M model: %d matrices repacked, logits bit-identical to the plain load\n", n1);
    free(plain);
    free(packed);
    unlink(path);
}

int main(void) {
    RUN(test_pack_rows);
    RUN(test_matmul_equals_plain);
    RUN(test_model_repack);
    return harness_summary(__FILE__);
}
