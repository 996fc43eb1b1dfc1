/* coarse_clock: preloaded into sluice by test_check.py, the wall clock a
 * tick into a new second as glibc shows it: clock_gettime(CLOCK_REALTIME)
 * says SLUICE_TEST_COARSE_AT (Unix seconds) and 1 ms, while time(), which
 * glibc answers from the kernel's coarse clock that turns only at the next
 * tick, still says the second before. The other clocks are left alone.
 * Without SLUICE_TEST_COARSE_AT both are the real ones. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

/* The second the variable names, or -1 when it is unset. */
static long long coarse_at(void)
{
    const char *s = getenv("SLUICE_TEST_COARSE_AT");
    return s != NULL ? atoll(s) : -1;
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    long long at = coarse_at();
    if (clk == CLOCK_REALTIME && at >= 0) {
        ts->tv_sec = (time_t)at;
        ts->tv_nsec = 1000000;
        return 0;
    }
    if (real == NULL)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    return real(clk, ts);
}

time_t time(time_t *out)
{
    struct timespec ts;
    long long at = coarse_at();
    time_t t = at >= 0 ? (time_t)(at - 1) : (clock_gettime(CLOCK_REALTIME, &ts), ts.tv_sec);
    if (out != NULL)
        *out = t;
    return t;
}
