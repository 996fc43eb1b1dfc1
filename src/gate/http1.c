/* http1: HTTP/1.1 request and response heads (see http1.h). */
#include "gate/http1.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "policy/model.h"
#include "util/http_date.h"
#include "util/units.h"
#include "util/word8.h"

/* ---------------------------------------------------------------------- */
/* Character classes (RFC 9110 5.6.2, 5.5) */

/* The classes a head's bytes are checked for, one load a byte: a head's
 * every byte goes through one of them. T: tchar (ALPHA, DIGIT and
 * !#$%&'*+-.^_`|~); F: field-vchar, SP or HTAB (VCHAR, obs-text, SP, HT);
 * TF: both. */
/* clang-format off */
#define T  1u
#define F  2u
#define TF (T | F)
static const unsigned char char_class[256] = {
    /* 0x00 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, F, 0, 0, 0, 0, 0, 0,
    /* 0x10 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* 0x20 */ F, TF, F, TF, TF, TF, TF, TF, F, F, TF, TF, F, TF, TF, F,
    /* 0x30 */ TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, F, F, F, F, F, F,
    /* 0x40 */ F, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF,
    /* 0x50 */ TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, F, F, F, TF, TF,
    /* 0x60 */ TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF,
    /* 0x70 */ TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, TF, F, TF, F, TF, 0,
    /* 0x80 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0x90 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0xa0 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0xb0 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0xc0 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0xd0 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0xe0 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
    /* 0xf0 */ F, F, F, F, F, F, F, F, F, F, F, F, F, F, F, F,
};
#undef T
#undef F
#undef TF
/* clang-format on */

bool http1_is_tchar(unsigned char c)
{
    return (char_class[c] & 1u) != 0;
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* field-vchar / SP / HTAB: VCHAR, obs-text, SP, HT. */
static bool is_field_char(unsigned char c)
{
    return (char_class[c] & 2u) != 0;
}

/* A byte of a host name in a request target: sluice accepts only what can
 * become a DNS name or an IP literal; host_normalise() does the rest. */
static bool is_host_char(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '.' || c == '-' || c == '_';
}

static unsigned char lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* <a> is <b> but for case; EQI() with a literal <b> in lower case, its
 * length known when compiled (most fields a head is checked for are not:
 * their lengths differ) */
#define EQI(a, alen, b) eqi_lower((a), (alen), "" b, sizeof("" b) - 1) /* b: a literal */

static bool eqi(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++)
        if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
            return false;
    return true;
}

/* eqi() with <b> in lower case already (the literals): only <a>'s bytes
 * are lowered. */
static bool eqi_lower(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++)
        if (lower((unsigned char)a[i]) != (unsigned char)b[i])
            return false;
    return true;
}

bool http1_is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* ---------------------------------------------------------------------- */
/* Lists (http1.h, http1_list_next()). */

void http1_list_init(struct http1_list *it, const char *v, size_t len)
{
    it->p = v;
    it->end = v + len;
    it->done = false;
}

bool http1_list_next(struct http1_list *it, const char **elem, size_t *elen)
{
    if (it->done)
        return false;
    const char *s = it->p;
    const char *e = s;
    while (e < it->end && *e != ',')
        e++;
    if (e == it->end)
        it->done = true;
    else
        it->p = e + 1;
    while (s < e && http1_is_ows(*s))
        s++;
    while (e > s && http1_is_ows(e[-1]))
        e--;
    *elem = s;
    *elen = (size_t)(e - s);
    return true;
}

/* The elements of the lists of every field of a head that is one field
 * (all its Connection fields, say), in order, as http1_list_next() gives them. */
struct fields_iter {
    const struct http_header *f;
    const struct http_header *end;
    enum http_field field;
    struct http1_list list;
};

static void fields_init(struct fields_iter *it, const struct http_header *hdrs, size_t n,
                        enum http_field field)
{
    it->f = hdrs;
    it->end = hdrs + n;
    it->field = field;
    it->list = (struct http1_list){NULL, NULL, true}; /* no list yet */
}

static bool fields_next(struct fields_iter *it, const char **elem, size_t *elen)
{
    while (!http1_list_next(&it->list, elem, elen)) {
        while (it->f < it->end && it->f->field != it->field)
            it->f++;
        if (it->f == it->end)
            return false;
        http1_list_init(&it->list, it->f->value, it->f->value_len);
        it->f++;
    }
    return true;
}

static bool all_tchars(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!http1_is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

/* ---------------------------------------------------------------------- */
/* Head framing and header lines */

/* See http1.h; every LF must follow a CR. <scan> keeps the bytes looked at
 * and the start of the line they end in, so a call looks at new bytes only. */
int http1_head_end(struct http1_scan *scan, const char *buf, size_t len, size_t max_head,
                   const char **why)
{
    size_t lim = len < max_head ? len : max_head;
    for (size_t i = scan->scanned; i < lim; i++) {
        /* memchr(): the bytes between line ends are looked at word-wide */
        const char *lf = memchr(buf + i, '\n', lim - i);
        if (lf == NULL)
            break;
        i = (size_t)(lf - buf);
        if (i == 0 || buf[i - 1] != '\r') {
            *why = "bare LF in head";
            return HTTP1_BAD;
        }
        if (i - scan->line_start == 1 && scan->line_start > 0) {
            if (i + 1 > (size_t)INT32_MAX) {
                *why = "head too large";
                return HTTP1_TOO_BIG;
            }
            return (int)(i + 1);
        }
        scan->line_start = i + 1;
    }
    if (lim > scan->scanned)
        scan->scanned = lim;
    if (len >= max_head) {
        *why = "head too large";
        return HTTP1_TOO_BIG;
    }
    return HTTP1_NEED_MORE;
}

/* Finds the end of the head in <buf> in one go (the parsers' own search,
 * from its first byte): returns its length, HTTP1_NEED_MORE, or an error. */
static int find_head_end(const char *buf, size_t len, size_t max_head, const char **why)
{
    struct http1_scan scan = {0, 0};
    return http1_head_end(&scan, buf, len, max_head, why);
}

/* A head's parser: parse_request() or parse_response(), of the head that
 * <buf> starts with into <out>, their struct. The head's empty line starts
 * at <buf> + <lim> - 2 or before: the parser finds it (its first, at a
 * line's start), and returns HTTP1_NEED_MORE when it is not there. */
typedef int head_parser_fn(const char *buf, size_t lim, void *out, const char **why);

/* http1_parse_request() and http1_parse_response(), by their <parse>. */
static int parse_whole(head_parser_fn *parse, const char *buf, size_t len, size_t max_head,
                       void *out, const char **why)
{
    int hl = find_head_end(buf, len, max_head, why);
    if (hl <= 0)
        return hl;
    return parse(buf, (size_t)hl, out, why);
}

/* http1_parse_request_scan() and http1_parse_response_scan(), by their
 * <parse>.
 *
 * A head that came whole (the common case: one read) is parsed in one
 * pass, the parser finding its end as it goes: a head it takes has no LF
 * but its lines' CRLFs (tchars, field-vchars, SP and HTAB have none), so
 * the scan would have found the same end, and the parser given the same
 * from there. Anything else it says (an incomplete head, a refusal, whose
 * reason may then differ) is dropped for the scan's way. It is tried on a
 * head's first bytes only (nothing scanned yet): a head sent a byte at a
 * time is not parsed again at every byte.
 *
 * A refusal of the scan's (a bare LF, a head too large) is left to
 * parse_whole(), which looks for the end from the start, as the scan's
 * callers did before it parsed: the same refusal, with its reason. */
static int parse_scanned(head_parser_fn *parse, struct http1_scan *scan, const char *buf,
                         size_t len, size_t max_head, void *out, const char **why)
{
    size_t lim = len < max_head ? len : max_head;
    if (scan->scanned == 0 && lim >= 4 && lim <= (size_t)INT32_MAX) {
        const char *why_once = NULL;
        int hl = parse(buf, lim, out, &why_once);
        if (hl > 0)
            return hl;
    }
    int hl = http1_head_end(scan, buf, len, max_head, why);
    if (hl > 0)
        return parse(buf, (size_t)hl, out, why);
    if (hl == HTTP1_NEED_MORE)
        return hl;
    return parse_whole(parse, buf, len, max_head, out, why);
}

/* The first byte from <q> on (before <end>) that is not a field-vchar,
 * SP or HTAB, or <end>: 8 bytes at a time while a word holds only SP,
 * VCHAR and obs-text (a value's usual bytes), then a byte at a time from
 * the word that holds anything else (HTAB, the CR ending the line, a
 * control byte). */
static const char *skip_field_chars(const char *q, const char *end)
{
    while (end - q >= 8) {
        uint64_t x = word8_load(q);
        if (word8_has_below(x, 0x20) || word8_has(x, 0x7f))
            break;
        q += 8;
    }
    while (q < end && is_field_char((unsigned char)*q))
        q++;
    return q;
}

/* Why the field line at <p> (up to <end>; <n> fields before it) is
 * refused, which parse_fields() leaves to this: the checks in the order
 * that gives each refusal its reason. Always returns -1 with <*why> set. */
static int field_line_error(const char *p, const char *end, size_t n, const char **why)
{
    const char *eol = memchr(p, '\r', (size_t)(end - p));
    if (eol == NULL)
        eol = end;
    if (eol + 1 >= end || eol[1] != '\n') {
        *why = "CR without LF in header";
        return -1;
    }
    if (http1_is_ows(*p)) {
        *why = "obsolete line folding";
        return -1;
    }
    const char *c = p;
    while (c < eol && http1_is_tchar((unsigned char)*c))
        c++;
    if (c == eol || *c != ':') {
        *why = c == p ? "invalid header name" : "invalid character in header name";
        return -1;
    }
    if (c == p) {
        *why = "empty header name";
        return -1;
    }
    if (n == HTTP_MAX_HEADERS) {
        *why = "too many headers";
        return -1;
    }
    /* Else a value byte before <eol> is not a field-vchar, SP or HTAB:
     * parse_fields() takes every line that passes the checks above and
     * has none. */
    *why = "invalid character in header value";
    return -1;
}

/* Parses the field lines from <*at> on, up to the first empty line or
 * <end>, where <*at> is left: the head's empty line when it starts at or
 * before <end> (at <end> when the head's end was found first). A line is
 * looked at once: its name's tchars, the ':', then its value's bytes up to
 * the first that is none, which is the CR of its CRLF when the line is
 * well-formed; any other line goes to field_line_error() for its reason. */
static int parse_fields(const char **at, const char *end, struct http_header *hdrs, size_t *nhdrs,
                        const char **why)
{
    const char *p = *at;
    size_t n = 0;
    while (p < end && (p[0] != '\r' || p[1] != '\n')) {
        const char *c = p;
        while (c < end && http1_is_tchar((unsigned char)*c))
            c++;
        if (c == p || c == end || *c != ':' || n == HTTP_MAX_HEADERS)
            return field_line_error(p, end, n, why);
        const char *eol = skip_field_chars(c + 1, end);
        if (end - eol < 2 || eol[0] != '\r' || eol[1] != '\n')
            return field_line_error(p, end, n, why);
        const char *v = c + 1;
        const char *ve = eol;
        /* The usual line, "name: value" with no other blank around the
         * value, is taken as it is, without the trimming loops. */
        bool plain = ve - v >= 2 && v[0] == ' ' && !http1_is_ows(v[1]) && !http1_is_ows(ve[-1]);
        if (plain) {
            v++;
        } else {
            while (v < ve && http1_is_ows(*v))
                v++;
            while (ve > v && http1_is_ows(ve[-1]))
                ve--;
            plain = v == c + 2 && c[1] == ' ' && ve == eol;
        }
        hdrs[n].name = p;
        hdrs[n].name_len = (size_t)(c - p);
        hdrs[n].value = v;
        hdrs[n].value_len = (size_t)(ve - v);
        hdrs[n].field = http1_field(p, (size_t)(c - p));
        hdrs[n].plain = plain;
        n++;
        p = eol + 2;
    }
    *nhdrs = n;
    *at = p;
    return 0;
}

/* Content-Length: 1*DIGIT, possibly as a list of identical values, possibly
 * over several headers (all identical). <*cl> is -1 before the first.
 * merge_length() takes one element of the list, merge_content_length() a
 * field's value. */
static int merge_length(const char *e, size_t elen, int64_t *cl, const char **why)
{
    if (elen == 0) {
        *why = "invalid Content-Length";
        return -1;
    }
    int64_t x = 0;
    for (size_t i = 0; i < elen; i++) {
        if (!is_digit((unsigned char)e[i])) {
            *why = "invalid Content-Length";
            return -1;
        }
        int d = e[i] - '0';
        if (x > (INT64_MAX - d) / 10) {
            *why = "Content-Length too large";
            return -1;
        }
        x = x * 10 + d;
    }
    if (*cl >= 0 && *cl != x) {
        *why = "conflicting Content-Length values";
        return -1;
    }
    *cl = x;
    return 0;
}

static int merge_content_length(const char *v, size_t len, int64_t *cl, const char **why)
{
    size_t digits = 0;
    while (digits < len && is_digit((unsigned char)v[digits]))
        digits++;
    if (digits == len) /* one number (or none), the usual value: the list is itself */
        return merge_length(v, len, cl, why);
    struct http1_list it;
    const char *e;
    size_t elen;
    http1_list_init(&it, v, len);
    while (http1_list_next(&it, &e, &elen))
        if (merge_length(e, elen, cl, why) != 0)
            return -1;
    return 0;
}

/* Whether a member of the Via value <v> (<len> bytes) names HTTP1_VIA_BY
 * as its received-by: "1.1 sluice", "HTTP/1.0 SLUICE (comment)" (RFC 9110
 * 7.6.3: received-protocol RWS received-by [RWS comment]). */
static bool via_names_gateway(const char *v, size_t len)
{
    static const size_t by_len = sizeof(HTTP1_VIA_BY) - 1;
    struct http1_list it;
    const char *e;
    size_t elen;
    http1_list_init(&it, v, len);
    while (http1_list_next(&it, &e, &elen)) {
        size_t i = 0;
        while (i < elen && !http1_is_ows(e[i])) /* the protocol */
            i++;
        while (i < elen && http1_is_ows(e[i]))
            i++;
        size_t by = i;
        while (i < elen && !http1_is_ows(e[i]))
            i++;
        if (by > 0 && eqi(e + by, i - by, HTTP1_VIA_BY, by_len))
            return true;
    }
    return false;
}

/* A TRACE's or OPTIONS's Max-Forwards value (<len> bytes at <v>): 1*DIGIT
 * (RFC 9110 7.6.2), at most HTTP1_MAX_FORWARDS_MAX (more digits read as
 * that) into <*out>, which is -1 until the first. Another field, or a value
 * that is no number, is refused: read one way by the gateway and another by
 * the next hop, it would let a request go further than its sender asked. */
static int parse_max_forwards(const char *v, size_t len, int64_t *out, const char **why)
{
    if (*out >= 0) {
        *why = "several Max-Forwards headers";
        return -1;
    }
    if (len == 0) {
        *why = "invalid Max-Forwards";
        return -1;
    }
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit((unsigned char)v[i])) {
            *why = "invalid Max-Forwards";
            return -1;
        }
        n = n * 10 + (v[i] - '0');
        if (n > HTTP1_MAX_FORWARDS_MAX)
            n = HTTP1_MAX_FORWARDS_MAX; /* and stays there, digits to come or not */
    }
    *out = n;
    return 0;
}

/* Connection: a list of tokens; sets <*close> / <*keep_alive>. */
static int parse_connection(const char *v, size_t len, bool *close, bool *keep_alive,
                            const char **why)
{
    struct http1_list it;
    const char *e;
    size_t elen;
    http1_list_init(&it, v, len);
    while (http1_list_next(&it, &e, &elen)) {
        if (elen == 0)
            continue;
        if (!all_tchars(e, elen)) {
            *why = "invalid Connection header";
            return -1;
        }
        if (EQI(e, elen, "close"))
            *close = true;
        else if (EQI(e, elen, "keep-alive"))
            *keep_alive = true;
    }
    return 0;
}

/* The names http1_field() tells apart, in lower case, by their length (at
 * most two of a length): a name is compared with those of its length only,
 * and most differ from them in their first word. Proxy-Authentication-Info
 * (RFC 9110 11.6.4, RFC 7615) is for the next client only, as
 * Proxy-Authenticate: an origin's would pass for the gateway's. Proxy is
 * httpoxy's (CVE-2016-5385): no HTTP field, but a CGI origin hands it to
 * its script as HTTP_PROXY, the variable that names the proxy for the
 * script's own outbound requests, which an agent would aim at an address
 * of its choosing; it is never relayed, the mitigation advised for
 * servers and proxies when httpoxy was disclosed. Forwarded and the X-Forwarded-Host kind are
 * the fields an origin behind a front may pick the site by
 * (gate/routing_host.h). */
#define FIELD_NAME_MAX 25
static const struct {
    const char *name;
    enum http_field field;
} field_names[FIELD_NAME_MAX + 1][2] = {
    [2] = {{"te", HTTP_FIELD_TE}},
    [3] = {{"via", HTTP_FIELD_VIA}},
    [4] = {{"host", HTTP_FIELD_HOST}, {"date", HTTP_FIELD_DATE}},
    [5] = {{"proxy", HTTP_FIELD_PROXY}},
    [6] = {{"expect", HTTP_FIELD_EXPECT}, {"x-host", HTTP_FIELD_HOST_ALIAS}},
    [7] = {{"trailer", HTTP_FIELD_TRAILER}, {"upgrade", HTTP_FIELD_UPGRADE}},
    [9] = {{"forwarded", HTTP_FIELD_FORWARDED}},
    [10] = {{"connection", HTTP_FIELD_CONNECTION}, {"keep-alive", HTTP_FIELD_KEEP_ALIVE}},
    [12] = {{"max-forwards", HTTP_FIELD_MAX_FORWARDS}},
    [14] = {{"content-length", HTTP_FIELD_CONTENT_LENGTH}},
    [15] = {{"x-original-host", HTTP_FIELD_HOST_ALIAS}},
    [16] = {{"proxy-connection", HTTP_FIELD_PROXY_CONNECTION},
            {"x-forwarded-host", HTTP_FIELD_HOST_ALIAS}},
    [17] = {{"transfer-encoding", HTTP_FIELD_TRANSFER_ENCODING}},
    [18] = {{"proxy-authenticate", HTTP_FIELD_PROXY_AUTHENTICATE},
            {"x-forwarded-server", HTTP_FIELD_HOST_ALIAS}},
    [19] = {{"proxy-authorization", HTTP_FIELD_PROXY_AUTHORIZATION}},
    [20] = {{"x-http-host-override", HTTP_FIELD_HOST_ALIAS}},
    [25] = {{"proxy-authentication-info", HTTP_FIELD_PROXY_AUTHENTICATION_INFO}},
};

/* eqi_lower() of <len> bytes with a <name> of field_names[] (lower-case
 * letters and '-' only), 8 bytes at a time where it has 8: a byte of <a>
 * may differ from a letter of <name> in its 0x20 bit (its case) alone, and
 * from a '-' not at all. */
static bool eqi_field_name(const char *a, const char *name, size_t len)
{
    if (len < 8)
        return eqi_lower(a, len, name, len);
    for (size_t i = 0;; i += 8) {
        if (i + 8 > len)
            i = len - 8; /* the last word overlaps the one before */
        uint64_t x, n;
        memcpy(&x, a + i, 8);
        memcpy(&n, name + i, 8);
        if (((x ^ n) & ~((n & 0x4040404040404040u) >> 1)) != 0)
            return false;
        if (i + 8 == len)
            return true;
    }
}

/* See http1.h: computed once, when a head is parsed, so that the checks
 * the parsers and writers make of a field compare no names. */
enum http_field http1_field(const char *name, size_t len)
{
    if (len <= FIELD_NAME_MAX)
        for (size_t i = 0; i < 2 && field_names[len][i].name != NULL; i++)
            if (eqi_field_name(name, field_names[len][i].name, len))
                return field_names[len][i].field;
    /* Sluice-* fields are the gateway's own (Sluice-Reason on its
     * refusals): never relayed, in either direction, so that an origin
     * cannot make its answer pass for the gateway's refusal, nor an agent
     * speak for the gateway to an origin. */
    if (len >= 7 && EQI(name, 7, "sluice-"))
        return HTTP_FIELD_SLUICE;
    return HTTP_FIELD_OTHER;
}

static bool field_is_hop_by_hop(enum http_field f)
{
    return f >= HTTP_FIELD_CONNECTION && f <= HTTP_FIELD_UPGRADE;
}

bool http1_is_hop_by_hop(const char *name, size_t len)
{
    return field_is_hop_by_hop(http1_field(name, len));
}

/* ---------------------------------------------------------------------- */
/* Request targets */

/* A port: 1 to 5 decimal digits (<len> bytes at <p>) of 1..65535. Returns
 * 0 with *port set, or -1. Shared by request targets and Host headers. */
static int parse_port(const char *p, size_t len, uint16_t *port)
{
    unsigned v = 0;
    if (len == 0 || len > 5)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit((unsigned char)p[i]))
            return -1;
        v = v * 10 + (unsigned)(p[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

/* Parses "host[:port]" / "[v6][:port]" (<len> bytes) into <req>. */
static int parse_authority(const char *s, size_t len, bool need_port, struct http_request *req,
                           const char **why)
{
    const char *end = s + len;
    const char *h, *he, *p;
    if (memchr(s, '@', len) != NULL) {
        *why = "userinfo in request target";
        return -1;
    }
    if (len > 0 && *s == '[') {
        h = s + 1;
        he = h;
        bool colon = false;
        while (he < end && *he != ']') {
            if (*he == ':')
                colon = true;
            else if (!is_hex((unsigned char)*he) && *he != '.') {
                *why = "invalid IPv6 address in request target";
                return -1;
            }
            he++;
        }
        if (he == end || he == h || !colon) {
            *why = "invalid IPv6 address in request target";
            return -1;
        }
        p = he + 1;
        req->host_ipv6 = true;
    } else {
        h = s;
        he = s;
        while (he < end && *he != ':') {
            if (!is_host_char((unsigned char)*he)) {
                *why = "invalid character in host";
                return -1;
            }
            he++;
        }
        p = he;
        req->host_ipv6 = false;
    }
    if (he == h) {
        *why = "empty host";
        return -1;
    }
    if ((size_t)(he - h) > HTTP_HOST_MAX) {
        *why = "host too long";
        return -1;
    }
    memcpy(req->host, h, (size_t)(he - h));
    req->host[he - h] = '\0';
    if (p == end) {
        if (need_port) {
            *why = "CONNECT needs host:port";
            return -1;
        }
        req->port = 80;
        req->port_explicit = false;
        return 0;
    }
    if (*p != ':') {
        *why = "invalid request target";
        return -1;
    }
    p++;
    if (parse_port(p, (size_t)(end - p), &req->port) != 0) {
        *why = "invalid port";
        return -1;
    }
    req->port_explicit = true;
    return 0;
}

int http1_split_host(const char *v, size_t len, const char **h, size_t *hlen, uint16_t *port)
{
    const char *colon = NULL;
    *port = 0;
    if (len > 0 && v[0] == '[') {
        const char *rb = memchr(v, ']', len);
        if (rb == NULL)
            return -1;
        *h = v;
        *hlen = (size_t)(rb - v) + 1;
        if (*hlen < len) {
            if (rb[1] != ':')
                return -1;
            colon = rb + 1;
        }
    } else {
        colon = memchr(v, ':', len);
        *h = v;
        *hlen = colon != NULL ? (size_t)(colon - v) : len;
    }
    if (colon == NULL)
        return 0;
    size_t plen = len - (size_t)(colon + 1 - v);
    if (plen == 0)
        return 0; /* "host:" means the default port */
    return parse_port(colon + 1, plen, port);
}

static int parse_target(const char *t, size_t len, struct http_request *req, const char **why)
{
    req->scheme[0] = '\0';
    req->host[0] = '\0';
    req->host_ipv6 = false;
    req->port = 0;
    req->port_explicit = false;
    req->path = NULL;
    req->path_len = 0;
    if (memchr(t, '#', len) != NULL) {
        *why = "fragment in request target";
        return -1;
    }
    if (req->method_bit == METHOD_CONNECT) {
        req->form = TARGET_AUTHORITY;
        return parse_authority(t, len, true, req, why);
    }
    if (len == 1 && t[0] == '*') {
        if (req->method_bit != METHOD_OPTIONS) {
            *why = "asterisk target needs OPTIONS";
            return -1;
        }
        req->form = TARGET_ASTERISK;
        req->path = t;
        req->path_len = 1;
        return 0;
    }
    if (t[0] == '/') {
        req->form = TARGET_ORIGIN;
        req->path = t;
        req->path_len = len;
        return 0;
    }
    /* absolute-form: scheme "://" authority [path-abempty] ["?" query] */
    size_t i = 0;
    while (i < len && (is_alpha((unsigned char)t[i]) ||
                       (i > 0 && (is_digit((unsigned char)t[i]) || t[i] == '+' || t[i] == '-' ||
                                  t[i] == '.'))))
        i++;
    if (i == 0 || len - i < 3 || memcmp(t + i, "://", 3) != 0) {
        *why = "invalid request target";
        return -1;
    }
    if (EQI(t, i, "https")) {
        *why = "use CONNECT for https";
        return -1;
    }
    if (!EQI(t, i, "http")) {
        *why = "unsupported scheme";
        return -1;
    }
    memcpy(req->scheme, "http", 5);
    req->form = TARGET_ABSOLUTE;
    const char *a = t + i + 3;
    const char *end = t + len;
    const char *ae = a;
    while (ae < end && *ae != '/' && *ae != '?')
        ae++;
    if (parse_authority(a, (size_t)(ae - a), false, req, why) != 0)
        return -1;
    if (ae == end) {
        req->path = "/";
        req->path_len = 1;
    } else if (*ae == '?') {
        *why = "missing path before query";
        return -1;
    } else {
        req->path = ae;
        req->path_len = (size_t)(end - ae);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Requests */

/* Parses the request head that <buf> starts with into <v>, a struct
 * http_request (see head_parser_fn). */
static int parse_request(const char *buf, size_t lim, void *v, const char **why)
{
    struct http_request *out = v;
    const char *end = buf + lim - 2; /* where the empty line starts, at the latest */

    /* request-line = method SP request-target SP HTTP-version CRLF */
    const char *p = buf;
    const char *m = p;
    while (p < end && http1_is_tchar((unsigned char)*p))
        p++;
    if (p == m || *p != ' ') {
        *why = "invalid method";
        return HTTP1_BAD;
    }
    if ((size_t)(p - m) > HTTP_METHOD_MAX) {
        *why = "method too long";
        return HTTP1_BAD;
    }
    memcpy(out->method, m, (size_t)(p - m));
    out->method[p - m] = '\0';
    out->method_bit = method_bit(out->method);
    p++;
    const char *t = p;
    while (p < end && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
        p++;
    if (p == t || *p != ' ') {
        *why = "invalid request target";
        return HTTP1_BAD;
    }
    size_t tlen = (size_t)(p - t);
    p++;
    if (end - p < 10 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
        p[8] != '\r' || p[9] != '\n') {
        *why = "unsupported HTTP version";
        return HTTP1_BAD;
    }
    out->version_minor = p[7] - '0';
    p += 10;
    if (parse_target(t, tlen, out, why) != 0)
        return HTTP1_BAD;

    if (parse_fields(&p, end, out->headers, &out->nheaders, why) != 0)
        return HTTP1_BAD;
    if (p[0] != '\r' || p[1] != '\n')
        return HTTP1_NEED_MORE;
    int hl = (int)(p + 2 - buf);

    out->content_length = -1;
    out->chunked = false;
    out->expect_continue = false;
    out->host_header = NULL;
    out->host_header_len = 0;
    out->proxy_authorization = NULL;
    out->proxy_authorization_len = 0;
    out->max_forwards = -1;
    out->via_loop = false;
    bool close = false, keep_alive = false, te = false;
    bool counts_forwards = out->method_bit == METHOD_TRACE || out->method_bit == METHOD_OPTIONS;
    for (size_t i = 0; i < out->nheaders; i++) {
        const struct http_header *h = &out->headers[i];
        switch (h->field) {
        case HTTP_FIELD_CONTENT_LENGTH:
            if (merge_content_length(h->value, h->value_len, &out->content_length, why) != 0)
                return HTTP1_BAD;
            break;
        case HTTP_FIELD_TRANSFER_ENCODING:
            if (te) {
                *why = "several Transfer-Encoding headers";
                return HTTP1_BAD;
            }
            te = true;
            if (!EQI(h->value, h->value_len, "chunked")) {
                *why = "unsupported Transfer-Encoding";
                return HTTP1_BAD;
            }
            out->chunked = true;
            break;
        case HTTP_FIELD_HOST:
            if (out->host_header != NULL) {
                *why = "duplicate Host header";
                return HTTP1_BAD;
            }
            out->host_header = h->value;
            out->host_header_len = h->value_len;
            break;
        case HTTP_FIELD_PROXY_AUTHORIZATION:
            if (out->proxy_authorization != NULL) {
                *why = "duplicate Proxy-Authorization header";
                return HTTP1_BAD;
            }
            out->proxy_authorization = h->value;
            out->proxy_authorization_len = h->value_len;
            break;
        case HTTP_FIELD_CONNECTION:
            if (parse_connection(h->value, h->value_len, &close, &keep_alive, why) != 0)
                return HTTP1_BAD;
            break;
        case HTTP_FIELD_EXPECT:
            if (EQI(h->value, h->value_len, "100-continue"))
                out->expect_continue = true;
            break;
        case HTTP_FIELD_VIA:
            out->via_loop = out->via_loop || via_names_gateway(h->value, h->value_len);
            break;
        case HTTP_FIELD_MAX_FORWARDS:
            if (counts_forwards &&
                parse_max_forwards(h->value, h->value_len, &out->max_forwards, why) != 0)
                return HTTP1_BAD;
            break;
        default:
            break;
        }
    }
    if (te && out->content_length >= 0) {
        *why = "both Content-Length and Transfer-Encoding";
        return HTTP1_BAD;
    }
    if (te && out->version_minor == 0) {
        *why = "Transfer-Encoding in HTTP/1.0";
        return HTTP1_BAD;
    }
    if (out->version_minor == 1 && out->host_header == NULL) {
        *why = "missing Host header";
        return HTTP1_BAD;
    }
    if (out->method_bit == METHOD_CONNECT && (te || out->content_length > 0)) {
        *why = "CONNECT with a body";
        return HTTP1_BAD;
    }
    out->conn_close = close || (out->version_minor == 0 && !keep_alive);
    out->head_len = (size_t)hl;
    return hl;
}

int http1_parse_request(const char *buf, size_t len, size_t max_head, struct http_request *out,
                        const char **why)
{
    return parse_whole(parse_request, buf, len, max_head, out, why);
}

int http1_parse_request_scan(struct http1_scan *scan, const char *buf, size_t len, size_t max_head,
                             struct http_request *out, const char **why)
{
    return parse_scanned(parse_request, scan, buf, len, max_head, out, why);
}

enum body_kind http1_request_body(const struct http_request *req)
{
    if (req->method_bit == METHOD_CONNECT)
        return BODY_NONE;
    if (req->chunked)
        return BODY_CHUNKED;
    if (req->content_length > 0)
        return BODY_LENGTH;
    return BODY_NONE;
}

/* ---------------------------------------------------------------------- */
/* Responses */

/* Transfer-Encoding of a response: a list of codings; chunked at most once
 * and only as the final one. identity (no coding) is skipped wherever it
 * is, as the writer drops it (RFC 9110 5.6.1.2): "chunked, identity" is
 * chunked. <*other> is set when one is neither chunked nor identity. */
static int response_te(const char *v, size_t len, bool *seen_chunked, bool *final_chunked,
                       bool *other, const char **why)
{
    struct http1_list it;
    const char *e;
    size_t elen;
    http1_list_init(&it, v, len);
    while (http1_list_next(&it, &e, &elen)) {
        if (elen == 0)
            continue;
        size_t n = 0;
        while (n < elen && http1_is_tchar((unsigned char)e[n]))
            n++;
        if (n == 0) {
            *why = "invalid Transfer-Encoding";
            return -1;
        }
        if (n == elen && EQI(e, n, "identity"))
            continue;
        if (*seen_chunked) {
            *why = "chunked is not the final transfer coding";
            return -1;
        }
        *final_chunked = EQI(e, n, "chunked");
        if (*final_chunked) {
            if (n != elen) {
                *why = "invalid Transfer-Encoding";
                return -1;
            }
            *seen_chunked = true;
        } else {
            *other = true;
        }
    }
    return 0;
}

/* Parses the response head that <buf> starts with into <v>, a struct
 * http_response (see head_parser_fn). */
static int parse_response(const char *buf, size_t lim, void *v, const char **why)
{
    struct http_response *out = v;
    const char *end = buf + lim - 2;
    const char *p = buf;

    /* status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF;
     * "HTTP/1.1 200\r\n" (no SP) is accepted as well. */
    if (end - p < 14 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
        p[8] != ' ') {
        *why = "invalid status line";
        return HTTP1_BAD;
    }
    out->version_minor = p[7] - '0';
    p += 9;
    if (!is_digit((unsigned char)p[0]) || !is_digit((unsigned char)p[1]) ||
        !is_digit((unsigned char)p[2]) || p[0] == '0') {
        *why = "invalid status code";
        return HTTP1_BAD;
    }
    out->status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    p += 3;
    if (*p == ' ') {
        p++;
    } else if (*p != '\r') {
        *why = "invalid status line";
        return HTTP1_BAD;
    }
    const char *r = p;
    while (p < end && *p != '\r') {
        if (!is_field_char((unsigned char)*p)) {
            *why = "invalid character in reason phrase";
            return HTTP1_BAD;
        }
        p++;
    }
    if (p + 1 >= end || p[1] != '\n') {
        *why = "invalid status line";
        return HTTP1_BAD;
    }
    out->reason = r;
    out->reason_len = (size_t)(p - r);
    p += 2;

    if (parse_fields(&p, end, out->headers, &out->nheaders, why) != 0)
        return HTTP1_BAD;
    if (p[0] != '\r' || p[1] != '\n')
        return HTTP1_NEED_MORE;
    int hl = (int)(p + 2 - buf);

    out->content_length = -1;
    out->chunked = false;
    out->other_coding = false;
    bool close = false, keep_alive = false, te = false, seen_chunked = false;
    for (size_t i = 0; i < out->nheaders; i++) {
        const struct http_header *h = &out->headers[i];
        switch (h->field) {
        case HTTP_FIELD_CONTENT_LENGTH:
            if (merge_content_length(h->value, h->value_len, &out->content_length, why) != 0)
                return HTTP1_BAD;
            break;
        case HTTP_FIELD_TRANSFER_ENCODING:
            te = true;
            if (response_te(h->value, h->value_len, &seen_chunked, &out->chunked,
                            &out->other_coding, why) != 0)
                return HTTP1_BAD;
            break;
        case HTTP_FIELD_CONNECTION:
            if (parse_connection(h->value, h->value_len, &close, &keep_alive, why) != 0)
                return HTTP1_BAD;
            break;
        default:
            break;
        }
    }
    if (te && out->content_length >= 0) {
        *why = "both Content-Length and Transfer-Encoding";
        return HTTP1_BAD;
    }
    if (te && out->version_minor == 0) {
        *why = "Transfer-Encoding in HTTP/1.0";
        return HTTP1_BAD;
    }
    out->conn_close = close || (out->version_minor == 0 && !keep_alive) || (te && !out->chunked);
    out->head_len = (size_t)hl;
    return hl;
}

int http1_parse_response(const char *buf, size_t len, size_t max_head, struct http_response *out,
                         const char **why)
{
    return parse_whole(parse_response, buf, len, max_head, out, why);
}

int http1_parse_response_scan(struct http1_scan *scan, const char *buf, size_t len, size_t max_head,
                              struct http_response *out, const char **why)
{
    return parse_scanned(parse_response, scan, buf, len, max_head, out, why);
}

enum body_kind http1_response_body(const struct http_response *rsp, unsigned request_method_bit)
{
    if (request_method_bit == METHOD_HEAD)
        return BODY_NONE;
    if (rsp->status < 200 || rsp->status == 204 || rsp->status == 304)
        return BODY_NONE;
    if (rsp->chunked)
        return BODY_CHUNKED;
    if (rsp->content_length == 0)
        return BODY_NONE;
    if (rsp->content_length > 0)
        return BODY_LENGTH;
    return BODY_UNTIL_CLOSE;
}

/* ---------------------------------------------------------------------- */
/* Writers */

/* Headers that Connection cannot make hop-by-hop: the message framing, which
 * sluice has already decided on and forwards unchanged (dropping
 * Content-Length because "Connection: Content-Length" said so would turn the
 * body into a second request upstream), and Host. */
static bool is_end_to_end(enum http_field f)
{
    return f == HTTP_FIELD_CONTENT_LENGTH || f == HTTP_FIELD_TRANSFER_ENCODING ||
           f == HTTP_FIELD_HOST;
}

/* A bit per field of a head (at most HTTP_MAX_HEADERS). */
#define FIELD_WORDS ((HTTP_MAX_HEADERS + 63) / 64)

/* Sets in <named> the bit of each field of <hdrs> (<n> of them) whose name
 * one of the Connection fields lists, but for those Connection cannot make
 * hop-by-hop (is_end_to_end()); clears the others. The lists are read once
 * a head, each element compared with every name, not read again for each
 * field. */
static void named_in_connection(const struct http_header *hdrs, size_t n,
                                uint64_t named[FIELD_WORDS])
{
    struct fields_iter it;
    const char *e;
    size_t elen;
    for (size_t w = 0; w < FIELD_WORDS; w++)
        named[w] = 0;
    fields_init(&it, hdrs, n, HTTP_FIELD_CONNECTION);
    while (fields_next(&it, &e, &elen))
        for (size_t j = 0; j < n; j++)
            if (!is_end_to_end(hdrs[j].field) && eqi(e, elen, hdrs[j].name, hdrs[j].name_len))
                named[j / 64] |= (uint64_t)1 << (j % 64);
}

/* A head is written as a list of pieces copied into the output at once:
 * one reservation instead of four evbuffer_add() calls per field. At most
 * four a field, and 10 more: the start line (4), a Host built (5) and the
 * tail (1); counted with room. */
#define HEAD_PIECES (4 * HTTP_MAX_HEADERS + 12)

/* What ends a head, the gateway's own lines, goes in one piece written
 * with copies of known length (no strlen(), one memcpy() at the commit):
 * "Via: 1.1 sluice" CRLF, "Date: " IMF-fixdate CRLF, "Connection:
 * keep-alive" CRLF and the final CRLF at most. */
#define HEAD_TAIL_MAX 96

struct head_out {
    struct {
        const char *p;
        size_t n;
    } piece[HEAD_PIECES];
    size_t npieces;
    size_t len;
    size_t nfields;       /* the field lines written: head_commit() refuses past HTTP_MAX_HEADERS */
    size_t max_len;       /* and a head longer than this */
    const char *line_end; /* where the last piece ends when it is field lines */
    char content_length[FORMAT_UINT_MAX]; /* the one value head_fields() writes */
    char te_small[128];                   /* the Transfer-Encoding value written, */
    char *te;                             /* or on the heap when longer (NULL) */
    char tail[HEAD_TAIL_MAX];             /* the last piece (tail_add()) */
    size_t tail_len;
    int64_t max_forwards; /* the value Max-Forwards goes on with; -1: as it came */
    char max_forwards_text[FORMAT_UINT_MAX];
};

static void piece(struct head_out *h, const char *p, size_t n)
{
    if (h->npieces < HEAD_PIECES) {
        h->piece[h->npieces].p = p;
        h->piece[h->npieces].n = n;
        h->len += n;
    }
    h->npieces++; /* past HEAD_PIECES: head_commit() refuses */
}

static void piece_lit(struct head_out *h, const char *s)
{
    piece(h, s, strlen(s));
}

/* A plain field's line (<n> bytes at <p>), as it came: the same piece as
 * the lines before it when they came just before it (so a run of relayed
 * fields is copied at once). */
static void piece_line(struct head_out *h, const char *p, size_t n)
{
    if (h->line_end == p && h->npieces > 0 && h->npieces <= HEAD_PIECES &&
        h->piece[h->npieces - 1].p + h->piece[h->npieces - 1].n == p) {
        h->piece[h->npieces - 1].n += n;
        h->len += n;
    } else {
        piece(h, p, n);
    }
    h->line_end = p + n;
}

static void head_init(struct head_out *h)
{
    h->npieces = 0;
    h->len = 0;
    h->nfields = 0;
    h->max_len = SIZE_MAX;
    h->line_end = NULL;
    h->te = NULL;
    h->tail_len = 0;
    h->max_forwards = -1;
}

/* Adds <n> bytes at <p> to the tail, which head_tail_end() makes the last
 * piece. Its callers add at most HEAD_TAIL_MAX bytes in all. */
static void tail_add(struct head_out *h, const char *p, size_t n)
{
    memcpy(h->tail + h->tail_len, p, n);
    h->tail_len += n;
}

/* tail_add() of a string literal, its length known when compiled. */
#define TAIL_LIT(h, lit) tail_add((h), (lit), sizeof(lit) - 1)

/* Ends the head with its tail. */
static void head_tail_end(struct head_out *h)
{
    piece(h, h->tail, h->tail_len);
}

/* Writes the head to <out> and frees what <h> holds, written or not.
 * Returns 0, HTTP1_TOO_MANY_FIELDS or HTTP1_TOO_BIG (nothing written), or
 * -1. */
static int head_commit(struct head_out *h, struct evbuffer *out)
{
    struct evbuffer_iovec v;
    int rc = -1;
    if (h->nfields > HTTP_MAX_HEADERS)
        rc = HTTP1_TOO_MANY_FIELDS;
    else if (h->len > h->max_len)
        rc = HTTP1_TOO_BIG;
    else if (h->npieces <= HEAD_PIECES &&
             evbuffer_reserve_space(out, (ev_ssize_t)h->len, &v, 1) >= 1 && v.iov_len >= h->len) {
        char *d = v.iov_base;
        for (size_t i = 0; i < h->npieces; i++) {
            memcpy(d, h->piece[i].p, h->piece[i].n);
            d += h->piece[i].n;
        }
        v.iov_len = h->len;
        rc = evbuffer_commit_space(out, &v, 1);
    }
    free(h->te);
    h->te = NULL;
    return rc;
}

/* Transfer-Encoding goes on as one field listing the codings of all the
 * Transfer-Encoding fields of <hdrs>, without the empty list elements and
 * identity (no coding) the parsers skip (RFC 9110 5.6.1.2): the field says
 * exactly how the gateway framed the body ("chunked," or a second, empty
 * field is chunked to it; passed on as spelled, it is not to a client that
 * reads the field as one value, which reads on to the close instead), with
 * chunked in lower case ("Chunked", "CHUNKED" are chunked to it too). No
 * field when no coding is left. The codings are copied into one value (a
 * piece each would run out of pieces on a long list): written with ", "
 * between them, they take at most twice a field's length and 2 bytes. */
static void head_transfer_encoding(struct head_out *h, const struct http_header *hdrs, size_t n,
                                   const struct http_header *first)
{
    size_t cap = 0, len = 0;
    for (size_t i = 0; i < n; i++)
        if (hdrs[i].field == HTTP_FIELD_TRANSFER_ENCODING)
            cap += 2 * hdrs[i].value_len + 2;
    char *v = h->te_small;
    if (cap > sizeof(h->te_small) && (v = h->te = malloc(cap)) == NULL) {
        h->npieces = HEAD_PIECES + 1; /* head_commit() refuses: out of memory */
        return;
    }
    struct fields_iter it;
    const char *e;
    size_t elen;
    fields_init(&it, hdrs, n, HTTP_FIELD_TRANSFER_ENCODING);
    while (fields_next(&it, &e, &elen)) {
        if (elen == 0 || EQI(e, elen, "identity"))
            continue;
        /* The coding the gateway frames by, in the one spelling every
         * sender writes: a next hop that compares it byte for byte would
         * take "Chunked" for a coding it does not know, and the chunks for
         * the next message. */
        if (EQI(e, elen, "chunked"))
            e = "chunked";
        if (len > 0) {
            memcpy(v + len, ", ", 2);
            len += 2;
        }
        memcpy(v + len, e, elen);
        len += elen;
    }
    if (len == 0)
        return;
    h->nfields++;
    piece(h, first->name, first->name_len);
    piece(h, ": ", 2);
    piece(h, v, len);
    piece(h, "\r\n", 2);
}

/* Whether <v> (<len> bytes) is <n> (>= 0) as format_uint() writes it: a
 * Content-Length field holding it goes on as it came. */
static bool is_decimal_of(const char *v, size_t len, int64_t n)
{
    if (len == 0 || len > 19 || (v[0] == '0' && len > 1))
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit((unsigned char)v[i]))
            return false;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    return x == (uint64_t)n;
}

/* Whether a Via field of <hdrs> from <i> to <n> goes on (not named in
 * Connection: <named>): looked for from each Via field only, so that a
 * head without Via pays nothing. */
static bool via_follows(const struct http_header *hdrs, size_t i, size_t n,
                        const uint64_t named[FIELD_WORDS])
{
    for (; i < n; i++)
        if (hdrs[i].field == HTTP_FIELD_VIA && (named[i / 64] >> (i % 64) & 1u) == 0)
            return true;
    return false;
}

/* The gateway's Via member for a message received as HTTP/1.<minor>: the
 * protocol it came in, then the pseudonym (RFC 9110 7.6.3; "HTTP/" left
 * out, as it is for HTTP). Each literal comes as a line and as a field of
 * its own, their lengths known when compiled. */
#define VIA_MEMBER_10 "1.0 " HTTP1_VIA_BY
#define VIA_MEMBER_11 "1.1 " HTTP1_VIA_BY

/* The last Via field relayed, <last>, with ", " and the gateway's member
 * for HTTP/1.<minor> appended to its value (the members before kept as
 * they came: RFC 9110 7.6.3); the member alone when it came empty. */
static void head_via_appended(struct head_out *h, const struct http_header *last, int minor)
{
    h->nfields++;
    piece(h, last->name, last->name_len);
    piece(h, ": ", 2);
    if (last->value_len > 0) {
        piece(h, last->value, last->value_len);
        if (minor == 0)
            piece(h, ", " VIA_MEMBER_10 "\r\n", sizeof(", " VIA_MEMBER_10 "\r\n") - 1);
        else
            piece(h, ", " VIA_MEMBER_11 "\r\n", sizeof(", " VIA_MEMBER_11 "\r\n") - 1);
    } else if (minor == 0) {
        piece(h, VIA_MEMBER_10 "\r\n", sizeof(VIA_MEMBER_10 "\r\n") - 1);
    } else {
        piece(h, VIA_MEMBER_11 "\r\n", sizeof(VIA_MEMBER_11 "\r\n") - 1);
    }
}

/* The gateway's Via field of its own, for a message that came without
 * one, in the tail. */
static void tail_via(struct head_out *h, int minor)
{
    h->nfields++;
    if (minor == 0)
        TAIL_LIT(h, "Via: " VIA_MEMBER_10 "\r\n");
    else
        TAIL_LIT(h, "Via: " VIA_MEMBER_11 "\r\n");
}

/* The longest tail: the response writer's. */
_Static_assert(sizeof("Via: " VIA_MEMBER_11 "\r\n") - 1 + sizeof("Date: \r\n") - 1 + HTTP_DATE_LEN +
                       sizeof("Connection: keep-alive\r\n\r\n") - 1 <=
                   HEAD_TAIL_MAX,
               "HEAD_TAIL_MAX holds a tail");

/* What head_fields() sent of the fields the writers complete. */
#define SENT_VIA  1u
#define SENT_DATE 2u

/* The fields of <hdrs> that go on to the next hop; without
 * Transfer-Encoding when <unchunked>, nor Expect: 100-continue when
 * <no_expect>; with the gateway's member for HTTP/1.<minor> appended to
 * the last Via relayed (head_via_appended()).
 * Content-Length goes on once, as the single decimal <content_length> the
 * parser settled on (-1: none): a list of identical values ("5, 5"),
 * repeated fields or leading zeros are what the parser accepted, and RFC
 * 9110 8.6 lets a proxy replace them with one value, which leaves the next
 * hop nothing to read differently. Returns what it sent of Via and Date
 * (SENT_VIA, SENT_DATE). */
static unsigned head_fields(struct head_out *h, const struct http_header *hdrs, size_t n,
                            int64_t content_length, bool unchunked, bool no_expect, int minor)
{
    uint64_t named[FIELD_WORDS];
    bool length_sent = false, te_sent = false;
    unsigned sent = 0;
    named_in_connection(hdrs, n, named);
    for (size_t i = 0; i < n; i++) {
        const struct http_header *f = &hdrs[i];
        if (field_is_hop_by_hop(f->field) || f->field == HTTP_FIELD_SLUICE ||
            f->field == HTTP_FIELD_PROXY || (named[i / 64] >> (i % 64) & 1u) != 0)
            continue;
        switch (f->field) {
        case HTTP_FIELD_CONTENT_LENGTH:
            if (length_sent || content_length < 0)
                continue;
            length_sent = true;
            if (f->plain && is_decimal_of(f->value, f->value_len, content_length))
                break; /* the line as it came, in the run of those around it */
            h->nfields++;
            piece(h, f->name, f->name_len);
            piece(h, ": ", 2);
            piece(h, h->content_length,
                  format_uint(h->content_length, (uint64_t)content_length, 0));
            piece(h, "\r\n", 2);
            continue;
        case HTTP_FIELD_TRANSFER_ENCODING:
            if (unchunked)
                continue;
            if (!te_sent)
                head_transfer_encoding(h, hdrs, n, f);
            te_sent = true;
            continue;
        case HTTP_FIELD_EXPECT:
            /* the 100-continue expectation, as the parser sets
             * expect_continue */
            if (no_expect && EQI(f->value, f->value_len, "100-continue"))
                continue;
            break;
        case HTTP_FIELD_VIA:
            if (!via_follows(hdrs, i + 1, n, named)) {
                head_via_appended(h, f, minor);
                sent |= SENT_VIA;
                continue;
            }
            break;
        case HTTP_FIELD_DATE:
            sent |= SENT_DATE;
            break;
        case HTTP_FIELD_MAX_FORWARDS:
            if (h->max_forwards < 0)
                break;
            h->nfields++;
            piece(h, f->name, f->name_len);
            piece(h, ": ", 2);
            piece(h, h->max_forwards_text,
                  format_uint(h->max_forwards_text, (uint64_t)h->max_forwards, 0));
            piece(h, "\r\n", 2);
            continue;
        default:
            break;
        }
        h->nfields++;
        if (f->plain) {
            piece_line(h, f->name, f->name_len + f->value_len + 4);
            continue;
        }
        piece(h, f->name, f->name_len);
        piece(h, ": ", 2);
        piece(h, f->value, f->value_len);
        piece(h, "\r\n", 2);
    }
    return sent;
}

int http1_write_upstream_request(const struct http_request *req, struct evbuffer *out)
{
    return http1_write_upstream_request_keep(req, out, false);
}

int http1_write_upstream_request_keep(const struct http_request *req, struct evbuffer *out,
                                      bool keep_alive)
{
    if (req->form != TARGET_ABSOLUTE || req->path == NULL)
        return -1;
    struct head_out hb, *h = &hb; /* 6.5 KiB of stack: no allocation per request */
    char port[1 + FORMAT_UINT_MAX];
    head_init(h);
    piece_lit(h, req->method);
    piece(h, " ", 1);
    piece(h, req->path, req->path_len);
    piece(h, " HTTP/1.1\r\n", 11);
    if (req->host_header == NULL) {
        h->nfields++;
        piece(h, req->host_ipv6 ? "Host: [" : "Host: ", req->host_ipv6 ? 7 : 6);
        piece_lit(h, req->host);
        if (req->host_ipv6)
            piece(h, "]", 1);
        if (req->port != 80) {
            port[0] = ':';
            piece(h, port, 1 + format_uint(port + 1, req->port, 0));
        }
        piece(h, "\r\n", 2);
    }
    /* RFC 9110 7.6.2: a TRACE or OPTIONS goes on with its Max-Forwards
     * counted down (one of 0 is answered by the gateway:
     * gate/max_forwards.c). */
    if (req->max_forwards > 0)
        h->max_forwards = req->max_forwards - 1;
    /* RFC 9110 10.1.1: a 100-continue expectation in an HTTP/1.0 request
     * is ignored. Passed on in the HTTP/1.1 head it would become one the
     * client never had: the origin may answer before the body comes (a
     * final status the client did not ask to get early). */
    unsigned sent = head_fields(h, req->headers, req->nheaders, req->content_length, false,
                                req->version_minor == 0, req->version_minor);
    if ((sent & SENT_VIA) == 0)
        tail_via(h, req->version_minor);
    h->nfields++;
    if (keep_alive)
        TAIL_LIT(h, "Connection: keep-alive\r\n\r\n");
    else
        TAIL_LIT(h, "Connection: close\r\n\r\n");
    head_tail_end(h);
    return head_commit(h, out);
}

int http1_write_upstream_response(const struct http_response *rsp, struct evbuffer *out,
                                  unsigned flags, const char *date)
{
    return http1_write_upstream_response_max(rsp, out, flags, date, SIZE_MAX);
}

int http1_write_upstream_response_max(const struct http_response *rsp, struct evbuffer *out,
                                      unsigned flags, const char *date, size_t max_len)
{
    struct head_out hb, *h = &hb;
    char status[FORMAT_UINT_MAX + 1];
    if (rsp->status < 0 || rsp->status > 999)
        return -1;
    head_init(h);
    h->max_len = max_len;
    piece(h, "HTTP/1.1 ", 9);
    size_t sn = format_uint(status, (uint64_t)rsp->status, 3);
    status[sn++] = ' ';
    piece(h, status, sn);
    piece(h, rsp->reason, rsp->reason_len);
    piece(h, "\r\n", 2);
    /* An interim head or a 204 has no body (RFC 9110 15.2, 15.3.5) and may
     * carry no framing field (RFC 9110 8.6, RFC 9112 6.1): one is the
     * origin's mistake, and a lenient client could frame by it. Nor does a
     * 304 go on with them: it has no body either, and its Content-Length
     * (the selected representation's) serves no recipient, a cache taking
     * none from a 304 (RFC 9111 3.2), while a lenient client (OkHttp)
     * frames a 304 by them, reading the next answer on its connection for
     * its body. (A HEAD's answer keeps them: the size is what it asks.) */
    bool bare = rsp->status < 200 || rsp->status == 204 || rsp->status == 304;
    unsigned sent =
        head_fields(h, rsp->headers, rsp->nheaders, bare ? -1 : rsp->content_length,
                    bare || (flags & HTTP1_RSP_UNCHUNKED) != 0, false, rsp->version_minor);
    if ((sent & SENT_VIA) == 0)
        tail_via(h, rsp->version_minor);
    /* RFC 9110 6.6.1: a recipient with a clock appends the Date of a
     * response that came without one to what it forwards. */
    if ((sent & SENT_DATE) == 0 && date != NULL && date[0] != '\0') {
        h->nfields++;
        TAIL_LIT(h, "Date: ");
        tail_add(h, date, HTTP_DATE_LEN);
        TAIL_LIT(h, "\r\n");
    }
    h->nfields += rsp->status >= 200;
    if (rsp->status < 200)
        TAIL_LIT(h, "\r\n");
    else if (flags & HTTP1_RSP_KEEP_ALIVE)
        TAIL_LIT(h, "Connection: keep-alive\r\n\r\n");
    else
        TAIL_LIT(h, "Connection: close\r\n\r\n");
    head_tail_end(h);
    return head_commit(h, out);
}
