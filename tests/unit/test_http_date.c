/* test_http_date: IMF-fixdates (RFC 9110 5.6.7) and their once-a-second cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "util/http_date.h"

static void test_format(void **state)
{
    (void)state;
    char s[HTTP_DATE_LEN + 1];
    /* RFC 9110's own example */
    assert_int_equal(http_date_format(784111777, s), HTTP_DATE_LEN);
    assert_string_equal(s, "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_int_equal(http_date_format(0, s), HTTP_DATE_LEN);
    assert_string_equal(s, "Thu, 01 Jan 1970 00:00:00 GMT");
    /* a leap day, and every month's name and day's name */
    assert_int_equal(http_date_format(1709251199, s), HTTP_DATE_LEN);
    assert_string_equal(s, "Thu, 29 Feb 2024 23:59:59 GMT");
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    static const char *const days[] = {"Fri", "Mon", "Mon", "Thu", "Sat", "Tue",
                                       "Thu", "Sun", "Wed", "Fri", "Mon", "Wed"};
    for (int m = 0; m < 12; m++) {
        /* the first of each month of 2027, at noon */
        struct tm tm = {.tm_year = 127, .tm_mon = m, .tm_mday = 1, .tm_hour = 12};
        time_t t = timegm(&tm);
        char want[HTTP_DATE_LEN + 1];
        snprintf(want, sizeof(want), "%s, 01 %s 2027 12:00:00 GMT", days[m], months[m]);
        assert_int_equal(http_date_format(t, s), HTTP_DATE_LEN);
        assert_string_equal(s, want);
    }
    /* year 10000: no IMF-fixdate */
    assert_int_equal(http_date_format((time_t)253402300800, s), 0);
    assert_string_equal(s, "");
}

static void test_clock(void **state)
{
    (void)state;
    struct http_date_clock c;
    memset(&c, 0, sizeof(c));
    assert_string_equal(http_date_of(&c, 784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_string_equal(http_date_of(&c, 784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_string_equal(http_date_of(&c, 784111778), "Sun, 06 Nov 1994 08:49:38 GMT");
    /* the epoch itself, from a zeroed clock (at 0 too) */
    memset(&c, 0, sizeof(c));
    assert_string_equal(http_date_of(&c, 0), "Thu, 01 Jan 1970 00:00:00 GMT");
}

/* The field line a sender writes itself: the date with its name and its
 * CRLF, or nothing at all where there is no date (never "Date: " alone). */
static void test_field(void **state)
{
    (void)state;
    char f[HTTP_DATE_FIELD_LEN + 1];
    assert_int_equal(http_date_field_format(784111777, f), HTTP_DATE_FIELD_LEN);
    assert_string_equal(f, "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    assert_int_equal(strlen(f), HTTP_DATE_FIELD_LEN);
    /* 9999-12-31T23:59:59Z, the last second written, then year 10000 */
    assert_int_equal(http_date_field_format((time_t)253402300799, f), HTTP_DATE_FIELD_LEN);
    assert_string_equal(f, "Date: Fri, 31 Dec 9999 23:59:59 GMT\r\n");
    assert_int_equal(http_date_field_format((time_t)253402300800, f), 0);
    assert_string_equal(f, "");

    struct http_date_clock c;
    memset(&c, 0, sizeof(c));
    assert_string_equal(http_date_field_of(&c, 784111777),
                        "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    assert_string_equal(http_date_of(&c, 784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_string_equal(http_date_of(&c, 784111778), "Sun, 06 Nov 1994 08:49:38 GMT");
    assert_string_equal(http_date_field_of(&c, 784111778),
                        "Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
    assert_string_equal(http_date_field_of(&c, (time_t)253402300800), "");
    assert_string_equal(http_date_of(&c, (time_t)253402300800), "");
    assert_string_equal(http_date_field_of(&c, 0), "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
