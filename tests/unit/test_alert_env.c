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
    char *kept = alert_env_kept_entries(value, seps, below, "/proj");
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

static void test_filter_of_the_environment(void **state)
{
    (void)state;
    setenv("PATH", "/proj/node_modules/.bin:/usr/bin:/bin", 1);
    setenv("PYTHONPATH", "/proj/lib", 1);
    setenv("LD_PRELOAD", "/proj/x.so /usr/lib/y.so", 1);
    setenv("PERL5LIB", "/opt/perl:/proj/perl", 1);
    setenv("NODE_OPTIONS", "--require /usr/lib/ok.js", 1);
    setenv("RUBYOPT", "-rjson", 1);
    setenv("JAVA_TOOL_OPTIONS", "-javaagent:/opt/a.jar", 1);
    setenv("HOME", "/proj", 1); /* no search variable: as it was */
    unsetenv("NODE_PATH");
    alert_env_filter(below, "/proj");
    assert_string_equal(getenv("PATH"), "/usr/bin:/bin");
    assert_null(getenv("PYTHONPATH")); /* none left: unset, not empty */
    assert_string_equal(getenv("LD_PRELOAD"), "/usr/lib/y.so");
    assert_string_equal(getenv("PERL5LIB"), "/opt/perl");
    assert_null(getenv("NODE_OPTIONS")); /* whatever they hold */
    assert_null(getenv("RUBYOPT"));
    assert_null(getenv("JAVA_TOOL_OPTIONS"));
    assert_string_equal(getenv("HOME"), "/proj");
    assert_null(getenv("NODE_PATH"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_entries),
        cmocka_unit_test(test_filter_of_the_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
