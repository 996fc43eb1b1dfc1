/* sluice: dispatch to one subcommand (cli/commands.c holds the table). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cli/commands.h"
#include "util/env.h"
#include "util/std_fds.h"
#include "util/text_json.h"

/* A report that did not reach standard output (a full disk, a file system
 * that fails the write) must not pass for a clean run: `sluice check p.yaml
 * > report.txt` exited 0 on a full disk with the report lost. What is left
 * in the buffer is written now; a failure now or at any earlier write is
 * exit 2. */
static int finish_stdout(const char *name, int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    int e = errno;
    fprintf(stderr, "sluice%s%s: standard output: write failed%s%s\n", name != NULL ? " " : "",
            name != NULL ? name : "", e != 0 ? ": " : "", e != 0 ? strerror(e) : "");
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    /* libevent's zeroed allocations (an event, a bufferevent, an evbuffer:
     * about ten a connection) as malloc() and a memset(): glibc's calloc()
     * takes no chunk from the thread's cache (before 2.41), malloc() does.
     * Before any other libevent call, as libevent asks. */
    event_set_mem_functions(malloc, realloc, free);
    if (std_fds_ensure() < 0)
        return EXIT_USAGE; /* no /dev/null, and perhaps no standard error to say so */
    /* Before any thread: an off-hours zone's conversion then only replaces
     * TZ's value, never adds it under a thread reading the environment
     * (util/env.h). */
    env_tz_pin();
    if (argc < 2) {
        commands_print_help(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    bool help = strcmp(name, "help") == 0;
    /* `sluice help --help` too: help about help is the list, not an
     * unknown command "--help" */
    bool help_help =
        help && argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0);
    if ((help && argc == 2) || help_help || strcmp(name, "--help") == 0 ||
        strcmp(name, "-h") == 0) {
        commands_print_help(stdout);
        return finish_stdout(NULL, EXIT_OK);
    }
    if (help && argc > 3) {
        fputs("usage: sluice help [COMMAND]\n", stderr);
        return EXIT_USAGE;
    }
    if (help)
        name = argv[2]; /* `sluice help check` is `sluice check --help` */
    if (strcmp(name, "--version") == 0)
        name = "version";
    const struct command *cmd = commands_find(name);
    if (cmd == NULL) {
        /* shown \ooo, as the commands show what they refuse: a name with a
         * line end would write a line of its own */
        char *shown = text_shown(name);
        fprintf(stderr, "sluice: unknown command '%s'\n", shown);
        free(shown);
        fputs("usage: sluice COMMAND [ARGS]... (sluice --help lists the commands)\n", stderr);
        return EXIT_USAGE;
    }
    if (help)
        return finish_stdout(cmd->name, command_help(cmd));
    return finish_stdout(cmd->name, cmd->main(argc - 1, argv + 1));
}
