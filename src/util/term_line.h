/* term_line: a message to a terminal starts on a line of its own.
 *
 * `sluice run`'s summary follows the command's last output on the same
 * terminal, and a command whose last output had no line end (`printf
 * done`, a prompt left behind by a program killed) had the summary
 * continue its line: "donesluice run: exit 0; ...". run cannot know that
 * last byte: the command writes to the terminal itself, not through run
 * (a terminal is passed to the box as it came: its ioctls, job control,
 * the command's own isatty()). Nor does run ask the terminal where its
 * cursor is (ESC[6n): the answer comes on the terminal's input, among what
 * the user typed ahead, which the next program would lose.
 *
 * The terminal answers the question itself, as zsh's PROMPT_SP has it:
 * as many spaces as the line is wide, then a carriage return. Where the
 * cursor was at a line's start, the spaces fill that line and leave the
 * cursor at its last column, its wrap deferred (as every VT100-like
 * terminal does: xterm, VTE, the Linux console, tmux, screen), and the
 * carriage return takes it back to the start of the same line: nothing
 * moves. Anywhere else they run past the line's end onto the next one,
 * and the carriage return leaves the cursor at that line's start. An
 * erase to the line's end (ESC[K) then clears the spaces. A terminal
 * that does not say its width (TIOCGWINSZ: 0 columns, a serial line not
 * set up) gets nothing of this: the message starts where the cursor is,
 * as before. */
#ifndef SLUICE_UTIL_TERM_LINE_H
#define SLUICE_UTIL_TERM_LINE_H

#include <stdio.h>

/* When <f> (whose descriptor is <fd>) is a terminal of known width, moves
 * its cursor to the start of a line with nothing after it: the line it is
 * on when it is at its start, else the next. Writes nothing else. */
void term_line_fresh(FILE *f, int fd);

#endif
