#include "cli/commands.h"

#include <getopt.h>
#include <stdarg.h>
#include <string.h>

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
    fputs("\n`sluice COMMAND --help` describes one command.\n"
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

int command_option_error(const struct command *cmd, int c, char **argv)
{
    const char *opt = argv[optind - 1];
    if (c == ':')
        return command_usage_error(cmd, "%s needs a value", opt);
    return command_usage_error(cmd, "unknown option '%s'", opt);
}
