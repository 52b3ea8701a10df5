/* adapt.c - adaptive draft length (adapt.h). */
#include "spec/adapt.h"

#include <math.h>

static void choose_k(spec_adapt *a) {
    if (a->fixed) {
        a->k = a->k_max;
        return;
    }
    double run = a->rate >= 0.999 ? 1e9 : a->rate / (1.0 - a->rate);
    double k = ceil(run) + 1.0;
    a->k = k > a->k_max ? a->k_max : k < a->k_min ? a->k_min : (int32_t)k;
}

void spec_adapt_init(spec_adapt *a, int32_t k_min, int32_t k_max, bool fixed) {
    if (k_max < 1) k_max = 1;
    if (k_max > SPEC_MAX_DRAFT) k_max = SPEC_MAX_DRAFT;
    if (k_min < 1) k_min = 1;
    if (k_min > k_max) k_min = k_max;
    a->k_min = k_min;
    a->k_max = k_max;
    a->fixed = fixed;
    a->rate = 0.6;
    choose_k(a);
}

void spec_adapt_update(spec_adapt *a, int32_t accepted, bool rejected) {
    const int32_t tested = accepted + (rejected ? 1 : 0);
    if (tested <= 0) return;
    a->rate = 0.7 * a->rate + 0.3 * ((double)accepted / (double)tested);
    choose_k(a);
}
