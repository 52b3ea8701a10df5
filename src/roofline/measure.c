/*
 * measure.c - what kite's own kernels achieve on this machine: the probed
 * hardware profile (`--hw probe`) and per-op timings (`--compare`).
 *
 * DESIGN
 *   Bandwidth and the FP32 FMA peak come from core/probe (the bench
 *   engineer's probe: median read bandwidth at the run's thread count),
 *   measured again on --reprobe.  On top of them, by timing kite's kernels
 *   on a thread pool of the run's size:
 *   - per weight type, what a decode step does: kern_matmul of one token over
 *     matrices of 2048 columns cycled through a POOL_BYTES (256 MiB) pool, so
 *     every call streams its weights from DRAM as a forward pass does (the
 *     pool is 2 MiB-aligned anonymous memory advised MADV_HUGEPAGE, like the
 *     loaded model).  Every matrix of the pool is first repacked exactly as
 *     the loader repacks a model's matrices (model_repack_matrix: the x16
 *     layout of q4_0/q8_0/q4_K/q6_K, the x32 layout of f16/bf16, where the
 *     kernel level gains from it), so the kernels timed are the ones decode
 *     runs (probe v2 timed the file's plain rows: 17.9 predicted against
 *     56.3 measured decode tok/s on Q8_0 TinyLlama).  Two sizes, 256 rows
 *     (k/v-projection-like) and 4096 rows; the straight line t = c + bytes /
 *     rate through them (rl_fit_line) gives kern_gbs[type] (the effective
 *     bandwidth of the type: the slope) and kern_call_us[type] (the
 *     intercept: activation quantization, pool wake-up, prefetch ramp);
 *   - attention: kern_attention of one decode query (32 heads of 64, 4 KV
 *     heads) at contexts 256 and 1024, the same fit over the model's FLOPs:
 *     attn_gflops and attn_call_us; elem_gflops: kern_swiglu over 1 Mi floats;
 *   - per weight type, the prefill matmul: kern_matmul of GEMM_TOK (128)
 *     tokens with a 2048 x 2048 matrix in the loader's layout (the x16/x32
 *     kernels where it repacks, else the tiled / INT8 GEMM kern_matmul picks
 *     for that many tokens): gemm_gops[type], the rate prefill matmuls of
 *     that type are charged at.  bf16_gflops / int8_gops are bf16's and
 *     q8_0's figures (the atype peaks of types without their own);
 *   - launch_us: one thread-pool round trip (tp_run on all threads).
 *   Each timing is the median of 3 windows of >= 150 ms that passed the FMA
 *   availability check (time_windows); the lowest availability of the kept
 *   windows (and of the bandwidth probe) is recorded as avail_pct, and the
 *   time of the measurement as measured_at.  The profile is cached as
 *   ~/.cache/kite/roofline-t<N>.txt (text format of hw.c), keyed by the
 *   profile version, the CPU name and the thread count (name and `threads`);
 *   a cached profile older than RL_MAX_AGE_S is measured again, one measured
 *   under RL_AVAIL_MIN_PCT availability is used and flagged (rl_hw_suspect).

 *   (`kite roofline --compare` measures a real forward pass through the
 *   public API's per-op profile instead: cli/roofline.c.)
 *
 * THREAD SAFETY
 *   Reentrant; each call creates and frees its own thread pool.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/error.h"
#include "roofline/probe.h"
#include "core/threadpool.h"
#include "core/timing.h"
#include "kernels/kernels.h"
#include "kite.h"
#include "model/model.h"
#include "roofline/roofline.h"

#define POOL_BYTES ((size_t)256 << 20) /* decode matmul probe: weights cycled through, beyond any LLC here */
#define MM_K 2048                       /* columns of the probe matrices */
#define MM_ROWS_SMALL 256               /* rows of the small probe matrix (a k/v projection) */
#define MM_ROWS_LARGE 4096              /* rows of the large one */
#define GEMM_TOK RL_GEMM_TOK            /* tokens of the prefill matmul probe (a short prompt's chunk) */
#define GEMM_ROWS 2048                  /* its rows: a TinyLlama-sized 2048 x 2048 projection (4.4 MB of q8_0) */
#define HUGE_PAGE ((size_t)2 << 20)
#define PROFILE_VERSION "probe v3"      /* in the cached profile's name: older caches are measured again
                                           (v3: weights in the loader's layout, gemm_gops, measured_at) */

static void *xalloc(size_t n) {
    n = (n + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

static void fill_rand(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

/* n_rows rows of k columns of type t: 64 random rows quantized, then copied. */
static void *make_weight(uint32_t t, int64_t k, int64_t n_rows, weight *w) {
    const dtype_traits *tr = dtype_get(t);
    size_t rb = dtype_row_size(t, k);
    if (!tr || !tr->from_float || !tr->to_float || rb == 0) return NULL;
    unsigned char *data = xalloc(rb * (size_t)n_rows);
    float *row = xalloc(sizeof(float) * (size_t)k);
    if (!data || !row) {
        free(data);
        free(row);
        return NULL;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        if (r < 64) {
            fill_rand(row, k, (uint64_t)r + 7);
            tr->from_float(row, data + rb * (size_t)r, k);
        } else {
            memcpy(data + rb * (size_t)r, data + rb * (size_t)(r % 64), rb);
        }
    }
    free(row);
    memset(w, 0, sizeof *w);
    w->type = t;
    w->ne[0] = k;
    w->ne[1] = n_rows;
    w->row_bytes = rb;
    w->data = data;
    return data;
}

/* n bytes of 2 MiB-aligned anonymous memory advised MADV_HUGEPAGE (how the
 * loader holds the weights), rounded up to 2 MiB in *cap; NULL on failure. */
static unsigned char *huge_alloc(size_t n, size_t *cap) {
    *cap = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    unsigned char *raw = mmap(NULL, *cap + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    size_t head = (HUGE_PAGE - (uintptr_t)raw % HUGE_PAGE) % HUGE_PAGE;
    if (head) munmap(raw, head);
    if (HUGE_PAGE - head) munmap(raw + head + *cap, HUGE_PAGE - head);
#ifdef MADV_HUGEPAGE
    (void)madvise(raw + head, *cap, MADV_HUGEPAGE); /* advisory */
#endif
    return raw + head;
}

/* POOL_BYTES of MM_K-column rows of type t (64 random rows quantized, then
 * copied: distinct memory, so every pass streams from DRAM); *n_rows rows.
 * NULL (nothing allocated) if the type has no quantizer or memory is short. */
static unsigned char *make_pool(uint32_t t, int64_t *n_rows, size_t *cap) {
    const dtype_traits *tr = dtype_get(t);
    size_t rb = dtype_row_size(t, MM_K);
    if (!tr || !tr->from_float || !tr->to_float || rb == 0) return NULL;
    *n_rows = (int64_t)(POOL_BYTES / rb);
    unsigned char *data = huge_alloc(rb * (size_t)*n_rows, cap);
    float *row = xalloc(sizeof(float) * MM_K);
    if (!data || !row) {
        if (data) munmap(data, *cap);
        free(row);
        return NULL;
    }
    for (int64_t r = 0; r < *n_rows; r++) {
        if (r < 64) {
            fill_rand(row, MM_K, (uint64_t)r + 7);
            tr->from_float(row, data + rb * (size_t)r, MM_K);
        } else {
            memcpy(data + rb * (size_t)r, data + rb * (size_t)(r % 64), rb);
        }
    }
    free(row);
    return data;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A probe measurement: fn(arg) repeated for windows of at least KWINDOW_S.
 * Like `kite bench`, a window counts only if the FMA availability check
 * (core/probe) before and after it saw at least AVAIL_MIN of the expected
 * rate (a shared machine's other jobs otherwise decide the figure); the
 * result is the median of KREPS counted windows in seconds per call, or, if
 * fewer than KREPS windows counted in KTRIES, the median of those that did,
 * else of all.  Long windows average the load the way a benchmark of many
 * tokens does. */
#define KREPS 3
#define KTRIES 12
#define KWINDOW_S 0.15
#define AVAIL_MIN 0.70
typedef struct window_ctx {
    int n_threads;
    double expect_gflops; /* n_threads * FMA peak per thread */
    double min_avail;     /* lowest availability of the windows kept so far (1 before any) */
} window_ctx;

static double avail(window_ctx *w) {
    if (w->expect_gflops <= 0) return 1;
    return probe_fma_check(w->n_threads, 5.0) / w->expect_gflops;
}

typedef void (*small_fn)(void *arg);
static double time_windows(window_ctx *wc, small_fn fn, void *arg) {
    double ok[KTRIES], all[KTRIES], ok_min = 1, all_min = 1;
    int n_ok = 0, n_all = 0;
    fn(arg); /* warm-up: page faults, caches */
    for (int k = 0; k < KTRIES && n_ok < KREPS; k++) {
        double a0 = avail(wc);
        int n = 0;
        double t0 = time_now_s(), t1;
        do {
            fn(arg);
            n++;
            t1 = time_now_s();
        } while (t1 - t0 < KWINDOW_S);
        double a1 = avail(wc), t = (t1 - t0) / n;
        const double a = fmin(a0, a1);
        all[n_all++] = t;
        all_min = fmin(all_min, a);
        if (a0 >= AVAIL_MIN && a1 >= AVAIL_MIN) {
            ok[n_ok++] = t;
            ok_min = fmin(ok_min, a);
        }
    }
    wc->min_avail = fmin(wc->min_avail, n_ok ? ok_min : all_min);
    double *v = n_ok ? ok : all;
    int nv = n_ok ? n_ok : n_all;
    qsort(v, (size_t)nv, sizeof v[0], cmp_d);
    return v[nv / 2];
}

typedef struct mm_run {
    threadpool *tp;
    const weight *w;
    const float *x;
    float *y;
    void *scratch;
    int64_t n_tok;
} mm_run;

static void run_mm(void *p) {
    mm_run *m = p;
    kern_matmul(m->tp, m->w, m->x, m->n_tok, m->y, m->w->ne[1], m->scratch);
}

/* One decode matvec per call, each on the next matrix of the pool. */
typedef struct pool_run {
    mm_run mm;
    weight w;
    const unsigned char *pool;
    size_t mat_bytes;
    int64_t n_mat, next;
} pool_run;

static void run_pool(void *p) {
    pool_run *r = p;
    r->w.data = r->pool + r->mat_bytes * (size_t)r->next;
    r->next = (r->next + 1) % r->n_mat;
    run_mm(&r->mm);
}

/* The layout the probe times a matrix in: the loader's (model_repack_matrix),
 * so that the profile describes the kernels decode and prefill run.  One
 * function for both timings, and rl_probe_layout for the test that checks it
 * against a loaded model (tests/unit/test_roofline_probe.c). */
static uint32_t probe_repack(weight *w) {
    return model_repack_matrix(w);
}

uint32_t rl_probe_layout(uint32_t t, int64_t rows) {
    weight w;
    void *data = make_weight(t, MM_K, rows, &w);
    if (!data) return WEIGHT_LAYOUT_PLAIN;
    uint32_t layout = probe_repack(&w);
    free(data);
    return layout;
}

/* Seconds per kern_matmul call of one token over rows x MM_K matrices of
 * type t cycled through a pool, each matrix repacked as the loader would
 * (model_repack_matrix: x16 / x32 where the level gains from it), so the
 * decode kernels and layouts of a loaded model are the ones timed.  A
 * negative value: the type has no quantizer, or memory is short. */
static double time_pool(window_ctx *wc, threadpool *tp, uint32_t t, int64_t rows, const float *x, float *y,
                        void *scratch) {
    int64_t pool_rows;
    size_t cap;
    unsigned char *pool = make_pool(t, &pool_rows, &cap);
    if (!pool) return -1;
    pool_run r;
    memset(&r, 0, sizeof r);
    r.w.type = t;
    r.w.ne[0] = MM_K;
    r.w.ne[1] = rows;
    r.w.row_bytes = dtype_row_size(t, MM_K);
    r.pool = pool;
    r.mat_bytes = r.w.row_bytes * (size_t)rows;
    r.n_mat = pool_rows / rows;
    uint32_t layout = WEIGHT_LAYOUT_PLAIN;
    for (int64_t i = 0; i < r.n_mat; i++) { /* every matrix as the loader leaves it */
        weight m = r.w;
        m.data = pool + r.mat_bytes * (size_t)i;
        layout = probe_repack(&m);
    }
    r.w.layout = layout;
    r.mm = (mm_run){.tp = tp, .w = &r.w, .x = x, .y = y, .scratch = scratch, .n_tok = 1};
    const double s = time_windows(wc, run_pool, &r);
    munmap(pool, cap);
    return s;
}

static void nop_task(void *arg, int ith, int nth) {
    (void)arg;
    (void)ith;
    (void)nth;
}

typedef struct attn_run attn_run;
static void run_attn(void *p);
typedef struct window_ctx window_ctx;
static double time_windows(window_ctx *wc, void (*fn)(void *), void *arg);
static int probe_attn_elem(threadpool *tp, window_ctx *wc, int n_threads, rl_hw *hw);

static const uint32_t kern_types[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16, KITE_DTYPE_Q8_0,
                                      KITE_DTYPE_Q4_0, KITE_DTYPE_Q4_K, KITE_DTYPE_Q6_K};

int rl_hw_probe(int n_threads, bool force, const char *path, const char *probe_path, rl_hw *out, bool *measured) {
    char cpu[128], name[128];
    probe_cpu_name(cpu, sizeof cpu);
    snprintf(name, sizeof name, "%s: %.90s, %d threads", PROFILE_VERSION, cpu, n_threads);
    rl_hw hw;
    /* a cached profile is used unless it is stale (RL_HW_STALE): then everything is
     * measured again.  One measured busy (RL_HW_BUSY) is used and flagged by the caller:
     * measuring again on every run of a loaded machine would cost a minute each time and
     * read as busy again (--reprobe measures it on demand). */
    if (!force && path && rl_hw_load(path, &hw) == KITE_OK && !strcmp(hw.name, name) &&
        hw.threads == n_threads && !(rl_hw_suspect(&hw, (double)time(NULL)) & RL_HW_STALE)) {
        *out = hw;
        if (measured) *measured = false;
        return KITE_OK;
    }
    probe_result pr;
    int rc;
    if (force) { /* the bandwidth too: a cached one may come from another moment's load */
        if ((rc = probe_measure(&pr)) != KITE_OK) return rc;
        if (probe_path) (void)probe_save(probe_path, &pr); /* best effort, as in probe_get */
    } else if ((rc = probe_get(probe_path, &pr, NULL)) != KITE_OK) {
        return rc;
    }
    if ((rc = rl_hw_measure(n_threads, &pr, NULL, 0, &hw)) != KITE_OK) return rc;
    if (path) rl_hw_save(path, &hw); /* best effort: a read-only home only loses the cache */
    *out = hw;
    if (measured) *measured = true;
    return KITE_OK;
}

int rl_hw_measure(int n_threads, const probe_result *probe, const uint32_t *types, int n_types, rl_hw *out) {
    const probe_result pr = *probe;
    if (!types) {
        types = kern_types;
        n_types = (int)(sizeof kern_types / sizeof kern_types[0]);
    }
    char cpu[128];
    probe_cpu_name(cpu, sizeof cpu);
    rl_hw hw;
    int rc;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "%s: %.90s, %d threads", PROFILE_VERSION, cpu, n_threads);
    hw.threads = n_threads;
    hw.mem_bw_gbs = probe_read_gbs(&pr, n_threads);
    hw.fp32_gflops = pr.fma_gflops * n_threads;
    hw.measured_at = (double)time(NULL);

    window_ctx wc = {.n_threads = n_threads, .expect_gflops = hw.fp32_gflops, .min_avail = 1};
    {
        const int tb = n_threads <= pr.n_read ? n_threads : pr.n_read;
        if (tb >= 1 && pr.read_avail[tb] > 0) wc.min_avail = fmin(wc.min_avail, pr.read_avail[tb]);
    }
    threadpool *tp = tp_new(n_threads);
    if (!tp) return err_set(KITE_E_NOMEM, "probe: cannot start %d threads", n_threads);
    const int64_t K = MM_K, NT = GEMM_TOK;
    float *x = xalloc(sizeof(float) * (size_t)(K * NT));
    float *y = xalloc(sizeof(float) * (size_t)NT * MM_ROWS_LARGE);
    void *scratch = xalloc(kern_matmul_scratch_bytes(n_threads, NT, K));
    if (!x || !y || !scratch) {
        rc = err_set(KITE_E_NOMEM, "probe: out of memory");
        goto done;
    }
    fill_rand(x, K * NT, 3);
    /* effective bandwidth and call cost of each weight type's decode matvec, in the loader's layout */
    for (int i = 0; i < n_types; i++) {
        const uint32_t t = types[i];
        double rb = (double)dtype_row_size(t, K);
        double ts = time_pool(&wc, tp, t, MM_ROWS_SMALL, x, y, scratch);
        double tl = ts < 0 ? -1 : time_pool(&wc, tp, t, MM_ROWS_LARGE, x, y, scratch);
        if (tl < 0) continue; /* type without a quantizer, or no memory: bandwidth only */
        double c, rate;
        if (rl_fit_line(rb * MM_ROWS_SMALL, ts, rb * MM_ROWS_LARGE, tl, &c, &rate)) {
            hw.kern_gbs[t] = rate / 1e9;
            hw.kern_call_us[t] = c * 1e6;
        }
    }
    /* prefill matmul rate of each type: GEMM_TOK tokens against a GEMM_ROWS x 2048 matrix in the
     * loader's layout (x16 / x32 kernels where it repacks, else the tiled / INT8 GEMM) */
    for (int i = 0; i < n_types; i++) {
        const uint32_t t = types[i];
        weight w;
        void *data = make_weight(t, K, GEMM_ROWS, &w);
        if (!data) continue;
        w.layout = probe_repack(&w);
        mm_run mr = {.tp = tp, .w = &w, .x = x, .y = y, .scratch = scratch, .n_tok = NT};
        double s = time_windows(&wc, run_mm, &mr);
        hw.gemm_gops[t] = 2.0 * (double)NT * (double)K * (double)GEMM_ROWS / s / 1e9;
        free(data);
    }
    hw.bf16_gflops = hw.gemm_gops[KITE_DTYPE_BF16];
    hw.int8_gops = hw.gemm_gops[KITE_DTYPE_Q8_0];
    if ((rc = probe_attn_elem(tp, &wc, n_threads, &hw)) != KITE_OK) goto done;
    double t0 = time_now_s();
    for (int i = 0; i < 2000; i++) tp_run(tp, nop_task, NULL);
    hw.launch_us = n_threads > 1 ? (time_now_s() - t0) / 2000 * 1e6 : 0;
    hw.avail_pct = 100.0 * wc.min_avail;
    if (!(hw.avail_pct > 0)) hw.avail_pct = 0.1; /* measured, and with (next to) no core: busy, not unknown */
    rc = KITE_OK;
    *out = hw;
done:
    free(x);
    free(y);
    free(scratch);
    tp_free(tp);
    return rc;
}

/* ---- per-op timing ---- */

typedef struct small_args {
    const rl_shape *sh;
    float *x, *out, *gain, *cs;
    int64_t T, n;
    const weight *emb;
} small_args;

static void run_act(void *p) {
    small_args *a = p;
    kern_swiglu(a->out, a->x, a->T * a->n);
}
struct attn_run {
    threadpool *tp;
    attn_args *a;
    bool pre;
    int64_t prompt, T, batch, ctx;
};

/* One phase's attention for one layer: the prompt in chunks, or one decode step of every sequence. */
static void run_attn(void *p) {
    attn_run *r = p;
    if (r->pre) {
        for (int64_t p0 = 0; p0 < r->prompt; p0 += r->T) {
            r->a->pos0 = (int32_t)p0;
            r->a->n_tok = (int32_t)(r->prompt - p0 < r->T ? r->prompt - p0 : r->T);
            kern_attention(r->tp, r->a);
        }
    } else {
        r->a->pos0 = (int32_t)(r->ctx - 1);
        r->a->n_tok = 1;
        for (int64_t b = 0; b < r->batch; b++) kern_attention(r->tp, r->a);
    }
}

/* Model FLOPs of one decode query at context ctx (attn_scores + softmax +
 * attn_values of docs/roofline.md). */
static double attn_flops(int64_t ctx, int64_t nh, int64_t hd) {
    return 4.0 * (double)(ctx * nh * hd) + 5.0 * (double)(ctx * nh);
}

/* Attention of one decode query (32 heads of 64, 4 KV heads) at contexts
 * 256 and 1024, fitted t = c + flops / rate: hw->attn_gflops (rate) and
 * hw->attn_call_us (c); the element-wise rate (SwiGLU over 1 Mi elements,
 * 5 FLOPs each): hw->elem_gflops.  KITE_OK or KITE_E_NOMEM. */
static int probe_attn_elem(threadpool *tp, window_ctx *wc, int n_threads, rl_hw *hw) {
    const int64_t ctx = 1024, ctx_small = 256, nh = 32, nkv = 4, hd = 64, ne = 1 << 20;
    attn_args a = {.n_tok = 1, .pos0 = (int32_t)(ctx - 1), .n_head = (int32_t)nh, .n_head_kv = (int32_t)nkv,
                   .head_dim = (int32_t)hd, .n_ctx = (int32_t)ctx, .scale = 0.125f};
    float *q = xalloc(sizeof(float) * (size_t)(nh * hd)), *o = xalloc(sizeof(float) * (size_t)(nh * hd));
    float *kv = xalloc(sizeof(float) * (size_t)(2 * ctx * nkv * hd));
    float *sc = xalloc(sizeof(float) * kern_attention_scratch_floats(&a, n_threads));
    float *g = xalloc(sizeof(float) * (size_t)ne), *u = xalloc(sizeof(float) * (size_t)ne);
    int rc = KITE_OK;
    if (!q || !o || !kv || !sc || !g || !u) {
        rc = err_set(KITE_E_NOMEM, "probe: out of memory");
        goto done;
    }
    fill_rand(q, nh * hd, 11);
    fill_rand(kv, 2 * ctx * nkv * hd, 12);
    fill_rand(g, ne, 13);
    fill_rand(u, ne, 14);
    a.q = q, a.k_cache = kv, a.v_cache = kv + ctx * nkv * hd, a.out = o, a.scratch = sc;
    attn_run ar = {.tp = tp, .a = &a, .pre = false, .prompt = ctx_small, .T = 1, .batch = 1, .ctx = ctx_small};
    double ts = time_windows(wc, run_attn, &ar);
    ar.prompt = ar.ctx = ctx;
    double tl = time_windows(wc, run_attn, &ar);
    double c, rate;
    if (rl_fit_line(attn_flops(ctx_small, nh, hd), ts, attn_flops(ctx, nh, hd), tl, &c, &rate)) {
        hw->attn_gflops = rate / 1e9;
        hw->attn_call_us = c * 1e6;
    }
    small_args sa = {.x = u, .out = g, .T = 1, .n = ne};
    hw->elem_gflops = 5.0 * (double)ne / time_windows(wc, run_act, &sa) / 1e9;
done:
    free(q);
    free(o);
    free(kv);
    free(sc);
    free(g);
    free(u);
    return rc;
}
