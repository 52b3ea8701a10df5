/*
 * grid.h - the quantization grids of the legacy GGUF block types, exposed
 * group by group so GPTQ and AWQ can round weights to exactly what the file
 * stores.
 *
 * DESIGN
 *   A grid is the set of values one group of weights may take: for the
 *   symmetric types (q4_0, q5_0, q8_0) value = (code - off) * d, for the
 *   asymmetric ones (q4_1, q5_1) value = code * d + m, with d and m the fp16
 *   numbers stored in the block.  qgrid_fit() computes a group's parameters
 *   from its weights exactly as the type's reference (RTN) quantizer does
 *   (tensor/quant_legacy.c): the codes are computed with the unrounded 1/d,
 *   the values with the fp16-rounded d and m, so fit + code + pack of a
 *   32-element group gives the reference quantizer's bytes.
 *
 *   Groups: a group is `group` consecutive elements of a row (32, 64 or
 *   128; the last group of a row may be shorter, always a multiple of 32).
 *   A group of 64/128 has one set of parameters, stored unchanged in each of
 *   its 2/4 blocks (exactly representable: the file stays a standard GGUF
 *   file of the block type and has the block type's size).
 *
 *   Bits: a grid may use fewer levels than the container (e.g. 3 bits = 8
 *   levels in q4_0 blocks: d = max / -4, codes -4..3); the file is still a
 *   standard q4_0 file (4.5 bits per weight), only its quality is 3-bit.
 *
 * THREAD SAFETY
 *   Pure functions, no state.
 */
#ifndef KITE_QUANT_GRID_H
#define KITE_QUANT_GRID_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define QGRID_BLOCK 32 /* elements per block of every grid type */

typedef struct qgrid {
    float id;    /* 1/d as the reference quantizer computes codes (0 when d == 0) */
    float m;     /* asymmetric types: the float minimum the codes are computed from */
    float d16;   /* fp16-rounded d, as stored */
    float m16;   /* fp16-rounded m, as stored (asymmetric types) */
    uint16_t dh; /* stored fp16 bits of d */
    uint16_t mh; /* stored fp16 bits of m */
    int qmin;    /* smallest allowed code */
    int qmax;    /* largest allowed code */
    int off;     /* symmetric types: code offset (8, 16, or 0 for q8_0); -1: asymmetric */
} qgrid;

/* Whether type has a group grid here (q4_0, q4_1, q5_0, q5_1, q8_0) with
 * `bits` levels (bits == 0: the container's own; 2..native for the 4/5-bit
 * types; q8_0 only native). */
bool qgrid_supported(uint32_t type, int bits);

/* Parameters of a group x[0..n) (n > 0) of type's grid with `bits` (0:
 * native).  Requires qgrid_supported(type, bits). */
void qgrid_fit(uint32_t type, int bits, const float *x, int n, qgrid *g /* OUT */);

/* Code of x on grid g (clamped to [qmin, qmax]; the reference quantizer's
 * rounding for in-range values). */
static inline int qgrid_code(const qgrid *g, float x) {
    int c;
    if (g->off == 0) { /* q8_0: round half away from zero */
        float t = x * g->id;
        c = t > 1e6f ? g->qmax : (t < -1e6f ? g->qmin : (int)roundf(t));
    } else {
        float t = g->off > 0 ? x * g->id + ((float)g->off + 0.5f) : (x - g->m) * g->id + 0.5f;
        c = t < 0.0f ? 0 : (t > 1e6f ? g->qmax : (int)t);
    }
    return c < g->qmin ? g->qmin : (c > g->qmax ? g->qmax : c);
}

/* Value the file stores for code c (the dequantizer's formula). */
static inline float qgrid_value(const qgrid *g, int c) {
    return g->off >= 0 ? (float)(c - g->off) * g->d16 : (float)c * g->d16 + g->m16;
}

/* Writes one block (32 codes) of type with grid g to dst. */
void qgrid_pack(uint32_t type, const qgrid *g, const int *codes, void *dst);

/* ---- q3_K super-block grid (GPTQ on llama.cpp's 3-bit type) --------------
 * A super-block of 256 weights has 16 sub-blocks of 16, each with its own
 * scale dl_j = d * (6-bit scale - 32) and codes -4..3.  q3k_fit runs the
 * type's reference quantizer on the 256 weights and keeps its scales (and its
 * codes, used for sub-blocks whose scale is 0); codes are then chosen as the
 * reference does, nearest(x / dl_j) clamped, so fit + code + pack of an
 * unchanged super-block gives the reference bytes. */
#define QGRID_Q3K 256

typedef struct q3k_grid {
    uint8_t fit[110];  /* the reference block_q3_K of the fitted weights */
    float dl[16];      /* decoded sub-block scales */
} q3k_grid;

void q3k_fit(const float *x, q3k_grid *g /* OUT */);       /* x: 256 weights */
int q3k_code(const q3k_grid *g, int e, float x);            /* code 0..7 of element e (0..255) */
static inline float q3k_value(const q3k_grid *g, int e, int c) { return g->dl[e / 16] * (float)(c - 4); }
void q3k_pack(const q3k_grid *g, const int *codes, void *dst); /* 256 codes -> one block_q3_K */

/* Round-to-nearest of a row x[0..n) (n a multiple of 32) in groups of
 * `group` elements on type's grid with `bits`: the reference quantizer's
 * bytes when group == 32 and bits is native. */
void qgrid_quantize_row(uint32_t type, int bits, int group, const float *x, int64_t n, void *dst);

#endif
