/* Unit tests for the gateway's count of open connections per agent
 * (gateway_agent_acquire/release: max_connections_per_agent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate/gateway.h"
#include "watch/agent_hash.h"

static void free_agents(struct gateway *gw)
{
    gateway_agents_free(gw);
    free(gw);
}

/* Counts up to the limit, refuses beyond it, and counts again once a
 * connection is released; an agent with none left is forgotten. */
static void test_limit_and_release(void **state)
{
    (void)state;
    struct gateway *gw = calloc(1, sizeof(*gw));
    assert_non_null(gw);
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 2), 0);
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 2), 0);
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 2), -1);
    assert_int_equal(gateway_agent_acquire(gw, "b", agent_hash("b"), 2), 0);
    gateway_agent_release(gw, "a", agent_hash("a"));
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 2), 0);
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 2), -1);
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 0), 0); /* 0: unlimited */
    for (int i = 0; i < 3; i++)
        gateway_agent_release(gw, "a", agent_hash("a"));
    gateway_agent_release(gw, "b", agent_hash("b"));
    gateway_agent_release(gw, "nobody", agent_hash("nobody")); /* never counted: nothing happens */
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 1), 0);
    assert_int_equal(gateway_agent_acquire(gw, "a", agent_hash("a"), 1), -1);
    free_agents(gw);
}

/* With thousands of agents connected, a connection's count is found
 * without comparing it with every agent's: each acquire and release went
 * through the whole list (13 us a connection at 4096 agents, 36 us at
 * 10000); a few comparisons each now. Agents come and go in the meantime. */
static void test_many_agents_found_directly(void **state)
{
    (void)state;
    enum { N = 5000 };
    struct gateway *gw = calloc(1, sizeof(*gw));
    assert_non_null(gw);
    char id[32];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "agent-%d", i);
        assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 2), 0);
    }
    uint64_t probes = gw->agent_probes;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            snprintf(id, sizeof(id), "agent-%d", (i * 7919) % N);
            assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 2), 0);
            assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 2), -1);
            gateway_agent_release(gw, id, agent_hash(id));
            if (round == 1 && i % 2 == 0)
                gateway_agent_release(gw, id, agent_hash(id)); /* half of them leave */
        }
    assert_true(gw->agent_probes - probes <= 4ull * 3 * 2 * N);
    for (int i = 0; i < N; i += 2) { /* those that left start afresh */
        snprintf(id, sizeof(id), "agent-%d", (i * 7919) % N);
        assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 1), 0);
        assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 1), -1);
    }
    for (int i = 1; i < N; i += 2) { /* those that stayed hold theirs */
        snprintf(id, sizeof(id), "agent-%d", (i * 7919) % N);
        assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 1), -1);
    }
    free_agents(gw);
}

/* Agents whose connections all closed are forgotten, a batch at once: the
 * table does not grow with every agent ever seen, and those forgotten
 * count afresh when they come back, the others as they were. */
static void test_agents_gone_are_forgotten(void **state)
{
    (void)state;
    enum { N = 1000 };
    struct gateway *gw = calloc(1, sizeof(*gw));
    assert_non_null(gw);
    char id[32];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "agent-%d", i);
        assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 1), 0);
    }
    for (int i = 0; i < N - 10; i++) {
        snprintf(id, sizeof(id), "agent-%d", i);
        gateway_agent_release(gw, id, agent_hash(id));
        assert_true(gw->nagents <= 2 * (size_t)(N - i) + 64 + 1);
    }
    assert_true(gw->nagents < 100);
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "agent-%d", i);
        assert_int_equal(gateway_agent_acquire(gw, id, agent_hash(id), 1), i < N - 10 ? 0 : -1);
    }
    assert_int_equal(gw->nagents, N);
    free_agents(gw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_and_release),
        cmocka_unit_test(test_many_agents_found_directly),
        cmocka_unit_test(test_agents_gone_are_forgotten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
