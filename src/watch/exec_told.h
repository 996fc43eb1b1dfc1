/* exec_told: the exec sinks' failures (a non-zero exit, a kill), told on
 * standard error at most once a minute per program, not once per alert:
 * a program that always fails, under an alert storm (thousands of first
 * contacts, tier-3 writes), wrote a line per alert. The first failure is
 * told at once; those within the minute after it are counted, and the
 * count told when the minute ends ("N more failure(s) since"), or at the
 * exit, so that none goes unsaid. */
#ifndef SLUICE_WATCH_EXEC_TOLD_H
#define SLUICE_WATCH_EXEC_TOLD_H

#include <event2/event.h>

/* How a program's path and a message are written: sink_exec.c's say(). */
typedef void (*exec_told_say_fn)(const char *path, const char *line);

struct exec_told;

/* NULL when out of memory. <base> is borrowed. */
struct exec_told *exec_told_new(struct event_base *base, exec_told_say_fn say);
/* Says the counts not told yet, then frees. */
void exec_told_free(struct exec_told *t);
/* A failure of <path>, <what> ("exited with status 3"): told now, or
 * counted. Told unthrottled when out of memory for the program's count. */
void exec_told_failure(struct exec_told *t, const char *path, const char *what);

#endif
