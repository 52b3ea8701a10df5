/*
 * json.c - the JSON-lines reader of multiple-choice tasks (`kite eval --task`).
 *
 * DESIGN
 *   The engine library may not depend on cJSON (tools/ only), and a task
 *   needs three fields, so this is a small strict RFC 8259 parser for one
 *   object per line: strings are decoded (escapes, \uXXXX with surrogate
 *   pairs to UTF-8; raw control characters rejected), other values are
 *   validated and skipped.  The input is untrusted: every read is bounded by
 *   the line's end, nesting is limited to JSON_MAX_DEPTH, and every failure
 *   is a one-line message "name:LINE: what".
 *
 *   Item format (docs/quantization/evaluation.md): {"context": STRING, "endings": [STRING, ...],
 *   "label": INTEGER}; keys in any order, unknown keys ignored, duplicates
 *   rejected.
 *
 * OWNERSHIP / THREAD SAFETY
 *   The task owns every string (eval_mc_free).  No global state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "eval/eval.h"

#define JSON_MAX_DEPTH 32

typedef struct jcur {
    const char *p;   /* next byte */
    const char *end; /* end of the line */
    const char *name;
    int line;        /* 1-based, for messages */
} jcur;

static void skip_ws(jcur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) c->p++;
}

static int jerr(const jcur *c, const char *what) {
    return err_set(KITE_E_FORMAT, "%s:%d: %s", c->name, c->line, what);
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at c->p (which is '"').  With out != NULL, stores a
 * malloc'd NUL-terminated copy in *out and its length in *len.  The decoded
 * text is never longer than the escaped one (\uXXXX: 6 bytes -> <= 3,
 * a surrogate pair: 12 -> 4), so the raw length bounds the buffer. */
static int parse_string(jcur *c, char **out, size_t *len) {
    if (c->p >= c->end || *c->p != '"') return jerr(c, "expected a string");
    const char *s = ++c->p;
    char *buf = NULL, *d = NULL;
    if (out) {
        if (!(buf = malloc((size_t)(c->end - s) + 1))) return err_set(KITE_E_NOMEM, "out of memory");
        d = buf;
    }
    int rc = KITE_E_FORMAT;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            c->p++;
            if (out) {
                *d = '\0';
                *out = buf;
                *len = (size_t)(d - buf);
            }
            return KITE_OK;
        }
        if (ch < 0x20) {
            rc = jerr(c, "control character inside a string (escape it)");
            goto fail;
        }
        if (ch != '\\') {
            if (d) *d++ = (char)ch;
            c->p++;
            continue;
        }
        if (c->end - c->p < 2) break;
        char e = c->p[1];
        c->p += 2;
        char lit = 0;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (c->end - c->p < 4 || hex4(c->p, &cp)) {
                rc = jerr(c, "bad \\u escape");
                goto fail;
            }
            c->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || hex4(c->p + 2, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF) {
                    rc = jerr(c, "unpaired surrogate in a \\u escape");
                    goto fail;
                }
                c->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                rc = jerr(c, "unpaired surrogate in a \\u escape");
                goto fail;
            }
            if (d) d += put_utf8(d, cp);
            continue;
        }
        default:
            rc = jerr(c, "bad escape in a string");
            goto fail;
        }
        if (d) *d++ = lit;
    }
    rc = jerr(c, "unterminated string");
fail:
    free(buf);
    return rc;
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Validates a JSON number; *is_int tells whether it has no fraction or
 * exponent, and then *ival holds it (if it fits in a long long). */
static int parse_number(jcur *c, bool *is_int, long long *ival) {
    const char *s = c->p;
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p >= c->end || !is_digit(*c->p)) return jerr(c, "bad number");
    if (*c->p == '0') c->p++;
    else
        while (c->p < c->end && is_digit(*c->p)) c->p++;
    bool integer = true;
    if (c->p < c->end && *c->p == '.') {
        integer = false;
        c->p++;
        if (c->p >= c->end || !is_digit(*c->p)) return jerr(c, "bad number");
        while (c->p < c->end && is_digit(*c->p)) c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        integer = false;
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (c->p >= c->end || !is_digit(*c->p)) return jerr(c, "bad number");
        while (c->p < c->end && is_digit(*c->p)) c->p++;
    }
    *is_int = false;
    if (integer) {
        char tmp[24];
        size_t n = (size_t)(c->p - s);
        if (n < sizeof tmp) {
            memcpy(tmp, s, n);
            tmp[n] = '\0';
            errno = 0;
            long long v = strtoll(tmp, NULL, 10);
            if (!errno) {
                *ival = v;
                *is_int = true;
            }
        }
    }
    return KITE_OK;
}

static int skip_value(jcur *c, int depth);

static int skip_container(jcur *c, int depth, char close) {
    if (depth >= JSON_MAX_DEPTH) return jerr(c, "nesting deeper than 32");
    c->p++; /* '[' or '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return KITE_OK;
    }
    for (;;) {
        int rc;
        if (close == '}') {
            if ((rc = parse_string(c, NULL, NULL)) != KITE_OK) return rc;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return jerr(c, "expected ':'");
            c->p++;
            skip_ws(c);
        }
        if ((rc = skip_value(c, depth + 1)) != KITE_OK) return rc;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            skip_ws(c);
            continue;
        }
        if (c->p < c->end && *c->p == close) {
            c->p++;
            return KITE_OK;
        }
        return jerr(c, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int skip_value(jcur *c, int depth) {
    if (c->p >= c->end) return jerr(c, "expected a value");
    static const char *const words[] = {"true", "false", "null"};
    switch (*c->p) {
    case '"': return parse_string(c, NULL, NULL);
    case '{': return skip_container(c, depth, '}');
    case '[': return skip_container(c, depth, ']');
    default: break;
    }
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, words[i], n)) {
            c->p += n;
            return KITE_OK;
        }
    }
    bool is_int;
    long long v;
    return parse_number(c, &is_int, &v);
}

static void item_free(eval_mc_item *it) {
    free(it->context);
    if (it->endings)
        for (int32_t i = 0; i < it->n_endings; i++) free(it->endings[i]);
    free(it->endings);
    free(it->ending_len);
    memset(it, 0, sizeof *it);
}

/* Parses the "endings" array into it. */
static int parse_endings(jcur *c, eval_mc_item *it) {
    if (c->p >= c->end || *c->p != '[') return jerr(c, "\"endings\" must be an array of strings");
    c->p++;
    it->endings = calloc(EVAL_MC_MAX_ENDINGS, sizeof *it->endings);
    it->ending_len = calloc(EVAL_MC_MAX_ENDINGS, sizeof *it->ending_len);
    if (!it->endings || !it->ending_len) return err_set(KITE_E_NOMEM, "out of memory");
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return KITE_OK;
    }
    for (;;) {
        if (it->n_endings == EVAL_MC_MAX_ENDINGS) return jerr(c, "more than 64 endings");
        if (c->p >= c->end || *c->p != '"') return jerr(c, "\"endings\" must be an array of strings");
        int rc = parse_string(c, &it->endings[it->n_endings], &it->ending_len[it->n_endings]);
        if (rc != KITE_OK) return rc;
        it->n_endings++;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            skip_ws(c);
            continue;
        }
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return KITE_OK;
        }
        return jerr(c, "expected ',' or ']' in \"endings\"");
    }
}

/* Parses one item object spanning [c->p, c->end). */
static int parse_item(jcur *c, eval_mc_item *it) {
    bool have_ctx = false, have_end = false, have_label = false;
    long long label = 0;
    char msg[96];
    int rc;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{') return jerr(c, "expected a JSON object");
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            char *key = NULL;
            size_t klen = 0;
            if ((rc = parse_string(c, &key, &klen)) != KITE_OK) return rc;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') {
                free(key);
                return jerr(c, "expected ':'");
            }
            c->p++;
            skip_ws(c);
            bool dup = false;
            if (!strcmp(key, "context") && klen == 7) {
                dup = have_ctx;
                if (!dup) {
                    if (c->p >= c->end || *c->p != '"') rc = jerr(c, "\"context\" must be a string");
                    else rc = parse_string(c, &it->context, &it->context_len);
                    have_ctx = true;
                }
            } else if (!strcmp(key, "endings") && klen == 7) {
                dup = have_end;
                if (!dup) {
                    rc = parse_endings(c, it);
                    have_end = true;
                }
            } else if (!strcmp(key, "label") && klen == 5) {
                dup = have_label;
                if (!dup) {
                    bool is_int = false;
                    if (c->p >= c->end || !(*c->p == '-' || is_digit(*c->p))) rc = jerr(c, "\"label\" must be an integer");
                    else if ((rc = parse_number(c, &is_int, &label)) == KITE_OK && !is_int)
                        rc = jerr(c, "\"label\" must be an integer");
                    have_label = true;
                }
            } else {
                rc = skip_value(c, 1);
            }
            if (dup) {
                snprintf(msg, sizeof msg, "duplicate key \"%s\"", key);
                rc = jerr(c, msg);
            }
            free(key);
            if (rc != KITE_OK) return rc;
            skip_ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                skip_ws(c);
                continue;
            }
            if (c->p < c->end && *c->p == '}') {
                c->p++;
                break;
            }
            return jerr(c, "expected ',' or '}'");
        }
    }
    skip_ws(c);
    if (c->p != c->end) return jerr(c, "trailing characters after the object (one object per line)");
    if (!have_ctx) return jerr(c, "missing \"context\"");
    if (!have_end) return jerr(c, "missing \"endings\"");
    if (!have_label) return jerr(c, "missing \"label\"");
    if (it->n_endings < 2) {
        snprintf(msg, sizeof msg, "%d ending(s), need at least 2", it->n_endings);
        return jerr(c, msg);
    }
    if (label < 0 || label >= it->n_endings) {
        snprintf(msg, sizeof msg, "label %lld out of range (%d endings)", label, it->n_endings);
        return jerr(c, msg);
    }
    it->label = (int32_t)label;
    return KITE_OK;
}

int eval_mc_parse(const char *text, size_t len, const char *name, eval_mc_task *out) {
    if ((!text && len) || !out) return err_set(KITE_E_ARG, "eval_mc_parse: bad arguments");
    if (!name) name = "task";
    eval_mc_task t = {0};
    int32_t cap = 0;
    int rc = KITE_OK;
    const char *p = text, *end = text + len;
    jcur c = {.name = name, .line = 0};
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        c.line++;
        c.p = p;
        c.end = le;
        p = nl ? nl + 1 : end;
        skip_ws(&c);
        if (c.p == c.end) continue; /* blank line */
        if (c.line == INT32_MAX || t.n_items == INT32_MAX) {
            rc = err_set(KITE_E_FORMAT, "%s: too many lines", name);
            goto fail;
        }
        if (t.n_items == cap) {
            int32_t ncap = cap ? (cap < INT32_MAX / 2 ? cap * 2 : INT32_MAX) : 16;
            eval_mc_item *items = realloc(t.items, sizeof *items * (size_t)ncap);
            if (!items) {
                rc = err_set(KITE_E_NOMEM, "out of memory");
                goto fail;
            }
            t.items = items;
            cap = ncap;
        }
        eval_mc_item *it = &t.items[t.n_items];
        memset(it, 0, sizeof *it);
        if ((rc = parse_item(&c, it)) != KITE_OK) {
            item_free(it);
            goto fail;
        }
        t.n_items++;
    }
    if (t.n_items == 0) {
        rc = err_set(KITE_E_FORMAT, "%s: no items", name);
        goto fail;
    }
    *out = t;
    return KITE_OK;
fail:
    eval_mc_free(&t);
    return rc;
}

int eval_mc_load(const char *path, eval_mc_task *out) {
    if (!path || !out) return err_set(KITE_E_ARG, "eval_mc_load: bad arguments");
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    int rc = KITE_OK;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    for (;;) {
        if (n == cap) {
            char *b = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!b) {
                rc = err_set(KITE_E_NOMEM, "%s: out of memory", path);
                goto done;
            }
            buf = b;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) {
        rc = err_set(KITE_E_IO, "%s: read error", path);
        goto done;
    }
    rc = eval_mc_parse(buf, n, path, out);
done:
    free(buf);
    fclose(f);
    return rc;
}

void eval_mc_free(eval_mc_task *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_items; i++) item_free(&t->items[i]);
    free(t->items);
    t->items = NULL;
    t->n_items = 0;
}
