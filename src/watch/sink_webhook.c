/* sink_webhook: POST alerts to an http:// URL with retries (sinks.h). */
#include "watch/sinks.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "state/store.h"

struct item {
    int64_t id; /* in the store; 0 when there is none */
    char *body;
    size_t n;
    int attempts;
};

struct webhook {
    struct event_base *base;
    struct evdns_base *dns;
    struct evhttp_connection *conn;
    struct store *store;
    char *url, *host, *path, *hosthdr;
    uint16_t port;
    struct item *q; /* ring */
    size_t head, len, cap;
    bool busy;
    unsigned failures_in_row;
    struct event *retry;
    uint64_t delivered, failures;
    uint64_t only_stored; /* over the memory cap: kept in the store only */
};

static char *errf(const char *url, const char *why)
{
    char buf[600];
    snprintf(buf, sizeof(buf), "webhook %s: %s", url, why);
    return strdup(buf);
}

/* http://HOST[:PORT][/PATH] with HOST a name, an IPv4 or [IPv6]. */
static int parse_url(struct webhook *w, const char *url, const char **why)
{
    const char *p;
    if (strncmp(url, "https://", 8) == 0) {
        *why = "https:// webhooks are not supported in this version (use http:// on loopback "
               "or a local relay)";
        return -1;
    }
    if (strncmp(url, "http://", 7) != 0) {
        *why = "not an http:// URL";
        return -1;
    }
    p = url + 7;
    size_t auth = strcspn(p, "/?#");
    const char *end = p + auth;
    const char *hs = p, *he;
    const char *colon = NULL;
    if (*p == '[') {
        he = memchr(p, ']', auth);
        if (he == NULL) {
            *why = "unterminated [IPv6] host";
            return -1;
        }
        hs = p + 1;
        if (he + 1 < end && he[1] == ':')
            colon = he + 1;
        else if (he + 1 != end) {
            *why = "bad host";
            return -1;
        }
    } else {
        colon = memchr(p, ':', auth);
        he = colon != NULL ? colon : end;
    }
    if (he == hs || he - hs > 253 || memchr(p, '@', auth) != NULL) {
        *why = "bad host";
        return -1;
    }
    unsigned long port = 80;
    if (colon != NULL) {
        char *e;
        port = strtoul(colon + 1, &e, 10);
        if (e != end || colon + 1 == end || port == 0 || port > 65535) {
            *why = "bad port";
            return -1;
        }
    }
    w->host = strndup(hs, (size_t)(he - hs));
    w->path = strdup(*end == '/' ? end : "/");
    w->hosthdr = strndup(p, auth);
    w->port = (uint16_t)port;
    if (w->host == NULL || w->path == NULL || w->hosthdr == NULL) {
        *why = "out of memory";
        return -1;
    }
    return 0;
}

static void try_send(struct webhook *w);

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    try_send(arg);
}

static void pop(struct webhook *w)
{
    struct item *it = &w->q[w->head];
    free(it->body);
    w->head = (w->head + 1) % w->cap;
    w->len--;
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct webhook *w = arg;
    int code = req != NULL ? evhttp_request_get_response_code(req) : 0;
    struct item *it = &w->q[w->head];
    w->busy = false;
    if (w->len == 0)
        return;
    if (code >= 200 && code < 300) {
        w->delivered++;
        w->failures_in_row = 0;
        if (w->store != NULL && it->id > 0)
            store_queue_del(w->store, it->id);
        pop(w);
        try_send(w);
        return;
    }
    w->failures++;
    it->attempts++;
    if (w->failures_in_row++ == 0)
        fprintf(stderr, "sluice: webhook %s: %s%s; retrying with backoff\n", w->url,
                code > 0 ? "answered " : "cannot deliver",
                code > 0 ? (code >= 500 ? "5xx" : "non-2xx") : "");
    if (w->store != NULL && it->id > 0)
        store_queue_attempts(w->store, it->id, it->attempts);
    if (it->attempts >= SINK_WEBHOOK_MAX_ATTEMPTS) {
        fprintf(stderr, "sluice: webhook %s: an alert is undelivered after %d attempts; %s\n",
                w->url, it->attempts,
                w->store != NULL && it->id > 0
                    ? "kept in the state store and retried at the next start"
                    : "dropped (no state store)");
        pop(w);
    }
    unsigned shift = w->failures_in_row - 1 < 16 ? w->failures_in_row - 1 : 16;
    uint64_t ms = (uint64_t)SINK_WEBHOOK_BACKOFF_MS << shift;
    if (ms > SINK_WEBHOOK_BACKOFF_MAX)
        ms = SINK_WEBHOOK_BACKOFF_MAX;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    evtimer_add(w->retry, &tv);
}

static void try_send(struct webhook *w)
{
    if (w->busy || w->len == 0 || evtimer_pending(w->retry, NULL))
        return;
    struct item *it = &w->q[w->head];
    struct evhttp_request *req = evhttp_request_new(on_done, w);
    if (req == NULL)
        return;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    char len[24];
    snprintf(len, sizeof(len), "%zu", it->n);
    evhttp_add_header(h, "Host", w->hosthdr);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Content-Length", len);
    evhttp_add_header(h, "User-Agent", "sluice-alerts");
    evbuffer_add(evhttp_request_get_output_buffer(req), it->body, it->n);
    w->busy = true;
    if (evhttp_make_request(w->conn, req, EVHTTP_REQ_POST, w->path) != 0) {
        /* the request is freed by libevent on failure */
        w->busy = false;
        struct timeval tv = {1, 0};
        evtimer_add(w->retry, &tv);
    }
}

struct webhook *webhook_new(struct event_base *base, const char *url, struct store *store,
                            char **err)
{
    struct webhook *w = calloc(1, sizeof(*w));
    const char *why = NULL;
    *err = NULL;
    if (w == NULL || (w->url = strdup(url)) == NULL) {
        free(w);
        *err = errf(url, "out of memory");
        return NULL;
    }
    w->base = base;
    w->store = store;
    if (parse_url(w, url, &why) < 0)
        goto err;
    unsigned char ip[16];
    if (inet_pton(AF_INET, w->host, ip) != 1 && inet_pton(AF_INET6, w->host, ip) != 1) {
        /* a name: resolve it without blocking the loop */
        w->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
        if (w->dns == NULL) {
            why = "cannot start a DNS resolver";
            goto err;
        }
    }
    w->conn = evhttp_connection_base_new(base, w->dns, w->host, w->port);
    w->retry = evtimer_new(base, on_retry, w);
    w->cap = 64;
    w->q = calloc(w->cap, sizeof(*w->q));
    if (w->conn == NULL || w->retry == NULL || w->q == NULL) {
        why = "out of memory";
        goto err;
    }
    evhttp_connection_set_timeout(w->conn, SINK_WEBHOOK_TIMEOUT_S);
    evhttp_connection_set_retries(w->conn, 0);
    return w;
err:
    *err = errf(url, why != NULL ? why : "error");
    webhook_free(w);
    return NULL;
}

const char *webhook_url(const struct webhook *w)
{
    return w->url;
}

static void enqueue(struct webhook *w, int64_t id, const char *json, size_t n, int attempts)
{
    if (w->len >= SINK_WEBHOOK_QUEUE_MAX) {
        w->only_stored++;
        return;
    }
    if (w->len == w->cap) {
        size_t nc = w->cap * 2;
        struct item *nq = calloc(nc, sizeof(*nq));
        if (nq == NULL)
            return;
        for (size_t i = 0; i < w->len; i++)
            nq[i] = w->q[(w->head + i) % w->cap];
        free(w->q);
        w->q = nq;
        w->head = 0;
        w->cap = nc;
    }
    struct item *it = &w->q[(w->head + w->len) % w->cap];
    it->body = malloc(n > 0 ? n : 1);
    if (it->body == NULL)
        return;
    memcpy(it->body, json, n);
    it->n = n;
    it->id = id;
    it->attempts = attempts;
    w->len++;
    try_send(w);
}

void webhook_send(struct webhook *w, const char *json, size_t n)
{
    int64_t id = 0;
    if (w->store != NULL) {
        char *body = strndup(json, n);
        if (body != NULL)
            id = store_queue_add(w->store, w->url, body);
        free(body);
        if (id < 0)
            id = 0;
    }
    enqueue(w, id, json, n, 0);
}

void webhook_adopt(struct webhook *w, int64_t id, const char *json, int attempts)
{
    (void)attempts; /* a new run gives every stored alert a fresh set of attempts */
    enqueue(w, id, json, strlen(json), 0);
}

size_t webhook_queued(const struct webhook *w)
{
    return w->len;
}

uint64_t webhook_delivered(const struct webhook *w)
{
    return w->delivered;
}

uint64_t webhook_failures(const struct webhook *w)
{
    return w->failures;
}

void webhook_free(struct webhook *w)
{
    if (w == NULL)
        return;
    if (w->conn != NULL)
        evhttp_connection_free(w->conn); /* a request in flight is dropped, no callback */
    if (w->dns != NULL)
        evdns_base_free(w->dns, 0);
    if (w->retry != NULL)
        event_free(w->retry);
    while (w->q != NULL && w->len > 0)
        pop(w);
    free(w->q);
    free(w->url);
    free(w->host);
    free(w->path);
    free(w->hosthdr);
    free(w);
}
