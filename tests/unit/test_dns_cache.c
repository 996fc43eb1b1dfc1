/* test_dns_cache: the resolver's answer cache, on its own, with time
 * passed in: expiry to the millisecond, least-recently-used eviction,
 * replacement, the address bound, and what it refuses to keep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gate/dns_cache.h"

static struct ipaddr v4(uint8_t last)
{
    struct ipaddr a;
    memset(&a, 0, sizeof(a));
    a.b[10] = a.b[11] = 0xff;
    a.b[12] = 192;
    a.b[14] = 2;
    a.b[15] = last;
    return a;
}

static void test_expiry(void **state)
{
    (void)state;
    struct dns_cache c;
    dns_cache_init(&c, 8);
    struct ipaddr a = v4(1);
    dns_cache_put(&c, "a.test", &a, 1, 1000, 500);
    const struct dns_cache_entry *e = dns_cache_find(&c, "a.test", 1499);
    assert_non_null(e);
    assert_int_equal(e->n, 1);
    assert_memory_equal(e->a[0].b, a.b, 16);
    assert_null(dns_cache_find(&c, "a.test", 1500)); /* expired: dropped */
    assert_int_equal(c.n, 0);
    /* a negative answer (no address) */
    dns_cache_put(&c, "nx.test", NULL, 0, 0, 100);
    e = dns_cache_find(&c, "nx.test", 50);
    assert_non_null(e);
    assert_int_equal(e->n, 0);
    assert_null(dns_cache_find(&c, "other.test", 50));
    dns_cache_clear(&c);
    assert_int_equal(c.n, 0);
    assert_null(c.lru_head);
}

static void test_eviction_order(void **state)
{
    (void)state;
    struct dns_cache c;
    dns_cache_init(&c, 3);
    struct ipaddr a = v4(1);
    dns_cache_put(&c, "1.test", &a, 1, 0, 1000);
    dns_cache_put(&c, "2.test", &a, 1, 0, 1000);
    dns_cache_put(&c, "3.test", &a, 1, 0, 1000);
    assert_non_null(dns_cache_find(&c, "1.test", 1)); /* now the most recent */
    dns_cache_put(&c, "4.test", &a, 1, 0, 1000);      /* evicts 2, the least recent */
    assert_int_equal(c.n, 3);
    assert_null(dns_cache_find(&c, "2.test", 1));
    assert_non_null(dns_cache_find(&c, "1.test", 1));
    assert_non_null(dns_cache_find(&c, "3.test", 1));
    assert_non_null(dns_cache_find(&c, "4.test", 1));
    assert_string_equal(c.lru_head->name, "4.test");
    assert_string_equal(c.lru_tail->name, "1.test");
    dns_cache_clear(&c);
}

static void test_replace_and_bounds(void **state)
{
    (void)state;
    struct dns_cache c;
    dns_cache_init(&c, 4);
    struct ipaddr many[RESOLVE_MAX_ADDRS + 5];
    for (size_t i = 0; i < RESOLVE_MAX_ADDRS + 5; i++)
        many[i] = v4((uint8_t)i);
    dns_cache_put(&c, "r.test", many, RESOLVE_MAX_ADDRS + 5, 0, 100);
    const struct dns_cache_entry *e = dns_cache_find(&c, "r.test", 1);
    assert_int_equal(e->n, RESOLVE_MAX_ADDRS); /* the rest are not kept */
    /* replaced, not added: new addresses, new expiry */
    struct ipaddr b = v4(200);
    dns_cache_put(&c, "r.test", &b, 1, 50, 1000);
    assert_int_equal(c.n, 1);
    e = dns_cache_find(&c, "r.test", 500);
    assert_non_null(e);
    assert_int_equal(e->n, 1);
    assert_memory_equal(e->a[0].b, b.b, 16);
    /* the entry stored is returned, its err 0 until the caller sets one,
     * and set to 0 again when it is replaced */
    struct dns_cache_entry *ne = dns_cache_put(&c, "neg.test", NULL, 0, 0, 100);
    assert_non_null(ne);
    assert_int_equal(ne->err, 0);
    ne->err = RESOLVE_ERR_NODATA;
    assert_int_equal(dns_cache_find(&c, "neg.test", 1)->err, RESOLVE_ERR_NODATA);
    assert_ptr_equal(dns_cache_put(&c, "neg.test", NULL, 0, 1, 100), ne);
    assert_int_equal(ne->err, 0);
    assert_null(dns_cache_put(&c, "zero.test", &b, 1, 0, 0));
    /* not kept: a zero TTL, a name over HOST_MAX, a cache of size 0 */
    dns_cache_put(&c, "zero.test", &b, 1, 0, 0);
    assert_null(dns_cache_find(&c, "zero.test", 0));
    char long_name[HOST_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    dns_cache_put(&c, long_name, &b, 1, 0, 100);
    assert_int_equal(c.n, 2);
    dns_cache_clear(&c);
    dns_cache_init(&c, 0);
    dns_cache_put(&c, "none.test", &b, 1, 0, 100);
    assert_int_equal(c.n, 0);
}

/* Many names in few buckets: chains are walked and unlinked right. */
/* FNV-1a of <s>, the cache's unkeyed hash before: names an agent could
 * compute ahead to fill one bucket. */
static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

/* 64 names that all fell in bucket 0 under the unkeyed hash: under the
 * process's random key they spread (64 over 1024 buckets: a chain of 8 has
 * a chance under 1e-9). Before, they made one chain of 64, walked with a
 * string compare each on every lookup of any of them. */
static void test_chosen_names_spread(void **state)
{
    (void)state;
    struct dns_cache c;
    dns_cache_init(&c, 4096);
    struct ipaddr a = v4(1);
    size_t found = 0;
    for (unsigned i = 0; found < 64 && i < 10000000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "n%u.wild.test", i);
        if ((fnv1a(name) & (DNS_CACHE_BUCKETS - 1)) != 0)
            continue;
        dns_cache_put(&c, name, &a, 1, 0, 1000);
        found++;
    }
    assert_int_equal(found, 64);
    size_t longest = 0;
    for (size_t b = 0; b < DNS_CACHE_BUCKETS; b++) {
        size_t len = 0;
        for (const struct dns_cache_entry *e = c.buckets[b]; e != NULL; e = e->hnext)
            len++;
        if (len > longest)
            longest = len;
    }
    assert_true(longest < 8);
    dns_cache_clear(&c);
}

static void test_many_names(void **state)
{
    (void)state;
    struct dns_cache c;
    dns_cache_init(&c, 5000);
    struct ipaddr a = v4(1);
    char name[32];
    for (int i = 0; i < 4000; i++) {
        snprintf(name, sizeof(name), "n%d.test", i);
        dns_cache_put(&c, name, &a, 1, 0, (uint64_t)(i % 2 ? 10 : 1000));
    }
    assert_int_equal(c.n, 4000);
    for (int i = 0; i < 4000; i++) {
        snprintf(name, sizeof(name), "n%d.test", i);
        const struct dns_cache_entry *e = dns_cache_find(&c, name, 100);
        if (i % 2)
            assert_null(e); /* expired at 10 */
        else
            assert_non_null(e);
    }
    assert_int_equal(c.n, 2000);
    dns_cache_clear(&c);
    assert_int_equal(c.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_replace_and_bounds),
        cmocka_unit_test(test_many_names),
        cmocka_unit_test(test_chosen_names_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
