/* deny: the response an agent gets when sluice refuses a request.
 *
 * SPEC.md "Deny reasons": the status of reason_status(), a Date (RFC 9110
 * 6.6.1: the gateway originates its refusals, and has a clock), a
 * "Sluice-Reason: REASON" header, Retry-After for rate_limited, quarantined
 * and gateway_overloaded,
 * Proxy-Authenticate for auth_required, a Connection header (keep-alive
 * when the refused request left nothing unread, else close: the gateway
 * never has to skip an unread request body), and a one-line text/plain body that says what happened
 * and what to ask for, one message per reason. The fields go in that order:
 * status line, Date, Sluice-Reason, Content-Type, Content-Length,
 * Connection, then Proxy-Authenticate or Retry-After. */
#ifndef SLUICE_GATE_DENY_H
#define SLUICE_GATE_DENY_H

#include <stdbool.h>
#include <stdint.h>

#include "policy/decision.h"

struct evbuffer;

struct deny_info {
    enum deny_reason reason;
    const char *host; /* normalised target, or NULL when unknown */
    uint16_t port;
    const char *agent;    /* agent id, or NULL when unknown */
    const char *method;   /* or NULL */
    const char *ip;       /* refused / unreachable address, or NULL */
    const char *detail;   /* a phrase for bad_request ("head too large"; one that ends with
                           * its own advice after "; " gets no other), dns_failure,
                           * upstream_unreachable after the connect ("the upstream sent an
                           * invalid response") or gateway_overloaded ("out of file
                           * descriptors"); or NULL */
    unsigned retry_after; /* seconds, rate_limited / quarantined / gateway_overloaded only */
    bool keep_alive;      /* the client connection stays open after this response */
    bool head_only;       /* the request was HEAD: no content (RFC 9110 9.3.2), the
                           * Content-Length is that of the text a GET would get */

    /* The Date field line, "Date: " IMF-fixdate CRLF (http_date_field_of()),
     * written after the status line; NULL or "" for none (a clock past year
     * 9999, which no IMF-fixdate can write). */
    const char *date_field;
};

/* Appends the whole response for <d> to <out> (its head alone when
 * <d>->head_only). Returns the HTTP status written, or -1 when <out> could
 * not grow. */
int deny_write(const struct deny_info *d, struct evbuffer *out);

/* The one-line message (no newline) for <d> into <buf>. */
void deny_message(const struct deny_info *d, char *buf, size_t cap);

#endif
