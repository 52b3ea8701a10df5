/* lookup.c - prompt-lookup drafting (lookup.h). */
#include "spec/lookup.h"

#include <string.h>

int32_t spec_lookup_draft(const kite_token *hist, int32_t n_hist, int32_t n_max, int32_t k, kite_token *out) {
    if (!hist || k <= 0 || n_max <= 0) return 0;
    for (int32_t n = n_max < n_hist - 1 ? n_max : n_hist - 1; n >= 1; n--) {
        const kite_token *pat = hist + n_hist - n;
        /* start j of an earlier occurrence: j + n <= n_hist - 1 so that at
         * least one token follows it */
        for (int32_t j = n_hist - n - 1; j >= 0; j--) {
            if (memcmp(hist + j, pat, (size_t)n * sizeof *pat) != 0) continue;
            int32_t m = 0;
            for (int32_t i = j + n; i < n_hist && m < k; i++) out[m++] = hist[i];
            return m;
        }
    }
    return 0;
}
