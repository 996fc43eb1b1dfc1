/* exec_told: what exec sinks lose, told per program (exec_told.h). */
#include "watch/exec_told.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/units.h"

#define TELL_EVERY_MS 60000

struct told {
    char *path;
    uint64_t told_ms;               /* monotonic; 0: never told */
    uint64_t untold;                /* failures since, not told yet */
    uint64_t unrun, unrun_told;     /* alerts it could not be started for; those told */
    uint64_t dropped, dropped_said; /* alerts it did not get; the count last told */
};

struct exec_told {
    exec_told_say_fn say;
    struct event *timer; /* the end of the earliest minute with a count to tell */
    struct told *progs;  /* owned, and their paths */
    size_t nprogs;
};

static void say_count(struct exec_told *t, struct told *p, const char *when)
{
    char line[160];
    snprintf(line, sizeof(line), "%llu more failure(s) %s (told at most once a minute)",
             (unsigned long long)p->untold, when);
    t->say(p->path, line);
    p->untold = 0;
}

/* Tells the counts whose minute has ended; arms the timer for the next. */
static void on_minute(evutil_socket_t fd, short what, void *arg)
{
    struct exec_told *t = arg;
    (void)fd;
    (void)what;
    uint64_t now = monotonic_ms(), next = UINT64_MAX;
    for (size_t i = 0; i < t->nprogs; i++) {
        struct told *p = &t->progs[i];
        if (p->untold == 0)
            continue;
        if (now - p->told_ms >= TELL_EVERY_MS) {
            say_count(t, p, "since");
            p->told_ms = now;
            continue;
        }
        uint64_t left = TELL_EVERY_MS - (now - p->told_ms);
        next = left < next ? left : next;
    }
    if (next != UINT64_MAX) {
        struct timeval tv = {(time_t)(next / 1000), (suseconds_t)(next % 1000 * 1000)};
        evtimer_add(t->timer, &tv);
    }
}

struct exec_told *exec_told_new(struct event_base *base, exec_told_say_fn say)
{
    struct exec_told *t = calloc(1, sizeof(*t));
    struct event *timer = t != NULL ? evtimer_new(base, on_minute, t) : NULL;
    if (timer == NULL) {
        free(t);
        return NULL;
    }
    *t = (struct exec_told){.say = say, .timer = timer};
    return t;
}

static struct told *told_of(struct exec_told *t, const char *path)
{
    for (size_t i = 0; i < t->nprogs; i++)
        if (strcmp(t->progs[i].path, path) == 0)
            return &t->progs[i];
    struct told *grown = realloc(t->progs, (t->nprogs + 1) * sizeof(*grown));
    char *copy = strdup(path);
    if (grown != NULL)
        t->progs = grown;
    if (grown == NULL || copy == NULL) {
        free(copy);
        return NULL;
    }
    t->progs[t->nprogs] = (struct told){.path = copy};
    return &t->progs[t->nprogs++];
}

void exec_told_failure(struct exec_told *t, const char *path, const char *what)
{
    struct told *p = told_of(t, path);
    if (p == NULL) { /* told, then, unthrottled */
        t->say(path, what);
        return;
    }
    uint64_t now = monotonic_ms();
    if (!tell_due(&p->told_ms, now, TELL_EVERY_MS)) {
        /* Its first count of the minute arms the timer anew, for the
         * earliest minute's end: armed for another program's, told after
         * this one's, the count waited for that end, up to a minute more. */
        if (p->untold++ == 0)
            on_minute(-1, 0, t);
        return;
    }
    if (p->untold > 0) /* the timer's tell came no sooner than this one */
        say_count(t, p, "since");
    t->say(path, what);
}

/* True when <n> (from 1) is 1, 2, 4, 8...: a count told at those. */
static bool power_of_two(uint64_t n)
{
    return (n & (n - 1)) == 0;
}

bool exec_told_unrun(struct exec_told *t, const char *path, uint64_t *so_far, uint64_t *untold)
{
    struct told *p = told_of(t, path);
    if (p == NULL) {
        *so_far = 1, *untold = 0;
        return true;
    }
    if (!power_of_two(++p->unrun))
        return false;
    p->unrun_told++;
    *so_far = p->unrun, *untold = p->unrun - p->unrun_told;
    return true;
}

bool exec_told_drop(struct exec_told *t, const char *path, uint64_t *so_far)
{
    struct told *p = told_of(t, path);
    if (p == NULL) {
        *so_far = 1;
        return true;
    }
    if (!power_of_two(++p->dropped))
        return false;
    *so_far = p->dropped_said = p->dropped;
    return true;
}

/* At exit, what <p> lost that was not told: its untold alerts not run, and
 * its untold drops when <several> programs dropped some (for one, the
 * runner's "N alert(s) dropped in all" says it). */
static void say_untold_losses(struct exec_told *t, const struct told *p, bool several)
{
    char line[160];
    if (p->unrun > p->unrun_told) {
        snprintf(line, sizeof(line), "%llu alert(s) not run in all, %llu failure(s) not told",
                 (unsigned long long)p->unrun, (unsigned long long)(p->unrun - p->unrun_told));
        t->say(p->path, line);
    }
    if (several && p->dropped > p->dropped_said) {
        snprintf(line, sizeof(line), "%llu alert(s) dropped in all",
                 (unsigned long long)p->dropped);
        t->say(p->path, line);
    }
}

void exec_told_free(struct exec_told *t)
{
    if (t == NULL)
        return;
    size_t dropping = 0;
    for (size_t i = 0; i < t->nprogs; i++)
        dropping += t->progs[i].dropped > 0;
    for (size_t i = 0; i < t->nprogs; i++) {
        if (t->progs[i].untold > 0)
            say_count(t, &t->progs[i], "not told before the exit");
        say_untold_losses(t, &t->progs[i], dropping > 1);
        free(t->progs[i].path);
    }
    free(t->progs);
    event_free(t->timer);
    free(t);
}
