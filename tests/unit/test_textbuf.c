/*
 * test_textbuf.c - core/textbuf.h: appends, trimming, formatting past the
 * first allocation, and the empty buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "core/textbuf.h"

TEST(test_appends) {
    textbuf b = {0};
    CHECK(b.p == NULL);
    textbuf_putn(&b, "", 0); /* an empty append still makes a text */
    CHECK(b.p != NULL && b.len == 0 && b.p[0] == '\0');
    textbuf_put(&b, "ab");
    textbuf_putn(&b, "cdef", 2);
    CHECK_STR_EQ(b.p, "abcd");
    CHECK_EQ_INT((int)b.len, 4);
    CHECK(!b.oom);
    free(b.p);
}

TEST(test_trim) {
    textbuf b = {0};
    textbuf_put_trim(&b, " \t\n x y \r\n");
    textbuf_put_trim(&b, "   ");
    textbuf_put_trim(&b, "z");
    CHECK_STR_EQ(b.p, "x yz");
    free(b.p);
}

TEST(test_growth_and_printf) {
    textbuf b = {0};
    for (int i = 0; i < 1000; i++) textbuf_printf(&b, "%d,", i); /* many doublings */
    CHECK(!b.oom);
    CHECK_EQ_INT((int)strlen(b.p), (int)b.len);
    CHECK(!strncmp(b.p, "0,1,2,", 6) && !strcmp(b.p + b.len - 4, "999,"));
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const size_t before = b.len;
    textbuf_printf(&b, "[%s]", big); /* longer than any stack scratch */
    CHECK_EQ_INT((int)(b.len - before), (int)sizeof big + 1);
    CHECK(b.p[b.len - 1] == ']' && b.p[before] == '[');
    free(b.p);
}

int main(void) {
    RUN(test_appends);
    RUN(test_trim);
    RUN(test_growth_and_printf);
    return harness_summary(__FILE__);
}
