/*
 * gen_grammar.h - the kite_grammar handle (kite.h) as generate.c sees it.
 *
 * A kite_grammar is a compiled grammar bound to one model's vocabulary: the rule table, the
 * vocabulary's byte trie and the mask cache (src/grammar/grammar.h).  It is immutable but
 * for the cache, which guards itself with a mutex, so one handle may serve many concurrent
 * generations (a server keeps one per distinct response format).
 */
#ifndef KITE_GENERATE_GEN_GRAMMAR_H
#define KITE_GENERATE_GEN_GRAMMAR_H

#include "grammar/grammar.h"
#include "kite.h"

struct kite_grammar {
    grammar *g;                /* owned */
    grammar_vocab *gv;         /* owned: the vocabulary's token bytes as a trie */
    grammar_mask_cache *cache; /* owned */
    int32_t n_vocab;
    const void *vocab;         /* the model's vocabulary it was built for (identity check only) */
    /* lazy (kite_grammar_new_lazy): in force from the first trigger on; n_trig 0: always */
    char (*trig)[KITE_GRAMMAR_TRIGGER_MAX]; /* [n_trig] texts, not NUL-terminated */
    uint32_t *trig_len;                     /* [n_trig] */
    bool *trig_start;                       /* [n_trig] at the output's start only */
    uint32_t n_trig;
};

#endif
