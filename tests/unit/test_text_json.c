/* test_text_json: text_shown_fit(), a text cut in its middle to fit, at
 * every size, against where text_shown() puts each character's bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/text_json.h"

/* A path with all that text_shown() writes in more than one byte: UTF-8
 * characters of 2, 3 and 4 bytes, control characters and a backslash
 * (escapes \ooo), a C1 control and a byte that starts no sequence. */
static const char PATH[] = "/srv/\xc3\xa9t\xc3\xa9/a\nb\\c/\xe2\x82\xac\xf0\x9f\x98\x80/"
                           "\xc2\x85x\x9by\xff/\x01\x02\x03/end.yaml";

/* Whether <len> bytes of text_shown(PATH) end between two characters:
 * the sum of the shown lengths of PATH's first characters, shown one by
 * one. */
static bool is_bound(size_t len)
{
    size_t at = 0;
    char one[8], out[40];
    for (size_t i = 0; PATH[i] != '\0';) {
        if (at == len)
            return true;
        const unsigned char *u = (const unsigned char *)PATH + i;
        /* PATH's sequences are valid; 0x9b and 0xff start none and go alone */
        size_t n = u[0] < 0xc0 || u[0] == 0xff ? 1
                   : (u[0] & 0xe0) == 0xc0     ? 2
                   : (u[0] & 0xf0) == 0xe0     ? 3
                                               : 4;
        memcpy(one, PATH + i, n);
        one[n] = '\0';
        at += text_shown_into(out, sizeof(out), one);
        i += n;
    }
    return at == len;
}

static void test_whole_when_it_fits(void **state)
{
    (void)state;
    char *whole = text_shown(PATH);
    size_t n = strlen(whole);
    char out[256];
    assert_int_equal(text_shown_fit(out, n + 1, PATH), n);
    assert_string_equal(out, whole);
    assert_int_equal(text_shown_fit(out, sizeof(out), PATH), n);
    assert_string_equal(out, whole);
    free(whole);
}

static void test_middle_cut_at_every_size(void **state)
{
    (void)state;
    char *whole = text_shown(PATH);
    size_t n = strlen(whole);
    for (size_t outlen = 8; outlen <= n; outlen++) {
        char out[256];
        memset(out, 'Z', sizeof(out));
        size_t len = text_shown_fit(out, outlen, PATH);
        assert_int_equal(len, strlen(out));
        assert_true(len < outlen);
        const char *dots = strstr(out, "...");
        assert_non_null(dots);
        size_t head = (size_t)(dots - out);
        size_t tail = len - head - 3;
        assert_memory_equal(out, whole, head);
        assert_memory_equal(dots + 3, whole + n - tail, tail);
        assert_true(is_bound(head));
        assert_true(is_bound(n - tail));
        /* as much kept as the bounds allow: never more than one
         * character's escape (4 x 4 bytes) lost on each side */
        assert_true(len + 2 * 16 >= outlen - 1);
    }
    free(whole);
}

static void test_too_small_for_both_ends_cuts_the_end(void **state)
{
    (void)state;
    char out[8];
    for (size_t outlen = 1; outlen < 8; outlen++) {
        size_t len = text_shown_fit(out, outlen, PATH);
        assert_true(len < outlen);
        assert_memory_equal(out, "/srv/", len < 5 ? len : 5);
    }
    assert_int_equal(text_shown_fit(out, 0, PATH), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_when_it_fits),
        cmocka_unit_test(test_middle_cut_at_every_size),
        cmocka_unit_test(test_too_small_for_both_ends_cuts_the_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
