/*
 * test_embed_parse.c - the server's embeddings request parsing
 * (tools/http/embed_parse.c): every input form, the fields, the 400s (each
 * naming its param), the base64 encoding against known bytes, and the
 * fuzz_embed corpus replayed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http/embed.h"

#define V 512
#define D 64

static bool parse(const char *body, bool oai, embed_request *r, oai_error *e) {
    memset(e, 0, sizeof *e);
    return embed_parse(body, strlen(body), oai, V, D, r, e);
}

TEST(test_good_bodies) {
    embed_request r;
    oai_error e;
    CHECK(parse("{\"input\":\"Hello world\",\"model\":\"kite\",\"user\":\"u1\"}", true, &r, &e));
    CHECK_EQ_INT(r.n_input, 1);
    CHECK(r.text[0] && !strcmp(r.text[0], "Hello world") && !r.ids[0]);
    CHECK(r.model && !strcmp(r.model, "kite"));
    CHECK(!r.base64 && r.oai);
    embed_request_free(&r);

    CHECK(parse("{\"input\":[\"a\",\"b c\"],\"encoding_format\":\"base64\",\"dimensions\":64}", true, &r, &e));
    CHECK_EQ_INT(r.n_input, 2);
    CHECK(r.base64);
    CHECK(r.text[1] && !strcmp(r.text[1], "b c"));
    embed_request_free(&r);

    CHECK(parse("{\"input\":[1,2,511]}", true, &r, &e)); /* one input of token ids */
    CHECK_EQ_INT(r.n_input, 1);
    CHECK_EQ_INT(r.n_ids[0], 3);
    CHECK(r.ids[0] && r.ids[0][2] == 511 && !r.text[0]);
    embed_request_free(&r);

    CHECK(parse("{\"input\":[[1,2],[3],\"text\"],\"encoding_format\":\"float\"}", true, &r, &e));
    CHECK_EQ_INT(r.n_input, 3);
    CHECK_EQ_INT(r.n_ids[0], 2);
    CHECK_EQ_INT(r.n_ids[1], 1);
    CHECK(r.text[2] && !strcmp(r.text[2], "text"));
    embed_request_free(&r);

    /* llama-server's field, and null optional fields */
    CHECK(parse("{\"content\":\"Hello\",\"model\":null,\"dimensions\":null,\"encoding_format\":null}", false, &r, &e));
    CHECK(!r.oai && r.n_input == 1 && r.text[0] && !r.model);
    embed_request_free(&r);
}

/* A bad body: false, the status and the param named. */
static void bad(const char *body, bool oai, int status, const char *param, const char *code) {
    embed_request r;
    oai_error e;
    const bool ok = parse(body, oai, &r, &e);
    CHECK_MSG(!ok, "accepted: %s", body);
    if (!ok) {
        CHECK_MSG(e.status == status, "%s: status %d, want %d", body, e.status, status);
        CHECK_MSG(!strcmp(e.param, param), "%s: param '%s', want '%s'", body, e.param, param);
        CHECK_MSG(code && e.code && !strcmp(e.code, code), "%s: code %s, want %s", body, e.code ? e.code : "null", code);
        char *json = oai_error_json(&e);
        CHECK(json && strstr(json, "\"error\"") && strstr(json, "\"message\""));
        free(json);
    }
    embed_request_free(&r);
}

TEST(test_bad_bodies) {
    bad("", true, 400, "", "invalid_json");
    bad("{\"input\":", true, 400, "", "invalid_json");
    bad("[\"a\"]", true, 400, "", "invalid_type");
    bad("{}", true, 400, "input", "missing_required_parameter");
    bad("{\"input\":null}", true, 400, "input", "missing_required_parameter");
    bad("{\"input\":\"\"}", true, 400, "input", "invalid_value");
    bad("{\"input\":[]}", true, 400, "input", "invalid_value");
    bad("{\"input\":[[]]}", true, 400, "input", "invalid_value");
    bad("{\"input\":[\"a\",\"\"]}", true, 400, "input", "invalid_value");
    bad("{\"input\":[1,\"a\"]}", true, 400, "input", "invalid_type");
    bad("{\"input\":[\"a\",1]}", true, 400, "input", "invalid_type");
    bad("{\"input\":[1.5]}", true, 400, "input", "invalid_type");
    bad("{\"input\":[-1]}", true, 400, "input", "invalid_value");
    bad("{\"input\":[512]}", true, 400, "input", "invalid_value");
    bad("{\"input\":[[1],[600]]}", true, 400, "input", "invalid_value");
    bad("{\"input\":42}", true, 400, "input", "invalid_type");
    bad("{\"input\":{\"a\":1}}", true, 400, "input", "invalid_type");
    bad("{\"input\":\"x\",\"dimensions\":3}", true, 400, "dimensions", "unsupported_value");
    bad("{\"input\":\"x\",\"dimensions\":\"64\"}", true, 400, "dimensions", "invalid_type");
    bad("{\"input\":\"x\",\"encoding_format\":\"hex\"}", true, 400, "encoding_format", "invalid_value");
    bad("{\"input\":\"x\",\"encoding_format\":1}", true, 400, "encoding_format", "invalid_type");
    bad("{\"input\":\"x\",\"model\":5}", true, 400, "model", "invalid_type");
    bad("{\"input\":\"x\",\"user\":5}", true, 400, "user", "invalid_type");
    bad("{\"input\":\"x\",\"foo\":1}", true, 400, "foo", "unknown_parameter");
    bad("{\"content\":\"a\",\"input\":\"b\"}", false, 400, "content", "invalid_value");
    bad("{\"input\":\"a\\u0000b\"}", true, 400, "", "invalid_value");
    /* more inputs than EMBED_MAX_INPUTS */
    size_t cap = 16 + (EMBED_MAX_INPUTS + 1) * 4;
    char *big = malloc(cap);
    size_t n = (size_t)snprintf(big, cap, "{\"input\":[");
    for (int i = 0; i <= EMBED_MAX_INPUTS; i++) n += (size_t)snprintf(big + n, cap - n, i ? ",\"a\"" : "\"a\"");
    snprintf(big + n, cap - n, "]}");
    bad(big, true, 400, "input", "invalid_value");
    free(big);
}

TEST(test_base64) {
    /* 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0 (little-endian) */
    const float v[2] = {1.0f, -2.0f};
    char *t = embed_base64_f32(v, 2);
    CHECK(t && !strcmp(t, "AACAPwAAAMA="));
    free(t);
    t = embed_base64_f32(v, 1);
    CHECK(t && !strcmp(t, "AACAPw=="));
    free(t);
    t = embed_base64_f32(v, 0);
    CHECK(t && !strcmp(t, ""));
    free(t);
}

/* ---- fuzz corpus replay (tests/fuzz/fuzz_embed.c) ---- */

#include "fuzz/fuzz_embed.c"

TEST(fuzz_corpus_replay) { CHECK(harness_replay_dir("tests/fuzz/corpus/fuzz_embed", LLVMFuzzerTestOneInput) >= 15); }

int main(void) {
    RUN(test_good_bodies);
    RUN(test_bad_bodies);
    RUN(test_base64);
    RUN(fuzz_corpus_replay);
    return harness_summary("tests/unit/test_embed_parse.c");
}
