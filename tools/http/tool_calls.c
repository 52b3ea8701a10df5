/*
 * tool_calls.c - the forcing grammar and the output parser of tool calls
 * (contracts and formats in tool_calls.h).
 *
 * THREAD SAFETY
 *   Pure functions; any thread.
 */
#include "http/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "core/textbuf.h"
#include "grammar/json_schema.h"

/* ---- grammar ------------------------------------------------------------------- */


static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* GBNF text with every rule name prefixed: names are the words outside
 * string literals, character classes, {m,n} bounds and comments. */
static void put_prefixed(textbuf *b, const char *g, const char *prefix) {
    size_t i = 0, n = strlen(g);
    while (i < n) {
        char c = g[i];
        size_t j = i + 1;
        if (c == '"' || c == '[') {
            char end = c == '"' ? '"' : ']';
            while (j < n && g[j] != end) j += (g[j] == '\\' && j + 1 < n) ? 2 : 1;
            if (j < n) j++;
        } else if (c == '{') {
            while (j < n && g[j] != '}') j++;
            if (j < n) j++;
        } else if (c == '#') {
            while (j < n && g[j] != '\n') j++;
        } else if (is_word(c)) {
            while (j < n && is_word(g[j])) j++;
            textbuf_put(b, prefix);
        }
        textbuf_putn(b, g + i, j - i);
        i = j;
    }
}

/* A GBNF string literal of s. */
static void put_lit(textbuf *b, const char *s) {
    textbuf_put(b, "\"");
    for (; *s; s++) {
        if (*s == '"') textbuf_put(b, "\\\"");
        else if (*s == '\\') textbuf_put(b, "\\\\");
        else if (*s == '\n') textbuf_put(b, "\\n");
        else textbuf_putn(b, s, 1);
    }
    textbuf_put(b, "\"");
}

size_t tool_grammar_triggers(int family, kite_grammar_trigger *out) {
    switch (chat_tool_format(family)) {
    case CHAT_TOOLS_HERMES: out[0] = (kite_grammar_trigger){"<tool_call>", false}; break;
    case CHAT_TOOLS_LLAMA3: out[0] = (kite_grammar_trigger){"{\"name\":", true}; break; /* bare objects */
    case CHAT_TOOLS_MISTRAL: out[0] = (kite_grammar_trigger){"[TOOL_CALLS]", false}; break;
    default: out[0] = (kite_grammar_trigger){"{\"tool_calls\":", false};
    }
    return 1;
}

int tool_grammar_gbnf(int family, const chat_tool *tools, size_t n, int named, bool parallel, char **out) {
    if (!out || (!tools && n) || named >= (int)n)
        return err_set(KITE_E_ARG, "tool_grammar_gbnf: bad arguments");
    if (n == 0) return err_set(KITE_E_ARG, "tool_grammar_gbnf: no tools");
    int fmt = chat_tool_format(family);
    const char *args_key = fmt == CHAT_TOOLS_LLAMA3 ? "parameters" : "arguments";
    textbuf b = {0};
    /* the call alternatives */
    textbuf_put(&b, "tc-call ::=");
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (named >= 0 && (size_t)named != i) continue;
        char r[32];
        snprintf(r, sizeof r, "%s tc-call-%zu", first ? "" : " |", i);
        textbuf_put(&b, r);
        first = false;
    }
    textbuf_put(&b, "\n");
    for (size_t i = 0; i < n; i++) {
        if (named >= 0 && (size_t)named != i) continue;
        const char *schema = tools[i].parameters ? tools[i].parameters : "{\"type\":\"object\"}";
        char *g = NULL;
        int st = grammar_json_schema_to_gbnf(schema, strlen(schema), &g);
        if (st != KITE_OK) {
            char msg[384];
            snprintf(msg, sizeof msg, "%s", kite_last_error());
            free(b.p);
            return err_set(st, "tools[%zu].function.parameters: %s", i, msg);
        }
        char prefix[24], head[160];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        snprintf(head, sizeof head, "tc-call-%zu ::= ", i);
        textbuf_put(&b, head);
        char lit[160];
        snprintf(lit, sizeof lit, "{\"name\": \"%s\", \"%s\": ", tools[i].name, args_key);
        put_lit(&b, lit);
        textbuf_put(&b, " ");
        textbuf_put(&b, prefix);
        textbuf_put(&b, "root \"}\"\n");
        put_prefixed(&b, g, prefix);
        textbuf_put(&b, "\n");
        free(g);
    }
    switch (fmt) {
    case CHAT_TOOLS_HERMES:
        textbuf_put(&b, "tc-one ::= \"<tool_call>\\n\" tc-call \"\\n</tool_call>\"\n");
        textbuf_put(&b, parallel ? "root ::= tc-one ( \"\\n\" tc-one )*\n" : "root ::= tc-one\n");
        break;
    case CHAT_TOOLS_LLAMA3:
        textbuf_put(&b, parallel ? "root ::= tc-call ( \"\\n\" tc-call )*\n" : "root ::= tc-call\n");
        break;
    case CHAT_TOOLS_MISTRAL:
        textbuf_put(&b, parallel ? "root ::= \"[TOOL_CALLS] [\" tc-call ( \", \" tc-call )* \"]\"\n"
                            : "root ::= \"[TOOL_CALLS] [\" tc-call \"]\"\n");
        break;
    default:
        textbuf_put(&b, parallel ? "root ::= \"{\\\"tool_calls\\\": [\" tc-call ( \", \" tc-call )* \"]}\"\n"
                            : "root ::= \"{\\\"tool_calls\\\": [\" tc-call \"]}\"\n");
    }
    if (b.oom) {
        free(b.p);
        return err_set(KITE_E_NOMEM, "tool_grammar_gbnf: out of memory");
    }
    *out = b.p;
    return KITE_OK;
}

/* ---- parser (incremental; tool_calls_parse is one final feed) ------------------ */

static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool known(const chat_tool *tools, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (tools[i].name && !strcmp(tools[i].name, name)) return true;
    return false;
}

enum { TS_SCAN, TS_H_OPEN, TS_L3_START, TS_L3_NEXT, TS_LIST_OPEN, TS_LIST_ITEM, TS_LIST_NEXT, TS_CALL, TS_TEXT, TS_STOP };
enum { CS_MORE, CS_BAD, CS_DONE };

/* Whether a marker starts at t[p]: its length, 0 (no), -1 (the text ends
 * inside what may still become one).  ' ' in a pattern is white space*. */
static long marker_at(int fmt, const char *t, size_t len, size_t p) {
    const char *pat = fmt == CHAT_TOOLS_HERMES ? "<tool_call>" : fmt == CHAT_TOOLS_MISTRAL ? "[TOOL_CALLS]"
                                                                                          : "{ \"tool_calls\" :";
    size_t q = p;
    for (const char *c = pat; *c; c++) {
        if (*c == ' ') {
            while (q < len && ws(t[q])) q++;
            continue;
        }
        if (q == len) return -1;
        if (t[q] != *c) return 0;
        q++;
    }
    return (long)(q - p);
}

/* The end of the JSON value at t[p] (p < len): CS_DONE with *end set,
 * CS_MORE when the text ends inside it, CS_BAD.  Only the extent is found
 * (strings, nesting); cJSON validates the whole call at its end. */
static int value_end(const char *t, size_t len, size_t p, size_t *end) {
    char c = t[p];
    if (c == '"') {
        for (size_t q = p + 1; q < len; q++) {
            if (t[q] == '\\') q++;
            else if (t[q] == '"') {
                *end = q + 1;
                return CS_DONE;
            }
        }
        return CS_MORE;
    }
    if (c == '{' || c == '[') {
        size_t depth = 0;
        bool str = false;
        for (size_t q = p; q < len; q++) {
            char d = t[q];
            if (str) {
                if (d == '\\') q++;
                else if (d == '"') str = false;
            } else if (d == '"') {
                str = true;
            } else if (d == '{' || d == '[') {
                depth++;
            } else if ((d == '}' || d == ']') && --depth == 0) {
                *end = q + 1;
                return CS_DONE;
            }
        }
        return CS_MORE;
    }
    if (c == '}' || c == ']' || c == ',' || c == ':') return CS_BAD;
    size_t q = p;
    while (q < len && !ws(t[q]) && t[q] != ',' && t[q] != '}' && t[q] != ']') q++;
    if (q == len) return CS_MORE;
    *end = q;
    return CS_DONE;
}

/* One call object from t[at] == '{' as far as the text goes: the spans of
 * the first "name" (when a string) and of the first "arguments" or
 * "parameters" value (args_end 0 while it is open), and the object's end. */
typedef struct call_scan {
    int st;                    /* CS_MORE, CS_BAD, CS_DONE */
    size_t name_off, name_end; /* the name's string token; 0 = none */
    size_t args_off, args_end; /* the arguments value; 0 = none / open */
    size_t end;                /* past the object's '}' (CS_DONE) */
} call_scan;

static void scan_call(const char *t, size_t len, size_t at, call_scan *cs) {
    memset(cs, 0, sizeof *cs);
    cs->st = CS_MORE;
    bool seen_name = false;
    size_t p = at + 1;
#define SKIP_WS()                                                                                                      \
    do {                                                                                                               \
        while (p < len && ws(t[p])) p++;                                                                               \
        if (p >= len) return;                                                                                          \
    } while (0)
    for (bool first = true;; first = false) {
        SKIP_WS();
        if (t[p] == '}' && first) {
            cs->end = p + 1;
            cs->st = CS_DONE;
            return;
        }
        if (t[p] != '"') {
            cs->st = CS_BAD;
            return;
        }
        size_t kend = 0;
        int st = value_end(t, len, p, &kend);
        if (st != CS_DONE) {
            cs->st = st;
            return;
        }
        const char *k = t + p + 1;
        size_t kn = kend - p - 2;
        p = kend;
        SKIP_WS();
        if (t[p] != ':') {
            cs->st = CS_BAD;
            return;
        }
        p++;
        SKIP_WS();
        size_t v0 = p, vend = 0;
        st = value_end(t, len, p, &vend);
        bool is_args = (kn == 9 && !memcmp(k, "arguments", 9)) || (kn == 10 && !memcmp(k, "parameters", 10));
        if (is_args && !cs->args_off) {
            cs->args_off = v0;
            cs->args_end = st == CS_DONE ? vend : 0;
        }
        if (st != CS_DONE) {
            cs->st = st;
            return;
        }
        if (kn == 4 && !memcmp(k, "name", 4) && !seen_name) {
            seen_name = true;
            if (t[v0] == '"') {
                cs->name_off = v0;
                cs->name_end = vend;
            }
        }
        p = vend;
        SKIP_WS();
        if (t[p] == '}') {
            cs->end = p + 1;
            cs->st = CS_DONE;
            return;
        }
        if (t[p] != ',') {
            cs->st = CS_BAD;
            return;
        }
        p++;
    }
#undef SKIP_WS
}

/* The decoded name of a scanned call (malloc'd), NULL if none or empty. */
static char *call_name(const char *t, const call_scan *cs) {
    if (!cs->name_off) return NULL;
    cJSON *v = cJSON_ParseWithLength(t + cs->name_off, cs->name_end - cs->name_off);
    char *n = cJSON_IsString(v) && v->valuestring[0] ? strdup(v->valuestring) : NULL;
    cJSON_Delete(v);
    return n;
}

void tool_stream_init(tool_stream *s, int family, const chat_tool *tools, size_t n_tools) {
    memset(s, 0, sizeof *s);
    s->fmt = chat_tool_format(family);
    s->tools = tools;
    s->n_tools = n_tools;
    s->mode = s->fmt == CHAT_TOOLS_LLAMA3 ? TS_L3_START : TS_SCAN;
}

/* Not a call where one was expected: before any call the whole text is content. */
static void ts_fail(tool_stream *s) { s->mode = s->n_calls ? TS_STOP : TS_TEXT; }

static bool ts_content(tool_stream *s, const char *t, size_t to, const tool_stream_sink *k) {
    if (to <= s->content_end) return true;
    bool ok = k->content(k->user, t + s->content_end, to - s->content_end);
    s->content_end = to;
    return ok;
}

static bool ts_args(tool_stream *s, const char *t, size_t to, const tool_stream_sink *k) {
    if (to <= s->args_sent) return true;
    bool ok = k->args(k->user, s->n_calls - 1, t + s->args_sent, to - s->args_sent);
    s->args_sent = to;
    return ok;
}

/* The call at s->call_start: header and arguments as far as they go. */
static bool ts_call(tool_stream *s, const char *t, size_t len, bool final, const tool_stream_sink *k) {
    call_scan cs;
    scan_call(t, len, s->call_start, &cs);
    if (cs.st == CS_BAD) {
        if (s->committed) s->mode = TS_STOP; /* streamed already: it stays a call */
        else ts_fail(s);
        s->committed = false;
        return true;
    }
    if (cs.st == CS_MORE) {
        if (final) { /* cut off (max_tokens): dropped unless already streamed */
            bool ok = true;
            if (s->committed) {
                ok = ts_args(s, t, cs.args_end ? cs.args_end : len, k);
                s->cut = true;
                s->mode = TS_STOP;
            } else {
                ts_fail(s);
            }
            s->committed = false;
            return ok;
        }
        if (!s->committed && cs.args_off && t[cs.args_off] == '{') {
            char *name = call_name(t, &cs);
            if (name && (s->fmt != CHAT_TOOLS_LLAMA3 || known(s->tools, s->n_tools, name))) {
                s->n_calls++;
                s->committed = true;
                s->args_sent = cs.args_off;
                bool ok = k->call(k->user, s->n_calls - 1, name);
                free(name);
                if (!ok) return false;
            } else {
                free(name);
            }
        }
        return !s->committed || ts_args(s, t, cs.args_end ? cs.args_end : len, k);
    }
    /* complete: validated as a whole, then sent (or the rest of it) */
    bool ok = true;
    if (s->committed) {
        ok = ts_args(s, t, cs.args_end, k);
    } else {
        cJSON *o = cJSON_ParseWithLength(t + s->call_start, cs.end - s->call_start);
        char *name = cJSON_IsObject(o) ? call_name(t, &cs) : NULL;
        char *inner = NULL; /* arguments given as a JSON string holding an object */
        bool good = name && cs.args_off && (s->fmt != CHAT_TOOLS_LLAMA3 || known(s->tools, s->n_tools, name));
        if (good && t[cs.args_off] == '"') {
            cJSON *v = cJSON_ParseWithLength(t + cs.args_off, cs.args_end - cs.args_off);
            cJSON *in = cJSON_IsString(v) ? cJSON_Parse(v->valuestring) : NULL;
            if (cJSON_IsObject(in)) inner = strdup(v->valuestring);
            good = inner != NULL;
            cJSON_Delete(in);
            cJSON_Delete(v);
        } else if (good) {
            good = t[cs.args_off] == '{';
        }
        cJSON_Delete(o);
        if (!good) {
            free(name);
            free(inner);
            ts_fail(s);
            return true;
        }
        s->n_calls++;
        ok = k->call(k->user, s->n_calls - 1, name);
        if (ok && inner) ok = k->args(k->user, s->n_calls - 1, inner, strlen(inner));
        else if (ok) {
            s->args_sent = cs.args_off;
            ok = ts_args(s, t, cs.args_end, k);
        }
        free(name);
        free(inner);
    }
    s->committed = false;
    s->pos = cs.end;
    s->mode = s->fmt == CHAT_TOOLS_HERMES ? TS_SCAN : s->fmt == CHAT_TOOLS_LLAMA3 ? TS_L3_NEXT : TS_LIST_NEXT;
    return ok;
}

bool tool_stream_feed(tool_stream *s, const char *t, size_t len, bool final, const tool_stream_sink *k) {
    static const char tag[] = "<|python_tag|>";
    for (;;) {
        size_t p = s->pos;
        switch (s->mode) {
        case TS_STOP:
            return true;
        case TS_TEXT:
            return ts_content(s, t, len, k);
        case TS_SCAN: { /* content (before the first call) up to a marker */
            long m = 0;
            for (; p < len; p++)
                if ((m = marker_at(s->fmt, t, len, p)) != 0) break;
            if (m < 0 && final) m = 0, p = len; /* a marker that never came */
            size_t held = p;                     /* white space before a call is not content */
            while (held > s->content_end && ws(t[held - 1])) held--;
            if (!s->n_calls && !ts_content(s, t, p == len && final ? len : held, k)) return false;
            if (m <= 0) {
                s->pos = p;
                if (final) s->mode = TS_STOP;
                if (final || m < 0 || p == len) return true;
            }
            s->pos = p + (size_t)m;
            s->mode = s->fmt == CHAT_TOOLS_HERMES ? TS_H_OPEN : TS_LIST_OPEN;
            break;
        }
        case TS_L3_START:
        case TS_L3_NEXT:
        case TS_H_OPEN:
        case TS_LIST_OPEN:
        case TS_LIST_ITEM:
        case TS_LIST_NEXT:
            while (p < len && (ws(t[p]) || (s->mode == TS_L3_NEXT && t[p] == ';'))) p++;
            s->pos = p;
            if (s->mode == TS_L3_START && p < len && t[p] == '<') {
                size_t n = len - p < sizeof tag - 1 ? len - p : sizeof tag - 1;
                if (memcmp(t + p, tag, n)) {
                    ts_fail(s);
                } else if (n == sizeof tag - 1) {
                    s->pos = p + n;
                    s->mode = TS_L3_NEXT;
                } else if (final) {
                    ts_fail(s);
                } else {
                    return true;
                }
                break;
            }
            if (p == len) {
                if (!final) return true;
                ts_fail(s);
                break;
            }
            if (s->mode == TS_LIST_OPEN) {
                if (t[p] == '[') s->pos = p + 1, s->mode = TS_LIST_ITEM;
                else ts_fail(s);
            } else if (s->mode == TS_LIST_NEXT) {
                if (t[p] == ',') s->pos = p + 1, s->mode = TS_LIST_ITEM;
                else s->mode = TS_STOP;
            } else if (t[p] == '{') {
                s->call_start = p;
                s->mode = TS_CALL;
            } else {
                ts_fail(s);
            }
            break;
        case TS_CALL:
            if (!ts_call(s, t, len, final, k)) return false;
            if (s->mode == TS_CALL) return true; /* waits for more text */
            break;
        }
    }
}

/* ---- the whole text at once ---- */

typedef struct collect {
    tool_parse *p;
    textbuf content, args; /* args: the current (last) call's */
    bool oom;
} collect;

static void collect_close(collect *c) {
    if (c->p->n_calls && !c->p->calls[c->p->n_calls - 1].arguments) {
        if (c->args.oom) c->oom = true;
        c->p->calls[c->p->n_calls - 1].arguments = c->args.p ? c->args.p : strdup("");
        if (!c->p->calls[c->p->n_calls - 1].arguments) c->oom = true;
    }
    memset(&c->args, 0, sizeof c->args);
}

static bool collect_content(void *u, const char *s, size_t n) {
    textbuf_putn(&((collect *)u)->content, s, n);
    return true;
}

static bool collect_call(void *u, size_t k, const char *name) {
    collect *c = u;
    (void)k;
    collect_close(c);
    tool_parsed_call *q = realloc(c->p->calls, (c->p->n_calls + 1) * sizeof *q);
    char *nm = strdup(name);
    if (!q || !nm) {
        if (q) c->p->calls = q;
        free(nm);
        c->oom = true;
        return false;
    }
    c->p->calls = q;
    c->p->calls[c->p->n_calls++] = (tool_parsed_call){nm, NULL};
    return true;
}

static bool collect_args(void *u, size_t k, const char *s, size_t n) {
    (void)k;
    textbuf_putn(&((collect *)u)->args, s, n);
    return true;
}

bool tool_calls_parse(int family, const char *text, size_t len, const chat_tool *tools, size_t n_tools,
                      tool_parse *out) {
    memset(out, 0, sizeof *out);
    if (!text) return false;
    collect c = {.p = out};
    tool_stream_sink sink = {&c, collect_content, collect_call, collect_args};
    tool_stream s;
    tool_stream_init(&s, family, tools, n_tools);
    bool ok = tool_stream_feed(&s, text, len, true, &sink);
    collect_close(&c);
    free(c.args.p);
    if (!ok || c.oom || c.content.oom || out->n_calls == 0) {
        free(c.content.p);
        tool_parse_free(out);
        return false;
    }
    if (c.content.p && c.content.p[0]) out->content = c.content.p;
    else free(c.content.p);
    return true;
}

void tool_parse_free(tool_parse *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p->content);
    memset(p, 0, sizeof *p);
}
