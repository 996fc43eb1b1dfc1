#include "box/git_config_read.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* A cursor over the text. */
struct cur {
    const char *p, *end;
};

static int peek(const struct cur *c)
{
    return c->p < c->end ? (unsigned char)*c->p : -1;
}

static void skip_line(struct cur *c)
{
    while (c->p < c->end && *c->p++ != '\n')
        ;
}

static void skip_blank(struct cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

/* A section header after its '[': sets <*core> when it is `[core]`, no
 * subsection. Returns false when it cannot be read (the line passed over). */
static bool header(struct cur *c, bool *core)
{
    const char *name = c->p;
    while (c->p < c->end && (isalnum((unsigned char)*c->p) || *c->p == '-' || *c->p == '.'))
        c->p++;
    size_t len = (size_t)(c->p - name);
    skip_blank(c);
    bool sub = peek(c) == '"';
    if (sub) { /* a subsection: [core "x"] is another section */
        for (c->p++; c->p < c->end && *c->p != '"' && *c->p != '\n'; c->p++)
            if (*c->p == '\\' && c->p + 1 < c->end)
                c->p++;
        if (peek(c) != '"')
            return false;
        c->p++;
    }
    if (peek(c) != ']')
        return false;
    c->p++;
    *core = !sub && len == 4 && strncasecmp(name, "core", 4) == 0;
    return true;
}

/* The value after '=', unquoted and unescaped, into <out> (<cap>, NUL
 * ended; a longer one is cut: no path git could open). Returns false on a
 * value git would refuse (the rest of the line passed over). */
static bool value(struct cur *c, char *out, size_t cap)
{
    size_t n = 0, space = 0;
    bool quoted = false;
    skip_blank(c);
    while (c->p < c->end) {
        char ch = *c->p++;
        if (ch == '\n' || (ch == '\r' && peek(c) == '\n')) {
            if (quoted)
                return false;
            if (ch == '\r')
                c->p++;
            break;
        }
        if (!quoted && (ch == '#' || ch == ';')) {
            skip_line(c);
            break;
        }
        if (!quoted && (ch == ' ' || ch == '\t')) {
            space += n > 0;
            continue;
        }
        for (; space > 0 && n + 1 < cap; space--)
            out[n++] = ' ';
        space = 0;
        if (ch == '"') {
            quoted = !quoted;
            continue;
        }
        if (ch == '\\') {
            int e = c->p < c->end ? (unsigned char)*c->p++ : -1;
            if (e == '\n' || (e == '\r' && peek(c) == '\n')) {
                if (e == '\r')
                    c->p++;
                continue; /* the line goes on */
            }
            ch = e == 't' ? '\t' : e == 'b' ? '\b' : e == 'n' ? '\n' : (char)e;
            if (e != 't' && e != 'b' && e != 'n' && e != '"' && e != '\\')
                return false;
        }
        if (n + 1 < cap)
            out[n++] = ch;
    }
    if (quoted)
        return false;
    out[n] = '\0';
    return true;
}

int git_config_parse(const char *text, size_t len, struct git_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i + 14 <= len && !cfg->names_worktreeconfig; i++)
        cfg->names_worktreeconfig = strncasecmp(text + i, "worktreeconfig", 14) == 0;
    struct cur c = {text, text + len};
    bool core = false;
    char val[4096];
    while (c.p < c.end) {
        skip_blank(&c);
        int ch = peek(&c);
        if (ch == '[') {
            c.p++;
            if (!header(&c, &core)) {
                core = false;
                skip_line(&c);
            }
            continue; /* a key may follow on the same line */
        }
        if (ch < 0 || !isalpha(ch)) {
            skip_line(&c);
            continue;
        }
        const char *key = c.p;
        while (c.p < c.end && (isalnum((unsigned char)*c.p) || *c.p == '-'))
            c.p++;
        size_t klen = (size_t)(c.p - key);
        skip_blank(&c);
        if (peek(&c) != '=') {
            skip_line(&c); /* a key without a value: a boolean, no path */
            continue;
        }
        c.p++;
        if (!value(&c, val, sizeof(val)) || !core)
            continue;
        char **slot = NULL;
        if (klen == 9 && strncasecmp(key, "hookspath", 9) == 0) {
            if (cfg->nhooks == GIT_CONFIG_HOOKS_MAX) {
                snprintf(err, errlen, "more than %d core.hooksPath values", GIT_CONFIG_HOOKS_MAX);
                return -1;
            }
            slot = &cfg->hooks_path[cfg->nhooks++];
        } else if (klen == 8 && strncasecmp(key, "worktree", 8) == 0) {
            free(cfg->worktree);
            slot = &cfg->worktree;
        } else {
            continue;
        }
        if ((*slot = strdup(val)) == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

int git_config_read(const char *path, struct git_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == EACCES))
        return 0; /* as git, which skips a file the user cannot read */
    struct stat st;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) < 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) { /* GIT_CONFIG_GLOBAL=/dev/null: empty, as git reads it */
        close(fd);
        return 0;
    } else if (st.st_size > GIT_CONFIG_READ_MAX)
        why = "longer than 1 MiB";
    char *buf = why == NULL ? malloc(GIT_CONFIG_READ_MAX + 1) : NULL;
    if (why == NULL && buf == NULL)
        why = "out of memory";
    size_t n = 0;
    ssize_t r = 0;
    while (why == NULL && n <= GIT_CONFIG_READ_MAX &&
           ((r = read(fd, buf + n, GIT_CONFIG_READ_MAX + 1 - n)) > 0 || (r < 0 && errno == EINTR)))
        n += r > 0 ? (size_t)r : 0;
    if (why == NULL && r < 0)
        why = strerror(errno);
    if (why == NULL && n > GIT_CONFIG_READ_MAX)
        why = "longer than 1 MiB";
    if (fd >= 0)
        close(fd);
    int rc = 0;
    char perr[128];
    if (why == NULL && git_config_parse(buf, n, cfg, perr, sizeof(perr)) < 0) {
        why = perr;
        git_config_free(cfg);
    }
    if (why != NULL) {
        snprintf(err, errlen, "%s: cannot read its core.hooksPath: %s", path, why);
        rc = -1;
    }
    free(buf);
    return rc;
}

void git_config_free(struct git_config *cfg)
{
    for (size_t i = 0; i < cfg->nhooks; i++)
        free(cfg->hooks_path[i]);
    free(cfg->worktree);
    memset(cfg, 0, sizeof(*cfg));
}
