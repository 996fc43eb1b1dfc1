/* Unit tests for watch/contact_set.c: new, known and full pairs, growth,
 * and hosts an agent picks to collide. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "watch/contact_set.h"

static void new_then_known(void **state)
{
    (void)state;
    struct contact_set s;
    contact_set_init(&s, 10);
    assert_int_equal(contact_set_add(&s, "ci", "a.test"), 1);
    assert_int_equal(contact_set_add(&s, "ci", "a.test"), 0);
    assert_int_equal(contact_set_add(&s, "ci", "b.test"), 1);
    assert_int_equal(contact_set_add(&s, "other", "a.test"), 1);
    /* the separator keeps "a" + "b\nc" apart from "a\nb" + "c" in use:
     * no agent id or host holds a newline, so only distinct pairs differ */
    assert_int_equal(contact_set_add(&s, "ci.x", "a.test"), 1);
    assert_int_equal(s.n, 4);
    contact_set_free(&s);
}

static void full_refuses_new_pairs_only(void **state)
{
    (void)state;
    struct contact_set s;
    char host[32];
    contact_set_init(&s, 100);
    for (unsigned i = 0; i < 100; i++) {
        snprintf(host, sizeof(host), "h%u.test", i);
        assert_int_equal(contact_set_add(&s, "ci", host), 1);
    }
    assert_int_equal(contact_set_add(&s, "ci", "one-more.test"), -1);
    assert_int_equal(contact_set_add(&s, "ci", "h7.test"), 0);
    assert_int_equal(s.n, 100);
    contact_set_free(&s);
}

/* Pairs of the longest hosts (253 bytes: made-up names an agent is
 * refused, no lookup needed) held 275 MB at a million pairs, the gateway's
 * for an agent's million requests. The names held are bounded at 64 MiB:
 * past it a new pair is refused (and still told, folded: detectors.c), a
 * known one is still known, and short names still fit a million. */
static void long_names_are_bounded_in_bytes(void **state)
{
    char host[254];
    memset(host, 'a', 253);
    host[253] = '\0';
    host[62] = host[125] = host[188] = '.'; /* four labels */
    (void)state;
    struct contact_set s;
    contact_set_init(&s, 1000000);
    size_t n = 0;
    for (;; n++) {
        snprintf(host + 240, 14, "%013zu", n);
        int r = contact_set_add(&s, "ci", host);
        if (r < 0)
            break;
        assert_int_equal(r, 1);
    }
    /* "ci\nHOST" and its NUL: 257 bytes a pair */
    assert_true(n * 257 <= 64u * 1024 * 1024);
    assert_true(n * 257 > 63u * 1024 * 1024);
    snprintf(host + 240, 14, "%013zu", (size_t)7);
    assert_int_equal(contact_set_add(&s, "ci", host), 0);
    contact_set_free(&s);
}

static void growth_keeps_every_pair(void **state)
{
    (void)state;
    struct contact_set s;
    char host[32];
    contact_set_init(&s, 1000000);
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(host, sizeof(host), "g%u.test", i);
        assert_int_equal(contact_set_add(&s, "ci", host), 1);
    }
    assert_true(s.cap >= 2 * s.n);
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(host, sizeof(host), "g%u.test", i);
        assert_int_equal(contact_set_add(&s, "ci", host), 0);
    }
    contact_set_free(&s);
}

/* The hash the set had: FNV-1a, unkeyed, over "agent\nhost". */
static uint64_t fnv1a_pair(const char *agent, const char *host)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = agent; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
    for (const char *p = host; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

/* The longest run of used slots (linear probing: adding a pair whose home
 * is in a run walks all of it, a strcmp per slot). */
static size_t longest_run(const struct contact_set *s)
{
    size_t longest = 0, run = 0;
    for (size_t i = 0; i < 2 * s->cap; i++) { /* twice round: a run may wrap */
        run = s->slot[i % s->cap] != NULL ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    return longest < s->cap ? longest : s->cap;
}

/* 512 made-up hosts whose pairs all had home slot 0 under FNV-1a (its low
 * 12 bits 0: slot 0 of any table up to 4096 slots), as an agent can pick
 * them and send one denied request each: they made one run of 512 slots,
 * walked by every later first contact. Under the set's random key they
 * spread: 512 pairs in 1024 slots make no run of 128 but with a chance
 * under 1e-7. */
static void chosen_hosts_spread(void **state)
{
    (void)state;
    struct contact_set s;
    char host[32];
    size_t found = 0;
    contact_set_init(&s, 1000000);
    for (unsigned i = 0; found < 512 && i < 10000000; i++) {
        snprintf(host, sizeof(host), "n%u.made-up.test", i);
        if ((fnv1a_pair("ci", host) & 4095) != 0)
            continue;
        assert_int_equal(contact_set_add(&s, "ci", host), 1);
        found++;
    }
    assert_int_equal(found, 512);
    assert_int_equal(s.cap, 1024);
    assert_true(longest_run(&s) < 128);
    contact_set_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(new_then_known),
        cmocka_unit_test(full_refuses_new_pairs_only),
        cmocka_unit_test(growth_keeps_every_pair),
        cmocka_unit_test(long_names_are_bounded_in_bytes),
        cmocka_unit_test(chosen_hosts_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
