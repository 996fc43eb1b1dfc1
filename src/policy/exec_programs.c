/* exec_programs: can the exec sinks' programs be run here (exec_programs.h). */
#include "policy/exec_programs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/text_json.h"
#include "util/units.h"
#include "util/xalloc.h"

/* What the looking process found of one program: the user it looked as
 * and, when it could not become the programs' user, why; else stat()'s
 * error, or the file's mode and the execute right's error (0: it may be
 * run). */
struct verdict {
    long uid;
    int become_err;
    int stat_err;
    unsigned mode;
    int access_err;
};

/* The user the programs will run as, when the loader is root and will not
 * be (policy_exec_programs_run_as()). Set on the main thread before the
 * first load, whose thread starts after it: read-only from then on. */
static bool runner_set;
static uid_t runner_uid;
static gid_t runner_gid;

void policy_exec_programs_run_as(uid_t uid, gid_t gid)
{
    runner_set = uid != 0;
    runner_uid = uid;
    runner_gid = gid;
}

/* In the looking process: becomes the programs' user, as privdrop_apply()
 * makes the gateway (its group alone, then gid, then uid), when this
 * process is root and one is set. Raw system calls: glibc's wrappers
 * signal every thread of the process they think they are in, and this is
 * the fork of a threaded one. Returns 0 or an errno. */
static int become_runner(void)
{
    if (!runner_set || geteuid() != 0)
        return 0;
    gid_t g = runner_gid;
    if (syscall(SYS_setgroups, 1, &g) != 0 || syscall(SYS_setresgid, g, g, g) != 0 ||
        syscall(SYS_setresuid, runner_uid, runner_uid, runner_uid) != 0)
        return errno;
    return 0;
}

/* In the looking process (a fork of a threaded one: system calls only, no
 * allocation, no lock): judges each exec program as execve() will (the path
 * followed through its links, then the execute right of the effective user
 * and groups, the programs' user's when one is set) and writes a verdict
 * each to <fd>, in sink order. */
static void look_and_exit(const struct policy *p, int fd)
{
    int become_err = become_runner();
    for (size_t i = 0; i < p->alerts.nsinks; i++) {
        const struct sink *s = &p->alerts.sinks[i];
        if (s->kind != SINK_EXEC)
            continue;
        struct verdict v = {.uid = (long)geteuid(), .become_err = become_err};
        struct stat st;
        if (become_err != 0) {
            v.uid = (long)runner_uid;
        } else if (stat(s->target, &st) != 0) {
            v.stat_err = errno;
        } else {
            v.mode = st.st_mode;
            if (S_ISREG(st.st_mode) && faccessat(AT_FDCWD, s->target, X_OK, AT_EACCESS) != 0)
                v.access_err = errno;
        }
        /* 24 bytes, at most POLICY_MAX_SINKS of them: the pipe holds them all */
        if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
            _exit(1);
    }
    _exit(0);
}

/* Reads up to <n> verdicts from <fd> into <got> until <deadline>
 * (monotonic ms) or the writer's end. Returns how many came whole. */
static size_t read_verdicts(int fd, struct verdict *got, size_t n, uint64_t deadline)
{
    size_t bytes = 0, want = n * sizeof(*got);
    while (bytes < want) {
        uint64_t now = monotonic_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, now < deadline ? (int)(deadline - now) : 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t k = read(fd, (char *)got + bytes, want - bytes);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        bytes += (size_t)k;
    }
    return bytes / sizeof(*got);
}

/* Ends and reaps the looking process <pid>, waiting at most EXEC_LOOK_MS
 * for it to go, after a SIGKILL when it has not <answered> (one in an
 * uninterruptible sleep is left unreaped: a zombie once it ends, never a
 * load held for it). ECHILD counts as reaped: a gateway that is its PID
 * namespace's init reaps any child not one of its programs, and may have
 * reaped one that answered and exited (no kill then: its PID may be
 * another's by now). */
static void end_look(pid_t pid, bool answered)
{
    if (!answered)
        kill(pid, SIGKILL);
    uint64_t deadline = monotonic_ms() + EXEC_LOOK_MS;
    for (;;) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR) || monotonic_ms() >= deadline)
            return;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000}, NULL);
    }
}

/* Why the program of <v> cannot be run, into <why>; "" when it can. */
static void verdict_text(const struct verdict *v, char *why, size_t len)
{
    why[0] = '\0';
    if (v->become_err != 0)
        snprintf(why, len, "not looked at: cannot become uid %ld, the programs' user: %s", v->uid,
                 strerror(v->become_err));
    else if (v->stat_err == EACCES)
        snprintf(why, len, "%s: a directory of its path is not searchable by uid %ld",
                 strerror(v->stat_err), v->uid);
    else if (v->stat_err != 0)
        snprintf(why, len, "%s", strerror(v->stat_err));
    else if (S_ISDIR(v->mode))
        snprintf(why, len, "not a regular file: a directory");
    else if (S_ISFIFO(v->mode))
        snprintf(why, len, "not a regular file: a FIFO");
    else if (S_ISSOCK(v->mode))
        snprintf(why, len, "not a regular file: a socket");
    else if (S_ISCHR(v->mode) || S_ISBLK(v->mode))
        snprintf(why, len, "not a regular file: a device");
    else if (!S_ISREG(v->mode))
        snprintf(why, len, "not a regular file");
    else if (v->access_err != 0)
        snprintf(why, len, "not executable by uid %ld: %s", v->uid, strerror(v->access_err));
}

/* Looks at <p>'s <n> exec programs in a process of its own, within
 * EXEC_LOOK_MS: a stat() on a hung NFS or FUSE mount does not return,
 * and a thread left in it would make every later lookup of that name (the
 * sink's own exec) wait behind it where no SIGKILL reaches, where a
 * process is killed and its lookup with it. Returns how many verdicts
 * came, into <got>; *err set when no process could be made. */
static size_t look(const struct policy *p, struct verdict *got, size_t n, int *err)
{
    int fds[2];
    *err = 0;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        *err = errno;
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        look_and_exit(p, fds[1]);
    }
    if (pid < 0)
        *err = errno; /* before close() may change it */
    close(fds[1]);
    size_t came = 0;
    if (pid > 0) {
        came = read_verdicts(fds[0], got, n, monotonic_ms() + EXEC_LOOK_MS);
        end_look(pid, came == n);
    }
    close(fds[0]);
    return came;
}

void policy_check_exec_programs(const struct policy *p, struct diag *d)
{
    size_t n = 0;
    for (size_t i = 0; i < p->alerts.nsinks; i++)
        n += p->alerts.sinks[i].kind == SINK_EXEC;
    if (n == 0)
        return;
    struct verdict *got = xcalloc(n, sizeof(*got));
    int err;
    size_t came = look(p, got, n, &err);
    for (size_t i = 0, j = 0; i < p->alerts.nsinks; i++) {
        const struct sink *s = &p->alerts.sinks[i];
        if (s->kind != SINK_EXEC)
            continue;
        char why[200], field[48];
        if (err != 0)
            snprintf(why, sizeof(why), "not looked at: cannot start a process to look: %s",
                     strerror(err));
        else if (j >= came)
            snprintf(why, sizeof(why),
                     "its file system did not answer within %d ms (a hung NFS or FUSE mount?)",
                     EXEC_LOOK_MS);
        else
            verdict_text(&got[j], why, sizeof(why));
        j++;
        if (why[0] == '\0')
            continue;
        snprintf(field, sizeof(field), "alerts.sinks[%zu]", s->index);
        char *shown = text_shown(s->target); /* may hold a line end or a terminal escape */
        diag_warning(d, s->line, field,
                     "exec program %s cannot be run here (%s): every alert to it would be lost",
                     shown, why);
        free(shown);
        d->absent_programs++;
    }
    free(got);
}
