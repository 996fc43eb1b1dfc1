/* fuzz_http1_head: the request and response head parsers, the heads they
 * forward, and the Host header's split into host and port. Invariants: a
 * parsed head lies within the input, every pointer points into it, the
 * target host holds only the allowed bytes, a strict prefix of a complete
 * head is incomplete, the head written upstream (or back to the client)
 * parses again with the same framing and never carries
 * Proxy-Authorization, the head written upstream carries the client's Host
 * value as it came or (HTTP/1.0 without one) the target's host and port,
 * a split Host is its host then ":port" or nothing, the end of a head
 * found in pieces is where one scan finds it, and a head parsed in pieces
 * is the head parsed at once; a relayed response carries at most one
 * Transfer-Encoding, without empty list elements or identity; other_coding
 * says whether a coding other than chunked and identity is named, and
 * stays so when relayed; the relayed head under a byte limit is that
 * head when it fits, and else refused, nothing written. A parsed
 * request's method override (its query's _method, decoded as PHP reads a
 * name) is looked for within the head, and found exactly when it is
 * refused. The forwarding fields an origin may pick the site by
 * (routing_host.h) are read without a fault, a mismatch says why, and a
 * match holds each one-element field to the target. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gate/http1.h"
#include "gate/method_override.h"
#include "gate/routing_host.h"
#include "policy/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct http_request req, again;
static struct http_response rsp, rsp_again;

static void check(int cond)
{
    if (!cond)
        abort();
}

static int inside(const char *p, size_t n, const char *buf, size_t len)
{
    return p >= buf && n <= len && p - buf <= (ptrdiff_t)(len - n);
}

static void check_headers(const struct http_header *h, size_t n, const char *buf, size_t len)
{
    check(n <= HTTP_MAX_HEADERS);
    for (size_t i = 0; i < n; i++) {
        check(h[i].name_len > 0);
        check(inside(h[i].name, h[i].name_len, buf, len));
        check(inside(h[i].value, h[i].value_len, buf, len));
        for (size_t j = 0; j < h[i].value_len; j++)
            check(h[i].value[j] != '\r' && h[i].value[j] != '\n' && h[i].value[j] != '\0');
    }
}

/* True when a header of that name (any case) is among <h>. */
static int has_header(const struct http_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (h[i].name_len == strlen(name) && strncasecmp(h[i].name, name, h[i].name_len) == 0)
            return 1;
    return 0;
}

/* The next coding of a Transfer-Encoding value: from *<v> (its list ends
 * at <end>) to the next comma, blanks around it dropped, into [<s>, <e>);
 * *<v> moves past the comma. Returns 0 once the list is done. */
static int next_coding(const char **v, const char *end, const char **s, const char **e)
{
    if (*v == NULL || *v > end)
        return 0;
    const char *c = memchr(*v, ',', (size_t)(end - *v));
    *e = c != NULL ? c : end;
    *s = *v;
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
    *v = c != NULL ? c + 1 : NULL;
    return 1;
}

static int is_te(const struct http_header *h)
{
    return h->name_len == 17 && strncasecmp(h->name, "transfer-encoding", 17) == 0;
}

/* The Transfer-Encoding a relayed head carries: at most one field, a
 * list of codings without an empty element or identity (the codings the
 * gateway framed the body by, as one value a client reads alike). */
static void check_relayed_te(const struct http_header *h, size_t n)
{
    size_t fields = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_te(&h[i]))
            continue;
        fields++;
        const char *v = h[i].value, *end = v + h[i].value_len, *s, *e;
        while (next_coding(&v, end, &s, &e))
            check(e > s && !(e - s == 8 && strncasecmp(s, "identity", 8) == 0));
    }
    check(fields <= 1);
}

/* Whether a Transfer-Encoding field among <h> names a coding other than
 * chunked and identity (what other_coding must say: an HTTP/1.0 client
 * cannot take such a body). */
static int names_other_coding(const struct http_header *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!is_te(&h[i]))
            continue;
        const char *v = h[i].value, *end = v + h[i].value_len, *s, *e;
        while (next_coding(&v, end, &s, &e))
            if (e > s && !(e - s == 7 && strncasecmp(s, "chunked", 7) == 0) &&
                !(e - s == 8 && strncasecmp(s, "identity", 8) == 0))
                return 1;
    }
    return 0;
}

/* http1_split_host on <v>: the host is a part of <v> from its start (with
 * both brackets when it starts with one), and what follows it is nothing,
 * or ":" and the decimal port (nothing after the colon: port 0). */
static void check_split_host(const char *v, size_t len)
{
    const char *h = NULL;
    size_t hlen = 0;
    uint16_t port = 1;
    if (http1_split_host(v, len, &h, &hlen, &port) != 0)
        return;
    check(h == v && hlen <= len);
    if (len > 0 && v[0] == '[')
        check(hlen >= 2 && h[hlen - 1] == ']' && memchr(h + 1, ']', hlen - 2) == NULL);
    else
        check(memchr(h, ':', hlen) == NULL);
    if (hlen == len) {
        check(port == 0);
        return;
    }
    check(v[hlen] == ':' && len - hlen - 1 <= 5);
    unsigned long p = 0;
    for (size_t i = hlen + 1; i < len; i++) {
        check(v[i] >= '0' && v[i] <= '9');
        p = p * 10 + (unsigned long)(v[i] - '0');
    }
    check(p == port && (port != 0 || len == hlen + 1));
}

/* The Host an origin reads in <up>, the head written upstream for req:
 * req's own value, byte for byte, or one built from its target. */
static void check_upstream_host(const struct http_request *up)
{
    check(up->host_header != NULL);
    if (req.host_header != NULL) {
        check(up->host_header_len == req.host_header_len &&
              memcmp(up->host_header, req.host_header, req.host_header_len) == 0);
        return;
    }
    const char *h = NULL;
    size_t hlen = 0, tl = strlen(req.host), b = req.host_ipv6 ? 1 : 0;
    uint16_t port = 1;
    check(http1_split_host(up->host_header, up->host_header_len, &h, &hlen, &port) == 0);
    check(hlen == tl + 2 * b && memcmp(h + b, req.host, tl) == 0);
    check(port == (req.port == 80 ? 0 : req.port));
}

/* The forwarding fields of an absolute-form request, held to its target:
 * a mismatch says why, and a match holds every field of the X-Forwarded-Host
 * kind that is one element (no comma) to the target as a Host value is. */
static void check_routing(const struct http_request *r)
{
    struct host target;
    const char *why = NULL;
    if (host_normalise(r->host, strlen(r->host), &target, &why) < 0)
        return;
    why = NULL;
    struct ip_spelling spelling = {.as_written = r->host};
    enum routing_host_result res = routing_fields_name(r, &target, r->port, 80, spelling, &why);
    check(res == ROUTING_HOST_MATCH || res == ROUTING_HOST_OTHER_HOST ||
          res == ROUTING_HOST_OTHER_PORT);
    if (res != ROUTING_HOST_MATCH) {
        check(why != NULL);
        return;
    }
    for (size_t i = 0; i < r->nheaders; i++) {
        const struct http_header *h = &r->headers[i];
        if (h->field == HTTP_FIELD_HOST_ALIAS && h->value_len > 0 &&
            memchr(h->value, ',', h->value_len) == NULL)
            check(routing_host_names(h->value, h->value_len, &target, r->port, 80, spelling) ==
                  ROUTING_HOST_MATCH);
    }
}

static void check_request(const char *buf, size_t len)
{
    const char *why = NULL;
    int rc = http1_parse_request(buf, len, len + 1, &req, &why);
    check(rc >= HTTP1_BAD && rc <= (int)len);
    if (rc < 0)
        check(why != NULL);
    if (rc <= 0)
        return;
    check(req.head_len == (size_t)rc);
    check_headers(req.headers, req.nheaders, buf, (size_t)rc);
    check(req.method[0] != '\0' && strlen(req.method) <= HTTP_METHOD_MAX);
    if (req.host_header != NULL) {
        check(inside(req.host_header, req.host_header_len, buf, (size_t)rc));
        check_split_host(req.host_header, req.host_header_len);
    }
    if (req.proxy_authorization != NULL)
        check(inside(req.proxy_authorization, req.proxy_authorization_len, buf, (size_t)rc));
    if (req.form == TARGET_ABSOLUTE || req.form == TARGET_AUTHORITY) {
        size_t hl = strlen(req.host);
        check(hl > 0 && hl <= HTTP_HOST_MAX);
        for (size_t i = 0; i < hl; i++) {
            char c = req.host[i];
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '.' || (req.host_ipv6 ? c == ':' : (c == '-' || c == '_'));
            check(ok);
        }
        check(req.port != 0);
    }
    if (req.form == TARGET_AUTHORITY)
        check(req.method_bit == METHOD_CONNECT && req.port_explicit);
    if (req.form == TARGET_ABSOLUTE)
        check(req.path_len > 0 && req.path[0] == '/' &&
              (req.path_len == 1 || inside(req.path, req.path_len, buf, (size_t)rc)));
    check(!(req.chunked && req.content_length >= 0));
    check((method_override_find(&req) == NULL) == (method_override_refusal(&req) == NULL));
    /* A strict prefix of the head is incomplete (or refused for a bare LF,
     * which the complete head cannot contain). */
    check(http1_parse_request(buf, (size_t)rc - 1, len + 1, &again, &why) == HTTP1_NEED_MORE);

    if (req.form != TARGET_ABSOLUTE)
        return;
    check_routing(&req);
    struct evbuffer *out = evbuffer_new();
    check(out != NULL);
    /* The writer refuses, writing nothing, a head that would go on with
     * more fields than the parser takes: it adds Host, Via and Connection
     * at most. */
    int wr = http1_write_upstream_request(&req, out);
    check(wr == 0 || (wr == HTTP1_TOO_MANY_FIELDS && req.nheaders > HTTP_MAX_HEADERS - 3 &&
                      evbuffer_get_length(out) == 0));
    if (wr != 0) {
        evbuffer_free(out);
        return;
    }
    size_t n = evbuffer_get_length(out);
    char *s = (char *)evbuffer_pullup(out, -1);
    check(s != NULL);
    /* Reparsed, it is the same request with the same framing. */
    int rc2 = http1_parse_request(s, n, n + 1, &again, &why);
    check(rc2 == (int)n);
    check(again.form == TARGET_ORIGIN);
    check(again.method_bit == req.method_bit);
    check(again.content_length == req.content_length);
    check(again.chunked == req.chunked);
    check(again.conn_close);
    check(again.proxy_authorization == NULL);
    check_upstream_host(&again);
    check(!has_header(again.headers, again.nheaders, "proxy-authorization"));
    check(!has_header(again.headers, again.nheaders, "proxy-connection"));
    evbuffer_free(out);
}

/* http1_write_upstream_response_max() against the head written without a
 * limit, <s> (<n> bytes): at a limit of <n> and above it writes the same
 * bytes; a byte under it (and at a limit taken from the head) refuses it,
 * HTTP1_TOO_BIG, writing nothing. */
static void check_response_max(const char *s, size_t n, unsigned flags)
{
    const char *date = "Sun, 06 Nov 1994 08:49:37 GMT";
    size_t limits[] = {n, n + 1, n - 1, n / 2, (unsigned char)s[n / 3]};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        struct evbuffer *out = evbuffer_new();
        check(out != NULL);
        int wr = http1_write_upstream_response_max(&rsp, out, flags, date, limits[i]);
        size_t got = evbuffer_get_length(out);
        if (limits[i] >= n)
            check(wr == 0 && got == n && memcmp(evbuffer_pullup(out, -1), s, n) == 0);
        else
            check(wr == HTTP1_TOO_BIG && got == 0);
        evbuffer_free(out);
    }
}

static void check_response(const char *buf, size_t len)
{
    const char *why = NULL;
    int rc = http1_parse_response(buf, len, len + 1, &rsp, &why);
    check(rc >= HTTP1_BAD && rc <= (int)len);
    if (rc < 0)
        check(why != NULL);
    if (rc <= 0)
        return;
    check(rsp.head_len == (size_t)rc);
    check(rsp.status >= 100 && rsp.status <= 999);
    check_headers(rsp.headers, rsp.nheaders, buf, (size_t)rc);
    check(inside(rsp.reason, rsp.reason_len, buf, (size_t)rc));
    check(!(rsp.chunked && rsp.content_length >= 0));
    check(rsp.other_coding == names_other_coding(rsp.headers, rsp.nheaders));
    enum body_kind k = http1_response_body(&rsp, METHOD_GET);
    check(k != BODY_UNTIL_CLOSE || rsp.content_length < 0);
    check(http1_parse_response(buf, (size_t)rc - 1, len + 1, &rsp_again, &why) == HTTP1_NEED_MORE);

    struct evbuffer *out = evbuffer_new();
    check(out != NULL);
    unsigned flags = (unsigned)(len & 3); /* HTTP1_RSP_KEEP_ALIVE, HTTP1_RSP_UNCHUNKED */
    /* refused, nothing written, past the parser's limit: it adds Via, Date
     * and Connection at most */
    int wr = http1_write_upstream_response(&rsp, out, flags, "Sun, 06 Nov 1994 08:49:37 GMT");
    check(wr == 0 || (wr == HTTP1_TOO_MANY_FIELDS && rsp.nheaders > HTTP_MAX_HEADERS - 3 &&
                      evbuffer_get_length(out) == 0));
    if (wr != 0) {
        evbuffer_free(out);
        return;
    }
    size_t n = evbuffer_get_length(out);
    char *s = (char *)evbuffer_pullup(out, -1);
    check(s != NULL);
    int rc2 = http1_parse_response(s, n, n + 1, &rsp_again, &why);
    check(rc2 == (int)n);
    check(rsp_again.status == rsp.status);
    /* An interim (1xx) head, a 204 and a 304 go on without their framing
     * fields (they have no body, RFC 9110 15.2, 15.3.5, 15.4.5). */
    int bare = rsp.status < 200 || rsp.status == 204 || rsp.status == 304;
    check(rsp_again.content_length == (bare ? -1 : rsp.content_length));
    check(rsp_again.chunked == (!bare && rsp.chunked && !(flags & HTTP1_RSP_UNCHUNKED)));
    /* Codings other than chunked go on as they came (or not at all). */
    check(rsp_again.other_coding == (!bare && rsp.other_coding && !(flags & HTTP1_RSP_UNCHUNKED)));
    if (flags & HTTP1_RSP_UNCHUNKED)
        check(!has_header(rsp_again.headers, rsp_again.nheaders, "transfer-encoding"));
    check_relayed_te(rsp_again.headers, rsp_again.nheaders);
    check(!has_header(rsp_again.headers, rsp_again.nheaders, "proxy-authenticate"));
    check(!has_header(rsp_again.headers, rsp_again.nheaders, "sluice-reason"));
    check_response_max(s, n, flags);
    evbuffer_free(out);
}

/* http1_head_end() fed <buf> in pieces (of 1 to 16 bytes, sizes taken from
 * the bytes themselves) gives, at every step, what one scan of the bytes so
 * far gives: resuming where it stopped changes no result. */
static void check_head_end_in_pieces(const char *buf, size_t len)
{
    struct http1_scan resumed = {0};
    size_t max_head = len / 2 + 1; /* HTTP1_TOO_BIG is reached too */
    size_t n = 0;
    while (n < len) {
        n += 1 + (size_t)((unsigned char)buf[n] & 15);
        if (n > len)
            n = len;
        const char *why = NULL, *why_once = NULL;
        struct http1_scan once = {0};
        int rc = http1_head_end(&resumed, buf, n, max_head, &why);
        check(rc == http1_head_end(&once, buf, n, max_head, &why_once));
        if (rc != HTTP1_NEED_MORE)
            return;
    }
}

/* The parsers with a scan, fed <buf> in pieces as check_head_end_in_pieces()
 * feeds it, give at every step what the parsers give of the bytes so far:
 * the same return and reason, and once a head parses, the same head. */
static void check_parse_in_pieces(const char *buf, size_t len)
{
    struct http1_scan req_scan = {0}, rsp_scan = {0};
    /* Half the inputs (by their last byte) come whole, under a limit they
     * are within: a head in them is parsed in one pass. */
    int whole = len > 0 && (buf[len - 1] & 1);
    size_t max_head = whole ? len + 1 : len / 2 + 1;
    int req_done = 0, rsp_done = 0;
    size_t n = 0;
    while (n < len && !(req_done && rsp_done)) {
        n += whole ? len : 1 + (size_t)((unsigned char)buf[n] & 15);
        if (n > len)
            n = len;
        const char *why = NULL, *why_once = NULL;
        if (!req_done) {
            int rc = http1_parse_request_scan(&req_scan, buf, n, max_head, &again, &why);
            check(rc == http1_parse_request(buf, n, max_head, &req, &why_once));
            check(rc >= 0 || strcmp(why, why_once) == 0);
            check(rc <= 0 || (again.nheaders == req.nheaders && again.head_len == req.head_len &&
                              again.content_length == req.content_length &&
                              again.chunked == req.chunked && again.conn_close == req.conn_close));
            req_done = rc != HTTP1_NEED_MORE;
        }
        if (!rsp_done) {
            int rc = http1_parse_response_scan(&rsp_scan, buf, n, max_head, &rsp_again, &why);
            check(rc == http1_parse_response(buf, n, max_head, &rsp, &why_once));
            check(rc >= 0 || strcmp(why, why_once) == 0);
            check(rc <= 0 ||
                  (rsp_again.nheaders == rsp.nheaders && rsp_again.head_len == rsp.head_len &&
                   rsp_again.content_length == rsp.content_length &&
                   rsp_again.status == rsp.status && rsp_again.chunked == rsp.chunked));
            rsp_done = rc != HTTP1_NEED_MORE;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    /* An exact-size copy: ASan flags any read past the input. */
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    check_request(buf, size);
    check_response(buf, size);
    check_head_end_in_pieces(buf, size);
    check_parse_in_pieces(buf, size);
    check_split_host(buf, size < 300 ? size : 300); /* any bytes as a Host value */
    /* A small max_head never yields a head longer than it. */
    const char *why;
    int rc = http1_parse_request(buf, size, 64, &req, &why);
    check(rc <= 64);
    if (size >= 64 && rc == HTTP1_NEED_MORE)
        abort();
    free(buf);
    return 0;
}
