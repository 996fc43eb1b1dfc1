/* http_date: IMF-fixdate dates (see http_date.h). */
#include "util/http_date.h"

#include <string.h>

static const char day_names[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char month_names[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* <v> (0..99) as two digits at <p>. */
static void two_digits(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

size_t http_date_format(time_t t, char out[HTTP_DATE_LEN + 1])
{
    struct tm tm;
    out[0] = '\0';
    if (gmtime_r(&t, &tm) == NULL || tm.tm_year + 1900 < 1000 || tm.tm_year + 1900 > 9999 ||
        tm.tm_wday < 0 || tm.tm_wday > 6 || tm.tm_mon < 0 || tm.tm_mon > 11)
        return 0;
    int year = tm.tm_year + 1900;
    /* "Sun, 06 Nov 1994 08:49:37 GMT" */
    memcpy(out, day_names[tm.tm_wday], 3);
    memcpy(out + 3, ", ", 2);
    two_digits(out + 5, tm.tm_mday);
    out[7] = ' ';
    memcpy(out + 8, month_names[tm.tm_mon], 3);
    out[11] = ' ';
    two_digits(out + 12, year / 100);
    two_digits(out + 14, year % 100);
    out[16] = ' ';
    two_digits(out + 17, tm.tm_hour);
    out[19] = ':';
    two_digits(out + 20, tm.tm_min);
    out[22] = ':';
    /* a leap second (60) is written as it is: RFC 9110 allows 60 */
    two_digits(out + 23, tm.tm_sec);
    memcpy(out + 25, " GMT", 5); /* the NUL too */
    return HTTP_DATE_LEN;
}

/* The field line's name and separator, before the date. */
static const char field_name[] = "Date: ";
#define FIELD_NAME_LEN (sizeof(field_name) - 1)

size_t http_date_field_format(time_t t, char out[HTTP_DATE_FIELD_LEN + 1])
{
    if (http_date_format(t, out + FIELD_NAME_LEN) == 0) {
        out[0] = '\0';
        return 0;
    }
    memcpy(out, field_name, FIELD_NAME_LEN);
    memcpy(out + FIELD_NAME_LEN + HTTP_DATE_LEN, "\r\n", 3); /* the NUL too */
    return HTTP_DATE_FIELD_LEN;
}

/* <clock> brought to <now>: both forms formatted anew for another second. */
static void clock_set(struct http_date_clock *clock, time_t now)
{
    if (clock->text[0] == '\0' || clock->at != now) {
        clock->at = now;
        (void)http_date_field_format(now, clock->field);
        /* the field's value, or "" with the field */
        size_t n = clock->field[0] != '\0' ? HTTP_DATE_LEN : 0;
        memcpy(clock->text, clock->field + FIELD_NAME_LEN, n);
        clock->text[n] = '\0';
    }
}

const char *http_date_of(struct http_date_clock *clock, time_t now)
{
    clock_set(clock, now);
    return clock->text;
}

const char *http_date_field_of(struct http_date_clock *clock, time_t now)
{
    clock_set(clock, now);
    return clock->field;
}
