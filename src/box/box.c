/* box: spawning the box, its init (PID 1 inside) and the command. */
#include "box/box.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "box/box_int.h"
#include "util/text_json.h"

#define BOX_KEYCTL_JOIN_SESSION_KEYRING 1 /* <linux/keyctl.h> */

struct init_state {
    int sigfd;
    int job_fd; /* the write end of box.job_fd, non-blocking */
    pid_t cmd;
    int status;
    bool done;
};

/* The report on the status pipe: 'E' + message, 'S' + status + count, or
 * 'K' + the signal that stopped the start. */
struct report {
    char kind;
    int status;
    unsigned long relayed;
};

void box_forwarded_signals(sigset_t *set)
{
    static const int named[] = {
        SIGHUP,    SIGINT,  SIGQUIT,   SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT,
        SIGTSTP,   SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGABRT, SIGIO,
#ifdef SIGPWR
        SIGPWR,
#endif
#ifdef SIGSTKFLT
        SIGSTKFLT,
#endif
    };
    sigemptyset(set);
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        sigaddset(set, named[i]);
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
        sigaddset(set, sig);
}

void box_ending_signals(sigset_t *set, const sigset_t *ignored, const sigset_t *blocked)
{
    box_forwarded_signals(set);
    sigdelset(set, SIGWINCH);
    sigdelset(set, SIGCONT);
    sigdelset(set, SIGTSTP);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(ignored, sig) == 1 || sigismember(blocked, sig) == 1)
            sigdelset(set, sig);
}

/* The first signal of box_ending_signals() pending on the init, or 0. */
static int pending_ending(const struct box_config *cfg)
{
    sigset_t ending, pending;
    box_ending_signals(&ending, &cfg->ignored, &cfg->blocked);
    sigpending(&pending);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(&ending, sig) == 1 && sigismember(&pending, sig) == 1)
            return sig;
    return 0;
}

static void report_error(int fd, const char *msg)
{
    char buf[BOX_ERR_MAX + 1];
    size_t n = strlen(msg);
    if (n > BOX_ERR_MAX)
        n = BOX_ERR_MAX;
    buf[0] = 'E';
    memcpy(buf + 1, msg, n);
    ssize_t w = write(fd, buf, n + 1);
    (void)w;
}

static void report_status(int fd, char kind, int status, unsigned long relayed)
{
    struct report r = {kind, status, relayed};
    ssize_t w = write(fd, &r, sizeof(r));
    (void)w;
}

enum box_report_kind box_read_report(struct box *box, int *status, unsigned long *relayed,
                                     char *err, size_t errlen)
{
    char buf[BOX_ERR_MAX + 1 + sizeof(struct report)];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(box->status_fd, buf + n, sizeof(buf) - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == sizeof(buf))
            break;
    }
    if (n >= 1 && buf[0] == 'E') {
        size_t m = n - 1 < errlen - 1 ? n - 1 : errlen - 1;
        memcpy(err, buf + 1, m);
        err[m] = '\0';
        return BOX_REPORT_ERROR;
    }
    if (n == sizeof(struct report) && (buf[0] == 'S' || buf[0] == 'K')) {
        struct report r;
        memcpy(&r, buf, sizeof(r));
        *status = r.status;
        *relayed = r.relayed;
        return buf[0] == 'S' ? BOX_REPORT_STATUS : BOX_REPORT_STOPPED;
    }
    return BOX_REPORT_NONE;
}

/* --- the command ---------------------------------------------------------- */

/* The caller's session keyring (tokens pam_keyinit, kinit or ecryptfs left
 * there) must not pass into the box: the command joins a new, empty,
 * anonymous session keyring. A kernel without keyrings (ENOSYS) has nothing
 * to pass on. */
static int new_session_keyring(void)
{
    if (syscall(SYS_keyctl, BOX_KEYCTL_JOIN_SESSION_KEYRING, NULL) >= 0 || errno == ENOSYS)
        return 0;
    return -1;
}

/* Every descriptor above 2 is closed when the command is executed: what the
 * caller of run left open (a connected socket, a file the box would not
 * otherwise reach) must not pass into the box. They are marked close-on-exec
 * rather than closed so that <exec_fd> still reports a failed execve. */
static int cloexec_from_3(void)
{
#if defined(SYS_close_range) && defined(CLOSE_RANGE_CLOEXEC)
    if (syscall(SYS_close_range, 3u, ~0u, (unsigned)CLOSE_RANGE_CLOEXEC) == 0)
        return 0;
    if (errno != ENOSYS && errno != EINVAL)
        return -1;
#endif
    /* before Linux 5.11: each descriptor /proc/self/fd lists (the box's /proc) */
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        if (*end != '\0' || end == de->d_name || fd < 3 || fd == dirfd(d))
            continue;
        if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0 && errno != EBADF) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    return 0;
}

/* Opens the file <pfd> (O_PATH) holds with <flags>, through
 * /proc/self/fd, on the same mount: never another file, whatever now
 * stands at its path. */
static int open_again(int pfd, int flags)
{
    char p[32];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", pfd);
    return open(p, flags | O_NOCTTY | O_CLOEXEC);
}

/* The path the kernel gives for <fd> into <path>, and an O_PATH
 * descriptor of what the box shows there when that is the same file as
 * <st> (device and inode); -1 otherwise, with errno EACCES when the box's
 * user may not search a folder on the path, 0 else. The path is opened
 * O_PATH only: whoever can write the folder may have put another node
 * there (the file unlinked, its path then "NAME (deleted)", or swapped
 * while run started), and a FIFO would make open() wait for a writer for
 * ever, before the command starts (a device, do whatever its open does). */
static int open_same(int fd, const struct stat *st, char *path, size_t len)
{
    struct stat again;
    size_t n = box_fd_path(fd, path, len);
    int pfd = n > 0 && path[0] == '/' ? open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (pfd < 0) {
        errno = n > 0 && path[0] == '/' && errno == EACCES ? EACCES : 0;
        return -1;
    }
    if (fstat(pfd, &again) != 0 || again.st_dev != st->st_dev || again.st_ino != st->st_ino) {
        close(pfd);
        errno = 0;
        return -1;
    }
    return pfd;
}

static const char *const std_names[] = {"input", "output", "error"};

/* Into <how>, why run's pipe could not stand in for a standard
 * descriptor: there is none (<p> -1, no <cfg->std_relay>), or dup2()
 * failed (<dup_err>). */
static void why_no_pipe(char *how, size_t len, int p, int dup_err)
{
    if (p < 0)
        snprintf(how, len, "run has no pipe to give it through");
    else
        snprintf(how, len, "run's pipe could not take its place (dup2: %s)", strerror(dup_err));
}

/* A regular file given for writing (`>> log`, `1<> file`) was opened on
 * the host's mount: through /proc/self/fd/N the command could open it
 * again for reading (`>> ~/.ssh/known_hosts` with ~/.ssh hidden: its old
 * contents) and change its mode (fchmod(), a mount read-only in the box
 * notwithstanding). Where the box shows the same file at its path and
 * lets it be opened for writing there, the command can do as much by the
 * path: the descriptor is kept as it came, sharing its open file
 * description with the caller (`> log 2>&1`: one offset for the command,
 * run and the gateway). Otherwise descriptor 1 or 2 becomes the pipe run
 * copies into that description (<cfg->std_relay>, std_relay.c); standard
 * input (<flags> its access mode), which no pipe can give for reading and
 * writing, fails the set-up. Returns 0, or -1 with a message in <err>. */
static int give_written_file(const struct box_config *cfg, int fd, int flags, const struct stat *st,
                             char *err, size_t errlen)
{
    char path[PATH_MAX], shown[160]; /* the path cut to what err (BOX_ERR_MAX) has room for */
    int pfd = open_same(fd, st, path, sizeof(path));
    int wfd = pfd >= 0 ? open_again(pfd, O_WRONLY) : -1;
    if (pfd >= 0)
        close(pfd);
    if (wfd >= 0) {
        close(wfd);
        return 0;
    }
    text_shown_into(shown, sizeof(shown), path[0] != '\0' ? path : "(unknown)");
    const char *access =
        (flags & O_ACCMODE) == O_RDWR ? "open for reading and writing" : "open for writing";
    if (fd == STDIN_FILENO) {
        snprintf(err, errlen,
                 "standard input is the file %s, %s, which the box does not show writable at "
                 "that path (hidden, under /tmp, read-only, moved?), and run has no pipe for it "
                 "(none carries a file both ways): through descriptor 0 the command could write "
                 "it, and change its mode; give it for reading only (< FILE) or through a pipe "
                 "(cat FILE |)",
                 shown, access);
        return -1;
    }
    int p = cfg->std_relay != NULL ? cfg->std_relay->box_end[fd] : -1;
    if (p >= 0 && dup2(p, fd) == fd) /* dup2() clears close-on-exec on <fd> */
        return 0;
    char how[80];
    why_no_pipe(how, sizeof(how), p, errno);
    snprintf(err, errlen,
             "standard %s is the file %s, %s, which the box does not show writable at that "
             "path (hidden, under /tmp, read-only, moved?), and %s: through /proc/self/fd/%d "
             "the command could read it and change its mode",
             std_names[fd], shown, access, how, fd);
    return -1;
}

/* Standard output or error a unix stream socket that run copies into
 * (<cfg->std_relay>, std_relay.c: standard error, and output when it is
 * that socket): held by the command, its shutdown() would shut the socket
 * for run too, whose summary came after. The descriptor becomes run's
 * pipe; one run has no pipe for passes as it came. Returns 0, or -1 with
 * a message in <err>. */
static int give_socket_pipe(const struct box_config *cfg, int fd, char *err, size_t errlen)
{
    int p = cfg->std_relay != NULL && fd != STDIN_FILENO ? cfg->std_relay->box_end[fd] : -1;
    if (p < 0 || dup2(p, fd) == fd) /* dup2() clears close-on-exec on <fd> */
        return 0;
    snprintf(err, errlen,
             "standard %s is a unix stream socket, and run's pipe could not take its place "
             "(dup2: %s): the command could shut the socket down under run's own messages",
             std_names[fd], strerror(errno));
    return -1;
}

/* Into <why>, why a standard file (a directory: <dir>) could not be
 * opened again in the box by its path: the box does not show it there
 * (<open_err> 0), or its user cannot reach it there (<open_err> the errno
 * of the open of the path, <reached> false: a folder it may not search)
 * or open it (of the file's own open, <reached> true: a file of root's,
 * mode 0600, given by a root shell to `setpriv ... sluice run`). */
static void why_not_again(char *why, size_t len, int open_err, bool reached, bool dir)
{
    if (open_err == 0)
        snprintf(why, len, "which the box does not show %s (hidden, under /tmp, moved?)",
                 dir ? "as it is" : "at that path");
    else if (reached)
        snprintf(why, len,
                 "which the box shows at that path but its user (uid %lu) cannot open there "
                 "(%s)",
                 (unsigned long)geteuid(), strerror(open_err));
    else
        snprintf(why, len, "which the box's user (uid %lu) cannot reach at that path (%s)",
                 (unsigned long)geteuid(), strerror(open_err));
}

/* Standard input, a regular file given for reading that the box does not
 * open again at its path <path> (<why>, from why_not_again(), or the
 * lseek() or dup2() that failed: reopen_std_files()): the read
 * end of the pipe run fills from it, so that no descriptor on the host's
 * mount is left for /proc/self/fd/0 to open again for writing. Returns 0,
 * or -1 with a message in <err>. */
static int give_input_pipe(const struct box_config *cfg, const char *path, const char *why,
                           char *err, size_t errlen)
{
    char shown[128]; /* the path cut to what err (BOX_ERR_MAX) has room for */
    int p = cfg->std_relay != NULL ? cfg->std_relay->box_end[0] : -1;
    if (p >= 0 && dup2(p, STDIN_FILENO) == STDIN_FILENO) /* dup2() clears close-on-exec */
        return 0;
    char how[80];
    why_no_pipe(how, sizeof(how), p, errno);
    text_shown_into(shown, sizeof(shown), path[0] != '\0' ? path : "(unknown)");
    snprintf(err, errlen,
             "standard input is the file %s, %s, and %s: through /proc/self/fd/0 the command "
             "could write it; give it through a pipe (cat FILE |)",
             shown, why, how);
    return -1;
}

/* Standard output or error, a regular file given for reading only that
 * the box does not open again at its path <path> (<why>, as for
 * give_input_pipe()): kept, the command could open
 * /proc/self/fd/<fd> again for writing on the host's mount, or change its
 * mode, as for standard input. No pipe stands in for it: a file given for
 * reading where the command writes is a slip (`1<` for `>`) far more often
 * than input, and run would read the file for a command that never reads
 * it. Writes the message that fails the set-up into <err>. */
static void refuse_read_output(int fd, const char *path, const char *why, char *err, size_t errlen)
{
    char shown[160]; /* the path cut to what err (BOX_ERR_MAX) has room for */
    text_shown_into(shown, sizeof(shown), path[0] != '\0' ? path : "(unknown)");
    snprintf(err, errlen,
             "standard %s is the file %s, open for reading only, %s: through /proc/self/fd/%d "
             "the command could write it and change its mode; give it for writing (>> FILE) "
             "or through a pipe",
             std_names[fd], shown, why, fd);
}

/* A directory given as standard input, output or error that the box does
 * not open again at its path <path> (<why>, as for give_input_pipe()): writes
 * the message that fails the set-up into <err>. */
static void refuse_directory(int fd, const char *path, const char *why, char *err, size_t errlen)
{
    char shown[160]; /* the path cut to what err (BOX_ERR_MAX) has room for */
    text_shown_into(shown, sizeof(shown), path[0] != '\0' ? path : "(unknown)");
    snprintf(err, errlen,
             "standard %s is the directory %s, %s: through it the command would reach the "
             "host's files",
             std_names[fd], shown, why);
}

/* A regular file given for reading as standard input, output or error was
 * opened on the host's mount, and keeps it: through /proc/self/fd/N the
 * command could open it again for writing, a file read-only in the box
 * included (`run -- cmd < file`). Each such descriptor is replaced by the
 * same file opened again by its path inside the box, read-only, at the
 * same offset, so that it is on the box's mount, read-only unless the path
 * is --rw. Standard input that the box does not see at that path as the
 * same file (its own /tmp, hidden, moved, deleted), or that its user
 * cannot reach or open there (why_not_again()), or that it opened again
 * but could not seek to the caller's offset (a file system's nonseekable
 * open) or put in place (dup2()), which <why> then names, becomes the read end of
 * the pipe run fills from it (<cfg->std_relay>, std_relay.c); standard
 * output or error fails the set-up (refuse_read_output()). Files given for
 * writing: see give_written_file(). A directory (`< dir`)
 * is opened again likewise, but never kept: on the host's mount, the
 * command could create files in it through openat() and reach every file
 * of the host's view through "..", so one the box does not show as the
 * same directory fails the set-up. The file is read through the O_PATH
 * descriptor of open_same() once it is known to be the same. Returns 0, or
 * -1 with a message in <err>. */
static int reopen_std_files(const struct box_config *cfg, char *err, size_t errlen)
{
    for (int fd = 0; fd <= 2; fd++) {
        struct stat st;
        char path[PATH_MAX];
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fstat(fd, &st) != 0)
            continue;
        bool dir = S_ISDIR(st.st_mode);
        bool written = (flags & O_ACCMODE) != O_RDONLY;
        if (S_ISSOCK(st.st_mode) && give_socket_pipe(cfg, fd, err, errlen) < 0)
            return -1;
        if (S_ISREG(st.st_mode) && written) {
            if (give_written_file(cfg, fd, flags, &st, err, errlen) < 0)
                return -1;
            continue;
        }
        if (!dir && (written || !S_ISREG(st.st_mode)))
            continue;
        char why[160];
        int pfd = open_same(fd, &st, path, sizeof(path));
        int open_err = pfd < 0 ? errno : 0;
        int nfd = pfd >= 0 ? open_again(pfd, O_RDONLY | (dir ? O_DIRECTORY : 0)) : -1;
        if (pfd >= 0 && nfd < 0)
            open_err = errno;
        why_not_again(why, sizeof(why), open_err, pfd >= 0, dir);
        if (pfd >= 0)
            close(pfd);
        off_t at = dir ? -1 : lseek(fd, 0, SEEK_CUR);
        bool done = false;
        /* opened again, but not at the caller's offset (a file system may
         * make its opens nonseekable: ESPIPE), or not in its place */
        if (nfd >= 0 && at >= 0 && lseek(nfd, at, SEEK_SET) != at)
            snprintf(why, sizeof(why),
                     "which the box opened again at that path but could not seek to offset "
                     "%lld (lseek: %s)",
                     (long long)at, strerror(errno));
        else if (nfd >= 0 && dup2(nfd, fd) != fd) /* dup2() clears close-on-exec on <fd> */
            snprintf(why, sizeof(why),
                     "which the box opened again at that path but could not put on descriptor "
                     "%d (dup2: %s)",
                     fd, strerror(errno));
        else
            done = nfd >= 0;
        if (nfd >= 0)
            close(nfd);
        if (!dir && !done && fd == STDIN_FILENO && give_input_pipe(cfg, path, why, err, errlen) < 0)
            return -1;
        if (!dir && !done && fd != STDIN_FILENO) {
            refuse_read_output(fd, path, why, err, errlen);
            return -1;
        }
        if (dir && !done) {
            refuse_directory(fd, path, why, err, errlen);
            return -1;
        }
    }
    return 0;
}

/* The ends of run's pipes (std_relay.c) in the box: run's ends at once
 * (held in the box, a pipe run closed after a failed write would still
 * have a reader, and the command's writes would not fail; standard
 * input's would still have a writer, and the command never read its end;
 * exec_end's would never end), the box's ends once the command is forked
 * (held by the init, run would never see the end of output and error,
 * and would read standard input's file for a pipe the command does not
 * use), and in the command's process once descriptors 0-2 are in place,
 * before execve(): when exec_end ends, standard input's pipe has a reader
 * only if the command has it on descriptor 0. */
static void close_std_pipes(const struct box_config *cfg, bool box_ends)
{
    const struct box_std_relay *r = cfg->std_relay;
    for (int fd = 0; r != NULL && fd <= 2; fd++) {
        int end = box_ends ? r->box_end[fd] : r->run_end[fd];
        bool shared = fd == 2 && r->box_end[2] == r->box_end[1]; /* one pipe for 1 and 2 */
        if (end >= 0 && !(box_ends && shared))
            close(end);
    }
    if (r != NULL && !box_ends && r->exec_end[0] >= 0)
        close(r->exec_end[0]);
}

/* The stop signals (a terminal's ^Z, a read or write of it from the
 * background) are held while the command's process locks itself down,
 * and one that came is dropped just before execve(), as run and the init
 * drop one that comes while the box is set up: stopped before it executes
 * the command, the process would hold up the start where run cannot see
 * it (the init tells run of the command's stops only once it relays), and
 * run would wait on without stopping. One that run's caller blocked stays
 * pending, as execve() would keep it. */
static const int stop_signals[] = {SIGTSTP, SIGTTIN, SIGTTOU};

static void drop_early_stops(const struct box_config *cfg)
{
    sigset_t pending;
    sigpending(&pending);
    for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++) {
        int sig = stop_signals[i];
        if (sigismember(&pending, sig) == 1 && sigismember(&cfg->blocked, sig) != 1 &&
            sigismember(&cfg->ignored, sig) != 1) {
            signal(sig, SIG_IGN); /* discards the pending one */
            signal(sig, SIG_DFL);
        }
    }
}

/* What the command's process writes on the exec pipe, before the signal,
 * when one of box_ending_signals() came before it executed the command. */
#define EXEC_STOPPED (-2)

static void __attribute__((noreturn)) command_main(const struct box_config *cfg, int exec_fd)
{
    char err[BOX_ERR_MAX] = "";
    /* the init's own dispositions and mask undone; what run's caller
     * ignored stays ignored, and what it blocked blocked, as execve() would
     * have left them; but those that would end run stay blocked until just
     * before execve(): one that comes first stops the start (a terminal's
     * ^C would kill this process, and the command seem to have run); and
     * so do the stop signals, one that came dropped (drop_early_stops()) */
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, sigismember(&cfg->ignored, s) == 1 ? SIG_IGN : SIG_DFL);
    sigset_t hold;
    box_ending_signals(&hold, &cfg->ignored, &cfg->blocked);
    for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++)
        sigaddset(&hold, stop_signals[i]);
    for (int s = 1; s < NSIG; s++)
        if (sigismember(&cfg->blocked, s) == 1)
            sigaddset(&hold, s);
    sigprocmask(SIG_SETMASK, &hold, NULL);
    if (reopen_std_files(cfg, err, sizeof(err)) == 0) {
        /* exec_end, close-on-exec, is left to execve() */
        close_std_pipes(cfg, true);
        if (cloexec_from_3() < 0)
            snprintf(err, sizeof(err), "cannot close the inherited descriptors: %s",
                     strerror(errno));
        else if (new_session_keyring() < 0)
            snprintf(err, sizeof(err), "cannot join a new session keyring: %s", strerror(errno));
    }
    bool landlocked = false;
    if (err[0] != '\0' || box_lock_down(cfg, &landlocked, err, sizeof(err)) < 0) {
        int e = -1;
        ssize_t w = write(exec_fd, &e, sizeof(e));
        w = write(exec_fd, err, strlen(err));
        (void)w;
        _exit(126);
    }
    if (!landlocked)
        fputs("sluice run: this kernel has no Landlock (ABI 2, Linux 5.19, or later; or it is "
              "not enabled): the box is read-only through its mounts only, and a FIFO it shows "
              "read-only can still be opened and written\n",
              stderr);
    int stop = pending_ending(cfg);
    if (stop > 0) {
        int r[2] = {EXEC_STOPPED, stop};
        ssize_t w = write(exec_fd, r, sizeof(r));
        (void)w;
        _exit(128 + stop);
    }
    drop_early_stops(cfg);
    sigprocmask(SIG_SETMASK, &cfg->blocked, NULL);
    execvpe(cfg->argv[0], cfg->argv, cfg->envp);
    int e = errno;
    ssize_t w = write(exec_fd, &e, sizeof(e));
    (void)w;
    _exit(e == ENOENT ? 127 : 126);
}

/* --- the init -------------------------------------------------------------- */

/* The command stopped (<ws> from waitpid(WUNTRACED | WCONTINUED)) or was
 * continued: run is told (box.job_fd), so that it stops too. A command
 * that stops itself (an editor or an agent's terminal UI reading ^Z as a
 * key in raw mode, then sending itself SIGTSTP) stops alone: the signal
 * does not reach run (Landlock's signal scope, or kill() of its own PID),
 * and run, waiting, would hold the caller's shell without its prompt. */
static void tell_job_state(const struct init_state *st, int ws)
{
    unsigned char b = WIFSTOPPED(ws) ? (unsigned char)WSTOPSIG(ws) : 0;
    ssize_t w = write(st->job_fd, &b, 1); /* a full pipe: run is not reading, dropped */
    (void)w;
}

static int on_signal(void *arg)
{
    struct init_state *st = arg;
    struct signalfd_siginfo si;
    while (read(st->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            int ws;
            pid_t p;
            while ((p = waitpid(-1, &ws, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
                if (p != st->cmd)
                    continue;
                if (WIFSTOPPED(ws) || WIFCONTINUED(ws)) {
                    tell_job_state(st, ws);
                    continue;
                }
                st->status = ws;
                st->done = true;
            }
            continue;
        }
        /* a signal the terminal sent reached the command's process group
         * already; pass on only those a process sent */
        if (si.ssi_code != SI_KERNEL && st->cmd > 0)
            kill(st->cmd, sig);
    }
    return st->done ? 1 : 0;
}

static int init_setup(const struct box_config *cfg, uid_t uid, gid_t gid, bool userns, int *gw_fd,
                      char *err, size_t errlen)
{
    if (userns && box_userns_map(uid, gid, err, errlen) < 0)
        return -1;
    if (box_loopback_up(err, errlen) < 0)
        return -1;
    /* a UTS namespace of its own: the host's name stays the host's */
    if (sethostname(BOX_HOSTNAME, strlen(BOX_HOSTNAME)) < 0 || setdomainname("", 0) < 0) {
        snprintf(err, errlen, "cannot set the box's host name: %s", strerror(errno));
        return -1;
    }
    *gw_fd = open(cfg->gateway_socket, O_PATH | O_CLOEXEC);
    if (*gw_fd < 0) {
        box_path_error(err, errlen, "the gateway socket ", cfg->gateway_socket, "",
                       strerror(errno));
        return -1;
    }
    if (box_mounts_setup(cfg, err, errlen) < 0)
        return -1;
    if (box_mount_proc(cfg, err, errlen) < 0)
        return -1;
    if (chdir(cfg->cwd) < 0) {
        /* the current directory: a folder an agent may have named */
        box_path_error(err, errlen, "chdir ", cfg->cwd, "", strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether run died before the init's PR_SET_PDEATHSIG took effect: then no
 * signal will ever come, and the box would live on with no one to collect
 * it. In its own PID namespace the init's getppid() is 0 whoever its parent
 * is, so the test is the status pipe: run holds its only read end, and a
 * pipe whose readers are all gone polls POLLERR on its write end. */
static bool run_is_gone(int status_fd)
{
    struct pollfd p = {.fd = status_fd, .events = POLLOUT};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

/* Waits until the command's process executes the command or writes on
 * <exec_fd>, or one of the signals <stop_fd> (a signalfd of
 * box_ending_signals()) reads comes first: then <cmd> is killed and that
 * signal returned, so the start stops as it does before the fork. 0
 * otherwise (poll() failing too: the signal then reaches the command). */
static int await_exec(int exec_fd, int stop_fd, pid_t cmd)
{
    struct pollfd p[2] = {{.fd = exec_fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
    int n;
    while ((n = poll(p, 2, -1)) < 0 && errno == EINTR)
        ;
    struct signalfd_siginfo si;
    if (n <= 0 || p[0].revents != 0 || read(stop_fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
        return 0;
    kill(cmd, SIGKILL);
    return (int)si.ssi_signo;
}

static void __attribute__((noreturn)) init_main(const struct box_config *cfg, uid_t uid, gid_t gid,
                                                bool userns, int status_fd, int job_fd)
{
    char err[BOX_ERR_MAX];
    int gw_fd = -1;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || run_is_gone(status_fd))
        _exit(2);
    close_std_pipes(cfg, false);
    sigset_t mask;
    box_forwarded_signals(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* ignored (by run's caller), the kernel would reap the command itself
     * and send no SIGCHLD: its end would never be seen */
    signal(SIGCHLD, SIG_DFL);
    struct init_state st = {.sigfd = -1, .job_fd = job_fd};
    st.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (st.sigfd < 0) {
        snprintf(err, sizeof(err), "signalfd: %s", strerror(errno));
        goto fail;
    }
    if (init_setup(cfg, uid, gid, userns, &gw_fd, err, sizeof(err)) < 0)
        goto fail;
    char target[64];
    snprintf(target, sizeof(target), "/proc/self/fd/%d", gw_fd);
    struct relay *relay = relay_new(target, BOX_RELAY_PORT, err, sizeof(err));
    if (relay == NULL)
        goto fail;
    /* the command cannot read the init's memory or open its descriptors */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        snprintf(err, sizeof(err), "prctl(PR_SET_DUMPABLE): %s", strerror(errno));
        goto fail;
    }

    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0) {
        snprintf(err, sizeof(err), "pipe: %s", strerror(errno));
        goto fail;
    }
    /* One that would end run came while the box was set up: a terminal's
     * ^C, which reached the init but no command yet, or one run passed on.
     * The start stops: the command never runs, and run ends of it. One
     * that comes once the command is executed reaches it: a terminal's
     * through its process group, run's through on_signal(). */
    int stop = pending_ending(cfg);
    if (stop > 0) {
        report_status(status_fd, 'K', stop, 0);
        _exit(0);
    }
    /* Until the command is executed (the lock-down in between) such a
     * signal still stops the start: a terminal's reaches the command's
     * process too, which holds it until just before execve() and then
     * reports it; one run passed on reaches only the init, which watches
     * for it here. */
    sigset_t ending;
    box_ending_signals(&ending, &cfg->ignored, &cfg->blocked);
    int stop_fd = signalfd(-1, &ending, SFD_NONBLOCK | SFD_CLOEXEC);
    if (stop_fd < 0) {
        snprintf(err, sizeof(err), "signalfd: %s", strerror(errno));
        goto fail;
    }
    st.cmd = fork();
    if (st.cmd < 0) {
        snprintf(err, sizeof(err), "fork: %s", strerror(errno));
        goto fail;
    }
    if (st.cmd == 0) {
        close(ep[0]);
        command_main(cfg, ep[1]);
    }
    close(ep[1]);
    close_std_pipes(cfg, true);
    /* the command's process holds exec_end until it executes the command */
    if (cfg->std_relay != NULL && cfg->std_relay->exec_end[1] >= 0)
        close(cfg->std_relay->exec_end[1]);
    /* From here on the init relays, waits and kills in the box only: the
     * capabilities it built the box with go (see box_init_let_go()). */
    if (box_init_let_go(err, sizeof(err)) < 0) {
        kill(st.cmd, SIGKILL);
        while (waitpid(st.cmd, NULL, 0) < 0 && errno == EINTR)
            ;
        goto fail;
    }
    stop = await_exec(ep[0], stop_fd, st.cmd);
    close(stop_fd);
    int e = 0;
    ssize_t n = read(ep[0], &e, sizeof(e));
    if (n == (ssize_t)sizeof(e) || stop > 0) {
        char msg[BOX_ERR_MAX];
        ssize_t m = n == (ssize_t)sizeof(e) ? read(ep[0], msg, sizeof(msg) - 1) : 0;
        msg[m > 0 ? m : 0] = '\0';
        close(ep[0]);
        int ws = 0;
        while (waitpid(st.cmd, &ws, 0) < 0 && errno == EINTR)
            ;
        if (stop == 0 && e == EXEC_STOPPED && m >= (ssize_t)sizeof(stop))
            memcpy(&stop, msg, sizeof(stop));
        if (stop > 0) { /* the start stopped: the command never ran */
            report_status(status_fd, 'K', stop, 0);
            _exit(0);
        }
        if (e < 0) { /* the lock-down failed: a set-up error */
            snprintf(err, sizeof(err), "%s", msg);
            goto fail;
        }
        /* the command could not be run: 127 or 126, as a shell says; its
         * name, the caller's (a variable, a file name), shown \ooo: one
         * holding a line end would write a line of its own */
        char *shown = text_shown(cfg->argv[0]);
        fprintf(stderr, "sluice run: %s: %s\n", shown, strerror(e));
        free(shown);
        report_status(status_fd, 'S', ws, 0);
        _exit(0);
    }
    close(ep[0]);
    bool relayed = relay_run(relay, st.sigfd, on_signal, &st) == 0;
    if (!relayed) {
        /* The command's only way out is gone, and so is the loop that
         * collects its status: it is killed, and the status it then has is
         * the one reported, never one it did not end with. */
        fprintf(stderr, "sluice run: the box's relay failed (poll: %s): the command is killed\n",
                strerror(errno));
        kill(st.cmd, SIGKILL);
        while (!st.done) {
            int ws;
            pid_t p = waitpid(st.cmd, &ws, 0);
            if (p == st.cmd) {
                st.status = ws;
                st.done = true;
            } else if (p < 0 && errno != EINTR) {
                break;
            }
        }
        if (!st.done) {
            report_error(status_fd, "the relay failed and the command's status was lost");
            _exit(2);
        }
    }
    if (relayed) {
        /* What the command sent just before it ended may still be in the
         * relay's buffers or its sockets: the rest of the box is killed
         * (its connections end) and that is carried on to the gateway,
         * as a TCP peer would still get it. */
        kill(-1, SIGKILL);
        relay_drain(relay);
    }
    report_status(status_fd, 'S', st.status, relay_accepted(relay));
    _exit(0);
fail:
    report_error(status_fd, err);
    _exit(2);
}

/* --- spawning -------------------------------------------------------------- */

int box_spawn(const struct box_config *cfg, struct box *box, char *err, size_t errlen)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    bool userns = uid != 0;
    int flags = box_ns_flags(!userns);
    int sp[2], jp[2];
    if (pipe2(sp, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(jp, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        close(sp[0]);
        close(sp[1]);
        return -1;
    }
    fflush(NULL);
    /* fork() into the new namespaces: the child is PID 1 of its namespace */
    long pid = syscall(SYS_clone, (unsigned long)flags | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        int e = errno;
        close(sp[0]);
        close(sp[1]);
        close(jp[0]);
        close(jp[1]);
        box_ns_explain(flags, e, err, errlen);
        return -1;
    }
    if (pid == 0) {
        close(sp[0]);
        close(jp[0]);
        init_main(cfg, uid, gid, userns, sp[1], jp[1]);
    }
    close(sp[1]);
    close(jp[1]);
    box->pid = (pid_t)pid;
    box->status_fd = sp[0];
    box->job_fd = jp[0];
    return 0;
}

void box_path_error(char *err, size_t errlen, const char *before, const char *path,
                    const char *after, const char *why)
{
    /* The path gives way in its middle, so that what the message says
     * after it (the reason) fits in <err>: cut at the end, a long path
     * took the reason with it. */
    char shown[BOX_ERR_MAX];
    size_t words = strlen(before) + strlen(after) + 2 + strlen(why);
    size_t room = errlen > words + 64 ? errlen - words : 64; /* 64: a path's ends, at least */
    text_shown_fit(shown, room < sizeof(shown) ? room : sizeof(shown), path);
    snprintf(err, errlen, "%s%s%s: %s", before, shown, after, why);
}
