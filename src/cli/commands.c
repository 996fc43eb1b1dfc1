#include "cli/commands.h"

#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/text_json.h"

const struct command *const commands[] = {
    &cmd_audit, &cmd_calc, &cmd_check, &cmd_run, &cmd_serve, &cmd_version, NULL,
};

const struct command *commands_find(const char *name)
{
    for (size_t i = 0; commands[i] != NULL; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

void commands_print_help(FILE *out)
{
    fputs("sluice: a deny-by-default egress gateway for AI agents\n\n"
          "usage: sluice COMMAND [ARGS]...\n\ncommands:\n",
          out);
    for (size_t i = 0; commands[i] != NULL; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fputs("\n`sluice help COMMAND` (or `sluice COMMAND --help`) describes one command.\n"
          "Exit status: 0 success, 1 problems found, 2 usage or configuration error.\n",
          out);
}

int command_usage(const struct command *cmd)
{
    fprintf(stderr, "usage: sluice %s%s%s\n", cmd->name, cmd->synopsis[0] != '\0' ? " " : "",
            cmd->synopsis);
    return EXIT_USAGE;
}

int command_help(const struct command *cmd)
{
    printf("usage: sluice %s%s%s\n\n%s\n", cmd->name, cmd->synopsis[0] != '\0' ? " " : "",
           cmd->synopsis, cmd->summary);
    if (cmd->help != NULL && cmd->help[0] != '\0')
        printf("\n%s", cmd->help);
    return EXIT_OK;
}

int command_usage_error(const struct command *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sluice %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return command_usage(cmd);
}

/* True when getopt_long() refused <arg> as "--NAME=VALUE" for a known
 * option NAME (or an abbreviation of it) that takes no value: it then
 * sets optopt to that option's val, as it does to the letter of an
 * unknown short option. An argument like that fails as soon as getopt
 * reads it, so a later error never finds one before it. */
static bool is_value_for_flag(const char *arg, const struct option *options)
{
    if (strncmp(arg, "--", 2) != 0 || strchr(arg, '=') == NULL)
        return false;
    size_t n = strcspn(arg + 2, "=");
    for (size_t i = 0; options[i].name != NULL; i++)
        if (options[i].has_arg == no_argument && options[i].val == optopt &&
            strncmp(options[i].name, arg + 2, n) == 0)
            return true;
    return false;
}

/* The options that "--NAME" or "--NAME=VALUE" <arg> abbreviates, as
 * "--a, --b" in <out>; returns how many there are. getopt_long() refuses
 * an abbreviation of more than one (`--p` for --policy or --proxy) as it
 * does an unknown option, with optopt 0. */
static size_t abbreviated(const char *arg, const struct option *options, char *out, size_t cap)
{
    size_t n = strncmp(arg, "--", 2) == 0 ? strcspn(arg + 2, "=") : 0, count = 0, o = 0;
    out[0] = '\0';
    for (size_t i = 0; n > 0 && options[i].name != NULL; i++) {
        if (strncmp(options[i].name, arg + 2, n) != 0)
            continue;
        int w = snprintf(out + o, cap - o, "%s--%s", count > 0 ? ", " : "", options[i].name);
        if (w > 0 && (size_t)w < cap - o)
            o += (size_t)w;
        count++;
    }
    return count;
}

int command_arg_error(const struct command *cmd, const char *before, const char *raw,
                      const char *after)
{
    char *shown = text_shown(raw);
    int rc = command_usage_error(cmd, "%s'%s'%s", before, shown, after);
    free(shown);
    return rc;
}

/* "unknown option 'ARG'": a file name that starts with '-' (`sluice check
 * "$f"` over a folder an agent writes to) is one (command_arg_error()). */
static int unknown_option(const struct command *cmd, const char *arg)
{
    return command_arg_error(cmd, "unknown option ", arg, "");
}

int command_option_once(const struct command *cmd, int c, const struct option *options,
                        const char *repeatable, unsigned *seen)
{
    if (c == 0 || (repeatable != NULL && strchr(repeatable, c) != NULL))
        return 0;
    for (size_t i = 0; i < sizeof(*seen) * CHAR_BIT && options[i].name != NULL; i++) {
        if (options[i].val != c || options[i].has_arg != required_argument)
            continue;
        if (*seen & (1u << i))
            return command_usage_error(cmd, "--%s given twice", options[i].name);
        *seen |= 1u << i;
    }
    return 0;
}

int command_option_error(const struct command *cmd, int c, char **argv,
                         const struct option *options)
{
    const char *opt = argv[optind - 1];
    if (c == ':')
        return command_usage_error(cmd, "%s needs a value", opt);
    if (optopt == 0) { /* an unknown or ambiguous long option, the argument before optind */
        char names[256];
        if (abbreviated(opt, options, names, sizeof(names)) > 1)
            return command_usage_error(cmd, "'%.*s' is ambiguous (%s)", (int)strcspn(opt, "="), opt,
                                       names);
        return unknown_option(cmd, opt);
    }
    if (is_value_for_flag(opt, options))
        return command_usage_error(cmd, "'%.*s' takes no value", (int)strcspn(opt, "="), opt);
    /* An unknown short option: inside a cluster ("-xy") getopt has not
     * moved optind past it, and argv[optind - 1] is the argument before
     * (the policy file, say), so the letter is what can be named. */
    char letter[3] = {'-', (char)optopt, '\0'};
    return unknown_option(cmd, letter);
}
