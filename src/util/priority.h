/* priority: the gateway's nice value (serve --nice) and the programs it starts.
 *
 * The gateway relays for processes that often share its CPU: an agent, an
 * upstream on the same host. At the same nice as them, the fair scheduler
 * hands the CPU to each one it wakes (an upstream woken by the request the
 * gateway just sent runs at once, and the gateway finishes the rest of its
 * batch afterwards): a context switch per request each way. A gateway at a
 * lower nice (a larger share) keeps the CPU until its batch is done and the
 * woken process then takes all the requests sent meanwhile in one turn, as
 * nginx's worker_priority and HAProxy's `nice` arrange for theirs.
 *
 * The nice value is per thread on Linux and inherited by threads and
 * processes made later; programs the gateway starts (exec alert sinks) are
 * started at the nice the process was started with. */
#ifndef SLUICE_UTIL_PRIORITY_H
#define SLUICE_UTIL_PRIORITY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PRIORITY_DEFAULT_NICE (-10)

/* Sets the calling thread's nice to <nice> (-20 to 19) and remembers the one
 * it had. With <given> false (the default, not asked for) a thread started at
 * a nice other than 0 (systemd's Nice=, nice(1)) keeps it, and a refusal
 * (no CAP_SYS_NICE: an unprivileged user, a user namespace) is quiet.
 * Returns 0 when <nice> is now in force, 1 when the thread kept its nice,
 * or -1 with <err> filled when an asked-for <nice> was refused. */
int priority_apply(int nice, bool given, char *err, size_t errlen);

/* Gives the calling thread, one that starts programs, the nice the process
 * was started with (a lower priority never needs privilege), so that what it
 * starts has it from its first instruction. Does nothing when
 * priority_apply() changed nothing. */
void priority_restore_thread(void);

#endif
