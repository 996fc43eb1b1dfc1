#include "gate/deny.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "gate/agent.h"

static const char *status_text(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 407:
        return "Proxy Authentication Required";
    case 429:
        return "Too Many Requests";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Error";
    }
}

void deny_message(const struct deny_info *d, char *buf, size_t cap)
{
    char hp[300];
    const char *h = d->host != NULL ? d->host : "?";
    const char *a = d->agent != NULL ? d->agent : "unknown";
    const char *m = d->method != NULL ? d->method : "this method";
    const char *ip = d->ip != NULL ? d->ip : "?";
    if (strchr(h, ':') != NULL)
        snprintf(hp, sizeof(hp), "[%s]:%u", h, (unsigned)d->port);
    else
        snprintf(hp, sizeof(hp), "%s:%u", h, (unsigned)d->port);

    switch (d->reason) {
    case REASON_NOT_IN_POLICY:
        snprintf(
            buf, cap,
            "sluice: %s is not in the egress policy (agent %s); ask the policy owner to add it", hp,
            a);
        break;
    case REASON_DENIED_HOST:
        snprintf(
            buf, cap,
            "sluice: %s is on the policy's deny list (agent %s); it cannot be reached through this gateway",
            hp, a);
        break;
    case REASON_PORT_NOT_ALLOWED:
        snprintf(
            buf, cap,
            "sluice: %s: port %u is not allowed for %s (agent %s); ask the policy owner to add the port to its rule",
            hp, (unsigned)d->port, h, a);
        break;
    case REASON_METHOD_NOT_ALLOWED:
        snprintf(
            buf, cap,
            "sluice: %s is not allowed on %s (agent %s); ask the policy owner for a rule that grants %s",
            m, hp, a, m);
        break;
    case REASON_NEEDS_INSPECTION:
        snprintf(
            buf, cap,
            "sluice: a CONNECT tunnel to %s would hide its methods and the rules for it restrict methods (agent %s); use plain HTTP or ask the policy owner for a rule without methods",
            hp, a);
        break;
    case REASON_SELF_REQUEST:
        if (d->detail != NULL) /* a loop: the request came back through the gateway */
            snprintf(buf, cap, "sluice: %s refused (agent %s): %s", hp, a, d->detail);
        else
            snprintf(
                buf, cap,
                "sluice: %s is this gateway itself (agent %s); requests to the gateway are refused",
                hp, a);
        break;
    case REASON_AGENT_NOT_ALLOWED:
        if (d->agent == NULL)
            snprintf(
                buf, cap,
                "sluice: %s refused: this client is not a known agent; ask the policy owner to add its source to an agent",
                hp);
        else
            snprintf(
                buf, cap,
                "sluice: agent %s may not reach %s; ask the policy owner to add the agent to its rule",
                a, hp);
        break;
    case REASON_GRANT_EXPIRED:
        snprintf(buf, cap,
                 "sluice: the grant for %s has expired (agent %s); ask its owner to renew it", hp,
                 a);
        break;
    case REASON_IP_LITERAL:
        snprintf(
            buf, cap,
            "sluice: %s is an IP address and no cidr: rule covers it (agent %s); use the host name or ask the policy owner for a cidr: rule",
            hp, a);
        break;
    case REASON_PRIVATE_ADDRESS:
        snprintf(
            buf, cap,
            "sluice: %s resolves to %s, a private or reserved address (agent %s); ask the policy owner to list its range in network.allow_ranges",
            hp, ip, a);
        break;
    case REASON_HOST_MISMATCH:
        snprintf(
            buf, cap,
            "sluice: the Host header or a forwarding header (X-Forwarded-Host, Forwarded host=, ...) does not name the request target %s (agent %s); send headers that name the target",
            hp, a);
        break;
    case REASON_SNI_MISMATCH:
        snprintf(
            buf, cap,
            "sluice: the TLS server name does not match the CONNECT target %s (agent %s); connect to the host you name",
            hp, a);
        break;
    case REASON_ENCRYPTED_CLIENT_HELLO:
        snprintf(
            buf, cap,
            "sluice: the TLS ClientHello for %s hides the server it asks for (Encrypted Client Hello) (agent %s); turn ECH off in the client, or ask the policy owner to allow it for this agent (encrypted_client_hello: allow in its entry)",
            hp, a);
        break;
    case REASON_RATE_LIMITED:
        snprintf(buf, cap, "sluice: agent %s is over its rate limit for %s; retry after %u s", a,
                 hp, d->retry_after);
        break;
    case REASON_BAD_REQUEST:
        /* A detail that says what to do itself (after "; ": a method
         * override's "send that method itself") gets no advice on the
         * request's form, which was not what was wrong. */
        snprintf(buf, cap, "sluice: bad request%s%s: %s%s", d->host != NULL ? " for " : "",
                 d->host != NULL ? hp : "", d->detail != NULL ? d->detail : "malformed",
                 d->detail != NULL && strstr(d->detail, "; ") != NULL
                     ? ""
                     : "; send an absolute-form HTTP/1.1 proxy request or CONNECT host:port");
        break;
    case REASON_AUTH_REQUIRED:
        snprintf(buf, cap,
                 "sluice: %s refused: this gateway needs to know which agent is asking: %s", hp,
                 d->detail != NULL ? d->detail : AGENT_WHY_NONE_SENT);
        break;
    case REASON_DNS_FAILURE:
        snprintf(buf, cap,
                 "sluice: cannot resolve %s (agent %s)%s%s; check the name or the gateway's DNS",
                 hp, a, d->detail != NULL ? ": " : "", d->detail != NULL ? d->detail : "");
        break;
    case REASON_UPSTREAM_UNREACHABLE:
        if (d->detail != NULL) /* connected, then no response it could relay */
            snprintf(buf, cap, "sluice: no usable response from %s (%s) (agent %s): %s", hp, ip, a,
                     d->detail);
        else
            snprintf(
                buf, cap,
                "sluice: cannot connect to %s (%s) (agent %s); the upstream is down or unreachable",
                hp, ip, a);
        break;
    case REASON_GATEWAY_OVERLOADED:
        snprintf(buf, cap,
                 "sluice: cannot connect to %s (agent %s): the gateway is %s; retry later", hp, a,
                 d->detail != NULL ? d->detail : "out of resources");
        break;
    case REASON_TOO_MANY_CONNECTIONS:
        snprintf(buf, cap,
                 "sluice: %s refused: agent %s has too many open connections; close some and retry",
                 hp, a);
        break;
    case REASON_QUARANTINED:
        snprintf(
            buf, cap,
            "sluice: %s refused: agent %s is quarantined after repeated denials; ask the policy owner to review them",
            hp, a);
        break;
    default:
        snprintf(buf, cap, "sluice: request refused (agent %s)", a);
        break;
    }
}

int deny_write(const struct deny_info *d, struct evbuffer *out)
{
    char msg[768];
    int status = reason_status(d->reason);
    const char *name = reason_name(d->reason);
    deny_message(d, msg, sizeof(msg));
    size_t mlen = strlen(msg);
    int rc = evbuffer_add_printf(
        out,
        "HTTP/1.1 %d %s\r\n"
        "%s"
        "Sluice-Reason: %s\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "Content-Length: %zu\r\n"
        "Connection: %s\r\n",
        status, status_text(status), d->date_field != NULL ? d->date_field : "",
        name != NULL ? name : "denied", mlen + 1, d->keep_alive ? "keep-alive" : "close");
    if (rc < 0)
        return -1;
    if (d->reason == REASON_AUTH_REQUIRED &&
        evbuffer_add_printf(out, "Proxy-Authenticate: Basic realm=\"sluice\"\r\n") < 0)
        return -1;
    if ((d->reason == REASON_RATE_LIMITED || d->reason == REASON_QUARANTINED ||
         d->reason == REASON_GATEWAY_OVERLOADED) &&
        evbuffer_add_printf(out, "Retry-After: %u\r\n", d->retry_after > 0 ? d->retry_after : 1) <
            0)
        return -1;
    if (evbuffer_add(out, "\r\n", 2) < 0 ||
        (!d->head_only && evbuffer_add_printf(out, "%s\n", msg) < 0))
        return -1;
    return status;
}
