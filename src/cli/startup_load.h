/* startup_load: the policy load when serve or run starts, which a stop
 * signal ends.
 *
 * The file is read and parsed on a thread of its own while the command
 * waits for the load or for a stop signal: loaded on the command's own
 * thread, a policy on a file system that does not answer (a hung NFS or
 * FUSE mount, whose read() no signal but SIGKILL ends) held a SIGTERM until
 * the load ended, that is for ever (or, at its default disposition, the
 * signal killed the command without a word once, if ever, the read let it
 * go). A load left at the stop is its thread's, which frees it if its call
 * ever returns. */
#ifndef SLUICE_CLI_STARTUP_LOAD_H
#define SLUICE_CLI_STARTUP_LOAD_H

#include <signal.h>
#include <stdbool.h>

#include "policy/policy.h"

/* The longest a stop waits for a start-up load to end before it leaves it
 * (serve: less when --grace is shorter). */
#define STARTUP_LOAD_STOP_WAIT_MS 1000

/* What a start-up load is for: who says what, and what stops it. */
struct startup_load {
    const char *who;       /* the messages' prefix: "sluice serve" */
    const char *stopped;   /* what a stop means: "stopped before serving" */
    const sigset_t *stops; /* the stop signals, all blocked by the caller */
    unsigned flags;        /* policy_load_flags()'s */
    unsigned stop_wait_ms; /* after a stop, the longest wait for the load */
};

/* Loads <path> as policy_load_reporting(path, how->flags, "") does, then
 * says gateway_policy_file_warning()'s line (serve's gateway and run's
 * alike reload the file on SIGHUP: a file every user may change is a
 * policy every agent on the host may widen), and returns the policy; or
 * NULL, either a failure reported on standard error (*stop_sig 0) or a
 * stop: a signal of how->stops came before the load ended (*stop_sig that
 * signal, taken: no longer pending; said on standard error, naming
 * <path>). After a stop the load is waited for at most how->stop_wait_ms
 * more, then left to its thread. Any other signal pending stays so. With
 * no thread to be had, loads on the caller's thread, a stop held (pending)
 * until the load ends. */
struct policy *startup_load_policy(const char *path, const struct startup_load *how, int *stop_sig);

#endif
