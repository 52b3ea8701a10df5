/*
 * sot.c - Skeleton-of-Thought over the serving engine (see sot.h).
 *
 * Each stage submits its requests to the engine and waits on a collector per
 * request (text buffer + mutex/condvar, filled by the engine's callback on
 * its thread).  Stage 2 submits every point before waiting for any, so the
 * engine batches their decode steps together; that is where the speedup
 * over plain decoding comes from.
 */
#include "sot/sot.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_template.h"
#include "chat/chat_tokenize.h"
#include "core/error.h"
#include "core/timing.h"

/* Default prompts (docs/sot.md).  The skeleton prompt ends in "1." so the
 * model continues the list; the generated text is parsed with that prefix. */
static const char *const default_skeleton =
    "Plan an answer to the question below. Write only a numbered outline of 3 to 10 points; "
    "each point is a few words, not a sentence.\n\nQuestion: {question}\n\nOutline:\n1.";
static const char *const default_point =
    "Question: {question}\n\nOutline of the answer:\n{skeleton}\n\n"
    "Write point {index} of the outline in one or two short sentences, and nothing else.\n\n{index}. {point}";
static const char *const default_plain = "{question}";

sot_params sot_default_params(void) {
    sot_params p = {0};
    p.chat_family = -1;
    p.sampling = kite_sampler_default_params();
    p.sampling.temperature = 0.0f;
    return p;
}

/* ---- templates and parsing ------------------------------------------------ */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s ? s : "", s ? strlen(s) : 0); }

char *sot_fill(const char *tmpl, const char *question, const char *skeleton, int32_t index, const char *point) {
    strbuf b = {0};
    char num[16];
    snprintf(num, sizeof num, "%d", index);
    sb_add(&b, "", 0);
    for (const char *p = tmpl; *p;) {
        if (*p == '{') {
            const char *val = NULL;
            size_t klen = 0;
            if (!strncmp(p, "{question}", 10)) val = question ? question : "", klen = 10;
            else if (!strncmp(p, "{skeleton}", 10)) val = skeleton ? skeleton : "", klen = 10;
            else if (!strncmp(p, "{index}", 7)) val = num, klen = 7;
            else if (!strncmp(p, "{point}", 7)) val = point ? point : "", klen = 7;
            if (val) {
                sb_str(&b, val);
                p += klen;
                continue;
            }
        }
        sb_add(&b, p, 1);
        p++;
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* Number at the start of a skeleton line ("  **3.** text", "- 3) text"):
 * returns it and sets *rest to the text after the separator, or -1. */
static int line_number(const char *line, const char **rest) {
    const char *p = line;
    while (*p == ' ' || *p == '\t' || *p == '*' || *p == '-' || *p == '#') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    int n = 0;
    while (isdigit((unsigned char)*p) && n < 1000) n = n * 10 + (*p++ - '0');
    if (*p != '.' && *p != ')') return -1;
    p++;
    while (*p == ' ' || *p == '\t' || *p == '*') p++;
    *rest = p;
    return n;
}

int32_t sot_parse_skeleton(const char *text, char **titles, int32_t max) {
    int32_t n = 0;
    const char *line = text;
    while (line && *line && n < max) {
        const char *eol = strchr(line, '\n');
        const size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[512];
        const size_t cl = len < sizeof buf - 1 ? len : sizeof buf - 1;
        memcpy(buf, line, cl);
        buf[cl] = '\0';
        const char *rest = NULL;
        const int num = line_number(buf, &rest);
        if (num == n + 1) {
            /* trim trailing spaces, '*' and ':' */
            size_t rl = strlen(rest);
            while (rl && (rest[rl - 1] == ' ' || rest[rl - 1] == '\r' || rest[rl - 1] == '*' || rest[rl - 1] == ':'))
                rl--;
            if (rl == 0) break; /* an empty point ends the list */
            titles[n] = malloc(rl + 1);
            if (!titles[n]) break;
            memcpy(titles[n], rest, rl);
            titles[n][rl] = '\0';
            n++;
        } else if (n > 0 && (num >= 0 || len > 0)) {
            break; /* the numbering broke, or prose followed the list */
        }
        line = eol ? eol + 1 : NULL;
    }
    return n;
}

/* ---- requests ------------------------------------------------------------- */

typedef struct collector {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    strbuf text;
    bool done;
    int status;           /* KITE_OK or the ERROR event's status */
    char message[256];
    int32_t n_gen;
    uint64_t id;
} collector;

static void collect_cb(void *user, const engine_event *ev) {
    collector *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->kind == ENGINE_EV_TEXT) {
        sb_add(&c->text, ev->text ? ev->text : "", ev->text ? ev->len : 0);
    } else {
        if (ev->kind == ENGINE_EV_ERROR) {
            c->status = ev->status ? ev->status : KITE_E_STATE;
            snprintf(c->message, sizeof c->message, "%s", ev->message ? ev->message : "engine error");
        }
        c->n_gen = ev->n_gen;
        c->done = true;
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static void collector_init(collector *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    sb_add(&c->text, "", 0);
}

static void collector_destroy(collector *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->text.s);
}

/* Waits for the request; returns its status (setting the error message).
 * With p->should_stop, polls it every SOT_POLL_MS: when it says stop, the
 * request is cancelled (its callback is never called again: c may then be
 * destroyed) and KITE_E_STATE returned. */
static int collector_wait(engine *e, const sot_params *p, collector *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done) {
        if (!p->should_stop) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        if (p->should_stop(p->stop_arg)) {
            pthread_mutex_unlock(&c->mu);
            engine_cancel(e, c->id);
            return err_set(KITE_E_STATE, "skeleton-of-thought request stopped (deadline or shutdown)");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SOT_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    if (c->status != KITE_OK) return err_set(c->status, "skeleton-of-thought request: %s", c->message);
    if (c->text.oom) return err_set(KITE_E_NOMEM, "out of memory collecting a reply");
    return KITE_OK;
}

/* Formats (chat or raw), tokenizes and submits one prompt.  ct: the
 * special-token-aware tokenizer for chat prompts, or NULL for raw text. */
static int submit_prompt(engine *e, const kite_model *m, const sot_params *p, const chat_tokenizer *ct,
                         const char *text, int32_t max_tokens, const char *const *stop, int32_t n_stop,
                         collector *c) {
    char *formatted = NULL;
    int rc = KITE_OK;
    if (p->chat_family >= 0) {
        const chat_msg msg = {"user", text};
        rc = chat_apply(p->chat_family, &msg, 1, true, &formatted);
        if (rc != KITE_OK) return rc;
        text = formatted;
    }
    const size_t len = strlen(text);
    const bool bos = kite_token_bos(m) >= 0;
    size_t cap = len + 8, n = 0;
    kite_token *toks = NULL;
    for (int attempt = 0; attempt < 2; attempt++) { /* the second attempt with the exact count */
        free(toks);
        toks = malloc(sizeof *toks * cap);
        if (!toks) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            break;
        }
        rc = ct ? chat_tokenize(ct, text, len, bos, toks, cap, &n) : kite_tokenize(m, text, len, bos, toks, cap, &n);
        if (rc != KITE_E_RANGE) break;
        cap = n;
    }
    if (rc == KITE_OK) {
        engine_req req = {.prompt = toks, .n_prompt = (int32_t)n, .max_tokens = max_tokens,
                          .sampling = p->sampling, .stop = stop, .n_stop = n_stop, .client = p->client};
        rc = engine_submit(e, &req, collect_cb, c, &c->id);
    }
    free(toks);
    free(formatted);
    return rc;
}

void sot_result_free(sot_result *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_points; i++) {
        free(r->points[i].title);
        free(r->points[i].text);
    }
    free(r->points);
    free(r->skeleton);
    free(r->answer);
    memset(r, 0, sizeof *r);
}

static char *trim_dup(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Router fallback: plain decoding of the question. */
static int run_plain(engine *e, const kite_model *m, const chat_tokenizer *ct, const char *question,
                     const sot_params *p, sot_result *r) {
    char *prompt = sot_fill(p->plain_prompt ? p->plain_prompt : default_plain, question, NULL, 0, NULL);
    if (!prompt) return err_set(KITE_E_NOMEM, "out of memory");
    collector c;
    collector_init(&c);
    const double t0 = time_now_s();
    int rc = submit_prompt(e, m, p, ct, prompt, p->plain_tokens > 0 ? p->plain_tokens : 512, NULL, 0, &c);
    if (rc == KITE_OK) rc = collector_wait(e, p, &c);
    r->expand_s = time_now_s() - t0;
    if (rc == KITE_OK) {
        r->fallback = true;
        r->answer = trim_dup(c.text.s);
        r->n_gen_total += c.n_gen;
        if (!r->answer) rc = err_set(KITE_E_NOMEM, "out of memory");
    }
    collector_destroy(&c);
    free(prompt);
    return rc;
}

int sot_run(engine *e, const kite_model *m, const char *question, const sot_params *params, sot_result *out) {
    if (!e || !m || !question || !out) return err_set(KITE_E_ARG, "sot_run: engine, model, question and out are required");
    const sot_params p = params ? *params : sot_default_params();
    memset(out, 0, sizeof *out);
    const int32_t max_points = p.max_points > 0 && p.max_points < SOT_MAX_POINTS ? p.max_points : 10;
    int rc = KITE_OK;
    char *titles[SOT_MAX_POINTS] = {0};
    int32_t n_titles = 0;
    collector *pc = NULL;
    chat_tokenizer *ct = NULL;
    if (p.chat_family >= 0 && (rc = chat_tokenizer_new(m, &ct)) != KITE_OK) return rc;

    /* stage 1: the skeleton */
    const double t0 = time_now_s();
    if (p.skeleton_text) {
        out->skeleton = trim_dup(p.skeleton_text);
    } else {
        char *prompt = sot_fill(p.skeleton_prompt ? p.skeleton_prompt : default_skeleton, question, NULL, 0, NULL);
        if (!prompt) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto fail;
        }
        collector c;
        collector_init(&c);
        static const char *const stop[] = {"\n\n"};
        rc = submit_prompt(e, m, &p, ct, prompt, p.skeleton_tokens > 0 ? p.skeleton_tokens : 200, stop, 1, &c);
        if (rc == KITE_OK) rc = collector_wait(e, &p, &c);
        free(prompt);
        if (rc == KITE_OK) {
            /* the prompt ended in "1.": put it back in front of the continuation */
            strbuf sk = {0};
            sb_str(&sk, "1.");
            sb_str(&sk, c.text.s);
            out->skeleton = sk.oom ? NULL : trim_dup(sk.s);
            free(sk.s);
            out->n_gen_total += c.n_gen;
        }
        collector_destroy(&c);
        if (rc != KITE_OK) goto fail;
    }
    if (!out->skeleton) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    out->skeleton_s = time_now_s() - t0;
    n_titles = sot_parse_skeleton(out->skeleton, titles, max_points);
    if (n_titles < SOT_MIN_POINTS) {
        for (int32_t i = 0; i < n_titles; i++) free(titles[i]);
        n_titles = 0;
        rc = run_plain(e, m, ct, question, &p, out);
        chat_tokenizer_free(ct);
        if (rc != KITE_OK) sot_result_free(out);
        return rc;
    }

    /* stage 2: every point at once */
    pc = calloc((size_t)n_titles, sizeof *pc);
    out->points = calloc((size_t)n_titles, sizeof *out->points);
    if (!pc || !out->points) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    const double t1 = time_now_s();
    int32_t n_submitted = 0;
    static const char *const point_stop[] = {"\n\n"};
    for (int32_t i = 0; i < n_titles && rc == KITE_OK; i++) {
        char *prompt = sot_fill(p.point_prompt ? p.point_prompt : default_point, question, out->skeleton, i + 1,
                                titles[i]);
        if (!prompt) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            break;
        }
        collector_init(&pc[i]);
        n_submitted++;
        rc = submit_prompt(e, m, &p, ct, prompt, p.point_tokens > 0 ? p.point_tokens : 128, point_stop, 1,
                           &pc[i]);
        if (rc != KITE_OK) pc[i].done = true; /* never submitted: nothing to wait for */
        free(prompt);
    }
    for (int32_t i = 0; i < n_submitted; i++) {
        if (rc != KITE_OK) {
            engine_cancel(e, pc[i].id);
            continue;
        }
        rc = collector_wait(e, &p, &pc[i]);
    }
    out->expand_s = time_now_s() - t1;
    if (rc != KITE_OK) goto fail;

    strbuf ans = {0};
    for (int32_t i = 0; i < n_titles; i++) {
        sot_point *pt = &out->points[i];
        pt->title = titles[i];
        titles[i] = NULL;
        pt->text = trim_dup(pc[i].text.s);
        pt->n_gen = pc[i].n_gen;
        out->n_gen_total += pt->n_gen;
        out->n_points++;
        char num[16];
        snprintf(num, sizeof num, "%d. ", i + 1);
        sb_str(&ans, num);
        sb_str(&ans, pt->title);
        if (pt->text && pt->text[0]) {
            sb_str(&ans, " ");
            sb_str(&ans, pt->text);
        }
        sb_str(&ans, "\n");
    }
    out->answer = ans.oom ? NULL : ans.s;
    if (!out->answer) {
        free(ans.s);
        rc = err_set(KITE_E_NOMEM, "out of memory");
    }
fail:
    if (pc) {
        for (int32_t i = 0; i < n_titles; i++)
            if (pc[i].text.s) collector_destroy(&pc[i]); /* initialised */
        free(pc);
    }
    for (int32_t i = 0; i < n_titles; i++) free(titles[i]);
    chat_tokenizer_free(ct);
    if (rc != KITE_OK) sot_result_free(out);
    return rc;
}
