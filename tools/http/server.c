/*
 * server.c - the HTTP side of `kite serve`: daemon, routing, authentication,
 * body limits, the web page, the small endpoints and the request log.
 *
 * DESIGN
 *   The gate (gate.c) owns the listening socket: it accepts, applies the
 *   connection limits and the header deadline, checks each request head and
 *   hands complete ones to libmicrohttpd (MHD_add_connection), which runs in
 *   thread-per-connection mode (MHD_USE_POLL, so no FD_SETSIZE limit).
 *   Every answer says "Connection: close", so each request passes the gate.
 *   libmicrohttpd calls on_request several times per request: first
 *   with the headers only - authentication and the Content-Length limit are
 *   checked there, so a rejected body is never read - then once per piece of
 *   body, then once more to answer.  Bodies are collected into a buffer of
 *   at most max_body bytes; a chunked body that grows past it is drained up
 *   to 4x the limit and answered 413, beyond that the connection is dropped.
 *   on_completed logs one line and releases the generation (gen.c), which
 *   cancels it if it is unfinished (client gone, write error, timeout).
 *
 *   Public without the API key: GET / (the chat page and its files) and
 *   /health.  Everything else needs "Authorization: Bearer KEY" when a key
 *   is set.  Checks at the headers, in this order: head size (414/431,
 *   below MHD's pool so MHD's HTML versions are not reached), Host
 *   allowlist (403), OPTIONS (answered, before authentication, as CORS
 *   preflights are sent without credentials), Content-Type of POST routes
 *   (415), API key (401), Content-Length (413).  Every response passes
 *   queue(), which adds the CORS headers, and every JSON body
 *   srv_json_utf8.  What libmicrohttpd 0.9.75 would answer itself before
 *   any callback - a malformed Content-Length (with its status line sent
 *   twice, an MHD bug), bad HTTP versions, heads over its pool - is refused
 *   by the gate first, in JSON, and so is a chunked body whose framing is
 *   malformed within the gate's look at it (gate.c, GATE_CHUNK_PEEK); past
 *   that look a malformed chunk still gets MHD's HTML 400.
 *
 *   Backpressure: at most n_parallel + --queue generation and embedding
 *   requests are admitted (gen.c, embed.c); more get 503 with Retry-After.
 *   /health answers 503 when that capacity is used up or the server drains.
 *   Their engine sequences carry srv_client_key (the peer address), so the
 *   engine's waiting queue is fair across clients (scheduler.h).
 *
 * THREADS
 *   One thread per connection; srv_conn is private to it.  Shared counters
 *   in struct server are atomics.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "core/error.h"
#include "core/timing.h"
#include "embed.h"
#include "http/gate.h"
#include "http/http_check.h"
#include "http/web_assets.h"
#include "server_internal.h"

typedef struct srv_conn {
    double t0;                   /* seconds (time_now_s) at the headers */
    char method[8];
    char url[160];
    char *body;                  /* collected body, NUL-terminated */
    size_t len, cap;
    size_t drained;              /* bytes dropped after the limit was passed */
    bool too_large;
    bool answered;               /* a response was queued before the body */
    int status;                  /* HTTP status, for the log */
    gen_req *gen;                /* generation reference, or NULL */
} srv_conn;

server_params server_default_params(void) {
    server_params p = {
        .host = "127.0.0.1",
        .port = 8080,
        .timeout_s = 600,
        .idle_timeout_s = 30,
        .header_timeout_s = 10,
        .body_timeout_s = 60,
        .max_body = 1 << 20,
        .max_connections = 1024,
        .max_conns_per_ip = 256,
        .queue = 64,
        .drain_timeout_s = 30,
        .engine = engine_default_params(),
    };
    return p;
}

/* ---- responses ---- */

/* The request's Origin if CORS is on and allows it, else NULL. */
static const char *cors_origin(server *s, struct MHD_Connection *c) {
    if (!s->cors) return NULL;
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    return o && o[0] && http_list_has(s->cors, o, strlen(o)) ? o : NULL;
}

void srv_add_headers(server *s, struct MHD_Connection *c, struct MHD_Response *r) {
    /* one request per connection: the next one passes the gate again (its
     * header deadline and head checks; gate.h) */
    MHD_add_response_header(r, "Connection", "close");
    const char *o = cors_origin(s, c);
    if (!s->cors) return;
    MHD_add_response_header(r, "Vary", "Origin");
    if (o) MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
}

/* Queues r with the common headers plus extra (name, value pairs, NULL
 * ended, or NULL); r stays the caller's to destroy. */
static enum MHD_Result queue(server *s, struct MHD_Connection *c, int status, struct MHD_Response *r,
                             const char *const *extra) {
    srv_add_headers(s, c, r);
    for (; extra && extra[0]; extra += 2) MHD_add_response_header(r, extra[0], extra[1]);
    return MHD_queue_response(c, (unsigned)status, r);
}

static enum MHD_Result reply_hdrs(server *s, struct MHD_Connection *c, int status, const char *ctype, void *data,
                                  size_t len, enum MHD_ResponseMemoryMode mode, const char *const *extra) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ret = queue(s, c, status, r, extra);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply(server *s, struct MHD_Connection *c, int status, const char *ctype, void *data,
                             size_t len, enum MHD_ResponseMemoryMode mode) {
    return reply_hdrs(s, c, status, ctype, data, len, mode, NULL);
}

char *srv_json_utf8(char *json) {
    if (!json || http_utf8_valid(json, strlen(json))) return json;
    size_t n;
    char *fixed = http_utf8_sanitize(json, strlen(json), &n);
    free(json);
    return fixed;
}

enum MHD_Result srv_reply_json(server *s, struct MHD_Connection *c, int status, char *json) {
    if (!(json = srv_json_utf8(json))) return MHD_NO;
    return reply(s, c, status, "application/json", json, strlen(json), MHD_RESPMEM_MUST_FREE);
}

/* An OpenAI error with extra headers (Allow, WWW-Authenticate, ...). */
static enum MHD_Result reply_error_hdrs(server *s, struct MHD_Connection *c, const oai_error *e,
                                        const char *const *extra) {
    char *json = srv_json_utf8(oai_error_json(e));
    if (!json) return MHD_NO;
    return reply_hdrs(s, c, e->status, "application/json", json, strlen(json), MHD_RESPMEM_MUST_FREE, extra);
}

enum MHD_Result srv_reply_error(server *s, struct MHD_Connection *c, const oai_error *e) {
    return reply_error_hdrs(s, c, e, NULL);
}

enum MHD_Result srv_reply_error_retry(server *s, struct MHD_Connection *c, const oai_error *e, int64_t retry_ms) {
    char sec[24], ms[24];
    snprintf(sec, sizeof sec, "%lld", (long long)((retry_ms + 999) / 1000));
    snprintf(ms, sizeof ms, "%lld", (long long)retry_ms);
    const char *const extra[] = {"Retry-After", sec, "Retry-After-Ms", ms, NULL};
    return reply_error_hdrs(s, c, e, extra);
}

int64_t srv_retry_ms(server *s) {
    int64_t ema_us = atomic_load(&s->e2e_ema_us);
    if (ema_us <= 0) return 1000;
    int64_t ahead = atomic_load(&s->gen_inflight) - s->n_parallel;
    if (ahead < 1) ahead = 1;
    int64_t ms = ema_us / 1000 * ahead / (s->n_parallel > 0 ? s->n_parallel : 1);
    return ms < 250 ? 250 : ms > 60000 ? 60000 : ms;
}

void srv_hist_observe(srv_hist *h, double seconds) {
    if (!(seconds >= 0)) seconds = 0;
    int32_t i = 0;
    while (i < h->n_le && seconds > h->le[i]) i++;
    atomic_fetch_add(&h->bucket[i], 1);
    atomic_fetch_add(&h->sum_ns, (int_fast64_t)(seconds * 1e9));
    atomic_fetch_add(&h->count, 1);
}

static enum MHD_Result reply_cjson(server *s, struct MHD_Connection *c, cJSON *o) {
    char *str = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return srv_reply_json(s, c, 200, str);
}

int srv_client_state(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return SRV_CLIENT_OPEN;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return SRV_CLIENT_OPEN;
    /* EOF: the peer sent FIN.  That is shutdown(SHUT_WR) after a complete
     * request as often as a close(); only a write can tell them apart (a
     * closed peer answers it with RST, and recv then fails) */
    if (n == 0) return SRV_CLIENT_EOF;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? SRV_CLIENT_OPEN : SRV_CLIENT_GONE;
}

/* ---- authentication ---- */

static bool is_public(const char *method, const char *url) {
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return false;
    if (!strcmp(url, "/") || !strcmp(url, "/health")) return true;
    for (size_t i = 0; i < web_assets_count; i++)
        if (!strcmp(url, web_assets[i].path)) return true;
    return false;
}

/* Compares without an early exit on the first differing byte. */
static bool same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)a[i] ^ (unsigned char)b[i % (lb ? lb : 1)];
    return diff == 0 && lb > 0;
}

static bool authorized(server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return same_secret(h, s->api_key);
}

/* ---- small endpoints ---- */

int srv_tokenize(server *s, const char *text, size_t len, bool add_bos, bool parse_special, kite_token **out,
                 int32_t *n_out) {
    size_t cap = len + 8, n = 0;
    kite_token *t = malloc(cap * sizeof *t);
    if (!t) return err_set(KITE_E_NOMEM, "out of memory");
    int st;
    for (int attempt = 0; attempt < 2; attempt++) {
        st = parse_special ? chat_tokenize(s->ctok, text, len, add_bos, t, cap, &n)
                           : kite_tokenize(s->model, text, len, add_bos, t, cap, &n);
        if (st != KITE_E_RANGE || n <= cap) break;
        kite_token *t2 = realloc(t, n * sizeof *t);
        if (!t2) {
            st = err_set(KITE_E_NOMEM, "out of memory");
            break;
        }
        t = t2;
        cap = n;
    }
    if (st == KITE_OK && n > (size_t)INT32_MAX) st = err_set(KITE_E_RANGE, "prompt too long");
    if (st != KITE_OK) {
        free(t);
        return st;
    }
    *out = t;
    *n_out = (int32_t)n;
    return KITE_OK;
}

/* The model object of GET /v1/models and /v1/models/{id}. */
static cJSON *model_json(server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "kite");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    kite_model_info info;
    kite_model_get_info(s->model, &info);
    cJSON_AddStringToObject(meta, "arch", info.arch);
    cJSON_AddNumberToObject(meta, "n_vocab", info.n_vocab);
    cJSON_AddNumberToObject(meta, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", info.n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_params", (double)info.n_params);
    cJSON_AddStringToObject(meta, "chat_template", chat_family_name(s->chat_family));
    return m;
}

static enum MHD_Result handle_models(server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, model_json(s));
    return reply_cjson(s, c, o);
}

bool srv_model_check(const server *s, const char *model, oai_error *err) {
    if (!model || !model[0] || !strcmp(model, s->model_id) || (s->model_file && !strcmp(model, s->model_file)))
        return true;
    char shown[128];
    http_utf8_copy(shown, sizeof shown, model);
    oai_error_set(err, 404, "invalid_request_error", "model_not_found", "model",
                  "The model `%s` does not exist (this server serves `%s`).", shown, s->model_id);
    return false;
}

/* GET /v1/models/{id}: the model object, or OpenAI's 404 model_not_found. */
static enum MHD_Result handle_model(server *s, struct MHD_Connection *c, const char *url, int *status) {
    const char *id = strstr(url, "/models/") + strlen("/models/");
    oai_error err;
    if (srv_model_check(s, id, &err)) {
        *status = 200;
        return reply_cjson(s, c, model_json(s));
    }
    *status = 404;
    return srv_reply_error(s, c, &err);
}

/* Parses body as a JSON object for /tokenize and /detokenize. */
static cJSON *parse_object(const char *body, size_t len, oai_error *err) {
    if (http_json_has_nul(body, len)) {
        oai_error_set(err, 400, "invalid_request_error", "invalid_value", NULL,
                      "Strings in the request may not contain U+0000 (\\u0000).");
        return NULL;
    }
    cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
    if (!root) {
        oai_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                      "We could not parse the JSON body of your request.");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        oai_error_set(err, 400, "invalid_request_error", "invalid_type", NULL, "The request body must be a JSON object.");
        return NULL;
    }
    return root;
}

static enum MHD_Result handle_tokenize(server *s, struct MHD_Connection *c, const char *body, size_t len, int *status) {
    oai_error err;
    kite_token *toks = NULL;
    cJSON *root = parse_object(body, len, &err);
    if (!root) goto fail;
    const cJSON *text = oai_member(root, "content");
    const char *key = "content";
    if (!text) {
        text = oai_member(root, "text");
        key = "text";
    }
    if (!text) {
        oai_error_set(&err, 400, "invalid_request_error", "missing_required_parameter", "content",
                      "Missing required parameter: 'content'.");
        goto fail;
    }
    if (!cJSON_IsString(text)) {
        oai_error_set(&err, 400, "invalid_request_error", "invalid_type", key, "Invalid type for '%s': expected a string.", key);
        goto fail;
    }
    const cJSON *as = oai_member(root, "add_special");
    if (as && !cJSON_IsBool(as)) {
        oai_error_set(&err, 400, "invalid_request_error", "invalid_type", "add_special",
                      "Invalid type for 'add_special': expected a boolean.");
        goto fail;
    }
    const cJSON *ps = oai_member(root, "parse_special");
    if (ps && !cJSON_IsBool(ps)) {
        oai_error_set(&err, 400, "invalid_request_error", "invalid_type", "parse_special",
                      "Invalid type for 'parse_special': expected a boolean.");
        goto fail;
    }
    int32_t n = 0;
    size_t tlen = strlen(text->valuestring);
    int st = srv_tokenize_bounded(s, text->valuestring, tlen, as && cJSON_IsTrue(as), !ps || cJSON_IsTrue(ps),
                                  time_now_s() + s->p.timeout_s, &toks, &n);
    if (st == KITE_E_NOMEM) goto oom;
    if (st == KITE_E_STATE) {
        oai_error_set(&err, 503, "server_error", "tokenizer_busy", NULL, "%s", kite_last_error());
        cJSON_Delete(root);
        *status = 503;
        return srv_reply_error_retry(s, c, &err, srv_retry_ms(s));
    }
    if (st != KITE_OK) {
        oai_error_set(&err, 400, "invalid_request_error", "invalid_value", key, "Could not tokenize: %s", kite_last_error());
        goto fail;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(toks[i]));
    free(toks);
    cJSON_Delete(root);
    *status = 200;
    return reply_cjson(s, c, o);
oom:
    oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory.");
fail:
    free(toks);
    cJSON_Delete(root);
    *status = err.status;
    return srv_reply_error(s, c, &err);
}

static enum MHD_Result handle_detokenize(server *s, struct MHD_Connection *c, const char *body, size_t len,
                                         int *status) {
    oai_error err;
    kite_detok *d = NULL;
    char *text = NULL;
    size_t tl = 0, tc = 0;
    cJSON *root = parse_object(body, len, &err);
    if (!root) goto fail;
    const cJSON *arr = oai_member(root, "tokens");
    if (!arr) {
        oai_error_set(&err, 400, "invalid_request_error", "missing_required_parameter", "tokens",
                      "Missing required parameter: 'tokens'.");
        goto fail;
    }
    if (!cJSON_IsArray(arr)) goto bad_type;
    if (kite_detok_new(s->model, &d) != KITE_OK) goto oom;
    char piece[1024];
    for (const cJSON *t = arr->child;; t = t->next) {
        int n;
        if (t) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble)) goto bad_type;
            if (t->valuedouble < 0 || t->valuedouble >= s->n_vocab) {
                oai_error_set(&err, 400, "invalid_request_error", "invalid_value", "tokens",
                              "Invalid value for 'tokens': %g is outside the vocabulary (%d tokens).",
                              t->valuedouble, (int)s->n_vocab);
                goto fail;
            }
            n = kite_detok_push(d, (kite_token)t->valuedouble, piece, sizeof piece);
        } else {
            n = kite_detok_flush(d, piece, sizeof piece);
        }
        if (n < 0) {
            oai_error_set(&err, 400, "invalid_request_error", "invalid_value", "tokens", "%s", kite_last_error());
            goto fail;
        }
        if (tl + (size_t)n + 1 > tc) {
            size_t nc = tc ? tc * 2 : 256;
            while (nc < tl + (size_t)n + 1) nc *= 2;
            char *q = realloc(text, nc);
            if (!q) goto oom;
            text = q;
            tc = nc;
        }
        memcpy(text + tl, piece, (size_t)n);
        tl += (size_t)n;
        text[tl] = '\0';
        if (!t) break;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text ? text : "");
    free(text);
    kite_detok_free(d);
    cJSON_Delete(root);
    *status = 200;
    return reply_cjson(s, c, o);
bad_type:
    oai_error_set(&err, 400, "invalid_request_error", "invalid_type", "tokens",
                  "Invalid type for 'tokens': expected an array of integers.");
    goto fail;
oom:
    oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory.");
fail:
    free(text);
    kite_detok_free(d);
    cJSON_Delete(root);
    *status = err.status;
    return srv_reply_error(s, c, &err);
}

/* ---- routing ---- */

enum route { R_NONE, R_PAGE, R_HEALTH, R_MODELS, R_MODEL, R_METRICS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE,
             R_EMBEDDINGS, R_EMBEDDING };

static enum route route_of(const char *url, bool *post) {
    static const struct {
        const char *path;
        enum route r;
        bool post;
    } table[] = {
        {"/health", R_HEALTH, false},
        {"/v1/models", R_MODELS, false},
        {"/models", R_MODELS, false},
        {"/metrics", R_METRICS, false},
        {"/v1/completions", R_COMPLETIONS, true},
        {"/completions", R_COMPLETIONS, true},
        {"/v1/chat/completions", R_CHAT, true},
        {"/chat/completions", R_CHAT, true},
        {"/tokenize", R_TOKENIZE, true},
        {"/detokenize", R_DETOKENIZE, true},
        {"/v1/embeddings", R_EMBEDDINGS, true},
        {"/embeddings", R_EMBEDDINGS, true},
        {"/embedding", R_EMBEDDING, true},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) {
            *post = table[i].post;
            return table[i].r;
        }
    *post = false;
    if ((!strncmp(url, "/v1/models/", 11) && url[11]) || (!strncmp(url, "/models/", 8) && url[8])) return R_MODEL;
    if (!strcmp(url, "/")) return R_PAGE;
    for (size_t i = 0; i < web_assets_count; i++)
        if (!strcmp(url, web_assets[i].path)) return R_PAGE;
    return R_NONE;
}

static enum MHD_Result handle_page(server *s, struct MHD_Connection *c, const char *url, int *status) {
    oai_error err;
    const char *path = strcmp(url, "/") ? url : "/index.html";
    for (size_t i = 0; i < web_assets_count; i++)
        if (!strcmp(path, web_assets[i].path)) {
            struct MHD_Response *r = MHD_create_response_from_buffer(
                web_assets[i].len, (void *)web_assets[i].data, MHD_RESPMEM_PERSISTENT);
            if (!r) return MHD_NO;
            MHD_add_response_header(r, "Content-Type", web_assets[i].content_type);
            MHD_add_response_header(r, "Cache-Control", "no-cache");
            MHD_add_response_header(r, "Content-Security-Policy",
                                    "default-src 'self'; style-src 'self'; script-src 'self'");
            enum MHD_Result ret = queue(s, c, 200, r, NULL);
            MHD_destroy_response(r);
            *status = 200;
            return ret;
        }
    oai_error_set(&err, 404, "invalid_request_error", "unknown_url", NULL, "Unknown request URL: GET %s", url);
    *status = 404;
    return srv_reply_error(s, c, &err);
}

/* GET /health: 200 {"status": "ok", ...} with the queued and running
 * counts; 503 (llama-server's unavailable_error) while draining or when
 * every slot and queue place is taken. */
static enum MHD_Result handle_health(server *s, struct MHD_Connection *c, int *status) {
    engine_stats st;
    engine_get_stats(s->eng, &st);
    int inflight = atomic_load(&s->gen_inflight);
    int queued = inflight - st.running;
    if (queued < 0) queued = 0;
    bool draining = atomic_load(&s->draining), saturated = inflight >= s->gen_capacity;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", draining ? "draining" : saturated ? "saturated" : "ok");
    /* public: the model's name too, so the chat page can show it before a key is entered */
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddNumberToObject(o, "queued", queued);
    cJSON_AddNumberToObject(o, "running", st.running);
    cJSON_AddNumberToObject(o, "slots", s->n_parallel);
    cJSON_AddNumberToObject(o, "capacity", s->gen_capacity);
    if (draining || saturated) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddNumberToObject(e, "code", 503);
        cJSON_AddStringToObject(e, "message", draining ? "The server is shutting down." :
                                              "Every slot and queue place is taken.");
        cJSON_AddStringToObject(e, "type", "unavailable_error");
    }
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *status = draining || saturated ? 503 : 200;
    if (*status == 503) {
        if (!(json = srv_json_utf8(json))) return MHD_NO;
        char sec[24], ms[24];
        int64_t r = srv_retry_ms(s);
        snprintf(sec, sizeof sec, "%lld", (long long)((r + 999) / 1000));
        snprintf(ms, sizeof ms, "%lld", (long long)r);
        const char *const extra[] = {"Retry-After", sec, "Retry-After-Ms", ms, NULL};
        return reply_hdrs(s, c, 503, "application/json", json, strlen(json), MHD_RESPMEM_MUST_FREE, extra);
    }
    return srv_reply_json(s, c, 200, json);
}

static enum MHD_Result dispatch(server *s, struct MHD_Connection *c, srv_conn *k) {
    bool post;
    enum route r = route_of(k->url, &post);
    bool is_get = !strcmp(k->method, "GET") || !strcmp(k->method, "HEAD");
    bool is_post = !strcmp(k->method, "POST");
    oai_error err;
    if (r == R_NONE) {
        oai_error_set(&err, 404, "invalid_request_error", "unknown_url", NULL, "Unknown request URL: %s %s",
                      k->method, k->url);
        goto fail;
    }
    if (post ? !is_post : !is_get) {
        static const char *const allow_post[] = {"Allow", "POST, OPTIONS", NULL};
        static const char *const allow_get[] = {"Allow", "GET, HEAD, OPTIONS", NULL};
        oai_error_set(&err, 405, "invalid_request_error", "method_not_allowed", NULL,
                      "Method %s is not allowed for %s (use %s).", k->method, k->url, post ? "POST" : "GET");
        k->status = err.status;
        return reply_error_hdrs(s, c, &err, post ? allow_post : allow_get);
    }
    const char *body = k->body ? k->body : "";
    switch (r) {
    case R_PAGE: return handle_page(s, c, k->url, &k->status);
    case R_HEALTH: return handle_health(s, c, &k->status);
    case R_MODELS: k->status = 200; return handle_models(s, c);
    case R_MODEL: return handle_model(s, c, k->url, &k->status);
    case R_METRICS: {
        char *t = metrics_text(s);
        k->status = t ? 200 : 500;
        if (!t) return MHD_NO;
        return reply(s, c, 200, "text/plain; version=0.0.4", t, strlen(t), MHD_RESPMEM_MUST_FREE);
    }
    case R_COMPLETIONS:
    case R_CHAT: return gen_handle(s, c, body, k->len, r == R_CHAT, &k->status, &k->gen);
    case R_TOKENIZE: return handle_tokenize(s, c, body, k->len, &k->status);
    case R_DETOKENIZE: return handle_detokenize(s, c, body, k->len, &k->status);
    case R_EMBEDDINGS:
    case R_EMBEDDING: return embed_handle(s, c, body, k->len, r == R_EMBEDDINGS, &k->status);
    case R_NONE: break;
    }
    oai_error_set(&err, 500, "server_error", NULL, NULL, "unreachable");
fail:
    k->status = err.status;
    return srv_reply_error(s, c, &err);
}

/* OPTIONS: a CORS preflight from an allowed Origin gets the methods and
 * headers it may use; any other OPTIONS gets 204 with Allow only. */
static enum MHD_Result reply_options(server *s, struct MHD_Connection *c, const char *url) {
    bool post;
    enum route r = route_of(url, &post);
    const char *allow = r == R_NONE ? "GET, HEAD, POST, OPTIONS" : post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
    const char *hdrs[12] = {"Allow", allow, NULL};
    const char *origin = cors_origin(s, c);
    if (origin && MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method")) {
        hdrs[2] = "Access-Control-Allow-Methods";
        hdrs[3] = allow;
        hdrs[4] = "Access-Control-Allow-Headers";
        hdrs[5] = "Authorization, Content-Type";
        hdrs[6] = "Access-Control-Max-Age";
        hdrs[7] = "600";
        hdrs[8] = NULL;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    enum MHD_Result ret = queue(s, c, 204, resp, hdrs);
    MHD_destroy_response(resp);
    return ret;
}

/* 415 for a POST body that is not JSON; returns the status set in *err or 0.
 * application/json (any parameters) always passes.  Bodies a page can send
 * cross-site without a preflight (forms, text/plain, a typeless Blob) are
 * refused whenever the request comes from a browser (Origin or Sec-Fetch-*
 * present).  Non-browser clients keep what they send today: curl -d labels
 * JSON application/x-www-form-urlencoded, and some HTTP libraries send no
 * type at all; every other type is refused. */
static int content_type_error(struct MHD_Connection *c, oai_error *err) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (http_ctype_is_json(ct)) return 0;
    bool browser = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin") ||
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Mode") ||
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Site");
    bool legacy = !ct || !strncasecmp(ct, "application/x-www-form-urlencoded", 33);
    if (legacy && !browser) return 0;
    char shown[64];
    http_utf8_copy(shown, sizeof shown, ct ? ct : "(none)");
    oai_error_set(err, 415, "invalid_request_error", "unsupported_media_type", NULL,
                  "Content-Type '%s' is not supported: send the body as application/json.", shown);
    return 415;
}

/* MHD_get_connection_values iterator: adds the bytes of one header line. */
static enum MHD_Result count_bytes(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    server *s = cls;
    srv_conn *k = *con_cls;
    oai_error err;
    const char *const *extra = NULL;
    (void)version;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        *con_cls = k;
        k->t0 = time_now_s();
        atomic_fetch_add(&s->http_active, 1);
        /* copies for the log and error messages: cut without splitting a
         * character (MHD has percent-decoded the URL: any bytes at all) */
        http_utf8_copy(k->method, sizeof k->method, method);
        http_utf8_copy(k->url, sizeof k->url, url);
        /* our own head limits, far below the MHD memory pool (see
         * server_start), so that an oversized head gets these JSON answers
         * instead of libmicrohttpd's HTML 414/431 */
        size_t uri_bytes = strlen(url), head_bytes = 0;
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, count_bytes, &uri_bytes);
        MHD_get_connection_values(c, MHD_HEADER_KIND, count_bytes, &head_bytes);
        if (uri_bytes > SERVER_MAX_URI) {
            oai_error_set(&err, 414, "invalid_request_error", "uri_too_long", NULL,
                          "The request URI is %zu bytes; the limit is %d bytes.", uri_bytes, SERVER_MAX_URI);
            goto early;
        }
        if (head_bytes > SERVER_MAX_HEADERS) {
            oai_error_set(&err, 431, "invalid_request_error", "request_header_fields_too_large", NULL,
                          "The request headers are %zu bytes; the limit is %d bytes.", head_bytes, SERVER_MAX_HEADERS);
            goto early;
        }
        /* DNS rebinding: a page of evil.example resolving to 127.0.0.1 still
         * sends "Host: evil.example" (requests without Host are HTTP/1.0
         * clients, never browsers) */
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (host && !http_host_allowed(host, s->host, s->allowed_hosts)) {
            char shown[96];
            http_utf8_copy(shown, sizeof shown, host);
            oai_error_set(&err, 403, "invalid_request_error", "host_not_allowed", NULL,
                          "Host '%s' is not allowed (start the server with --allowed-hosts to add it).", shown);
            goto early;
        }
        /* OPTIONS before authentication: browsers send CORS preflights
         * without credentials */
        if (!strcmp(method, "OPTIONS")) {
            k->answered = true;
            k->status = 204;
            return reply_options(s, c, url);
        }
        bool post_route;
        if (!strcmp(method, "POST") && route_of(url, &post_route) != R_NONE && post_route &&
            content_type_error(c, &err))
            goto early;
        if (!is_public(method, url) && !authorized(s, c)) {
            static const char *const www_auth[] = {"WWW-Authenticate", "Bearer realm=\"kite\"", NULL};
            oai_error_set(&err, 401, "invalid_request_error", "invalid_api_key", NULL,
                          "Incorrect or missing API key: send 'Authorization: Bearer KEY'.");
            extra = www_auth;
            goto early;
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->p.max_body) {
            oai_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                          "The request body is %s bytes; the limit is %lld bytes.", cl, (long long)s->p.max_body);
            goto early;
        }
        /* draining: only the state endpoints still answer */
        if (atomic_load(&s->draining) && strcmp(url, "/health") && strcmp(url, "/metrics")) {
            oai_error_set(&err, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down.");
            k->answered = true;
            k->status = 503;
            return srv_reply_error_retry(s, c, &err, 1000);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (k->answered) return MHD_YES;
        if (k->too_large || k->len + n > (size_t)s->p.max_body) {
            k->too_large = true;
            k->drained += n;
            free(k->body);
            k->body = NULL;
            k->len = k->cap = 0;
            return k->drained > 4 * (size_t)s->p.max_body ? MHD_NO : MHD_YES;
        }
        if (k->len + n + 1 > k->cap) {
            size_t nc = k->cap ? k->cap : 4096;
            while (nc < k->len + n + 1) nc *= 2;
            char *b = realloc(k->body, nc);
            if (!b) return MHD_NO;
            k->body = b;
            k->cap = nc;
        }
        memcpy(k->body + k->len, upload_data, n);
        k->len += n;
        k->body[k->len] = '\0';
        return MHD_YES;
    }
    gate_body_done(s->gate, conn_fd(c)); /* the whole body is here: its deadline stops */
    if (k->answered) return MHD_YES;
    if (k->too_large) {
        oai_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                      "The request body is larger than the limit of %lld bytes.", (long long)s->p.max_body);
        k->status = 413;
        return srv_reply_error(s, c, &err);
    }
    return dispatch(s, c, k);

early:
    k->answered = true;
    k->status = err.status;
    return reply_error_hdrs(s, c, &err, extra);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    srv_conn *k = *con_cls;
    if (!k) return;
    *con_cls = NULL;
    gate_body_done(s->gate, conn_fd(c));
    int32_t n_prompt = 0, n_gen = 0;
    char note[16] = "";
    if (k->gen) {
        const char *nt;
        gen_req_log_info(k->gen, &n_prompt, &n_gen, &nt);
        snprintf(note, sizeof note, "%s", toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? "cancelled" : nt);
        gen_req_release(k->gen); /* cancels an unfinished generation; nt dies with it */
    }
    int cls_i = k->status / 100;
    atomic_fetch_add(&s->http_requests[cls_i >= 1 && cls_i <= 5 ? cls_i : 0], 1);
    if (!s->p.quiet) {
        char peer[INET6_ADDRSTRLEN] = "?";
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, peer, sizeof peer);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, peer, sizeof peer);
        }
        static const char *const toe_name[] = {"", " (connection error)", " (timeout)", " (shutdown)",
                                               " (read error)", " (client abort)"};
        const char *why = (unsigned)toe < sizeof toe_name / sizeof toe_name[0] ? toe_name[toe] : "";
        if (k->gen)
            fprintf(stderr, "kite serve: %s %s %s %d %.1f ms prompt=%d gen=%d %s%s\n", peer, k->method, k->url,
                    k->status, (time_now_s() - k->t0) * 1e3, (int)n_prompt, (int)n_gen, note, why);
        else
            fprintf(stderr, "kite serve: %s %s %s %d %.1f ms%s\n", peer, k->method, k->url, k->status ? k->status : 0,
                    (time_now_s() - k->t0) * 1e3, why);
    }
    free(k->body);
    free(k);
    atomic_fetch_sub(&s->http_active, 1);
}

/* libmicrohttpd closed a connection (before its close()): the gate stops
 * counting it. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    server *s = cls;
    (void)socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) gate_conn_closed(s->gate, conn_fd(c));
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    server *s = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == '.')) line[--n] = '\0';
    if (!atomic_load(&s->running)) {
        /* while starting, keep the first message for server_start's error */
        if (!s->start_error[0])
            snprintf(s->start_error, sizeof s->start_error, "%.*s", (int)sizeof s->start_error - 1, line);
        return;
    }
    if (s->p.quiet) return;
    fprintf(stderr, "kite serve: http: %s\n", line);
}

/* ---- life cycle ---- */

/* Early rejection (issue 23): the byte length above which a text cannot
 * tokenize to fewer than n_ctx tokens, so it can be refused before the
 * tokenizer runs (a 1 MB prompt costs seconds of CPU).  Safe - it never
 * refuses a prompt that fits - because:
 *   - every token covers at most L bytes of the text the tokenizer sees,
 *     with L the longest token in input bytes: the longest piece
 *     (kite_token_to_piece: SentencePiece's U+2581 counted as the one space
 *     it stands for, byte tokens as one byte), the longest special token
 *     text (chat_tokenize matches those in the text), and at least 4 (an
 *     unknown-character token covers one character, at most 4 bytes);
 *   - the text the tokenizer sees is the prompt itself, or longer
 *     (SentencePiece adds a space per segment), or its NFC form (byte-level
 *     BPE pre-normalisation), which is never shorter than a third of it:
 *     the extremes are Hangul L+V+T jamo (9 bytes -> one 3-byte syllable)
 *     and U+0390's decomposition (6 bytes -> 2); we allow 4x;
 *   so a text of B bytes has at least B / (4 L) tokens, and B > 4 L n_ctx
 *   means more than n_ctx tokens: the context_length_exceeded answer it
 *   would get after tokenization anyway.  Cost: O(n_vocab), at start. */
static int64_t prompt_bytes_bound(server *s) {
    int64_t l = 4;
    char buf[8];
    for (int32_t t = 0; t < s->n_vocab; t++) {
        const char *piece;
        int n = kite_token_to_piece(s->model, t, &piece, buf);
        if (n > l) l = n;
    }
    int64_t sp = (int64_t)chat_tokenizer_max_special_len(s->ctok);
    if (sp > l) l = sp;
    return 4 * l * (int64_t)s->n_ctx;
}

uint64_t srv_client_key(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return 0;
    const struct sockaddr *sa = ci->client_addr;
    const unsigned char *b = NULL;
    size_t n = 0;
    if (sa->sa_family == AF_INET) {
        b = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        n = 4;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        b = a6->s6_addr;
        n = 16;
        if (IN6_IS_ADDR_V4MAPPED(a6)) { /* ::ffff:a.b.c.d is the client a.b.c.d */
            b += 12;
            n = 4;
        }
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the address bytes, tagged by their length */
    h = (h ^ n) * 0x100000001b3ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static bool addr_is_loopback(const struct sockaddr_storage *a) {
    if (a->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr) >> 24) == 127;
    if (a->ss_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a6)) return true;
        return IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127;
    }
    return false;
}

int server_start(kite_model *model, const server_params *params, server **out) {
    int st;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    server *s = calloc(1, sizeof *s);
    if (!s) return err_set(KITE_E_NOMEM, "out of memory");
    s->model = model;
    s->p = *params;
    if (s->p.timeout_s <= 0) s->p.timeout_s = 600;
    if (s->p.idle_timeout_s <= 0) s->p.idle_timeout_s = 30;
    if (s->p.header_timeout_s <= 0) s->p.header_timeout_s = 10;
    if (s->p.body_timeout_s <= 0) s->p.body_timeout_s = 60;
    if (s->p.max_body <= 0) s->p.max_body = 1 << 20;
    if (s->p.max_connections <= 0) s->p.max_connections = 1024;
    if (s->p.max_conns_per_ip == 0) s->p.max_conns_per_ip = 256;
    if (s->p.queue == 0) s->p.queue = 64;
    if (s->p.drain_timeout_s <= 0) s->p.drain_timeout_s = 30;
    static const double le_lat[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
    static const double le_itl[] = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
                                    0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0};
    _Static_assert(sizeof le_lat / sizeof le_lat[0] <= SRV_HIST_MAX, "histogram bounds");
    _Static_assert(sizeof le_itl / sizeof le_itl[0] <= SRV_HIST_MAX, "histogram bounds");
    srv_hist *lat[] = {&s->h_queue, &s->h_ttft, &s->h_e2e};
    for (size_t i = 0; i < 3; i++) {
        lat[i]->le = le_lat;
        lat[i]->n_le = (int32_t)(sizeof le_lat / sizeof le_lat[0]);
    }
    s->h_itl.le = le_itl;
    s->h_itl.n_le = (int32_t)(sizeof le_itl / sizeof le_itl[0]);
    /* descriptors: the soft limit up to the hard one (1000 slow sockets
     * must not exhaust a 1024 default); connections stay below it with room
     * for the model, logs and lingering closes */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && (int64_t)s->p.max_connections * 2 + 64 > (int64_t)rl.rlim_cur) {
        int32_t m = (int32_t)(((int64_t)rl.rlim_cur - 64) / 2);
        if (m < 16) m = 16;
        /* a warning only for a limit the user chose: the default follows
         * the descriptor limit silently */
        if (s->p.max_connections != server_default_params().max_connections)
            fprintf(stderr, "kite serve: warning: --max-conns %d lowered to %d (descriptor limit %lld)\n",
                    (int)s->p.max_connections, (int)m, (long long)rl.rlim_cur);
        s->p.max_connections = m;
    }
    s->started = (int64_t)time(NULL);
    atomic_init(&s->next_id, (uint64_t)time(NULL));
    atomic_init(&s->running, false);
    if (params->api_key && params->api_key[0] && !(s->api_key = strdup(params->api_key))) {
        st = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    if (!(s->model_id = strdup(params->model_id && params->model_id[0] ? params->model_id : "kite"))) {
        st = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    if (params->model_file && params->model_file[0] && strcmp(params->model_file, s->model_id) &&
        !(s->model_file = strdup(params->model_file))) {
        st = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    if (!(s->host = strdup(params->host && params->host[0] ? params->host : "127.0.0.1")) ||
        (params->allowed_hosts && params->allowed_hosts[0] && !(s->allowed_hosts = strdup(params->allowed_hosts))) ||
        (params->cors && params->cors[0] && !(s->cors = strdup(params->cors)))) {
        st = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    s->p.api_key = s->api_key;
    s->p.model_id = s->model_id;
    s->p.model_file = s->model_file;
    s->p.host = s->host;
    s->p.allowed_hosts = s->allowed_hosts;
    s->p.cors = s->cors;
    s->p.chat_template = NULL;
    if ((st = chat_family_for_model(model, params->chat_template, &s->chat_family)) != KITE_OK) goto fail;
    if ((st = chat_tokenizer_new(model, &s->ctok)) != KITE_OK) goto fail;

    kite_model_info info;
    kite_model_get_info(model, &info);
    s->n_vocab = info.n_vocab;
    s->n_ctx = params->engine.n_ctx > 0 ? params->engine.n_ctx : info.n_ctx_train;
    if (s->n_ctx < 2) {
        st = err_set(KITE_E_ARG, "context length %d is too small", (int)s->n_ctx);
        goto fail;
    }
    s->max_prompt_bytes = prompt_bytes_bound(s);
    s->n_parallel = params->engine.n_parallel > 0 ? params->engine.n_parallel : 4;
    s->gen_capacity = s->n_parallel + (s->p.queue > 0 ? s->p.queue : 0);
    engine_params ep = params->engine;
    ep.n_ctx = s->n_ctx;
    if ((st = engine_new(model, &ep, &s->eng)) != KITE_OK) goto fail;

    int gai = getaddrinfo(params->host && params->host[0] ? params->host : "127.0.0.1", NULL, &hints, &ai);
    if (gai != 0 || !ai) {
        st = err_set(KITE_E_ARG, "--host '%s': %s", params->host ? params->host : "",
                     gai ? gai_strerror(gai) : "no address");
        goto fail;
    }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen < sizeof addr ? ai->ai_addrlen : sizeof addr);
    /* no listening socket of MHD's own: the gate accepts (gate.h) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    socklen_t addr_len = (socklen_t)ai->ai_addrlen;
    if (addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)(void *)&addr)->sin6_port = htons((uint16_t)params->port);
    else
        ((struct sockaddr_in *)(void *)&addr)->sin_port = htons((uint16_t)params->port);
    freeaddrinfo(ai);
    ai = NULL;
    if (!s->api_key && !addr_is_loopback(&addr))
        fprintf(stderr, "kite serve: warning: %s is not a loopback address and no --api-key is set: anyone who "
                        "can reach it can use the server%s\n",
                s->host, s->allowed_hosts ? "" : " (add the names clients use with --allowed-hosts)");
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.idle_timeout_s,
                                 /* the gate counts; this only keeps MHD from refusing what it hands over */
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections + 64,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVER_MHD_MEMORY,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        st = err_set(KITE_E_IO, "cannot start the HTTP daemon: %s", s->start_error[0] ? s->start_error : "unknown error");
        goto fail;
    }
    if ((st = tok_pool_new(s, &s->tok)) != KITE_OK) goto fail;
    gate_params gp = {
        .max_conns = s->p.max_connections,
        .max_conns_per_ip = s->p.max_conns_per_ip > 0 ? s->p.max_conns_per_ip : 0,
        .header_timeout_ms = s->p.header_timeout_s * 1000,
        .body_timeout_ms = s->p.body_timeout_s * 1000,
    };
    if ((st = gate_start(s, s->daemon, (struct sockaddr *)&addr, addr_len, &gp, &s->gate)) != KITE_OK) {
        st = err_set(KITE_E_IO, "cannot listen on %s port %d: %s", params->host ? params->host : "127.0.0.1",
                     (int)params->port, kite_last_error());
        goto fail;
    }
    atomic_store(&s->running, true);
    s->port = gate_port(s->gate);
    *out = s;
    return KITE_OK;

fail:
    if (ai) freeaddrinfo(ai);
    server_stop(s);
    return st;
}

int32_t server_port(const server *s) { return s->port; }

void server_drain(server *s) {
    atomic_store(&s->draining, true);
    gate_drain(s->gate);
    /* running and queued requests - and requests whose body is still
     * arriving - finish within the drain timeout ... */
    double t_end = time_now_s() + s->p.drain_timeout_s;
    while ((atomic_load(&s->gen_inflight) > 0 || atomic_load(&s->http_active) > 0) && time_now_s() < t_end) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* ... then the rest end now: streams with an error event and [DONE],
     * waiting requests with 503 (gen.c); bounded by 5 s more */
    atomic_store(&s->drain_abort, true);
    t_end = time_now_s() + 5.0;
    while (atomic_load(&s->gen_inflight) > 0 && time_now_s() < t_end) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void server_stop(server *s) {
    if (!s) return;
    /* HTTP first: stopping the daemon shuts the client sockets, so waiting
     * connection threads see their client gone, cancel their requests
     * (engine_cancel needs the engine alive) and are joined; then the engine */
    gate_stop(s->gate); /* no new connections; MHD's CLOSED notifications below still reach the gate */
    if (s->daemon) MHD_stop_daemon(s->daemon);
    gate_free(s->gate);
    tok_pool_free(s->tok);
    engine_free(s->eng);
    chat_tokenizer_free(s->ctok);
    free(s->api_key);
    free(s->model_id);
    free(s->model_file);
    free(s->host);
    free(s->allowed_hosts);
    free(s->cors);
    free(s);
}
