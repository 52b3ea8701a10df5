/*
 * linalg.h - the dense linear algebra GPTQ needs: GEMM, Cholesky
 * factorisation, triangular and SPD inverses, and GPTQ's factor of the
 * inverse Hessian.
 *
 * DESIGN
 *   Two implementations of each factorisation:
 *     - textbook (la_cholesky_lower, la_spd_inverse,
 *       la_cholesky_inverse_upper): O(n^3) scalar loops, no allocation --
 *       the reference the blocked ones are tested against;
 *     - blocked (la_ctx): right-looking Cholesky and a row-block triangular
 *       inverse in blocks of LA_NB, every O(n^3) step a GEMM on the
 *       registry's register tiles (kernels/la_gemm.h: AVX-512 / AVX2 / scalar)
 *       split over the pool.
 *   GEMM (la_dgemm / la_sgemm, and la_sgemm_st for one thread with its own
 *   workspace) computes C += alpha * op(A) op(B), optionally only the tiles
 *   of C touching its lower triangle (SYRK-style); each C element is summed
 *   in the same order whatever the thread count or CPU level, so results
 *   are bit-identical across both.
 *
 *   GPTQ needs U upper with U^T U = H^-1.  With J the reversal permutation
 *   and L the Cholesky factor of J H J, U = J L^-1 J (U^T U = J L^-T L^-1 J
 *   = H^-1), so la_gptq_factor costs one Cholesky and one triangular inverse
 *   (2n^3/3 flops) instead of Cholesky, inverse and Cholesky again (4n^3/3).
 *
 *   Matrices are row-major; ld is the distance between rows in elements.
 *
 * THREAD SAFETY
 *   The textbook functions have no state.  A la_ctx is driven by one thread
 *   (it borrows a pool); la_sgemm_st is reentrant (own workspace).
 */
#ifndef KITE_QUANT_LINALG_H
#define KITE_QUANT_LINALG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "kernels/la_gemm.h"

/* ---- textbook (reference) ---------------------------------------------------- */

/* Lower Cholesky factor in place: on success the lower triangle of a holds L
 * with L L^T = a (the strict upper triangle is zeroed).  Returns false (a
 * partly overwritten) when a is not positive definite. */
bool la_cholesky_lower(double *a, int n);

/* Inverse of a symmetric positive definite matrix, in place (a becomes
 * a^-1, symmetric).  Returns false when a is not positive definite. */
bool la_spd_inverse(double *a, int n);

/* Upper Cholesky factor of the inverse, in place: a becomes U (upper
 * triangular, zeros below) with U^T U = a^-1 (what GPTQ's update rows are
 * taken from).  Returns false when a is not positive definite. */
bool la_cholesky_inverse_upper(double *a, int n);

/* ---- GEMM ------------------------------------------------------------------------ */

#define LA_KC 384  /* depth per packed slice (test_linalg --bench: 128 / 256 / 384 gave 27 / 31 / 34% of peak) */
#define LA_NB 128  /* block size of the blocked factorisations */

/* One GEMM operand: element (i, p) of op(X) is p[trans ? p*ld + i : i*ld + p]. */
typedef struct la_src {
    const void *p;
    int64_t ld;
    bool trans;
    bool f32;      /* elements are float (a double GEMM widens them while packing) */
} la_src;

typedef struct la_gemm_args {
    int64_t m, n, k;  /* C is m x n, op(A) m x k, op(B) k x n */
    double alpha;     /* C += alpha * op(A) op(B) */
    la_src a, b;
    void *c;          /* float (la_sgemm*) or double (la_dgemm) */
    int64_t ldc;
    bool lower;       /* only tiles of C holding an element i >= j are computed (m == n);
                         other elements of tiles on the diagonal may change too */
} la_gemm_args;

/* Bytes of workspace one thread of a GEMM over `rows` rows of C needs
 * (its packed rows of A and a packed B slice). */
size_t la_gemm_ws_bytes(int64_t rows);

/* Single-threaded float GEMM with caller's workspace (la_gemm_ws_bytes(m)),
 * on the kernels ops (kern_la_*).  a and b must be float. */
void la_sgemm_st(const kern_la_ops *ops, const la_gemm_args *g, void *ws);

typedef struct la_ctx la_ctx;

/* A context on pool tp (borrowed; tp_n_threads workers), kernels of the
 * active registry level (or ops, if not NULL: tests).  Returns NULL on OOM
 * (kite_last_error set). */
la_ctx *la_ctx_new(threadpool *tp, const kern_la_ops *ops);
void la_ctx_free(la_ctx *c); /* NULL is a no-op */
const kern_la_ops *la_ctx_ops(const la_ctx *c);
/* Whether a workspace allocation failed (the GEMM that needed it did
 * nothing; kite_last_error says so).  Sticky. */
bool la_ctx_failed(const la_ctx *c);

/* Threaded GEMMs (C double / float). */
void la_dgemm(la_ctx *c, const la_gemm_args *g);
void la_sgemm(la_ctx *c, const la_gemm_args *g);

/* ---- blocked factorisations --------------------------------------------------------- */

/* la_cholesky_lower's contract, blocked and threaded: the lower triangle of
 * a (n x n) becomes L, the strict upper triangle zero.  Returns false when a
 * is not positive definite or memory ran out (la_ctx_failed; a partly
 * overwritten). */
bool la_cholesky_lower_blocked(la_ctx *c, double *a, int n);

/* Inverse of a lower triangular matrix (non-zero diagonal) in place:
 * lower triangle of a -> L^-1, strict upper triangle must be zero and stays
 * zero.  Returns false on a zero or non-finite diagonal. */
bool la_tri_lower_inverse_blocked(la_ctx *c, double *a, int n);

/* la_cholesky_inverse_upper's result (U upper, U^T U = a^-1), through one
 * Cholesky and one triangular inverse of the reversed matrix (see DESIGN).
 * Returns false when a is not positive definite. */
bool la_gptq_factor(la_ctx *c, double *a, int n);

/* Wall seconds, floating-point operations (a multiply-add counts 2) and
 * process CPU seconds spent in this context's GEMMs and factorisations so far
 * (benchmarks; cpu_seconds may be NULL). */
void la_ctx_stats(const la_ctx *c, double *seconds /* OUT */, double *flops /* OUT */, double *cpu_seconds /* OUT */);

#endif
