/* sluice serve: run the gateway.
 *
 * Loads the policy (the first error, "file:line: field: message", exits 2;
 * expired or expiring grants only warn), binds every --listen address,
 * opens the decision log and serves until SIGTERM/SIGINT: then it stops
 * accepting, lets requests and tunnels in flight finish within --grace,
 * flushes the log and exits 0. SIGHUP reloads the policy (a policy that
 * fails to load is reported and the old one stays) and reopens the log.
 * With --user, once everything is bound and open it serves as that user
 * (util/privdrop.h); as root without --user it warns. Then it refuses
 * itself the system calls it never needs (gate/lockdown.h). While it
 * serves, standard error goes through a relay that never blocks the loop
 * (util/stderr_relay.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/startup_load.h"
#include "gate/gateway.h"
#include "gate/listener.h"
#include "gate/lockdown.h"
#include "policy/exec_programs.h"
#include "policy/policy.h"
#include "util/diag.h"
#include "util/priority.h"
#include "util/privdrop.h"
#include "util/stop_signals.h"
#include "util/stderr_relay.h"
#include "util/std_fds.h"
#include "util/text_json.h"
#include "util/units.h"
#include "watch/admin.h"
#include "watch/log_same.h"

#define SERVE_MAX_LISTENS 32

struct serve_args {
    const char *policy;
    const char *log;
    const char *alerts;
    const char *state;
    struct listen_addr admin; /* read once here: the server binds what it gave */
    bool admin_given;
    struct listen_addr listens[SERVE_MAX_LISTENS];
    size_t nlistens;
    unsigned max_conns;
    unsigned grace_ms;
    enum gateway_sched sched;
    int nice;
    bool nice_given;
    bool splice;
    bool drop;
    struct privdrop_target user;
};

/* True when an earlier --listen names the address <l> names (as printed:
 * "localhost:3128" is "127.0.0.1:3128"). The second bind failed with a
 * message about another server, for a unix path, when there was none. Port
 * 0 is a new port each time. */
static bool listen_given(const struct serve_args *a, const struct listen_addr *l)
{
    size_t n = strlen(l->text);
    if (l->kind == LISTEN_TCP && n >= 2 && strcmp(l->text + n - 2, ":0") == 0)
        return false;
    for (size_t i = 0; i < a->nlistens; i++)
        if (strcmp(a->listens[i].text, l->text) == 0)
            return true;
    return false;
}

/* The usage error "OPT ADDR: WHY" (--listen, --admin), <addr> shown \ooo
 * (text_shown()), as other commands show what they refuse; an empty one
 * would show as nothing, so it is named as the other empty values are. */
static int addr_error(const char *opt, const char *addr, const char *why)
{
    if (addr[0] == '\0')
        return command_usage_error(&cmd_serve, "%s needs an address, not an empty string", opt);
    char *shown = text_shown(addr);
    int rc = command_usage_error(&cmd_serve, "%s %s: %s", opt, shown, why);
    free(shown);
    return rc;
}

static int parse_args(int argc, char **argv, struct serve_args *a)
{
    static const struct option options[] = {
        {"policy", required_argument, NULL, 'p'},
        {"listen", required_argument, NULL, 'l'},
        {"log", required_argument, NULL, 'L'},
        {"admin", required_argument, NULL, 'A'},
        {"alerts", required_argument, NULL, 'a'},
        {"state", required_argument, NULL, 's'},
        {"max-conns", required_argument, NULL, 'm'},
        {"grace", required_argument, NULL, 'g'},
        {"sched", required_argument, NULL, 'S'},
        {"nice", required_argument, NULL, 'N'},
        {"splice", no_argument, NULL, 'P'},
        {"user", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    optind = 1;
    int c;
    unsigned seen = 0; /* each flag once (--listen may repeat): a second --policy served it */
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        const char *why = NULL;
        uint64_t n;
        long v;
        char why_num[64]; /* what is wrong with a number given */
        int got = command_option_once(&cmd_serve, c, options, "l", &seen);
        if (got != 0)
            return got;
        switch (c) {
        case 'p':
            /* `--policy "$POLICY"` with POLICY unset: no file to name */
            if (optarg[0] == '\0')
                return command_usage_error(&cmd_serve,
                                           "--policy needs a file, not an empty string");
            a->policy = optarg;
            break;
        case 'l':
            if (a->nlistens >= SERVE_MAX_LISTENS)
                return command_usage_error(&cmd_serve, "--listen: at most %d addresses",
                                           SERVE_MAX_LISTENS);
            if (listen_addr_parse(optarg, &a->listens[a->nlistens], &why) < 0)
                return addr_error("--listen", optarg, why);
            if (listen_given(a, &a->listens[a->nlistens]))
                return addr_error("--listen", optarg, "given twice");
            listen_addr_name(&a->listens[a->nlistens], "--listen", optarg);
            a->nlistens++;
            break;
        case 'L':
        case 'a':
            if (optarg[0] == '\0')
                return command_usage_error(&cmd_serve,
                                           "--%s needs a file, not an empty string (- for "
                                           "standard output)",
                                           c == 'L' ? "log" : "alerts");
            if (c == 'L')
                a->log = optarg;
            else
                a->alerts = optarg;
            break;
        case 'A':
            /* refused now, as the other values are, not once the policy
             * is loaded and the admin server is made */
            if (listen_addr_parse_admin(optarg, &a->admin, &why) < 0)
                return addr_error("--admin", optarg, why);
            listen_addr_name(&a->admin, "--admin", optarg);
            a->admin_given = true;
            break;
        case 's':
            if (optarg[0] == '\0')
                return command_usage_error(&cmd_serve,
                                           "--state needs a directory, not an empty string");
            a->state = optarg;
            break;
        case 'm':
            if (parse_int_option(optarg, 1, 1000000, &v, why_num, sizeof(why_num)) != 0)
                return command_arg_error(&cmd_serve, "--max-conns: ", optarg, why_num);
            a->max_conns = (unsigned)v;
            break;
        case 'g':
            got = parse_period_ms(optarg, &n);
            if (got == -2 || (got == 0 && n > 3600 * 1000))
                return command_arg_error(&cmd_serve, "--grace: ", optarg,
                                         " is longer than 1h, the most it may be");
            if (got != 0)
                return command_arg_error(&cmd_serve, "--grace: ", optarg,
                                         " is not a period such as 5s");
            a->grace_ms = n > 0 ? (unsigned)n : 1;
            break;
        case 'S':
            if (strcmp(optarg, "batch") == 0)
                a->sched = GATEWAY_SCHED_BATCH;
            else if (strcmp(optarg, "normal") == 0)
                a->sched = GATEWAY_SCHED_NORMAL;
            else
                return command_arg_error(&cmd_serve, "--sched: ", optarg,
                                         " is not batch or normal");
            break;
        case 'N':
            if (parse_int_option(optarg, -20, 19, &v, why_num, sizeof(why_num)) != 0)
                return command_arg_error(&cmd_serve, "--nice: ", optarg, why_num);
            a->nice = (int)v;
            a->nice_given = true;
            break;
        case 'P':
            a->splice = true;
            break;
        case 'u': {
            char why_user[160];
            if (privdrop_resolve(optarg, &a->user, why_user, sizeof(why_user)) < 0)
                return command_usage_error(&cmd_serve, "--user: %s", why_user);
            /* not root, only the user serve already is: told now, as run
             * tells its --gateway-user, not once the policy is loaded and
             * the listeners bound ("cannot become user daemon: ...") */
            if (geteuid() != 0 && privdrop_is_already(&a->user, why_user, sizeof(why_user)) < 0)
                return addr_error("--user", optarg, why_user);
            a->drop = true;
            break;
        }
        case 'h':
            command_help(&cmd_serve);
            return 1;
        default: /* ':' (a missing value) or an unknown option */
            return command_option_error(&cmd_serve, c, argv, options);
        }
    }
    if (optind < argc)
        return command_arg_error(&cmd_serve, "unexpected argument ", argv[optind], "");
    if (a->policy == NULL)
        return command_usage_error(&cmd_serve, "--policy FILE is required");
    if (a->nlistens == 0) {
        const char *why;
        if (listen_addr_parse("127.0.0.1:3128", &a->listens[0], &why) < 0)
            return command_usage_error(&cmd_serve, "default listen address: %s", why);
        a->nlistens = 1;
    }
    return 0;
}

/* After the switch to --user: what SIGHUP will need and the user cannot
 * reach is said now, not at the first reload. */
/* 0 when this process may remove the unix socket at <path> (bound before
 * --user) at exit, else an errno: a folder it cannot write, or a sticky
 * one (/tmp) where neither the folder nor the socket is its own. */
static int socket_unremovable(const char *path)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else
        slash[slash == dir] = '\0';
    struct stat ds, fs;
    if (access(dir, W_OK | X_OK) != 0 || stat(dir, &ds) != 0 || lstat(path, &fs) != 0)
        return errno;
    if ((ds.st_mode & S_ISVTX) != 0 && ds.st_uid != geteuid() && fs.st_uid != geteuid())
        return EPERM;
    return 0;
}

/* The files are named shown \ooo (text_shown()), as the usage errors name
 * them: a path holding a line end or a terminal escape would forge lines.
 * <alerts_are_log>: --alerts names the log's file (log_same_file()), which
 * is the log's stream, one file said once, under the log's name. */
static void warn_unreachable_files(const struct serve_args *a, bool alerts_are_log)
{
    if (access(a->policy, R_OK) != 0) {
        int e = errno;
        char *shown = text_shown(a->policy);
        fprintf(stderr,
                "sluice serve: warning: user %s cannot read the policy %s (%s): SIGHUP reloads "
                "will fail and keep the policy loaded now\n",
                a->user.name, shown, strerror(e));
        free(shown);
    }
    const char *files[] = {a->log, alerts_are_log ? NULL : a->alerts};
    for (size_t i = 0; i < 2; i++)
        if (files[i] != NULL && strcmp(files[i], "-") != 0 && access(files[i], W_OK) != 0) {
            int e = errno;
            char *shown = text_shown(files[i]);
            fprintf(stderr,
                    "sluice serve: warning: user %s cannot write %s (%s): it stays open, but "
                    "SIGHUP cannot reopen it after a rotation\n",
                    a->user.name, shown, strerror(e));
            free(shown);
        }
    for (size_t i = 0; i < a->nlistens; i++) {
        const char *path = ((const struct sockaddr_un *)(const void *)&a->listens[i].ss)->sun_path;
        int e = a->listens[i].kind == LISTEN_UNIX && path[0] != '\0' ? socket_unremovable(path) : 0;
        if (e != 0) {
            char *shown = text_shown(path);
            fprintf(stderr,
                    "sluice serve: warning: user %s cannot remove the socket %s at exit (%s): it "
                    "stays, and the next start replaces it\n",
                    a->user.name, shown, strerror(e));
            free(shown);
        }
    }
}

/* Standard output that serve's caller left closed is /dev/null
 * (std_fds_ensure()): a decision log written there, by default, with
 * `--log -` or a path naming it (/dev/stdout), would go nowhere without a
 * word. */
static void warn_closed_stdout(const struct serve_args *a)
{
    struct stat out, st;
    if (!(std_fds_closed() & (1u << STDOUT_FILENO)) || fstat(STDOUT_FILENO, &out) != 0)
        return;
    const struct {
        const char *path; /* as given; NULL: not given */
        bool null_is_out; /* not given means standard output */
        const char *what; /* "the ... to /dev/null" */
        const char *option;
    } outs[] = {{a->log, true, "decision log goes", "log"},
                {a->alerts, false, "alerts go", "alerts"}};
    for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++) {
        const char *f = outs[i].path;
        bool to_out = f == NULL ? outs[i].null_is_out : strcmp(f, "-") == 0;
        if (f != NULL && !to_out && strcmp(f, "/dev/null") != 0 && stat(f, &st) == 0)
            to_out = st.st_dev == out.st_dev && st.st_ino == out.st_ino;
        if (to_out)
            fprintf(stderr,
                    "sluice serve: warning: standard output was closed when serve started: the "
                    "%s to /dev/null; name a file with --%s\n",
                    outs[i].what, outs[i].option);
    }
}

static int serve_main(int argc, char **argv)
{
    struct serve_args *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        fputs("sluice serve: out of memory\n", stderr);
        return EXIT_USAGE;
    }
    int rc = parse_args(argc, argv, a);
    if (rc != 0) {
        free(a);
        return rc == 1 ? EXIT_OK : rc;
    }

    /* Held, not lost, until the gateway's handlers are in place: a SIGTERM
     * while it starts (loading a state store of a million first contacts
     * takes seconds) stops it as soon as it runs; and one during its exit
     * (libevent puts these dispositions back) kills nothing. During the
     * policy's load a SIGTERM or SIGINT stops serve at once, exit 0 (the
     * stop asked for), even when a hung mount holds the load. */
    sigset_t mask, stops;
    stop_signals_hold(&mask);
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT); /* a SIGHUP (SIGUSR1) stays pending: it reloads (reopens) once up */
    int stop_sig = 0;
    unsigned grace = gateway_grace_ms(a->grace_ms);
    struct startup_load how = {
        .who = "sluice serve",
        .stopped = "stopped before serving",
        .stops = &stops,
        .stop_wait_ms = grace < STARTUP_LOAD_STOP_WAIT_MS ? grace : STARTUP_LOAD_STOP_WAIT_MS,
    };
    /* Its alert programs are looked at as the user that will run them,
     * not as root (policy/exec_programs.h); reloads look as that user. */
    if (a->drop && geteuid() == 0)
        policy_exec_programs_run_as(a->user.uid, a->user.gid);
    struct policy *p = startup_load_policy(a->policy, &how, &stop_sig);
    if (p == NULL) {
        free(a);
        return stop_sig != 0 ? EXIT_OK : EXIT_USAGE;
    }
    gateway_print_grant_warnings(p);
    size_t nrules = p->nrules;

    signal(SIGPIPE, SIG_IGN);
    /* A log past RLIMIT_FSIZE: a write that fails (EFBIG, told and retried
     * as a full disk is), not a gateway killed with its traffic */
    signal(SIGXFSZ, SIG_IGN);
    struct gateway_config cfg = {
        .policy_path = a->policy,
        .listens = a->listens,
        .nlistens = a->nlistens,
        .log_path = a->log,
        .alerts_path = a->alerts,
        .state_dir = a->state,
        .state_user = a->drop ? a->user.uid : 0,
        .admin = a->admin_given ? &a->admin : NULL,
        .max_conns = a->max_conns,
        .grace_ms = a->grace_ms,
        .sched = a->sched,
        .splice = a->splice,
    };
    char err[1024]; /* a listener's error names its --listen value \ooo: 450 bytes at most */
    /* From here on a standard error nobody reads cannot stop the gateway,
     * at start as while it serves; the seccomp filter, loaded later with
     * TSYNC, covers the relay's thread too. */
    if (stderr_relay_start(err, sizeof(err)) < 0)
        fprintf(stderr, "sluice serve: warning: %s; its messages may block the gateway\n", err);
    warn_closed_stdout(a);
    struct gateway *gw = gateway_new(&cfg, p, err, sizeof(err));
    /* What is pending goes to its handler. Blocked by serve's caller, they
     * would never come: no SIGTERM would stop serve, no SIGHUP reload it,
     * no exec sink's program be reaped (sink_exec.c waits on SIGCHLD). */
    sigdelset(&mask, SIGTERM);
    sigdelset(&mask, SIGINT);
    sigdelset(&mask, SIGHUP);
    sigdelset(&mask, SIGUSR1);
    sigdelset(&mask, SIGCHLD);
    sigprocmask(SIG_SETMASK, &mask, NULL);
    if (gw == NULL) {
        fprintf(stderr, "sluice serve: %s\n", err);
        stderr_relay_stop(STDERR_RELAY_STOP_MS);
        free(a);
        return EXIT_USAGE;
    }
    /* Before --user: a nice below the one serve was started with needs root. */
    if (priority_apply(a->nice_given ? a->nice : PRIORITY_DEFAULT_NICE, a->nice_given, err,
                       sizeof(err)) < 0)
        fprintf(stderr,
                "sluice serve: warning: --nice: %s; serving at the nice it was started "
                "with\n",
                err);
    char where[1024] = "";
    size_t off = 0;
    for (size_t i = 0; i < gw->nlisteners && off < sizeof(where); i++) {
        int n = snprintf(where + off, sizeof(where) - off, "%s%s", i > 0 ? ", " : "",
                         listener_addr(gw->listeners[i])->text);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    if (a->drop) {
        /* Judged as root, before the switch, as the gateway judged it when
         * it opened the files: the user may not reach a path to them. */
        bool alerts_are_log = a->alerts != NULL && log_same_file(a->log, a->alerts, 0);
        if (privdrop_apply(&a->user, err, sizeof(err)) < 0) {
            fprintf(stderr, "sluice serve: %s\n", err);
            gateway_free(gw);
            stderr_relay_stop(STDERR_RELAY_STOP_MS);
            free(a);
            return EXIT_USAGE;
        }
        warn_unreachable_files(a, alerts_are_log);
    } else if (geteuid() == 0) {
        fputs("sluice serve: warning: running as root; --user USER serves as USER once the "
              "listeners are bound and the files open\n",
              stderr);
    }
    int locked = gateway_lockdown(err, sizeof(err));
    if (locked != 0)
        fprintf(stderr, "sluice serve: warning: %s%s\n", err,
                locked < 0 ? "; serving without it" : "");
    fprintf(stderr, "sluice: serving %zu rule%s on %s%s%s\n", nrules, nrules == 1 ? "" : "s", where,
            a->drop ? " as " : "", a->drop ? a->user.name : "");
    gateway_run(gw);
    gateway_free(gw);
    stderr_relay_stop(STDERR_RELAY_STOP_MS);
    free(a);
    return EXIT_OK;
}

const struct command cmd_serve = {
    .name = "serve",
    .synopsis =
        "--policy FILE [--listen ADDR]... [--admin ADDR] [--log FILE|-] [--alerts FILE|-] "
        "[--state DIR] [--max-conns N] [--grace PERIOD] [--sched batch|normal] [--nice N] [--splice] "
        "[--user USER[:GROUP]]",
    .summary = "run the egress gateway (an HTTP proxy) under a policy",
    .help = "  --policy FILE    the policy to enforce (reloaded on SIGHUP)\n"
            "  --listen ADDR    HOST:PORT, [V6]:PORT or unix:/path; repeatable\n"
            "                   (default 127.0.0.1:3128; a unix socket is made mode 0660)\n"
            "  --log FILE|-     the decision log, JSON lines (default: standard output)\n"
            "  --max-conns N    concurrent client connections (default 4096)\n"
            "  --grace PERIOD   on SIGTERM/SIGINT, time left to requests in flight, then to\n"
            "                   alert sinks and the logs' last writes (default 5s)\n"
            "  --sched CLASS    batch (default): the gateway does not preempt the process\n"
            "                   feeding it on a shared CPU, it moves the data in larger\n"
            "                   batches; normal: the class it was started with\n"
            "  --nice N         the gateway's nice, -20 to 19 (default -10 when started at\n"
            "                   nice 0 as root: processes it wakes on its CPU wait for the\n"
            "                   end of its batch instead of preempting it at each request)\n"
            "  --splice         tunnels that stream move their bytes with splice(2): less\n"
            "                   CPU for the gateway, more for a receiver on this host\n"
            "                   (default: they copy, 256 KiB at a time, but for clients\n"
            "                   on a unix socket, whose relay copies them anyway)\n"
            "  --admin ADDR     serve /metrics (Prometheus) and /healthz on PORT, HOST:PORT,\n"
            "                   [V6]:PORT or unix:/path (a bare PORT binds 127.0.0.1)\n"
            "  --alerts FILE|-  alert lines, JSON (default: into the decision log's stream)\n"
            "  --state DIR      the state store (SQLite, DIR/sluice.db): first-contact memory,\n"
            "                   baselines, the webhook queue (default: none, memory only)\n"
            "  --user USER[:GROUP]  once listeners are bound and files open, serve as USER\n"
            "                   (needs root; supplementary groups dropped, no_new_privs)\n",
    .main = serve_main,
};
