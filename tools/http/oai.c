/*
 * oai.c - OpenAI request parsing and error bodies for `kite serve`.
 *
 * DESIGN
 *   The body is parsed with cJSON into an oai_request that owns copies of
 *   every string, so the cJSON tree is freed before generation starts.  A
 *   null value means "not given".  A field kite does not honour is a 400
 *   naming it (never silently ignored; check_fields), except the few that
 *   are harmless to ignore (user) or only accepted at their default
 *   (store: false, echo: false, best_of: n, ...); a known field of the wrong
 *   type or out of range is a 400 naming the field in "param".  Defaults follow OpenAI: temperature 1, top_p 1, no
 *   top-k / min-p, max_tokens 16 for completions and the rest of the
 *   context for chat.
 *
 * THREADS
 *   Pure functions of their arguments; any thread.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/http_check.h"
#include "server_internal.h"

#define INVALID "invalid_request_error"

void oai_error_set(oai_error *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...) {
    va_list ap;
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_start(ap, fmt);
    int n = vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    /* a message cut at the buffer's end must not end inside a character */
    if (n >= (int)sizeof e->message) {
        size_t k = http_utf8_prefix(e->message, strlen(e->message), sizeof e->message - 1);
        e->message[k] = '\0';
    }
}

char *oai_error_json(const oai_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_CreateObject();
    char *s = NULL;
    if (!root || !o) goto done;
    cJSON_AddItemToObject(root, "error", o);
    o = NULL;
    cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : INVALID);
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    s = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(o);
    cJSON_Delete(root);
    return s;
}

const cJSON *oai_member(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static bool bad_type(oai_error *err, const char *key, const char *want) {
    oai_error_set(err, 400, INVALID, "invalid_type", key, "Invalid type for '%s': expected %s.", key, want);
    return false;
}

static bool bad_value(oai_error *err, const char *key, const char *what) {
    oai_error_set(err, 400, INVALID, "invalid_value", key, "Invalid value for '%s': %s.", key, what);
    return false;
}

/* Optional number in [lo, hi]; *given tells whether it was present. */
static bool get_num(const cJSON *root, const char *key, double lo, double hi, double *out, bool *given,
                    oai_error *err) {
    const cJSON *v = oai_member(root, key);
    if (given) *given = false;
    if (!v) return true;
    if (!cJSON_IsNumber(v)) return bad_type(err, key, "a number");
    if (!isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        char what[96];
        snprintf(what, sizeof what, "expected a number in [%g, %g], got %g", lo, hi, v->valuedouble);
        return bad_value(err, key, what);
    }
    *out = v->valuedouble;
    if (given) *given = true;
    return true;
}

static bool get_int(const cJSON *root, const char *key, double lo, double hi, double *out, bool *given,
                    oai_error *err) {
    const cJSON *v = oai_member(root, key);
    if (given) *given = false;
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) return bad_type(err, key, "an integer");
    return get_num(root, key, lo, hi, out, given, err);
}

static bool get_bool(const cJSON *root, const char *key, bool *out, oai_error *err) {
    const cJSON *v = oai_member(root, key);
    if (!v) return true;
    if (!cJSON_IsBool(v)) return bad_type(err, key, "a boolean");
    *out = cJSON_IsTrue(v);
    return true;
}

static char *dup_str(const char *s, oai_error *err) {
    char *d = strdup(s);
    if (!d) oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
    return d;
}

/* Token ids from a JSON array of integers (the prompt as tokens). */
static bool parse_ids(const cJSON *arr, const char *key, oai_request *r, oai_error *err) {
    int n = cJSON_GetArraySize(arr);
    if (n < 1) return bad_value(err, key, "the prompt is empty");
    r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    int i = 0;
    for (const cJSON *t = arr->child; t; t = t->next, i++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble))
            return bad_type(err, key, "a string, an array of token ids, or an array of one of those");
        if (t->valuedouble < 0 || t->valuedouble > 2147483647.0) return bad_value(err, key, "token id out of range");
        r->prompt_ids[i] = (kite_token)t->valuedouble;
    }
    r->n_prompt_ids = n;
    return true;
}

/* prompt: "text" | [ids] | ["text"] | [[ids]] (only one prompt). */
static bool parse_prompt(const cJSON *root, oai_request *r, oai_error *err) {
    const cJSON *p = oai_member(root, "prompt");
    if (!p) {
        oai_error_set(err, 400, INVALID, "missing_required_parameter", "prompt",
                      "Missing required parameter: 'prompt'.");
        return false;
    }
    if (cJSON_IsString(p)) return (r->prompt_text = dup_str(p->valuestring, err)) != NULL;
    if (!cJSON_IsArray(p)) return bad_type(err, "prompt", "a string or an array");
    const cJSON *first = p->child;
    if (first && (cJSON_IsString(first) || cJSON_IsArray(first))) {
        if (cJSON_GetArraySize(p) != 1)
            return bad_value(err, "prompt", "only one prompt per request is supported");
        if (cJSON_IsString(first)) return (r->prompt_text = dup_str(first->valuestring, err)) != NULL;
        return parse_ids(first, "prompt", r, err);
    }
    return parse_ids(p, "prompt", r, err);
}

/* content: "text" | [{"type": "text", "text": "..."}, ...]; null only for
 * an assistant message (OpenAI allows it there, next to tool calls). */
static char *message_content(const cJSON *m, const char *role, size_t i, oai_error *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if ((!c || cJSON_IsNull(c)) && strcmp(role, "assistant")) {
        oai_error_set(err, 400, INVALID, "missing_required_parameter", "messages",
                      "Missing required parameter: 'messages[%zu].content' (a %s message needs content).", i, role);
        return NULL;
    }
    if (!c || cJSON_IsNull(c)) return dup_str("", err); /* an assistant message with tool_calls only */
    if (cJSON_IsString(c)) return dup_str(c->valuestring, err);
    if (!cJSON_IsArray(c)) {
        bad_type(err, "messages", "message content as a string or an array of text parts");
        return NULL;
    }
    size_t len = 0;
    for (const cJSON *part = c->child; part; part = part->next) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
            bad_value(err, "messages", "only text content parts are supported");
            return NULL;
        }
        len += strlen(tx->valuestring);
    }
    char *out = malloc(len + 1);
    if (!out) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    out[0] = '\0';
    for (const cJSON *part = c->child; part; part = part->next)
        strcat(out, cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring);
    return out;
}

static bool parse_messages(const cJSON *root, oai_request *r, oai_error *err) {
    const cJSON *ms = oai_member(root, "messages");
    if (!ms) {
        oai_error_set(err, 400, INVALID, "missing_required_parameter", "messages",
                      "Missing required parameter: 'messages'.");
        return false;
    }
    if (!cJSON_IsArray(ms)) return bad_type(err, "messages", "an array");
    int n = cJSON_GetArraySize(ms);
    if (n < 1) return bad_value(err, "messages", "at least one message is required");
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    r->msg_tools = calloc((size_t)n, sizeof *r->msg_tools); /* tool calls / results (oai_tools.c) */
    if (!r->msgs || !r->msg_tools) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    for (const cJSON *m = ms->child; m; m = m->next) {
        if (!cJSON_IsObject(m)) return bad_type(err, "messages", "an array of message objects");
        for (const cJSON *f = m->child; f; f = f->next) /* refusal, audio, ...: not honoured, so refused */
            if (!cJSON_IsNull(f) && f->string && strcmp(f->string, "role") && strcmp(f->string, "content") &&
                !oai_msg_tool_field(f->string)) {
                char shown[41];
                http_utf8_copy(shown, sizeof shown, f->string);
                oai_error_set(err, 400, INVALID, "unsupported_parameter", "messages",
                              "Unsupported parameter: 'messages[%zu].%s' (kite reads role, content, tool_calls, "
                              "tool_call_id, name).",
                              r->n_msgs, shown);
                return false;
            }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) return bad_type(err, "messages", "a string 'role' in every message");
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's newer name for the system role */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool")) {
            char shown[41], what[128];
            http_utf8_copy(shown, sizeof shown, rs);
            snprintf(what, sizeof what, "unsupported role '%s' in messages[%zu] (system, user, assistant, tool)", shown,
                     r->n_msgs);
            return bad_value(err, "messages", what);
        }
        chat_msg *cm = &r->msgs[r->n_msgs];
        char *role_copy = dup_str(rs, err);
        if (!role_copy) return false;
        cm->role = role_copy;
        r->n_msgs++;
        if (!(cm->content = message_content(m, rs, r->n_msgs - 1, err))) return false;
        if (!oai_parse_msg_tools(m, rs, r->n_msgs - 1, r, err)) return false;
    }
    return true;
}

static bool parse_stop(const cJSON *root, oai_request *r, oai_error *err) {
    const cJSON *st = oai_member(root, "stop");
    if (!st) return true;
    if (cJSON_IsString(st)) {
        if (!st->valuestring[0]) return true;
        return (r->stop[r->n_stop++] = dup_str(st->valuestring, err)) != NULL;
    }
    if (!cJSON_IsArray(st)) return bad_type(err, "stop", "a string or an array of strings");
    if (cJSON_GetArraySize(st) > SERVER_MAX_STOP) {
        char what[64];
        snprintf(what, sizeof what, "at most %d stop sequences", SERVER_MAX_STOP);
        return bad_value(err, "stop", what);
    }
    for (const cJSON *s = st->child; s; s = s->next) {
        if (!cJSON_IsString(s)) return bad_type(err, "stop", "a string or an array of strings");
        if (!s->valuestring[0]) continue;
        if (!(r->stop[r->n_stop++] = dup_str(s->valuestring, err))) return false;
    }
    return true;
}

/* Structured output: OpenAI's response_format (json_object, json_schema), llama-server's
 * grammar (GBNF) and json_schema (a schema); at most one.  The schema is kept as text and
 * compiled by gen.c (a schema the converter refuses is a 400 there, naming the keyword). */
static bool parse_grammar(const cJSON *root, oai_request *r, oai_error *err) {
    r->grammar_kind = -1;
    const cJSON *rf = oai_member(root, "response_format"), *gr = oai_member(root, "grammar"),
                *js = oai_member(root, "json_schema");
    int n = 0;
    if (rf) {
        if (!cJSON_IsObject(rf)) return bad_type(err, "response_format", "an object");
        const cJSON *ty = oai_member(rf, "type");
        if (!cJSON_IsString(ty)) return bad_type(err, "response_format.type", "a string");
        if (!strcmp(ty->valuestring, "json_object")) {
            r->grammar_kind = KITE_GRAMMAR_JSON_OBJECT;
            n++;
        } else if (!strcmp(ty->valuestring, "json_schema")) {
            const cJSON *w = oai_member(rf, "json_schema");
            if (!cJSON_IsObject(w)) return bad_type(err, "response_format.json_schema", "an object");
            const cJSON *sc = oai_member(w, "schema"), *strict = oai_member(w, "strict");
            if (strict && !cJSON_IsBool(strict)) return bad_type(err, "response_format.json_schema.strict", "a boolean");
            if (sc && !cJSON_IsObject(sc) && !cJSON_IsBool(sc))
                return bad_type(err, "response_format.json_schema.schema", "an object");
            r->grammar_kind = KITE_GRAMMAR_JSON_SCHEMA;
            /* no schema: any JSON value, as OpenAI; strict or not, the output always follows it */
            if (!(r->grammar_text = sc ? cJSON_PrintUnformatted(sc) : dup_str("{}", err))) {
                if (sc) oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
                return false;
            }
            n++;
        } else if (strcmp(ty->valuestring, "text") != 0) {
            return bad_value(err, "response_format.type", "one of text, json_object, json_schema");
        }
        r->grammar_param = "response_format";
    }
    if (gr) {
        if (!cJSON_IsString(gr)) return bad_type(err, "grammar", "a string (GBNF)");
        if (!(r->grammar_text = dup_str(gr->valuestring, err))) return false;
        r->grammar_kind = KITE_GRAMMAR_GBNF;
        r->grammar_param = "grammar";
        n++;
    }
    if (js) {
        if (!cJSON_IsObject(js)) return bad_type(err, "json_schema", "an object");
        free(r->grammar_text);
        if (!(r->grammar_text = cJSON_PrintUnformatted(js))) {
            oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
            return false;
        }
        r->grammar_kind = KITE_GRAMMAR_JSON_SCHEMA;
        r->grammar_param = "json_schema";
        n++;
    }
    if (n > 1) return bad_value(err, "response_format", "give one of response_format, grammar and json_schema");
    return true;
}

/* The fields each endpoint honours (parse_fields). */
static const char *const COMMON_FIELDS[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
    "repeat_penalty", "seed", "n", "stream", "stream_options", "ignore_eos", "t_max_predict_ms", "stop",
    "response_format", "grammar", "json_schema", "logprobs", "logit_bias",
    "sot", "sot_skeleton", /* chat only: parse_fields names the endpoint in its 400 */
    "user", "safety_identifier", "prompt_cache_key", /* IGNORED_FIELDS */
    NULL};
/* Accepted (as strings) and ignored, because ignoring them changes nothing a
 * client can see: end-user ids for OpenAI's abuse monitoring, and a routing
 * key for OpenAI's prompt cache (kite's prefix cache matches prompts by
 * content whatever the key). */
static const char *const IGNORED_FIELDS[] = {"user", "safety_identifier", "prompt_cache_key", NULL};
static const char *const CHAT_FIELDS[] = {"messages", "max_completion_tokens", "top_logprobs",
                                          "tools", "tool_choice", "parallel_tool_calls", NULL};
static const char *const COMPLETION_FIELDS[] = {"prompt", NULL};
/* OpenAI fields kite does not implement: named as unsupported rather than unknown. */
static const char *const UNSUPPORTED_FIELDS[] = {
    "functions", "function_call", /* the legacy names of tools and tool_choice (docs/http.md) */
    "audio", "modalities",
    "prediction", "reasoning_effort", "web_search_options", "service_tier", "metadata", "suffix",
    "verbosity", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* Fields accepted only at the value that means "off" (OpenAI's default). */
static bool default_only(const cJSON *v, const char *k, const oai_request *r, oai_error *err, bool *handled) {
    *handled = true;
    if (!strcmp(k, "store") || (!strcmp(k, "echo") && !r->chat)) {
        if (cJSON_IsFalse(v)) return true;
        if (!cJSON_IsBool(v)) return bad_type(err, k, "a boolean");
        oai_error_set(err, 400, INVALID, "unsupported_value", k, "'%s': true is not supported by kite serve.", k);
        return false;
    }
    if (!strcmp(k, "best_of") && !r->chat) {
        if (cJSON_IsNumber(v) && v->valuedouble == (double)r->n) return true;
        oai_error_set(err, 400, INVALID, "unsupported_value", k,
                      "'best_of' is only supported equal to 'n' (no server-side ranking).");
        return false;
    }
    *handled = false;
    return true;
}

/* Every non-null member of root must be one kite honours. */
static bool check_fields(const cJSON *root, const oai_request *r, oai_error *err) {
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        if (cJSON_IsNull(it) || in_list(COMMON_FIELDS, k) || in_list(r->chat ? CHAT_FIELDS : COMPLETION_FIELDS, k))
            continue;
        bool handled;
        if (!default_only(it, k, r, err, &handled)) return false;
        if (handled) continue;
        char shown[48];
        http_utf8_copy(shown, sizeof shown, k);
        if (in_list(UNSUPPORTED_FIELDS, k))
            oai_error_set(err, 400, INVALID, "unsupported_parameter", shown,
                          "Unsupported parameter: '%s' is not supported by kite serve (docs/http.md).", shown);
        else
            oai_error_set(err, 400, INVALID, "unknown_parameter", shown,
                          "Unrecognized request argument supplied: '%s' (%s).", shown,
                          r->chat ? "/v1/chat/completions" : "/v1/completions");
        return false;
    }
    return true;
}

/* logit_bias: {"token id": bias in [-100, 100]}; ids are checked against the vocabulary in gen.c. */
static bool parse_logit_bias(const cJSON *root, oai_request *r, oai_error *err) {
    const cJSON *lb = oai_member(root, "logit_bias");
    if (!lb) return true;
    if (!cJSON_IsObject(lb)) return bad_type(err, "logit_bias", "an object mapping token ids to biases");
    int n = cJSON_GetArraySize(lb);
    if (n == 0) return true;
    if (n > SERVER_MAX_LOGIT_BIAS) {
        char what[64];
        snprintf(what, sizeof what, "at most %d entries", SERVER_MAX_LOGIT_BIAS);
        return bad_value(err, "logit_bias", what);
    }
    if (!(r->logit_bias = malloc((size_t)n * sizeof *r->logit_bias))) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    for (const cJSON *e = lb->child; e; e = e->next) {
        const char *k = e->string ? e->string : "";
        char shown[24];
        http_utf8_copy(shown, sizeof shown, k);
        size_t len = strlen(k);
        bool digits = len > 0 && len <= 10;
        for (size_t i = 0; digits && i < len; i++) digits = k[i] >= '0' && k[i] <= '9';
        long long id = digits ? strtoll(k, NULL, 10) : -1;
        if (!digits || id > 2147483647LL) {
            oai_error_set(err, 400, INVALID, "invalid_value", "logit_bias",
                          "Invalid key in 'logit_bias': '%s' is not a token id (a decimal integer string).", shown);
            return false;
        }
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100) {
            oai_error_set(err, 400, INVALID, "invalid_value", "logit_bias",
                          "Invalid value in 'logit_bias' for token %s: expected a number in [-100, 100].", shown);
            return false;
        }
        r->logit_bias[r->n_logit_bias++] = (kite_logit_bias){(kite_token)id, (float)e->valuedouble};
    }
    return true;
}

/* chat: "logprobs": bool, "top_logprobs": 0..20 (needs logprobs); completions: "logprobs": 0..20. */
static bool parse_logprobs(const cJSON *root, oai_request *r, oai_error *err) {
    double v;
    bool given;
    if (r->chat) {
        if (!get_bool(root, "logprobs", &r->logprobs, err)) return false;
        if (!get_int(root, "top_logprobs", 0, KITE_MAX_TOP_LOGPROBS, &v, &given, err)) return false;
        if (given && !r->logprobs) return bad_value(err, "top_logprobs", "needs \"logprobs\": true");
        if (given) r->top_logprobs = (int32_t)v;
        return true;
    }
    if (!get_int(root, "logprobs", 0, KITE_MAX_TOP_LOGPROBS, &v, &given, err)) return false;
    r->logprobs = given;
    if (given) r->top_logprobs = (int32_t)v;
    return true;
}

static bool parse_fields(const cJSON *root, bool chat, oai_request *r, oai_error *err) {
    double v;
    bool given;
    const cJSON *model = oai_member(root, "model");
    if (model && !cJSON_IsString(model)) return bad_type(err, "model", "a string");
    if (model && !(r->model = dup_str(model->valuestring, err))) return false;
    for (const char *const *k = IGNORED_FIELDS; *k; k++) {
        const cJSON *x = oai_member(root, *k);
        if (x && !cJSON_IsString(x)) return bad_type(err, *k, "a string");
    }

    if (chat ? !parse_messages(root, r, err) : !parse_prompt(root, r, err)) return false;

    /* max_completion_tokens is the newer chat name of max_tokens */
    if (!get_int(root, "max_tokens", 1, 1e9, &v, &given, err)) return false;
    if (given) r->max_tokens = (int32_t)v;
    if (!get_int(root, "max_completion_tokens", 1, 1e9, &v, &given, err)) return false;
    if (given) r->max_tokens = (int32_t)v;

    if (!get_num(root, "temperature", 0, 100, &v, &given, err)) return false;
    if (given) r->sampling.temperature = (float)v;
    if (!get_num(root, "top_p", 0, 1, &v, &given, err)) return false;
    if (given) r->sampling.top_p = v > 0 ? (float)v : 1.0f;
    if (!get_int(root, "top_k", -1, 1e9, &v, &given, err)) return false;
    if (given) r->sampling.top_k = v > 0 ? (int32_t)v : 0;
    if (!get_num(root, "min_p", 0, 1, &v, &given, err)) return false;
    if (given) r->sampling.min_p = (float)v;
    if (!get_num(root, "frequency_penalty", -2, 2, &v, &given, err)) return false;
    if (given) r->sampling.frequency_penalty = (float)v;
    if (!get_num(root, "presence_penalty", -2, 2, &v, &given, err)) return false;
    if (given) r->sampling.presence_penalty = (float)v;
    if (!get_num(root, "repeat_penalty", 0.01, 100, &v, &given, err)) return false;
    if (given) r->sampling.repeat_penalty = (float)v;
    if (!get_int(root, "seed", -9007199254740992.0, 9007199254740992.0, &v, &given, err)) return false;
    if (given) {
        r->sampling.seed = (uint64_t)(int64_t)v;
        r->seed_given = true;
    }
    char n_what[48];
    snprintf(n_what, sizeof n_what, "an integer in [1, %d]", SERVER_MAX_N);
    const cJSON *nv = oai_member(root, "n");
    if (nv && (!cJSON_IsNumber(nv) || nv->valuedouble != floor(nv->valuedouble))) return bad_type(err, "n", "an integer");
    if (nv && (nv->valuedouble < 1 || nv->valuedouble > SERVER_MAX_N)) return bad_value(err, "n", n_what);
    if (nv) r->n = (int32_t)nv->valuedouble;
    if (!check_fields(root, r, err)) return false;
    if (!parse_logprobs(root, r, err) || !parse_logit_bias(root, r, err)) return false;

    if (!get_bool(root, "stream", &r->stream, err)) return false;
    if (!get_bool(root, "ignore_eos", &r->ignore_eos, err)) return false;
    /* llama-server's per-request time limit; here a deadline from arrival,
     * queue time included (gen.c) */
    if (!get_int(root, "t_max_predict_ms", 0, 864e5, &v, &given, err)) return false;
    if (given) r->t_max_predict_ms = (int64_t)v;
    const cJSON *so = oai_member(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return bad_type(err, "stream_options", "an object");
        const cJSON *iu = oai_member(so, "include_usage");
        if (iu && !cJSON_IsBool(iu)) return bad_type(err, "stream_options.include_usage", "a boolean");
        r->include_usage = iu && cJSON_IsTrue(iu);
        for (const cJSON *f = so->child; f; f = f->next) {
            const char *k = f->string ? f->string : "";
            if (cJSON_IsNull(f) || !strcmp(k, "include_usage")) continue;
            /* OpenAI pads stream chunks with an "obfuscation" field; kite does not */
            if (!strcmp(k, "include_obfuscation") && cJSON_IsFalse(f)) continue;
            char shown[48];
            http_utf8_copy(shown, sizeof shown, k);
            if (!strcmp(k, "include_obfuscation") && cJSON_IsTrue(f))
                oai_error_set(err, 400, INVALID, "unsupported_value", "stream_options.include_obfuscation",
                              "'stream_options.include_obfuscation': true is not supported by kite serve.");
            else if (!strcmp(k, "include_obfuscation"))
                return bad_type(err, "stream_options.include_obfuscation", "a boolean");
            else
                oai_error_set(err, 400, INVALID, "unknown_parameter", "stream_options",
                              "Unrecognized request argument supplied: 'stream_options.%s'.", shown);
            return false;
        }
    }
    /* kite extension: Skeleton-of-Thought (docs/http.md) */
    if (!get_bool(root, "sot", &r->sot, err)) return false;
    const cJSON *sk = oai_member(root, "sot_skeleton");
    if (sk && !cJSON_IsString(sk)) return bad_type(err, "sot_skeleton", "a string");
    if (sk && !(r->sot_skeleton = dup_str(sk->valuestring, err))) return false;
    if ((r->sot || r->sot_skeleton) && !chat) return bad_value(err, "sot", "only /v1/chat/completions supports sot");
    if (r->sot_skeleton && !r->sot) return bad_value(err, "sot_skeleton", "needs \"sot\": true");
    if (r->sot && (r->n > 1 || r->logprobs))
        return bad_value(err, "sot", "Skeleton-of-Thought answers one choice without logprobs");
    if (!parse_grammar(root, r, err)) return false;
    if (r->sot && r->grammar_kind >= 0)
        return bad_value(err, "sot", "Skeleton-of-Thought cannot be combined with a constrained output format");
    if (chat && !oai_parse_tools(root, r, err)) return false;
    if (r->tool_choice != OAI_TOOLS_OFF) { /* docs/http.md, "Tools": what does not combine */
        if (r->grammar_kind >= 0) return bad_value(err, r->grammar_param, "cannot be combined with tools");
        if (r->sot) return bad_value(err, "sot", "Skeleton-of-Thought cannot be combined with tools");
        if (r->logprobs) return bad_value(err, "logprobs", "kite does not give logprobs together with tools");
    }
    return parse_stop(root, r, err);
}

bool oai_request_parse(const char *body, size_t len, bool chat, oai_request *r, oai_error *err) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->max_tokens = -1;
    r->sampling = kite_sampler_default_params();
    r->sampling.temperature = 1.0f; /* OpenAI's defaults: plain sampling */
    r->sampling.top_p = 1.0f;
    r->sampling.top_k = 0;
    r->sampling.min_p = 0.0f;
    r->sampling.penalty_last_n = -1;
    r->n = 1;

    if (len == 0) {
        oai_error_set(err, 400, INVALID, "invalid_json", NULL, "The request body is empty; expected a JSON object.");
        return false;
    }
    /* cJSON would end the C string at an escaped NUL and silently drop the
     * rest of a prompt or message */
    if (http_json_has_nul(body, len)) {
        oai_error_set(err, 400, INVALID, "invalid_value", NULL,
                      "Strings in the request may not contain U+0000 (\\u0000).");
        return false;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        oai_error_set(err, 400, INVALID, "invalid_json", NULL,
                      "We could not parse the JSON body of your request (error near byte %zu).", at);
        return false;
    }
    /* nothing but white space may follow the value */
    for (const char *q = end; q && q < body + len; q++)
        if (*q != ' ' && *q != '\t' && *q != '\r' && *q != '\n' && *q != '\0') {
            cJSON_Delete(root);
            oai_error_set(err, 400, INVALID, "invalid_json", NULL,
                          "We could not parse the JSON body of your request (trailing data at byte %zu).",
                          (size_t)(q - body));
            return false;
        }
    bool ok;
    if (!cJSON_IsObject(root)) {
        oai_error_set(err, 400, INVALID, "invalid_type", NULL, "The request body must be a JSON object.");
        ok = false;
    } else {
        ok = parse_fields(root, chat, r, err);
    }
    cJSON_Delete(root);
    return ok;
}

void oai_request_free(oai_request *r) {
    oai_tools_free(r);
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
    }
    free(r->msgs);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->sot_skeleton);
    free(r->grammar_text);
    free(r->logit_bias);
    memset(r, 0, sizeof *r);
}
