/*
 * test_chat_tools.c - tool calling (issue 24 part 4): chat_apply_tools per
 * family (src/chat/chat_tools.c), the forcing grammar and the output parser
 * of tools/http/tool_calls.c.
 *
 * Reference outputs.  The HERMES expectation follows the tool branches of
 * tests/data/chat/qwen3.jinja (Qwen3's template) line by line; LLAMA3 Meta's
 * Llama 3.1 Instruct template (tools in the first user message, tojson
 * indent 4, date_string left at its default "26 Jul 2024"); MISTRAL
 * Mistral-7B-Instruct-v0.3's template.  Arguments are written as the client
 * sent them (the Jinja templates' `tojson` of a string would quote them;
 * llama.cpp and vLLM also pass them as objects).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "chat/chat_tools.h"
#include "core/textbuf.h"
#include "grammar/grammar.h"
#include "harness.h"
#include "http/tool_calls.h"
#include "kite.h"

static const chat_tool tools[] = {
    {"get_weather", "Get weather",
     "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}"},
    {"add", NULL,
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"enum\":[1,2]}},\"required\":[\"a\"],"
     "\"additionalProperties\":false}"},
};

static const chat_tool_call calls[] = {
    {"call_1", "get_weather", "{\"city\": \"Paris\"}"},
    {"call_2", "get_weather", "{\"city\": \"Rome\"}"},
};

static const chat_msg conv[] = {
    {"system", "S"}, {"user", "Weather?"}, {"assistant", ""}, {"tool", "sunny"}, {"tool", "rain"},
};
static const chat_msg_tools conv_ext[] = {
    {0}, {0}, {calls, 2, NULL}, {NULL, 0, "call_1"}, {NULL, 0, "call_2"},
};

static char *render(int family, size_t n_tools) {
    char *out = NULL;
    int st = chat_apply_tools(family, conv, conv_ext, 5, tools, n_tools, true, &out);
    CHECK_MSG(st == KITE_OK, "chat_apply_tools(%s): %s", chat_family_name(family), kite_last_error());
    return out;
}

#define TOOL0_SPACED                                                                                                 \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get weather\", "          \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "     \
    "[\"city\"]}}}"

TEST(test_respace) {
    char *s = chat_json_respace("{\"a\":[1,{}],\"b\":\"x, y: \\\"z\\\"\",\"c\":[ ]}", -1);
    CHECK_STR_EQ(s, "{\"a\": [1, {}], \"b\": \"x, y: \\\"z\\\"\", \"c\": []}");
    free(s);
    s = chat_json_respace("{\"a\":[1,2],\"b\":{}}", 2);
    CHECK_STR_EQ(s, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
    free(s);
    s = chat_json_respace("\"unterminated", -1); /* not JSON: no crash, copied */
    CHECK_STR_EQ(s, "\"unterminated");
    free(s);
}

TEST(test_render_hermes) {
    char *out = render(CHAT_CHATML, 1);
    const char *want =
        "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" TOOL0_SPACED
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n";
    CHECK_STR_EQ(out, want);
    free(out);
    /* no tools offered: the history is still rendered, the system message as given */
    out = render(CHAT_CHATML, 0);
    CHECK(out && !strstr(out, "<tools>") && strstr(out, "<|im_start|>system\nS<|im_end|>") &&
          strstr(out, "<tool_response>\nsunny"));
    free(out);
}

TEST(test_render_llama3) {
    char *out = render(CHAT_LLAMA3, 1);
    const char *want =
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a "
        "function call with its proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
        "variables.\n\n"
        "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
        "        \"description\": \"Get weather\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
        "            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n"
        "                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n"
        "        }\n    }\n}\n\nWeather?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": "
        "\"Paris\"}}\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\nrain<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK_STR_EQ(out, want);
    free(out);
}

TEST(test_render_mistral) {
    char *out = render(CHAT_MISTRAL, 1);
    const char *want =
        "[AVAILABLE_TOOLS] [" TOOL0_SPACED "][/AVAILABLE_TOOLS][INST] S\n\nWeather?[/INST]"
        "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"call_1\"}, "
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": \"call_2\"}]</s>"
        "[TOOL_RESULTS] {\"content\": sunny, \"call_id\": \"call_1\"}[/TOOL_RESULTS]"
        "[TOOL_RESULTS] {\"content\": rain, \"call_id\": \"call_2\"}[/TOOL_RESULTS]";
    CHECK_STR_EQ(out, want);
    free(out);
}

TEST(test_render_generic) {
    int fams[] = {CHAT_GEMMA, CHAT_LLAMA2, CHAT_ZEPHYR, CHAT_PHI3};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        CHECK_EQ_INT(chat_tool_format(fams[f]), CHAT_TOOLS_GENERIC);
        char *out = render(fams[f], 2);
        if (!out) continue;
        CHECK_CONTAINS(out, "You can call the following tools");
        CHECK_CONTAINS(out, TOOL0_SPACED);
        CHECK_CONTAINS(out, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]}");
        CHECK_CONTAINS(out, "Tool result (call_1):\nsunny\n\nTool result (call_2):\nrain");
        free(out);
    }
    char *out = render(CHAT_GEMMA, 1);
    CHECK(out && !strncmp(out, "<start_of_turn>user\nS\n\nYou can call", 35));
    free(out);
}

TEST(test_render_errors) {
    char *out = NULL;
    const chat_msg bad_role[] = {{"user", "x"}, {"robot", "y"}};
    CHECK_EQ_INT(chat_apply_tools(CHAT_CHATML, bad_role, NULL, 2, NULL, 0, true, &out), KITE_E_ARG);
    const chat_msg_tools on_user[] = {{calls, 1, NULL}, {0}};
    CHECK_EQ_INT(chat_apply_tools(CHAT_CHATML, bad_role, on_user, 1, NULL, 0, true, &out), KITE_E_ARG);
    const chat_tool noname[] = {{NULL, NULL, NULL}};
    CHECK_EQ_INT(chat_apply_tools(CHAT_CHATML, conv, NULL, 1, noname, 1, true, &out), KITE_E_ARG);
    CHECK_EQ_INT(chat_apply_tools(99, conv, NULL, 1, NULL, 0, true, &out), KITE_E_ARG);
    CHECK(out == NULL);
    /* plain chat_apply still refuses the tool role */
    CHECK_EQ_INT(chat_apply(CHAT_CHATML, conv, 5, true, &out), KITE_E_ARG);
}

/* ---- parser ---- */

static size_t parse(int family, const char *text, tool_parse *p) {
    return tool_calls_parse(family, text, strlen(text), tools, 2, p) ? p->n_calls : 0;
}

TEST(test_parse_good) {
    tool_parse p;
    CHECK_EQ_INT(parse(CHAT_CHATML, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                    "</tool_call>", &p), 1);
    CHECK(p.content == NULL);
    CHECK_STR_EQ(p.calls[0].name, "get_weather");
    CHECK_STR_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}"); /* the model's text */
    tool_parse_free(&p);
    CHECK_EQ_INT(parse(CHAT_CHATML, "Let me look.\n\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\":1}\"}"
                                    "\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2}}\n"
                                    "</tool_call>", &p), 2);
    CHECK_STR_EQ(p.content, "Let me look.");
    CHECK_STR_EQ(p.calls[0].arguments, "{\"a\":1}");
    CHECK_STR_EQ(p.calls[1].arguments, "{\"a\": 2}");
    tool_parse_free(&p);
    /* a second call cut off by max_tokens: the first is kept */
    CHECK_EQ_INT(parse(CHAT_CHATML, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
                                    "<tool_call>\n{\"name\": \"add\", \"argu", &p), 1);
    tool_parse_free(&p);
    CHECK_EQ_INT(parse(CHAT_LLAMA3, " {\"name\": \"add\", \"parameters\": {\"a\": 1}}\n{\"name\": \"get_weather\", "
                                    "\"parameters\": {\"city\": \"x\"}}", &p), 2);
    CHECK_STR_EQ(p.calls[1].name, "get_weather");
    tool_parse_free(&p);
    CHECK_EQ_INT(parse(CHAT_LLAMA3, "<|python_tag|>{\"name\": \"add\", \"arguments\": {\"a\": 1}}", &p), 1);
    tool_parse_free(&p);
    CHECK_EQ_INT(parse(CHAT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": "
                                     "\"add\", \"arguments\": {\"a\": 3}}]", &p), 2);
    tool_parse_free(&p);
    CHECK_EQ_INT(parse(CHAT_GEMMA, "Sure.\n{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1}}]}", &p), 1);
    CHECK_STR_EQ(p.content, "Sure.");
    tool_parse_free(&p);
}

TEST(test_parse_bad) {
    static const char *const bad[] = {
        "", "hello", "<tool_call>", "<tool_call>\n{\"name\": 5, \"arguments\": {}}", "<tool_call>{\"name\": \"add\"}",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": [1]}", "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{x\"}",
        "<tool_call>\n{\"name\": \"\", \"arguments\": {}}", "<tool_call>\n[[[[[[[[[[[[[[[[", "{\"tool_calls\": 3}",
        "[TOOL_CALLS]", "[TOOL_CALLS] {\"name\": \"add\"}", "{\"name\": \"nope\", \"parameters\": {}}", "{\"a\": 1}",
    };
    int fams[] = {CHAT_CHATML, CHAT_LLAMA3, CHAT_MISTRAL, CHAT_GEMMA};
    for (size_t f = 0; f < 4; f++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            tool_parse p;
            CHECK_MSG(parse(fams[f], bad[i], &p) == 0, "%s: parsed a call in: %s", chat_family_name(fams[f]), bad[i]);
            CHECK(p.n_calls == 0 && p.calls == NULL && p.content == NULL);
        }
    /* a JSON reply that is no call stays content for llama3 (bare objects name a known tool) */
    tool_parse p;
    CHECK_EQ_INT(parse(CHAT_LLAMA3, "{\"name\": \"Ada\", \"parameters\": {}}", &p), 0);
}

/* Every prefix and random mutations of good outputs: no crash, no leak (under SAN=1). */
TEST(test_parse_garbage) {
    static const char *const good[] = {
        "x <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"\\u00e9\\\"\"}}\n</tool_call>",
        "{\"name\": \"add\", \"parameters\": {\"a\": [1, {\"b\": null}]}}",
        "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": \"add\", \"arguments\": {}}]",
        "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1}}]}",
    };
    int fams[] = {CHAT_CHATML, CHAT_LLAMA3, CHAT_MISTRAL, CHAT_GEMMA};
    uint32_t rng = 12345;
    size_t found = 0;
    for (size_t gi = 0; gi < 4; gi++) {
        size_t n = strlen(good[gi]);
        char buf[256];
        for (size_t cut = 0; cut <= n; cut++)
            for (size_t f = 0; f < 4; f++) {
                tool_parse p;
                if (tool_calls_parse(fams[f], good[gi], cut, tools, 2, &p)) found++;
                tool_parse_free(&p);
            }
        for (int it = 0; it < 2000; it++) {
            memcpy(buf, good[gi], n + 1);
            for (int k = 0; k < 3; k++) {
                rng = rng * 1664525u + 1013904223u;
                buf[(rng >> 8) % n] = (char)(rng >> 24);
            }
            tool_parse p;
            if (tool_calls_parse(fams[gi], buf, n, tools, 2, &p)) found++;
            tool_parse_free(&p);
        }
    }
    CHECK(found > 0);
    CHECK(!tool_calls_parse(CHAT_CHATML, NULL, 0, tools, 2, &(tool_parse){0}));
}

/* ---- the incremental parser ---- */

/* What a feed reports, flattened: "C<content>" per content piece, "N<k>:<name>" per call,
 * "A<k>:<fragment>" per arguments fragment (each on its own line). */
typedef struct rec {
    textbuf content, log;
    textbuf args[4];
    size_t n_args_frags, n_calls;
} rec;

static bool rec_content(void *u, const char *s, size_t n) {
    textbuf_putn(&((rec *)u)->content, s, n);
    return true;
}
static bool rec_call(void *u, size_t k, const char *name) {
    rec *r = u;
    CHECK_EQ_INT(k, r->n_calls);
    r->n_calls++;
    textbuf_printf(&r->log, "N%zu:%s\n", k, name);
    return true;
}
static bool rec_args(void *u, size_t k, const char *s, size_t n) {
    rec *r = u;
    CHECK(k + 1 == r->n_calls && n > 0);
    if (k < 4) textbuf_putn(&r->args[k], s, n);
    r->n_args_frags++;
    return true;
}
static void rec_free(rec *r) {
    free(r->content.p);
    free(r->log.p);
    for (int i = 0; i < 4; i++) free(r->args[i].p);
}

/* Fed byte by byte, the output gives the same content, calls and arguments as
 * tool_calls_parse on the whole text, with arguments in many fragments. */
TEST(test_stream_equals_whole) {
    static const struct {
        int family;
        const char *text;
    } cases[] = {
        {CHAT_CHATML, "Let me look. \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}r\\\"is\", "
                      "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12, "
                      "\"b\": -3}}\n</tool_call>"},
        {CHAT_LLAMA3, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": [2, {\"c\": null}]}}\n{\"name\": "
                      "\"get_weather\", \"parameters\": {\"city\": \"x\"}}"},
        {CHAT_LLAMA3, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 100}}"},
        {CHAT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"add\", "
                       "\"arguments\": {\"a\": 3}}]"},
        {CHAT_GEMMA, "Sure.\n{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 22}}]}"},
        {CHAT_CHATML, "{\"a\": \"<tool_\"} <tool_cal no call"}, /* content only */
        {CHAT_CHATML, "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *t = cases[c].text;
        size_t len = strlen(t);
        tool_parse whole;
        bool any = tool_calls_parse(cases[c].family, t, len, tools, 2, &whole);
        rec r = {0};
        tool_stream_sink sink = {&r, rec_content, rec_call, rec_args};
        tool_stream s;
        tool_stream_init(&s, cases[c].family, tools, 2);
        for (size_t i = 1; i <= len; i++) CHECK(tool_stream_feed(&s, t, i, i == len, &sink));
        CHECK(!s.cut);
        if (!any) {
            CHECK_EQ_INT(r.n_calls, 0);
            CHECK_STR_EQ(r.content.p ? r.content.p : "", t); /* all of it is content */
        } else {
            CHECK_EQ_INT(r.n_calls, whole.n_calls);
            CHECK_STR_EQ(r.content.p ? r.content.p : "", whole.content ? whole.content : "");
            for (size_t k = 0; k < whole.n_calls && k < 4; k++)
                CHECK_STR_EQ(r.args[k].p ? r.args[k].p : "", whole.calls[k].arguments);
            if (c != 6) CHECK_MSG(r.n_args_frags > 2 * whole.n_calls, "case %zu: %zu fragments", c, r.n_args_frags);
        }
        tool_parse_free(&whole);
        rec_free(&r);
    }
}

/* Content is sent as soon as it cannot start a call, and held while it can. */
TEST(test_stream_holds_markers) {
    const char *t = "Hello <tool_";
    rec r = {0};
    tool_stream_sink sink = {&r, rec_content, rec_call, rec_args};
    tool_stream s;
    tool_stream_init(&s, CHAT_CHATML, tools, 2);
    CHECK(tool_stream_feed(&s, t, strlen(t), false, &sink));
    CHECK_STR_EQ(r.content.p, "Hello"); /* the space and the partial marker held */
    const char *t2 = "Hello <tool_x> more";
    CHECK(tool_stream_feed(&s, t2, strlen(t2), false, &sink));
    CHECK_STR_EQ(r.content.p, "Hello <tool_x> more");
    CHECK(tool_stream_feed(&s, t2, strlen(t2), true, &sink));
    CHECK_STR_EQ(r.content.p, "Hello <tool_x> more");
    rec_free(&r);
    /* a call cut off after it was announced: its fragments are out, cut says so */
    const char *t3 = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1";
    r = (rec){0};
    tool_stream_init(&s, CHAT_CHATML, tools, 2);
    CHECK(tool_stream_feed(&s, t3, strlen(t3) - 3, false, &sink));
    CHECK(tool_stream_feed(&s, t3, strlen(t3), true, &sink));
    CHECK(s.cut && r.n_calls == 1);
    CHECK_STR_EQ(r.args[0].p, "{\"a\": 1");
    rec_free(&r);
}

/* ---- grammar ---- */

static grammar *tool_grammar(int family, int named, bool parallel) {
    char *gbnf = NULL;
    int st = tool_grammar_gbnf(family, tools, 2, named, parallel, &gbnf);
    CHECK_MSG(st == KITE_OK, "tool_grammar_gbnf: %s", kite_last_error());
    if (st) return NULL;
    grammar *g = NULL;
    st = grammar_parse(gbnf, strlen(gbnf), NULL, &g);
    CHECK_MSG(st == KITE_OK, "the tools' GBNF does not compile: %s\n%s", kite_last_error(), gbnf);
    free(gbnf);
    return g;
}

static int accepts(const grammar *g, const char *doc) {
    grammar_matcher *m = NULL;
    if (!g || grammar_matcher_new(g, NULL, &m) != KITE_OK) return -1;
    int ok = grammar_matcher_accept_bytes(m, doc, strlen(doc)) == KITE_OK && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

#define YES(g, d) CHECK_MSG(accepts(g, d) == 1, "expected accepted: %s", d)
#define NO(g, d) CHECK_MSG(accepts(g, d) == 0, "expected rejected: %s", d)

TEST(test_grammar_hermes) {
    grammar *g = tool_grammar(CHAT_CHATML, -1, false);
    YES(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    YES(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\":-3,\"b\":2}}\n</tool_call>");
    NO(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5}}\n</tool_call>"); /* integer */
    NO(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"b\": 1}}\n</tool_call>");   /* a is required */
    NO(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"c\": 1}}\n</tool_call>");
    NO(g, "<tool_call>\n{\"name\": \"sub\", \"arguments\": {\"a\": 1}}\n</tool_call>");
    NO(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": "
          "\"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"); /* one call without parallel */
    grammar_free(g);
    g = tool_grammar(CHAT_CHATML, 1, true); /* named "add", parallel */
    NO(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    YES(g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": "
           "\"add\", \"arguments\": {\"a\": 2}}\n</tool_call>");
    grammar_free(g);
}

TEST(test_grammar_families) {
    grammar *g = tool_grammar(CHAT_LLAMA3, -1, true);
    YES(g, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}");
    YES(g, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}\n{\"name\": \"get_weather\", \"parameters\": "
           "{\"city\": \"\"}}");
    NO(g, "{\"name\": \"add\", \"arguments\": {\"a\": 1}}");
    grammar_free(g);
    g = tool_grammar(CHAT_MISTRAL, -1, true);
    YES(g, "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": \"add\", \"arguments\": "
           "{\"a\": 2}}]");
    NO(g, "[TOOL_CALLS] []");
    grammar_free(g);
    g = tool_grammar(CHAT_GEMMA, 0, false);
    YES(g, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}]}");
    NO(g, "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1}}]}");
    grammar_free(g);
    /* what the grammar forces, the parser reads back */
    tool_parse p;
    CHECK_EQ_INT(parse(CHAT_GEMMA, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}]}",
                       &p), 1);
    tool_parse_free(&p);
    /* a schema the converter refuses names the tool */
    const chat_tool bad[] = {{"f", NULL, "{\"type\":\"string\",\"pattern\":\"a\"}"}};
    char *gbnf = NULL;
    CHECK(tool_grammar_gbnf(CHAT_CHATML, bad, 1, -1, false, &gbnf) != KITE_OK && gbnf == NULL);
    CHECK_CONTAINS(kite_last_error(), "tools[0].function.parameters");
    /* no parameters: any object */
    const chat_tool bare[] = {{"f", NULL, NULL}};
    CHECK(tool_grammar_gbnf(CHAT_CHATML, bare, 1, -1, false, &gbnf) == KITE_OK);
    grammar *gb = NULL;
    CHECK(gbnf && grammar_parse(gbnf, strlen(gbnf), NULL, &gb) == KITE_OK);
    YES(gb, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1]}}\n</tool_call>");
    grammar_free(gb);
    free(gbnf);
}

/* tool_choice "auto": the family's trigger begins its grammar's call, and a lazy generation
 * over real tokens (the bundled model's vocabulary) leaves content before the call free,
 * takes a well-formed call and ends with it, and refuses a call the schema does not allow. */
static void lazy_case(kite_model *m, int family, const char *content, const char *call, const char *bad_call) {
    kite_grammar_trigger trig[1];
    CHECK_EQ_INT((int)tool_grammar_triggers(family, trig), 1);
    CHECK_MSG(!strncmp(call, trig[0].text, strlen(trig[0].text)), "%s: the call does not begin with %s",
              chat_family_name(family), trig[0].text);
    char *gbnf = NULL;
    CHECK_EQ_INT(tool_grammar_gbnf(family, tools, 2, -1, false, &gbnf), KITE_OK);
    kite_grammar *kg = NULL;
    if (gbnf) CHECK_EQ_INT(kite_grammar_new_lazy(m, KITE_GRAMMAR_GBNF, gbnf, strlen(gbnf), trig, 1, &kg), KITE_OK);
    free(gbnf);
    kite_gen *gen = NULL;
    CHECK_EQ_INT(kite_gen_new(m, &gen), KITE_OK);
    for (int pass = 0; pass < 2 && kg && gen; pass++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", content, pass ? bad_call : call);
        kite_token toks[512];
        size_t n = 0;
        CHECK_EQ_INT(kite_tokenize(m, text, strlen(text), false, toks, 512, &n), KITE_OK);
        kite_gen_params gp = kite_gen_default_params();
        gp.grammar = kg;
        gp.n_predict = 512;
        CHECK_EQ_INT(kite_gen_begin(gen, &gp, 1), KITE_OK);
        size_t k = 0;
        int rc = KITE_OK;
        for (; k < n && kite_gen_stopped(gen) == KITE_STOP_NONE; k++) {
            kite_gen_step st;
            if ((rc = kite_gen_push(gen, toks[k], &st)) != KITE_OK) break;
        }
        if (!pass)
            CHECK_MSG(rc == KITE_OK && k == n && kite_gen_stopped(gen) == KITE_STOP_GRAMMAR,
                      "%s: %zu of %zu tokens taken (%s), stop %s", chat_family_name(family), k, n,
                      rc ? kite_last_error() : "ok", kite_stop_name(kite_gen_stopped(gen)));
        else
            CHECK_MSG(rc == KITE_E_STATE && k < n, "%s: a call the schema refuses was taken: %s",
                      chat_family_name(family), text);
    }
    kite_gen_free(gen);
    kite_grammar_free(kg);
}

TEST(test_grammar_lazy_auto) {
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    mp.vocab_only = true;
    CHECK_EQ_INT(kite_model_load("models/stories260K.gguf", &mp, &m), KITE_OK);
    if (!m) return;
    lazy_case(m, CHAT_CHATML, "Let me look. ",
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
              "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"x\"}}\n</tool_call>");
    lazy_case(m, CHAT_LLAMA3, "  ", "{\"name\": \"add\", \"parameters\": {\"a\": 7, \"b\": 2}}",
              "{\"name\": \"add\", \"parameters\": {\"a\": 7, \"b\": 3}}");
    lazy_case(m, CHAT_MISTRAL, "Sure. ", "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": -4}}]",
              "[TOOL_CALLS] [{\"name\": \"sub\", \"arguments\": {\"a\": -4}}]");
    lazy_case(m, CHAT_GEMMA, "Sure. ",
              "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ely\"}}]}",
              "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {}}]}");
    kite_model_free(m);
    /* the byte-level BPE vocabularies the tools' families ship with (152k and 128k tokens) */
    const char *const bpe[] = {"tests/data/tokenizer/vocab-qwen3.gguf", "tests/data/tokenizer/vocab-llama3.gguf"};
    for (int v = 0; v < 2; v++) {
        m = NULL;
        CHECK_EQ_INT(kite_model_load(bpe[v], &mp, &m), KITE_OK);
        if (!m) continue;
        if (v == 0)
            lazy_case(m, CHAT_CHATML, "Let me look. ",
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\u00fcrich\"}}\n</tool_call>",
                      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"x\"}}\n</tool_call>");
        else
            lazy_case(m, CHAT_LLAMA3, "\n", "{\"name\": \"add\", \"parameters\": {\"a\": 7, \"b\": 2}}",
                      "{\"name\": \"add\", \"parameters\": {\"a\": 7, \"b\": 3}}");
        kite_model_free(m);
    }
}

int main(void) {
    RUN(test_grammar_lazy_auto);
    RUN(test_respace);
    RUN(test_render_hermes);
    RUN(test_render_llama3);
    RUN(test_render_mistral);
    RUN(test_render_generic);
    RUN(test_render_errors);
    RUN(test_parse_good);
    RUN(test_parse_bad);
    RUN(test_parse_garbage);
    RUN(test_stream_equals_whole);
    RUN(test_stream_holds_markers);
    RUN(test_grammar_hermes);
    RUN(test_grammar_families);
    return harness_summary(__FILE__);
}
