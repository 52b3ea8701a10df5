/*
 * tune.h - per-machine choice of matmul variants (`kite tune`): which of
 * kern_matmul's bit-identical execution strategies runs for a shape class.
 *
 * DESIGN
 *   kern_matmul (matmul.c) can run y = W x in several ways that return the
 *   same bits for every output (each y is one weight row dotted with one
 *   activation row in the level's fixed summation order; kernels.h,
 *   gemm_tiled.h):
 *     regime   flat   the flat GEMM over row tiles and groups of up to
 *                     KERN_GEMM_MAX_TOK tokens (any batch size);
 *              tiled  the cache-tiled GEMM (gemm_tiled.h), where the level
 *                     has one for the type (else the flat path runs);
 *              default  today's rule: tiled above KERN_GEMM_MAX_TOK tokens
 *                     where there is a kernel, flat otherwise;
 *     tile     the flat path's row tile in weight bytes (16K, 64K, 256K);
 *     threads  auto (tp_threads_for's small-op policy), 1 (inline on the
 *              caller) or all (every pool thread).
 *   Nothing that changes bits is a variant (attention tiles, summation
 *   orders, activation formats stay fixed).
 *
 *   Shape classes (the table's key): weight type; rows and K in power-of-2
 *   buckets (class c holds (2^(c-1), 2^c], labelled by 2^c); n_tok in
 *   1, 2-4, 5-8, 9-16, 17-64, 65+; pool threads in power-of-2 buckets
 *   1, 2, 3-4, 5-8, ... 65+.
 *
 *   The table is a text file written by `kite tune` (cli/tune.c):
 *       kite-tune 1
 *       level avx512
 *       # type rows k n_tok threads variant
 *       q4_0 2048 2048 17-64 2 flat-256K-auto
 *   Blank lines and lines starting with '#' are comments.  rows, k and
 *   threads take any positive integer (bucketed) and n_tok a class label or
 *   an integer.  Variants are named as kern_tune_variant_name prints them
 *   ("flat-64K-auto", "tiled-all", "flat-16K-1t") or "default".  A later
 *   line for the same class replaces an earlier one.  It applies only to
 *   the kernel level named on its "level" line.  "option NAME on|off" sets
 *   one of the machine-wide kernel options (kern_opt, dispatch.h: names
 * decode-prefetch, bf16-fma, f16-widen); kern_config.opt overrides it.
 *
 *   Loading is the caller's: this module parses text and never opens a
 *   file.  The kite CLI (tools/config/config.h) reads $KITE_TUNE_FILE, else
 *   $XDG_CACHE_HOME/kite/tune-<level>.txt, else ~/.cache/kite/tune-<level>.txt
 *   (<level> the active level), parses it here and passes the table in
 *   kern_config.tune (dispatch.h); kern_matmul looks its variants up there.
 *   No table (NULL) means the built-in defaults everywhere.
 *
 *   Counters: kern_tune_count records every matmul call by the variant that
 *   ran (after fallbacks) and whether the choice came from the table, with
 *   relaxed atomic adds; `kite bench` prints the differences.
 *
 * INVARIANTS
 *   Every variant returns bit-identical results for every output (checked
 *   by tests/unit/test_tune.c), so a table can change speed only.
 *
 * THREAD SAFETY
 *   kern_tune_pick is safe from any thread: the configured table is
 *   immutable while kernels run; a pick is a binary search over at most
 *   KERN_TUNE_MAX_ENTRIES keys (no allocation, no lock).  Counters are
 *   atomic.  The parse/format helpers are reentrant.
 */
#ifndef KITE_KERNELS_TUNE_H
#define KITE_KERNELS_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"

#define KERN_TUNE_MAX_ENTRIES 4096 /* classes one table holds (a model has a few dozen) */
#define KERN_TUNE_VERSION 1        /* the "kite-tune N" header */

/* regime; GENERIC (no vec_dot: to_float + f32), X16 and X32 (interleaved
 * weight layouts, gemm_x16.h and gemm_x32.h) are only counted, never chosen */
enum {
    KERN_TUNE_DEFAULT = 0,
    KERN_TUNE_FLAT = 1,
    KERN_TUNE_TILED = 2,
    KERN_TUNE_GENERIC = 3,
    KERN_TUNE_X16 = 4,
    KERN_TUNE_X32 = 5
};
enum { KERN_TUNE_THR_AUTO = 0, KERN_TUNE_THR_ONE = 1, KERN_TUNE_THR_ALL = 2, KERN_TUNE_N_THR = 3 };
#define KERN_TUNE_N_TILES 3     /* flat row tiles: 16K, 64K (MM_TILE_BYTES, the default), 256K */
#define KERN_TUNE_TILE_DEFAULT 1
/* Counter slots: regime (FLAT, TILED, GENERIC, X16, X32) x tile x threads. */
#define KERN_TUNE_N_VARIANTS (5 * KERN_TUNE_N_TILES * KERN_TUNE_N_THR)

/* N n_tok classes and their representative batch sizes (what `kite tune` times). */
#define KERN_TUNE_N_NTOK 6

typedef struct kern_tune_choice {
    uint8_t regime;   /* KERN_TUNE_DEFAULT, _FLAT or _TILED */
    uint8_t tile;     /* flat row tile index < KERN_TUNE_N_TILES (kern_tune_tile_bytes) */
    uint8_t threads;  /* KERN_TUNE_THR_* */
    uint8_t tuned;    /* 1: from the table, 0: the built-in default */
} kern_tune_choice;

typedef struct kern_tune_entry {
    uint32_t key;     /* kern_tune_key() */
    kern_tune_choice c;
} kern_tune_entry;

typedef struct kern_tune_table {
    int level;        /* kern_level the table was tuned at; -1 before a "level" line */
    int8_t opt[KERN_OPT_COUNT]; /* "option" lines: 1 on, 0 off, -1 none */
    int n;            /* entries, sorted by key, keys unique */
    kern_tune_entry e[KERN_TUNE_MAX_ENTRIES];
} kern_tune_table;

/* ---- run time (matmul.c) ---------------------------------------------------- */

/* The variant for a matmul of a rows x k weight of `type` on n_tok tokens
 * with a pool of n_threads, at kernel `level`: t's entry for the class when
 * t is tuned at this level, else the built-in default (regime DEFAULT, 64K
 * tile, threads auto).  t may be NULL (no table: the default).  Never NULL;
 * the pointer is t's entry or the static default. */
const kern_tune_choice *kern_tune_pick(const kern_tune_table *t, kern_level level, uint32_t type, int64_t rows,
                                       int64_t k, int64_t n_tok, int n_threads);

/* kern_matmul_with (dispatch.h) running variant c instead of the table's
 * pick: `kite tune` and the tests time and compare variants with it
 * (implemented in matmul.c; same contract and results as kern_matmul). */
struct threadpool;
struct weight;
void kern_matmul_variant(const kern_ops_table *kt, struct threadpool *tp, const struct weight *w, const float *x,
                         int64_t n_tok, float *y, int64_t ldy, void *scratch, const kern_tune_choice *c);

/* The built-in default choice. */
const kern_tune_choice *kern_tune_default(void);

/* Records one matmul call that ran variant `id` (kern_tune_variant_id);
 * tuned: its choice came from the table.  Relaxed atomic add. */
void kern_tune_count(int id, bool tuned);

/* Copies the counters: out[0][id] default-chosen calls, out[1][id] table-chosen. */
void kern_tune_counts(uint64_t out[2][KERN_TUNE_N_VARIANTS]);

/* ---- variants ---------------------------------------------------------------- */

/* Row-tile bytes of tile index i (< KERN_TUNE_N_TILES). */
size_t kern_tune_tile_bytes(int i);

/* Counter slot of a resolved variant: regime FLAT, TILED, GENERIC or X16
 * (tile is ignored unless FLAT, threads always counts). */
int kern_tune_variant_id(int regime, int tile, int threads);

/* Name of counter slot id: "flat-64K-auto", "tiled-1t", "generic-all", "x16-auto", ...
 * ("unused" for the slots kern_tune_variant_id never returns; "?" out of range). */
const char *kern_tune_variant_name(int id);

/* Name of a choice as written in tables: "default" or a variant name. */
const char *kern_tune_choice_name(const kern_tune_choice *c);

/* Parses a choice name; false if it is none. */
bool kern_tune_choice_parse(const char *s, kern_tune_choice *out /* OUT */);

/* ---- shape classes ----------------------------------------------------------- */

int kern_tune_pow2_class(int64_t v);     /* smallest c >= 0 with v <= 2^c (v >= 1), capped at 62 */
int kern_tune_ntok_class(int64_t n_tok); /* 0..KERN_TUNE_N_NTOK-1 */
const char *kern_tune_ntok_label(int cls); /* "1", "2-4", ... "65+" */
int64_t kern_tune_ntok_rep(int cls);     /* batch size `kite tune` times for the class: 1 4 8 16 32 128 */
int kern_tune_thr_class(int n_threads);  /* pow2 class of n_threads, capped at 7 ("65+") */

/* Key of a shape class. */
uint32_t kern_tune_key(uint32_t type, int64_t rows, int64_t k, int64_t n_tok, int n_threads);

/* ---- tables ------------------------------------------------------------------- */

/* Empties t (level -1, no options). */
void kern_tune_table_init(kern_tune_table *t);

/* Parses a table from text (NUL-terminated).  Malformed lines are reported
 * on stderr as "kite: SRC:LINE: what; line ignored" (at most 10 lines, then
 * a count) and skipped.  Returns the number of malformed lines; a missing or
 * wrong "kite-tune 1" header makes the whole text count as malformed
 * (returns -1, t left empty).  Entries are added to t (a later line or call
 * replaces an earlier entry of the same class); entries beyond
 * KERN_TUNE_MAX_ENTRIES are reported and dropped. */
int kern_tune_table_parse(kern_tune_table *t, const char *text, const char *src);

/* Adds or replaces an entry; false if the table is full. */
bool kern_tune_table_put(kern_tune_table *t, uint32_t key, const kern_tune_choice *c);

/* The entry for key, or NULL.  O(log n). */
const kern_tune_choice *kern_tune_table_find(const kern_tune_table *t, uint32_t key);

/* Formats entry i as a table line (no newline) into buf; false if it does not fit.
 * Option lines are written by the caller ("option %s %s", kern_opt_name). */
bool kern_tune_table_line(const kern_tune_table *t, int i, char *buf, size_t cap);

#endif
