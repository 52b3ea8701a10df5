/*
 * quants.h - reference (scalar) quantizers and dequantizers of the ggml block
 * formats (layouts in blocks.h).
 *
 * These are the specification the SIMD kernels are tested against, and they
 * are bit-compatible with ggml: dequantize_row_* evaluates the same formula in
 * the same operation order as ggml's scalar code, so the floats are identical,
 * and quantize_row_*_ref follows ggml's reference (round-to-nearest and, for
 * the k-quants, the same scale search) so the bytes are identical.
 *
 * Contracts shared by every function here:
 *   - n is the number of elements, a multiple of the type's block size
 *     (32 for the legacy types and IQ4_NL, QK_K = 256 for the others);
 *     callers guarantee it (KITE_ASSERT-level invariant, not input checking).
 *   - src/dst hold n elements (n / block_size blocks).  Block pointers must
 *     be aligned to 2 bytes (the fp16 fields), 4 for block_q8_K (float d);
 *     GGUF tensor data and malloc'd buffers are.
 *   - no allocation, no global state: thread-safe, reentrant.
 *   - quantize_row_iq4_nl_ref / _iq4_xs_ref use the 7-trial scale search
 *     of llama-quantize (ggml's quantize_iq4_nl/_xs without imatrix), so
 *     their bytes equal those in model files; see docs/quantization/formats.md.
 *
 * Implementations: quant_legacy.c (q4_0 .. q8_1), quant_k.c (q2_K .. q8_K),
 * quant_iq.c (iq4_nl, iq4_xs, tq1_0, tq2_0).  The traits table in dtype.c
 * points at these for to_float / from_float.
 */
#ifndef KITE_TENSOR_QUANTS_H
#define KITE_TENSOR_QUANTS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- legacy 32-element blocks (quant_legacy.c) ------------------------- */
void dequantize_row_q4_0(const void *src, float *dst, int64_t n);
void dequantize_row_q4_1(const void *src, float *dst, int64_t n);
void dequantize_row_q5_0(const void *src, float *dst, int64_t n);
void dequantize_row_q5_1(const void *src, float *dst, int64_t n);
void dequantize_row_q8_0(const void *src, float *dst, int64_t n);
void dequantize_row_q8_1(const void *src, float *dst, int64_t n); /* ignores s */

void quantize_row_q4_0_ref(const float *src, void *dst, int64_t n);
void quantize_row_q4_1_ref(const float *src, void *dst, int64_t n);
void quantize_row_q5_0_ref(const float *src, void *dst, int64_t n);
void quantize_row_q5_1_ref(const float *src, void *dst, int64_t n);
void quantize_row_q8_0_ref(const float *src, void *dst, int64_t n);
void quantize_row_q8_1_ref(const float *src, void *dst, int64_t n); /* also fills s = d*sum(qs) */

/* ---- k-quants, 256-element super-blocks (quant_k.c) -------------------- */
void dequantize_row_q2_K(const void *src, float *dst, int64_t n);
void dequantize_row_q3_K(const void *src, float *dst, int64_t n);
void dequantize_row_q4_K(const void *src, float *dst, int64_t n);
void dequantize_row_q5_K(const void *src, float *dst, int64_t n);
void dequantize_row_q6_K(const void *src, float *dst, int64_t n);
void dequantize_row_q8_K(const void *src, float *dst, int64_t n);

void quantize_row_q2_K_ref(const float *src, void *dst, int64_t n);
void quantize_row_q3_K_ref(const float *src, void *dst, int64_t n);
void quantize_row_q4_K_ref(const float *src, void *dst, int64_t n);
void quantize_row_q5_K_ref(const float *src, void *dst, int64_t n);
void quantize_row_q6_K_ref(const float *src, void *dst, int64_t n);
void quantize_row_q8_K_ref(const float *src, void *dst, int64_t n); /* also fills bsums */

/* ---- non-linear / ternary (quant_iq.c) --------------------------------- */
void dequantize_row_iq4_nl(const void *src, float *dst, int64_t n);
void dequantize_row_iq4_xs(const void *src, float *dst, int64_t n);
void dequantize_row_tq1_0(const void *src, float *dst, int64_t n);
void dequantize_row_tq2_0(const void *src, float *dst, int64_t n);

void quantize_row_iq4_nl_ref(const float *src, void *dst, int64_t n);
void quantize_row_iq4_xs_ref(const float *src, void *dst, int64_t n);
void quantize_row_tq1_0_ref(const float *src, void *dst, int64_t n);
void quantize_row_tq2_0_ref(const float *src, void *dst, int64_t n);

/* ---- importance-weighted (llama-quantize --imatrix) ----------------------
 * One row of n elements; qw[0..n) the importance of each column.  Bytes
 * equal ggml's quantize_<type>() with quant_weights (its *_impl functions):
 * element weights qw * sqrt(sigma2 + x^2) (q6_K: qw alone) and the weighted
 * searches below.  Types not listed ignore the importance (as ggml). */
void quantize_row_q4_0_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q4_1_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q5_0_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q5_1_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q2_K_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q3_K_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q4_K_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q5_K_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_q6_K_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_iq4_nl_imat(const float *src, void *dst, int64_t n, const float *qw);
void quantize_row_iq4_xs_imat(const float *src, void *dst, int64_t n, const float *qw);

/* The scale searches (quant_k.c), shared by the encoders of quant_*.c:
 *   symmetric  codes 0..2*nmax-1 (nmax meaning 0), weights qw or x^2 (NULL);
 *              returns the scale (ggml's make_qx_quants, rmse_type 1);
 *   affine     codes 0..nmax with a min <= 0 (out: -min), weighted trials
 *              rmin + rdelta*k, k = 0..nstep (make_qkx2/qkx3_quants);
 *   positive   codes 0..nmax of x >= 0 under weights w (make_qp_quants). */
float quant_search_symmetric(int n, int nmax, const float *x, int8_t *L, const float *qw);
float quant_search_affine(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *min_out,
                          uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);
float quant_search_positive(int n, int nmax, const float *x, uint8_t *L, const float *w);

/* Round to the nearest integer, ties to even, by adding 1.5 * 2^23 and
 * reading the mantissa (the trick ggml's k-quant search uses, so results
 * match it exactly).  Valid for |f| <= 4194303; larger inputs give garbage
 * (never UB). */
static inline int quant_nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* The 16-entry IQ4_NL / IQ4_XS codebook (ascending, int8), for kernels. */
extern const int8_t kite_iq4nl_values[16];

/* 6-bit scale m and min of sub-block j (0..7) from q4_K/q5_K packed scales.
 * Inline: the x16 repack calls it 8 times per block of every row it packs. */
static inline void kite_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else { /* low 4 bits in q[j+4], high 2 bits in the top of q[j-4] / q[j] */
        *d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
