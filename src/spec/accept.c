/* accept.c - lossless acceptance rule and dense sampler distributions (accept.h). */
#include "spec/accept.h"

#include <string.h>

void spec_probs(kite_sampler *s, const float *logits, int32_t n_vocab, float *probs) {
    const sampler_cand *c = NULL;
    size_t n = sampler_candidates(s, logits, &c);
    memset(probs, 0, (size_t)n_vocab * sizeof *probs);
    for (size_t i = 0; i < n; i++)
        if (c[i].id >= 0 && c[i].id < n_vocab) probs[c[i].id] = c[i].p;
}

kite_token spec_draw(const float *w, int32_t n, sampler_rng *rng) {
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += (double)w[i];
    const double r = sampler_rng_uniform(rng) * total;
    if (!(total > 0.0)) return 0;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (w[i] <= 0.0f) continue;
        cum += (double)w[i];
        last = i;
        if (r < cum) return i;
    }
    return last; /* rounding at the very top */
}

bool spec_accept(const float *p, const float *q, kite_token d, int32_t n, sampler_rng *rng, float *scratch,
                 kite_token *replacement) {
    const double pd = (double)p[d], qd = q ? (double)q[d] : 1.0;
    const double u = sampler_rng_uniform(rng);
    /* accept with probability min(1, p/q); qd > 0 since d was drawn from q */
    if (qd <= 0.0 ? pd > 0.0 : u * qd < pd) return true;
    double mass = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float r = p[i] - (q ? q[i] : (i == d ? 1.0f : 0.0f));
        scratch[i] = r > 0.0f ? r : 0.0f;
        mass += (double)scratch[i];
    }
    *replacement = spec_draw(mass > 0.0 ? scratch : p, n, rng);
    return false;
}
