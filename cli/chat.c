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
    {.names = "-s, --system", .arg = "TEXT", .help = "system message", .kind = CLI_STR, CLI_AT(chat_opts, system)},
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
    .usage = "usage: kite chat [-m MODEL] [--chat-template NAME] [-s SYSTEM] [options]\n"
             "\n"
             "Chats with a model: each line of standard input is a user message, the\n"
             "reply is printed as it is generated; end with Ctrl-D (EOF).  Without -m,\n"
             "uses the bundled model (models/stories260K.gguf, not a chat model).\n",
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

int cmd_chat(int argc, char **argv) {
    chat_opts o = {.sp = kite_sampler_default_params()};
    int rc = cli_parse(&cli_spec_chat, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.seed_set) o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (!o.model) o.model = cli_default_model(argv[0]);

    int status = 1;
    kite_model *model = NULL;
    kite_ctx *ctx = NULL;
    kite_sampler *smp = NULL;
    kite_gen *gen = NULL;
    chat_tokenizer *ct = NULL;
    conversation conv = {0};
    kite_token *ids = NULL;   /* the formatted conversation's tokens */
    kite_token *cache = NULL; /* tokens in the KV cache, [n_cache] */
    char *reply = NULL, *line = NULL;
    size_t ids_cap = 0, line_cap = 0, n_cache = 0, reply_cap = 0;

    kite_model_params mp = config_model_params();
    if (kite_model_load(o.model, &mp, &model) != KITE_OK) goto api_err;
    kite_model_info info;
    kite_model_get_info(model, &info);
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = o.n_ctx ? (int32_t)o.n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    cp.n_threads = (int32_t)o.n_threads;
    if (kite_ctx_new(model, &cp, &ctx) != KITE_OK || kite_sampler_new(&o.sp, info.n_vocab, &smp) != KITE_OK ||
        kite_gen_new(model, &gen) != KITE_OK || chat_tokenizer_new(model, &ct) != KITE_OK)
        goto api_err;
    int family = CHAT_CHATML, source = CHAT_SRC_NO_TEMPLATE;
    if (chat_family_for_model_src(model, o.tmpl, &family, &source) != KITE_OK) goto api_err;
    const int32_t n_ctx = kite_ctx_n_ctx(ctx);
    /* room kept for a reply when deciding whether the conversation fits */
    const size_t reserve = (size_t)(o.n_predict < n_ctx / 4 ? o.n_predict : n_ctx / 4);
    const char *const *stops = chat_stop_strings(family);
    kite_token stop_ids[8]; /* stop strings that are single special tokens */
    int n_stop_ids = 0;
    for (int k = 0; stops[k] && n_stop_ids < 8; k++) {
        kite_token t = chat_tokenizer_special_id(ct, stops[k]);
        if (t >= 0) stop_ids[n_stop_ids++] = t;
    }
    if (!(cache = malloc((size_t)n_ctx * sizeof *cache))) goto oom;
    fprintf(stderr, "kite chat: %s, template %s (%s), context %d tokens, seed %" PRIu64 "\n", o.model,
            chat_family_name(family), chat_family_source_str(source), n_ctx, o.sp.seed);
    if (o.system && !conv_add(&conv, "system", o.system, strlen(o.system))) goto oom;

    const bool tty = isatty(STDIN_FILENO);
    size_t turn = 0;
    kite_gen_params gp = kite_gen_default_params(); /* BOS / EOG, stop tokens, -n, the context */
    gp.sampler = smp;
    gp.n_predict = o.n_predict;
    gp.n_ctx = n_ctx;
    gp.stop_tokens = stop_ids;
    gp.n_stop_tokens = n_stop_ids;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (!len) continue;
        if (!conv_add(&conv, "user", line, len)) goto oom;

        /* 1. the prompt, dropping old exchanges until it fits */
        size_t n_ids = 0;
        for (;;) {
            if ((rc = tokenize_conv(ct, family, &conv, &ids, &ids_cap, &n_ids)) != KITE_OK) {
                if (rc == KITE_E_NOMEM) goto oom;
                goto api_err;
            }
            if (n_ids + reserve <= (size_t)n_ctx) break;
            size_t s, e = oldest_exchange_end(&conv, &s);
            if (!e) break;
            conv_erase(&conv, s, e);
            fprintf(stderr, "kite chat: context full: dropped the oldest exchange (the conversation needs %zu "
                            "tokens plus %zu for the reply, the context holds %d)\n", n_ids, reserve, n_ctx);
        }
        if (n_ids >= (size_t)n_ctx) {
            fprintf(stderr, "kite chat: message not sent: the prompt needs %zu tokens, the context holds %d "
                            "(raise -c or send a shorter message)\n", n_ids, n_ctx);
            conv_erase(&conv, conv.n - 1, conv.n);
            continue;
        }

        /* 2. reuse the cached prefix, evaluate the rest (at least one token, for logits) */
        size_t keep = 0;
        while (!o.no_cache && keep < n_cache && keep < n_ids && cache[keep] == ids[keep]) keep++;
        if (keep == n_ids) keep--;
        if (kite_ctx_truncate(ctx, (int32_t)keep) != KITE_OK) goto api_err;
        n_cache = keep;
        if (kite_ctx_eval(ctx, ids + keep, (int32_t)(n_ids - keep), false) != KITE_OK) goto api_err;
        for (size_t i = keep; i < n_ids; i++) {
            cache[n_cache++] = ids[i];
            kite_sampler_accept(smp, ids[i]);
        }

        /* 3. generate */
        size_t r_len = 0, shown = 0;
        if (!reply_append(&reply, &r_len, &reply_cap, "", 0)) goto oom;
        bool at_stop_string = false, ctx_full = false;
        const char *why = "length";
        int64_t n_gen = 0;
        double t0 = time_now_s();
        if (kite_gen_begin(gen, &gp, (int32_t)n_cache) != KITE_OK) goto api_err;
        while (kite_gen_stopped(gen) == KITE_STOP_NONE) {
            kite_gen_step st;
            if (kite_gen_sample(gen, kite_ctx_logits(ctx, -1), &st) != KITE_OK) goto api_err;
            if (!st.output) { /* a generated BOS is reported as "eog" here */
                why = st.stop == KITE_STOP_TOKEN ? "stop token" : "eog";
                break;
            }
            n_gen = st.n_gen;
            const char *pc = st.text;
            size_t np = st.len;
            if (!r_len) /* the reply starts at its first visible character (SentencePiece's leading space) */
                while (np > 0 && (*pc == ' ' || *pc == '\n')) pc++, np--;
            if (!reply_append(&reply, &r_len, &reply_cap, pc, np)) goto oom;
            bool hit = false;
            size_t safe = chat_stop_scan(reply + shown, r_len - shown, stops, &hit) + shown;
            fwrite(reply + shown, 1, safe - shown, stdout);
            fflush(stdout);
            shown = safe;
            if (hit) {
                r_len = shown; /* the reply ends before the stop string */
                reply[r_len] = '\0';
                at_stop_string = true;
                why = "stop string";
                break;
            }
            if (st.stop != KITE_STOP_NONE) { /* the last token is not evaluated */
                why = kite_stop_name(st.stop);
                ctx_full = st.stop == KITE_STOP_CONTEXT;
                break;
            }
            if (kite_ctx_eval(ctx, &st.token, 1, false) != KITE_OK) goto api_err;
            cache[n_cache++] = st.token;
        }
        const char *tail;
        size_t n_tail;
        if (kite_gen_flush(gen, &tail, &n_tail) != KITE_OK) goto api_err; /* also resets the detokenizer */
        if (!at_stop_string) { /* show what was held back */
            if (n_tail > 0 && !reply_append(&reply, &r_len, &reply_cap, tail, n_tail)) goto oom;
            fwrite(reply + shown, 1, r_len - shown, stdout);
        }
        fputc('\n', stdout);
        fflush(stdout);
        if (o.verbose) {
            double dt_s = time_now_s() - t0;
            fprintf(stderr, "kite chat: turn %zu: prompt %zu tokens (%zu reused from the cache, %zu evaluated), "
                            "reply %" PRId64 " tokens (%.1f tok/s), stop: %s\n", ++turn, n_ids, keep, n_ids - keep,
                    n_gen, dt_s > 0 ? (double)n_gen / dt_s : 0.0, why);
        }
        if (ctx_full)
            fprintf(stderr, "kite chat: context full (%d tokens): reply cut; older exchanges will be dropped "
                            "from the next prompt\n", n_ctx);
        if (!conv_add(&conv, "assistant", reply, r_len)) goto oom;
    }
    status = 0;
    goto done;
oom:
    fprintf(stderr, "kite chat: out of memory\n");
    goto done;
api_err:
    fprintf(stderr, "kite chat: %s\n", kite_last_error());
done:
    free(line);
    free(reply);
    free(ids);
    free(cache);
    conv_free(&conv);
    chat_tokenizer_free(ct);
    kite_gen_free(gen);
    kite_sampler_free(smp);
    kite_ctx_free(ctx);
    kite_model_free(model);
    return status;
}
