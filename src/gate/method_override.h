/* method_override: finds, in a request head, a method override: a header
 * (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) or a _method
 * query parameter that names another method than the request line's.
 *
 * Google's APIs, Express's method-override, Symfony, Laravel, Rails and
 * OData services run the method such an override names, not the one in
 * the request line: a GET decided under a read rule would be a DELETE at
 * the origin, outside its tier, its grant and every write detector. The
 * gate refuses such a request (bad_request); the agent can send the method
 * itself, which is decided as it is. A _method in a form body is out of
 * sight, as every body is: a POST carrying one is a write decided as one. */
#ifndef SLUICE_GATE_METHOD_OVERRIDE_H
#define SLUICE_GATE_METHOD_OVERRIDE_H

#include "gate/http1.h"

/* Returns the name of the first override in <req> (a header's name as the
 * gateway spells it, or "_method") whose value is not <req>'s own method
 * (compared ignoring case, as the frameworks that upper-case it do), or
 * NULL when there is none. A static string; never allocates. */
const char *method_override_find(const struct http_request *req);

/* The gate's refusal text for <req>'s first override, naming it; NULL when
 * method_override_find() finds none. A static string. */
const char *method_override_refusal(const struct http_request *req);

#endif
