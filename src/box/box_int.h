/* box_int: what the files of src/box/ share; nothing outside src/box/
 * includes this (the interface is box.h). */
#ifndef SLUICE_BOX_BOX_INT_H
#define SLUICE_BOX_BOX_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <seccomp.h>

#include "box/box.h"

/* netns.c */
/* The clone flags of a box: PID, network, mount, IPC, UTS and cgroup
 * namespaces, and a user namespace unless <as_root>. */
int box_ns_flags(bool as_root);
/* After clone(<flags>) failed with <err_no>: finds which namespace the
 * kernel refuses (probing each in a throw-away child) and writes a one-line
 * message saying how to enable it. */
void box_ns_explain(int flags, int err_no, char *err, size_t errlen);
/* Inside a new user namespace: denies setgroups and maps <uid>/<gid> to
 * themselves. Returns 0, or -1 with a message. */
int box_userns_map(uid_t uid, gid_t gid, char *err, size_t errlen);
/* Brings the loopback interface up (ioctl SIOCSIFFLAGS). */
int box_loopback_up(char *err, size_t errlen);

/* mounts.c */
/* Builds the box's file system view in the current (new, private) mount
 * namespace; see box.h. Returns 0, or -1 with a message. */
int box_mounts_setup(const struct box_config *cfg, char *err, size_t errlen);
/* Mounts a new procfs on /proc (needs to run inside the new PID namespace)
 * and applies the --hide paths below it there. */
int box_mount_proc(const struct box_config *cfg, char *err, size_t errlen);
struct mountinfo;
/* Reads and parses /proc/self/mountinfo into <mi> (freed by the caller
 * with mountinfo_free()). Returns 0, or -1 with a message. */
int box_read_mountinfo(struct mountinfo *mi, char *err, size_t errlen);
/* Opens <path> (absolute) O_PATH one component at a time, following no
 * symbolic link (ELOOP). Returns the descriptor, or -1 with errno. */
int box_open_nofollow(const char *path);

/* Writes "<before><path><after>: <why>" into <err>, <path> shown \ooo
 * (text_shown()): a name holding a line end writes no line of run's own.
 * <why> is read before anything is allocated (strerror(errno) as the
 * caller's argument stays the error that happened). */
void box_path_error(char *err, size_t errlen, const char *before, const char *path,
                    const char *after, const char *why);
/* Calls <fn>(<fd>, <arg>) with an O_PATH descriptor of each mount point
 * the box leaves writable (its mountinfo's writable mounts not covered by
 * another), reached without following a link; one out of reach is
 * skipped. Returns 0, or -1 with a message when <fn> fails (errno set). */
int box_each_writable_mount(int (*fn)(int fd, void *arg), void *arg, char *err, size_t errlen);

/* sysfs.c */
#define BOX_SYSFS_MAGIC 0x62656572 /* <linux/magic.h> SYSFS_MAGIC: statfs()'s f_type */
/* In the box's private mount namespace, before the view is built: mounts
 * a sysfs of the box's own network namespace on /sys (read-only, nosuid,
 * nodev, noexec) and binds the host's mounts below /sys there again.
 * Where the kernel refuses the mount, warns and leaves the host's /sys.
 * Returns 0, or -1 with a message. */
int box_mount_sysfs(char *err, size_t errlen);

/* landlock.c */
/* In the command, once no_new_privs is set: restricts it with a Landlock
 * ruleset that handles the rights to write, make, remove and reparent
 * files, allowed only below each writable mount (box_each_writable_mount),
 * below /dev, on each --ro or --rw path that is not a directory and on
 * standard input, output or error when open for writing. Returns 0 when
 * in force, 1 when the kernel has no Landlock of ABI 2 or later (or
 * <cfg->landlock_off>), or -1 with a message. */
int box_landlock(const struct box_config *cfg, char *err, size_t errlen);

/* seccomp.c */
/* In the command, just before execve: drops every capability (bounding,
 * ambient, inheritable, permitted), sets no_new_privs, applies the
 * Landlock ruleset (box_landlock(); <*landlocked> says whether it is in
 * force) and loads the seccomp filter refusing socket families but
 * AF_INET, AF_INET6 and AF_NETLINK (and AF_INET's SOCK_PACKET, an AF_PACKET
 * socket; of netlink, NETLINK_NETFILTER and NETLINK_XFRM), io_uring, the
 * keyring calls, ioctl(TIOCSTI),
 * ioctl(TIOCLINUX), ioctl(TIOCSETD), a virtual console's ioctls that
 * change it
 * (tty_refused[]: KDSKBENT, KDSKBSENT, KDSKBMODE, KDSETMODE, the font
 * and map ones, VT_ACTIVATE...), every call
 * that would make a file set-user-ID or
 * set-group-ID, openat2(), every mount call (box_refuse_mounts()),
 * btrfs snapshots and fscrypt's key ioctls (box_refuse_fs_ioctls()),
 * clone3(),
 * setpriority() and ioprio_set() of the caller's process group and,
 * unless <cfg->allow_unix>, socket(AF_UNIX)
 * and socketpair() but for stream and seqpacket pairs. Returns 0,
 * or -1 with a message. */
int box_lock_down(const struct box_config *cfg, bool *landlocked, char *err, size_t errlen);

/* Adds to <ctx> every rule box_lock_down() loads (its filter without the
 * loading: the unit tests read which calls it names). Returns 0,
 * libseccomp's negative error, or SECCOMP_RC_TOLD with <err> filled when a
 * call's number is unknown (util/seccomp_nr.h). */
int box_seccomp_rules(scmp_filter_ctx ctx, bool allow_unix, char *err, size_t errlen);

/* seccomp_mounts.c */
/* Adds to <ctx> the rules that make every call that makes, attaches,
 * changes or removes a mount fail with EPERM, in the namespaces the
 * command may make too (a cgroup file system of its own would write the
 * host's cgroups). Returns 0, libseccomp's negative error, or
 * SECCOMP_RC_TOLD with <err> filled when a call's number is unknown
 * (util/seccomp_nr.h). */
int box_refuse_mounts(scmp_filter_ctx ctx, char *err, size_t errlen);

/* seccomp_fs_ioctls.c */
/* Adds to <ctx> the rules that refuse the file system ioctls checked
 * against ownership only, whatever the mount: btrfs snapshots (EPERM: a
 * snapshot of a subvolume the command owns would copy what the box hides
 * below it into a folder it can write) and fscrypt's key ioctls
 * (EOPNOTSUPP: the command would lock the host's encrypted folders).
 * Returns 0 or libseccomp's negative error. */
int box_refuse_fs_ioctls(scmp_filter_ctx ctx);

/* In the init, once the command's process is forked: it runs the relay,
 * which reads every byte the command sends, and needs no capability for
 * that but CAP_DAC_OVERRIDE (connecting to a gateway's socket that root
 * may write only through it, a --proxy one of another user's): every other
 * capability is dropped, the bounding set's too, and no_new_privs set, so
 * that a flaw in it hands the command no root of the host's (a box started
 * as root) nor the box's mounts (any box). Returns 0, or -1 with a
 * message. */
int box_init_let_go(char *err, size_t errlen);

/* relay.c */
#define RELAY_MAX_CONNS 256
#define RELAY_BUF       65536 /* per direction and connection */
#define RELAY_ROUNDS    16    /* read/write rounds per connection per poll() */

struct relay;
/* Listens on 127.0.0.1:<port> and [::1]:<port> (the latter skipped when
 * the kernel has no IPv6) and relays each connection to the unix socket at
 * <target> (copied; at most 107 bytes). NULL with a message on failure. */
struct relay *relay_new(const char *target, unsigned short port, char *err, size_t errlen);
/* Relays until <on_extra>(<arg>), called whenever <extra_fd> is readable,
 * returns nonzero. Returns 0, or -1 when poll fails. */
int relay_run(struct relay *r, int extra_fd, int (*on_extra)(void *arg), void *arg);
/* Once the command has ended and every process of the box is killed:
 * carries on to the gateway what the clients sent and the relay has not
 * passed on yet (buffered, still in their sockets, or waiting for the
 * gateway's socket), up to 10 s; takes no new client and drops what the
 * gateway sends. Returns 0 when no connection is left or the time is over
 * (relay_free() closes what is left), -1 when poll fails. */
int relay_drain(struct relay *r);
/* Test-only: the 10 s a client waits for the gateway's socket, and the
 * 10 s of relay_drain(), in ms. */
void relay_set_waits(struct relay *r, int connect_wait_ms, int drain_ms);
/* Connections carried so far: accepted and connected to the gateway's
 * socket (not those closed because it refused them). */
unsigned long relay_accepted(const struct relay *r);
/* Times poll() returned so far: how often the relay woke up. */
unsigned long relay_wakeups(const struct relay *r);
/* Closes the listeners and every connection. Accepts NULL. */
void relay_free(struct relay *r);

#endif
