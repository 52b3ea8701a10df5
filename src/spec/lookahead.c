/* lookahead.c - lookahead (Jacobi) drafting with an n-gram pool (lookahead.h). */
#include "spec/lookahead.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "spec/adapt.h"

int spec_la_init(spec_la *la, int32_t W, int32_t N, int32_t G, const kite_token *prompt, int32_t n_prompt) {
    memset(la, 0, sizeof *la);
    if (W < 1 || W > SPEC_MAX_DRAFT || N < 2 || N > W + 1 || G < 1 || G > 255)
        return err_set(KITE_E_ARG, "lookahead W,N,G = %d,%d,%d: need 1 <= W <= %d, 2 <= N <= W+1, 1 <= G <= 255", W,
                       N, G, SPEC_MAX_DRAFT);
    if (!prompt || n_prompt < 1) return err_set(KITE_E_ARG, "lookahead: empty prompt");
    la->W = W;
    la->N = N;
    la->G = G;
    la->window = malloc(sizeof *la->window * (size_t)W);
    la->keys = malloc(sizeof *la->keys * SPEC_LA_BUCKETS);
    la->grams = malloc(sizeof *la->grams * SPEC_LA_BUCKETS * (size_t)G * (size_t)(N - 1));
    la->count = calloc(SPEC_LA_BUCKETS, 1);
    la->next = calloc(SPEC_LA_BUCKETS, 1);
    if (!la->window || !la->keys || !la->grams || !la->count || !la->next) {
        spec_la_free(la);
        return err_set(KITE_E_NOMEM, "out of memory for the lookahead pool");
    }
    for (int32_t i = 0; i < SPEC_LA_BUCKETS; i++) la->keys[i] = -1;
    const int32_t start = n_prompt > W ? n_prompt - W : 0;
    for (int32_t i = 0; i < W; i++) la->window[i] = prompt[start + i % (n_prompt - start)];
    return KITE_OK;
}

void spec_la_free(spec_la *la) {
    if (!la) return;
    free(la->window);
    free(la->keys);
    free(la->grams);
    free(la->count);
    free(la->next);
    memset(la, 0, sizeof *la);
}

/* Bucket of first token x: its slot, or (insert) an empty slot, or - the
 * table being full - the slot x hashes to, which is taken over. */
static int32_t bucket(spec_la *la, kite_token x, int insert) {
    const uint32_t mask = SPEC_LA_BUCKETS - 1;
    uint32_t h = ((uint32_t)x * 2654435761u) & mask;
    for (uint32_t probe = 0; probe < 16; probe++) {
        const uint32_t s = (h + probe) & mask;
        if (la->keys[s] == x) return (int32_t)s;
        if (la->keys[s] == -1) {
            if (!insert) return -1;
            la->keys[s] = x;
            return (int32_t)s;
        }
    }
    if (!insert) return -1;
    la->keys[h] = x; /* evict: the old first token's n-grams are forgotten */
    la->count[h] = 0;
    la->next[h] = 0;
    return (int32_t)h;
}

static kite_token *gram_at(const spec_la *la, int32_t b, int32_t slot) {
    return la->grams + ((size_t)b * (size_t)la->G + (size_t)slot) * (size_t)(la->N - 1);
}

static void pool_add(spec_la *la, kite_token x, const kite_token *cont) {
    const int32_t b = bucket(la, x, 1), L = la->N - 1;
    for (int32_t s = 0; s < la->count[b]; s++)
        if (!memcmp(gram_at(la, b, s), cont, sizeof *cont * (size_t)L)) return; /* already known */
    memcpy(gram_at(la, b, la->next[b]), cont, sizeof *cont * (size_t)L);
    la->next[b] = (uint8_t)((la->next[b] + 1) % la->G);
    if (la->count[b] < la->G) la->count[b]++;
}

int32_t spec_la_lookup(const spec_la *la, kite_token x, kite_token *out, int32_t cap) {
    const int32_t b = bucket((spec_la *)la, x, 0);
    if (b < 0) return 0;
    const int32_t n = la->count[b], L = la->N - 1;
    for (int32_t i = 0; i < n && i < cap; i++) {
        const int32_t slot = ((int32_t)la->next[b] - 1 - i + 2 * la->G) % la->G; /* newest first */
        memcpy(out + (size_t)i * L, gram_at(la, b, slot), sizeof *out * (size_t)L);
    }
    return n;
}

int32_t spec_la_draft(spec_la *la, kite_token x, int32_t k, kite_token *out, int *from_pool) {
    const int32_t n = k < la->W ? k : la->W;
    memcpy(out, la->window, sizeof *out * (size_t)n);
    *from_pool = 0;
    const int32_t b = bucket(la, x, 0);
    if (b >= 0 && la->count[b] > 0) {
        const int32_t slot = ((int32_t)la->next[b] - 1 + la->G) % la->G;
        const int32_t L = la->N - 1 < n ? la->N - 1 : n;
        memcpy(out, gram_at(la, b, slot), sizeof *out * (size_t)L);
        *from_pool = 1;
        la->n_pool_drafts++;
    }
    return n;
}

void spec_la_update(spec_la *la, const kite_token *in, const kite_token *pred, int32_t n, int32_t j) {
    const int32_t L = la->N - 1;
    /* n-grams (in[i], pred[i..i+L-1]) of this iteration */
    for (int32_t i = 0; i + L - 1 <= n; i++) pool_add(la, in[i], pred + i);
    /* next window: this pass's guesses beyond the accepted point, then the
     * old window's guesses for the positions after those */
    kite_token next[SPEC_MAX_DRAFT];
    int32_t m = 0;
    for (int32_t i = j + 1; i <= n && m < la->W; i++) next[m++] = pred[i];
    const int32_t shift = j + 1; /* positions the window moved forward */
    for (int32_t i = m + shift; m < la->W; i++) next[m++] = la->window[i < la->W ? i : la->W - 1];
    memcpy(la->window, next, sizeof *next * (size_t)la->W);
}

void spec_la_add_history(spec_la *la, const kite_token *hist, int32_t n_hist, int32_t from) {
    const int32_t L = la->N - 1;
    int32_t start = from - L; /* first n-gram start whose last token is at >= from */
    if (start < 0) start = 0;
    for (int32_t p = start; p + L < n_hist; p++) pool_add(la, hist[p], hist + p + 1);
}
