/*
 * test_fused.c - kern_matmul_fused (kernels.h): several matmuls on one
 * input in one pool round trip, with an optional per-thread epilogue.
 *
 *   - every item's output is bit-identical to a separate kern_matmul call,
 *     for interleaved q4_0 / q8_0 weights (with a plain tail past the last
 *     16-row group), f32, f16 and q4_K weights, token counts on both sides of
 *     the flat/tiled boundary, 1 and 3 threads, at every kernel level this
 *     machine runs (each level's scalar and SIMD paths: kern_table_for_level);
 *   - items that cannot share activation rows (q8_0 with f32) fall back to
 *     separate calls and still give the same results;
 *   - the epilogue covers every row exactly once, and when a thread runs it,
 *     its rows of every item are already computed (SwiGLU on a thread's own
 *     gate/up rows equals SwiGLU after two separate matmuls);
 *   - work sharing: when one thread stalls (its first epilogue call sleeps),
 *     the others take chunks of its range, and the results are unchanged.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x16.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

#define NE0 256
#define MAX_ROWS 1024 /* epilogue bookkeeping (test_work_sharing has 1024 rows) */
#define MAX_TOK 40

static uint64_t g_rng = 0x9e3779b97f4a7c15u;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* A random nr x NE0 weight of type t; interleaved when x16 (rows past the
 * last full group stay plain, as at load). */
static weight make_weight(uint32_t t, int64_t nr, bool x16) {
    const size_t rb = dtype_row_size(t, NE0);
    unsigned char *d = malloc(rb * (size_t)nr);
    float x[NE0];
    for (int64_t r = 0; r < nr; r++) {
        for (int i = 0; i < NE0; i++) x[i] = frand() * (1.0f + (float)(r % 5));
        dtype_get(t)->from_float(x, d + (size_t)r * rb, NE0);
    }
    weight w = {.type = t, .ne = {NE0, nr}, .row_bytes = rb, .data = d, .layout = WEIGHT_LAYOUT_PLAIN};
    if (x16) {
        unsigned char *tmp = malloc(kern_x16_pack_tmp_bytes(t, nr, NE0));
        kern_x16_pack(t, d, nr, NE0, tmp);
        free(tmp);
        w.layout = WEIGHT_LAYOUT_X16;
    }
    return w;
}

typedef struct epi_state {
    float *gate;              /* [n_tok][nr] */
    const float *up;
    const float *ref_gate;    /* separate-call results, to check readiness */
    const float *ref_up;
    int64_t nr, n_tok;
    atomic_int covered[MAX_ROWS];
    atomic_int not_ready;     /* rows whose gate/up were not final when the epilogue ran */
} epi_state;

static void epi_swiglu(void *arg, int64_t r0, int64_t r1) {
    epi_state *s = arg;
    for (int64_t r = r0; r < r1; r++) atomic_fetch_add(&s->covered[r], 1);
    for (int64_t t = 0; t < s->n_tok; t++)
        for (int64_t r = r0; r < r1; r++) {
            const size_t i = (size_t)(t * s->nr + r);
            if (memcmp(&s->gate[i], &s->ref_gate[i], 4) || memcmp(&s->up[i], &s->ref_up[i], 4))
                atomic_fetch_add(&s->not_ready, 1);
        }
    for (int64_t t = 0; t < s->n_tok; t++)
        kern_swiglu(s->gate + t * s->nr + r0, s->up + t * s->nr + r0, r1 - r0);
}

/* Fused items (with the SwiGLU epilogue when `epi` and two items) against
 * separate kern_matmul calls, bit for bit. */
static void check_case(const kern_ops_table *kt, threadpool *tp, const weight *ws, int n_w, bool epi, const char *what) {
    static float x[MAX_TOK * NE0];
    for (int i = 0; i < MAX_TOK * NE0; i++) x[i] = frand();
    const size_t sb = kern_matmul_scratch_bytes(3, MAX_TOK, NE0);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    const int64_t toks[] = {1, 3, 16, 17, MAX_TOK};
    for (int ti = 0; ti < 5; ti++) {
        const int64_t n_tok = toks[ti];
        float *ref[KERN_FUSED_MAX], *got[KERN_FUSED_MAX];
        kern_mm_item items[KERN_FUSED_MAX];
        for (int i = 0; i < n_w; i++) {
            const size_t bytes = (size_t)n_tok * (size_t)ws[i].ne[1] * sizeof(float);
            ref[i] = malloc(bytes);
            got[i] = malloc(bytes);
            memset(got[i], 0xff, bytes);
            kern_matmul_with(kt, tp, &ws[i], x, n_tok, ref[i], ws[i].ne[1], scratch);
            items[i] = (kern_mm_item){&ws[i], got[i], ws[i].ne[1]};
        }
        if (epi) {
            epi_state *s = calloc(1, sizeof *s);
            *s = (epi_state){.gate = got[0], .up = got[1], .ref_gate = ref[0], .ref_up = ref[1], .nr = ws[0].ne[1],
                             .n_tok = n_tok};
            kern_matmul_fused_with(kt, tp, items, n_w, x, n_tok, scratch, epi_swiglu, s);
            int bad_cover = 0;
            for (int64_t r = 0; r < s->nr; r++) bad_cover += atomic_load(&s->covered[r]) != 1;
            CHECK_MSG(bad_cover == 0, "%s n_tok %lld: %d rows not covered exactly once", what, (long long)n_tok,
                      bad_cover);
            CHECK_MSG(atomic_load(&s->not_ready) == 0, "%s n_tok %lld: epilogue ran before its rows were done",
                      what, (long long)n_tok);
            kern_swiglu(ref[0], ref[1], n_tok * s->nr);
            free(s);
        } else {
            kern_matmul_fused_with(kt, tp, items, n_w, x, n_tok, scratch, NULL, NULL);
        }
        for (int i = 0; i < n_w; i++) {
            const size_t bytes = (size_t)n_tok * (size_t)ws[i].ne[1] * sizeof(float);
            CHECK_MSG(memcmp(ref[i], got[i], bytes) == 0, "%s n_tok %lld threads %d: item %d differs", what,
                      (long long)n_tok, tp_n_threads(tp), i);
            free(ref[i]);
            free(got[i]);
        }
    }
    free(scratch);
}

static void free_weights(weight *ws, int n) {
    for (int i = 0; i < n; i++) free((void *)ws[i].data);
}

/* q/k/v-like items (different row counts) and gate/up-like pairs, per type. */
static void check_types(const kern_ops_table *kt, threadpool *tp) {
    const struct {
        uint32_t t;
        bool x16;
    } cases[] = {{KITE_DTYPE_Q8_0, true}, {KITE_DTYPE_Q4_0, true},  {KITE_DTYPE_Q8_0, false},
                 {KITE_DTYPE_F32, false}, {KITE_DTYPE_F16, false}, {KITE_DTYPE_Q4_K, false}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "%s%s", dtype_get(cases[c].t)->name, cases[c].x16 ? " x16" : "");
        weight qkv[3] = {make_weight(cases[c].t, 88, cases[c].x16), make_weight(cases[c].t, 32, cases[c].x16),
                         make_weight(cases[c].t, 40, cases[c].x16)};
        check_case(kt, tp, qkv, 3, false, what);
        weight gu[2] = {make_weight(cases[c].t, 72, cases[c].x16), make_weight(cases[c].t, 72, cases[c].x16)};
        check_case(kt, tp, gu, 2, true, what);
        free_weights(qkv, 3);
        free_weights(gu, 2);
    }
    /* incompatible activation formats: the fallback path */
    weight mixed[2] = {make_weight(KITE_DTYPE_Q8_0, 48, false), make_weight(KITE_DTYPE_F32, 48, false)};
    check_case(kt, tp, mixed, 2, false, "q8_0+f32");
    check_case(kt, tp, mixed, 2, true, "q8_0+f32 epilogue");
    free_weights(mixed, 2);
}

TEST(test_fused_equals_separate) {
    threadpool *tp1 = tp_new(1), *tp3 = tp_new(3);
    for (int l = KERN_LEVEL_SCALAR; l <= (int)kern_level_max(); l++) {
        const kern_ops_table *kt = kern_table_for_level((kern_level)l);
        if (!kt) continue; /* another architecture's level */
        check_types(kt, tp1);
        check_types(kt, tp3);
    }
    tp_free(tp1);
    tp_free(tp3);
}

/* Work sharing: a gate/up pair large enough for 3 threads; the first
 * epilogue call sleeps, so its thread falls behind and the others must take
 * chunks of its range.  Every row is still covered once, by the thread that
 * computed it, with unchanged results. */
typedef struct share_state {
    epi_state e;
    atomic_int calls;
    pthread_t who[1024];      /* thread that ran the epilogue of each row */
} share_state;

static void epi_slow_first(void *arg, int64_t r0, int64_t r1) {
    share_state *s = arg;
    if (atomic_fetch_add(&s->calls, 1) == 0) {
        const struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int64_t r = r0; r < r1; r++) s->who[r] = pthread_self();
    epi_swiglu(&s->e, r0, r1);
}

TEST(test_work_sharing) {
    enum { NR = 1024, NT = 16 };
    if (!kern_config_get()->work_sharing) SKIP_TEST("kern_config.work_sharing is off");
    threadpool *tp = tp_new(3);
    weight gu[2] = {make_weight(KITE_DTYPE_Q8_0, NR, true), make_weight(KITE_DTYPE_Q8_0, NR, true)};
    static float x[NT * NE0];
    for (int i = 0; i < NT * NE0; i++) x[i] = frand();
    const size_t sb = kern_matmul_scratch_bytes(3, NT, NE0);
    void *scratch = aligned_alloc(64, (sb + 63) & ~(size_t)63);
    float *ref[2], *got[2];
    kern_mm_item items[2];
    for (int i = 0; i < 2; i++) {
        ref[i] = malloc(sizeof(float) * NT * NR);
        got[i] = malloc(sizeof(float) * NT * NR);
        kern_matmul(tp, &gu[i], x, NT, ref[i], NR, scratch);
        items[i] = (kern_mm_item){&gu[i], got[i], NR};
    }
    share_state *s = calloc(1, sizeof *s);
    s->e = (epi_state){.gate = got[0], .up = got[1], .ref_gate = ref[0], .ref_up = ref[1], .nr = NR, .n_tok = NT};
    kern_matmul_fused(tp, items, 2, x, NT, scratch, epi_slow_first, s);
    int bad_cover = 0;
    for (int r = 0; r < NR; r++) bad_cover += atomic_load(&s->e.covered[r]) != 1;
    CHECK_MSG(bad_cover == 0, "%d rows not covered exactly once", bad_cover);
    CHECK_EQ_INT(atomic_load(&s->e.not_ready), 0);
    kern_swiglu(ref[0], ref[1], (int64_t)NT * NR);
    CHECK(memcmp(ref[0], got[0], sizeof(float) * NT * NR) == 0);
    /* some thread's static range (tp_split of the 64 groups) was partly run by another thread */
    int mixed = 0;
    for (int i = 0; i < 3; i++) {
        long u0, u1;
        tp_split(NR / X16_ROWS, i, 3, &u0, &u1);
        for (long r = u0 * X16_ROWS + 1; r < u1 * X16_ROWS; r++) mixed += !pthread_equal(s->who[r], s->who[u0 * X16_ROWS]);
    }
    CHECK_MSG(mixed > 0, "no thread took over rows of the stalled thread (epilogue calls: %d)", atomic_load(&s->calls));
    free(s);
    for (int i = 0; i < 2; i++) {
        free(ref[i]);
        free(got[i]);
    }
    free(scratch);
    free_weights(gu, 2);
    tp_free(tp);
}

int main(void) {
    RUN(test_fused_equals_separate);
    RUN(test_work_sharing);
    return harness_summary(__FILE__);
}
