/* bus: delivers each egress event to every subscriber, synchronously, in
 * subscription order. Subscribers run on the event loop and must not block:
 * one that needs slow work (a webhook, a database write) queues it.
 * The bus owns only its subscriber list. */
#ifndef SLUICE_WATCH_BUS_H
#define SLUICE_WATCH_BUS_H

#include "watch/event.h"

#define BUS_MAX_SUBSCRIBERS 16

typedef void (*bus_fn)(const struct egress_event *ev, void *arg);

struct bus {
    struct {
        bus_fn fn;
        void *arg;
    } subs[BUS_MAX_SUBSCRIBERS];
    int nsubs;
};

void bus_init(struct bus *b);
/* Returns 0, or -1 when the table is full. */
int bus_subscribe(struct bus *b, bus_fn fn, void *arg);
void bus_publish(const struct bus *b, const struct egress_event *ev);
/* The wall clock (CLOCK_REALTIME) in milliseconds at which <ev> happened:
 * its ts, or now when it has none. The subscribers that count events in
 * windows (the detectors, the quarantine) count each at this one time, so
 * that they count it alike whatever order they run in. */
int64_t bus_event_ms(const struct egress_event *ev);
/* True when <ev> is a denial the quarantine and the denied_burst detector
 * count (both ask this, so that they count the same set): a decision
 * (EVENT_EGRESS) denied, of an identified agent, for any reason but
 * gateway_overloaded (the gateway's own shortage of descriptors, memory or
 * local ports, not the agent's doing), and not a tunnel decided again
 * (<redecided>: the policy's act). */
bool bus_counts_denial(const struct egress_event *ev);

#endif
