/*
 * server_internal.h - shared state of the HTTP server's files (tools/http).
 *
 * DESIGN
 *   server.c   daemon, routing, authentication, body limits, static files,
 *              small endpoints (health, models, metrics, tokenize), logging
 *   oai.c      OpenAI request parsing/validation and response JSON
 *   gen.c      generation requests: the per-request queue filled by the
 *              engine callback, waiting, non-streaming answers, SSE streams
 *   metrics.c  Prometheus text
 *   embed.c    embeddings (/v1/embeddings, /embedding) through the engine (prefill-only
 *              sequences); embed_parse.c parses their bodies (embed.h)
 *
 * THREADS
 *   A srv_conn belongs to one connection thread.  A gen_req is shared by
 *   that thread and the engine thread (callback): its queue fields are
 *   guarded by gen_req.mu; it is freed by the last gen_req_release.
 */
#ifndef KITE_TOOLS_SERVER_INTERNAL_H
#define KITE_TOOLS_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "chat/chat_template.h"
#include "chat/chat_tokenize.h"
#include "chat/chat_tools.h"
#include "server.h"

#define SERVER_POLL_MS 100      /* how often a waiting thread checks that its client is still there */
#define SERVER_PROBE_MS 1000    /* after a FIN, how often a wait writes a probe (SSE comment / JSON space) */
#define SERVER_MAX_STOP 16      /* stop strings per request */
#define SERVER_MAX_N 16         /* "n": choices per request (each one engine sequence) */
#define SERVER_MAX_LOGIT_BIAS 1024 /* "logit_bias" entries per request (OpenAI allows 300) */
#define SERVER_MAX_URI 8192     /* request path + query bytes (414 above; nginx's large header buffer) */
#define SERVER_MAX_HEADERS 32768 /* header bytes (431 above; nginx's 4 x 8 KiB) */
#define SERVER_TOK_INLINE 8192  /* texts longer than this are tokenized on the tokenizer thread */
#define SERVER_TOK_QUEUE 64     /* texts waiting for the tokenizer thread at most */
/* Per-connection memory pool of libmicrohttpd (its default is 32 KiB).  The
 * request head must fit in it; a head that does not gets MHD's own HTML 414
 * or 431, which no callback can replace in 0.9.75.  Sized well above the two
 * limits above so that those are what a client meets: 256 connections x
 * 128 KiB = 32 MiB at most. */
#define SERVER_MHD_MEMORY (128 * 1024)

/* A Prometheus histogram with fixed upper bounds (seconds); any thread. */
#define SRV_HIST_MAX 24
typedef struct srv_hist {
    const double *le;                        /* [n_le] upper bounds, ascending */
    int32_t n_le;
    atomic_int_fast64_t bucket[SRV_HIST_MAX + 1]; /* non-cumulative counts; [n_le] = +Inf */
    atomic_int_fast64_t sum_ns;
    atomic_int_fast64_t count;
} srv_hist;
void srv_hist_observe(srv_hist *h, double seconds);

/* Why generation requests were turned away or cut short (metrics). */
enum srv_reject { REJ_QUEUE_FULL, REJ_DRAINING, REJ_TOKENIZER_BUSY, REJ_N };
enum srv_timeout { TMO_QUEUE, TMO_GENERATION, TMO_N };

struct gate;
typedef struct tok_pool tok_pool;

struct server {
    kite_model *model;          /* borrowed */
    engine *eng;                /* owned */
    chat_tokenizer *ctok;       /* owned: tokenizes prompts with special-token texts */
    struct MHD_Daemon *daemon;
    server_params p;            /* strings below are owned copies */
    char *api_key;              /* NULL = no authentication */
    char *model_id;             /* the served name (params.model_id) */
    char *model_file;           /* also accepted in requests, or NULL */
    char *host;                 /* bound address as given (Host allowlist) */
    char *allowed_hosts;        /* NULL = none */
    char *cors;                 /* NULL = CORS off */
    int chat_family;            /* enum chat_family */
    int32_t n_ctx;              /* positions per sequence */
    int32_t n_vocab;
    int64_t max_prompt_bytes;   /* a text to tokenize longer than this cannot fit n_ctx (server_start) */
    int32_t port;
    int64_t started;            /* unix seconds */
    atomic_uint_fast64_t next_id;            /* response ids */
    atomic_int_fast64_t http_requests[6];    /* by status class: [1] 1xx .. [5] 5xx, [0] other */
    atomic_int_fast64_t http_cancelled;      /* generations cancelled by a client leaving */
    atomic_bool running;                     /* daemon started (MHD messages go to stderr) */
    struct gate *gate;                       /* owned: listening socket and connection limits (gate.h) */
    tok_pool *tok;                           /* owned: tokenizer thread for large texts */
    /* backpressure (issue 23): generation requests from gen_handle's start
     * to their release; at most gen_capacity = n_parallel + queue */
    atomic_int gen_inflight;
    int32_t gen_capacity;
    int32_t n_parallel;
    atomic_int http_active;                  /* requests between their head and on_completed (drain waits) */
    atomic_bool draining;                    /* server_drain called: new requests get 503 */
    atomic_bool drain_abort;                 /* the drain deadline passed: waiting requests end now */
    atomic_int_fast64_t rejected[REJ_N];
    atomic_int_fast64_t timed_out[TMO_N];
    atomic_int_fast64_t e2e_ema_us;          /* moving average of end-to-end latency (Retry-After), 0 = none yet */
    srv_hist h_queue, h_ttft, h_itl, h_e2e;  /* seconds: arrival -> admission, -> first token, between tokens,
                                                arrival -> end */
    char start_error[160];                   /* first MHD message while starting */
};

/* ---- OpenAI errors ---- */

typedef struct oai_error {
    int status;                 /* HTTP status */
    const char *type;           /* "invalid_request_error", "authentication_error", ... */
    const char *code;           /* machine-readable code or NULL (JSON null) */
    char param[64];             /* offending field or "" (JSON null) */
    char message[384];
} oai_error;

void oai_error_set(oai_error *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}} as a malloc'd string (NULL on OOM). */
char *oai_error_json(const oai_error *e);

/* ---- parsed generation requests ---- */

typedef struct oai_request {
    bool chat;                   /* /v1/chat/completions */
    bool stream;
    bool include_usage;          /* stream_options.include_usage */
    bool ignore_eos;
    char *model;                 /* echoed back; owned */
    char *prompt_text;           /* completions: text prompt (owned) or NULL */
    kite_token *prompt_ids;      /* completions: token prompt (owned) or NULL */
    int32_t n_prompt_ids;
    chat_msg *msgs;              /* chat: messages (role/content owned) */
    size_t n_msgs;
    int32_t max_tokens;          /* -1 = not given */
    kite_sampler_params sampling;
    bool seed_given;
    char *stop[SERVER_MAX_STOP]; /* owned */
    int32_t n_stop;
    bool sot;                    /* "sot": true: Skeleton-of-Thought (chat only, docs/http.md) */
    char *sot_skeleton;          /* "sot_skeleton": given outline instead of a generated one (owned) or NULL */
    int64_t t_max_predict_ms;    /* "t_max_predict_ms" (llama-server): deadline of this request from its arrival,
                                    queue included; 0 = only --timeout */
    int grammar_kind;            /* enum kite_grammar_kind of the constraint, or -1: none */
    char *grammar_text;          /* its GBNF or JSON Schema text (owned) or NULL */
    const char *grammar_param;   /* the field it came from ("response_format", "grammar", "json_schema") */
    bool logprobs;               /* chat "logprobs": true, or completions "logprobs": k */
    int32_t top_logprobs;        /* chat "top_logprobs" / completions "logprobs" value, 0..KITE_MAX_TOP_LOGPROBS */
    kite_logit_bias *logit_bias; /* "logit_bias" entries (owned; ids checked against the vocabulary in gen.c) */
    int32_t n_logit_bias;
    int32_t n;                   /* "n": choices, 1..SERVER_MAX_N */
    /* tools (oai_tools.c, docs/http.md "Tools") */
    chat_tool *tools;            /* "tools": [n_tools] functions (strings owned) or NULL */
    size_t n_tools;
    int tool_choice;             /* enum oai_tool_choice */
    int32_t tool_named;          /* tool_choice {"function": {"name"}}: its index in tools, else -1 */
    bool parallel_tool_calls;    /* "parallel_tool_calls", default true */
    chat_msg_tools *msg_tools;   /* [n_msgs] tool calls / tool_call_id of each message (owned) or NULL */
} oai_request;

enum oai_tool_choice {
    OAI_TOOLS_OFF = 0,  /* no tools, or tool_choice "none": plain content, tools not offered */
    OAI_TOOLS_AUTO,     /* offered; calls parsed from the free output */
    OAI_TOOLS_REQUIRED  /* offered and forced by a grammar (tool_named: that one) */
};

/* oai_tools.c: "tools", "tool_choice", "parallel_tool_calls" of a chat request
 * (after its messages); 400 naming the field on a bad shape. */
bool oai_parse_tools(const cJSON *root, oai_request *r, oai_error *err);
/* oai_tools.c: the tool parts of messages[i] (m, role already checked):
 * tool_calls of an assistant, tool_call_id (and name) of a tool message. */
bool oai_parse_msg_tools(const cJSON *m, const char *role, size_t i, oai_request *r, oai_error *err);
/* true if key is a message field oai_parse_msg_tools reads. */
bool oai_msg_tool_field(const char *key);
void oai_tools_free(oai_request *r);

/* Parses and validates a request body.  Fields kite does not implement give
 * 400 naming them (except null values and the accepted-and-ignored list of
 * docs/http.md); known fields of the wrong type or out of range give 400 in
 * *err.  Returns true on
 * success (free with oai_request_free, also after a failure). */
bool oai_request_parse(const char *body, size_t len, bool chat, oai_request *r /* OUT */, oai_error *err);
void oai_request_free(oai_request *r);

/* Looks up an optional member: true if absent or null (then *out = NULL). */
const cJSON *oai_member(const cJSON *obj, const char *key);

/* ---- generation ---- */

typedef struct gen_req gen_req;

/* Handles POST /v1/completions and /v1/chat/completions with the full body.
 * Queues a response (or returns MHD_NO to drop a client that left).  When a
 * generation was started, *keep receives a reference the caller releases
 * with gen_req_release when the request completes (an unfinished generation
 * is cancelled when its last reference goes). */
enum MHD_Result gen_handle(server *s, struct MHD_Connection *c, const char *body, size_t len, bool chat,
                           int *status /* OUT: HTTP status for the log */, gen_req **keep /* OUT */);
void gen_req_release(gen_req *g); /* NULL is a no-op */
/* Usage and outcome ("stop", "length", "cancelled", "failed") for the log. */
void gen_req_log_info(gen_req *g, int32_t *n_prompt, int32_t *n_gen, const char **note);

/* ---- helpers in server.c ---- */

/* The "model" of a request (NULL: absent): true when it names the served
 * model (its id, or its file name when the id is an alias; absent, null or
 * "" are accepted, as llama-server does), else false with OpenAI's 404
 * model_not_found in *err.  Any thread. */
bool srv_model_check(const server *s, const char *model, oai_error *err);

/* Makes a serialized JSON text valid UTF-8: returns json itself when it is,
 * else a copy with every ill-formed sequence replaced by U+FFFD (json is
 * freed).  cJSON copies bytes >= 0x80 verbatim and escapes the rest, so
 * such bytes only occur inside strings and the result is still JSON.  NULL
 * in or out of memory gives NULL.  Every response body passes here. */
char *srv_json_utf8(char *json);
/* Queues a JSON response (takes ownership of the malloc'd json).  */
enum MHD_Result srv_reply_json(server *s, struct MHD_Connection *c, int status, char *json);
/* Queues an OpenAI error. */
enum MHD_Result srv_reply_error(server *s, struct MHD_Connection *c, const oai_error *e);
/* Queues an OpenAI error with Retry-After / Retry-After-Ms headers. */
enum MHD_Result srv_reply_error_retry(server *s, struct MHD_Connection *c, const oai_error *e, int64_t retry_ms);
/* Milliseconds a turned-away client should wait before retrying: the
 * requests ahead of it times the average latency per slot, clipped to
 * [250 ms, 60 s]; 1 s before any request finished. */
int64_t srv_retry_ms(server *s);
/* Adds the headers every response of c gets (CORS for an allowed Origin). */
void srv_add_headers(server *s, struct MHD_Connection *c, struct MHD_Response *r);
/* What the peer of c has done to its end, without blocking or reading. */
enum srv_client {
    SRV_CLIENT_OPEN, /* nothing seen (or more bytes pending) */
    SRV_CLIENT_EOF,  /* FIN: half-closed (shutdown(SHUT_WR)) or closed - unknown until we write */
    SRV_CLIENT_GONE  /* reset or error: a write failed or would fail */
};
int srv_client_state(struct MHD_Connection *c);
/* The fair-queueing identity of c's requests (engine_req.client): a hash
 * of the peer IP address (an IPv4-mapped IPv6 address as its IPv4 one; the
 * port is not part of it), 0 when unknown.  Not the API key: the server has
 * one key, which every client shares (docs/http.md "Fair queueing"). */
uint64_t srv_client_key(struct MHD_Connection *c);

/* ---- metrics ---- */

/* Tokenizes text (BOS if add_bos and the vocabulary has one); special
 * token texts become their ids when parse_special.  *out is malloc'd.
 * Returns a kite_status. */
int srv_tokenize(server *s, const char *text, size_t len, bool add_bos, bool parse_special, kite_token **out,
                 int32_t *n_out);
/* srv_tokenize for any length: texts above SERVER_TOK_INLINE bytes go to
 * the tokenizer thread (low priority, one at a time, so large prompts never
 * take the CPU from the engine or from short prompts) and are waited for;
 * one still queued at deadline (time_now_s; 0 = none), or arriving while
 * SERVER_TOK_QUEUE texts wait, is refused with KITE_E_STATE and
 * kite_last_error() set.  Returns a kite_status. */
int srv_tokenize_bounded(server *s, const char *text, size_t len, bool add_bos, bool parse_special, double deadline,
                         kite_token **out, int32_t *n_out);
int tok_pool_new(server *s, tok_pool **out);
void tok_pool_free(tok_pool *p);

/* Prometheus text exposition of engine and server counters (malloc'd). */
char *metrics_text(server *s);

#endif
