/* admin: the --admin HTTP server, /metrics and /healthz (see metrics.h). */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "watch/metrics.h"

struct admin {
    struct evhttp *http;
    struct metrics *m;
};

static void reply(struct evhttp_request *req, int code, const char *why, const char *ctype,
                  struct evbuffer *body)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, why, body);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct admin *a = arg;
    const char *uri = evhttp_request_get_uri(req);
    size_t plen = strcspn(uri, "?#");
    struct evbuffer *body = evbuffer_new();
    if (body == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evbuffer_add_printf(body, "method not allowed\n");
        reply(req, 405, "Method Not Allowed", "text/plain", body);
    } else if (plen == 8 && memcmp(uri, "/metrics", 8) == 0) {
        if (metrics_format(a->m, body) == 0)
            reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
        else
            evhttp_send_error(req, 500, NULL);
    } else if (plen == 8 && memcmp(uri, "/healthz", 8) == 0) {
        char why[256];
        if (metrics_health(a->m, why, sizeof(why))) {
            evbuffer_add_printf(body, "ok\n");
            reply(req, 200, "OK", "text/plain", body);
        } else {
            evbuffer_add_printf(body, "unhealthy: %s\n", why);
            reply(req, 503, "Service Unavailable", "text/plain", body);
        }
    } else {
        evbuffer_add_printf(body, "not found: try /metrics or /healthz\n");
        reply(req, 404, "Not Found", "text/plain", body);
    }
    evbuffer_free(body);
}

/* "PORT", ":PORT", "HOST:PORT", "[V6]:PORT" -> host and port. */
static int parse_addr(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    const char *colon;
    const char *p = s;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - s - 1) >= hostlen)
            return -1;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        p = close + 2;
    } else if ((colon = strrchr(s, ':')) != NULL) {
        size_t n = (size_t)(colon - s);
        if (n >= hostlen || memchr(s, ':', n) != NULL)
            return -1;
        memcpy(host, s, n);
        host[n] = '\0';
        p = colon + 1;
    } else {
        host[0] = '\0';
    }
    if (host[0] == '\0')
        snprintf(host, hostlen, "127.0.0.1");
    char *end;
    unsigned long v = strtoul(p, &end, 10);
    if (*p == '\0' || *end != '\0' || v > 65535 || p[0] == '-' || p[0] == '+')
        return -1;
    *port = (uint16_t)v;
    return 0;
}

static bool is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcmp(host, "localhost") == 0;
}

struct admin *admin_new(struct event_base *base, const char *addr, struct metrics *m, char *err,
                        size_t errlen)
{
    char host[256];
    uint16_t port;
    struct in_addr a4;
    struct in6_addr a6;
    if (parse_addr(addr, host, sizeof(host), &port) < 0 ||
        (inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1)) {
        snprintf(err, errlen, "--admin %s: expected PORT, IP:PORT or [V6]:PORT (a literal address)",
                 addr);
        return NULL;
    }
    struct admin *a = calloc(1, sizeof(*a));
    if (a == NULL || (a->http = evhttp_new(base)) == NULL) {
        snprintf(err, errlen, "--admin %s: out of memory", addr);
        free(a);
        return NULL;
    }
    a->m = m;
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
    evhttp_set_max_headers_size(a->http, 16384);
    evhttp_set_max_body_size(a->http, 4096);
    evhttp_set_timeout(a->http, 10);
    evhttp_set_gencb(a->http, on_request, a);
    if (evhttp_bind_socket(a->http, host, port) != 0) {
        snprintf(err, errlen, "--admin %s: cannot listen on %s port %u", addr, host,
                 (unsigned)port);
        admin_free(a);
        return NULL;
    }
    if (!is_loopback(host))
        fprintf(stderr,
                "sluice: warning: the admin server on %s is reachable from beyond this host\n",
                addr);
    return a;
}

void admin_free(struct admin *a)
{
    if (a == NULL)
        return;
    if (a->http != NULL)
        evhttp_free(a->http);
    free(a);
}
