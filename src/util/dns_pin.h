/* dns_pin: ties the UDP socket evdns made for a name server to that
 * server's address and port (connect()), so that the kernel hands the
 * socket the server's datagrams only. Used by every evdns resolver of the
 * process: the gateway's (gate/name_servers.c) and each webhook sink's
 * (watch/webhook_dns.c), all on the event loop's thread.
 *
 * evdns (libevent 2.1) checks an answer's source address but not its
 * port. Any process on the gateway's host can send from the server's
 * address when that is one of the host's (127.0.0.53, 127.0.0.1: the
 * servers the policy is told to prefer), from any port but the privileged
 * 53, and reads the resolver's port in /proc/net/udp: the 16-bit query ID
 * was then the whole guess, 65536 datagrams for an allowed name to lead
 * to the forger's address (or for a webhook's alerts to go there). A
 * connected socket takes nothing from another port.
 *
 * Owns nothing. */
#ifndef SLUICE_UTIL_DNS_PIN_H
#define SLUICE_UTIL_DNS_PIN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

struct evdns_base;

#define DNS_PIN_SEEN 32 /* unbound datagram sockets a mark remembers */

/* What the descriptors hold before evdns makes a server's socket. */
struct dns_pin_mark {
    int top;                  /* the last descriptor to look at; -1: none free */
    size_t n;                 /* such sockets there already (another resolver's) */
    bool full;                /* more than DNS_PIN_SEEN: nothing is told apart */
    ino_t seen[DNS_PIN_SEEN]; /* their inodes */
};

/* Fills <m> for a server of <family>, right before evdns makes its socket. */
void dns_pin_mark(struct dns_pin_mark *m, int family);

/* Connects the socket evdns made since <m> for the server <sa> (<len>
 * bytes) to it: the one datagram socket of <sa>'s family, neither bound
 * nor connected, that <m> did not see. Returns 0; -1 when that socket is
 * not found, -2 when connect() refused it, with <*why> set (static text,
 * or strerror()'s, valid until its next call). */
int dns_pin(const struct sockaddr *sa, socklen_t len, const struct dns_pin_mark *m,
            const char **why);

/* What dns_pin_add() did with a server. */
enum dns_pin_result {
    DNS_PIN_TIED,        /* added, its socket tied to it */
    DNS_PIN_LOOSE,       /* added, its socket not found (<why>), so not tied: the base
                          * must not be used (it would take an answer from any port of
                          * the server's address); evdns cannot drop a server */
    DNS_PIN_UNREACHABLE, /* not added: no socket can be connected to it now (<why>) */
    DNS_PIN_FAILED,      /* evdns could not add it, or its socket was refused by
                          * connect() once added: the base must not be used */
};

/* Adds the name server <sa> (<len> bytes) to <dns>, its socket tied to it
 * (dns_pin_mark(), then dns_pin()). A server no socket can be connected to
 * now (no route to it yet, say) is not added: its socket, unconnected,
 * would take an answer from any port of its address once a route came,
 * which is what the tie is for. <*why> as dns_pin()'s, NULL when tied.
 * When tied, <*fd> (unless <fd> is NULL) is the server's socket, evdns'
 * own (borrowed: evdns closes it), else -1. */
enum dns_pin_result dns_pin_add(struct evdns_base *dns, const struct sockaddr *sa, socklen_t len,
                                const char **why, int *fd);

#endif
