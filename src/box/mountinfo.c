#include "box/mountinfo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line split into whitespace-separated fields (views into the line). */
struct field {
    const char *p;
    size_t n;
};

static char *dup_bytes(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Decodes the \NNN escapes of <n> bytes at <p> (the kernel writes \040
 * \011 \012 \134; any octal escape of a byte 1..255 is accepted, \000 is
 * refused, and so is a backslash that starts no escape when <strict>, which
 * is else kept as it is). Returns a new string or NULL with <*why>. */
static char *decode_escapes(const char *p, size_t n, bool strict, const char **why)
{
    char *out = malloc(n + 1);
    size_t o = 0;
    if (out == NULL) {
        *why = "out of memory";
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\') {
            if (n - i < 4 || p[i + 1] < '0' || p[i + 1] > '3' || p[i + 2] < '0' || p[i + 2] > '7' ||
                p[i + 3] < '0' || p[i + 3] > '7') {
                if (!strict) {
                    out[o++] = (char)c;
                    continue;
                }
                *why = "bad escape (want \\NNN octal)";
                free(out);
                return NULL;
            }
            unsigned v = (unsigned)(p[i + 1] - '0') * 64 + (unsigned)(p[i + 2] - '0') * 8 +
                         (unsigned)(p[i + 3] - '0');
            if (v == 0) {
                *why = "escaped NUL byte";
                free(out);
                return NULL;
            }
            out[o++] = (char)v;
            i += 3;
            continue;
        }
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return out;
}

/* A path field decoded (decode_escapes(), strict); with <need_abs>, one
 * that is not absolute is refused. */
static char *decode_path(const struct field *f, bool need_abs, const char **why)
{
    char *out = decode_escapes(f->p, f->n, true, why);
    if (out != NULL && need_abs && out[0] != '/') {
        *why = "not an absolute path";
        free(out);
        return NULL;
    }
    return out;
}

static int parse_uint_field(const struct field *f, unsigned *out)
{
    uint64_t v = 0;
    if (f->n == 0 || f->n > 10)
        return -1;
    for (size_t i = 0; i < f->n; i++) {
        if (f->p[i] < '0' || f->p[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(f->p[i] - '0');
    }
    if (v > UINT32_MAX)
        return -1;
    *out = (unsigned)v;
    return 0;
}

static int parse_devno(const struct field *f, unsigned *major, unsigned *minor)
{
    const char *colon = memchr(f->p, ':', f->n);
    if (colon == NULL)
        return -1;
    struct field a = {f->p, (size_t)(colon - f->p)};
    struct field b = {colon + 1, f->n - a.n - 1};
    if (parse_uint_field(&a, major) < 0 || parse_uint_field(&b, minor) < 0)
        return -1;
    return 0;
}

/* Option lists: printable, no spaces, not empty. */
static bool opts_ok(const struct field *f)
{
    if (f->n == 0)
        return false;
    for (size_t i = 0; i < f->n; i++) {
        unsigned char c = (unsigned char)f->p[i];
        if (c <= ' ' || c == 0x7f)
            return false;
    }
    return true;
}

static void free_entry(struct mountinfo_entry *e)
{
    free(e->root);
    free(e->mount_point);
    free(e->mount_opts);
    free(e->optional);
    free(e->fstype);
    free(e->source);
    free(e->super_opts);
}

/* Max fields: 6 fixed + optional + separator + 3. */
#define MAX_FIELDS (6 + MOUNTINFO_MAX_OPTIONAL + 1 + 3)

static int parse_line(const char *p, size_t n, unsigned lineno, struct mountinfo_entry *e,
                      char *err, size_t errlen)
{
    struct field f[MAX_FIELDS];
    size_t nf = 0;
    const char *why = NULL;
    const char *field = "line";
    size_t i = 0;
    while (i < n) {
        if (p[i] == ' ') {
            i++;
            continue;
        }
        /* The kernel escapes a tab (and a line end) wherever it may
         * appear and never writes a NUL; any other byte, a carriage return
         * or another control character in a mount point, a source, a fuse
         * subtype or an option value, it writes as it is. */
        if (p[i] == '\t' || p[i] == '\0') {
            why = "unexpected control character";
            goto bad;
        }
        size_t start = i;
        while (i < n && p[i] != ' ' && p[i] != '\t' && p[i] != '\0')
            i++;
        if (nf >= MAX_FIELDS) {
            why = "too many fields";
            goto bad;
        }
        f[nf].p = p + start;
        f[nf].n = i - start;
        nf++;
    }
    size_t sep = 0;
    for (size_t k = 6; k < nf; k++)
        if (f[k].n == 1 && f[k].p[0] == '-') {
            sep = k;
            break;
        }
    if (nf < 10 || sep == 0) {
        why = "expected ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE "
              "SOURCE SUPER_OPTIONS";
        goto bad;
    }
    if (nf - sep - 1 != 3) {
        field = "fstype";
        why = "expected FSTYPE SOURCE SUPER_OPTIONS after '-'";
        goto bad;
    }
    if (sep - 6 > MOUNTINFO_MAX_OPTIONAL) {
        field = "optional";
        why = "too many optional fields";
        goto bad;
    }
    field = "id";
    if (parse_uint_field(&f[0], &e->id) < 0) {
        why = "not a number";
        goto bad;
    }
    field = "parent";
    if (parse_uint_field(&f[1], &e->parent) < 0) {
        why = "not a number";
        goto bad;
    }
    field = "major:minor";
    if (parse_devno(&f[2], &e->major, &e->minor) < 0) {
        why = "expected MAJOR:MINOR";
        goto bad;
    }
    field = "root";
    if ((e->root = decode_path(&f[3], false, &why)) == NULL) /* nsfs: "net:[N]" */
        goto bad;
    field = "mount_point";
    if ((e->mount_point = decode_path(&f[4], true, &why)) == NULL)
        goto bad;
    field = "mount_options";
    if (!opts_ok(&f[5])) {
        why = "empty or not printable";
        goto bad;
    }
    if ((e->mount_opts = dup_bytes(f[5].p, f[5].n)) == NULL)
        goto oom;
    if (!mountinfo_opt_has(e->mount_opts, "rw") && !mountinfo_opt_has(e->mount_opts, "ro")) {
        why = "neither rw nor ro";
        goto bad;
    }
    field = "optional";
    size_t olen = 0;
    for (size_t k = 6; k < sep; k++) {
        if (!opts_ok(&f[k])) {
            why = "not printable";
            goto bad;
        }
        olen += f[k].n + 1;
    }
    e->optional = malloc(olen + 1);
    if (e->optional == NULL)
        goto oom;
    size_t off = 0;
    for (size_t k = 6; k < sep; k++) {
        if (off > 0)
            e->optional[off++] = ' ';
        memcpy(e->optional + off, f[k].p, f[k].n);
        off += f[k].n;
    }
    e->optional[off] = '\0';
    field = "fstype"; /* "fuse.SUBTYPE": the subtype is the mounter's, escaped as a path */
    if ((e->fstype = decode_path(&f[sep + 1], false, &why)) == NULL)
        goto bad;
    field = "source";
    if ((e->source = decode_path(&f[sep + 2], false, &why)) == NULL)
        goto bad;
    field = "super_options"; /* upperdir=PATH, ...: the mounter's bytes */
    if ((e->super_opts = dup_bytes(f[sep + 3].p, f[sep + 3].n)) == NULL)
        goto oom;
    e->line = lineno;
    return 0;
oom:
    why = "out of memory";
bad:
    snprintf(err, errlen, "line %u: %s: %s", lineno, field, why);
    return -1;
}

/* The entries of the mountinfo being indexed, for the qsort comparators. */
static const struct mountinfo_entry *sort_v;

static int cmp_size(size_t a, size_t b)
{
    return a < b ? -1 : a > b;
}

static int cmp_id(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    if (sort_v[a].id != sort_v[b].id)
        return sort_v[a].id < sort_v[b].id ? -1 : 1;
    return cmp_size(a, b);
}

/* The order of mi->by_parent: parent, mount point, then id (copies of one
 * id, which only a forged file holds, side by side: on_top() passes them
 * in one step). */
static int cmp_child(const struct mountinfo_entry *c, unsigned parent, const char *mount_point,
                     unsigned id)
{
    if (c->parent != parent)
        return c->parent < parent ? -1 : 1;
    int k = strcmp(c->mount_point, mount_point);
    if (k != 0)
        return k;
    return c->id < id ? -1 : c->id > id;
}

static int cmp_parent(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const struct mountinfo_entry *eb = &sort_v[b];
    int c = cmp_child(&sort_v[a], eb->parent, eb->mount_point, eb->id);
    return c != 0 ? c : cmp_size(a, b);
}

static size_t child_bound(const struct mountinfo *mi, unsigned parent, const char *mount_point,
                          unsigned id, bool past);

/* The start every path below the folder <mp> has: "/srv/" for "/srv", "/"
 * for "/". A new string, or NULL without memory. */
static char *below_prefix(const char *mp)
{
    size_t n = strlen(mp);
    bool slash = n > 0 && mp[n - 1] == '/';
    char *q = malloc(n + 2);
    if (q == NULL)
        return NULL;
    memcpy(q, mp, n);
    if (!slash)
        q[n++] = '/';
    q[n] = '\0';
    return q;
}

/* Whether the path <mp> lies below the folder <dir> (not at it). */
static bool is_below(const char *mp, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 0 || strncmp(mp, dir, n) != 0)
        return false;
    return dir[n - 1] == '/' ? mp[n] != '\0' : mp[n] == '/' && mp[n + 1] != '\0';
}

/* Fills mi->buried: a mount whose mount point lies below another's of the
 * same parent was mounted first, on a folder the other then covered (a
 * tmpfs on /srv/cache, then one on /srv): its path leads into the other.
 * The paths below a folder are one run of mi->by_parent, (parent,
 * "/srv/...") up to (parent, "/srv0"), so each mount marks its run at its
 * ends and one pass adds the marks up: 2n searches, not a look at every
 * pair (10^10 of them for 100000 mounts). Returns -1 without memory. */
static int mark_buried(struct mountinfo *mi)
{
    long *ends = calloc(mi->n + 1, sizeof(long)); /* +1 where a run starts, -1 past it */
    mi->buried = calloc(mi->n, sizeof(bool));
    if (ends == NULL || mi->buried == NULL) {
        free(ends);
        return -1;
    }
    for (size_t k = 0; k < mi->n; k++) {
        const struct mountinfo_entry *c = &mi->v[mi->by_parent[k]];
        char *q = below_prefix(c->mount_point);
        if (q == NULL) {
            free(ends);
            return -1;
        }
        /* past (parent, "/srv/") itself, which a forged "/srv/" would be */
        size_t lo = child_bound(mi, c->parent, q, UINT32_MAX, true);
        q[strlen(q) - 1] = '/' + 1; /* "/srv0": past every "/srv/..." */
        size_t hi = child_bound(mi, c->parent, q, 0, false);
        free(q);
        if (lo < hi) {
            ends[lo]++;
            ends[hi]--;
        }
    }
    long depth = 0;
    for (size_t k = 0; k < mi->n; k++) {
        depth += ends[k];
        mi->buried[mi->by_parent[k]] = depth > 0;
    }
    free(ends);
    return 0;
}

/* Makes mi->by_id, mi->by_parent and mi->buried; without memory for them,
 * none (the check scans). */
static void make_index(struct mountinfo *mi)
{
    if (mi->n == 0)
        return;
    mi->by_id = malloc(mi->n * sizeof(size_t));
    mi->by_parent = malloc(mi->n * sizeof(size_t));
    if (mi->by_id == NULL || mi->by_parent == NULL)
        goto none;
    for (size_t i = 0; i < mi->n; i++)
        mi->by_id[i] = mi->by_parent[i] = i;
    sort_v = mi->v;
    qsort(mi->by_id, mi->n, sizeof(size_t), cmp_id);
    qsort(mi->by_parent, mi->n, sizeof(size_t), cmp_parent);
    sort_v = NULL;
    if (mark_buried(mi) == 0)
        return;
none:
    free(mi->by_id);
    free(mi->by_parent);
    free(mi->buried);
    mi->by_id = mi->by_parent = NULL;
    mi->buried = NULL;
}

int mountinfo_parse(const char *data, size_t len, struct mountinfo *out, char *err, size_t errlen)
{
    out->v = NULL;
    out->n = 0;
    out->by_id = out->by_parent = NULL;
    out->buried = NULL;
    if (len > MOUNTINFO_MAX_BYTES) {
        snprintf(err, errlen, "line 1: file: larger than %u bytes", MOUNTINFO_MAX_BYTES);
        return -1;
    }
    size_t cap = 0;
    unsigned lineno = 0;
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - (data + pos)) : len - pos;
        lineno++;
        if (n > MOUNTINFO_MAX_LINE) {
            snprintf(err, errlen, "line %u: line: longer than %d bytes", lineno,
                     MOUNTINFO_MAX_LINE);
            return -1;
        }
        if (n == 0) {
            snprintf(err, errlen, "line %u: line: empty", lineno);
            return -1;
        }
        if (out->n >= MOUNTINFO_MAX_ENTRIES) {
            snprintf(err, errlen, "line %u: line: more than %d mounts", lineno,
                     MOUNTINFO_MAX_ENTRIES);
            return -1;
        }
        if (out->n == cap) {
            size_t ncap = cap == 0 ? 32 : cap * 2;
            struct mountinfo_entry *nv = realloc(out->v, ncap * sizeof(*nv));
            if (nv == NULL) {
                snprintf(err, errlen, "line %u: line: out of memory", lineno);
                return -1;
            }
            out->v = nv;
            cap = ncap;
        }
        struct mountinfo_entry *e = &out->v[out->n];
        memset(e, 0, sizeof(*e));
        if (parse_line(data + pos, n, lineno, e, err, errlen) < 0) {
            free_entry(e);
            return -1;
        }
        out->n++;
        pos += n + (nl != NULL ? 1 : 0);
    }
    make_index(out);
    return 0;
}

void mountinfo_free(struct mountinfo *mi)
{
    if (mi == NULL)
        return;
    for (size_t i = 0; i < mi->n; i++)
        free_entry(&mi->v[i]);
    free(mi->v);
    free(mi->by_id);
    free(mi->by_parent);
    free(mi->buried);
    mi->v = NULL;
    mi->by_id = mi->by_parent = NULL;
    mi->buried = NULL;
    mi->n = 0;
}

bool mountinfo_opt_has(const char *opts, const char *opt)
{
    size_t olen = strlen(opt);
    const char *p = opts;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n == olen && memcmp(p, opt, n) == 0)
            return true;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return false;
}

bool mountinfo_is_writable(const struct mountinfo_entry *e)
{
    return mountinfo_opt_has(e->mount_opts, "rw") && !mountinfo_opt_has(e->super_opts, "ro");
}

/* The first position in mi->by_parent whose entry is not below (parent,
 * mount_point, id) in its order (cmp_child()), or, <past>, not at or below
 * it. */
static size_t child_bound(const struct mountinfo *mi, unsigned parent, const char *mount_point,
                          unsigned id, bool past)
{
    size_t lo = 0, hi = mi->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_child(&mi->v[mi->by_parent[mid]], parent, mount_point, id);
        if (c < 0 || (past && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether a mount other than <e> and <from> has <e> for parent and <e>'s
 * mount point (it sits on top of <e>); and in <*parent> the last entry
 * whose id is <e>'s parent (none when that is <e>'s own id). With the
 * index: a search, not a scan of every mount for every mount (100000 of
 * them took minutes). */
static bool on_top(const struct mountinfo *mi, const struct mountinfo_entry *e,
                   const struct mountinfo_entry *from, const struct mountinfo_entry **parent)
{
    *parent = NULL;
    if (mi->by_id == NULL) {
        bool top = false;
        for (size_t i = 0; i < mi->n; i++) {
            if (mi->v[i].parent == e->id && mi->v[i].id != e->id && &mi->v[i] != from &&
                strcmp(mi->v[i].mount_point, e->mount_point) == 0)
                top = true;
            if (mi->v[i].id == e->parent && e->parent != e->id)
                *parent = &mi->v[i];
        }
        return top;
    }
    /* at most one entry is <from>; the copies of <e>'s own id, in a
     * forged file as many as it has lines, are passed in one step */
    for (size_t k = child_bound(mi, e->id, e->mount_point, 0, false); k < mi->n; k++) {
        const struct mountinfo_entry *c = &mi->v[mi->by_parent[k]];
        if (c->parent != e->id || strcmp(c->mount_point, e->mount_point) != 0)
            break;
        if (c->id == e->id)
            k = child_bound(mi, e->id, e->mount_point, e->id, true) - 1;
        else if (c != from)
            return true;
    }
    if (e->parent == e->id)
        return false;
    size_t lo = 0, hi = mi->n; /* past the last entry of id e->parent */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mi->v[mi->by_id[mid]].id <= e->parent)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && mi->v[mi->by_id[lo - 1]].id == e->parent)
        *parent = &mi->v[mi->by_id[lo - 1]];
    return false;
}

/* Whether a mount of <e>'s parent sits on a folder above <e>'s mount
 * point (mark_buried()). */
static bool buried(const struct mountinfo *mi, const struct mountinfo_entry *e)
{
    if (mi->buried != NULL)
        return mi->buried[e - mi->v];
    for (size_t i = 0; i < mi->n; i++)
        if (mi->v[i].parent == e->parent && is_below(e->mount_point, mi->v[i].mount_point))
            return true;
    return false;
}

/* True when a mount sits on top of <e> at the same place (it was mounted
 * over, as /dev/pts often is twice) or on a folder above it, or so on top
 * of one of its ancestors. */
bool mountinfo_is_covered(const struct mountinfo *mi, const struct mountinfo_entry *e)
{
    const struct mountinfo_entry *from = NULL; /* the child the walk came up from */
    for (int depth = 0; e != NULL && depth < 64; depth++) {
        const struct mountinfo_entry *parent;
        if (buried(mi, e) || on_top(mi, e, from, &parent))
            return true;
        from = e;
        e = parent;
    }
    return false;
}

/* --- justification files -------------------------------------------------- */

/* A limit's number in a message, as the macro spells it. */
#define LIMIT_TEXT(n) #n
#define LIMIT(n)      LIMIT_TEXT(n)

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

void justify_free(struct justify *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n; i++) {
        free(j->v[i].path);
        free(j->v[i].reason);
    }
    free(j->v);
    free(j->by_path);
    j->v = NULL;
    j->by_path = NULL;
    j->n = 0;
}

/* The first position in j->by_path whose path is not below <path>. */
static size_t first_path(const struct justify *j, const char *path)
{
    size_t lo = 0, hi = j->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(j->v[j->by_path[mid]].path, path) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A search of the index, not a scan of every justification for every
 * mount (10000 of them for 100000 mounts took seconds). */
struct justify_entry *justify_find(struct justify *j, const char *path)
{
    if (j->n == 0)
        return NULL;
    size_t k = first_path(j, path);
    return k < j->n && strcmp(j->v[j->by_path[k]].path, path) == 0 ? &j->v[j->by_path[k]] : NULL;
}

/* Adds the line <lineno>, <n> bytes at <p>, to <j>. Returns NULL, or why
 * it is bad (in <msg>, <msglen> bytes, when the message is made for it). */
static const char *justify_line(const char *p, size_t n, struct justify *j, size_t *cap,
                                unsigned lineno, char *msg, size_t msglen)
{
    while (n > 0 && is_space(p[0])) {
        p++;
        n--;
    }
    while (n > 0 && is_space(p[n - 1]))
        n--;
    if (n == 0 || p[0] == '#')
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((c < ' ' && c != '\t') || c == 0x7f)
            return "control character";
    }
    if (p[0] != '/')
        return "expected `PATH: reason` with an absolute PATH";
    size_t colon = 0;
    for (size_t i = 0; i + 1 <= n; i++)
        if (p[i] == ':' && (i + 1 == n || is_space(p[i + 1]))) {
            colon = i;
            break;
        }
    if (colon == 0)
        return "expected `PATH: reason` (a colon and a space after the path)";
    size_t plen = colon;
    while (plen > 1 && is_space(p[plen - 1]))
        plen--;
    while (plen > 1 && p[plen - 1] == '/')
        plen--;
    const char *r = p + colon + 1;
    size_t rlen = n - colon - 1;
    while (rlen > 0 && is_space(r[0])) {
        r++;
        rlen--;
    }
    if (rlen == 0)
        return "the reason is empty";
    if (j->n >= JUSTIFY_MAX_ENTRIES)
        return "more than " LIMIT(JUSTIFY_MAX_ENTRIES) " justifications";
    const char *why = NULL;
    /* \ooo as the report shows a backslash or a control character */
    char *path = decode_escapes(p, plen, false, &why);
    if (path == NULL)
        return why;
    size_t at = j->n > 0 ? first_path(j, path) : 0;
    if (at < j->n && strcmp(j->v[j->by_path[at]].path, path) == 0) {
        free(path);
        /* which line it repeats: the one to keep may be either */
        snprintf(msg, msglen, "path justified twice (first at line %u)", j->v[j->by_path[at]].line);
        return msg;
    }
    if (j->n == *cap) {
        size_t ncap = *cap == 0 ? 16 : *cap * 2;
        struct justify_entry *nv = realloc(j->v, ncap * sizeof(*nv));
        if (nv != NULL)
            j->v = nv;
        size_t *nb = nv != NULL ? realloc(j->by_path, ncap * sizeof(*nb)) : NULL;
        if (nb == NULL) {
            free(path);
            return "out of memory";
        }
        j->by_path = nb;
        *cap = ncap;
    }
    char *reason = dup_bytes(r, rlen);
    if (reason == NULL) {
        free(path);
        return "out of memory";
    }
    memmove(&j->by_path[at + 1], &j->by_path[at], (j->n - at) * sizeof(size_t));
    j->by_path[at] = j->n;
    j->v[j->n++] = (struct justify_entry){path, reason, lineno, false};
    return NULL;
}

int justify_parse(const char *data, size_t len, struct justify *out,
                  void (*report)(void *arg, unsigned line, const char *msg), void *arg)
{
    out->v = NULL;
    out->n = 0;
    out->by_path = NULL;
    if (len > JUSTIFY_MAX_BYTES)
        return -1;
    size_t cap = 0, pos = 0;
    unsigned lineno = 0;
    int bad = 0;
    char msg[64];
    while (pos < len && bad < JUSTIFY_MAX_ERRORS) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - (data + pos)) : len - pos;
        lineno++;
        const char *why = NULL;
        if (n > JUSTIFY_MAX_LINE)
            why = "line longer than " LIMIT(JUSTIFY_MAX_LINE) " bytes";
        else if (memchr(data + pos, '\0', n) != NULL)
            why = "NUL byte";
        else
            why = justify_line(data + pos, n, out, &cap, lineno, msg, sizeof(msg));
        if (why != NULL) {
            if (strcmp(why, "out of memory") == 0)
                return -1;
            bad++;
            if (report != NULL)
                report(arg, lineno, why);
        }
        pos += n + (nl != NULL ? 1 : 0);
    }
    if (pos < len && report != NULL) /* cut short: the report must not look whole */
        report(arg, lineno + 1,
               "not read, nor any line after it: the file has more than " LIMIT(
                   JUSTIFY_MAX_ERRORS) " bad lines");
    return bad;
}
