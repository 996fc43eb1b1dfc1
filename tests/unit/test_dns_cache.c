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
    /* not kept: a zero TTL, a name over HOST_MAX, a cache of size 0 */
    dns_cache_put(&c, "zero.test", &b, 1, 0, 0);
    assert_null(dns_cache_find(&c, "zero.test", 0));
    char long_name[HOST_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    dns_cache_put(&c, long_name, &b, 1, 0, 100);
    assert_int_equal(c.n, 1);
    dns_cache_clear(&c);
    dns_cache_init(&c, 0);
    dns_cache_put(&c, "none.test", &b, 1, 0, 100);
    assert_int_equal(c.n, 0);
}

/* Many names in few buckets: chains are walked and unlinked right. */
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
