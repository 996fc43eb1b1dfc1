/* quiet_thread: helper threads that take no signal (quiet_thread.h). */
#include "util/quiet_thread.h"

#include <signal.h>

int quiet_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    /* A new thread inherits its creator's mask: block everything around
     * the create, then put the creator's back. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return e;
}
