/* seccomp_tty: the ioctls that type into a terminal or change what it
 * shows, refused by every seccomp filter sluice builds (the box's in
 * box/seccomp.c, the gateway's in gate/lockdown.c). A process that shares
 * the terminal of a user's shell (a box's command, a gateway started as
 * root that serves as --user) could otherwise type a command line that
 * the shell runs once the process exits (TIOCSTI), or leave the console
 * in a state the shell then runs in. */
#ifndef SLUICE_UTIL_SECCOMP_TTY_H
#define SLUICE_UTIL_SECCOMP_TTY_H

#include <seccomp.h>

/* Adds to <ctx> the rules that make ioctl() fail with EPERM for TIOCSTI,
 * TIOCLINUX, TIOCSETD, TIOCEXCL, TCXONC's TCOOFF and a virtual console's
 * ioctls that change what its keys type or its screen shows or which
 * console is shown (the request compared in its low 32 bits). Reads stay
 * allowed. Returns 0, or libseccomp's negative error. */
int seccomp_refuse_tty_ioctls(scmp_filter_ctx ctx);

#endif
