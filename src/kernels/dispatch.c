/*
 * dispatch.c - the kernel registry: builds the table of every level once
 * from the ISA folders' registration functions and picks the active one
 * (see dispatch.h); the kernel options; the lookups tools and tests use.
 *
 * Each level starts as a copy of the level below and its registration
 * overrides the entries it has kernels for, so a type without an ISA kernel
 * uses the best lower one.  The x86 registrations are called only on x86
 * builds, the AArch64 ones (arm_neon/) only on AArch64 builds.
 */
#include "kernels/dispatch.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "core/cpu.h"
#include "kernels/attention_simd.h"
#include "kernels/gemm_tiled.h"
#include "kernels/gemm_x16.h"
#include "kernels/gemm_x32.h"
#include "kernels/int8_gemm.h"
#include "kernels/ops_simd.h"
#include "kernels/tune.h"
#include "tensor/blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#define KITE_X86 1
#endif
#if defined(__aarch64__)
#define KITE_ARM64 1
#endif

static kern_ops_table g_tables[KERN_LEVEL_COUNT];
static kern_level g_max = KERN_LEVEL_SCALAR;    /* highest level the CPU supports */
static kern_level g_active = KERN_LEVEL_SCALAR; /* g_max capped by g_cfg.level_cap */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;        /* builds the tables */
static pthread_once_t g_active_once = PTHREAD_ONCE_INIT; /* fixes g_active (first kern_table()) */
static bool g_active_fixed;
static pthread_once_t g_opt_once = PTHREAD_ONCE_INIT;
static bool g_opt[KERN_OPT_COUNT];             /* kern_opt_on() */
static kern_opt_source g_opt_src[KERN_OPT_COUNT];
/* kern_config_default() (dispatch.h), as an initializer */
#define CONFIG_DEFAULT                                                                                  \
    {.level_cap = -1, .opt = {-1, -1, -1}, .tune = NULL, .int8_threshold = LLM_INT8_THRESHOLD_DEFAULT, \
     .work_sharing = true}
_Static_assert(KERN_OPT_COUNT == 3, "CONFIG_DEFAULT's .opt has one -1 per option");
static kern_config g_cfg = CONFIG_DEFAULT;

static const char *const level_names[KERN_LEVEL_COUNT] = {"scalar", "avx2",  "avx512", "avx512vnni",
                                                               "avx512bf16", "neon", "dotprod"};
/* The chains (dispatch.h): x86 scalar < avx2 < ... < avx512bf16; AArch64 scalar < neon < dotprod. */
static const kern_level level_parent[KERN_LEVEL_COUNT] = {
    KERN_LEVEL_SCALAR,     KERN_LEVEL_SCALAR,     KERN_LEVEL_AVX2, KERN_LEVEL_AVX512,
    KERN_LEVEL_AVX512VNNI, KERN_LEVEL_SCALAR,     KERN_LEVEL_NEON,
};

kern_level kern_level_parent(kern_level level) {
    return (unsigned)level < KERN_LEVEL_COUNT ? level_parent[level] : KERN_LEVEL_SCALAR;
}

const char *kern_level_name(kern_level level) {
    return (unsigned)level < KERN_LEVEL_COUNT ? level_names[level] : "?";
}

int kern_level_from_name(const char *name) {
    for (int l = 0; l < KERN_LEVEL_COUNT; l++)
        if (name && strcasecmp(name, level_names[l]) == 0) return l;
    return -1;
}

size_t kern_act_row_bytes(uint32_t act_type, int64_t n) {
    if (act_type == KITE_DTYPE_F32) return (size_t)n * sizeof(float);
    return dtype_row_size(act_type, n);
}

static kern_level detect_max(void) {
    const cpu_info *c = cpu_features();
    (void)c;
    kern_level l = KERN_LEVEL_SCALAR;
#ifdef KITE_X86
    if (c->avx2 && c->fma && c->f16c) l = KERN_LEVEL_AVX2;
    if (l == KERN_LEVEL_AVX2 && c->avx512f && c->avx512bw && c->avx512dq && c->avx512vl) l = KERN_LEVEL_AVX512;
    if (l == KERN_LEVEL_AVX512 && c->avx512vnni) l = KERN_LEVEL_AVX512VNNI;
    if (l == KERN_LEVEL_AVX512VNNI && c->avx512bf16) l = KERN_LEVEL_AVX512BF16;
#endif
#ifdef KITE_ARM64
    if (c->neon) l = KERN_LEVEL_NEON;
    if (l == KERN_LEVEL_NEON && c->dotprod) l = KERN_LEVEL_DOTPROD;
#endif
    return l;
}

/* ---- kernel options (dispatch.h) ---- */

static const char *const opt_names[KERN_OPT_COUNT] = {"decode-prefetch", "bf16-fma", "f16-widen"};
static const char *const src_names[] = {"cpu", "tune", "env", "set"};

const char *kern_opt_name(kern_opt o) { return (unsigned)o < KERN_OPT_COUNT ? opt_names[o] : "?"; }
const char *kern_opt_source_name(kern_opt_source s) { return (unsigned)s <= KERN_OPT_FROM_SET ? src_names[s] : "?"; }

int kern_opt_from_name(const char *name) {
    for (int o = 0; o < KERN_OPT_COUNT; o++)
        if (name && !strcmp(name, opt_names[o])) return o;
    return -1;
}

bool kern_opt_cpu_default(kern_opt o) {
    (void)o; /* every option is an Intel choice today (dispatch.h) */
    return cpu_features()->intel;
}

/* The level the cap gives on this CPU: down g_max's chain to the first level <= cap. */
static kern_level capped(int cap) {
    kern_level l = g_max;
    if (cap >= 0)
        while (l != KERN_LEVEL_SCALAR && (int)l > cap) l = level_parent[l];
    return l;
}

static void init(void);

/* The caller's setting, else the tune table's (when of the level that runs),
 * else the vendor's. */
static void init_opts(void) {
    pthread_once(&g_once, init); /* g_max */
    const kern_tune_table *t = g_cfg.tune;
    const bool tuned_here = t && t->level == (int)capped(g_cfg.level_cap);
    for (int o = 0; o < KERN_OPT_COUNT; o++) {
        g_opt[o] = kern_opt_cpu_default((kern_opt)o);
        g_opt_src[o] = KERN_OPT_FROM_CPU;
        if (tuned_here && t->opt[o] >= 0) {
            g_opt[o] = t->opt[o] == 1;
            g_opt_src[o] = KERN_OPT_FROM_TUNE;
        }
        if (g_cfg.opt[o] >= 0) {
            g_opt[o] = g_cfg.opt[o] == 1;
            g_opt_src[o] = KERN_OPT_FROM_ENV;
        }
    }
}

kern_config kern_config_default(void) { return (kern_config)CONFIG_DEFAULT; }

bool kern_configure(const kern_config *cfg) {
    pthread_once(&g_once, init);
    if (g_active_fixed && capped(cfg->level_cap) != g_active) return false;
    pthread_once(&g_opt_once, init_opts); /* spend the once: the defaults' options are replaced below */
    g_cfg = *cfg;
    init_opts();
    kern_llm_int8_set_threshold(cfg->int8_threshold);
    return true;
}

const kern_config *kern_config_get(void) { return &g_cfg; }

bool kern_opt_on(kern_opt o) {
    pthread_once(&g_opt_once, init_opts);
    return (unsigned)o < KERN_OPT_COUNT && g_opt[o];
}

void kern_opt_set(kern_opt o, bool on) {
    pthread_once(&g_opt_once, init_opts);
    if ((unsigned)o >= KERN_OPT_COUNT) return;
    g_opt[o] = on;
    g_opt_src[o] = KERN_OPT_FROM_SET;
}

kern_opt_source kern_opt_source_of(kern_opt o) {
    pthread_once(&g_opt_once, init_opts);
    return (unsigned)o < KERN_OPT_COUNT ? g_opt_src[o] : KERN_OPT_FROM_CPU;
}

bool kern_decode_prefetch(void) { return kern_opt_on(KERN_OPT_DECODE_PREFETCH); }
void kern_decode_prefetch_set(bool on) { kern_opt_set(KERN_OPT_DECODE_PREFETCH, on); }

/* Registration of each level over the one below (dispatch.h). */
typedef void (*kern_register_fn)(kern_ops_table *t);
static const kern_register_fn level_register[KERN_LEVEL_COUNT] = {
    kern_register_scalar,
#ifdef KITE_X86
    [KERN_LEVEL_AVX2] = kern_register_avx2, [KERN_LEVEL_AVX512] = kern_register_avx512,
    [KERN_LEVEL_AVX512VNNI] = kern_register_avx512vnni, [KERN_LEVEL_AVX512BF16] = kern_register_avx512bf16,
#endif
#ifdef KITE_ARM64
    [KERN_LEVEL_NEON] = kern_register_neon, [KERN_LEVEL_DOTPROD] = kern_register_dotprod,
#endif
};

void kern_tables_build(kern_ops_table tables[KERN_LEVEL_COUNT]) {
    for (int l = 0; l < KERN_LEVEL_COUNT; l++) { /* a parent always precedes its child */
        kern_ops_table *t = &tables[l];
        if (l == 0) memset(t, 0, sizeof *t);
        else *t = tables[level_parent[l]];
        if (level_register[l]) level_register[l](t);
        t->level = (kern_level)l;
        t->name = level_names[l];
    }
}

static void init(void) {
    g_max = detect_max();
    kern_tables_build(g_tables);
    g_active = g_max;
}

/* The first kern_table() fixes the active level: the cap configured by then. */
static void init_active(void) {
    pthread_once(&g_once, init);
    g_active = capped(g_cfg.level_cap);
    g_active_fixed = true;
}

const kern_ops_table *kern_table(void) {
    pthread_once(&g_active_once, init_active);
    return &g_tables[g_active];
}

const kern_ops_table *kern_table_for_level(kern_level level) {
    pthread_once(&g_once, init);
    if (!kern_level_supported(level)) return NULL;
    return &g_tables[level];
}

kern_level kern_level_max(void) {
    pthread_once(&g_once, init);
    return g_max;
}

bool kern_level_supported(kern_level level) {
    pthread_once(&g_once, init);
    if ((unsigned)level >= KERN_LEVEL_COUNT) return false;
    for (kern_level l = g_max;; l = level_parent[l]) {
        if (l == level) return true;
        if (l == KERN_LEVEL_SCALAR) return false;
    }
}

kern_level kern_level_capped(int cap) {
    pthread_once(&g_once, init);
    return capped(cap);
}

const kern_ops_table *kern_table_unchecked(kern_level level) {
    pthread_once(&g_once, init);
    return (unsigned)level < KERN_LEVEL_COUNT ? &g_tables[level] : NULL;
}

/* ---- lookups under the names the selectors had (tools and tests) ---- */

kern_gemm_tiled_fn kern_gemm_tiled_get(kern_level level, uint32_t type) {
    const kern_ops_table *t = kern_table_unchecked(level);
    return t && type < KITE_DTYPE_COUNT ? t->ops[type].tiled : NULL;
}

kern_gemm_x16_fn kern_gemm_x16_get(kern_level level, uint32_t type) {
    const kern_ops_table *t = kern_table_unchecked(level);
    return t && type < KITE_DTYPE_COUNT ? t->ops[type].x16 : NULL;
}

bool kern_x16_pays(kern_level level) {
    const kern_ops_table *t = kern_table_unchecked(level);
    for (uint32_t ty = 0; t && ty < KITE_DTYPE_COUNT; ty++)
        if (t->ops[ty].x16 && t->ops[ty].repack) return true;
    return false;
}

bool kern_x16_pays_type(kern_level level, uint32_t type) {
    const kern_ops_table *t = kern_table_unchecked(level);
    return t && type < KITE_DTYPE_COUNT && t->ops[type].x16 && t->ops[type].repack;
}

bool kern_x32_pays(kern_level level, uint32_t type, int64_t ne0, int64_t nr) {
    const kern_ops_table *t = kern_table_unchecked(level);
    if (!t || type >= KITE_DTYPE_COUNT || !t->ops[type].x32 || !t->ops[type].repack || nr < X32_ROWS) return false;
    return type != KITE_DTYPE_BF16 || ne0 % 2 == 0; /* bf16 pairs need an even K */
}

bool kern_x32_bf16_wide(kern_level level) {
    const kern_ops_table *t = kern_table_unchecked(level);
    if (!t) return false;
    const kern_type_ops *op = &t->ops[KITE_DTYPE_BF16];
    return (op->x32_bf16_fma && kern_opt_on(KERN_OPT_BF16_FMA)) || op->x32_wide;
}

kern_gemm_x32_fn kern_gemm_x32_get(kern_level level, uint32_t type) {
    const kern_ops_table *t = kern_table_unchecked(level);
    if (!t || type >= KITE_DTYPE_COUNT) return NULL;
    const kern_type_ops *op = &t->ops[type];
    return op->x32_bf16_fma && kern_opt_on(KERN_OPT_BF16_FMA) ? op->x32_bf16_fma : op->x32;
}

kern_x32_f16_widened_fn kern_x32_f16_widen(kern_level level) {
    const kern_ops_table *t = kern_table_unchecked(level);
    const kern_type_ops *op = t ? &t->ops[KITE_DTYPE_F16] : NULL;
    return op && op->x32_f16_widen && kern_opt_on(KERN_OPT_F16_WIDEN) ? op->x32_f16_widen : NULL;
}

const kern_elt_ops *kern_elt_ops_for_level(kern_level level) {
    const kern_ops_table *t = kern_table_for_level(level);
    return t ? t->elt : NULL;
}

const attn_ops *attn_ops_for_level(kern_level level) {
    const kern_ops_table *t = kern_table_for_level(level);
    return t ? t->attn : NULL;
}

const attn_ops *attn_ops_active(void) { return kern_table()->attn; }
