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

bool max_forwards_param_is_secret(const char *name, size_t len)
{
    for (size_t w = 0; w < sizeof(secret_words) / sizeof(secret_words[0]); w++)
        if (query_name_holds(name, len, secret_words[w]))
            return true;
    return false;
}

/* The echo of the request line <line> (<n> bytes, its CRLF included): as
 * it came, but the value of a query parameter whose name is likely to
 * hold a secret (max_forwards_param_is_secret(): ?api_key=,
 * ?access_token=, ?api_%6Bey=) left out, its "name=" kept; parameters
 * end at '&' or ';', as a server splits them (util/query.h). Returns its
 * length, or -1 out of memory. */
static ssize_t echo_request_line(const char *line, size_t n, struct evbuffer *out)
{
    size_t len = 0;
    const char *sp = memchr(line, ' ', n);
    const char *q = sp != NULL ? memchr(sp, '?', n - (size_t)(sp - line)) : NULL;
    const char *end = line + n; /* the target's end: the space before the version */
    while (end > line && end[-1] != ' ')
        end--;
    if (q == NULL || end <= q + 1)
        return echo_add(out, line, n, &len) ? (ssize_t)len : -1;
    const char *at = q + 1;
    if (!echo_add(out, line, (size_t)(at - line), &len))
        return -1;
    while (at < end - 1) { /* end - 1: the space */
        const char *stop = at;
        while (stop < end - 1 && !query_is_separator(*stop))
            stop++;
        const char *eq = memchr(at, '=', (size_t)(stop - at));
        size_t keep = eq != NULL && max_forwards_param_is_secret(at, (size_t)(eq - at))
                          ? (size_t)(eq + 1 - at)
                          : (size_t)(stop - at);
        bool sep = stop < end - 1; /* its separator, as it came */
        if (!echo_add(out, at, keep, &len) || (sep && !echo_add(out, stop, 1, &len)))
            return -1;
        at = sep ? stop + 1 : stop;
    }
    return echo_add(out, end - 1, (size_t)(line + n - (end - 1)), &len) ? (ssize_t)len : -1;
}

/* The echo of the head <head> (<n> bytes, as the request writer wrote it:
 * its request line, "name: value" CRLF lines, the empty line): its lines
 * but the fields max_forwards_field_is_secret() names, the request line's
 * secret query values left out (echo_request_line()), added to <out>, or
 * only counted when <out> is NULL. Returns its length, or -1 out of
 * memory. */
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
        if (colon == NULL ||
            !max_forwards_field_is_secret(head + at, (size_t)(colon - head) - at)) {
            if (out != NULL && evbuffer_add(out, head + at, end - at) != 0)
                return -1;
            len += end - at;
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
