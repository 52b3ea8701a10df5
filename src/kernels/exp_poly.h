/*
 * exp_poly.h - the one exp polynomial of the kernels, and its contract.
 *
 * CONTRACT
 *   exp(x) = 2^n * e^r with n = round(x * log2 e) and r = x - n ln2, where
 *   ln2 = KERN_EXP_LN2_HI - KERN_EXP_LN2_LO (LN2_HI has 9 significant bits,
 *   so n * LN2_HI is exact for |n| < 2^15) and |r| <= ln2/2 + a rounding;
 *   e^r is its Taylor polynomial to r^7 (truncation < 6e-9 relative) in
 *   Horner form from KERN_EXP_C7 down to KERN_EXP_C0:
 *     p = C7;  p = p*r + C6;  ...;  p = p*r + C0
 *   Each step is either FUSED (one rounding: an FMA) or a multiply then an
 *   add (two roundings).  A kernel's exp is defined by that choice, its
 *   clamp and its scaling by 2^n; the ISA versions of one kernel execute the
 *   same float operations in the same order, so they give the same bits:
 *     element-wise ops (ops_simd.h, "ops_exp"): fused steps, n by round to
 *       nearest even, clamp to [OPS_EXP_LO, OPS_EXP_HI], times 2^n as two
 *       exact power-of-two factors (one rounding, at the end); <= 2 ulp
 *       from expf (test_ops.c).  Scalar level: libm expf instead.
 *     attention (attention_impl.h, attn_exp): unfused steps, n by the
 *       1.5 * 2^23 rounding trick, clamp to [KERN_EXP_ATTN_LO,
 *       KERN_EXP_ATTN_HI], +0 below ATTN_EXP_FLUSH; <= 2 ulp from exp
 *       (test_attention.c).  Scalar level: kern_exp_poly below, the same bits.
 *   One implementation per ISA: this file (scalar), x86_avx2/exp_avx2.h (8
 *   lanes), x86_avx512/exp_avx512.h (16 lanes).
 */
#ifndef KITE_KERNELS_EXP_POLY_H
#define KITE_KERNELS_EXP_POLY_H

#define KERN_EXP_LOG2E 1.44269504088896341f
#define KERN_EXP_LN2_HI 0.693359375f
#define KERN_EXP_LN2_LO 2.12194440e-4f /* ln2 = LN2_HI - LN2_LO */
#define KERN_EXP_C7 (1.0f / 5040.0f)
#define KERN_EXP_C6 (1.0f / 720.0f)
#define KERN_EXP_C5 (1.0f / 120.0f)
#define KERN_EXP_C4 (1.0f / 24.0f)
#define KERN_EXP_C3 (1.0f / 6.0f)
#define KERN_EXP_C2 0.5f
#define KERN_EXP_C1 1.0f
#define KERN_EXP_C0 1.0f

/* ops_exp's range: inputs are clamped to [OPS_EXP_LO, OPS_EXP_HI] first
 * (NaN passes through), which already gives 0 and +inf at the ends. */
#define OPS_EXP_LO -105.0f
#define OPS_EXP_HI 89.0f

/* attn_exp's clamp, and its flush: below ATTN_EXP_FLUSH the result is +0
 * (attention_impl.h says why) */
#define KERN_EXP_ATTN_LO -87.33f
#define KERN_EXP_ATTN_HI 88.0f
#define ATTN_EXP_FLUSH (-80.0f)

/* The polynomial in float, multiply then add per step (attn_exp's). */
static inline float kern_exp_poly(float r) {
    float p = KERN_EXP_C7;
    p = p * r + KERN_EXP_C6;
    p = p * r + KERN_EXP_C5;
    p = p * r + KERN_EXP_C4;
    p = p * r + KERN_EXP_C3;
    p = p * r + KERN_EXP_C2;
    p = p * r + KERN_EXP_C1;
    p = p * r + KERN_EXP_C0;
    return p;
}

#endif
