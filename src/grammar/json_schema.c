/*
 * json_schema.c - JSON Schema to GBNF (contract and subset: json_schema.h).
 *
 * DESIGN
 *   Two passes over untrusted text: a strict RFC 8259 reader builds a small tree (jv), then
 *   gen() writes one GBNF expression per schema, giving objects, arrays and referenced
 *   definitions rules of their own.  A $ref becomes a rule named after its pointer,
 *   emitted once (a queue of pending definitions), so recursive schemas are recursive
 *   rules.  Objects use two rule chains over the declared properties, in schema order:
 *   first_i (nothing written yet: property i, or skip it if optional) and rest_i (something
 *   written: ", property i", or skip it if optional), so commas are always well placed and
 *   the grammar stays linear in the number of properties.  Integer ranges are written
 *   digit by digit (same-length ranges split at the first differing digit).
 *
 * INVARIANTS
 *   Nesting (JSON and schema) is limited to JS_MAX_DEPTH; every read is bounded by the
 *   input's end; every failure is one message with the JSON pointer of the schema.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "kite.h"

#define JS_MAX_DEPTH 64
#define JS_MAX_BOUND 4096       /* the GBNF parser's repetition limit */
#define JS_MAX_INT 999999999999999LL /* 15 digits: exact in a double, as JSON readers hold numbers */

/* ---- a strict JSON reader into a tree ------------------------------------------------- */

typedef enum { JV_NULL, JV_FALSE, JV_TRUE, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_kind;

typedef struct jv {
    jv_kind k;
    char *s;         /* JV_STR: decoded UTF-8 (NUL-terminated, may hold NUL); JV_NUM: the literal */
    size_t len;      /* bytes of s */
    double num;      /* JV_NUM */
    struct jv *v;    /* (n) JV_ARR items, JV_OBJ values */
    struct jv *keys; /* (n) JV_OBJ keys (JV_STR) */
    size_t n;
} jv;

typedef struct {
    const char *p, *end, *start;
} jrd;

static int jfail(const jrd *r, const char *what) {
    return err_set(KITE_E_FORMAT, "json_schema: byte %zu: %s", (size_t)(r->p - r->start), what);
}

static void jws(jrd *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static void jv_free(jv *x) {
    if (!x) return;
    free(x->s);
    for (size_t i = 0; i < x->n; i++) {
        jv_free(&x->v[i]);
        if (x->keys) jv_free(&x->keys[i]);
    }
    free(x->v);
    free(x->keys);
    memset(x, 0, sizeof *x);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(jrd *r, unsigned *out) {
    if (r->end - r->p < 4) return jfail(r, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)r->p[i]);
        if (h < 0) return jfail(r, "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    r->p += 4;
    *out = v;
    return KITE_OK;
}

static size_t utf8_put(char *d, unsigned cp) {
    if (cp < 0x80) return d[0] = (char)cp, 1;
    if (cp < 0x800) return d[0] = (char)(0xC0 | cp >> 6), d[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return d[0] = (char)(0xE0 | cp >> 12), d[1] = (char)(0x80 | ((cp >> 6) & 63)), d[2] = (char)(0x80 | (cp & 63)), 3;
    d[0] = (char)(0xF0 | cp >> 18);
    d[1] = (char)(0x80 | ((cp >> 12) & 63));
    d[2] = (char)(0x80 | ((cp >> 6) & 63));
    d[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Length of a well-formed UTF-8 sequence at p (0: ill-formed). */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t n;
    unsigned min, cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000, cp = c & 0x07;
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static int jstring(jrd *r, jv *out) {
    r->p++; /* the opening quote */
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    if (!s) return err_set(KITE_E_NOMEM, "json_schema: out of memory");
    int rc = KITE_OK;
    for (;;) {
        if (r->p >= r->end) {
            rc = jfail(r, "unterminated string");
            break;
        }
        if (cap - n < 8) {
            char *t = realloc(s, cap * 2);
            if (!t) {
                rc = err_set(KITE_E_NOMEM, "json_schema: out of memory");
                break;
            }
            s = t;
            cap *= 2;
        }
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') {
            r->p++;
            break;
        }
        if (c < 0x20) {
            rc = jfail(r, "control character in a string");
            break;
        }
        if (c != '\\') {
            size_t l = utf8_len((const unsigned char *)r->p, (const unsigned char *)r->end);
            if (!l) {
                rc = jfail(r, "invalid UTF-8 in a string");
                break;
            }
            memcpy(s + n, r->p, l);
            n += l;
            r->p += l;
            continue;
        }
        r->p++;
        if (r->p >= r->end) {
            rc = jfail(r, "unterminated escape");
            break;
        }
        char e = *r->p++;
        const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
        if (e && map && ((map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2) == 0) {
            s[n++] = map[1];
            continue;
        }
        if (e != 'u') {
            rc = jfail(r, "unknown escape");
            break;
        }
        unsigned cp;
        if ((rc = hex4(r, &cp))) break;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u') {
                rc = jfail(r, "unpaired surrogate");
                break;
            }
            r->p += 2;
            if ((rc = hex4(r, &lo))) break;
            if (lo < 0xDC00 || lo > 0xDFFF) {
                rc = jfail(r, "unpaired surrogate");
                break;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            rc = jfail(r, "unpaired surrogate");
            break;
        }
        n += utf8_put(s + n, cp);
    }
    if (rc) {
        free(s);
        return rc;
    }
    s[n] = 0;
    out->k = JV_STR;
    out->s = s;
    out->len = n;
    return KITE_OK;
}

static int jnumber(jrd *r, jv *out) {
    const char *b = r->p;
    if (r->p < r->end && *r->p == '-') r->p++;
    if (r->p >= r->end) return jfail(r, "bad number");
    if (*r->p == '0') r->p++;
    else if (*r->p >= '1' && *r->p <= '9')
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    else return jfail(r, "bad number");
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        if (r->p >= r->end || *r->p < '0' || *r->p > '9') return jfail(r, "bad number");
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
        if (r->p >= r->end || *r->p < '0' || *r->p > '9') return jfail(r, "bad number");
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    }
    size_t n = (size_t)(r->p - b);
    out->s = malloc(n + 1);
    if (!out->s) return err_set(KITE_E_NOMEM, "json_schema: out of memory");
    memcpy(out->s, b, n);
    out->s[n] = 0;
    out->len = n;
    out->k = JV_NUM;
    out->num = strtod(out->s, NULL);
    return KITE_OK;
}

static int jvalue(jrd *r, jv *out, int depth);

static int jpush(jv *x, size_t *cap, bool obj) {
    if (x->n < *cap) return KITE_OK;
    size_t nc = *cap ? *cap * 2 : 4;
    jv *v = realloc(x->v, nc * sizeof *v);
    if (v) x->v = v;
    jv *k = obj ? realloc(x->keys, nc * sizeof *k) : NULL;
    if (k) x->keys = k;
    if (!v || (obj && !k)) return err_set(KITE_E_NOMEM, "json_schema: out of memory");
    *cap = nc;
    return KITE_OK;
}

static int jcontainer(jrd *r, jv *out, int depth, bool obj) {
    if (depth >= JS_MAX_DEPTH) return jfail(r, "nested deeper than 64");
    out->k = obj ? JV_OBJ : JV_ARR;
    r->p++;
    jws(r);
    char close = obj ? '}' : ']';
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return KITE_OK;
    }
    size_t cap = 0;
    for (;;) {
        int rc = jpush(out, &cap, obj);
        if (rc) return rc;
        jv *val = &out->v[out->n];
        memset(val, 0, sizeof *val);
        if (obj) {
            jv *key = &out->keys[out->n];
            memset(key, 0, sizeof *key);
            jws(r);
            if (r->p >= r->end || *r->p != '"') return jfail(r, "expected a key");
            out->n++;
            if ((rc = jstring(r, key))) return rc;
            for (size_t i = 0; i + 1 < out->n; i++)
                if (out->keys[i].len == key->len && !memcmp(out->keys[i].s, key->s, key->len))
                    return jfail(r, "duplicate key");
            jws(r);
            if (r->p >= r->end || *r->p != ':') return jfail(r, "expected ':'");
            r->p++;
        } else {
            out->n++;
        }
        if ((rc = jvalue(r, val, depth + 1))) return rc;
        jws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == close) {
            r->p++;
            return KITE_OK;
        }
        return jfail(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int jvalue(jrd *r, jv *out, int depth) {
    jws(r);
    if (r->p >= r->end) return jfail(r, "expected a value");
    char c = *r->p;
    if (c == '{' || c == '[') return jcontainer(r, out, depth, c == '{');
    if (c == '"') return jstring(r, out);
    if (c == '-' || (c >= '0' && c <= '9')) return jnumber(r, out);
    static const struct {
        const char *w;
        jv_kind k;
    } lit[] = {{"null", JV_NULL}, {"false", JV_FALSE}, {"true", JV_TRUE}};
    for (size_t i = 0; i < 3; i++) {
        size_t l = strlen(lit[i].w);
        if ((size_t)(r->end - r->p) >= l && !memcmp(r->p, lit[i].w, l)) {
            r->p += l;
            out->k = lit[i].k;
            return KITE_OK;
        }
    }
    return jfail(r, "expected a value");
}

static const jv *jget(const jv *o, const char *key) {
    if (!o || o->k != JV_OBJ) return NULL;
    size_t l = strlen(key);
    for (size_t i = 0; i < o->n; i++)
        if (o->keys[i].len == l && !memcmp(o->keys[i].s, key, l)) return &o->v[i];
    return NULL;
}

/* ---- output buffers -------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *t = realloc(b->s, nc);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) KITE_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) b->oom = true; /* only short fragments are formatted */
    else sb_add(b, tmp, (size_t)n);
}

/* Appends bytes as the inside of a GBNF literal. */
static void sb_gbnf_bytes(sbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_add(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            sb_printf(b, "\\x%02X", c);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
}

/* Appends the compact JSON text of x (for enum and const). */
static void sb_json(sbuf *b, const jv *x) {
    switch (x->k) {
    case JV_NULL: sb_str(b, "null"); break;
    case JV_FALSE: sb_str(b, "false"); break;
    case JV_TRUE: sb_str(b, "true"); break;
    case JV_NUM: sb_add(b, x->s, x->len); break;
    case JV_STR:
        sb_str(b, "\"");
        for (size_t i = 0; i < x->len; i++) {
            unsigned char c = (unsigned char)x->s[i];
            if (c == '"' || c == '\\') {
                char e[2] = {'\\', (char)c};
                sb_add(b, e, 2);
            } else if (c < 0x20) {
                sb_printf(b, "\\u%04x", c);
            } else {
                sb_add(b, (const char *)&c, 1);
            }
        }
        sb_str(b, "\"");
        break;
    case JV_ARR:
    case JV_OBJ:
        sb_str(b, x->k == JV_ARR ? "[" : "{");
        for (size_t i = 0; i < x->n; i++) {
            if (i) sb_str(b, ",");
            if (x->k == JV_OBJ) {
                sb_json(b, &x->keys[i]);
                sb_str(b, ":");
            }
            sb_json(b, &x->v[i]);
        }
        sb_str(b, x->k == JV_ARR ? "]" : "}");
        break;
    }
}

/* A GBNF literal of x's JSON text. */
static void sb_json_literal(sbuf *b, const jv *x) {
    sbuf t = {0};
    sb_json(&t, x);
    sb_str(b, "\"");
    if (t.oom) b->oom = true;
    else if (t.s) sb_gbnf_bytes(b, t.s, t.n);
    sb_str(b, "\"");
    free(t.s);
}

/* ---- the converter ------------------------------------------------------------------------ */

typedef struct {
    char *ptr;        /* the $ref string */
    const jv *schema; /* its target */
    char name[48];
    bool done;
} jdef;

typedef struct {
    const jv *root;
    sbuf rules; /* every rule but root */
    jdef *defs;
    size_t n_defs, cap_defs;
    unsigned n_rules;
} conv;

/* The primitives every converted grammar ends with (and the any-object grammar is made of). */
#define JSON_PRIMS \
    "json-ws ::= ( \" \" | \"\\n\" [ \\t]{0,4} )?\n" \
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n" \
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n" \
    "json-kchar ::= [^\"\\\\\\x00-\\x1F]\n" \
    "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n" \
    "json-number ::= json-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n" \
    "json-boolean ::= \"true\" | \"false\"\n" \
    "json-null ::= \"null\"\n" \
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n" \
    "json-object ::= \"{\" json-ws ( json-string json-ws \":\" json-ws json-value" \
    " ( json-ws \",\" json-ws json-string json-ws \":\" json-ws json-value )* )? json-ws \"}\"\n" \
    "json-array ::= \"[\" json-ws ( json-value ( json-ws \",\" json-ws json-value )* )? json-ws \"]\"\n"

static const char json_prims[] = JSON_PRIMS;
static const char json_object_gbnf[] = "root ::= json-object\n" JSON_PRIMS;

const char *grammar_json_object_gbnf(void) { return json_object_gbnf; }

static const char *const annotations[] = {"title",    "description", "default",  "examples", "$schema", "$id",
                                          "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",  "definitions",
                                          NULL};
static const char *const supported[] = {
    "type",      "enum",      "const",     "anyOf",     "oneOf",            "allOf",            "$ref",
    "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",     "maxItems",
    "minLength", "maxLength", "format",    "minimum",   "maximum",          "exclusiveMinimum", "exclusiveMaximum",
    "nullable",  NULL};

static bool in_list(const char *const *list, const jv *key) {
    for (; *list; list++)
        if (strlen(*list) == key->len && !memcmp(*list, key->s, key->len)) return true;
    return false;
}

static int gen(conv *c, const jv *s, const char *path, int depth, sbuf *out);

static void new_rule_name(conv *c, const char *hint, char name[48]) {
    snprintf(name, 48, "r%u-%s", ++c->n_rules, hint);
}

/* Emits `name ::= body` into the rules. */
static void emit_rule(conv *c, const char *name, const sbuf *body) {
    sb_str(&c->rules, name);
    sb_str(&c->rules, " ::= ");
    if (body->oom) c->rules.oom = true;
    else if (body->s) sb_add(&c->rules, body->s, body->n);
    sb_str(&c->rules, "\n");
}

/* Extends path with /key (JSON pointer escaping is not needed for messages). */
static void sub_path(char *dst, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(dst, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* Resolves a local JSON pointer ("#", "#/a/b") against the root. */
static const jv *resolve(const conv *c, const jv *ref) {
    if (ref->len < 1 || ref->s[0] != '#') return NULL;
    const jv *cur = c->root;
    const char *p = ref->s + 1, *end = ref->s + ref->len;
    while (p < end && cur) {
        if (*p != '/') return NULL;
        p++;
        char seg[256];
        size_t n = 0;
        while (p < end && *p != '/') {
            char ch = *p++;
            if (ch == '~' && p < end && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            if (n + 1 >= sizeof seg) return NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (cur->k == JV_OBJ) {
            cur = jget(cur, seg);
        } else if (cur->k == JV_ARR) {
            char *e;
            unsigned long i = strtoul(seg, &e, 10);
            cur = (*e || !n || i >= cur->n) ? NULL : &cur->v[i];
        } else {
            cur = NULL;
        }
    }
    return cur;
}

static int gen_ref(conv *c, const jv *ref, const char *path, sbuf *out) {
    if (ref->k != JV_STR) return err_set(KITE_E_FORMAT, "json_schema: %s: $ref is not a string", path);
    for (size_t i = 0; i < c->n_defs; i++)
        if (!strcmp(c->defs[i].ptr, ref->s)) {
            sb_str(out, c->defs[i].name);
            return KITE_OK;
        }
    const jv *target = resolve(c, ref);
    if (!target)
        return err_set(KITE_E_NOT_FOUND, "json_schema: %s: $ref \"%.200s\" does not resolve (only local pointers such as "
                                         "#/$defs/NAME)", path, ref->s);
    if (c->n_defs == c->cap_defs) {
        size_t nc = c->cap_defs ? c->cap_defs * 2 : 8;
        jdef *d = realloc(c->defs, nc * sizeof *d);
        if (!d) return err_set(KITE_E_NOMEM, "json_schema: out of memory");
        c->defs = d;
        c->cap_defs = nc;
    }
    jdef *d = &c->defs[c->n_defs];
    d->ptr = malloc(ref->len + 1);
    if (!d->ptr) return err_set(KITE_E_NOMEM, "json_schema: out of memory");
    memcpy(d->ptr, ref->s, ref->len + 1);
    d->schema = target;
    d->done = false;
    /* a readable name from the pointer's last segment: [A-Za-z0-9-] only */
    char hint[24];
    size_t n = 0;
    const char *last = strrchr(ref->s, '/');
    for (const char *p = last ? last + 1 : "self"; *p && n + 1 < sizeof hint; p++)
        hint[n++] = ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) ? *p : '-';
    hint[n] = 0;
    snprintf(d->name, sizeof d->name, "def%zu-%s", c->n_defs, n ? hint : "x");
    c->n_defs++;
    sb_str(out, d->name);
    return KITE_OK;
}

/* Non-negative integer bound from a number keyword; *present false when absent. */
static int int_bound(const jv *s, const char *key, const char *path, bool want_int, long long *v, bool *present) {
    const jv *x = jget(s, key);
    *present = x != NULL;
    if (!x) return KITE_OK;
    if (x->k != JV_NUM) return err_set(KITE_E_FORMAT, "json_schema: %s: %s is not a number", path, key);
    if (want_int && x->num != (double)(long long)x->num)
        return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: %s %s is not an integer", path, key, x->s);
    if (x->num > (double)JS_MAX_INT || x->num < -(double)JS_MAX_INT)
        return err_set(KITE_E_RANGE, "json_schema: %s: %s %s is beyond +-10^15", path, key, x->s);
    *v = (long long)x->num;
    return KITE_OK;
}

/* Digits of [a, b], both of exactly len digits (leading zeros allowed), a <= b. */
static void gen_digits(sbuf *o, const char *a, const char *b, size_t len) {
    if (!len) return;
    if (!memcmp(a, b, len)) {
        sb_str(o, "\"");
        sb_add(o, a, len);
        sb_str(o, "\"");
        return;
    }
    if (a[0] == b[0]) {
        sb_printf(o, "\"%c\" ", a[0]);
        gen_digits(o, a + 1, b + 1, len - 1);
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', len - 1);
    memset(zeros, '0', len - 1);
    sb_str(o, "( ");
    if (len == 1) {
        sb_printf(o, "[%c-%c] )", a[0], b[0]);
        return;
    }
    bool a_low = !memcmp(a + 1, zeros, len - 1), b_high = !memcmp(b + 1, nines, len - 1);
    char lo = a_low ? a[0] : (char)(a[0] + 1), hi = b_high ? b[0] : (char)(b[0] - 1);
    bool first = true;
    if (!a_low) {
        sb_printf(o, "\"%c\" ( ", a[0]);
        gen_digits(o, a + 1, nines, len - 1);
        sb_str(o, " )");
        first = false;
    }
    if (lo <= hi) {
        sb_printf(o, "%s[%c-%c] [0-9]{%zu}", first ? "" : " | ", lo, hi, len - 1);
        first = false;
    }
    if (!b_high) {
        sb_printf(o, "%s\"%c\" ( ", first ? "" : " | ", b[0]);
        gen_digits(o, zeros, b + 1, len - 1);
        sb_str(o, " )");
    }
    sb_str(o, " )");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded, up to 16 digits), no leading zeros. */
static void gen_nonneg(sbuf *o, long long lo, long long hi) {
    char a[24], b[24];
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lb = hi < 0 ? 16 : snprintf(b, sizeof b, "%lld", hi);
    sb_str(o, "( ");
    for (int L = la; L <= lb; L++) {
        if (L > la) sb_str(o, " | ");
        if (hi < 0 && L > la) { /* every number of L..16 digits */
            sb_printf(o, "[1-9] [0-9]{%d,15}", L - 1);
            break;
        }
        char x[24], y[24];
        if (L == la) memcpy(x, a, (size_t)L);
        else {
            x[0] = '1';
            memset(x + 1, '0', (size_t)L - 1);
        }
        if (hi >= 0 && L == lb) memcpy(y, b, (size_t)L);
        else memset(y, '9', (size_t)L);
        gen_digits(o, x, y, (size_t)L);
    }
    sb_str(o, " )");
}

static int gen_integer(conv *c, const jv *s, const char *path, sbuf *out) {
    (void)c;
    long long lo = 0, hi = 0, v;
    bool has_lo = false, has_hi = false, p;
    int rc;
    if ((rc = int_bound(s, "minimum", path, false, &v, &p))) return rc;
    if (p) has_lo = true, lo = (long long)jget(s, "minimum")->num, lo += (double)lo < jget(s, "minimum")->num;
    if ((rc = int_bound(s, "exclusiveMinimum", path, false, &v, &p))) return rc;
    if (p) {
        double x = jget(s, "exclusiveMinimum")->num;
        long long l = (long long)x + ((double)(long long)x <= x ? 1 : 0);
        if (!has_lo || l > lo) lo = l;
        has_lo = true;
    }
    if ((rc = int_bound(s, "maximum", path, false, &v, &p))) return rc;
    if (p) has_hi = true, hi = (long long)jget(s, "maximum")->num, hi -= (double)hi > jget(s, "maximum")->num;
    if ((rc = int_bound(s, "exclusiveMaximum", path, false, &v, &p))) return rc;
    if (p) {
        double x = jget(s, "exclusiveMaximum")->num;
        long long h = (long long)x - ((double)(long long)x >= x ? 1 : 0);
        if (!has_hi || h < hi) hi = h;
        has_hi = true;
    }
    if (!has_lo && !has_hi) {
        sb_str(out, "json-int");
        return KITE_OK;
    }
    if (has_lo && has_hi && lo > hi)
        return err_set(KITE_E_FORMAT, "json_schema: %s: no integer satisfies the bounds [%lld, %lld]", path, lo, hi);
    /* negatives: "-" and a magnitude in [max(1, -hi), -lo] (or unbounded); then the rest */
    sb_str(out, "( ");
    bool any = false;
    if (!has_lo || lo < 0) {
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        sb_str(out, "\"-\" ");
        gen_nonneg(out, mlo, mhi);
        any = true;
    }
    if (!has_hi || hi >= 0) {
        if (any) sb_str(out, " | ");
        gen_nonneg(out, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    sb_str(out, " )");
    return KITE_OK;
}

static int gen_number(conv *c, const jv *s, const char *path, sbuf *out) {
    (void)c;
    static const char *const bad[] = {"maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (size_t i = 0; i < 3; i++)
        if (jget(s, bad[i]))
            return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: unsupported keyword \"%s\" for type number (only "
                                               "\"minimum\": 0; integers take any bounds)", path, bad[i]);
    const jv *mn = jget(s, "minimum");
    if (mn) {
        if (mn->k != JV_NUM) return err_set(KITE_E_FORMAT, "json_schema: %s: minimum is not a number", path);
        if (mn->num != 0)
            return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: unsupported keyword \"minimum\" %s for type number "
                                               "(only 0)", path, mn->s);
        sb_str(out, "( ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? )");
        return KITE_OK;
    }
    sb_str(out, "json-number");
    return KITE_OK;
}

static int gen_string(conv *c, const jv *s, const char *path, sbuf *out) {
    (void)c;
    if (jget(s, "pattern"))
        return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: unsupported keyword \"pattern\"", path);
    const jv *fmt = jget(s, "format");
    if (fmt) {
        if (fmt->k != JV_STR) return err_set(KITE_E_FORMAT, "json_schema: %s: format is not a string", path);
        static const char date[] = "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )";
        static const char time[] = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                                   "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
        static const char uuid[] = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                                   "[0-9a-fA-F]{12}";
        sb_str(out, "\"\\\"\" ");
        if (!strcmp(fmt->s, "date")) sb_str(out, date);
        else if (!strcmp(fmt->s, "time")) sb_str(out, time);
        else if (!strcmp(fmt->s, "date-time")) sb_printf(out, "%s \"T\" ", date), sb_str(out, time);
        else if (!strcmp(fmt->s, "uuid")) sb_str(out, uuid);
        else
            return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: unsupported keyword \"format\" \"%.64s\" (date, time, "
                                               "date-time, uuid)", path, fmt->s);
        sb_str(out, " \"\\\"\"");
        return KITE_OK;
    }
    long long mn = 0, mx = 0;
    bool has_mn, has_mx;
    int rc;
    if ((rc = int_bound(s, "minLength", path, true, &mn, &has_mn))) return rc;
    if ((rc = int_bound(s, "maxLength", path, true, &mx, &has_mx))) return rc;
    if (!has_mn && !has_mx) {
        sb_str(out, "json-string");
        return KITE_OK;
    }
    if (mn < 0 || mx < 0 || (has_mx && mx < mn))
        return err_set(KITE_E_FORMAT, "json_schema: %s: minLength/maxLength out of order or negative", path);
    if (mn > JS_MAX_BOUND || mx > JS_MAX_BOUND)
        return err_set(KITE_E_RANGE, "json_schema: %s: string length bounds above %d", path, JS_MAX_BOUND);
    if (has_mx) sb_printf(out, "\"\\\"\" json-char{%lld,%lld} \"\\\"\"", mn, mx);
    else sb_printf(out, "\"\\\"\" json-char{%lld,} \"\\\"\"", mn);
    return KITE_OK;
}

static int gen_array(conv *c, const jv *s, const char *path, int depth, sbuf *out) {
    long long mn = 0, mx = 0;
    bool has_mn, has_mx;
    int rc;
    if ((rc = int_bound(s, "minItems", path, true, &mn, &has_mn))) return rc;
    if ((rc = int_bound(s, "maxItems", path, true, &mx, &has_mx))) return rc;
    if (mn < 0 || mx < 0 || (has_mx && mx < mn))
        return err_set(KITE_E_FORMAT, "json_schema: %s: minItems/maxItems out of order or negative", path);
    if (mn > JS_MAX_BOUND || mx > JS_MAX_BOUND)
        return err_set(KITE_E_RANGE, "json_schema: %s: item count bounds above %d", path, JS_MAX_BOUND);
    const jv *items = jget(s, "items"), *prefix = jget(s, "prefixItems");
    char name[48], item[48], sp[256];
    new_rule_name(c, "array", name);
    sbuf body = {0};
    sb_str(&body, "\"[\" json-ws ");
    size_t n_prefix = 0;
    if (prefix) {
        if (prefix->k != JV_ARR)
            return free(body.s), err_set(KITE_E_FORMAT, "json_schema: %s: prefixItems is not an array", path);
        n_prefix = prefix->n;
        if (has_mx && (long long)n_prefix > mx)
            return free(body.s), err_set(KITE_E_UNSUPPORTED, "json_schema: %s: maxItems below the prefixItems count", path);
        for (size_t i = 0; i < n_prefix; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            sub_path(sp, sizeof sp, path, "prefixItems", idx);
            if (i) sb_str(&body, " json-ws \",\" json-ws ");
            sb_str(&body, "( ");
            if ((rc = gen(c, &prefix->v[i], sp, depth + 1, &body))) return free(body.s), rc;
            sb_str(&body, " )");
        }
    }
    bool more = !(items && items->k == JV_FALSE);
    if (more) {
        new_rule_name(c, "item", item);
        sbuf ib = {0};
        if (items && items->k != JV_TRUE) {
            sub_path(sp, sizeof sp, path, "items", NULL);
            if ((rc = gen(c, items, sp, depth + 1, &ib))) return free(ib.s), free(body.s), rc;
        } else {
            sb_str(&ib, "json-value");
        }
        emit_rule(c, item, &ib);
        free(ib.s);
        long long need = mn > (long long)n_prefix ? mn - (long long)n_prefix : 0;
        long long cap = has_mx ? mx - (long long)n_prefix : -1;
        if (n_prefix) { /* every further item follows a comma */
            if (cap < 0) sb_printf(&body, " ( json-ws \",\" json-ws %s ){%lld,}", item, need);
            else if (cap > 0) sb_printf(&body, " ( json-ws \",\" json-ws %s ){%lld,%lld}", item, need, cap);
        } else if (cap != 0) {
            if (need == 0) sb_str(&body, "( ");
            sb_str(&body, item);
            long long r_lo = need > 0 ? need - 1 : 0;
            if (cap < 0) sb_printf(&body, " ( json-ws \",\" json-ws %s ){%lld,}", item, r_lo);
            else if (cap > 1) sb_printf(&body, " ( json-ws \",\" json-ws %s ){%lld,%lld}", item, r_lo, cap - 1);
            if (need == 0) sb_str(&body, " )?");
        }
    } else if (mn > (long long)n_prefix) {
        return free(body.s), err_set(KITE_E_FORMAT, "json_schema: %s: minItems above prefixItems with items false", path);
    }
    sb_str(&body, " json-ws \"]\"");
    emit_rule(c, name, &body);
    free(body.s);
    sb_str(out, name);
    return KITE_OK;
}

/* Decodes well-formed UTF-8 (the reader checked it) into code points; returns the count. */
static size_t to_cps(const jv *k, uint32_t *cps, size_t cap) {
    const unsigned char *p = (const unsigned char *)k->s, *end = p + k->len;
    size_t n = 0;
    while (p < end && n < cap) {
        size_t l = utf8_len(p, end);
        if (!l) l = 1; /* cannot happen: the string was decoded by the reader */
        uint32_t cp = l == 1 ? p[0] : (uint32_t)(p[0] & (0xFF >> (l + 1)));
        for (size_t i = 1; i < l; i++) cp = cp << 6 | (p[i] & 0x3Fu);
        cps[n++] = cp;
        p += l;
    }
    return n;
}

#define JS_MAX_KEY 256 /* code points of a declared key, when other keys must avoid it */

/* The rule for the rest of a key (after its opening quote) that is none of the declared keys
 * sharing the prefix of d code points: keys[idx[0..n_idx)].  Other keys are written without
 * escapes, so comparing code points is exact. */
static void other_key_node(conv *c, uint32_t (*cps)[JS_MAX_KEY], const size_t *lens, const size_t *idx, size_t n_idx,
                           size_t d, char name[48]) {
    new_rule_name(c, "key", name);
    sbuf b = {0};
    bool is_key = false;
    sb_str(&b, "[^\\\"\\\\\\x00-\\x1F");
    for (size_t i = 0; i < n_idx; i++) {
        if (lens[idx[i]] == d) is_key = true;
        else sb_printf(&b, "\\U%08X", cps[idx[i]][d]);
    }
    sb_str(&b, "] json-kchar* \"\\\"\"");
    size_t *sub = malloc((n_idx ? n_idx : 1) * sizeof *sub);
    if (!sub) b.oom = true;
    for (size_t i = 0; sub && i < n_idx; i++) {
        if (lens[idx[i]] == d) continue;
        uint32_t cp = cps[idx[i]][d];
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            if (lens[idx[j]] > d && cps[idx[j]][d] == cp) seen = true;
        if (seen) continue;
        if (cp < 0x20 || cp == '"' || cp == '\\') continue; /* never written unescaped: no clash */
        size_t n_sub = 0;
        for (size_t j = i; j < n_idx; j++)
            if (lens[idx[j]] > d && cps[idx[j]][d] == cp) sub[n_sub++] = idx[j];
        char child[48];
        other_key_node(c, cps, lens, sub, n_sub, d + 1, child);
        sb_printf(&b, " | \"\\U%08X\" %s", cp, child);
    }
    free(sub);
    if (!is_key) sb_str(&b, " | \"\\\"\"");
    emit_rule(c, name, &b);
    free(b.s);
}

static int gen_object(conv *c, const jv *s, const char *path, int depth, sbuf *out) {
    const jv *props = jget(s, "properties"), *req = jget(s, "required"), *add = jget(s, "additionalProperties");
    if (props && props->k != JV_OBJ) return err_set(KITE_E_FORMAT, "json_schema: %s: properties is not an object", path);
    if (req && req->k != JV_ARR) return err_set(KITE_E_FORMAT, "json_schema: %s: required is not an array", path);
    if (add && add->k != JV_TRUE && add->k != JV_FALSE && add->k != JV_OBJ)
        return err_set(KITE_E_FORMAT, "json_schema: %s: additionalProperties is not a boolean or a schema", path);
    size_t n = props ? props->n : 0;
    for (size_t j = 0; req && j < req->n; j++) {
        if (req->v[j].k != JV_STR) return err_set(KITE_E_FORMAT, "json_schema: %s: required holds a non-string", path);
        if (!jget(props, req->v[j].s))
            return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: required property \"%.64s\" is not in properties", path,
                           req->v[j].s);
    }
    /* extra keys: when additionalProperties allows them, or for a bare {"type": "object"} */
    bool extra = add ? add->k != JV_FALSE : !props;
    char name[48], extra_kv[48] = "", sp[256];
    int rc;
    new_rule_name(c, "object", name);
    if (extra) {
        new_rule_name(c, "extra-kv", extra_kv);
        sbuf b = {0};
        if (n) { /* a key none of the declared ones (JSON Schema: those take their own schema) */
            uint32_t(*cps)[JS_MAX_KEY] = malloc(n * sizeof *cps);
            size_t *lens = malloc(n * sizeof *lens), *idx = malloc(n * sizeof *idx);
            if (!cps || !lens || !idx) {
                free(cps), free(lens), free(idx);
                return err_set(KITE_E_NOMEM, "json_schema: out of memory");
            }
            for (size_t i = 0; i < n; i++) {
                idx[i] = i;
                lens[i] = to_cps(&props->keys[i], cps[i], JS_MAX_KEY);
                if (props->keys[i].len > JS_MAX_KEY * 4 || lens[i] == JS_MAX_KEY) {
                    free(cps), free(lens), free(idx), free(b.s);
                    return err_set(KITE_E_RANGE, "json_schema: %s: a property name longer than %d characters with "
                                                 "additionalProperties", path, JS_MAX_KEY - 1);
                }
            }
            char root_key[48];
            other_key_node(c, cps, lens, idx, n, 0, root_key);
            free(cps), free(lens), free(idx);
            sb_printf(&b, "\"\\\"\" %s json-ws \":\" json-ws ", root_key);
        } else {
            sb_str(&b, "json-string json-ws \":\" json-ws ");
        }
        if (add && add->k == JV_OBJ) {
            sub_path(sp, sizeof sp, path, "additionalProperties", NULL);
            if ((rc = gen(c, add, sp, depth + 1, &b))) return free(b.s), rc;
        } else {
            sb_str(&b, "json-value");
        }
        emit_rule(c, extra_kv, &b);
        free(b.s);
    }
    /* kv_i rules, then first_i / rest_i from the end */
    unsigned base = c->n_rules + 1;
    c->n_rules += (unsigned)(3 * n + 2);
    for (size_t i = 0; i < n; i++) {
        sbuf b = {0};
        sb_str(&b, "\"");
        sbuf key = {0};
        sb_json(&key, &props->keys[i]);
        if (key.oom) b.oom = true;
        else sb_gbnf_bytes(&b, key.s, key.n);
        free(key.s);
        sb_str(&b, "\" json-ws \":\" json-ws ");
        sub_path(sp, sizeof sp, path, "properties", props->keys[i].s);
        if ((rc = gen(c, &props->v[i], sp, depth + 1, &b))) return free(b.s), rc;
        char kv[48];
        snprintf(kv, sizeof kv, "r%u-kv", base + (unsigned)i);
        emit_rule(c, kv, &b);
        free(b.s);
    }
    for (size_t i = n + 1; i-- > 0;) {
        char first[48], rest[48], nfirst[48], nrest[48], kv[48];
        snprintf(first, sizeof first, "r%u-first", base + (unsigned)(n + i));
        snprintf(rest, sizeof rest, "r%u-rest", base + (unsigned)(2 * n + 1 + i));
        sbuf f = {0}, r = {0};
        if (i == n) {
            if (extra) {
                sb_printf(&f, "%s %s | \"\"", extra_kv, rest);
                sb_printf(&r, "( json-ws \",\" json-ws %s )*", extra_kv);
            } else {
                sb_str(&f, "\"\"");
                sb_str(&r, "\"\"");
            }
        } else {
            bool required = false;
            for (size_t j = 0; req && j < req->n; j++)
                if (req->v[j].len == props->keys[i].len && !memcmp(req->v[j].s, props->keys[i].s, req->v[j].len))
                    required = true;
            snprintf(kv, sizeof kv, "r%u-kv", base + (unsigned)i);
            snprintf(nfirst, sizeof nfirst, "r%u-first", base + (unsigned)(n + i + 1));
            snprintf(nrest, sizeof nrest, "r%u-rest", base + (unsigned)(2 * n + 1 + i + 1));
            if (required) {
                sb_printf(&f, "%s %s", kv, nrest);
                sb_printf(&r, "json-ws \",\" json-ws %s %s", kv, nrest);
            } else {
                sb_printf(&f, "%s %s | %s", kv, nrest, nfirst);
                sb_printf(&r, "( json-ws \",\" json-ws %s )? %s", kv, nrest);
            }
        }
        emit_rule(c, first, &f);
        emit_rule(c, rest, &r);
        free(f.s);
        free(r.s);
    }
    sbuf b = {0};
    sb_printf(&b, "\"{\" json-ws r%u-first json-ws \"}\"", base + (unsigned)n);
    emit_rule(c, name, &b);
    free(b.s);
    sb_str(out, name);
    return KITE_OK;
}

static int gen_type(conv *c, const jv *s, const char *type, const char *path, int depth, sbuf *out) {
    if (!strcmp(type, "string")) return gen_string(c, s, path, out);
    if (!strcmp(type, "integer")) return gen_integer(c, s, path, out);
    if (!strcmp(type, "number")) return gen_number(c, s, path, out);
    if (!strcmp(type, "object")) return gen_object(c, s, path, depth, out);
    if (!strcmp(type, "array")) return gen_array(c, s, path, depth, out);
    if (!strcmp(type, "boolean")) return sb_str(out, "json-boolean"), KITE_OK;
    if (!strcmp(type, "null")) return sb_str(out, "json-null"), KITE_OK;
    return err_set(KITE_E_FORMAT, "json_schema: %s: unknown type \"%.64s\"", path, type);
}

static int gen_alts(conv *c, const jv *list, const char *kw, const char *path, int depth, sbuf *out) {
    if (list->k != JV_ARR || !list->n)
        return err_set(KITE_E_FORMAT, "json_schema: %s: %s is not a non-empty array", path, kw);
    sb_str(out, "( ");
    for (size_t i = 0; i < list->n; i++) {
        char idx[24], sp[256];
        snprintf(idx, sizeof idx, "%zu", i);
        sub_path(sp, sizeof sp, path, kw, idx);
        if (i) sb_str(out, " | ");
        int rc = gen(c, &list->v[i], sp, depth + 1, out);
        if (rc) return rc;
    }
    sb_str(out, " )");
    return KITE_OK;
}

static int gen(conv *c, const jv *s, const char *path, int depth, sbuf *out) {
    if (depth > JS_MAX_DEPTH) return err_set(KITE_E_RANGE, "json_schema: %s: schema nested deeper than 64", path);
    if (s->k == JV_TRUE) return sb_str(out, "json-value"), KITE_OK;
    if (s->k == JV_FALSE)
        return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: the schema false accepts nothing", path);
    if (s->k != JV_OBJ) return err_set(KITE_E_FORMAT, "json_schema: %s: a schema must be an object or a boolean", path);
    for (size_t i = 0; i < s->n; i++)
        if (!in_list(supported, &s->keys[i]) && !in_list(annotations, &s->keys[i]))
            return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: unsupported keyword \"%.64s\"", path, s->keys[i].s);
    const jv *nullable = jget(s, "nullable");
    bool or_null = nullable && nullable->k == JV_TRUE;
    if (or_null) sb_str(out, "( json-null | ");
    int rc = KITE_OK;
    const jv *x;
    if ((x = jget(s, "const"))) {
        sb_json_literal(out, x);
    } else if ((x = jget(s, "enum"))) {
        if (x->k != JV_ARR || !x->n) return err_set(KITE_E_FORMAT, "json_schema: %s: enum is not a non-empty array", path);
        sb_str(out, "( ");
        for (size_t i = 0; i < x->n; i++) {
            if (i) sb_str(out, " | ");
            sb_json_literal(out, &x->v[i]);
        }
        sb_str(out, " )");
    } else if ((x = jget(s, "$ref"))) {
        rc = gen_ref(c, x, path, out);
    } else if ((x = jget(s, "anyOf")) || (x = jget(s, "oneOf"))) {
        rc = gen_alts(c, x, jget(s, "anyOf") ? "anyOf" : "oneOf", path, depth, out);
    } else if ((x = jget(s, "allOf"))) {
        if (x->k != JV_ARR || x->n != 1)
            return err_set(KITE_E_UNSUPPORTED, "json_schema: %s: unsupported keyword \"allOf\" with other than one "
                                               "member", path);
        char sp[256];
        sub_path(sp, sizeof sp, path, "allOf", "0");
        rc = gen(c, &x->v[0], sp, depth + 1, out);
    } else if ((x = jget(s, "type"))) {
        if (x->k == JV_STR) {
            rc = gen_type(c, s, x->s, path, depth, out);
        } else if (x->k == JV_ARR && x->n) {
            sb_str(out, "( ");
            for (size_t i = 0; i < x->n && !rc; i++) {
                if (x->v[i].k != JV_STR) return err_set(KITE_E_FORMAT, "json_schema: %s: type holds a non-string", path);
                if (i) sb_str(out, " | ");
                rc = gen_type(c, s, x->v[i].s, path, depth, out);
            }
            sb_str(out, " )");
        } else {
            return err_set(KITE_E_FORMAT, "json_schema: %s: type is not a string or a non-empty array", path);
        }
    } else if (jget(s, "properties") || jget(s, "additionalProperties") || jget(s, "required")) {
        rc = gen_object(c, s, path, depth, out);
    } else if (jget(s, "items") || jget(s, "prefixItems")) {
        rc = gen_array(c, s, path, depth, out);
    } else {
        sb_str(out, "json-value");
    }
    if (or_null) sb_str(out, " )");
    return rc;
}

/* A $ref cycle that reaches itself before any character ({"$ref": "#"} at the root, or
 * {"anyOf": [{"$ref": "#/$defs/a"}, ...]} inside a) becomes a left-recursive rule, which the
 * grammar compiler refuses and no document could match past.  The compiler's own check is the
 * one definition of that property, so the written grammar is put through it and the refusal
 * turned into a schema error here; other compiler errors are left to the caller (they would be
 * converter bugs, which fuzz_json_schema is there to find). */
static int check_productive(const char *gbnf) {
    grammar *g = NULL;
    int rc = grammar_parse(gbnf, strlen(gbnf), NULL, &g);
    grammar_free(g);
    if (rc != KITE_E_FORMAT || !strstr(kite_last_error(), "is left-recursive")) return KITE_OK;
    char why[320]; /* err_set writes the buffer kite_last_error() points at */
    snprintf(why, sizeof why, "%s", kite_last_error());
    return err_set(KITE_E_UNSUPPORTED, "json_schema: a $ref cycle reaches itself before matching any character, "
                                       "so no document could match (%s)", why);
}

int grammar_json_schema_to_gbnf(const char *schema, size_t len, char **out) {
    if (!schema || !out) return err_set(KITE_E_ARG, "grammar_json_schema_to_gbnf: NULL argument");
    jrd r = {schema, schema + len, schema};
    jv root = {0};
    int rc = jvalue(&r, &root, 0);
    if (!rc) {
        jws(&r);
        if (r.p != r.end) rc = jfail(&r, "text after the schema");
    }
    conv c = {.root = &root};
    sbuf top = {0};
    if (!rc) {
        sb_str(&top, "root ::= ");
        rc = gen(&c, &root, "#", 0, &top);
        sb_str(&top, "\n");
    }
    for (size_t i = 0; !rc && i < c.n_defs; i++) { /* the queue grows while definitions are written */
        sbuf b = {0};
        const jv *target = c.defs[i].schema;
        char name[48];
        memcpy(name, c.defs[i].name, sizeof name);
        char sp[256];
        snprintf(sp, sizeof sp, "%.200s", c.defs[i].ptr);
        rc = gen(&c, target, sp, 1, &b);
        if (!rc) emit_rule(&c, name, &b);
        free(b.s);
    }
    if (!rc) {
        sb_add(&top, c.rules.s ? c.rules.s : "", c.rules.n);
        sb_str(&top, json_prims);
        if (top.oom || c.rules.oom) rc = err_set(KITE_E_NOMEM, "json_schema: out of memory");
    }
    for (size_t i = 0; i < c.n_defs; i++) free(c.defs[i].ptr);
    free(c.defs);
    free(c.rules.s);
    jv_free(&root);
    if (!rc) rc = check_productive(top.s);
    if (rc) {
        free(top.s);
        return rc;
    }
    *out = top.s;
    return KITE_OK;
}
