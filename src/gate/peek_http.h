/* peek_http: the host a plain HTTP/1.x request at the start of a CONNECT
 * tunnel names.
 *
 * Used on the first bytes of a tunnel that are not TLS, before they are
 * forwarded, to refuse a request whose Host header (or absolute-form
 * target) names another host than the CONNECT target: on a shared front (a
 * CDN, a virtual-hosting server) the Host header picks the site
 * (host_mismatch). Only the first request head is looked at: what follows it
 * in the tunnel (a body, pipelined or later requests) is not.
 *
 * When the first bytes are HTTP, precisely (a server must not take as a
 * request what this calls NOT_HTTP):
 *  - leading CR and LF bytes are skipped (RFC 9112 2.2: servers such as
 *    nginx ignore empty lines before the request line), and so is
 *    whitespace (SP, HT, VT, FF, and 0x1C to 0x1F, 0x85 and 0xA0, which
 *    Python's http.server splits a request line on, as it does CR), which
 *    a lax server may skip as well (the head is then parsed from that
 *    whitespace on, and refused);
 *  - the first line starts with a method token (RFC 9110 tchar bytes: Go's
 *    net/http takes any token as a method, not only upper-case ones)
 *    followed by SP or HT (or CR or any whitespace above, which some
 *    parsers take as a separator). Anything else (a first byte that is not
 *    a tchar, a token followed by LF or any other byte: binary protocols, an
 *    SSH banner without comments) is NOT_HTTP at once;
 *  - no byte before the LF makes the first line NOT_HTTP: Python's
 *    http.server takes a NUL in a request target, nginx before 1.21.1 the
 *    other control bytes and DEL, and the Host header then picks the site
 *    (a method token and whitespace followed by binary bytes without a LF
 *    wait for one, within the window);
 *  - a complete first line (up to its LF) whose last whitespace-separated
 *    word, trailing whitespace and CR ignored, does not start with "HTTP/",
 *    "RTSP/" or "ICE/" (any case) is NOT_HTTP (another text protocol, or an HTTP/0.9 request
 *    line of more than two words), but for a line where such a word is
 *    followed, whitespace aside, by a CR that does not end it (a bare CR):
 *    MISMATCH, as Node.js's llhttp, lenient (insecureHTTPParser), ends the
 *    request line there and serves the header fields behind it; except an HTTP/0.9 request
 *    line whose first word after the method is an absolute-form target (a
 *    scheme and "://": "GET http://h/", which nginx serves from
 *    h's virtual host): its host and port are checked as an absolute-form
 *    target's are below (userinfo is MISMATCH). A line of two words only,
 *    a method and an origin-form, '*' or absolute-form target ("GET /"), may
 *    be followed by header fields, which Node.js's llhttp parses, its
 *    server then picking the site by that Host: it is an HTTP/1.0 head of
 *    that line, waited for until complete and checked as below (one whose
 *    target names another host or port is MISMATCH at once). So is a line
 *    of two words whose method is "CONNECT" (llhttp's case), whatever its
 *    target: Node.js's server emits 'connect' for "CONNECT h:443" and the
 *    header fields after it, and its documented forward proxy connects to
 *    h (its authority-form target is then checked as below). So is a
 *    line of two words whose method is "GET", whatever its target (a Redis
 *    inline "GET key" included, refused when the window ends): Python's
 *    http.server serves it as an HTTP/0.9 GET with the header fields after
 *    it, and their Host picks the site as for any request. A line of
 *    "CONNECT" and whitespace alone is MISMATCH: llhttp takes its empty
 *    target, and Node.js's server emits 'connect' with the header fields
 *    behind it, their Host all a proxy then has to go by.
 *    One whose last word is "HTTP/1.0" or
 *    "HTTP/1.1" is an HTTP/1.x request head, checked below; any other
 *    "HTTP/" word ("HTTP/1.2", which nginx and Go serve as 1.x, "http/1.1",
 *    "HTTP/2.0" of the h2c preface, whose authority is HPACK-coded) cannot
 *    be checked and is MISMATCH (fail closed), and so is a last word that
 *    starts with "RTSP/" or "ICE/" (any case): Node.js's llhttp takes
 *    those versions too ("GET / RTSP/1.0", "SOURCE / ICE/1.0"), its server
 *    serving the request as an HTTP/1.x one, by its Host.
 * Until then, and until the head is complete, the bytes are NEED_MORE.
 * Before all that, bytes that start with a PROXY protocol header (v1's
 * "PROXY TCP4 ", "PROXY TCP6 " or "PROXY UNKNOWN", v2's signature) are
 * MISMATCH: a server that takes one reads the request or ClientHello behind
 * it; a prefix of one is NEED_MORE.
 *
 * An HTTP/1.x head is parsed with http1_parse_request() (gate/http1.h),
 * as strictly as a proxy request: one that parser refuses (a bare LF,
 * obs-fold, several Host headers, no Host in HTTP/1.1, both Content-Length
 * and Transfer-Encoding, an https:// target, ...) is MISMATCH: the host it
 * names could not be told. A head must be complete within <max_head>
 * bytes. Then the Host header (when there is one) and an absolute-form or
 * authority-form target must name the target as host_sent_names()
 * (policy/host.h) tells (after host_normalise(), and in ASCII: a server
 * looks its sites up by the bytes it got; an IP target in its canonical
 * spelling, IP_SPELLING_CANONICAL), and a port they carry must be the
 * target's port (a Host or absolute-form target without a port is
 * accepted), and so must the fields an origin behind a front may pick the
 * site by instead
 * (X-Forwarded-Host, Forwarded host=, ...: routing_fields_name(),
 * gate/routing_host.h), with or without a Host; HTTP/1.0 without Host
 * or them, with an origin-form target, is MATCH. Pure apart from
 * host_normalise(): no allocation, no sockets.
 *
 * The bytes of a tunnel come a few at a time, and are judged at each read:
 * peek_http_resume() goes on from where the call before stopped (a struct
 * peek_http_scan per tunnel), so that each byte is looked at a few times
 * in all, not once per read (a head trickled in small pieces would else
 * cost CPU quadratic in its size). */
#ifndef SLUICE_GATE_PEEK_HTTP_H
#define SLUICE_GATE_PEEK_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gate/http1.h"
#include "policy/host.h"

/* The longest head of an HTTP/0.9 request line with header fields that is
 * judged (PEEK_MAX, conn.h, and room for the version it is parsed with). */
#define PEEK_HTTP09_HEAD_MAX 20480

enum peek_http_result {
    PEEK_HTTP_NOT_HTTP,  /* the first line is not an HTTP/1.x request line */
    PEEK_HTTP_NEED_MORE, /* may still become a request head: read more */
    PEEK_HTTP_MATCH,     /* a complete head that names the target (or no host at all) */
    PEEK_HTTP_MISMATCH,  /* names another host or port, or cannot be checked */
};

/* Judges the first <len> bytes of a tunnel to <target>:<port> (<buf> is not
 * NUL-terminated; hostile). Only the first <max_head> bytes are looked at:
 * bytes that are still NEED_MORE when <len> reaches <max_head> are
 * MISMATCH. A result other than NEED_MORE for a prefix is the result for
 * every longer input. On MISMATCH sets <*why> to a static phrase. */
enum peek_http_result peek_http_judge(const char *buf, size_t len, size_t max_head,
                                      const struct host *target, uint16_t port, const char **why);

/* How far peek_http_resume() got: the leading empty lines and whitespace,
 * the method token, the rest of the first line, the rest of the head. */
enum peek_http_phase {
    PEEK_HTTP_LEAD,
    PEEK_HTTP_METHOD,
    PEEK_HTTP_LINE,
    PEEK_HTTP_HEAD,
    PEEK_HTTP_DECIDED,
};

/* Where the judging of one input stopped: all zero for a new input. */
struct peek_http_scan {
    enum peek_http_phase phase;
    size_t scanned;         /* bytes looked at from the start, up to the first line's LF */
    size_t line;            /* where the first line starts (past empty lines, whitespace) */
    size_t from;            /* where the head starts for http1.c: the first byte not CR or LF */
    struct http1_scan head; /* the search for the head's end, from <from> on */
    size_t looked;          /* bytes looked at over all the calls, every pass counted */
    bool http09;            /* the first line is HTTP/0.9 that header fields may follow */
    size_t target_end;      /* then: where its request target ends */
    size_t line_end;        /* then: where its LF is */
    enum peek_http_result result; /* once PEEK_HTTP_DECIDED */
    const char *why;              /* the MISMATCH's reason, once PEEK_HTTP_DECIDED */
};

/* peek_http_judge() of the first <len> bytes of an input of which <scan>
 * has judged a prefix no longer than <len> (or nothing): <buf> holds the
 * same bytes as at the calls before (it may have moved), then maybe more,
 * and <max_head>, <target> and <port> are the same. Only the bytes that
 * came since the last call are scanned; the first line is classified once,
 * when its LF is there, and the head parsed once, when its end (or an
 * error) is. Once the result is not NEED_MORE, every later call returns it
 * again (and the same <*why>). */
enum peek_http_result peek_http_resume(struct peek_http_scan *scan, const char *buf, size_t len,
                                       size_t max_head, const struct host *target, uint16_t port,
                                       const char **why);

#endif
