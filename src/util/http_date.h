/* http_date: the IMF-fixdate of RFC 9110 5.6.7 ("Sun, 06 Nov 1994
 * 08:49:37 GMT"), the one form a sender of a Date field may write.
 * Written without strftime(), whose day and month names follow the
 * process's locale. */
#ifndef SLUICE_UTIL_HTTP_DATE_H
#define SLUICE_UTIL_HTTP_DATE_H

#include <stddef.h>
#include <time.h>

/* Bytes of an IMF-fixdate, without the NUL. */
#define HTTP_DATE_LEN 29

/* Bytes of the field line "Date: " IMF-fixdate CRLF, without the NUL. */
#define HTTP_DATE_FIELD_LEN (6 + HTTP_DATE_LEN + 2)

/* Writes <t> (UTC) into <out> as an IMF-fixdate, NUL-terminated. Returns
 * HTTP_DATE_LEN, or 0 (and "" in <out>) for a <t> whose year is not four
 * digits. */
size_t http_date_format(time_t t, char out[HTTP_DATE_LEN + 1]);

/* Writes the field line of <t>, "Date: " IMF-fixdate CRLF, into <out>,
 * NUL-terminated, for a head the sender writes itself. Returns
 * HTTP_DATE_FIELD_LEN, or 0 (and "" in <out>) where http_date_format()
 * has no date: the field is then left out, never sent empty (RFC 9110
 * 6.6.1 has a sender without a usable clock send none). */
size_t http_date_field_format(time_t t, char out[HTTP_DATE_FIELD_LEN + 1]);

/* The last date written and the second it is of: formatting the clock once
 * a second, not once a message. Zero it to start. */
struct http_date_clock {
    time_t at;
    char text[HTTP_DATE_LEN + 1];
    char field[HTTP_DATE_FIELD_LEN + 1]; /* the same date as a field line */
};

/* The IMF-fixdate of <now>, from <clock> when it is of the same second.
 * The string lives in <clock>, until the next call. "" when <now> cannot
 * be written (http_date_format()). */
const char *http_date_of(struct http_date_clock *clock, time_t now);

/* The field line of <now> ("Date: " IMF-fixdate CRLF), from <clock> as
 * http_date_of() has it; "" when <now> cannot be written. */
const char *http_date_field_of(struct http_date_clock *clock, time_t now);

#endif
