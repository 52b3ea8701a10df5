/*
 * gemm_f16x32_avx512.c - the 32-row interleaved f16 kernel with AVX-512
 * (layout and arithmetic in gemm_f16x32.h; equal bit for bit to
 * ref/gemm_f16x32_ref.c).
 *
 * DESIGN
 *   A tile is G groups x NT tokens, 2 * G * NT accumulators of 16 rows each.
 *   Per k: 2 * G loads of 16 halves (vcvtph2ps, one 64-byte line per group),
 *   NT broadcasts of x[t][k], 2 * G * NT FMAs.  Each accumulator is one
 *   output chain over k, so nothing is reduced across lanes and the stores
 *   are the outputs.  G grows as NT shrinks so that at least 8 chains cover
 *   the FMA latency (4 cycles, 2 per cycle): one token runs 4 groups side
 *   by side (decode: 4 forward streams of whole lines), 2-5 tokens 2 groups,
 *   6-12 tokens one group (prefill: 12 tokens, 24 accumulators; the caller
 *   keeps a block of groups in L2 for all token groups).  G and NT are
 *   compile-time constants per instantiation so the accumulators stay in
 *   registers.  No software prefetch: the prototypes streamed at 59-65 GB/s
 *   on two threads without it (bench/proto/outer_f16_decode.c).
 *
 * THREAD SAFETY: pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kernels/gemm_f16x32.h"

#define LOAD_ROWS(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))

#define DEFINE_TILE(G, NT)                                                                                 \
    static void tile_##G##_##NT(int64_t K, const uint16_t *w, size_t gs, const float *xp, float *y,        \
                                int64_t ldy) {                                                             \
        __m512 a0[(G) * (NT)], a1[(G) * (NT)];                                                             \
        _Pragma("GCC unroll 32") for (int j = 0; j < (G) * (NT); j++) a0[j] = a1[j] = _mm512_setzero_ps(); \
        for (int64_t k = 0; k < K; k++) {                                                                  \
            __m512 w0[G], w1[G];                                                                           \
            _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                        \
                w0[g] = LOAD_ROWS(w + g * gs + (size_t)k * F16X32_ROWS);                                   \
                w1[g] = LOAD_ROWS(w + g * gs + (size_t)k * F16X32_ROWS + 16);                              \
            }                                                                                              \
            _Pragma("GCC unroll 16") for (int t = 0; t < (NT); t++) {                                      \
                const __m512 b = _mm512_set1_ps(xp[k * (NT) + t]);                                         \
                _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) {                                    \
                    a0[g * (NT) + t] = _mm512_fmadd_ps(w0[g], b, a0[g * (NT) + t]);                        \
                    a1[g * (NT) + t] = _mm512_fmadd_ps(w1[g], b, a1[g * (NT) + t]);                        \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        _Pragma("GCC unroll 8") for (int g = 0; g < (G); g++) _Pragma("GCC unroll 16") for (int t = 0;     \
                                                                                         t < (NT); t++) { \
            _mm512_storeu_ps(y + t * ldy + g * F16X32_ROWS, a0[g * (NT) + t]);                             \
            _mm512_storeu_ps(y + t * ldy + g * F16X32_ROWS + 16, a1[g * (NT) + t]);                        \
        }                                                                                                  \
    }

DEFINE_TILE(4, 1)
DEFINE_TILE(1, 1)
DEFINE_TILE(2, 2)
DEFINE_TILE(1, 2)
DEFINE_TILE(2, 3)
DEFINE_TILE(1, 3)
DEFINE_TILE(2, 4)
DEFINE_TILE(1, 4)
DEFINE_TILE(2, 5)
DEFINE_TILE(1, 5)
DEFINE_TILE(1, 6)
DEFINE_TILE(1, 7)
DEFINE_TILE(1, 8)
DEFINE_TILE(1, 9)
DEFINE_TILE(1, 10)
DEFINE_TILE(1, 11)
DEFINE_TILE(1, 12)

typedef void (*tile_fn)(int64_t K, const uint16_t *w, size_t gs, const float *xp, float *y, int64_t ldy);

void gemm_f16x32_avx512(int64_t K, const uint16_t *w, int64_t ng, const float *xp, int nt, float *y, int64_t ldy) {
    /* [nt]: the wide tile (G groups) and the one-group tile for the groups left over */
    static const tile_fn wide[F16X32_TOK + 1] = {0, tile_4_1, tile_2_2, tile_2_3, tile_2_4, tile_2_5, tile_1_6,
                                                 tile_1_7, tile_1_8, tile_1_9, tile_1_10, tile_1_11, tile_1_12};
    static const tile_fn one[F16X32_TOK + 1] = {0, tile_1_1, tile_1_2, tile_1_3, tile_1_4, tile_1_5, tile_1_6,
                                                tile_1_7, tile_1_8, tile_1_9, tile_1_10, tile_1_11, tile_1_12};
    if (nt < 1 || nt > F16X32_TOK) return;
    const int G = nt == 1 ? 4 : nt <= 5 ? 2 : 1;
    const size_t gs = (size_t)K * F16X32_ROWS; /* halves per group */
    int64_t g = 0;
    for (; g + G <= ng; g += G) wide[nt](K, w + (size_t)g * gs, gs, xp, y + g * F16X32_ROWS, ldy);
    for (; g < ng; g++) one[nt](K, w + (size_t)g * gs, gs, xp, y + g * F16X32_ROWS, ldy);
}
#endif
