/* std_fds: descriptors 0, 1 and 2 open before sluice opens anything.
 *
 * A program started with one of them closed (`2>&-`, a supervisor that
 * closes them) hands that number to the first descriptor it opens: for
 * serve, the event loop's epoll instance, a listener or the decision log.
 * Its error messages would then be written into that descriptor, and exec
 * alert programs would get it as their output. As OpenSSH's
 * sanitise_stdfd() does, each one that is closed is opened on /dev/null
 * first thing in main().
 *
 * Owns: which of them it found closed (process-wide, set by
 * std_fds_ensure(), read by std_fds_closed()). */
#ifndef SLUICE_UTIL_STD_FDS_H
#define SLUICE_UTIL_STD_FDS_H

/* Opens /dev/null on each of descriptors 0-2 that is closed. Returns 0, or
 * -1 with errno set when /dev/null cannot be opened (the caller cannot say
 * so on a closed standard error: it exits). */
int std_fds_ensure(void);

/* Which of descriptors 0-2 std_fds_ensure() found closed (and opened on
 * /dev/null): bit N for descriptor N. */
unsigned std_fds_closed(void);

#endif
