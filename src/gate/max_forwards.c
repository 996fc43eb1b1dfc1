/* max_forwards: the answer to a TRACE or OPTIONS that goes no further (see
 * max_forwards.h). */
#include "gate/max_forwards.h"

#include <time.h>

#include <event2/buffer.h>

#include "gate/conn.h"
#include "gate/gateway.h"
#include "policy/model.h"
#include "util/http_date.h"
#include "util/wall_clock.h"

bool max_forwards_ends_here(const struct http_request *req)
{
    /* the parser reads it for TRACE and OPTIONS only: -1 for the others */
    return req->max_forwards == 0;
}

int max_forwards_answer(struct conn *c, struct evbuffer *out, bool keep)
{
    struct exchange *ex = &c->ex;
    bool trace = ex->mbit == METHOD_TRACE && ex->uphead != NULL;
    size_t n = trace ? evbuffer_get_length(ex->uphead) : 0;
    const char *date = http_date_field_of(&c->gw->date_clock, wall_clock_seconds());
    if (evbuffer_add_printf(
            out, "HTTP/1.1 200 OK\r\n%s%sContent-Length: %zu\r\nConnection: %s\r\n\r\n", date,
            trace ? "Content-Type: message/http\r\n" : "", n, keep ? "keep-alive" : "close") < 0)
        return -1;
    /* A copy: ex->uphead is kept for the connection's next request. */
    const unsigned char *head = n > 0 ? evbuffer_pullup(ex->uphead, -1) : NULL;
    if (n > 0 && (head == NULL || evbuffer_add(out, head, n) != 0))
        return -1;
    return 0;
}
