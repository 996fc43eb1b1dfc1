/* test_ipaddr: every IP literal spelling, IPv6 forms, formatting, CIDRs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/ipaddr.h"

static enum ip_literal_kind parse(const char *s, struct ipaddr *a)
{
    return ip_literal_parse(s, strlen(s), a);
}

/* Parses <in>, expects <kind> and, for V4/V6, the canonical text <want>. */
static void expect_ip(const char *in, enum ip_literal_kind kind, const char *want)
{
    struct ipaddr a;
    char buf[IPADDR_STRLEN];
    memset(&a, 0xa5, sizeof(a));
    enum ip_literal_kind got = parse(in, &a);
    if (got != kind)
        fail_msg("%s: kind %d, want %d", in, (int)got, (int)kind);
    if (want != NULL) {
        ipaddr_format(&a, buf, sizeof(buf));
        if (strcmp(buf, want) != 0)
            fail_msg("%s: got %s, want %s", in, buf, want);
    }
}

static void test_v4_spellings(void **state)
{
    (void)state;
    expect_ip("127.0.0.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("127.0.0.1.", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("127.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("127.0.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("1.2.3", IP_LITERAL_V4, "1.2.0.3");
    expect_ip("1.65536", IP_LITERAL_V4, "1.1.0.0");
    expect_ip("10.16777215", IP_LITERAL_V4, "10.255.255.255");
    expect_ip("1.2.65535", IP_LITERAL_V4, "1.2.255.255");
    expect_ip("2130706433", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("4294967295", IP_LITERAL_V4, "255.255.255.255");
    expect_ip("0", IP_LITERAL_V4, "0.0.0.0");
    expect_ip("0177.0.0.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("017700000001", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("00000177.0.0.01", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("0x7f.0.0.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("0X7F.0.0.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("0x7f000001", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("0x7f.1", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("0x7f.0.0x0.01", IP_LITERAL_V4, "127.0.0.1");
    expect_ip("0x.0x.0x.0x", IP_LITERAL_V4, "0.0.0.0");
    expect_ip("0xffffffff", IP_LITERAL_V4, "255.255.255.255");
    expect_ip("169.254.43518", IP_LITERAL_V4, "169.254.169.254");
}

static void test_v4_invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "256.1.1.1",
        "1.2.3.4.5",
        "0x1g",
        "4294967296",
        "1..2.3",
        ".1.2.3",
        "1.2.3.256",
        "1.2.16777216",
        "1.16777216.0",
        "1.2.65536",
        "08",
        "0189.1.1.1",
        "0x100000000",
        "example.123",
        "a.0x",
        "1.2.3.4..x.5",
        "99999999999999999999",
        "18446744073709551617", /* 2^64 + 1: must not wrap to 1 */
        "0x10000000000000001",
        "1.0x100000000000000ff.1",
        "1.2.3.4.0",
        "0x1.0x1g",
        "1.08",
        "-1.1",
        "0x-1",
        "1 .2",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_ip(bad[i], IP_LITERAL_INVALID, NULL);
    /* Too long to be an address, though it ends in a number. */
    expect_ip("0000000000000000000000000000000000000000000000000000000000000000001",
              IP_LITERAL_INVALID, NULL);
}

static void test_not_literal(void **state)
{
    (void)state;
    struct ipaddr a;
    static const char *const names[] = {
        "example.com", "localhost", "a.1a", "1.2.3.4a", "1e3", "0xa.b.com", "127.0.0.1..",
        ".",           "-1",        "+1",   "1.-2",     "x",   "1.2.3.x",   "127.0.0.1%eth0",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        expect_ip(names[i], IP_LITERAL_NONE, NULL);
    assert_int_equal(ip_literal_parse("", 0, &a), IP_LITERAL_NONE);
    assert_int_equal(ip_literal_parse(NULL, 3, &a), IP_LITERAL_NONE);
}

static void test_v6_forms(void **state)
{
    (void)state;
    expect_ip("::", IP_LITERAL_V6, "::");
    expect_ip("::1", IP_LITERAL_V6, "::1");
    expect_ip("[::1]", IP_LITERAL_V6, "::1");
    expect_ip("1::", IP_LITERAL_V6, "1::");
    expect_ip("2001:db8:0:0:0:0:2:1", IP_LITERAL_V6, "2001:db8::2:1");
    expect_ip("2001:DB8::0001", IP_LITERAL_V6, "2001:db8::1");
    expect_ip("2001:db8:0:1:1:1:1:1", IP_LITERAL_V6, "2001:db8:0:1:1:1:1:1");
    expect_ip("2001:0:0:1:0:0:0:1", IP_LITERAL_V6, "2001:0:0:1::1");
    expect_ip("2001:db8::1:0:0:1", IP_LITERAL_V6, "2001:db8::1:0:0:1");
    expect_ip("1:2:3:4:5:6:7::", IP_LITERAL_V6, "1:2:3:4:5:6:7:0");
    expect_ip("::2:3:4:5:6:7:8", IP_LITERAL_V6, "0:2:3:4:5:6:7:8");
    expect_ip("fe80::1", IP_LITERAL_V6, "fe80::1");
    expect_ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", IP_LITERAL_V6,
              "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    expect_ip("::ffff:127.0.0.1", IP_LITERAL_V6, "127.0.0.1");
    expect_ip("[::ffff:7f00:1]", IP_LITERAL_V6, "127.0.0.1");
    expect_ip("::FFFF:7F00:0001", IP_LITERAL_V6, "127.0.0.1");
    expect_ip("0:0:0:0:0:ffff:127.0.0.1", IP_LITERAL_V6, "127.0.0.1");
    expect_ip("64:ff9b::1.2.3.4", IP_LITERAL_V6, "64:ff9b::102:304");
    expect_ip("::1.2.3.4", IP_LITERAL_V6, "::102:304");
    expect_ip("1:2:3:4:5:6:1.2.3.4", IP_LITERAL_V6, "1:2:3:4:5:6:102:304");
    expect_ip("[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]", IP_LITERAL_V6,
              "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");

    struct ipaddr a;
    assert_int_equal(parse("::ffff:127.0.0.1", &a), IP_LITERAL_V6);
    assert_true(ipaddr_is_v4(&a));
    assert_int_equal(ipaddr_v4(&a), 0x7f000001);
    assert_int_equal(parse("::1", &a), IP_LITERAL_V6);
    assert_false(ipaddr_is_v4(&a));
}

static void test_v6_invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        ":",
        ":::",
        "1:",
        ":1",
        "1:2",
        "::1:",
        "1::2::3",
        "1:2:3:4:5:6:7:8:9",
        "1:2:3:4:5:6:7:8::",
        "::1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7",
        "12345::",
        "::g",
        "fe80::1%eth0",
        "[fe80::1%25eth0]",
        "[::1",
        "::1]",
        "[]",
        "[",
        "]",
        "[127.0.0.1]",
        "[example.com]",
        "::1.2.3",
        "::1.2.3.4.5",
        "::01.2.3.4",
        "::256.1.1.1",
        "::0x7f.0.0.1",
        "::1.2.3.4:5",
        "1:2:3:4:5:6:7:1.2.3.4",
        "::a.2.3.4",
        "::1234.5.6.7",
        ":: 1",
        "example.com:443",
        "127.0.0.1:80",
        "0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0001",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_ip(bad[i], IP_LITERAL_INVALID, NULL);
}

static void test_not_terminated(void **state)
{
    (void)state;
    struct ipaddr a;
    char buf[IPADDR_STRLEN];
    /* Only the first <len> bytes count. */
    assert_int_equal(ip_literal_parse("127.0.0.1999", 9, &a), IP_LITERAL_V4);
    assert_string_equal(ipaddr_format(&a, buf, sizeof(buf)), "127.0.0.1");
    assert_int_equal(ip_literal_parse("::1]garbage", 3, &a), IP_LITERAL_V6);
    assert_int_equal(ip_literal_parse("1.2.3.4.com", 7, &a), IP_LITERAL_V4);
    assert_int_equal(ip_literal_parse("[::1]", 4, &a), IP_LITERAL_INVALID);
}

static void test_from_v4_and_equal(void **state)
{
    (void)state;
    struct ipaddr a, b;
    ipaddr_from_v4(&a, 0x0a000001);
    assert_true(ipaddr_is_v4(&a));
    assert_int_equal(ipaddr_v4(&a), 0x0a000001);
    assert_int_equal(parse("10.1", &b), IP_LITERAL_V4);
    assert_true(ipaddr_equal(&a, &b));
    assert_int_equal(parse("::ffff:a00:1", &b), IP_LITERAL_V6);
    assert_true(ipaddr_equal(&a, &b));
    assert_int_equal(parse("::a00:1", &b), IP_LITERAL_V6);
    assert_false(ipaddr_equal(&a, &b));
}

static void test_format_truncates(void **state)
{
    (void)state;
    struct ipaddr a;
    char small[5];
    assert_int_equal(parse("192.168.100.200", &a), IP_LITERAL_V4);
    assert_ptr_equal(ipaddr_format(&a, small, sizeof(small)), small);
    assert_string_equal(small, "192.");
    assert_int_equal(parse("2001:db8::1", &a), IP_LITERAL_V6);
    ipaddr_format(&a, small, sizeof(small));
    assert_string_equal(small, "2001");
    assert_null(ipaddr_format(&a, NULL, 0));
}

static void expect_cidr(const char *in, int rc, const char *want)
{
    struct cidr c;
    char buf[IPADDR_STRLEN + 5];
    int got = cidr_parse(in, &c);
    if (got != rc)
        fail_msg("%s: rc %d, want %d", in, got, rc);
    if (rc == 0) {
        cidr_format(&c, buf, sizeof(buf));
        if (strcmp(buf, want) != 0)
            fail_msg("%s: got %s, want %s", in, buf, want);
    }
}

static void test_cidr_parse(void **state)
{
    (void)state;
    struct cidr c;
    expect_cidr("10.0.0.0/8", 0, "10.0.0.0/8");
    expect_cidr("192.168.10.0/24", 0, "192.168.10.0/24");
    expect_cidr("127.0.0.1", 0, "127.0.0.1/32");
    expect_cidr("127.0.0.1/32", 0, "127.0.0.1/32");
    expect_cidr("0.0.0.0/0", 0, "0.0.0.0/0");
    expect_cidr("fd00::/8", 0, "fd00::/8");
    expect_cidr("::1", 0, "::1/128");
    expect_cidr("::/0", 0, "::/0");
    expect_cidr("2001:DB8::/32", 0, "2001:db8::/32");
    expect_cidr("::ffff:10.0.0.0/104", 0, "10.0.0.0/8");
    assert_int_equal(cidr_parse("10.0.0.0/8", &c), 0);
    assert_int_equal(c.prefix, 104);
    assert_int_equal(cidr_parse("::1", &c), 0);
    assert_int_equal(c.prefix, 128);

    expect_cidr("10.0.0.1/8", -2, NULL);
    expect_cidr("192.168.10.1/24", -2, NULL);
    expect_cidr("fd00::1/8", -2, NULL);
    expect_cidr("1.0.0.0/0", -2, NULL);

    static const char *const bad[] = {
        "",
        "/8",
        "10.0.0.0/",
        "10.0.0.0/33",
        "10.0.0.0/08",
        "10.0.0.0/-1",
        "10.0.0.0/+8",
        "10.0.0.0/8 ",
        " 10.0.0.0/8",
        "10.0.0.0/8/8",
        "10.0.0.0/1000",
        "10.1/16",
        "10.0.0/24",
        "167772160/8",
        "0x0a.0.0.0/8",
        "010.0.0.0/8",
        "256.0.0.0/8",
        "10.0.0.0.0/8",
        "::/129",
        "fe80::1%eth0/64",
        "[::1]/128",
        "::1/x",
        "example.com/24",
        "fd00::/8a",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_cidr(bad[i], -1, NULL);
    assert_int_equal(cidr_parse(NULL, &c), -1);
}

static void test_cidr_contains(void **state)
{
    (void)state;
    struct cidr c;
    struct ipaddr a;
    assert_int_equal(cidr_parse("127.0.0.0/8", &c), 0);
    assert_int_equal(parse("127.255.0.1", &a), IP_LITERAL_V4);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(parse("0x7f000001", &a), IP_LITERAL_V4);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(parse("::ffff:127.0.0.1", &a), IP_LITERAL_V6);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(parse("128.0.0.1", &a), IP_LITERAL_V4);
    assert_false(cidr_contains(&c, &a));
    assert_int_equal(parse("::1", &a), IP_LITERAL_V6);
    assert_false(cidr_contains(&c, &a));

    assert_int_equal(cidr_parse("192.168.10.0/23", &c), 0);
    assert_int_equal(parse("192.168.11.255", &a), IP_LITERAL_V4);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(parse("192.168.12.0", &a), IP_LITERAL_V4);
    assert_false(cidr_contains(&c, &a));

    assert_int_equal(cidr_parse("0.0.0.0/0", &c), 0);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(parse("::1", &a), IP_LITERAL_V6);
    assert_false(cidr_contains(&c, &a));

    assert_int_equal(cidr_parse("::/0", &c), 0);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(cidr_parse("::1", &c), 0);
    assert_true(cidr_contains(&c, &a));
    assert_int_equal(parse("::2", &a), IP_LITERAL_V6);
    assert_false(cidr_contains(&c, &a));

    c.prefix = 129; /* a broken structure never matches */
    assert_false(cidr_contains(&c, &a));
}

/* The one loopback test the admin server, the listeners' self_request
 * and the webhook warning share. */
static void test_is_loopback(void **state)
{
    (void)state;
    static const char *const yes[] = {
        "127.0.0.1", "127.255.255.254", "0x7f000001", "::ffff:127.0.0.1", "::1", "[::1]"};
    static const char *const no[] = {"128.0.0.1", "126.255.255.255", "0.0.0.0", "::",
                                     "::2",       "::127.0.0.1",     "fe80::1", "10.0.0.1"};
    struct ipaddr a;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        assert_int_not_equal(parse(yes[i], &a), IP_LITERAL_NONE);
        assert_true(ipaddr_is_loopback(&a));
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        assert_int_not_equal(parse(no[i], &a), IP_LITERAL_NONE);
        assert_false(ipaddr_is_loopback(&a));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v4_spellings),      cmocka_unit_test(test_v4_invalid),
        cmocka_unit_test(test_not_literal),       cmocka_unit_test(test_v6_forms),
        cmocka_unit_test(test_v6_invalid),        cmocka_unit_test(test_not_terminated),
        cmocka_unit_test(test_from_v4_and_equal), cmocka_unit_test(test_format_truncates),
        cmocka_unit_test(test_cidr_parse),        cmocka_unit_test(test_cidr_contains),
        cmocka_unit_test(test_is_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
