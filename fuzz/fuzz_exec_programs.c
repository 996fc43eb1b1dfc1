/* fuzz_exec_programs: the look at a policy's exec alert programs
 * (policy/exec_programs.h), over a tree the harness makes once in a
 * temporary folder: a program, a file that is no program, one only its
 * owner (root) may run, a folder, a FIFO, a socket, a device, links to
 * them, a dangling link, a link loop, a folder only root may search. The
 * input is sinks, one a line: a kind byte (odd: a webhook, which is not
 * looked at) and a path under the tree (any bytes, "../" and all). The
 * first byte's low bit names a user the programs run as (65534, looked
 * at only as root). Invariants: as its own user, a program is warned of
 * exactly when stat() and the execute right (as execve() judges them) say
 * it cannot be run, with that reason; run as another user, every program
 * the loader cannot run is warned of too, and any uid a warning names is
 * that user's. A look that takes longer than EXEC_LOOK_MS (a loaded
 * machine) is said so, for that sink and every exec sink after it. Each
 * warning is counted in absent_programs, names its sink
 * (alerts.sinks[index]) and line, shows the path without a control byte;
 * the look leaves no child process and no open descriptor behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "policy/exec_programs.h"
#include "policy/model.h"
#include "util/diag.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SINKS   8
#define PATH_MAX_IN 200
#define OTHER_UID   65534

static char root[64]; /* the tree, made once */

static void check(int cond)
{
    if (!cond)
        abort();
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    (void)remove(path); /* what cannot go stays: a temporary folder */
    return 0;
}

/* The tree goes when the process ends. */
static void remove_tree(void)
{
    (void)nftw(root, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void make_file(const char *name, mode_t mode)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", root, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    check(fd >= 0);
    check(write(fd, "#!/bin/sh\n", 10) == 10);
    close(fd);
    check(chmod(p, mode) == 0);
}

static void make_link(const char *name, const char *to)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", root, name);
    check(symlink(to, p) == 0);
}

static void make_tree(void)
{
    char p[128];
    snprintf(root, sizeof(root), "/tmp/fuzz_exec_programs.XXXXXX");
    check(mkdtemp(root) != NULL);
    check(chmod(root, 0755) == 0);
    make_file("x", 0755);
    make_file("r", 0644);
    make_file("o", 0744); /* the owner's program only */
    snprintf(p, sizeof(p), "%s/d", root);
    check(mkdir(p, 0755) == 0);
    make_file("d/x", 0755);
    snprintf(p, sizeof(p), "%s/h", root);
    check(mkdir(p, 0700) == 0); /* searchable by its owner only */
    make_file("h/x", 0755);
    snprintf(p, sizeof(p), "%s/f", root);
    check(mkfifo(p, 0755) == 0);
    snprintf(p, sizeof(p), "%s/s", root);
    (void)mknod(p, S_IFSOCK | 0755, 0);
    snprintf(p, sizeof(p), "%s/n", root);
    (void)mknod(p, S_IFCHR | 0755, makedev(1, 3)); /* root only: /dev/null */
    make_link("lx", "x");
    make_link("lr", "r");
    make_link("ld", "d");
    make_link("dangling", "nothing");
    make_link("loop", "loop");
    make_link("lh", "h/x");
    atexit(remove_tree);
}

/* Open descriptors of this process. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    check(d != NULL);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* What the loader's own user would be told of <path>: NULL when it can run
 * it, else a phrase the warning holds. */
static const char *own_reason(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == EACCES ? "is not searchable by uid" : strerror(errno);
    if (S_ISDIR(st.st_mode))
        return "not a regular file: a directory";
    if (S_ISFIFO(st.st_mode))
        return "not a regular file: a FIFO";
    if (S_ISSOCK(st.st_mode))
        return "not a regular file: a socket";
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
        return "not a regular file: a device";
    if (!S_ISREG(st.st_mode))
        return "not a regular file";
    if (faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) != 0)
        return "not executable by uid";
    return NULL;
}

/* The reason a warning <m> gives, past the path it shows (which may hold
 * any text): from its last " cannot be run here (". */
static const char *reason_of(const char *m)
{
    const char *r = NULL;
    for (const char *t = strstr(m, " cannot be run here ("); t != NULL;
         t = strstr(t + 1, " cannot be run here ("))
        r = t;
    check(r != NULL);
    return r;
}

/* Whether every "uid N" in <m> names <uid>. */
static bool uids_are(const char *m, long uid)
{
    for (const char *u = strstr(m, "uid "); u != NULL; u = strstr(u + 4, "uid "))
        if (strtol(u + 4, NULL, 10) != uid)
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sink sinks[MAX_SINKS];
    static struct policy p;
    if (root[0] == '\0')
        make_tree();
    if (size < 1 || size > MAX_SINKS * (PATH_MAX_IN + 2) + 1)
        return 0;
    bool other = (data[0] & 1) && geteuid() == 0;
    policy_exec_programs_run_as(other ? OTHER_UID : 0, other ? OTHER_UID : 0);
    size_t n = 0, at = 1;
    while (at < size && n < MAX_SINKS) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl != NULL ? (size_t)(nl - data) : size;
        size_t plen = end - at > 1 ? end - at - 1 : 0;
        if (plen > PATH_MAX_IN)
            plen = PATH_MAX_IN;
        struct sink *s = &sinks[n];
        s->kind = end > at && (data[at] & 1) ? SINK_WEBHOOK : SINK_EXEC;
        s->target = malloc(sizeof(root) + 1 + plen + 1);
        check(s->target != NULL);
        int k = snprintf(s->target, sizeof(root) + 1, "%s/", root);
        if (plen > 0)
            memcpy(s->target + k, data + at + 1, plen);
        s->target[k + plen] = '\0'; /* cut at a NUL of the input, as a C string */
        s->line = (int)(10 + n);
        s->index = n * 3 + 1;
        n++;
        at = end + 1;
    }
    p.alerts.sinks = sinks;
    p.alerts.nsinks = n;
    int fds = open_fds();
    struct diag d;
    diag_init(&d, "fuzz.yaml");
    policy_check_exec_programs(&p, &d);
    check(open_fds() == fds);
    check(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
    check(d.errors == 0 && d.warnings == d.count && d.absent_programs == d.count);
    size_t e = 0, lates = 0;
    for (size_t i = 0; i < n; i++) {
        const struct sink *s = &sinks[i];
        const char *own = s->kind == SINK_EXEC ? own_reason(s->target) : NULL;
        bool warned = false;
        if (e < d.count && s->kind == SINK_EXEC) {
            const struct diag_entry *w = &d.entries[e];
            char field[48];
            snprintf(field, sizeof(field), "alerts.sinks[%zu]", s->index);
            /* a warning of a later sink has its own field */
            if (strcmp(w->field, field) == 0) {
                warned = true;
                e++;
                check(w->level == DIAG_WARNING && w->line == s->line);
                check(strncmp(w->message, "exec program ", 13) == 0);
                for (const char *c = w->message; *c != '\0'; c++)
                    check((unsigned char)*c >= 0x20 && *c != 0x7f);
                const char *why = reason_of(w->message);
                /* a look that took longer than EXEC_LOOK_MS (a loaded
                 * machine) is said so, whatever the program */
                bool late = strstr(why, "did not answer within") != NULL;
                if (late)
                    lates++;
                if (!other && !late)
                    check(own != NULL && strstr(why, own) != NULL);
                check(uids_are(why, other ? OTHER_UID : (long)geteuid()));
            }
        }
        if (!other && s->kind == SINK_EXEC)
            check(lates > 0 ? warned : warned == (own != NULL));
        else if (own != NULL)
            check(warned); /* what the loader cannot run, the user cannot */
        free(sinks[i].target);
        sinks[i].target = NULL;
    }
    check(e == d.count);
    diag_free(&d);
    return 0;
}
