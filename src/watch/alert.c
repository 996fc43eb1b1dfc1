#include "watch/alert.h"

#include <string.h>

static const char *const kind_names[ALERT_KIND_COUNT] = {
    [ALERT_FIRST_CONTACT] = "first_contact",
    [ALERT_TIER3_WRITE] = "tier3_write",
    [ALERT_WRITE_BURST] = "write_burst",
    [ALERT_UPLOAD_BYTES] = "upload_bytes",
    [ALERT_DENIED_BURST] = "denied_burst",
    [ALERT_OFF_HOURS_WRITE] = "off_hours_write",
    [ALERT_BASELINE] = "baseline",
    [ALERT_GRANT_EXPIRED] = "grant_expired",
    [ALERT_GRANT_EXPIRING] = "grant_expiring",
    [ALERT_QUARANTINE] = "quarantine",
    [ALERT_AUTH_FAILURES] = "auth_failures",
};

const char *alert_kind_name(enum alert_kind k)
{
    return (unsigned)k < ALERT_KIND_COUNT ? kind_names[k] : "unknown";
}

const char *alert_severity_name(enum alert_severity s)
{
    switch (s) {
    case SEVERITY_INFO:
        return "info";
    case SEVERITY_LOW:
        return "low";
    case SEVERITY_MEDIUM:
        return "medium";
    case SEVERITY_HIGH:
        return "high";
    }
    return "unknown";
}

void alert_bus_init(struct alert_bus *b)
{
    memset(b, 0, sizeof(*b));
}

int alert_bus_subscribe(struct alert_bus *b, alert_fn fn, void *arg)
{
    if (b->nsubs >= ALERT_BUS_MAX_SUBSCRIBERS)
        return -1;
    b->subs[b->nsubs].fn = fn;
    b->subs[b->nsubs].arg = arg;
    b->nsubs++;
    return 0;
}

void alert_bus_publish(const struct alert_bus *b, struct alert *a)
{
    if (a->ts.tv_sec == 0 && a->ts.tv_nsec == 0)
        clock_gettime(CLOCK_REALTIME, &a->ts);
    for (int i = 0; i < b->nsubs; i++)
        b->subs[i].fn(a, b->subs[i].arg);
}
