/*
 * dispatch.h - the kernel registry: one table per CPU level holding every
 * kernel that is chosen by level and weight type, built once at run time;
 * the active table is the best level the CPU supports.
 *
 * DESIGN
 *   Levels, each a superset of the one before:
 *     scalar      portable C (src/kernels/ref/): the specification
 *     avx2        AVX2 + FMA + F16C (src/kernels/x86_avx2/)
 *                 (with AVX-VNNI: q4_0/q8_0 use VEX vpdpbusd kernels, avxvnni.h;
 *                 same level and name)
 *     avx512      + AVX-512 F/BW/DQ/VL (src/kernels/x86_avx512/; integer kernels from avx2)
 *     avx512vnni  + AVX512_VNNI: vpdpbusd integer kernels
 *     avx512bf16  + AVX512_BF16: bf16 weights with bf16 activations (vdpbf16ps)
 *   and on AArch64 a second chain over scalar:
 *     neon        Armv8-A Advanced SIMD, the AArch64 baseline (src/kernels/arm_neon/)
 *     dotprod     + sdot/udot (Armv8.2 dot product, HWCAP_ASIMDDP): integer kernels
 *   Each level has a parent (kern_level_parent: the level below it in its
 *   chain; neon's is scalar); "superset" and the level cap follow the chain.
 *   Only the x86_* and arm_* folders are compiled with ISA flags (except their
 *   register.c); everything else, this file's users included, runs on any
 *   x86-64 or AArch64 CPU (and any other CPU, where only the scalar level
 *   exists).  The x86 levels' tables on AArch64 (and the ARM ones on x86)
 *   are built, as copies of scalar, but never supported.
 *
 *   The registry (kern_ops_table, below) is built by kern_tables_build:
 *   level 0 from kern_register_scalar, each higher level as a copy of the
 *   one below overridden by its ISA folder's registration function, so a
 *   type without a kernel at some level keeps the best lower one.  One table
 *   holds, per weight type (kern_type_ops): the activation format, vec_dot
 *   and flat GEMM, the tiled prefill GEMM, the x16/x32 repacked-layout
 *   kernels, their option variants and whether repacking pays; per level:
 *   the activation converters, the element-wise ops (ops_simd.h) and the
 *   attention loops (attention_simd.h).  Callers read it once per call
 *   (kern_matmul, kern_attention) or cache a pointer (the element-wise ops);
 *   no inner loop looks anything up.
 *
 *   kern_table() is built once (pthread_once) for the highest level the CPU
 *   and OS support (core/cpu.h), capped by kern_config.level_cap (a cap
 *   never raises the level; the kite CLI sets it from KITE_CPU_LEVEL).
 *   kern_table_for_level() gives any supported level's table, for tests;
 *   kern_table_unchecked() any level's, supported or not (what it would pick).
 *
 *   Configuration is passed, not discovered: nothing under src/kernels reads
 *   the environment or a file.  The caller fills a kern_config (level cap,
 *   kernel options, the tune table, the LLM.int8() threshold, work sharing)
 *   and hands it to kern_configure() before the first kernel runs; without
 *   that call every field has its default (kern_config_default()).
 *
 *   Per weight type (kern_type_ops):
 *     act_type  how kern_matmul converts the float activations first:
 *               F32 (used in place), Q8_0 or Q8_K (quantized once per call),
 *               BF16 (rounded to nearest even once per call; level
 *               avx512bf16, bf16 weights only).
 *     vec_dot   one weight row (storage type) with one activation row.
 *     gemm      "flat GEMM": nr weight rows with nt <= KERN_GEMM_MAX_TOK
 *               activation rows; each weight row is loaded from memory once
 *               for all nt rows (the decode and small-batch regime).  For
 *               every (r, t) it returns exactly vec_dot's value, so results
 *               do not depend on how a batch is grouped.
 *   A type whose vec_dot is NULL takes the generic path in kern_matmul: the
 *   weight row is converted with the dtype traits' to_float and dotted with
 *   the float activations by ops[F32].vec_dot.  Any type with a to_float
 *   therefore works.
 *
 *   Pairings (act_type): f32/f16/bf16 -> f32 (f16/bf16 rows are widened
 *   exactly, so the only rounding is the float dot's), except bf16 -> bf16
 *   at avx512bf16 (activations rounded to 8 significant bits); q4_0, q5_0,
 *   q8_0, iq4_nl -> q8_0; q4_K, q5_K, q6_K, iq4_xs -> q8_K (as in ggml).
 *   See docs/kernels.md for accuracy.
 *
 *   Options (kern_opt, below) never change the table: where a kernel depends
 *   on one, the table holds both variants (x32 and x32_bf16_fma,
 *   x32_f16_widen) and kern_matmul reads the option once per call.
 *
 * HOW TO ADD A KERNEL
 *   1. Write it in one file of the level's folder (src/kernels/ref/ for a
 *      scalar reference, x86_avx2/ or x86_avx512/ for SIMD), with the
 *      signature of its slot (kern_vec_dot_fn, kern_gemm_fn via
 *      KERN_DEFINE_GEMM or KERN_GEMM_DRIVER of gemm_driver.h,
 *      kern_gemm_tiled_fn, kern_gemm_x16_fn, ...), and declare it in the
 *      folder's header.
 *   2. Add one line to the folder's register.c, in the function of its
 *      level: kern_set_dot(t, TYPE, ACT, vec_dot, gemm) or
 *      t->ops[TYPE].tiled = ...;  a variant of a CPU sub-feature goes under
 *      its cpu_features() test there (as AVX-VNNI in x86_avx2/register.c).
 *   tests/unit/test_registry.c then compares it with its scalar twin at
 *   every level this CPU runs; if it fills an entry that was a documented
 *   fallback, remove that fallback from the test's expected_null().  A new
 *   weight type also needs its scalar entries (ref/register.c) and its
 *   dtype traits; a new ISA level a kern_level, a detect_max() rule and a
 *   level_register[] entry in dispatch.c.
 *
 * THREAD SAFETY
 *   Tables are immutable after the first call; kernels are reentrant.
 */
#ifndef KITE_KERNELS_DISPATCH_H
#define KITE_KERNELS_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

typedef enum kern_level {
    KERN_LEVEL_SCALAR = 0,
    KERN_LEVEL_AVX2 = 1,
    KERN_LEVEL_AVX512 = 2,
    KERN_LEVEL_AVX512VNNI = 3,
    KERN_LEVEL_AVX512BF16 = 4,
    KERN_LEVEL_NEON = 5,    /* AArch64 chain: parent scalar */
    KERN_LEVEL_DOTPROD = 6, /* parent neon */
    KERN_LEVEL_COUNT
} kern_level;

#define KERN_GEMM_MAX_TOK 16 /* activation rows per flat-GEMM call */

/* *out = sum_i w[i] * a[i] over n elements (n a multiple of both formats'
 * block sizes); w is a weight row in its storage type, a an activation row
 * in the type's act_type.  Pointers need no alignment (except a q8_K row,
 * which holds floats: 4 bytes). */
typedef void (*kern_vec_dot_fn)(int64_t n, float *out, const void *w, const void *a);

/* y[t*ldy + r] = vec_dot(n, w + r*w_stride, a + t*a_stride) for r < nr,
 * t < nt (1 <= nt <= KERN_GEMM_MAX_TOK).  Strides in bytes. */
typedef void (*kern_gemm_fn)(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                             const void *a, size_t a_stride, int nt);

/* Converts n floats to an activation row of its format (n a multiple of
 * the block size). */
typedef void (*kern_act_fn)(const float *x, void *dst, int64_t n);

/* The prefill GEMM (gemm_tiled.h): kern_gemm_fn's contract with nt >= 1
 * unbounded and nr >= 1 any count. */
typedef void (*kern_gemm_tiled_fn)(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr,
                                   const void *a, size_t a_stride, int nt);
/* The 16-row interleaved layout's kernel (gemm_x16.h gives the contract). */
typedef void (*kern_gemm_x16_fn)(int64_t nb, float *y, int64_t ldy, const void *grp, const void *a,
                                 size_t a_stride, const int32_t *corr, const float *da, int64_t c_stride, int nt,
                                 int acc);
/* The 32-row interleaved f16/bf16 layout's kernel and its widened f16
 * prefill (gemm_x32.h). */
typedef void (*kern_gemm_x32_fn)(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y,
                                 int64_t ldy);
typedef void (*kern_x32_f16_widened_fn)(int64_t K, const uint16_t *w, int64_t ng, const void *xp, size_t xp_row,
                                        int64_t n_tok, float *y, int64_t ldy, float *buf);

/* Everything kern_matmul selects by weight type.  NULL means "none at this
 * level"; what runs instead is said per field. */
typedef struct kern_type_ops {
    uint32_t act_type;       /* enum kite_dtype of the activation row */
    kern_vec_dot_fn vec_dot; /* NULL: generic to_float + f32 path */
    kern_gemm_fn gemm;       /* NULL iff vec_dot is NULL */
    kern_gemm_tiled_fn tiled; /* prefill GEMM for plain rows (gemm_tiled.h); NULL: the flat gemm */
    kern_gemm_x16_fn x16;    /* WEIGHT_LAYOUT_X16 groups (gemm_x16.h); NULL: type without the layout */
    kern_gemm_x32_fn x32;    /* WEIGHT_LAYOUT_X32 groups (gemm_x32.h); NULL: type without the layout */
    bool x32_wide;           /* x32 takes bf16 pairs widened to floats (kern_x32_pack_act_wide) */
    /* Option-dependent variants (kern_opt below), resolved by kern_matmul once
     * per call, where the option is read: */
    kern_gemm_x32_fn x32_bf16_fma; /* KERN_OPT_BF16_FMA on: replaces x32, taking widened pairs */
    kern_x32_f16_widened_fn x32_f16_widen; /* KERN_OPT_F16_WIDEN on: f16 prefill over widened blocks */
    bool repack;             /* load-time repacking into the type's layout (x16 or x32) pays at this level */
} kern_type_ops;

struct kern_elt_ops; /* ops_simd.h */
struct kern_la_ops;  /* la_gemm.h */
struct attn_ops;     /* attention_simd.h */

/* The registry: one table per level holds every kernel chosen by level and
 * type (see HOW TO ADD A KERNEL below). */
typedef struct kern_ops_table {
    kern_level level;
    const char *name;                       /* "scalar", "avx2", "avx512", "avx512vnni", "avx512bf16", "neon",
                                               "dotprod" */
    kern_type_ops ops[KITE_DTYPE_COUNT];    /* by weight type */
    kern_act_fn act_from_f32[KITE_DTYPE_COUNT]; /* by act_type (Q8_0, Q8_K, BF16, W8A8); NULL for F32 */
    const struct kern_elt_ops *elt;         /* element-wise ops: rmsnorm, softmax, swiglu, ... (ops_simd.h) */
    const struct attn_ops *attn;            /* attention inner loops (attention_simd.h) */
    const struct kern_la_ops *la;           /* the quantizer's linear-algebra tiles (la_gemm.h) */
} kern_ops_table;

/* Registration: each fills its level's entries over a copy of the level
 * below (kern_register_scalar fills the base).  Called once per level by the
 * table builder; they take addresses only and run on any CPU (the
 * register.c files get no ISA flags), so every level's table exists even
 * where the CPU cannot run it. */
void kern_register_scalar(kern_ops_table *t);     /* ref/register.c */
void kern_register_avx2(kern_ops_table *t);       /* x86_avx2/register.c (with AVX-VNNI variants) */
void kern_register_avx512(kern_ops_table *t);     /* x86_avx512/register.c */
void kern_register_avx512vnni(kern_ops_table *t); /* x86_avx512/register.c */
void kern_register_avx512bf16(kern_ops_table *t); /* x86_avx512/register.c */
void kern_register_neon(kern_ops_table *t);       /* arm_neon/register.c */
void kern_register_dotprod(kern_ops_table *t);    /* arm_neon/register.c */

/* One registration line: a type's activation format, dot and flat GEMM. */
static inline void kern_set_dot(kern_ops_table *t, uint32_t type, uint32_t act_type, kern_vec_dot_fn vec_dot,
                                kern_gemm_fn gemm) {
    t->ops[type].act_type = act_type;
    t->ops[type].vec_dot = vec_dot;
    t->ops[type].gemm = gemm;
}

/* Builds the table of every level into tables[KERN_LEVEL_COUNT] (each level
 * a copy of the one below, then its registration).  Pure: the same result on
 * every call and CPU except the AVX-VNNI variant of level avx2, which asks
 * core/cpu.h.  kern_table() calls it once. */
void kern_tables_build(kern_ops_table tables[KERN_LEVEL_COUNT]);
/* A level's table whether or not this CPU can run it (tests and tools that
 * ask what a level would select; never call its kernels above
 * kern_level_max()). */
const kern_ops_table *kern_table_unchecked(kern_level level);

/* The active table (capped by kern_config.level_cap), built on first use. */
const kern_ops_table *kern_table(void);
/* The table of a level, or NULL if this CPU/OS/build cannot run it
 * (kern_level_supported). */
const kern_ops_table *kern_table_for_level(kern_level level);
/* Highest level this CPU supports (ignores the level cap). */
kern_level kern_level_max(void);
/* The level below in its chain (dispatch.h DESIGN): scalar's is scalar. */
kern_level kern_level_parent(kern_level level);
/* Whether this CPU runs the level: it lies on the chain below kern_level_max(). */
bool kern_level_supported(kern_level level);
/* The level a cap gives on this CPU: the highest supported level <= cap
 * (cap < 0: kern_level_max()).  What kern_table() runs under that cap. */
kern_level kern_level_capped(int cap);
const char *kern_level_name(kern_level level);
/* Level by name ("scalar", ...), or -1. */
int kern_level_from_name(const char *name);

/* kern_matmul (kernels.h) with an explicit table instead of kern_table():
 * tests run the matmul at every level. */
struct threadpool;
struct weight;
void kern_matmul_with(const kern_ops_table *kt, struct threadpool *tp, const struct weight *w, const float *x,
                      int64_t n_tok, float *y, int64_t ldy, void *scratch);

/* kern_matmul_fused (kernels.h) with an explicit table. */
struct kern_mm_item;
void kern_matmul_fused_with(const kern_ops_table *kt, struct threadpool *tp, const struct kern_mm_item *items,
                            int n_items, const float *x, int64_t n_tok, void *scratch,
                            void (*epilogue)(void *arg, int64_t r0, int64_t r1), void *epilogue_arg);

/* ---- kernel options: bit-identical choices that depend on the machine ----
 *
 *   KERN_OPT_DECODE_PREFETCH  the decode tiles (one or two tokens) of the
 *       repacked layouts (gemm_x16.h q4_0/q8_0 and k-quants, gemm_x32.h)
 *       prefetch their weight stream in software;
 *   KERN_OPT_BF16_FMA  x32 bf16 at level avx512bf16 runs FP32 FMAs on the
 *       pairs split into floats instead of vdpbf16ps (gemm_x32.h; below
 *       that level the FMA kernel is the only one);
 *   KERN_OPT_F16_WIDEN  x32 f16 prefill widens blocks of weights to floats
 *       once and runs FP32 FMAs over them (gemm_x32.h).
 *   None changes a result.  Each is decided by kern_configure (or on first
 *   use, from the defaults): kern_config.opt (the kite CLI sets it from
 *   KITE_DECODE_PREFETCH, KITE_BF16_FMA, KITE_F16_WIDEN = 0|1), else the
 *   configured tune table's "option" line when the table is of the active
 *   level (`kite tune` times both settings on a whole model; kernels/tune.h),
 *   else the CPU vendor: on for Intel, off for the others.
 *   WHY the vendor as the default: on an Intel Xeon (family 6 model 207)
 *   prefetch made q4_0 decode 1.4x faster and f16/bf16 1.1-1.2x, and the
 *   FMA kernels prefilled bf16 1.6x and f16 1.1x faster, while on AMD Zen 5
 *   the same prefetch slowed those kernels by 5-15 % and vdpbf16ps ran the
 *   bf16 tile at twice the f16 tile's rate (docs/notes/kernels-history.md, "Decode
 *   prefetch by CPU", "bf16 on Intel"). */
typedef enum kern_opt {
    KERN_OPT_DECODE_PREFETCH = 0,
    KERN_OPT_BF16_FMA = 1,
    KERN_OPT_F16_WIDEN = 2,
    KERN_OPT_COUNT
} kern_opt;

/* Where an option's value came from. */
typedef enum kern_opt_source {
    KERN_OPT_FROM_CPU = 0,  /* the vendor default */
    KERN_OPT_FROM_TUNE = 1, /* the tune table */
    KERN_OPT_FROM_ENV = 2,  /* kern_config.opt: the caller's setting (the CLI's environment variable) */
    KERN_OPT_FROM_SET = 3   /* kern_opt_set */
} kern_opt_source;

bool kern_opt_on(kern_opt o);
/* Overrides an option (tests and `kite tune` run both settings; never while
 * a matmul runs). */
void kern_opt_set(kern_opt o, bool on);
kern_opt_source kern_opt_source_of(kern_opt o);
const char *kern_opt_name(kern_opt o);              /* "decode-prefetch", "bf16-fma", "f16-widen" */
const char *kern_opt_source_name(kern_opt_source s); /* "cpu", "tune", "env", "set" */
int kern_opt_from_name(const char *name);           /* the option, or -1 */
/* The vendor default (what applies without environment or table). */
bool kern_opt_cpu_default(kern_opt o);

/* Shorthands for KERN_OPT_DECODE_PREFETCH (the kernels ask once per call). */
bool kern_decode_prefetch(void);
void kern_decode_prefetch_set(bool on);

/* ---- configuration ---------------------------------------------------------
 *
 * Everything about the kernels that the caller, not the machine, decides.
 * Defaults (kern_config_default) are the behaviour of a process that sets
 * nothing: no level cap, the vendor's option defaults, no tune table
 * (built-in matmul variants), threshold LLM_INT8_THRESHOLD_DEFAULT, work
 * sharing on.  The kite CLI fills one from its environment and cache files
 * (tools/config/config.h) and calls kern_configure once at start-up. */
struct kern_tune_table;
typedef struct kern_config {
    int level_cap;                      /* highest kern_level to run; < 0: no cap (a cap never raises the level) */
    int8_t opt[KERN_OPT_COUNT];         /* per kern_opt: 1 on, 0 off, -1 unset (tune table, else vendor) */
    const struct kern_tune_table *tune; /* matmul variants and option lines (tune.h), or NULL: built-in
                                           defaults.  Borrowed: must stay valid and unchanged until the
                                           next kern_configure; applies only where its level runs */
    float int8_threshold;               /* LLM.int8() outlier threshold (int8_gemm.h), >= 0 */
    bool work_sharing;                  /* matmul threads steal each other's rows (matmul.c); false:
                                           the static split, for A/B measurements */
} kern_config;

kern_config kern_config_default(void);

/* Makes *cfg the configuration.  Call it before the first kernel runs, from
 * one thread (not while any matmul runs).  The level cap is fixed by the
 * first kern_table() call (other tables and the repacked weights follow the
 * active level): after that, a cfg whose cap would change the active level
 * is refused.  Everything else (options, tune table, threshold, sharing) is
 * replaced, and kern_opt_set overrides are dropped.  Returns true, or false
 * with nothing changed. */
bool kern_configure(const kern_config *cfg);

/* The configuration in force (never NULL; defaults before kern_configure). */
const kern_config *kern_config_get(void);

/* Bytes of an activation row of n elements in act_type (f32: 4n). */
size_t kern_act_row_bytes(uint32_t act_type, int64_t n);

#endif
