/*
 * dispatch.c - builds the kernel table of every level once and picks the
 * active one (see dispatch.h).
 *
 * Each level starts as a copy of the level below and overrides the entries
 * it has kernels for, so a type without an ISA kernel silently uses the best
 * lower one.  The x86 kernels are referenced only on x86 builds.
 */
#include "kernels/dispatch.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "core/cpu.h"
#include "kernels/int8_gemm.h"
#include "kernels/ref/ref.h"
#include "kernels/tune.h"
#include "tensor/blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#define KITE_X86 1
#include "kernels/x86_avx2/avx2.h"
#include "kernels/x86_avx2/avxvnni.h"
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/avx512bf16.h"
#include "kernels/x86_avx512/kquant_vnni.h"
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

static const char *const level_names[KERN_LEVEL_COUNT] = {"scalar", "avx2", "avx512", "avx512vnni",
                                                               "avx512bf16"};

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

static void set(kern_ops_table *t, uint32_t type, uint32_t act, kern_vec_dot_fn dot, kern_gemm_fn gemm) {
    t->ops[type] = (kern_type_ops){.act_type = act, .vec_dot = dot, .gemm = gemm};
}

static void build_scalar(kern_ops_table *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < KITE_DTYPE_COUNT; i++) t->ops[i].act_type = KITE_DTYPE_F32; /* generic path */
    set(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_ref, gemm_f32_ref);
    set(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_ref, gemm_f16_f32_ref);
    set(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_ref, gemm_bf16_f32_ref);
    set(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_ref, gemm_q4_0_q8_0_ref);
    set(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_ref, gemm_q8_0_q8_0_ref);
    set(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_ref, gemm_q4_K_q8_K_ref);
    set(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_ref, gemm_q6_K_q8_K_ref);
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_ref;
    t->act_from_f32[KITE_DTYPE_Q8_K] = act_quantize_q8_K_ref;
    /* W8A8 (int8_gemm.h): per-token int8 activations in the weight's own row format */
    set(t, KITE_DTYPE_W8A8, KITE_DTYPE_W8A8, vec_dot_w8a8_ref, gemm_w8a8_ref);
    set(t, KITE_DTYPE_LLM_INT8, KITE_DTYPE_W8A8, vec_dot_w8a8_ref, gemm_w8a8_ref); /* its int8 half; kern_matmul adds the outliers */
    t->act_from_f32[KITE_DTYPE_W8A8] = act_quantize_w8a8;
    t->act_from_f32[KITE_DTYPE_BF16] = act_bf16_from_f32_ref; /* unused below avx512bf16 (bf16 weights take f32) */
}

#ifdef KITE_X86
static void build_avx2(kern_ops_table *t) {
    set(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_avx2, gemm_f32_avx2);
    set(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_avx2, gemm_f16_f32_avx2);
    set(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_avx2, gemm_bf16_f32_avx2);
    set(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_avx2, gemm_q4_0_q8_0_avx2);
    set(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_avx2, gemm_q8_0_q8_0_avx2);
    set(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_avx2, gemm_q4_K_q8_K_avx2);
    set(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_avx2, gemm_q6_K_q8_K_avx2);
    set(t, KITE_DTYPE_W8A8, KITE_DTYPE_W8A8, vec_dot_w8a8_avx2, gemm_w8a8_avx2);
    set(t, KITE_DTYPE_LLM_INT8, KITE_DTYPE_W8A8, vec_dot_w8a8_avx2, gemm_w8a8_avx2); /* its int8 half; kern_matmul adds the outliers */
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_avx2; /* same bytes as the reference */
    if (cpu_features()->avxvnni) { /* variant: VEX vpdpbusd instead of vpmaddubsw + vpmaddwd */
        set(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_avxvnni, gemm_q4_0_q8_0_avxvnni);
        set(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_avxvnni, gemm_q8_0_q8_0_avxvnni);
    }
}

static void build_avx512(kern_ops_table *t) {
    set(t, KITE_DTYPE_F32, KITE_DTYPE_F32, vec_dot_f32_avx512, gemm_f32_avx512);
    set(t, KITE_DTYPE_F16, KITE_DTYPE_F32, vec_dot_f16_f32_avx512, gemm_f16_f32_avx512);
    set(t, KITE_DTYPE_BF16, KITE_DTYPE_F32, vec_dot_bf16_f32_avx512, gemm_bf16_f32_avx512);
    t->act_from_f32[KITE_DTYPE_Q8_0] = act_quantize_q8_0_avx512; /* same bytes as the reference */
}

static void build_vnni(kern_ops_table *t) {
    set(t, KITE_DTYPE_Q4_0, KITE_DTYPE_Q8_0, vec_dot_q4_0_q8_0_vnni, gemm_q4_0_q8_0_vnni);
    set(t, KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, vec_dot_q8_0_q8_0_vnni, gemm_q8_0_q8_0_vnni);
    set(t, KITE_DTYPE_Q4_K, KITE_DTYPE_Q8_K, vec_dot_q4_K_q8_K_vnni, gemm_q4_K_q8_K_vnni);
    set(t, KITE_DTYPE_Q6_K, KITE_DTYPE_Q8_K, vec_dot_q6_K_q8_K_vnni, gemm_q6_K_q8_K_vnni);
    set(t, KITE_DTYPE_W8A8, KITE_DTYPE_W8A8, vec_dot_w8a8_vnni, gemm_w8a8_vnni);
    set(t, KITE_DTYPE_LLM_INT8, KITE_DTYPE_W8A8, vec_dot_w8a8_vnni, gemm_w8a8_vnni); /* its int8 half; kern_matmul adds the outliers */
}

/* bf16 weights with bf16 activations (vdpbf16ps); f32/f16 keep f32 activations */
static void build_bf16(kern_ops_table *t) {
    set(t, KITE_DTYPE_BF16, KITE_DTYPE_BF16, vec_dot_bf16_bf16_avx512bf16, gemm_bf16_bf16_avx512bf16);
    t->act_from_f32[KITE_DTYPE_BF16] = act_bf16_from_f32_avx512bf16; /* same bytes as the reference */
}
#endif

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

/* The level the cap gives on this CPU. */
static kern_level capped(int cap) { return cap >= 0 && (kern_level)cap < g_max ? (kern_level)cap : g_max; }

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

static void init(void) {
    g_max = detect_max();
    for (int l = 0; l < KERN_LEVEL_COUNT; l++) {
        kern_ops_table *t = &g_tables[l];
        if (l == 0) build_scalar(t);
        else *t = g_tables[l - 1];
#ifdef KITE_X86
        if (l == KERN_LEVEL_AVX2) build_avx2(t);
        if (l == KERN_LEVEL_AVX512) build_avx512(t);
        if (l == KERN_LEVEL_AVX512VNNI) build_vnni(t);
        if (l == KERN_LEVEL_AVX512BF16) build_bf16(t);
#endif
        t->level = (kern_level)l;
        t->name = level_names[l];
    }
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
    if ((unsigned)level >= KERN_LEVEL_COUNT || level > g_max) return NULL;
    return &g_tables[level];
}

kern_level kern_level_max(void) {
    pthread_once(&g_once, init);
    return g_max;
}
