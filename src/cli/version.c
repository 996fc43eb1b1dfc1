/* sluice version: the version and the libraries it was built against. */
#include <event2/event.h>
#include <jansson.h>
#include <idn2.h>
#include <libpsl.h>
#include <openssl/crypto.h>
#include <seccomp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "cli/commands.h"

static int version_main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return command_help(&cmd_version);
    if (argc > 1)
        return command_arg_error(&cmd_version, "unexpected argument ", argv[1], "");
    printf("sluice %s\n", SLUICE_VERSION);
    printf("libevent %s, %s, libyaml %s, jansson %s\n", event_get_version(),
           OpenSSL_version(OPENSSL_VERSION), yaml_get_version_string(), jansson_version_str());
    const struct scmp_version *sv = seccomp_version();
    const char *idn = idn2_check_version(NULL);
    printf("libidn2 %s, libpsl %s, libsqlite3 %s, libseccomp %u.%u.%u\n", idn != NULL ? idn : "?",
           psl_get_version(), sqlite3_libversion(), sv != NULL ? sv->major : 0,
           sv != NULL ? sv->minor : 0, sv != NULL ? sv->micro : 0);
    return EXIT_OK;
}

const struct command cmd_version = {
    .name = "version",
    .synopsis = "",
    .summary = "print the version and the libraries sluice was built with",
    .help = "",
    .main = version_main,
};
