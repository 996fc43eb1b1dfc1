/* sluice run: a command in the box, its only way out the gateway.
 *
 *   sluice run --policy FILE [--agent ID] [--ro PATH]... [--rw PATH]... [--hide PATH]...
 *              [--allow-unix] [--log FILE] [--alerts FILE] [--gateway-user USER[:GROUP]]
 *              [--tmp-size SIZE] -- CMD [ARG]...
 *   sluice run --proxy unix:/path/gw.sock [...] -- CMD [ARG]...
 *
 * Without --proxy, run serves the policy itself for the command's
 * lifetime: a child process runs the gateway on a unix socket in a private
 * temporary directory (mode 0700, hidden in the box), every client being
 * agent --agent (default "run"), and writes the decision log to --log FILE
 * or, by default, to a file in that directory that is read for the summary
 * and removed at the end. The box (src/box/) is spawned next; its relay
 * connects to that socket. Signals that a process sends to run are passed
 * to the command (those a terminal sends reach it directly, but for the
 * hang-up the kernel sends run alone when it leads its session; those
 * run's caller ignored stay ignored, for the command too); run exits with
 * the command's status, 128+N when it was killed by signal N, after a
 * one-line summary on standard error. The current directory, writable in
 * the box, may not be / (warned about when it is $HOME or above it). A box
 * that cannot be built (a namespace refused, a mount that fails) is an
 * error, exit 2: the command never runs half-boxed. Started as root, the
 * gateway serves as nobody once its socket is bound and its files are
 * open: it reads every byte the boxed command sends. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "box/alert_env.h"
#include "box/box.h"
#include "box/exec_guard.h"
#include "box/git_guard.h"
#include "box/hardlinks.h"
#include "box/reach.h"
#include "cli/commands.h"
#include "cli/startup_load.h"
#include "gate/gateway.h"
#include "gate/listener.h"
#include "gate/lockdown.h"
#include "policy/exec_programs.h"
#include "policy/policy.h"
#include "util/diag.h"
#include "util/env.h"
#include "util/line_read.h"
#include "util/open_nolinks.h"
#include "util/priority.h"
#include "util/privdrop.h"
#include "util/stderr_relay.h"
#include "util/term_line.h"
#include "util/text_json.h"
#include "util/units.h"

#define RUN_MAX_PATHS  256
#define RUN_DEFAULT_ID "run"
/* what each of the box's /tmp and /dev/shm holds at most, by default */
#define RUN_DEFAULT_TMP_SIZE "25%"
#define RUN_PROXY_URL        "http://127.0.0.1:3128"
/* the most of this run's decision log (and alerts file) the summary reads */
#define RUN_LOG_MAX      (256u * 1024 * 1024)
#define RUN_LOG_MAX_TEXT "256 MiB"
/* The longest line of the log the summary reads: the gateway writes none
 * longer (log_jsonl_int.h's LINE_MAX_LEN cuts one), and a longer one, which
 * whoever else can append to a --log file may write, would take its length
 * in memory. Skipped, and counted. */
#define RUN_LINE_MAX      (16u * 1024 * 1024)
#define RUN_LINE_MAX_TEXT "16 MiB"
/* The exit status of run's gateway, once it served, when lines of its log
 * or alerts file were lost (a disk the command filled: dropped, or never
 * written), which it has told on standard error: the summary, read from
 * that log, says its counts miss them. 0 otherwise. */
#define RUN_GATEWAY_LOST_LINES 3

extern char **environ;

static const struct command *const self = &cmd_run;

struct run_args {
    const char *policy;
    const char *proxy; /* the socket path after "unix:" */
    const char *agent;
    const char *log;
    const char *alerts;
    const char *gateway_user;       /* --gateway-user as given, or NULL */
    struct privdrop_target gw_user; /* resolved when gateway_user is set */
    bool allow_unix;
    char tmp_size[32]; /* tmpfs's size= for the box's /tmp and /dev/shm */
    /* the user's, run's own files (4), the git directories' (git_guard.h) */
    struct box_path paths[RUN_MAX_PATHS + 4 + GIT_GUARD_MAX];
    size_t npaths;
    char *owned[RUN_MAX_PATHS + 4]; /* canonical paths, freed at the end */
    size_t nowned;
    char **argv;
    struct git_guard git; /* the paths that keep the git directories */
};

static char *own(struct run_args *a, char *s)
{
    if (s != NULL && a->nowned < sizeof(a->owned) / sizeof(a->owned[0]))
        a->owned[a->nowned++] = s;
    return s;
}

static char *lexical(const char *p);

/* The canonical form of <p>; a path that does not exist (allowed for
 * --hide) is made absolute and normalised as written (lexical(): the box
 * takes no ".." on a path; refuse_links() found no link on it, so ".."
 * takes away what the kernel would). */
static char *canonical(const char *p, bool may_be_missing)
{
    char *r = realpath(p, NULL);
    if (r != NULL || !may_be_missing || errno != ENOENT)
        return r;
    return lexical(p);
}

/* <p> made absolute (against the working directory) as written: its "."
 * and ".." components kept, so that a link before a ".." is seen. NULL when
 * out of memory or the working directory is unknown. */
static char *absolute(const char *p)
{
    char cwd[PATH_MAX] = "";
    if (p[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL)
        return NULL;
    size_t n = strlen(cwd) + strlen(p) + 2;
    char *s = malloc(n);
    if (s != NULL)
        snprintf(s, n, "%s%s%s", cwd, cwd[0] != '\0' ? "/" : "", p);
    return s;
}

/* <p> made absolute (absolute()) and normalised as written: "." and empty
 * components dropped, ".." taking away the one before it, no link
 * followed. NULL as absolute(). */
static char *lexical(const char *p)
{
    char *out = absolute(p);
    if (out == NULL)
        return NULL;
    size_t n = 0; /* normalising only shortens: in place */
    const char *s = out;
    while (*s != '\0') {
        while (*s == '/')
            s++;
        const char *e = s;
        while (*e != '\0' && *e != '/')
            e++;
        size_t len = (size_t)(e - s);
        if (len == 2 && s[0] == '.' && s[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--; /* the slash */
        } else if (len > 0 && !(len == 1 && s[0] == '.')) {
            out[n++] = '/';
            memmove(out + n, s, len);
            n += len;
        }
        s = e;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    return out;
}

/* The first prefix of <path> (absolute), component by component, that is
 * a symbolic link: returns 1 with it in <link> (<path> cut there, restored
 * before returning) and its target in <target>, or 0. */
static int first_link(char *path, char *link, size_t linklen, char *target, size_t targetlen)
{
    for (size_t i = 1; path[i - 1] != '\0'; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
            ssize_t t = readlink(path, target, targetlen - 1);
            target[t > 0 ? t : 0] = '\0';
            snprintf(link, linklen, "%s", path);
            path[i] = c;
            return 1;
        }
        path[i] = c;
        if (c == '\0')
            break;
    }
    return 0;
}

/* The usage error "OPT PATH: WHY", <p> shown \ooo (text_shown()): a path
 * given may name a folder the agent made, with a line end or a terminal
 * escape in its name. */
static int path_usage_error(const char *opt, const char *p, const char *why)
{
    char *sp = text_shown(p);
    int rc = command_usage_error(self, "%s %s: %s", opt, sp, why);
    free(sp);
    return rc;
}

/* The usage error for a --log or --alerts <value> of "" or "-": run reads
 * the file for its summary, so standard output will not do, and the value
 * is named as serve names what it refuses. */
static int summary_file_needed(const char *opt, const char *value)
{
    return command_usage_error(self, "%s needs a file, not %s (run reads it for its summary)", opt,
                               value[0] == '\0' ? "an empty string" : "'-'");
}

/* A --ro, --rw or --hide path that is, or passes through, a symbolic link
 * is refused: an agent boxed in an earlier run can plant `build -> /etc`
 * in its writable folder, and --rw ./build would then grant /etc. So is a
 * --log or --alerts file: the gateway (root until it has its files open)
 * would create or append to the link's target, in lines whose paths and
 * hosts the agent writes (`$(...)` in a ~/.bashrc or /etc/profile.d). Both the
 * normalised path and the path as written are walked: in `build/../data`
 * the kernel resolves `..` from the link's target, so normalising first
 * would hide the link (and grant /data). Returns 0, or a usage error
 * naming the first link and its target. */
static int refuse_links(const char *opt, const char *p)
{
    char *lex = lexical(p);
    char *abs = absolute(p);
    if (lex == NULL || abs == NULL) {
        int e = errno;
        free(lex);
        free(abs);
        return path_usage_error(opt, p, strerror(e));
    }
    int rc = 0;
    char link[PATH_MAX], target[PATH_MAX];
    if (first_link(lex, link, sizeof(link), target, sizeof(target)) ||
        first_link(abs, link, sizeof(link), target, sizeof(target))) {
        /* the link's target, and its name, may be the agent's text: a
         * line end or a terminal escape in them is shown \ooo */
        char *sp = text_shown(p), *sl = text_shown(link), *st = text_shown(target);
        rc = command_usage_error(self,
                                 "%s %s: %s is a symbolic link (to %s); a link in a "
                                 "writable folder may have been planted by the agent: pass "
                                 "the real path if you mean it",
                                 opt, sp, sl, st);
        free(sp);
        free(sl);
        free(st);
    }
    free(lex);
    free(abs);
    return rc;
}

/* The directories the box replaces with private, empty ones (mounts.c):
 * the host's /tmp or /dev/shm cannot be the working directory or a --rw or
 * --ro path, since the command would see the private one there and what it
 * wrote would never reach the host. A directory below them can. */
static bool box_private_dir(const char *path)
{
    return strcmp(path, "/tmp") == 0 || strcmp(path, "/dev/shm") == 0;
}

/* Whether <path> lies at or below <dir> (both canonical). */
static bool at_or_below(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Whether <path> (canonical) holds the kernel's settings or the host's
 * devices: /sys, /proc or /dev or below them (but for a folder below
 * /dev/shm, which the box makes its own), the file system of the host's
 * /dev wherever bound, or one of the kernel's own file systems (sysfs,
 * proc, cgroups, debugfs, tracefs, securityfs, configfs, efivarfs, bpf,
 * pstore, devpts, mqueue) mounted anywhere. Their files are root's, and
 * root writes most of them without any capability (/sys/power/state
 * suspends the host, /proc/sys/kernel/core_pattern runs a program as root,
 * /dev/sda is the disk, /dev/pts/N a root terminal): bound
 * writable, as the working directory or a --rw path is, with the host's
 * device nodes usable there, they would hand a box started as root the
 * host. */
static bool kernel_settings(const char *path)
{
    static const unsigned long magic[] = {
        0x62656572, /* SYSFS_MAGIC */
        0x27e0eb,   /* CGROUP_SUPER_MAGIC */
        0x63677270, /* CGROUP2_SUPER_MAGIC */
        0x64626720, /* DEBUGFS_MAGIC */
        0x74726163, /* TRACEFS_MAGIC */
        0x73636673, /* SECURITYFS_MAGIC */
        0x62656570, /* CONFIGFS_MAGIC */
        0xde5e81e4, /* EFIVARFS_MAGIC */
        0xcafe4a11, /* BPF_FS_MAGIC */
        0x6165676c, /* PSTOREFS_MAGIC */
        0x9fa0,     /* PROC_SUPER_MAGIC */
        0x1cd1,     /* DEVPTS_SUPER_MAGIC */
        0x19800202, /* MQUEUE_MAGIC */
    };
    if (at_or_below(path, "/dev/shm"))
        return false; /* the box's own (box_private_dir()) */
    if (at_or_below(path, "/sys") || at_or_below(path, "/dev") || at_or_below(path, "/proc"))
        return true;
    struct statfs sf;
    if (statfs(path, &sf) < 0)
        return false;
    for (size_t i = 0; i < sizeof(magic) / sizeof(magic[0]); i++)
        if ((unsigned long)sf.f_type == magic[i])
            return true;
    /* the host's /dev bound elsewhere (a chroot's): when it is a file
     * system of its own, as devtmpfs is, which tmpfs's type hides */
    struct stat st, dev, root;
    return stat(path, &st) == 0 && stat("/dev", &dev) == 0 && stat("/", &root) == 0 &&
           dev.st_dev != root.st_dev && st.st_dev == dev.st_dev;
}

static int add_path(struct run_args *a, enum box_path_kind kind, const char *opt, const char *p)
{
    if (a->npaths >= RUN_MAX_PATHS)
        return command_usage_error(self, "at most %d --ro/--rw/--hide paths", RUN_MAX_PATHS);
    /* "" (an unset variable, --hide "$AWS_DIR") made absolute is the
     * working directory: --hide "" hid the project from the command */
    if (p[0] == '\0')
        return command_usage_error(self, "%s needs a path, not an empty string", opt);
    int rc = refuse_links(opt, p);
    if (rc != 0)
        return rc;
    char *c = own(a, canonical(p, kind == BOX_PATH_HIDE));
    if (c == NULL)
        return path_usage_error(opt, p, strerror(errno));
    if (strcmp(c, "/") == 0 && kind != BOX_PATH_RO)
        return command_usage_error(self, "%s /: not the whole file system", opt);
    if (kind == BOX_PATH_RW && kernel_settings(c))
        return path_usage_error("--rw", c,
                                "the kernel's settings and the host's devices are not made "
                                "writable in the box");
    /* the box and the command read their own processes there (fds,
     * mountinfo); the host's /proc is covered by the box's anyway */
    if (kind == BOX_PATH_HIDE && strcmp(c, "/proc") == 0)
        return command_usage_error(self, "--hide /proc: the box mounts its own /proc, which the "
                                         "command needs; hide what below it you mean");
    if (box_private_dir(c) && kind != BOX_PATH_HIDE)
        return command_usage_error(self,
                                   "%s %s: the box gives the command a private, empty %s; "
                                   "name a directory below it",
                                   opt, c, c);
    a->paths[a->npaths++] = (struct box_path){kind, c, kind == BOX_PATH_HIDE};
    return 0;
}

/* The largest --tmp-size: tmpfs rounds size= up to whole pages, and one
 * within a page of 2^64 wraps to 0 pages, no bound at all. */
#define RUN_TMP_SIZE_MAX (UINT64_C(1) << 63)

/* --tmp-size: a size (at least 1 MiB: tmpfs reads 0 as no bound at all; at
 * most RUN_TMP_SIZE_MAX) or a share of the machine's memory, N%, written
 * into <out> as tmpfs's size= takes it. Returns 0, -2 for a size above
 * RUN_TMP_SIZE_MAX (one past 64 bits included), or -1 for anything else. */
static int parse_tmp_size(const char *s, char *out, size_t outlen)
{
    uint64_t v;
    size_t n = strlen(s);
    if (n > 1 && s[n - 1] == '%') {
        char pct[4];
        if (n - 1 >= sizeof(pct))
            return -1;
        memcpy(pct, s, n - 1);
        pct[n - 1] = '\0';
        if (parse_uint(pct, 100, &v) < 0 || v == 0)
            return -1;
        snprintf(out, outlen, "%u%%", (unsigned)v);
        return 0;
    }
    int got = parse_size(s, &v);
    if (got == -2 || (got == 0 && v > RUN_TMP_SIZE_MAX))
        return -2; /* past 64 bits too: a size, not text that is none */
    if (got != 0 || v < 1024 * 1024)
        return -1;
    snprintf(out, outlen, "%llu", (unsigned long long)v);
    return 0;
}

/* Resolves --gateway-user before anything starts: an unknown user, one
 * that a run not started as root cannot become, or one this user namespace
 * does not map is a usage error. */
static int check_gateway_user(struct run_args *a)
{
    char err[200];
    if (a->proxy != NULL) {
        fputs("sluice run: warning: --gateway-user has no effect with --proxy: the serving "
              "gateway runs as its own user\n",
              stderr);
        a->gateway_user = NULL;
        return 0;
    }
    if (privdrop_resolve(a->gateway_user, &a->gw_user, err, sizeof(err)) < 0)
        return command_usage_error(self, "--gateway-user: %s", err);
    if (geteuid() != 0 && privdrop_is_already(&a->gw_user, err, sizeof(err)) < 0)
        return command_usage_error(self, "--gateway-user %s: %s", a->gw_user.name, err);
    if (!privdrop_mapped(&a->gw_user))
        return command_usage_error(self, "--gateway-user %s: not mapped in this user namespace",
                                   a->gw_user.name);
    return 0;
}

/* The usage error for a --proxy <value> ("unix:/PATH") whose path is
 * not a socket (missing, a folder, a file), or 0. The box's init opens
 * the socket itself later; this tells the operator now, by the option. */
static int refuse_non_socket(const char *value)
{
    struct stat st;
    const char *why = stat(value + 5, &st) < 0 ? strerror(errno)
                      : !S_ISSOCK(st.st_mode)  ? "not a socket"
                                               : NULL;
    return why != NULL ? path_usage_error("--proxy", value, why) : 0;
}

/* The first argument of the command <cmd> (its name aside) that spells
 * --policy or --proxy as getopt_long() takes them (abbreviated, with
 * "=VALUE"), or NULL. Options end at the first argument that is not one
 * (or at "--"): `sluice run curl --policy p.yaml` gives curl the flag, and
 * run, which has no policy then, names it in its usage error rather than
 * asking for one the caller believes was given. */
static const char *option_after_the_command(char *const *cmd)
{
    for (size_t i = 1; cmd[i] != NULL; i++) {
        const char *s = cmd[i];
        size_t n = strncmp(s, "--", 2) == 0 ? strcspn(s + 2, "=") : 0;
        if (n > 0 && ((n <= 6 && strncmp(s + 2, "policy", n) == 0) ||
                      (n <= 5 && strncmp(s + 2, "proxy", n) == 0)))
            return s;
    }
    return NULL;
}

static int parse_args(int argc, char **argv, struct run_args *a)
{
    /* One option a line, as in the other commands. */
    /* clang-format off */
    static const struct option options[] = {
        {"policy", required_argument, NULL, 'p'},
        {"proxy", required_argument, NULL, 'P'},
        {"agent", required_argument, NULL, 'a'},
        {"ro", required_argument, NULL, 'r'},
        {"rw", required_argument, NULL, 'w'},
        {"hide", required_argument, NULL, 'H'},
        {"allow-unix", no_argument, NULL, 'u'},
        {"log", required_argument, NULL, 'L'},
        {"alerts", required_argument, NULL, 'A'},
        {"gateway-user", required_argument, NULL, 'G'},
        {"tmp-size", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* clang-format on */
    opterr = 0;
    optind = 1;
    snprintf(a->tmp_size, sizeof(a->tmp_size), "%s", RUN_DEFAULT_TMP_SIZE);
    int c, rc;
    unsigned seen = 0; /* each flag once (--ro, --rw, --hide may repeat) */
    while ((c = getopt_long(argc, argv, "+:h", options, NULL)) != -1) {
        if ((rc = command_option_once(self, c, options, "rwH", &seen)) != 0)
            return rc;
        switch (c) {
        case 'p':
            /* `--policy "$POLICY"` with POLICY unset: no file to name */
            if (optarg[0] == '\0')
                return command_usage_error(self, "--policy needs a file, not an empty string");
            a->policy = optarg;
            break;
        case 'P':
            if (strncmp(optarg, "unix:", 5) != 0 || optarg[5] != '/')
                return command_arg_error(self, "--proxy: ", optarg, " is not unix:/path/to.sock");
            /* a value that names no socket is refused as a --ro path that
             * names nothing is, with the usage line: it was told alone, once
             * the working directory and the standard descriptors were judged */
            if ((rc = refuse_non_socket(optarg)) != 0)
                return rc;
            a->proxy = optarg + 5;
            break;
        case 'a':
            /* an id no policy can name ("CI-Bot" for ci-bot) would match
             * none of its agents: rules or entries, silently */
            if (!policy_valid_agent_id(optarg))
                return command_arg_error(self, "--agent: ", optarg,
                                         " is not an agent id (use 1-64 of a-z, 0-9, '.', '_', "
                                         "'-', as a policy does)");
            a->agent = optarg;
            break;
        case 'r':
        case 'w':
        case 'H':
            rc = add_path(a,
                          c == 'r'   ? BOX_PATH_RO
                          : c == 'w' ? BOX_PATH_RW
                                     : BOX_PATH_HIDE,
                          c == 'r'   ? "--ro"
                          : c == 'w' ? "--rw"
                                     : "--hide",
                          optarg);
            if (rc != 0)
                return rc;
            break;
        case 'u':
            a->allow_unix = true;
            break;
        case 'L':
        case 'A': {
            const char *opt = c == 'L' ? "--log" : "--alerts";
            if (strcmp(optarg, "-") == 0 || optarg[0] == '\0')
                return summary_file_needed(opt, optarg);
            /* serve_start() keeps the log in a PATH_MAX buffer (struct
             * served): one cut there would have the gateway write another
             * file; and no file is opened by a longer name. Named, as a
             * --ro path is: "--log: File name too long" named no value, and
             * --alerts was refused only once the gateway failed to open it */
            if (strlen(optarg) >= PATH_MAX)
                return path_usage_error(opt, optarg, strerror(ENAMETOOLONG));
            if ((rc = refuse_links(opt, optarg)) != 0)
                return rc;
            if (c == 'L')
                a->log = optarg;
            else
                a->alerts = optarg;
            break;
        }
        case 'G':
            a->gateway_user = optarg;
            break;
        case 'T':
            rc = parse_tmp_size(optarg, a->tmp_size, sizeof(a->tmp_size));
            if (rc == -2)
                return command_arg_error(self, "--tmp-size: ", optarg,
                                         " is more than 8EiB, which tmpfs would round up to no "
                                         "bound at all");
            if (rc < 0)
                return command_arg_error(self, "--tmp-size: ", optarg,
                                         " is neither a size of at least 1MiB (B, KiB, MiB, GiB) "
                                         "nor a share of memory from 1% to 100%");
            break;
        case 'h':
            command_help(self);
            return 1;
        default: /* ':' (a missing value) or an unknown option */
            return command_option_error(self, c, argv, options);
        }
    }
    if (optind >= argc)
        return command_usage_error(self, "no command to run (sluice run [OPTIONS] -- CMD)");
    a->argv = argv + optind;
    /* `-- "$AGENT"` with AGENT unset: found by no one, once the gateway and
     * the box were made for it */
    if (a->argv[0][0] == '\0')
        return command_usage_error(self, "the command is an empty string (an unset variable?)");
    if (a->policy == NULL && a->proxy == NULL) {
        const char *late = option_after_the_command(a->argv);
        if (late != NULL)
            return command_arg_error(self, "", late,
                                     " after the command is the command's own argument: run's "
                                     "options go before the command (sluice run --policy FILE "
                                     "[OPTIONS] -- CMD [ARG]...)");
    }
    if ((a->policy == NULL) == (a->proxy == NULL))
        return command_usage_error(self, "give either --policy FILE or --proxy unix:PATH");
    if (a->proxy != NULL && (a->log != NULL || a->alerts != NULL))
        return command_usage_error(self, "--log, --alerts: with --proxy the serving gateway "
                                         "writes them");
    if (a->proxy != NULL && a->agent != NULL)
        fputs("sluice run: warning: --agent has no effect with --proxy: the serving gateway "
              "identifies clients by source and token\n",
              stderr);
    if (a->agent == NULL)
        a->agent = RUN_DEFAULT_ID;
    if (a->gateway_user != NULL)
        return check_gateway_user(a);
    return 0;
}

/* --- the working directory ------------------------------------------------ */

/* The working directory is writable in the box. "/" would make the whole
 * file system writable: refused, like --rw /; so is /tmp or /dev/shm, which
 * the box replaces with a private one (box_private_dir()). $HOME, or a directory above
 * it, makes every dotfile writable (~/.ssh, ~/.bashrc, ~/.gitconfig): a
 * warning, since a tool that keeps its state there may need it. The
 * directory is shown \ooo (text_shown()): the agent may have named a
 * folder of the writable project folder, the next run's, with a line end or
 * a terminal escape. */
static int check_cwd(const char *cwd)
{
    if (strcmp(cwd, "/") == 0) {
        fputs("sluice run: the current directory is /: the whole file system would be "
              "writable in the box; run from a project directory\n",
              stderr);
        return -1;
    }
    char *shown = text_shown(cwd);
    int rc = -1;
    if (box_private_dir(cwd)) {
        fprintf(stderr,
                "sluice run: the current directory is %s, which the box replaces with a "
                "private, empty one: nothing the command wrote there would reach it; run "
                "from a directory below it or a project directory\n",
                shown);
    } else if (kernel_settings(cwd)) {
        fprintf(stderr,
                "sluice run: the current directory is %s, where the kernel's settings or the "
                "host's devices are: they would be writable in the box; run from a project "
                "directory\n",
                shown);
    } else {
        rc = 0;
        const char *home = getenv("HOME");
        char *h = home != NULL && home[0] == '/' ? realpath(home, NULL) : NULL;
        size_t n = strlen(cwd);
        if (h != NULL && strncmp(h, cwd, n) == 0 && (h[n] == '\0' || h[n] == '/'))
            fprintf(stderr,
                    "sluice run: warning: the current directory %s %s your home directory: "
                    "everything in it, dotfiles included, is writable in the box (hide "
                    "secrets with --hide ~/.ssh --hide ~/.aws ..., or run from a project "
                    "directory)\n",
                    shown, h[n] == '\0' ? "is" : "contains");
        free(h);
    }
    free(shown);
    return rc;
}

/* --- paths the agent can move away ---------------------------------------- */

static bool strictly_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (strcmp(dir, "/") == 0)
        return path[1] != '\0';
    return strncmp(path, dir, n) == 0 && path[n] == '/';
}

/* Whether the path of the view above a->paths[i] that decides what it is
 * in the box, the deepest other one (the working directory among them),
 * is writable there; that path into *<above>, NULL when there is none. */
static bool writable_above(const struct run_args *a, size_t i, const char *cwd, const char **above)
{
    const char *path = a->paths[i].path;
    *above = strictly_under(path, cwd) ? cwd : NULL;
    bool writable = *above != NULL;
    for (size_t k = 0; k < a->npaths; k++) {
        const char *q = a->paths[k].path;
        if (k == i || !strictly_under(path, q) || (*above != NULL && strlen(q) <= strlen(*above)))
            continue;
        *above = q;
        writable = a->paths[k].kind == BOX_PATH_RW;
    }
    return writable;
}

/* A --hide path that does not exist hides nothing, and the box cannot
 * mount on it; below a writable path the command can make it and leave
 * there what the user's tools trust once the box has ended (an
 * ~/.ssh/authorized_keys, an ~/.aws/config whose credential_process runs
 * a program). Warns about each of the user's (<nuser> first paths). */
static void warn_missing_hidden(const struct run_args *a, const char *cwd, size_t nuser)
{
    for (size_t i = 0; i < nuser && i < a->npaths; i++) {
        const struct box_path *p = &a->paths[i];
        struct stat st;
        if (p->kind != BOX_PATH_HIDE || lstat(p->path, &st) == 0 || errno != ENOENT)
            continue;
        const char *above = NULL;
        if (!writable_above(a, i, cwd, &above))
            continue;
        char *sp = text_shown(p->path), *sa = text_shown(above);
        fprintf(stderr,
                "sluice run: warning: --hide %s does not exist, and lies below the writable %s: "
                "there is nothing to hide, but the agent can make it and leave there what your "
                "tools will trust after the box (an authorized_keys, a config that runs a "
                "program): make it first (mkdir) to have it hidden\n",
                sp, sa);
        free(sp);
        free(sa);
    }
}

/* A read-only file or folder below a writable path keeps its contents, not
 * its path: when a plain folder lies between the two, the command can
 * rename that folder and leave a replacement where the file was (a policy,
 * a log, a git hook the next run or the user trusts). Warns about each,
 * naming <label[i]> for the protected paths run added. */
static void warn_renamable(const struct run_args *a, const char *cwd, size_t nuser,
                           const char *const *labels)
{
    for (size_t i = 0; i < a->npaths; i++) {
        const struct box_path *p = &a->paths[i];
        if (p->kind != BOX_PATH_RO || (i >= nuser && labels[i - nuser] == NULL))
            continue;
        const char *above = NULL;
        bool writable = writable_above(a, i, cwd, &above);
        if (!writable || strchr(p->path + strlen(above) + (strcmp(above, "/") != 0), '/') == NULL)
            continue; /* not below a writable path, or directly in it (a mount point stays) */
        char *sp = text_shown(p->path), *sa = text_shown(above);
        fprintf(stderr,
                "sluice run: warning: %s %s lies in a folder below the writable %s: the agent "
                "cannot change this file, but it can rename the folder above it and leave a "
                "replacement for the next run: keep it outside the writable paths\n",
                i < nuser ? "--ro" : labels[i - nuser], sp, sa);
        free(sp);
        free(sa);
    }
}

/* --- alert programs: run outside the box (src/box/exec_guard.h) ------------ */

/* The box's view as run has it so far: the working directory, then the
 * paths given (and, once serve_start() returned, the files run keeps). */
static struct box_view run_view(const struct run_args *a, const char *cwd)
{
    return (struct box_view){.cwd = cwd, .paths = a->paths, .npaths = a->npaths};
}

/* --- git directories: their hooks and config run outside the box ---------- */

/* Adds the paths that keep the git directories of the writable paths
 * (git_guard.h) after those of <a>. Returns 0, or EXIT_USAGE with a
 * message. */
static int keep_git_dirs(struct run_args *a, const char *cwd)
{
    struct box_view v = run_view(a, cwd);
    char err[BOX_ERR_MAX];
    if (git_guard_find(&v, &a->git, err, sizeof(err)) < 0) {
        fprintf(stderr, "sluice run: cannot keep a git directory: %s; the command does not start\n",
                err);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < a->git.n; i++)
        a->paths[a->npaths++] = a->git.v[i];
    return 0;
}

/* The label of a git directory's path in run's warnings: a config file's
 * or a `.git` file's (checked for other names as the policy is), none for
 * a folder. */
static const char *git_label(const struct box_path *p)
{
    struct stat st;
    const char *base = strrchr(p->path, '/');
    if (p->kind != BOX_PATH_RO || lstat(p->path, &st) < 0 || !S_ISREG(st.st_mode))
        return NULL;
    return base != NULL && strcmp(base, "/.git") == 0 ? "the .git file" : "the git config";
}

/* Why the search <f> stopped before its end, into <out> (<len>). */
static void other_names_stop(const struct hardlinks_finding *f, char *out, size_t len)
{
    if (f->stop == HARDLINKS_ENTRIES)
        snprintf(out, len, "after %lu entries", HARDLINKS_ENTRIES_MAX);
    else if (f->stop == HARDLINKS_DEPTH)
        snprintf(out, len, "more than %u folders deep", HARDLINKS_DEPTH_MAX);
    else
        snprintf(out, len, "%s", strerror(f->error));
}

/* Tells why a file that <label> names, <path>, stops the run: the other
 * name <f> found in a writable path, or the search for one that could not
 * end. Returns EXIT_USAGE. */
static int report_other_names(const char *label, const char *path,
                              const struct hardlinks_finding *f)
{
    char *sp = text_shown(path), *sr = text_shown(f->root), *sa = text_shown(f->at);
    char why[128];
    if (f->stop == HARDLINKS_FOUND) {
        fprintf(stderr,
                "sluice run: %s %s has %lu names (hard links), one of them in the writable %s: "
                "%s; the command could write the file through it, so it does not start; "
                "remove that link, or keep the file on another file system\n",
                label, sp, f->names, sr, sa);
    } else {
        other_names_stop(f, why, sizeof(why));
        fprintf(stderr,
                "sluice run: %s %s has %lu names (hard links), and the search of the writable "
                "%s for another one stopped at %s (%s): the command could write the file "
                "through one there, so it does not start; remove the other links (find "
                "-samefile lists them), or keep the file on another file system\n",
                label, sp, f->names, sr, sa, why);
    }
    free(sp);
    free(sr);
    free(sa);
    return EXIT_USAGE;
}

/* Refuses the run when <path>, which <label> names, has another name the
 * command could write it through (hardlinks_other_name()). Returns 0, or
 * EXIT_USAGE with a message. */
static int refuse_other_names(const struct run_args *a, const char *cwd, const char *label,
                              const char *path)
{
    struct box_view v = run_view(a, cwd);
    struct hardlinks_finding f;
    if (!hardlinks_other_name(&v, path, &f))
        return 0;
    return report_other_names(label, path, &f);
}

/* The gateway runs each `exec` alert program of the policy <p> outside the
 * box, with the host's network and its user's rights: one that the command
 * can change, or its script's interpreter (exec_guard_check()), would run
 * the command's own code there at the next alert, which it can raise at
 * will (a first contact). Such a policy does not start. Returns 0, or
 * EXIT_USAGE with a message. */
static int check_alert_programs(const struct run_args *a, const char *cwd, const struct policy *p)
{
    struct box_view v = run_view(a, cwd);
    for (size_t i = 0; i < p->alerts.nsinks; i++) {
        const struct sink *k = &p->alerts.sinks[i];
        struct exec_guard_finding f = {0};
        enum exec_guard_verdict verdict =
            k->kind == SINK_EXEC ? exec_guard_check(&v, k->target, &f) : EXEC_GUARD_SAFE;
        if (verdict == EXEC_GUARD_OTHER_NAMES)
            return report_other_names(f.level > 0 ? "the interpreter of the alert program"
                                                  : "the alert program",
                                      f.file, &f.links);
        if (verdict == EXEC_GUARD_CHANGEABLE) {
            char *sp = text_shown(k->target), *sf = text_shown(f.file), *sr = text_shown(f.root);
            fprintf(stderr,
                    "sluice run: the alert program %s%s%s%s can be changed from the box "
                    "(below the writable %s): the gateway runs it outside the box, so the "
                    "command does not start; keep it outside the writable paths, or name it "
                    "(or a folder above it, directly in one) with --ro\n",
                    sp, f.level > 0 ? " (its interpreter " : "", f.level > 0 ? sf : "",
                    f.level > 0 ? ")" : "", sr);
            free(sp);
            free(sf);
            free(sr);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* The files run's gateway opens again after it started (the policy at a
 * reload, the log and alerts files at SIGHUP), absolute: it serves from
 * "/" (gateway_leave_cwd()). Each is the caller's to free. */
struct gateway_paths {
    char *policy, *log, *alerts; /* alerts: NULL without --alerts */
};

/* Makes <out> from <a> and <log>, then moves the gateway to "/": the alert
 * programs it starts run outside the box, and from run's working
 * directory, the project the command writes, a relative path they read (a
 * shell's `. ./lib.sh`, `python3 -m`'s module, a relative `#!` interpreter)
 * would find the command's files. Returns 0, or -1 with errno set. */
static int gateway_leave_cwd(const struct run_args *a, const char *log, struct gateway_paths *out)
{
    out->policy = absolute(a->policy);
    out->log = absolute(log);
    out->alerts = a->alerts != NULL ? absolute(a->alerts) : NULL;
    if (out->policy == NULL || out->log == NULL || (a->alerts != NULL && out->alerts == NULL))
        return -1;
    return chdir("/");
}

/* --- the environment of the command --------------------------------------- */

/* The proxy variables, in any case: the common ones, and those of tools
 * that read their own before them (npm and yarn 1, yarn 2+, pip, cargo). A
 * caller's value would point them at a proxy the box cannot reach (the
 * tool fails where it would work through the relay) or, for noproxy, send
 * them straight out, where nothing answers. */
static bool is_proxy_var(const char *kv)
{
    static const char *const names[] = {
        "http_proxy",         "https_proxy",      "all_proxy",
        "no_proxy",           "npm_config_proxy", "npm_config_https_proxy",
        "npm_config_noproxy", "yarn_http_proxy",  "yarn_https_proxy",
        "pip_proxy",          "cargo_http_proxy",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = strlen(names[i]);
        if (strncasecmp(kv, names[i], n) == 0 && kv[n] == '=')
            return true;
    }
    return false;
}

/* True when <kv> ("NAME=value") is one of the <n> variables <names>. */
static bool is_named_var(const char *kv, char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (strncmp(kv, names[i], len) == 0 && kv[len] == '=')
            return true;
    }
    return false;
}

/* run's environment for the command, with the proxy variables pointing at
 * the relay and without the <nhidden> variables <hidden> (the policy's
 * tokens: see serve_start()). */
static char **make_env(char *const *hidden, size_t nhidden)
{
    static char *const add[] = {
        "HTTP_PROXY=" RUN_PROXY_URL,
        "http_proxy=" RUN_PROXY_URL,
        "HTTPS_PROXY=" RUN_PROXY_URL,
        "https_proxy=" RUN_PROXY_URL,
        "ALL_PROXY=" RUN_PROXY_URL,
        "all_proxy=" RUN_PROXY_URL,
        "NO_PROXY=",
        "no_proxy=",
        "npm_config_proxy=" RUN_PROXY_URL,
        "npm_config_https_proxy=" RUN_PROXY_URL,
        "npm_config_noproxy=",
        "YARN_HTTP_PROXY=" RUN_PROXY_URL,
        "YARN_HTTPS_PROXY=" RUN_PROXY_URL,
        "PIP_PROXY=" RUN_PROXY_URL,
        "CARGO_HTTP_PROXY=" RUN_PROXY_URL,
    };
    /* Without env_lock(), unlike an exec sink's (sink_exec.c): run's process
     * has no other thread here. The policy's start-up load, whose zone check
     * sets TZ (policy/zone.c), was joined (startup_load_policy()), or left
     * to its thread only on a stop, after which run never comes here; the
     * gateway is a child process, and the box's relay thread (std_relay.c)
     * starts after. */
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    size_t nadd = sizeof(add) / sizeof(add[0]);
    char **env = calloc(n + nadd + 1, sizeof(*env));
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char *kv = env_child_entry(environ[i]); /* TZ as the operator gave it */
        if (kv != NULL && !is_proxy_var(kv) && !is_named_var(kv, hidden, nhidden))
            env[k++] = kv;
    }
    for (size_t i = 0; i < nadd; i++)
        env[k++] = add[i];
    env[k] = NULL;
    return env;
}

/* --- the gateway child ---------------------------------------------------- */

struct served {
    pid_t pid;
    char dir[64];
    char sock[128];
    char log[PATH_MAX];
    bool own_log;
    off_t log_start;
    off_t alerts_start;
    int log_fd; /* opened before the box starts: the summary never reopens a path */
    int alerts_fd;
    bool log_lost;    /* the gateway lost lines of its log or alerts file (told by it) */
    char **token_env; /* the variables the policy's tokens and webhooks are read from */
    size_t ntoken_env;
};

/* Keeps the name NAME of <ref> ("env:NAME", or NULL) in <s>. Returns -1
 * when out of memory. */
static int keep_env_ref(struct served *s, const char *ref)
{
    if (ref == NULL || strncmp(ref, "env:", 4) != 0)
        return 0;
    if ((s->token_env[s->ntoken_env] = strdup(ref + 4)) == NULL)
        return -1;
    s->ntoken_env++;
    return 0;
}

/* Keeps in <s> the name of every variable an agent's token of <p> is read
 * from: every request from the box is --agent's, so the tokens are of no
 * use in it, and a secret a serving gateway elsewhere knows an agent by
 * must not reach the agent in the box. So are those webhook URLs are read
 * from (webhook: env:NAME), whose path is often the credential: the
 * gateway outside posts the alerts. Returns -1 when out of memory. */
static int keep_token_env(struct served *s, const struct policy *p)
{
    s->token_env = calloc(p->nagents + p->alerts.nsinks + 1, sizeof(*s->token_env));
    if (s->token_env == NULL)
        return -1;
    for (size_t i = 0; i < p->nagents; i++)
        if (keep_env_ref(s, p->agents[i].token_ref) < 0)
            return -1;
    for (size_t i = 0; i < p->alerts.nsinks; i++)
        if (keep_env_ref(s, p->alerts.sinks[i].env_ref) < 0)
            return -1;
    return 0;
}

/* The user run's gateway serves as: --gateway-user (<chosen>, checked by
 * check_gateway_user) or, started as root without it, nobody (resolved
 * into <nobody>). NULL when it stays as it is: a chosen root as root; not
 * root without --gateway-user; no user nobody (why in <err>, else ""); or
 * the root of a user namespace that maps no one else (unshare
 * --map-root-user), not the host's root. */
static const struct privdrop_target *gateway_user(const struct privdrop_target *chosen,
                                                  struct privdrop_target *nobody, char *err,
                                                  size_t errlen)
{
    err[0] = '\0';
    if (chosen != NULL)
        return chosen->uid == 0 && geteuid() == 0 ? NULL : chosen;
    if (geteuid() != 0 || privdrop_resolve("nobody", nobody, err, errlen) < 0 ||
        !privdrop_mapped(nobody))
        return NULL;
    return nobody;
}

/* In run's gateway child: serve as gateway_user() from now on
 * (util/privdrop.h). The parent-death signal does not survive a change of
 * user, so it is set again. Without a user nobody the gateway stays root,
 * with a warning. Returns -1 when the gateway must not go on. */
static int gateway_leave_root(pid_t parent, const struct privdrop_target *chosen)
{
    struct privdrop_target nobody;
    char err[200];
    const struct privdrop_target *t = gateway_user(chosen, &nobody, err, sizeof(err));
    if (t == NULL) {
        if (err[0] != '\0')
            fprintf(stderr, "sluice run: warning: the gateway stays root: %s\n", err);
        return 0;
    }
    if (privdrop_apply(t, err, sizeof(err)) < 0) {
        fprintf(stderr, "sluice run: %s\n", err);
        return -1;
    }
    if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) < 0 || getppid() != parent)
        return -1; /* run is gone already */
    return 0;
}

/* Forks the gateway; returns 0 once it accepts, or EXIT_USAGE. From the
 * making of its directory on, the signals of <ending> (box_ending_signals():
 * a ^C, a `timeout` while run starts) are held: run_main() ends of one
 * only once the directory is removed. One during the policy's load stops
 * the start at once (held, EXIT_USAGE). */
static int serve_start(struct run_args *a, const char *cwd, struct served *s,
                       const sigset_t *ending)
{
    /* The load is waited for with <ending> held, on a thread of its own
     * (startup_load.h): a ^C or a `timeout` while a file system that does
     * not answer holds its read stops the start at once, where it killed
     * run without a word once the read let it go, if ever. */
    sigset_t before;
    sigprocmask(SIG_BLOCK, ending, &before);
    struct startup_load how = {
        .who = "sluice run",
        .stopped = "the command does not start",
        .stops = ending,
        /* Every request is --agent's: the tokens are never compared, and a
         * variable unset here (a developer's machine without CI's secrets)
         * must not stop the run. */
        .flags = POLICY_LOAD_SECRETS_UNUSED,
        .stop_wait_ms = STARTUP_LOAD_STOP_WAIT_MS,
    };
    /* The alert programs are looked at as the user the gateway will run
     * them as, not as the root run may be (policy/exec_programs.h). */
    struct privdrop_target nobody;
    char no_nobody[200]; /* told by the gateway, which stays root then */
    const struct privdrop_target *runner = gateway_user(
        a->gateway_user != NULL ? &a->gw_user : NULL, &nobody, no_nobody, sizeof(no_nobody));
    if (runner != NULL && geteuid() == 0)
        policy_exec_programs_run_as(runner->uid, runner->gid);
    int stop_sig = 0;
    struct policy *p = startup_load_policy(a->policy, &how, &stop_sig);
    if (p == NULL) {
        if (stop_sig != 0)
            raise(stop_sig); /* taken by the load's wait: held again, run ends of it at out */
        return EXIT_USAGE;
    }
    sigprocmask(SIG_SETMASK, &before, NULL);
    if (keep_token_env(s, p) < 0) {
        fputs("sluice run: out of memory\n", stderr);
        policy_free(p);
        return EXIT_USAGE;
    }
    if (check_alert_programs(a, cwd, p) != 0) {
        policy_free(p);
        return EXIT_USAGE;
    }
    gateway_print_grant_warnings(p);
    sigprocmask(SIG_BLOCK, ending, NULL);
    snprintf(s->dir, sizeof(s->dir), "/tmp/sluice-run-XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        fprintf(stderr, "sluice run: cannot make a temporary directory: %s\n", strerror(errno));
        s->dir[0] = '\0';
        policy_free(p);
        return EXIT_USAGE;
    }
    snprintf(s->sock, sizeof(s->sock), "%s/gw.sock", s->dir);
    if (a->log != NULL) {
        snprintf(s->log, sizeof(s->log), "%s", a->log);
        struct stat st;
        s->log_start = stat(a->log, &st) == 0 ? st.st_size : 0;
    } else {
        snprintf(s->log, sizeof(s->log), "%s/log.jsonl", s->dir);
        s->own_log = true;
    }
    if (a->alerts != NULL) {
        struct stat st;
        s->alerts_start = stat(a->alerts, &st) == 0 ? st.st_size : 0;
    }
    char text[160];
    snprintf(text, sizeof(text), "unix:%s", s->sock);
    struct listen_addr la;
    const char *why = NULL;
    if (listen_addr_parse(text, &la, &why) < 0) {
        fprintf(stderr, "sluice run: %s: %s\n", text, why);
        policy_free(p);
        return EXIT_USAGE;
    }
    int rp[2];
    if (pipe2(rp, O_CLOEXEC) < 0) {
        fprintf(stderr, "sluice run: pipe: %s\n", strerror(errno));
        policy_free(p);
        return EXIT_USAGE;
    }
    fflush(NULL);
    pid_t parent = getpid();
    s->pid = fork();
    if (s->pid < 0) {
        fprintf(stderr, "sluice run: fork: %s\n", strerror(errno));
        close(rp[0]);
        close(rp[1]);
        policy_free(p);
        return EXIT_USAGE;
    }
    if (s->pid == 0) {
        close(rp[0]);
        setpgid(0, 0); /* the terminal's ^C is for the command, not the gateway */
        /* run may have died before the request took effect: then no
         * signal comes, and a gateway no one stops must not start */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) < 0 || getppid() != parent)
            _exit(EXIT_USAGE);
        signal(SIGPIPE, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGUSR1, SIG_IGN); /* the logs' reopen, once the gateway is up */
        signal(SIGXFSZ, SIG_IGN); /* a log past RLIMIT_FSIZE: EFBIG, as serve */
        /* run's caller may have blocked signals (the box's command keeps
         * them blocked, as execve() would): the gateway's SIGTERM must come */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct box_view view = run_view(a, cwd);
        alert_env_apply(&view);
        struct gateway_paths gp = {0};
        if (gateway_leave_cwd(a, s->log, &gp) < 0) {
            fprintf(stderr, "sluice run: the gateway cannot serve from /: %s\n", strerror(errno));
            _exit(EXIT_USAGE);
        }
        struct gateway_config cfg = {
            .policy_path = gp.policy,
            .listens = &la,
            .nlistens = 1,
            .log_path = gp.log,
            .alerts_path = gp.alerts, /* NULL: alerts go to the decision log */
            .grace_ms = 2000,
            .forced_agent = a->agent,
            .files_no_links = true, /* refuse_links() checked them; this closes the gap
                                     * between that check and the open */
        };
        char err[512];
        struct gateway *gw = gateway_new(&cfg, p, err, sizeof(err));
        if (gw == NULL) {
            fprintf(stderr, "sluice run: %s\n", err);
            _exit(EXIT_USAGE);
        }
        /* As serve's default --nice: quietly kept where it cannot be raised
         * (run without root, in a user namespace). */
        (void)priority_apply(PRIORITY_DEFAULT_NICE, false, err, sizeof(err));
        if (gateway_leave_root(parent, a->gateway_user != NULL ? &a->gw_user : NULL) < 0)
            _exit(EXIT_USAGE);
        if (gateway_lockdown(err, sizeof(err)) != 0) /* without the filter, or a call of it */
            fprintf(stderr, "sluice run: warning: the gateway: %s\n", err);
        ssize_t w = write(rp[1], "R", 1);
        (void)w;
        close(rp[1]);
        if (stderr_relay_start(err, sizeof(err)) < 0) /* as serve's */
            fprintf(stderr, "sluice run: warning: the gateway: %s\n", err);
        gateway_run(gw);
        uint64_t lost = gateway_free(gw);
        free(gp.policy);
        free(gp.log);
        free(gp.alerts);
        stderr_relay_stop(STDERR_RELAY_STOP_MS);
        _exit(lost > 0 ? RUN_GATEWAY_LOST_LINES : 0);
    }
    close(rp[1]);
    policy_free(p);
    /* A signal of <ending> does not wait for the gateway to be ready (a
     * user lookup that waits for a network would hold a ^C as long): it is
     * left pending, and run_main() stops the gateway where it is. */
    int sfd = signalfd(-1, ending, SFD_NONBLOCK | SFD_CLOEXEC);
    struct pollfd pfd[2] = {{.fd = rp[0], .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    while (poll(pfd, sfd >= 0 ? 2 : 1, -1) < 0 && errno == EINTR)
        ;
    if (sfd >= 0)
        close(sfd);
    if (pfd[0].revents == 0 && pfd[1].revents != 0) {
        close(rp[0]);
        return EXIT_USAGE;
    }
    char c;
    ssize_t n;
    while ((n = read(rp[0], &c, 1)) < 0 && errno == EINTR)
        ;
    close(rp[0]);
    if (n != 1) {
        /* Its own errors it has told; a gateway killed (the OOM killer, a
         * signal from another process) says nothing, and exit 2 says why. */
        int status = 0;
        while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (WIFSIGNALED(status))
            fprintf(stderr,
                    "sluice run: the gateway ended before it served (killed by signal %d)\n",
                    WTERMSIG(status));
        s->pid = -1;
        return EXIT_USAGE;
    }
    /* The files the summary reads, opened now, before the command runs: the
     * command may rename the folder above them and leave a forgery at the
     * same path. */
    s->log_fd = open_no_links(s->log, O_RDONLY | O_CLOEXEC, 0);
    if (a->alerts != NULL)
        s->alerts_fd = open_no_links(a->alerts, O_RDONLY | O_CLOEXEC, 0);
    return 0;
}

/* Takes what the status of run's gateway, reaped, says for the summary. */
static void gateway_reaped(struct served *s, int status)
{
    s->pid = -1; /* its PID may be another process's by the end */
    if (WIFEXITED(status) && WEXITSTATUS(status) == RUN_GATEWAY_LOST_LINES)
        s->log_lost = true;
}

static void serve_stop(struct served *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status = 0;
        while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
            ;
        gateway_reaped(s, status);
    }
}

static void serve_cleanup(struct served *s)
{
    for (size_t i = 0; i < s->ntoken_env; i++)
        free(s->token_env[i]);
    free(s->token_env);
    s->token_env = NULL;
    s->ntoken_env = 0;
    if (s->log_fd >= 0)
        close(s->log_fd);
    if (s->alerts_fd >= 0)
        close(s->alerts_fd);
    s->log_fd = s->alerts_fd = -1;
    if (s->dir[0] == '\0')
        return;
    if (s->own_log)
        unlink(s->log);
    unlink(s->sock);
    rmdir(s->dir);
}

/* --- the summary ---------------------------------------------------------- */

struct tally {
    unsigned long allowed[4], allowed_total, denied, reported, alerts;
    bool read_ok;
    bool cut;               /* lines past RUN_LOG_MAX were left uncounted */
    unsigned long overlong; /* lines longer than RUN_LINE_MAX, skipped */
};

/* Requests in flight (tunnels, uploads) tracked by tally_log(), at most:
 * past it one decided again would count twice, as before they were tracked. */
#define RUN_TUNNELS_MAX 65536

/* True when <o>, an agent_egress line, is the first of its request: a
 * CONNECT tunnel, or a plain request whose body is still going up, decided
 * again (a reload, the UTC day's change) gets a second one for its id, deny
 * or report, before its one agent_egress_end (SPEC.md): a new verdict on
 * the request, counted with its first line as sluice_requests_total does.
 * <tunnels> holds the ids of requests whose first line was seen and whose
 * end was not. */
static bool first_line_of_request(json_t *tunnels, json_t *o)
{
    const char *id = json_string_value(json_object_get(o, "id"));
    if (id == NULL)
        return true;
    if (json_object_get(tunnels, id) != NULL)
        return false;
    if (json_object_size(tunnels) < RUN_TUNNELS_MAX)
        json_object_set_new(tunnels, id, json_true());
    return true;
}

static void tally_log(int fd, off_t start, struct tally *t)
{
    int dfd = fd >= 0 ? dup(fd) : -1;
    FILE *f = dfd >= 0 ? fdopen(dfd, "r") : NULL;
    if (f == NULL) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    if (fseeko(f, start, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    char *line = NULL;
    size_t cap = 0, len;
    ssize_t n;
    size_t total = 0;
    bool over;
    json_t *tunnels = json_object(); /* NULL when out of memory: lines then count each */
    while (total < RUN_LOG_MAX &&
           (n = line_read(f, &line, &cap, RUN_LINE_MAX, RUN_LOG_MAX - total, &len, &over)) > 0) {
        total += (size_t)n;
        if (over)
            t->overlong++;
        json_t *o = over ? NULL : json_loadb(line, len, 0, NULL);
        if (o == NULL)
            continue;
        const char *ev = json_string_value(json_object_get(o, "event"));
        const char *dec = json_string_value(json_object_get(o, "decision"));
        json_t *tier = json_object_get(o, "tier");
        if (ev != NULL && strcmp(ev, "alert") == 0)
            t->alerts++;
        if (ev != NULL && strcmp(ev, "agent_egress_end") == 0 && tunnels != NULL) {
            const char *id = json_string_value(json_object_get(o, "id"));
            if (id != NULL)
                json_object_del(tunnels, id);
        }
        if (ev != NULL && dec != NULL && strcmp(ev, "agent_egress") == 0 &&
            (tunnels == NULL || first_line_of_request(tunnels, o))) {
            if (strcmp(dec, "allow") == 0) {
                t->allowed_total++;
                json_int_t ti = json_is_integer(tier) ? json_integer_value(tier) : -1;
                if (ti >= 0 && ti <= 3)
                    t->allowed[ti]++;
            } else if (strcmp(dec, "deny") == 0) {
                t->denied++;
            } else if (strcmp(dec, "report") == 0) {
                t->reported++;
            }
        }
        json_decref(o);
    }
    /* said: a flood of lines must not hide the rest */
    t->cut = total >= RUN_LOG_MAX && getc_unlocked(f) != EOF;
    json_decref(tunnels);
    free(line);
    fclose(f);
    t->read_ok = true;
}

/* Whether descriptors <a> and <b> are open on one file: --alerts naming
 * the log's file, by its path or by another (a link), whose alert lines
 * the log's tally counts already. */
static bool same_file(int a, int b)
{
    struct stat sa, sb;
    return a >= 0 && b >= 0 && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The command wrote to the same terminal and may have left it hiding text:
 * concealed (ESC[8m), black on black, a program killed in the middle of a
 * password prompt or a full-screen drawing. An SGR reset (ESC[0m) before
 * the summary shows it, when standard error is a terminal (into a file or
 * a pipe it would only be noise). The alternate screen (ESC[?1049h) is left
 * as it is: run does not read the command's output and cannot know the
 * terminal is in it; ESC[?1049l would throw away what the command's screen
 * last showed (a crashed program's message), and on the normal screen
 * restores in xterm a cursor saved long before, writing the summary over
 * earlier lines. `reset` or `tput rmcup` is the user's to run. */
static void reset_terminal_attributes(void)
{
    if (isatty(STDERR_FILENO))
        fputs("\x1b[0m", stderr);
}

/* How long run's summary may wait for standard error to take it: a reader
 * that never reads (a full pipe, a terminal stopped by ^S) held run, its
 * command ended, for ever. */
#define RUN_SUMMARY_WAIT_S 3

static void interrupt_only(int sig)
{
    (void)sig;
}

/* The summary's deadline: a SIGALRM, handled without SA_RESTART, ends a
 * write() to standard error still waiting RUN_SUMMARY_WAIT_S from now
 * (EINTR: stdio gives up what is left of it), and each 0.1 s after, so
 * that none of the summary's later writes waits longer either.
 * summary_deadline_end() takes it away, the mask and handler as before. */
struct summary_deadline {
    struct sigaction sa;
    sigset_t mask;
};

static void summary_deadline_start(struct summary_deadline *d)
{
    struct sigaction sa = {.sa_handler = interrupt_only};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &d->sa);
    struct itimerval it = {.it_value = {.tv_sec = RUN_SUMMARY_WAIT_S},
                           .it_interval = {.tv_usec = 100 * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    sigprocmask(SIG_UNBLOCK, &alrm, &d->mask);
}

static void summary_deadline_end(const struct summary_deadline *d)
{
    struct itimerval off = {.it_value = {.tv_sec = 0}, .it_interval = {.tv_sec = 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    sigprocmask(SIG_SETMASK, &d->mask, NULL);
    sigaction(SIGALRM, &d->sa, NULL);
}

/* The decision log's counts for the summary (and the alerts file's). */
static void tally_served(const struct run_args *a, const struct served *s, struct tally *t)
{
    tally_log(s->log_fd, s->log_start, t);
    if (a->alerts != NULL && !same_file(s->log_fd, s->alerts_fd)) {
        struct tally ta = {0};
        tally_log(s->alerts_fd, s->alerts_start, &ta);
        t->alerts += ta.alerts;
        t->cut = t->cut || ta.cut;
        t->overlong += ta.overlong;
    }
}

/* The summary's lines: <t> the log's counts, NULL with --proxy. */
static void print_summary_lines(const struct run_args *a, const struct served *s,
                                const struct tally *t, unsigned long relayed, int code)
{
    reset_terminal_attributes();
    /* On a line of its own, though the command's last output had no line
     * end; after the reset, else the spaces that find that line would be
     * painted in a background the command left set. */
    term_line_fresh(stderr, STDERR_FILENO);
    if (t == NULL) {
        char *shown = text_shown(a->proxy); /* as --proxy's usage error shows it */
        fprintf(stderr,
                "sluice run: exit %d; relayed %lu connection%s to unix:%s (its gateway logs "
                "the decisions)\n",
                code, relayed, relayed == 1 ? "" : "s", shown);
        free(shown);
        return;
    }
    char rep[48] = "", skipped[96] = "";
    if (t->reported > 0)
        snprintf(rep, sizeof(rep), ", reported %lu", t->reported);
    if (t->overlong > 0)
        snprintf(skipped, sizeof(skipped),
                 " (%lu line%s longer than " RUN_LINE_MAX_TEXT " skipped: see the log)",
                 t->overlong, t->overlong == 1 ? "" : "s");
    fprintf(stderr,
            "sluice run: exit %d; allowed %lu (tier 0: %lu, tier 1: %lu, tier 2: %lu, tier 3: "
            "%lu), denied %lu%s, alerts %lu%s%s%s%s\n",
            code, t->allowed_total, t->allowed[0], t->allowed[1], t->allowed[2], t->allowed[3],
            t->denied, rep, t->alerts, t->read_ok ? "" : " (the decision log could not be read)",
            skipped,
            t->cut ? " (counted in the first " RUN_LOG_MAX_TEXT " of the log only: see the log)"
                   : "",
            s->log_lost ? " (the gateway could not write all of its log, see above: the counts "
                          "miss what it lost)"
                        : "");
}

/* The summary, counted first, then written within RUN_SUMMARY_WAIT_S
 * (summary_deadline_start()): a standard error that does not take it by
 * then gets no more of it, and run's status stays the command's. */
static void print_summary(const struct run_args *a, const struct served *s, unsigned long relayed,
                          int code)
{
    struct tally t = {0};
    if (a->proxy == NULL)
        tally_served(a, s, &t);
    struct summary_deadline d;
    summary_deadline_start(&d);
    print_summary_lines(a, s, a->proxy == NULL ? &t : NULL, relayed, code);
    summary_deadline_end(&d);
}

/* --- main ------------------------------------------------------------------- */

/* The command stopped (the box's init told it, of signal <sig>): by the
 * terminal's ^Z, a read or write of it from the background, or of itself
 * (an editor or an agent's terminal UI that reads ^Z as a key in raw mode
 * and sends itself SIGTSTP, which does not reach run). run stops too, as a
 * job would, of SIGTSTP, SIGTTIN or SIGTTOU as the command did (SIGTSTP for
 * any other), blocked for the signalfd: else the shell, waiting on run,
 * would hang without its prompt. `fg` (SIGCONT to the group, passed on to
 * the box too) wakes both. The kernel takes that action, by the signal let
 * through for a moment: it stops no process of an orphaned group (run a
 * session's leader, as under tmux, `ssh -t` or `xterm -e`, where nothing
 * would ever continue it), and a SIGSTOP there left run stopped for good. */
static void stop_as(int sig)
{
    if (sig != SIGTTIN && sig != SIGTTOU)
        sig = SIGTSTP;
    sigset_t one, old;
    sigemptyset(&one);
    sigaddset(&one, sig);
    raise(sig);
    sigprocmask(SIG_UNBLOCK, &one, &old); /* taken here: stopped, or dropped */
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* What <job_fd> (box.job_fd) holds: the command stopped, of the signal
 * returned, or 0 (continued, or nothing new); its last byte is its state
 * now. <*open> is cleared at its end (the init has ended). */
static int job_stopped(int job_fd, bool *open)
{
    unsigned char b[64];
    int last = 0;
    ssize_t n;
    while ((n = read(job_fd, b, sizeof(b))) > 0)
        last = b[n - 1];
    if (n == 0)
        *open = false;
    return last;
}

/* The terminal whose foreground process group run's is as it starts (a
 * descriptor of /dev/tty), or -1: run has none, or runs in the background. */
static int foreground_terminal(void)
{
    int tty = open("/dev/tty", O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (tty >= 0 && tcgetpgrp(tty) != getpgrp()) {
        close(tty);
        tty = -1;
    }
    return tty;
}

/* The box has ended. The command shares run's terminal and may have made a
 * group of its own in the box the terminal's foreground (setpgid(), then
 * tcsetpgrp(): allowed, as job-control shells in the box need it); that
 * group is dead now, and a caller without job control, in run's group,
 * would find itself in the background, stopped by its next read of the
 * terminal (SIGTTIN). run, in the foreground when it started (<tty>), takes
 * the terminal back for its group when the foreground is a group with no
 * process left; one with processes (a shell that took the terminal back
 * after ^Z and `bg`) it leaves as it is. SIGTTOU, which tcsetpgrp() from
 * the background would raise, is blocked for the call. Closes <tty>. */
static void take_back_terminal(int tty)
{
    if (tty < 0)
        return;
    pid_t fg = tcgetpgrp(tty);
    if (fg > 0 && fg != getpgrp() && kill(-fg, 0) < 0 && errno == ESRCH) {
        sigset_t ttou, old;
        sigemptyset(&ttou);
        sigaddset(&ttou, SIGTTOU);
        sigprocmask(SIG_BLOCK, &ttou, &old);
        (void)tcsetpgrp(tty, getpgrp());
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    close(tty);
}

/* SIGTTIN and SIGTTOU: the kernel sends them to run's group when the
 * command reads or writes the terminal from the background. run reads
 * them from its signalfd while the box runs, and stops only once the
 * command has (job_stopped()): stopped by them at once too, it would find
 * the command's stop told once continued, and stop again. */
static void tty_stops(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTTIN);
    sigaddset(set, SIGTTOU);
}

/* The signals run reads from a signalfd: SIGCHLD, tty_stops() and those it
 * passes on (box_forwarded_signals()), but for those its caller ignored
 * (<ignored>), which stay ignored. */
static void run_signals(sigset_t *mask, const sigset_t *ignored)
{
    box_forwarded_signals(mask);
    sigaddset(mask, SIGTTIN);
    sigaddset(mask, SIGTTOU);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(ignored, sig) == 1)
            sigdelset(mask, sig);
    sigaddset(mask, SIGCHLD);
}

/* Signals ignored when run started (nohup's SIGHUP; SIGINT and SIGQUIT in
 * a background job of a shell without job control): exec() leaves them
 * ignored, and so does the box for the command. */
static void ignored_at_start(sigset_t *ignored)
{
    sigemptyset(ignored);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &sa) == 0 &&
            sa.sa_handler == SIG_IGN)
            sigaddset(ignored, sig);
    }
}

/* How many orphans one SIGCHLD reaps at the most (reap_orphans()): the
 * next takes the rest. */
#define RUN_ORPHANS_PER_SIGCHLD 1024

/* As the init of its PID namespace (a container's entry point, without
 * --init), run is the parent of every orphan there: what an alert program
 * of its gateway left behind (a `curl &`, killed with the program's group
 * when the program exits) becomes run's child, and run waited only for its
 * gateway and its box: each stayed a zombie, holding a PID, until a
 * pids.max refused the gateway's next program. Reaps those that ended,
 * any child but <gateway> and <box>, whose ends are run's to take. */
static void reap_orphans(pid_t gateway, pid_t box)
{
    if (getpid() != 1)
        return;
    for (int i = 0; i < RUN_ORPHANS_PER_SIGCHLD; i++) {
        siginfo_t si;
        si.si_pid = 0;
        /* Looked at first: the gateway's or the box's end is not taken here. */
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0 ||
            si.si_pid == gateway || si.si_pid == box)
            return;
        if (waitpid(si.si_pid, NULL, WNOHANG) <= 0)
            return;
    }
}

/* Waits for the box's report, passing on what <sfd> (run_signals(), made
 * before the box was spawned) reads, stopping when the command stops
 * (stop_as()), copying what the command writes into <std>'s pipes and,
 * once the command is executed, starting the thread that fills its
 * standard input's; closes <sfd> and the box's descriptors. */
static int wait_box(struct box *box, struct served *s, int sfd, struct box_std_relay *std,
                    int *status, unsigned long *relayed, char *err, size_t errlen)
{
    enum box_report_kind kind = BOX_REPORT_NONE;
    bool job_open = true;
    for (;;) {
        struct pollfd pfd[6] = {{.fd = sfd, .events = POLLIN},
                                {.fd = box->status_fd, .events = POLLIN},
                                {.fd = job_open ? box->job_fd : -1, .events = POLLIN}};
        size_t n = 3 + box_std_relay_poll(std, pfd + 3);
        if (poll(pfd, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        box_std_relay_step(std, pfd + 3, n - 3);
        if (pfd[1].revents != 0) {
            kind = box_read_report(box, status, relayed, err, errlen);
            break;
        }
        int stop = pfd[2].revents != 0 ? job_stopped(box->job_fd, &job_open) : 0;
        if (stop > 0)
            stop_as(stop);
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            if (si.ssi_signo == SIGCHLD) {
                int gw_status = 0;
                if (s->pid > 0 && waitpid(s->pid, &gw_status, WNOHANG) == s->pid) {
                    gateway_reaped(s, gw_status);
                    fprintf(stderr, "sluice run: the gateway stopped; the box has no way out\n");
                }
                reap_orphans(s->pid, box->pid);
                continue;
            }
            /* the command's stop, if it stops, is told on job_fd */
            if (si.ssi_signo == SIGTTIN || si.ssi_signo == SIGTTOU)
                continue;
            /* What the terminal sends reached the command's group too, but
             * for its hang-up, which the kernel sends to the session's
             * leader alone: run, under `ssh -t`, tmux or `xterm -e`. A
             * terminal's ^Z stops run once it has stopped the command. */
            bool hangup = si.ssi_signo == SIGHUP && getsid(0) == getpid();
            if (si.ssi_code != SI_KERNEL || hangup)
                kill(box->pid, (int)si.ssi_signo);
        }
    }
    while (waitpid(box->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    /* Taken now, not when run unblocks them: what came with the command's
     * end (the terminal's ^C it died of reaches run too) would end run by
     * its default action, without the summary or the command's status. */
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
    close(sfd);
    close(box->status_fd);
    close(box->job_fd);
    return kind;
}

static int run_main(int argc, char **argv)
{
    sigset_t ignored; /* before run sets any signal of its own */
    ignored_at_start(&ignored);
    /* run waits for its children: were SIGCHLD ignored, the kernel would
     * reap them itself, and their PIDs could be another's by the time run
     * signals them */
    signal(SIGCHLD, SIG_DFL);
    /* what the kernel sends for run's own writes (a closed pipe, a file
     * past RLIMIT_FSIZE: `2>&1 | head`) must not end it, its directory left
     * or its exit status not the command's: the write fails instead */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    sigset_t old, ending; /* the caller's mask: the command gets it, run ends with it */
    sigprocmask(SIG_SETMASK, NULL, &old);
    box_ending_signals(&ending, &ignored, &old);
    struct run_args *a = calloc(1, sizeof(*a));
    struct served s = {.pid = -1, .log_fd = -1, .alerts_fd = -1};
    char **env = NULL;
    if (a == NULL) {
        fputs("sluice run: out of memory\n", stderr);
        return EXIT_USAGE;
    }
    int rc = parse_args(argc, argv, a);
    if (rc != 0) {
        rc = rc == 1 ? EXIT_OK : rc;
        goto out;
    }
    rc = EXIT_USAGE;
    char *cwd = own(a, canonical(".", false));
    if (cwd == NULL) {
        fprintf(stderr, "sluice run: the current directory: %s\n", strerror(errno));
        goto out;
    }
    if (check_cwd(cwd) < 0)
        goto out;
    /* before anything starts: a network socket or a device on 0-2 would
     * pass into the box as it came */
    char std_err[BOX_ERR_MAX];
    if (box_check_std(a->allow_unix, std_err, sizeof(std_err)) < 0) {
        fprintf(stderr, "sluice run: %s\n", std_err);
        goto out;
    }
    const char *sock = a->proxy;
    size_t nuser = a->npaths;
    if (a->proxy == NULL) {
        if (serve_start(a, cwd, &s, &ending) != 0)
            goto out;
        sock = s.sock;
        nuser = a->npaths;
        /* the policy and the log stay read-only in the box; run's own
         * directory, with the socket and the default log, is hidden */
        const char *const files[] = {a->policy, s.own_log ? NULL : s.log, NULL, a->alerts};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            char *c = files[i] != NULL ? own(a, canonical(files[i], false)) : NULL;
            if (files[i] != NULL && c == NULL) {
                /* a file the gateway has open that cannot be found again
                 * by its path (moved or removed since): it could not be
                 * kept read-only in the box */
                int e = errno;
                char *shown = text_shown(files[i]);
                fprintf(stderr,
                        "sluice run: %s: %s; it cannot be kept read-only in the box, so the "
                        "command does not start\n",
                        shown, strerror(e));
                free(shown);
                goto out;
            }
            /* an entry without a file (no --alerts, say) hides run's own
             * directory once more */
            a->paths[a->npaths++] = c != NULL ? (struct box_path){BOX_PATH_RO, c, true}
                                              : (struct box_path){BOX_PATH_HIDE, s.dir, true};
        }
    }
    size_t nrun = a->npaths; /* run's own files end here, the git directories' follow */
    if (keep_git_dirs(a, cwd) != 0)
        goto out;
    const char *const run_labels[] = {"the policy", s.own_log ? NULL : "the decision log", NULL,
                                      a->alerts != NULL ? "the alerts file" : NULL};
    const char *labels[sizeof(a->paths) / sizeof(a->paths[0])] = {NULL};
    for (size_t i = nuser; i < a->npaths; i++)
        labels[i - nuser] = i < nrun ? run_labels[i - nuser] : git_label(&a->paths[i]);
    warn_renamable(a, cwd, nuser, labels);
    warn_missing_hidden(a, cwd, nuser);
    for (size_t i = 0; i < a->npaths; i++) {
        const char *label = i < nuser ? "--ro" : labels[i - nuser];
        if (a->paths[i].kind == BOX_PATH_RO && label != NULL &&
            refuse_other_names(a, cwd, label, a->paths[i].path) != 0)
            goto out;
    }
    env = make_env(s.token_env, s.ntoken_env);
    if (env == NULL) {
        fputs("sluice run: out of memory\n", stderr);
        goto out;
    }
    sigset_t mask, pending;
    run_signals(&mask, &ignored);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    /* One that came while run started: the command is not started, and run
     * ends of it at out, its directory removed. */
    sigpending(&pending);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(&ending, sig) == 1 && sigismember(&pending, sig) == 1)
            goto out;

    struct box_config cfg = {
        .argv = a->argv,
        .envp = env,
        .cwd = cwd,
        .gateway_socket = sock,
        .paths = a->paths,
        .npaths = a->npaths,
        .allow_unix = a->allow_unix,
        /* test-only (see SPEC.md): as on a kernel without Landlock */
        .landlock_off = env_number("SLUICE_TEST_NO_LANDLOCK", 1, 0) == 1,
        .tmp_size = a->tmp_size,
        .ignored = ignored,
        .blocked = old,
    };
    /* made before the box: failing, no command has started (test-only, see
     * SPEC.md: SLUICE_TEST_RUN_SIGNALFD_FAIL=1 fails it as with EMFILE) */
    int sfd = env_number("SLUICE_TEST_RUN_SIGNALFD_FAIL", 1, 0) == 1
                  ? (errno = EMFILE, -1)
                  : signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr,
                "sluice run: cannot watch for the signals to pass on to the command (signalfd: "
                "%s); the command does not start\n",
                strerror(errno));
        goto out;
    }
    struct box box;
    char err[BOX_ERR_MAX];
    /* files given for writing the box does not show writable: written
     * through pipes run copies into them; a file given as standard input
     * that it does not show: read through a pipe run fills (std_relay.c) */
    struct box_std_relay std;
    if (box_std_relay_open(&std, err, sizeof(err)) < 0) {
        close(sfd);
        fprintf(stderr, "sluice run: %s\n", err);
        goto out;
    }
    cfg.std_relay = &std;
    int tty = foreground_terminal();
    struct box_std_flags std_flags;
    box_std_flags_save(&std_flags);
    if (box_spawn(&cfg, &box, err, sizeof(err)) < 0) {
        if (tty >= 0)
            close(tty);
        close(sfd);
        box_std_relay_close(&std);
        fprintf(stderr, "sluice run: %s\n", err);
        goto out;
    }
    box_std_relay_spawned(&std);
    int status = 0;
    unsigned long relayed = 0;
    enum box_report_kind kind = wait_box(&box, &s, sfd, &std, &status, &relayed, err, sizeof(err));
    /* the box has ended: no one in it can change them again */
    box_std_flags_restore(&std_flags);
    /* the box has ended: run's own writes to the terminal from the
     * background (its summary) stop it, as its caller left them */
    sigset_t stops;
    tty_stops(&stops);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(&old, sig) == 1)
            sigdelset(&stops, sig);
    sigprocmask(SIG_UNBLOCK, &stops, NULL);
    /* the box has ended: what is left in the pipes comes before run's own
     * lines (`> log 2>&1`) */
    box_std_relay_finish(&std);
    take_back_terminal(tty);
    if (kind == BOX_REPORT_ERROR) {
        fprintf(stderr, "sluice run: cannot build the box: %s\n", err);
        goto out;
    }
    if (kind == BOX_REPORT_STOPPED) {
        /* one came while the box was set up: run ends of it at out, as of
         * one that came before (wait_box() took run's own) */
        raise(status);
        goto out;
    }
    if (kind == BOX_REPORT_NONE) {
        fprintf(stderr, "sluice run: the box ended without the command's status\n");
        goto out;
    }
    rc = WIFEXITED(status)     ? WEXITSTATUS(status)
         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                               : EXIT_USAGE;
    /* its input cut short by a read error, or its output or error by a
     * failed write into the file or a pipe held outside the box that run
     * stopped copying (told): the command, which read an end there, or
     * ignored its broken pipe, or had ended before, may never have known,
     * and its success would pass for one on the whole file; as
     * `set -o pipefail` would, run fails */
    if (rc == EXIT_OK && (std.failed[0] || std.failed[1] || std.failed[2]))
        rc = EXIT_PROBLEMS;
    serve_stop(&s);
    print_summary(a, &s, relayed, rc);
out:
    serve_stop(&s);
    serve_cleanup(&s);
    free(env);
    for (size_t i = 0; i < a->nowned; i++)
        free(a->owned[i]);
    git_guard_free(&a->git);
    free(a);
    /* A signal held while run started ends it here, by its default action
     * as it would have then (wait_box() took those that came later). */
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

const struct command cmd_run = {
    .name = "run",
    .synopsis =
        "(--policy FILE | --proxy unix:PATH) [--agent ID] [--ro PATH]... [--rw PATH]... "
        "[--hide PATH]... [--allow-unix] [--log FILE] [--alerts FILE] [--gateway-user USER[:GROUP]] "
        "[--tmp-size SIZE] -- "
        "CMD [ARG]...",
    .summary = "run a command in a box whose only way out is the gateway",
    .help = "  --policy FILE      serve this policy for the command's lifetime\n"
            "  --proxy unix:PATH  use a gateway that is already serving on that socket\n"
            "  --agent ID         the agent every request is logged as (default run; no\n"
            "                     effect with --proxy)\n"
            "  --ro PATH          read-only inside, even below a writable path\n"
            "  --rw PATH          writable inside (besides the current directory and /tmp)\n"
            "  --hide PATH        replaced by an empty directory (or an empty file)\n"
            "  --allow-unix       let the command create unix sockets (off: EACCES)\n"
            "  --log FILE         the decision log (default: a temporary file, read for the\n"
            "                     summary and removed)\n"
            "  --alerts FILE      alerts, JSON lines (default: in the decision log)\n"
            "  --gateway-user USER[:GROUP]  the user the gateway serves as once its socket\n"
            "                     and files are open (default, when run is root: nobody;\n"
            "                     root keeps root); its exec alert programs run as USER\n"
            "  --tmp-size SIZE    the most each of the box's /tmp and /dev/shm holds: a size\n"
            "                     (MiB, GiB) or a share of memory (default 25%)\n"
            "Inside: no network but 127.0.0.1:3128 and [::1]:3128 (HTTP_PROXY, HTTPS_PROXY,\n"
            "ALL_PROXY point there; NO_PROXY is empty), read-only files but for the current\n"
            "directory, a private /tmp and /dev/shm, a minimal /dev, no capabilities, no new\n"
            "privileges, sockets only for IP and netlink. --ro/--rw/--hide refuse symbolic\n"
            "links.\n"
            "Options end at -- or at the first argument that is not one: the rest is the\n"
            "command's, untouched (sluice run --policy p.yaml curl -x URL gives curl -x).\n"
            "Exit status: the command's (128+N when killed by signal N; 127 when it is not\n"
            "found, 126 when it cannot be executed); 1 when it exits 0 but its standard\n"
            "input, output or error, a file run copies through a pipe, was cut short (a\n"
            "read or write failed, or the pipe, held open outside the box, was closed 2 s\n"
            "after the command ended); 2 on a usage error or when the box cannot be built.\n",
    .main = run_main,
};
