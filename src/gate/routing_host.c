/* routing_host: see routing_host.h. */
#include "gate/routing_host.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

enum routing_host_result routing_host_names(const char *v, size_t len, const struct host *target,
                                            uint16_t port, uint16_t default_port,
                                            struct ip_spelling spelling)
{
    const char *h;
    size_t hlen;
    uint16_t named;
    if (http1_split_host(v, len, &h, &hlen, &named) < 0 ||
        !host_sent_names(h, hlen, target, spelling))
        return ROUTING_HOST_OTHER_HOST;
    if (named == 0)
        named = default_port;
    return named == port ? ROUTING_HOST_MATCH : ROUTING_HOST_OTHER_PORT;
}

/* Each element of the comma-separated list <v> (<len> bytes), trimmed,
 * checked with routing_host_names(); empty elements are skipped (RFC 9110
 * 5.6.1). */
static enum routing_host_result list_names(const char *v, size_t len, const struct host *target,
                                           uint16_t port, uint16_t default_port,
                                           struct ip_spelling spelling)
{
    struct http1_list it;
    const char *e;
    size_t elen;
    enum routing_host_result r = ROUTING_HOST_MATCH;
    for (http1_list_init(&it, v, len); r == ROUTING_HOST_MATCH && http1_list_next(&it, &e, &elen);)
        if (elen > 0)
            r = routing_host_names(e, elen, target, port, default_port, spelling);
    return r;
}

/* One Forwarded field value <v> (<len> bytes): every host= pair's value
 * checked. Pairs are token "=" (token / quoted-string), separated by ';'
 * within an element and ',' between elements, with OWS tolerated around
 * the separators and the '=' (parsers that trim it find the same pairs).
 * An unquoted value runs to the next OWS, ';' or ','. */
static enum routing_host_result forwarded_names(const char *v, size_t len,
                                                const struct host *target, uint16_t port,
                                                uint16_t default_port, struct ip_spelling spelling,
                                                const char **why)
{
    size_t i = 0;
    while (i < len) {
        if (http1_is_ows(v[i]) || v[i] == ';' || v[i] == ',') {
            i++;
            continue;
        }
        size_t name = i;
        while (i < len && http1_is_tchar((unsigned char)v[i]))
            i++;
        size_t name_len = i - name;
        while (i < len && http1_is_ows(v[i]))
            i++;
        if (name_len == 0 || i == len || v[i] != '=')
            goto unreadable;
        i++;
        while (i < len && http1_is_ows(v[i]))
            i++;
        const char *val = v + i;
        size_t val_len;
        if (i < len && v[i] == '"') {
            const char *close = memchr(v + i + 1, '"', len - i - 1);
            if (close == NULL)
                goto unreadable;
            val = v + i + 1;
            val_len = (size_t)(close - val);
            if (memchr(val, '\\', val_len) != NULL || memchr(val, ',', val_len) != NULL ||
                memchr(val, ';', val_len) != NULL)
                goto unreadable;
            i = (size_t)(close - v) + 1;
        } else {
            while (i < len && !http1_is_ows(v[i]) && v[i] != ';' && v[i] != ',')
                i++;
            val_len = (size_t)(v + i - val);
        }
        while (i < len && http1_is_ows(v[i]))
            i++;
        if (i < len && v[i] != ';' && v[i] != ',')
            goto unreadable;
        if (name_len == 4 && strncasecmp(v + name, "host", 4) == 0) {
            enum routing_host_result r =
                routing_host_names(val, val_len, target, port, default_port, spelling);
            if (r != ROUTING_HOST_MATCH) {
                *why = r == ROUTING_HOST_OTHER_PORT ? "Forwarded host= names another port"
                                                    : "Forwarded host= names another host";
                return r;
            }
        }
    }
    return ROUTING_HOST_MATCH;

unreadable:
    *why = "a Forwarded header that cannot be read";
    return ROUTING_HOST_OTHER_HOST;
}

enum routing_host_result routing_fields_name(const struct http_request *req,
                                             const struct host *target, uint16_t port,
                                             uint16_t default_port, struct ip_spelling spelling,
                                             const char **why)
{
    for (size_t i = 0; i < req->nheaders; i++) {
        const struct http_header *f = &req->headers[i];
        enum routing_host_result r = ROUTING_HOST_MATCH;
        if (f->field == HTTP_FIELD_HOST_ALIAS) {
            r = list_names(f->value, f->value_len, target, port, default_port, spelling);
            if (r != ROUTING_HOST_MATCH)
                *why = r == ROUTING_HOST_OTHER_PORT ? "a forwarding header names another port"
                                                    : "a forwarding header names another host";
        } else if (f->field == HTTP_FIELD_FORWARDED) {
            r = forwarded_names(f->value, f->value_len, target, port, default_port, spelling, why);
        }
        if (r != ROUTING_HOST_MATCH)
            return r;
    }
    return ROUTING_HOST_MATCH;
}
