/* agent: who is asking (see agent.h and SPEC.md "Agents"). */
#include "gate/agent.h"

#include <string.h>

#include <openssl/crypto.h>

#include "policy/policy.h"

/* Longest Proxy-Authorization value looked at; longer ones are refused. */
#define AUTH_MAX 4096

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

static bool scheme_is(const char *s, size_t len, const char *scheme)
{
    size_t n = strlen(scheme);
    if (len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != scheme[i])
            return false;
    }
    return true;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict base64 (RFC 4648, with padding optional but never in the middle)
 * of <in> into <out> (at least len*3/4 bytes). Returns the decoded length,
 * or -1 for anything malformed. */
static long b64_decode(const char *in, size_t len, unsigned char *out)
{
    size_t pad = 0, o = 0;
    uint32_t acc = 0;
    unsigned bits = 0;

    while (pad < 2 && len > 0 && in[len - 1] == '=') {
        len--;
        pad++;
    }
    if (len % 4 == 1 || (pad > 0 && (len + pad) % 4 != 0))
        return -1;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) /* non-zero leftover bits: not a canonical encoding */
        return -1;
    return (long)o;
}

/* Splits the Proxy-Authorization value <v> (<len> bytes) into its scheme
 * (the first word) and its credentials (the rest), without the blanks
 * around either; both point into <v> and may be empty. */
static void split_value(const char *v, size_t len, const char **scheme, size_t *scheme_len,
                        const char **cred, size_t *cred_len)
{
    size_t i = 0;
    while (i < len && is_space(v[i]))
        i++;
    size_t start = i;
    while (i < len && !is_space(v[i]))
        i++;
    *scheme = v + start;
    *scheme_len = i - start;
    while (i < len && is_space(v[i]))
        i++;
    while (len > i && is_space(v[len - 1]))
        len--;
    *cred = v + i;
    *cred_len = len - i;
}

/* The secret of a Proxy-Authorization value <v> (<len> bytes) into <buf>
 * (<cap> bytes), as agent_secret() has it but for the wipe on refusal.
 * Returns its length, or -1. */
static long read_secret(const char *v, size_t len, unsigned char *buf, size_t cap)
{
    const char *scheme, *cred;
    size_t scheme_len, cred_len;
    split_value(v, len, &scheme, &scheme_len, &cred, &cred_len);

    if (cred_len == 0)
        return -1;
    for (size_t k = 0; k < cred_len; k++)
        if (is_space(cred[k]) || (unsigned char)cred[k] < 0x21 || cred[k] == 0x7f)
            return -1;
    if (scheme_is(scheme, scheme_len, "bearer")) {
        if (cred_len > cap)
            return -1;
        memcpy(buf, cred, cred_len);
        return (long)cred_len;
    }
    if (scheme_is(scheme, scheme_len, "basic")) {
        if (cred_len / 4 * 3 + 3 > cap)
            return -1;
        long n = b64_decode(cred, cred_len, buf);
        if (n < 0)
            return -1;
        unsigned char *colon = memchr(buf, ':', (size_t)n);
        if (colon == NULL)
            return -1;
        size_t plen = (size_t)n - (size_t)(colon + 1 - buf);
        memmove(buf, colon + 1, plen);
        OPENSSL_cleanse(buf + plen, (size_t)n - plen); /* the user name, the password's tail */
        return (long)plen;
    }
    return -1;
}

/* Whether the Proxy-Authorization value <v> (<len> bytes) holds no token
 * at all: blank, or a Bearer or Basic scheme alone (`Bearer $TOKEN` with
 * TOKEN empty). A lone word of another kind may be a token sent without
 * its scheme, and is no such value. */
static bool holds_no_token(const char *v, size_t len)
{
    const char *scheme, *cred;
    size_t scheme_len, cred_len;
    split_value(v, len, &scheme, &scheme_len, &cred, &cred_len);
    return cred_len == 0 && (scheme_len == 0 || scheme_is(scheme, scheme_len, "bearer") ||
                             scheme_is(scheme, scheme_len, "basic"));
}

bool agent_why_is_wrong_credentials(const char *why)
{
    return why != NULL &&
           (strcmp(why, AGENT_WHY_NO_MATCH) == 0 || strcmp(why, AGENT_WHY_EMPTY_PASSWORD) == 0 ||
            strcmp(why, AGENT_WHY_UNREADABLE) == 0);
}

/* As agent_secret(), but 0 for a Basic value with an empty password. */
static long secret_or_empty(const char *v, size_t len, unsigned char *buf, size_t cap)
{
    long n = read_secret(v, len, buf, cap);
    if (n > 0)
        return n;
    /* A malformed header's decoding stopped anywhere (a bad byte, no
     * colon, an empty password): what it left may be a real secret sent
     * wrongly. cap bytes: the decoder's extent is not known here. */
    OPENSSL_cleanse(buf, cap);
    return n;
}

long agent_secret(const char *v, size_t len, unsigned char *buf, size_t cap)
{
    long n = secret_or_empty(v, len, buf, cap);
    return n > 0 ? n : -1;
}

bool agent_sources_contain(const struct agent *a, const struct client_origin *o)
{
    if (o->is_unix)
        return a->unix_source;
    for (size_t i = 0; i < a->nsources; i++)
        if (cidr_contains(&a->sources[i], &o->addr))
            return true;
    return false;
}

bool agent_token_possible(const struct policy *p, const struct client_origin *o)
{
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].has_token && agent_sources_contain(&p->agents[i], o))
            return true;
    return false;
}

/* The first agent whose sources contain <o> and whose token's digest is
 * <have> (the presented secret's, under <p>'s key): AGENT_OK (*out set),
 * or AGENT_AUTH_REQUIRED. The agents' digests were computed at load: no
 * hashing here, however many agents share the source. */
static enum agent_result agent_with_digest(const struct policy *p, const struct client_origin *o,
                                           const unsigned char *have, const struct agent **out)
{
    for (size_t i = 0; i < p->nagents; i++) {
        const struct agent *a = &p->agents[i];
        if (!a->has_token || !agent_sources_contain(a, o))
            continue;
        /* Digests of equal length compared in constant time: neither the
         * secret's length nor its content leaks through timing. */
        if (CRYPTO_memcmp(a->token_digest, have, TOKEN_DIGEST_LEN) == 0) {
            *out = a;
            return AGENT_OK;
        }
    }
    return AGENT_AUTH_REQUIRED;
}

/* The agent a new request of a client at <o> would be under <p>, its
 * secret's token_mark() <mark> (NULL: none): the first, in file order,
 * whose sources contain <o> and that wants that secret, or no token. The
 * marks compared are of the same process-wide key: equal secrets, equal
 * marks, as agent_identify() finds them by digest. */
static const struct agent *first_named(const struct policy *p, const unsigned char *mark,
                                       const struct client_origin *o)
{
    for (size_t i = 0; i < p->nagents; i++) {
        const struct agent *a = &p->agents[i];
        if (a->has_token != (mark != NULL) || !agent_sources_contain(a, o))
            continue;
        if (mark == NULL || CRYPTO_memcmp(a->token_mark, mark, TOKEN_MARK_LEN) == 0)
            return a;
    }
    return NULL;
}

enum agent_result agent_find_again(const struct policy *p, const char *id,
                                   const unsigned char *mark, const struct client_origin *o,
                                   const struct agent **out)
{
    *out = NULL;
    if (p->nagents == 0)
        return strcmp(id, AGENT_DEFAULT_ID) == 0 ? AGENT_OK : AGENT_NOT_ALLOWED;
    const struct agent *a = policy_find_agent(p, id);
    if (a == NULL || !agent_sources_contain(a, o))
        return AGENT_NOT_ALLOWED;
    if (a->has_token != (mark != NULL)) /* a token given to a token-less agent, or taken */
        return AGENT_AUTH_REQUIRED;
    if (mark != NULL && CRYPTO_memcmp(a->token_mark, mark, TOKEN_MARK_LEN) != 0)
        return AGENT_AUTH_REQUIRED; /* another token: the one presented was rotated away */
    if (first_named(p, mark, o) != a)
        return AGENT_NOT_ALLOWED; /* an earlier agent takes the client now */
    *out = a;
    return AGENT_OK;
}

enum agent_result agent_identify(const struct policy *p, const struct client_origin *o,
                                 const char *proxy_auth, size_t proxy_auth_len,
                                 const struct agent **out)
{
    return agent_identify_why(p, o, proxy_auth, proxy_auth_len, out, NULL);
}

enum agent_result agent_identify_why(const struct policy *p, const struct client_origin *o,
                                     const char *proxy_auth, size_t proxy_auth_len,
                                     const struct agent **out, const char **why)
{
    unsigned char secret[AUTH_MAX];
    unsigned char have[TOKEN_DIGEST_LEN];
    bool token_wanted = false;
    const char *unused;

    *out = NULL;
    if (why == NULL)
        why = &unused;
    *why = NULL;
    if (p->nagents == 0)
        return AGENT_OK;

    if (proxy_auth != NULL && holds_no_token(proxy_auth, proxy_auth_len)) {
        *why = AGENT_WHY_NO_TOKEN;
        return AGENT_AUTH_REQUIRED;
    }
    if (proxy_auth != NULL) {
        long n = proxy_auth_len > AUTH_MAX
                     ? -1
                     : secret_or_empty(proxy_auth, proxy_auth_len, secret, sizeof(secret));
        if (n <= 0) { /* secret_or_empty() wiped <secret> */
            *why = n == 0 ? AGENT_WHY_EMPTY_PASSWORD : AGENT_WHY_UNREADABLE;
            return AGENT_AUTH_REQUIRED;
        }
        /* One digest per request, under the key the agents' were made with. */
        int rc = policy_token_digest(p, secret, (size_t)n, have);
        OPENSSL_cleanse(secret, (size_t)n);
        enum agent_result r = rc == 0 ? agent_with_digest(p, o, have, out) : AGENT_AUTH_REQUIRED;
        OPENSSL_cleanse(have, sizeof(have));
        if (r != AGENT_OK)
            *why = rc == 0 ? AGENT_WHY_NO_MATCH : AGENT_WHY_NOT_CHECKED;
        return r;
    }

    for (size_t i = 0; i < p->nagents; i++) {
        const struct agent *a = &p->agents[i];
        if (!agent_sources_contain(a, o))
            continue;
        if (!a->has_token) {
            *out = a;
            return AGENT_OK;
        }
        token_wanted = true;
    }
    if (!token_wanted)
        return AGENT_NOT_ALLOWED;
    *why = AGENT_WHY_NONE_SENT;
    return AGENT_AUTH_REQUIRED;
}
