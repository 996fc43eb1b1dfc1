/* seccomp_tty: the terminal ioctls no filtered process may make
 * (seccomp_tty.h). */
#include "util/seccomp_tty.h"

#include <errno.h>
#include <linux/kd.h>
#include <linux/vt.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <termios.h>

/* The terminal: a box's command stays in run's session and foreground
 * process group (a terminal's ^C reaches it directly), and serve's gateway
 * in the session of the shell that started it, root's before --user. On a
 * Linux virtual console (/dev/ttyN) the process whose controlling terminal
 * it is needs no capability for most of the console's ioctls (vt_ioctl()'s
 * "perm": owner of the tty, or CAP_SYS_TTY_CONFIG). Refused, with EPERM,
 * are those that type into the terminal, change what its keys type or what
 * its screen shows, or take the console over: all of them act on the
 * console itself, so what they do outlasts the process, and the user's
 * shell, unfiltered, reads and shows through what it left. By request,
 * compared in its low 32 bits (the kernel reads an unsigned int); numbers
 * an older or newer kernel does not know cost nothing. */
static const unsigned long tty_refused[] = {
    /* typing into the terminal: TIOCSTI pushes a command line into the
     * input queue, which the shell runs once run exits (bubblewrap's
     * CVE-2017-5226); TIOCLINUX pastes a console's selection the same way
     * (TIOCL_SETSEL/PASTESEL needed no capability before Linux 6.7). Its
     * subcode lies in memory the filter cannot read, so it is refused
     * whole, its read-only subcodes with it. */
    TIOCSTI,
    TIOCLINUX,
    /* any terminal's line discipline (TIOCSETD): the terminal keeps it
     * after run exits, and a process of its foreground group needs no
     * capability for those the kernel has or loads on demand: N_NULL
     * throws away every key the user types and gives the shell nothing
     * to read, for good (no `reset` reaches it); the others (N_HDLC and
     * the like) are kernel code a command has no use for */
    TIOCSETD,
    /* exclusive mode (TIOCEXCL), which the terminal keeps after run exits:
     * every later open of it but by CAP_SYS_ADMIN fails with EBUSY, so the
     * user's ssh or gpg asking a passphrase on /dev/tty, or an editor or
     * pager that opens the terminal again, fail (TIOCNXCL, which ends it,
     * stays) */
    TIOCEXCL,
    /* what keys type: KDSKBENT binds a key to an action (Enter to a
     * function key), KDSKBSENT sets the string a function key types,
     * KDSKBDIACR and KDSKBDIACRUC what a dead key followed by a key types,
     * KDSKBMETA what Alt and a key type (no permission check at all),
     * KDSKBMODE raw scancodes or nothing at all (K_RAW, K_OFF: the shell
     * gets garbage, or no keyboard), KDSKBLED the lock flags (Caps Lock on,
     * for now and as the console's default) */
    KDSKBENT,
    KDSKBSENT,
    KDSKBDIACR,
    KDSKBDIACRUC,
    KDSKBMETA,
    KDSKBMODE,
    KDSKBLED,
    /* what the screen shows: KDSETMODE (KD_GRAPHICS: the console draws no
     * more text), fonts (KDFONTOP, whose get and set operations lie in
     * memory the filter cannot read; PIO_FONT, PIO_FONTX, PIO_FONTRESET),
     * the maps from characters to glyphs (PIO_SCRNMAP, PIO_UNISCRNMAP,
     * PIO_UNIMAP, PIO_UNIMAPCLR) and the palette (PIO_CMAP): with them one
     * glyph can stand for another, or text be drawn in its background's
     * colour, so that what the user reads is not what the shell gets;
     * KDSETLED fixes the keyboard lights, which then show a lock state
     * that is not the console's; KIOCSOUND starts a tone that sounds until
     * someone stops it */
    KDSETMODE,
    KDFONTOP,
    PIO_FONT,
    PIO_FONTX,
    PIO_FONTRESET,
    PIO_SCRNMAP,
    PIO_UNISCRNMAP,
    PIO_UNIMAP,
    PIO_UNIMAPCLR,
    PIO_CMAP,
    KDSETLED,
    KIOCSOUND,
    /* the console itself: VT_ACTIVATE and VT_SETACTIVATE switch the
     * screen to another console, VT_SETMODE (VT_PROCESS) makes every
     * switch away wait for the command's answer (VT_RELDISP, refused
     * with it), so that while it runs the user cannot leave the console
     * (one showing what the command drew, a login prompt, say), VT_RESIZE
     * and VT_RESIZEX resize every console */
    VT_ACTIVATE,
    VT_SETACTIVATE,
    VT_SETMODE,
    VT_RELDISP,
    VT_RESIZE,
    VT_RESIZEX,
};
/* Left allowed: the terminal's modes (tcsetattr(), TIOCSWINSZ: editors
 * and prompts need them, and the shell or `reset` sets them back); every
 * read (TIOCGETD, KDGKB*, KDGETMODE, KDGETLED, GIO_*, VT_GET*,
 * VT_OPENQRY; programs query their terminal); KDMKTONE (a tone that stops
 * by itself within 65 s); VT_WAITACTIVE and VT_WAITEVENT (they only wait);
 * VT_DISALLOCATE (it frees only consoles no one has open and the kernel
 * makes again at the next open); and those the kernel refuses a process
 * without capabilities anyway: KDSIGACCEPT (CAP_KILL), KDSETKEYCODE,
 * KDKBDREP, VT_LOCKSWITCH and VT_UNLOCKSWITCH (CAP_SYS_TTY_CONFIG),
 * KDADDIO, KDDELIO, KDENABIO and KDDISABIO (ioperm(): CAP_SYS_RAWIO). */

/* tcflow(TCOOFF), ioctl(TCXONC, TCOOFF): the terminal's output stops, and
 * stays stopped after the process is gone; only TCOON starts it again, not
 * the user's ^Q (the kernel's start_tty() leaves an output stopped so), so
 * the shell's next prompt, a write to the terminal, waits for ever. The
 * action is the third argument's value, compared whole (the kernel reads
 * an unsigned long: TCOOFF with bits above it is EINVAL); TCOON, TCIOFF
 * and TCION stay. */
static int refuse_output_off(scmp_filter_ctx ctx)
{
    const struct scmp_arg_cmp cmp[2] = {
        {.arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = TCXONC},
        {.arg = 2, .op = SCMP_CMP_EQ, .datum_a = TCOOFF},
    };
    return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 2, cmp);
}

int seccomp_refuse_tty_ioctls(scmp_filter_ctx ctx)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof(tty_refused) / sizeof(tty_refused[0]) && rc == 0; i++) {
        const struct scmp_arg_cmp is_req = {
            .arg = 1, .op = SCMP_CMP_MASKED_EQ, .datum_a = 0xffffffffu, .datum_b = tty_refused[i]};
        rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, &is_req);
    }
    if (rc == 0)
        rc = refuse_output_off(ctx);
    return rc;
}
