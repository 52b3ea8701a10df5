/*
 * gemm_x32_avx512.c - the 32-row interleaved f16 (avx512) and bf16
 * (avx512bf16) kernels (layout and arithmetic in gemm_x32.h; equal bit for
 * bit to ref/gemm_x32_ref.c).
 *
 * DESIGN
 *   A tile is G groups x NT tokens, 2 * G * NT accumulators of 16 rows each.
 *   Per step (one element for f16, a pair for bf16): 2 * G loads (f16: 32
 *   bytes, vcvtph2ps of 16 halves; bf16: 64 bytes, 16 pairs), NT broadcasts
 *   of the token's 4-byte unit, 2 * G * NT FMAs (vfmadd231ps / vdpbf16ps).
 *   Each accumulator is one output chain, so nothing is reduced across lanes
 *   and the stores are the outputs.  G grows as NT shrinks so that at least
 *   8 chains cover the FMA latency (4 cycles, 2 per cycle): one token runs 4
 *   groups side by side (decode: 4 forward streams of whole lines), 2-5
 *   tokens 2 groups, 6-12 tokens one group (prefill: 12 tokens, 24
 *   accumulators; the caller keeps a block of groups in L2 for all token
 *   groups).  G and NT are compile-time constants per instantiation so the
 *   accumulators stay in registers.
 *   Prefetch: the one- and two-token tiles prefetch each group's stream
 *   X32_DECODE_PF bytes ahead, once per 64 bytes, where
 *   kern_decode_prefetch() (dispatch.h) is on.  On AMD Zen 5 the f16
 *   prototype streamed at 59-65 GB/s on two threads without it
 *   (bench/proto/outer_f16_decode.c) and 1-4 KiB of prefetch slowed f16 and
 *   bf16 decode by up to 13 %; on an Intel Xeon it made whole-model f16
 *   decode 1.17x and bf16 1.12x faster (docs/notes/kernels-history.md, "Decode prefetch
 *   by CPU").
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/gemm_x32.h"

/* bytes ahead in each group's stream into L1 (1024-4096 were alike), and 4 times that into L2
 * (bf16 decode 1.10x, f16 1.04x on top of the L1 prefetch alone) */
#define X32_DECODE_PF 2048

/* The packed units are 4-byte copies of floats (f16) or bf16 pairs (bf16): read by memcpy. */
static inline float unit_f32(const uint32_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline int unit_i32(const uint32_t *p) {
    int v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* f16: 16 rows' halves to floats; x: one float, FMA */
#define F16_W(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define F16_X(p) _mm512_set1_ps(unit_f32(p))
#define F16_FMA(acc, w, x) _mm512_fmadd_ps(w, x, acc)
#define F16_VT __m512
/* bf16: 16 rows' pairs; x: one pair broadcast, vdpbf16ps */
#define BF16_W(p) ((__m512bh)_mm512_loadu_si512((const void *)(p)))
#define BF16_X(p) ((__m512bh)_mm512_set1_epi32(unit_i32(p)))
#define BF16_FMA(acc, w, x) _mm512_dpbf16_ps(acc, w, x)
#define BF16_VT __m512bh

/* A tile's accumulators: a0 (rows 0-15) and a1 (rows 16-31) of each group and token, set to 0,
 * and stored as the outputs at the end */
#define X32_TILE_ZERO(G, NT) \
    _Pragma("GCC unroll 32") for (int j = 0; j < (G) * (NT); j++) a0[j] = a1[j] = _mm512_setzero_ps()
#define X32_TILE_STORE(G, NT)                                                                                \
    _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) _Pragma("GCC unroll 16") for (int t = 0; t < (NT); \
                                                                                             t++) {         \
        _mm512_storeu_ps(y + t * ldy + g * X32_ROWS, a0[g * (NT) + t]);                                      \
        _mm512_storeu_ps(y + t * ldy + g * X32_ROWS + 16, a1[g * (NT) + t]);                                 \
    }

/* U: elements per step (the halves between a row's step and the next row's) */
#define DEFINE_TILE(KIND, U, G, NT)                                                                          \
    static void tile_##KIND##_##G##_##NT(int64_t S, const uint16_t *w, size_t gs, const uint32_t *xp,        \
                                         float *y, int64_t ldy, size_t pf) {                                \
        __m512 a0[(G) * (NT)], a1[(G) * (NT)];                                                               \
        X32_TILE_ZERO(G, NT);                                                                                \
        for (int64_t s = 0; s < S; s++) {                                                                    \
            KIND##_VT w0[G], w1[G];                                                                          \
            if ((NT) <= 2 && pf)                                                                             \
                _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                      \
                    const char *p = (const char *)(w + g * gs + (size_t)s * X32_ROWS * (U)) + pf;            \
                    _Pragma("GCC unroll 2") for (int l = 0; l < (U); l++) {                                  \
                        _mm_prefetch(p + 64 * l, _MM_HINT_T0);                                               \
                        _mm_prefetch(p + 3 * pf + 64 * l, _MM_HINT_T1);                                      \
                    }                                                                                        \
                }                                                                                            \
            _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                          \
                w0[g] = KIND##_W(w + g * gs + (size_t)s * X32_ROWS * (U));                                   \
                w1[g] = KIND##_W(w + g * gs + (size_t)s * X32_ROWS * (U) + 16 * (U));                        \
            }                                                                                                \
            _Pragma("GCC unroll 16") for (int t = 0; t < (NT); t++) {                                        \
                const KIND##_VT b = KIND##_X(xp + s * (NT) + t);                                             \
                _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                      \
                    a0[g * (NT) + t] = KIND##_FMA(a0[g * (NT) + t], w0[g], b);                               \
                    a1[g * (NT) + t] = KIND##_FMA(a1[g * (NT) + t], w1[g], b);                               \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
        X32_TILE_STORE(G, NT);                                                                               \
    }

/* the shapes each kind runs: [nt] wide (G groups) and one-group tiles */
#define DEFINE_KIND(DEF, KIND, U)                                                                            \
    DEF(KIND, U, 4, 1)                                                                                       \
    DEF(KIND, U, 1, 1)                                                                                       \
    DEF(KIND, U, 2, 2)                                                                                       \
    DEF(KIND, U, 1, 2)                                                                                       \
    DEF(KIND, U, 2, 3)                                                                                       \
    DEF(KIND, U, 1, 3)                                                                                       \
    DEF(KIND, U, 2, 4)                                                                                       \
    DEF(KIND, U, 1, 4)                                                                                       \
    DEF(KIND, U, 2, 5)                                                                                       \
    DEF(KIND, U, 1, 5)                                                                                       \
    DEF(KIND, U, 1, 6)                                                                                       \
    DEF(KIND, U, 1, 7)                                                                                       \
    DEF(KIND, U, 1, 8)                                                                                       \
    DEF(KIND, U, 1, 9)                                                                                       \
    DEF(KIND, U, 1, 10)                                                                                      \
    DEF(KIND, U, 1, 11)                                                                                      \
    DEF(KIND, U, 1, 12)                                                                                      \
    static const tile_fn wide_##KIND[X32_TOK + 1] = {                                                        \
        0,                  tile_##KIND##_4_1,  tile_##KIND##_2_2,  tile_##KIND##_2_3, tile_##KIND##_2_4,     \
        tile_##KIND##_2_5,  tile_##KIND##_1_6,  tile_##KIND##_1_7,  tile_##KIND##_1_8, tile_##KIND##_1_9,     \
        tile_##KIND##_1_10, tile_##KIND##_1_11, tile_##KIND##_1_12};                                         \
    static const tile_fn one_##KIND[X32_TOK + 1] = {                                                         \
        0,                  tile_##KIND##_1_1,  tile_##KIND##_1_2,  tile_##KIND##_1_3, tile_##KIND##_1_4,     \
        tile_##KIND##_1_5,  tile_##KIND##_1_6,  tile_##KIND##_1_7,  tile_##KIND##_1_8, tile_##KIND##_1_9,     \
        tile_##KIND##_1_10, tile_##KIND##_1_11, tile_##KIND##_1_12};

/* bf16 weights as FP32 FMAs (gemm_x32.h, ARITHMETIC): a step's 64 bytes per
 * 16 rows are split into the odd elements (the high halves, masked) and the
 * even ones (shifted up), and each token's two widened activations are
 * broadcast from memory ([S][NT][2] floats), odd first, as one vdpbf16ps
 * lane does them.  The caller sets DAZ/FTZ. */
#define DEFINE_TILE_BF16F(KIND, U, G, NT)                                                                           \
    static void tile_##KIND##_##G##_##NT(int64_t S, const uint16_t *w, size_t gs, const uint32_t *xp, float *y, \
                                      int64_t ldy, size_t pf) {                                             \
        const float *xf = (const float *)(const void *)xp;                                                   \
        const __m512i hi16 = _mm512_set1_epi32((int)0xFFFF0000u);                                            \
        __m512 a0[(G) * (NT)], a1[(G) * (NT)];                                                               \
        X32_TILE_ZERO(G, NT);                                                                                \
        for (int64_t s = 0; s < S; s++) {                                                                    \
            __m512 o0[G], e0[G], o1[G], e1[G];                                                               \
            if ((NT) <= 2 && pf)                                                                             \
                _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                      \
                    const char *p = (const char *)(w + g * gs + (size_t)s * X32_ROWS * 2) + pf;              \
                    _mm_prefetch(p, _MM_HINT_T0);                                                            \
                    _mm_prefetch(p + 64, _MM_HINT_T0);                                                       \
                    _mm_prefetch(p + 3 * pf, _MM_HINT_T1);                                                   \
                    _mm_prefetch(p + 3 * pf + 64, _MM_HINT_T1);                                              \
                }                                                                                            \
            _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                          \
                const __m512i v0 = _mm512_loadu_si512((const void *)(w + g * gs + (size_t)s * X32_ROWS * 2));     \
                const __m512i v1 = _mm512_loadu_si512((const void *)(w + g * gs + (size_t)s * X32_ROWS * 2 + 32)); \
                o0[g] = _mm512_castsi512_ps(_mm512_and_si512(v0, hi16));                                     \
                e0[g] = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));                                      \
                o1[g] = _mm512_castsi512_ps(_mm512_and_si512(v1, hi16));                                     \
                e1[g] = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));                                      \
            }                                                                                                \
            _Pragma("GCC unroll 16") for (int t = 0; t < (NT); t++) {                                        \
                const __m512 bo = _mm512_set1_ps(xf[2 * (s * (NT) + t) + 1]);                                \
                const __m512 be = _mm512_set1_ps(xf[2 * (s * (NT) + t)]);                                    \
                _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                      \
                    a0[g * (NT) + t] = _mm512_fmadd_ps(o0[g], bo, a0[g * (NT) + t]);                         \
                    a1[g * (NT) + t] = _mm512_fmadd_ps(o1[g], bo, a1[g * (NT) + t]);                         \
                    a0[g * (NT) + t] = _mm512_fmadd_ps(e0[g], be, a0[g * (NT) + t]);                         \
                    a1[g * (NT) + t] = _mm512_fmadd_ps(e1[g], be, a1[g * (NT) + t]);                         \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
        X32_TILE_STORE(G, NT);                                                                               \
    }

typedef void (*tile_fn)(int64_t S, const uint16_t *w, size_t gs, const uint32_t *xp, float *y, int64_t ldy,
                        size_t pf);

/* f32 weights in the x32 layout (f16 groups widened by gemm_x32_f16_widened_avx512):
 * 16 floats per row half and step, as bf16's 16 pairs, so U = 2 halves */
#define F32W_W(p) _mm512_loadu_ps((const void *)(p))
#define F32W_X(p) _mm512_set1_ps(unit_f32(p))
#define F32W_FMA(acc, w, x) _mm512_fmadd_ps(w, x, acc)
#define F32W_VT __m512

DEFINE_KIND(DEFINE_TILE, F16, 1)
DEFINE_KIND(DEFINE_TILE, BF16, 2)
DEFINE_KIND(DEFINE_TILE, F32W, 2)
DEFINE_KIND(DEFINE_TILE_BF16F, BF16F, 2) /* two FMAs per pair: one register more per group */

static void run(const tile_fn *wide, const tile_fn *one, int64_t S, int64_t K, const uint16_t *w, int64_t ng,
                const void *xp, int nt, float *y, int64_t ldy) {
    if (nt < 1 || nt > X32_TOK) return;
    const int G = nt == 1 ? 4 : nt <= 5 ? 2 : 1;
    const size_t gs = (size_t)K * X32_ROWS; /* halves per group */
    const size_t pf = kern_decode_prefetch() ? X32_DECODE_PF : 0; /* used by the 1-2 token tiles only */
    int64_t g = 0;
    for (; g + G <= ng; g += G) wide[nt](S, w + (size_t)g * gs, gs, xp, y + g * X32_ROWS, ldy, pf);
    for (; g < ng; g++) one[nt](S, w + (size_t)g * gs, gs, xp, y + g * X32_ROWS, ldy, pf);
}

void gemm_x32_f16_avx512(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy) {
    run(wide_F16, one_F16, K, K, w, ng, xp, nt, y, ldy);
}

void gemm_x32_f16_widened_avx512(int64_t K, const uint16_t *w, int64_t ng, const void *xp, size_t xp_row,
                                 int64_t n_tok, float *y, int64_t ldy, float *buf) {
    const size_t n = (size_t)ng * X32_ROWS * (size_t)K; /* halves of the block, a multiple of 32 */
    for (size_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(buf + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(w + i))));
    const uint16_t *wf = (const uint16_t *)(const void *)buf; /* the tiles address it in halves, U = 2 */
    for (int64_t k = 0; k < n_tok; k += X32_TOK) {
        const int nt = (int)(n_tok - k < X32_TOK ? n_tok - k : X32_TOK);
        run(wide_F32W, one_F32W, K, 2 * K, wf, ng, (const char *)xp + (size_t)k * xp_row, nt, y + k * ldy, ldy);
    }
}

/* DAZ (bit 6) and FTZ (bit 15) for the FMA form of vdpbf16ps's lane */
#define MXCSR_DAZ_FTZ 0x8040u

void gemm_x32_bf16f_avx512(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y, int64_t ldy) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | MXCSR_DAZ_FTZ);
    run(wide_BF16F, one_BF16F, K / 2, K, w, ng, xp, nt, y, ldy);
    _mm_setcsr(csr);
}

void gemm_x32_bf16_avx512bf16(int64_t K, const uint16_t *w, int64_t ng, const void *xp, int nt, float *y,
                              int64_t ldy) {
    run(wide_BF16, one_BF16, K / 2, K, w, ng, xp, nt, y, ldy);
}
#endif
