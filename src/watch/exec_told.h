/* exec_told: what the exec sinks lose, told on standard error per
 * program, never once per alert: a program that always fails, under an
 * alert storm (thousands of first contacts, tier-3 writes), wrote a line
 * per alert. Failures (a non-zero exit, a kill) are told at most once a
 * minute: the first at once; those within the minute after it are
 * counted, and the count told when the minute ends ("N more failure(s)
 * since"), or at the exit, so that none goes unsaid. Alerts a program
 * could not be started for, and alerts dropped before it got them (too
 * many waiting), are counted per program and told at its own 1st, 2nd,
 * 4th... one, what was not told at the exit. */
#ifndef SLUICE_WATCH_EXEC_TOLD_H
#define SLUICE_WATCH_EXEC_TOLD_H

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

/* How a program's path and a message are written: sink_exec.c's say(). */
typedef void (*exec_told_say_fn)(const char *path, const char *line);

struct exec_told;

/* NULL when out of memory. <base> is borrowed. */
struct exec_told *exec_told_new(struct event_base *base, exec_told_say_fn say);
/* Says the counts not told yet, then frees. Accepts NULL. */
void exec_told_free(struct exec_told *t);
/* A failure of <path>, <what> ("exited with status 3"): told now, or
 * counted. Told unthrottled when out of memory for the program's count. */
void exec_told_failure(struct exec_told *t, const char *path, const char *what);
/* <path> could not be started for an alert: counted. True when it is to be
 * told now (its 1st, 2nd, 4th... such alert), with <*so_far> its alerts
 * not run so far and <*untold> the failures not told; the exit tells the
 * rest ("N alert(s) not run in all, M failure(s) not told"). Out of memory
 * for its count: true, 1 and 0 (told unthrottled). */
bool exec_told_unrun(struct exec_told *t, const char *path, uint64_t *so_far, uint64_t *untold);
/* An alert <path> did not get (too many of its alerts running or
 * waiting): counted. True when it is to be told now (its 1st, 2nd, 4th...
 * drop), with <*so_far> its drops so far, its own: counted for all
 * programs together, another program's drops were told only when that
 * sum came to a power of two, and it might never be named. When several
 * programs dropped alerts, the exit tells each one's untold drops ("N
 * alert(s) dropped in all"). Out of memory for its count: true, 1. */
bool exec_told_drop(struct exec_told *t, const char *path, uint64_t *so_far);

#endif
