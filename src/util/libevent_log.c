/* libevent_log: see libevent_log.h. */
#include "util/libevent_log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

/* Atomic: libevent may log from any thread that uses it. */
static atomic_ulong evdns_lost;

void libevent_log(int severity, const char *msg)
{
    if (strstr(msg, "Couldn't allocate space for deferred callback") != NULL)
        atomic_fetch_add(&evdns_lost, 1);
    if (severity >= EVENT_LOG_WARN)
        fprintf(stderr, "sluice: libevent: %s\n", msg);
}

unsigned long libevent_log_evdns_lost(void)
{
    return atomic_load(&evdns_lost);
}
