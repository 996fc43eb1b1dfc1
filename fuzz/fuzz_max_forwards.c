/* fuzz_max_forwards: a TRACE's or OPTIONS's Max-Forwards, from the parser
 * to the head sent on or the gateway's own answer (gate/max_forwards.h).
 * The first byte says whether the connection is kept; the rest is a
 * request head. Invariants: the parser reads Max-Forwards for TRACE and
 * OPTIONS only, as its digits capped at HTTP1_MAX_FORWARDS_MAX; a request
 * ends at the gateway exactly when that value is 0; else the head sent on
 * carries the count decremented (once, the only Max-Forwards) unless the
 * client named the field in Connection, and the field as it came for the
 * other methods. The gateway's answer is a 200 whose Content-Length is its
 * content, and whose Connection says <keep>; an OPTIONS gets no content,
 * a TRACE (message/http) the head it would have sent on, left as it was,
 * but for the fields whose names say they may hold a secret, and the
 * values of the parameters whose names do, in its target and in the URL
 * of a Referer (Origin, Content-Location, Location): a path segment's
 * after ';', the query's and the fragment's. That echo
 * never reflects more than the head it was given: it parses again as a
 * request (the writer refuses one with more fields than the parser
 * takes), holds no Proxy-Authorization (the agent's
 * secret), no hop-by-hop field, no Sluice-* or Proxy field; each of its
 * fields is one of the request's, but for those the writer makes (Host of
 * an HTTP/1.0 request without one, the Via member, Connection) and those it
 * rewrites (Max-Forwards, Content-Length, Transfer-Encoding); and it is no longer than the head
 * with a byte more a field (the space after its colon) and the lines the
 * gateway adds. The echo, read by the parser, is a request head whose
 * fields are those of the head sent on, in order, less the secret ones. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gate/conn.h"
#include "gate/gateway.h"
#include "gate/http1.h"
#include "gate/max_forwards.h"
#include "policy/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEAD (64u * 1024)

static struct http_request req, echo;
static struct http_response rsp;

static void check(int cond)
{
    if (!cond)
        abort();
}

static int name_is(const struct http_header *h, const char *name)
{
    return h->name_len == strlen(name) && strncasecmp(h->name, name, h->name_len) == 0;
}

/* How many fields of <h> are named <name>; the last one's into *<last>. */
static size_t count_named(const struct http_header *h, size_t n, const char *name,
                          const struct http_header **last)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (name_is(&h[i], name)) {
            k++;
            *last = &h[i];
        }
    return k;
}

/* Whether <needle> appears, in any case, in a Connection field of <h>. */
static int connection_mentions(const struct http_header *h, size_t n, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = 0; i < n; i++) {
        if (!name_is(&h[i], "connection"))
            continue;
        for (size_t j = 0; j + nl <= h[i].value_len; j++)
            if (strncasecmp(h[i].value + j, needle, nl) == 0)
                return 1;
    }
    return 0;
}

/* The Max-Forwards value the parser should have read: its digits, capped;
 * -1 without the field or for another method. */
static int64_t expected_max_forwards(const struct http_request *r)
{
    if (r->method_bit != METHOD_TRACE && r->method_bit != METHOD_OPTIONS)
        return -1;
    const struct http_header *f = NULL;
    size_t k = count_named(r->headers, r->nheaders, "max-forwards", &f);
    if (k == 0)
        return -1;
    check(k == 1); /* several are refused */
    int64_t v = 0;
    check(f->value_len > 0);
    for (size_t i = 0; i < f->value_len; i++) {
        check(isdigit((unsigned char)f->value[i]));
        v = v * 10 + (f->value[i] - '0');
        if (v > HTTP1_MAX_FORWARDS_MAX)
            v = HTTP1_MAX_FORWARDS_MAX;
    }
    return v;
}

/* Whether <f> of the echo is among the request's fields, name and value. */
static int from_request(const struct http_header *f)
{
    for (size_t i = 0; i < req.nheaders; i++) {
        const struct http_header *g = &req.headers[i];
        if (g->name_len == f->name_len && memcmp(g->name, f->name, f->name_len) == 0 &&
            g->value_len == f->value_len && memcmp(g->value, f->value, f->value_len) == 0)
            return 1;
    }
    return 0;
}

/* The fields of the head sent on, read line by line (the writer writes
 * each "name: value" CRLF): the parser refuses more than HTTP_MAX_HEADERS,
 * and the writer adds up to three to as many. */
static struct http_header sent[HTTP_MAX_HEADERS + 3];
static size_t nsent;

static void read_sent(const char *e, size_t n)
{
    const char *end = e + n, *p = memchr(e, '\n', n);
    check(p != NULL && n >= 4 && memcmp(end - 4, "\r\n\r\n", 4) == 0);
    nsent = 0;
    for (p++; p < end - 2;) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (eol == NULL || eol[1] != '\n')
            abort();
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL || colon == p)
            abort();
        check(colon[1] == ' ' && nsent < sizeof(sent) / sizeof(sent[0]));
        struct http_header *f = &sent[nsent++];
        f->name = p;
        f->name_len = (size_t)(colon - p);
        f->value = colon + 2;
        f->value_len = (size_t)(eol - colon - 2);
        f->field = http1_field(f->name, f->name_len);
        p = eol + 2;
    }
}

/* The echoed head <e> (<n> bytes) against the request it came of. */
static void check_echo(const char *e, size_t n, int64_t mf)
{
    const char *why = NULL;
    /* the writer wrote it: no more fields than the parser takes */
    check(http1_parse_request(e, n, MAX_HEAD + 4096, &echo, &why) == (int)n);
    check(echo.form == TARGET_ORIGIN && echo.method_bit == req.method_bit);
    check(echo.proxy_authorization == NULL);
    read_sent(e, n);
    const struct http_header *conn = NULL;
    for (size_t i = 0; i < nsent; i++) {
        const struct http_header *f = &sent[i];
        check(f->field != HTTP_FIELD_SLUICE && f->field != HTTP_FIELD_PROXY);
        check(f->field != HTTP_FIELD_PROXY_AUTHORIZATION);
        if (f->field == HTTP_FIELD_CONNECTION) {
            check(conn == NULL && i == nsent - 1); /* the writer's own, last */
            conn = f;
            continue;
        }
        check(!http1_is_hop_by_hop(f->name, f->name_len));
        if (f->field == HTTP_FIELD_MAX_FORWARDS && mf > 0) {
            check(f->value_len >= 1 && f->value_len <= 3);
            int64_t v = 0;
            for (size_t j = 0; j < f->value_len; j++)
                v = v * 10 + (f->value[j] - '0');
            check(v == mf - 1);
            continue;
        }
        if (f->field == HTTP_FIELD_VIA || f->field == HTTP_FIELD_CONTENT_LENGTH ||
            f->field == HTTP_FIELD_TRANSFER_ENCODING ||
            (f->field == HTTP_FIELD_HOST && req.host_header == NULL))
            continue;
        check(from_request(f));
    }
    check(conn != NULL);
    /* The request line loses the scheme and authority; the writer adds at
     * most a Host line, a Via line and its Connection line. */
    size_t added = req.host_header == NULL ? sizeof("Host: []:65535\r\n") + strlen(req.host) : 0;
    added += sizeof("Via: 1.1 " HTTP1_VIA_BY "\r\n") + sizeof("Connection: keep-alive\r\n");
    /* a field sent as "name:value" goes on as "name: value" */
    check(n <= req.head_len + req.nheaders + added);
}

/* The expected echo of a URL, built apart from the gateway's walk: the
 * URL cut at its first '?' or '#' into its path and its query (the
 * fragment with it), the path into its '/' segments, each segment into
 * its name and its ';' parameters, the query into parameters at '&', ';'
 * and '#'; a parameter with a '=' whose name max_forwards_param_is_secret()
 * takes is "name=" alone, every other byte as it came. */
static char want[MAX_HEAD + 64];
static size_t nwant;

static void want_add(const char *s, size_t n)
{
    check(nwant + n <= sizeof(want));
    memcpy(want + nwant, s, n);
    nwant += n;
}

/* Adds the parameter <p> (<n> bytes, no separator), its value left out
 * when its name is secret. */
static void want_param(const char *p, size_t n)
{
    const char *eq = memchr(p, '=', n);
    want_add(p, eq != NULL && max_forwards_param_is_secret(p, (size_t)(eq - p))
                    ? (size_t)(eq + 1 - p)
                    : n);
}

static void want_url(const char *u, size_t n)
{
    size_t q = 0;
    while (q < n && u[q] != '?' && u[q] != '#')
        q++;
    for (size_t seg = 0; seg < q;) { /* a segment: up to its '/', or the path's end */
        size_t next = seg;
        while (next < q && u[next] != '/')
            next++;
        const char *semi = memchr(u + seg, ';', next - seg);
        size_t name_end = semi != NULL ? (size_t)(semi - u) : next;
        want_add(u + seg, name_end - seg);
        for (size_t p = name_end; p < next;) { /* p at a ';' */
            size_t stop = p + 1;
            while (stop < next && u[stop] != ';')
                stop++;
            want_add(";", 1);
            want_param(u + p + 1, stop - p - 1);
            p = stop;
        }
        if (next < q)
            want_add("/", 1);
        seg = next + 1;
    }
    if (q == n)
        return;
    want_add(u + q, 1); /* the '?' or '#' */
    for (size_t p = q + 1;;) {
        size_t stop = p;
        while (stop < n && u[stop] != '&' && u[stop] != ';' && u[stop] != '#')
            stop++;
        want_param(u + p, stop - p);
        if (stop == n)
            break;
        want_add(u + stop, 1);
        p = stop + 1;
    }
}

/* Whether <e> (<elen> bytes) starts with the request line <l> (<n> bytes,
 * its CRLF included) as the echo writes it: its method and version as
 * they came, its target (between the first and the last space) as
 * want_url() writes it. Returns the length of that line in <e>, or 0. */
static size_t is_line_echo_of(const char *e, size_t elen, const char *l, size_t n)
{
    const char *sp = memchr(l, ' ', n), *end = l + n;
    while (end > l && end[-1] != ' ')
        end--; /* past the space before the version */
    nwant = 0;
    if (sp == NULL || end <= sp + 1) {
        want_add(l, n);
    } else {
        want_add(l, (size_t)(sp + 1 - l));
        want_url(sp + 1, (size_t)(end - 1 - (sp + 1)));
        want_add(end - 1, (size_t)(l + n - (end - 1)));
    }
    if (nwant > elen || memcmp(e, want, nwant) != 0)
        return 0;
    return nwant;
}

/* Whether <e> (<elen> bytes) starts with the field line <l> (<len> bytes,
 * its CRLF included) of a URL field: its name and colon as they came, its
 * value (to the CRLF) as want_url() writes it. Returns its length in <e>,
 * or 0. */
static size_t is_url_field_echo_of(const char *e, size_t elen, const char *l, size_t len,
                                   const char *colon)
{
    check(len >= 2 && l[len - 2] == '\r' && l[len - 1] == '\n');
    nwant = 0;
    want_add(l, (size_t)(colon + 1 - l));
    want_url(colon + 1, (size_t)(l + len - 2 - (colon + 1)));
    want_add("\r\n", 2);
    if (nwant > elen || memcmp(e, want, nwant) != 0)
        return 0;
    return nwant;
}

/* Whether the field <name> (<n> bytes) holds a URL the echo judges:
 * Referer, Origin, Content-Location, Location (the oracle's own list). */
static int is_url_field(const char *name, size_t n)
{
    static const char *const urls[] = {"Referer", "Origin", "Content-Location", "Location"};
    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++)
        if (n == strlen(urls[i]) && strncasecmp(name, urls[i], n) == 0)
            return 1;
    return 0;
}

/* Whether <e> (<elen> bytes) is the head <h> (<n> bytes) with the field
 * lines whose names max_forwards_field_is_secret() takes left out (RFC
 * 9110 9.3.8), the others in their order, as they were, and its request
 * line's secret query values left out (is_line_echo_of()). */
static int is_echo_of(const char *e, size_t elen, const char *h, size_t n)
{
    size_t at = 0, k = 0;
    for (size_t line = 0; at < n; line++) {
        const char *lf = memchr(h + at, '\n', n - at);
        check(lf != NULL);
        size_t len = (size_t)(lf - (h + at)) + 1;
        if (line == 0) {
            size_t got = is_line_echo_of(e, elen, h, len);
            if (got == 0)
                return 0;
            k += got;
            at += len;
            continue;
        }
        const char *colon = memchr(h + at, ':', len);
        if (colon != NULL && max_forwards_field_is_secret(h + at, (size_t)(colon - (h + at)))) {
            at += len;
            continue;
        }
        if (colon != NULL && is_url_field(h + at, (size_t)(colon - (h + at)))) {
            size_t got = is_url_field_echo_of(e + k, elen - k, h + at, len, colon);
            if (got == 0)
                return 0;
            k += got;
            at += len;
            continue;
        }
        if (k + len > elen || memcmp(e + k, h + at, len) != 0)
            return 0;
        k += len;
        at += len;
    }
    return k == elen;
}

/* The echo <e> (<n> bytes) read by the parser, not line by line: a
 * request head whole, with no field whose name says it may hold a secret
 * (RFC 9110 9.3.8's Authorization and Cookie among them), and every other
 * field of the head sent on (read_sent()), in its order. */
static struct http_request echoed;

/* Whether <f>'s value, its blanks around it dropped as the parser drops
 * them, is <g>'s. */
static int same_value(const struct http_header *f, const struct http_header *g)
{
    const char *v = f->value, *end = v + f->value_len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    return (size_t)(end - v) == g->value_len && memcmp(v, g->value, g->value_len) == 0;
}

static void check_echo_parsed(const char *e, size_t n)
{
    const char *why = NULL;
    check(http1_parse_request(e, n, MAX_HEAD + 4096, &echoed, &why) == (int)n);
    check(echoed.method_bit == req.method_bit && echoed.proxy_authorization == NULL);
    size_t k = 0;
    for (size_t i = 0; i < echoed.nheaders; i++) {
        const struct http_header *f = &echoed.headers[i];
        check(!max_forwards_field_is_secret(f->name, f->name_len));
        check(!name_is(f, "authorization") && !name_is(f, "cookie"));
        while (k < nsent && max_forwards_field_is_secret(sent[k].name, sent[k].name_len))
            k++;
        check(k < nsent && sent[k].name_len == f->name_len &&
              memcmp(sent[k].name, f->name, f->name_len) == 0);
        if (is_url_field(f->name, f->name_len)) {
            /* its value as want_url() writes it (the space after the colon
             * is no parameter's: it goes on as it came) */
            nwant = 0;
            want_url(sent[k].value, sent[k].value_len);
            struct http_header w = {.value = want, .value_len = nwant};
            check(same_value(&w, f));
        } else {
            check(same_value(&sent[k], f));
        }
        k++;
    }
    while (k < nsent && max_forwards_field_is_secret(sent[k].name, sent[k].name_len))
        k++;
    check(k == nsent);
}

/* The gateway's answer to the request whose head sent on is <up>. */
static void check_answer(struct evbuffer *up, bool keep)
{
    static struct gateway gw;
    static struct conn c;
    c.gw = &gw;
    c.ex.mbit = req.method_bit;
    c.ex.uphead = up;
    size_t n = evbuffer_get_length(up);
    char *before = malloc(n ? n : 1);
    check(before != NULL);
    evbuffer_copyout(up, before, n);
    struct evbuffer *out = evbuffer_new();
    check(out != NULL);
    check(max_forwards_answer(&c, out, keep) == 0);
    size_t alen = evbuffer_get_length(out);
    const char *a = (const char *)evbuffer_pullup(out, -1);
    const char *why = NULL;
    int hl = http1_parse_response(a, alen, MAX_HEAD, &rsp, &why);
    check(hl > 0);
    check(rsp.status == 200 && rsp.content_length == (int64_t)(alen - (size_t)hl));
    check(rsp.conn_close == !keep);
    const struct http_header *ct = NULL;
    size_t nct = count_named(rsp.headers, rsp.nheaders, "content-type", &ct);
    if (req.method_bit == METHOD_TRACE) {
        check(nct == 1 && ct->value_len == 12 && memcmp(ct->value, "message/http", 12) == 0);
        check(is_echo_of(a + hl, alen - (size_t)hl, before, n));
        check_echo_parsed(a + hl, alen - (size_t)hl);
    } else {
        check(nct == 0 && rsp.content_length == 0);
    }
    /* ex->uphead is kept for the connection's next request, as it was */
    check(evbuffer_get_length(up) == n);
    check(n == 0 || memcmp(evbuffer_pullup(up, -1), before, n) == 0);
    free(before);
    evbuffer_free(out);
    c.ex.uphead = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_HEAD)
        return 0;
    bool keep = data[0] & 1;
    size_t len = size - 1;
    char *buf = malloc(len ? len : 1); /* exact size, for ASan */
    check(buf != NULL);
    memcpy(buf, data + 1, len);
    const char *why = NULL;
    int hl = http1_parse_request(buf, len, MAX_HEAD, &req, &why);
    if (hl <= 0) {
        free(buf);
        return 0;
    }
    int64_t mf = expected_max_forwards(&req);
    check(req.max_forwards == mf);
    bool ends = max_forwards_ends_here(&req);
    check(ends == (mf == 0));
    struct evbuffer *up = evbuffer_new();
    check(up != NULL);
    if (req.form != TARGET_ABSOLUTE ||
        http1_write_upstream_request_keep(&req, up, keep && !req.conn_close) != 0) {
        evbuffer_free(up);
        free(buf);
        return 0;
    }
    size_t n = evbuffer_get_length(up);
    const char *u = (const char *)evbuffer_pullup(up, -1);
    check_echo(u, n, mf);
    /* The count sent on: decremented, the only one; as it came for the
     * other methods (Max-Forwards goes on as any field). */
    const struct http_header *f = NULL;
    size_t k = count_named(sent, nsent, "max-forwards", &f);
    if (mf > 0) {
        check(k <= 1);
        if (!connection_mentions(req.headers, req.nheaders, "max-forwards"))
            check(k == 1); /* its value checked by check_echo() */
    } else if (mf < 0 && (req.method_bit == METHOD_TRACE || req.method_bit == METHOD_OPTIONS)) {
        check(k == 0);
    }
    if (ends)
        check_answer(up, keep);
    evbuffer_free(up);
    free(buf);
    return 0;
}
