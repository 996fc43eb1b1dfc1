/* Unit tests for gate/agent.c: every branch of SPEC.md's Agents paragraph. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gate/agent.h"

/* Every keyed digest the unit computes, counted (counted_token_digest,
 * below): a request's secret is hashed once, whatever the agents. */
static int counted_token_digest(const struct policy *p, const void *secret, size_t len,
                                unsigned char out[TOKEN_DIGEST_LEN]);
#define policy_token_digest counted_token_digest
#include "gate/agent.c"
#undef policy_token_digest

static unsigned digest_calls;

static int counted_token_digest(const struct policy *p, const void *secret, size_t len,
                                unsigned char out[TOKEN_DIGEST_LEN])
{
    digest_calls++;
    return policy_token_digest(p, secret, len, out);
}

static struct cidr v4cidr(const char *s, unsigned prefix)
{
    struct cidr c;
    memset(&c, 0, sizeof(c));
    c.addr.b[10] = c.addr.b[11] = 0xff;
    assert_int_equal(inet_pton(AF_INET, s, c.addr.b + 12), 1);
    c.prefix = (uint8_t)(96 + prefix);
    return c;
}

static struct client_origin tcp(const char *s)
{
    struct client_origin o;
    memset(&o, 0, sizeof(o));
    o.addr.b[10] = o.addr.b[11] = 0xff;
    assert_int_equal(inet_pton(AF_INET, s, o.addr.b + 12), 1);
    return o;
}

static const struct client_origin unix_client = {.is_unix = true};

/* The fixture, in file order:
 *   0 open     127.0.0.0/8, no token
 *   1 ci       127.0.0.0/8 + unix, token "s3cret"
 *   2 ci2      127.0.0.0/8, token "s3cret" (same secret, later: never chosen)
 *   3 lan      10.0.0.0/8, token "lan-token"
 *   4 lanopen  10.0.0.0/8, no token (after a token agent)
 *   5 sock     unix only, no token
 *   6 remote   192.168.0.0/16, token "remote-token" (no token-less agent there)
 *   7 other    172.16.0.0/12, token "o:t" */
static struct cidr lo, lan, remote, other;
static struct agent agents[8];
static struct policy pol;

/* Gives <a> the secret <token>, as the loader does: its digest under
 * pol's key (all zero here: any key will do), and its mark. */
static void set_token(struct agent *a, const char *token)
{
    assert_int_equal(policy_token_digest(&pol, token, strlen(token), a->token_digest), 0);
    assert_int_equal(token_mark(token, strlen(token), a->token_mark), 0);
    a->has_token = true;
}

static void setup_policy(void)
{
    lo = v4cidr("127.0.0.0", 8);
    lan = v4cidr("10.0.0.0", 8);
    remote = v4cidr("192.168.0.0", 16);
    other = v4cidr("172.16.0.0", 12);
    memset(&pol, 0, sizeof(pol));
    memset(agents, 0, sizeof(agents));
    agents[0] = (struct agent){.id = "open", .sources = &lo, .nsources = 1};
    agents[1] = (struct agent){.id = "ci", .sources = &lo, .nsources = 1, .unix_source = true};
    set_token(&agents[1], "s3cret");
    agents[2] = (struct agent){.id = "ci2", .sources = &lo, .nsources = 1};
    set_token(&agents[2], "s3cret");
    agents[3] = (struct agent){.id = "lan", .sources = &lan, .nsources = 1};
    set_token(&agents[3], "lan-token");
    agents[4] = (struct agent){.id = "lanopen", .sources = &lan, .nsources = 1};
    agents[5] = (struct agent){.id = "sock", .unix_source = true};
    agents[6] = (struct agent){.id = "remote", .sources = &remote, .nsources = 1};
    set_token(&agents[6], "remote-token");
    agents[7] = (struct agent){.id = "other", .sources = &other, .nsources = 1};
    set_token(&agents[7], "o:t");
    pol.agents = agents;
    pol.nagents = 8;
}

/* Runs agent_identify_why (agent_identify with a why) with a
 * NUL-terminated header (or NULL): a why on AGENT_AUTH_REQUIRED alone. */
static enum agent_result ident(const struct client_origin *o, const char *auth,
                               const struct agent **out)
{
    const char *why = "poison";
    enum agent_result r =
        agent_identify_why(&pol, o, auth, auth != NULL ? strlen(auth) : 0, out, &why);
    assert_int_equal(why != NULL, r == AGENT_AUTH_REQUIRED);
    return r;
}

/* The why of a 407 for <auth> at <o>. */
static const char *why_of(const struct client_origin *o, const char *auth)
{
    const struct agent *a = NULL;
    const char *why = NULL;
    assert_int_equal(agent_identify_why(&pol, o, auth, auth != NULL ? strlen(auth) : 0, &a, &why),
                     AGENT_AUTH_REQUIRED);
    return why;
}

/* Each 407 says what was wrong: none sent, no agent's, an empty Basic
 * password (the token as the user name), a value that cannot be read. */
static void test_auth_required_why(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("192.168.1.1"); /* only token agents */
    assert_string_equal(why_of(&o, NULL), AGENT_WHY_NONE_SENT);
    o = tcp("127.0.0.1");
    assert_string_equal(why_of(&o, "Bearer wrong"), AGENT_WHY_NO_MATCH);
    assert_string_equal(why_of(&o, "Bearer lan-token"), AGENT_WHY_NO_MATCH);       /* not here */
    assert_string_equal(why_of(&o, "Basic dXNlcjp3cm9uZw=="), AGENT_WHY_NO_MATCH); /* user:wrong */
    assert_string_equal(why_of(&o, "Basic czNjcmV0Og=="), AGENT_WHY_EMPTY_PASSWORD); /* s3cret: */
    assert_string_equal(why_of(&o, "Basic czNjcmV0"), AGENT_WHY_UNREADABLE);         /* no colon */
    assert_string_equal(why_of(&o, "Digest s3cret"), AGENT_WHY_UNREADABLE);
    assert_string_equal(why_of(&o, "s3cret"), AGENT_WHY_UNREADABLE); /* a token, no scheme */
    /* no token at all: a client not set up (an empty variable), not a guess */
    assert_string_equal(why_of(&o, ""), AGENT_WHY_NO_TOKEN);
    assert_string_equal(why_of(&o, "   "), AGENT_WHY_NO_TOKEN);
    assert_string_equal(why_of(&o, "Bearer "), AGENT_WHY_NO_TOKEN);
    assert_string_equal(why_of(&o, " basic\t"), AGENT_WHY_NO_TOKEN);
    /* what auth_failures counts */
    assert_true(agent_why_is_wrong_credentials(AGENT_WHY_NO_MATCH));
    assert_true(agent_why_is_wrong_credentials(AGENT_WHY_EMPTY_PASSWORD));
    assert_true(agent_why_is_wrong_credentials(AGENT_WHY_UNREADABLE));
    assert_false(agent_why_is_wrong_credentials(AGENT_WHY_NO_TOKEN));
    assert_false(agent_why_is_wrong_credentials(AGENT_WHY_NONE_SENT));
    assert_false(agent_why_is_wrong_credentials(AGENT_WHY_NOT_CHECKED));
    assert_false(agent_why_is_wrong_credentials(NULL));
}

static void expect_agent(const struct client_origin *o, const char *auth, const char *id)
{
    const struct agent *a = (const struct agent *)&pol; /* poison: must be overwritten */
    enum agent_result r = ident(o, auth, &a);
    if (r != AGENT_OK)
        fail_msg("auth %s: result %d, expected agent %s", auth ? auth : "(none)", r, id);
    assert_non_null(a);
    assert_string_equal(a->id, id);
}

static void expect_result(const struct client_origin *o, const char *auth, enum agent_result want)
{
    const struct agent *a = (const struct agent *)&pol;
    enum agent_result r = ident(o, auth, &a);
    if (r != want)
        fail_msg("auth %s: result %d, expected %d", auth ? auth : "(none)", r, want);
    assert_null(a);
}

static void test_no_agents_section(void **state)
{
    (void)state;
    struct policy empty;
    const struct agent *a = agents;
    struct client_origin o = tcp("203.0.113.9");
    memset(&empty, 0, sizeof(empty));
    assert_int_equal(agent_identify(&empty, &o, NULL, 0, &a), AGENT_OK);
    assert_null(a);
    a = agents;
    assert_int_equal(agent_identify(&empty, &unix_client, "Bearer x", 8, &a), AGENT_OK);
    assert_null(a);
    a = agents;
    assert_int_equal(agent_identify(&empty, &o, "garbage", 7, &a), AGENT_OK);
    assert_null(a);
}

static void test_no_secret(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    /* First token-less agent whose sources contain the client. */
    expect_agent(&o, NULL, "open");
    /* ... even when a token agent comes first in file order. */
    o = tcp("10.1.2.3");
    expect_agent(&o, NULL, "lanopen");
    /* unix listener: agents listing "unix". */
    expect_agent(&unix_client, NULL, "sock");
    /* Only token agents match: 407. */
    o = tcp("192.168.1.1");
    expect_result(&o, NULL, AGENT_AUTH_REQUIRED);
    /* No agent's sources contain the client: 403. */
    o = tcp("8.8.8.8");
    expect_result(&o, NULL, AGENT_NOT_ALLOWED);
}

static void test_no_secret_unix_only_token(void **state)
{
    (void)state;
    setup_policy();
    agents[5].unix_source = false; /* now only "ci" (token) lists unix */
    expect_result(&unix_client, NULL, AGENT_AUTH_REQUIRED);
    agents[1].unix_source = false; /* and now nobody */
    expect_result(&unix_client, NULL, AGENT_NOT_ALLOWED);
}

static void test_bearer(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    expect_agent(&o, "Bearer s3cret", "ci");
    expect_agent(&o, "bearer s3cret", "ci");
    expect_agent(&o, "BEARER   s3cret  ", "ci");
    expect_agent(&o, "\tBearer\ts3cret\t", "ci");
    expect_agent(&unix_client, "Bearer s3cret", "ci");
    o = tcp("10.0.0.1");
    expect_agent(&o, "Bearer lan-token", "lan");
    o = tcp("192.168.7.7");
    expect_agent(&o, "Bearer remote-token", "remote");
}

static void test_wrong_secret_never_falls_through(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    /* A token-less agent matches the source, but a secret was presented. */
    expect_result(&o, "Bearer wrong", AGENT_AUTH_REQUIRED);
    expect_result(&o, "Bearer s3cre", AGENT_AUTH_REQUIRED);   /* prefix */
    expect_result(&o, "Bearer s3cret!", AGENT_AUTH_REQUIRED); /* longer */
    expect_result(&o, "Bearer S3CRET", AGENT_AUTH_REQUIRED);  /* case matters */
    /* The right token for an agent whose sources do not contain us. */
    expect_result(&o, "Bearer lan-token", AGENT_AUTH_REQUIRED);
    o = tcp("8.8.8.8");
    expect_result(&o, "Bearer s3cret", AGENT_AUTH_REQUIRED);
    expect_result(&unix_client, "Bearer lan-token", AGENT_AUTH_REQUIRED);
}

static void test_first_in_file_order(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    /* ci and ci2 share a secret: ci comes first. */
    expect_agent(&o, "Bearer s3cret", "ci");
    /* Narrow ci's sources: now ci2 is the first whose sources match. */
    struct cidr narrow = v4cidr("127.0.0.2", 32);
    agents[1].sources = &narrow;
    agents[1].unix_source = false;
    expect_agent(&o, "Bearer s3cret", "ci2");
    o = tcp("127.0.0.2");
    expect_agent(&o, "Bearer s3cret", "ci");
    /* And without a secret, "open" still comes first. */
    expect_agent(&o, NULL, "open");
}

static void test_basic(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    expect_agent(&o, "Basic dXNlcjpzM2NyZXQ=", "ci");                 /* user:s3cret */
    expect_agent(&o, "basic OnMzY3JldA==", "ci");                     /* :s3cret */
    expect_agent(&o, "Basic OnMzY3JldA", "ci");                       /* unpadded */
    expect_agent(&o, "BASIC YW55Ym9keTpzM2NyZXQ=", "ci");             /* anybody:s3cret */
    expect_result(&o, "Basic dXNlcjp3cm9uZw==", AGENT_AUTH_REQUIRED); /* user:wrong */
    expect_result(&o, "Basic czNjcmV0", AGENT_AUTH_REQUIRED);         /* "s3cret", no colon */
    expect_result(&o, "Basic dXNlcjo=", AGENT_AUTH_REQUIRED);         /* "user:", empty */
    o = tcp("172.16.0.1");
    /* The password is everything after the first colon: "u:o:t" -> "o:t". */
    expect_agent(&o, "Basic dTpvOnQ=", "other");
    expect_agent(&o, "Basic dTpvOnQ", "other"); /* unpadded */
    o = tcp("127.0.0.1");
    expect_agent(&o, "Basic dXNlcjpzM2NyZXQ", "ci"); /* unpadded user:s3cret */
}

static void test_malformed_headers(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    static const char *const bad[] = {
        "",
        "   ",
        "Bearer",
        "Bearer ",
        "Bearer s3cret extra",
        "Bearers3cret",
        "Digest s3cret",
        "Token s3cret",
        "s3cret",
        "Basic",
        "Basic !!!!",
        "Basic dXNlcjpzM2NyZXQ==", /* wrong padding count */
        "Basic dXNlcjpz=M2NyZXQ=", /* padding in the middle */
        "Basic dXNlcjpzM2NyZXR=",  /* non-canonical trailing bits */
        "Basic d",                 /* len % 4 == 1 */
        "Basic dXNl cjpzM2NyZXQ=", /* space inside */
        "Bearer s3\001cret",       /* a control byte in the token */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const struct agent *a = agents;
        if (ident(&o, bad[i], &a) != AGENT_AUTH_REQUIRED)
            fail_msg("header \"%s\" should need auth", bad[i]);
        assert_null(a);
    }
}

static void test_not_terminated_and_bounds(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.0.0.1");
    const struct agent *a = NULL;
    /* The length counts; what follows is not part of the value. */
    const char buf[] = "Bearer s3cretGARBAGE";
    assert_int_equal(agent_identify(&pol, &o, buf, 13, &a), AGENT_OK);
    assert_string_equal(a->id, "ci");
    a = NULL;
    assert_int_equal(agent_identify(&pol, &o, buf, 12, &a), AGENT_AUTH_REQUIRED);
    assert_null(a);
    /* An embedded NUL is a control byte: refused. */
    const char nul[] = "Bearer s3c\0ret";
    assert_int_equal(agent_identify(&pol, &o, nul, sizeof(nul) - 1, &a), AGENT_AUTH_REQUIRED);
    /* A huge header is refused, not copied. */
    static char big[70000];
    memcpy(big, "Bearer ", 7);
    memset(big + 7, 'a', sizeof(big) - 7);
    assert_int_equal(agent_identify(&pol, &o, big, sizeof(big), &a), AGENT_AUTH_REQUIRED);
    memcpy(big, "Basic  ", 7);
    assert_int_equal(agent_identify(&pol, &o, big, sizeof(big), &a), AGENT_AUTH_REQUIRED);
    /* Zero-length value (header present but empty). */
    assert_int_equal(agent_identify(&pol, &o, buf, 0, &a), AGENT_AUTH_REQUIRED);
}

/* True when the <n> bytes at <p> are all <b>. */
static bool all_bytes(const unsigned char *p, size_t n, unsigned char b)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != b)
            return false;
    return true;
}

/* agent_secret() leaves the secret alone in its buffer, and of a value it
 * refuses nothing, decoded or not: a malformed header may carry a real
 * token sent wrongly, which must not stay in memory after the refusal. */
static void test_secret_wiped(void **state)
{
    (void)state;
    unsigned char buf[64];
    static const char *const refused[] = {
        "Basic czNjcmV0",         /* "s3cret", no colon: decoded whole */
        "Basic dXNlcjo=",         /* "user:": an empty password */
        "Basic dXNlcjpzM2Ny!XQ=", /* "user:s3c" decoded, then a bad byte */
        "Basic dXNlcjpzM2NyZXR=", /* decoded whole, non-canonical end bits */
        "Bearer s3cret extra",    /* nothing copied: still all wiped */
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        memset(buf, 0xa5, sizeof(buf));
        assert_int_equal(agent_secret(refused[i], strlen(refused[i]), buf, sizeof(buf)), -1);
        if (!all_bytes(buf, sizeof(buf), 0))
            fail_msg("\"%s\" left bytes in the buffer", refused[i]);
    }
    /* Accepted: the password alone; "user:" and the password's old tail
     * (decoded before the move) wiped; past the decoded bytes, untouched. */
    const char *v = "Basic dXNlcjpzM2NyZXQ="; /* user:s3cret, 11 bytes */
    memset(buf, 0xa5, sizeof(buf));
    assert_int_equal(agent_secret(v, strlen(v), buf, sizeof(buf)), 6);
    assert_memory_equal(buf, "s3cret", 6);
    assert_true(all_bytes(buf + 6, 5, 0));
    assert_true(all_bytes(buf + 11, sizeof(buf) - 11, 0xa5));
    /* Too long for the buffer: refused, wiped. */
    v = "Bearer 0123456789";
    memset(buf, 0xa5, sizeof(buf));
    assert_int_equal(agent_secret(v, strlen(v), buf, 8), -1);
    assert_true(all_bytes(buf, 8, 0));
}

static void test_sources_contain(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.9.9.9");
    assert_true(agent_sources_contain(&agents[0], &o));
    assert_false(agent_sources_contain(&agents[3], &o));
    assert_false(agent_sources_contain(&agents[5], &o));
    assert_true(agent_sources_contain(&agents[5], &unix_client));
    assert_false(agent_sources_contain(&agents[0], &unix_client));
    /* A unix client is never matched by CIDRs, even 0.0.0.0/0. */
    struct cidr all = v4cidr("0.0.0.0", 0);
    struct agent any = {.id = "any", .sources = &all, .nsources = 1};
    assert_false(agent_sources_contain(&any, &unix_client));
    assert_true(agent_sources_contain(&any, &o));
}

/* An open tunnel's agent under a reloaded policy: found by id while its
 * sources still hold the client, and for a token agent only if the client
 * presented that agent's secret (its mark, the same in every policy); the
 * implicit "default" only while the policy has no agents section. */
static void test_find_again(void **state)
{
    (void)state;
    setup_policy();
    struct client_origin o = tcp("127.9.9.9"), far = tcp("10.1.2.3");
    unsigned char ci[TOKEN_MARK_LEN], lan_mark[TOKEN_MARK_LEN];
    assert_int_equal(token_mark("s3cret", 6, ci), 0);
    assert_memory_equal(ci, agents[1].token_mark, TOKEN_MARK_LEN); /* same secret, same mark */
    assert_int_equal(token_mark("lan-token", 9, lan_mark), 0);
    assert_memory_not_equal(ci, lan_mark, TOKEN_MARK_LEN);
    const struct agent *a = (const struct agent *)&pol;
    assert_int_equal(agent_find_again(&pol, "ci", ci, &o, &a), AGENT_OK);
    assert_ptr_equal(a, &agents[1]);
    assert_int_equal(agent_find_again(&pol, "ci", ci, &unix_client, &a), AGENT_OK);
    assert_ptr_equal(a, &agents[1]);
    /* a token agent for a client that presented no secret (the agent got
     * its token in the reload): it would be refused so now */
    assert_int_equal(agent_find_again(&pol, "ci", NULL, &o, &a), AGENT_AUTH_REQUIRED);
    assert_null(a);
    /* a client that presented another secret than the agent's token now
     * (the reload rotated it away from a leaked one) */
    a = agents;
    assert_int_equal(agent_find_again(&pol, "ci", lan_mark, &o, &a), AGENT_AUTH_REQUIRED);
    assert_null(a);
    /* a client that presented a secret to an agent that now wants none:
     * a new request with it would be a 407 */
    a = agents;
    assert_int_equal(agent_find_again(&pol, "open", ci, &o, &a), AGENT_AUTH_REQUIRED);
    assert_null(a);
    a = agents;
    assert_int_equal(agent_find_again(&pol, "open", NULL, &o, &a), AGENT_OK);
    assert_ptr_equal(a, &agents[0]);
    /* its sources no longer hold the client */
    assert_int_equal(agent_find_again(&pol, "ci", ci, &far, &a), AGENT_NOT_ALLOWED);
    assert_null(a);
    assert_int_equal(agent_find_again(&pol, "sock", NULL, &o, &a), AGENT_NOT_ALLOWED);
    /* an earlier agent whose sources hold the client and that wants the
     * same secret, or none, takes a new request of it: the client is that
     * agent now, not the one it was */
    a = agents;
    assert_int_equal(agent_find_again(&pol, "ci2", ci, &o, &a), AGENT_NOT_ALLOWED);
    assert_null(a);
    assert_int_equal(agent_find_again(&pol, "lanopen", NULL, &far, &a), AGENT_OK);
    assert_ptr_equal(a, &agents[4]); /* the token agent before it takes no client without one */
    assert_int_equal(agent_find_again(&pol, "sock", NULL, &unix_client, &a), AGENT_OK);
    assert_ptr_equal(a, &agents[5]);
    agents[0].unix_source = true; /* "open" now takes the unix listener's clients too */
    assert_int_equal(agent_find_again(&pol, "sock", NULL, &unix_client, &a), AGENT_NOT_ALLOWED);
    assert_null(a);
    agents[0].unix_source = false;
    /* gone, or the implicit agent of a policy that now has agents */
    a = agents;
    assert_int_equal(agent_find_again(&pol, "gone", NULL, &o, &a), AGENT_NOT_ALLOWED);
    assert_null(a);
    assert_int_equal(agent_find_again(&pol, AGENT_DEFAULT_ID, NULL, &o, &a), AGENT_NOT_ALLOWED);
    /* no agents section: "default" is there, any other agent gone */
    struct policy empty;
    memset(&empty, 0, sizeof(empty));
    a = agents;
    assert_int_equal(agent_find_again(&empty, AGENT_DEFAULT_ID, NULL, &far, &a), AGENT_OK);
    assert_null(a);
    a = agents;
    assert_int_equal(agent_find_again(&empty, "ci", NULL, &o, &a), AGENT_NOT_ALLOWED);
    assert_null(a);
}

/* A request that presents a secret costs one digest, however many agents
 * it may be: the agents' digests are computed once, at load (set_token). */
static void test_one_digest_per_request(void **state)
{
    (void)state;
    enum { N = 32 };
    static struct agent many[N];
    static char ids[N][8], tokens[N][8];
    setup_policy();
    for (size_t i = 0; i < N; i++) {
        snprintf(ids[i], sizeof(ids[i]), "a%02zu", i);
        snprintf(tokens[i], sizeof(tokens[i]), "t-%02zu", i);
        many[i] = (struct agent){.id = ids[i], .sources = &lo, .nsources = 1};
        set_token(&many[i], tokens[i]);
    }
    pol.agents = many;
    pol.nagents = N;
    struct client_origin o = tcp("127.0.0.1");
    digest_calls = 0;
    expect_result(&o, "Bearer wrong", AGENT_AUTH_REQUIRED);
    assert_int_equal(digest_calls, 1);
    digest_calls = 0;
    expect_agent(&o, "Bearer t-31", "a31");
    assert_int_equal(digest_calls, 1);
    digest_calls = 0;
    expect_agent(&o, "Basic dTp0LTAw", "a00"); /* u:t-00 */
    assert_int_equal(digest_calls, 1);
    digest_calls = 0;
    expect_result(&o, NULL, AGENT_AUTH_REQUIRED); /* no secret: no digest */
    assert_int_equal(digest_calls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_agents_section),
        cmocka_unit_test(test_no_secret),
        cmocka_unit_test(test_no_secret_unix_only_token),
        cmocka_unit_test(test_auth_required_why),
        cmocka_unit_test(test_bearer),
        cmocka_unit_test(test_wrong_secret_never_falls_through),
        cmocka_unit_test(test_first_in_file_order),
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_not_terminated_and_bounds),
        cmocka_unit_test(test_sources_contain),
        cmocka_unit_test(test_find_again),
        cmocka_unit_test(test_secret_wiped),
        cmocka_unit_test(test_one_digest_per_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
