/*
 * gemm_driver.h - the one flat-GEMM driver: defines a kern_gemm_fn
 * (dispatch.h) from a register-blocked micro-kernel, for the reference, AVX2,
 * AVX-VNNI and AVX-512 VNNI kernels alike.
 *
 * DESIGN
 *   KERNEL(nb, y, ldy, w, w_stride, a, a_stride, NR, NT) computes the
 *   outputs y[t*ldy + r] of NR weight rows at w (w_stride bytes apart) with
 *   NT activation rows at a (a_stride bytes apart), nb blocks each; NR and NT
 *   are compile-time constants at every call the driver makes, so an inline
 *   kernel is specialised per tile.  The driver cuts nr rows into tiles of MR
 *   (then single rows) and nt tokens into groups of MT, in one of two orders:
 *     ROWS_OUTER    a row tile stays in L1 while every token group passes
 *                   over it: full groups of MT tokens, then one token at a
 *                   time; the single rows one token per call;
 *     TOKENS_OUTER  a token group's activations stay in L1 while every row
 *                   tile passes over them: groups of up to MT tokens (the
 *                   last group's count dispatched to a constant); the single
 *                   rows take a group's tokens in one call
 *                   (KERN_GEMM_TAIL_GROUPED) or one per call
 *                   (KERN_GEMM_TAIL_SINGLE).
 *
 * INVARIANTS
 *   Grouping never changes an output: the kernels compute each output with
 *   the same instruction sequence whatever NR and NT, and vec_dot is the
 *   kernel at NR = NT = 1, so gemm equals vec_dot bit for bit (dispatch.h's
 *   contract; test_kernels.c and test_registry.c check it).  MT <= 4.
 *
 * Include from kernel .c files (any folder: the header has no ISA code).
 */
#ifndef KITE_KERNELS_GEMM_DRIVER_H
#define KITE_KERNELS_GEMM_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* KERNEL on NR rows at wr for the tn (1..MT) tokens at at, written at yt + r;
 * the counts above MT cannot occur and generate no code. */
#define KERN_GEMM_TILE_(KERNEL, NR, MT)                                                                     \
    switch (tn) {                                                                                           \
    case 1: KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 1); break;                              \
    case 2:                                                                                                 \
        if ((MT) >= 2) KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 2);                          \
        else __builtin_unreachable();                                                                       \
        break;                                                                                              \
    case 3:                                                                                                 \
        if ((MT) >= 3) KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 3);                          \
        else __builtin_unreachable();                                                                       \
        break;                                                                                              \
    default:                                                                                                \
        if ((MT) >= 4) KERNEL(nb, yt + r, ldy, wr, w_stride, at, a_stride, NR, 4);                          \
        else __builtin_unreachable();                                                                       \
        break;                                                                                              \
    }

/* A single row (at wr) with the group's tn tokens: in one call ... */
#define KERN_GEMM_TAIL_GROUPED(KERNEL, MT) KERN_GEMM_TILE_(KERNEL, 1, MT)
/* ... or one call per token. */
#define KERN_GEMM_TAIL_SINGLE(KERNEL, MT)                                                                   \
    for (int k = 0; k < tn; k++)                                                                            \
        KERNEL(nb, yt + (int64_t)k * ldy + r, ldy, wr, w_stride, at + (size_t)k * a_stride, a_stride, 1, 1);

/* Defines the kern_gemm_fn NAME over KERNEL for blocks of QK values: row
 * tiles of MR, token groups of MT, in ORDER (ROWS_OUTER or TOKENS_OUTER,
 * pasted: no dead loop nest), single rows by TAIL (TOKENS_OUTER only). */
#define KERN_GEMM_DRIVER(NAME, KERNEL, QK, MR, MT, ORDER, TAIL)                                             \
    void NAME(int64_t n, float *y, int64_t ldy, const void *w, size_t w_stride, int nr, const void *a,      \
              size_t a_stride, int nt) {                                                                    \
        const int64_t nb = n / (QK);                                                                        \
        const unsigned char *wp = w, *ap = a;                                                               \
        KERN_GEMM_LOOPS_##ORDER(KERNEL, MR, MT, TAIL)                                                       \
    }

#define KERN_GEMM_GROUP_(MT)                                                                                \
    const int tn = nt - t < (MT) ? nt - t : (MT);                                                           \
    const unsigned char *at = ap + (size_t)t * a_stride;                                                    \
    float *yt = y + (int64_t)t * ldy;

#define KERN_GEMM_LOOPS_TOKENS_OUTER(KERNEL, MR, MT, TAIL)                                                  \
    for (int t = 0; t < nt; t += (MT)) {                                                                    \
        KERN_GEMM_GROUP_(MT)                                                                                \
        int r = 0;                                                                                          \
        for (; r + (MR) <= nr; r += (MR)) {                                                                 \
            const unsigned char *wr = wp + (size_t)r * w_stride;                                            \
            KERN_GEMM_TILE_(KERNEL, MR, MT)                                                                 \
        }                                                                                                   \
        for (; r < nr; r++) {                                                                               \
            const unsigned char *wr = wp + (size_t)r * w_stride;                                            \
            TAIL(KERNEL, MT)                                                                                \
        }                                                                                                   \
    }

#define KERN_GEMM_LOOPS_ROWS_OUTER(KERNEL, MR, MT, TAIL)                                                    \
    int r = 0;                                                                                              \
    for (; r + (MR) <= nr; r += (MR)) {                                                                     \
        const unsigned char *wr = wp + (size_t)r * w_stride;                                                \
        int t = 0;                                                                                          \
        if ((MT) > 1)                                                                                       \
            for (; t + (MT) <= nt; t += (MT))                                                               \
                KERNEL(nb, y + (int64_t)t * ldy + r, ldy, wr, w_stride, ap + (size_t)t * a_stride, a_stride, MR, MT); \
        for (; t < nt; t++)                                                                                 \
            KERNEL(nb, y + (int64_t)t * ldy + r, ldy, wr, w_stride, ap + (size_t)t * a_stride, a_stride, MR, 1);  \
    }                                                                                                       \
    for (; r < nr; r++)                                                                                     \
        for (int t = 0; t < nt; t++)                                                                        \
            KERNEL(nb, y + (int64_t)t * ldy + r, ldy, wp + (size_t)r * w_stride, w_stride, ap + (size_t)t * a_stride, \
                   a_stride, 1, 1);

/* The flat GEMM of a vec_dot DOT (kern_vec_dot_fn): one output per call,
 * each weight row used for all nt activation rows while it sits in L1. */
#define KERN_DEFINE_GEMM(NAME, DOT)                                                                         \
    static inline void NAME##_tile_(int64_t nb, float *y, int64_t ldy, const unsigned char *w, size_t ws,   \
                                    const unsigned char *a, size_t as, int nr_, int nt_) {                  \
        (void)ldy, (void)ws, (void)as, (void)nr_, (void)nt_;                                                \
        DOT(nb, y, w, a);                                                                                   \
    }                                                                                                       \
    KERN_GEMM_DRIVER(NAME, NAME##_tile_, 1, 1, 1, ROWS_OUTER, KERN_GEMM_TAIL_SINGLE)

#endif
