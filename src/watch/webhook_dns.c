/* webhook_dns: a webhook sink's own resolver (see webhook_dns.h). */
#include "watch/webhook_dns.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "util/dns_pin.h"
#include "util/name_server_addr.h"
#include "util/read_now.h"
#include "util/resolv_conf.h"

#ifndef WEBHOOK_RESOLV_CONF
#define WEBHOOK_RESOLV_CONF "/etc/resolv.conf" /* tests point it elsewhere */
#endif

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

/* What add_servers() did with a resolver. */
enum added { ADDED_SOME, ADDED_NONE, ADDED_UNTIED, ADDED_FAILED };

/* Adds the servers of <ss> not <left_out> to <dns>, each tied to its port,
 * their sockets into <socks>, and says on standard error why one is left
 * out (marked in <left_out>). Returns ADDED_UNTIED, after the first server
 * whose socket could not be tied: evdns has no way to drop it, so <dns>
 * must not be used. */
static enum added add_servers(struct evdns_base *dns, const struct sockaddr_storage *ss,
                              const socklen_t *len, size_t n, bool *left_out, const char *label,
                              struct webhook_dns_socks *socks)
{
    socks->n = 0;
    for (size_t i = 0; i < n; i++) {
        if (left_out[i])
            continue;
        const char *why = NULL;
        char addr[NAME_SERVER_ADDR_LEN];
        int fd = -1;
        enum dns_pin_result pin =
            dns_pin_add(dns, (const struct sockaddr *)&ss[i], len[i], &why, &fd);
        if (pin == DNS_PIN_FAILED)
            return ADDED_FAILED;
        if (pin == DNS_PIN_TIED) {
            socks->fd[socks->n++] = fd;
            continue;
        }
        left_out[i] = true;
        name_server_addr_format((const struct sockaddr *)&ss[i], addr, sizeof(addr));
        if (pin == DNS_PIN_UNREACHABLE) {
            fprintf(stderr,
                    "sluice: webhook %s: name server %s of " WEBHOOK_RESOLV_CONF
                    ": not asked: no socket can be connected to it (%s)\n",
                    label, addr, why);
            continue;
        }
        fprintf(stderr,
                "sluice: webhook %s: name server %s of " WEBHOOK_RESOLV_CONF
                ": not asked: its socket cannot be tied to its port (%s), and an untied one "
                "takes an answer from any port of its address\n",
                label, addr, why);
        return ADDED_UNTIED;
    }
    return socks->n > 0 ? ADDED_SOME : ADDED_NONE;
}

struct evdns_base *webhook_dns_new(struct event_base *base, const char *label,
                                   struct webhook_dns_socks *socks, const char **why)
{
    struct sockaddr_storage ss[WEBHOOK_DNS_SERVERS];
    socklen_t len[WEBHOOK_DNS_SERVERS];
    bool left_out[WEBHOOK_DNS_SERVERS] = {false};
    size_t n = 0;

    if (resolv_conf_addrs(base, WEBHOOK_RESOLV_CONF, ss, len, WEBHOOK_DNS_SERVERS, &n) < 0) {
        *why = "cannot read the name servers of " WEBHOOK_RESOLV_CONF
               " (out of descriptors or memory)";
        return NULL;
    }
    if (n == 0)
        len[n++] = local_server(&ss[0]);
    /* Made again without a server whose socket could not be tied: each
     * round leaves one more out, so at most n + 1 rounds. */
    for (size_t round = 0; round <= n; round++) {
        struct evdns_base *dns = evdns_base_new(base, 0);
        if (dns == NULL) {
            *why = "cannot start a DNS resolver";
            return NULL;
        }
        /* all but the name servers, which are added one at a time */
        (void)evdns_base_resolv_conf_parse(dns, DNS_OPTIONS_ALL & ~DNS_OPTION_NAMESERVERS,
                                           WEBHOOK_RESOLV_CONF);
        enum added got = add_servers(dns, ss, len, n, left_out, label, socks);
        if (got == ADDED_SOME)
            return dns;
        evdns_base_free(dns, 0);
        if (got == ADDED_FAILED) {
            *why = "cannot start a DNS resolver";
            return NULL;
        }
        if (got == ADDED_NONE)
            break;
    }
    *why = "no name server of " WEBHOOK_RESOLV_CONF " can be asked (see standard error)";
    return NULL;
}

bool webhook_dns_read_now(struct event_base *base, const struct webhook_dns_socks *socks)
{
    bool read = false;
    for (size_t i = 0; i < socks->n; i++)
        read = read_now(base, socks->fd[i]) || read;
    return read;
}
