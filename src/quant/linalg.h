/*
 * linalg.h - the dense linear algebra GPTQ needs: Cholesky factorisation and
 * the inverse of a symmetric positive definite matrix, in double.
 *
 * Matrices are row-major n x n arrays of double.  Costs are O(n^3) (about
 * n^3/3 multiply-adds for the factorisation, n^3 for the inverse), no
 * allocation, no state: thread-safe.
 */
#ifndef KITE_QUANT_LINALG_H
#define KITE_QUANT_LINALG_H

#include <stdbool.h>

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

#endif
