/*
 * grammar_internal.h - the compiled rule table shared by the parser
 * (grammar_parse.c) and the matcher (grammar_match.c).
 *
 * Element encoding (uint32): the top two bits are the kind, the rest the value.
 *   GE_END            end of an alternative
 *   GE_CLASS | c      match one code point of character class c
 *   GE_REF | r        match rule r
 * Rule r's alternatives start at elems[alts[alt_off[r]]] ... elems[alts[alt_off[r+1]-1]];
 * each runs to its GE_END.  Class c is the sorted, disjoint, non-adjacent
 * inclusive ranges ranges[2k], ranges[2k+1] for k in [cls_off[c], cls_off[c+1]),
 * with ascii[c] the same set restricted to U+0000..U+007F as a bitmap.
 */
#ifndef KITE_GRAMMAR_INTERNAL_H
#define KITE_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "grammar/grammar.h"

#define GE_KIND(e) ((e) >> 30)
#define GE_VAL(e) ((e)&0x3FFFFFFFu)
#define GE_END 0u
#define GE_CLASS (1u << 30)
#define GE_REF (2u << 30)
#define GE_K_END 0u
#define GE_K_CLASS 1u
#define GE_K_REF 2u

#define GRAMMAR_MAX_CP 0x10FFFFu

struct grammar {
    uint32_t n_rules;
    uint32_t root;
    uint32_t n_elems;
    uint32_t *elems;   /* (n_elems) */
    uint32_t *alt_off; /* (n_rules + 1) into alts */
    uint32_t *alts;    /* (alt_off[n_rules]) element positions */
    uint32_t n_classes;
    uint32_t *cls_off;  /* (n_classes + 1) into range pairs */
    uint32_t *ranges;   /* (2 * cls_off[n_classes]) lo, hi */
    uint64_t *ascii;    /* (2 * n_classes) bitmap of U+0000..U+007F */
};

static inline int grammar_class_has(const grammar *g, uint32_t c, uint32_t cp) {
    if (cp < 128) return (int)((g->ascii[2 * c + (cp >> 6)] >> (cp & 63)) & 1u);
    uint32_t lo = g->cls_off[c], hi = g->cls_off[c + 1];
    while (lo < hi) { /* first range with hi >= cp */
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->ranges[2 * mid + 1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < g->cls_off[c + 1] && g->ranges[2 * lo] <= cp;
}

/* Does class c contain any code point in [a, b]? */
static inline int grammar_class_meets(const grammar *g, uint32_t c, uint32_t a, uint32_t b) {
    uint32_t lo = g->cls_off[c], hi = g->cls_off[c + 1];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->ranges[2 * mid + 1] < a) lo = mid + 1;
        else hi = mid;
    }
    return lo < g->cls_off[c + 1] && g->ranges[2 * lo] <= b;
}

#endif
