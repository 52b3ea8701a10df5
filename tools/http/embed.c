/*
 * embed.c - POST /v1/embeddings and POST /embedding (embed.h).
 *
 * DESIGN
 *   The body is parsed (embed_parse.c) and its texts tokenized - with BOS,
 *   special-token text as the special tokens, like kite embed - on the
 *   connection thread, outside any lock.  Then the request takes the
 *   srv_embed mutex (polling, so that a client that leaves, the deadline
 *   --timeout or the drain deadline end the wait: 503 with Retry-After),
 *   creates the embedding context on first use (n_ctx positions, --ctx-size,
 *   with the engine's thread count; an f32 KV cache of its own,
 *   kite_ctx_kv_bytes), embeds its inputs one after the other (kite_ctx_embed
 *   per input, the same bits as one kite_ctx_embed_batch call; the same
 *   checks between inputs) and releases the lock before writing the answer.
 *   Embeddings thus share the CPU with the engine but none of its state.
 *
 *   An input longer than n_ctx tokens is a 400 context_length_exceeded; an
 *   unknown "model" a 404 model_not_found.  Floats are written with %.9g,
 *   which reads back as the same float32; base64 is the little-endian
 *   float32 bytes (what the openai clients decode).
 *
 * THREADS
 *   Connection threads; the context is used under srv_embed.mu only.
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

struct srv_embed {
    pthread_mutex_t mu;
    kite_ctx *ctx;  /* made by the first request (NULL before, or after a failed creation) */
};

int srv_embed_new(srv_embed **out) {
    srv_embed *e = calloc(1, sizeof *e);
    if (!e) return err_set(KITE_E_NOMEM, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    *out = e;
    return KITE_OK;
}

void srv_embed_free(srv_embed *e) {
    if (!e) return;
    kite_ctx_free(e->ctx);
    pthread_mutex_destroy(&e->mu);
    free(e);
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

/* Takes the embedding lock, polling every SERVER_POLL_MS: 0 once held, or
 * 503 (*err set) when the deadline or the drain deadline passes first, or -1
 * when the client left (nothing to answer). */
static int lock_until(server *s, double deadline, struct MHD_Connection *c, oai_error *err) {
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SERVER_POLL_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        if (pthread_mutex_timedlock(&s->embed->mu, &ts) == 0) return 0;
        if (srv_client_state(c) == SRV_CLIENT_GONE) return -1;
        if (atomic_load(&s->drain_abort)) {
            oai_error_set(err, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down.");
            return 503;
        }
        if (time_now_s() > deadline) {
            oai_error_set(err, 503, "server_error", "timeout", NULL,
                          "The request reached its deadline (%d s) waiting for the embedding context: the server is "
                          "busy.", (int)s->p.timeout_s);
            return 503;
        }
    }
}

enum MHD_Result embed_handle(server *s, struct MHD_Connection *c, const char *body, size_t len, bool oai, int *status) {
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

    int lk = lock_until(s, deadline, c, &err);
    if (lk < 0) goto gone;
    if (lk > 0) goto fail;
    int rc = KITE_OK;
    if (!s->embed->ctx) {
        kite_ctx_params cp = kite_ctx_default_params();
        cp.n_ctx = s->n_ctx;
        cp.n_threads = s->p.engine.n_threads;
        rc = kite_ctx_new(s->model, &cp, &s->embed->ctx);
    }
    if (rc != KITE_OK) oai_error_set(&err, 500, "server_error", NULL, NULL, "Embedding failed: %s", kite_last_error());
    /* one input at a time (the same bits as one batch call), checking the
     * client, the deadline and the drain between inputs */
    bool left = false;
    for (int32_t i = 0, off = 0; rc == KITE_OK && i < r.n_input; off += n_tok[i], i++) {
        if (i > 0 && srv_client_state(c) == SRV_CLIENT_GONE) {
            left = true;
            break;
        }
        if (i > 0 && (time_now_s() > deadline || atomic_load(&s->drain_abort))) {
            const bool drain = atomic_load(&s->drain_abort);
            oai_error_set(&err, 503, "server_error", drain ? "server_shutting_down" : "timeout", NULL,
                          drain ? "The server is shutting down." :
                                  "The request reached its deadline (%d s) after %d of its %d inputs.",
                          (int)s->p.timeout_s, (int)i, (int)r.n_input);
            rc = KITE_E_STATE;
            break;
        }
        rc = kite_ctx_embed(s->embed->ctx, all + off, n_tok[i], NULL, vec + (size_t)i * (size_t)E);
        if (rc != KITE_OK) oai_error_set(&err, 500, "server_error", NULL, NULL, "Embedding failed: %s", kite_last_error());
    }
    pthread_mutex_unlock(&s->embed->mu);
    if (left) goto gone;
    if (rc != KITE_OK) goto fail;
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
