/* Unit tests for util/stop_signals.c: a stop signal that arrives while
 * serve starts is held, not lost, and kills nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>

#include "util/stop_signals.h"

/* A SIGTERM already pending when the handlers change (it came between the
 * block and them) is still pending after: SIG_IGN, which serve set there,
 * discarded it. Let through, it kills nothing. */
static void pending_stop_is_kept(void **state)
{
    (void)state;
    sigset_t term, before, old, pending;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &before);
    raise(SIGTERM);
    stop_signals_hold(&old);
    sigpending(&pending);
    assert_true(sigismember(&pending, SIGTERM));
    assert_true(sigismember(&old, SIGTERM)); /* the mask before: ours */
    raise(SIGHUP);
    raise(SIGINT);
    sigprocmask(SIG_SETMASK, &before, NULL); /* delivered: this process lives on */
    sigpending(&pending);
    assert_false(sigismember(&pending, SIGTERM));
    assert_false(sigismember(&pending, SIGHUP));
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pending_stop_is_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
