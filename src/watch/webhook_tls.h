/* webhook_tls: the TLS client side of https:// webhooks (sinks.h).
 *
 * The sinks share one SSL_CTX (webhook_tls_ca), reference-counted: TLS
 * 1.2 or later, the server's certificate
 * chain verified against the system's CA store (OpenSSL's default paths:
 * /etc/ssl/certs, or the files SSL_CERT_FILE and SSL_CERT_DIR name) and
 * its name checked against the URL's host: a DNS name (without a final
 * dot written after it) against the certificate's DNS names (and sent as
 * SNI), an IP literal against its IP
 * addresses (no SNI, RFC 6066). A handshake that fails verification
 * fails the delivery; there is no switch to turn verification off. */
#ifndef SLUICE_WATCH_WEBHOOK_TLS_H
#define SLUICE_WATCH_WEBHOOK_TLS_H

#include <stdbool.h>
#include <stddef.h>

struct bufferevent;
struct event_base;
struct webhook_tls;
struct webhook_tls_ca;

/* Returns the client context with the CA store read (the store's files
 * read now, tens of milliseconds for a system's: built off the event loop,
 * on the reload thread, and once for all the sinks a policy adds), or NULL
 * when out of memory. One whose store could not be read is returned too:
 * webhook_tls_new() then fails with why. */
struct webhook_tls_ca *webhook_tls_ca_new(void);
/* Frees <ca> (the sinks made with it keep the context). Accepts NULL. */
void webhook_tls_ca_free(struct webhook_tls_ca *ca);
/* Returns a TLS client for <host> (copied; a name, or with <is_ip> an IP
 * literal without brackets) that uses <ca>'s context, or with <ca> NULL a
 * context of its own (the store read now); or NULL with <*why> set to a
 * static text. */
struct webhook_tls *webhook_tls_new(const char *host, bool is_ip, const struct webhook_tls_ca *ca,
                                    const char **why);
/* Returns a new, unconnected bufferevent that handshakes with the host as
 * a client once connected; it owns its SSL (freed with the bufferevent).
 * NULL when out of memory. */
struct bufferevent *webhook_tls_bev(const struct webhook_tls *t, struct event_base *base);
/* Fills <buf> with why TLS failed on <bev> ("certificate verify failed:
 * hostname mismatch", "TLS: ...") or with "" when TLS is not the reason. */
void webhook_tls_why(struct bufferevent *bev, char *buf, size_t len);
/* Frees <t>. Accepts NULL. */
void webhook_tls_free(struct webhook_tls *t);

#endif
