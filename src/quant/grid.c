/*
 * grid.c - group grids of the legacy block types (see grid.h).
 *
 * DESIGN
 *   qgrid_fit mirrors tensor/quant_legacy.c's reference quantizers step by
 *   step (signed absmax / -2^(b-1) for the symmetric types, (max - min) /
 *   (2^b - 1) for the asymmetric ones, absmax / 127 for q8_0, id = 1/d
 *   unrounded), so a 32-element group packs to the reference's bytes
 *   (tests/unit/test_gptq.c checks this on random data).
 *
 * THREAD SAFETY
 *   No state.
 */
#include "quant/grid.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* bit-exactness with the reference quantizers */
#endif

static int native_bits(uint32_t type) {
    switch (type) {
    case KITE_DTYPE_Q4_0:
    case KITE_DTYPE_Q4_1: return 4;
    case KITE_DTYPE_Q5_0:
    case KITE_DTYPE_Q5_1: return 5;
    case KITE_DTYPE_Q8_0: return 8;
    default: return 0;
    }
}

bool qgrid_supported(uint32_t type, int bits) {
    int nb = native_bits(type);
    if (!nb) return false;
    if (bits == 0 || bits == nb) return true;
    return type != KITE_DTYPE_Q8_0 && bits >= 2 && bits < nb;
}

void qgrid_fit(uint32_t type, int bits, const float *x, int n, qgrid *g) {
    const int nb = native_bits(type);
    KITE_ASSERT(nb && n > 0);
    if (bits == 0) bits = nb;
    memset(g, 0, sizeof *g);
    if (type == KITE_DTYPE_Q8_0) {
        float amax = 0.0f;
        for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        g->id = d != 0.0f ? 1.0f / d : 0.0f;
        g->dh = fp32_to_fp16(d);
        g->d16 = fp16_to_fp32(g->dh);
        g->qmin = -127;
        g->qmax = 127;
        g->off = 0;
    } else if (type == KITE_DTYPE_Q4_0 || type == KITE_DTYPE_Q5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < n; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const int half = 1 << (bits - 1);   /* 8 for 4 bits: codes -8..7 */
        const int off = 1 << (nb - 1);      /* container offset: 8 (q4_0), 16 (q5_0) */
        const float d = max / (float)-half; /* the largest element -> the most negative code */
        g->id = d != 0.0f ? 1.0f / d : 0.0f;
        g->dh = fp32_to_fp16(d);
        g->d16 = fp16_to_fp32(g->dh);
        g->off = off;
        g->qmin = off - half;
        g->qmax = off + half - 1;
    } else { /* q4_1, q5_1 */
        float mn = FLT_MAX, mx = -FLT_MAX;
        for (int j = 0; j < n; j++) {
            if (x[j] < mn) mn = x[j];
            if (x[j] > mx) mx = x[j];
        }
        const int levels = (1 << bits) - 1;
        const float d = (mx - mn) / (float)levels;
        g->id = d != 0.0f ? 1.0f / d : 0.0f;
        g->m = mn;
        g->dh = fp32_to_fp16(d);
        g->mh = fp32_to_fp16(mn);
        g->d16 = fp16_to_fp32(g->dh);
        g->m16 = fp16_to_fp32(g->mh);
        g->off = -1;
        g->qmin = 0;
        g->qmax = levels;
    }
}

static void pack5(const int *q, uint8_t *qs, uint8_t *qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh_bytes[k] = (uint8_t)(qh >> (8 * k));
}

void qgrid_pack(uint32_t type, const qgrid *g, const int *c, void *dst) {
    switch (type) {
    case KITE_DTYPE_Q4_0: {
        block_q4_0 *b = dst;
        b->d = g->dh;
        for (int j = 0; j < 16; j++) b->qs[j] = (uint8_t)(c[j] | (c[j + 16] << 4));
        break;
    }
    case KITE_DTYPE_Q4_1: {
        block_q4_1 *b = dst;
        b->d = g->dh;
        b->m = g->mh;
        for (int j = 0; j < 16; j++) b->qs[j] = (uint8_t)(c[j] | (c[j + 16] << 4));
        break;
    }
    case KITE_DTYPE_Q5_0: {
        block_q5_0 *b = dst;
        b->d = g->dh;
        pack5(c, b->qs, b->qh);
        break;
    }
    case KITE_DTYPE_Q5_1: {
        block_q5_1 *b = dst;
        b->d = g->dh;
        b->m = g->mh;
        pack5(c, b->qs, b->qh);
        break;
    }
    case KITE_DTYPE_Q8_0: {
        block_q8_0 *b = dst;
        b->d = g->dh;
        for (int j = 0; j < 32; j++) b->qs[j] = (int8_t)c[j];
        break;
    }
    default: KITE_ASSERT(!"qgrid_pack: type without a grid");
    }
}

void qgrid_quantize_row(uint32_t type, int bits, int group, const float *x, int64_t n, void *dst) {
    KITE_ASSERT(n % QGRID_BLOCK == 0 && group > 0 && group % QGRID_BLOCK == 0);
    const size_t bsz = (size_t)dtype_get(type)->type_size;
    uint8_t *out = dst;
    int codes[QGRID_BLOCK];
    for (int64_t g0 = 0; g0 < n; g0 += group) {
        const int len = (int)(n - g0 < group ? n - g0 : group);
        qgrid g;
        qgrid_fit(type, bits, x + g0, len, &g);
        for (int b = 0; b < len; b += QGRID_BLOCK) {
            for (int j = 0; j < QGRID_BLOCK; j++) codes[j] = qgrid_code(&g, x[g0 + b + j]);
            qgrid_pack(type, &g, codes, out + (size_t)((g0 + b) / QGRID_BLOCK) * bsz);
        }
    }
}

/* ---- q3_K ---------------------------------------------------------------------- */

static_assert(sizeof(block_q3_K) == sizeof(((q3k_grid *)0)->fit), "q3k_grid holds one block_q3_K");

/* 6-bit scale j (0..15) of a q3_K block, minus 32 (the packing of quant_k.c). */
static int q3k_scale(const uint8_t *sc, int j) {
    const int low = j < 8 ? sc[j] & 0x0f : sc[j - 8] >> 4;
    const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | high << 4) - 32;
}

void q3k_fit(const float *x, q3k_grid *g) {
    block_q3_K b;
    quantize_row_q3_K_ref(x, &b, QK_K);
    memcpy(g->fit, &b, sizeof b);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < 16; j++) g->dl[j] = d * (float)q3k_scale(b.scales, j);
}

int q3k_code(const q3k_grid *g, int e, float x) {
    const float dl = g->dl[e / 16];
    if (dl == 0.0f) { /* the reference keeps its search's code here (value 0 either way) */
        block_q3_K b;
        memcpy(&b, g->fit, sizeof b);
        const int r = e % 32, q2 = (b.qs[32 * (e / 128) + r] >> (2 * ((e / 32) % 4))) & 3;
        return q2 + 4 * ((b.hmask[r] >> (e / 32)) & 1);
    }
    const float t = x / dl;
    if (!(t < 8.0f)) return 7; /* also NaN; keeps quant_nearest_int in its valid range */
    if (t < -8.0f) return 0;
    int c = quant_nearest_int(t);
    c = c < -4 ? -4 : (c > 3 ? 3 : c);
    return c + 4;
}

void q3k_pack(const q3k_grid *g, const int *codes, void *dst) {
    block_q3_K b;
    memcpy(&b, g->fit, sizeof b);
    memset(b.hmask, 0, sizeof b.hmask);
    memset(b.qs, 0, sizeof b.qs);
    for (int e = 0; e < QK_K; e++) {
        int l = codes[e];
        if (l > 3) {
            b.hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            l -= 4;
        }
        b.qs[32 * (e / 128) + e % 32] |= (uint8_t)(l << (2 * ((e / 32) % 4)));
    }
    memcpy(dst, &b, sizeof b);
}
