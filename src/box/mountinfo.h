/* mountinfo: a strict, bounded parser for /proc/PID/mountinfo, and the
 * `PATH: reason` justification files of `sluice audit mounts`.
 *
 * A mountinfo line is (proc(5)):
 *   ID PARENT MAJOR:MINOR ROOT MOUNT_POINT MOUNT_OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTS
 * ROOT, MOUNT_POINT, FSTYPE (a fuse subtype) and SOURCE escape space, tab,
 * newline and backslash as \040 \011 \012 \134; the parser decodes them
 * (and refuses any other escape, a NUL byte, or a decoded mount point that
 * is not absolute). Other control characters (a carriage return) are
 * written as they are, there and in SUPER_OPTS (escaped, if at all, by each
 * file system its own way, and kept as written), and kept as they are.
 * Inputs are not NUL-terminated; every string the parser returns is. */
#ifndef SLUICE_BOX_MOUNTINFO_H
#define SLUICE_BOX_MOUNTINFO_H

#include <stdbool.h>
#include <stddef.h>

#define MOUNTINFO_MAX_BYTES (16u * 1024 * 1024) /* a whole file */
/* A line: room for three paths of PATH_MAX (root, mount point, source)
 * and a page of super options, every byte of each escaped as \ooo (a bind
 * mount of a deep directory of spaces writes over 30 KiB). */
#define MOUNTINFO_MAX_LINE     (128 * 1024)
#define MOUNTINFO_MAX_ENTRIES  100000
#define MOUNTINFO_MAX_OPTIONAL 32

struct mountinfo_entry {
    unsigned id, parent, major, minor;
    char *root;        /* decoded */
    char *mount_point; /* decoded */
    char *mount_opts;  /* per-mount options: "rw,nosuid,relatime" */
    char *optional;    /* optional fields joined by ' ' ("" when none) */
    char *fstype;      /* decoded */
    char *source;      /* decoded */
    char *super_opts;
    unsigned line; /* 1-based line in the input */
};

struct mountinfo {
    struct mountinfo_entry *v;
    size_t n;
    /* Made by mountinfo_parse() for mountinfo_is_covered(), which scans
     * <v> when they are NULL: the positions in <v> sorted by id, and by
     * (parent, mount point); and, by position in <v>, whether a mount of
     * the same parent sits on a folder above the mount's mount point. */
    size_t *by_id, *by_parent;
    bool *buried;
};

/* Parses <len> bytes at <data> into <out> (which the caller frees with
 * mountinfo_free(), also on failure). Returns 0, or -1 with
 * "line N: FIELD: what is wrong" in <err>. An empty input is valid. */
int mountinfo_parse(const char *data, size_t len, struct mountinfo *out, char *err, size_t errlen);
void mountinfo_free(struct mountinfo *mi);

/* True when the comma-separated list <opts> (NUL-terminated) holds <opt>
 * exactly ("ro" is not found in "errors=remount-ro"). */
bool mountinfo_opt_has(const char *opts, const char *opt);
/* True when the mount is writable: "rw" among the mount options and "ro"
 * not among the super options. */
bool mountinfo_is_writable(const struct mountinfo_entry *e);

/* True when another mount of <mi> was mounted on top of <e> at the same
 * mount point (as /dev/pts often is twice), or on a folder above <e>'s
 * mount point in the mount <e> is mounted in (a tmpfs on /srv after one on
 * /srv/cache, both in the root mount), or so on top of an ancestor of <e>:
 * <e> cannot be reached by any path. */
bool mountinfo_is_covered(const struct mountinfo *mi, const struct mountinfo_entry *e);

/* A justification file: one `PATH: reason` a line; blank lines and lines
 * starting with '#' are skipped. PATH is absolute (a trailing '/' other
 * than the root's is dropped), its \ooo escapes decoded as mountinfo's (the
 * report's way of showing a backslash or a control character; another
 * backslash is kept as it is); the reason is not empty. */
struct justify_entry {
    char *path;
    char *reason;
    unsigned line;
    bool used; /* set by the caller when it justified a mount */
};

struct justify {
    struct justify_entry *v;
    size_t n;
    size_t *by_path; /* the positions in <v> sorted by path */
};

#define JUSTIFY_MAX_BYTES   (4u * 1024 * 1024)
#define JUSTIFY_MAX_LINE    8192
#define JUSTIFY_MAX_ENTRIES 10000
#define JUSTIFY_MAX_ERRORS  100

/* Parses <len> bytes at <data> into <out> (free with justify_free(), also
 * on failure). Each bad line is reported through <report> (may be NULL)
 * as (<arg>, line, message); parsing goes on to the end (or to
 * JUSTIFY_MAX_ERRORS, and one more report then says the rest is not
 * read). Returns the number of bad lines (0: all good), or
 * -1 when the input is too large or memory ran out. */
int justify_parse(const char *data, size_t len, struct justify *out,
                  void (*report)(void *arg, unsigned line, const char *msg), void *arg);
void justify_free(struct justify *j);
/* The entry justifying <path>, or NULL. */
struct justify_entry *justify_find(struct justify *j, const char *path);

#endif
