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

/* ---- parser -------------------------------------------------------------------- */

static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *find(const char *s, const char *end, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = s; p + n <= end; p++)
        if (!memcmp(p, needle, n)) return p;
    return NULL;
}

static bool known(const chat_tool *tools, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (tools[i].name && !strcmp(tools[i].name, name)) return true;
    return false;
}

/* Parses one JSON value at text[*pos..len) (leading white space skipped);
 * NULL if there is none.  *pos moves past it. */
static cJSON *json_at(const char *text, size_t len, size_t *pos) {
    while (*pos < len && ws(text[*pos])) (*pos)++;
    if (*pos >= len) return NULL;
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text + *pos, len - *pos, &end, false);
    if (!v) return NULL;
    if (end && end > text + *pos && end <= text + len) *pos = (size_t)(end - text);
    else *pos = len;
    return v;
}

/* Adds the call in object o ({"name": ..., "arguments"|"parameters": ...}). */
static bool add_call(tool_parse *p, const cJSON *o, const chat_tool *tools, size_t n_tools, bool need_known) {
    if (!cJSON_IsObject(o)) return false;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsString(name) || !name->valuestring[0] || !args) return false;
    if (need_known && !known(tools, n_tools, name->valuestring)) return false;
    char *a = NULL;
    if (cJSON_IsObject(args)) {
        a = cJSON_PrintUnformatted(args);
    } else if (cJSON_IsString(args)) { /* arguments as a JSON string: must hold an object */
        cJSON *inner = cJSON_Parse(args->valuestring);
        if (cJSON_IsObject(inner)) a = cJSON_PrintUnformatted(inner);
        cJSON_Delete(inner);
        if (!a) return false;
    } else {
        return false;
    }
    tool_parsed_call *q = realloc(p->calls, (p->n_calls + 1) * sizeof *q);
    char *nm = strdup(name->valuestring);
    if (!a || !q || !nm) {
        if (q) p->calls = q;
        free(a);
        free(nm);
        return false;
    }
    p->calls = q;
    p->calls[p->n_calls++] = (tool_parsed_call){nm, a};
    return true;
}

static void parse_hermes(tool_parse *p, const char *text, size_t len, const chat_tool *tools, size_t n_tools) {
    const char *end = text + len;
    const char *at = find(text, end, "<tool_call>");
    while (at) {
        size_t pos = (size_t)(at - text) + strlen("<tool_call>");
        cJSON *o = json_at(text, len, &pos);
        bool ok = o && add_call(p, o, tools, n_tools, false);
        cJSON_Delete(o);
        if (!ok) return;
        at = find(text + pos, end, "<tool_call>");
    }
}

static void parse_llama3(tool_parse *p, const char *text, size_t len, size_t pos, const chat_tool *tools,
                         size_t n_tools) {
    static const char tag[] = "<|python_tag|>";
    if (len - pos >= sizeof tag - 1 && !memcmp(text + pos, tag, sizeof tag - 1)) pos += sizeof tag - 1;
    for (;;) {
        while (pos < len && (ws(text[pos]) || text[pos] == ';')) pos++;
        if (pos >= len || text[pos] != '{') return;
        cJSON *o = json_at(text, len, &pos);
        bool ok = o && add_call(p, o, tools, n_tools, true);
        cJSON_Delete(o);
        if (!ok) return;
    }
}

/* A list of call objects at text[pos]: "[" obj ("," obj)* "]", stopping at the first bad one. */
static void parse_list(tool_parse *p, const char *text, size_t len, size_t pos, const chat_tool *tools,
                       size_t n_tools) {
    while (pos < len && ws(text[pos])) pos++;
    if (pos >= len || text[pos] != '[') return;
    pos++;
    for (;;) {
        cJSON *o = json_at(text, len, &pos);
        bool ok = o && add_call(p, o, tools, n_tools, false);
        cJSON_Delete(o);
        if (!ok) return;
        while (pos < len && ws(text[pos])) pos++;
        if (pos >= len || text[pos] != ',') return;
        pos++;
    }
}

bool tool_calls_parse(int family, const char *text, size_t len, const chat_tool *tools, size_t n_tools,
                      tool_parse *out) {
    memset(out, 0, sizeof *out);
    if (!text) return false;
    const char *end = text + len;
    const char *start = NULL; /* where the calls begin: the content is the text before */
    size_t lead = 0;
    while (lead < len && ws(text[lead])) lead++;
    switch (chat_tool_format(family)) {
    case CHAT_TOOLS_HERMES:
        start = find(text, end, "<tool_call>");
        if (start) parse_hermes(out, text, len, tools, n_tools);
        break;
    case CHAT_TOOLS_LLAMA3:
        start = text + lead;
        parse_llama3(out, text, len, lead, tools, n_tools);
        break;
    case CHAT_TOOLS_MISTRAL:
        start = find(text, end, "[TOOL_CALLS]");
        if (start) parse_list(out, text, len, (size_t)(start - text) + strlen("[TOOL_CALLS]"), tools, n_tools);
        break;
    default:
        /* {"tool_calls": [...]}: the first '{' whose object names tool_calls */
        for (const char *q = text; q < end; q++) {
            if (*q != '{') continue;
            size_t pos = (size_t)(q - text) + 1;
            while (pos < len && ws(text[pos])) pos++;
            static const char key[] = "\"tool_calls\"";
            if (len - pos < sizeof key - 1 || memcmp(text + pos, key, sizeof key - 1)) continue;
            pos += sizeof key - 1;
            while (pos < len && ws(text[pos])) pos++;
            if (pos >= len || text[pos] != ':') continue;
            start = q;
            parse_list(out, text, len, pos + 1, tools, n_tools);
            break;
        }
    }
    if (out->n_calls == 0) {
        tool_parse_free(out);
        return false;
    }
    size_t n = (size_t)(start - text);
    while (n > 0 && ws(text[n - 1])) n--;
    if (n > 0) {
        if (!(out->content = malloc(n + 1))) {
            tool_parse_free(out);
            return false;
        }
        memcpy(out->content, text, n);
        out->content[n] = '\0';
    }
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
