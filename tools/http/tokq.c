/*
 * tokq.c - the tokenizer thread of `kite serve` (issue 23 item 6).
 *
 * DESIGN
 *   Texts longer than SERVER_TOK_INLINE bytes are tokenized here, one at a
 *   time, on a thread whose nice value is raised (+10), instead of on their
 *   connection threads: eight 100 KB prompts then cost the engine thread
 *   and short prompts (tokenized inline) little, rather than eight cores of
 *   competition.  Each text is bounded in bytes before it gets here
 *   (prompt_bytes_bound in server.c), so each job is bounded in time; the
 *   queue is bounded (SERVER_TOK_QUEUE) and a job still queued at its
 *   request's deadline is withdrawn, so the wait is bounded too.
 *
 * THREADS / OWNERSHIP
 *   A job lives on its caller's stack; the caller waits for it to finish (a
 *   running job is never abandoned, its text is the caller's).  The queue
 *   and job states are guarded by tok_pool.mu.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timing.h"
#include "server_internal.h"

typedef struct tok_job {
    const char *text;
    size_t len;
    bool add_bos, parse_special;
    int state;                   /* 0 queued, 1 running, 2 done */
    int st;
    kite_token *toks;
    int32_t n;
    char err[256];
    struct tok_job *next;
} tok_job;

struct tok_pool {
    server *srv;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    tok_job *head, *tail;
    int32_t n_queued;
    bool stop;
};

static void *tok_main(void *arg) {
    tok_pool *p = arg;
    /* lower priority than the engine and the connection threads (Linux:
     * per-thread nice); failing is harmless */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10)) errno = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        tok_job *j = p->head;
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        p->n_queued--;
        j->state = 1;
        pthread_mutex_unlock(&p->mu);
        j->st = srv_tokenize(p->srv, j->text, j->len, j->add_bos, j->parse_special, &j->toks, &j->n);
        if (j->st != KITE_OK) snprintf(j->err, sizeof j->err, "%s", kite_last_error());
        pthread_mutex_lock(&p->mu);
        j->state = 2;
        pthread_cond_broadcast(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tok_pool_new(server *s, tok_pool **out) {
    tok_pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(KITE_E_NOMEM, "out of memory");
    p->srv = s;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (pthread_create(&p->thread, NULL, tok_main, p)) {
        pthread_cond_destroy(&p->cv_done);
        pthread_cond_destroy(&p->cv_work);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return err_set(KITE_E_IO, "cannot start the tokenizer thread");
    }
    *out = p;
    return KITE_OK;
}

/* Callers are gone (connection threads joined) when this runs. */
void tok_pool_free(tok_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_work);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int srv_tokenize_bounded(server *s, const char *text, size_t len, bool add_bos, bool parse_special, double deadline,
                         kite_token **out, int32_t *n_out) {
    tok_pool *p = s->tok;
    if (len <= SERVER_TOK_INLINE || !p) return srv_tokenize(s, text, len, add_bos, parse_special, out, n_out);
    tok_job j = {.text = text, .len = len, .add_bos = add_bos, .parse_special = parse_special};
    pthread_mutex_lock(&p->mu);
    if (p->n_queued >= SERVER_TOK_QUEUE || p->stop) {
        pthread_mutex_unlock(&p->mu);
        return err_set(KITE_E_STATE, "the tokenizer queue is full (%d large prompts waiting)", SERVER_TOK_QUEUE);
    }
    if (p->tail) p->tail->next = &j; else p->head = &j;
    p->tail = &j;
    p->n_queued++;
    pthread_cond_signal(&p->cv_work);
    while (j.state != 2) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SERVER_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->cv_done, &p->mu, &ts);
        if (j.state == 0 && ((deadline > 0 && time_now_s() > deadline) || atomic_load(&s->drain_abort))) {
            /* withdraw it: still queued, so the thread never saw it */
            tok_job **pp = &p->head, *prev = NULL;
            while (*pp && *pp != &j) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            if (*pp) {
                *pp = j.next;
                if (p->tail == &j) p->tail = prev;
                p->n_queued--;
            }
            pthread_mutex_unlock(&p->mu);
            return err_set(KITE_E_STATE, "the request's deadline passed while its prompt waited for the tokenizer");
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (j.st != KITE_OK) return err_set(j.st, "%s", j.err);
    *out = j.toks;
    *n_out = j.n;
    return KITE_OK;
}
