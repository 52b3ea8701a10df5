/*
 * fuzz_embed.c - libFuzzer target for the server's embeddings request
 * parsing (tools/http/embed_parse.c, embed_parse) and the base64 encoding
 * of its answers (embed_base64_f32).
 *
 * Input: the first byte picks the mode (bit 0: /v1/embeddings or /embedding;
 * bit 1: the base64 check instead of the parser); the rest is the
 * untrusted bytes, parsed with a 512-token vocabulary and n_embd 64.
 * Invariants:
 *   1. embed_parse either succeeds with 1..EMBED_MAX_INPUTS inputs, each
 *      exactly one of a non-empty NUL-terminated text or 1 or more token ids
 *      in [0, 512) - or fails with a 400 (500 only for out of memory) whose
 *      JSON error body (made valid UTF-8 as every response is) parses and
 *      has a string message and type and the param and code members;
 *   2. embed_request_free frees everything (LeakSanitizer) after both;
 *   3. embed_base64_f32 of the bytes read as floats is padded base64 of
 *      length 4 * ceil(4n / 3) that decodes back to the same bytes.
 * Seeds: tests/fuzz/corpus/fuzz_embed/.  tests/unit/test_embed_parse.c
 * includes this file to replay the corpus as a regression test.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "http/embed.h"
#include "http/http_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_EMBED_REQUIRE(cond)                                                                \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz_embed: invariant failed: %s (line %d)\n", #cond, __LINE__);  \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

#define FUZZ_EMBED_VOCAB 512
#define FUZZ_EMBED_DIM 64

static void fuzz_embed_error_body(const oai_error *e) {
    FUZZ_EMBED_REQUIRE(e->status == 400 || e->status == 500);
    char *json = oai_error_json(e);
    FUZZ_EMBED_REQUIRE(json != NULL);
    size_t n = 0;
    char *fixed = http_utf8_sanitize(json, strlen(json), &n);
    free(json);
    FUZZ_EMBED_REQUIRE(fixed != NULL && http_utf8_valid(fixed, n));
    cJSON *root = cJSON_ParseWithLength(fixed, n);
    FUZZ_EMBED_REQUIRE(root != NULL);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "error");
    FUZZ_EMBED_REQUIRE(cJSON_IsObject(o));
    FUZZ_EMBED_REQUIRE(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "message")));
    FUZZ_EMBED_REQUIRE(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "type")));
    FUZZ_EMBED_REQUIRE(cJSON_GetObjectItemCaseSensitive(o, "param") != NULL);
    FUZZ_EMBED_REQUIRE(cJSON_GetObjectItemCaseSensitive(o, "code") != NULL);
    cJSON_Delete(root);
    free(fixed);
}

static void fuzz_embed_body(const char *b, size_t n, bool oai) {
    embed_request r;
    oai_error e;
    memset(&e, 0, sizeof e);
    if (embed_parse(b, n, oai, FUZZ_EMBED_VOCAB, FUZZ_EMBED_DIM, &r, &e)) {
        FUZZ_EMBED_REQUIRE(r.oai == oai);
        FUZZ_EMBED_REQUIRE(r.n_input >= 1 && r.n_input <= EMBED_MAX_INPUTS);
        for (int32_t i = 0; i < r.n_input; i++) {
            FUZZ_EMBED_REQUIRE((r.text[i] != NULL) != (r.ids[i] != NULL));
            if (r.text[i]) FUZZ_EMBED_REQUIRE(r.text[i][0] != '\0');
            if (r.ids[i]) {
                FUZZ_EMBED_REQUIRE(r.n_ids[i] >= 1);
                for (int32_t k = 0; k < r.n_ids[i]; k++)
                    FUZZ_EMBED_REQUIRE(r.ids[i][k] >= 0 && r.ids[i][k] < FUZZ_EMBED_VOCAB);
            }
        }
    } else {
        fuzz_embed_error_body(&e);
    }
    embed_request_free(&r);
}

static int fuzz_b64_val(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static void fuzz_embed_base64(const uint8_t *b, size_t n) {
    const size_t nf = n / 4;
    float *v = malloc(sizeof(float) * (nf ? nf : 1));
    FUZZ_EMBED_REQUIRE(v != NULL);
    memcpy(v, b, nf * 4);
    char *t = embed_base64_f32(v, nf);
    FUZZ_EMBED_REQUIRE(t != NULL);
    const size_t len = strlen(t);
    FUZZ_EMBED_REQUIRE(len == (nf * 4 + 2) / 3 * 4);
    uint8_t *back = malloc(nf * 4 + 3);
    FUZZ_EMBED_REQUIRE(back != NULL);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int q[4];
        for (int k = 0; k < 4; k++) q[k] = t[i + k] == '=' ? 0 : fuzz_b64_val(t[i + k]);
        for (int k = 0; k < 4; k++) FUZZ_EMBED_REQUIRE(q[k] >= 0);
        const uint32_t acc = (uint32_t)q[0] << 18 | (uint32_t)q[1] << 12 | (uint32_t)q[2] << 6 | (uint32_t)q[3];
        back[o++] = (uint8_t)(acc >> 16);
        if (t[i + 2] != '=') back[o++] = (uint8_t)(acc >> 8);
        if (t[i + 3] != '=') back[o++] = (uint8_t)acc;
    }
    FUZZ_EMBED_REQUIRE(o == nf * 4);
    for (size_t i = 0; i < nf; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        for (int k = 0; k < 4; k++) FUZZ_EMBED_REQUIRE(back[i * 4 + (size_t)k] == (uint8_t)(bits >> (8 * k)));
    }
    free(back);
    free(t);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 2)
        fuzz_embed_base64(data + 1, size - 1);
    else
        fuzz_embed_body((const char *)data + 1, size - 1, (data[0] & 1) == 0);
    return 0;
}
