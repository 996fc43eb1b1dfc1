/* libevent_log: libevent's own messages, and the one of them the
 * resolver must act on.
 *
 * libevent 2.1's evdns, when it cannot allocate the record that schedules
 * a request's callback (reply_schedule_callback()), only warns
 * "reply_schedule_callback: Couldn't allocate space for deferred
 * callback." and finishes the request: its handle is freed and its
 * callback never runs. The warning names no request; it is the one sign
 * (gate/resolve.c, "Out of memory in evdns"). */
#ifndef SLUICE_UTIL_LIBEVENT_LOG_H
#define SLUICE_UTIL_LIBEVENT_LOG_H

/* For event_set_log_callback(): writes libevent's warnings and errors to
 * standard error as "sluice: libevent: MSG" (its debug messages are off),
 * and counts the lost evdns callbacks. Any thread. */
void libevent_log(int severity, const char *msg);

/* How many evdns request callbacks libevent has said it lost so far. */
unsigned long libevent_log_evdns_lost(void);

#endif
