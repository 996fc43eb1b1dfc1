/* test_alert_env: the environment run's gateway passes its alert programs:
 * search variables without the entries a predicate says the command can
 * change, option variables dropped, the rest as they were. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "box/alert_env.h"

static unsigned asked; /* how many entries the predicate was asked about */

/* The command can change what lies below <ctx>, a folder. */
static bool below(const char *entry, const void *ctx)
{
    const char *dir = ctx;
    size_t n = strlen(dir);
    asked++;
    return strncmp(entry, dir, n) == 0 && (entry[n] == '\0' || entry[n] == '/');
}

static void assert_kept(const char *value, const char *seps, const char *want)
{
    char *kept = alert_env_kept_entries(value, seps, ':', below, "/proj");
    assert_non_null(kept);
    assert_string_equal(kept, want);
    free(kept);
}

static void test_kept_entries(void **state)
{
    (void)state;
    assert_kept("/usr/bin:/proj/bin:/bin", ":", "/usr/bin:/bin");
    assert_kept("/proj/venv/bin", ":", "");
    assert_kept("/project/bin:/proj", ":", "/project/bin");
    /* relative and empty entries name the working directory, the project:
     * dropped without asking */
    asked = 0;
    assert_kept(":bin:./x:/usr/bin:", ":", "/usr/bin");
    assert_int_equal(asked, 1);
    assert_kept("", ":", "");
    /* parted by spaces too, joined by ':' (LD_PRELOAD takes both) */
    assert_kept("/lib/a.so /proj/b.so:/lib/c.so", ": ", "/lib/a.so:/lib/c.so");
    /* an entry no path could be is dropped */
    char *longv = malloc(PATH_MAX + 16);
    longv[0] = '/';
    memset(longv + 1, 'a', PATH_MAX);
    memcpy(longv + 1 + PATH_MAX, ":/bin", 6);
    assert_kept(longv, ":", "/bin");
    free(longv);
}

/* A variable set to <value> before alert_env_filter(), and what it holds
 * after (<want>; NULL: unset). */
struct var_case {
    const char *name, *value, *want;
};

static void assert_filtered(const struct var_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        setenv(c[i].name, c[i].value, 1);
    alert_env_filter(below, "/proj");
    for (size_t i = 0; i < n; i++) {
        const char *got = getenv(c[i].name);
        if (c[i].want == NULL && got != NULL)
            fail_msg("%s: '%s', not unset", c[i].name, got);
        if (c[i].want != NULL && (got == NULL || strcmp(got, c[i].want) != 0))
            fail_msg("%s: '%s', not '%s'", c[i].name, got != NULL ? got : "(unset)", c[i].want);
    }
}

static void test_filter_of_the_environment(void **state)
{
    (void)state;
    static const struct var_case cases[] = {
        {"PATH", "/proj/node_modules/.bin:/usr/bin:/bin", "/usr/bin:/bin"},
        {"PYTHONPATH", "/proj/lib", NULL}, /* none left: unset, not empty */
        {"LD_PRELOAD", "/proj/x.so /usr/lib/y.so", "/usr/lib/y.so"},
        {"PERL5LIB", "/opt/perl:/proj/perl", "/opt/perl"},
        {"NODE_OPTIONS", "--require /usr/lib/ok.js", NULL}, /* whatever they hold */
        {"RUBYOPT", "-rjson", NULL},
        {"JAVA_TOOL_OPTIONS", "-javaagent:/opt/a.jar", NULL},
        {"HOME", "/proj", "/proj"}, /* no search variable: as it was */
    };
    unsetenv("NODE_PATH");
    assert_filtered(cases, sizeof(cases) / sizeof(cases[0]));
    assert_null(getenv("NODE_PATH"));
}

/* The search variables of git, Lua, Java, Ruby's gems and Tcl: each
 * names where code is loaded from by name, as PATH does; Lua's LUA_INIT
 * is code. */
static void test_tools_search_variables(void **state)
{
    (void)state;
    static const struct var_case cases[] = {
        {"GIT_EXEC_PATH", "/proj/git-core", NULL},
        /* Lua's entries are parted by ';', and ";;" stands for its default
         * path (system folders, and "./" from the gateway's "/"): kept */
        {"LUA_PATH", "/proj/?.lua;/usr/share/lua/5.4/?.lua;;", "/usr/share/lua/5.4/?.lua;;"},
        {"LUA_CPATH", "./?.so;/proj/?.so", NULL},
        {"LUA_PATH_5_4", "/usr/local/share/lua/5.4/?.lua;/proj/lua/?.lua",
         "/usr/local/share/lua/5.4/?.lua"},
        {"LUA_CPATH_5_3", "/proj/?.so;;", ";;"},
        {"CLASSPATH", "/proj/lib/*:.:/usr/share/java/x.jar", "/usr/share/java/x.jar"},
        {"GEM_HOME", "/proj/vendor/gems", NULL},
        {"GEM_PATH", "/var/lib/gems/3.1.0:/proj/vendor/gems", "/var/lib/gems/3.1.0"},
        /* a Tcl list: parted by white space */
        {"TCLLIBPATH", "/usr/share/tcltk /proj/tcl\t/usr/lib/tcltk",
         "/usr/share/tcltk /usr/lib/tcltk"},
        {"TCL_LIBRARY", "/proj/tcl8.6", NULL},
        /* code itself, or a file of it: dropped whatever it holds */
        {"LUA_INIT", "@/usr/share/lua/init.lua", NULL},
        {"LUA_INIT_5_4", "dofile('/proj/x.lua')", NULL},
    };
    assert_filtered(cases, sizeof(cases) / sizeof(cases[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_entries),
        cmocka_unit_test(test_filter_of_the_environment),
        cmocka_unit_test(test_tools_search_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
