/*
 * test_http_check.c - the server's pure checks of untrusted HTTP bytes
 * (tools/http/http_check.h): UTF-8 repair and character-safe truncation, the
 * JSON \u0000 scan, Content-Type, list, Host and Origin matching, the
 * gate's request-head checks; the fuzz_oai corpus replayed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http/http_check.h"

static void check_sanitize(const char *in, size_t n, const char *want) {
    size_t len = 0;
    char *out = http_utf8_sanitize(in, n, &len);
    CHECK(out != NULL);
    if (!out) return;
    CHECK_EQ_INT((long long)len, (long long)strlen(want));
    CHECK_STR_EQ(out, want);
    CHECK(http_utf8_valid(out, len));
    free(out);
}

TEST(test_utf8_valid) {
    CHECK(http_utf8_valid("", 0));
    CHECK(http_utf8_valid("plain ascii", 11));
    CHECK(http_utf8_valid("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14));
    CHECK(!http_utf8_valid("\xFF", 1));
    CHECK(!http_utf8_valid("\xC0\xAF", 2));         /* overlong '/' */
    CHECK(!http_utf8_valid("\xED\xA0\x80", 3));     /* surrogate U+D800 */
    CHECK(!http_utf8_valid("\xF4\x90\x80\x80", 4)); /* above U+10FFFF */
    CHECK(!http_utf8_valid("\xE2\x82", 2));         /* truncated */
}

TEST(test_utf8_sanitize) {
    check_sanitize("ok", 2, "ok");
    check_sanitize("a\xFF" "b", 3, "a\xEF\xBF\xBD" "b");
    /* a truncated 3-byte character is one maximal subpart: one U+FFFD */
    check_sanitize("\xE2\x82" "x", 3, "\xEF\xBF\xBD" "x");
    /* overlong: each byte is its own subpart */
    check_sanitize("\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD");
    check_sanitize("\xE2\x82\xAC", 3, "\xE2\x82\xAC");
    check_sanitize("\xF0\x9F\x98", 3, "\xEF\xBF\xBD");
}

TEST(test_utf8_prefix) {
    const char *s = "a\xE2\x82\xAC" "b"; /* a € b: 5 bytes */
    CHECK_EQ_INT((long long)http_utf8_prefix(s, 5, 5), 5);
    CHECK_EQ_INT((long long)http_utf8_prefix(s, 5, 4), 4);
    CHECK_EQ_INT((long long)http_utf8_prefix(s, 5, 3), 1);
    CHECK_EQ_INT((long long)http_utf8_prefix(s, 5, 2), 1);
    CHECK_EQ_INT((long long)http_utf8_prefix(s, 5, 0), 0);
    CHECK_EQ_INT((long long)http_utf8_prefix("\xFF\xFF", 2, 1), 1);
    char buf[4];
    http_utf8_copy(buf, sizeof buf, "\xF0\x9F\x98\x80");
    CHECK_STR_EQ(buf, "");
    http_utf8_copy(buf, sizeof buf, "ab\xC3\xA9");
    CHECK_STR_EQ(buf, "ab");
    http_utf8_copy(buf, sizeof buf, "abc");
    CHECK_STR_EQ(buf, "abc");
}

TEST(test_json_nul) {
    const char *yes[] = {"{\"a\":\"x\\u0000y\"}", "[\"\\u0000\"]", "{\"\\u0000\":1}"};
    const char *no[] = {"{\"a\":\"\\\\u0000\"}", "{\"a\":\"\\u0001\"}", "{\"a\":1}", "\"\\u00", "u0000",
                        "{\"a\":\"\\\"\\u0041\"}"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) CHECK_MSG(http_json_has_nul(yes[i], strlen(yes[i])), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) CHECK_MSG(!http_json_has_nul(no[i], strlen(no[i])), "%s", no[i]);
}

TEST(test_ctype) {
    CHECK(http_ctype_is_json("application/json"));
    CHECK(http_ctype_is_json("Application/JSON"));
    CHECK(http_ctype_is_json("application/json; charset=utf-8"));
    CHECK(http_ctype_is_json("application/json;charset=UTF-8"));
    CHECK(http_ctype_is_json(" application/json "));
    CHECK(!http_ctype_is_json(NULL));
    CHECK(!http_ctype_is_json(""));
    CHECK(!http_ctype_is_json("text/plain"));
    CHECK(!http_ctype_is_json("application/jsonp"));
    CHECK(!http_ctype_is_json("application/x-www-form-urlencoded"));
    CHECK(!http_ctype_is_json("multipart/form-data; boundary=x"));
}

TEST(test_list) {
    CHECK(http_list_has("a.example, b.example", "B.example", 9));
    CHECK(http_list_has("a.example,b.example", "a.example", 9));
    CHECK(!http_list_has("a.example", "a.exampl", 8));
    CHECK(!http_list_has("a.example", "a.example.evil", 14));
    CHECK(http_list_has("*", "anything", 8));
    CHECK(!http_list_has("", "x", 1));
    CHECK(!http_list_has(NULL, "x", 1));
    CHECK(!http_list_has(",,", "", 0));
    CHECK(http_list_has("http://localhost:3000", "http://localhost:3000", 21));
}

TEST(test_host) {
    size_t n = 0;
    CHECK(http_host_name("localhost:8080", &n) && n == 9);
    CHECK(http_host_name("[::1]:8080", &n) && n == 5);
    CHECK(http_host_name("[::1]", &n) && n == 5);
    CHECK(http_host_name("example.com", &n) && n == 11);
    CHECK(!http_host_name("", &n));
    CHECK(!http_host_name(":80", &n));
    CHECK(!http_host_name("a b", &n));
    CHECK(!http_host_name("h:8x", &n));
    CHECK(!http_host_name("[::1]x", &n));
    CHECK(!http_host_name("user@h", &n));

    CHECK(http_host_allowed("localhost", "127.0.0.1", NULL));
    CHECK(http_host_allowed("LOCALHOST:1234", "127.0.0.1", NULL));
    CHECK(http_host_allowed("127.0.0.1:8080", "127.0.0.1", NULL));
    CHECK(http_host_allowed("[::1]:8080", "127.0.0.1", NULL));
    CHECK(http_host_allowed("10.1.2.3:80", "10.1.2.3", NULL));
    CHECK(http_host_allowed("[fe80::1]:80", "fe80::1", NULL));
    CHECK(http_host_allowed("myhost", "myhost", NULL));
    CHECK(!http_host_allowed("evil.example", "127.0.0.1", NULL));
    CHECK(!http_host_allowed("localhost.evil.example", "127.0.0.1", NULL));
    CHECK(!http_host_allowed("127.0.0.1.evil", "127.0.0.1", NULL));
    CHECK(http_host_allowed("api.example:443", "127.0.0.1", "api.example,other"));
    CHECK(!http_host_allowed("x.example", "127.0.0.1", "api.example"));
    CHECK(http_host_allowed("x.example", "127.0.0.1", "*"));
    CHECK(!http_host_allowed("bad host", "127.0.0.1", "*"));
}

static int head_status(const char *h) {
    char msg[160] = "";
    size_t n = strlen(h), end = http_head_end(h, n);
    CHECK(end > 0);
    int st = http_head_check(h, end ? end : n, 8192, 32768, msg, sizeof msg);
    if (st) CHECK(msg[0] != '\0');
    return st;
}

TEST(test_head) {
    CHECK_EQ_INT(http_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 25), 0);
    CHECK_EQ_INT(http_head_end("GET / HTTP/1.1\r\n\r\nBODY", 22), 18);
    CHECK_EQ_INT(http_head_end("GET / HTTP/1.0\n\nBODY", 20), 16);
    CHECK_EQ_INT(head_status("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 0);
    CHECK_EQ_INT(head_status("\r\nGET / HTTP/1.0\r\n\r\n"), 0); /* a leading empty line is ignored */
    CHECK_EQ_INT(head_status("POST /v1/completions HTTP/1.1\r\nContent-Length:  12 \r\n\r\n"), 0);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n"), 0);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"), 0);
    /* what libmicrohttpd 0.9.75 would answer with HTML (twice, for a bad Content-Length) */
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
    CHECK_EQ_INT(head_status("GET / HTTP/2.0\r\n\r\n"), 505);
    CHECK_EQ_INT(head_status("GET / HTTP/1.2\r\n\r\n"), 505);
    CHECK_EQ_INT(head_status("GET / FTP/1.1\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("GET /\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("G@T / HTTP/1.1\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("GET / HTTP/1.1\r\nBad Name: a\r\n\r\n"), 400);
    CHECK_EQ_INT(head_status("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), 400);
    char big[20000];
    snprintf(big, sizeof big, "GET /%09000d HTTP/1.1\r\n\r\n", 0);
    CHECK_EQ_INT(head_status(big), 414);
    char hdrs[40100];
    int k = snprintf(hdrs, sizeof hdrs, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 1000; i++) k += snprintf(hdrs + k, sizeof hdrs - (size_t)k, "X-%03d: 0123456789012345678901234567890\r\n", i);
    snprintf(hdrs + k, sizeof hdrs - (size_t)k, "\r\n");
    CHECK_EQ_INT(head_status(hdrs), 431);
}

/* ---- fuzz corpus replay (tests/fuzz/fuzz_oai.c) ---- */

#include "fuzz/fuzz_oai.c"

TEST(fuzz_corpus_replay) {
    CHECK(harness_replay_dir("tests/fuzz/corpus/fuzz_oai", LLVMFuzzerTestOneInput) >= 20);
}

static int chunk(const char *b, size_t *used) {
    char msg[160];
    size_t u = 0;
    int r = http_chunked_scan(b, strlen(b), &u, msg, sizeof msg);
    if (used) *used = u;
    return r;
}

TEST(test_chunked) {
    size_t u = 0;
    CHECK(http_head_chunked("POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", 47));
    CHECK(!http_head_chunked("POST / HTTP/1.1\r\nX-Transfer-Encoding: chunked\r\n\r\n", 49));
    CHECK_EQ_INT(chunk("5\r\nhello\r\n0\r\n\r\n", &u), 1);
    CHECK_EQ_INT((int)u, 15);
    CHECK_EQ_INT(chunk("5\r\nhello\r\n0\r\n\r\nNEXT", &u), 1); /* bytes after the body are not its */
    CHECK_EQ_INT((int)u, 15);
    CHECK_EQ_INT(chunk("A\nhelloworld\n0\n\n", NULL), 1); /* LF alone, as libmicrohttpd reads it */
    CHECK_EQ_INT(chunk("3\r\nabc\r\n0\r\nX-T: 1\r\nY:\r\n\r\n", NULL), 1);
    CHECK_EQ_INT(chunk("0\r\n\r\n", NULL), 1);
    /* incomplete: every proper prefix of a good body */
    const char *good = "1a\r\nabcdefghijklmnopqrstuvwxyz\r\n2\r\n\r\n\r\n0\r\nT: v\r\n\r\n";
    for (size_t k = 0; k < strlen(good); k++) {
        char buf[128];
        memcpy(buf, good, k);
        char msg[160];
        CHECK_MSG(http_chunked_scan(buf, k, &u, msg, sizeof msg) == 0, "prefix %zu", k);
    }
    /* malformed */
    CHECK_EQ_INT(chunk("ZZ\r\n", NULL), -1);
    CHECK_EQ_INT(chunk("5;ext=1\r\nhello\r\n0\r\n\r\n", NULL), -1);
    CHECK_EQ_INT(chunk("5 \r\nhello\r\n0\r\n\r\n", NULL), -1);
    CHECK_EQ_INT(chunk("5\rxhello", NULL), -1);
    CHECK_EQ_INT(chunk("5\r\nhelloXX", NULL), -1);
    CHECK_EQ_INT(chunk("1000000000000000\r\n", NULL), -1); /* 16 digits */
    CHECK_EQ_INT(chunk("0\r\nnocolon\r\n\r\n", NULL), -1);
    CHECK_EQ_INT(chunk("0\r\n: v\r\n\r\n", NULL), -1);
    CHECK_EQ_INT(chunk("0\r\n\rX", NULL), -1);
    CHECK_EQ_INT(chunk("fffffffffffffff\r\nabc", NULL), 0); /* 15 digits: a huge chunk still coming */
}

int main(void) {
    RUN(test_utf8_valid);
    RUN(test_utf8_sanitize);
    RUN(test_utf8_prefix);
    RUN(test_json_nul);
    RUN(test_ctype);
    RUN(test_list);
    RUN(test_host);
    RUN(test_head);
    RUN(test_chunked);
    RUN(fuzz_corpus_replay);
    return harness_summary(__FILE__);
}
