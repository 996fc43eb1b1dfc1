/* test_host_plain: host_normalise()'s plain path (a name of letters,
 * digits, '-', '_' and dots, the names agents send, in two passes) against
 * the general path it short-cuts (host_normalise_general(), the steps every
 * input took before), over plain names built to meet every verdict (labels
 * around 63 bytes, names around 253, hyphens, dots, A-labels, numbers, IP
 * literals) and random ones with now and then another byte: the same
 * return, reason, kind, name and address for every input. A first version
 * held it to a verbatim copy of host_normalise() as it was before the
 * plain path (policy/host.c at 2a11886): the same, for these inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/host.h"

/* The general path and host_normalise() on <len> bytes of <s>: the same
 * verdict, or a failure that names the input. */
static void same(const char *s, size_t len)
{
    struct host a, b;
    const char *wa = NULL, *wb = NULL;
    memset(&a, 0x5a, sizeof(a));
    memset(&b, 0x5a, sizeof(b));
    int ra = host_normalise_general(s, len, &a, &wa);
    int rb = host_normalise(s, len, &b, &wb);
    if (ra != rb || (ra != 0 && strcmp(wa, wb) != 0) ||
        (ra == 0 && (a.kind != b.kind || strcmp(a.name, b.name) != 0 ||
                     memcmp(&a.ip, &b.ip, sizeof(a.ip)) != 0)))
        fail_msg("\"%.*s\" (%zu bytes): general %d %s \"%s\", now %d %s \"%s\"", (int)len, s, len,
                 ra, ra != 0 ? wa : "", ra == 0 ? a.name : "", rb, rb != 0 ? wb : "",
                 rb == 0 ? b.name : "");
}

/* A 64-bit LCG's high half: the same names on every run. */
static uint64_t lcg = 20261207;

static uint64_t next(void)
{
    lcg = lcg * 6364136223846793005u + 1442695040888963407u;
    return lcg >> 24;
}

/* Names for each verdict, separated by spaces (none of them has one). */
static void test_examples(void **state)
{
    (void)state;
    const char *in =
        "api.github.com API.GitHub.COM api.github.com. api.github.com.. . .. a..b .a a. "
        "-a.com a-.com a.-b a.b- _a._b a_b.c-d xn--e1afmkfd.xn--p1ai XN--E1AFMKFD.com Xn--bad "
        "xn-- a.xn-- xn-a.com axn--b.com 127.0.0.1 127.1 0x7f.1 1.2.3.4.5 1.2.3.256 a.1 a.0x10 "
        "1a.b a.1b 999999999999 0 08 a.08 localhost LOCALHOST. a A - _ 1-2.3";
    while (*in != '\0') {
        size_t n = strcspn(in, " ");
        same(in, n);
        in += n + (in[n] == ' ');
    }
}

/* Labels and names at and around the limits (63 and 253 bytes), in every
 * position, with a hyphen or an empty label before and after. */
static void test_limits(void **state)
{
    (void)state;
    char buf[1100];
    for (size_t a = 0; a <= 66; a++) {
        for (size_t b = 0; b <= 66; b += 1 + (b > 4 && b < 60) * 7) {
            for (int form = 0; form < 4; form++) {
                size_t n = 0;
                memset(buf + n, form == 1 ? 'X' : 'a', a);
                n += a;
                buf[n++] = '.';
                memset(buf + n, 'b', b);
                n += b;
                if (form == 2)
                    buf[n++] = '-';
                if (form == 3)
                    buf[n++] = '.';
                same(buf, n);
            }
        }
    }
    for (size_t total = 240; total <= 270; total++) {
        size_t n = 0;
        while (n < total) {
            size_t l = total - n < 50 ? total - n : 50;
            memset(buf + n, 'c', l);
            n += l;
            if (n < total)
                buf[n++] = '.';
        }
        same(buf, n);
        buf[n] = '.';
        same(buf, n + 1);
    }
    memset(buf, 'd', 1024);
    same(buf, 1024);
    same(buf, 1025);
}

/* Random names from a plain name's bytes (and now and then another byte),
 * short labels and dots weighted so that every verdict comes up. */
static void test_random(void **state)
{
    (void)state;
    static const char plain[] = "abcxnXN019-_.";
    static const char other[] = "\x00\x1f :[]%/\x7f\x80\xc3\xa9\xff";
    char buf[400];
    for (int round = 0; round < 300000; round++) {
        size_t len = (size_t)(next() % (round % 10 == 0 ? 300 : 24));
        for (size_t i = 0; i < len; i++) {
            uint64_t r = next();
            if (r % 97 == 0)
                buf[i] = other[(r >> 8) % (sizeof(other) - 1)];
            else if (r % 11 == 0)
                buf[i] = '.';
            else if (r % 13 == 0 && i + 4 <= len) {
                memcpy(buf + i, (r >> 8) & 1 ? "xn--" : "XN--", 4);
                i += 3;
            } else
                buf[i] = plain[(r >> 8) % (sizeof(plain) - 1)];
        }
        same(buf, len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
