/* term_line: a message to a terminal starts on a line of its own
 * (term_line.h). */
#include "util/term_line.h"

#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* The widest line filled: a wider terminal (a tiny font on a large
 * screen) is left as it is, rather than sent that many spaces. */
#define TERM_LINE_MAX_COLS 4096
/* back to the line's start, the spaces after it erased */
#define TERM_LINE_BACK "\r\x1b[K"

void term_line_fresh(FILE *f, int fd)
{
    struct winsize ws;
    if (!isatty(fd) || ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 ||
        ws.ws_col > TERM_LINE_MAX_COLS)
        return;
    char line[TERM_LINE_MAX_COLS + sizeof(TERM_LINE_BACK)];
    memset(line, ' ', ws.ws_col);
    memcpy(line + ws.ws_col, TERM_LINE_BACK, sizeof(TERM_LINE_BACK) - 1);
    /* one write: standard error, unbuffered, would make one per space */
    fwrite(line, 1, ws.ws_col + sizeof(TERM_LINE_BACK) - 1, f);
}
