/*
 * gate.c - listening socket, connection limits, header deadline and head
 * checks of `kite serve` in front of libmicrohttpd (design: gate.h).
 */
#define _GNU_SOURCE /* accept4 */
#include "gate.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timing.h"
#include "http/http_check.h"
#include "server_internal.h"

#define GATE_ACCEPT_BURST 64     /* accepts between two event rounds: the listener and the sockets both progress */
#define GATE_LINGER_MS 2000      /* lingering close: how long a client's FIN is waited for */
#define GATE_LINGER_BYTES (1 << 20) /* ... and how many of its bytes are read and dropped */
#define GATE_HEAD_CAP (SERVER_MAX_URI + SERVER_MAX_HEADERS + 1024) /* a head longer than this is refused */
#define GATE_EVENTS 256
/* A chunked body is read by libmicrohttpd, which answers a malformed one itself with HTML;
 * the gate peeks at up to GATE_CHUNK_PEEK bytes of it for up to GATE_CHUNK_WAIT_MS after the
 * head and refuses a malformed one in JSON.  Past either bound it hands the connection over
 * unchecked, so a large or slow upload is never held (docs/http.md, "Request heads"). */
#define GATE_CHUNK_PEEK (64 * 1024)
#define GATE_CHUNK_WAIT_MS 250

enum { G_FREE, G_HEAD, G_LINGER, G_MHD };
enum { L_HEAD, L_LINGER, L_BODY, L_CHUNK, L_N };

typedef struct gconn {
    uint8_t state;               /* G_* */
    uint8_t list;                /* L_* or L_N = on no list */
    int32_t prev, next;          /* list links (descriptors), -1 = none */
    int32_t ip;                  /* slot in the address table, -1 = not counted there */
    uint32_t scanned;            /* G_HEAD: bytes searched for the end of the head so far */
    uint32_t head_len;           /* G_HEAD on L_CHUNK: the head's length, its chunked body peeked at */
    uint32_t dropped;            /* G_LINGER: bytes read and dropped */
    double deadline;             /* seconds (time_now_s) */
    socklen_t alen;
    struct sockaddr_storage addr;
} gconn;

typedef struct ipslot {
    uint8_t key[16];             /* IPv6 address, IPv4 as v4-mapped */
    int32_t count;               /* connections counted (G_HEAD or G_MHD) */
    bool used;                   /* key set (count may be 0: a tombstone until the next rebuild) */
} ipslot;

struct gate {
    struct server *srv;
    struct MHD_Daemon *mhd;
    gate_params p;
    int lfd, ep, wake, spare;    /* listening socket, epoll, eventfd, spare descriptor for EMFILE */
    int32_t port;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    gconn *tab;                  /* [n_tab] by descriptor */
    int32_t n_tab;
    int32_t head[L_N], tail[L_N];
    ipslot *ips;                 /* open addressing, [n_ips] (power of two) */
    int32_t n_ips, n_ips_used;
    atomic_bool stop, draining;
    gate_stats st;               /* guarded by mu */
    char buf[GATE_HEAD_CAP + 1]; /* gate thread: peeked heads, dropped bytes */
    char *cbuf;                  /* [GATE_HEAD_CAP + GATE_CHUNK_PEEK] gate thread: a head and its chunked body */
};

/* ---- lists and the address table (mu held) ---- */

static void list_del(gate *g, int fd) {
    gconn *c = &g->tab[fd];
    if (c->list == L_N) return;
    int l = c->list;
    if (c->prev >= 0) g->tab[c->prev].next = c->next; else g->head[l] = c->next;
    if (c->next >= 0) g->tab[c->next].prev = c->prev; else g->tail[l] = c->prev;
    c->prev = c->next = -1;
    c->list = L_N;
}

static void list_add(gate *g, int fd, int l, double deadline) {
    gconn *c = &g->tab[fd];
    list_del(g, fd);
    c->deadline = deadline;
    c->list = (uint8_t)l;
    c->prev = g->tail[l];
    c->next = -1;
    if (g->tail[l] >= 0) g->tab[g->tail[l]].next = fd; else g->head[l] = fd;
    g->tail[l] = fd;
}

static void addr_key(const struct sockaddr_storage *a, uint8_t key[16]) {
    memset(key, 0, 16);
    if (a->ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr, 16);
    } else if (a->ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)(const void *)a)->sin_addr, 4);
    }
}

static uint32_t key_hash(const uint8_t key[16]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++) h = (h ^ key[i]) * 16777619u;
    return h;
}

/* The slot of key (created if absent); -1 if the table is full. */
static int32_t ip_slot(gate *g, const uint8_t key[16]) {
    if (g->n_ips_used * 4 >= g->n_ips * 3) {
        /* drop the tombstones: rehash the slots still counting */
        ipslot *old = malloc((size_t)g->n_ips * sizeof *old);
        if (old) {
            memcpy(old, g->ips, (size_t)g->n_ips * sizeof *old);
            memset(g->ips, 0, (size_t)g->n_ips * sizeof *g->ips);
            g->n_ips_used = 0;
            for (int32_t i = 0; i < g->n_ips; i++) {
                if (!old[i].used || old[i].count == 0) continue;
                uint32_t j = key_hash(old[i].key) & (uint32_t)(g->n_ips - 1);
                while (g->ips[j].used) j = (j + 1) & (uint32_t)(g->n_ips - 1);
                g->ips[j] = old[i];
                g->n_ips_used++;
            }
            /* descriptors point at slots by index: remap them */
            for (int32_t fd = 0; fd < g->n_tab; fd++) {
                gconn *c = &g->tab[fd];
                if (c->ip < 0) continue;
                uint32_t j = key_hash(old[c->ip].key) & (uint32_t)(g->n_ips - 1);
                while (memcmp(g->ips[j].key, old[c->ip].key, 16)) j = (j + 1) & (uint32_t)(g->n_ips - 1);
                c->ip = (int32_t)j;
            }
            free(old);
        }
    }
    uint32_t j = key_hash(key) & (uint32_t)(g->n_ips - 1);
    for (int32_t probes = 0; probes < g->n_ips; probes++, j = (j + 1) & (uint32_t)(g->n_ips - 1)) {
        if (g->ips[j].used && !memcmp(g->ips[j].key, key, 16)) return (int32_t)j;
        if (!g->ips[j].used) {
            g->ips[j].used = true;
            memcpy(g->ips[j].key, key, 16);
            g->ips[j].count = 0;
            g->n_ips_used++;
            return (int32_t)j;
        }
    }
    return -1;
}

/* Forgets fd (mu held): off its list, uncounted.  Does not close it. */
static void conn_forget(gate *g, int fd) {
    gconn *c = &g->tab[fd];
    list_del(g, fd);
    if (c->state == G_HEAD) g->st.pending--;
    if (c->state == G_HEAD || c->state == G_MHD) g->st.open--;
    if (c->state == G_LINGER) g->st.lingering--;
    if (c->ip >= 0) g->ips[c->ip].count--;
    c->ip = -1;
    c->state = G_FREE;
}

/* ---- answers ---- */

static const char *reason_phrase(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Writes a complete JSON error answer to fd (non-blocking: it is small and
 * the socket's send buffer is empty, so it fits).  retry_ms > 0 adds
 * Retry-After (seconds, rounded up) and Retry-After-Ms (OpenAI's header). */
static void send_error(int fd, int status, const char *code, const char *msg, int64_t retry_ms) {
    oai_error e;
    oai_error_set(&e, status, status == 503 || status == 429 ? "server_error" : "invalid_request_error", code, NULL,
                  "%s", msg);
    char *json = srv_json_utf8(oai_error_json(&e));
    char head[384];
    char retry[96] = "";
    if (retry_ms > 0)
        snprintf(retry, sizeof retry, "Retry-After: %lld\r\nRetry-After-Ms: %lld\r\n", (long long)((retry_ms + 999) / 1000),
                 (long long)retry_ms);
    const char *body = json ? json : "{\"error\":{\"message\":\"error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                      status, reason_phrase(status), strlen(body), retry);
    struct iovec iov[2] = {{head, (size_t)hn}, {(void *)body, strlen(body)}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    free(json);
}

/* Answers fd and closes it lingering (mu held; fd is in state G_HEAD or
 * new).  retry_ms as send_error. */
static void answer_and_linger(gate *g, int fd, int status, const char *code, const char *msg, int64_t retry_ms) {
    send_error(fd, status, code, msg, retry_ms);
    shutdown(fd, SHUT_WR);
    gconn *c = &g->tab[fd];
    /* a lingering socket holds a descriptor, but no client slot */
    if (c->state == G_HEAD) {
        g->st.pending--;
        g->st.open--;
    }
    if (c->ip >= 0) g->ips[c->ip].count--;
    c->ip = -1;
    c->state = G_LINGER;
    g->st.lingering++;
    c->dropped = 0;
    list_add(g, fd, L_LINGER, time_now_s() + GATE_LINGER_MS * 1e-3);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
    if (epoll_ctl(g->ep, EPOLL_CTL_MOD, fd, &ev) && epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev)) {
        conn_forget(g, fd);
        close(fd);
    }
}

static void close_conn(gate *g, int fd) {
    conn_forget(g, fd);
    epoll_ctl(g->ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
}

/* ---- the gate thread ---- */

static void hand_over(gate *g, int fd) {
    gconn *c = &g->tab[fd];
    g->st.pending--;
    c->state = G_MHD;
    list_add(g, fd, L_BODY, time_now_s() + g->p.body_timeout_ms * 1e-3);
    epoll_ctl(g->ep, EPOLL_CTL_DEL, fd, NULL);
    struct sockaddr_storage addr = c->addr;
    socklen_t alen = c->alen;
    /* MHD may call back into gate_conn_closed (which takes mu) */
    pthread_mutex_unlock(&g->mu);
    enum MHD_Result ok = MHD_add_connection(g->mhd, fd, (struct sockaddr *)&addr, alen);
    pthread_mutex_lock(&g->mu);
    /* on failure MHD has closed fd; only this thread accepts, so fd cannot
     * name a new connection of ours yet */
    if (ok != MHD_YES && g->tab[fd].state == G_MHD) conn_forget(g, fd);
}

/* A G_HEAD connection waiting on L_CHUNK: scans its chunked body so far.  expired: the wait is
 * over (hand it over unless malformed). */
static void on_chunk(gate *g, int fd, bool expired) {
    gconn *c = &g->tab[fd];
    const size_t cap = GATE_HEAD_CAP + GATE_CHUNK_PEEK;
    ssize_t n = recv(fd, g->cbuf, cap, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_conn(g, fd); /* gone before its body was complete */
        return;
    }
    size_t have = n > 0 ? (size_t)n : 0, used = 0;
    if (have < c->head_len) return; /* cannot happen: the head was peeked already */
    char msg[160];
    int r = http_chunked_scan(g->cbuf + c->head_len, have - c->head_len, &used, msg, sizeof msg);
    if (r < 0) {
        g->st.bad_heads++;
        answer_and_linger(g, fd, 400, "invalid_request", msg, 0);
        return;
    }
    if (r > 0 || expired || have >= cap) hand_over(g, fd);
}

/* A G_HEAD connection has new bytes (or closed). */
static void on_head(gate *g, int fd) {
    gconn *c = &g->tab[fd];
    if (c->head_len) {
        on_chunk(g, fd, false);
        return;
    }
    ssize_t n = recv(fd, g->buf, GATE_HEAD_CAP, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_conn(g, fd); /* closed before its head was complete: nobody to answer */
        return;
    }
    if (n < 0) return;
    size_t from = c->scanned > 2 ? c->scanned - 2 : 0;
    size_t end = http_head_end(g->buf + from, (size_t)n - from);
    if (!end) {
        c->scanned = (uint32_t)n;
        if ((size_t)n >= GATE_HEAD_CAP) {
            g->st.bad_heads++;
            answer_and_linger(g, fd, 431, "request_header_fields_too_large",
                              "The request head is larger than the limit (8 KiB URI, 32 KiB of headers).", 0);
        }
        return;
    }
    end += from;
    if (atomic_load(&g->draining)) {
        g->st.rejected_draining++;
        answer_and_linger(g, fd, 503, "server_shutting_down", "The server is shutting down.", 1000);
        return;
    }
    char msg[160];
    int status = http_head_check(g->buf, end, SERVER_MAX_URI, SERVER_MAX_HEADERS, msg, sizeof msg);
    if (status) {
        g->st.bad_heads++;
        static const struct { int status; const char *code; } codes[] = {
            {400, "invalid_request"}, {414, "uri_too_long"}, {431, "request_header_fields_too_large"},
            {501, "not_implemented"}, {505, "http_version_not_supported"}};
        const char *code = "invalid_request";
        for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++)
            if (codes[k].status == status) code = codes[k].code;
        answer_and_linger(g, fd, status, code, msg, 0);
        return;
    }
    if (g->cbuf && http_head_chunked(g->buf, end)) { /* its body's framing, before libmicrohttpd's */
        c->head_len = (uint32_t)end;
        list_add(g, fd, L_CHUNK, time_now_s() + GATE_CHUNK_WAIT_MS * 1e-3);
        on_chunk(g, fd, false);
        return;
    }
    hand_over(g, fd);
}

static void on_linger(gate *g, int fd) {
    gconn *c = &g->tab[fd];
    for (int k = 0; k < 16; k++) {
        ssize_t n = recv(fd, g->buf, sizeof g->buf, MSG_DONTWAIT);
        if (n > 0) {
            c->dropped += (uint32_t)n;
            if (c->dropped < GATE_LINGER_BYTES) continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            return;
        }
        close_conn(g, fd); /* FIN, error or enough dropped */
        return;
    }
}

/* Accepts what the listener has (at most GATE_ACCEPT_BURST). */
static void on_listen(gate *g) {
    for (int k = 0; k < GATE_ACCEPT_BURST; k++) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof addr;
        int fd = accept4(g->lfd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                /* out of descriptors: free the spare one, answer that
                 * connection and close it at once, so the backlog moves */
                if (g->spare >= 0) {
                    close(g->spare);
                    g->spare = -1;
                    fd = accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd >= 0) {
                        send_error(fd, 503, "server_overloaded", "The server is out of connections; try again later.",
                                   1000);
                        close(fd);
                        g->st.rejected_nofd++;
                    }
                    g->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
            }
            return; /* EAGAIN: drained */
        }
        g->st.accepted++;
        if (fd >= g->n_tab) { /* above the descriptor limit the table was sized for */
            send_error(fd, 503, "server_overloaded", "The server is out of connections; try again later.", 1000);
            close(fd);
            g->st.rejected_nofd++;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        gconn *c = &g->tab[fd];
        memset(c, 0, sizeof *c);
        c->prev = c->next = c->ip = -1;
        c->list = L_N;
        c->addr = addr;
        c->alen = alen;
        if (atomic_load(&g->draining)) {
            g->st.rejected_draining++;
            answer_and_linger(g, fd, 503, "server_shutting_down", "The server is shutting down.", 1000);
            continue;
        }
        if (g->st.open >= g->p.max_conns) {
            g->st.rejected_limit++;
            /* lingering needs a descriptor per socket: beyond as many
             * lingering sockets as the limit, answer and close at once */
            if (g->st.lingering >= (int64_t)g->p.max_conns) {
                send_error(fd, 503, "server_overloaded", "Too many connections; try again later.", srv_retry_ms(g->srv));
                close(fd);
            } else {
                answer_and_linger(g, fd, 503, "server_overloaded", "Too many connections; try again later.",
                                  srv_retry_ms(g->srv));
            }
            continue;
        }
        uint8_t key[16];
        addr_key(&addr, key);
        int32_t slot = ip_slot(g, key);
        if (slot >= 0 && g->p.max_conns_per_ip > 0 && g->ips[slot].count >= g->p.max_conns_per_ip) {
            g->st.rejected_per_ip++;
            answer_and_linger(g, fd, 429, "too_many_connections",
                              "Too many connections from your address; try again later.", srv_retry_ms(g->srv));
            continue;
        }
        c->ip = slot;
        if (slot >= 0) g->ips[slot].count++;
        c->state = G_HEAD;
        g->st.open++;
        g->st.pending++;
        list_add(g, fd, L_HEAD, time_now_s() + g->p.header_timeout_ms * 1e-3);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.fd = fd};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev)) {
            conn_forget(g, fd);
            close(fd);
            continue;
        }
        on_head(g, fd); /* the head may be there already */
    }
}

/* Expires the lists' heads; returns the ms until the next deadline (capped). */
static int expire(gate *g) {
    double now = time_now_s(), next = now + 1.0;
    int fd;
    while ((fd = g->head[L_HEAD]) >= 0 && g->tab[fd].deadline <= now) {
        /* its last bytes may be waiting in an event not taken yet (more
         * than GATE_EVENTS ready): look once more before refusing it */
        on_head(g, fd);
        if (g->head[L_HEAD] != fd) continue;
        g->st.header_timeouts++;
        answer_and_linger(g, fd, 408, "request_timeout", "The request head did not arrive in time.", 0);
    }
    while ((fd = g->head[L_CHUNK]) >= 0 && g->tab[fd].deadline <= now) {
        on_chunk(g, fd, true);
        if (g->head[L_CHUNK] == fd) hand_over(g, fd); /* still listed (cannot happen): never held */
    }
    while ((fd = g->head[L_LINGER]) >= 0 && g->tab[fd].deadline <= now) close_conn(g, fd);
    while ((fd = g->head[L_BODY]) >= 0 && g->tab[fd].deadline <= now) {
        /* libmicrohttpd's socket: shut it down (never closed here), it sees
         * the end and closes; the entry stays until its CLOSED notification */
        list_del(g, fd);
        shutdown(fd, SHUT_RDWR);
        g->st.body_timeouts++;
    }
    for (int l = 0; l < L_N; l++)
        if (g->head[l] >= 0 && g->tab[g->head[l]].deadline < next) next = g->tab[g->head[l]].deadline;
    int ms = (int)((next - now) * 1e3) + 1;
    return ms < 1 ? 1 : ms > 1000 ? 1000 : ms;
}

static void *gate_main(void *arg) {
    gate *g = arg;
    struct epoll_event evs[GATE_EVENTS];
    int timeout = 1000;
    while (!atomic_load(&g->stop)) {
        int n = epoll_wait(g->ep, evs, GATE_EVENTS, timeout);
        pthread_mutex_lock(&g->mu);
        bool listen_ready = false;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == g->wake) {
                uint64_t v;
                ssize_t r = read(g->wake, &v, sizeof v);
                (void)r;
                /* draining: answer the heads still arriving */
                if (atomic_load(&g->draining))
                    while (g->head[L_HEAD] >= 0) {
                        g->st.rejected_draining++;
                        answer_and_linger(g, g->head[L_HEAD], 503, "server_shutting_down",
                                          "The server is shutting down.", 1000);
                    }
                continue;
            }
            if (fd == g->lfd) {
                listen_ready = true;
                continue;
            }
            if (fd < 0 || fd >= g->n_tab) continue;
            if (g->tab[fd].state == G_HEAD) on_head(g, fd);
            else if (g->tab[fd].state == G_LINGER) on_linger(g, fd);
        }
        /* sockets first, then the listener: neither starves the other */
        if (listen_ready) on_listen(g);
        timeout = expire(g);
        pthread_mutex_unlock(&g->mu);
    }
    return NULL;
}

/* ---- life cycle ---- */

int gate_start(struct server *s, struct MHD_Daemon *d, const struct sockaddr *addr, socklen_t addr_len,
               const gate_params *p, gate **out) {
    gate *g = calloc(1, sizeof *g);
    if (!g) return err_set(KITE_E_NOMEM, "out of memory");
    g->srv = s;
    g->mhd = d;
    g->p = *p;
    g->lfd = g->ep = g->wake = g->spare = -1;
    atomic_init(&g->stop, false);
    atomic_init(&g->draining, false);
    pthread_mutex_init(&g->mu, NULL);
    for (int l = 0; l < L_N; l++) g->head[l] = g->tail[l] = -1;
    int st;
    struct rlimit rl;
    g->n_tab = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 20)
                   ? (int32_t)rl.rlim_cur : (1 << 20);
    g->cbuf = malloc(GATE_HEAD_CAP + GATE_CHUNK_PEEK);
    g->tab = calloc((size_t)g->n_tab, sizeof *g->tab);
    g->n_ips = 64;
    while (g->n_ips < 4 * p->max_conns) g->n_ips *= 2;
    g->ips = calloc((size_t)g->n_ips, sizeof *g->ips);
    if (!g->tab || !g->ips || !g->cbuf) {
        st = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < g->n_tab; i++) {
        g->tab[i].prev = g->tab[i].next = g->tab[i].ip = -1;
        g->tab[i].list = L_N;
    }
    g->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        (addr->sa_family == AF_INET6 && setsockopt(g->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one)) ||
        bind(g->lfd, addr, addr_len) || listen(g->lfd, 4096)) {
        st = err_set(KITE_E_IO, "%s", strerror(errno));
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(g->lfd, (struct sockaddr *)&bound, &bl) == 0)
        g->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)(void *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)(void *)&bound)->sin_port);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    g->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct epoll_event el = {.events = EPOLLIN, .data.fd = g->lfd}, ew = {.events = EPOLLIN, .data.fd = g->wake};
    if (g->ep < 0 || g->wake < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &el) ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake, &ew)) {
        st = err_set(KITE_E_IO, "gate: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&g->thread, NULL, gate_main, g)) {
        st = err_set(KITE_E_IO, "gate: cannot start its thread");
        goto fail;
    }
    g->thread_started = true;
    *out = g;
    return KITE_OK;
fail:
    gate_stop(g);
    gate_free(g);
    return st;
}

int32_t gate_port(const gate *g) { return g->port; }

static void wake(gate *g) {
    uint64_t one = 1;
    ssize_t w = write(g->wake, &one, sizeof one);
    (void)w;
}

void gate_drain(gate *g) {
    if (!g) return;
    atomic_store(&g->draining, true);
    wake(g);
}

void gate_stop(gate *g) {
    if (!g) return;
    if (g->thread_started) {
        atomic_store(&g->stop, true);
        wake(g);
        pthread_join(g->thread, NULL);
        g->thread_started = false;
    }
    pthread_mutex_lock(&g->mu);
    for (int l = 0; l < L_BODY; l++)
        while (g->head[l] >= 0) close_conn(g, g->head[l]);
    pthread_mutex_unlock(&g->mu);
    if (g->lfd >= 0) close(g->lfd);
    if (g->ep >= 0) close(g->ep);
    if (g->wake >= 0) close(g->wake);
    if (g->spare >= 0) close(g->spare);
    g->lfd = g->ep = g->wake = g->spare = -1;
}

void gate_free(gate *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    free(g->tab);
    free(g->ips);
    free(g->cbuf);
    free(g);
}

void gate_conn_closed(gate *g, int fd) {
    if (!g || fd < 0 || fd >= g->n_tab) return;
    pthread_mutex_lock(&g->mu);
    if (g->tab[fd].state == G_MHD) conn_forget(g, fd);
    pthread_mutex_unlock(&g->mu);
}

void gate_body_done(gate *g, int fd) {
    if (!g || fd < 0 || fd >= g->n_tab) return;
    pthread_mutex_lock(&g->mu);
    if (g->tab[fd].state == G_MHD && g->tab[fd].list == L_BODY) list_del(g, fd);
    pthread_mutex_unlock(&g->mu);
}

void gate_get_stats(gate *g, gate_stats *out) {
    memset(out, 0, sizeof *out);
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    pthread_mutex_unlock(&g->mu);
}
