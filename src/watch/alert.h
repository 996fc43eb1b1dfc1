/* alert: one alert, and the bus that carries alerts to their sinks.
 *
 * Producers (the detectors in watch/, quarantine in shape/) fill a struct
 * alert and call alert_bus_publish(); sinks (the --alerts file writer, exec
 * and webhook sinks, metrics, the state store) subscribe. Like the egress
 * bus, a producer never knows who listens. Every pointer in an alert is
 * borrowed and valid only during alert_bus_publish(): a sink that keeps an
 * alert (a queue for a slow webhook) copies or serialises it first.
 *
 * The JSON form is SPEC.md's "Alerts" line:
 * {"ts","event":"alert","kind","severity","agent","host","tier","id","detail","count"}
 * (count: SPEC.md Clarifications, "Alerts and state"). */
#ifndef SLUICE_WATCH_ALERT_H
#define SLUICE_WATCH_ALERT_H

#include <stdint.h>
#include <time.h>

#include "policy/model.h"

enum alert_kind {
    ALERT_FIRST_CONTACT,
    ALERT_TIER3_WRITE,
    ALERT_WRITE_BURST,
    ALERT_UPLOAD_BYTES,
    ALERT_DENIED_BURST,
    ALERT_OFF_HOURS_WRITE,
    ALERT_BASELINE,
    ALERT_GRANT_EXPIRED,
    ALERT_GRANT_EXPIRING,
    ALERT_QUARANTINE,
    ALERT_AUTH_FAILURES,
    ALERT_KIND_COUNT
};

enum alert_severity { SEVERITY_INFO, SEVERITY_LOW, SEVERITY_MEDIUM, SEVERITY_HIGH };

struct alert {
    enum alert_kind kind;
    enum alert_severity severity;
    struct timespec ts; /* wall clock; zero means "now" (filled by the bus) */
    const char *agent;  /* or NULL */
    const char *host;   /* or NULL */
    enum tier tier;     /* TIER_NONE when not about one request */
    const char *id;     /* the request id ("c17.1") that caused it, or NULL */
    const char *detail; /* one human sentence */
    uint64_t count;     /* occurrences this line stands for (repeats folded in); 0 means 1 */
};

/* "first_contact", ... */
const char *alert_kind_name(enum alert_kind k);
/* "info", "low", "medium", "high" */
const char *alert_severity_name(enum alert_severity s);

#define ALERT_BUS_MAX_SUBSCRIBERS 16

typedef void (*alert_fn)(const struct alert *a, void *arg);

struct alert_bus {
    struct {
        alert_fn fn;
        void *arg;
    } subs[ALERT_BUS_MAX_SUBSCRIBERS];
    int nsubs;
};

void alert_bus_init(struct alert_bus *b);
/* Returns 0, or -1 when the table is full. */
int alert_bus_subscribe(struct alert_bus *b, alert_fn fn, void *arg);
/* Delivers <a> to every subscriber in order; fills a->ts when it is zero. */
void alert_bus_publish(const struct alert_bus *b, struct alert *a);

#endif
