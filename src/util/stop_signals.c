/* stop_signals: SIGTERM, SIGINT, SIGHUP and SIGUSR1 held while serve starts (see
 * stop_signals.h). */
#include "util/stop_signals.h"

#include <stddef.h>

static void nothing(int sig)
{
    (void)sig;
}

void stop_signals_hold(sigset_t *old)
{
    static const int stops[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
        sigaddset(&set, stops[i]);
    sigprocmask(SIG_BLOCK, &set, old);
    struct sigaction sa = {.sa_handler = nothing, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
        sigaction(stops[i], &sa, NULL);
}
