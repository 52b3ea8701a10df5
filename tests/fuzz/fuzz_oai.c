/*
 * fuzz_oai.c - libFuzzer target for the server's request layer: OpenAI
 * request parsing and validation (tools/http/oai.c) and the gate's
 * request-head checks (tools/http/http_check.c, http_head_check) and the
 * gate's scan of a chunked body (http_chunked_scan).
 *
 * Input: the first byte picks the parser (low two bits: 0 completions body,
 * 1 chat body, 2 request head, 3 head then body split at the blank line);
 * the rest is the untrusted bytes.
 * Invariants:
 *   1. oai_request_parse either succeeds with a request the generation code
 *      can use - chat: 1 or more messages with role and content strings;
 *      completions: exactly one of a text prompt or 1 or more token ids in
 *      [0, 2^31); at most SERVER_MAX_STOP non-NULL stop strings;
 *      max_tokens -1 or >= 1; temperature in [0, 100]; top_p, min_p in
 *      [0, 1]; t_max_predict_ms >= 0; n in [1, SERVER_MAX_N];
 *      top_logprobs in [0, 20] and 0 without logprobs; logit_bias entries
 *      with ids >= 0 and biases in [-100, 100] - or fails with a 400 whose JSON error
 *      body (made valid UTF-8 as every response is) parses, is valid UTF-8
 *      and has a string message, type and the param and code members;
 *   2. oai_request_free frees everything (LeakSanitizer) after both;
 *   4. (tools, issue 24) a parsed chat request renders with chat_apply_tools
 *      in every family (KITE_OK); its tools give a forcing grammar or a
 *      status (never a crash); tool_calls_parse on every message content,
 *      in every family, finds only calls with a non-empty name and
 *      arguments that parse as a JSON object (the output parser's reach);
 *   3. http_head_check returns 0 or one of 400, 414, 431, 501, 505, with a
 *      NUL-terminated message; 0 only for a head whose request line ends
 *      in " HTTP/1.0" or " HTTP/1.1"; http_head_end never exceeds the size.
 * Seeds: tests/fuzz/corpus/fuzz_oai/.  test_http_check.c includes this
 * file to replay the corpus as a regression test.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "http/http_check.h"
#include "http/server_internal.h"
#include "http/tool_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_OAI_REQUIRE(cond)                                                                  \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz_oai: invariant failed: %s (line %d)\n", #cond, __LINE__);    \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

static void fuzz_oai_error_body(const oai_error *e) {
    FUZZ_OAI_REQUIRE(e->status >= 400 && e->status < 600);
    char *json = oai_error_json(e);
    FUZZ_OAI_REQUIRE(json != NULL);
    size_t n = 0;
    char *fixed = http_utf8_sanitize(json, strlen(json), &n); /* what srv_json_utf8 sends */
    free(json);
    FUZZ_OAI_REQUIRE(fixed != NULL && http_utf8_valid(fixed, n));
    cJSON *root = cJSON_ParseWithLength(fixed, n);
    FUZZ_OAI_REQUIRE(root != NULL);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "error");
    FUZZ_OAI_REQUIRE(cJSON_IsObject(o));
    FUZZ_OAI_REQUIRE(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "message")));
    FUZZ_OAI_REQUIRE(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "type")));
    FUZZ_OAI_REQUIRE(cJSON_GetObjectItemCaseSensitive(o, "param") != NULL);
    FUZZ_OAI_REQUIRE(cJSON_GetObjectItemCaseSensitive(o, "code") != NULL);
    cJSON_Delete(root);
    free(fixed);
}

/* Invariant 4: the tool paths of a parsed chat request. */
static void fuzz_oai_tools(const oai_request *r) {
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++) {
        char *out = NULL;
        int st = chat_apply_tools(f, r->msgs, r->msg_tools, r->n_msgs, r->tools, r->n_tools, true, &out);
        FUZZ_OAI_REQUIRE(st == KITE_OK ? out != NULL : st == KITE_E_NOMEM);
        free(out);
    }
    if (r->n_tools) {
        char *g = NULL;
        if (tool_grammar_gbnf(CHAT_CHATML, r->tools, r->n_tools, r->tool_named, r->parallel_tool_calls, &g) == KITE_OK)
            FUZZ_OAI_REQUIRE(g != NULL);
        free(g);
    }
    for (size_t i = 0; i < r->n_msgs; i++)
        for (int f = 0; f < CHAT_FAMILY_COUNT; f++) {
            tool_parse p;
            const char *c = r->msgs[i].content;
            if (!tool_calls_parse(f, c, strlen(c), r->tools, r->n_tools, &p)) {
                FUZZ_OAI_REQUIRE(p.n_calls == 0 && p.calls == NULL);
                continue;
            }
            for (size_t k = 0; k < p.n_calls; k++) {
                FUZZ_OAI_REQUIRE(p.calls[k].name && p.calls[k].name[0]);
                cJSON *a = cJSON_Parse(p.calls[k].arguments);
                FUZZ_OAI_REQUIRE(cJSON_IsObject(a));
                cJSON_Delete(a);
            }
            tool_parse_free(&p);
        }
}

static void fuzz_oai_body(const char *b, size_t n, bool chat) {
    oai_request r;
    oai_error e;
    memset(&e, 0, sizeof e);
    if (oai_request_parse(b, n, chat, &r, &e)) {
        FUZZ_OAI_REQUIRE(r.chat == chat);
        if (chat) {
            FUZZ_OAI_REQUIRE(r.n_msgs >= 1 && r.msgs != NULL);
            for (size_t i = 0; i < r.n_msgs; i++) FUZZ_OAI_REQUIRE(r.msgs[i].role && r.msgs[i].content);
            FUZZ_OAI_REQUIRE(r.tool_choice == OAI_TOOLS_OFF || r.n_tools >= 1);
            FUZZ_OAI_REQUIRE(r.tool_named < (int32_t)r.n_tools);
            fuzz_oai_tools(&r);
        } else {
            FUZZ_OAI_REQUIRE((r.prompt_text != NULL) != (r.prompt_ids != NULL));
            if (r.prompt_ids) {
                FUZZ_OAI_REQUIRE(r.n_prompt_ids >= 1);
                for (int32_t i = 0; i < r.n_prompt_ids; i++) FUZZ_OAI_REQUIRE(r.prompt_ids[i] >= 0);
            }
        }
        FUZZ_OAI_REQUIRE(r.n_stop >= 0 && r.n_stop <= SERVER_MAX_STOP);
        for (int32_t i = 0; i < r.n_stop; i++) FUZZ_OAI_REQUIRE(r.stop[i] != NULL);
        FUZZ_OAI_REQUIRE(r.max_tokens == -1 || r.max_tokens >= 1);
        FUZZ_OAI_REQUIRE(r.sampling.temperature >= 0.0f && r.sampling.temperature <= 100.0f);
        FUZZ_OAI_REQUIRE(r.sampling.top_p >= 0.0f && r.sampling.top_p <= 1.0f);
        FUZZ_OAI_REQUIRE(r.sampling.min_p >= 0.0f && r.sampling.min_p <= 1.0f);
        FUZZ_OAI_REQUIRE(r.t_max_predict_ms >= 0);
        FUZZ_OAI_REQUIRE(r.n >= 1 && r.n <= SERVER_MAX_N);
        FUZZ_OAI_REQUIRE(r.top_logprobs >= 0 && r.top_logprobs <= KITE_MAX_TOP_LOGPROBS);
        FUZZ_OAI_REQUIRE(r.logprobs || r.top_logprobs == 0);
        FUZZ_OAI_REQUIRE(r.n_logit_bias >= 0 && r.n_logit_bias <= SERVER_MAX_LOGIT_BIAS);
        FUZZ_OAI_REQUIRE(r.n_logit_bias == 0 || r.logit_bias != NULL);
        for (int32_t i = 0; i < r.n_logit_bias; i++)
            FUZZ_OAI_REQUIRE(r.logit_bias[i].token >= 0 && r.logit_bias[i].bias >= -100.0f &&
                             r.logit_bias[i].bias <= 100.0f);
    } else {
        FUZZ_OAI_REQUIRE(e.status == 400);
        fuzz_oai_error_body(&e);
    }
    oai_request_free(&r);
}

static size_t fuzz_oai_head(const char *h, size_t n) {
    size_t end = http_head_end(h, n);
    FUZZ_OAI_REQUIRE(end <= n);
    size_t len = end ? end : n;
    char msg[160];
    msg[0] = 'x';
    int st = http_head_check(h, len, 64, 256, msg, sizeof msg);
    FUZZ_OAI_REQUIRE(st == 0 || st == 400 || st == 414 || st == 431 || st == 501 || st == 505);
    if (st) {
        FUZZ_OAI_REQUIRE(memchr(msg, '\0', sizeof msg) != NULL && msg[0] != '\0');
    } else {
        /* the request line (after blank lines) ends in HTTP/1.0 or HTTP/1.1 */
        size_t i = 0;
        while (i < len && (h[i] == '\r' || h[i] == '\n')) i++;
        const char *nl = memchr(h + i, '\n', len - i);
        FUZZ_OAI_REQUIRE(nl != NULL);
        size_t e = (size_t)(nl - h);
        if (e > i && h[e - 1] == '\r') e--;
        FUZZ_OAI_REQUIRE(e - i >= 9 && !memcmp(h + e - 9, " HTTP/1.", 8) && (h[e - 1] == '0' || h[e - 1] == '1'));
    }
    if (end && http_head_chunked(h, end)) { /* the gate's scan of a chunked body */
        size_t used = n + 1;
        char cmsg[160];
        cmsg[0] = 'x';
        int r = http_chunked_scan(h + end, n - end, &used, cmsg, sizeof cmsg);
        FUZZ_OAI_REQUIRE(r == -1 || r == 0 || r == 1);
        FUZZ_OAI_REQUIRE(r == 1 ? used >= 3 && used <= n - end : used == 0);
        if (r < 0) FUZZ_OAI_REQUIRE(memchr(cmsg, '\0', sizeof cmsg) != NULL && cmsg[0] != '\0');
        if (r == 1) { /* a complete body ends with a line end, and a prefix of it is never complete */
            FUZZ_OAI_REQUIRE(h[end + used - 1] == '\n');
            size_t u2 = 0;
            FUZZ_OAI_REQUIRE(http_chunked_scan(h + end, used - 1, &u2, cmsg, sizeof cmsg) == 0);
        }
    }
    return end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] & 3) {
    case 0: fuzz_oai_body(b, n, false); break;
    case 1: fuzz_oai_body(b, n, true); break;
    case 2: fuzz_oai_head(b, n); break;
    default: {
        size_t end = fuzz_oai_head(b, n);
        if (end) fuzz_oai_body(b + end, n - end, (data[0] & 4) != 0);
        break;
    }
    }
    return 0;
}
