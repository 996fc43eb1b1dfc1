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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
