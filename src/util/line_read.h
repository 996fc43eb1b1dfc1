/* line_read: one line of a stream, no longer than the caller allows.
 *
 * getline() grows its buffer to whatever the line holds: a file of one
 * multi-gigabyte line, which anyone who can append to it may write, takes
 * that much memory. Here a line over the bound is read through to its end
 * and its bytes dropped, and the caller is told it was. */
#ifndef SLUICE_UTIL_LINE_READ_H
#define SLUICE_UTIL_LINE_READ_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

/* Reads the next line of <f>, its '\n' included (the last one may have
 * none), into *<buf> of *<cap> bytes, grown as getline() grows it (the
 * caller frees it) but never past <max> + 1 bytes (<max> SIZE_MAX: no
 * bound but <budget>). Returns the bytes the line took in the stream, or
 * -1 at its end (or on a read error, or when memory runs out). *<kept>
 * is the length held in *<buf>, NUL-terminated: the whole line, or 0 when
 * it was longer than <max> bytes (*<over> is then true and the line's
 * bytes are skipped). A line over <max> is read through
 * to its end, but not past <budget> bytes in all: the rest of a file of one
 * endless line is left unread (what the caller has left of a cap on what it
 * reads). */
ssize_t line_read(FILE *f, char **buf, size_t *cap, size_t max, size_t budget, size_t *kept,
                  bool *over);

#endif
