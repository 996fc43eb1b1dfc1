/* startup_load: the policy load when serve or run starts, which a stop
 * signal ends (startup_load.h). */
#include "cli/startup_load.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "gate/gateway.h"
#include "util/diag.h"
#include "util/quiet_thread.h"
#include "util/text_json.h"

/* One load: the thread's until it ends, then the waiting thread's; the
 * thread's for good once left at a stop (<abandoned>). */
struct load_job {
    pthread_t thread;
    pthread_mutex_t mu; /* guards <done> and <abandoned> */
    bool done;          /* (mu) the load has ended */
    bool abandoned;     /* (mu) left at a stop: the thread frees the job */
    int fds[2];         /* the thread's "done" byte */
    char *path;         /* owned: a job left at a stop outlives the caller's arguments */
    char *shown;        /* owned: <path> as messages name it (text_shown()) */
    unsigned flags;     /* policy_load_flags()'s */
    struct diag diag;
    struct policy *result; /* NULL on failure */
    /* gateway_policy_file_warning()'s, made on the thread: its stat()s
     * reach the same file system as the load */
    char file_warning[GATEWAY_FILE_WARNING_MAX];
};

static void job_free(struct load_job *j)
{
    policy_free(j->result);
    diag_free(&j->diag);
    close(j->fds[0]);
    close(j->fds[1]);
    free(j->path);
    free(j->shown);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static struct load_job *job_new(const char *path, const struct startup_load *how)
{
    struct load_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    j->flags = how->flags;
    j->path = strdup(path);
    j->shown = text_shown(path);
    if (j->path == NULL || pipe2(j->fds, O_CLOEXEC) != 0) {
        free(j->path);
        free(j->shown);
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    diag_init(&j->diag, j->shown);
    return j;
}

static void *load_thread(void *arg)
{
    struct load_job *j = arg;
    j->result = policy_load_flags(j->path, j->flags, &j->diag);
    if (j->result != NULL)
        gateway_policy_file_warning(j->path, j->file_warning, sizeof(j->file_warning));
    if (quiet_thread_job_end(&j->mu, &j->abandoned, &j->done, j->fds[1]))
        job_free(j); /* left at a stop (job_leave()) */
    return NULL;
}

/* Waits for the load's "done" byte on <done_fd> or a stop signal on
 * <sig_fd>, without a time limit: a load ends within its own bounds (a
 * FIFO's writer has 10 s) but on a file system that does not answer, where
 * only the operator's SIGTERM or SIGINT ends the wait. Returns the signal,
 * or 0 when the load ended (or the wait cannot go on: the caller joins). */
static int wait_load_or_stop(int done_fd, int sig_fd)
{
    for (;;) {
        struct pollfd pfd[2] = {{.fd = sig_fd, .events = POLLIN},
                                {.fd = done_fd, .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 0;
        }
        struct signalfd_siginfo si;
        if ((pfd[0].revents & POLLIN) && read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
            return (int)si.ssi_signo; /* wins over a load that ended meanwhile */
        if (pfd[1].revents != 0)
            return 0;
    }
}

/* Leaves the load of <j> to its thread unless it has ended meanwhile.
 * Returns whether it was left (then <j> is no longer the caller's). */
static bool job_leave(struct load_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool left = !j->done;
    if (left) {
        j->abandoned = true;
        pthread_detach(j->thread);
    }
    pthread_mutex_unlock(&j->mu);
    return left;
}

/* The load on the calling thread, when no thread (or signalfd) can be had:
 * a stop is held until it ends. */
static struct policy *load_here(const char *path, const struct startup_load *how)
{
    struct policy *p = policy_load_reporting(path, how->flags, "");
    if (p != NULL) {
        char warning[GATEWAY_FILE_WARNING_MAX];
        gateway_policy_file_warning(path, warning, sizeof(warning));
        fputs(warning, stderr);
    }
    return p;
}

/* <sig>'s name as signal(7) gives it ("SIGTERM"; "signal 34" for one with
 * none, a real-time signal), into <buf>. */
static void signal_label(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "signal %d", sig);
}

struct policy *startup_load_policy(const char *path, const struct startup_load *how, int *stop_sig)
{
    *stop_sig = 0;
    int sig_fd = signalfd(-1, how->stops, SFD_CLOEXEC | SFD_NONBLOCK);
    struct load_job *j = sig_fd >= 0 ? job_new(path, how) : NULL;
    if (j == NULL || quiet_thread_create(&j->thread, load_thread, j) != 0) {
        if (j != NULL)
            job_free(j);
        if (sig_fd >= 0)
            close(sig_fd);
        return load_here(path, how);
    }
    int sig = wait_load_or_stop(j->fds[0], sig_fd);
    close(sig_fd);
    if (sig == 0) {
        pthread_join(j->thread, NULL);
        struct policy *p = j->result;
        j->result = NULL;
        policy_report_load(&j->diag, p, "");
        fputs(j->file_warning, stderr);
        job_free(j);
        return p;
    }
    *stop_sig = sig;
    /* a read that the file system answers after this is not parsed: the
     * process is exiting (OpenSSL, which the parse uses, torn down) */
    policy_load_stop();
    char name[32];
    signal_label(sig, name, sizeof(name));
    char *shown = text_shown(path); /* the operator's, maybe with a line end */
    if (!quiet_thread_job_ended_within(j->fds[0], how->stop_wait_ms) && job_leave(j)) {
        fprintf(stderr,
                "%s: %s while loading the policy %s: %s; its load, not ended within %u ms (its "
                "file system does not answer?), is abandoned\n",
                how->who, name, shown, how->stopped, how->stop_wait_ms);
        free(shown);
        return NULL;
    }
    pthread_join(j->thread, NULL);
    job_free(j);
    fprintf(stderr, "%s: %s while loading the policy %s: %s\n", how->who, name, shown,
            how->stopped);
    free(shown);
    return NULL;
}
