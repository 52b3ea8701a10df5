/*
 * stats.c - row math for evaluation: log-softmax, NLL, argmax, KL divergence,
 * and the running totals of a perplexity run.
 *
 * DESIGN
 *   Logits arrive as float32; every reduction is done in double so that the
 *   result does not depend on the vocabulary size's rounding (the golden
 *   reference, shared/golden/stories260K-ppl.json, also takes the log-softmax
 *   in float64).  The log-sum-exp is shifted by the row maximum, so rows with
 *   large logits cannot overflow.
 *
 * THREAD SAFETY
 *   Pure functions; an eval_stats belongs to its caller.
 */
#include <math.h>

#include "core/error.h"
#include "eval/eval.h"

double eval_logsumexp(const float *x, int32_t n) {
    KITE_ASSERT(n >= 1);
    float mx = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)x[i] - (double)mx);
    return (double)mx + log(sum);
}

double eval_log_softmax(const float *x, int32_t n, float *out) {
    const double lse = eval_logsumexp(x, n);
    for (int32_t i = 0; i < n; i++) out[i] = (float)((double)x[i] - lse);
    return lse;
}

double eval_nll(const float *logits, int32_t n, int32_t target) {
    KITE_ASSERT(target >= 0 && target < n);
    return eval_logsumexp(logits, n) - (double)logits[target];
}

int32_t eval_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double eval_kld_row(const float *base_logp, const float *logp, int32_t n) {
    double kl = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const double p = exp((double)base_logp[i]);
        if (p > 0.0) kl += p * ((double)base_logp[i] - (double)logp[i]);
    }
    /* The exact value is >= 0; float rounding of the rows can give -1e-9. */
    return kl > 0.0 ? kl : 0.0;
}

void eval_stats_add(eval_stats *s, double nll, const float *logp, const float *base_logp, int32_t n,
                    int32_t target) {
    s->n++;
    s->nll_sum += nll;
    s->nll_sq += nll * nll;
    if (base_logp) {
        const double kl = eval_kld_row(base_logp, logp, n);
        s->n_kld++;
        s->kld_sum += kl;
        s->kld_sq += kl * kl;
        if (eval_argmax(base_logp, n) == eval_argmax(logp, n)) s->top1_same++;
        s->base_nll_sum += -(double)base_logp[target];
    }
}

/* Standard error of the mean of values with the given sum and sum of squares. */
static double stderr_of_mean(double sum, double sq, int64_t n) {
    if (n < 2) return 0.0;
    const double mean = sum / (double)n;
    double var = (sq / (double)n - mean * mean) * (double)n / (double)(n - 1);
    if (var < 0) var = 0; /* rounding */
    return sqrt(var / (double)n);
}

double eval_stats_mean_nll(const eval_stats *s) { return s->n ? s->nll_sum / (double)s->n : NAN; }

double eval_stats_ppl(const eval_stats *s) { return exp(eval_stats_mean_nll(s)); }

double eval_stats_ppl_err(const eval_stats *s) {
    return eval_stats_ppl(s) * stderr_of_mean(s->nll_sum, s->nll_sq, s->n);
}

double eval_stats_kld_mean(const eval_stats *s) { return s->n_kld ? s->kld_sum / (double)s->n_kld : NAN; }

double eval_stats_kld_err(const eval_stats *s) { return stderr_of_mean(s->kld_sum, s->kld_sq, s->n_kld); }

double eval_stats_top1(const eval_stats *s) {
    return s->n_kld ? 100.0 * (double)s->top1_same / (double)s->n_kld : NAN;
}

double eval_stats_base_ppl(const eval_stats *s) {
    return s->n_kld ? exp(s->base_nll_sum / (double)s->n_kld) : NAN;
}
