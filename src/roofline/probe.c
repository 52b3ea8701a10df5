/*
 * probe.c - read-bandwidth and FMA-peak probes, their cache file, and the
 * core-availability check (see probe.h for the method).
 */
#include "roofline/probe.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cpu.h"
#include "core/error.h"
#include "core/timing.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PROBE_X86 1
#endif

#define READ_BYTES ((size_t)512 << 20) /* well above any L3 a 2-64 core VM exposes */
#define READ_PASSES 11 /* timed passes per thread count; the median is kept (odd count) */
#define READ_AVAIL_MIN 0.70 /* FMA availability around a read probe below which it is measured again */
#define READ_CHECK_MS 10.0 /* as kite bench's check: 5 ms ones read 73-100 % on an idle machine */
#define FMA_RUNS 5
#define FMA_RUN_MS 20.0
#define FMA_CHAINS 12                  /* independent accumulators per loop iteration */

/* ---- FMA loops ------------------------------------------------------------------ */

/* Each loop runs `iters` iterations of FMA_CHAINS vector FMAs (acc = acc * m
 * + c, which converges, so values stay finite) and stores a lane so the work
 * cannot be optimised away.  Return: FLOPs per iteration. */

/* The chains are written out as 12 named variables: an array of vectors is
 * kept in memory by the compilers at -O2 (a store-forward per FMA).  Each
 * starts from its own value: chains that start equal are merged by the
 * compiler (common subexpressions), which made the loop run 4 FMAs while
 * counting 12 and overstated the peak about 1.5x. */
#define FMA_CHAINS_BODY(FMA, ADD)                                                                                  \
    for (uint64_t k = 0; k < iters; k++) {                                                                         \
        a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                            \
        a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                            \
        a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);                        \
    }                                                                                                              \
    s = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(ADD(a8, a9), ADD(a10, a11)))

#ifdef PROBE_X86
__attribute__((target("avx512f"))) static double fma_loop_avx512(uint64_t iters, volatile float *sink) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1.0f), a2 = _mm512_set1_ps(2.0f), a3 = _mm512_set1_ps(3.0f);
    __m512 a4 = _mm512_set1_ps(4.0f), a5 = _mm512_set1_ps(5.0f), a6 = _mm512_set1_ps(6.0f), a7 = _mm512_set1_ps(7.0f);
    __m512 a8 = _mm512_set1_ps(8.0f), a9 = _mm512_set1_ps(9.0f), a10 = _mm512_set1_ps(10.0f), a11 = _mm512_set1_ps(11.0f), s;
    FMA_CHAINS_BODY(_mm512_fmadd_ps, _mm512_add_ps);
    *sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16 * FMA_CHAINS;
}

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(uint64_t iters, volatile float *sink) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(1.0f), a2 = _mm256_set1_ps(2.0f), a3 = _mm256_set1_ps(3.0f);
    __m256 a4 = _mm256_set1_ps(4.0f), a5 = _mm256_set1_ps(5.0f), a6 = _mm256_set1_ps(6.0f), a7 = _mm256_set1_ps(7.0f);
    __m256 a8 = _mm256_set1_ps(8.0f), a9 = _mm256_set1_ps(9.0f), a10 = _mm256_set1_ps(10.0f), a11 = _mm256_set1_ps(11.0f), s;
    FMA_CHAINS_BODY(_mm256_fmadd_ps, _mm256_add_ps);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    *sink = lanes[0] + lanes[7];
    return 2.0 * 8 * FMA_CHAINS;
}
#endif

typedef float f32x4 __attribute__((vector_size(16)));

static f32x4 gen_fma(f32x4 x, f32x4 m, f32x4 c) { return x * m + c; }
static f32x4 gen_add(f32x4 x, f32x4 y) { return x + y; }

/* Portable fallback: separate multiply and add (2 FLOPs per lane, like a FMA). */
static double fma_loop_generic(uint64_t iters, volatile float *sink) {
    const f32x4 m = {0.999999f, 0.999999f, 0.999999f, 0.999999f}, c = {1e-6f, 1e-6f, 1e-6f, 1e-6f};
    f32x4 a0 = {0, 0, 0, 0}, a1 = {1, 1, 1, 1}, a2 = {2, 2, 2, 2}, a3 = {3, 3, 3, 3};
    f32x4 a4 = {4, 4, 4, 4}, a5 = {5, 5, 5, 5}, a6 = {6, 6, 6, 6}, a7 = {7, 7, 7, 7};
    f32x4 a8 = {8, 8, 8, 8}, a9 = {9, 9, 9, 9}, a10 = {10, 10, 10, 10}, a11 = {11, 11, 11, 11}, s;
    FMA_CHAINS_BODY(gen_fma, gen_add);
    *sink = s[0] + s[3];
    return 2.0 * 4 * FMA_CHAINS;
}

typedef double (*fma_loop_fn)(uint64_t iters, volatile float *sink);

static fma_loop_fn fma_pick(const char **isa) {
#ifdef PROBE_X86
    const cpu_info *ci = cpu_features();
    if (ci->avx512f) {
        *isa = "avx512";
        return fma_loop_avx512;
    }
    if (ci->avx2 && ci->fma) {
        *isa = "avx2";
        return fma_loop_avx2;
    }
#endif
    *isa = "sse";
    return fma_loop_generic;
}

/* ---- threads started together ------------------------------------------------------ */

typedef struct gang gang;
typedef void (*gang_fn)(gang *g, int ith);

struct gang {
    pthread_mutex_t mu;       /* start gate: workers wait until go (or abort) */
    pthread_cond_t cv;
    bool go, abort;
    int n;
    gang_fn fn;
    /* FMA */
    fma_loop_fn fma;
    uint64_t iters;
    /* read */
    const uint8_t *buf;
    size_t bytes;
    int passes;
    pthread_barrier_t pass_start, pass_end; /* per read pass, n + 1 */
    volatile uint64_t sinks[PROBE_MAX_THREADS];
};

typedef struct gang_arg {
    gang *g;
    int ith;
} gang_arg;

static void *gang_main(void *p) {
    gang_arg *a = p;
    gang *g = a->g;
    pthread_mutex_lock(&g->mu);
    while (!g->go) pthread_cond_wait(&g->cv, &g->mu);
    bool abort_run = g->abort;
    pthread_mutex_unlock(&g->mu);
    if (!abort_run) g->fn(g, a->ith);
    return NULL;
}

/* Starts n threads running fn, opens the gate for all of them at once and
 * returns the seconds until the last one finished, or <= 0 if the threads
 * could not all start (the started ones are released with abort set and
 * joined).  between(g), if not NULL, runs on the calling thread after the
 * gate opened and its result replaces the elapsed time (the read probe
 * times its passes there). */
static double gang_run(gang *g, int n, gang_fn fn, double (*between)(gang *g)) {
    pthread_t th[PROBE_MAX_THREADS];
    gang_arg args[PROBE_MAX_THREADS];
    g->n = n;
    g->fn = fn;
    g->go = g->abort = false;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    int started = 0;
    for (; started < n; started++) {
        args[started] = (gang_arg){g, started};
        if (pthread_create(&th[started], NULL, gang_main, &args[started]) != 0) break;
    }
    pthread_mutex_lock(&g->mu);
    g->go = true;
    g->abort = started < n;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    double secs = -1.0;
    if (started == n) {
        double t0 = time_now_s();
        double r = between ? between(g) : 0.0;
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        secs = between ? r : time_now_s() - t0;
    } else {
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    return secs;
}

static void fma_worker(gang *g, int ith) {
    volatile float sink;
    g->fma(g->iters, &sink);
    g->sinks[ith] = (uint64_t)sink;
}

/* Iterations of the FMA loop that take about ms milliseconds on one thread. */
static uint64_t fma_calibrate(fma_loop_fn fma, double ms) {
    volatile float sink;
    uint64_t iters = 20000;
    for (;;) {
        double t0 = time_now_s();
        fma(iters, &sink);
        double dt = time_now_s() - t0;
        if (dt > 2e-3 || iters > (1ull << 40)) return (uint64_t)((double)iters * (ms * 1e-3) / (dt > 0 ? dt : 1e-9)) + 1;
        iters *= 4;
    }
}

/* Iterations per millisecond of the best FMA loop on one thread, measured
 * once per process (best of 3 short runs). */
static pthread_once_t fma_once = PTHREAD_ONCE_INIT;
static double fma_iters_per_ms;

static void fma_calibrate_once(void) {
    const char *isa;
    fma_loop_fn fma = fma_pick(&isa);
    double best = 0.0;
    for (int k = 0; k < 3; k++) {
        double it = (double)fma_calibrate(fma, 1.0);
        if (it > best) best = it;
    }
    fma_iters_per_ms = best;
}

double probe_fma_check(int n_threads, double ms) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > PROBE_MAX_THREADS) n_threads = PROBE_MAX_THREADS;
    pthread_once(&fma_once, fma_calibrate_once);
    const char *isa;
    gang g;
    memset(&g, 0, sizeof g);
    g.fma = fma_pick(&isa);
    g.iters = (uint64_t)(fma_iters_per_ms * ms) + 1;
    volatile float sink;
    double flops_per_iter = g.fma(1, &sink);
    double secs = gang_run(&g, n_threads, fma_worker, NULL);
    if (secs <= 0) return 0.0;
    return flops_per_iter * (double)g.iters * n_threads / secs / 1e9;
}

/* ---- read bandwidth ----------------------------------------------------------- */

typedef uint64_t u64x2 __attribute__((vector_size(16), may_alias));

static uint64_t sum_slice_generic(const uint8_t *p, size_t bytes) {
    const u64x2 *v = (const u64x2 *)(const void *)p;
    size_t n = bytes / sizeof(u64x2);
    u64x2 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        s0 += v[i];
        s1 += v[i + 1];
        s2 += v[i + 2];
        s3 += v[i + 3];
        s4 += v[i + 4];
        s5 += v[i + 5];
        s6 += v[i + 6];
        s7 += v[i + 7];
    }
    u64x2 s = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    return s[0] + s[1];
}

#ifdef PROBE_X86
/* One load per cache line.  WHY: the reads a core keeps in flight are bounded
 * by its out-of-order window, counted in instructions; with 16-byte loads an
 * Intel Xeon (family 6 model 207, Nov 30) read 9-11 GB/s on one thread and
 * 19-22 on two, while this loop read 14-16 and 30-35, and kite's f32 decode
 * (zmm loads) streamed 27-29 GB/s: a "roofline" it exceeded by 1.2-1.6x. */
__attribute__((target("avx512f"))) static uint64_t sum_slice_avx512(const uint8_t *p, size_t bytes) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 256 <= bytes; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(p + i + 64)));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(p + i + 128)));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    uint64_t lanes[8]; /* summed unsigned: _mm512_reduce_add_epi64 adds signed, and these sums wrap */
    _mm512_storeu_si512((void *)lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    uint64_t sum = 0;
    for (int i = 0; i < 8; i++) sum += lanes[i];
    return sum;
}

__attribute__((target("avx2"))) static uint64_t sum_slice_avx2(const uint8_t *p, size_t bytes) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)(void *)lanes, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

/* The widest load the CPU and OS support (slices are 256-byte multiples at
 * 2 MiB-aligned starts, so the aligned loads are valid). */
static uint64_t sum_slice(const uint8_t *p, size_t bytes) {
#ifdef PROBE_X86
    const cpu_info *ci = cpu_features();
    if (ci->avx512f) return sum_slice_avx512(p, bytes);
    if (ci->avx2) return sum_slice_avx2(p, bytes);
#endif
    return sum_slice_generic(p, bytes);
}

static void read_worker(gang *g, int ith) {
    size_t slice = (g->bytes / (size_t)g->n) & ~(size_t)255;
    uint64_t acc = 0;
    for (int p = 0; p < g->passes; p++) {
        pthread_barrier_wait(&g->pass_start);
        acc += sum_slice(g->buf + (size_t)ith * slice, slice);
        pthread_barrier_wait(&g->pass_end);
    }
    g->sinks[ith] = acc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times each pass between the barriers; returns the median pass's GB/s.
 * The median, not the best: on a shared machine the best pass catches a
 * moment nobody else touched memory, which a run of many tokens never sees,
 * and it made consecutive probes disagree by up to 1.7x. */
static double read_timer(gang *g) {
    size_t slice = (g->bytes / (size_t)g->n) & ~(size_t)255;
    double gbs[READ_PASSES];
    int n = g->passes < READ_PASSES ? g->passes : READ_PASSES;
    for (int p = 0; p < g->passes; p++) {
        pthread_barrier_wait(&g->pass_start);
        double t0 = time_now_s();
        pthread_barrier_wait(&g->pass_end);
        double dt = time_now_s() - t0;
        if (p < n) gbs[p] = (double)slice * g->n / dt / 1e9;
    }
    if (n < 1) return 0.0;
    qsort(gbs, (size_t)n, sizeof gbs[0], cmp_double);
    return gbs[n / 2];
}

static double read_probe(const uint8_t *buf, size_t bytes, int n_threads) {
    gang g;
    memset(&g, 0, sizeof g);
    g.buf = buf;
    g.bytes = bytes;
    g.passes = READ_PASSES;
    if (pthread_barrier_init(&g.pass_start, NULL, (unsigned)n_threads + 1) != 0) return 0.0;
    if (pthread_barrier_init(&g.pass_end, NULL, (unsigned)n_threads + 1) != 0) {
        pthread_barrier_destroy(&g.pass_start);
        return 0.0;
    }
    double gbs = gang_run(&g, n_threads, read_worker, read_timer);
    pthread_barrier_destroy(&g.pass_start);
    pthread_barrier_destroy(&g.pass_end);
    return gbs > 0 ? gbs : 0.0;
}

/* ---- machine identity ------------------------------------------------------------ */

void probe_cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) break;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t n = strcspn(c, "\n");
        while (n > 0 && c[n - 1] == ' ') n--;
        if (n >= cap) n = cap - 1;
        memcpy(buf, c, n);
        buf[n] = '\0';
        break;
    }
    fclose(f);
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int probe_measure(probe_result *r) {
    memset(r, 0, sizeof *r);
    probe_cpu_name(r->cpu, sizeof r->cpu);
    r->n_cpu = online_cpus();
    r->n_read = r->n_cpu < PROBE_MAX_THREADS ? r->n_cpu : PROBE_MAX_THREADS;
    r->measured_at = (long long)time(NULL);

    const char *isa;
    fma_loop_fn fma = fma_pick(&isa);
    snprintf(r->isa, sizeof r->isa, "%s", isa);
    uint64_t iters = fma_calibrate(fma, FMA_RUN_MS);
    for (int k = 0; k < FMA_RUNS; k++) {
        volatile float sink;
        double t0 = time_now_s();
        double fpi = fma(iters, &sink);
        double gf = fpi * (double)iters / (time_now_s() - t0) / 1e9;
        if (gf > r->fma_gflops) r->fma_gflops = gf;
    }

    uint8_t *raw = mmap(NULL, READ_BYTES + ((size_t)2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (raw == MAP_FAILED) return err_set(KITE_E_NOMEM, "probe: cannot map %zu bytes: %s", READ_BYTES, strerror(errno));
    uint8_t *buf = raw + ((((size_t)2 << 20) - (uintptr_t)raw % ((size_t)2 << 20)) % ((size_t)2 << 20));
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, READ_BYTES, MADV_HUGEPAGE);
#endif
    memset(buf, 1, READ_BYTES);
    for (int t = 1; t <= r->n_read; t++) {
        /* a host that takes a core away during the probe halves the 2-thread figure and every
         * roofline share made from it (two probes of 18-19 GB/s among 31-35 in a Nov 30 run):
         * an FMA check on the same threads before and after; below READ_AVAIL_MIN measure again,
         * keeping the try the machine gave the most to */
        r->read_avail[t] = -1.0;
        for (int k = 0; k < PROBE_READ_TRIES; k++) {
            const double expect = r->fma_gflops * t;
            const double a0 = expect > 0 ? probe_fma_check(t, READ_CHECK_MS) / expect : 1.0;
            const double gbs = read_probe(buf, READ_BYTES, t);
            const double a1 = expect > 0 ? probe_fma_check(t, READ_CHECK_MS) / expect : 1.0;
            const double av = fmax(a0 < a1 ? a0 : a1, 1e-3); /* > 0: measured (0 means unknown) */
            if (av > r->read_avail[t]) {
                r->read_avail[t] = av;
                r->read_gbs[t] = gbs;
            }
            if (av >= READ_AVAIL_MIN) break;
            r->read_busy[t]++;
        }
    }
    munmap(raw, READ_BYTES + ((size_t)2 << 20));
    return KITE_OK;
}

double probe_read_gbs(const probe_result *r, int t) {
    if (r->n_read < 1) return 0.0;
    if (t < 1) t = 1;
    return r->read_gbs[t <= r->n_read ? t : r->n_read];
}

/* ---- cache file --------------------------------------------------------------- */

int probe_load(const char *path, probe_result *out) {
    if (!path) return KITE_E_NOT_FOUND;
    FILE *f = fopen(path, "r");
    if (!f) return KITE_E_NOT_FOUND;
    probe_result r;
    memset(&r, 0, sizeof r);
    char line[512], cpu[128];
    probe_cpu_name(cpu, sizeof cpu);
    bool ok_magic = false, ok_cpu = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        int t;
        double v;
        if (!strcmp(line, "kite-probe 3")) {
            ok_magic = true;
        } else if (!strncmp(line, "cpu ", 4)) {
            size_t n = strlen(line + 4) < sizeof r.cpu - 1 ? strlen(line + 4) : sizeof r.cpu - 1;
            memcpy(r.cpu, line + 4, n);
            r.cpu[n] = '\0';
            ok_cpu = strcmp(r.cpu, cpu) == 0;
        } else if (sscanf(line, "n_cpu %d", &t) == 1) {
            r.n_cpu = t;
        } else if (sscanf(line, "isa %15s", r.isa) == 1) {
        } else if (sscanf(line, "fma_gflops_per_thread %lf", &v) == 1) {
            r.fma_gflops = v;
        } else if (sscanf(line, "read_gbs %d %lf", &t, &v) == 2 && t >= 1 && t <= PROBE_MAX_THREADS) {
            r.read_gbs[t] = v;
            if (t > r.n_read) r.n_read = t;
        } else if (sscanf(line, "read_avail %d %lf", &t, &v) == 2 && t >= 1 && t <= PROBE_MAX_THREADS) {
            r.read_avail[t] = v;
        } else if (sscanf(line, "read_busy %d %lf", &t, &v) == 2 && t >= 1 && t <= PROBE_MAX_THREADS) {
            r.read_busy[t] = (int)v;
        } else if (sscanf(line, "measured_at %lf", &v) == 1 && v >= 0) {
            r.measured_at = (long long)v;
        }
    }
    fclose(f);
    if (!ok_magic || !ok_cpu || r.n_cpu != online_cpus() || r.n_read < 1 || !(r.fma_gflops > 0)) return KITE_E_NOT_FOUND;
    for (int t = 1; t <= r.n_read; t++)
        if (!(r.read_gbs[t] > 0)) return KITE_E_NOT_FOUND;
    *out = r;
    return KITE_OK;
}

/* mkdir -p of the directory part of path. */
static void make_parent_dirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)mkdir(path, 0755);
        *p = '/';
    }
}

int probe_save(const char *path_in, const probe_result *r) {
    char path[1024], tmp[1100];
    if (!path_in) return err_set(KITE_E_ARG, "probe: no cache file");
    if ((size_t)snprintf(path, sizeof path, "%s", path_in) >= sizeof path)
        return err_set(KITE_E_IO, "probe: cache path too long");
    make_parent_dirs(path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return err_set(KITE_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    fprintf(f, "kite-probe 3\ncpu %s\nn_cpu %d\nisa %s\nfma_gflops_per_thread %.2f\n", r->cpu, r->n_cpu, r->isa,
            r->fma_gflops);
    for (int t = 1; t <= r->n_read; t++) fprintf(f, "read_gbs %d %.2f\n", t, r->read_gbs[t]);
    for (int t = 1; t <= r->n_read; t++)
        fprintf(f, "read_avail %d %.3f\nread_busy %d %d\n", t, r->read_avail[t], t, r->read_busy[t]);
    fprintf(f, "measured_at %lld\n", r->measured_at);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return err_set(KITE_E_IO, "%s: cannot write the probe cache", path);
    }
    return KITE_OK;
}

unsigned probe_suspect(const probe_result *r, long long now) {
    unsigned f = 0;
    if (r->measured_at <= 0 || now - r->measured_at > PROBE_MAX_AGE_S) f |= PROBE_STALE;
    for (int t = 1; t <= r->n_read; t++)
        if (r->read_avail[t] > 0 && r->read_avail[t] < PROBE_AVAIL_MIN) f |= PROBE_BUSY;
    return f;
}

int probe_get(const char *path, probe_result *r, bool *measured) {
    probe_result c;
    if (probe_load(path, &c) == KITE_OK && !probe_suspect(&c, (long long)time(NULL))) {
        *r = c;
        if (measured) *measured = false;
        return KITE_OK;
    }
    int rc = probe_measure(r);
    if (rc) return rc;
    if (path) (void)probe_save(path, r); /* a read-only home is not an error: the numbers are still valid */
    if (measured) *measured = true;
    return KITE_OK;
}
