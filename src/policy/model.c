/* model: the small helpers that go with the policy types. */
#include "policy/model.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "policy/index.h"
#include "policy/policy.h"

static const struct {
    const char *name;
    unsigned bit;
} method_names[] = {
    {"GET", METHOD_GET},         {"HEAD", METHOD_HEAD},   {"POST", METHOD_POST},
    {"PUT", METHOD_PUT},         {"PATCH", METHOD_PATCH}, {"DELETE", METHOD_DELETE},
    {"OPTIONS", METHOD_OPTIONS}, {"TRACE", METHOD_TRACE}, {"CONNECT", METHOD_CONNECT},
};

int dns_static_cmp(const void *a, const void *b)
{
    const struct dns_static *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r != 0 ? r : (x->line < y->line ? -1 : x->line > y->line);
}

/* bsearch()'s: the key a name, by dns_static_cmp()'s first order. */
static int static_name_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct dns_static *)elem)->name);
}

const struct dns_static *dns_static_find(const struct dns_static *s, size_t n, const char *name)
{
    if (n == 0)
        return NULL;
    const struct dns_static *hit = bsearch(name, s, n, sizeof(*s), static_name_cmp);
    while (hit != NULL && hit > s && strcmp(hit[-1].name, name) == 0)
        hit--;
    return hit;
}

unsigned method_bit(const char *method)
{
    if (method == NULL)
        return METHOD_OTHER;
    /* The first letter before strcmp(): a CONNECT, last in the table,
     * took nine calls (about 400 instructions a request). */
    for (size_t i = 0; i < sizeof(method_names) / sizeof(method_names[0]); i++)
        if (method_names[i].name[0] == method[0] && strcmp(method, method_names[i].name) == 0)
            return method_names[i].bit;
    return METHOD_OTHER;
}

bool method_is_case_variant(const char *method)
{
    if (method == NULL || method_bit(method) != METHOD_OTHER)
        return false;
    for (size_t i = 0; i < sizeof(method_names) / sizeof(method_names[0]); i++)
        if (strcasecmp(method, method_names[i].name) == 0)
            return true;
    return false;
}

/* Returns the token for one method bit: "OTHER" for METHOD_OTHER and "?" for
 * anything that is not exactly one known bit (never NULL). */
const char *method_name(unsigned bit)
{
    for (size_t i = 0; i < sizeof(method_names) / sizeof(method_names[0]); i++)
        if (bit == method_names[i].bit)
            return method_names[i].name;
    return bit == METHOD_OTHER ? "OTHER" : "?";
}

static void rule_free(struct rule *r)
{
    free(r->pattern);
    free(r->host);
    free(r->ports);
    free(r->owner);
    for (size_t i = 0; i < r->nagents; i++)
        free(r->agents[i]);
    free(r->agents);
}

static void agent_free(struct agent *a)
{
    free(a->id);
    free(a->sources);
    OPENSSL_cleanse(a->token_digest, sizeof(a->token_digest));
    OPENSSL_cleanse(a->token_mark, sizeof(a->token_mark));
    free(a->token_ref);
}

void policy_free(struct policy *p)
{
    if (p == NULL)
        return;
    policy_index_free(p->index);
    free(p->path);
    for (size_t i = 0; i < p->nagents; i++)
        agent_free(&p->agents[i]);
    free(p->agents);
    for (size_t i = 0; i < p->nrules; i++)
        rule_free(&p->rules[i]);
    free(p->rules);
    free(p->deny);
    free(p->network.deny_ranges);
    free(p->network.allow_ranges);
    for (size_t i = 0; i < p->dns.nservers; i++)
        free(p->dns.servers[i]);
    free(p->dns.servers);
    for (size_t i = 0; i < p->dns.nstatics; i++)
        free(p->dns.statics[i].name);
    free(p->dns.statics);
    free(p->alerts.off_hours.tz);
    for (size_t i = 0; i < p->alerts.nsinks; i++) {
        free(p->alerts.sinks[i].target);
        free(p->alerts.sinks[i].env_ref);
    }
    free(p->alerts.sinks);
    OPENSSL_cleanse(p->token_key, sizeof(p->token_key));
    free(p);
}

int policy_token_digest(const struct policy *p, const void *secret, size_t len,
                        unsigned char out[TOKEN_DIGEST_LEN])
{
    unsigned int n = 0;
    const unsigned char *md =
        HMAC(EVP_sha256(), p->token_key, (int)sizeof(p->token_key), secret, len, out, &n);
    if (md == NULL || n != TOKEN_DIGEST_LEN) {
        OPENSSL_cleanse(out, TOKEN_DIGEST_LEN);
        return -1;
    }
    return 0;
}

bool policy_allows_encrypted_hello(const struct policy *p, const struct agent *a)
{
    if (a != NULL && a->encrypted_hello != ECH_AS_NETWORK)
        return a->encrypted_hello == ECH_ALLOW;
    return p->network.allow_encrypted_hello;
}

bool policy_valid_agent_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > AGENT_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
              ch == '-'))
            return false;
    }
    return true;
}

const struct agent *policy_find_agent(const struct policy *p, const char *id)
{
    if (p == NULL || id == NULL)
        return NULL;
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].id != NULL && strcmp(p->agents[i].id, id) == 0)
            return &p->agents[i];
    return NULL;
}
