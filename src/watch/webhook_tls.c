/* webhook_tls: the TLS client side of https:// webhooks (webhook_tls.h). */
#include "watch/webhook_tls.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct webhook_tls_ca {
    SSL_CTX *ctx;    /* one reference, or NULL when the store could not be read */
    const char *why; /* static: why ctx is NULL */
};

struct webhook_tls {
    SSL_CTX *ctx; /* a reference to the webhook_tls_ca's */
    char *host;
    bool is_ip;
};

/* A client context for every https:// sink: the settings hold nothing of
 * one sink (its host is set on each SSL, webhook_tls_bev()), so one
 * context, and the one copy of the CA store in it, serves them all. */
static SSL_CTX *client_ctx_new(const char **why)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        *why = "cannot create a TLS context";
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* The read of the whole store (tens of ms for a system's): the cost
     * that, paid once per sink on the loop, stalled every request. */
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        *why = "cannot load the system's CA certificates";
        SSL_CTX_free(ctx);
        return NULL;
    }
    /* Alerts are rare and a connection is kept while the server allows:
     * resuming sessions is not worth a cache. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A close without close_notify ends the stream as one with it does
     * (webhook_tls_bev()): OpenSSL 3 reports it as an error of its own,
     * which libevent 2.1's allow_dirty_shutdown does not recognise, so an
     * answer that ends by the close (no Content-Length, not chunked) from
     * a server that skips close_notify failed every delivery ("unexpected
     * eof while reading"), retried for ever. Only the status counts, and
     * an answer framed by a length still fails when cut short. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    return ctx;
}

struct webhook_tls_ca *webhook_tls_ca_new(void)
{
    struct webhook_tls_ca *ca = calloc(1, sizeof(*ca));
    if (ca != NULL)
        ca->ctx = client_ctx_new(&ca->why);
    return ca;
}

void webhook_tls_ca_free(struct webhook_tls_ca *ca)
{
    if (ca == NULL)
        return;
    SSL_CTX_free(ca->ctx);
    free(ca);
}

struct webhook_tls *webhook_tls_new(const char *host, bool is_ip, const struct webhook_tls_ca *ca,
                                    const char **why)
{
    struct webhook_tls *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->host = strdup(host)) == NULL) {
        *why = "out of memory";
        goto err;
    }
    t->is_ip = is_ip;
    /* A name written with its final dot (hooks.example.test.) is the same
     * name: it is sent as SNI (RFC 6066: no final dot) and checked against
     * the certificate without it, which X509_check_host() would not match
     * to hooks.example.test (curl does the same). */
    size_t n = strlen(t->host);
    if (!is_ip && n > 1 && t->host[n - 1] == '.')
        t->host[n - 1] = '\0';
    if (ca == NULL) {
        t->ctx = client_ctx_new(why);
    } else if (ca->ctx == NULL) {
        *why = ca->why;
    } else if (SSL_CTX_up_ref(ca->ctx) == 1) {
        t->ctx = ca->ctx;
    } else {
        *why = "out of memory";
    }
    if (t->ctx == NULL)
        goto err;
    return t;
err:
    webhook_tls_free(t);
    return NULL;
}

struct bufferevent *webhook_tls_bev(const struct webhook_tls *t, struct event_base *base)
{
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL *ssl = SSL_new(t->ctx);
    if (ssl == NULL)
        return NULL;
    int ok;
    if (t->is_ip) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), t->host);
    } else {
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = SSL_set1_host(ssl, t->host) == 1 && SSL_set_tlsext_host_name(ssl, t->host) == 1;
    }
    if (ok != 1 || SSL_set_alpn_protos(ssl, alpn, sizeof(alpn) - 1) != 0) {
        SSL_free(ssl);
        return NULL;
    }
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (bev == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    /* Many servers close without a close_notify; the HTTP framing
     * (Content-Length) already says whether the answer was complete. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void webhook_tls_why(struct bufferevent *bev, char *buf, size_t len)
{
    SSL *ssl = bev != NULL ? bufferevent_openssl_get_ssl(bev) : NULL;
    buf[0] = '\0';
    if (ssl == NULL)
        return;
    long vr = SSL_get_verify_result(ssl);
    unsigned long e, first = 0;
    /* libevent puts the SSL_get_error() code (SSL_ERROR_SYSCALL, 5, for
     * a reset) among OpenSSL's error codes: as one, it read
     * "error:00000005:lib(0)::reason(5)". Such a code is passed over; the
     * socket's error then tells what happened. */
    while ((e = bufferevent_get_openssl_error(bev)) != 0)
        if (first == 0 && e > SSL_ERROR_WANT_CLIENT_HELLO_CB)
            first = e;
    if (vr != X509_V_OK) {
        snprintf(buf, len, "certificate verify failed: %s", X509_verify_cert_error_string(vr));
    } else if (first != 0) {
        char text[256];
        ERR_error_string_n(first, text, sizeof(text));
        snprintf(buf, len, "TLS: %s", text);
    }
}

void webhook_tls_free(struct webhook_tls *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free(t->host);
    free(t);
}
