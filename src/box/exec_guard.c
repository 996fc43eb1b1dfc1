#include "box/exec_guard.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The program and its interpreters: the kernel follows at most 4 scripts'
 * interpreters in a row (BINPRM_MAX_RECURSION). */
#define EXEC_GUARD_LEVELS 5

/* The interpreter a script at <path> names on its "#!" line, into <interp>;
 * false when it is no script (or cannot be read: then it cannot be run). */
static bool script_interpreter(const char *path, char *interp, size_t len)
{
    char head[256];
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    ssize_t n = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                    ? read(fd, head, sizeof(head) - 1)
                    : -1;
    if (fd >= 0)
        close(fd);
    if (n < 2 || head[0] != '#' || head[1] != '!')
        return false;
    head[n] = '\0';
    const char *s = head + 2 + strspn(head + 2, " \t");
    size_t m = strcspn(s, " \t\n");
    if (m == 0 || m >= len || (s[m] == '\0' && n == (ssize_t)sizeof(head) - 1))
        return false; /* none, or longer than the kernel reads */
    memcpy(interp, s, m);
    interp[m] = '\0';
    return true;
}

enum exec_guard_verdict exec_guard_check(const struct box_view *v, const char *prog,
                                         struct exec_guard_finding *f)
{
    char interp[PATH_MAX];
    snprintf(f->file, sizeof(f->file), "%s", prog);
    for (f->level = 0; f->level < EXEC_GUARD_LEVELS; f->level++) {
        if (reach_can_change(v, f->file, &f->root))
            return EXEC_GUARD_CHANGEABLE;
        if (hardlinks_other_name(v, f->file, &f->links)) {
            f->root = f->links.root;
            return EXEC_GUARD_OTHER_NAMES;
        }
        if (!script_interpreter(f->file, interp, sizeof(interp)))
            break;
        /* a relative one is found from the gateway's working directory,
         * "/"; one too long to be found is never run */
        int w = snprintf(f->file, sizeof(f->file), "%s%s", interp[0] == '/' ? "" : "/", interp);
        if (w < 0 || (size_t)w >= sizeof(f->file))
            break;
    }
    return EXEC_GUARD_SAFE;
}
