/* webhook_dns: a webhook sink's own resolver (see webhook_dns.h). */
#include "watch/webhook_dns.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "util/dns_pin.h"
#include "util/resolv_conf.h"

#define WEBHOOK_RESOLV_CONF "/etc/resolv.conf"

/* 127.0.0.1:53, the server evdns assumes when resolv.conf names none (or
 * is missing), into <ss>; its length. */
static socklen_t local_server(struct sockaddr_storage *ss)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)(void *)ss;
    memset(ss, 0, sizeof(*ss));
    s4->sin_family = AF_INET;
    s4->sin_port = htons(53);
    s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sizeof(*s4);
}

struct evdns_base *webhook_dns_new(struct event_base *base, const char *label, const char **why)
{
    struct sockaddr_storage ss[WEBHOOK_DNS_SERVERS];
    socklen_t len[WEBHOOK_DNS_SERVERS];
    size_t n = 0;

    if (resolv_conf_addrs(base, WEBHOOK_RESOLV_CONF, ss, len, WEBHOOK_DNS_SERVERS, &n) < 0) {
        *why = "cannot read the name servers of " WEBHOOK_RESOLV_CONF
               " (out of descriptors or memory)";
        return NULL;
    }
    if (n == 0)
        len[n++] = local_server(&ss[0]);
    struct evdns_base *dns = evdns_base_new(base, 0);
    if (dns == NULL) {
        *why = "cannot start a DNS resolver";
        return NULL;
    }
    /* all but the name servers, which are added below one at a time */
    (void)evdns_base_resolv_conf_parse(dns, DNS_OPTIONS_ALL & ~DNS_OPTION_NAMESERVERS,
                                       WEBHOOK_RESOLV_CONF);
    size_t added = 0;
    for (size_t i = 0; i < n; i++) {
        const char *unpinned = NULL;
        enum dns_pin_result pin =
            dns_pin_add(dns, (const struct sockaddr *)&ss[i], len[i], &unpinned);
        if (pin == DNS_PIN_FAILED) {
            evdns_base_free(dns, 0);
            *why = "cannot start a DNS resolver";
            return NULL;
        }
        if (pin == DNS_PIN_UNREACHABLE)
            fprintf(stderr,
                    "sluice: webhook %s: name server %zu of " WEBHOOK_RESOLV_CONF
                    ": not asked: no socket can be connected to it (%s)\n",
                    label, i + 1, unpinned);
        else
            added++;
        if (pin == DNS_PIN_LOOSE)
            fprintf(stderr,
                    "sluice: webhook %s: name server %zu of " WEBHOOK_RESOLV_CONF
                    ": cannot take its answers from its port only (%s): an answer from another "
                    "port of its address is taken too\n",
                    label, i + 1, unpinned);
    }
    if (added == 0) {
        evdns_base_free(dns, 0);
        *why = "no name server of " WEBHOOK_RESOLV_CONF " can be reached";
        return NULL;
    }
    return dns;
}
