/*
 * gen.c - completion and chat-completion requests of `kite serve`.
 *
 * DESIGN
 *   gen_handle parses the body (oai.c), builds the prompt tokens (chat
 *   template for chat), and submits one engine request per choice ("n";
 *   choice i samples with seed_i = choice_seed(seed, i), choice 0 with the
 *   seed itself, so n = 1 and choice 0 of n > 1 agree; the prompt's KV blocks
 *   are shared through the prefix cache once computed) whose callback (on
 *   the engine thread) appends new text and per-token logprobs to that
 *   choice's queue and signals the request's condvar.  The connection thread then either
 *     - waits for the end and answers one JSON object (non-streaming), or
 *     - answers at once with a callback response (SSE) whose reader takes
 *       everything queued so far and turns it into one chunk, so a slow
 *       client gets fewer, larger chunks instead of holding up the engine.
 *   A chat request with tools streams its calls as they are decoded: the
 *   connection thread keeps each choice's whole text and feeds it to the
 *   choice's tool_stream (tool_calls.h), which says what is content, when a
 *   call begins and which bytes are its arguments (sse_tools).
 *   Both wait in SERVER_POLL_MS slices and check that the client is still
 *   connected; if it is not (or a write fails), the request is cancelled
 *   when its last reference goes (gen_req_release), freeing its KV blocks.
 *   A FIN from the client is not a disconnect by itself: clients that
 *   shutdown(SHUT_WR) after the request still read the answer.  After a FIN
 *   a stream sends its keep-alive comment every SERVER_PROBE_MS, and a
 *   non-streaming request turns into a 200 whose body is white space every
 *   SERVER_PROBE_MS and then the JSON (json_read); a peer that really closed
 *   answers such a write with RST, which srv_client_state reports as gone.
 *   A stream with nothing to send for half the idle timeout (queued behind
 *   others, a long prefill) sends an SSE comment line so that it is not
 *   dropped as idle; clients ignore comments.
 *   A chat request with "sot": true is answered by Skeleton-of-Thought
 *   instead (sot_answer: sot_run blocks the connection thread while the
 *   engine decodes); its answer is stored as a finished output, so it goes
 *   out through the same two paths (streaming: one content chunk).
 *
 * OWNERSHIP
 *   A gen_req has two references while streaming (handler/connection and
 *   the MHD response) and one otherwise.  The engine never holds one: after
 *   DONE/ERROR or engine_cancel it no longer calls back, so the last
 *   release cancels if the request is unfinished and then frees.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timing.h"
#include "http/tool_calls.h"
#include "server_internal.h"
#include "sot/sot.h"

/* One choice of a request: its engine sequence and output queue. */
typedef struct gen_choice {
    struct gen_req *g;
    int32_t index;
    uint64_t eng_id;               /* 0 = not submitted */
    /* queue, guarded by g->mu */
    char *text;                    /* pending output text (streaming: since the last chunk) */
    size_t len, cap;
    kite_logprobs *lp;             /* pending per-token logprobs (request with logprobs) */
    size_t n_lp, cap_lp;
    bool done;                     /* DONE or ERROR received, or ended at the deadline */
    char finish[16];               /* finish_reason of DONE */
    int32_t n_gen;                 /* generated tokens */
    /* SSE output state (connection thread only) */
    bool finish_sent;
    int64_t text_offset;           /* completions logprobs: bytes of this choice's tokens so far */
    tool_stream ts;                /* a tools request: the calls parsed from the text so far */
    char *tacc;                    /* a tools request: all the text so far (ts reads it again) */
    size_t tlen, tcap;
} gen_choice;

struct gen_req {
    server *srv;
    struct MHD_Connection *conn;
    oai_request req;
    char id[48];                   /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;               /* unix seconds */
    atomic_int refs;
    gen_choice ch[SERVER_MAX_N];
    int32_t n_choices;             /* req.n, set before the first submit */

    /* queue, guarded by mu (engine callback -> connection thread) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending;                /* text bytes + logprob entries queued in all choices */
    int32_t n_done;                /* choices done */
    int32_t n_finish_sent;         /* SSE: choices whose finish chunk went out (connection thread) */
    bool done;                     /* every choice done, or one failed */
    bool failed;                   /* ERROR, or out of memory in the callback */
    char errmsg[256];
    int32_t n_prompt, n_gen;       /* usage (n_gen: all choices) */
    bool unavailable;              /* failed with 503 (timeout in the queue, drain): err_code says which */
    const char *err_code;
    double t_first, t_last, t_done; /* first / latest token, end (time_now_s; 0 = not yet) */

    /* deadlines and accounting (connection thread) */
    double t_arrive, t_submit;     /* gen_handle's start; engine_submit */
    double deadline;               /* time_now_s; --timeout and t_max_predict_ms */
    bool counted;                  /* holds one of srv.gen_inflight */

    /* SSE output state (connection thread only) */
    char *out;                     /* formatted bytes not yet handed to MHD */
    size_t out_len, out_pos, out_cap;
    bool ended;                    /* final chunks formatted */
    bool client_gone;
};

void gen_req_release(gen_req *g) {
    if (!g) return;
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    pthread_mutex_lock(&g->mu);
    bool finished = g->done;
    pthread_mutex_unlock(&g->mu);
    server *srv = g->srv;
    bool cancelled = false;
    for (int32_t i = 0; i < g->n_choices; i++) {
        pthread_mutex_lock(&g->mu);
        bool ch_done = g->ch[i].done;
        pthread_mutex_unlock(&g->mu);
        if (g->ch[i].eng_id && !ch_done) {
            engine_cancel(srv->eng, g->ch[i].eng_id);
            cancelled = true;
        }
    }
    if (cancelled && !finished) atomic_fetch_add(&srv->http_cancelled, 1);
    if (g->t_done > 0 && g->t_submit > 0) {
        double e2e = g->t_done - g->t_arrive;
        srv_hist_observe(&srv->h_e2e, e2e);
        /* Retry-After's latency estimate: a moving average (1/8) */
        int64_t x = (int64_t)(e2e * 1e6), old = atomic_load(&srv->e2e_ema_us);
        atomic_store(&srv->e2e_ema_us, old ? old + (x - old) / 8 : x);
    }
    if (g->counted) atomic_fetch_sub(&srv->gen_inflight, 1);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    oai_request_free(&g->req);
    for (int32_t i = 0; i < SERVER_MAX_N; i++) {
        free(g->ch[i].text);
        free(g->ch[i].lp);
        free(g->ch[i].tacc);
    }
    free(g->out);
    free(g);
}

static bool buf_append(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        while (nc < *len + n + 1) nc *= 2;
        char *q = realloc(*p, nc);
        if (!q) return false;
        *p = q;
        *cap = nc;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = '\0';
    return true;
}

/* Appends one logprobs record (doubling growth: amortized, no allocation on most tokens). */
static bool lp_append(gen_choice *ch, const kite_logprobs *lp) {
    if (ch->n_lp == ch->cap_lp) {
        size_t nc = ch->cap_lp ? ch->cap_lp * 2 : 16;
        kite_logprobs *q = realloc(ch->lp, nc * sizeof *q);
        if (!q) return false;
        ch->lp = q;
        ch->cap_lp = nc;
    }
    ch->lp[ch->n_lp++] = *lp;
    return true;
}

/* Engine thread: queue the event and wake the connection thread. */
static void gen_on_event(void *user, const engine_event *ev) {
    gen_choice *ch = user;
    gen_req *g = ch->g;
    server *srv = g->srv;
    pthread_mutex_lock(&g->mu);
    if (ev->kind == ENGINE_EV_TEXT && ev->n_tokens > 0) {
        double now = time_now_s();
        if (g->t_first <= 0) {
            g->t_first = now;
            srv_hist_observe(&srv->h_ttft, now - g->t_arrive);
            srv_hist_observe(&srv->h_queue, (g->t_submit - g->t_arrive) + ev->queue_s);
        } else {
            double dt = (now - g->t_last) / ev->n_tokens;
            for (int32_t i = 0; i < ev->n_tokens; i++) srv_hist_observe(&srv->h_itl, dt);
        }
        g->t_last = now;
    }
    if (ev->kind == ENGINE_EV_TEXT) {
        if ((ev->len && !buf_append(&ch->text, &ch->len, &ch->cap, ev->text, ev->len)) ||
            (ev->logprobs && !lp_append(ch, ev->logprobs))) {
            g->failed = g->done = true;
            snprintf(g->errmsg, sizeof g->errmsg, "out of memory");
        }
        g->pending += ev->len + (ev->logprobs != NULL);
    } else if (!ch->done) {
        ch->done = true;
        g->n_done++;
        if (ev->kind == ENGINE_EV_ERROR) {
            g->failed = g->done = true; /* the other choices are cancelled by the last release */
            snprintf(g->errmsg, sizeof g->errmsg, "%s", ev->message ? ev->message : "generation failed");
        } else {
            snprintf(ch->finish, sizeof ch->finish, "%s",
                     ev->finish_reason && !strcmp(ev->finish_reason, "length") ? "length" : "stop");
        }
        if (g->n_done == g->n_choices) g->done = true;
        if (g->done && g->t_done <= 0) g->t_done = time_now_s();
    }
    if (ev->n_prompt > 0) g->n_prompt = ev->n_prompt;
    if (ev->n_gen > ch->n_gen) {
        g->n_gen += ev->n_gen - ch->n_gen;
        ch->n_gen = ev->n_gen;
    }
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Waits (mu held) up to SERVER_POLL_MS - less if the request's deadline
 * comes first - for new text or the end. */
static void wait_slice(gen_req *g) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long wait_ns = SERVER_POLL_MS * 1000000L;
    if (g->deadline > 0) {
        double left = g->deadline - time_now_s();
        if (left < wait_ns * 1e-9) wait_ns = left > 0 ? (long)(left * 1e9) + 1000000L : 1000000L;
    }
    ts.tv_nsec += wait_ns;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
}

/* true if g's deadline or the drain deadline has passed (no lock needed:
 * deadline is the connection thread's, drain_abort atomic). */
static bool past_deadline(const gen_req *g) {
    return atomic_load(&g->srv->drain_abort) || (g->deadline > 0 && time_now_s() >= g->deadline);
}

/* Ends an unfinished g whose deadline passed (mu not held): cancels its
 * generation - the callback is never called again after engine_cancel - and
 * finishes it here.  With tokens out, finish_reason "length" (as
 * llama-server's t_max_predict_ms); before any token (still queued or in
 * prefill), a 503 timeout; when the drain deadline passed, a 503
 * server_shutting_down, streams included. */
static void end_at_deadline(gen_req *g) {
    server *s = g->srv;
    bool drain = atomic_load(&s->drain_abort);
    pthread_mutex_lock(&g->mu);
    bool done = g->done;
    pthread_mutex_unlock(&g->mu);
    if (done) return;
    for (int32_t i = 0; i < g->n_choices; i++)
        if (g->ch[i].eng_id) engine_cancel(s->eng, g->ch[i].eng_id); /* finished ids are ignored */
    pthread_mutex_lock(&g->mu);
    if (!g->done) {
        g->done = true;
        g->t_done = time_now_s();
        for (int32_t i = 0; i < g->n_choices; i++)
            if (!g->ch[i].done) {
                g->ch[i].done = true;
                g->n_done++;
                snprintf(g->ch[i].finish, sizeof g->ch[i].finish, "length");
            }
        if (drain) {
            g->failed = g->unavailable = true;
            g->err_code = "server_shutting_down";
            snprintf(g->errmsg, sizeof g->errmsg, "The server is shutting down.");
        } else if (g->n_gen > 0) {
            atomic_fetch_add(&s->timed_out[TMO_GENERATION], 1);
        } else {
            g->failed = g->unavailable = true;
            g->err_code = "timeout";
            snprintf(g->errmsg, sizeof g->errmsg,
                     "The request reached its deadline (%.0f ms) before its first token: the server is busy.",
                     (g->deadline - g->t_arrive) * 1e3);
            atomic_fetch_add(&s->timed_out[TMO_QUEUE], 1);
        }
    }
    pthread_mutex_unlock(&g->mu);
}

/* ---- prompt ---- */

/* true (and a 400 in *err) if a text of len bytes cannot fit the context
 * (server.c, prompt_bytes_bound): refused before tokenization. */
static bool too_long_to_tokenize(server *s, size_t len, bool chat, oai_error *err) {
    if ((int64_t)len <= s->max_prompt_bytes) return false;
    oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", chat ? "messages" : "prompt",
                  "This model's maximum context length is %d tokens, but the prompt is %zu bytes, which is more "
                  "than %d tokens for this vocabulary (refused before tokenization).",
                  (int)s->n_ctx, len, (int)s->n_ctx);
    return true;
}

/* Builds the prompt tokens of r into *toks (malloc'd). */
static bool build_prompt(server *s, oai_request *r, double deadline, kite_token **toks, int32_t *n, oai_error *err) {
    int st;
    if (r->chat) {
        char *text = NULL;
        bool tool_parts = r->tool_choice != OAI_TOOLS_OFF;
        for (size_t i = 0; i < r->n_msgs && !tool_parts; i++)
            tool_parts = !strcmp(r->msgs[i].role, "tool") || (r->msg_tools && r->msg_tools[i].n_calls);
        if (tool_parts) /* tool_choice "none": the tools are not offered (docs/http.md) */
            st = chat_apply_tools(s->chat_family, r->msgs, r->msg_tools, r->n_msgs, r->tools,
                                  r->tool_choice != OAI_TOOLS_OFF ? r->n_tools : 0, true, &text);
        else
            st = chat_apply(s->chat_family, r->msgs, r->n_msgs, true, &text);
        if (st != KITE_OK) {
            oai_error_set(err, 400, "invalid_request_error", "invalid_value", "messages", "%s",
                          kite_last_error()[0] ? kite_last_error() : "invalid messages");
            return false;
        }
        if (too_long_to_tokenize(s, strlen(text), true, err)) {
            free(text);
            return false;
        }
        st = srv_tokenize_bounded(s, text, strlen(text), kite_token_bos(s->model) >= 0, true, deadline, toks, n);
        free(text);
    } else if (r->prompt_text) {
        if (too_long_to_tokenize(s, strlen(r->prompt_text), false, err)) return false;
        st = srv_tokenize_bounded(s, r->prompt_text, strlen(r->prompt_text), kite_token_bos(s->model) >= 0, true,
                                  deadline, toks, n);
    } else {
        for (int32_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= s->n_vocab) {
                oai_error_set(err, 400, "invalid_request_error", "invalid_value", "prompt",
                              "Invalid value for 'prompt': token id %d is outside the vocabulary (%d tokens).",
                              (int)r->prompt_ids[i], (int)s->n_vocab);
                return false;
            }
        *toks = r->prompt_ids;
        *n = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
        st = KITE_OK;
    }
    if (st == KITE_E_STATE) { /* tokenizer queue full, or the deadline passed in it */
        oai_error_set(err, 503, "server_error", "tokenizer_busy", NULL, "%s", kite_last_error());
        return false;
    }
    if (st != KITE_OK) {
        oai_error_set(err, st == KITE_E_NOMEM ? 500 : 400, st == KITE_E_NOMEM ? "server_error" : "invalid_request_error",
                      NULL, r->chat ? "messages" : "prompt", "Could not tokenize the prompt: %s", kite_last_error());
        return false;
    }
    if (*n < 1) {
        oai_error_set(err, 400, "invalid_request_error", "invalid_value", r->chat ? "messages" : "prompt",
                      "The prompt is empty.");
        return false;
    }
    if (*n >= s->n_ctx) {
        oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", r->chat ? "messages" : "prompt",
                      "This model's maximum context length is %d tokens, but the prompt has %d tokens "
                      "(at least one position is needed for the reply).",
                      (int)s->n_ctx, (int)*n);
        return false;
    }
    return true;
}

/* ---- response JSON ---- */

static cJSON *usage_json(const gen_req *g) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", g->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", g->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", g->n_prompt + g->n_gen);
    return u;
}

static cJSON *base_json(const gen_req *g, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)g->created);
    cJSON_AddStringToObject(o, "model", g->srv->model_id); /* the served name, as OpenAI answers the resolved one */
    cJSON_AddStringToObject(o, "system_fingerprint", "kite");
    return o;
}

/* ---- logprobs (OpenAI's shapes; docs/http.md) ---- */

/* A token's bytes as a NUL-terminated string in buf (cap >= 9), or a malloc'd
 * copy for a long piece (*heap set; free it).  NUL bytes end the string: the
 * "bytes" array keeps them. */
static const char *piece_str(const server *s, kite_token t, char *buf, size_t cap, size_t *len, char **heap) {
    char b8[8];
    const char *p = NULL;
    int n = kite_token_to_piece(s->model, t, &p, b8);
    *heap = NULL;
    *len = 0;
    if (n <= 0 || !p) {
        buf[0] = '\0';
        return buf;
    }
    char *dst = buf;
    if ((size_t)n >= cap && !(dst = *heap = malloc((size_t)n + 1))) {
        buf[0] = '\0';
        return buf;
    }
    memcpy(dst, p, (size_t)n);
    dst[n] = '\0';
    *len = (size_t)n;
    return dst;
}

/* JSON has no -Infinity: a token without mass gets -9999 (OpenAI's floor). */
static double lp_num(float x) { return isfinite(x) ? (double)x : -9999.0; }

/* {"token", "logprob", "bytes"} (+ "top_logprobs" when top is given). */
static cJSON *chat_lp_entry(const server *s, kite_token t, float lp, const kite_logprobs *top) {
    char buf[256], *heap;
    size_t len;
    const char *str = piece_str(s, t, buf, sizeof buf, &len, &heap);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", str);
    cJSON_AddNumberToObject(o, "logprob", lp_num(lp));
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < len; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)str[i]));
    free(heap);
    if (top) {
        cJSON *arr = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int32_t i = 0; i < top->n_top; i++)
            cJSON_AddItemToArray(arr, chat_lp_entry(s, top->top[i].token, top->top[i].logprob, NULL));
    }
    return o;
}

/* The "logprobs" member of a choice for n records: chat {"content": [...],
 * "refusal": null}; completions {"tokens", "token_logprobs", "top_logprobs",
 * "text_offset"} with offsets into the choice's generated text (*offset
 * advanced).  JSON null when the request did not ask for logprobs. */
static cJSON *logprobs_json(const gen_req *g, const kite_logprobs *lp, size_t n, int64_t *offset) {
    if (!g->req.logprobs) return cJSON_CreateNull();
    const server *s = g->srv;
    cJSON *o = cJSON_CreateObject();
    if (g->req.chat) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(content, chat_lp_entry(s, lp[i].token, lp[i].logprob, &lp[i]));
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *tlp = cJSON_AddArrayToObject(o, "token_logprobs"),
          *top = cJSON_AddArrayToObject(o, "top_logprobs"), *off = cJSON_AddArrayToObject(o, "text_offset");
    for (size_t i = 0; i < n; i++) {
        char buf[256], *heap;
        size_t len;
        const char *str = piece_str(s, lp[i].token, buf, sizeof buf, &len, &heap);
        cJSON_AddItemToArray(toks, cJSON_CreateString(str));
        free(heap);
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(lp_num(lp[i].logprob)));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)*offset));
        *offset += (int64_t)len;
        cJSON *d = cJSON_CreateObject();
        for (int32_t j = 0; j < lp[i].n_top; j++) {
            str = piece_str(s, lp[i].top[j].token, buf, sizeof buf, &len, &heap);
            /* a dict: two tokens with the same text keep the more likely one (listed first) */
            if (!cJSON_GetObjectItemCaseSensitive(d, str))
                cJSON_AddNumberToObject(d, str, lp_num(lp[i].top[j].logprob));
            free(heap);
        }
        cJSON_AddItemToArray(top, d);
    }
    return o;
}

/* ---- tool calls (docs/http.md, "Tools") ---- */

/* The calls in a finished choice's text (false: none, or no tools offered). */
static bool choice_tool_calls(const gen_req *g, const char *text, size_t len, tool_parse *tp) {
    if (!g->req.chat || g->req.tool_choice == OAI_TOOLS_OFF || !text) return false;
    return tool_calls_parse(g->srv->chat_family, text, len, g->req.tools, g->req.n_tools, tp);
}

/* A call id unique to (request, choice, call): "call_" + 24 hex digits, or
 * 9 letters and digits for Mistral's template, which asks for that shape. */
static void tool_call_id(const gen_req *g, int32_t choice, size_t k, char *buf, size_t cap) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = g->id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= ((uint64_t)choice << 40) ^ (uint64_t)k * 0x9E3779B97F4A7C15ull;
    uint64_t a = h * 0xff51afd7ed558ccdull, b = (h ^ (h >> 29)) * 0xc4ceb9fe1a34e53ull;
    if (chat_tool_format(g->srv->chat_family) == CHAT_TOOLS_MISTRAL) {
        static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        size_t i = 0;
        for (; i < 9 && i + 1 < cap; i++, a /= 62) buf[i] = al[a % 62];
        buf[i] = '\0';
    } else {
        snprintf(buf, cap, "call_%016llx%08llx", (unsigned long long)a, (unsigned long long)(b >> 32));
    }
}

/* message.tool_calls. */
static cJSON *tool_calls_json(const gen_req *g, int32_t choice, const tool_parse *tp) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t k = 0; k < tp->n_calls; k++) {
        char id[48];
        tool_call_id(g, choice, k, id, sizeof id);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(f, "name", tp->calls[k].name);
        cJSON_AddStringToObject(f, "arguments", tp->calls[k].arguments);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* The non-streaming answer (mu not needed: the request is finished). */
static char *final_json(const gen_req *g) {
    cJSON *o = base_json(g, g->req.chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int32_t i = 0; i < g->n_choices; i++) {
        const gen_choice *ch = &g->ch[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        tool_parse tp;
        const char *finish = ch->finish;
        if (choice_tool_calls(g, ch->text, ch->len, &tp)) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (tp.content) cJSON_AddStringToObject(m, "content", tp.content);
            else cJSON_AddNullToObject(m, "content");
            cJSON_AddItemToObject(m, "tool_calls", tool_calls_json(g, i, &tp));
            tool_parse_free(&tp);
            finish = "tool_calls";
        } else if (g->req.chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", ch->text ? ch->text : "");
        } else {
            cJSON_AddStringToObject(c, "text", ch->text ? ch->text : "");
        }
        int64_t off = 0;
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(g, ch->lp, ch->n_lp, &off));
        cJSON_AddStringToObject(c, "finish_reason", finish);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(o, "usage", usage_json(g));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Appends "data: <json>\n\n" to the SSE output (takes the cJSON). */
static bool sse_emit_json(gen_req *g, char *s);
static bool sse_emit(gen_req *g, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return sse_emit_json(g, s);
}

/* Appends "data: <s>\n\n" (takes the malloc'd s, made valid UTF-8). */
static bool sse_emit_json(gen_req *g, char *s) {
    if (!(s = srv_json_utf8(s))) return false;
    bool ok = buf_append(&g->out, &g->out_len, &g->out_cap, "data: ", 6) &&
              buf_append(&g->out, &g->out_len, &g->out_cap, s, strlen(s)) &&
              buf_append(&g->out, &g->out_len, &g->out_cap, "\n\n", 2);
    free(s);
    return ok;
}

/* One streaming chunk of choice ch: text (may be NULL = none), its tokens'
 * logprobs (n_lp records; logprobs null when the request has none or n_lp
 * is 0 on a finish chunk) and finish_reason (NULL = JSON null); role only in
 * the first chat chunk. */
static bool sse_chunk(gen_req *g, gen_choice *ch, const char *text, size_t len, const kite_logprobs *lp, size_t n_lp,
                      const char *finish, bool role) {
    cJSON *o = base_json(g, g->req.chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", ch->index);
    char *tmp = NULL;
    if (text) {
        tmp = malloc(len + 1);
        if (!tmp) {
            cJSON_Delete(c);
            cJSON_Delete(o);
            return false;
        }
        memcpy(tmp, text, len);
        tmp[len] = '\0';
    }
    if (g->req.chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (tmp) cJSON_AddStringToObject(d, "content", tmp);
    } else {
        cJSON_AddStringToObject(c, "text", tmp ? tmp : "");
    }
    free(tmp);
    if (n_lp > 0) cJSON_AddItemToObject(c, "logprobs", logprobs_json(g, lp, n_lp, &ch->text_offset));
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (g->req.include_usage) cJSON_AddNullToObject(o, "usage");
    return sse_emit(g, o);
}

/* ---- streamed tool calls: the sink of ch->ts (tool_calls.h) ---- */

typedef struct tool_sse {
    gen_req *g;
    gen_choice *ch;
} tool_sse;

static bool tool_sse_content(void *u, const char *s, size_t n) {
    tool_sse *t = u;
    return sse_chunk(t->g, t->ch, s, n, NULL, 0, NULL, false);
}

/* One chunk whose delta.tool_calls holds call k: the first with index, id,
 * type, name and arguments "" (name != NULL), the next ones with index and a
 * fragment of the arguments, as OpenAI streams them. */
static bool tool_sse_part(gen_req *g, gen_choice *ch, size_t k, const char *name, const char *frag, size_t n) {
    char *a = NULL;
    if (frag && !(a = malloc(n + 1))) return false;
    if (a) {
        memcpy(a, frag, n);
        a[n] = '\0';
    }
    cJSON *o = base_json(g, "chat.completion.chunk");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", ch->index);
    cJSON *call = cJSON_CreateObject();
    cJSON_AddNumberToObject(call, "index", (double)k);
    if (name) {
        char id[48];
        tool_call_id(g, ch->index, k, id, sizeof id);
        cJSON_AddStringToObject(call, "id", id);
        cJSON_AddStringToObject(call, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(call, "function");
    if (name) cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", a ? a : "");
    free(a);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(cJSON_AddObjectToObject(c, "delta"), "tool_calls"), call);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    if (g->req.include_usage) cJSON_AddNullToObject(o, "usage");
    return sse_emit(g, o);
}

static bool tool_sse_call(void *u, size_t k, const char *name) {
    tool_sse *t = u;
    return tool_sse_part(t->g, t->ch, k, name, NULL, 0);
}

static bool tool_sse_args(void *u, size_t k, const char *s, size_t n) {
    tool_sse *t = u;
    return tool_sse_part(t->g, t->ch, k, NULL, s, n);
}

/* Streams the new text of a choice of a tools request: appended to all its
 * text so far, which the choice's tool_stream reads again; content as soon
 * as it cannot be the start of a call, each call's header once its name is
 * complete, its arguments as they are decoded.  final: the choice ended;
 * finish_reason "tool_calls" when there were calls ("length" when the last
 * one was cut off). */
static bool sse_tools(gen_req *g, gen_choice *ch, const char *text, size_t len, bool final) {
    if (len && !buf_append(&ch->tacc, &ch->tlen, &ch->tcap, text, len)) return false;
    if (!ch->tacc && !final) return true;
    tool_sse t = {g, ch};
    tool_stream_sink sink = {&t, tool_sse_content, tool_sse_call, tool_sse_args};
    if (!tool_stream_feed(&ch->ts, ch->tacc ? ch->tacc : "", ch->tlen, final, &sink)) return false;
    if (final && ch->ts.n_calls) snprintf(ch->finish, sizeof ch->finish, "%s", ch->ts.cut ? "length" : "tool_calls");
    return true;
}

/* The finish chunk of ch, once. */
static bool sse_finish(gen_req *g, gen_choice *ch) {
    if (ch->finish_sent) return true;
    ch->finish_sent = true;
    g->n_finish_sent++;
    return sse_chunk(g, ch, g->req.chat ? NULL : "", 0, NULL, 0, ch->finish, false);
}

/* Final chunks: the finish_reasons not sent yet, usage (if asked), [DONE]; or an error. */
static bool sse_end(gen_req *g, bool failed, const char *errmsg) {
    if (failed) {
        oai_error e;
        if (g->unavailable) oai_error_set(&e, 503, "server_error", g->err_code, NULL, "%s", errmsg);
        else oai_error_set(&e, 500, "server_error", NULL, NULL, "Generation failed: %s", errmsg);
        if (!sse_emit_json(g, oai_error_json(&e))) return false;
    } else {
        for (int32_t i = 0; i < g->n_choices; i++)
            if (!sse_finish(g, &g->ch[i])) return false;
        if (g->req.include_usage) {
            cJSON *o = base_json(g, g->req.chat ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(g));
            if (!sse_emit(g, o)) return false;
        }
    }
    return buf_append(&g->out, &g->out_len, &g->out_cap, "data: [DONE]\n\n", 14);
}

/* Hands up to max formatted bytes to MHD (out_pos < out_len). */
static ssize_t out_take(gen_req *g, char *buf, size_t max) {
    size_t n = g->out_len - g->out_pos;
    if (n > max) n = max;
    memcpy(buf, g->out + g->out_pos, n);
    g->out_pos += n;
    if (g->out_pos == g->out_len) g->out_pos = g->out_len = 0;
    return (ssize_t)n;
}

/* MHD content reader: blocks (in slices) until there is something to send. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_req *g = cls;
    (void)pos;
    for (;;) {
        if (g->out_pos < g->out_len) return out_take(g, buf, max);
        if (g->ended) return MHD_CONTENT_READER_END_OF_STREAM;

        /* a stream waiting longer than half the idle timeout (queued behind
         * others, a long prefill) sends an SSE comment, which clients ignore,
         * so that libmicrohttpd does not drop it as idle */
        int64_t keepalive_ms = (int64_t)g->srv->p.idle_timeout_s * 500;
        if (keepalive_ms > 10000) keepalive_ms = 10000;
        int64_t waited_ms = 0;
        pthread_mutex_lock(&g->mu);
        /* something to send: queued text or logprobs, a choice's end, the end */
#define SSE_READY(g) ((g)->pending || (g)->done || (g)->n_done > (g)->n_finish_sent)
        while (!SSE_READY(g)) {
            wait_slice(g);
            waited_ms += SERVER_POLL_MS;
            if (SSE_READY(g)) break;
            if (past_deadline(g)) {
                pthread_mutex_unlock(&g->mu);
                end_at_deadline(g);
                pthread_mutex_lock(&g->mu);
                continue;
            }
            int peer = srv_client_state(g->conn);
            if (peer == SRV_CLIENT_GONE) {
                pthread_mutex_unlock(&g->mu);
                g->client_gone = true;
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            /* after a FIN the stream goes on (a half-closed client still
             * reads); the comment doubles as the probe that makes a closed
             * peer answer RST, seen as GONE at the next check */
            if (waited_ms >= (peer == SRV_CLIENT_EOF && keepalive_ms > SERVER_PROBE_MS ? SERVER_PROBE_MS : keepalive_ms)) {
                pthread_mutex_unlock(&g->mu);
                static const char ping[] = ": keep-alive\n\n";
                if (max < sizeof ping - 1) return 0;
                memcpy(buf, ping, sizeof ping - 1);
                return (ssize_t)(sizeof ping - 1);
            }
        }
        /* take everything queued so far, choice by choice */
        struct {
            char *text;
            size_t len;
            kite_logprobs *lp;
            size_t n_lp;
            bool ended;
        } take[SERVER_MAX_N];
        bool tools = g->req.chat && g->req.tool_choice != OAI_TOOLS_OFF;
        for (int32_t i = 0; i < g->n_choices; i++) {
            gen_choice *ch = &g->ch[i];
            take[i].text = ch->text;
            take[i].len = ch->len;
            take[i].lp = ch->lp;
            take[i].n_lp = ch->n_lp;
            take[i].ended = ch->done;
            ch->text = NULL;
            ch->lp = NULL;
            ch->len = ch->cap = ch->n_lp = ch->cap_lp = 0;
        }
        g->pending = 0;
        bool done = g->done, failed = g->failed;
        char errmsg[sizeof g->errmsg];
        memcpy(errmsg, g->errmsg, sizeof errmsg);
        pthread_mutex_unlock(&g->mu);

        bool ok = true;
        for (int32_t i = 0; i < g->n_choices; i++) {
            /* text before a failure still goes out */
            if (ok && tools && !g->ch[i].finish_sent)
                ok = sse_tools(g, &g->ch[i], take[i].text, take[i].len, take[i].ended && !failed);
            else if (ok && (take[i].len || take[i].n_lp))
                ok = sse_chunk(g, &g->ch[i], take[i].text, take[i].len, take[i].lp, take[i].n_lp, NULL, false);
            if (ok && take[i].ended && !failed) ok = sse_finish(g, &g->ch[i]);
            free(take[i].text);
            free(take[i].lp);
        }
        if (ok && done) {
            ok = sse_end(g, failed, errmsg);
            g->ended = true;
        }
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void sse_free(void *cls) { gen_req_release(cls); }

/* MHD content reader of a non-streaming answer to a client that sent FIN
 * (see gen_handle): a space at once and every SERVER_PROBE_MS while the generation
 * runs - JSON allows leading white space, and a closed peer answers the
 * write with RST, which ends the wait - then the JSON body. */
static ssize_t json_read(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_req *g = cls;
    if (pos == 0) {
        /* the first probe at once: a closed peer is found within a poll */
        buf[0] = ' ';
        return 1;
    }
    for (;;) {
        if (g->out_pos < g->out_len) return out_take(g, buf, max);
        if (g->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        double t0 = time_now_s();
        pthread_mutex_lock(&g->mu);
        while (!g->done && time_now_s() - t0 < SERVER_PROBE_MS * 1e-3) {
            wait_slice(g);
            if (!g->done && past_deadline(g)) {
                pthread_mutex_unlock(&g->mu);
                end_at_deadline(g);
                pthread_mutex_lock(&g->mu);
                continue;
            }
            if (!g->done && srv_client_state(g->conn) == SRV_CLIENT_GONE) {
                pthread_mutex_unlock(&g->mu);
                g->client_gone = true;
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        bool done = g->done;
        pthread_mutex_unlock(&g->mu);
        if (!done) {
            buf[0] = ' ';
            return 1;
        }
        char *json;
        if (g->failed) {
            /* the status line (200) is out already: the error goes in the body */
            oai_error e;
            if (g->unavailable) oai_error_set(&e, 503, "server_error", g->err_code, NULL, "%s", g->errmsg);
            else oai_error_set(&e, 500, "server_error", NULL, NULL, "Generation failed: %s", g->errmsg);
            json = oai_error_json(&e);
        } else {
            json = final_json(g);
        }
        if (!(json = srv_json_utf8(json))) return MHD_CONTENT_READER_END_WITH_ERROR;
        bool ok = buf_append(&g->out, &g->out_len, &g->out_cap, json, strlen(json));
        free(json);
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
        g->ended = true;
    }
}

/* Answers a non-streaming request whose client sent FIN while it waited:
 * the rest goes out through json_read (status 200 now, the body when done). */
static enum MHD_Result answer_after_fin(server *s, struct MHD_Connection *c, gen_req *g, int *status, gen_req **keep) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, json_read, g, sse_free);
    if (!resp) {
        gen_req_release(g);
        *status = 500;
        return MHD_NO;
    }
    atomic_fetch_add(&g->refs, 1); /* the response's reference, dropped by sse_free */
    MHD_add_response_header(resp, "Content-Type", "application/json");
    srv_add_headers(s, c, resp);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    *status = 200;
    *keep = g;
    return ret;
}

/* ---- Skeleton-of-Thought ("sot": true, docs/http.md) ---- */

static bool sot_stop(void *arg) { return past_deadline(arg); }

/* Runs SoT for a chat request on the connection thread (blocks until the
 * answer is assembled; the engine decodes) and stores the answer as the
 * request's finished output, so the non-streaming and streaming paths below
 * send it like a finished generation (streaming: one content chunk).  The
 * question is the last user message.  The request's deadline (--timeout,
 * t_max_predict_ms) and the drain deadline stop it (sot_params.should_stop):
 * its engine requests are cancelled and the answer is a 503, as nothing has
 * been sent. */
static bool sot_answer(server *s, gen_req *g, oai_error *err) {
    const oai_request *r = &g->req;
    const char *question = NULL;
    for (size_t i = 0; i < r->n_msgs; i++)
        if (!strcmp(r->msgs[i].role, "user")) question = r->msgs[i].content;
    if (!question) {
        oai_error_set(err, 400, "invalid_request_error", "invalid_value", "messages",
                      "Invalid value for 'messages': \"sot\" needs a user message (the question).");
        return false;
    }
    sot_params p = sot_default_params();
    p.chat_family = s->chat_family;
    p.sampling = r->sampling;
    p.skeleton_text = r->sot_skeleton;
    if (r->max_tokens > 0) p.point_tokens = p.plain_tokens = r->max_tokens;
    p.should_stop = sot_stop; /* the request's deadline and the drain deadline */
    p.stop_arg = g;
    p.client = srv_client_key(g->conn); /* its requests queue fairly with the others (scheduler.h) */
    sot_result res;
    memset(&res, 0, sizeof res);
    int st = sot_run(s->eng, s->model, question, &p, &res);
    if (st != KITE_OK && past_deadline(g)) { /* stopped: nothing was sent yet, so a 503 (Retry-After) */
        const bool drain = atomic_load(&s->drain_abort);
        if (drain)
            oai_error_set(err, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down.");
        else
            oai_error_set(err, 503, "server_error", "timeout", NULL,
                          "The request reached its deadline (%.0f ms) before its Skeleton-of-Thought answer was "
                          "complete.",
                          (g->deadline - g->t_arrive) * 1e3);
        if (!drain) atomic_fetch_add(&s->timed_out[TMO_GENERATION], 1);
        sot_result_free(&res);
        return false;
    }
    if (st != KITE_OK) {
        oai_error_set(err, st == KITE_E_ARG || st == KITE_E_RANGE ? 400 : 500,
                      st == KITE_E_ARG || st == KITE_E_RANGE ? "invalid_request_error" : "server_error", NULL, NULL,
                      "Skeleton-of-Thought failed: %s", kite_last_error());
        sot_result_free(&res);
        return false;
    }
    pthread_mutex_lock(&g->mu);
    gen_choice *ch = &g->ch[0];
    ch->text = res.answer;
    res.answer = NULL;
    ch->len = ch->text ? strlen(ch->text) : 0;
    ch->cap = ch->len + 1;
    g->pending = ch->len;
    ch->n_gen = g->n_gen = res.n_gen_total;
    ch->done = g->done = true;
    g->n_done = 1;
    snprintf(ch->finish, sizeof ch->finish, "stop");
    pthread_mutex_unlock(&g->mu);
    sot_result_free(&res);
    return true;
}

/* ---- entry point ---- */

/* Choice i's seed: the request's for choice 0; for the others a mix of both,
 * so that their streams do not overlap (the sampler seeds with
 * splitmix64(seed): seeds a golden gamma apart would share outputs). */
static uint64_t choice_seed(uint64_t seed, int32_t i) {
    if (i == 0) return seed;
    uint64_t z = seed ^ ((uint64_t)i * 0xD1B54A32D192ED03ull);
    z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
    z = (z ^ (z >> 33)) * 0xc4ceb9fe1a34e53ull;
    return z ^ (z >> 33);
}

void gen_req_log_info(gen_req *g, int32_t *n_prompt, int32_t *n_gen, const char **note) {
    pthread_mutex_lock(&g->mu);
    *n_prompt = g->n_prompt;
    *n_gen = g->n_gen;
    *note = g->client_gone || !g->done ? "cancelled" : g->failed ? "failed" : g->ch[0].finish;
    pthread_mutex_unlock(&g->mu);
}

enum MHD_Result gen_handle(server *s, struct MHD_Connection *c, const char *body, size_t len, bool chat,
                           int *status, gen_req **keep) {
    oai_error err;
    kite_token *toks = NULL;
    int32_t n = 0;
    enum MHD_Result ret;
    gen_req *g = calloc(1, sizeof *g);
    if (!g) {
        oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory.");
        goto fail;
    }
    g->srv = s;
    g->conn = c;
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    snprintf(g->id, sizeof g->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1) * 0x9E3779B97F4A7C15ull);
    g->created = (int64_t)time(NULL);
    g->t_arrive = time_now_s();

    /* backpressure: a bounded number of generation requests in the server
     * (tokenizing, queued or running); the rest are told when to retry */
    if (atomic_load(&s->draining)) {
        atomic_fetch_add(&s->rejected[REJ_DRAINING], 1);
        oai_error_set(&err, 503, "server_error", "server_shutting_down", NULL, "The server is shutting down.");
        goto busy;
    }
    g->counted = true;
    if (atomic_fetch_add(&s->gen_inflight, 1) >= s->gen_capacity) {
        atomic_fetch_add(&s->rejected[REJ_QUEUE_FULL], 1);
        oai_error_set(&err, 503, "server_error", "server_overloaded", NULL,
                      "The server is busy: all %d slots and %d queue places are taken; retry later.",
                      (int)s->n_parallel, (int)(s->gen_capacity - s->n_parallel));
        goto busy;
    }

    if (!oai_request_parse(body, len, chat, &g->req, &err) || !srv_model_check(s, g->req.model, &err)) goto fail;
    double limit_s = s->p.timeout_s;
    if (g->req.t_max_predict_ms > 0 && g->req.t_max_predict_ms * 1e-3 < limit_s) limit_s = g->req.t_max_predict_ms * 1e-3;
    g->deadline = g->t_arrive + limit_s;
    if (!build_prompt(s, &g->req, g->deadline, &toks, &n, &err)) {
        if (err.status == 503) {
            atomic_fetch_add(&s->rejected[REJ_TOKENIZER_BUSY], 1);
            goto busy;
        }
        goto fail;
    }
    g->n_prompt = n;

    oai_request *r = &g->req;
    if (!r->seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r->sampling.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ atomic_load(&s->next_id);
    }
    if (r->sot) {
        g->n_choices = 1;
        g->ch[0].g = g;
        free(toks);
        toks = NULL;
        if (!sot_answer(s, g, &err)) {
            if (err.status == 503) goto busy; /* stopped by a deadline: Retry-After */
            goto fail;
        }
        goto answer;
    }
    const char *stops[SERVER_MAX_STOP + 16];
    int32_t n_stop = 0;
    for (int32_t i = 0; i < r->n_stop; i++) stops[n_stop++] = r->stop[i];
    if (chat) {
        const char *const *cs = chat_stop_strings(s->chat_family);
        for (; cs && *cs && n_stop < (int32_t)(sizeof stops / sizeof stops[0]); cs++) stops[n_stop++] = *cs;
    }
    /* OpenAI's defaults: 16 tokens for completions, the rest of the context for chat */
    int32_t room = s->n_ctx - n;
    int32_t max_tokens = r->max_tokens > 0 ? r->max_tokens : chat ? room : 16;
    for (int32_t i = 0; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].token >= s->n_vocab) {
            oai_error_set(&err, 400, "invalid_request_error", "invalid_value", "logit_bias",
                          "Invalid key in 'logit_bias': token id %d is outside the vocabulary (%d tokens).",
                          (int)r->logit_bias[i].token, (int)s->n_vocab);
            goto fail;
        }
    /* forced calls: the tools' grammar (tool_calls.c); calls the model chooses (auto): the same
     * grammar, lazy from the call's markup on (tool_grammar_triggers), so every call it makes is
     * well-formed and its arguments validate, and content stays free */
    kite_grammar_trigger trig[1];
    size_t n_trig = 0;
    if (chat && r->tool_choice == OAI_TOOLS_AUTO && r->n_tools && r->grammar_kind < 0)
        n_trig = tool_grammar_triggers(s->chat_family, trig);
    if (chat && (r->tool_choice == OAI_TOOLS_REQUIRED || n_trig)) {
        int st = tool_grammar_gbnf(s->chat_family, r->tools, r->n_tools, r->tool_named, r->parallel_tool_calls,
                                   &r->grammar_text);
        if (st != KITE_OK && st != KITE_E_NOMEM && n_trig) /* auto: a schema the converter refuses leaves */
            n_trig = 0;                                    /* the calls unconstrained, as before, not a 400 */
        else if (st != KITE_OK) {
            oai_error_set(&err, st == KITE_E_NOMEM ? 500 : 400, st == KITE_E_NOMEM ? "server_error" : "invalid_request_error",
                          "invalid_value", "tools", "Invalid 'tools': %s", kite_last_error());
            goto fail;
        }
        if (st == KITE_OK) {
            r->grammar_kind = KITE_GRAMMAR_GBNF;
            r->grammar_param = "tools";
        }
    }
    const uint64_t client = srv_client_key(c); /* fair queueing across clients (scheduler.h) */
    g->n_choices = r->n; /* before the first submit: a callback may come at once */
    for (int32_t i = 0; i < r->n; i++) {
        gen_choice *ch = &g->ch[i];
        kite_grammar *kg = NULL; /* structured output: compiled per choice, then owned by the engine */
        if (r->grammar_kind >= 0) {
            const char *gt = r->grammar_text ? r->grammar_text : "";
            int grc = n_trig ? kite_grammar_new_lazy(s->model, r->grammar_kind, gt, strlen(gt), trig, n_trig, &kg)
                             : kite_grammar_new(s->model, r->grammar_kind, gt, strlen(gt), &kg);
            if (grc != KITE_OK) {
                if (grc == KITE_E_NOMEM)
                    oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory compiling the grammar.");
                else
                    oai_error_set(&err, 400, "invalid_request_error", "invalid_value", r->grammar_param,
                                  "Invalid '%s': %s", r->grammar_param, kite_last_error());
                goto fail; /* choices already submitted are cancelled by the release */
            }
        }
        engine_req er = {
            .prompt = toks,
            .n_prompt = n,
            .max_tokens = max_tokens < room ? max_tokens : room,
            .sampling = r->sampling,
            .stop = n_stop ? stops : NULL,
            .n_stop = n_stop,
            .ignore_eos = r->ignore_eos,
            .grammar = kg,
            .logprobs = r->logprobs,
            .top_logprobs = r->top_logprobs,
            .client = client,
        };
        er.sampling.seed = choice_seed(r->sampling.seed, i);
        er.sampling.logit_bias = r->logit_bias;
        er.sampling.n_logit_bias = r->n_logit_bias;
        ch->g = g;
        ch->index = i;
        if (chat && r->tool_choice != OAI_TOOLS_OFF) tool_stream_init(&ch->ts, s->chat_family, r->tools, r->n_tools);
        if (i == 0) g->t_submit = time_now_s();
        int st = engine_submit(s->eng, &er, gen_on_event, ch, &ch->eng_id);
        if (st != KITE_OK) kite_grammar_free(kg);
        if (st != KITE_OK) {
            const char *msg = kite_last_error();
            if (st == KITE_E_RANGE && strstr(msg, "context"))
                oai_error_set(&err, 400, "invalid_request_error", "context_length_exceeded",
                              chat ? "messages" : "prompt", "%s", msg);
            else if (st == KITE_E_ARG || st == KITE_E_RANGE)
                oai_error_set(&err, 400, "invalid_request_error", "invalid_value", chat ? "messages" : "prompt", "%s",
                              msg);
            else
                oai_error_set(&err, 503, "server_error", NULL, NULL, "The engine could not take the request: %s", msg);
            ch->eng_id = 0;
            goto fail;
        }
    }
    free(toks);
    toks = NULL;

answer:
    if (r->stream) {
        for (int32_t i = 0; chat && i < g->n_choices; i++)
            if (!sse_chunk(g, &g->ch[i], "", 0, NULL, 0, NULL, true)) {
                oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory.");
                goto fail;
            }
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, g, sse_free);
        if (!resp) {
            oai_error_set(&err, 500, "server_error", NULL, NULL, "Could not create the response.");
            goto fail;
        }
        atomic_fetch_add(&g->refs, 1); /* the response's reference, dropped by sse_free */
        MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        srv_add_headers(s, c, resp);
        ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        *status = 200;
        *keep = g; /* the connection's reference, for the log line */
        return ret;
    }

    /* non-streaming: wait for the end, watching the client */
    pthread_mutex_lock(&g->mu);
    while (!g->done) {
        wait_slice(g);
        if (!g->done && past_deadline(g)) {
            pthread_mutex_unlock(&g->mu);
            end_at_deadline(g);
            pthread_mutex_lock(&g->mu);
            continue;
        }
        int peer = g->done ? SRV_CLIENT_OPEN : srv_client_state(c);
        if (peer == SRV_CLIENT_EOF) {
            /* a half-close (shutdown(SHUT_WR) after the request) or a close:
             * serve on, probing with white space (answer_after_fin) */
            pthread_mutex_unlock(&g->mu);
            return answer_after_fin(s, c, g, status, keep);
        }
        if (peer == SRV_CLIENT_GONE) {
            pthread_mutex_unlock(&g->mu);
            *status = 499; /* client closed request (nginx's code), for the log only */
            g->client_gone = true;
            *keep = g;
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (g->failed && g->unavailable) {
        oai_error_set(&err, 503, "server_error", g->err_code, NULL, "%s", g->errmsg);
        *status = 503;
        *keep = g;
        return srv_reply_error_retry(s, c, &err, srv_retry_ms(s));
    }
    if (g->failed) {
        oai_error_set(&err, 500, "server_error", NULL, NULL, "Generation failed: %s", g->errmsg);
        goto fail;
    }
    char *json = final_json(g);
    if (!json) {
        oai_error_set(&err, 500, "server_error", NULL, NULL, "Out of memory.");
        goto fail;
    }
    *status = 200;
    *keep = g;
    return srv_reply_json(s, c, 200, json);

fail:
    free(toks);
    if (g) gen_req_release(g);
    *status = err.status;
    return srv_reply_error(s, c, &err);

busy: /* 503 with Retry-After: overloaded, tokenizer busy, draining */
    free(toks);
    {
        int64_t retry = srv_retry_ms(s);
        gen_req_release(g);
        *status = err.status;
        return srv_reply_error_retry(s, c, &err, retry);
    }
}
