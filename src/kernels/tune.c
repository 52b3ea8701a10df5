/*
 * tune.c - the matmul variant table: shape classes, parsing, the run-time
 * lookup and the "which variant ran" counters (contract in tune.h).
 *
 * DESIGN
 *   The run-time table is the caller's (kern_config.tune, read-only while
 *   kernels run): kern_tune_pick computes the class key (a few integer ops)
 *   and binary-searches the sorted entries.  Counters are a static array of
 *   relaxed atomics, one slot per resolved variant and source (default /
 *   table).  Nothing here reads a file or the environment.
 *
 * OWNERSHIP
 *   Tables belong to their callers; the only static state is the counters,
 *   the variant names and the default choice.
 *
 * THREAD SAFETY
 *   See tune.h: pick and count from any thread; parse/format reentrant.
 */
#include "kernels/tune.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tensor/dtype.h"

#define MAX_REPORTED 10           /* malformed lines reported one by one, then a count */
#define TYPE_BITS 9               /* dtype ids < 512 (kite's own types are 256, 257) */

static const size_t tile_bytes[KERN_TUNE_N_TILES] = {16u << 10, 64u << 10, 256u << 10};
static const char *const tile_names[KERN_TUNE_N_TILES] = {"16K", "64K", "256K"};
static const char *const thr_names[KERN_TUNE_N_THR] = {"auto", "1t", "all"};
static const char *const ntok_labels[KERN_TUNE_N_NTOK] = {"1", "2-4", "5-8", "9-16", "17-64", "65+"};
static const int64_t ntok_reps[KERN_TUNE_N_NTOK] = {1, 4, 8, 16, 32, 128};
static const char *const thr_class_labels[8] = {"1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65+"};

/* ---- variants ------------------------------------------------------------------ */

size_t kern_tune_tile_bytes(int i) { return tile_bytes[i >= 0 && i < KERN_TUNE_N_TILES ? i : KERN_TUNE_TILE_DEFAULT]; }

int kern_tune_variant_id(int regime, int tile, int threads) {
    int r = regime == KERN_TUNE_TILED     ? 1
            : regime == KERN_TUNE_GENERIC ? 2
            : regime == KERN_TUNE_X16     ? 3
            : regime == KERN_TUNE_X32     ? 4
                                          : 0;
    if (r != 0 || tile < 0 || tile >= KERN_TUNE_N_TILES) tile = KERN_TUNE_TILE_DEFAULT;
    if (threads < 0 || threads >= KERN_TUNE_N_THR) threads = KERN_TUNE_THR_AUTO;
    return (r * KERN_TUNE_N_TILES + tile) * KERN_TUNE_N_THR + threads;
}

/* Names of every slot, built once (ids whose tile is not the default for
 * tiled/generic/x16/x32 are never produced by kern_tune_variant_id). */
static char variant_names[KERN_TUNE_N_VARIANTS][24];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void build_names(void) {
    static const char *const regimes[5] = {"flat", "tiled", "generic", "x16", "x32"};
    for (int id = 0; id < KERN_TUNE_N_VARIANTS; id++) {
        const int thr = id % KERN_TUNE_N_THR, tile = id / KERN_TUNE_N_THR % KERN_TUNE_N_TILES;
        const int r = id / (KERN_TUNE_N_THR * KERN_TUNE_N_TILES);
        if (r == 0)
            snprintf(variant_names[id], sizeof variant_names[id], "flat-%s-%s", tile_names[tile], thr_names[thr]);
        else if (tile != KERN_TUNE_TILE_DEFAULT)
            snprintf(variant_names[id], sizeof variant_names[id], "unused");
        else
            snprintf(variant_names[id], sizeof variant_names[id], "%s-%s", regimes[r], thr_names[thr]);
    }
}

const char *kern_tune_variant_name(int id) {
    if (id < 0 || id >= KERN_TUNE_N_VARIANTS) return "?";
    pthread_once(&names_once, build_names);
    return variant_names[id];
}

const char *kern_tune_choice_name(const kern_tune_choice *c) {
    if (c->regime == KERN_TUNE_DEFAULT) return "default";
    return kern_tune_variant_name(kern_tune_variant_id(c->regime, c->tile, c->threads));
}

bool kern_tune_choice_parse(const char *s, kern_tune_choice *out) {
    memset(out, 0, sizeof *out);
    out->tile = KERN_TUNE_TILE_DEFAULT;
    if (!strcmp(s, "default")) return true;
    for (int id = 0; id < KERN_TUNE_N_VARIANTS; id++) {
        const int thr = id % KERN_TUNE_N_THR, tile = id / KERN_TUNE_N_THR % KERN_TUNE_N_TILES;
        const int r = id / (KERN_TUNE_N_THR * KERN_TUNE_N_TILES);
        if (r >= 2 || (r == 1 && tile != KERN_TUNE_TILE_DEFAULT)) continue; /* generic, x16, x32: not selectable */
        if (strcmp(s, kern_tune_variant_name(id)) != 0) continue;
        out->regime = r == 0 ? KERN_TUNE_FLAT : KERN_TUNE_TILED;
        out->tile = (uint8_t)tile;
        out->threads = (uint8_t)thr;
        return true;
    }
    return false;
}

/* ---- shape classes --------------------------------------------------------------- */

int kern_tune_pow2_class(int64_t v) {
    if (v <= 1) return 0;
    const int c = 64 - __builtin_clzll((unsigned long long)(v - 1)); /* gcc and clang */
    return c > 62 ? 62 : c;
}

int kern_tune_ntok_class(int64_t n) {
    if (n <= 1) return 0;
    if (n <= 4) return 1;
    if (n <= 8) return 2;
    if (n <= 16) return 3;
    if (n <= 64) return 4;
    return 5;
}

const char *kern_tune_ntok_label(int cls) { return cls >= 0 && cls < KERN_TUNE_N_NTOK ? ntok_labels[cls] : "?"; }

int64_t kern_tune_ntok_rep(int cls) { return cls >= 0 && cls < KERN_TUNE_N_NTOK ? ntok_reps[cls] : 1; }

int kern_tune_thr_class(int n_threads) {
    const int c = kern_tune_pow2_class(n_threads < 1 ? 1 : n_threads);
    return c > 7 ? 7 : c;
}

static uint32_t make_key(uint32_t type, int rows_c, int k_c, int ntok_c, int thr_c) {
    return (type & ((1u << TYPE_BITS) - 1)) << 18 | (uint32_t)rows_c << 12 | (uint32_t)k_c << 6 |
           (uint32_t)ntok_c << 3 | (uint32_t)thr_c;
}

uint32_t kern_tune_key(uint32_t type, int64_t rows, int64_t k, int64_t n_tok, int n_threads) {
    return make_key(type, kern_tune_pow2_class(rows), kern_tune_pow2_class(k), kern_tune_ntok_class(n_tok),
                    kern_tune_thr_class(n_threads));
}

/* ---- tables ------------------------------------------------------------------------ */

void kern_tune_table_init(kern_tune_table *t) {
    t->level = -1;
    memset(t->opt, -1, sizeof t->opt);
    t->n = 0;
}

/* Index of the first entry with key >= key. */
static int lower_bound(const kern_tune_table *t, uint32_t key) {
    int lo = 0, hi = t->n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (t->e[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const kern_tune_choice *kern_tune_table_find(const kern_tune_table *t, uint32_t key) {
    const int i = lower_bound(t, key);
    return i < t->n && t->e[i].key == key ? &t->e[i].c : NULL;
}

bool kern_tune_table_put(kern_tune_table *t, uint32_t key, const kern_tune_choice *c) {
    const int i = lower_bound(t, key);
    if (i < t->n && t->e[i].key == key) {
        t->e[i].c = *c;
        return true;
    }
    if (t->n >= KERN_TUNE_MAX_ENTRIES) return false;
    memmove(&t->e[i + 1], &t->e[i], sizeof t->e[0] * (size_t)(t->n - i));
    t->e[i].key = key;
    t->e[i].c = *c;
    t->n++;
    return true;
}

bool kern_tune_table_line(const kern_tune_table *t, int i, char *buf, size_t cap) {
    if (i < 0 || i >= t->n) return false;
    const uint32_t key = t->e[i].key;
    const uint32_t type = key >> 18;
    const int rows_c = (int)(key >> 12 & 63), k_c = (int)(key >> 6 & 63), ntok_c = (int)(key >> 3 & 7);
    const int thr_c = (int)(key & 7);
    const int n = snprintf(buf, cap, "%s %lld %lld %s %s %s", dtype_name(type), (long long)1 << rows_c,
                           (long long)1 << k_c, kern_tune_ntok_label(ntok_c), thr_class_labels[thr_c],
                           kern_tune_choice_name(&t->e[i].c));
    return n > 0 && (size_t)n < cap;
}

/* Strict positive integer in [1, 2^62]. */
static bool parse_pos(const char *s, int64_t *out) {
    if (!*s) return false;
    int64_t v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s) || v > ((int64_t)1 << 58)) return false;
        v = v * 10 + (*s - '0');
    }
    if (v < 1) return false;
    *out = v;
    return true;
}

static int parse_ntok(const char *s) {
    for (int c = 0; c < KERN_TUNE_N_NTOK; c++)
        if (!strcmp(s, ntok_labels[c])) return c;
    int64_t v;
    return parse_pos(s, &v) ? kern_tune_ntok_class(v) : -1;
}

static int parse_thr(const char *s) {
    for (int c = 0; c < 8; c++)
        if (!strcmp(s, thr_class_labels[c])) return c;
    int64_t v;
    return parse_pos(s, &v) && v <= (1 << 20) ? kern_tune_thr_class((int)v) : -1;
}

typedef struct parse_state {
    const char *src;
    int n_bad;
} parse_state;

static void report(parse_state *ps, int line, const char *what, const char *tok) {
    if (++ps->n_bad <= MAX_REPORTED)
        fprintf(stderr, "kite: %s:%d: %s%s%s%s; line ignored\n", ps->src, line, what, tok ? " '" : "", tok ? tok : "",
                tok ? "'" : "");
}

/* One entry line split into fields; reports and returns false if malformed. */
static bool parse_entry(kern_tune_table *t, parse_state *ps, int line, char **f, int nf) {
    if (nf != 6) {
        report(ps, line, nf < 6 ? "too few fields (want: type rows k n_tok threads variant)" : "too many fields",
               NULL);
        return false;
    }
    const int type = dtype_from_name(f[0]);
    int64_t rows, k;
    if (type < 0 || type >= (1 << TYPE_BITS) || !dtype_get((uint32_t)type)) {
        report(ps, line, "unknown weight type", f[0]);
        return false;
    }
    if (!parse_pos(f[1], &rows)) {
        report(ps, line, "rows: expected a positive integer, got", f[1]);
        return false;
    }
    if (!parse_pos(f[2], &k)) {
        report(ps, line, "k: expected a positive integer, got", f[2]);
        return false;
    }
    const int ntok_c = parse_ntok(f[3]), thr_c = parse_thr(f[4]);
    if (ntok_c < 0) {
        report(ps, line, "n_tok: expected 1, 2-4, 5-8, 9-16, 17-64, 65+ or a count, got", f[3]);
        return false;
    }
    if (thr_c < 0) {
        report(ps, line, "threads: expected a thread count, got", f[4]);
        return false;
    }
    kern_tune_choice c;
    if (!kern_tune_choice_parse(f[5], &c)) {
        report(ps, line, "unknown variant (want default, flat-16K|64K|256K-auto|1t|all, tiled-auto|1t|all)", f[5]);
        return false;
    }
    c.tuned = 1;
    const uint32_t key = make_key((uint32_t)type, kern_tune_pow2_class(rows), kern_tune_pow2_class(k), ntok_c, thr_c);
    if (!kern_tune_table_put(t, key, &c)) {
        report(ps, line, "table full (KERN_TUNE_MAX_ENTRIES classes)", NULL);
        return false;
    }
    return true;
}

int kern_tune_table_parse(kern_tune_table *t, const char *text, const char *src) {
    parse_state ps = {.src = src, .n_bad = 0};
    bool header = false;
    int line = 0;
    const char *p = text;
    while (*p) {
        line++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char buf[256], *f[8], *save = NULL;
        int nf = 0;
        if (len >= sizeof buf) {
            report(&ps, line, "line too long", NULL);
            goto next;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        for (char *s = strtok_r(buf, " \t\r", &save); s && nf < 8; s = strtok_r(NULL, " \t\r", &save)) f[nf++] = s;
        if (nf == 0 || f[0][0] == '#') goto next;
        if (!header) {
            if (nf != 2 || strcmp(f[0], "kite-tune") != 0 || strcmp(f[1], "1") != 0) {
                fprintf(stderr, "kite: %s:%d: not a kite tune table (want a first line 'kite-tune %d'); file ignored\n",
                        src, line, KERN_TUNE_VERSION);
                kern_tune_table_init(t);
                return -1;
            }
            header = true;
        } else if (!strcmp(f[0], "option")) {
            const int o = nf == 3 ? kern_opt_from_name(f[1]) : -1;
            if (nf != 3)
                report(&ps, line, "option: want 'option NAME on|off'", NULL);
            else if (o < 0)
                report(&ps, line, "unknown option (want decode-prefetch, bf16-fma or f16-widen)", f[1]);
            else if (strcmp(f[2], "on") != 0 && strcmp(f[2], "off") != 0)
                report(&ps, line, "option: expected on or off, got", f[2]);
            else
                t->opt[o] = (int8_t)(f[2][1] == 'n');
        } else if (!strcmp(f[0], "level")) {
            const int lv = nf == 2 ? kern_level_from_name(f[1]) : -1;
            if (lv < 0)
                report(&ps, line, "level: expected scalar, avx2, avx512 or avx512vnni, got", nf == 2 ? f[1] : NULL);
            else
                t->level = lv;
        } else {
            parse_entry(t, &ps, line, f, nf);
        }
    next:
        if (!eol) break;
        p = eol + 1;
    }
    if (!header) {
        fprintf(stderr, "kite: %s: empty, not a kite tune table; file ignored\n", src);
        kern_tune_table_init(t);
        return -1;
    }
    if (ps.n_bad > MAX_REPORTED) fprintf(stderr, "kite: %s: %d more malformed lines ignored\n", src, ps.n_bad - MAX_REPORTED);
    return ps.n_bad;
}

/* ---- the run-time lookup ------------------------------------------------------------- */

static const kern_tune_choice g_default = {.regime = KERN_TUNE_DEFAULT, .tile = KERN_TUNE_TILE_DEFAULT,
                                           .threads = KERN_TUNE_THR_AUTO, .tuned = 0};
static _Atomic uint64_t g_counts[2][KERN_TUNE_N_VARIANTS];

const kern_tune_choice *kern_tune_default(void) { return &g_default; }

const kern_tune_choice *kern_tune_pick(const kern_tune_table *t, kern_level level, uint32_t type, int64_t rows,
                                       int64_t k, int64_t n_tok, int n_threads) {
    if (!t || (int)level != t->level) return &g_default;
    const kern_tune_choice *c = kern_tune_table_find(t, kern_tune_key(type, rows, k, n_tok, n_threads));
    return c ? c : &g_default;
}

void kern_tune_count(int id, bool tuned) {
    if (id >= 0 && id < KERN_TUNE_N_VARIANTS) atomic_fetch_add_explicit(&g_counts[tuned][id], 1, memory_order_relaxed);
}

void kern_tune_counts(uint64_t out[2][KERN_TUNE_N_VARIANTS]) {
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < KERN_TUNE_N_VARIANTS; i++)
            out[s][i] = atomic_load_explicit(&g_counts[s][i], memory_order_relaxed);
}
