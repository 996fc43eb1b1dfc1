/* name_server_addr: a name server's address as the messages and metrics
 * that name it write it: the gateway's servers (gate/name_servers.c) and
 * each webhook sink's (watch/webhook_dns.c).
 *
 * Owns nothing. */
#ifndef SLUICE_UTIL_NAME_SERVER_ADDR_H
#define SLUICE_UTIL_NAME_SERVER_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Room for the longest: "[V6%ZONE]:PORT". */
#define NAME_SERVER_ADDR_LEN 64

/* "IP:PORT" or "[V6]:PORT" for <sa> (IPv4 or IPv6), into <out> (<cap>
 * bytes); "[V6%ZONE]:PORT" for a scoped (link-local) one, ZONE its
 * interface index: the same address on another interface is another
 * server. */
void name_server_addr_format(const struct sockaddr *sa, char *out, size_t cap);

#endif
