#include "box/alert_env.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A search variable: its name, the bytes that part its entries, the one
 * that joins those kept, and whether ";;" stands for the tool's default
 * path (Lua's: its system folders, and "./" from the gateway's "/", where
 * it would be searched were the variable unset), kept as such; an empty
 * entry elsewhere names the working directory and is left out. */
struct search_var {
    const char *name;
    const char *seps;
    char join;
    bool default_mark;
};

/* The search variables (alert_env.h): the dynamic loader's, shells' and
 * interpreters' (LD_PRELOAD's entries are parted by spaces too), then
 * those of tools that load code by name: git's commands that are no
 * built-in (git-NAME), Lua's modules (LUA_PATH_5_4 before LUA_PATH in Lua
 * 5.4, and so on), Java's classes, Ruby's gems, Tcl's packages (a Tcl
 * list: parted by white space) and the init.tcl every Tcl interpreter
 * sources first. */
static const struct search_var search_vars[] = {
    {"PATH", ":", ':', false},
    {"LD_LIBRARY_PATH", ":", ':', false},
    {"LD_PRELOAD", ": ", ':', false},
    {"LD_AUDIT", ":", ':', false},
    {"GCONV_PATH", ":", ':', false},
    {"BASH_ENV", ":", ':', false},
    {"ENV", ":", ':', false},
    {"PYTHONPATH", ":", ':', false},
    {"PYTHONHOME", ":", ':', false},
    {"PYTHONSTARTUP", ":", ':', false},
    {"PYTHONUSERBASE", ":", ':', false},
    {"PYTHONPYCACHEPREFIX", ":", ':', false},
    {"PERL5LIB", ":", ':', false},
    {"PERLLIB", ":", ':', false},
    {"RUBYLIB", ":", ':', false},
    {"NODE_PATH", ":", ':', false},
    {"GIT_EXEC_PATH", ":", ':', false},
    {"LUA_PATH", ";", ';', true},
    {"LUA_CPATH", ";", ';', true},
    {"LUA_PATH_5_1", ";", ';', true},
    {"LUA_CPATH_5_1", ";", ';', true},
    {"LUA_PATH_5_2", ";", ';', true},
    {"LUA_CPATH_5_2", ";", ';', true},
    {"LUA_PATH_5_3", ";", ';', true},
    {"LUA_CPATH_5_3", ";", ';', true},
    {"LUA_PATH_5_4", ";", ';', true},
    {"LUA_CPATH_5_4", ";", ';', true},
    {"CLASSPATH", ":", ':', false},
    {"GEM_HOME", ":", ':', false},
    {"GEM_PATH", ":", ':', false},
    {"TCLLIBPATH", " \t\n", ' ', false},
    {"TCL_LIBRARY", ":", ':', false},
};

/* The option variables (alert_env.h), and Lua's LUA_INIT: code that lua
 * runs first, or "@FILE", a file it runs. */
static const char *const option_vars[] = {
    "NODE_OPTIONS",      "PERL5OPT",      "PERL5DB",          "RUBYOPT",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "LUA_INIT",
    "LUA_INIT_5_1",      "LUA_INIT_5_2",  "LUA_INIT_5_3",     "LUA_INIT_5_4",
};

char *alert_env_kept_entries(const char *value, const char *seps, char join,
                             alert_env_changeable_fn changeable, const void *ctx)
{
    char *kept = malloc(strlen(value) + 1);
    if (kept == NULL)
        return NULL;
    size_t n = 0;
    for (const char *e = value;; e++) { /* e++: past the separator */
        size_t len = strcspn(e, seps);
        char entry[PATH_MAX];
        bool keep = len > 0 && len < sizeof(entry) && e[0] == '/';
        if (keep) {
            memcpy(entry, e, len);
            entry[len] = '\0';
            keep = !changeable(entry, ctx);
        }
        if (keep) {
            if (n > 0)
                kept[n++] = join;
            memcpy(kept + n, e, len);
            n += len;
        }
        e += len;
        if (*e == '\0')
            break;
    }
    kept[n] = '\0';
    return kept;
}

/* The kept entries of <v>'s value <value> (alert_env_kept_entries()), with
 * ";;" after them when it stands for <v>'s default path and <value> had
 * it. NULL when out of memory. */
static char *kept_value(const struct search_var *v, const char *value,
                        alert_env_changeable_fn changeable, const void *ctx)
{
    char *kept = alert_env_kept_entries(value, v->seps, v->join, changeable, ctx);
    if (kept == NULL || !v->default_mark || strstr(value, ";;") == NULL)
        return kept;
    size_t n = strlen(kept);
    char *more = realloc(kept, n + 3);
    if (more == NULL) {
        free(kept);
        return NULL;
    }
    memcpy(more + n, ";;", 3); /* anywhere in the value, for Lua */
    return more;
}

void alert_env_filter(alert_env_changeable_fn changeable, const void *ctx)
{
    for (size_t i = 0; i < sizeof(search_vars) / sizeof(search_vars[0]); i++) {
        const char *value = getenv(search_vars[i].name);
        if (value == NULL)
            continue;
        char *kept = kept_value(&search_vars[i], value, changeable, ctx);
        if (kept != NULL && kept[0] != '\0')
            setenv(search_vars[i].name, kept, 1);
        else
            unsetenv(search_vars[i].name);
        free(kept);
    }
    for (size_t i = 0; i < sizeof(option_vars) / sizeof(option_vars[0]); i++)
        unsetenv(option_vars[i]);
}

static bool view_can_change(const char *entry, const void *ctx)
{
    const char *root;
    return reach_can_change(ctx, entry, &root);
}

void alert_env_apply(const struct box_view *v)
{
    alert_env_filter(view_can_change, v);
}
