#include "watch/bus.h"

#include <string.h>
#include <time.h>

void bus_init(struct bus *b)
{
    memset(b, 0, sizeof(*b));
}

int bus_subscribe(struct bus *b, bus_fn fn, void *arg)
{
    if (b->nsubs >= BUS_MAX_SUBSCRIBERS)
        return -1;
    b->subs[b->nsubs].fn = fn;
    b->subs[b->nsubs].arg = arg;
    b->nsubs++;
    return 0;
}

void bus_publish(const struct bus *b, const struct egress_event *ev)
{
    for (int i = 0; i < b->nsubs; i++)
        b->subs[i].fn(ev, b->subs[i].arg);
}

int64_t bus_event_ms(const struct egress_event *ev)
{
    struct timespec ts = ev->ts;
    if (ts.tv_sec == 0 && ts.tv_nsec == 0)
        clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool bus_counts_denial(const struct egress_event *ev)
{
    return ev->kind == EVENT_EGRESS && ev->verdict == VERDICT_DENY && ev->agent != NULL &&
           !ev->redecided && ev->reason != REASON_GATEWAY_OVERLOADED;
}
