/*
 * linalg.c - Cholesky factorisation and SPD inverse (see linalg.h).
 *
 * DESIGN
 *   Textbook algorithms in double, row-major: Cholesky-Banachiewicz for L,
 *   the inverse as L^-T L^-1 (L inverted in place by forward substitution),
 *   and the upper factor of the inverse as the transpose of the lower factor
 *   of the inverse.  A pivot <= 0 (or NaN) reports "not positive definite".
 *
 * THREAD SAFETY
 *   No state.
 */
#include "quant/linalg.h"

#include <math.h>

bool la_cholesky_lower(double *a, int n) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double s = a[(long)i * n + j];
            const double *ri = a + (long)i * n, *rj = a + (long)j * n;
            for (int k = 0; k < j; k++) s -= ri[k] * rj[k];
            if (i == j) {
                if (!(s > 0.0)) return false;
                a[(long)i * n + i] = sqrt(s);
            } else {
                a[(long)i * n + j] = s / rj[j];
            }
        }
        for (int j = i + 1; j < n; j++) a[(long)i * n + j] = 0.0;
    }
    return true;
}

bool la_spd_inverse(double *a, int n) {
    if (!la_cholesky_lower(a, n)) return false;
    /* invert L in place (lower triangular): column by column */
    for (int j = 0; j < n; j++) {
        a[(long)j * n + j] = 1.0 / a[(long)j * n + j];
        for (int i = j + 1; i < n; i++) {
            double s = 0.0;
            for (int k = j; k < i; k++) s += a[(long)i * n + k] * a[(long)k * n + j];
            a[(long)i * n + j] = -s / a[(long)i * n + i];
        }
    }
    /* a^-1 = L^-T L^-1: entry (i, j), i <= j, = sum_{k >= j} M[k][i] M[k][j]
     * with M = L^-1 (lower).  Computed into the upper triangle row by row
     * from the top: entry (i, j) reads M's columns i and j at rows k >= j;
     * writing (i, j >= i) only replaces M entries that no later entry reads
     * (the zeros above M's diagonal, and M[i][i], whose column i is not
     * read again once row i is done). */
    for (int i = 0; i < n; i++) {
        for (int j = i; j < n; j++) {
            double s = 0.0;
            for (int k = j; k < n; k++) s += a[(long)k * n + i] * a[(long)k * n + j];
            a[(long)i * n + j] = s;
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) a[(long)i * n + j] = a[(long)j * n + i];
    return true;
}

bool la_cholesky_inverse_upper(double *a, int n) {
    if (!la_spd_inverse(a, n) || !la_cholesky_lower(a, n)) return false;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            a[(long)i * n + j] = a[(long)j * n + i];
            a[(long)j * n + i] = 0.0;
        }
    return true;
}
