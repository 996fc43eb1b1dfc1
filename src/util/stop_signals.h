/* stop_signals: SIGTERM, SIGINT, SIGHUP and SIGUSR1 held, never lost, while
 * serve starts.
 *
 * serve blocks them while it starts (loading a large state store takes
 * seconds), so that one sent meanwhile stops or reloads it (or reopens its
 * logs) as soon as its handlers are in place, and gives them a disposition
 * that does not kill:
 * libevent puts back the disposition it found when the gateway frees its
 * signal events, and a second SIGTERM that arrives while the logs are
 * flushed at exit must not kill the process half way through. SIG_IGN
 * would do the second, but setting SIG_IGN discards a signal already
 * pending (POSIX): one that came between the block and the SIG_IGN was
 * lost. A handler that does nothing keeps it pending. */
#ifndef SLUICE_UTIL_STOP_SIGNALS_H
#define SLUICE_UTIL_STOP_SIGNALS_H

#include <signal.h>

/* Blocks SIGTERM, SIGINT, SIGHUP and SIGUSR1 (the mask before into <old>) and gives
 * each a handler that does nothing. */
void stop_signals_hold(sigset_t *old);

#endif
