/* peek_http: the host a plain HTTP/1.x request at the start of a CONNECT
 * tunnel names (see peek_http.h). */
#include "gate/peek_http.h"

#include <stdbool.h>
#include <string.h>

#include "gate/http1.h"
#include "gate/routing_host.h"

/* Whitespace some request-line parser takes as a separator: also the
 * bytes Python's str.split() takes as whitespace once http.server has
 * decoded the line as Latin-1 (CR, FS, GS, RS, US, NEL, NBSP), which it
 * splits the request line with ("GET\r/\rHTTP/1.1": the line is read up to
 * its LF). */
static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' ||
           (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0;
}

/* True when the <n> bytes at <w> start with <prefix> (lower case), in any
 * case. */
static bool starts_with_nocase(const char *w, size_t n, const char *prefix)
{
    size_t plen = strlen(prefix);
    if (n < plen)
        return false;
    for (size_t i = 0; i < plen; i++) {
        unsigned char c = (unsigned char)w[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c + 32);
        if (c != (unsigned char)prefix[i])
            return false;
    }
    return true;
}

static bool starts_http(const char *w, size_t n)
{
    return starts_with_nocase(w, n, "http/");
}

/* The versions Node.js's llhttp takes besides HTTP/ ones: RTSP/ (with GET,
 * POST, OPTIONS, ...) and ICE/ (with SOURCE). Its server then hands the
 * request to the application as an HTTP/1.x one, which picks the site by
 * its Host: such a line cannot be told from a request, and is refused. */
static bool starts_other_protocol(const char *w, size_t n)
{
    return starts_with_nocase(w, n, "rtsp/") || starts_with_nocase(w, n, "ice/");
}

enum line_kind {
    LINE_NEED_MORE,
    LINE_NOT_HTTP,
    LINE_HTTP1,        /* ends in HTTP/1.0 or HTTP/1.1 */
    LINE_HTTP09_ABS,   /* HTTP/0.9 with an absolute-form target: "GET http://h/" */
    LINE_HTTP09_HEAD,  /* HTTP/0.9 that header fields may follow: "GET /" (llhttp) */
    LINE_CONNECT_BARE, /* "CONNECT" and whitespace alone (llhttp: an empty target) */
    LINE_OTHER_VERSION,
    LINE_BARE_CR, /* a version followed by a CR that is not the line's end */
};

/* A byte of a URI scheme (RFC 3986 3.1): a letter first, then letters,
 * digits, '+', '-' and '.'. */
static bool is_scheme_char(unsigned char c, bool first)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return !first && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.');
}

/* True when the <n> bytes at <w> are an absolute-form request target: a
 * scheme, whatever it is (nginx takes any), then "://". */
static bool absolute_form(const char *w, size_t n)
{
    size_t i = 0;
    while (i < n && is_scheme_char((unsigned char)w[i], i == 0))
        i++;
    return i > 0 && n - i >= 3 && memcmp(w + i, "://", 3) == 0;
}

/* The request target of a first line: the word that starts after the
 * whitespace behind the method token at <j>, up to <e> (the line's end,
 * trailing whitespace excluded). Sets <*n> to its length. */
static const char *second_word(const char *buf, size_t j, size_t e, size_t *n)
{
    while (j < e && is_ws((unsigned char)buf[j]))
        j++;
    size_t k = j;
    while (k < e && !is_ws((unsigned char)buf[k]))
        k++;
    *n = k - j;
    return buf + j;
}

/* True when a word that starts like a version (HTTP/, RTSP/, ICE/) is
 * followed, whitespace aside, by a bare CR: one before a byte other than
 * the line's LF (<lf>), the line scanned from the method's end <j>.
 * Node.js's llhttp, lenient (insecureHTTPParser, --insecure-http-parser),
 * ends the request line there and serves the header fields behind it
 * ("GET / HTTP/1.1\rHost: other\r\n"), while the line up to its LF ends
 * in another word. One pass: the last word seen is kept. */
static bool version_before_bare_cr(const char *buf, size_t j, size_t lf)
{
    size_t ws = j, we = j; /* the last word seen: [ws, we) */
    size_t i = j;
    while (i < lf) {
        if (!is_ws((unsigned char)buf[i])) {
            ws = i;
            while (i < lf && !is_ws((unsigned char)buf[i]))
                i++;
            we = i;
            continue;
        }
        if (buf[i] == '\r' && i + 1 < lf &&
            (starts_http(buf + ws, we - ws) || starts_other_protocol(buf + ws, we - ws)))
            return true;
        i++;
    }
    return false;
}

/* Classifies the first line of <buf> (<len> bytes, leading empty lines
 * already skipped). On LINE_HTTP09_ABS and LINE_HTTP09_HEAD sets <*target>
 * and <*tlen> to the request target. */
static enum line_kind first_line(const char *buf, size_t len, const char **target, size_t *tlen)
{
    size_t j = 0;
    while (j < len && http1_is_tchar((unsigned char)buf[j]))
        j++;
    if (j == len)
        return LINE_NEED_MORE; /* a method token so far */
    if (j == 0 || !is_ws((unsigned char)buf[j]))
        return LINE_NOT_HTTP;
    /* No byte before the LF makes it another protocol: Python's
     * http.server takes a NUL in a request target, nginx before 1.21.1
     * (1.18 in Debian 11 and Ubuntu 20.04) the other control bytes and DEL,
     * and the Host header then picks the site as for any request. */
    size_t k = j + 1;
    while (k < len && buf[k] != '\n')
        k++;
    if (k == len)
        return LINE_NEED_MORE;
    if (version_before_bare_cr(buf, j, k))
        return LINE_BARE_CR;
    size_t e = k; /* the LF */
    while (e > j && (is_ws((unsigned char)buf[e - 1]) || buf[e - 1] == '\r'))
        e--;
    size_t w = e;
    while (w > j && !is_ws((unsigned char)buf[w - 1]))
        w--;
    const char *word = buf + w;
    size_t n = e - w;
    if (starts_other_protocol(word, n))
        return LINE_OTHER_VERSION;
    if (!starts_http(word, n)) {
        /* HTTP/0.9 ("GET target", no version) carries no Host, but an
         * absolute-form target picks the site all the same: nginx serves
         * "GET http://other/" from other's virtual host, and before 1.21.1
         * "GET http://other/ more words" too (spaces in a target). */
        *target = second_word(buf, j, e, tlen);
        /* Node.js's llhttp parses header fields after "METHOD SP target"
         * (an origin-form, '*' or absolute-form one) and its server picks
         * the site by that Host as for any request; after "CONNECT SP
         * target" (its case only, as llhttp's) with any target, for which
         * its server emits 'connect', and the forward proxy of Node.js's
         * documentation then connects to the host and port it names. */
        bool connect = j == 7 && memcmp(buf, "CONNECT", 7) == 0;
        /* "CONNECT " alone: llhttp takes the empty target, and Node.js's
         * server emits 'connect' with the header fields behind it, whose
         * Host is then all a proxy has to go by. No target can name the
         * CONNECT's. */
        if (connect && *tlen == 0)
            return LINE_CONNECT_BARE;
        /* Python's http.server takes "GET SP word" for an HTTP/0.9 GET
         * whatever the word, reads the header fields behind it, and serves
         * it with their Host. */
        bool get = j == 3 && memcmp(buf, "GET", 3) == 0;
        if (*tlen > 0 && *target + *tlen == buf + e &&
            (connect || get || (*target)[0] == '/' || (*target)[0] == '*' ||
             absolute_form(*target, *tlen)))
            return LINE_HTTP09_HEAD;
        return absolute_form(*target, *tlen) ? LINE_HTTP09_ABS : LINE_NOT_HTTP;
    }
    if (n == 8 && (memcmp(word, "HTTP/1.0", 8) == 0 || memcmp(word, "HTTP/1.1", 8) == 0))
        return LINE_HTTP1;
    return LINE_OTHER_VERSION;
}

/* Checks the authority of the absolute-form target <t> (<len> bytes) of an
 * HTTP/0.9 request line against <target>:<port>, as http1.c's parse of a
 * later version's would be (userinfo is refused). */
static enum peek_http_result judge_simple(const char *t, size_t len, const struct host *target,
                                          uint16_t port, const char **why)
{
    const char *a = (const char *)memchr(t, ':', len) + 3; /* past "://" */
    size_t alen = 0, left = len - (size_t)(a - t);
    while (alen < left && a[alen] != '/' && a[alen] != '?' && a[alen] != '#')
        alen++;
    const char *h;
    size_t hlen;
    uint16_t hport;
    if (memchr(a, '@', alen) != NULL || http1_split_host(a, alen, &h, &hlen, &hport) < 0 ||
        !host_sent_names(h, hlen, target, IP_SPELLING_CANONICAL)) {
        *why = "the request target names another host";
        return PEEK_HTTP_MISMATCH;
    }
    if (hport != 0 && hport != port) {
        *why = "the request target names another port";
        return PEEK_HTTP_MISMATCH;
    }
    return PEEK_HTTP_MATCH;
}

/* Checks the parsed head <req> against <target>:<port>. */
static enum peek_http_result judge_head(const struct http_request *req, const struct host *target,
                                        uint16_t port, const char **why)
{
    if (req->form == TARGET_ABSOLUTE || req->form == TARGET_AUTHORITY) {
        if (!host_sent_names(req->host, strlen(req->host), target, IP_SPELLING_CANONICAL)) {
            *why = "the request target names another host";
            return PEEK_HTTP_MISMATCH;
        }
        if (req->port_explicit && req->port != port) {
            *why = "the request target names another port";
            return PEEK_HTTP_MISMATCH;
        }
    }
    /* HTTP/1.0 may have no Host (http1.c refuses HTTP/1.1 without one).
     * Without a port, a Host and the fields an origin behind a front may
     * pick the site by instead (routing_host.h) are accepted. */
    if (req->host_header != NULL) {
        enum routing_host_result r = routing_host_names(req->host_header, req->host_header_len,
                                                        target, port, port, IP_SPELLING_CANONICAL);
        if (r != ROUTING_HOST_MATCH) {
            *why = r == ROUTING_HOST_OTHER_PORT ? "the Host header names another port"
                                                : "the Host header names another host";
            return PEEK_HTTP_MISMATCH;
        }
    }
    if (routing_fields_name(req, target, port, port, IP_SPELLING_CANONICAL, why) !=
        ROUTING_HOST_MATCH)
        return PEEK_HTTP_MISMATCH;
    return PEEK_HTTP_MATCH;
}

/* The result of the classified first line <k> (its request target <t>,
 * <tlen> bytes, for LINE_HTTP09_ABS) of a <len>-byte input; NEED_MORE for
 * LINE_HTTP1, whose head is parsed next. */
static enum peek_http_result line_verdict(enum line_kind k, const char *t, size_t tlen, size_t len,
                                          size_t max_head, const struct host *target, uint16_t port,
                                          const char **why)
{
    switch (k) {
    case LINE_NOT_HTTP:
        return PEEK_HTTP_NOT_HTTP;
    case LINE_HTTP09_ABS:
        return judge_simple(t, tlen, target, port, why);
    case LINE_HTTP09_HEAD:
        /* Header fields may follow: the head is parsed next. Another host
         * in the target refuses it at once. */
        if (absolute_form(t, tlen) &&
            judge_simple(t, tlen, target, port, why) == PEEK_HTTP_MISMATCH)
            return PEEK_HTTP_MISMATCH;
        return PEEK_HTTP_NEED_MORE;
    case LINE_CONNECT_BARE:
        *why = "a CONNECT request line without a target";
        return PEEK_HTTP_MISMATCH;
    case LINE_OTHER_VERSION:
        *why = "a version other than HTTP/1.0 and HTTP/1.1";
        return PEEK_HTTP_MISMATCH;
    case LINE_BARE_CR:
        *why = "a request line cut by a bare CR after its version";
        return PEEK_HTTP_MISMATCH;
    case LINE_NEED_MORE:
        if (len >= max_head) {
            *why = "no complete request line";
            return PEEK_HTTP_MISMATCH;
        }
        return PEEK_HTTP_NEED_MORE;
    case LINE_HTTP1:
    default:
        return PEEK_HTTP_NEED_MORE;
    }
}

/* The first line: from where <s> stopped to <lim>, the leading empty lines
 * and whitespace (which a lax server may skip too: skipped, and a head
 * that starts with whitespace is then refused by http1.c, not passed), the
 * method token, the whitespace behind it and the rest of the line up to
 * its LF (each byte looked at once), then first_line() once, on the whole
 * line. Returns LINE_NEED_MORE while the line is incomplete, LINE_NOT_HTTP
 * as soon as it cannot be a request line, else what first_line() says. */
static enum line_kind scan_first_line(struct peek_http_scan *s, const char *buf, size_t lim,
                                      const char **t, size_t *tlen)
{
    size_t i = s->scanned;
    if (s->phase == PEEK_HTTP_LEAD) {
        for (; i < lim; i++) {
            char c = buf[i];
            if (c != '\r' && c != '\n' && !is_ws((unsigned char)c))
                break;
            if (s->from == i && (c == '\r' || c == '\n'))
                s->from = i + 1; /* http1.c parses from the first byte not CR or LF */
        }
        if (i < lim) {
            s->line = i;
            s->phase = PEEK_HTTP_METHOD;
        }
    }
    if (s->phase == PEEK_HTTP_METHOD) {
        while (i < lim && http1_is_tchar((unsigned char)buf[i]))
            i++;
        if (i < lim) {
            if (i == s->line || !is_ws((unsigned char)buf[i])) {
                s->looked += i + 1 - s->scanned;
                s->scanned = i + 1;
                return LINE_NOT_HTTP;
            }
            i++;
            s->phase = PEEK_HTTP_LINE;
        }
    }
    if (s->phase == PEEK_HTTP_LINE) {
        while (i < lim && buf[i] != '\n')
            i++;
    }
    s->looked += i - s->scanned;
    s->scanned = i;
    if (s->phase != PEEK_HTTP_LINE || i == lim)
        return LINE_NEED_MORE;
    s->looked += i + 1 - s->line;
    return first_line(buf + s->line, i + 1 - s->line, t, tlen);
}

/* The head of an HTTP/0.9 request line (LINE_HTTP09_HEAD), <hl> bytes from
 * <s>->from, parsed by http1.c as the HTTP/1.0 head it is to llhttp: the
 * line up to the end of its target, " HTTP/1.0", CRLF, then its header
 * fields, in <head> (PEEK_HTTP09_HEAD_MAX bytes, which <req> then points
 * into). A head longer than that is refused. */
static int parse_http09_head(const char *buf, const struct peek_http_scan *s, size_t hl, char *head,
                             struct http_request *req, const char **why)
{
    static const char version[] = " HTTP/1.0\r\n";
    if (s->from + hl <= s->line_end) {
        /* An empty line ended it before the request line: whitespace,
         * then CRLF, led it in ("\t\r\n\r\nGET /"). */
        *why = "malformed request head";
        return HTTP1_BAD;
    }
    size_t line = s->target_end - s->from;
    size_t fields = s->from + hl - (s->line_end + 1);
    size_t n = line + sizeof(version) - 1 + fields;
    if (n > PEEK_HTTP09_HEAD_MAX) {
        *why = "request head too large";
        return HTTP1_TOO_BIG;
    }
    memcpy(head, buf + s->from, line);
    memcpy(head + line, version, sizeof(version) - 1);
    memcpy(head + line + sizeof(version) - 1, buf + s->line_end + 1, fields);
    return http1_parse_request(head, n, n, req, why);
}

/* Whether the <len> bytes at <buf> start with a PROXY protocol header
 * (HAProxy's v1 line, whose protocol nginx and HAProxy read as "TCP4 ",
 * "TCP6 " or "UNKNOWN", or v2's binary signature): 1 when they do, 0 when
 * they may once more bytes come, -1 when they cannot. */
static int proxy_header(const char *buf, size_t len)
{
    /* Lengths by sizeof, not strlen(): v2's signature holds a NUL. */
    static const struct {
        const char *s;
        size_t len;
    } starts[] = {
        {"PROXY TCP4 ", sizeof("PROXY TCP4 ") - 1},
        {"PROXY TCP6 ", sizeof("PROXY TCP6 ") - 1},
        {"PROXY UNKNOWN", sizeof("PROXY UNKNOWN") - 1},
        {"\r\n\r\n\0\r\nQUIT\n", sizeof("\r\n\r\n\0\r\nQUIT\n") - 1},
    };
    int r = -1;
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
        size_t n = len < starts[i].len ? len : starts[i].len;
        if (memcmp(buf, starts[i].s, n) != 0)
            continue;
        if (n == starts[i].len)
            return 1;
        r = 0;
    }
    return r;
}

enum peek_http_result peek_http_resume(struct peek_http_scan *scan, const char *buf, size_t len,
                                       size_t max_head, const struct host *target, uint16_t port,
                                       const char **why)
{
    if (scan->phase == PEEK_HTTP_DECIDED) {
        if (scan->result == PEEK_HTTP_MISMATCH)
            *why = scan->why;
        return scan->result;
    }
    size_t lim = len < max_head ? len : max_head;
    enum peek_http_result r = PEEK_HTTP_NEED_MORE;
    const char *reason = NULL;
    /* A server that takes a PROXY protocol header (nginx's proxy_protocol,
     * HAProxy's accept-proxy) reads the request or ClientHello behind it,
     * which would go unchecked: refused, as is its claim of another client
     * address. A prefix of one is waited for (at most 13 bytes looked at). */
    int proxy = scan->phase == PEEK_HTTP_HEAD ? -1 : proxy_header(buf, lim);
    if (proxy == 0 && len < max_head)
        return PEEK_HTTP_NEED_MORE;
    if (proxy > 0) {
        r = PEEK_HTTP_MISMATCH;
        reason = "a PROXY protocol header";
    } else if (scan->phase != PEEK_HTTP_HEAD) {
        const char *t = NULL;
        size_t tlen = 0;
        enum line_kind k = scan_first_line(scan, buf, lim, &t, &tlen);
        r = line_verdict(k, t, tlen, len, max_head, target, port, &reason);
        if (k == LINE_HTTP09_HEAD) {
            scan->http09 = true;
            scan->target_end = (size_t)(t + tlen - buf);
            scan->line_end = scan->scanned; /* its LF */
        }
        if (k == LINE_HTTP1 || (k == LINE_HTTP09_HEAD && r == PEEK_HTTP_NEED_MORE))
            scan->phase = PEEK_HTTP_HEAD;
    }
    if (scan->phase == PEEK_HTTP_HEAD) {
        /* The request parser runs once, when the end of the head, or an
         * error, is there: until then the resumed search says NEED_MORE,
         * as the parser's own search from the head's first byte would. */
        size_t before = scan->head.scanned;
        const char *perr = NULL;
        int hl = http1_head_end(&scan->head, buf + scan->from, lim - scan->from,
                                max_head - scan->from, &perr);
        scan->looked += scan->head.scanned - before;
        if (hl == HTTP1_NEED_MORE)
            return PEEK_HTTP_NEED_MORE;
        struct http_request req;
        char head[PEEK_HTTP09_HEAD_MAX]; /* an HTTP/0.9 line's head, as HTTP/1.0 */
        if (scan->http09 && hl > 0) {
            scan->looked += (size_t)hl;
            hl = parse_http09_head(buf, scan, (size_t)hl, head, &req, &perr);
        } else {
            perr = "malformed request head";
            scan->looked += lim - scan->from;
            /* the scan hands the parser the end it found: the head is
             * not searched again from its first byte */
            hl = http1_parse_request_scan(&scan->head, buf + scan->from, lim - scan->from,
                                          max_head - scan->from, &req, &perr);
        }
        if (hl == HTTP1_NEED_MORE)
            return PEEK_HTTP_NEED_MORE; /* not reached: its search ends where ours did */
        if (hl < 0) {
            r = PEEK_HTTP_MISMATCH;
            reason = perr;
        } else {
            r = judge_head(&req, target, port, &reason);
        }
    }
    if (r == PEEK_HTTP_NEED_MORE)
        return r;
    scan->phase = PEEK_HTTP_DECIDED;
    scan->result = r;
    scan->why = reason;
    if (r == PEEK_HTTP_MISMATCH)
        *why = reason;
    return r;
}

enum peek_http_result peek_http_judge(const char *buf, size_t len, size_t max_head,
                                      const struct host *target, uint16_t port, const char **why)
{
    struct peek_http_scan scan = {0};
    return peek_http_resume(&scan, buf, len, max_head, target, port, why);
}
