/* sinks: where alerts go besides the --alerts file (SPEC.md alerts.sinks).
 *
 * exec: the program runs with one alert JSON line on standard input (its
 * standard output goes to our standard error, never into the log); it is
 * killed after SINK_EXEC_TIMEOUT_MS, with its process group (its own,
 * so that what a script started dies with it); when it exits sooner, what
 * it left running in its group is killed then, before it is reaped (as
 * its PID namespace's init, the gateway reaps such orphans too). Its environment is the
 * gateway's without the agents' tokens (exec_runner_hide_env). Spawning uses posix_spawn on a
 * thread of the runner's, one program at a time (posix_spawn returns once
 * the exec is done, which waits as long as the program's storage: a hung
 * NFS or FUSE mount); the 5 s count from the hand-off to that thread, and
 * a program still in its exec then is killed (found in /proc as that
 * thread's child). The write to the pipe is non-blocking and children are
 * reaped on SIGCHLD with waitpid(pid, WNOHANG) for each of our own pids
 * only, so the loop never waits. At most SINK_EXEC_MAX_RUNNING run at once; up to
 * SINK_EXEC_MAX_WAITING more wait; beyond, alerts to exec sinks are dropped
 * and counted (exec_runner_dropped: sluice_exec_dropped_total). Each of the
 * N programs the policy names (exec_runner_programs) may run 1/N of the
 * first and hold 1/N of the second waiting (at least one each): one that
 * hangs until its kill delays and drops its own alerts, not the others'.
 * Programs inherit the gateway's soft RLIMIT_NOFILE, raised to the hard
 * limit at start: posix_spawn() has no attribute for a child's limits, and
 * setrlimit() around the spawn would lower every thread's (README: a tool
 * that closes each descriptor up to its limit needs a limit of its own).
 * Failures (cannot spawn, non-zero exit, killed) are reported on standard error; a
 * program that cannot be spawned at its 1st, 2nd, 4th... failure, with
 * how many were not told, and their total at exit.
 *
 * webhook: an HTTP POST of the alert JSON (application/json) to an http://
 * URL through libevent's evhttp client, one request in flight per sink;
 * each attempt has SINK_WEBHOOK_TIMEOUT_S from the start of the request to
 * the end of the answer (a deadline that cancels it, however slowly the
 * server trickles); interim (1xx) answers before the final one are
 * skipped, at most SINK_WEBHOOK_MAX_INTERIM (more fail the attempt). A
 * failure (no connection, timeout, non-2xx) retries the same alert after
 * a backoff doubling from 500 ms to 30 s; after
 * SINK_WEBHOOK_MAX_ATTEMPTS in a row the alert goes behind the others
 * with a fresh set of attempts: nothing is given up while the gateway
 * runs. At most SINK_WEBHOOK_QUEUE_MAX alerts, and SINK_WEBHOOK_QUEUE_BYTES
 * of their bodies, are held in memory per sink (one alert however long);
 * beyond either, with a state store, new ones are kept only in the store
 * and a sweep every SINK_WEBHOOK_SWEEP_MS reads them back as room frees up
 * (a new sink takes its oldest stored alerts up to the caps, the sweep the
 * others; each read of the store holds no more than the room under both
 * caps); without a store the oldest not in flight are dropped, as many
 * as the new one needs, counted (webhook_dropped) and reported on standard
 * error. Every queued alert is in the state store (when there is one)
 * until delivered, so none is lost across a restart. With a store, at
 * most SINK_WEBHOOK_STORED_MAX alerts wait per sink, in memory and the
 * store together (alert bodies are at most 8 KiB: 800 MiB a sink at the
 * most): a sink down for days kept adding rows to the store without a
 * bound. Beyond, the oldest in memory not in flight is dropped, its row
 * deleted; when memory holds none to drop (it waits for the sweep's read),
 * the new one is. Either way counted (webhook_dropped). https:// URLs are
 * verified against the system's CA store and the URL's host
 * (webhook_tls.h). URLs are parsed by util/weburl.h, as the policy loader
 * does. Standard error and metrics name a sink by its label
 * (weburl_label), never by its full URL, which often carries a secret.
 * Test-only: SLUICE_TEST_WEBHOOK_BACKOFF_MS,
 * SLUICE_TEST_WEBHOOK_QUEUE_MAX and SLUICE_TEST_WEBHOOK_QUEUE_BYTES shorten
 * the timings and the caps. */
#ifndef SLUICE_WATCH_SINKS_H
#define SLUICE_WATCH_SINKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct store;

#define SINK_EXEC_TIMEOUT_MS      5000
#define SINK_EXEC_REAP_MS         1000 /* at exit, to reap the programs killed */
#define SINK_EXEC_MAX_RUNNING     16
#define SINK_EXEC_MAX_WAITING     1024
#define SINK_WEBHOOK_TIMEOUT_S    5
#define SINK_WEBHOOK_MAX_ATTEMPTS 8
#define SINK_WEBHOOK_BACKOFF_MS   500
#define SINK_WEBHOOK_BACKOFF_MAX  30000
#define SINK_WEBHOOK_QUEUE_MAX    10000 /* in memory per sink; beyond, kept only in the store */
#define SINK_WEBHOOK_QUEUE_BYTES  (16u << 20) /* of alert bodies in memory per sink, likewise */
#define SINK_WEBHOOK_SWEEP_MS     60000       /* re-reads alerts kept only in the store */
#define SINK_WEBHOOK_STORED_MAX   100000      /* alerts waiting per sink, the store's included */
#define SINK_WEBHOOK_MAX_HEAD     16384       /* a longer answer head is a failed delivery */
#define SINK_WEBHOOK_MAX_BODY     65536       /* a longer answer body is a failed delivery */
#define SINK_WEBHOOK_MAX_INTERIM  16          /* interim (1xx) answers skipped; more fail it */

struct exec_runner;
struct exec_runner *exec_runner_new(struct event_base *base);
/* Runs <path> with <data> (<n> bytes, copied) on its standard input, in
 * the gateway's environment without the variables exec_runner_hide_env()
 * named. */
void exec_runner_run(struct exec_runner *r, const char *path, const char *data, size_t n);
/* The variables (<n> <names>) programs started from now on do not get:
 * those the agents' tokens are read from (env:NAME), secrets no alert
 * program needs. Replaces the previous list; cannot fail, so that a
 * reload that prepared the list puts it in force whole. <names> are
 * borrowed: the caller keeps them until the next call or
 * exec_runner_free(). */
void exec_runner_hide_env(struct exec_runner *r, const char *const *names, size_t n);
/* The policy names <n> exec sinks' programs (distinct paths): each may run
 * SINK_EXEC_MAX_RUNNING / n of them at once and hold SINK_EXEC_MAX_WAITING
 * / n more waiting (at least one of each); n is the programs that hold
 * alerts when they are more (those a reload took out of the policy).
 * Until called, one program. */
void exec_runner_programs(struct exec_runner *r, size_t n);
/* Children still running or waiting. */
size_t exec_runner_busy(const struct exec_runner *r);
uint64_t exec_runner_failures(const struct exec_runner *r);
/* Alerts not given to a program: over SINK_EXEC_MAX_RUNNING +
 * SINK_EXEC_MAX_WAITING at once (or out of memory), one per sink. */
uint64_t exec_runner_dropped(const struct exec_runner *r);
/* Kills what still runs (SIGKILL, with its process group), the program
 * being started included, reaps it and stops the thread that starts them
 * within SINK_EXEC_REAP_MS (one not ended by then, stuck in an
 * uninterruptible sleep, is named and left), frees. Says on standard error
 * how many alerts were dropped in all and how many it lost (programs killed
 * while running, alerts never started). Accepts NULL. */
void exec_runner_free(struct exec_runner *r);

struct webhook;
struct webhook_tls_ca;
/* Returns a sink POSTing to <url>, or NULL with <*err> (malloc'd; it names
 * the sink by its label, never by <url>). <store>
 * (borrowed, or NULL) keeps its queue. An https:// sink uses <ca>'s TLS
 * context (webhook_tls.h; the sink keeps a reference), or with <ca> NULL
 * reads the CA store for itself. */
struct webhook *webhook_new(struct event_base *base, const char *url, struct store *store,
                            const struct webhook_tls_ca *ca, char **err);
/* The sink's full URL (its identity across reloads). */
const char *webhook_url(const struct webhook *w);
/* The sink is the <n>th listing (from 1) of its URL in alerts.sinks: the
 * store files its alerts under weburl_store_key(URL, n) (util/weburl.h:
 * the URL's SHA-256, never the URL), " (listing N)" added for the
 * others, so that each sink of a URL listed
 * twice takes back its own alerts only (each alert was stored once per
 * sink). Called before the sink stores or adopts anything; -1 when out of
 * memory (the key is left as it was). */
int webhook_set_listing(struct webhook *w, unsigned n);
/* What the store files the sink's alerts under (webhook_set_listing). */
const char *webhook_store_key(const struct webhook *w);
/* How the sink is shown on standard error and in metrics:
 * weburl_label(webhook_url(w)) (util/weburl.h). */
const char *webhook_label(const struct webhook *w);
/* Queues <json> (copied; stored) and sends when the sink is free. */
void webhook_send(struct webhook *w, const char *json, size_t n);
/* Takes the alerts the store holds for <w>, a sink just made (at start, or
 * added by a reload), oldest first: as many as its memory queue holds, the
 * sweep reading the others back as room frees up. Never the whole queue. */
void webhook_adopt_stored(struct webhook *w);
/* Takes <store>, opened while the gateway served (store_opener.h), for a
 * sink made without one: the alerts its memory holds are written to the
 * store (delivered ones are deleted from it, as usual), and those raised
 * from then on too. The alerts an earlier run left in the store are not
 * read while the gateway serves (they would come back beside the ones
 * written now): the next start delivers them. */
void webhook_take_store(struct webhook *w, struct store *store);
/* The alerts waiting in <w>'s memory queue (at most its cap). */
size_t webhook_queued(const struct webhook *w);
/* Every alert waiting for <w>: those in memory and those kept in the state
 * store only, beyond the memory cap (sluice_webhook_queue). */
size_t webhook_waiting(const struct webhook *w);
/* Of those in memory, the alerts that only memory holds (no state store, or one that
 * could not take them): what stopping now would lose. <stopping>: also those
 * whose row waits for a commit (after store_sync(), one that failed: a stop
 * loses them; in a run a later commit writes them). */
size_t webhook_unstored(const struct webhook *w, bool stopping);
/* Names those on standard error, if any, as lost <when> ("at exit"). */
void webhook_say_lost(const struct webhook *w, const char *when, bool stopping);
uint64_t webhook_delivered(const struct webhook *w);
uint64_t webhook_failures(const struct webhook *w);
/* Alerts dropped because the memory queue was full (in alerts or bytes) and
 * there is no store, or over SINK_WEBHOOK_STORED_MAX waiting with one. */
uint64_t webhook_dropped(const struct webhook *w);
/* The <n> of webhook_set_listing() (1 until it is called). */
unsigned webhook_listing(const struct webhook *w);
/* A request of <w>'s is in flight: sent, or being sent, not yet answered. */
bool webhook_in_flight(const struct webhook *w);
/* A reload took <w> out of the policy while webhook_in_flight(): the
 * attempt is let finish (within its SINK_WEBHOOK_TIMEOUT_S deadline), its
 * answer recorded (a 2xx deletes the alert's row, so that a policy naming
 * the sink again does not send it twice), and it is not retried. Memory
 * lets go of the alerts behind it at once (those in no store are told
 * lost); no new alert may be given to <w>. Once the attempt is over,
 * <over>(w, arg) is called from the loop, which must webhook_free() <w>
 * (or webhook_revive() it). Standard error says what became of the alert. */
void webhook_retire(struct webhook *w, void (*over)(struct webhook *w, void *arg), void *arg);
/* A reload names a retired sink's URL (and listing) again before <over>
 * was called: it goes on as it was, its attempt's answer counting as any,
 * its stored alerts read back behind the one it holds. */
void webhook_revive(struct webhook *w);
/* The gateway stops: from now on <w> starts no attempt while every alert
 * it holds is in the state store (the next start sends them); the one in
 * flight goes on, and one that only memory holds is still sent. */
void webhook_stopping(struct webhook *w);
/* Frees <w>; what is queued stays in the store. Accepts NULL. */
void webhook_free(struct webhook *w);

#endif
