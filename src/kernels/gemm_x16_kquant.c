/*
 * gemm_x16_kquant.c - the q2_K, q3_K, q4_K, q5_K, q6_K and iq4_xs group block formats of the 16-row
 * interleaved layout (gemm_x16.h): one row's plain block into a group
 * block and back.  Both directions keep every bit, so unpacking gives back
 * the file's bytes (tests/unit/test_x16.c).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "kernels/gemm_x16.h"
#include "tensor/blocks.h"
#include "tensor/quants.h"

/* q4_K: d, dmin, the 6-bit scales and mins unpacked into X16K_SC/X16K_ML,
 * qs in 4-byte words. */
static void put_q4_K(unsigned char *g, int64_t b, int i, const unsigned char *blk) {
    unsigned char *x = g + (size_t)b * X16K_BLOCK_BYTES;
    const uint8_t *scales = blk + offsetof(block_q4_K, scales), *qs = blk + offsetof(block_q4_K, qs);
    memcpy(x + X16K_D + 2 * i, blk + offsetof(block_q4_K, d), 2);
    memcpy(x + X16K_DMIN + 2 * i, blk + offsetof(block_q4_K, dmin), 2);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) kite_get_scale_min_k4(j, scales, &sc[j], &m[j]);
    for (int j = 0; j < 8; j++) x[X16K_SC + 16 * j + i] = (uint8_t)(sc[j] | (m[j] >> 4) << 6);
    for (int p = 0; p < 4; p++) x[X16K_ML + 16 * p + i] = (uint8_t)((m[2 * p] & 15) | (m[2 * p + 1] & 15) << 4);
    for (int c = 0; c < 32; c++) memcpy(x + X16K_QS + 64 * c + 4 * i, qs + 4 * c, 4);
}

/* The inverse; the scales are packed as ggml does (j < 4: sc_j and m_j in
 * bytes j and j+4, with the top bits of sc_j+4 and m_j+4; byte j+8: the
 * low nibbles of sc_j+4 and m_j+4). */
static void get_q4_K(const unsigned char *g, int64_t b, int i, unsigned char *blk) {
    const unsigned char *x = g + (size_t)b * X16K_BLOCK_BYTES;
    uint8_t *scales = blk + offsetof(block_q4_K, scales), *qs = blk + offsetof(block_q4_K, qs);
    memcpy(blk + offsetof(block_q4_K, d), x + X16K_D + 2 * i, 2);
    memcpy(blk + offsetof(block_q4_K, dmin), x + X16K_DMIN + 2 * i, 2);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        const uint8_t s = x[X16K_SC + 16 * j + i], n = x[X16K_ML + 16 * (j / 2) + i];
        sc[j] = s & 63;
        m[j] = (uint8_t)(((n >> (4 * (j & 1))) & 15) | (s >> 6) << 4);
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    for (int c = 0; c < 32; c++) memcpy(qs + 4 * c, x + X16K_QS + 64 * c + 4 * i, 4);
}

/* q5_K: q4_K's parts (the two blocks share the layout of d, dmin, scales
 * and qs up to the qh that q5_K inserts before qs), then qh in 4-byte words. */
static void put_q5_K(unsigned char *g, int64_t b, int i, const unsigned char *blk) {
    unsigned char q4[sizeof(block_q4_K)];
    memcpy(q4, blk, offsetof(block_q4_K, qs));
    memcpy(q4 + offsetof(block_q4_K, qs), blk + offsetof(block_q5_K, qs), QK_K / 2);
    unsigned char *x = (unsigned char *)g + (size_t)b * X16Q5_BLOCK_BYTES;
    put_q4_K(x, 0, i, q4);
    for (int k = 0; k < 8; k++) memcpy(x + X16Q5_QH + 64 * k + 4 * i, blk + offsetof(block_q5_K, qh) + 4 * k, 4);
}

static void get_q5_K(const unsigned char *g, int64_t b, int i, unsigned char *blk) {
    const unsigned char *x = g + (size_t)b * X16Q5_BLOCK_BYTES;
    unsigned char q4[sizeof(block_q4_K)];
    get_q4_K(x, 0, i, q4);
    memcpy(blk, q4, offsetof(block_q4_K, qs));
    memcpy(blk + offsetof(block_q5_K, qs), q4 + offsetof(block_q4_K, qs), QK_K / 2);
    for (int k = 0; k < 8; k++) memcpy(blk + offsetof(block_q5_K, qh) + 4 * k, x + X16Q5_QH + 64 * k + 4 * i, 4);
}

/* iq4_xs, both directions (as move_q6_K below). */
static void move_iq4_xs(unsigned char *g, int64_t b, int i, unsigned char *blk, bool to_group) {
    unsigned char *x = g + (size_t)b * X16I4_BLOCK_BYTES;
#define MOVE(GRP, PLAIN, N) (to_group ? memcpy(GRP, PLAIN, N) : memcpy(PLAIN, GRP, N))
    MOVE(x + X16I4_D + 2 * i, blk + offsetof(block_iq4_xs, d), 2);
    MOVE(x + X16I4_SH + 2 * i, blk + offsetof(block_iq4_xs, scales_h), 2);
    for (int p = 0; p < 4; p++) MOVE(x + X16I4_SL + 16 * p + i, blk + offsetof(block_iq4_xs, scales_l) + p, 1);
    for (int c = 0; c < 32; c++) MOVE(x + X16I4_QS + 64 * c + 4 * i, blk + offsetof(block_iq4_xs, qs) + 4 * c, 4);
#undef MOVE
}

/* q6_K step s = 2h + kk, chunk k' (0..3) of part A, H or B (0, 1, 2): the
 * plain offset of its 4 bytes (ql for A and B, qh for H) in a row's block. */
static size_t q6_src(int s, int part, int kq) {
    const int h = s / 2, k = 4 * (s % 2) + kq;
    switch (part) {
    case 0: return offsetof(block_q6_K, ql) + (size_t)(64 * h + 4 * k);
    case 1: return offsetof(block_q6_K, qh) + (size_t)(32 * h + 4 * k);
    default: return offsetof(block_q6_K, ql) + (size_t)(64 * h + 32 + 4 * k);
    }
}

/* q6_K, both directions: to_group moves row i's plain block into group
 * block b, else back (the callers cast const away only from the side that
 * is read). */
static void move_q6_K(unsigned char *g, int64_t b, int i, unsigned char *blk, bool to_group) {
    unsigned char *sc = g + kern_x16q6_offset(b, X16Q6_SC), *qs = g + kern_x16q6_offset(b, X16Q6_QS);
    unsigned char *d = g + kern_x16q6_offset(b, X16Q6_D);
#define MOVE(GRP, PLAIN, N) (to_group ? memcpy(GRP, PLAIN, N) : memcpy(PLAIN, GRP, N))
    MOVE(d + 2 * i, blk + offsetof(block_q6_K, d), 2);
    for (int k = 0; k < 16; k++) MOVE(sc + 16 * k + i, blk + offsetof(block_q6_K, scales) + k, 1);
    for (int s = 0; s < 4; s++)
        for (int part = 0; part < 3; part++)
            for (int kq = 0; kq < 4; kq++)
                MOVE(qs + 768 * s + 256 * part + 64 * kq + 4 * i, blk + q6_src(s, part, kq), 4);
#undef MOVE
}

/* q6_K into the group: move_q6_K's to_group moves with the offsets in closed
 * form, so that the compiler unrolls them (in place, TinyLlama's q6_K matrices
 * repacked at 1.9 GB/s through move_q6_K; the I/O workers repack every
 * streamed layer, docs/offload.md). */
static void put_q6_K(unsigned char *g, int64_t b, int i, const unsigned char *blk) {
    unsigned char *sc = g + kern_x16q6_offset(b, X16Q6_SC) + i, *qs = g + kern_x16q6_offset(b, X16Q6_QS) + 4 * i;
    memcpy(g + kern_x16q6_offset(b, X16Q6_D) + 2 * i, blk + offsetof(block_q6_K, d), 2);
    const unsigned char *scales = blk + offsetof(block_q6_K, scales);
    for (int k = 0; k < 16; k++) sc[16 * k] = scales[k];
    const unsigned char *ql = blk + offsetof(block_q6_K, ql), *qh = blk + offsetof(block_q6_K, qh);
    for (int s = 0; s < 4; s++) /* q6_src: step s = 2h + half, chunk kq at k = 4 * half + kq */
        for (int kq = 0; kq < 4; kq++) {
            const int h = s / 2, k = 4 * (s % 2) + kq;
            unsigned char *o = qs + 768 * s + 64 * kq;
            memcpy(o, ql + 64 * h + 4 * k, 4);
            memcpy(o + 256, qh + 32 * h + 4 * k, 4);
            memcpy(o + 512, ql + 64 * h + 32 + 4 * k, 4);
        }
}

/* q3_K and q2_K, both directions (as move_q6_K): byte moves only, the
 * file's scale packing kept (gemm_x16.h). */
static void move_q3_K(unsigned char *g, int64_t b, int i, unsigned char *blk, bool to_group) {
#define MOVE(GRP, PLAIN, N) (to_group ? memcpy(GRP, PLAIN, N) : memcpy(PLAIN, GRP, N))
    MOVE(g + kern_x16q3_offset(b, X16Q3_D) + 2 * i, blk + offsetof(block_q3_K, d), 2);
    unsigned char *sc = g + kern_x16q3_offset(b, X16Q3_SC), *hm = g + kern_x16q3_offset(b, X16Q3_HM);
    unsigned char *qs = g + kern_x16q3_offset(b, X16Q3_QS);
    for (int j = 0; j < 12; j++) MOVE(sc + 16 * j + i, blk + offsetof(block_q3_K, scales) + j, 1);
    for (int c = 0; c < 8; c++) MOVE(hm + 64 * c + 4 * i, blk + offsetof(block_q3_K, hmask) + 4 * c, 4);
    for (int c = 0; c < 16; c++) MOVE(qs + 64 * c + 4 * i, blk + offsetof(block_q3_K, qs) + 4 * c, 4);
}

static void move_q2_K(unsigned char *g, int64_t b, int i, unsigned char *blk, bool to_group) {
    unsigned char *x = g + (size_t)b * X16Q2_BLOCK_BYTES;
    MOVE(x + X16Q2_D + 2 * i, blk + offsetof(block_q2_K, d), 2);
    MOVE(x + X16Q2_DMIN + 2 * i, blk + offsetof(block_q2_K, dmin), 2);
    for (int j = 0; j < 16; j++) MOVE(x + X16Q2_SC + 16 * j + i, blk + offsetof(block_q2_K, scales) + j, 1);
    for (int c = 0; c < 16; c++) MOVE(x + X16Q2_QS + 64 * c + 4 * i, blk + offsetof(block_q2_K, qs) + 4 * c, 4);
#undef MOVE
}

void kern_x16k_put_block(uint32_t type, void *grp, int64_t b, int i, const void *blk) {
    switch (type) {
    case KITE_DTYPE_Q4_K: put_q4_K(grp, b, i, blk); return;
    case KITE_DTYPE_Q5_K: put_q5_K(grp, b, i, blk); return;
    case KITE_DTYPE_IQ4_XS: move_iq4_xs(grp, b, i, (unsigned char *)(uintptr_t)blk, true); return;
    case KITE_DTYPE_Q3_K: move_q3_K(grp, b, i, (unsigned char *)(uintptr_t)blk, true); return;
    case KITE_DTYPE_Q2_K: move_q2_K(grp, b, i, (unsigned char *)(uintptr_t)blk, true); return;
    default: KITE_ASSERT(type == KITE_DTYPE_Q6_K); put_q6_K(grp, b, i, blk);
    }
}

void kern_x16k_get_block(uint32_t type, const void *grp, int64_t b, int i, void *blk) {
    switch (type) {
    case KITE_DTYPE_Q4_K: get_q4_K(grp, b, i, blk); return;
    case KITE_DTYPE_Q5_K: get_q5_K(grp, b, i, blk); return;
    case KITE_DTYPE_IQ4_XS: move_iq4_xs((unsigned char *)(uintptr_t)grp, b, i, blk, false); return;
    case KITE_DTYPE_Q3_K: move_q3_K((unsigned char *)(uintptr_t)grp, b, i, blk, false); return;
    case KITE_DTYPE_Q2_K: move_q2_K((unsigned char *)(uintptr_t)grp, b, i, blk, false); return;
    default: KITE_ASSERT(type == KITE_DTYPE_Q6_K); move_q6_K((unsigned char *)(uintptr_t)grp, b, i, blk, false);
    }
}
