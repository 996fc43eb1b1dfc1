#include "box/alert_env.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The search variables (alert_env.h). LD_PRELOAD's entries are parted by
 * spaces too. */
static const char *const search_vars[] = {
    "PATH",          "LD_LIBRARY_PATH", "LD_PRELOAD",
    "LD_AUDIT",      "GCONV_PATH",      "BASH_ENV",
    "ENV",           "PYTHONPATH",      "PYTHONHOME",
    "PYTHONSTARTUP", "PYTHONUSERBASE",  "PYTHONPYCACHEPREFIX",
    "PERL5LIB",      "PERLLIB",         "RUBYLIB",
    "NODE_PATH",
};

/* The option variables (alert_env.h). */
static const char *const option_vars[] = {
    "NODE_OPTIONS",      "PERL5OPT",      "PERL5DB",          "RUBYOPT",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
};

char *alert_env_kept_entries(const char *value, const char *seps,
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
                kept[n++] = ':';
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

void alert_env_filter(alert_env_changeable_fn changeable, const void *ctx)
{
    for (size_t i = 0; i < sizeof(search_vars) / sizeof(search_vars[0]); i++) {
        const char *name = search_vars[i];
        const char *v = getenv(name);
        if (v == NULL)
            continue;
        char *kept = alert_env_kept_entries(v, strcmp(name, "LD_PRELOAD") == 0 ? ": " : ":",
                                            changeable, ctx);
        if (kept != NULL && kept[0] != '\0')
            setenv(name, kept, 1);
        else
            unsetenv(name);
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
