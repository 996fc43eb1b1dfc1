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
 * error (stderr_relay_original()), not the pipe. All of it is process-wide
 * state: one relay per process, started and stopped on the main thread. */
#ifndef SLUICE_UTIL_STDERR_RELAY_H
#define SLUICE_UTIL_STDERR_RELAY_H

#include <stddef.h>
#include <stdint.h>

/* How long a gateway's exit waits for the relay to copy what it holds. */
#define STDERR_RELAY_STOP_MS 2000

/* Starts the relay. Returns 0, or -1 with a message in <err> and standard
 * error left as it was (then writes to it may block, as before). An exit()
 * while it runs (a fatal error) gives the thread STDERR_RELAY_STOP_MS to
 * copy what it holds, as stderr_relay_stop() does (an atexit handler). */
int stderr_relay_start(char *err, size_t errlen);

/* Stops the relay: descriptor 2 and stderr are the original ones again,
 * and what the pipe still holds is copied out, waiting at most <ms>
 * milliseconds (a standard error nobody reads loses it). Does nothing when
 * the relay was not started. */
void stderr_relay_stop(unsigned ms);

/* The original standard error while the relay runs, else STDERR_FILENO:
 * what a child process should have as its standard error. Any thread may
 * ask; one that asks as the relay stops gets either, never -1 (the number
 * it got just before may be closed by the time it uses it: EBADF). */
int stderr_relay_original(void);

/* Lines dropped so far because the pipe was full (since the start). */
uint64_t stderr_relay_dropped(void);

/* The length of the first piece of <buf> (<n> bytes) to write to a pipe
 * shared with other writers: whole lines, at most <max> bytes (PIPE_BUF,
 * which a pipe writes atomically), or, when the first line alone is longer,
 * that line (it cannot be atomic anyway). 0 when <buf> holds no newline
 * (a line not yet complete). */
size_t stderr_relay_piece(const char *buf, size_t n, size_t max);

#endif
