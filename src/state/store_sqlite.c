/* store_sqlite: the state store on SQLite (see store.h).
 *
 * Layout (schema version 1, in table meta; a store of another version is
 * not used):
 *   meta(key TEXT PRIMARY KEY, value TEXT)
 *   first_contact(agent TEXT, host TEXT, first_ms INTEGER, PRIMARY KEY(agent, host))
 *   baseline(agent TEXT PRIMARY KEY, req_avg REAL, bytes_avg REAL, since_ms INTEGER,
 *            minute INTEGER)
 *   alert_queue(id INTEGER PRIMARY KEY, sink TEXT, body TEXT, attempts INTEGER,
 *               created_ms INTEGER), index alert_queue_sink(sink, id)
 *   counter(name TEXT PRIMARY KEY, value INTEGER)
 *
 * This file: the store's open (the state directory checked and resolved,
 * its lock taken, a corrupt store moved aside, the next queue id read) and
 * close, and the messages the store makes. Its other files, and what they
 * own, are listed in store_int.h. */
#include "state/store_int.h"
#include "state/store_files.h"
#include "state/store_writer.h"
#include "util/pos_index.h"
#include "util/text_json.h"
#include "util/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

/* The longest message store_msg() makes: with serve's words around it ("sluice:
 * warning: ...; running without a state store (...)") it stays under
 * PIPE_BUF (4096), which the standard error relay takes whole (it cuts a
 * longer line's end: the remedy). A path runs to 4 KB, and a message may
 * name three (the directory as given, resolved, and one on the way). */
#define MSG_MAX  3072
#define MSG_TAIL 1536 /* kept whole past MSG_MAX: the remedy, the path's end */

/* Cuts the middle of <s> (<n> bytes) to MSG_MAX bytes, "..." in its place,
 * never within a UTF-8 sequence: its start (the directory) and its end
 * (the remedy) stay. */
static void cut_middle(char *s, size_t n)
{
    utf8_cut_middle(s, s, n, MSG_MAX - MSG_TAIL - 3, MSG_TAIL, NULL);
}

/* A new message (NULL when out of memory): whole up to MSG_MAX bytes, its
 * middle cut beyond (cut_middle()). */
__attribute__((format(printf, 1, 2))) char *store_msg(const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *out = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (out != NULL) {
        vsnprintf(out, (size_t)n + 1, fmt, again);
        if ((size_t)n > MSG_MAX)
            cut_middle(out, (size_t)n);
    }
    va_end(again);
    return out;
}

/* SQLite's last error on <db>, for standard error, in <buf>: it can hold
 * text of the store's own (a constraint's name, a trigger's message), whose
 * control characters would write lines of their own there. */
const char *store_db_error(sqlite3 *db, char *buf, size_t n)
{
    text_shown_into(buf, n, sqlite3_errmsg(db));
    return buf;
}

static bool is_corruption(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

/* Renames <from> to <to> unless <to> exists. Returns 0, or -1 (errno). */
static int rename_noreplace(const char *from, const char *to)
{
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    /* A file system without RENAME_NOREPLACE: we hold the directory's lock,
     * so no other gateway makes <to> between the look and the rename. */
    struct stat st;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

#define ASIDE_TRIES 1000 /* names tried per second: .corrupt-T, .corrupt-T.1, ... */

/* Moves <path> (and its -wal, -shm and -journal) to <path>.corrupt-<unix time>, or
 * .corrupt-<unix time>.N when that name is taken: two stores found corrupt
 * in the same second (a restart loop) each keep a copy, where the second
 * rename replaced the first. The name moved to goes to <dst>. */
static void move_aside(const char *path, char *dst, size_t dstlen)
{
    static const char *const sfx[] = {"-wal", "-shm", "-journal"};
    long t = (long)time(NULL);
    char to[4300];
    for (int i = 0;; i++) {
        if (i == 0)
            snprintf(to, sizeof(to), "%s.corrupt-%ld", path, t);
        else
            snprintf(to, sizeof(to), "%s.corrupt-%ld.%d", path, t, i);
        if (rename_noreplace(path, to) == 0)
            break;
        if (errno != EEXIST || i == ASIDE_TRIES)
            return; /* not moved: the warning says so */
    }
    snprintf(dst, dstlen, "%s", to);
    /* The log, shared memory and rollback journal follow under the name
     * just taken (a file of that name without its database is a stray
     * one: replaced), so that none is left for the new store to find: a
     * journal left behind was deleted by SQLite at the new store's open
     * (a journal beside an empty database is a stray to it), and the copy
     * lost it. */
    for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++) {
        char from[4200], to_k[4400];
        snprintf(from, sizeof(from), "%s%s", path, sfx[k]);
        snprintf(to_k, sizeof(to_k), "%s%s", to, sfx[k]);
        rename(from, to_k);
    }
}

/* Takes DIR/sluice.lock for <s>, <real> the resolved state directory
 * (shown as <shown>): two gateways writing one store would hand out the same queue
 * ids and overwrite each other's queued alerts. Returns 0, or -1 with
 * <*err> (another gateway holds it: <*held> STORE_HELD_GATEWAY; or it
 * cannot be made). */
static int lock_dir(struct store *s, const char *shown, const char *real, char **err,
                    enum store_held *held)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", real, STORE_LOCK_FILE);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    char sp[4 * sizeof(path)]; /* as <shown> is: see store_open_try() */
    if (s->lock_fd < 0) {
        int e = errno;
        text_shown_into(sp, sizeof(sp), path);
        *err = store_msg("%s: cannot open the state lock: %s", sp, strerror(e));
        return -1;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        text_shown_into(sp, sizeof(sp), path);
        /* An overlapping restart (the gateway before still ends its
         * --grace) lets go of it soon: the caller may try again later */
        if (e == EWOULDBLOCK)
            *held = STORE_HELD_GATEWAY;
        *err = e == EWOULDBLOCK ? store_msg("%s: %s", shown,
                                            "the state store is in use by another sluice gateway "
                                            "(each needs a --state directory of its own)")
                                : store_msg("%s: cannot lock the state store: %s", sp, strerror(e));
        close(s->lock_fd);
        s->lock_fd = -1;
        return -1;
    }
    return 0;
}

#define QID_MAX (INT64_MAX / 2) /* a store whose last queue id is above is not used */

/* Sets <s>'s next queue id past the highest stored, and at 1 at least: the
 * webhook takes an id of 0 or less for an alert not in the store, whose row
 * it would never delete (a store edited by hand can hold any id). Returns
 * SQLITE_OK, or the error with <*why>: a store whose ids were handed out
 * from 1 again would write new alerts over the stored ones (INSERT OR
 * REPLACE), so it is not used; nor is one whose last id leaves too few
 * (the next would overflow). */
static int read_next_qid(struct store *s, char **why)
{
    sqlite3_stmt *q = NULL;
    int rc =
        sqlite3_prepare_v2(s->db, "SELECT coalesce(max(id), 0) FROM alert_queue", -1, &q, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && sqlite3_column_int64(q, 0) > QID_MAX) {
        *why = store_msg("the alert queue's last id is %lld: no queue ids are left for new alerts "
                         "(a store edited by hand?)",
                         (long long)sqlite3_column_int64(q, 0));
        rc = SQLITE_ERROR;
    } else if (rc == SQLITE_ROW) {
        int64_t last = sqlite3_column_int64(q, 0);
        s->next_qid = (last > 0 ? last : 0) + 1;
        s->qadd_lo = s->next_qid;
        rc = SQLITE_OK;
    } else {
        char e[SHOWN_MAX];
        *why = store_msg(
            "cannot read the alert queue's last id (%s): new alerts would take the ids of "
            "stored ones",
            store_db_error(s->db, e, sizeof(e)));
        rc = rc == SQLITE_OK || rc == SQLITE_DONE ? SQLITE_ERROR : rc;
    }
    sqlite3_finalize(q);
    return rc;
}

/* The state directory <dir> resolved (realpath) into <*real>, and the name
 * its messages give it into <*shown>: <given> (<dir> as messages name it),
 * or "DIR (resolved: REAL)" when a symbolic link on its path leads
 * elsewhere, REAL shown as DIR is. Returns 0, or -1 with <*err>. */
static int resolve_dir(const char *dir, const char *given, char **real, char **shown, char **err)
{
    *real = realpath(dir, NULL);
    if (*real == NULL) {
        *err = store_msg("%s: cannot resolve the state directory: %s", given, strerror(errno));
        return -1;
    }
    char *sr = text_shown(*real);
    *shown = strcmp(*real, dir) == 0 ? strdup(given) : store_msg("%s (resolved: %s)", given, sr);
    free(sr);
    if (*shown == NULL) {
        free(*real);
        *real = NULL;
        *err = store_msg("%s: %s", given, "out of memory");
        return -1;
    }
    return 0;
}

/* Opens the store of the resolved state directory <real> (shown as
 * <shown>) for store_open_as(), which checked it. */
static struct store *open_resolved(const char *shown, const char *real, char **err, char **warn,
                                   enum store_held *held)
{
    char *why = NULL;
    struct store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto nomem;
    s->lock_fd = -1;
    s->reads_tail = &s->reads;
    if (lock_dir(s, shown, real, err, held) < 0) {
        free(s);
        return NULL;
    }
    size_t n = strlen(real) + sizeof("/" STORE_FILE);
    if ((s->path = malloc(n)) == NULL)
        goto nomem;
    snprintf(s->path, n, "%s/%s", real, STORE_FILE);
    if ((s->shown = text_shown(s->path)) == NULL)
        goto nomem;
    /* Before SQLite makes or opens a file: see store_files.h */
    int rc =
        store_files_private(real, &why) == 0 ? store_db_open(s->path, &s->db, &why) : SQLITE_PERM;
    if (rc != SQLITE_OK && is_corruption(rc)) {
        char moved[4400] = "";
        move_aside(s->path, moved, sizeof(moved));
        char *sm = text_shown(moved);
        *warn = store_msg(
            "%s: the state store is corrupt (%s); moved to %s and started afresh: first-"
            "contact memory, baselines and queued webhook alerts are lost",
            s->shown, why ? why : "corrupt", moved[0] && sm != NULL ? sm : "(could not move)");
        free(sm);
        free(why);
        why = NULL;
        rc = store_files_private(real, &why) == 0 ? store_db_open(s->path, &s->db, &why)
                                                  : SQLITE_PERM;
    }
    /* Another process's lock that bars reads too (locking_mode=EXCLUSIVE,
     * any lock on a store in rollback-journal mode, which the open must
     * hold alone to turn to WAL): the caller may try again later. */
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
        *held = STORE_HELD_DB;
    if (rc == SQLITE_OK)
        rc = read_next_qid(s, &why);
    /* Commits go through the writer's thread only: without it, no store
     * (a commit on the loop could stall every request). */
    if (rc == SQLITE_OK && (s->writer = store_writer_start(s->path, s->shown, &why)) == NULL)
        rc = SQLITE_ERROR;
    if (rc != SQLITE_OK) {
        /* The state directory as given too, when a link on its path led
         * elsewhere: the operator knows it by that name. */
        char *sr = text_shown(real);
        bool linked = sr == NULL || strcmp(shown, sr) != 0;
        *err = store_msg("%s: cannot open the state store%s%s: %s", s->shown, linked ? " of " : "",
                         linked ? shown : "", why ? why : "error");
        free(sr);
        free(why);
        sqlite3_close(s->db);
        free(s->path);
        free(s->shown);
        close(s->lock_fd);
        free(s);
        return NULL;
    }
    return s;
nomem:
    if (s != NULL) {
        free(s->path);
        free(s->shown);
        if (s->lock_fd >= 0)
            close(s->lock_fd);
    }
    free(s);
    *err = store_msg("%s: %s", shown, "out of memory");
    return NULL;
}

struct store *store_open_as(const char *dir, uid_t user, char **err, char **warn)
{
    enum store_held held;
    return store_open_try(dir, user, err, warn, &held);
}

/* store_open_try() for <dir>, named <given> in its messages. */
static struct store *open_dir(const char *dir, const char *given, uid_t user, char **err,
                              char **warn, enum store_held *held)
{
    struct stat st;

    if (dir[0] == '\0' || strlen(dir) > 4000) {
        *err = store_msg("%s: not a usable state directory", given);
        return NULL;
    }
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0750) != 0) {
            int e = errno;
            /* mkdir() makes nothing at a link's target ("File exists"):
             * the gateway, root here, would make a directory wherever a
             * link put in its way points. Said as such. */
            *err =
                e == EEXIST && lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)
                    ? store_msg("%s: cannot create the state directory: it is a symbolic link to "
                                "a directory that does not exist (not made through a link): make "
                                "that directory, or name one that exists",
                                given)
                    : store_msg("%s: cannot create the state directory: %s", given, strerror(e));
            return NULL;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        *err = store_msg("%s: %s", given, "not a directory");
        return NULL;
    } else if (st.st_mode & S_IWOTH) {
        /* Any user could put a store of their own there (first contacts
         * that keep alerts quiet), a symbolic link in place of sluice.db
         * (followed by a gateway started as root), or take the lock. */
        *err =
            store_msg("%s: the state directory is writable by every user (mode %04o): another user "
                      "could put a store of their own or a symbolic link there; use a directory "
                      "of sluice's own",
                      given, (unsigned)(st.st_mode & 07777));
        return NULL;
    }
    /* The directory is resolved once, here, and only the resolved path is
     * used from then on: a symbolic link the operator put on the way to it
     * (/var/lib/sluice -> /data/sluice) is followed this once, where
     * SQLite's SQLITE_OPEN_NOFOLLOW refused every link on the path, and
     * the store ran from memory. Links in the directory (sluice.db, its
     * -wal and -shm, sluice.lock) are still refused: the lock is opened
     * O_NOFOLLOW, the database SQLITE_OPEN_NOFOLLOW. No race: what is
     * checked is the resolved path, every directory of which check_chain()
     * finds owned by a trusted uid and not writable by every user but
     * with the sticky bit, so only a trusted user (or one of the group of
     * a group-writable directory there, the administrator's choice) could
     * swap one for a link after the check; and SQLite, opening the
     * resolved path with NOFOLLOW, would refuse such a link rather than
     * follow it. A link on the given path changed after the resolution
     * changes nothing: that path is not used again. */
    char *real = NULL, *shown = NULL;
    if (resolve_dir(dir, given, &real, &shown, err) < 0)
        return NULL;
    struct store *s = NULL;
    if (store_check_owners(shown, real, user, err) == 0)
        s = open_resolved(shown, real, err, warn, held);
    free(real);
    free(shown);
    return s;
}

struct store *store_open_try(const char *dir, uid_t user, char **err, char **warn,
                             enum store_held *held)
{
    *err = NULL;
    *warn = NULL;
    *held = STORE_FREE;
    if (dir == NULL) {
        *err = store_msg("%s", ": not a usable state directory");
        return NULL;
    }
    /* <dir> as every message names it: each control character and
     * backslash \ooo, as serve shows the policy and log paths (a directory
     * named with a line end wrote a line of its own into standard error);
     * the paths resolved from it are shown the same way where named */
    char *given = text_shown(dir);
    struct store *s = open_dir(dir, given, user, err, warn, held);
    free(given);
    return s;
}

struct store *store_open(const char *dir, char **err, char **warn)
{
    return store_open_as(dir, 0, err, warn);
}

const char *store_shown(const struct store *s)
{
    return s->shown;
}

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    /* After a store_sync() that failed, the lock is not waited for again. */
    if (store_settle(s, s->synced ? 0 : EXIT_BUSY_MS) < 0)
        store_say_unwritten(s, "at exit");
    store_wait_read(s);
    store_tell_dropped(s);
    for (size_t i = 0; i < s->nops; i++)
        store_op_free(&s->ops[i]);
    free(s->ops);
    pos_index_free(&s->index);
    /* A writer stuck in a commit keeps its batch: the process exits. The
     * read in its hands is its own to free (or keep) too; those waiting
     * their turn, cancelled by their sinks, are the store's. */
    store_writer_stop(s->writer);
    for (struct store_read *r = s->reads, *next; r != NULL; r = next) {
        next = r->next;
        store_read_free(r);
    }
    sqlite3_close(s->db); /* the last connection: checkpoints, removes the log */
    free(s->path);
    free(s->shown);
    close(s->lock_fd); /* releases the lock */
    free(s);
}
