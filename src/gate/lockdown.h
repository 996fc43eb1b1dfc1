/* lockdown: what the gateway process may no longer do once it serves.
 *
 * The gateway parses bytes from agents, upstreams, DNS servers and policy
 * files. Once its listeners are bound and its files are open it needs
 * sockets, the files it has, threads, timers and posix_spawn() for exec
 * alert sinks. It never needs to create namespaces, mount anything, trace
 * or read other processes, load BPF programs or kernel modules, use kernel
 * keyrings or io_uring, or reboot. A seccomp filter (libseccomp) makes those
 * calls fail with EPERM for every thread of the gateway and for the
 * programs its exec sinks run, so a flaw in the gateway cannot use them as
 * a step towards the kernel or the rest of the machine. clone3() fails with
 * ENOSYS, so that glibc falls back to clone(), whose namespace flags a
 * filter can read (clone3 passes them in memory), as Docker's profile does.
 * ioctl() that types into a terminal (TIOCSTI) or changes a console fails
 * with EPERM (util/seccomp_tty.h): serve started as root in a terminal
 * keeps that terminal after --user, and the root shell runs what is typed
 * into it once the gateway exits.
 *
 * This is a deny list on purpose: an allow list for libevent, OpenSSL,
 * SQLite and glibc would break on the next library update, and what is
 * refused here is what kernel exploits and container escapes start from. */
#ifndef SLUICE_GATE_LOCKDOWN_H
#define SLUICE_GATE_LOCKDOWN_H

#include <stddef.h>

#include <seccomp.h>

/* Loads the filter on every thread of the process (TSYNC). As root with
 * CAP_SYS_ADMIN it does not set no_new_privs (such a root may load a filter
 * without it; exec sinks keep set-user-ID programs such as sendmail
 * working); otherwise (a user, or a container's root without
 * CAP_SYS_ADMIN, which the kernel refuses a filter without it) it does.
 * Returns 0; 1 with <err> filled when the filter is loaded but one of its
 * calls stays open, neither libseccomp nor sluice knowing its number
 * (util/seccomp_nr.h); or -1 with <err> filled: the caller decides whether
 * to go on. */
int gateway_lockdown(char *err, size_t errlen);

/* Adds to <ctx> every rule gateway_lockdown() loads (its filter without the
 * attributes and the loading: the unit tests read which calls it names).
 * A call neither libseccomp nor sluice can number is left out and counted
 * in <open_calls>, the first told in <unknown>. Returns 0 or libseccomp's
 * negative error. */
int gateway_lockdown_rules(scmp_filter_ctx ctx, char *unknown, size_t unknownlen,
                           size_t *open_calls);

#endif
