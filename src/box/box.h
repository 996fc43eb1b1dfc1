/* box: the sandbox of `sluice run`, behind one small interface.
 *
 * box_spawn() clones a process into new user (when not root), PID,
 * network, mount, IPC, UTS and cgroup namespaces. That process is the
 * box's init (PID 1 inside): it maps the caller's uid and gid (setgroups
 * denied), brings up the loopback interface, makes the file system
 * read-only but for the writable paths it is given, mounts a private /tmp,
 * /dev (a few host devices and its own devpts), /dev/shm and /proc,
 * starts the relay (127.0.0.1:3128 and [::1]:3128 -> the gateway's unix
 * socket outside), then forks the command with no capabilities, no new
 * privileges, a Landlock ruleset allowing writes only below what the
 * view leaves writable and /dev (where the kernel has Landlock ABI 2: a
 * read-only mount does not stop writes into a FIFO), no descriptor above
 * 2 from the caller (standard input,
 * output and error opened again in the box when they are files given for
 * reading or directories; files given for writing that the box does not
 * show writable written through run's pipes, a file given as standard
 * input that it does not show read from one, std_relay.c), a new session
 * keyring and a seccomp filter that
 * refuses socket families but IP and netlink, socket(AF_UNIX) and datagram
 * socketpair() unless allow_unix, io_uring, the keyring calls, the
 * terminal's TIOCSTI, TIOCLINUX and TIOCSETD, a virtual console's ioctls
 * that change its key map, keyboard, screen or console (seccomp.c's
 * tty_refused[]),
 * every call that would make a file
 * set-user-ID or set-group-ID, and openat2().
 * It passes signals on to the command, tells run when the command stops
 * or is continued (box.job_fd) and, when the command ends, kills
 * whatever the command left behind in the PID namespace, lets the relay
 * carry on what the box's connections sent (relay_drain()), reports the
 * command's wait status and exits.
 *
 * Files: box.c (spawn, init, the command), netns.c (namespaces, uid maps,
 * loopback), mounts.c (the file system view), relay.c, seccomp.c
 * (seccomp and privileges), landlock.c, mountinfo.c (the parser audit
 * shares). What run judges from outside, before the box starts, has
 * headers of its own: reach.h, hardlinks.h, exec_guard.h, alert_env.h,
 * git_guard.h (git_guard_int.h, git_config_read.h);
 * std_check.c (what descriptors 0-2 may be, and their status flags put
 * back after the box) is declared here. */
#ifndef SLUICE_BOX_BOX_H
#define SLUICE_BOX_BOX_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define BOX_RELAY_PORT 3128
#define BOX_HOSTNAME   "sluice-box"

enum box_path_kind { BOX_PATH_RO, BOX_PATH_RW, BOX_PATH_HIDE };

struct box_path {
    enum box_path_kind kind;
    const char *path; /* absolute and canonical (realpath), borrowed */
    bool optional;    /* a path that does not exist is skipped, not an error */
};

/* Files given for writing on standard output or error (and standard
 * error a unix stream socket), which the command writes through a pipe,
 * and a file given as standard input, which it
 * reads through one (std_relay.c): see box_config.std_relay. */
struct box_std_relay {
    /* run's end of each pipe, -1 for none: the write end for standard
     * input (run fills it from the file), the read end for output and
     * error (fd 2 sharing fd 1's pipe: -1) */
    int run_end[3];
    int box_end[3]; /* the other ends, for the box */
    /* with standard input's pipe, one more whose write end, [1], the box
     * holds until the command is executed (the command's process closes
     * it at execve() or its exit, the init after its fork): run's read
     * end, [0], then reads its end, and run starts reading the file if
     * the pipe still has a reader; -1 for none */
    int exec_end[2];
    /* a write into the file failed (1, 2), or run stopped copying a pipe
     * held outside the box (1, 2), a read from it failed (0): its pipe is
     * closed; kept once the relay is closed */
    bool failed[3];
    /* Standard error a unix stream socket (1 too when it is that socket):
     * written with send(MSG_DONTWAIT), what the socket has not taken yet
     * held in <held> ([<held_at>, <held_len>) of BOX_STD_HELD bytes), run
     * then waiting for room with poll(), never in the write; NULL for a
     * file, written with write(). */
    char *held[3];
    size_t held_at[3], held_len[3];
    off_t at;              /* where run starts reading standard input's file */
    struct std_feed *feed; /* the thread that reads it (std_relay.c), once started */
};

struct box_config {
    char *const *argv;            /* the command, argv[0] looked up in PATH */
    char *const *envp;            /* its environment */
    const char *cwd;              /* canonical; writable inside, the command starts there */
    const char *gateway_socket;   /* the gateway's unix socket (outside) */
    const struct box_path *paths; /* --rw, --ro, --hide and the protected files, in order */
    size_t npaths;
    bool allow_unix;
    bool landlock_off; /* test-only (SLUICE_TEST_NO_LANDLOCK): run as where the
                        * kernel has no Landlock */
    /* the most each of /tmp and /dev/shm holds, as tmpfs's size= takes it:
     * bytes ("1073741824") or a share of memory ("25%"); never "0", which
     * tmpfs reads as no bound */
    const char *tmp_size;
    sigset_t ignored; /* signals the command starts with ignored (run's caller
                       * ignored them: nohup); the others at their default */
    sigset_t blocked; /* the signal mask the command starts with: run's
                       * caller's, as execve() would have left it */
    /* the pipes run copies into descriptors 1 and 2 when they are regular
     * files given for writing (box_std_relay_open()): the command gets the
     * write end unless the box shows that file writable at its path (and
     * always for standard error a unix stream socket, standard output too
     * when it is that socket); and
     * the one run fills from descriptor 0 when it is a regular file given
     * for reading: the command gets its read end unless the box shows that
     * file at its path. run's ends are closed in the box at once. NULL:
     * none. */
    const struct box_std_relay *std_relay;
};

/* A spawned box. */
struct box {
    pid_t pid;     /* the box's init, in the caller's PID namespace */
    int status_fd; /* readable: the init's report (see box_read_report) */
    /* readable (non-blocking): one byte each time the command stops (the
     * signal that stopped it) or is continued (0), in order, so that run
     * can stop with it as a shell's job would (the last byte is its state;
     * a byte the full pipe has no room for is dropped); its end once the
     * init has ended */
    int job_fd;
};

#define BOX_ERR_MAX 512

/* The signals the box's init passes on to the command, and run to the
 * box, when a process sends them: every one whose default action ends a
 * process (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
 * SIGABRT, SIGVTALRM, SIGPROF, SIGXCPU, SIGIO, SIGPWR, SIGSTKFLT and the
 * real-time signals), and SIGWINCH, SIGCONT, SIGTSTP. Not SIGKILL and
 * SIGSTOP, which no process can take; SIGCHLD; those the kernel sends on a
 * fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS), which blocked
 * would still end the process, without a sanitizer's report; SIGPIPE and
 * SIGXFSZ, which run ignores, as the kernel sends them for its own writes;
 * SIGURG, SIGTTIN, SIGTTOU, which end nothing. */
void box_forwarded_signals(sigset_t *set);

/* Those of box_forwarded_signals() whose default action ends a process
 * (all but SIGWINCH, SIGCONT, SIGTSTP), but for those in <ignored> or
 * <blocked> (run's caller ignored or blocked them: held for the command):
 * one that comes while run starts, until the command is executed (a
 * terminal's ^C included, which reaches no command yet), stops the start. */
void box_ending_signals(sigset_t *set, const sigset_t *ignored, const sigset_t *blocked);

/* Whether run's standard input, output and error may pass into the box as
 * they are (std_check.c): a socket but a unix one (and without
 * <allow_unix>, but a connected unix stream or seqpacket one) and a device
 * but a terminal or one of null, zero, full, random and urandom may not.
 * Returns 0, or -1 with a one-line message in <err> naming the first that
 * may not and what to give instead. */
int box_check_std(bool allow_unix, char *err, size_t errlen);

/* The status flags fcntl(F_SETFL) changes (O_NONBLOCK, O_APPEND, O_ASYNC,
 * O_DIRECT, O_NOATIME) of descriptors 0, 1 and 2, -1 for one not open
 * (std_check.c): the command shares those open file descriptions with
 * run's caller, and its F_SETFL changes them for every holder. */
struct box_std_flags {
    int fl[3];
};
/* Takes them into <f>, before the box. */
void box_std_flags_save(struct box_std_flags *f);
/* Puts back those <f> took, once the box has ended: a terminal or pipe
 * left non-blocking failed the caller's next read or write with EAGAIN,
 * and run's own summary into a full one. */
void box_std_flags_restore(const struct box_std_flags *f);

/* The path the kernel gives for the open descriptor <fd> (its
 * /proc/self/fd link) into <path> of <len> bytes, "" when it has none
 * (std_check.c). Returns its length, 0 when unknown. */
size_t box_fd_path(int fd, char *path, size_t len);

/* Empties <r>: no pipe. */
void box_std_relay_init(struct box_std_relay *r);
/* Makes a pipe for each of descriptors 1 and 2 that is a regular file
 * open for writing, for descriptor 2 when it is a unix stream socket (the
 * command's shutdown() of it would shut it for run's own summary too), one
 * for both when they are one open file description, and one for
 * descriptor 0 when it is a regular file open for reading only
 * (with exec_end). Returns 0, or -1 with a message in <err> (nothing left
 * open). */
int box_std_relay_open(struct box_std_relay *r, char *err, size_t errlen);
/* Once the box is spawned: closes run's copies of the box's ends. */
void box_std_relay_spawned(struct box_std_relay *r);
/* Fills <p> (room for 3) with what run waits on: the output pipes still
 * open (a socket for room instead while it holds what the socket has not
 * taken), and exec_end until the command is executed. Returns how many. */
size_t box_std_relay_poll(const struct box_std_relay *r, struct pollfd *p);
/* Copies into the files what poll() found in the pipes of <p>[0, <n>);
 * once exec_end ends (the command executed), starts the thread that fills
 * standard input's pipe from its file, when the pipe still has a reader
 * (else closes it: the file is never read). */
void box_std_relay_step(struct box_std_relay *r, const struct pollfd *p, size_t n);
/* How long box_std_relay_finish() waits for a pipe's end once the box has
 * ended: a writer left holds it outside the box, or a socket's reader
 * does not read. */
#define BOX_STD_FINISH_MS 2000
/* What run reads from a pipe at once, and holds for a socket. */
#define BOX_STD_HELD 65536
/* Once the box has ended: copies what is left, to each pipe's end or for
 * BOX_STD_FINISH_MS at most (told, and kept in <r->failed>), and closes
 * them; standard input's thread is left to end by itself (its pipe has no
 * reader left), a read error it told before kept in <r->failed>[0]. */
void box_std_relay_finish(struct box_std_relay *r);
/* Closes whatever <r> holds (leaving standard input's thread, if any, to
 * end by itself). */
void box_std_relay_close(struct box_std_relay *r);

/* Starts the box. Returns 0 with <*box> filled, or -1 with a one-line
 * message in <err> (a namespace the kernel refuses is named, with how to
 * enable it). Nothing is left running on failure. */
int box_spawn(const struct box_config *cfg, struct box *box, char *err, size_t errlen);

enum box_report_kind { BOX_REPORT_NONE, BOX_REPORT_ERROR, BOX_REPORT_STATUS, BOX_REPORT_STOPPED };

/* Reads the init's report from <box->status_fd> (blocking): either a
 * set-up error (BOX_REPORT_ERROR, the message in <err>: the command never
 * ran), the command's wait status (BOX_REPORT_STATUS, in <*status>, and the
 * number of connections relayed in <*relayed>), a signal of
 * box_ending_signals() that came before the command was executed
 * (BOX_REPORT_STOPPED, its number in <*status>: the command never ran), or
 * nothing (BOX_REPORT_NONE: the init died). */
enum box_report_kind box_read_report(struct box *box, int *status, unsigned long *relayed,
                                     char *err, size_t errlen);

#endif
