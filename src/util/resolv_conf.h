/* resolv_conf: the name servers of a resolv.conf file, as evdns reads them,
 * for a resolver that adds them one at a time (each socket tied to its
 * server by dns_pin.h): the gateway's when dns.servers names none, and each
 * webhook sink's.
 *
 * Owns nothing. */
#ifndef SLUICE_UTIL_RESOLV_CONF_H
#define SLUICE_UTIL_RESOLV_CONF_H

#include <stddef.h>
#include <sys/socket.h>

struct event_base;

/* The addresses of the first <cap> nameserver lines of <path>, in the
 * order of the lines, into <ss> and their lengths into <len>; their number
 * in <*count> (a missing file or no nameserver line: none, never the
 * 127.0.0.1 evdns would otherwise assume). Read by a throwaway evdns
 * resolver on <base>, so a line means what it would mean to evdns
 * ("IP", "IP:PORT", "[V6]:PORT"). Returns -1 with errno set when the file
 * could not be read whole: evdns opens a socket for each nameserver line
 * as it parses, and drops, without a word, each one it cannot open
 * (descriptors short), as it does the file when it cannot open it. */
int resolv_conf_addrs(struct event_base *base, const char *path, struct sockaddr_storage *ss,
                      socklen_t *len, size_t cap, size_t *count);

#endif
