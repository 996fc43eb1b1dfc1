/* serve_load: serve's start-up load of its policy, which a SIGTERM or
 * SIGINT ends.
 *
 * The file is read and parsed on a thread of its own while serve waits for
 * the load or for a stop signal: loaded on serve's own thread, a policy on
 * a file system that does not answer (a hung NFS or FUSE mount, whose
 * read() no signal but SIGKILL ends) held a SIGTERM until the load ended,
 * that is for ever (or, at its default disposition, the signal killed
 * serve without a word). A load left at the stop is its thread's, which
 * frees it if its call ever returns. */
#ifndef SLUICE_CLI_SERVE_LOAD_H
#define SLUICE_CLI_SERVE_LOAD_H

#include "policy/policy.h"

/* The longest a stop waits for a start-up load to end before it leaves it
 * (less when --grace is shorter). */
#define SERVE_LOAD_STOP_WAIT_MS 1000

/* Loads <path> as policy_load_reporting(path, 0, "") does, followed by
 * gateway_policy_file_warning()'s line if any, and returns the policy; or
 * NULL, either a failure reported on standard error (*stop_sig 0) or a
 * stop: a SIGTERM or SIGINT came before the load ended (*stop_sig that
 * signal; said on standard error, naming <path>). After a stop the load is
 * waited for at most <stop_wait_ms> more, then left to its thread. The
 * caller has SIGTERM and SIGINT blocked (stop_signals_hold()); any other
 * signal pending (SIGHUP) stays so. With no thread to be had, loads on the
 * caller's thread, a stop held until the load ends. */
struct policy *serve_load_policy(const char *path, unsigned stop_wait_ms, int *stop_sig);

#endif
