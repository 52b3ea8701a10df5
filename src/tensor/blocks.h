/*
 * blocks.h - block layouts of the quantized weight types, byte-compatible
 * with ggml (llama.cpp), so GGUF files move freely between the two.
 *
 * A row of n elements is n / QK blocks stored back to back.  Scales are IEEE
 * half floats stored as raw uint16_t (fp16_to_fp32 in dtype.h), except
 * block_q8_K's float d.  The sizes are pinned by static assertions: these are
 * file formats, never to be changed.
 */
#ifndef KITE_TENSOR_BLOCKS_H
#define KITE_TENSOR_BLOCKS_H

#include <assert.h>
#include <stdint.h>

typedef uint16_t kite_half; /* IEEE binary16 bits */

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256         /* super-block size of the k-quants */
#define K_SCALE_SIZE 12  /* packed 6-bit scales/mins of q4_K, q5_K */
#define QK4_NL 32

typedef struct block_q4_0 {
    kite_half d;             /* scale */
    uint8_t qs[QK4_0 / 2];   /* 4-bit values: element i in low nibble of qs[i], i+16 in the high nibble */
} block_q4_0;

typedef struct block_q4_1 {
    kite_half d;             /* scale */
    kite_half m;             /* minimum */
    uint8_t qs[QK4_1 / 2];
} block_q4_1;

typedef struct block_q5_0 {
    kite_half d;
    uint8_t qh[4];           /* 5th bits, element i in bit i (little-endian uint32) */
    uint8_t qs[QK5_0 / 2];
} block_q5_0;

typedef struct block_q5_1 {
    kite_half d;
    kite_half m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;

typedef struct block_q8_0 {
    kite_half d;
    int8_t qs[QK8_0];
} block_q8_0;

typedef struct block_q8_1 {
    kite_half d;             /* scale */
    kite_half s;             /* d * sum(qs) */
    int8_t qs[QK8_1];
} block_q8_1;

typedef struct block_q2_K {
    uint8_t scales[QK_K / 16]; /* 4-bit scale (low) and 4-bit min (high) per 16 elements */
    uint8_t qs[QK_K / 4];      /* 2-bit values */
    kite_half d;               /* super-block scale of the scales */
    kite_half dmin;            /* super-block scale of the mins */
} block_q2_K;

typedef struct block_q3_K {
    uint8_t hmask[QK_K / 8];   /* high bits */
    uint8_t qs[QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];        /* 16 6-bit scales, packed */
    kite_half d;
} block_q3_K;

typedef struct block_q4_K {
    kite_half d;
    kite_half dmin;
    uint8_t scales[K_SCALE_SIZE]; /* 8 6-bit scales and 8 6-bit mins, packed */
    uint8_t qs[QK_K / 2];
} block_q4_K;

typedef struct block_q5_K {
    kite_half d;
    kite_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;

typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];      /* low 4 bits */
    uint8_t qh[QK_K / 4];      /* high 2 bits */
    int8_t scales[QK_K / 16];  /* 8-bit scales per 16 elements */
    kite_half d;
} block_q6_K;

typedef struct block_q8_K {    /* activations of the k-quant dot products */
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];  /* sums of qs per 16 elements */
} block_q8_K;

typedef struct block_iq4_nl {
    kite_half d;
    uint8_t qs[QK4_NL / 2];    /* 4-bit indices into the non-uniform codebook */
} block_iq4_nl;

typedef struct block_iq4_xs {
    kite_half d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;

typedef struct block_tq1_0 {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; /* 5 ternary digits per byte */
    uint8_t qh[QK_K / 64];                  /* 4 per byte */
    kite_half d;
} block_tq1_0;

typedef struct block_tq2_0 {
    uint8_t qs[QK_K / 4];      /* 2 bits per element */
    kite_half d;
} block_tq2_0;

static_assert(sizeof(block_q4_0) == 18, "q4_0 block size");
static_assert(sizeof(block_q4_1) == 20, "q4_1 block size");
static_assert(sizeof(block_q5_0) == 22, "q5_0 block size");
static_assert(sizeof(block_q5_1) == 24, "q5_1 block size");
static_assert(sizeof(block_q8_0) == 34, "q8_0 block size");
static_assert(sizeof(block_q8_1) == 36, "q8_1 block size");
static_assert(sizeof(block_q2_K) == 84, "q2_K block size");
static_assert(sizeof(block_q3_K) == 110, "q3_K block size");
static_assert(sizeof(block_q4_K) == 144, "q4_K block size");
static_assert(sizeof(block_q5_K) == 176, "q5_K block size");
static_assert(sizeof(block_q6_K) == 210, "q6_K block size");
static_assert(sizeof(block_q8_K) == 292, "q8_K block size");
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl block size");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs block size");
static_assert(sizeof(block_tq1_0) == 54, "tq1_0 block size");
static_assert(sizeof(block_tq2_0) == 66, "tq2_0 block size");

#endif
