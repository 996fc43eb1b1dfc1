/* dns_pin: ties the UDP socket evdns made for a name server to that
 * server's address and port (connect()), so that the kernel hands the
 * socket the server's datagrams only.
 *
 * evdns (libevent 2.1) checks an answer's source address but not its
 * port. Any process on the gateway's host can send from the server's
 * address when that is one of the host's (127.0.0.53, 127.0.0.1: the
 * servers the policy is told to prefer), from any port but the privileged
 * 53, and reads the gateway's port in /proc/net/udp: the 16-bit query ID
 * was then the whole guess, 65536 datagrams for an allowed name to lead
 * to the forger's address. A connected socket takes nothing from another
 * port.
 *
 * Owns nothing. */
#ifndef SLUICE_GATE_DNS_PIN_H
#define SLUICE_GATE_DNS_PIN_H

#include <sys/socket.h>

/* The lowest descriptor free now (socket() takes it), for dns_pin(); -1
 * when none is. */
int dns_pin_mark(void);

/* Connects the socket evdns just made for the server <sa> (<len> bytes)
 * to it: the one datagram socket of <sa>'s family that is neither bound
 * nor connected among descriptors 0 to <mark> + DNS_PIN_SLACK (<mark>
 * from dns_pin_mark() right before evdns made it). Returns 0, or -1 with
 * <*why> set (static text). */
int dns_pin(const struct sockaddr *sa, socklen_t len, int mark, const char **why);

#endif
