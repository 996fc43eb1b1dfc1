/* sink_exec: run a program per alert, never blocking the loop (sinks.h). */
#include "watch/sinks.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/env.h"
#include "util/priority.h"
#include "util/quiet_thread.h"
#include "util/stderr_relay.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/zalloc.h"
#include "watch/exec_told.h"

extern char **environ;

/* One program's part of the caps: its alerts started and held (started
 * or waiting). Each of the runner's <programs> may start at most
 * running_share() and hold at most that plus waiting_share(), so that a
 * program that hangs until its 5 s kill fills its own share, not the 16
 * and the 1024 every exec sink shares: the others' alerts neither wait
 * behind its alerts nor are dropped for them. Owned by the runner (r->uses), freed
 * once it holds nothing. */
struct program_use {
    char *path;
    size_t running, held;
};

struct child {
    struct exec_runner *r;
    pid_t pid; /* 0: waiting to start, or being started (r->spawning) */
    char *path;
    struct program_use *use; /* its program's, borrowed from r->uses; NULL until queued */
    char *data;
    size_t n, off;
    int fd; /* the write end of its stdin, or -1 */
    bool killed;
    struct event *wev;   /* fd writable */
    struct event *timer; /* the 5 s limit, counted from the hand-off to the spawner */
};

/* What posix_spawn() needs to start one program, handed to the spawner
 * thread: its own, so that a thread held in a spawn past the runner's end
 * (exec_runner_free) touches nothing freed. One owner at a time: the loop
 * until it sets todo (spawn()), then the thread until it sets done, then
 * the loop again (take_done(), spawner_stop()), which frees it
 * (req_free()); spawner_free() frees one still in todo or done. */
struct spawn_req {
    char *path;
    char **env;    /* the array; its strings are environ's (child_env) */
    int in_fd;     /* the read end of the program's stdin; the thread closes it */
    int err_fd;    /* its standard output and error (stderr_relay_hold()) */
    bool err_held; /* <err_fd> is held: req_free() lets it go */
    pid_t pid;     /* the results */
    int rc;        /* 0, or posix_spawn()'s error */
};

/* The thread that calls posix_spawn(), one program at a time. posix_spawn()
 * returns once the child has exec'd, and an exec may wait as long as the
 * storage the program (or its interpreter) is on: a hung NFS or FUSE
 * server, a dying disk. On the loop, that held every agent's traffic. The
 * loop hands the thread one request at a time (todo) and takes its result
 * (done) when woken through <wake>. Shared with the thread, and left to it
 * when it cannot be joined at the end (exec_runner_free). */
struct spawner {
    pthread_t thread; /* the loop's (spawner_stop()); the thread never reads it */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct spawn_req *todo; /* under mu: handed, not yet taken */
    struct spawn_req *done; /* under mu: started (or failed), for the loop */
    bool stopping;          /* under mu */
    bool left;              /* under mu: not joined (spawner_stop); the thread frees it */
    bool ended;             /* under mu: the thread is about to return */
    pid_t tid;              /* under mu: the thread's, the parent of every program */
    int wake[2];            /* a byte per result, to the loop: [1] written by the
                             * thread only, [0] read by the loop only; not under mu */
};

/* The loop thread's only: the spawner thread is given *sp, nothing else of
 * the runner's. */
struct exec_runner {
    struct event_base *base;
    struct event *sigchld;
    struct child **kids; /* running and waiting, in order */
    size_t nkids, cap;
    size_t running; /* started, or being started (spawning) */
    struct spawner
        *sp; /* owned (a thread spawner_stop() leaves frees it); NULL before the first program */
    struct event *woken;    /* sp->wake[0] readable */
    struct child *spawning; /* the one the thread is starting, or NULL */
    uint64_t failures;
    struct exec_told *told;    /* owned: failures, alerts not run and drops, told per program */
    uint64_t dropped;          /* alerts not given to a program: too many waiting (all programs) */
    const char *const *hidden; /* borrowed: variables programs do not get (exec_runner_hide_env) */
    size_t nhidden;
    struct program_use **uses; /* owned: the programs that hold alerts */
    size_t nuses;
    size_t programs; /* the exec sinks' programs the policy names (exec_runner_programs) */
};

static void child_close_fd(struct child *k)
{
    if (k->wev != NULL) {
        event_free(k->wev);
        k->wev = NULL;
    }
    if (k->fd >= 0) {
        close(k->fd);
        k->fd = -1;
    }
}

static void child_free(struct child *k)
{
    child_close_fd(k);
    if (k->timer != NULL)
        event_free(k->timer);
    free(k->path);
    free(k->data);
    free(k);
}

static void feed(struct child *k)
{
    while (k->fd >= 0 && k->off < k->n) {
        ssize_t w = write(k->fd, k->data + k->off, k->n - k->off);
        if (w > 0) {
            k->off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (k->wev != NULL)
                event_add(k->wev, NULL);
            return;
        }
        break; /* EPIPE: the program did not read it all; its exit status tells */
    }
    child_close_fd(k);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    feed(arg);
}

/* Kills the program <pid> and whatever it started: spawn_program() makes it the
 * leader of a process group of its own, which a script's children (a
 * sleep, a curl) join, so that an overrun leaves none of them behind (one
 * that moved to a group or session of its own, setsid, escapes). <pid> is
 * also killed by itself, in case it left its group. */
static void kill_group(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
}

static pid_t spawning_pid(struct exec_runner *r);

/* Writes "sluice: alert sink exec PATH: " and the rest (<fmt>) on standard
 * error, PATH as text_shown() writes it: a policy's path may hold a
 * terminal escape (a C1 control, U+009B) or a backslash. */
static void say(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *path, const char *fmt, ...)
{
    char shown[4 * PATH_MAX + 1], rest[512];
    text_shown_into(shown, sizeof(shown), path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rest, sizeof(rest), fmt, ap);
    va_end(ap);
    fprintf(stderr, "sluice: alert sink exec %s: %s\n", shown, rest);
}

static void say_line(const char *path, const char *line)
{
    say(path, "%s", line);
}

/* A failure of the program at <path>, told at most once a minute
 * (exec_told.h): one line per alert flooded standard error. */
static void say_failure(struct exec_runner *r, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say_failure(struct exec_runner *r, const char *path, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    exec_told_failure(r->told, path, what);
}

static void reap(struct exec_runner *r);

/* True when the program <pid> has ended (looked at, not reaped). */
static bool program_ended(pid_t pid)
{
    siginfo_t si;
    si.si_pid = 0;
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct child *k = arg;
    (void)fd;
    (void)what;
    if (k->killed)
        return;
    /* A program that ended in time, while the gateway was stopped
     * (SIGSTOP, a paused VM, a long stall of its loop): libevent ran this
     * timer before the SIGCHLD's event. Reaped as that event would, it is
     * not told killed (k is freed). */
    if (k->pid > 0 && program_ended(k->pid)) {
        reap(k->r);
        return;
    }
    k->killed = true;
    pid_t pid = k->pid > 0 ? k->pid : spawning_pid(k->r);
    if (pid > 0) {
        kill_group(pid);
        say_failure(k->r, k->path, "killed after %d s%s", SINK_EXEC_TIMEOUT_MS / 1000,
                    k->pid > 0 ? "" : " (its exec had not finished)");
    } else /* on_spawned() kills it if it ever starts */
        say_failure(
            k->r, k->path,
            "not started after %d s (its exec waits: hung storage?); it will be killed if it starts",
            SINK_EXEC_TIMEOUT_MS / 1000);
}

static void start_waiting(struct exec_runner *r);

/* True when the environment entry <kv> ("NAME=value") is one of r->hidden. */
static bool env_hidden(const struct exec_runner *r, const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t len = eq != NULL ? (size_t)(eq - kv) : strlen(kv);
    for (size_t i = 0; i < r->nhidden; i++)
        if (strncmp(r->hidden[i], kv, len) == 0 && r->hidden[i][len] == '\0')
            return true;
    return false;
}

/* The gateway's environment without the hidden variables, and with TZ as
 * the operator gave it (env_child_entry()), for one spawn: the array is the
 * caller's to free, its strings are environ's or env.c's (a conversion on
 * another thread only replaces TZ's value, never moving environ's array,
 * and glibc frees no string a setenv() replaces, so the spawner thread may
 * read them after). NULL when out of memory. */
static char **child_env(const struct exec_runner *r)
{
    size_t n = 0, k = 0;
    /* Under the lock: the reload thread's check of a zone replaces TZ's
     * pointer in environ with a string it just made, and a read of that
     * slot without the lock has no order with the string's bytes (a data
     * race, ThreadSanitizer's report on test_zone's reader). Libraries'
     * getenv() cannot take it: util/env.h. */
    env_lock();
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + 1, sizeof(*env));
    if (env != NULL)
        for (size_t i = 0; i < n; i++) {
            char *kv = env_child_entry(environ[i]);
            if (kv != NULL && !env_hidden(r, kv))
                env[k++] = kv;
        }
    env_unlock();
    return env;
}

/* On the spawner thread: starts <q>'s program. Returns 0 (q->pid set) or
 * posix_spawn()'s error. Closes q->in_fd either way. */
static int spawn_program(struct spawn_req *q)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    char *argv[] = {q->path, NULL};

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, q->in_fd, STDIN_FILENO);
    /* The standard error sluice was started with, blocking, not the relay's
     * non-blocking pipe (util/stderr_relay.h): a program's output is its
     * own, and waiting for a slow reader is its business, not the loop's. */
    posix_spawn_file_actions_adddup2(&fa, q->err_fd, STDOUT_FILENO);
    if (q->err_fd != STDERR_FILENO)
        posix_spawn_file_actions_adddup2(&fa, q->err_fd, STDERR_FILENO);
    /* Nothing else: not every descriptor of the gateway is close-on-exec
     * (libevent 2.1 opens a webhook's connection without it), and an alert
     * program must not hold the webhook's connection, or any other. */
    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
    posix_spawnattr_init(&at);
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGHUP);
    sigaddset(&dfl, SIGCHLD);
    sigaddset(&dfl, SIGXFSZ);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0); /* a group of its own: kill_group() */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    int rc = posix_spawn(&q->pid, q->path, &fa, &at, argv, q->env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(q->in_fd);
    q->in_fd = -1;
    if (rc != 0)
        q->pid = 0;
    return rc;
}

static void req_free(struct spawn_req *q)
{
    if (q == NULL)
        return;
    if (q->in_fd >= 0)
        close(q->in_fd);
    if (q->err_held)
        stderr_relay_release();
    free(q->env);
    free(q->path);
    free(q);
}

static void spawner_free(struct spawner *sp)
{
    req_free(sp->todo);
    req_free(sp->done);
    pthread_cond_destroy(&sp->cond);
    pthread_mutex_destroy(&sp->mu);
    close(sp->wake[0]);
    close(sp->wake[1]);
    free(sp);
}

static void *spawner_thread(void *arg)
{
    struct spawner *sp = arg;
    /* Not the loop's raised priority (serve --nice): the programs this thread
     * starts inherit its nice, and must not run, or fork, at the gateway's. */
    priority_restore_thread();
    pthread_mutex_lock(&sp->mu);
    sp->tid = gettid();
    for (;;) {
        while (sp->todo == NULL && !sp->stopping)
            pthread_cond_wait(&sp->cond, &sp->mu);
        if (sp->stopping)
            break;
        struct spawn_req *q = sp->todo;
        sp->todo = NULL;
        pthread_mutex_unlock(&sp->mu);
        q->rc = spawn_program(q); /* may wait for as long as the exec does */
        pthread_mutex_lock(&sp->mu);
        sp->done = q;
        /* One byte per request, and one request at a time: the pipe has room. */
        ssize_t w = write(sp->wake[1], "", 1);
        (void)w;
    }
    sp->ended = true;
    bool left = sp->left;
    pthread_mutex_unlock(&sp->mu);
    if (left) { /* the runner is gone: what it would have killed, and sp, are ours */
        if (sp->done != NULL && sp->done->rc == 0)
            kill_group(sp->done->pid);
        spawner_free(sp);
    }
    return NULL;
}

static void on_spawned(evutil_socket_t fd, short what, void *arg);

/* Makes r's spawner thread, at the first program: from the loop thread, so
 * that it and the programs it starts have the loop's scheduling class (not
 * its raised nice: spawner_thread), and after --user, the lockdown and
 * every other change of the loop's. Returns 0 or an errno. */
static int spawner_start(struct exec_runner *r)
{
    struct spawner *sp = calloc(1, sizeof(*sp));
    if (sp == NULL)
        return ENOMEM;
    if (pipe2(sp->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        int e = errno;
        free(sp);
        return e;
    }
    r->woken = event_new(r->base, sp->wake[0], EV_READ | EV_PERSIST, on_spawned, r);
    if (r->woken == NULL || event_add(r->woken, NULL) < 0) {
        if (r->woken != NULL)
            event_free(r->woken);
        r->woken = NULL;
        close(sp->wake[0]);
        close(sp->wake[1]);
        free(sp);
        return ENOMEM;
    }
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cond, NULL);
    /* The gateway's signals (SIGTERM, SIGHUP, SIGCHLD) are the loop's. */
    int e = quiet_thread_create(&sp->thread, spawner_thread, sp);
    if (e != 0) {
        event_free(r->woken);
        r->woken = NULL;
        pthread_cond_destroy(&sp->cond);
        pthread_mutex_destroy(&sp->mu);
        close(sp->wake[0]);
        close(sp->wake[1]);
        free(sp);
        return e;
    }
    r->sp = sp;
    return 0;
}

/* What cannot_run() says of a program the spawner thread could not start. */
#define CANNOT_RUN "cannot run"

/* Hands <k>'s program to the spawner thread. Returns 0 or an errno, with
 * <why> set to what cannot_run() is to say of it. */
static int spawn(struct exec_runner *r, struct child *k, const char **why)
{
    int p[2];
    *why = CANNOT_RUN;
    if (r->sp == NULL) {
        int e = spawner_start(r);
        if (e != 0) { /* the gateway's failure (EAGAIN at RLIMIT_NPROC), not the program's */
            *why = "not run: the gateway cannot start the thread that starts programs";
            return e;
        }
    }
    /* What fails from here is the gateway's too (its memory, its
     * descriptors: EMFILE at RLIMIT_NOFILE), not the program's. */
    *why = "not run: the gateway cannot prepare its start";
    struct spawn_req *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return ENOMEM;
    q->in_fd = -1;
    q->err_fd = stderr_relay_hold(); /* until req_free(): a stop waits for it */
    q->err_held = true;
    if ((q->path = strdup(k->path)) == NULL || (q->env = child_env(r)) == NULL) {
        req_free(q);
        return ENOMEM;
    }
    *why = "not run: the gateway cannot make the pipe to its standard input";
    if (pipe2(p, O_CLOEXEC) != 0) {
        int rc = errno;
        req_free(q);
        return rc;
    }
    q->in_fd = p[0];
    /* Only our end is non-blocking: the child's stdin stays blocking. */
    if (fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK) < 0) {
        int rc = errno;
        close(p[1]);
        req_free(q);
        return rc;
    }
    k->fd = p[1];
    k->wev = event_new(r->base, k->fd, EV_WRITE, on_writable, k);
    k->timer = evtimer_new(r->base, on_timeout, k);
    if (k->wev == NULL || k->timer == NULL) {
        /* Without its timer the program would never be killed, and without
         * the write event an alert the pipe does not take at once would
         * never reach it: not started. k's fd and events go with k
         * (child_done()). */
        *why = "not run: the gateway cannot prepare its start";
        req_free(q);
        return ENOMEM;
    }
    /* The 5 s count from here: a program whose exec hangs is killed too. */
    struct timeval tv = timeval_of_ms(SINK_EXEC_TIMEOUT_MS);
    evtimer_add(k->timer, &tv);
    pthread_mutex_lock(&r->sp->mu);
    r->sp->todo = q;
    pthread_cond_signal(&r->sp->cond);
    pthread_mutex_unlock(&r->sp->mu);
    r->spawning = k;
    r->running++;
    k->use->running++;
    return 0;
}

static void remove_at(struct exec_runner *r, size_t i)
{
    memmove(r->kids + i, r->kids + i + 1, (r->nkids - i - 1) * sizeof(*r->kids));
    r->nkids--;
}

/* The programs the caps are shared among: those the policy names, or,
 * when more hold alerts (a reload took some out of the policy, and their
 * alerts still run or wait), those. */
static size_t programs_sharing(const struct exec_runner *r)
{
    size_t n = r->programs > r->nuses ? r->programs : r->nuses;
    return n > 0 ? n : 1;
}

/* Each program's shares of SINK_EXEC_MAX_RUNNING and SINK_EXEC_MAX_WAITING:
 * an equal part, at least one. */
static size_t running_share(const struct exec_runner *r)
{
    size_t n = programs_sharing(r);
    return SINK_EXEC_MAX_RUNNING / n > 0 ? SINK_EXEC_MAX_RUNNING / n : 1;
}

static size_t waiting_share(const struct exec_runner *r)
{
    size_t n = programs_sharing(r);
    return SINK_EXEC_MAX_WAITING / n > 0 ? SINK_EXEC_MAX_WAITING / n : 1;
}

/* <path>'s use, made when it holds nothing yet; NULL when out of memory. */
static struct program_use *use_of(struct exec_runner *r, const char *path)
{
    for (size_t i = 0; i < r->nuses; i++)
        if (strcmp(r->uses[i]->path, path) == 0)
            return r->uses[i];
    struct program_use **grown = realloc(r->uses, (r->nuses + 1) * sizeof(*grown));
    if (grown == NULL)
        return NULL;
    r->uses = grown;
    struct program_use *u = calloc(1, sizeof(*u));
    if (u == NULL || (u->path = strdup(path)) == NULL) {
        free(u);
        return NULL;
    }
    r->uses[r->nuses++] = u;
    return u;
}

/* <u> holds one alert less; it is forgotten once it holds none. */
static void use_release(struct exec_runner *r, struct program_use *u)
{
    if (--u->held > 0)
        return;
    for (size_t i = 0; i < r->nuses; i++)
        if (r->uses[i] == u) {
            r->uses[i] = r->uses[--r->nuses];
            break;
        }
    free(u->path);
    free(u);
}

/* Takes the child at <i> out of the runner and frees it: it ended, or will
 * not start. */
static void child_done(struct exec_runner *r, size_t i)
{
    struct child *k = r->kids[i];
    remove_at(r, i);
    use_release(r, k->use);
    child_free(k);
}

/* <path> could not be run (<why>, then <rc>, an errno): told at its 1st, 2nd, 4th...
 * failure with how many were not told, not once per alert (an alert storm
 * with a missing program would flood standard error); the rest at exit
 * (exec_runner_free). */
static void cannot_run(struct exec_runner *r, const char *path, const char *why, int rc)
{
    uint64_t so_far, untold;
    if (exec_told_unrun(r->told, path, &so_far, &untold))
        say(path, "%s: %s; %llu alert(s) not run so far, %llu failure(s) not told", why,
            strerror(rc), (unsigned long long)so_far, (unsigned long long)untold);
}

/* Hands the first program waiting to the spawner, when it has none and
 * fewer than SINK_EXEC_MAX_RUNNING run: one at a time, in order, passing
 * over those whose program runs its share already (running_share()). */
static void start_waiting(struct exec_runner *r)
{
    size_t share = running_share(r);
    for (size_t i = 0; i < r->nkids && r->running < SINK_EXEC_MAX_RUNNING && r->spawning == NULL;) {
        struct child *k = r->kids[i];
        if (k->pid != 0 || k->use->running >= share) {
            i++;
            continue;
        }
        const char *why;
        int rc = spawn(r, k, &why);
        if (rc != 0) {
            cannot_run(r, k->path, why, rc);
            r->failures++;
            child_done(r, i);
            continue;
        }
        i++;
    }
}

static size_t index_of(const struct exec_runner *r, const struct child *k)
{
    size_t i = 0;
    while (i < r->nkids && r->kids[i] != k)
        i++;
    return i;
}

/* The spawner's result for r->spawning, if there is one, the caller's to
 * free (req_free()); NULL otherwise. */
static struct spawn_req *take_done(struct exec_runner *r)
{
    pthread_mutex_lock(&r->sp->mu);
    struct spawn_req *q = r->sp->done;
    r->sp->done = NULL;
    pthread_mutex_unlock(&r->sp->mu);
    return q;
}

/* The spawner started r->spawning's program, or could not. */
static void on_spawned(evutil_socket_t fd, short what, void *arg)
{
    struct exec_runner *r = arg;
    char buf[16];
    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    struct spawn_req *q = take_done(r);
    struct child *k = r->spawning;
    if (q == NULL || k == NULL) {
        req_free(q);
        return;
    }
    r->spawning = NULL;
    if (q->rc != 0) {
        cannot_run(r, k->path, CANNOT_RUN, q->rc);
        r->failures++;
        r->running--;
        k->use->running--;
        child_done(r, index_of(r, k));
    } else {
        k->pid = q->pid;
        if (k->killed) /* its 5 s ended before the exec did */
            kill_group(k->pid);
        feed(k);
    }
    req_free(q);
    reap(r); /* one killed in its exec may have ended already; starts the next */
}

/* The program the spawner thread is starting (its exec under way), or 0:
 * the child of that thread the runner does not know (it starts one at a
 * time, and every program is its child), from /proc (CONFIG_PROC_CHILDREN,
 * which distributions' kernels have; without it, 0). */
static pid_t spawning_pid(struct exec_runner *r)
{
    /* buf: the thread's children, at most SINK_EXEC_MAX_RUNNING running and
     * the one starting, a pid of at most 7 digits and a blank each */
    char name[64], buf[1024];
    if (r->sp == NULL || r->spawning == NULL)
        return 0;
    pthread_mutex_lock(&r->sp->mu);
    pid_t tid = r->sp->tid;
    pthread_mutex_unlock(&r->sp->mu);
    if (tid <= 0)
        return 0;
    snprintf(name, sizeof(name), "/proc/self/task/%d/children", (int)tid);
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    for (char *p = buf, *end; *p != '\0'; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        bool known = false;
        for (size_t i = 0; i < r->nkids && !known; i++)
            known = r->kids[i]->pid == (pid_t)pid;
        if (pid > 0 && !known)
            return (pid_t)pid;
    }
    return 0;
}

/* How many orphans one reap() takes at the most: it runs on the loop, and
 * the next SIGCHLD takes the rest. */
#define ORPHANS_PER_REAP 64

/* True when <pid> is a program of r's (started, or being started). */
static bool is_program(const struct exec_runner *r, pid_t pid)
{
    for (size_t i = 0; i < r->nkids; i++)
        if (r->kids[i]->pid == pid)
            return true;
    return false;
}

/* As the init of its PID namespace (a container's entry point, without
 * --init), the gateway is the parent of every orphan there: what a
 * program left running when it ended (killed with its group, as reap()
 * does, or a setsid daemon that ended later) becomes its child, and
 * only the programs' own pids are waited for: each stayed a zombie,
 * holding a PID, until a pids.max refused the gateway's next program or
 * thread. Reaps those that ended, any child not a program of r's. Not
 * while a program is being started: its pid is not known yet, and its
 * exit (killed in its exec) is on_spawned()'s to see; on_spawned() reaps
 * again once it is known. */
static void reap_orphans(struct exec_runner *r)
{
    if (getpid() != 1 || r->spawning != NULL)
        return;
    for (int i = 0; i < ORPHANS_PER_REAP; i++) {
        siginfo_t si;
        si.si_pid = 0;
        /* Looked at first: a program of ours is reap()'s to wait for. */
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0 ||
            is_program(r, si.si_pid))
            return; /* none, or one of ours first: its own SIGCHLD comes */
        if (waitpid(si.si_pid, NULL, WNOHANG) <= 0)
            return;
    }
}

static void reap(struct exec_runner *r)
{
    for (size_t i = 0; i < r->nkids;) {
        struct child *k = r->kids[i];
        int st = 0;
        if (k->pid <= 0) {
            i++;
            continue;
        }
        /* Ended? Looked at without reaping: its zombie keeps the number of
         * its process group from being reused, so that what it left
         * running there (a `curl ... &`) is killed, not some other group:
         * else that would outlive it, past the 5 s and the cap, for ever. */
        siginfo_t si;
        si.si_pid = 0;
        int w = waitid(P_PID, (id_t)k->pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if ((w == 0 && si.si_pid == 0) || (w < 0 && errno == EINTR)) {
            i++;
            continue;
        }
        if (w == 0) /* not after ECHILD: the number may be another's by now */
            kill(-k->pid, SIGKILL);
        pid_t p = waitpid(k->pid, &st, WNOHANG);
        if (p == 0 || (p < 0 && errno == EINTR)) {
            i++;
            continue;
        }
        if (p < 0) /* ECHILD: someone else reaped it; nothing to report */
            st = 0;
        else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
            say_failure(r, k->path, "exited with status %d", WEXITSTATUS(st));
            r->failures++;
        } else if (WIFSIGNALED(st)) {
            if (!k->killed)
                say_failure(r, k->path, "killed by signal %d", WTERMSIG(st));
            r->failures++;
        }
        r->running--;
        k->use->running--;
        child_done(r, i);
    }
    reap_orphans(r);
    start_waiting(r);
}

static void on_sigchld(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    reap(arg);
}

struct exec_runner *exec_runner_new(struct event_base *base)
{
    struct exec_runner *r = zalloc(sizeof(*r)); /* zalloc(): test_watch_reload fails it */
    if (r == NULL)
        return NULL;
    r->base = base;
    r->sigchld = evsignal_new(base, SIGCHLD, on_sigchld, r);
    r->told = exec_told_new(base, say_line);
    if (r->told == NULL || r->sigchld == NULL || evsignal_add(r->sigchld, NULL) < 0) {
        if (r->sigchld != NULL)
            event_free(r->sigchld);
        exec_told_free(r->told);
        free(r);
        return NULL;
    }
    return r;
}

void exec_runner_hide_env(struct exec_runner *r, const char *const *names, size_t n)
{
    r->hidden = names;
    r->nhidden = n;
}

/* An alert <path> will not get; counted (sluice_exec_dropped_total) and
 * told at <path>'s 1st, 2nd, 4th... drop, with its own count: not a storm
 * on standard error, and each program that loses alerts named. */
static void drop(struct exec_runner *r, const char *path, const char *why)
{
    uint64_t so_far;
    r->failures++;
    r->dropped++;
    if (exec_told_drop(r->told, path, &so_far))
        say(path, "%s; %llu alert(s) dropped so far", why, (unsigned long long)so_far);
}

void exec_runner_run(struct exec_runner *r, const char *path, const char *data, size_t n)
{
    if (r->nkids >= SINK_EXEC_MAX_RUNNING + SINK_EXEC_MAX_WAITING) {
        drop(r, path, "too many alerts running or waiting");
        return;
    }
    if (r->nkids == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 16;
        struct child **nk = realloc(r->kids, nc * sizeof(*nk));
        if (nk == NULL) {
            drop(r, path, "out of memory");
            return;
        }
        r->kids = nk;
        r->cap = nc;
    }
    struct child *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        drop(r, path, "out of memory");
        return;
    }
    k->r = r;
    k->fd = -1;
    k->path = strdup(path);
    k->data = malloc(n > 0 ? n : 1);
    if (k->path == NULL || k->data == NULL) {
        child_free(k);
        drop(r, path, "out of memory");
        return;
    }
    if ((k->use = use_of(r, path)) == NULL) {
        child_free(k);
        drop(r, path, "out of memory");
        return;
    }
    size_t share = running_share(r) + waiting_share(r);
    if (k->use->held >= share) {
        char why[200];
        snprintf(why, sizeof(why),
                 "too many of its alerts running or waiting (%zu: each of the %zu exec programs "
                 "may hold %zu running and %zu waiting)",
                 k->use->held, programs_sharing(r), running_share(r), waiting_share(r));
        child_free(k); /* the use holds others: it stays */
        drop(r, path, why);
        return;
    }
    k->use->held++;
    memcpy(k->data, data, n);
    k->n = n;
    r->kids[r->nkids++] = k;
    start_waiting(r);
}

void exec_runner_programs(struct exec_runner *r, size_t n)
{
    r->programs = n;
    start_waiting(r); /* a larger share may start some that wait */
}

size_t exec_runner_busy(const struct exec_runner *r)
{
    return r->nkids;
}

uint64_t exec_runner_failures(const struct exec_runner *r)
{
    return r->failures;
}

uint64_t exec_runner_dropped(const struct exec_runner *r)
{
    return r->dropped;
}

/* Reaps the programs killed at exit, waiting until <deadline> (monotonic
 * ms; SINK_EXEC_REAP_MS in all with spawner_stop()): a SIGKILL ends a
 * program only once it leaves an uninterruptible sleep (D state: a read
 * from a hung NFS server), which may be never, and a blocking waitpid()
 * would then hold the gateway's exit for ever. One still there at the
 * deadline is named and left (the gateway's exit hands it to init). */
static void reap_killed(struct exec_runner *r, uint64_t deadline)
{
    size_t left;
    do {
        left = 0;
        for (size_t i = 0; i < r->nkids; i++) {
            struct child *k = r->kids[i];
            if (k->pid <= 0)
                continue;
            pid_t p = waitpid(k->pid, NULL, WNOHANG);
            if (p == k->pid || (p < 0 && errno != EINTR))
                k->pid = 0; /* reaped, or not ours to wait for (ECHILD) */
            else
                left++;
        }
        if (left > 0)
            nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
    } while (left > 0 && monotonic_ms() < deadline);
    for (size_t i = 0; i < r->nkids; i++)
        if (r->kids[i]->pid > 0)
            say(r->kids[i]->path,
                "pid %d did not end within %d ms of SIGKILL (in uninterruptible sleep?); not "
                "waited for",
                (int)r->kids[i]->pid, SINK_EXEC_REAP_MS);
}

/* Stops r's spawner thread, waiting for it until <deadline> (monotonic ms):
 * it may be in a spawn whose exec waits, its child killed but in an
 * uninterruptible sleep (a hung NFS server), and the exit must not wait
 * for it for ever. A program it started that the loop did not hear of is
 * r->spawning's from then on; an alert it had not taken, or whose program
 * it could not start, was never started (r->spawning is then NULL). A
 * thread still held at the deadline is named and left, and what it uses
 * with it (the gateway's exit ends it). */
static void spawner_stop(struct exec_runner *r, uint64_t deadline)
{
    struct spawner *sp = r->sp;
    if (sp == NULL)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->stopping = true;
    bool untaken = sp->todo != NULL;
    req_free(sp->todo);
    sp->todo = NULL;
    pthread_cond_signal(&sp->cond);
    pthread_mutex_unlock(&sp->mu);
    uint64_t left = deadline > monotonic_ms() ? deadline - monotonic_ms() : 0;
    struct timespec until = monotonic_after(left < UINT_MAX ? (unsigned)left : UINT_MAX);
    event_free(r->woken);
    r->woken = NULL;
    r->sp = NULL;
    if (quiet_thread_join_until(sp->thread, &until) != 0) {
        /* Once <left> is set and the lock released, a thread whose exec
         * ends frees <sp>: what is needed of it after is read before. */
        pthread_t thread = sp->thread;
        pthread_mutex_lock(&sp->mu);
        bool left_behind = sp->left = !sp->ended;
        pthread_mutex_unlock(&sp->mu);
        if (left_behind) {
            say(r->spawning != NULL ? r->spawning->path : "?",
                "its start (exec) did not end within %d ms of SIGKILL (in uninterruptible "
                "sleep?); not waited for",
                SINK_EXEC_REAP_MS);
            pthread_detach(thread); /* it frees sp if it ever ends */
            return;
        }
        pthread_join(thread, NULL); /* it ended just now */
    }
    struct spawn_req *q = sp->done;
    sp->done = NULL;
    if (q != NULL && q->rc == 0 && r->spawning != NULL) {
        r->spawning->pid = q->pid;
        kill_group(q->pid);
    } else if (untaken || q != NULL)
        r->spawning = NULL;
    req_free(q);
    spawner_free(sp);
}

void exec_runner_free(struct exec_runner *r)
{
    if (r == NULL)
        return;
    if (r->dropped > 0)
        fprintf(stderr, "sluice: alert sinks exec: %llu alert(s) dropped in all\n",
                (unsigned long long)r->dropped);
    for (size_t i = 0; i < r->nkids; i++)
        if (r->kids[i]->pid > 0)
            kill_group(r->kids[i]->pid);
    pid_t starting = spawning_pid(r); /* its exec under way */
    if (starting > 0)
        kill_group(starting);
    uint64_t deadline = monotonic_ms() + SINK_EXEC_REAP_MS;
    spawner_stop(r, deadline);
    /* What the stop's wait (--grace) left: said, as a webhook's lost
     * alerts are, not dropped silently. Counted once the spawner has
     * stopped: the program it was starting ran (or was in its exec) only
     * if it took the alert and its posix_spawn() did not fail. */
    size_t waiting = 0;
    for (size_t i = 0; i < r->nkids; i++)
        waiting += r->kids[i]->pid == 0 && r->kids[i] != r->spawning;
    if (r->nkids > 0)
        fprintf(stderr,
                "sluice: alert sinks exec: %zu alert(s) lost at exit: %zu program(s) killed "
                "while running, %zu never started\n",
                r->nkids, r->nkids - waiting, waiting);
    reap_killed(r, deadline);
    exec_told_free(r->told); /* the failures the last minute counted, what was not told */
    for (size_t i = 0; i < r->nkids; i++)
        child_free(r->kids[i]);
    free(r->kids);
    for (size_t i = 0; i < r->nuses; i++) {
        free(r->uses[i]->path);
        free(r->uses[i]);
    }
    free(r->uses);
    event_free(r->sigchld);
    free(r);
}
