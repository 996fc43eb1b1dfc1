/* git_config_read: the few values of a git config file that run needs to
 * keep a repository's hooks from the box's command, read as text, never by
 * running git: git, run before the box starts, would run what the config
 * says (core.fsmonitor) outside the box.
 *
 * Owns a bounded reader of git's config syntax: `[section]` headers (a
 * key may follow on the same line), `key = value` lines, `#` and `;`
 * comments, quoted values, the escapes \" \\ \n \t \b and a line continued
 * by a trailing backslash. It reads `core.hooksPath` (each value) and
 * `core.worktree` (the last) of the section `[core]` only, names in any
 * case, and whether the text names `worktreeConfig` anywhere (any case:
 * extensions.worktreeConfig, taken as named when in doubt). `include.path`
 * and `includeIf.*.path` are not followed; a line the reader cannot parse
 * is passed over (git stops there: it runs nothing of a config it cannot
 * read). */
#ifndef SLUICE_BOX_GIT_CONFIG_READ_H
#define SLUICE_BOX_GIT_CONFIG_READ_H

#include <stdbool.h>
#include <stddef.h>

/* The most bytes of a config file read; a longer one is refused. */
#define GIT_CONFIG_READ_MAX (1024 * 1024)
/* The most core.hooksPath values kept from one file; more are refused. */
#define GIT_CONFIG_HOOKS_MAX 8

struct git_config {
    char *hooks_path[GIT_CONFIG_HOOKS_MAX]; /* as written, unquoted */
    size_t nhooks;
    char *worktree;            /* core.worktree's last value, NULL when none */
    bool names_worktreeconfig; /* the text names worktreeConfig */
};

/* Parses the <len> bytes of <text> into <c> (zeroed first). Returns 0, or
 * -1 with a message in <err>: too many values, or out of memory. */
int git_config_parse(const char *text, size_t len, struct git_config *c, char *err, size_t errlen);

/* Reads the config file <path> into <c>, a symbolic link followed as git
 * follows it. A file that does not exist, the user cannot read (as git
 * skips it) or is no regular file (GIT_CONFIG_GLOBAL=/dev/null) reads as
 * empty. Returns 0, or -1 with a
 * message in <err> naming <path>: unreadable, longer than
 * GIT_CONFIG_READ_MAX, or as git_config_parse(). */
int git_config_read(const char *path, struct git_config *c, char *err, size_t errlen);

/* Frees what <c> holds; <c> may be all zero. */
void git_config_free(struct git_config *c);

#endif
