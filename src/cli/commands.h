/* commands: the subcommand table and what every subcommand shares.
 *
 * One file per subcommand (cli/check.c, cli/version.c, ...), each exporting
 * one `struct command`; main() dispatches through commands_find(). Exit
 * statuses are SPEC.md's: 0 success, 1 problems found, 2 usage or
 * configuration error (a one-line message on standard error). */
#ifndef SLUICE_CLI_COMMANDS_H
#define SLUICE_CLI_COMMANDS_H

#include <stdio.h>

struct option;

enum exit_status { EXIT_OK = 0, EXIT_PROBLEMS = 1, EXIT_USAGE = 2 };

struct command {
    const char *name;
    const char *synopsis;               /* one line: the arguments after the name */
    const char *summary;                /* one line: what it does */
    const char *help;                   /* the rest of `sluice NAME --help` */
    int (*main)(int argc, char **argv); /* argv[0] is the command name */
};

extern const struct command cmd_audit;
extern const struct command cmd_calc;
extern const struct command cmd_check;
extern const struct command cmd_run;
extern const struct command cmd_serve;
extern const struct command cmd_version;

/* The table, terminated by NULL. */
extern const struct command *const commands[];

const struct command *commands_find(const char *name);
/* Prints `sluice --help`. */
void commands_print_help(FILE *out);
/* Prints "usage: sluice NAME SYNOPSIS" to standard error, returns EXIT_USAGE. */
int command_usage(const struct command *cmd);
/* Prints `sluice NAME --help` to standard output, returns EXIT_OK. */
int command_help(const struct command *cmd);
/* Reports "sluice NAME: <message>" plus the usage line; returns EXIT_USAGE. */
int command_usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* command_usage_error() for an argument as given: "BEFORE'RAW'AFTER", <raw>
 * shown \ooo (text_shown()): an argument (a file name a glob expanded, one
 * that starts with '-') may hold a line end or a terminal escape, which
 * must not write lines of its own into standard error. */
int command_arg_error(const struct command *cmd, const char *before, const char *raw,
                      const char *after);

/* The usage error for what getopt_long() returned as <c> (':' for a
 * missing value, anything else for an unknown option, an abbreviation of
 * more than one of <options>, or a value given to one that takes none),
 * naming the option at fault; returns EXIT_USAGE. */
int command_option_error(const struct command *cmd, int c, char **argv,
                         const struct option *options);

/* For what getopt_long() returned as <c>: when it is the val of a flag of
 * <options> that takes a value, not in <repeatable> (those vals, or NULL),
 * and its bit in <seen> (one per entry of <options>, 0 before the first
 * call) is set already, the usage error "--NAME given twice", EXIT_USAGE;
 * else sets the bit and returns 0. A flag that kept its last value would
 * have a wrapper that adds one run another policy, silently. */
int command_option_once(const struct command *cmd, int c, const struct option *options,
                        const char *repeatable, unsigned *seen);

#endif
