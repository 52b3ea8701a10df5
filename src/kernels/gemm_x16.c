/*
 * gemm_x16.c - the 16-row interleaved layout: repacking, row extraction
 * and activation side data (layout and arithmetic in gemm_x16.h, the
 * kernels in the registry, dispatch.h; the k-quant block formats in
 * gemm_x16_kquant.c).
 */
#include "kernels/gemm_x16.h"

#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

_Static_assert(sizeof(block_iq4_nl) == sizeof(block_q4_0) && offsetof(block_iq4_nl, qs) == offsetof(block_q4_0, qs),
               "iq4_nl blocks take q4_0's group layout (gemm_x16.h)");

bool kern_x16_type(uint32_t type) {
    return type == KITE_DTYPE_Q4_0 || type == KITE_DTYPE_Q5_0 || type == KITE_DTYPE_Q8_0 || type == KITE_DTYPE_IQ4_NL || type == KITE_DTYPE_Q4_K ||
           type == KITE_DTYPE_Q5_K || type == KITE_DTYPE_Q6_K || type == KITE_DTYPE_IQ4_XS || type == KITE_DTYPE_Q2_K ||
           type == KITE_DTYPE_Q3_K || type == KITE_DTYPE_Q4_1 || type == KITE_DTYPE_Q5_1;
}

int64_t kern_x16_rows(const weight *w) {
    return w->layout == WEIGHT_LAYOUT_X16 ? w->ne[1] / X16_ROWS * X16_ROWS : 0;
}

int32_t kern_x16_offset(uint32_t type) {
    if (kern_x16_has_min(type)) return -1;
    return type == KITE_DTYPE_Q4_0 ? 8 : type == KITE_DTYPE_Q5_0 ? 16 : type == KITE_DTYPE_Q8_0 || type == KITE_DTYPE_IQ4_NL ? 128 : 0;
}

/* Plain block size of a type with the layout; a switch rather than
 * dtype_get, as kern_x16_panel_offset runs once per kernel call. */
static size_t block_bytes(uint32_t type) {
    switch (type) {
    case KITE_DTYPE_Q4_0: return sizeof(block_q4_0);
    case KITE_DTYPE_IQ4_NL: return sizeof(block_iq4_nl);
    case KITE_DTYPE_Q5_0: return sizeof(block_q5_0);
    case KITE_DTYPE_Q8_0: return sizeof(block_q8_0);
    case KITE_DTYPE_Q4_K: return sizeof(block_q4_K);
    case KITE_DTYPE_Q5_K: return sizeof(block_q5_K);
    case KITE_DTYPE_IQ4_XS: return sizeof(block_iq4_xs);
    case KITE_DTYPE_Q2_K: return sizeof(block_q2_K);
    case KITE_DTYPE_Q3_K: return sizeof(block_q3_K);
    case KITE_DTYPE_Q4_1: return sizeof(block_q4_1);
    case KITE_DTYPE_Q5_1: return sizeof(block_q5_1);
    default: return sizeof(block_q6_K);
    }
}

int64_t kern_x16_panel_blocks(uint32_t type) {
    switch (type) {
    case KITE_DTYPE_Q4_0:
    case KITE_DTYPE_IQ4_NL: return 64; /* 18 KiB per group-panel */
    case KITE_DTYPE_Q5_0: return 64;   /* 22 KiB */
    case KITE_DTYPE_Q4_1: return 64;   /* 20 KiB */
    case KITE_DTYPE_Q5_1: return 64;   /* 24 KiB */
    case KITE_DTYPE_Q8_0: return 32; /* 17 KiB */
    default: return 8; /* q4_K 18 KiB, q5_K 22 KiB, q6_K 26 KiB, iq4_xs 17 KiB, q3_K 14 KiB, q2_K 10.5 KiB */
    }
}

size_t kern_x16_panel_offset(uint32_t type, int64_t nb, int64_t n_groups, int64_t g, int64_t b0) {
    const int64_t pb = kern_x16_panel_blocks(type), nbp = nb - b0 < pb ? nb - b0 : pb;
    const size_t gbb = X16_ROWS * block_bytes(type); /* one block of a group */
    return ((size_t)n_groups * (size_t)b0 + (size_t)g * (size_t)nbp) * gbb;
}

/* Element of bit m of byte k in the transposed q5_0 qh (gemm_x16.h). */
static int q5_0_elem(int k, int m) { return m < 4 ? 4 * m + k : 16 + 4 * (m - 4) + k; }

uint32_t kern_x16_q5_0_qh(uint32_t qh) {
    uint32_t t = 0;
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < 8; m++) t |= ((qh >> q5_0_elem(k, m)) & 1u) << (8 * k + m);
    return t;
}

uint32_t kern_x16_q5_0_qh_inverse(uint32_t t) {
    uint32_t qh = 0;
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < 8; m++) qh |= ((t >> (8 * k + m)) & 1u) << q5_0_elem(k, m);
    return qh;
}

/* Block b of row i (plain bytes at blk) into the group at g: the scale, then
 * the quants as 4-byte words (q8_0: sign bits flipped, w + 128; q5_0: its
 * transposed qh first). */
static void put_block(uint32_t type, unsigned char *g, int64_t nb, int64_t b, int i, const unsigned char *blk) {
    if (kern_x16_block_elems(type) == QK_K) {
        kern_x16k_put_block(type, g, b, i, blk);
        return;
    }
    const size_t qb = kern_x16_quant_bytes(type);
    const bool q1 = kern_x16_has_min(type);
    unsigned char *gb = g + (size_t)b * kern_x16_q1_block_bytes(type); /* q4_1 / q5_1 */
    memcpy((q1 ? gb + X16Q1_D : g + kern_x16_scale_offset(qb, nb, b)) + 2 * (size_t)i, blk, 2); /* d comes first */
    if (q1) memcpy(gb + X16Q1_M + 2 * (size_t)i, blk + 2, 2); /* then m */
    unsigned char *q = (q1 ? gb + X16Q1_QS : g + kern_x16_quant_offset(qb, nb, b)) + 4 * (size_t)i;
    const unsigned char *qs = blk + (q1 ? 4 : 2);
    if (type == KITE_DTYPE_Q5_0 || type == KITE_DTYPE_Q5_1) {
        const size_t qh_off = type == KITE_DTYPE_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
        uint32_t qh;
        memcpy(&qh, blk + qh_off, 4);
        qh = kern_x16_q5_0_qh(qh);
        memcpy(q, &qh, 4);
        q += 64;
        qs = blk + qh_off + 4; /* qs follows qh in both blocks */
    }
    const bool q4 = qb != 512; /* q4_0, q5_0, iq4_nl: nibbles as they are */
    const int chunks = q4 ? 4 : 8;
    const uint32_t flip = q4 ? 0 : 0x80808080u;
    for (int j = 0; j < chunks; j++) {
        uint32_t v;
        memcpy(&v, qs + 4 * j, 4);
        v ^= flip;
        memcpy(q + 64 * j, &v, 4);
    }
}

void kern_x16_get_block(uint32_t type, const void *grp, int64_t nb, int64_t b, int i, void *blk_out) {
    const unsigned char *g = grp;
    unsigned char *blk = blk_out;
    if (kern_x16_block_elems(type) == QK_K) {
        kern_x16k_get_block(type, g, b, i, blk);
        return;
    }
    const size_t qb = kern_x16_quant_bytes(type);
    const bool q1 = kern_x16_has_min(type);
    const unsigned char *gb = g + (size_t)b * kern_x16_q1_block_bytes(type); /* q4_1 / q5_1 */
    memcpy(blk, (q1 ? gb + X16Q1_D : g + kern_x16_scale_offset(qb, nb, b)) + 2 * (size_t)i, 2);
    if (q1) memcpy(blk + 2, gb + X16Q1_M + 2 * (size_t)i, 2);
    const unsigned char *q = q1 ? gb + X16Q1_QS : g + kern_x16_quant_offset(qb, nb, b);
    unsigned char *qs = blk + (q1 ? 4 : 2);
    if (type == KITE_DTYPE_Q5_0 || type == KITE_DTYPE_Q5_1) {
        const size_t qh_off = type == KITE_DTYPE_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
        uint32_t t;
        memcpy(&t, q + 4 * (size_t)i, 4);
        t = kern_x16_q5_0_qh_inverse(t);
        memcpy(blk + qh_off, &t, 4);
        q += 64;
        qs = blk + qh_off + 4;
    }
    const bool q4 = qb != 512;
    const int chunks = q4 ? 4 : 8;
    for (int j = 0; j < chunks; j++)
        for (int k = 0; k < 4; k++) {
            const unsigned char v = q[64 * j + 4 * i + k];
            qs[4 * j + k] = q4 ? v : (unsigned char)(v ^ 0x80);
        }
}

/* Bytes of the visited-bit map of kern_x16_pack's permutation: one bit per
 * 16-row block of the matrix. */
static size_t unit_map_bytes(int64_t n_units) { return (size_t)(n_units + 7) / 8; }

size_t kern_x16_pack_tmp_bytes(uint32_t type, int64_t nr, int64_t ne0) {
    const int64_t nb = ne0 / kern_x16_block_elems(type);
    const size_t gb = (size_t)nb * block_bytes(type) * X16_ROWS;
    return nb <= kern_x16_panel_blocks(type) ? gb : gb + unit_map_bytes(nb * (nr / X16_ROWS));
}

/* One group-panel of q4_0 / iq4_nl (chunks 4, flip 0) or q8_0 (chunks 8,
 * flip 0x80808080): put_block's moves with the constants known, blocks
 * outer and rows inner so that each block's scale line and 64-byte quant
 * chunks are written whole while they are in L1.  In place, TinyLlama's
 * q4_0 matrices repacked at 8.9 GB/s instead of put_block's 4.4 (q8_0: 6.2
 * instead of 4.6; one thread, an ad-hoc loop over kern_x16_pack): the I/O
 * thread repacks every streamed layer (docs/offload.md). */
static inline void put_panel_simple(unsigned char *g, int64_t nbp, const unsigned char *rows, size_t rb, size_t bb,
                                    size_t qb, int chunks, uint32_t flip) {
    for (int64_t b = 0; b < nbp; b++) {
        unsigned char *sc = g + kern_x16_scale_offset(qb, nbp, b);
        unsigned char *q = g + kern_x16_quant_offset(qb, nbp, b);
        const unsigned char *src = rows + (size_t)b * bb;
        for (int i = 0; i < X16_ROWS; i++, src += rb) {
            memcpy(sc + 2 * i, src, 2);
            for (int j = 0; j < chunks; j++) {
                uint32_t v;
                memcpy(&v, src + 2 + 4 * j, 4);
                v ^= flip;
                memcpy(q + 64 * j + 4 * i, &v, 4);
            }
        }
    }
}

/* Group-panel [b0, b0 + nbp) of the 16 plain rows at rows (rb bytes apart)
 * into out (nbp blocks of the group). */
static void put_panel(uint32_t type, unsigned char *out, int64_t nbp, int64_t b0, const unsigned char *rows, size_t rb) {
    const size_t bb = block_bytes(type);
    rows += (size_t)b0 * bb;
    switch (type) {
    case KITE_DTYPE_Q4_0:
    case KITE_DTYPE_IQ4_NL: put_panel_simple(out, nbp, rows, rb, bb, 256, 4, 0); return;
    case KITE_DTYPE_Q8_0: put_panel_simple(out, nbp, rows, rb, bb, 512, 8, 0x80808080u); return;
    default:
        for (int64_t b = 0; b < nbp; b++)
            for (int i = 0; i < X16_ROWS; i++) put_block(type, out, nbp, b, i, rows + (size_t)i * rb + (size_t)b * bb);
    }
}

/* A group's 16 plain rows (at rows, rb bytes apart) into its panels, one
 * after the other at out (panel b0 at out + b0 * 16 blocks). */
static void put_group(uint32_t type, unsigned char *out, int64_t nb, const unsigned char *rows, size_t rb) {
    const int64_t pb = kern_x16_panel_blocks(type);
    const size_t gbb = X16_ROWS * block_bytes(type);
    for (int64_t b0 = 0; b0 < nb; b0 += pb) put_panel(type, out + (size_t)b0 * gbb, nb - b0 < pb ? nb - b0 : pb, b0, rows, rb);
}

/* The unit (one 16-row block, X16_ROWS * block_bytes) that belongs at unit
 * position q of the panel-major matrix, as its position in the group-major
 * one (group g's panels one after the other at g * nb). */
static int64_t unit_source(int64_t q, int64_t nb, int64_t pb, int64_t n_groups) {
    const int64_t b0 = q / (n_groups * pb) * pb; /* the panel holding q (the last one may be narrower) */
    const int64_t nbp = nb - b0 < pb ? nb - b0 : pb, r = q - n_groups * b0;
    return r / nbp * nb + b0 + r % nbp; /* group r / nbp, block b0 + r % nbp */
}

void kern_x16_pack(uint32_t type, void *data, int64_t nr, int64_t ne0, void *tmp) {
    KITE_ASSERT(kern_x16_type(type) && ne0 % kern_x16_block_elems(type) == 0);
    const int64_t nb = ne0 / kern_x16_block_elems(type), n_groups = nr / X16_ROWS, pb = kern_x16_panel_blocks(type);
    const size_t rb = (size_t)nb * block_bytes(type), gb = rb * X16_ROWS, gbb = X16_ROWS * block_bytes(type);
    unsigned char *d = data;
    /* each group in place of its own 16 rows, its panels one after the other */
    for (int64_t g = 0; g < n_groups; g++) {
        memcpy(tmp, d + (size_t)g * gb, gb);
        put_group(type, d + (size_t)g * gb, nb, tmp, rb);
    }
    if (nb <= pb) return; /* one panel: group-major is panel-major */
    /* then the panels of all groups gathered, panel 0 of every group first: a
     * permutation of the 16-row blocks (units) followed cycle by cycle, each
     * unit moved once, with one unit saved per cycle and a visited-bit map */
    const int64_t n_units = nb * n_groups;
    unsigned char *saved = tmp, *seen = (unsigned char *)tmp + gb;
    memset(seen, 0, unit_map_bytes(n_units));
    for (int64_t start = 0; start < n_units; start++) {
        if (seen[start / 8] & (1u << (start % 8))) continue;
        seen[start / 8] |= (unsigned char)(1u << (start % 8));
        int64_t q = start, src = unit_source(q, nb, pb, n_groups);
        if (src == start) continue;
        memcpy(saved, d + (size_t)start * gbb, gbb);
        while (src != start) { /* q takes its unit from src, which is then free */
            memcpy(d + (size_t)q * gbb, d + (size_t)src * gbb, gbb);
            seen[src / 8] |= (unsigned char)(1u << (src % 8));
            q = src;
            src = unit_source(q, nb, pb, n_groups);
        }
        memcpy(d + (size_t)q * gbb, saved, gbb);
    }
}

void kern_x16_row_block(uint32_t type, const void *data, int64_t nr, int64_t ne0, int64_t row, int64_t b, void *blk) {
    const int64_t nb = ne0 / kern_x16_block_elems(type), pb = kern_x16_panel_blocks(type), b0 = b / pb * pb;
    const int64_t nbp = nb - b0 < pb ? nb - b0 : pb;
    const unsigned char *gp =
        (const unsigned char *)data + kern_x16_panel_offset(type, nb, nr / X16_ROWS, row / X16_ROWS, b0);
    kern_x16_get_block(type, gp, nbp, b - b0, (int)(row % X16_ROWS), blk);
}

void kern_x16_unpack_row(uint32_t type, const void *data, int64_t nr, int64_t ne0, int64_t row, void *row_out) {
    unsigned char *o = row_out;
    const int64_t nb = ne0 / kern_x16_block_elems(type);
    for (int64_t b = 0; b < nb; b++) kern_x16_row_block(type, data, nr, ne0, row, b, o + (size_t)b * block_bytes(type));
}

void kern_x16_act_prep(const void *q8row, int64_t nb, int32_t off, int32_t *corr, float *da) {
    const unsigned char *x = q8row; /* rows need no alignment */
    for (int64_t b = 0; b < nb; b++, x += sizeof(block_q8_0)) {
        const int8_t *qs = (const int8_t *)(x + offsetof(block_q8_0, qs));
        int32_t s = 0;
        for (int k = 0; k < QK8_0; k++) s += qs[k];
        corr[b] = -off * s;
        uint16_t h;
        memcpy(&h, x + offsetof(block_q8_0, d), sizeof h);
        da[b] = fp16_to_fp32_inline(h);
    }
}
