/* fuzz_proxy_auth: agent_identify() on any Proxy-Authorization value,
 * checked against a reference built from OpenSSL's base64 coder.
 *
 * The policy has two token agents on loopback ("tok" with s3cret, "colon"
 * with o:t, whose token holds the separator Basic splits at). The value is
 * accepted (AGENT_OK) exactly when, with spaces and tabs trimmed at both
 * ends, it is a scheme (Basic or Bearer, any case), a run of spaces or tabs
 * and a credential without spaces, controls or DEL; the credential is the
 * token itself (Bearer) or the canonical base64, padding optional (but
 * whole where there is any), of
 * "user:" and the token (Basic: the secret is what follows the first
 * colon); and the token is one of the two. Then the agent is that token's.
 * Anything else is AGENT_AUTH_REQUIRED: a client that presents a header is
 * never treated as presenting none. agent_identify_why() answers the same,
 * its why NULL exactly on AGENT_OK and else the one the value earns: no
 * token (blank, or Bearer or Basic alone, at any length), an empty Basic
 * password, a token of no agent, or unreadable. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "gate/agent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define AUTH_MAX 4096 /* agent.c's bound on the value */

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool scheme_is(const char *s, size_t len, const char *want)
{
    if (len != strlen(want))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
        if (c != want[i])
            return false;
    }
    return true;
}

/* The reference decoder: <in> must be the canonical encoding of what it
 * decodes to, once padded; OpenSSL decodes and encodes. Padding is
 * optional, but padding that is there completes the last quantum ("QQ=="
 * or "QQ", never "QQ="). Returns the decoded length, or -1. <out> holds at
 * least len + 3 bytes. */
static long ref_b64(const char *in, size_t len, unsigned char *out)
{
    char padded[AUTH_MAX + 4];
    unsigned char again[AUTH_MAX + 8];
    size_t pad = 0;
    if (len == 0 || len > AUTH_MAX)
        return -1;
    if (in[len - 1] == '=' && len % 4 != 0)
        return -1;
    memcpy(padded, in, len);
    while (len % 4 != 0)
        padded[len++] = '=';
    for (size_t i = len; i > 0 && padded[i - 1] == '='; i--)
        pad++;
    if (pad > 2)
        return -1;
    int n = EVP_DecodeBlock(out, (const unsigned char *)padded, (int)len);
    if (n < 0 || (size_t)n < pad)
        return -1;
    n -= (int)pad;
    int m = EVP_EncodeBlock(again, out, n);
    if (m != (int)len || memcmp(again, padded, len) != 0)
        return -1;
    return n;
}

/* The secret the reference finds in the value (0: a Basic value with an
 * empty password), or -1; <*no_token> says whether the value holds no
 * token at all: blank, or a Bearer or Basic scheme alone (any length).
 * <buf> holds AUTH_MAX + 8 bytes. */
static long ref_secret(const char *v, size_t len, unsigned char *buf, bool *no_token)
{
    size_t whole = len, i = 0;
    while (i < len && blank(v[i]))
        i++;
    size_t start = i;
    while (i < len && !blank(v[i]))
        i++;
    const char *scheme = v + start;
    size_t scheme_len = i - start;
    while (i < len && blank(v[i]))
        i++;
    while (len > i && blank(v[len - 1]))
        len--;
    const char *cred = v + i;
    size_t n = len - i;
    *no_token = n == 0 && (scheme_len == 0 || scheme_is(scheme, scheme_len, "bearer") ||
                           scheme_is(scheme, scheme_len, "basic"));
    if (n == 0 || whole > AUTH_MAX)
        return -1;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)cred[k];
        if (c < 0x21 || c == 0x7f)
            return -1;
    }
    if (scheme_is(scheme, scheme_len, "bearer")) {
        memcpy(buf, cred, n);
        return (long)n;
    }
    if (!scheme_is(scheme, scheme_len, "basic"))
        return -1;
    long d = ref_b64(cred, n, buf);
    if (d < 0)
        return -1;
    unsigned char *colon = memchr(buf, ':', (size_t)d);
    if (colon == NULL)
        return -1;
    size_t plen = (size_t)d - (size_t)(colon + 1 - buf);
    memmove(buf, colon + 1, plen);
    return (long)plen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cidr lo;
    static struct agent agents[2];
    static const char *const tokens[2] = {"s3cret", "o:t"};
    static struct policy pol;
    static bool ready;
    if (!ready) {
        ipaddr_from_v4(&lo.addr, 0x7f000000u);
        lo.prefix = 96 + 8; /* 127.0.0.0/8, counted on the v4-mapped form */
        agents[0] = (struct agent){.id = "tok", .sources = &lo, .nsources = 1};
        agents[1] = (struct agent){.id = "colon", .sources = &lo, .nsources = 1};
        pol.agents = agents;
        pol.nagents = 2;
        for (size_t i = 0; i < 2; i++) { /* as the loader holds them: digests */
            if (policy_token_digest(&pol, tokens[i], strlen(tokens[i]), agents[i].token_digest) !=
                0)
                abort();
            agents[i].has_token = true;
        }
        ready = true;
    }
    struct client_origin o = {.is_unix = false};
    ipaddr_from_v4(&o.addr, 0x7f000001u);
    if (!agent_sources_contain(&agents[0], &o))
        abort(); /* the harness's own set-up */

    const struct agent *out = NULL;
    enum agent_result r = agent_identify(&pol, &o, (const char *)data, size, &out);

    const struct agent *want = NULL;
    const char *want_why = AGENT_WHY_UNREADABLE;
    unsigned char buf[AUTH_MAX + 8];
    bool no_token = false;
    long n = ref_secret((const char *)data, size, buf, &no_token);
    if (no_token)
        want_why = AGENT_WHY_NO_TOKEN;
    else if (n == 0)
        want_why = AGENT_WHY_EMPTY_PASSWORD;
    else if (n > 0)
        want_why = AGENT_WHY_NO_MATCH;
    for (size_t i = 0; n > 0 && i < 2 && want == NULL; i++)
        if ((size_t)n == strlen(tokens[i]) && memcmp(buf, tokens[i], (size_t)n) == 0)
            want = &agents[i];
    if (want != NULL ? (r != AGENT_OK || out != want) : (r != AGENT_AUTH_REQUIRED || out != NULL))
        abort();

    const char *why = "unset";
    const struct agent *out_why = NULL;
    enum agent_result r_why =
        agent_identify_why(&pol, &o, (const char *)data, size, &out_why, &why);
    if (r_why != r || out_why != out)
        abort();
    if (want != NULL ? why != NULL : (why == NULL || strcmp(why, want_why) != 0))
        abort();
    return 0;
}
