/* store_owners: who may own the state store (see store_int.h): the state
 * directory, each directory on the way to it and the store's files, owned
 * by root, the gateway's user or serve --user's, none writable by every
 * user (a directory above but with the sticky bit), each file a regular
 * file; the messages that say which is not and what to do. */
#include "state/store_int.h"

#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/text_json.h"

/* ---- who may own the store ------------------------------------------------- */

/* Whether <uid> may own the state directory, a directory or link on the way
 * to it, or one of the store's files: root, the user the gateway runs as,
 * or the one it will serve as (<user>, serve --user; 0 for none). Any
 * other user could put a store of their own in place of sluice.db (first
 * contacts that keep alerts quiet, forged queued alerts) or move the
 * directory away and put one of theirs in its place. */
static bool trusted_uid(uid_t uid, uid_t user)
{
    return uid == 0 || uid == geteuid() || uid == user;
}

/* "user alice (uid 1000)", or "uid 1000" for a uid no user has, in <buf>. */
static const char *owner_text(uid_t uid, char *buf, size_t n)
{
    struct passwd pw, *found = NULL;
    char names[1024];
    if (getpwuid_r(uid, &pw, names, sizeof(names), &found) == 0 && found != NULL)
        snprintf(buf, n, "user %s (uid %lu)", found->pw_name, (unsigned long)uid);
    else
        snprintf(buf, n, "uid %lu", (unsigned long)uid);
    return buf;
}

enum owned { OWNED_DIR, OWNED_ON_THE_WAY, OWNED_FILE };

/* The message for <path>, <what> of the state directory <dir>, owned by
 * <uid>, an untrusted user. */
static char *untrusted(const char *dir, const char *raw, enum owned what, uid_t uid, uid_t user)
{
    char who[192], me[192], as[192], ok[448], path[4 * 4200];
    text_shown_into(path, sizeof(path), raw); /* as <dir> is: see store_open_try() */
    owner_text(uid, who, sizeof(who));
    owner_text(geteuid(), me, sizeof(me));
    int n = snprintf(ok, sizeof(ok), "root%s%s%s", geteuid() != 0 ? " or " : "",
                     geteuid() != 0 ? me : "", geteuid() != 0 ? " (the gateway)" : "");
    if (user != 0 && user != geteuid() && n > 0 && (size_t)n < sizeof(ok))
        snprintf(ok + n, sizeof(ok) - (size_t)n, " or %s (--user)",
                 owner_text(user, as, sizeof(as)));
    if (what == OWNED_DIR)
        return store_msg(
            "%s: the state directory is owned by %s, not by %s: that user could put a "
            "store of their own there (first contacts that keep alerts quiet); chown it, "
            "or use a directory of sluice's own",
            dir, who, ok);
    if (what == OWNED_FILE)
        return store_msg(
            "%s: owned by %s, not by %s: that user could put a store of their own in its "
            "place (first contacts that keep alerts quiet); remove it, or chown it if it "
            "is sluice's",
            path, who, ok);
    return store_msg(
        "%s: %s, on the way to the state directory, is owned by %s, not by %s: that user "
        "could move the state directory away and put one of their own in its place; use "
        "a state directory whose every parent is root's or the gateway's",
        dir, path, who, ok);
}

#define ON_THE_WAY "on the way to the state directory"

/* Checks <path>, the state directory resolved (resolve_dir(); shown as
 * <dir>), and each directory above it: each must be owned by a trusted
 * uid, and none above it may be writable by every user but with the
 * sticky bit (/tmp: there only an entry's owner may move it). Returns 0,
 * or -1 with <*err>. */
static int check_chain(const char *dir, const char *path, uid_t user, char **err)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s", path);
    for (bool first = true;; first = false) {
        struct stat st;
        if (lstat(p, &st) != 0) {
            int e = errno;
            char *sp = text_shown(p);
            *err = store_msg("%s: cannot check %s, " ON_THE_WAY ": %s", dir, sp, strerror(e));
            free(sp);
            return -1;
        }
        if (!trusted_uid(st.st_uid, user)) {
            *err = untrusted(dir, p, first ? OWNED_DIR : OWNED_ON_THE_WAY, st.st_uid, user);
            return -1;
        }
        if (!first && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
            char *sp = text_shown(p);
            *err =
                store_msg("%s: %s, " ON_THE_WAY ", is writable by every user (mode %04o) without "
                          "the sticky bit: any user could move the state directory away and put "
                          "one of their own in its place; use a state directory whose every parent "
                          "is root's or the gateway's",
                          dir, sp, (unsigned)(st.st_mode & 07777));
            free(sp);
            return -1;
        }
        char *slash = strrchr(p, '/');
        if (slash == NULL || strcmp(p, "/") == 0)
            return 0;
        slash[slash == p] = '\0'; /* "/a" -> "/" */
    }
}

/* What kind of file <mode> is not a regular file nor a link of: "a FIFO". */
static const char *odd_kind(mode_t mode)
{
    return S_ISFIFO(mode)   ? "a FIFO"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a file";
}

/* Checks the state directory <real>, resolved (shown as <shown>), and the
 * directories above it, then the store's files that exist: each owned by
 * a trusted uid, no file writable by every user, and each a regular file
 * (or a link, which the open refuses): SQLite opened a store whose -wal
 * was a FIFO or whose -shm was a directory, and failed every commit of the
 * run ("disk I/O error (Illegal seek)"), where it should be said at the
 * start, as a store that cannot be written is. The directory then
 * holds nothing another user put there, nor can they add or swap a file
 * between this check and the open. Returns 0, or -1 with <*err>. */
int store_check_owners(const char *shown, const char *real, uid_t user, char **err)
{
    int rc = check_chain(shown, real, user, err);
    /* -journal too: SQLite plays a hot rollback journal back into the
     * database at the open, WAL mode or not, so one another user put there
     * (the member of a group-writable DIR's group) wrote the pages of their
     * choice into the store, first contacts that keep alerts quiet. */
    static const char *const files[] = {STORE_FILE, STORE_FILE "-wal", STORE_FILE "-shm",
                                        STORE_FILE "-journal", STORE_LOCK_FILE};
    for (size_t k = 0; rc == 0 && k < sizeof(files) / sizeof(files[0]); k++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", real, files[k]);
        char *sp = text_shown(path);
        if (lstat(path, &st) != 0) {
            if (errno != ENOENT) {
                *err = store_msg("%s: cannot check: %s", sp, strerror(errno));
                rc = -1;
            }
        } else if (!trusted_uid(st.st_uid, user)) {
            *err = untrusted(shown, path, OWNED_FILE, st.st_uid, user);
            rc = -1;
        } else if (!S_ISLNK(st.st_mode) && (st.st_mode & S_IWOTH)) {
            *err = store_msg(
                "%s: writable by every user (mode %04o): any user could write a store of "
                "their own into it (first contacts that keep alerts quiet); remove it, or "
                "chmod o-w it if it is sluice's",
                sp, (unsigned)(st.st_mode & 07777));
            rc = -1;
        } else if (!S_ISLNK(st.st_mode) && !S_ISREG(st.st_mode)) {
            *err = store_msg("%s: not a regular file (%s), which the state store cannot use (every "
                             "commit would fail): remove it",
                             sp, odd_kind(st.st_mode));
            rc = -1;
        }
        free(sp);
    }
    return rc;
}
