/*
 * embed.c - POST /v1/embeddings and POST /embedding (embed.h).
 *
 * DESIGN
 *   The body is parsed (embed_parse.c) and its texts tokenized - with BOS,
 *   special-token text as the special tokens, like kite embed - on the
 *   connection thread.  Then each input goes to the serving engine as an
 *   embedding sequence (engine_req.embed: prefilled in the engine's batches
 *   beside generation, no classifier, pooled there; the vector arrives in
 *   its DONE event, on the engine thread, and is copied into the answer's
 *   array).  At most n_parallel inputs of a request are in the engine at
 *   once: the next is submitted as one finishes, so a request of 2048
 *   inputs does not queue all of them ahead of the requests that come after
 *   it (the engine's queue is fair per client, FIFO within one: a client's
 *   inputs queued at once would all go before its own later requests).
 *   The request holds one admission place (--parallel + --queue) from its
 *   arrival to its answer, as a completion does (embed_handle).  The connection thread waits in
 *   SERVER_POLL_MS slices and checks the client, the deadline --timeout and
 *   the drain deadline (503 with Retry-After); whatever ends the wait, the
 *   inputs still in the engine are cancelled before the job is freed (no
 *   callback after engine_cancel).  The engine's rows of a sequence do not
 *   depend on the batch they share, so an input's vector equals kite
 *   embed's (kite_ctx_embed) bit for bit, alone or in a batch.
 *
 *   An input longer than n_ctx tokens is a 400 context_length_exceeded; an
 *   unknown "model" a 404 model_not_found.  Floats are written with %.9g,
 *   which reads back as the same float32; base64 is the little-endian
 *   float32 bytes (what the openai clients decode).
 *
 * THREADS
 *   Connection threads (any number at once); the callback on the engine
 *   thread writes only its input's row of vec and the job's counters, under
 *   emb_job.mu.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/textbuf.h"
#include "core/timing.h"
#include "embed.h"
#include "http/http_check.h"

/* One request's inputs in the engine. */
typedef struct emb_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    float *vec;            /* [n_input][E] the answers (row i written by input i's callback) */
    int32_t E;
    int32_t n_done;        /* inputs whose vector arrived (mu) */
    bool failed;           /* an input ended without a vector (mu) */
    char errmsg[200];      /* (mu) */
} emb_job;

typedef struct emb_input {
    emb_job *job;
    int32_t index;
    uint64_t id;           /* engine id; 0 = not submitted */
} emb_input;

/* Engine thread: an input's end. */
static void on_embed(void *user, const engine_event *ev) {
    emb_input *in = user;
    emb_job *j = in->job;
    if (ev->kind == ENGINE_EV_TEXT) return; /* an embedding streams nothing */
    pthread_mutex_lock(&j->mu);
    if (ev->kind == ENGINE_EV_DONE && ev->embedding && ev->n_embd == j->E) {
        memcpy(j->vec + (size_t)in->index * (size_t)j->E, ev->embedding, sizeof *j->vec * (size_t)j->E);
        j->n_done++;
    } else if (!j->failed) {
        j->failed = true;
        snprintf(j->errmsg, sizeof j->errmsg, "%s",
                 ev->message ? ev->message : ev->finish_reason ? ev->finish_reason : "no vector");
    }
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void eb_floats(textbuf *b, const float *v, int32_t n) {
    textbuf_putn(b, "[", 1);
    char tmp[32];
    for (int32_t i = 0; i < n; i++) {
        const int k = snprintf(tmp, sizeof tmp, i ? ",%.9g" : "%.9g", (double)v[i]); /* at most 16 bytes */
        textbuf_putn(b, tmp, k > 0 ? (size_t)k : 0);
    }
    textbuf_putn(b, "]", 1);
}

/* A JSON string (the model name) via cJSON's escaping. */
static void eb_jstr(textbuf *b, const char *s) {
    cJSON *j = cJSON_CreateString(s);
    char *t = j ? cJSON_PrintUnformatted(j) : NULL;
    if (t) textbuf_putn(b, t, strlen(t));
    else b->oom = true;
    free(t);
    cJSON_Delete(j);
}

/* The answer: OpenAI's list object, or llama-server's array of {index, embedding: [[...]]}. */
static char *answer(const server *s, const embed_request *r, const float *vec, int32_t E, int64_t n_tokens) {
    textbuf b = {0};
    if (r->oai) textbuf_putn(&b, "{\"object\":\"list\",\"data\":[", 25);
    else textbuf_putn(&b, "[", 1);
    for (int32_t i = 0; i < r->n_input && !b.oom; i++) {
        const float *v = vec + (size_t)i * (size_t)E;
        if (i) textbuf_putn(&b, ",", 1);
        if (r->oai) {
            textbuf_printf(&b, "{\"object\":\"embedding\",\"index\":%d,\"embedding\":", (int)i);
            if (r->base64) {
                char *t = embed_base64_f32(v, (size_t)E);
                if (!t) b.oom = true;
                else {
                    textbuf_putn(&b, "\"", 1);
                    textbuf_putn(&b, t, strlen(t));
                    textbuf_putn(&b, "\"", 1);
                }
                free(t);
            } else {
                eb_floats(&b, v, E);
            }
            textbuf_putn(&b, "}", 1);
        } else {
            textbuf_printf(&b, "{\"index\":%d,\"embedding\":[", (int)i);
            eb_floats(&b, v, E);
            textbuf_putn(&b, "]}", 2);
        }
    }
    if (r->oai) {
        textbuf_putn(&b, "],\"model\":", 10);
        eb_jstr(&b, s->model_id); /* the served name, as the other endpoints answer */
        textbuf_printf(&b, ",\"usage\":{\"prompt_tokens\":%lld,", (long long)n_tokens);
        textbuf_printf(&b, "\"total_tokens\":%lld}}", (long long)n_tokens);
    } else {
        textbuf_putn(&b, "]", 1);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Waits (j->mu held) up to SERVER_POLL_MS for an input's end. */
static void wait_slice(emb_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += SERVER_POLL_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* Runs the n inputs (tokens in all, counts in n_tok) through the engine into
 * vec: 0 when every vector arrived, -1 when the client left, else an HTTP
 * status with *err set (503 deadline or drain, 400 an input the engine
 * refuses, 500). */
static int run_inputs(server *s, struct MHD_Connection *c, const kite_token *all, const int32_t *n_tok, int32_t n,
                      float *vec, int32_t E, double deadline, uint64_t client, oai_error *err) {
    emb_job j = {.vec = vec, .E = E};
    emb_input *in = calloc((size_t)n, sizeof *in);
    if (!in) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
        return 500;
    }
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    const int32_t window = s->n_parallel > 0 ? s->n_parallel : 1;
    int rc = 0;
    size_t off = 0;
    int32_t next = 0;
    pthread_mutex_lock(&j.mu);
    while (j.n_done < n && !j.failed) {
        while (next < n && next - j.n_done < window) { /* keep `window` inputs in the engine */
            pthread_mutex_unlock(&j.mu);
            in[next] = (emb_input){.job = &j, .index = next};
            engine_req er = {.prompt = all + off, .n_prompt = n_tok[next], .embed = true,
                             .embed_params = kite_embed_default_params(), .client = client};
            int st = engine_submit(s->eng, &er, on_embed, &in[next], &in[next].id);
            pthread_mutex_lock(&j.mu);
            if (st != KITE_OK) {
                if (st == KITE_E_RANGE)
                    oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                                  "Input %d: %s", (int)next, kite_last_error());
                else
                    oai_error_set(err, 500, "server_error", NULL, NULL, "Embedding failed: %s", kite_last_error());
                rc = err->status;
                goto out;
            }
            off += (size_t)n_tok[next];
            next++;
        }
        wait_slice(&j);
        if (j.n_done == n || j.failed) break;
        if (srv_client_state(c) == SRV_CLIENT_GONE) {
            rc = -1;
            break;
        }
        if (atomic_load(&s->drain_abort) || time_now_s() > deadline) {
            const bool drain = atomic_load(&s->drain_abort);
            oai_error_set(err, 503, "server_error", drain ? "server_shutting_down" : "timeout", NULL,
                          drain ? "The server is shutting down." :
                                  "The request reached its deadline (%d s) after %d of its %d inputs.",
                          (int)s->p.timeout_s, (int)j.n_done, (int)n);
            rc = 503;
            break;
        }
    }
    if (rc == 0 && j.failed) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "Embedding failed: %s", j.errmsg);
        rc = 500;
    }
out:
    pthread_mutex_unlock(&j.mu);
    /* no callback after engine_cancel: then the job may go (finished ids are ignored) */
    for (int32_t i = 0; i < next; i++)
        if (in[i].id) engine_cancel(s->eng, in[i].id);
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    free(in);
    return rc;
}

static enum MHD_Result embed_admitted(server *s, struct MHD_Connection *c, const char *body, size_t len, bool oai,
                                      uint64_t client, int *status) {
    const double deadline = time_now_s() + s->p.timeout_s;
    oai_error err;
    embed_request r;
    kite_model_info info;
    kite_model_get_info(s->model, &info);
    const int32_t E = info.n_embd;
    kite_token *all = NULL;
    int32_t *n_tok = NULL;
    float *vec = NULL;
    char *json = NULL;
    if (!embed_parse(body, len, oai, info.n_vocab, E, &r, &err)) goto fail;
    if (!srv_model_check(s, r.model, &err)) goto fail; /* the served name (--alias) or the file's */
    const char *key = oai ? "input" : "content";
    /* texts to tokens; every input into one array, as kite_ctx_embed_batch takes them */
    if (!(n_tok = calloc((size_t)r.n_input, sizeof *n_tok))) goto oom;
    int64_t total = 0;
    for (int32_t i = 0; i < r.n_input; i++) {
        if (r.text[i] && (int64_t)strlen(r.text[i]) > s->max_prompt_bytes) { /* cannot fit: not tokenized */
            oai_error_set(&err, 400, "invalid_request_error", "context_length_exceeded", key,
                          "Input %d is %zu bytes, more than this server's context of %d tokens (--ctx-size) can hold.",
                          (int)i, strlen(r.text[i]), (int)s->n_ctx);
            goto fail;
        }
        if (r.text[i]) {
            kite_token *t = NULL;
            int32_t n = 0;
            int st = srv_tokenize_bounded(s, r.text[i], strlen(r.text[i]), true, true, deadline, &t, &n);
            if (st == KITE_E_NOMEM) goto oom;
            if (st != KITE_OK) {
                oai_error_set(&err, st == KITE_E_STATE ? 503 : 400, st == KITE_E_STATE ? "server_error" : "invalid_request_error",
                              st == KITE_E_STATE ? "tokenizer_busy" : "invalid_value", st == KITE_E_STATE ? NULL : key,
                              "Could not tokenize input %d: %s", (int)i, kite_last_error());
                goto fail;
            }
            free(r.ids[i]);
            r.ids[i] = t;
            r.n_ids[i] = n;
        }
        if (r.n_ids[i] > s->n_ctx) {
            oai_error_set(&err, 400, "invalid_request_error", "context_length_exceeded", key,
                          "Input %d has %d tokens; this server's context holds %d (--ctx-size).", (int)i,
                          (int)r.n_ids[i], (int)s->n_ctx);
            goto fail;
        }
        n_tok[i] = r.n_ids[i];
        total += r.n_ids[i];
    }
    if (!(all = malloc(sizeof *all * (size_t)(total ? total : 1)))) goto oom;
    for (int32_t i = 0, off = 0; i < r.n_input; off += n_tok[i], i++)
        memcpy(all + off, r.ids[i], sizeof *all * (size_t)n_tok[i]);
    if (!(vec = malloc(sizeof *vec * (size_t)r.n_input * (size_t)E))) goto oom;

    int rc = run_inputs(s, c, all, n_tok, r.n_input, vec, E, deadline, client, &err);
    if (rc < 0) goto gone;
    if (rc > 0) goto fail;
    for (size_t i = 0; i < (size_t)r.n_input * (size_t)E; i++)
        if (!isfinite(vec[i])) {
            oai_error_set(&err, 500, "server_error", NULL, NULL, "The model produced a non-finite embedding value.");
            goto fail;
        }
    if (!(json = answer(s, &r, vec, E, total))) goto oom;
    free(vec);
    free(all);
    free(n_tok);
    embed_request_free(&r);
    *status = 200;
    return srv_reply_json(s, c, 200, json);
gone: /* the client left: no answer */
    free(vec);
    free(all);
    free(n_tok);
    embed_request_free(&r);
    *status = 499;
    return MHD_NO;
oom:
    oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory.");
fail:
    free(vec);
    free(all);
    free(n_tok);
    embed_request_free(&r);
    *status = err.status;
    return err.status == 503 ? srv_reply_error_retry(s, c, &err, srv_retry_ms(s)) : srv_reply_error(s, c, &err);
}

/* Admission (issue 23): an embedding request holds one of the gen_capacity
 * places (--parallel + --queue) that generation requests take, from its
 * parse to its answer, so a flood of large batches meets the same 503 with
 * Retry-After instead of queueing without bound. */
enum MHD_Result embed_handle(server *s, struct MHD_Connection *c, const char *body, size_t len, bool oai, int *status) {
    oai_error err;
    if (atomic_load(&s->draining)) {
        atomic_fetch_add(&s->rejected[REJ_DRAINING], 1);
        oai_error_set(&err, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down.");
        *status = 503;
        return srv_reply_error_retry(s, c, &err, srv_retry_ms(s));
    }
    if (atomic_fetch_add(&s->gen_inflight, 1) >= s->gen_capacity) {
        const int64_t retry = srv_retry_ms(s);
        atomic_fetch_sub(&s->gen_inflight, 1);
        atomic_fetch_add(&s->rejected[REJ_QUEUE_FULL], 1);
        oai_error_set(&err, 503, "server_error", "server_overloaded", NULL,
                      "The server is busy: all %d slots and %d queue places are taken; retry later.",
                      (int)s->n_parallel, (int)(s->gen_capacity - s->n_parallel));
        *status = 503;
        return srv_reply_error_retry(s, c, &err, retry);
    }
    enum MHD_Result ret = embed_admitted(s, c, body, len, oai, srv_client_key(c), status);
    atomic_fetch_sub(&s->gen_inflight, 1);
    return ret;
}
