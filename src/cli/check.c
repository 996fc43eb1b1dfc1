/* sluice check: validates a policy and prints the egress audit on paper.
 * Exit 0 when clean (warnings allowed, but under --strict), 1 on errors
 * (including grants expired as of --now) and, under --strict, on warnings,
 * 2 on usage errors or an unreadable file. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "policy/lint.h"
#include "policy/policy.h"
#include "policy/report.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/wall_clock.h"

struct check_args {
    const char *file;
    int32_t today;
    int warn_days; /* -1: the policy's alerts.expiry_warn_days, else 14 */
    enum report_format format;
    bool strict; /* warnings fail the check too */
};

static int parse_args(int argc, char **argv, struct check_args *a)
{
    static const struct option options[] = {
        {"now", required_argument, NULL, 'n'},    {"warn-days", required_argument, NULL, 'w'},
        {"format", required_argument, NULL, 'f'}, {"strict", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    /* the clock serve decides expiry by: time() may still name the day
     * before for a tick after a UTC midnight */
    a->today = day_of(wall_clock_seconds());
    a->warn_days = -1;
    a->format = REPORT_TEXT;
    a->strict = false;
    opterr = 0;
    optind = 1;
    int c;
    unsigned seen = 0; /* each flag once: a second --now judged another day, silently */
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        long v;
        char why_num[64]; /* what is wrong with a number given */
        int got = command_option_once(&cmd_check, c, options, NULL, &seen);
        if (got != 0)
            return got;
        switch (c) {
        case 'n':
            got = parse_date(optarg, &a->today);
            if (got == -2)
                return command_arg_error(&cmd_check, "--now: ", optarg,
                                         " is before 1970-01-01, the earliest date sluice reads");
            if (got == -3)
                return command_arg_error(&cmd_check, "--now: ", optarg,
                                         " is not a day of the calendar");
            if (got != 0)
                return command_arg_error(&cmd_check, "--now: ", optarg,
                                         " is not a YYYY-MM-DD date");
            break;
        case 'w':
            if (parse_int_option(optarg, 0, 3650, &v, why_num, sizeof(why_num)) != 0)
                return command_arg_error(&cmd_check, "--warn-days: ", optarg, why_num);
            a->warn_days = (int)v;
            break;
        case 'f':
            if (strcmp(optarg, "text") == 0)
                a->format = REPORT_TEXT;
            else if (strcmp(optarg, "json") == 0)
                a->format = REPORT_JSON;
            else
                return command_arg_error(&cmd_check, "--format: ", optarg, " is not text or json");
            break;
        case 's':
            a->strict = true;
            break;
        case 'h':
            command_help(&cmd_check);
            return 1;
        default: /* ':' (a missing value) or an unknown option */
            return command_option_error(&cmd_check, c, argv, options);
        }
    }
    if (optind >= argc)
        return command_usage_error(&cmd_check, "missing policy FILE");
    /* named, as serve and audit name what they do not take: a glob that
     * matched two files said "expected one policy FILE", naming neither */
    if (optind + 1 < argc)
        return command_arg_error(&cmd_check, "unexpected argument ", argv[optind + 1],
                                 " (check reads one policy FILE)");
    a->file = argv[optind];
    /* `sluice check "$POLICY"` with POLICY unset: "cannot read : No such
     * file or directory" named nothing */
    if (a->file[0] == '\0')
        return command_usage_error(&cmd_check,
                                   "FILE is an empty string, not a file name (an unset variable?)");
    return 0;
}

static int check_main(int argc, char **argv)
{
    struct check_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc == 1)
        return EXIT_OK; /* --help */
    if (rc != 0)
        return rc;

    /* The file is judged by the descriptor that is read, not by its path
     * (a stat() then an open() could judge one file and read another put
     * there between them: a FIFO, a device). */
    int fd = policy_open(a.file);
    struct stat st;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    if (why != NULL) {
        /* the caller's name, shown \ooo as in the report: one holding a
         * line end or an escape byte would write lines of its own */
        char *shown = text_shown(a.file);
        fprintf(stderr, "sluice check: cannot read %s: %s\n", shown, why);
        free(shown);
        if (fd >= 0)
            close(fd);
        return EXIT_USAGE;
    }

    struct diag d;
    diag_init(&d, a.file);
    /* A policy with errors still comes back, as far as it parsed, so that
     * its expired grants are listed with the other errors; it gets no
     * report summary. */
    struct policy *p =
        policy_load_fd(fd, a.file, POLICY_LOAD_SECRETS_OPTIONAL | POLICY_LOAD_KEEP_PARTIAL, &d);
    close(fd);
    bool partial = p != NULL && diag_has_errors(&d);
    int warn_days = a.warn_days;
    if (p != NULL) {
        if (warn_days < 0)
            warn_days = lint_warn_days(p);
        /* a partial policy's rules that parsed: its expired grants are
         * errors too */
        policy_lint(p, a.today, warn_days, &d);
        if (!partial)
            report_note_reach(p, &d);
    } else if (warn_days < 0) {
        warn_days = LINT_DEFAULT_WARN_DAYS;
    }

    report_write(stdout, a.format, a.file, partial ? NULL : p, &d, a.today, warn_days, a.strict);

    bool failed = diag_has_errors(&d) || (a.strict && diag_fails_strict(&d));
    int status = failed ? EXIT_PROBLEMS : EXIT_OK;
    policy_free(p);
    diag_free(&d);
    return status;
}

const struct command cmd_check = {
    .name = "check",
    .synopsis = "FILE [--now YYYY-MM-DD] [--warn-days N] [--format text|json] [--strict]",
    .summary = "validate a policy and print what each agent can reach, at which tier",
    .help = "Errors (exit 1), each as FILE:LINE: FIELD: MESSAGE:\n"
            "  - YAML: syntax, UTF-16, line breaks other than LF or CR LF, anchors and\n"
            "    aliases, more than one document, nesting over 16 levels, a file over\n"
            "    16 MiB\n"
            "  - keys unknown or given twice, wrong types (a plain no, on or ~ where a name\n"
            "    goes: quote it), leading zeros\n"
            "  - bad values: hosts, CIDRs, ports, methods, tiers, sizes, periods, dates,\n"
            "    time zones, hours, days, agent ids, webhook URLs, exec paths; a rate\n"
            "    of 0 requests or 0 bandwidth (it would limit nothing)\n"
            "  - duplicate rules, agent ids or dns.static names; too many of a kind\n"
            "  - tier-3 rules without an owner or an expiry date\n"
            "  - owners blank, padded (\" alice \"), a YAML boolean or number, over 1 KiB,\n"
            "    with control, bidirectional or invisible characters\n"
            "  - secrets written in the file (a token is env:NAME)\n"
            "  - grants expired as of --now (default: today, UTC)\n"
            "Warnings (exit 0; exit 1 under --strict):\n"
            "  - grants expiring within --warn-days (default: the policy's\n"
            "    alerts.expiry_warn_days, else 14); tier-3 ones over 365 days ahead\n"
            "  - entries listed twice (deny, ranges, ports, methods, agents, sinks),\n"
            "    naming both lines\n"
            "  - rules that never decide (denied, outranked) or name undefined agents\n"
            "  - owners that name a team or a group (@org/team: a '/'), not a person\n"
            "  - tokens short, shared, blank-edged, no secret, or unset (not --strict)\n"
            "  - exec sink programs missing, not a regular file or not executable here\n"
            "    (not --strict: CI may not have them installed)\n"
            "  - ranges wider than they look: no prefix length, all of IPv4, the\n"
            "    metadata address, deny_ranges without default, cidr rules and pins\n"
            "    over denied ranges\n"
            "  - hosts written in other than ASCII, wildcards over open suffixes\n"
            "  - settings: mode: report, ECH allowed, agents: [], no rules, DNS servers\n"
            "    off the local network, http:// webhooks\n"
            "  - rates a tunnel is not held to (more than 8 others cover its host)\n"
            "  - a reach per agent of more than 1,000,000 entries: the report lists that many\n"
            "README.md (sluice check) lists each one.\n"
            "The report lists rules per tier, every tier-3 grant with its owner, expiry and\n"
            "days left, and for each agent every destination it can reach and at which tier.\n"
            "\n"
            "  --now YYYY-MM-DD   judge expiry as of this day (UTC)\n"
            "  --warn-days N      warn about grants expiring within N days\n"
            "  --format text|json one JSON document instead of text\n"
            "  --strict           warnings fail the check too (exit 1, \"ok\": false)\n",
    .main = check_main,
};
