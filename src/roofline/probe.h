/*
 * probe.h - what this machine can do: memory read bandwidth and FP32 FMA
 * peak, measured, cached on disk; plus a short core-availability check.
 *
 * DESIGN
 *   `kite bench` compares decode against the read bandwidth (decode streams
 *   every weight byte once per token) and prefill against the FMA peak.
 *   Both peaks are measured here rather than taken from a data sheet:
 *
 *   - read bandwidth (STREAM-like "sum" kernel): a 512 MiB buffer in
 *     2 MiB-aligned anonymous memory with MADV_HUGEPAGE (like the model
 *     weights), split into one contiguous slice per thread; each thread sums
 *     its slice with four independent integer accumulators, loading in the
 *     widest vectors the CPU supports (zmm: one load per cache line; 16-byte
 *     loads under-measured an Intel Xeon by about 1.5x, see probe.c); integer
 *     adds keep the loop load-bound at any ISA level.  Threads start together
 *     at a barrier; a pass is timed from the first barrier to the last
 *     finisher.  Median of 11 passes (the best pass overstated what a long
 *     run sees on a shared machine and varied from probe to probe), for each
 *     thread count 1..n_cpu (at most PROBE_MAX_THREADS).  GB/s = 1e9 bytes
 *     per second.  Around each thread count's probe a short FMA check on the
 *     same threads says whether the host gave them their cores; below 70 %
 *     the probe is run again (3 tries at most, the best-served one kept).
 *   - FMA peak per thread: 12 independent vector FMA chains (enough to cover
 *     4-cycle latency on two FMA pipes) in the widest ISA the CPU and OS
 *     support (AVX-512F zmm, else AVX2+FMA ymm, else SSE mul+add), best of
 *     5 runs of about 20 ms on one thread.  A FMA counts as 2 FLOPs.
 *
 *   The ISA-specific loops use function-level target attributes and are
 *   only called after cpu_features() says the CPU and OS support them, so
 *   the file needs no ISA compiler flags.
 *
 *   Results are cached in a small text file whose path the caller gives
 *   (the kite CLI: $XDG_CACHE_HOME/kite/probe.txt, else
 *   ~/.cache/kite/probe.txt; tools/config/config.h), keyed by the CPU model
 *   string and the online CPU count; a mismatch or a missing file means
 *   "measure again".
 *   The file also records when it was measured and the availability of
 *   each read probe; probe_get measures again when the entry is older than
 *   PROBE_MAX_AGE_S or was measured busy (probe_suspect).
 *   The first line is the format version: "kite-probe 2" since the median
 *   pass replaced the best one, "kite-probe 3" since the wide loads; an
 *   older file is measured again.
 *
 *   probe_fma_check() is the noisy-machine guard of `kite bench`: the FMA
 *   loop on n threads at once for a few milliseconds.  On a host that takes a
 *   core away (invisible in steal time) its rate drops to about 1/n of the
 *   expected n * per-thread peak.
 *
 * THREAD SAFETY
 *   All functions may be called from any thread; they start and join their
 *   own threads and share no state.
 */
#ifndef KITE_CORE_PROBE_H
#define KITE_CORE_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#define PROBE_MAX_THREADS 64
#define PROBE_READ_TRIES 3 /* read probes per thread count at most, while the machine looks busy */

typedef struct probe_result {
    char cpu[128];                            /* CPU model string ("model name" in /proc/cpuinfo) */
    int n_cpu;                                /* online CPUs when measured */
    int n_read;                               /* thread counts measured: 1..n_read */
    double read_gbs[PROBE_MAX_THREADS + 1];   /* [t]: read bandwidth with t threads, GB/s ([0] unused) */
    double fma_gflops;                        /* FP32 FMA peak of one thread, GFLOP/s */
    /* The core availability around the kept read probe with t threads (the
     * lower of an FMA check before and after, as a share of t * fma_gflops),
     * and how many tries saw under 70 % (PROBE_READ_TRIES: every try; the
     * figure may read low).  Both are cached; 0 in a cache file older than
     * these fields (unknown). */
    double read_avail[PROBE_MAX_THREADS + 1];
    int read_busy[PROBE_MAX_THREADS + 1];
    long long measured_at;                    /* when measured, Unix seconds (0: unknown, an older file) */
    char isa[16];                             /* ISA of the FMA loop: "avx512", "avx2", "sse" */
} probe_result;

/* CPU model string of this machine into buf (e.g. "AMD EPYC"), or "unknown". */
void probe_cpu_name(char *buf, size_t cap);

/* Measures everything (about 1-2 s on 2 cores).  Returns KITE_OK or
 * KITE_E_NOMEM (message set). */
int probe_measure(probe_result *r /* OUT */);

/* Reads the cache file at path: KITE_OK if it exists, parses and matches
 * this machine's CPU string and CPU count; KITE_E_NOT_FOUND otherwise, or
 * when path is NULL (*r unchanged). */
int probe_load(const char *path, probe_result *r /* OUT */);

/* Writes r to the cache file at path (creating its directories).  KITE_OK,
 * KITE_E_IO, or KITE_E_ARG when path is NULL. */
int probe_save(const char *path, const probe_result *r);

#define PROBE_MAX_AGE_S (7LL * 86400) /* a cached probe older than this is measured again */
#define PROBE_AVAIL_MIN 0.70          /* ...and so is one whose read probes saw less core availability */
enum { PROBE_STALE = 1, PROBE_BUSY = 2 };
/* What is suspect about a probe result at Unix time now: PROBE_STALE
 * (measured_at unknown or more than PROBE_MAX_AGE_S ago), PROBE_BUSY (some
 * read probe's availability known and under PROBE_AVAIL_MIN); 0: fine. */
unsigned probe_suspect(const probe_result *r, long long now);

/* The result cached at path, or a fresh measurement that is then cached
 * there (path NULL: measured, not cached).  A cached result that is stale
 * or was measured busy (probe_suspect) is measured again; the fresh one is
 * kept even if it is busy too (the caller flags it with probe_suspect).
 * *measured (may be NULL) says which.  KITE_OK or KITE_E_NOMEM. */
int probe_get(const char *path, probe_result *r /* OUT */, bool *measured /* OUT */);

/* Core-availability check: runs the FMA loop on n_threads threads at once
 * for about `ms` milliseconds; returns the total GFLOP/s they reached (0 on
 * failure to start threads).  Compare with n_threads * fma_gflops. */
double probe_fma_check(int n_threads, double ms);

/* Read bandwidth (GB/s) expected with t threads: the measured value, or the
 * largest measured thread count's for more threads. */
double probe_read_gbs(const probe_result *r, int t);

#endif
