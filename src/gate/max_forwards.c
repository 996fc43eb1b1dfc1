/* max_forwards: the answer to a TRACE or OPTIONS that goes no further (see
 * max_forwards.h). */
#include "gate/max_forwards.h"

#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <time.h>

#include <event2/buffer.h>

#include "gate/conn.h"
#include "gate/gateway.h"
#include "policy/model.h"
#include "util/http_date.h"
#include "util/query.h"
#include "util/wall_clock.h"

bool max_forwards_ends_here(const struct http_request *req)
{
    /* the parser reads it for TRACE and OPTIONS only: -1 for the others */
    return req->max_forwards == 0;
}

/* The words that, in a field's name (any case), mark the field as likely
 * to hold a secret: Authorization and Cookie, which RFC 9110 9.3.8 names,
 * and the credential fields of APIs (X-Api-Key, X-Auth-Token,
 * Private-Token, X-Amz-Security-Token, a session's id). A name is looked
 * at, never a value: a field left out wrongly costs a line of a diagnostic
 * echo, one echoed wrongly puts a secret in a log or a model's context. */
static const char *const secret_words[] = {"auth",    "cookie", "token",      "key",      "secret",
                                           "session", "passw",  "credential", "signature"};

bool max_forwards_field_is_secret(const char *name, size_t len)
{
    for (size_t w = 0; w < sizeof(secret_words) / sizeof(secret_words[0]); w++) {
        size_t wl = strlen(secret_words[w]);
        for (size_t i = 0; i + wl <= len; i++)
            if (strncasecmp(name + i, secret_words[w], wl) == 0)
                return true;
    }
    return false;
}

/* Adds <n> bytes at <s> to <out> (when not NULL) and to <*len>; false out
 * of memory. */
static bool echo_add(struct evbuffer *out, const char *s, size_t n, size_t *len)
{
    if (out != NULL && evbuffer_add(out, s, n) != 0)
        return false;
    *len += n;
    return true;
}

/* Names too short to be looked for inside others ("sig" is in X-Design-Id
 * and ?design=): a parameter is secret when its whole name, decoded, is
 * one of them. Azure's SAS signature is ?sig=. */
static const char *const secret_names[] = {"sig"};

bool max_forwards_param_is_secret(const char *name, size_t len)
{
    for (size_t w = 0; w < sizeof(secret_words) / sizeof(secret_words[0]); w++)
        if (query_name_holds(name, len, secret_words[w]))
            return true;
    for (size_t w = 0; w < sizeof(secret_names) / sizeof(secret_names[0]); w++)
        if (query_name_is(name, len, secret_names[w]))
            return true;
    return false;
}

/* Where a URL's parts are, for echo_url(): in its path (and what comes
 * before it), in a ";name=value" parameter of a path segment, or in its
 * query or fragment. */
enum url_part { URL_PATH, URL_PATH_PARAM, URL_QUERY };

/* Whether <c> ends a parameter of <part>: a path parameter at ';', '/',
 * '?' or '#'; a query's at '&' or ';' (util/query.h) or the '#' of the
 * fragment, whose parameters an OAuth redirect puts its token in. */
static bool ends_param(enum url_part part, char c)
{
    if (part == URL_PATH_PARAM)
        return c == ';' || c == '/' || c == '?' || c == '#';
    return query_is_separator(c) || c == '#';
}

/* The echo of the URL (or request target) of <n> bytes at <s>, added to
 * <out> (when not NULL) and to <*len>: as it came, but the value of a
 * parameter whose name is likely to hold a secret
 * (max_forwards_param_is_secret(): ;jsessionid=, ?api_key=,
 * ?access_token=, ?api_%6Bey=, #id_token=, ?sig=) left out, its "name="
 * kept. Parameters are a path segment's after ';' (each ended by ';',
 * '/', '?' or '#'), and the query's and the fragment's after the first
 * '?' or '#' (each ended by '&', ';' or '#'). False out of memory. */
static bool echo_url(const char *s, size_t n, struct evbuffer *out, size_t *len)
{
    enum url_part part = URL_PATH;
    const char *at = s, *end = s + n;
    while (at < end) {
        if (part == URL_PATH) {
            const char *stop = at;
            while (stop < end && *stop != ';' && *stop != '?' && *stop != '#')
                stop++;
            if (stop < end)
                part = *stop == ';' ? URL_PATH_PARAM : URL_QUERY;
            stop += stop < end; /* its ';', '?' or '#', as it came */
            if (!echo_add(out, at, (size_t)(stop - at), len))
                return false;
            at = stop;
            continue;
        }
        const char *stop = at;
        while (stop < end && !ends_param(part, *stop))
            stop++;
        const char *eq = memchr(at, '=', (size_t)(stop - at));
        const char *cut =
            eq != NULL && max_forwards_param_is_secret(at, (size_t)(eq - at)) ? eq + 1 : stop;
        if (!echo_add(out, at, (size_t)(cut - at), len))
            return false;
        if (stop < end) {
            if (part == URL_PATH_PARAM && *stop != ';')
                part = *stop == '/' ? URL_PATH : URL_QUERY;
            if (!echo_add(out, stop, 1, len))
                return false;
            stop++;
        }
        at = stop;
    }
    return true;
}

/* The echo of the request line <line> (<n> bytes, its CRLF included): as
 * it came, its target echoed by echo_url(). Returns its length, or -1 out
 * of memory. */
static ssize_t echo_request_line(const char *line, size_t n, struct evbuffer *out)
{
    size_t len = 0;
    const char *sp = memchr(line, ' ', n);
    const char *end = line + n; /* the target's end: the space before the version */
    while (end > line && end[-1] != ' ')
        end--;
    if (sp == NULL || end <= sp + 1)
        return echo_add(out, line, n, &len) ? (ssize_t)len : -1;
    if (!echo_add(out, line, (size_t)(sp + 1 - line), &len) ||
        !echo_url(sp + 1, (size_t)(end - 1 - (sp + 1)), out, &len))
        return -1;
    return echo_add(out, end - 1, (size_t)(line + n - (end - 1)), &len) ? (ssize_t)len : -1;
}

bool max_forwards_field_is_url(const char *name, size_t len)
{
    static const char *const url_fields[] = {"referer", "origin", "content-location", "location"};
    for (size_t i = 0; i < sizeof(url_fields) / sizeof(url_fields[0]); i++)
        if (len == strlen(url_fields[i]) && strncasecmp(name, url_fields[i], len) == 0)
            return true;
    return false;
}

/* The echo of the head <head> (<n> bytes, as the request writer wrote it:
 * its request line, "name: value" CRLF lines, the empty line): its lines
 * but the fields max_forwards_field_is_secret() names, the request line's
 * target and the value of the fields max_forwards_field_is_url() names
 * echoed by echo_url() (their secret parameters' values left out), added
 * to <out>, or only counted when <out> is NULL. Returns its length, or -1
 * out of memory. */
static ssize_t echo_lines(const char *head, size_t n, struct evbuffer *out)
{
    size_t len = 0;
    for (size_t at = 0, line = 0; at < n; line++) {
        const char *lf = memchr(head + at, '\n', n - at);
        size_t end = lf != NULL ? (size_t)(lf - head) + 1 : n;
        if (line == 0) {
            ssize_t r = echo_request_line(head, end, out);
            if (r < 0)
                return -1;
            len += (size_t)r;
            at = end;
            continue;
        }
        const char *colon = memchr(head + at, ':', end - at);
        size_t name_len = colon != NULL ? (size_t)(colon - head) - at : 0;
        if (colon != NULL && max_forwards_field_is_secret(head + at, name_len)) {
            at = end;
            continue;
        }
        if (colon != NULL && max_forwards_field_is_url(head + at, name_len)) {
            /* its value up to the line's CRLF (the writer's, always) */
            size_t v = (size_t)(colon - head) + 1, eol = end;
            if (eol > v && head[eol - 1] == '\n')
                eol--;
            if (eol > v && head[eol - 1] == '\r')
                eol--;
            if (!echo_add(out, head + at, v - at, &len) ||
                !echo_url(head + v, eol - v, out, &len) ||
                !echo_add(out, head + eol, end - eol, &len))
                return -1;
        } else if (!echo_add(out, head + at, end - at, &len)) {
            return -1;
        }
        at = end;
    }
    return (ssize_t)len;
}

int max_forwards_answer(struct conn *c, struct evbuffer *out, bool keep)
{
    struct exchange *ex = &c->ex;
    bool trace = ex->mbit == METHOD_TRACE && ex->uphead != NULL;
    size_t n = trace ? evbuffer_get_length(ex->uphead) : 0;
    /* Not a copy: ex->uphead is kept for the connection's next request. */
    const char *head = n > 0 ? (const char *)evbuffer_pullup(ex->uphead, -1) : NULL;
    if (n > 0 && head == NULL)
        return -1;
    ssize_t echo = n > 0 ? echo_lines(head, n, NULL) : 0;
    const char *date = http_date_field_of(&c->gw->date_clock, wall_clock_seconds());
    if (evbuffer_add_printf(
            out, "HTTP/1.1 200 OK\r\n%s%sContent-Length: %zd\r\nConnection: %s\r\n\r\n", date,
            trace ? "Content-Type: message/http\r\n" : "", echo, keep ? "keep-alive" : "close") < 0)
        return -1;
    if (n > 0 && echo_lines(head, n, out) < 0)
        return -1;
    return 0;
}
