/* max_forwards: the gateway's own answer to a TRACE or OPTIONS whose
 * Max-Forwards is 0. RFC 9110 7.6.2: an intermediary MUST NOT forward such
 * a request but answer it as its final recipient; one with a larger value
 * goes on with it counted down (gate/http1.c's request writer). */
#ifndef SLUICE_GATE_MAX_FORWARDS_H
#define SLUICE_GATE_MAX_FORWARDS_H

#include <stdbool.h>
#include <stddef.h>

#include "gate/http1.h"

struct conn;
struct evbuffer;

/* Whether <req> is to be answered by the gateway, not forwarded: a TRACE
 * or OPTIONS with Max-Forwards: 0. */
bool max_forwards_ends_here(const struct http_request *req);

/* Writes into <out> the gateway's answer to <c>'s request (an own_answer_fn
 * of gate/conn.h): "200 OK" with Date, "Connection: keep-alive" when <keep>
 * ("close" else), no content for an OPTIONS (nothing is said of what the
 * target allows: the gateway does not know), and for a TRACE the request as
 * the gateway would have forwarded it (ex->uphead) as message/http, but
 * for the fields likely to hold a secret, as RFC 9110 9.3.8 asks of its
 * final recipient: Proxy-Authorization, the agent's secret, and the other
 * hop-by-hop fields, which the writer drops, and those
 * max_forwards_field_is_secret() names, and the value of a parameter that
 * max_forwards_param_is_secret() names ("?api_key=" kept, its value not)
 * in the request's target and in the URL of a field that
 * max_forwards_field_is_url() names (Referer): a path segment's
 * ";name=value" parameters, ended by ';', '/', '?' or '#', and the
 * query's and the fragment's, ended by '&', ';' or '#'. Returns 0, or -1
 * out of memory. */
int max_forwards_answer(struct conn *c, struct evbuffer *out, bool keep);

/* Whether the field named <name> (<len> bytes) is left out of a TRACE's
 * echo: its name holds, in any case, "auth", "cookie", "token", "key",
 * "secret", "session", "passw", "credential" or "signature"
 * (Authorization, Cookie, X-Api-Key, X-Auth-Token, Private-Token, ...). */
bool max_forwards_field_is_secret(const char *name, size_t len);

/* Whether the value of the parameter named <name> (<len> bytes, as sent)
 * of a URL is left out of a TRACE's echo: its name, decoded as a server
 * decodes it (util/query.h: "api_%6Bey" is api_key), holds one of those
 * words, or is "sig" whole (Azure's SAS signature; too short a word to be
 * looked for inside others: X-Design-Id), in any case. */
bool max_forwards_param_is_secret(const char *name, size_t len);

/* Whether the field named <name> (<len> bytes) holds a URL whose
 * parameters the echo judges as the target's: Referer, Origin,
 * Content-Location and Location, in any case. */
bool max_forwards_field_is_url(const char *name, size_t len);

#endif
