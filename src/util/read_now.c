/* read_now: a socket's read callback run at once (read_now.h). */
#include "util/read_now.h"

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "util/socket_quiet.h"

struct reader {
    evutil_socket_t fd;
    struct event *ev; /* the event that reads fd, once found */
};

static int find_reader(const struct event_base *base, const struct event *ev, void *arg)
{
    struct reader *r = arg;
    (void)base;
    if (event_get_fd(ev) != r->fd || !(event_get_events(ev) & EV_READ))
        return 0;
    r->ev = (struct event *)(void *)(uintptr_t)ev; /* called as the loop would: not const */
    return 1;
}

bool read_now(struct event_base *base, int fd)
{
    if (fd < 0 || socket_is_quiet(fd))
        return false;
    struct reader r = {.fd = fd, .ev = NULL};
    /* The callback runs after the walk: the walk holds the base's lock,
     * and the callback may add or remove events. */
    event_base_foreach_event(base, find_reader, &r);
    if (r.ev == NULL)
        return false;
    event_callback_fn cb = event_get_callback(r.ev);
    cb(fd, EV_READ, event_get_callback_arg(r.ev));
    return true;
}
