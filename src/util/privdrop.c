/* privdrop: the gateway's switch from root to an unprivileged user (privdrop.h). */
#include "util/privdrop.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "util/text_json.h"

/* "BEFORE'RAW'AFTER" into <err>, <raw> (the operator's argument, which a
 * variable or a file may have filled) shown \ooo: one holding a line end
 * or a terminal escape cannot write lines of its own into standard
 * error. */
static void refuse(char *err, size_t errlen, const char *before, const char *raw, const char *after)
{
    char shown[256];
    text_shown_fit(shown, sizeof(shown), raw);
    snprintf(err, errlen, "%s'%s'%s", before, shown, after);
}

/* A decimal id that fits uid_t/gid_t (and is not (uid_t)-1). */
static bool parse_id(const char *s, unsigned long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v >= UINT_MAX)
        return false;
    *out = v;
    return true;
}

int privdrop_resolve(const char *spec, struct privdrop_target *out, char *err, size_t errlen)
{
    char user[64], group[64] = "";
    const char *colon = strchr(spec, ':');
    size_t ulen = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    if (ulen == 0 || ulen >= sizeof(user) ||
        (colon != NULL && strlen(colon + 1) >= sizeof(group)) ||
        (colon != NULL && colon[1] == '\0')) {
        refuse(err, errlen, "", spec, ": expected USER or USER:GROUP");
        return -1;
    }
    memcpy(user, spec, ulen);
    user[ulen] = '\0';
    if (colon != NULL)
        snprintf(group, sizeof(group), "%s", colon + 1);

    unsigned long id;
    struct passwd *pw = getpwnam(user);
    if (pw != NULL) {
        out->uid = pw->pw_uid;
        out->gid = pw->pw_gid;
    } else if (parse_id(user, &id)) {
        pw = getpwuid((uid_t)id);
        out->uid = (uid_t)id;
        if (pw == NULL && group[0] == '\0') {
            snprintf(err, errlen,
                     "uid %s has no entry in the user database: name a group too "
                     "(UID:GID)",
                     user);
            return -1;
        }
        if (pw != NULL)
            out->gid = pw->pw_gid;
    } else {
        refuse(err, errlen, "no user ", user, "");
        return -1;
    }
    if (group[0] != '\0') {
        struct group *gr = getgrnam(group);
        if (gr != NULL) {
            out->gid = gr->gr_gid;
        } else if (parse_id(group, &id)) {
            out->gid = (gid_t)id;
        } else {
            refuse(err, errlen, "no group ", group, "");
            return -1;
        }
    }
    text_shown_fit(out->name, sizeof(out->name), spec);
    return 0;
}

/* no_new_privs, and not dumpable: the kernel clears the dumpable flag on a
 * change of ids only as fs.suid_dumpable says, and with 1 any process of the
 * user could ptrace the gateway, or read its memory and environment (the
 * agents' tokens) under /proc. */
static int set_no_new_privs(char *err, size_t errlen)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errlen, "cannot set no_new_privs: %s", strerror(errno));
        return -1;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        snprintf(err, errlen, "cannot clear the dumpable flag: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether <id> falls in one of the "inside outside count" lines of <path>. */
static bool id_mapped(const char *path, unsigned long id)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return true;
    unsigned long inside, outside, count;
    bool found = false;
    while (!found && fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3)
        found = id >= inside && id - inside < count;
    fclose(f);
    return found;
}

bool privdrop_mapped(const struct privdrop_target *t)
{
    return id_mapped("/proc/self/uid_map", t->uid) && id_mapped("/proc/self/gid_map", t->gid);
}

int privdrop_is_already(const struct privdrop_target *t, char *err, size_t errlen)
{
    if (getuid() != t->uid || geteuid() != t->uid || getgid() != t->gid || getegid() != t->gid) {
        snprintf(err, errlen, "not running as root");
        return -1;
    }
    int n = getgroups(0, NULL);
    gid_t *groups = n > 0 ? calloc((size_t)n, sizeof(*groups)) : NULL;
    if (n > 0 && groups != NULL)
        n = getgroups(n, groups);
    if (n < 0 || (n > 0 && groups == NULL)) {
        snprintf(err, errlen, "not running as root, and its supplementary groups cannot be read");
        free(groups);
        return -1;
    }
    char list[96] = "";
    size_t off = 0, others = 0;
    bool cut = false;
    for (int i = 0; i < n; i++) {
        if (groups[i] == t->gid)
            continue;
        char item[32];
        int w = snprintf(item, sizeof(item), "%s%lu", others++ > 0 ? ", " : "",
                         (unsigned long)groups[i]);
        if (!cut && w > 0 && off + (size_t)w < sizeof(list)) {
            memcpy(list + off, item, (size_t)w + 1);
            off += (size_t)w;
        } else {
            cut = true;
        }
    }
    free(groups);
    if (others == 0)
        return 0;
    snprintf(err, errlen,
             "not running as root, and its supplementary groups (%s%s) cannot be dropped", list,
             cut ? ", ..." : "");
    return -1;
}

int privdrop_apply(const struct privdrop_target *t, char *err, size_t errlen)
{
    if (!privdrop_mapped(t)) {
        snprintf(err, errlen,
                 "cannot become user %s: uid %lu or gid %lu is not mapped in this user namespace",
                 t->name, (unsigned long)t->uid, (unsigned long)t->gid);
        return -1;
    }
    uid_t ruid, euid, suid;
    gid_t rgid, egid, sgid;
    if (geteuid() != 0) {
        char why[256];
        if (privdrop_is_already(t, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "cannot become user %s: %s", t->name, why);
            return -1;
        }
        return set_no_new_privs(err, errlen);
    }
    if (setgroups(1, &t->gid) < 0 || setresgid(t->gid, t->gid, t->gid) < 0 ||
        setresuid(t->uid, t->uid, t->uid) < 0) {
        snprintf(err, errlen, "cannot become user %s: %s", t->name, strerror(errno));
        return -1;
    }
    if (getresuid(&ruid, &euid, &suid) < 0 || getresgid(&rgid, &egid, &sgid) < 0 ||
        ruid != t->uid || euid != t->uid || suid != t->uid || rgid != t->gid || egid != t->gid ||
        sgid != t->gid) {
        snprintf(err, errlen, "cannot become user %s: the ids did not all change", t->name);
        return -1;
    }
    /* Root stays root (serve --user root, as run's --gateway-user root):
     * no_new_privs is left to the lockdown, which sets it only for a root
     * without CAP_SYS_ADMIN, so that set-user-ID programs an exec sink runs
     * keep working, as without --user. */
    if (t->uid == 0)
        return 0;
    /* Paranoia (OpenSSH does the same): root must not come back. */
    if (setuid(0) == 0 || seteuid(0) == 0) {
        snprintf(err, errlen, "cannot become user %s: root could be regained", t->name);
        return -1;
    }
    return set_no_new_privs(err, errlen);
}
