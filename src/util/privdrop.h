/* privdrop: the gateway's switch from root to an unprivileged user
 * (serve --user, and run's own gateway when run is root).
 *
 * The gateway needs root, if at all, only to bind its listeners (a port
 * below 1024, a unix socket in /run) and open its files (/var/log, a state
 * directory). Everything after that (parsing what agents send, answering
 * DNS, running alert programs) is done as <user> with every supplementary
 * group dropped and no_new_privs set, so a flaw in that code does not hand
 * out root. */
#ifndef SLUICE_UTIL_PRIVDROP_H
#define SLUICE_UTIL_PRIVDROP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The longest USER:GROUP privdrop_resolve() takes, each byte shown \ooo. */
#define PRIVDROP_NAME_SHOWN (4 * (63 + 1 + 63) + 1)

struct privdrop_target {
    uid_t uid;
    gid_t gid;
    /* as given, "nobody", "sluice:adm", "65534", shown \ooo (text_shown()):
     * for messages, and a name the user database holds may hold a line end
     * or a terminal escape, which would write lines of its own */
    char name[PRIVDROP_NAME_SHOWN];
};

/* Resolves <spec>, USER or USER:GROUP (names or numbers; without GROUP the
 * user's primary group), into <out>. Returns 0, or -1 with <err> filled
 * ("no user 'x'"). Reads the user and group databases: call it before
 * anything is bound. */
int privdrop_resolve(const char *spec, struct privdrop_target *out, char *err, size_t errlen);

/* True when <t>'s uid and gid both have a mapping in the process's user
 * namespace (/proc/self/uid_map, gid_map): inside a namespace that maps
 * only root, no other user can be become. True when the maps cannot be
 * read (a kernel without user namespaces). */
bool privdrop_mapped(const struct privdrop_target *t);

/* Not as root, what privdrop_apply() takes for <t>: the process's real and
 * effective uid and gid already <t>'s, and no supplementary group but
 * <t>'s gid (only root can drop the others). Returns 0, or -1 with <err>
 * filled ("not running as root", "not running as root, and its
 * supplementary groups (4, 27) cannot be dropped"). */
int privdrop_is_already(const struct privdrop_target *t, char *err, size_t errlen);

/* Becomes <t>: as root, supplementary groups set to <t>'s group alone, then
 * real, effective and saved gid and uid; then checks that root cannot be
 * regained. Not as root, only a <t> that the process already is
 * (privdrop_is_already()) is accepted. Either way no_new_privs is set and the
 * process is made not dumpable (PR_SET_DUMPABLE 0), but for a <t> that is
 * root (uid 0), which keeps what root has, as without --user (the lockdown
 * decides on no_new_privs). An unmapped <t>
 * (privdrop_mapped) is refused before anything changes. Returns 0, or -1 with
 * <err> filled; on -1 the caller must not go on serving. */
int privdrop_apply(const struct privdrop_target *t, char *err, size_t errlen);

#endif
