/* http1: HTTP/1.1 request and response heads, for a forward proxy.
 *
 * Pure parsers (no sockets, no libevent) over a byte range that is NOT
 * NUL-terminated, plus two serialisers that write the head to forward into a
 * libevent evbuffer. Strict where ambiguity could smuggle a request past the
 * gateway (RFC 9112 framing: CRLF only, no obs-fold, no CL+TE, one
 * Content-Length value, Transfer-Encoding exactly "chunked"), lenient only
 * where real servers differ harmlessly (empty reason phrases).
 *
 * Ownership: every pointer in a parsed struct http_request / http_response
 * (path, headers[].name/value, host_header, proxy_authorization, reason)
 * points into the caller's buffer <buf>; it stays valid only while that
 * buffer is neither freed nor moved (with an evbuffer: pullup head_len bytes,
 * parse, write the upstream head, and only then drain head_len). The fixed
 * arrays (method, scheme, host) are NUL-terminated copies. */
#ifndef SLUICE_GATE_HTTP1_H
#define SLUICE_GATE_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define HTTP_MAX_HEADERS 100
#define HTTP_METHOD_MAX  31  /* bytes in a method token */
#define HTTP_HOST_MAX    255 /* bytes in the target's host */

/* The gateway's pseudonym in the Via fields the writers send on (RFC 9110
 * 7.6.3): the same for every gateway, naming no host and no version. */
#define HTTP1_VIA_BY "sluice"

/* The largest Max-Forwards the gateway counts down from: a larger value is
 * read as this (RFC 9110 7.6.2 lets a recipient cap it). */
#define HTTP1_MAX_FORWARDS_MAX 255

/* Return values of the head parsers (a positive value is the head length). */
#define HTTP1_NEED_MORE 0
#define HTTP1_BAD       (-1)
#define HTTP1_TOO_BIG   (-2)
/* The writers' refusal of a head that would go on with more than
 * HTTP_MAX_HEADERS fields (those the writer adds counted), which the
 * gateway itself would refuse to read: a next hop with the same limit (a
 * second sluice) would too. */
#define HTTP1_TOO_MANY_FIELDS (-3)

enum target_form {
    TARGET_ORIGIN,    /* "/path?q": not a proxy request; the caller refuses it */
    TARGET_ABSOLUTE,  /* "http://host[:port]/path?q" */
    TARGET_AUTHORITY, /* "host:port", CONNECT only */
    TARGET_ASTERISK,  /* "*", OPTIONS only */
};

/* The fields the parsers and writers act on, told apart by name (any case)
 * once, when a head is parsed: HTTP_FIELD_OTHER for every other name. */
enum http_field {
    HTTP_FIELD_OTHER,
    HTTP_FIELD_CONTENT_LENGTH,
    HTTP_FIELD_TRANSFER_ENCODING,
    HTTP_FIELD_HOST,
    HTTP_FIELD_EXPECT,
    HTTP_FIELD_CONNECTION, /* from here to UPGRADE: hop-by-hop (http1_is_hop_by_hop()) */
    HTTP_FIELD_KEEP_ALIVE,
    HTTP_FIELD_PROXY_CONNECTION,
    HTTP_FIELD_PROXY_AUTHORIZATION,
    HTTP_FIELD_PROXY_AUTHENTICATE,
    HTTP_FIELD_PROXY_AUTHENTICATION_INFO,
    HTTP_FIELD_TE,
    HTTP_FIELD_TRAILER,
    HTTP_FIELD_UPGRADE,
    HTTP_FIELD_SLUICE,       /* Sluice-*: the gateway's own, never relayed */
    HTTP_FIELD_PROXY,        /* "Proxy": no HTTP field, httpoxy's; never relayed */
    HTTP_FIELD_FORWARDED,    /* RFC 7239: its host= may pick the site (gate/routing_host.h) */
    HTTP_FIELD_HOST_ALIAS,   /* X-Forwarded-Host and the others read as the host (routing_host.h) */
    HTTP_FIELD_VIA,          /* the writers add the gateway's member (HTTP1_VIA_BY) */
    HTTP_FIELD_DATE,         /* the response writer adds one when none goes on */
    HTTP_FIELD_MAX_FORWARDS, /* TRACE and OPTIONS: counted down (RFC 9110 7.6.2) */
};

struct http_header {
    const char *name; /* a token, as sent (compare case-insensitively) */
    size_t name_len;
    const char *value; /* trimmed of leading and trailing SP/HT; may be empty */
    size_t value_len;
    enum http_field field; /* what <name> is: http1_field() of it */
    bool plain;            /* its line is "name: value" CRLF (one SP after the colon, no
                            * OWS after the value): the line goes on as it came */
};

struct http_request {
    char method[HTTP_METHOD_MAX + 1]; /* the token, case as sent */
    unsigned method_bit;              /* enum method_bit of policy/model.h */
    enum target_form form;
    char scheme[8]; /* "http" for TARGET_ABSOLUTE, "" otherwise */
    /* TARGET_ABSOLUTE and TARGET_AUTHORITY: the target's host, brackets
     * removed for IPv6, NOT normalised (use host_normalise()). Only bytes
     * [A-Za-z0-9.-_] for a name, [0-9A-Fa-f:.] for a bracketed IPv6; never
     * empty. "" for the other forms. */
    char host[HTTP_HOST_MAX + 1];
    bool host_ipv6;     /* the host was written in [brackets] */
    uint16_t port;      /* explicit, else 80 for http://; 0 for origin/asterisk form */
    bool port_explicit; /* always true for CONNECT */
    /* TARGET_ABSOLUTE: path and query ("/" when the target has no path;
     * then it points to a static string). TARGET_ORIGIN: the whole target.
     * TARGET_ASTERISK: "*". TARGET_AUTHORITY: NULL, 0. */
    const char *path;
    size_t path_len;
    int version_minor; /* 0 or 1 (HTTP/1.0, HTTP/1.1) */
    struct http_header headers[HTTP_MAX_HEADERS];
    size_t nheaders;
    int64_t content_length; /* -1 when absent */
    bool chunked;           /* Transfer-Encoding: chunked */
    bool conn_close;        /* HTTP/1.0 without keep-alive, or Connection: close */
    bool expect_continue;   /* Expect: 100-continue */
    /* TRACE and OPTIONS: the Max-Forwards value (RFC 9110 7.6.2), at most
     * HTTP1_MAX_FORWARDS_MAX (a larger one reads as that); -1 when absent,
     * and for every other method, whose Max-Forwards goes on as it came. */
    int64_t max_forwards;
    /* A member of its Via names HTTP1_VIA_BY as the hop it went through:
     * it came back to a sluice gateway (RFC 9110 7.6.3: Via is there to
     * tell request loops). */
    bool via_loop;
    const char *host_header; /* the Host value (trimmed), NULL when absent */
    size_t host_header_len;
    const char *proxy_authorization; /* NULL when absent; never forwarded */
    size_t proxy_authorization_len;
    size_t head_len; /* bytes of the head, final CRLF included */
};

struct http_response {
    int status; /* 100..999 */
    int version_minor;
    const char *reason; /* the reason phrase as sent (may be empty) */
    size_t reason_len;
    int64_t content_length; /* -1 when absent */
    bool chunked;           /* chunked is the final transfer coding */
    bool other_coding;      /* a transfer coding other than chunked (and identity) */
    bool conn_close;        /* Connection: close, HTTP/1.0 without keep-alive, or a
                             * body that ends only when the server closes */
    struct http_header headers[HTTP_MAX_HEADERS];
    size_t nheaders;
    size_t head_len;
};

/* Where a search for the end of a head stopped: the bytes looked at so far,
 * and where the line they end in starts. Zero it for a new head. */
struct http1_scan {
    size_t scanned;
    size_t line_start;
};

/* Looks for the end of the head (the empty line) that <buf> (<len> bytes)
 * starts with, from where <scan> stopped: returns the head's length (the
 * final CRLF included), HTTP1_NEED_MORE, HTTP1_BAD for a bare LF (<*why>
 * set) or HTTP1_TOO_BIG as the parsers below, which look for it first.
 * Called again as more of the same head arrives (the bytes before stay as
 * they were), it looks at the new bytes only: a head arriving a byte at a
 * time is scanned once, not once per byte. The parsers are then called
 * once, when it found the end or an error (http1_parse_request_scan()
 * does both). */
int http1_head_end(struct http1_scan *scan, const char *buf, size_t len, size_t max_head,
                   const char **why);

/* Parses a request head from <buf> (<len> bytes). Returns the head length
 * (> 0) and fills <out>; HTTP1_NEED_MORE (0) when the head is incomplete and
 * <len> < <max_head>; HTTP1_BAD (-1) with <*why> set to a static phrase
 * (e.g. "both Content-Length and Transfer-Encoding", "use CONNECT for https")
 * for a malformed or ambiguous request; HTTP1_TOO_BIG (-2) when no complete
 * head fits in <max_head> bytes. A bare LF is reported as HTTP1_BAD as soon
 * as it is seen; the rest is checked once the head is complete. Bytes after
 * the head (a body, a pipelined request) are not looked at. */
int http1_parse_request(const char *buf, size_t len, size_t max_head, struct http_request *out,
                        const char **why);

/* http1_parse_request() of a head read as it arrives, each call with the
 * bytes of the one before and maybe more, and the same <scan> (zeroed for
 * a new head): the same results, but a head that came whole is parsed in
 * one pass, its end found as it goes, and one that comes in pieces is
 * looked through for its end once, by http1_head_end(), then parsed once,
 * when its end is there (HTTP1_NEED_MORE until then). <*out> is left
 * undefined unless a head is returned. */
int http1_parse_request_scan(struct http1_scan *scan, const char *buf, size_t len, size_t max_head,
                             struct http_request *out, const char **why);

/* Same convention for a response head ("HTTP/1.x SP 3DIGIT [SP reason]").
 * An interim response (1xx) is a complete head of its own: parse again after
 * it. A Transfer-Encoding whose final coding is not chunked makes the body
 * last until close (RFC 9112 6.3) and sets conn_close. */
int http1_parse_response(const char *buf, size_t len, size_t max_head, struct http_response *out,
                         const char **why);

/* http1_parse_response() of a head read as it arrives, as
 * http1_parse_request_scan(). */
int http1_parse_response_scan(struct http1_scan *scan, const char *buf, size_t len, size_t max_head,
                              struct http_response *out, const char **why);

enum body_kind {
    BODY_NONE,
    BODY_LENGTH,      /* content_length (> 0) bytes */
    BODY_CHUNKED,     /* frame it with chunked.h */
    BODY_UNTIL_CLOSE, /* responses only: until the server closes */
};

/* The body that follows a request head: chunked, Content-Length > 0, or
 * none (CONNECT never has one: its following bytes are the tunnel). */
enum body_kind http1_request_body(const struct http_request *req);

/* The body that follows a response to a request with <request_method_bit>
 * (METHOD_HEAD: none): none for 1xx, 204, 304 and Content-Length: 0. */
enum body_kind http1_response_body(const struct http_response *rsp, unsigned request_method_bit);

/* Splits a Host header value (<v>, <len> bytes, hostile) into the host,
 * "name" or "[v6]" brackets included (*h, *hlen: a part of <v>), and the
 * port (0 when absent or empty: "host:" means the default port). Returns 0,
 * or -1 for an unclosed "[", anything but ":port" after "]", or a port
 * that is not 1 to 5 digits of 1..65535. The host is not checked: the
 * caller normalises it (policy/host.h) and compares it with the target. */
int http1_split_host(const char *v, size_t len, const char **h, size_t *hlen, uint16_t *port);

/* What the field name <name> (<len> bytes, any case) is: the field it
 * names exactly (HTTP_FIELD_CONTENT_LENGTH for "content-LENGTH", not for
 * "Content-Length " or "Content-Lengths"; HTTP_FIELD_PROXY for "Proxy"
 * only; HTTP_FIELD_HOST_ALIAS for X-Forwarded-Host, X-Host,
 * X-Original-Host, X-Forwarded-Server and X-HTTP-Host-Override),
 * HTTP_FIELD_SLUICE for any name that starts with "Sluice-", else
 * HTTP_FIELD_OTHER. The parsers set each
 * parsed field's <field> with it. */
enum http_field http1_field(const char *name, size_t len);

/* True for OWS, optional whitespace (RFC 9110 5.6.3): a space or a tab. */
bool http1_is_ows(char c);

/* A field value's comma-separated list (RFC 9110 5.6.1): "a, b ,c" gives
 * its elements, trimmed of OWS, in order, empty elements included. */
struct http1_list {
    const char *p;
    const char *end;
    bool done;
};
/* Starts on the list of the <len> bytes at <v>, which must outlive it. */
void http1_list_init(struct http1_list *it, const char *v, size_t len);
/* The next element into <*elem> (<*elen> bytes, maybe 0); false after
 * the last. */
bool http1_list_next(struct http1_list *it, const char **elem, size_t *elen);

/* True for an RFC 9110 5.6.2 tchar, a byte a token (a method, a field
 * name, a parameter's name) is made of. */
bool http1_is_tchar(unsigned char c);

/* True when the header <name> (<len> bytes, any case) is hop-by-hop for a
 * proxy: Connection, Keep-Alive, Proxy-Connection, Proxy-Authorization,
 * Proxy-Authenticate, Proxy-Authentication-Info, TE, Trailer, Upgrade.
 * (Headers named in Connection are hop-by-hop too; the writers check those
 * separately.) */
bool http1_is_hop_by_hop(const char *name, size_t len);

/* Appends to <out> the head to send upstream for <req> (TARGET_ABSOLUTE
 * only): "METHOD SP path SP HTTP/1.1", every header except the hop-by-hop
 * ones and those named in Connection (so never Proxy-Authorization; but
 * Content-Length, Transfer-Encoding and Host are always kept), and an
 * HTTP/1.0 request's Expect: 100-continue (RFC 9110 10.1.1), a Host
 * header built from the target when the request had none (HTTP/1.0), the
 * gateway's Via member ("1.1 sluice", "1.0 sluice" for an HTTP/1.0
 * request: RFC 9110 7.6.3) appended to the last Via field with ", " or in
 * a Via field of its own after the others when none came, the
 * Max-Forwards of a TRACE or OPTIONS counted down by one (RFC 9110 7.6.2:
 * where it came, its value written anew; one of 0 goes on as it came: the
 * caller answers such a request itself), then
 * "Connection: close" (the upstream connection then carries this request
 * alone, and a response without length ends at its close) and the final
 * CRLF. Content-Length / Transfer-Encoding are kept:
 * the body is forwarded unchanged. Returns 0, HTTP1_TOO_MANY_FIELDS
 * (nothing written), or -1 (wrong form, or the evbuffer could not grow;
 * <out> may then hold a partial head). */
int http1_write_upstream_request(const struct http_request *req, struct evbuffer *out);
/* The same, ending with "Connection: keep-alive" instead when <keep_alive>
 * (the gate may reuse the upstream connection for the client's next request
 * to the same checked address: gate/forward.c); "Connection: close" else.
 * http1_write_upstream_request() is this with <keep_alive> false. */
int http1_write_upstream_request_keep(const struct http_request *req, struct evbuffer *out,
                                      bool keep_alive);

/* Flags of http1_write_upstream_response(). */
#define HTTP1_RSP_KEEP_ALIVE 1u /* "Connection: keep-alive", else "close" */
#define HTTP1_RSP_UNCHUNKED  2u /* no Transfer-Encoding: the body goes as its data alone */

/* Appends to <out> the head to send to the client for <rsp>: "HTTP/1.1 SP
 * status SP reason", every header except the hop-by-hop ones, those named in
 * Connection and the gateway's own (Sluice-*), the gateway's Via member as
 * the request writer adds it (the protocol the response came in), "Date:
 * <date>" when no Date field goes on and <date> (the time the response
 * came: RFC 9110 6.6.1) is neither NULL nor "", which is then an
 * IMF-fixdate of HTTP_DATE_LEN bytes (util/http_date.h), then "Connection:
 * keep-alive" or "Connection: close" per <flags> (no Connection header on a
 * 1xx; nor Content-Length or Transfer-Encoding on a 1xx, a 204 or a 304:
 * they have no body), and the final CRLF. Returns 0, HTTP1_TOO_MANY_FIELDS
 * (nothing written) or -1. */
int http1_write_upstream_response(const struct http_response *rsp, struct evbuffer *out,
                                  unsigned flags, const char *date);
/* The same, refusing with HTTP1_TOO_BIG (nothing written) a head that
 * would be longer than <max_len> bytes: one the gateway would not take
 * itself. */
int http1_write_upstream_response_max(const struct http_response *rsp, struct evbuffer *out,
                                      unsigned flags, const char *date, size_t max_len);

#endif
