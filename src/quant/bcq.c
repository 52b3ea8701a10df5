/* bcq.c - binary-coding quantization fit and LUT-GEMM GEMV (bcq.h). */
#include "quant/bcq.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kite.h"

int bcq_alloc(bcq_matrix *m, int32_t rows, int32_t cols, int32_t bits, int32_t group) {
    memset(m, 0, sizeof *m);
    if (rows < 1 || cols < 1 || bits < 1 || bits > BCQ_MAX_BITS || group < 8 || group > 512 || group % 8 != 0)
        return err_set(KITE_E_ARG,
                       "bcq: bad shape %dx%d, %d bits, group %d (need bits 1..%d, group a multiple of 8 up to 512)",
                       rows, cols, bits, group, BCQ_MAX_BITS);
    m->rows = rows;
    m->cols = cols;
    m->cols8 = (cols + 7) / 8 * 8;
    m->bits = bits;
    m->group = group;
    m->n_groups = (m->cols8 + group - 1) / group;
    m->planes = calloc((size_t)rows * (size_t)bits * (size_t)(m->cols8 / 8), 1);
    m->alpha = calloc((size_t)rows * (size_t)m->n_groups * (size_t)bits, sizeof *m->alpha);
    if (!m->planes || !m->alpha) {
        bcq_free(m);
        return err_set(KITE_E_NOMEM, "bcq: out of memory for %dx%d", rows, cols);
    }
    return KITE_OK;
}

void bcq_free(bcq_matrix *m) {
    free(m->planes);
    free(m->alpha);
    memset(m, 0, sizeof *m);
}

static uint8_t *plane_row(const bcq_matrix *m, int32_t r, int32_t i) {
    return m->planes + ((size_t)r * (size_t)m->bits + (size_t)i) * (size_t)(m->cols8 / 8);
}

static float *alpha_at(const bcq_matrix *m, int32_t r, int32_t g) {
    return m->alpha + ((size_t)r * (size_t)m->n_groups + (size_t)g) * (size_t)m->bits;
}

/* Solves the q x q symmetric system A a = b in place (Gaussian elimination
 * with partial pivoting, double); returns 0, or -1 if singular. */
static int solve(double *A, double *b, int q) {
    for (int c = 0; c < q; c++) {
        int p = c;
        for (int r = c + 1; r < q; r++)
            if (fabs(A[r * q + c]) > fabs(A[p * q + c])) p = r;
        if (fabs(A[p * q + c]) < 1e-12) return -1;
        if (p != c) {
            for (int k = 0; k < q; k++) {
                const double t = A[c * q + k];
                A[c * q + k] = A[p * q + k];
                A[p * q + k] = t;
            }
            const double t = b[c];
            b[c] = b[p];
            b[p] = t;
        }
        for (int r = c + 1; r < q; r++) {
            const double f = A[r * q + c] / A[c * q + c];
            for (int k = c; k < q; k++) A[r * q + k] -= f * A[c * q + k];
            b[r] -= f * b[c];
        }
    }
    for (int r = q - 1; r >= 0; r--) {
        double s = b[r];
        for (int k = r + 1; k < q; k++) s -= A[r * q + k] * b[k];
        b[r] = s / A[r * q + r];
    }
    return 0;
}

/* Sign of column j in plane mask form: bit i of s[j] set = b_i[j] = +1. */
static double group_error(const float *w, const uint8_t *s, const double *a, int n, int q) {
    double e = 0.0;
    for (int j = 0; j < n; j++) {
        double v = 0.0;
        for (int i = 0; i < q; i++) v += (s[j] >> i & 1) ? a[i] : -a[i];
        e += (w[j] - v) * (w[j] - v);
    }
    return e;
}

/* Fits one group w[n] (n <= group): signs s[n] (bit masks), alphas a[q]. */
static double fit_group(const float *w, int n, int q, int iters, uint8_t *s, double *a) {
    /* greedy start */
    double r[512];
    for (int j = 0; j < n; j++) {
        r[j] = w[j];
        s[j] = 0;
    }
    for (int i = 0; i < q; i++) {
        double mean = 0.0;
        for (int j = 0; j < n; j++) mean += fabs(r[j]);
        a[i] = mean / n;
        for (int j = 0; j < n; j++) {
            if (r[j] >= 0) {
                s[j] |= (uint8_t)(1u << i);
                r[j] -= a[i];
            } else {
                r[j] += a[i];
            }
        }
    }
    double err = group_error(w, s, a, n, q);
    for (int it = 0; it < iters; it++) {
        /* alphas for fixed signs: (B^T B) a = B^T w */
        double A[BCQ_MAX_BITS * BCQ_MAX_BITS] = {0}, b[BCQ_MAX_BITS] = {0};
        for (int j = 0; j < n; j++)
            for (int i = 0; i < q; i++) {
                const double bi = (s[j] >> i & 1) ? 1.0 : -1.0;
                b[i] += bi * w[j];
                for (int k = 0; k < q; k++) A[i * q + k] += bi * ((s[j] >> k & 1) ? 1.0 : -1.0);
            }
        double na[BCQ_MAX_BITS];
        memcpy(na, b, sizeof na);
        if (solve(A, na, q) == 0) {
            const double e = group_error(w, s, na, n, q);
            if (e <= err) {
                memcpy(a, na, sizeof(double) * (size_t)q);
                err = e;
            }
        }
        /* signs for fixed alphas: the best of the 2^q patterns per weight */
        double val[1 << BCQ_MAX_BITS];
        for (int p = 0; p < (1 << q); p++) {
            double v = 0.0;
            for (int i = 0; i < q; i++) v += (p >> i & 1) ? a[i] : -a[i];
            val[p] = v;
        }
        for (int j = 0; j < n; j++) {
            int best = s[j];
            double be = (w[j] - val[best]) * (w[j] - val[best]);
            for (int p = 0; p < (1 << q); p++) {
                const double e = (w[j] - val[p]) * (w[j] - val[p]);
                if (e < be) be = e, best = p;
            }
            s[j] = (uint8_t)best;
        }
        const double e = group_error(w, s, a, n, q);
        const bool converged = err - e <= 1e-12 * (err + 1e-30);
        err = e;
        if (converged) break;
    }
    return err;
}

double bcq_fit(bcq_matrix *m, const float *w, int32_t iters) {
    double total = 0.0;
    uint8_t s[512];
    double a[BCQ_MAX_BITS];
    float wg[512];
    const int32_t G = m->group <= 512 ? m->group : 512;
    KITE_ASSERT(m->group <= 512);
    for (int32_t r = 0; r < m->rows; r++) {
        for (int32_t g = 0; g < m->n_groups; g++) {
            /* only the real columns are fitted; padding columns keep sign bits 0 (they meet x = 0) */
            const int32_t c0 = g * G;
            const int32_t n = m->cols - c0 < G ? m->cols - c0 : G;
            for (int32_t j = 0; j < n; j++) wg[j] = w[(size_t)r * m->cols + c0 + j];
            total += fit_group(wg, n, m->bits, iters, s, a);
            float *al = alpha_at(m, r, g);
            for (int32_t i = 0; i < m->bits; i++) {
                al[i] = (float)a[i];
                uint8_t *pl = plane_row(m, r, i);
                for (int32_t j = 0; j < n; j++) {
                    const int32_t c = c0 + j;
                    if (s[j] >> i & 1) pl[c / 8] |= (uint8_t)(1u << (c % 8));
                    else pl[c / 8] &= (uint8_t)~(1u << (c % 8));
                }
            }
        }
    }
    return total;
}

/* signs[byte][j] = +1 or -1 for bit j of byte: dequantization expands 8
 * weights of a plane per lookup, in 8-wide multiply-adds. */
static float signs[256][8];
static pthread_once_t signs_once = PTHREAD_ONCE_INIT;

static void signs_init(void) {
    for (int p = 0; p < 256; p++)
        for (int j = 0; j < 8; j++) signs[p][j] = (p >> j & 1) ? 1.0f : -1.0f;
}

void bcq_dequant_row(const bcq_matrix *m, int32_t r, float *out) {
    pthread_once(&signs_once, signs_init);
    memset(out, 0, sizeof(float) * (size_t)m->cols8);
    const int32_t cpg = m->group / 8, n_chunks = m->cols8 / 8;
    for (int32_t i = 0; i < m->bits; i++) {
        const uint8_t *pl = plane_row(m, r, i);
        for (int32_t c = 0; c < n_chunks; c++) {
            const float a = alpha_at(m, r, c / cpg)[i];
            const float *sg = signs[pl[c]];
            float *o = out + (size_t)c * 8;
            for (int j = 0; j < 8; j++) o[j] += a * sg[j];
        }
    }
}


size_t bcq_lut_scratch_floats(const bcq_matrix *m) { return (size_t)(m->cols8 / 8) * 256 + (size_t)m->cols8; }

void bcq_lut_gemv(const bcq_matrix *m, const float *x, float *y, float *scratch) {
    const int32_t n_chunks = m->cols8 / 8, chunks_per_group = m->group / 8;
    float *lut = scratch;                         /* [n_chunks][256] */
    float *xp = scratch + (size_t)n_chunks * 256; /* x padded with zeros to cols8 */
    memcpy(xp, x, sizeof(float) * (size_t)m->cols);
    for (int32_t c = m->cols; c < m->cols8; c++) xp[c] = 0.0f;
    /* tables: T[p] = sum_j (bit j of p ? +x_j : -x_j), built from T[p without its lowest bit] */
    for (int32_t c = 0; c < n_chunks; c++) {
        float *T = lut + (size_t)c * 256;
        const float *xc = xp + (size_t)c * 8;
        float base = 0.0f;
        for (int j = 0; j < 8; j++) base -= xc[j];
        T[0] = base;
        for (int p = 1; p < 256; p++) {
            const int low = __builtin_ctz((unsigned)p);
            T[p] = T[p & (p - 1)] + 2.0f * xc[low];
        }
    }
    for (int32_t r = 0; r < m->rows; r++) {
        float acc = 0.0f;
        for (int32_t g = 0; g < m->n_groups; g++) {
            const float *al = alpha_at(m, r, g);
            const int32_t c0 = g * chunks_per_group;
            const int32_t c1 = c0 + chunks_per_group < n_chunks ? c0 + chunks_per_group : n_chunks;
            for (int32_t i = 0; i < m->bits; i++) {
                const uint8_t *pl = plane_row(m, r, i);
                /* 4 independent sums: the lookups are not serialised on one add's latency */
                float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                int32_t c = c0;
                for (; c + 4 <= c1; c += 4) {
                    s0 += lut[(size_t)c * 256 + pl[c]];
                    s1 += lut[(size_t)(c + 1) * 256 + pl[c + 1]];
                    s2 += lut[(size_t)(c + 2) * 256 + pl[c + 2]];
                    s3 += lut[(size_t)(c + 3) * 256 + pl[c + 3]];
                }
                for (; c < c1; c++) s0 += lut[(size_t)c * 256 + pl[c]];
                acc += al[i] * ((s0 + s1) + (s2 + s3));
            }
        }
        y[r] = acc;
    }
}

void bcq_dequant_gemv(const bcq_matrix *m, const float *x, float *y, float *row_buf) {
    for (int32_t r = 0; r < m->rows; r++) {
        bcq_dequant_row(m, r, row_buf);
        y[r] = kern_dot_f32(row_buf, x, m->cols); /* the dispatched SIMD dot product */
    }
}
