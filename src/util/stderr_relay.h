/* stderr_relay: standard error that never blocks the event loop.
 *
 * A gateway writes its messages to standard error from the loop thread
 * (fprintf(stderr, ...)). When standard error is a pipe or socket whose
 * reader is alive but does not read (a stalled supervisor or log shipper),
 * a blocking write would freeze the gateway once the reader's buffer is
 * full. The relay puts a pipe of its own between the process and the
 * standard error it was started with:
 *
 *   - descriptor 2 becomes that pipe's write end, non-blocking (a new open
 *     file description: the one the process inherited, which a terminal
 *     may share with the user's shell, is never made non-blocking);
 *   - stderr becomes a stream that writes each line whole (pieces of at
 *     most PIPE_BUF bytes, atomic on a pipe) and, when the pipe is full,
 *     drops what does not fit and counts its lines, without the stream's
 *     error flag ever being set (a line longer than PIPE_BUF the pipe took
 *     the start of loses the rest, and that start still ends with a
 *     newline: nothing that follows is glued onto it);
 *   - a thread (every signal blocked) copies the pipe to the original
 *     standard error with blocking writes, line by line, and once a write
 *     goes through again says how many lines were dropped.
 *
 * Programs the gateway starts (exec alert sinks) get the original standard
 * error (stderr_relay_hold()), not the pipe. All of it is process-wide
 * state: one relay per process, started and stopped on the main thread. */
#ifndef SLUICE_UTIL_STDERR_RELAY_H
#define SLUICE_UTIL_STDERR_RELAY_H

#include <stddef.h>
#include <stdint.h>

/* How long a gateway's exit waits for the relay to copy what it holds. */
#define STDERR_RELAY_STOP_MS 2000

/* Starts the relay. Returns 0, or -1 with a message in <err> and standard
 * error left as it was (then writes to it may block, as before); -1 too
 * while the thread of a relay whose stop timed out still lives. An exit()
 * while it runs (a fatal error) gives the thread STDERR_RELAY_STOP_MS to
 * copy what it holds, as stderr_relay_stop() does (an atexit handler). */
int stderr_relay_start(char *err, size_t errlen);

/* Stops the relay: descriptor 2 and stderr are the original ones again,
 * and what the pipe still holds is copied out, waiting at most <ms>
 * milliseconds (a standard error nobody reads loses it). Does nothing when
 * the relay was not started. */
void stderr_relay_stop(unsigned ms);

/* The original standard error while the relay runs, else STDERR_FILENO.
 * Any thread may ask; one that asks as the relay stops gets either, never
 * -1. Only to tell whether the relay runs: a number to use comes from
 * stderr_relay_hold(), which the stop may close once the caller is done. */
int stderr_relay_original(void);

/* As stderr_relay_original(), what a child process should have as its
 * standard error, held open for the caller until its
 * stderr_relay_release() (one for each hold, on any thread): a stop
 * meanwhile waits for the release, within its <ms>, before it closes the
 * descriptor, and leaves it open to the process's exit when the time is
 * up. Before, the stop closed it under a thread that had just read it,
 * which then used a closed number, or another file that had taken it. */
int stderr_relay_hold(void);
void stderr_relay_release(void);

/* Lines dropped so far because the pipe was full (since the start). */
uint64_t stderr_relay_dropped(void);

/* The length of the first piece of <buf> (<n> bytes) to write to a pipe
 * shared with other writers: whole lines, at most <max> bytes (PIPE_BUF,
 * which a pipe writes atomically), or, when the first line alone is longer,
 * that line (it cannot be atomic anyway). 0 when <buf> holds no newline
 * (a line not yet complete). */
size_t stderr_relay_piece(const char *buf, size_t n, size_t max);

#endif
