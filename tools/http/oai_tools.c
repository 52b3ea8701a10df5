/*
 * oai_tools.c - OpenAI tool calling fields of a chat request: "tools",
 * "tool_choice", "parallel_tool_calls", and the tool parts of messages
 * (assistant "tool_calls", tool messages' "tool_call_id").  docs/http.md,
 * "Tools".
 *
 * DESIGN
 *   Everything is validated here, schemas included (each tool's parameters
 *   go through the JSON Schema converter once, so a keyword outside the
 *   subset is a 400 naming it whatever tool_choice is).  Strings are owned
 *   copies in the oai_request (oai_tools_free).
 *
 * THREADS
 *   Pure functions of their arguments; any thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "http/http_check.h"
#include "server_internal.h"

#define INVALID "invalid_request_error"
#define SERVER_MAX_TOOLS 128 /* functions per request (OpenAI allows 128) */

static bool t_type(oai_error *err, const char *param, const char *what, const char *want) {
    oai_error_set(err, 400, INVALID, "invalid_type", param, "Invalid type for '%s': expected %s.", what, want);
    return false;
}

static bool t_value(oai_error *err, const char *param, const char *fmt_what, const char *why) {
    oai_error_set(err, 400, INVALID, "invalid_value", param, "Invalid value for '%s': %s.", fmt_what, why);
    return false;
}

static char *t_dup(const char *s, oai_error *err) {
    char *d = strdup(s);
    if (!d) oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
    return d;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool oai_msg_tool_field(const char *key) {
    return !strcmp(key, "tool_calls") || !strcmp(key, "tool_call_id") || !strcmp(key, "name");
}

bool oai_parse_msg_tools(const cJSON *m, const char *role, size_t i, oai_request *r, oai_error *err) {
    char what[96];
    const cJSON *tc = oai_member(m, "tool_calls"), *id = oai_member(m, "tool_call_id"), *nm = oai_member(m, "name");
    bool tool = !strcmp(role, "tool"), assistant = !strcmp(role, "assistant");
    if ((tc && !assistant) || (id && !tool) || (nm && !tool)) {
        snprintf(what, sizeof what, "messages[%zu].%s", i, tc && !assistant ? "tool_calls" : id ? "tool_call_id" : "name");
        oai_error_set(err, 400, INVALID, "unsupported_parameter", "messages",
                      "Unsupported parameter: '%s' (tool_calls only in assistant messages, tool_call_id and name only "
                      "in tool messages).",
                      what);
        return false;
    }
    if (!r->msg_tools) return true; /* allocated by parse_messages before the first message */
    chat_msg_tools *x = &r->msg_tools[i];
    if (tool) {
        snprintf(what, sizeof what, "messages[%zu].tool_call_id", i);
        if (!id) {
            oai_error_set(err, 400, INVALID, "missing_required_parameter", "messages",
                          "Missing required parameter: '%s'.", what);
            return false;
        }
        if (!cJSON_IsString(id)) return t_type(err, "messages", what, "a string");
        if (nm && !cJSON_IsString(nm)) {
            snprintf(what, sizeof what, "messages[%zu].name", i);
            return t_type(err, "messages", what, "a string");
        }
        return (x->tool_call_id = t_dup(id->valuestring, err)) != NULL;
    }
    if (!tc) return true;
    snprintf(what, sizeof what, "messages[%zu].tool_calls", i);
    if (!cJSON_IsArray(tc)) return t_type(err, "messages", what, "an array");
    int n = cJSON_GetArraySize(tc);
    if (n == 0) return true;
    if (n > SERVER_MAX_TOOLS) return t_value(err, "messages", what, "too many tool calls");
    chat_tool_call *calls = calloc((size_t)n, sizeof *calls);
    if (!calls) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    x->calls = calls;
    int k = 0;
    for (const cJSON *c = tc->child; c; c = c->next, k++) {
        snprintf(what, sizeof what, "messages[%zu].tool_calls[%d]", i, k);
        if (!cJSON_IsObject(c)) return t_type(err, "messages", what, "an object");
        const cJSON *cid = oai_member(c, "id"), *ty = oai_member(c, "type"), *fn = oai_member(c, "function");
        if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function")))
            return t_value(err, "messages", what, "type must be \"function\"");
        if (cid && !cJSON_IsString(cid)) return t_type(err, "messages", what, "a string id");
        if (!cJSON_IsObject(fn)) return t_type(err, "messages", what, "a \"function\" object");
        const cJSON *fname = oai_member(fn, "name"), *args = oai_member(fn, "arguments");
        if (!cJSON_IsString(fname) || !fname->valuestring[0])
            return t_type(err, "messages", what, "a function with a string name");
        if (!cJSON_IsString(args)) return t_type(err, "messages", what, "function.arguments as a string of JSON");
        cJSON *parsed = cJSON_Parse(args->valuestring);
        bool obj = cJSON_IsObject(parsed);
        cJSON_Delete(parsed);
        if (!obj) return t_value(err, "messages", what, "function.arguments is not a JSON object");
        x->n_calls = (size_t)k + 1; /* owned from here (freed by oai_tools_free) */
        if (cid && !(calls[k].id = t_dup(cid->valuestring, err))) return false;
        if (!(calls[k].name = t_dup(fname->valuestring, err))) return false;
        if (!(calls[k].arguments = t_dup(args->valuestring, err))) return false;
    }
    return true;
}

static bool parse_tool(const cJSON *t, int i, chat_tool *out, oai_error *err) {
    char what[64];
    snprintf(what, sizeof what, "tools[%d]", i);
    if (!cJSON_IsObject(t)) return t_type(err, "tools", what, "an object");
    const cJSON *ty = oai_member(t, "type"), *fn = oai_member(t, "function");
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
        return t_value(err, "tools", what, "type must be \"function\" (the only kind of tool)");
    snprintf(what, sizeof what, "tools[%d].function", i);
    if (!cJSON_IsObject(fn)) return t_type(err, "tools", what, "an object");
    const cJSON *name = oai_member(fn, "name"), *desc = oai_member(fn, "description"),
                *params = oai_member(fn, "parameters"), *strict = oai_member(fn, "strict");
    snprintf(what, sizeof what, "tools[%d].function.name", i);
    if (!cJSON_IsString(name)) return t_type(err, "tools", what, "a string");
    if (!valid_name(name->valuestring))
        return t_value(err, "tools", what, "1 to 64 characters of a-z, A-Z, 0-9, underscore and dash");
    if (desc && !cJSON_IsString(desc)) {
        snprintf(what, sizeof what, "tools[%d].function.description", i);
        return t_type(err, "tools", what, "a string");
    }
    if (strict && !cJSON_IsBool(strict)) {
        snprintf(what, sizeof what, "tools[%d].function.strict", i);
        return t_type(err, "tools", what, "a boolean");
    }
    snprintf(what, sizeof what, "tools[%d].function.parameters", i);
    if (params && !cJSON_IsObject(params)) return t_type(err, "tools", what, "an object (a JSON Schema)");
    if (!(out->name = t_dup(name->valuestring, err))) return false;
    if (desc && !(out->description = t_dup(desc->valuestring, err))) return false;
    if (params) {
        char *p = cJSON_PrintUnformatted(params);
        if (!p) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
            return false;
        }
        out->parameters = p;
        /* the schema must be one the grammar engine takes (forced calls use it) */
        char *gbnf = NULL;
        int st = grammar_json_schema_to_gbnf(p, strlen(p), &gbnf);
        free(gbnf);
        if (st == KITE_E_NOMEM) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
            return false;
        }
        if (st != KITE_OK) {
            oai_error_set(err, 400, INVALID, "invalid_value", "tools", "Invalid '%s': %s", what, kite_last_error());
            return false;
        }
    }
    return true;
}

bool oai_parse_tools(const cJSON *root, oai_request *r, oai_error *err) {
    const cJSON *tools = oai_member(root, "tools"), *choice = oai_member(root, "tool_choice"),
                *par = oai_member(root, "parallel_tool_calls");
    r->tool_named = -1;
    r->parallel_tool_calls = true;
    r->tool_choice = OAI_TOOLS_OFF;
    if (par && !cJSON_IsBool(par)) return t_type(err, "parallel_tool_calls", "parallel_tool_calls", "a boolean");
    if (par) r->parallel_tool_calls = cJSON_IsTrue(par);
    if (tools) {
        if (!cJSON_IsArray(tools)) return t_type(err, "tools", "tools", "an array");
        int n = cJSON_GetArraySize(tools);
        if (n == 0) return t_value(err, "tools", "tools", "an empty array (give at least one tool, or leave tools out)");
        if (n > SERVER_MAX_TOOLS) {
            char why[48];
            snprintf(why, sizeof why, "at most %d tools", SERVER_MAX_TOOLS);
            return t_value(err, "tools", "tools", why);
        }
        if (n > 0 && !(r->tools = calloc((size_t)n, sizeof *r->tools))) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
            return false;
        }
        int i = 0;
        for (const cJSON *t = tools->child; t; t = t->next, i++) {
            r->n_tools = (size_t)i + 1;
            if (!parse_tool(t, i, &r->tools[i], err)) return false;
            for (int j = 0; j < i; j++)
                if (!strcmp(r->tools[j].name, r->tools[i].name)) {
                    char what[64];
                    snprintf(what, sizeof what, "tools[%d].function.name", i);
                    return t_value(err, "tools", what, "two tools have this name");
                }
        }
        if (r->n_tools) r->tool_choice = OAI_TOOLS_AUTO; /* OpenAI's default with tools */
    }
    if (!choice) {
        if (par && !r->n_tools)
            return t_value(err, "parallel_tool_calls", "parallel_tool_calls", "only allowed when tools are given");
        return true;
    }
    if (cJSON_IsString(choice)) {
        const char *c = choice->valuestring;
        if (!strcmp(c, "none")) {
            r->tool_choice = OAI_TOOLS_OFF;
            return true;
        }
        if (strcmp(c, "auto") && strcmp(c, "required"))
            return t_value(err, "tool_choice", "tool_choice", "one of none, auto, required, or a function object");
        if (!r->n_tools) return t_value(err, "tool_choice", "tool_choice", "only allowed when tools are given");
        r->tool_choice = !strcmp(c, "auto") ? OAI_TOOLS_AUTO : OAI_TOOLS_REQUIRED;
        return true;
    }
    if (!cJSON_IsObject(choice))
        return t_type(err, "tool_choice", "tool_choice", "a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const cJSON *ty = oai_member(choice, "type"), *fn = oai_member(choice, "function");
    const cJSON *name = cJSON_IsObject(fn) ? oai_member(fn, "name") : NULL;
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(name))
        return t_type(err, "tool_choice", "tool_choice", "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    if (!r->n_tools) return t_value(err, "tool_choice", "tool_choice", "only allowed when tools are given");
    for (size_t i = 0; i < r->n_tools; i++)
        if (!strcmp(r->tools[i].name, name->valuestring)) {
            r->tool_choice = OAI_TOOLS_REQUIRED;
            r->tool_named = (int32_t)i;
            return true;
        }
    char shown[72];
    http_utf8_copy(shown, sizeof shown, name->valuestring);
    oai_error_set(err, 400, INVALID, "invalid_value", "tool_choice",
                  "Invalid value for 'tool_choice': no function named '%s' in 'tools'.", shown);
    return false;
}

void oai_tools_free(oai_request *r) {
    for (size_t i = 0; i < r->n_tools; i++) {
        free((char *)r->tools[i].name);
        free((char *)r->tools[i].description);
        free((char *)r->tools[i].parameters);
    }
    free(r->tools);
    for (size_t i = 0; r->msg_tools && i < r->n_msgs; i++) {
        chat_msg_tools *x = &r->msg_tools[i];
        for (size_t c = 0; c < x->n_calls; c++) {
            free((char *)x->calls[c].id);
            free((char *)x->calls[c].name);
            free((char *)x->calls[c].arguments);
        }
        free((void *)x->calls);
        free((char *)x->tool_call_id);
    }
    free(r->msg_tools);
    r->tools = NULL;
    r->msg_tools = NULL;
    r->n_tools = 0;
}
