/*
 * gate.h - the accept side of `kite serve` (issue 23 items 1 and 3): the
 * server's own listening socket, connection limits and request-head checks
 * in front of libmicrohttpd.
 *
 * DESIGN
 *   One gate thread owns the listening socket and an epoll set.  It accepts
 *   (never blocked by a connection: every socket is non-blocking, at most
 *   GATE_ACCEPT_BURST accepts between two event rounds), counts connections
 *   per client address and in all, and holds each new connection until its
 *   whole request head has arrived - read with MSG_PEEK, so the bytes stay in
 *   the kernel for libmicrohttpd - within the header deadline, counted from
 *   the accept whatever the client trickles.  A complete head is checked
 *   (request line, HTTP version, Content-Length / Transfer-Encoding, sizes:
 *   http_head_check) and then handed to libmicrohttpd with
 *   MHD_add_connection; a bad one is answered here with an OpenAI-style JSON
 *   error, so libmicrohttpd's own HTML errors for heads (and its duplicated
 *   status line for a malformed Content-Length) are never reached.  Every
 *   answer carries "Connection: close" (server.c), so every request of the
 *   server passes the gate: libmicrohttpd reads follow-up heads of a
 *   kept-alive connection itself, out of reach of these checks.  A chunked
 *   request waits a little longer (list L_CHUNK): its body's framing is
 *   peeked at as well (http_chunked_scan) for up to GATE_CHUNK_WAIT_MS and
 *   GATE_CHUNK_PEEK bytes, a malformed one refused in JSON (libmicrohttpd
 *   would answer with HTML), then it is handed over, checked or not.
 *
 *   A connection over --max-conns or --max-conns-per-ip, or one arriving
 *   while the server drains, is answered at once (503 / 429 / 503, JSON,
 *   Retry-After) instead of reset.  Answers from the gate end with a
 *   lingering close: shutdown(SHUT_WR), then the client's bytes are read and
 *   dropped until its FIN or GATE_LINGER_MS, so unread request bytes never
 *   turn the close into a reset that would destroy the answer.  Only when
 *   the process is out of descriptors (EMFILE; a spare descriptor is kept for
 *   that) is a connection answered and closed at once.
 *
 *   Connections handed over stay counted until libmicrohttpd reports them
 *   closed (gate_conn_closed).  Their body deadline runs from the hand-over
 *   until server.c reports the body complete (gate_body_done); past it the
 *   gate shuts the socket down (libmicrohttpd then closes it).
 *
 * INVARIANTS
 *   Deadlines of each list are in list order (same timeout for all entries,
 *   appended in time order), so expiring is O(expired).  A descriptor is on
 *   at most one list.  An entry in state G_MHD is an open socket: its
 *   CLOSED notification (which takes mu) precedes libmicrohttpd's close().
 *
 * THREADS
 *   gate_conn_closed and gate_body_done are called from libmicrohttpd's
 *   threads; everything else from the gate thread or the server's owner.
 *   The table is guarded by gate.mu.
 */
#ifndef KITE_TOOLS_GATE_H
#define KITE_TOOLS_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct server;
struct MHD_Daemon;

typedef struct gate gate;

typedef struct gate_params {
    int32_t max_conns;         /* connections held at once (gate + libmicrohttpd) */
    int32_t max_conns_per_ip;  /* per client address; 0 = no limit */
    int32_t header_timeout_ms; /* the whole request head must arrive within this */
    int32_t body_timeout_ms;   /* the whole body must arrive within this after the head */
} gate_params;

typedef struct gate_stats {
    int64_t open;              /* connections held now (gate + libmicrohttpd) */
    int64_t pending;           /* of those, waiting for their request head in the gate */
    int64_t lingering;         /* answered by the gate, waiting for the client's FIN (not counted in open) */
    int64_t accepted;          /* accepted since start */
    int64_t rejected_limit;    /* answered 503: --max-conns */
    int64_t rejected_per_ip;   /* answered 429: --max-conns-per-ip */
    int64_t rejected_draining; /* answered 503 while draining */
    int64_t rejected_nofd;     /* answered and closed at once: out of descriptors */
    int64_t bad_heads;         /* answered 400/414/431/501/505 */
    int64_t header_timeouts;   /* answered 408: head not complete in time */
    int64_t body_timeouts;     /* shut down: body not complete in time */
} gate_stats;

/* Binds addr (port 0 = any), listens and starts the gate thread, which
 * hands complete heads to d (started with MHD_USE_NO_LISTEN_SOCKET |
 * MHD_USE_ITC).  Returns a kite_status with kite_last_error() set. */
int gate_start(struct server *s, struct MHD_Daemon *d, const struct sockaddr *addr, socklen_t addr_len,
               const gate_params *p, gate **out /* OUT */);
int32_t gate_port(const gate *g);
/* From now on new connections and heads still arriving get 503
 * (server_shutting_down); returns at once. */
void gate_drain(gate *g);
/* Joins the gate thread and closes the connections it still holds (not
 * those handed over) and the listening socket.  NULL is a no-op. */
void gate_stop(gate *g);
/* Frees g; after gate_stop and after libmicrohttpd has stopped. */
void gate_free(gate *g);

/* libmicrohttpd closed fd (its CLOSED notification). */
void gate_conn_closed(gate *g, int fd);
/* The request on fd has its whole body: its body deadline stops. */
void gate_body_done(gate *g, int fd);
void gate_get_stats(gate *g, gate_stats *out /* OUT */);

#endif
