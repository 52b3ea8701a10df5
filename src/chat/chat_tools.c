/*
 * chat_tools.c - tool lists, tool calls and tool results in chat prompts
 * (the formats are in chat_tools.h and docs/chat.md).
 *
 * DESIGN
 *   HERMES and GENERIC rewrite the conversation into plain system / user /
 *   assistant messages (the tool list merged into the system message, calls
 *   appended to the assistant's content, consecutive results merged into one
 *   user turn) and hand it to chat_apply, so the turn markup is the family's
 *   own.  LLAMA3 (an "ipython" role) and MISTRAL (v0.3 turns) are written
 *   directly.  The library has no JSON parser: tool JSON is built here from
 *   the fields and re-spaced by chat_json_respace.
 *
 * INVARIANTS
 *   Every string made here is recorded in a `pool` freed at the end; on any
 *   error *out is untouched.
 *
 * THREAD SAFETY
 *   Reentrant.
 */
#include "chat/chat_tools.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/textbuf.h"

/* ---- text helpers (core/textbuf.h) ---------------------------------------------- */

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* A JSON string literal of s (json.dumps with ensure_ascii=False). */
static void tb_put_jstr(textbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    textbuf_put(b, "\"");
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        char e[7];
        switch (*q) {
        case '"': textbuf_put(b, "\\\""); break;
        case '\\': textbuf_put(b, "\\\\"); break;
        case '\n': textbuf_put(b, "\\n"); break;
        case '\r': textbuf_put(b, "\\r"); break;
        case '\t': textbuf_put(b, "\\t"); break;
        case '\b': textbuf_put(b, "\\b"); break;
        case '\f': textbuf_put(b, "\\f"); break;
        default:
            if (*q < 0x20) {
                memcpy(e, "\\u00", 4);
                e[4] = hex[*q >> 4];
                e[5] = hex[*q & 15];
                textbuf_putn(b, e, 6);
            } else {
                textbuf_putn(b, (const char *)q, 1);
            }
        }
    }
    textbuf_put(b, "\"");
}

static void tb_indent(textbuf *b, int indent, int depth) {
    textbuf_put(b, "\n");
    for (int i = 0; i < indent * depth; i++) textbuf_put(b, " ");
}

char *chat_json_respace(const char *s, int indent) {
    textbuf b = {0};
    textbuf_put(&b, "");
    int depth = 0;
    for (size_t i = 0; s && s[i]; i++) {
        char c = s[i];
        if (c == '"') { /* a string, escapes included, verbatim */
            size_t j = i + 1;
            while (s[j] && s[j] != '"') j += (s[j] == '\\' && s[j + 1]) ? 2 : 1;
            textbuf_putn(&b, s + i, (s[j] ? j + 1 : j) - i);
            if (!s[j]) break;
            i = j;
        } else if (is_space(c)) {
            continue;
        } else if (c == '{' || c == '[') {
            size_t j = i + 1;
            while (is_space(s[j])) j++;
            if (s[j] == (c == '{' ? '}' : ']')) {
                textbuf_put(&b, c == '{' ? "{}" : "[]");
                i = j;
                continue;
            }
            textbuf_putn(&b, &c, 1);
            depth++;
            if (indent >= 0) tb_indent(&b, indent, depth);
        } else if (c == '}' || c == ']') {
            if (depth > 0) depth--;
            if (indent >= 0) tb_indent(&b, indent, depth);
            textbuf_putn(&b, &c, 1);
        } else if (c == ',') {
            textbuf_put(&b, ",");
            if (indent >= 0) tb_indent(&b, indent, depth);
            else textbuf_put(&b, " ");
        } else if (c == ':') {
            textbuf_put(&b, ": ");
        } else {
            textbuf_putn(&b, &c, 1);
        }
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* {"type": "function", "function": {"name": ..., "description": ..., "parameters": ...}} re-spaced. */
static char *tool_json(const chat_tool *t, int indent, bool function_only) {
    textbuf b = {0};
    if (!function_only) textbuf_put(&b, "{\"type\":\"function\",\"function\":");
    textbuf_put(&b, "{\"name\":");
    tb_put_jstr(&b, t->name);
    if (t->description) {
        textbuf_put(&b, ",\"description\":");
        tb_put_jstr(&b, t->description);
    }
    if (t->parameters) {
        textbuf_put(&b, ",\"parameters\":");
        textbuf_put(&b, t->parameters);
    }
    textbuf_put(&b, function_only ? "}" : "}}");
    char *r = b.oom ? NULL : chat_json_respace(b.p, indent);
    free(b.p);
    return r;
}

/* ---- formats ------------------------------------------------------------------ */

int chat_tool_format(int family) {
    switch (family) {
    case CHAT_CHATML: return CHAT_TOOLS_HERMES;
    case CHAT_LLAMA3: return CHAT_TOOLS_LLAMA3;
    case CHAT_MISTRAL: return CHAT_TOOLS_MISTRAL;
    default: return CHAT_TOOLS_GENERIC;
    }
}

const char *chat_tool_format_name(int format) {
    static const char *const names[] = {"hermes", "llama3", "mistral", "generic"};
    return format >= 0 && format <= CHAT_TOOLS_GENERIC ? names[format] : "?";
}

/* Strings made while rewriting, freed together. */
typedef struct pool {
    char **p;
    size_t n;
    bool oom;
} pool;

static const char *pool_take(pool *pl, textbuf *b) {
    if (b->oom || pl->oom) {
        free(b->p);
        pl->oom = true;
        return "";
    }
    char **q = realloc(pl->p, (pl->n + 1) * sizeof *q);
    if (!q) {
        free(b->p);
        pl->oom = true;
        return "";
    }
    pl->p = q;
    pl->p[pl->n++] = b->p ? b->p : strdup("");
    if (!pl->p[pl->n - 1]) pl->oom = true;
    memset(b, 0, sizeof *b);
    return pl->p[pl->n - 1] ? pl->p[pl->n - 1] : "";
}

static void pool_free(pool *pl) {
    for (size_t i = 0; i < pl->n; i++) free(pl->p[i]);
    free(pl->p);
}

static const char HERMES_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char HERMES_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";
static const char GENERIC_HEAD[] = "You can call the following tools (their parameters are JSON Schemas):\n";
static const char GENERIC_TAIL[] =
    "\nTo call tools, answer with only a JSON object of this form: {\"tool_calls\": [{\"name\": <tool name>, "
    "\"arguments\": <arguments object>}]}.";

/* One call in the HERMES or GENERIC syntax. */
static void put_call(textbuf *b, const chat_tool_call *c, const char *args_key) {
    textbuf_put(b, "{\"name\": ");
    tb_put_jstr(b, c->name);
    textbuf_put(b, ", \"");
    textbuf_put(b, args_key);
    textbuf_put(b, "\": ");
    textbuf_put(b, c->arguments);
    textbuf_put(b, "}");
}

/* HERMES / GENERIC: rewrite into system/user/assistant messages, then chat_apply. */
static int apply_rewritten(int family, int fmt, const chat_msg *msgs, const chat_msg_tools *ext, size_t n,
                           const chat_tool *tools, size_t n_tools, bool gen, char **out) {
    pool pl = {0};
    chat_msg *m = calloc(n + 1, sizeof *m);
    if (!m) return err_set(KITE_E_NOMEM, "chat_apply_tools: out of memory");
    size_t k = 0, i = 0;
    if (n_tools) {
        textbuf b = {0};
        if (n && !strcmp(msgs[0].role, "system")) {
            textbuf_put(&b, msgs[0].content);
            textbuf_put(&b, "\n\n");
            i = 1;
        }
        textbuf_put(&b, fmt == CHAT_TOOLS_HERMES ? HERMES_HEAD : GENERIC_HEAD);
        for (size_t t = 0; t < n_tools; t++) {
            char *j = tool_json(&tools[t], -1, false);
            if (!j) b.oom = true;
            else {
                if (fmt == CHAT_TOOLS_HERMES) textbuf_put(&b, "\n");
                textbuf_put(&b, j);
                if (fmt == CHAT_TOOLS_GENERIC) textbuf_put(&b, "\n");
            }
            free(j);
        }
        textbuf_put(&b, fmt == CHAT_TOOLS_HERMES ? HERMES_TAIL : GENERIC_TAIL);
        m[k++] = (chat_msg){.role = "system", .content = pool_take(&pl, &b)};
    }
    for (; i < n; i++) {
        const chat_msg_tools *x = ext ? &ext[i] : NULL;
        if (!strcmp(msgs[i].role, "tool")) {
            textbuf b = {0};
            for (; i < n && !strcmp(msgs[i].role, "tool"); i++) {
                const char *id = ext ? ext[i].tool_call_id : NULL;
                if (fmt == CHAT_TOOLS_HERMES) {
                    if (b.len) textbuf_put(&b, "\n");
                    textbuf_put(&b, "<tool_response>\n");
                    textbuf_put(&b, msgs[i].content);
                    textbuf_put(&b, "\n</tool_response>");
                } else {
                    if (b.len) textbuf_put(&b, "\n\n");
                    textbuf_put(&b, "Tool result");
                    if (id) {
                        textbuf_put(&b, " (");
                        textbuf_put(&b, id);
                        textbuf_put(&b, ")");
                    }
                    textbuf_put(&b, ":\n");
                    textbuf_put(&b, msgs[i].content);
                }
            }
            i--;
            m[k++] = (chat_msg){.role = "user", .content = pool_take(&pl, &b)};
        } else if (x && x->n_calls) {
            textbuf b = {0};
            textbuf_put(&b, msgs[i].content);
            if (fmt == CHAT_TOOLS_HERMES) {
                for (size_t c = 0; c < x->n_calls; c++) {
                    if (c || msgs[i].content[0]) textbuf_put(&b, "\n");
                    textbuf_put(&b, "<tool_call>\n");
                    put_call(&b, &x->calls[c], "arguments");
                    textbuf_put(&b, "\n</tool_call>");
                }
            } else {
                if (msgs[i].content[0]) textbuf_put(&b, "\n");
                textbuf_put(&b, "{\"tool_calls\": [");
                for (size_t c = 0; c < x->n_calls; c++) {
                    if (c) textbuf_put(&b, ", ");
                    put_call(&b, &x->calls[c], "arguments");
                }
                textbuf_put(&b, "]}");
            }
            m[k++] = (chat_msg){.role = msgs[i].role, .content = pool_take(&pl, &b)};
        } else {
            m[k++] = msgs[i];
        }
    }
    int st = pl.oom ? err_set(KITE_E_NOMEM, "chat_apply_tools: out of memory") : chat_apply(family, m, k, gen, out);
    free(m);
    pool_free(&pl);
    return st;
}

/* LLAMA3 (Meta's Llama 3.1 template, tools in the first user message). */
static void fmt_llama3_tools(textbuf *b, const chat_msg *msgs, const chat_msg_tools *ext, size_t n,
                             const chat_tool *tools, size_t n_tools, bool gen) {
    size_t i = 0;
    bool tools_pending = n_tools > 0;
    if (n_tools) {
        textbuf_put(b, "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
                  "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (n && !strcmp(msgs[0].role, "system")) {
            textbuf_put_trim(b, msgs[0].content);
            i = 1;
        }
        textbuf_put(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        const chat_msg_tools *x = ext ? &ext[i] : NULL;
        const char *role = msgs[i].role;
        if (!strcmp(role, "tool")) role = "ipython";
        textbuf_put(b, "<|start_header_id|>");
        textbuf_put(b, tools_pending ? "user" : role);
        textbuf_put(b, "<|end_header_id|>\n\n");
        if (tools_pending) {
            textbuf_put(b, "Given the following functions, please respond with a JSON for a function call with its "
                      "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
                      "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
                      "variables.\n\n");
            for (size_t t = 0; t < n_tools; t++) {
                char *j = tool_json(&tools[t], 4, false);
                if (!j) b->oom = true;
                else textbuf_put(b, j);
                free(j);
                textbuf_put(b, "\n\n");
            }
            tools_pending = false;
            if (strcmp(role, "user")) { /* no first user message: the tools get a turn of their own */
                textbuf_put(b, "<|eot_id|><|start_header_id|>");
                textbuf_put(b, role);
                textbuf_put(b, "<|end_header_id|>\n\n");
            }
        }
        if (x && x->n_calls) {
            for (size_t c = 0; c < x->n_calls; c++) {
                if (c) textbuf_put(b, "\n");
                put_call(b, &x->calls[c], "parameters");
            }
        } else if (!strcmp(role, "ipython")) {
            textbuf_put(b, msgs[i].content);
        } else {
            textbuf_put_trim(b, msgs[i].content);
        }
        textbuf_put(b, "<|eot_id|>");
    }
    if (tools_pending) { /* tools but no message after the system one */
        textbuf_put(b, "<|start_header_id|>user<|end_header_id|>\n\n");
        for (size_t t = 0; t < n_tools; t++) {
            char *j = tool_json(&tools[t], 4, false);
            if (!j) b->oom = true;
            else textbuf_put(b, j);
            free(j);
            textbuf_put(b, "\n\n");
        }
        textbuf_put(b, "<|eot_id|>");
    }
    if (gen) textbuf_put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* MISTRAL (Mistral-7B-Instruct-v0.3's template). */
static void fmt_mistral_tools(textbuf *b, const chat_msg *msgs, const chat_msg_tools *ext, size_t n,
                              const chat_tool *tools, size_t n_tools) {
    size_t last_user = n;
    textbuf sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "user")) last_user = i;
        if (!strcmp(msgs[i].role, "system")) {
            if (sys.len) textbuf_put(&sys, "\n\n");
            textbuf_put(&sys, msgs[i].content);
        }
    }
    for (size_t i = 0; i < n; i++) {
        const chat_msg_tools *x = ext ? &ext[i] : NULL;
        const char *role = msgs[i].role;
        if (!strcmp(role, "system")) continue;
        if (!strcmp(role, "user")) {
            if (n_tools && i == last_user) {
                textbuf_put(b, "[AVAILABLE_TOOLS] [");
                for (size_t t = 0; t < n_tools; t++) {
                    char *j = tool_json(&tools[t], -1, false);
                    if (!j) b->oom = true;
                    else textbuf_put(b, j);
                    free(j);
                    if (t + 1 < n_tools) textbuf_put(b, ", ");
                }
                textbuf_put(b, "][/AVAILABLE_TOOLS]");
            }
            textbuf_put(b, "[INST] ");
            if (i == last_user && sys.len) {
                textbuf_putn(b, sys.p, sys.len);
                textbuf_put(b, "\n\n");
            }
            textbuf_put(b, msgs[i].content);
            textbuf_put(b, "[/INST]");
        } else if (x && x->n_calls) {
            textbuf_put(b, "[TOOL_CALLS] [");
            for (size_t c = 0; c < x->n_calls; c++) {
                if (c) textbuf_put(b, ", ");
                textbuf_put(b, "{\"name\": ");
                tb_put_jstr(b, x->calls[c].name);
                textbuf_put(b, ", \"arguments\": ");
                textbuf_put(b, x->calls[c].arguments);
                if (x->calls[c].id) {
                    textbuf_put(b, ", \"id\": ");
                    tb_put_jstr(b, x->calls[c].id);
                }
                textbuf_put(b, "}");
            }
            textbuf_put(b, "]</s>");
        } else if (!strcmp(role, "assistant")) {
            textbuf_put(b, " ");
            textbuf_put_trim(b, msgs[i].content);
            textbuf_put(b, "</s>");
        } else { /* tool */
            const char *id = x && x->tool_call_id ? x->tool_call_id : "";
            textbuf_put(b, "[TOOL_RESULTS] {\"content\": ");
            textbuf_put(b, msgs[i].content);
            textbuf_put(b, ", \"call_id\": ");
            tb_put_jstr(b, id);
            textbuf_put(b, "}[/TOOL_RESULTS]");
        }
    }
    if (last_user == n && sys.len) { /* system text and no user turn */
        textbuf_put(b, "[INST] ");
        textbuf_putn(b, sys.p, sys.len);
        textbuf_put(b, "[/INST]");
    }
    if (sys.oom) b->oom = true;
    free(sys.p);
}

int chat_apply_tools(int family, const chat_msg *msgs, const chat_msg_tools *ext, size_t n, const chat_tool *tools,
                     size_t n_tools, bool gen, char **out) {
    if (!out) return err_set(KITE_E_ARG, "chat_apply_tools: NULL out");
    if (family < 0 || family >= CHAT_FAMILY_COUNT)
        return err_set(KITE_E_ARG, "chat_apply_tools: chat family %d out of range", family);
    if ((!msgs && n) || (!tools && n_tools)) return err_set(KITE_E_ARG, "chat_apply_tools: NULL array");
    for (size_t t = 0; t < n_tools; t++)
        if (!tools[t].name) return err_set(KITE_E_ARG, "chat_apply_tools: tool %zu has no name", t);
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content)
            return err_set(KITE_E_ARG, "chat_apply_tools: message %zu: NULL %s", i, r ? "content" : "role");
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return err_set(KITE_E_ARG,
                           "chat_apply_tools: message %zu: unknown role '%s' (expected system, user, assistant or tool)",
                           i, r);
        const chat_msg_tools *x = ext ? &ext[i] : NULL;
        if (x && x->n_calls && strcmp(r, "assistant"))
            return err_set(KITE_E_ARG, "chat_apply_tools: message %zu: only assistant messages have tool calls", i);
        for (size_t c = 0; x && c < x->n_calls; c++)
            if (!x->calls[c].name || !x->calls[c].arguments)
                return err_set(KITE_E_ARG, "chat_apply_tools: message %zu: tool call %zu without %s", i, c,
                               x->calls[c].name ? "arguments" : "name");
    }
    int fmt = chat_tool_format(family);
    if (fmt == CHAT_TOOLS_HERMES || fmt == CHAT_TOOLS_GENERIC)
        return apply_rewritten(family, fmt, msgs, ext, n, tools, n_tools, gen, out);
    textbuf b = {0};
    textbuf_put(&b, "");
    if (fmt == CHAT_TOOLS_LLAMA3) fmt_llama3_tools(&b, msgs, ext, n, tools, n_tools, gen);
    else fmt_mistral_tools(&b, msgs, ext, n, tools, n_tools);
    if (b.oom) {
        free(b.p);
        return err_set(KITE_E_NOMEM, "chat_apply_tools: out of memory");
    }
    *out = b.p;
    return KITE_OK;
}
