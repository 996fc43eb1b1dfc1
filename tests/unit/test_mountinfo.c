/* test_mountinfo: the /proc/PID/mountinfo parser and the justification
 * files of `sluice audit mounts`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "box/mountinfo.h"

static int parse(const char *text, struct mountinfo *mi, char *err, size_t errlen)
{
    return mountinfo_parse(text, strlen(text), mi, err, errlen);
}

static void test_parse_real_lines(void **state)
{
    (void)state;
    const char *text =
        "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro\n"
        "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
        "24 22 0:5 / /dev ro,nosuid master:2 shared:3 - devtmpfs udev rw,size=10k\n"
        "25 22 0:30 / /mnt/with\\040space rw - tmpfs my\\134src rw\n"
        "26 22 254:1 /srv/data /data rw,nosuid - ext4 /dev/vda1 ro\n"
        "27 22 0:4 net:[4026531840] /run/netns/x rw - nsfs nsfs rw";
    struct mountinfo mi;
    char err[256] = "";
    assert_int_equal(parse(text, &mi, err, sizeof(err)), 0);
    assert_int_equal(mi.n, 6);
    assert_int_equal(mi.v[0].id, 22);
    assert_int_equal(mi.v[0].parent, 1);
    assert_int_equal(mi.v[0].major, 254);
    assert_int_equal(mi.v[0].minor, 1);
    assert_string_equal(mi.v[0].mount_point, "/");
    assert_string_equal(mi.v[0].optional, "shared:1");
    assert_string_equal(mi.v[0].fstype, "ext4");
    assert_string_equal(mi.v[0].source, "/dev/vda1");
    assert_true(mountinfo_is_writable(&mi.v[0])); /* errors=remount-ro is not ro */
    assert_true(mountinfo_is_writable(&mi.v[1]));
    assert_false(mountinfo_is_writable(&mi.v[2])); /* ro mount */
    assert_string_equal(mi.v[2].optional, "master:2 shared:3");
    assert_string_equal(mi.v[3].mount_point, "/mnt/with space");
    assert_string_equal(mi.v[3].source, "my\\src");
    assert_string_equal(mi.v[3].optional, "");
    assert_false(mountinfo_is_writable(&mi.v[4])); /* ro super block */
    assert_string_equal(mi.v[4].root, "/srv/data");
    assert_string_equal(mi.v[5].root, "net:[4026531840]");
    assert_int_equal(mi.v[5].line, 6);
    mountinfo_free(&mi);
    mountinfo_free(&mi); /* twice is harmless */
    mountinfo_free(NULL);

    assert_int_equal(parse("", &mi, err, sizeof(err)), 0);
    assert_int_equal(mi.n, 0);
    mountinfo_free(&mi);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *err;
    } bad[] = {
        {"22 1 254:1 / / rw - ext4", "line 1: line: expected"},
        {"22 1 254:1 / / rw shared:1 ext4 /dev/vda1 rw", "line 1: line: expected"},
        {"x 1 254:1 / / rw - ext4 /dev/vda1 rw", "line 1: id: not a number"},
        {"22 -1 254:1 / / rw - ext4 /dev/vda1 rw", "line 1: parent: not a number"},
        {"22 1 254 / / rw - ext4 /dev/vda1 rw", "line 1: major:minor: expected"},
        {"22 1 254:x / / rw - ext4 /dev/vda1 rw", "line 1: major:minor: expected"},
        {"22 1 99999999999:1 / / rw - ext4 /dev/vda1 rw", "line 1: major:minor"},
        {"22 1 254:1 / rel rw - ext4 /dev/vda1 rw", "line 1: mount_point: not an absolute"},
        {"22 1 254:1 / /a\\0 rw - ext4 /dev/vda1 rw", "line 1: mount_point: bad escape"},
        {"22 1 254:1 / /a\\000 rw - ext4 /dev/vda1 rw", "line 1: mount_point: escaped NUL"},
        {"22 1 254:1 / /a\\999 rw - ext4 /dev/vda1 rw", "line 1: mount_point: bad escape"},
        {"22 1 254:1 / / nosuid - ext4 /dev/vda1 rw", "line 1: mount_options: neither rw"},
        {"22 1 254:1 / / rw - ext4 /dev/vda1 rw extra", "line 1: fstype: expected"},
        {"22 1 254:1 / / rw - ext4 /dev/\\9 rw", "line 1: source: bad escape"},
        {"22 1 254:1 / / rw\t- ext4 /dev/vda1 rw", "line 1: line: unexpected control"},
        {"22 1 254:1 / / rw - ext4 /dev/vda1 rw\n\n", "line 2: line: empty"},
        {"22 1 254:1 / / rw - ext4 /dev/vda1 rw\nbad", "line 2: line: expected"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct mountinfo mi;
        char err[256] = "";
        assert_int_equal(parse(bad[i].text, &mi, err, sizeof(err)), -1);
        if (strncmp(err, bad[i].err, strlen(bad[i].err)) != 0)
            fail_msg("case %zu: got '%s', want '%s...'", i, err, bad[i].err);
        mountinfo_free(&mi);
    }
}

static void test_parse_limits(void **state)
{
    (void)state;
    struct mountinfo mi;
    char err[256];
    /* an over-long line */
    static char line[MOUNTINFO_MAX_LINE + 64];
    memset(line, 'a', sizeof(line));
    memcpy(line, "22 1 254:1 / /", 14);
    assert_int_equal(mountinfo_parse(line, sizeof(line), &mi, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "longer than"));
    mountinfo_free(&mi);
    /* too many optional fields */
    char opt[2048] = "22 1 254:1 / / rw";
    for (int i = 0; i < MOUNTINFO_MAX_OPTIONAL + 1; i++)
        strncat(opt, " shared:1", sizeof(opt) - strlen(opt) - 1);
    strncat(opt, " - ext4 /dev/vda1 rw", sizeof(opt) - strlen(opt) - 1);
    assert_int_equal(parse(opt, &mi, err, sizeof(err)), -1);
    mountinfo_free(&mi);
    /* not NUL-terminated: only <len> bytes are read */
    const char *text = "22 1 254:1 / / rw - ext4 /dev/vda1 rwXXXX";
    assert_int_equal(mountinfo_parse(text, strlen(text) - 4, &mi, err, sizeof(err)), 0);
    assert_string_equal(mi.v[0].super_opts, "rw");
    mountinfo_free(&mi);
    /* an embedded NUL is refused */
    const char nul[] = "22 1 254:1 / / rw - ext4 /dev/vda1 r\0w";
    assert_int_equal(mountinfo_parse(nul, sizeof(nul) - 1, &mi, err, sizeof(err)), -1);
    mountinfo_free(&mi);
}

/* The longest paths a mount can have (PATH_MAX less the NUL), every byte a
 * space the kernel writes as \040, as its root, its mount point and its
 * source, and a page of options: a line such as `unshare -rm` and a bind
 * mount of a deep directory of spaces make (30138 bytes on this machine),
 * which was refused as longer than 16384 bytes, failing the whole audit. */
static void test_parse_longest_paths(void **state)
{
    (void)state;
    size_t cap = 3 * 4095 * 4 + 4096 + 256, len = 0;
    char *line = malloc(cap);
    assert_non_null(line);
    len += (size_t)snprintf(line, cap, "22 1 0:5 ");
    for (int field = 0; field < 3; field++) {
        line[len++] = '/';
        for (int i = 1; i < 4095; i++) {
            memcpy(line + len, "\\040", 4);
            len += 4;
        }
        len += (size_t)snprintf(line + len, cap - len, field == 1 ? " rw - tmpfs " : " ");
    }
    len += (size_t)snprintf(line + len, cap - len, "rw,");
    memset(line + len, 'o', 4092);
    len += 4092;
    struct mountinfo mi;
    char err[256] = "";
    if (mountinfo_parse(line, len, &mi, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(mi.n, 1);
    assert_int_equal(strlen(mi.v[0].root), 4095);
    assert_int_equal(strlen(mi.v[0].mount_point), 4095);
    assert_int_equal(strlen(mi.v[0].source), 4095);
    assert_int_equal(strlen(mi.v[0].super_opts), 4095);
    assert_true(mountinfo_is_writable(&mi.v[0]));
    mountinfo_free(&mi);
    free(line);
}

static void test_opt_has(void **state)
{
    (void)state;
    assert_true(mountinfo_opt_has("rw,nosuid", "rw"));
    assert_true(mountinfo_opt_has("nosuid,rw", "rw"));
    assert_true(mountinfo_opt_has("ro", "ro"));
    assert_false(mountinfo_opt_has("errors=remount-ro", "ro"));
    assert_false(mountinfo_opt_has("rwx,xrw", "rw"));
    assert_false(mountinfo_opt_has("", "rw"));
}

static void test_covered(void **state)
{
    (void)state;
    const char *text = "1 0 8:1 / / rw - ext4 /dev/sda rw\n"
                       "2 1 0:5 / /dev rw - devtmpfs udev rw\n"
                       "3 2 0:6 / /dev/pts rw - devpts devpts rw\n"
                       "4 3 0:7 / /dev/pts rw - devpts devpts rw\n"
                       "5 4 0:8 / /dev/pts/sub rw - tmpfs t rw\n"
                       "6 2 0:9 / /dev/shm rw - tmpfs t rw\n"
                       "7 2 0:10 / /dev rw - tmpfs over rw\n";
    struct mountinfo mi;
    char err[256];
    assert_int_equal(parse(text, &mi, err, sizeof(err)), 0);
    assert_false(mountinfo_is_covered(&mi, &mi.v[0]));
    assert_true(mountinfo_is_covered(&mi, &mi.v[1]));  /* 7 sits on /dev */
    assert_true(mountinfo_is_covered(&mi, &mi.v[2]));  /* 4 on top, and /dev covered */
    assert_true(mountinfo_is_covered(&mi, &mi.v[3]));  /* its ancestor /dev is covered */
    assert_true(mountinfo_is_covered(&mi, &mi.v[5]));  /* under the covered /dev */
    assert_false(mountinfo_is_covered(&mi, &mi.v[6])); /* the top of /dev */
    mountinfo_free(&mi);
    /* without mount 7: the top /dev/pts and what is below it are reachable */
    assert_int_equal(mountinfo_parse(text,
                                     strlen(text) - strlen("7 2 0:10 / /dev rw - tmpfs over rw\n"),
                                     &mi, err, sizeof(err)),
                     0);
    assert_true(mountinfo_is_covered(&mi, &mi.v[2]));
    assert_false(mountinfo_is_covered(&mi, &mi.v[3]));
    assert_false(mountinfo_is_covered(&mi, &mi.v[4]));
    assert_false(mountinfo_is_covered(&mi, &mi.v[5]));
    mountinfo_free(&mi);
    /* a parent cycle ends */
    const char *cyc = "1 2 0:1 / /a rw - t t rw\n2 1 0:2 / /b rw - t t rw\n";
    assert_int_equal(parse(cyc, &mi, err, sizeof(err)), 0);
    assert_false(mountinfo_is_covered(&mi, &mi.v[0]));
    mountinfo_free(&mi);
}

/* Parses the <len> bytes of <text>, <n> mounts, into <mi> (which the
 * caller frees); returns how many of them are covered. */
static size_t parse_count_covered(const char *text, size_t len, size_t n, struct mountinfo *mi)
{
    char err[256];
    assert_int_equal(mountinfo_parse(text, len, mi, err, sizeof(err)), 0);
    assert_int_equal(mi->n, n);
    size_t covered = 0;
    for (size_t i = 0; i < mi->n; i++)
        covered += mountinfo_is_covered(mi, &mi->v[i]);
    return covered;
}

/* A mount on a folder above another's mount point, both in one parent
 * mount (what `unshare -m` wrote for a tmpfs on /tmp/d/a/b, then one on
 * /tmp/d/a): the first is out of reach, /tmp/d/a/b leading into the
 * second, and was listed as writable. Checked with the index and by the
 * scan that stands in for it when there was no memory for one. */
static void test_covered_by_a_mount_above(void **state)
{
    (void)state;
    const char *text = "1 0 8:1 / / rw - ext4 /dev/sda rw\n"
                       "75 1 0:30 / /tmp rw - tmpfs tmpfs rw\n"
                       "99 75 0:43 / /tmp/d/a/b rw - tmpfs t1 rw\n"
                       "98 99 0:45 / /tmp/d/a/b/c rw - tmpfs t3 rw\n"
                       "100 75 0:44 / /tmp/d/a rw - tmpfs t2 rw\n"
                       "101 75 0:46 / /tmp/d/a.b rw - tmpfs t4 rw\n"
                       "102 75 0:47 / /tmp/d/ab rw - tmpfs t5 rw\n"
                       "103 7 0:48 / /tmp/d/a/x rw - tmpfs t6 rw\n"
                       "104 75 0:49 / /tmp/d/a/ rw - tmpfs forged rw\n"
                       "105 75 0:50 / /tmp/d/a/y rw - tmpfs t7 rw\n";
    /* reachable: /, /tmp, /tmp/d/a, /tmp/d/a.b, /tmp/d/ab, 103 (another
     * parent's, whose mount is not listed), 104 (a forged "/tmp/d/a/" is
     * no folder below "/tmp/d/a") */
    static const bool want[] = {false, false, true, true, false, false, false, false, false, true};
    struct mountinfo mi;
    char err[256];
    for (int scan = 0; scan < 2; scan++) {
        assert_int_equal(parse(text, &mi, err, sizeof(err)), 0);
        if (scan) {
            free(mi.by_id);
            free(mi.by_parent);
            free(mi.buried);
            mi.by_id = mi.by_parent = NULL;
            mi.buried = NULL;
        }
        for (size_t i = 0; i < mi.n; i++) {
            if (mountinfo_is_covered(&mi, &mi.v[i]) != want[i])
                fail_msg("%s: %s covered: %d", scan ? "scan" : "index", mi.v[i].mount_point,
                         !want[i]);
        }
        mountinfo_free(&mi);
    }
    /* "/" on top of the root, in the root mount: every other mount of the
     * root is below it */
    const char *root = "1 0 8:1 / / rw - ext4 /dev/sda rw\n"
                       "2 1 0:5 / /a rw - tmpfs a rw\n"
                       "3 1 0:6 / / rw - tmpfs top rw\n";
    assert_int_equal(parse(root, &mi, err, sizeof(err)), 0);
    assert_true(mountinfo_is_covered(&mi, &mi.v[1]));
    assert_false(mountinfo_is_covered(&mi, &mi.v[2]));
    mountinfo_free(&mi);
}

/* A forged file of as many mounts as the parser takes, all of one parent:
 * 2000 each below the one before (/a, /a/a, ...), the rest side by side
 * below the first (/a/N). Each but the first is covered, found without
 * comparing every pair (10^10 of them). */
static void test_covered_by_a_mount_above_many(void **state)
{
    (void)state;
    size_t n = MOUNTINFO_MAX_ENTRIES, deep = 2000, cap = deep * (deep * 2 + 40) + n * 40, len = 0;
    char *text = malloc(cap), *mp = malloc(deep * 2 + 2);
    assert_non_null(text);
    assert_non_null(mp);
    size_t mlen = 0;
    for (size_t i = 0; i < n; i++) {
        if (i < deep) {
            mp[mlen++] = '/';
            mp[mlen++] = 'a';
            mp[mlen] = '\0';
            len +=
                (size_t)snprintf(text + len, cap - len, "%zu 1 0:1 / %s rw - t t rw\n", i + 2, mp);
        } else {
            len += (size_t)snprintf(text + len, cap - len, "%zu 1 0:1 / /a/%zu rw - t t rw\n",
                                    i + 2, i);
        }
    }
    struct mountinfo mi;
    size_t covered = parse_count_covered(text, len, n, &mi);
    assert_int_equal(covered, n - 1);
    assert_false(mountinfo_is_covered(&mi, &mi.v[0]));
    mountinfo_free(&mi);
    free(mp);
    free(text);
}

/* As many mounts as the kernel lets a namespace hold (fs.mount-max, 100000,
 * which an agent in a user namespace of its own can reach): the check of
 * every mount is not quadratic in their number (it was: minutes, as many
 * as the integration tests' timeout for `sluice audit mounts --pid`). */
static void test_covered_many(void **state)
{
    (void)state;
    size_t n = MOUNTINFO_MAX_ENTRIES, cap = n * 64, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "1 0 8:1 / / rw - ext4 /dev/sda rw\n");
    /* half of them a chain, each on the one before (/c, /c/c ...: the
     * deepest has a long walk up), the rest side by side, every tenth of
     * those mounted over by the next */
    for (unsigned i = 2; i <= n; i++) {
        if (i <= n / 2)
            len += (size_t)snprintf(text + len, cap - len, "%u %u 0:1 / /c%u rw - t t rw\n", i,
                                    i - 1, i % 50);
        else
            len += (size_t)snprintf(text + len, cap - len, "%u %u 0:1 / /m/%u rw - t t rw\n", i,
                                    i % 10 == 1 ? i - 1 : 1, i % 10 == 1 ? i - 1 : i);
    }
    struct mountinfo mi;
    size_t covered = parse_count_covered(text, len, n, &mi);
    assert_int_equal(covered, n / 2 / 10 - 1); /* /m/N for N % 10 == 0, n/2 < N < n */
    assert_false(mountinfo_is_covered(&mi, &mi.v[n / 2 - 1]));
    assert_true(mountinfo_is_covered(&mi, &mi.v[n / 2 + 9])); /* id n/2 + 10, under id n/2 + 11 */
    mountinfo_free(&mi);
    free(text);
}

/* A saved mountinfo (--mountinfo FILE: anyone's bytes) whose every line is
 * the same mount, its own parent: each mount's check looked at every entry
 * with its id for parent and its mount point, skipping those of its own id,
 * 10^10 comparisons for 100000 lines (18 s for 20000 in this build, the
 * 100000 minutes). The kernel never writes an id twice; the check still
 * ends, and finds a mount on top among such copies. */
static void test_covered_many_copies(void **state)
{
    (void)state;
    size_t n = MOUNTINFO_MAX_ENTRIES, cap = n * 40, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "5 5 0:1 / /a rw - t t rw\n");
    struct mountinfo mi;
    char err[256];
    assert_int_equal(mountinfo_parse(text, len, &mi, err, sizeof(err)), 0);
    size_t covered = 0;
    for (size_t i = 0; i < mi.n; i++)
        covered += mountinfo_is_covered(&mi, &mi.v[i]);
    assert_int_equal(covered, 0);
    mountinfo_free(&mi);
    free(text);
    /* among copies of id 5, a mount of another id on top of /a (before
     * them in the order of ids, or after) covers each */
    static const char *const tops[] = {"3 5 0:1 / /a rw - t t rw\n", "9 5 0:1 / /a rw - t t rw\n"};
    for (size_t t = 0; t < 2; t++) {
        char small[512];
        snprintf(small, sizeof(small), "5 5 0:1 / /a rw - t t rw\n%s5 5 0:1 / /a rw - t t rw\n",
                 tops[t]);
        assert_int_equal(parse(small, &mi, err, sizeof(err)), 0);
        assert_true(mountinfo_is_covered(&mi, &mi.v[0]));
        assert_true(mountinfo_is_covered(&mi, &mi.v[2]));
        mountinfo_free(&mi);
    }
}

struct bad_lines {
    unsigned lines[16];
    char msgs[16][128];
    size_t n;
};

static void collect(void *arg, unsigned line, const char *msg)
{
    struct bad_lines *b = arg;
    if (b->n < 16) {
        b->lines[b->n] = line;
        snprintf(b->msgs[b->n], sizeof(b->msgs[0]), "%s", msg);
        b->n++;
    }
}

static void test_justify(void **state)
{
    (void)state;
    const char *text = "# why each writable mount exists\n"
                       "\n"
                       "/tmp: scratch space, private to the box\n"
                       "  /work/repo/ :\tthe checkout the agent edits  \n"
                       "/: never\n"
                       "/a:b: colon inside the path\n";
    struct justify j;
    struct bad_lines b = {0};
    assert_int_equal(justify_parse(text, strlen(text), &j, collect, &b), 0);
    assert_int_equal(b.n, 0);
    assert_int_equal(j.n, 4);
    assert_string_equal(j.v[0].path, "/tmp");
    assert_string_equal(j.v[0].reason, "scratch space, private to the box");
    assert_int_equal(j.v[0].line, 3);
    assert_string_equal(j.v[1].path, "/work/repo");
    assert_string_equal(j.v[1].reason, "the checkout the agent edits");
    assert_string_equal(j.v[2].path, "/");
    assert_string_equal(j.v[3].path, "/a:b");
    assert_non_null(justify_find(&j, "/work/repo"));
    assert_null(justify_find(&j, "/work"));
    justify_free(&j);
    justify_free(NULL);
}

static void test_justify_errors(void **state)
{
    (void)state;
    const char *text = "relative: no\n"
                       "/tmp scratch\n"
                       "/tmp:\n"
                       "/ok: fine\n"
                       "/ok: twice\n"
                       "/ctl: a\x01b\n"
                       "/nocolon:x\n";
    struct justify j;
    struct bad_lines b = {0};
    assert_int_equal(justify_parse(text, strlen(text), &j, collect, &b), 6);
    assert_int_equal(b.n, 6);
    assert_int_equal(b.lines[0], 1);
    assert_non_null(strstr(b.msgs[0], "absolute"));
    assert_int_equal(b.lines[1], 2);
    assert_int_equal(b.lines[2], 3);
    assert_non_null(strstr(b.msgs[2], "empty"));
    assert_int_equal(b.lines[3], 5);
    assert_string_equal(b.msgs[3], "path justified twice (first at line 4)");
    assert_int_equal(b.lines[4], 6);
    assert_int_equal(b.lines[5], 7);
    assert_int_equal(j.n, 1);
    justify_free(&j);

    /* NUL byte, no reporter, too large */
    const char nul[] = "/a: b\0c\n";
    assert_int_equal(justify_parse(nul, sizeof(nul) - 1, &j, NULL, NULL), 1);
    justify_free(&j);
    assert_int_equal(justify_parse(nul, JUSTIFY_MAX_BYTES + 1, &j, NULL, NULL), -1);
    justify_free(&j);
}

/* As many justifications as a file may hold, looked up for as many
 * mounts as a namespace may hold (an agent in a user namespace of its own
 * can make 100000): `sluice audit mounts` looks up every writable mount,
 * and a scan of every justification for each (10^9 comparisons of paths
 * sharing a long prefix) kept it busy for 6 s, 47 s in this build. */
static void test_justify_find_many(void **state)
{
    (void)state;
    size_t n = JUSTIFY_MAX_ENTRIES, cap = n * 64, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    const char *prefix = "/srv/a/rather/long/prefix/shared/by/every/path";
    for (size_t i = 0; i < n; i++) /* in no order; 7919 is prime, so each once */
        len += (size_t)snprintf(text + len, cap - len, "%s/%zu: r\n", prefix, (i * 7919) % n);
    struct justify j;
    assert_int_equal(justify_parse(text, len, &j, NULL, NULL), 0);
    assert_int_equal(j.n, n);
    char path[128];
    size_t found = 0;
    for (size_t i = 0; i < MOUNTINFO_MAX_ENTRIES; i++) {
        snprintf(path, sizeof(path), "%s/%zu", prefix, i);
        struct justify_entry *e = justify_find(&j, path);
        if (e != NULL) {
            assert_string_equal(e->path, path);
            found++;
        }
    }
    assert_int_equal(found, n);
    snprintf(path, sizeof(path), "%s/%zu", prefix, (size_t)1234);
    unsigned line = justify_find(&j, path)->line; /* the line that wrote it */
    assert_int_equal((line - 1) * 7919 % n, 1234);
    assert_null(justify_find(&j, prefix));
    assert_null(justify_find(&j, "/"));
    justify_free(&j);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_real_lines),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_parse_longest_paths),
        cmocka_unit_test(test_opt_has),
        cmocka_unit_test(test_covered),
        cmocka_unit_test(test_covered_many),
        cmocka_unit_test(test_covered_many_copies),
        cmocka_unit_test(test_covered_by_a_mount_above),
        cmocka_unit_test(test_covered_by_a_mount_above_many),
        cmocka_unit_test(test_justify),
        cmocka_unit_test(test_justify_errors),
        cmocka_unit_test(test_justify_find_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
