/* Unit tests for util/privdrop.c: resolving --user values against the
 * user and group databases (root and nobody exist on every Debian). The
 * switch itself needs root and is tested through serve
 * (tests/integration/test_gate_user.py). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <pwd.h>
#include <string.h>

#include "util/privdrop.h"

static void resolves_names_and_numbers(void **state)
{
    (void)state;
    struct passwd *pw = getpwnam("nobody");
    assert_non_null(pw);
    struct privdrop_target t;
    char err[160];
    assert_int_equal(privdrop_resolve("nobody", &t, err, sizeof(err)), 0);
    assert_int_equal(t.uid, pw->pw_uid);
    assert_int_equal(t.gid, pw->pw_gid); /* the primary group */
    assert_string_equal(t.name, "nobody");

    assert_int_equal(privdrop_resolve("nobody:root", &t, err, sizeof(err)), 0);
    assert_int_equal(t.uid, pw->pw_uid);
    assert_int_equal(t.gid, 0);

    assert_int_equal(privdrop_resolve("0", &t, err, sizeof(err)), 0);
    assert_int_equal(t.uid, 0);
    assert_int_equal(t.gid, 0);

    /* a uid with no entry needs its group spelled out */
    assert_int_equal(privdrop_resolve("4000000:4000001", &t, err, sizeof(err)), 0);
    assert_int_equal(t.uid, 4000000);
    assert_int_equal(t.gid, 4000001);
}

static void refuses_what_it_cannot_resolve(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *err;
    } bad[] = {
        {"", "'': expected USER or USER:GROUP"},
        {":root", "':root': expected USER or USER:GROUP"},
        {"nobody:", "'nobody:': expected USER or USER:GROUP"},
        {"no-such-user-here", "no user 'no-such-user-here'"},
        {"nobody:no-such-group-here", "no group 'no-such-group-here'"},
        {"4000000", "uid 4000000 has no entry in the user database: name a group too (UID:GID)"},
        {"4294967295", "no user '4294967295'"},
        {"-1", "no user '-1'"},
        {"0x10", "no user '0x10'"},
        {"nobody:4294967295", "no group '4294967295'"},
        {"a-user-name-far-too-long-to-be-any-user-name-on-any-system-at-all-x", "expected"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct privdrop_target t;
        char err[160] = "";
        assert_int_equal(privdrop_resolve(bad[i].spec, &t, err, sizeof(err)), -1);
        assert_non_null(strstr(err, bad[i].err));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(resolves_names_and_numbers),
        cmocka_unit_test(refuses_what_it_cannot_resolve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
