/*
 * grammar_parse.c - GBNF text -> compiled rule table (grammar_internal.h).
 *
 * DESIGN
 *   A recursive-descent parser over the text builds one element buffer per
 *   rule (alternatives separated by GE_END).  Groups become new rules; a
 *   postfix operator takes the last item of the current sequence (wrapped in
 *   a rule when it is longer than one element) and rewrites it:
 *     x*      S ::= x S | ""          x+      x S   (S = x*)
 *     x?      S ::= x | ""            x{m,n}  x ... x (m times) O(n-m)
 *     O(1) ::= x | ""   O(k) ::= x O(k-1) | ""          x{m,}  x ... x S
 *   Right recursion keeps the matcher's stacks flat: a reference in last
 *   position does not push a continuation (grammar_match.c).
 *   After parsing, every referenced rule must be defined, the start rule
 *   must exist, and no rule may reach itself through a nullable prefix (left
 *   recursion), which would make stack expansion loop; the check computes the
 *   nullable rules by fixpoint, then looks for a cycle in the "left edge"
 *   graph with an iterative depth-first search.
 *
 * LIMITS (bound memory and time on untrusted text; KITE_E_RANGE)
 *   GP_MAX_RULES rules, GP_MAX_ELEMS elements, repetition bounds up to
 *   GP_MAX_REPEAT, groups nested GP_MAX_NEST deep.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar_internal.h"

#define GP_MAX_RULES (1u << 16)
#define GP_MAX_ELEMS (1u << 22)
#define GP_MAX_REPEAT 4096u
#define GP_MAX_NEST 200
#define GP_INF UINT32_MAX

typedef struct {
    uint32_t *v;
    uint32_t n, cap;
} u32vec;

typedef struct {
    char *name;
    size_t at;      /* offset of the definition (or first reference while undefined) */
    uint32_t origin; /* the user rule a synthesized rule was made for */
    int defined;
    u32vec el;
} brule;

typedef struct {
    const char *s;
    size_t len, pos;
    brule *rules;
    uint32_t n_rules, cap_rules;
    u32vec cls_off, ranges, tmp;
    uint32_t n_elems; /* over all rules */
    int depth;
} gp;

static int vec_push(u32vec *v, uint32_t x) {
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 16;
        uint32_t *p = realloc(v->v, (size_t)cap * sizeof *p);
        if (!p) return err_set(KITE_E_NOMEM, "grammar: out of memory");
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return KITE_OK;
}

static void line_col(const gp *p, size_t at, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)p->s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int gp_fail(gp *p, size_t at, const char *fmt, ...) KITE_PRINTF(3, 4);
static int gp_fail(gp *p, size_t at, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(p, at, &line, &col);
    return err_set(KITE_E_FORMAT, "grammar:%d:%d: %s", line, col, msg);
}

static int emit(gp *p, uint32_t r, uint32_t e) {
    if (p->n_elems >= GP_MAX_ELEMS)
        return err_set(KITE_E_RANGE, "grammar: more than %u elements after rewriting repetitions", GP_MAX_ELEMS);
    p->n_elems++;
    return vec_push(&p->rules[r].el, e);
}

static int new_rule(gp *p, const char *name, size_t name_len, uint32_t origin, size_t at, uint32_t *out) {
    if (p->n_rules >= GP_MAX_RULES) return err_set(KITE_E_RANGE, "grammar: more than %u rules", GP_MAX_RULES);
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? p->cap_rules * 2 : 16;
        brule *r = realloc(p->rules, (size_t)cap * sizeof *r);
        if (!r) return err_set(KITE_E_NOMEM, "grammar: out of memory");
        p->rules = r;
        p->cap_rules = cap;
    }
    brule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = malloc(name_len + 1);
        if (!r->name) return err_set(KITE_E_NOMEM, "grammar: out of memory");
        memcpy(r->name, name, name_len);
        r->name[name_len] = '\0';
    }
    r->origin = name ? p->n_rules : origin;
    r->at = at;
    *out = p->n_rules++;
    return KITE_OK;
}

static int find_or_add_rule(gp *p, const char *name, size_t n, size_t at, uint32_t *out) {
    for (uint32_t i = 0; i < p->n_rules; i++) {
        const char *rn = p->rules[i].name;
        if (rn && strlen(rn) == n && memcmp(rn, name, n) == 0) {
            *out = i;
            return KITE_OK;
        }
    }
    return new_rule(p, name, n, 0, at, out);
}

/* ---- characters ------------------------------------------------------------ */

static int is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int peek(const gp *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

/* Spaces, tabs and # comments; newlines too when newline_ok. */
static void skip_space(gp *p, int newline_ok) {
    while (p->pos < p->len) {
        int c = (unsigned char)p->s[p->pos];
        if (c == ' ' || c == '\t') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r') p->pos++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            p->pos++;
        } else {
            break;
        }
    }
}

static int hex_digits(gp *p, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int c = peek(p), d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return gp_fail(p, p->pos, "expected %d hex digits in escape", n);
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return KITE_OK;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static int parse_char(gp *p, uint32_t *cp) {
    size_t at = p->pos;
    int c = peek(p);
    if (c == '\\') {
        p->pos++;
        int e = peek(p);
        if (e < 0) return gp_fail(p, at, "unterminated escape");
        p->pos++;
        int rc = KITE_OK;
        switch (e) {
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case 't': *cp = '\t'; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': *cp = (uint32_t)e; break;
        case 'x': rc = hex_digits(p, 2, cp); break;
        case 'u': rc = hex_digits(p, 4, cp); break;
        case 'U': rc = hex_digits(p, 8, cp); break;
        default: return gp_fail(p, at, "unknown escape '\\%c'", e >= 32 && e < 127 ? e : '?');
        }
        if (rc) return rc;
        if (*cp > GRAMMAR_MAX_CP) return gp_fail(p, at, "escape U+%X is above U+10FFFF", (unsigned)*cp);
        return KITE_OK;
    }
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    uint32_t v;
    size_t n;
    uint32_t min;
    if (s[0] < 0x80) {
        *cp = s[0];
        p->pos++;
        return KITE_OK;
    } else if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        n = 2, v = s[0] & 0x1Fu, min = 0x80;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        n = 3, v = s[0] & 0x0Fu, min = 0x800;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        n = 4, v = s[0] & 0x07u, min = 0x10000;
    } else {
        return gp_fail(p, at, "invalid UTF-8 byte 0x%02X", s[0]);
    }
    if (left < n) return gp_fail(p, at, "truncated UTF-8 sequence");
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return gp_fail(p, at, "invalid UTF-8 sequence");
        v = v << 6 | (s[i] & 0x3Fu);
    }
    if (v < min || v > GRAMMAR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
        return gp_fail(p, at, "invalid UTF-8 sequence");
    p->pos += n;
    *cp = v;
    return KITE_OK;
}

/* ---- classes ----------------------------------------------------------------- */

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0;
}

/* Turns p->tmp (lo, hi pairs) into a normalized class; *out = its id. */
static int finish_class(gp *p, int negate, uint32_t *out) {
    uint32_t n = p->tmp.n / 2;
    qsort(p->tmp.v, n, 2 * sizeof(uint32_t), cmp_range);
    uint32_t m = 0; /* merged in place */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t lo = p->tmp.v[2 * i], hi = p->tmp.v[2 * i + 1];
        if (m && lo <= p->tmp.v[2 * m - 1] + 1) {
            if (hi > p->tmp.v[2 * m - 1]) p->tmp.v[2 * m - 1] = hi;
        } else {
            p->tmp.v[2 * m] = lo;
            p->tmp.v[2 * m + 1] = hi;
            m++;
        }
    }
    if (p->cls_off.n == 0 && vec_push(&p->cls_off, 0)) return KITE_E_NOMEM;
    if (p->cls_off.n > GP_MAX_ELEMS) return err_set(KITE_E_RANGE, "grammar: more than %u classes", GP_MAX_ELEMS);
    int rc = KITE_OK;
    if (!negate) {
        for (uint32_t i = 0; i < 2 * m && !rc; i++) rc = vec_push(&p->ranges, p->tmp.v[i]);
    } else {
        uint32_t next = 0; /* first code point not yet covered */
        for (uint32_t i = 0; i < m && !rc; i++) {
            if (p->tmp.v[2 * i] > next) {
                rc = vec_push(&p->ranges, next);
                if (!rc) rc = vec_push(&p->ranges, p->tmp.v[2 * i] - 1);
            }
            next = p->tmp.v[2 * i + 1] + 1;
        }
        if (!rc && next <= GRAMMAR_MAX_CP) {
            rc = vec_push(&p->ranges, next);
            if (!rc) rc = vec_push(&p->ranges, GRAMMAR_MAX_CP);
        }
    }
    if (rc) return rc;
    *out = p->cls_off.n - 1;
    return vec_push(&p->cls_off, p->ranges.n / 2);
}

static int single_class(gp *p, uint32_t lo, uint32_t hi, uint32_t *out) {
    p->tmp.n = 0;
    if (vec_push(&p->tmp, lo) || vec_push(&p->tmp, hi)) return KITE_E_NOMEM;
    return finish_class(p, 0, out);
}

/* [ ... ] at p->pos. */
static int parse_class(gp *p, uint32_t *out) {
    size_t at = p->pos;
    p->pos++; /* [ */
    int negate = 0;
    if (peek(p) == '^') {
        negate = 1;
        p->pos++;
    }
    p->tmp.n = 0;
    for (;;) {
        int c = peek(p);
        if (c < 0) return gp_fail(p, at, "unterminated character class");
        if (c == ']') break;
        size_t cat = p->pos;
        uint32_t lo, hi;
        int rc = parse_char(p, &lo);
        if (rc) return rc;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            p->pos++;
            rc = parse_char(p, &hi);
            if (rc) return rc;
            if (hi < lo) return gp_fail(p, cat, "character range is reversed (U+%04X > U+%04X)", (unsigned)lo, (unsigned)hi);
        }
        if (vec_push(&p->tmp, lo) || vec_push(&p->tmp, hi)) return KITE_E_NOMEM;
    }
    p->pos++; /* ] */
    if (p->tmp.n == 0) return gp_fail(p, at, "empty character class");
    return finish_class(p, negate, out);
}

/* ---- rules -------------------------------------------------------------------- */

static int parse_alternatives(gp *p, uint32_t r, int nested);

/* Moves elements [start, n) of rule r into a new rule; *item = its reference
 * (or the element itself when there is one). */
static int take_item(gp *p, uint32_t r, uint32_t start, uint32_t *item) {
    u32vec *el = &p->rules[r].el;
    if (el->n - start == 1) {
        *item = el->v[start];
        el->n = start;
        p->n_elems--;
        return KITE_OK;
    }
    uint32_t g;
    int rc = new_rule(p, NULL, 0, p->rules[r].origin, p->pos, &g);
    if (rc) return rc;
    el = &p->rules[r].el; /* rules may have moved */
    for (uint32_t i = start; i < el->n && !rc; i++) rc = vec_push(&p->rules[g].el, el->v[i]);
    if (!rc) rc = emit(p, g, GE_END);
    if (rc) return rc;
    el->n = start;
    p->rules[g].defined = 1;
    *item = GE_REF | g;
    return KITE_OK;
}

/* S ::= item S | "" */
static int star_rule(gp *p, uint32_t origin, uint32_t item, uint32_t *out) {
    uint32_t s;
    int rc = new_rule(p, NULL, 0, origin, p->pos, &s);
    if (!rc) rc = emit(p, s, item);
    if (!rc) rc = emit(p, s, GE_REF | s);
    if (!rc) rc = emit(p, s, GE_END);
    if (!rc) rc = emit(p, s, GE_END);
    p->rules[s].defined = 1;
    *out = s;
    return rc;
}

static int parse_uint(gp *p, uint32_t *out) {
    size_t at = p->pos;
    uint64_t v = 0;
    if (peek(p) < '0' || peek(p) > '9') return gp_fail(p, at, "expected a number in repetition bounds");
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (uint64_t)(peek(p) - '0');
        if (v > GP_MAX_REPEAT)
            return err_set(KITE_E_RANGE, "grammar: repetition bound above %u at offset %zu", GP_MAX_REPEAT, at);
        p->pos++;
    }
    *out = (uint32_t)v;
    return KITE_OK;
}

/* {m} {m,} {m,n} {,n} at p->pos. */
static int parse_bounds(gp *p, uint32_t *m, uint32_t *n) {
    size_t at = p->pos;
    p->pos++;
    skip_space(p, 1);
    int rc;
    *m = 0;
    if (peek(p) != ',') {
        rc = parse_uint(p, m);
        if (rc) return rc;
        skip_space(p, 1);
    }
    if (peek(p) == ',') {
        p->pos++;
        skip_space(p, 1);
        if (peek(p) == '}') {
            *n = GP_INF;
        } else {
            rc = parse_uint(p, n);
            if (rc) return rc;
            skip_space(p, 1);
        }
    } else {
        *n = *m;
    }
    if (peek(p) != '}') return gp_fail(p, at, "expected '}' to close repetition bounds");
    p->pos++;
    if (*n != GP_INF && *n < *m) return gp_fail(p, at, "repetition bounds {%u,%u} are reversed", *m, *n);
    return KITE_OK;
}

static int apply_postfix(gp *p, uint32_t r, uint32_t start, int op) {
    uint32_t origin = p->rules[r].origin;
    uint32_t item, s;
    uint32_t m = 0, n = 0;
    int rc;
    if (op == '{') {
        rc = parse_bounds(p, &m, &n);
        if (rc) return rc;
    } else {
        p->pos++;
    }
    rc = take_item(p, r, start, &item);
    if (rc) return rc;
    switch (op) {
    case '*':
        rc = star_rule(p, origin, item, &s);
        return rc ? rc : emit(p, r, GE_REF | s);
    case '+':
        rc = star_rule(p, origin, item, &s);
        if (!rc) rc = emit(p, r, item);
        return rc ? rc : emit(p, r, GE_REF | s);
    case '?':
        m = 0, n = 1;
        break;
    default: break;
    }
    for (uint32_t i = 0; i < m; i++) {
        rc = emit(p, r, item);
        if (rc) return rc;
    }
    if (n == GP_INF) {
        rc = star_rule(p, origin, item, &s);
        return rc ? rc : emit(p, r, GE_REF | s);
    }
    uint32_t prev = 0;
    for (uint32_t k = 1; k <= n - m; k++) { /* O(k) ::= item O(k-1) | "" */
        rc = new_rule(p, NULL, 0, origin, p->pos, &s);
        if (!rc) rc = emit(p, s, item);
        if (!rc && k > 1) rc = emit(p, s, GE_REF | prev);
        if (!rc) rc = emit(p, s, GE_END);
        if (!rc) rc = emit(p, s, GE_END);
        if (rc) return rc;
        p->rules[s].defined = 1;
        prev = s;
    }
    return n > m ? emit(p, r, GE_REF | prev) : KITE_OK;
}

static int parse_sequence(gp *p, uint32_t r, int nested) {
    int64_t last = -1; /* start of the last item in rules[r].el */
    for (;;) {
        int c = peek(p);
        size_t at = p->pos;
        int rc = KITE_OK;
        uint32_t start = p->rules[r].el.n;
        if (c == '"') {
            p->pos++;
            for (;;) {
                if (peek(p) < 0) return gp_fail(p, at, "unterminated string literal");
                if (peek(p) == '"') break;
                uint32_t cp, cls;
                rc = parse_char(p, &cp);
                if (!rc) rc = single_class(p, cp, cp, &cls);
                if (!rc) rc = emit(p, r, GE_CLASS | cls);
                if (rc) return rc;
            }
            p->pos++;
            last = p->rules[r].el.n > start ? (int64_t)start : -1; /* "" is nothing to repeat */
            if (last < 0) { /* an empty literal: repeat the empty group */
                uint32_t g;
                rc = new_rule(p, NULL, 0, p->rules[r].origin, at, &g);
                if (!rc) rc = emit(p, g, GE_END);
                if (!rc) rc = emit(p, r, GE_REF | g);
                if (rc) return rc;
                p->rules[g].defined = 1;
                last = start;
            }
        } else if (c == '[') {
            uint32_t cls;
            rc = parse_class(p, &cls);
            if (!rc) rc = emit(p, r, GE_CLASS | cls);
            last = start;
        } else if (c == '.') {
            p->pos++;
            uint32_t cls;
            rc = single_class(p, 0, GRAMMAR_MAX_CP, &cls);
            if (!rc) rc = emit(p, r, GE_CLASS | cls);
            last = start;
        } else if (c >= 0 && is_word(c)) {
            size_t b = p->pos;
            while (peek(p) >= 0 && is_word(peek(p))) p->pos++;
            uint32_t ref;
            rc = find_or_add_rule(p, p->s + b, p->pos - b, b, &ref);
            if (!rc) rc = emit(p, r, GE_REF | ref);
            last = start;
        } else if (c == '(') {
            if (++p->depth > GP_MAX_NEST)
                return err_set(KITE_E_RANGE, "grammar: groups nested more than %d deep", GP_MAX_NEST);
            p->pos++;
            skip_space(p, 1);
            uint32_t g;
            rc = new_rule(p, NULL, 0, p->rules[r].origin, at, &g);
            if (!rc) rc = parse_alternatives(p, g, 1);
            if (rc) return rc;
            p->rules[g].defined = 1;
            if (peek(p) != ')') return gp_fail(p, at, "expected ')' to close this group");
            p->pos++;
            p->depth--;
            rc = emit(p, r, GE_REF | g);
            last = start;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return gp_fail(p, at, "'%c' has no element to repeat", c);
            rc = apply_postfix(p, r, (uint32_t)last, c);
            last = -1; /* x** is an error, as in llama.cpp */
        } else {
            return KITE_OK;
        }
        if (rc) return rc;
        skip_space(p, nested);
    }
}

static int parse_alternatives(gp *p, uint32_t r, int nested) {
    for (;;) {
        int rc = parse_sequence(p, r, nested);
        if (!rc) rc = emit(p, r, GE_END);
        if (rc) return rc;
        if (peek(p) != '|') return KITE_OK;
        p->pos++;
        skip_space(p, 1);
    }
}

static int parse_rule(gp *p) {
    size_t at = p->pos;
    if (peek(p) < 0 || !is_word(peek(p))) return gp_fail(p, at, "expected a rule name");
    while (peek(p) >= 0 && is_word(peek(p))) p->pos++;
    uint32_t r;
    int rc = find_or_add_rule(p, p->s + at, p->pos - at, at, &r);
    if (rc) return rc;
    if (p->rules[r].defined) return gp_fail(p, at, "rule '%s' is defined twice", p->rules[r].name);
    p->rules[r].defined = 1;
    p->rules[r].at = at;
    skip_space(p, 0);
    if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
        return gp_fail(p, p->pos, "expected '::=' after rule name '%s'", p->rules[r].name);
    p->pos += 3;
    skip_space(p, 1);
    rc = parse_alternatives(p, r, 0);
    if (rc) return rc;
    int c = peek(p);
    if (c == '\r' || c == '\n' || c < 0) return KITE_OK;
    if (c == ')') return gp_fail(p, p->pos, "unmatched ')'");
    return gp_fail(p, p->pos, "unexpected character '%c' (expected an element, '|' or a newline)",
                   c >= 32 && c < 127 ? c : '?');
}

/* ---- checks and compilation ------------------------------------------------ */

static const char *rule_name(const gp *p, uint32_t r) { return p->rules[p->rules[r].origin].name; }

static int check_left_recursion(gp *p) {
    uint32_t n = p->n_rules;
    int rc = KITE_OK;
    unsigned char *nullable = calloc(n ? n : 1, 1), *color = calloc(n ? n : 1, 1);
    u32vec eoff = {0}, edge = {0}, stk = {0};
    if (!nullable || !color) {
        rc = err_set(KITE_E_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            const u32vec *el = &p->rules[r].el;
            int ok = 1; /* the current alternative is all nullable so far */
            for (uint32_t i = 0; i < el->n; i++) {
                uint32_t e = el->v[i];
                if (GE_KIND(e) == GE_K_END) {
                    if (ok) {
                        nullable[r] = 1;
                        changed = 1;
                        break;
                    }
                    ok = 1;
                } else if (GE_KIND(e) == GE_K_CLASS || !nullable[GE_VAL(e)]) {
                    ok = 0;
                }
            }
        }
    }
    for (uint32_t r = 0; r < n && !rc; r++) { /* left edges r -> s */
        rc = vec_push(&eoff, edge.n);
        const u32vec *el = &p->rules[r].el;
        int open = 1;
        for (uint32_t i = 0; i < el->n && !rc; i++) {
            uint32_t e = el->v[i];
            if (GE_KIND(e) == GE_K_END) {
                open = 1;
            } else if (open && GE_KIND(e) == GE_K_REF) {
                rc = vec_push(&edge, GE_VAL(e));
                if (!nullable[GE_VAL(e)]) open = 0;
            } else {
                open = 0;
            }
        }
    }
    if (!rc) rc = vec_push(&eoff, edge.n);
    /* iterative DFS: stk holds (rule, next edge) pairs; color 1 = on the path, 2 = done */
    for (uint32_t s0 = 0; s0 < n && !rc; s0++) {
        if (color[s0]) continue;
        stk.n = 0;
        rc = vec_push(&stk, s0);
        if (!rc) rc = vec_push(&stk, eoff.v[s0]);
        color[s0] = 1;
        while (!rc && stk.n) {
            uint32_t r = stk.v[stk.n - 2], k = stk.v[stk.n - 1];
            if (k == eoff.v[r + 1]) {
                color[r] = 2;
                stk.n -= 2;
                continue;
            }
            stk.v[stk.n - 1] = k + 1;
            uint32_t s = edge.v[k];
            if (color[s] == 1) {
                int line, col;
                line_col(p, p->rules[p->rules[s].origin].at, &line, &col);
                rc = err_set(KITE_E_FORMAT, "grammar:%d:%d: rule '%s' is left-recursive (it can reach itself "
                             "before matching a character; rewrite with right recursion or repetition)",
                             line, col, rule_name(p, s));
            } else if (!color[s]) {
                color[s] = 1;
                rc = vec_push(&stk, s);
                if (!rc) rc = vec_push(&stk, eoff.v[s]);
            }
        }
    }
done:
    free(nullable);
    free(color);
    free(eoff.v);
    free(edge.v);
    free(stk.v);
    return rc;
}

static int compile(gp *p, uint32_t root, grammar **out) {
    grammar *g = calloc(1, sizeof *g);
    if (!g) return err_set(KITE_E_NOMEM, "grammar: out of memory");
    uint32_t n_alts = 0;
    for (uint32_t r = 0; r < p->n_rules; r++)
        for (uint32_t i = 0; i < p->rules[r].el.n; i++) n_alts += p->rules[r].el.v[i] == GE_END;
    g->n_rules = p->n_rules;
    g->root = root;
    g->n_elems = p->n_elems;
    g->n_classes = p->cls_off.n ? p->cls_off.n - 1 : 0;
    uint32_t n_ranges = g->n_classes ? p->cls_off.v[g->n_classes] : 0;
    g->elems = malloc(((size_t)g->n_elems + 1) * sizeof *g->elems);
    g->alt_off = malloc(((size_t)g->n_rules + 1) * sizeof *g->alt_off);
    g->alts = malloc(((size_t)n_alts + 1) * sizeof *g->alts);
    g->cls_off = malloc(((size_t)g->n_classes + 1) * sizeof *g->cls_off);
    g->ranges = malloc(((size_t)n_ranges * 2 + 1) * sizeof *g->ranges);
    g->ascii = calloc((size_t)g->n_classes * 2 + 1, sizeof *g->ascii);
    if (!g->elems || !g->alt_off || !g->alts || !g->cls_off || !g->ranges || !g->ascii) {
        grammar_free(g);
        return err_set(KITE_E_NOMEM, "grammar: out of memory");
    }
    uint32_t pos = 0, a = 0;
    for (uint32_t r = 0; r < p->n_rules; r++) {
        g->alt_off[r] = a;
        const u32vec *el = &p->rules[r].el;
        for (uint32_t i = 0; i < el->n; i++) {
            if (i == 0 || el->v[i - 1] == GE_END) g->alts[a++] = pos;
            g->elems[pos++] = el->v[i];
        }
    }
    g->alt_off[p->n_rules] = a;
    KITE_ASSERT(pos == g->n_elems && a == n_alts);
    if (g->n_classes) memcpy(g->cls_off, p->cls_off.v, ((size_t)g->n_classes + 1) * sizeof *g->cls_off);
    else g->cls_off[0] = 0;
    if (n_ranges) memcpy(g->ranges, p->ranges.v, (size_t)n_ranges * 2 * sizeof *g->ranges);
    for (uint32_t c = 0; c < g->n_classes; c++)
        for (uint32_t k = g->cls_off[c]; k < g->cls_off[c + 1]; k++)
            for (uint32_t cp = g->ranges[2 * k]; cp <= g->ranges[2 * k + 1] && cp < 128; cp++)
                g->ascii[2 * c + (cp >> 6)] |= 1ull << (cp & 63);
    *out = g;
    return KITE_OK;
}

int grammar_parse(const char *text, size_t len, const char *root, grammar **out) {
    if (!out || (!text && len)) return err_set(KITE_E_ARG, "grammar_parse: NULL argument");
    if (!root) root = "root";
    gp p;
    memset(&p, 0, sizeof p);
    p.s = text ? text : "";
    p.len = len;
    int rc = KITE_OK;
    skip_space(&p, 1);
    while (!rc && p.pos < p.len) {
        rc = parse_rule(&p);
        if (!rc) skip_space(&p, 1);
    }
    for (uint32_t r = 0; r < p.n_rules && !rc; r++)
        if (!p.rules[r].defined)
            rc = gp_fail(&p, p.rules[r].at, "rule '%s' is used but never defined", p.rules[r].name);
    uint32_t root_id = 0;
    if (!rc) {
        size_t rl = strlen(root);
        uint32_t r = 0;
        for (; r < p.n_rules; r++)
            if (p.rules[r].name && strlen(p.rules[r].name) == rl && memcmp(p.rules[r].name, root, rl) == 0) break;
        if (r == p.n_rules) rc = err_set(KITE_E_FORMAT, "grammar: no start rule '%s' is defined", root);
        root_id = r;
    }
    if (!rc) rc = check_left_recursion(&p);
    if (!rc) rc = compile(&p, root_id, out);
    for (uint32_t r = 0; r < p.n_rules; r++) {
        free(p.rules[r].name);
        free(p.rules[r].el.v);
    }
    free(p.rules);
    free(p.cls_off.v);
    free(p.ranges.v);
    free(p.tmp.v);
    return rc;
}

void grammar_free(grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alt_off);
    free(g->alts);
    free(g->cls_off);
    free(g->ranges);
    free(g->ascii);
    free(g);
}

uint32_t grammar_n_rules(const grammar *g) { return g ? g->n_rules : 0; }
uint32_t grammar_n_elements(const grammar *g) { return g ? g->n_elems : 0; }
