/* sluice: dispatch to one subcommand (cli/commands.c holds the table). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "util/std_fds.h"

int main(int argc, char **argv)
{
    if (std_fds_ensure() < 0)
        return EXIT_USAGE; /* no /dev/null, and perhaps no standard error to say so */
    if (argc < 2) {
        commands_print_help(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        commands_print_help(stdout);
        return EXIT_OK;
    }
    if (strcmp(name, "--version") == 0)
        name = "version";
    const struct command *cmd = commands_find(name);
    if (cmd == NULL) {
        fprintf(stderr, "sluice: unknown command '%s'\n", name);
        fputs("usage: sluice COMMAND [ARGS]... (sluice --help lists the commands)\n", stderr);
        return EXIT_USAGE;
    }
    return cmd->main(argc - 1, argv + 1);
}
