/*
 * chat.c - `kite chat`: an interactive chat in the terminal.
 *
 * Flow: load model -> context -> chat family (--chat-template, else detected
 * from tokenizer.chat_template, else chatml) -> for each line of standard
 * input (a user message; empty lines are skipped, EOF ends the chat):
 *   1. format the whole conversation with the generation prompt (src/chat)
 *      and tokenize it with special tokens matched (chat_tokenize);
 *   2. keep the longest common prefix with the tokens already in the KV
 *      cache, drop the rest (kite_ctx_truncate) and evaluate only the new
 *      tokens: normally just the new turn, since the previous reply's tokens
 *      are still cached; any change earlier in the text (a template that
 *      rewrites history, a reply that re-tokenizes differently) falls back to
 *      re-evaluating from the first differing token;
 *   3. sample and stream the reply (whole UTF-8 characters, stop strings
 *      held back) until -n tokens, an end-of-generation token, a token or
 *      text stop string of the family, or a full context.
 * When the conversation no longer fits (the prompt plus room for a reply),
 * the oldest exchanges are dropped (the system message is kept) with a note
 * on stderr; a single message that alone is too long is refused.
 *
 * Output: replies on stdout, one per user line, each ending with a newline;
 * a "> " prompt only when stdin is a terminal; notes on stderr.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat_template.h"
#include "chat/chat_tokenize.h"
#include "cli.h"
#include "config/config.h"
#include "core/timing.h"
#include "kite.h"

typedef struct chat_opts {
    const char *model;
    const char *tmpl;
    const char *system;
    int64_t n_predict;
    int64_t n_ctx;
    int64_t n_threads;
    kite_sampler_params sp;
    bool seed_set;
    bool verbose;
    bool no_cache;
    uint64_t mem_budget; /* --mem-budget */
} chat_opts;

static int check_template(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    (void)o, (void)state, (void)n;
    if (chat_family_from_name(vals[0]) != CHAT_UNKNOWN) return 1;
    cli_usage_error(cmd, "%s: unknown template '%s' (expected one of %s)", flag, vals[0], chat_family_names());
    return -1;
}

static const cli_opt chat_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "GGUF model", .kind = CLI_STR, CLI_AT(chat_opts, model)},
    {.names = "--chat-template", .arg = "NAME", .help = "llama2, llama3, chatml, mistral, zephyr or gemma",
     .kind = CLI_STR, CLI_AT(chat_opts, tmpl), .fn = check_template, .example = "chatml",
     .def_doc = "detected from the model, else chatml"},
    CLI_OPT_MEM_BUDGET(chat_opts, mem_budget),
    CLI_OPT_F16_COMPUTE,
    {.names = "--system, -sys, --system-prompt", .arg = "TEXT", .help = "system message", .kind = CLI_STR,
     CLI_AT(chat_opts, system)},
    {.names = "-n, --n-predict", .arg = "N", .help = "longest reply in tokens", .kind = CLI_INT,
     CLI_AT(chat_opts, n_predict), .min = 1, .max = 1 << 24, .def = "256"},
    {.names = "-c, --ctx-size", .arg = "N", .help = "context length", .kind = CLI_INT, CLI_AT(chat_opts, n_ctx),
     .min = 0, .max = 1 << 20, .def_doc = "the model's, at most 4096"},
    {.names = "-t, --threads", .arg = "N", .help = "threads", .kind = CLI_INT, CLI_AT(chat_opts, n_threads),
     .min = 0, .max = 1024, .def_doc = "all online CPUs"},
    CLI_OPTS_SAMPLER(chat_opts, sp, seed_set),
    {.names = "-v, --verbose",
     .help = "after each reply, a line on stderr: prompt tokens (reused\n"
             "from the KV cache / evaluated), reply tokens, stop reason",
     .kind = CLI_FLAG, CLI_AT(chat_opts, verbose)},
    {.names = "--no-cache", .help = "evaluate the whole conversation every turn (for testing)", .kind = CLI_FLAG,
     CLI_AT(chat_opts, no_cache)},
};

const cli_spec cli_spec_chat = {
    .cmd = "chat",
    .usage = "usage: kite chat [-m MODEL] [--chat-template NAME] [--system TEXT] [options]\n"
             "\n"
             "Chats with a model: each line of standard input is a user message, the\n"
             "reply is printed as it is generated; end with Ctrl-D (EOF).  Without -m,\n"
             "uses the bundled model (models/stories260K.gguf, not a chat model).\n",
    .epilog = "-s is the seed, as in llama-cli and every kite command; before Dec 2026 it was the system\n"
              "message, which is --system (or llama-cli's -sys) now.\n",
    CLI_TABLE(chat_opts_table, chat_opts),
};

/* The conversation: messages with owned copies of their text. */
typedef struct conversation {
    chat_msg *msgs;
    size_t n, cap;
} conversation;

static bool conv_add(conversation *c, const char *role, const char *text, size_t len) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        chat_msg *p = realloc(c->msgs, cap * sizeof *p);
        if (!p) return false;
        c->msgs = p;
        c->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s) return false;
    memcpy(s, text, len);
    s[len] = '\0';
    c->msgs[c->n++] = (chat_msg){role, s};
    return true;
}

/* Removes msgs[from .. to). */
static void conv_erase(conversation *c, size_t from, size_t to) {
    if (from == to) return;
    for (size_t i = from; i < to; i++) free((char *)c->msgs[i].content);
    memmove(c->msgs + from, c->msgs + to, (c->n - to) * sizeof *c->msgs);
    c->n -= to - from;
}

static void conv_free(conversation *c) {
    conv_erase(c, 0, c->n);
    free(c->msgs);
}

/* Appends s[0..n) to the malloc'd reply *buf (length *len, capacity *cap),
 * keeping it NUL-terminated; false on OOM. */
static bool reply_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (*len + n + 1 > c) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

/* The growable token list of the prompt; *n tokens, capacity *cap. */
static int tokenize_conv(const chat_tokenizer *ct, int family, const conversation *c, kite_token **ids, size_t *cap,
                         size_t *n) {
    char *text = NULL;
    int rc = chat_apply(family, c->msgs, c->n, true, &text);
    if (rc != KITE_OK) return rc;
    size_t len = strlen(text);
    rc = chat_tokenize(ct, text, len, true, *ids, *cap, n);
    if (rc == KITE_E_RANGE) {
        kite_token *p = realloc(*ids, (*n + 1) * sizeof *p);
        if (!p) {
            free(text);
            return KITE_E_NOMEM;
        }
        *ids = p;
        *cap = *n + 1;
        rc = chat_tokenize(ct, text, len, true, *ids, *cap, n);
    }
    free(text);
    return rc;
}

/* Index just past the oldest user/assistant exchange after the leading
 * system messages (the next user message), or 0 if there is none besides
 * the last user message. */
static size_t oldest_exchange_end(const conversation *c, size_t *start) {
    size_t s = 0;
    while (s < c->n && !strcmp(c->msgs[s].role, "system")) s++;
    size_t e = s + 1;
    while (e < c->n && strcmp(c->msgs[e].role, "user") != 0) e++;
    *start = s;
    return e < c->n ? e : 0; /* the last user message must stay */
}

/* One `kite chat`: the handles and buffers its stages share. */
typedef struct chat_session {
    chat_opts *o;
    kite_model *model;
    kite_ctx *ctx;
    kite_sampler *smp;
    kite_gen *gen;
    chat_tokenizer *ct;
    int family;                /* enum chat_family */
    int32_t n_ctx;
    size_t reserve;            /* room kept for a reply when deciding whether the conversation fits */
    const char *const *stops;  /* the template's stop strings */
    kite_token stop_ids[8];    /* stop strings that are single special tokens */
    kite_gen_params gp;        /* BOS / EOG, stop tokens, -n, the context */
    conversation conv;
    kite_token *ids;           /* the formatted conversation's tokens, [n_ids] */
    size_t n_ids, ids_cap;
    kite_token *cache;         /* tokens in the KV cache, [n_cache] */
    size_t n_cache, keep;      /* keep: prompt tokens reused from the cache this turn */
    char *reply;
    size_t reply_cap;
    size_t turn;
} chat_session;

/* What a stage failed on: the library (its last error) or memory. */
enum { CHAT_OK = 0, CHAT_E_API = 1, CHAT_E_NOMEM = 2 };

/* Loads the model, its context, sampler, generator and chat tokenizer, picks
 * the template and prints the banner line. */
static int chat_open(chat_session *s) {
    chat_opts *o = s->o;
    kite_model_params mp = config_model_params();
    mp.mem_budget = o->mem_budget;
    if (kite_model_load(o->model, &mp, &s->model) != KITE_OK) return CHAT_E_API;
    kite_model_info info;
    kite_model_get_info(s->model, &info);
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = o->n_ctx ? (int32_t)o->n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    cli_warn_ctx("chat", o->n_ctx, info.n_ctx_train);
    cp.n_threads = (int32_t)o->n_threads;
    if (kite_ctx_new(s->model, &cp, &s->ctx) != KITE_OK || kite_sampler_new(&o->sp, info.n_vocab, &s->smp) != KITE_OK ||
        kite_gen_new(s->model, &s->gen) != KITE_OK || chat_tokenizer_new(s->model, &s->ct) != KITE_OK)
        return CHAT_E_API;
    int source = CHAT_SRC_NO_TEMPLATE;
    s->family = CHAT_CHATML;
    if (chat_family_for_model_src(s->model, o->tmpl, &s->family, &source) != KITE_OK) return CHAT_E_API;
    s->n_ctx = kite_ctx_n_ctx(s->ctx);
    s->reserve = (size_t)(o->n_predict < s->n_ctx / 4 ? o->n_predict : s->n_ctx / 4);
    s->stops = chat_stop_strings(s->family);
    int n_stop_ids = 0;
    for (int k = 0; s->stops[k] && n_stop_ids < 8; k++) {
        kite_token t = chat_tokenizer_special_id(s->ct, s->stops[k]);
        if (t >= 0) s->stop_ids[n_stop_ids++] = t;
    }
    if (!(s->cache = malloc((size_t)s->n_ctx * sizeof *s->cache))) return CHAT_E_NOMEM;
    fprintf(stderr, "kite chat: %s, template %s (%s), context %d tokens, seed %" PRIu64 "\n", o->model,
            chat_family_name(s->family), chat_family_source_str(source), s->n_ctx, o->sp.seed);
    if (o->system && !conv_add(&s->conv, "system", o->system, strlen(o->system))) return CHAT_E_NOMEM;
    s->gp = kite_gen_default_params();
    s->gp.sampler = s->smp;
    s->gp.n_predict = o->n_predict;
    s->gp.n_ctx = s->n_ctx;
    s->gp.stop_tokens = s->stop_ids;
    s->gp.n_stop_tokens = n_stop_ids;
    return CHAT_OK;
}

/* 1. The prompt of the conversation, dropping old exchanges until it fits.
 * *fits is false (and the user's message taken back) when even the last
 * message alone does not fit. */
static int chat_fit(chat_session *s, bool *fits) {
    for (;;) {
        int rc = tokenize_conv(s->ct, s->family, &s->conv, &s->ids, &s->ids_cap, &s->n_ids);
        if (rc != KITE_OK) return rc == KITE_E_NOMEM ? CHAT_E_NOMEM : CHAT_E_API;
        if (s->n_ids + s->reserve <= (size_t)s->n_ctx) break;
        size_t from, to = oldest_exchange_end(&s->conv, &from);
        if (!to) break;
        conv_erase(&s->conv, from, to);
        fprintf(stderr, "kite chat: context full: dropped the oldest exchange (the conversation needs %zu "
                        "tokens plus %zu for the reply, the context holds %d)\n", s->n_ids, s->reserve, s->n_ctx);
    }
    *fits = s->n_ids < (size_t)s->n_ctx;
    if (!*fits) {
        fprintf(stderr, "kite chat: message not sent: the prompt needs %zu tokens, the context holds %d "
                        "(raise -c or send a shorter message)\n", s->n_ids, s->n_ctx);
        conv_erase(&s->conv, s->conv.n - 1, s->conv.n);
    }
    return CHAT_OK;
}

/* 2. Reuses the cached prefix and evaluates the rest (at least one token,
 * for logits). */
static int chat_prefill(chat_session *s) {
    size_t keep = 0;
    while (!s->o->no_cache && keep < s->n_cache && keep < s->n_ids && s->cache[keep] == s->ids[keep]) keep++;
    if (keep == s->n_ids) keep--;
    size_t from = keep; /* first token evaluated */
    int rc = kite_ctx_truncate(s->ctx, (int32_t)keep);
    if (rc == KITE_E_STATE) { /* a sliding-window ring no longer holds that prefix: recompute it */
        from = 0;
        rc = kite_ctx_truncate(s->ctx, 0);
    }
    if (rc != KITE_OK) return CHAT_E_API;
    s->n_cache = keep;
    s->keep = from; /* reused from the cache (the statistics line) */
    if (kite_ctx_eval(s->ctx, s->ids + from, (int32_t)(s->n_ids - from), false) != KITE_OK) return CHAT_E_API;
    for (size_t i = keep; i < s->n_ids; i++) {
        s->cache[s->n_cache++] = s->ids[i];
        kite_sampler_accept(s->smp, s->ids[i]);
    }
    return CHAT_OK;
}

/* 3. Generates the reply under kite_gen's rules and the template's stop
 * strings, streaming what is safe to show, and adds it to the conversation. */
static int chat_reply(chat_session *s) {
    size_t r_len = 0, shown = 0;
    if (!reply_append(&s->reply, &r_len, &s->reply_cap, "", 0)) return CHAT_E_NOMEM;
    bool at_stop_string = false, ctx_full = false;
    const char *why = "length";
    int64_t n_gen = 0;
    const double t0 = time_now_s();
    if (kite_gen_begin(s->gen, &s->gp, (int32_t)s->n_cache) != KITE_OK) return CHAT_E_API;
    while (kite_gen_stopped(s->gen) == KITE_STOP_NONE) {
        kite_gen_step st;
        if (kite_gen_sample(s->gen, kite_ctx_logits(s->ctx, -1), &st) != KITE_OK) return CHAT_E_API;
        if (!st.output) { /* a generated BOS is reported as "eog" here */
            why = st.stop == KITE_STOP_TOKEN ? "stop token" : "eog";
            break;
        }
        n_gen = st.n_gen;
        const char *pc = st.text;
        size_t np = st.len;
        if (!r_len) /* the reply starts at its first visible character (SentencePiece's leading space) */
            while (np > 0 && (*pc == ' ' || *pc == '\n')) pc++, np--;
        if (!reply_append(&s->reply, &r_len, &s->reply_cap, pc, np)) return CHAT_E_NOMEM;
        bool hit = false;
        size_t safe = chat_stop_scan(s->reply + shown, r_len - shown, s->stops, &hit) + shown;
        fwrite(s->reply + shown, 1, safe - shown, stdout);
        fflush(stdout);
        shown = safe;
        if (hit) {
            r_len = shown; /* the reply ends before the stop string */
            s->reply[r_len] = '\0';
            at_stop_string = true;
            why = "stop string";
            break;
        }
        if (st.stop != KITE_STOP_NONE) { /* the last token is not evaluated */
            why = kite_stop_name(st.stop);
            ctx_full = st.stop == KITE_STOP_CONTEXT;
            break;
        }
        if (kite_ctx_eval(s->ctx, &st.token, 1, false) != KITE_OK) return CHAT_E_API;
        s->cache[s->n_cache++] = st.token;
    }
    const char *tail;
    size_t n_tail;
    if (kite_gen_flush(s->gen, &tail, &n_tail) != KITE_OK) return CHAT_E_API; /* also resets the detokenizer */
    if (!at_stop_string) { /* show what was held back */
        if (n_tail > 0 && !reply_append(&s->reply, &r_len, &s->reply_cap, tail, n_tail)) return CHAT_E_NOMEM;
        fwrite(s->reply + shown, 1, r_len - shown, stdout);
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (s->o->verbose) {
        const double dt_s = time_now_s() - t0;
        fprintf(stderr, "kite chat: turn %zu: prompt %zu tokens (%zu reused from the cache, %zu evaluated), "
                        "reply %" PRId64 " tokens (%.1f tok/s), stop: %s\n", ++s->turn, s->n_ids, s->keep,
                s->n_ids - s->keep, n_gen, dt_s > 0 ? (double)n_gen / dt_s : 0.0, why);
    }
    if (ctx_full)
        fprintf(stderr, "kite chat: context full (%d tokens): reply cut; older exchanges will be dropped "
                        "from the next prompt\n", s->n_ctx);
    return conv_add(&s->conv, "assistant", s->reply, r_len) ? CHAT_OK : CHAT_E_NOMEM;
}

static void chat_close(chat_session *s) {
    free(s->reply);
    free(s->ids);
    free(s->cache);
    conv_free(&s->conv);
    chat_tokenizer_free(s->ct);
    kite_gen_free(s->gen);
    kite_sampler_free(s->smp);
    kite_ctx_free(s->ctx);
    kite_model_free(s->model);
}

int cmd_chat(int argc, char **argv) {
    chat_opts o = {.sp = kite_sampler_default_params()};
    int rc = cli_parse(&cli_spec_chat, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.seed_set) o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (!o.model) o.model = cli_default_model(argv[0]);

    chat_session s = {.o = &o};
    char *line = NULL;
    size_t line_cap = 0;
    const bool tty = isatty(STDIN_FILENO);
    rc = chat_open(&s);
    while (rc == CHAT_OK) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (!len) continue;
        if (!conv_add(&s.conv, "user", line, len)) {
            rc = CHAT_E_NOMEM;
            break;
        }
        bool fits = false;
        if ((rc = chat_fit(&s, &fits)) != CHAT_OK || !fits) continue;
        if ((rc = chat_prefill(&s)) == CHAT_OK) rc = chat_reply(&s);
    }
    if (rc == CHAT_E_NOMEM) fprintf(stderr, "kite chat: out of memory\n");
    if (rc == CHAT_E_API) fprintf(stderr, "kite chat: %s\n", kite_last_error());
    free(line);
    chat_close(&s);
    return rc == CHAT_OK ? 0 : 1;
}
