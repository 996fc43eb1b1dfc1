/* admin_head: the request head of the --admin server (admin.c), parsed
 * strictly and incrementally. A pure function of the bytes received so far:
 * no allocation, no I/O, each byte looked at once across calls.
 *
 * "METHOD SP /target SP HTTP/1.x CRLF", then "name: value CRLF" lines (a
 * token, the colon right after it, no obs-fold, no control character), then
 * an empty line. Every line ends in CRLF (a bare LF is malformed). Only the
 * method (GET, HEAD or another) and the page (/metrics, /healthz or another;
 * a query string ignored) are kept, and whether a Host header names a host
 * rather than an address (admin.c refuses such a request on loopback). */
#ifndef SLUICE_WATCH_ADMIN_HEAD_H
#define SLUICE_WATCH_ADMIN_HEAD_H

#include <stdbool.h>
#include <stddef.h>

enum admin_parse { ADMIN_PARSE_MORE, ADMIN_PARSE_DONE, ADMIN_PARSE_BAD };
enum admin_method { ADMIN_GET, ADMIN_HEAD, ADMIN_OTHER_METHOD };
enum admin_page { ADMIN_METRICS, ADMIN_HEALTHZ, ADMIN_OTHER_PAGE };

/* Where the parser is in a head; zeroed before the first byte. */
struct admin_head {
    size_t pos;     /* the next line starts here */
    size_t scanned; /* bytes from pos already searched for LF */
    bool have_line; /* the request line is parsed */
    enum admin_method method;
    enum admin_page page;
    /* A Host header names a host (a DNS name other than localhost), not
     * an address: see host_is_name() in admin_head.c */
    bool host_is_name;
};

/* Parses the head in <buf> (<len> bytes, all that has arrived, the same
 * bytes as before plus more), from where <h> stopped the last time. DONE
 * fills h->method and h->page; BAD is final. */
enum admin_parse admin_head_parse(struct admin_head *h, const char *buf, size_t len);

#endif
