/* sluice audit: audits by topic. The only topic so far is `mounts`:
 *
 *   sluice audit mounts [--pid PID | --mountinfo FILE] [--justify FILE] [--format text|json]
 *
 * lists every writable mount of a process's mount namespace (from
 * /proc/PID/mountinfo, default self, or a saved copy) and checks each
 * against a justification file of `PATH: reason` lines. Exit 0 when every
 * writable mount is justified, 1 when some are not, 2 on a usage error, an
 * unreadable or malformed file (an empty mountinfo among them: a mount
 * namespace has at least its root; each bad justify line is reported as
 * FILE:LINE: message). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "box/mountinfo.h"
#include "cli/commands.h"
#include "util/text_json.h"
#include "util/xalloc.h"

/* How long a FIFO, pipe or terminal may leave a read waiting for its next
 * bytes (or its end) before read_all() gives up. */
#define READ_WAIT_MS 10000

/* Waits up to READ_WAIT_MS for <fd> to have bytes or an end. Returns 1, or
 * 0 when nothing came (errno ETIMEDOUT), -1 when poll() failed. Before a
 * FIFO's writer comes, Linux reports neither (a non-blocking read then
 * reads an end): the wait is for the writer too. */
static int wait_readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n;
    while ((n = poll(&pfd, 1, READ_WAIT_MS)) < 0 && errno == EINTR)
        ;
    if (n == 0)
        errno = ETIMEDOUT;
    return n;
}

/* Reads a whole file, at most <max> bytes. Returns 0, or -1 with errno
 * (EFBIG when larger than <max>, ETIMEDOUT when a FIFO, a pipe or a
 * terminal gave nothing for READ_WAIT_MS). Opened without waiting: a
 * FIFO no one writes to held open() for ever, a terminal no one types into
 * the read. The caller frees <*out>. */
static int read_all(const char *path, size_t max, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == EWOULDBLOCK) /* a lease: a wait the kernel bounds */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    bool waits = !S_ISREG(st.st_mode); /* a regular file's reads never wait */
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL) {
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(buf);
                close(fd);
                errno = EFBIG;
                return -1;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                close(fd);
                errno = ENOMEM;
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = waits && wait_readable(fd) <= 0 ? -1 : read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR || (waits && errno == EAGAIN))
                continue;
            int e = errno;
            free(buf);
            close(fd);
            errno = e;
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max) {
        free(buf);
        errno = EFBIG;
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* Tells on standard error why the file <path> could not be read:
 * read_all()'s errno <e> for a file of at most <max> bytes ("File too
 * large" named no limit). */
static void tell_unread(const char *path, int e, size_t max)
{
    char *shown = text_shown(path); /* the caller's name: it could hold a line end */
    if (e == EFBIG)
        fprintf(stderr, "sluice audit: %s: larger than %zu bytes\n", shown, max);
    else if (e == ETIMEDOUT)
        fprintf(stderr,
                "sluice audit: %s: nothing came to read for 10 s (a FIFO no one writes to, or "
                "a terminal no one types into?)\n",
                shown);
    else
        fprintf(stderr, "sluice audit: %s: %s\n", shown, strerror(e));
    free(shown);
}

static const struct command *const self = &cmd_audit;

/* One writable mount's line of the text report. */
static void print_mount(const struct mountinfo_entry *e, const struct justify_entry *j)
{
    char *mp = text_shown(e->mount_point), *fs = text_shown(e->fstype),
         *src = text_shown(e->source);
    char *more = text_shown(j != NULL ? j->reason : e->mount_opts);
    if (j != NULL)
        printf("justified    %s (%s %s): %s\n", mp, fs, src, more);
    else
        printf("UNJUSTIFIED  %s (%s %s, %s)\n", mp, fs, src, more);
    free(mp);
    free(fs);
    free(src);
    free(more);
}

struct mounts_args {
    const char *pid;
    const char *mountinfo;
    const char *justify;
    bool json;
};

static int mounts_parse_args(int argc, char **argv, struct mounts_args *a)
{
    static const struct option options[] = {
        {"pid", required_argument, NULL, 'p'},     {"mountinfo", required_argument, NULL, 'm'},
        {"justify", required_argument, NULL, 'j'}, {"format", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    opterr = 0;
    optind = 1;
    int c;
    unsigned seen = 0; /* each flag once: a second --pid audited it alone, silently */
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        int rc = command_option_once(self, c, options, NULL, &seen);
        if (rc != 0)
            return rc;
        switch (c) {
        case 'p':
            if (strcmp(optarg, "self") != 0) {
                size_t n = strlen(optarg);
                if (n == 0 || strspn(optarg, "0123456789") != n)
                    return command_arg_error(self, "--pid: ", optarg, " is not a process id");
                /* /proc names a process in plain decimal: 0001 is 1 */
                size_t zeros = strspn(optarg, "0");
                if (zeros == n)
                    zeros = n - 1;
                if (n - zeros > 10)
                    return command_arg_error(self, "--pid: ", optarg, " is not a process id");
                optarg += zeros;
            }
            a->pid = optarg;
            break;
        case 'm':
        case 'j':
            /* `--justify "$F"` with F unset: a file that could not be
             * read, ": No such file or directory", named neither */
            if (optarg[0] == '\0')
                return command_usage_error(self, "--%s needs a file, not an empty string",
                                           c == 'm' ? "mountinfo" : "justify");
            if (c == 'm')
                a->mountinfo = optarg;
            else
                a->justify = optarg;
            break;
        case 'f':
            if (strcmp(optarg, "json") == 0)
                a->json = true;
            else if (strcmp(optarg, "text") == 0)
                a->json = false;
            else
                return command_arg_error(self, "--format: ", optarg, " is not text or json");
            break;
        case 'h':
            command_help(self);
            return 1;
        default: /* ':' (a missing value) or an unknown option */
            return command_option_error(self, c, argv, options);
        }
    }
    if (optind < argc)
        return command_arg_error(self, "unexpected argument ", argv[optind], "");
    if (a->pid != NULL && a->mountinfo != NULL)
        return command_usage_error(self, "--pid and --mountinfo exclude each other");
    return 0;
}

struct report_ctx {
    const char *file;
};

static void report_bad_line(void *arg, unsigned line, const char *msg)
{
    const struct report_ctx *r = arg;
    fprintf(stderr, "error: %s:%u: %s\n", r->file, line, msg);
}

/* Tells why the mountinfo <path> of <a> could not be read (read_all()'s
 * errno <e>); returns EXIT_USAGE. A --pid whose /proc entry is missing
 * names no process: a usage error, as a malformed PID is (with the usage
 * line), where "/proc/PID/mountinfo: No such file or directory" named no
 * option; one whose mountinfo the kernel refuses with EINVAL has exited
 * (it has no mount namespace left: "Invalid argument" said neither); any
 * other failure names the file and the reason. */
static int mountinfo_unread(const struct mounts_args *a, const char *path, int e)
{
    if (a->pid != NULL && e == ENOENT) {
        char why[128];
        snprintf(why, sizeof(why), " names no process (there is no /proc/%s)", a->pid);
        return command_arg_error(self, "--pid: ", a->pid, why);
    }
    if (a->pid != NULL && e == EINVAL)
        return command_arg_error(self, "--pid: ", a->pid,
                                 " has exited (a zombie, or a process exiting): it has no mount "
                                 "namespace to audit");
    tell_unread(path, e, MOUNTINFO_MAX_BYTES);
    return EXIT_USAGE;
}

static int audit_mounts(int argc, char **argv)
{
    struct mounts_args a = {0};
    int rc = mounts_parse_args(argc, argv, &a);
    if (rc != 0)
        return rc == 1 ? EXIT_OK : rc;

    /* --mountinfo as given: a copy cut to a buffer's length named another
     * file, read without a word, when the path was longer */
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/%s/mountinfo", a.pid != NULL ? a.pid : "self");
    const char *path = a.mountinfo != NULL ? a.mountinfo : proc;

    /* The mountinfo first: a --pid that names no process is a usage
     * error, told before a --justify file is read. */
    char *data = NULL;
    size_t len = 0;
    if (read_all(path, MOUNTINFO_MAX_BYTES, &data, &len) < 0)
        return mountinfo_unread(&a, path, errno);
    struct mountinfo mi;
    char err[256];
    int parsed = mountinfo_parse(data, len, &mi, err, sizeof(err));
    free(data);
    if (parsed == 0 && mi.n == 0) { /* an empty copy, /dev/null: nothing read is no clean audit */
        snprintf(err, sizeof(err), "no mounts, where a mount namespace has at least its root");
        parsed = -1;
    }
    if (parsed < 0) {
        char *shown = text_shown(path); /* --mountinfo too: the caller's name */
        fprintf(stderr, "sluice audit: %s: %s\n", shown, err);
        free(shown);
        mountinfo_free(&mi);
        return EXIT_USAGE;
    }

    struct justify just = {0};
    if (a.justify != NULL) {
        char *jdata = NULL;
        size_t jlen = 0;
        /* the caller's name, escaped as in the warnings below: one holding
         * a line end or an escape byte would forge lines on the terminal */
        char *jf = text_shown(a.justify);
        int bad = read_all(a.justify, JUSTIFY_MAX_BYTES, &jdata, &jlen) < 0 ? 1 : 0;
        if (bad != 0) {
            tell_unread(a.justify, errno, JUSTIFY_MAX_BYTES);
        } else {
            struct report_ctx r = {jf};
            bad = justify_parse(jdata, jlen, &just, report_bad_line, &r);
            free(jdata);
            if (bad < 0)
                fprintf(stderr, "sluice audit: %s: too large or out of memory\n", jf);
        }
        free(jf);
        if (bad != 0) {
            justify_free(&just);
            mountinfo_free(&mi);
            return EXIT_USAGE;
        }
    }

    size_t nwritable = 0, nunjustified = 0;
    json_t *doc = NULL, *arr = NULL;
    if (a.json) {
        doc = json_object();
        arr = json_array();
        json_object_set_new(doc, "mountinfo", text_json(path));
        json_object_set_new(doc, "justify", a.justify ? text_json(a.justify) : json_null());
    }
    for (size_t i = 0; i < mi.n; i++) {
        const struct mountinfo_entry *e = &mi.v[i];
        if (!mountinfo_is_writable(e) || mountinfo_is_covered(&mi, e))
            continue; /* a mount that is mounted over cannot be reached */
        nwritable++;
        struct justify_entry *j = justify_find(&just, e->mount_point);
        if (j != NULL)
            j->used = true;
        else
            nunjustified++;
        if (a.json) {
            json_t *o = json_object();
            json_object_set_new(o, "mount_point", text_json(e->mount_point));
            json_object_set_new(o, "fstype", text_json(e->fstype));
            json_object_set_new(o, "source", text_json(e->source));
            json_object_set_new(o, "root", text_json(e->root));
            json_object_set_new(o, "mount_options", text_json(e->mount_opts));
            json_object_set_new(o, "super_options", text_json(e->super_opts));
            json_object_set_new(o, "justified", json_boolean(j != NULL));
            json_object_set_new(o, "reason", j != NULL ? text_json(j->reason) : json_null());
            json_object_set_new(o, "justify_line", j != NULL ? json_integer(j->line) : json_null());
            json_array_append_new(arr, o);
        } else {
            print_mount(e, j);
        }
    }
    if (a.json) {
        json_t *unused = json_array();
        for (size_t i = 0; i < just.n; i++)
            if (!just.v[i].used) {
                json_t *o = json_object();
                json_object_set_new(o, "path", text_json(just.v[i].path));
                json_object_set_new(o, "line", json_integer(just.v[i].line));
                json_array_append_new(unused, o);
            }
        json_object_set_new(doc, "ok", json_boolean(nunjustified == 0));
        json_object_set_new(doc, "mounts", json_integer((json_int_t)mi.n));
        json_object_set_new(doc, "writable", arr);
        json_object_set_new(doc, "unjustified", json_integer((json_int_t)nunjustified));
        json_object_set_new(doc, "unused_justifications", unused);
        char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s != NULL) {
            puts(s);
            free(s);
        }
        json_decref(doc);
    } else {
        /* the file's name too: the caller's, it could hold a line end */
        char *jf = a.justify != NULL ? text_shown(a.justify) : NULL;
        for (size_t i = 0; i < just.n; i++)
            if (!just.v[i].used) {
                char *jp = text_shown(just.v[i].path);
                printf("warning: %s:%u: %s is not a writable mount (stale justification?)\n", jf,
                       just.v[i].line, jp);
                free(jp);
            }
        free(jf);
        printf("result: %zu mount%s, %zu writable, %zu unjustified\n", mi.n, mi.n == 1 ? "" : "s",
               nwritable, nunjustified);
    }
    mountinfo_free(&mi);
    justify_free(&just);
    return nunjustified > 0 ? EXIT_PROBLEMS : EXIT_OK;
}

struct audit_topic {
    const char *name;
    int (*main)(int argc, char **argv);
};

static const struct audit_topic topics[] = {
    {"mounts", audit_mounts},
};

static int audit_main(int argc, char **argv)
{
    if (argc < 2)
        return command_usage_error(self, "which audit? (topics: mounts)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return command_help(self);
    for (size_t i = 0; i < sizeof(topics) / sizeof(topics[0]); i++)
        if (strcmp(argv[1], topics[i].name) == 0)
            return topics[i].main(argc - 1, argv + 1);
    return command_arg_error(self, "unknown audit ", argv[1], " (topics: mounts)");
}

const struct command cmd_audit = {
    .name = "audit",
    .synopsis = "mounts [--pid PID | --mountinfo FILE] [--justify FILE] [--format text|json]",
    .summary = "audit what an agent can write: every writable mount, justified in writing",
    .help = "  mounts             list every writable mount of a mount namespace\n"
            "  --pid PID          read /proc/PID/mountinfo (default: self)\n"
            "  --mountinfo FILE   read a saved mountinfo file instead\n"
            "  --justify FILE     `PATH: reason` lines; a writable mount without one is\n"
            "                     unjustified and the exit status is 1\n"
            "  --format text|json the report's format (default text)\n",
    .main = audit_main,
};
