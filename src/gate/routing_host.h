/* routing_host: the header fields by which an origin may pick the site a
 * request is for, and the one check that they all name the target.
 *
 * On a shared front (a CDN, a reverse proxy, a virtual-hosting server) the
 * site is picked by the Host header, and behind one, by the fields a proxy
 * in front is trusted to set: X-Forwarded-Host (Django's
 * USE_X_FORWARDED_HOST, Express's "trust proxy", Symfony's and Spring's
 * trusted headers, Rails), Forwarded's host= (RFC 7239: Symfony, Spring),
 * and X-Host, X-Original-Host, X-Forwarded-Server and X-HTTP-Host-Override,
 * which other frameworks and front-ends read as the host. An origin that
 * trusts them takes them from whoever sends them, an agent too: an agent
 * allowed to one site of the front would reach another by naming it there
 * (domain fronting by header). Each must then name the target as the Host
 * header must. Pure: no allocation, nothing kept. */
#ifndef SLUICE_GATE_ROUTING_HOST_H
#define SLUICE_GATE_ROUTING_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "gate/http1.h"
#include "policy/host.h"

enum routing_host_result {
    ROUTING_HOST_MATCH,
    ROUTING_HOST_OTHER_HOST, /* another host, or a value that cannot be read as one */
    ROUTING_HOST_OTHER_PORT,
};

/* Whether the value <v> (<len> bytes, hostile) of a field that names a
 * host ("name[:port]", "[v6][:port]": http1_split_host()) names <target>
 * (host_sent_names(), an IP spelled as <spelling> allows) and <port>; a
 * value without a port names <default_port> (80 for a plain-HTTP request,
 * whose Host without a port means 80; the target's own port where a
 * missing port is accepted). */
enum routing_host_result routing_host_names(const char *v, size_t len, const struct host *target,
                                            uint16_t port, uint16_t default_port,
                                            struct ip_spelling spelling);

/* Checks the routing fields of <req> other than Host (the header comment
 * says which) as routing_host_names() checks a Host value: every element
 * of an X-Forwarded-Host list (and of the other fields'), every host= of
 * every Forwarded field. A Forwarded field that cannot be read, as RFC
 * 7239 writes it, is ROUTING_HOST_OTHER_HOST (parsers differ on it, and
 * one may find another host= in it); so is a quoted value holding a
 * backslash, ',' or ';', on which parsers that split the field differ.
 * Returns ROUTING_HOST_MATCH when all name the target (or there is none),
 * else the first mismatch, with <*why> set to a static phrase. */
enum routing_host_result routing_fields_name(const struct http_request *req,
                                             const struct host *target, uint16_t port,
                                             uint16_t default_port, struct ip_spelling spelling,
                                             const char **why);

#endif
