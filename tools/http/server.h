/*
 * server.h - `kite serve`: an OpenAI-compatible HTTP server over the serving
 * engine (issue 5 items 4-6; docs/http.md).
 *
 * DESIGN
 *   The gate (gate.h) accepts connections and checks request heads; it
 *   hands complete heads to libmicrohttpd, which runs one thread per
 *   connection.  A connection thread parses the request (cJSON), tokenizes the
 *   prompt, submits it to the engine (src/engine/engine.h) and then waits on
 *   the request's own queue (mutex + condvar) that the engine callback fills
 *   from the engine thread.  Non-streaming requests wait in the request
 *   handler and answer once; streaming requests answer at once with a
 *   callback response whose reader blocks on the queue and writes one SSE
 *   chunk per batch of new text.  While waiting, the connection thread
 *   checks every SERVER_POLL_MS whether the client has gone; a client that
 *   disconnects (or a write that fails) cancels its engine request, which
 *   frees its KV blocks at the next engine step.
 *
 *   Every error is an OpenAI-style body {"error": {"message", "type",
 *   "param", "code"}} with the matching status; a bad request never affects
 *   other connections.  One line per request is logged to stderr.
 *
 * OWNERSHIP / THREADS
 *   The server borrows the model (which must outlive it) and owns the
 *   engine.  server_start / server_stop are called from one thread.
 */
#ifndef KITE_TOOLS_SERVER_H
#define KITE_TOOLS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite.h"
#include "engine/engine.h"

typedef struct server server;

typedef struct server_params {
    const char *host;          /* numeric address or name to bind; "127.0.0.1" */
    int32_t port;              /* 0 = any free port (see server_port) */
    const char *api_key;       /* NULL/"" = no authentication */
    const char *chat_template; /* family name overriding the model's, or NULL */
    const char *model_id;      /* name served: listed by /v1/models, echoed in answers (borrowed); NULL = "kite" */
    const char *model_file;    /* another name requests may give as "model" (the file name when model_id
                                  is an --alias), or NULL (borrowed) */
    int32_t timeout_s;         /* per-request deadline in seconds, queue time included; 0 = 600 */
    int32_t idle_timeout_s;    /* a connection silent this long is closed; 0 = 30 */
    int32_t header_timeout_s;  /* the whole request head must arrive within this after the accept; 0 = 10 */
    int32_t body_timeout_s;    /* the whole body must arrive within this after the head; 0 = 60 */
    int64_t max_body;          /* request body limit in bytes; 0 = 1 MiB */
    int32_t max_connections;   /* connections held at once; 0 = 1024 (clipped to the descriptor limit) */
    int32_t max_conns_per_ip;  /* connections per client address; 0 = 256, -1 = no limit */
    int32_t queue;             /* generation and embedding requests waiting beyond --parallel; 0 = 64, -1 = none */
    int32_t drain_timeout_s;   /* server_drain: how long running requests may finish; 0 = 30 */
    bool quiet;                /* no per-request log lines */
    const char *allowed_hosts; /* extra Host names allowed besides the bound address and loopback names,
                                  comma-separated; "*" = any Host (no DNS-rebinding check); NULL = none */
    const char *cors;          /* Origins allowed cross-origin (CORS), comma-separated, "*" = any; NULL = no
                                  CORS headers at all */
    engine_params engine;      /* passed to engine_new */
} server_params;

server_params server_default_params(void);

/* Starts the engine and the HTTP daemon.  Returns a kite_status with
 * kite_last_error() set (e.g. address in use, unknown chat template). */
int server_start(kite_model *model, const server_params *params, server **out /* OUT */);
/* The port actually bound (useful with port 0). */
int32_t server_port(const server *s);
/* Graceful drain (SIGTERM): new connections and requests get 503, running
 * and queued requests may finish for drain_timeout_s; then open streams end
 * with an error event and [DONE] and waiting requests get 503.  Returns when
 * no generation request is left (or 5 s after the deadline); call
 * server_stop next. */
void server_drain(server *s);
/* Stops accepting, cancels running requests, joins every thread, frees.
 * NULL is a no-op. */
void server_stop(server *s);

#endif
