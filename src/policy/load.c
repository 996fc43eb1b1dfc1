/* load: SPEC.md's policy YAML -> struct policy, with "file:line: field:
 * message" diagnostics.
 *
 * The file is first turned into a bounded tree (yaml_tree.c). Each section
 * is then read by a small function; every mapping goes through
 * load_walk_map() (load_ctx.c), which rejects unknown and duplicate keys and
 * calls one handler per known key, in the table's order (so agents are known
 * before rules name them). This file holds the entry points and the
 * version, agents, rules, deny, network and dns sections; limits and alerts
 * are in load_alerts.c. Reading goes on after an error so that every
 * problem is reported. */
#include "policy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "gate/addr_guard.h"
#include "policy/exec_programs.h"
#include "policy/index.h"
#include "policy/load_ctx.h"
#include "policy/token_mark.h"
#include "policy/yaml_tree.h"
#include "util/text_json.h"
#include "util/units.h"
#include "util/xalloc.h"
#include "util/env.h"

#define PORT_NONE            UINT32_MAX
#define DEFAULT_HEADER_BYTES (32u * 1024)
#define DEFAULT_IDLE_MS      60000u

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- agents ------------------------------------------------------------- */

static void agent_id(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    const char *s = load_get_name(c, v);
    if (s == NULL)
        return;
    if (!policy_valid_agent_id(s)) {
        load_err(c, v->line, "invalid agent id '%s' (use 1-64 of a-z, 0-9, '.', '_', '-')",
                 load_show(c, s));
        return;
    }
    load_set_str(&a->id, s);
    a->id_line = v->line;
}

static void agent_sources(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    a->sources_line = v->line;
    if (load_want_nonempty_list(c, v) == 0)
        load_cidr_list(c, v, "unix", &a->unix_source, &a->sources, &a->nsources);
}

/* A secret shorter than this can be guessed: a wrong one is a 407 that
 * nothing throttles or alerts on. 16 random hex characters are 64 bits,
 * some 29 million years on average at 10,000 tries a second. */
#define TOKEN_MIN_BYTES 16

/* True when <secret> can be sent as a Bearer token: the gate takes the
 * credentials after the scheme without the blanks around them, and none
 * (nor a control character) in them (gate/agent.c). */
static bool bearer_can_carry(const char *secret)
{
    for (const unsigned char *s = (const unsigned char *)secret; *s != '\0'; s++)
        if (*s < 0x21 || *s == 0x7f)
            return false;
    return true;
}

/* True when <name> is a variable the system or the shell sets for every
 * process, whose value any user on the host can read or guess: a token
 * read from it is no secret (env:PATH, env:HOME, env:USER, ...). */
static bool env_is_no_secret(const char *name)
{
    static const char *const known[] = {
        "COLUMNS",        "DISPLAY",  "EDITOR",   "HOME",          "HOST",
        "HOSTNAME",       "HOSTTYPE", "LANG",     "LANGUAGE",      "LD_LIBRARY_PATH",
        "LINES",          "LOGNAME",  "MACHTYPE", "MAIL",          "MANPATH",
        "OLDPWD",         "OSTYPE",   "PAGER",    "PATH",          "PWD",
        "PYTHONPATH",     "SHELL",    "SHLVL",    "SSH_AUTH_SOCK", "SSH_CLIENT",
        "SSH_CONNECTION", "SSH_TTY",  "TEMP",     "TERM",          "TMP",
        "TMPDIR",         "TZ",       "UID",      "USER",          "VISUAL",
    };
    if (strncmp(name, "LC_", 3) == 0 || strncmp(name, "XDG_", 4) == 0)
        return true; /* the locale's and the desktop's: paths and names */
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(name, known[i]) == 0)
            return true;
    return false;
}

static void agent_token(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return;
    if (*s == '\0') {
        load_err(c, v->line, "must not be empty (write env:NAME)");
        return;
    }
    if (strncmp(s, "env:", 4) != 0) {
        /* never echo what may be a secret */
        load_err(c, v->line, "write the secret as env:NAME, never in the policy file");
        return;
    }
    const char *name = s + 4;
    a->token_line = v->line;
    if (!load_env_name_ok(name)) {
        load_err(c, v->line, "invalid environment variable name '%s'", load_show(c, name));
        return;
    }
    if (env_is_no_secret(name)) /* told whether or not it is set here: the name is the fault */
        load_warn(c, v->line,
                  "environment variable %s is no secret: every process and user on the host can "
                  "read it, or guess it; give agent '%s' a variable of its own that holds a long "
                  "random secret",
                  name, a->id != NULL ? a->id : "?");
    char *value = env_dup(name);
    if ((value == NULL || *value == '\0') && (c->flags & POLICY_LOAD_SECRETS_UNUSED)) {
        load_set_str(&a->token_ref, s); /* run: its variable is still kept from the box */
    } else if ((value == NULL || *value == '\0') && (c->flags & POLICY_LOAD_SECRETS_OPTIONAL)) {
        size_t before = c->diag->warnings, dropped = c->warnings_dropped;
        load_warn(c, v->line,
                  "environment variable %s is %s here; serve refuses to start without it", name,
                  value == NULL ? "not set" : "empty");
        c->diag->unset_secrets += c->diag->warnings - before;      /* listed */
        c->unset_secrets_dropped += c->warnings_dropped - dropped; /* past the listed cap */
        load_set_str(&a->token_ref, s);
    } else if (value == NULL) {
        load_err(c, v->line, "environment variable %s is not set", name);
    } else if (*value == '\0') {
        load_err(c, v->line, "environment variable %s is empty", name);
    } else {
        load_set_str(&a->token_ref, s);
        /* Only the keyed digest is kept: the clear value is wiped below. */
        if (policy_token_digest(c->p, value, strlen(value), a->token_digest) == 0 &&
            token_mark(value, strlen(value), a->token_mark) == 0)
            a->has_token = true;
        else
            load_err(c, v->line, "cannot hold the secret of %s: its digest failed", name);
        if (strlen(value) < TOKEN_MIN_BYTES) /* a's id is read first: handlers go in table order */
            load_warn(c, v->line,
                      "environment variable %s holds a secret shorter than %d bytes: anyone who "
                      "reaches the gateway can guess it (wrong tokens are not throttled); give "
                      "agent '%s' a long random one, e.g. openssl rand -hex 16 (32 characters)",
                      name, TOKEN_MIN_BYTES, a->id != NULL ? a->id : "?");
        if (!bearer_can_carry(value))
            load_warn(c, v->line,
                      "environment variable %s holds a blank or a control character (a line end "
                      "at its end?): a Bearer token cannot carry it, and a Basic password must "
                      "hold it as it is; remove it from the variable",
                      name);
    }
    if (value != NULL) /* a secret: leave no copy behind */
        explicit_bzero(value, strlen(value));
    free(value);
}

static void agent_mode(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return;
    if (strcmp(s, "enforce") == 0)
        a->mode = AGENT_ENFORCE;
    else if (strcmp(s, "report") == 0) {
        a->mode = AGENT_REPORT;
        /* enforces nothing for it: a canary's setting, never to be left on */
        load_warn(c, v->line,
                  "report: this agent's denials are let through (logged as report); only the "
                  "address guard still refuses for it (private_address, self_request)");
    } else
        load_err(c, v->line, "unknown mode '%s' (expected enforce or report)", load_show(c, s));
}

/* refuse | allow, for network.encrypted_client_hello and an agent's own:
 * 0 and <*allow> set, or -1 (reported). */
static int load_ech_choice(struct load_ctx *c, const struct ynode *v, bool *allow)
{
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return -1;
    if (strcmp(s, "refuse") == 0 || strcmp(s, "allow") == 0) {
        *allow = s[0] == 'a';
        return 0;
    }
    load_err(c, v->line, "unknown value '%s' (expected refuse or allow)", load_show(c, s));
    return -1;
}

#define ECH_ALLOWED_WHY                                                                            \
    "a ClientHello that carries an encrypted one (Encrypted Client Hello) is let through: its "    \
    "server_name is an outer name, so on a shared front (a CDN) "

/* An agent's own encrypted_client_hello, over the network's: a browser
 * agent (Chromium sends ECH GREASE to every host) can be let through alone. */
static void agent_encrypted_hello(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    bool allow;
    if (load_ech_choice(c, v, &allow) != 0)
        return;
    a->encrypted_hello = allow ? ECH_ALLOW : ECH_REFUSE;
    if (allow)
        load_warn(c, v->line,
                  ECH_ALLOWED_WHY "this agent reaches any site behind a name it is allowed");
}

static const struct key_handler agent_keys[] = {
    {"id", agent_id},
    {"sources", agent_sources},
    {"token", agent_token},
    {"mode", agent_mode},
    {"encrypted_client_hello", agent_encrypted_hello},
};

static void agent_item(struct load_ctx *c, const struct ynode *item, struct agent *a)
{
    a->line = item->line;
    if (load_want_map(c, item) != 0)
        return;
    const struct ynode *vals[NKEYS(agent_keys)];
    load_walk_map(c, item, agent_keys, NKEYS(agent_keys), a, vals);
    load_require_key(c, vals, 0, agent_keys, item->line);
    load_require_key(c, vals, 1, agent_keys, item->line);
}

static int cmp_agent_ptr(const void *a, const void *b)
{
    const struct agent *x = *(const struct agent *const *)a;
    const struct agent *y = *(const struct agent *const *)b;
    int r = strcmp(x->id, y->id);
    return r != 0 ? r : (x < y ? -1 : x > y);
}

/* Reports repeated ids and keeps the sorted ids for rules' lookups (the
 * path is "agents"). */
static void agents_index(struct load_ctx *c)
{
    struct policy *p = c->p;
    const struct agent **v = xcalloc(p->nagents, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].id != NULL)
            v[n++] = &p->agents[i];
    qsort(v, n, sizeof(*v), cmp_agent_ptr);
    c->agent_ids = xcalloc(n, sizeof(*c->agent_ids));
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(v[i]->id, v[first]->id) == 0) {
            size_t m = load_field_push(c, "[%zu].id", (size_t)(v[i] - p->agents));
            load_err(c, v[i]->id_line, "duplicate agent id '%s' (first at line %d)", v[i]->id,
                     v[first]->id_line);
            load_field_pop(c, m);
            continue;
        }
        first = i;
        c->agent_ids[c->nagent_ids++] = v[i]->id;
    }
    free(v);
}

/* One source CIDR of a token-less agent, for shadowed_sources(). */
struct source_ref {
    struct cidr cidr;
    size_t agent; /* its index in agents[] */
    size_t at;    /* its rank among all such sources, in file order */
    size_t min;   /* on the sweep's stack: the first agent of it and those below */
};

/* By range start (the parser keeps no host bits), then the wider first,
 * then file order: a CIDR comes after every one that holds it. */
static int cmp_source_ref(const void *a, const void *b)
{
    const struct source_ref *x = a, *y = b;
    int r = memcmp(x->cidr.addr.b, y->cidr.addr.b, sizeof(x->cidr.addr.b));
    if (r != 0)
        return r;
    if (x->cidr.prefix != y->cidr.prefix)
        return x->cidr.prefix < y->cidr.prefix ? -1 : 1;
    return x->agent < y->agent ? -1 : x->agent > y->agent;
}

/* The field is the agent's sources: the index in sources[] is not the
 * list's ("unix" is not kept there). */
static void warn_shadowed(struct load_ctx *c, size_t agent, const char *src, size_t by)
{
    const struct agent *a = &c->p->agents[agent];
    size_t m = load_field_push(c, "[%zu].sources", agent);
    load_warn(c, a->sources_line,
              "'%s' is never used: agents[%zu] (%s), earlier in the file and without a token, "
              "holds it too (a client that presents no secret is the first agent whose sources "
              "hold it, not the most specific)",
              src, by, c->p->agents[by].id != NULL ? c->p->agents[by].id : "?");
    load_field_pop(c, m);
}

/* Warns about each source of a token-less agent that an earlier token-less
 * agent's sources hold: a client there that presents no secret is that
 * earlier agent, whatever the later one's sources say (SPEC.md, Agents),
 * so the later one never gets it. One sweep over the sources sorted by
 * range: the stack holds the CIDRs that hold the current one (each with
 * the first agent among it and those below), so a policy of a million
 * agents costs a sort. */
static void shadowed_sources(struct load_ctx *c)
{
    const struct policy *p = c->p;
    size_t n = 0, first_unix = SIZE_MAX;
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].token_ref == NULL)
            n += p->agents[i].nsources;
    struct source_ref *v = xcalloc(n > 0 ? n : 1, sizeof(*v));
    struct source_ref *stack = xcalloc(n > 0 ? n : 1, sizeof(*stack));
    size_t *by = xcalloc(n > 0 ? n : 1, sizeof(*by));
    n = 0;
    for (size_t i = 0; i < p->nagents; i++)
        for (size_t k = 0; p->agents[i].token_ref == NULL && k < p->agents[i].nsources; k++, n++)
            v[n] = (struct source_ref){.cidr = p->agents[i].sources[k], .agent = i, .at = n};
    qsort(v, n, sizeof(*v), cmp_source_ref);
    size_t depth = 0;
    for (size_t e = 0; e < n; e++) {
        while (depth > 0 && !(stack[depth - 1].cidr.prefix <= v[e].cidr.prefix &&
                              cidr_contains(&stack[depth - 1].cidr, &v[e].cidr.addr)))
            depth--;
        by[v[e].at] =
            depth > 0 && stack[depth - 1].min < v[e].agent ? stack[depth - 1].min : SIZE_MAX;
        stack[depth] = v[e];
        if (depth > 0 && stack[depth - 1].min < v[e].agent)
            stack[depth].min = stack[depth - 1].min;
        else
            stack[depth].min = v[e].agent;
        depth++;
    }
    char text[IPADDR_STRLEN + 5];
    n = 0;
    for (size_t i = 0; i < p->nagents; i++) {
        const struct agent *a = &p->agents[i];
        if (a->token_ref != NULL)
            continue;
        for (size_t k = 0; k < a->nsources; k++, n++)
            if (by[n] != SIZE_MAX)
                warn_shadowed(c, i, cidr_format(&a->sources[k], text, sizeof(text)), by[n]);
        if (a->unix_source && first_unix != SIZE_MAX)
            warn_shadowed(c, i, "unix", first_unix);
        else if (a->unix_source)
            first_unix = i;
    }
    free(by);
    free(stack);
    free(v);
}

/* By secret (its digest, or the variable it is to be read from when that
 * is unset for sluice check), then file order. */
static int cmp_agent_secret(const void *a, const void *b)
{
    const struct agent *x = *(const struct agent *const *)a;
    const struct agent *y = *(const struct agent *const *)b;
    int r = (int)x->has_token - (int)y->has_token;
    if (r == 0)
        r = x->has_token ? memcmp(x->token_digest, y->token_digest, TOKEN_DIGEST_LEN)
                         : strcmp(x->token_ref, y->token_ref);
    return r != 0 ? r : (x < y ? -1 : x > y);
}

/* Warns about each agent whose secret an earlier agent's is too (one
 * variable, or two holding one value): a client that presents it is the
 * first of them whose sources hold it (SPEC.md, Agents), so the later is
 * never chosen where both agents' sources hold the client. Names the
 * agents, never the value. */
static void shared_tokens(struct load_ctx *c)
{
    const struct policy *p = c->p;
    const struct agent **v = xcalloc(p->nagents > 0 ? p->nagents : 1, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < p->nagents; i++)
        if (p->agents[i].token_ref != NULL)
            v[n++] = &p->agents[i];
    qsort(v, n, sizeof(*v), cmp_agent_secret);
    for (size_t i = 1, first = 0; i < n; i++) {
        bool same = v[i]->has_token == v[first]->has_token &&
                    (v[i]->has_token
                         ? memcmp(v[i]->token_digest, v[first]->token_digest, TOKEN_DIGEST_LEN) == 0
                         : strcmp(v[i]->token_ref, v[first]->token_ref) == 0);
        if (!same) {
            first = i;
            continue;
        }
        size_t m = load_field_push(c, "[%zu].token", (size_t)(v[i] - p->agents));
        load_warn(
            c, v[i]->token_line,
            "the same secret as agents[%zu] (%s, line %d), earlier in the file: a client that "
            "presents it is the first of them whose sources hold it; give each agent a "
            "token of its own",
            (size_t)(v[first] - p->agents), v[first]->id != NULL ? v[first]->id : "?",
            v[first]->line);
        load_field_pop(c, m);
    }
    free(v);
}

static void sec_agents(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    if (load_want_list(c, v) != 0)
        return;
    if (v->count == 0) {
        /* Read as "no agent may use the gateway", it lets every client in:
         * the gateway identifies agents only when there are some. */
        load_warn(c, v->line,
                  "the list is empty: every client, from any source and without a token, is "
                  "agent 'default', as without an agents section; list the agents, or remove "
                  "the key");
        return;
    }
    /* Every item gets a struct agent, a mapping or not: a list of "1," as
     * long as YTREE_MAX_NODES lets through (4 Mi items, in 8 MiB) would
     * take some 400 MB. */
    if (v->count > POLICY_MAX_AGENTS) {
        load_err(c, v->line, "too many agents (at most %u)", POLICY_MAX_AGENTS);
        return;
    }
    p->agents = xcalloc(v->count, sizeof(*p->agents));
    p->nagents = v->count;
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        agent_item(c, it, &p->agents[i]);
        load_field_pop(c, m);
    }
    agents_index(c);
    shadowed_sources(c);
    shared_tokens(c);
}

static bool agent_defined(const struct load_ctx *c, const char *id)
{
    if (c->nagent_ids == 0)
        return false;
    return bsearch(&id, c->agent_ids, c->nagent_ids, sizeof(*c->agent_ids), cmp_str_ptr) != NULL;
}

/* ---- rules -------------------------------------------------------------- */

/* A host pattern written with other than ASCII is matched in its IDNA
 * form, which can be another name than the one it looks like: "аpi.github.com"
 * with a Cyrillic "а" allows xn--pi-6kc.github.com, someone else's, and
 * "gist.github.cоm" in deny denies nothing a request for the real one
 * names. Warns with the form matched, so a reviewer reads that. */
static void warn_unicode_name(struct load_ctx *c, int line, const char *s, bool wildcard,
                              const char *name)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        if (*p >= 0x80) {
            load_warn(c, line,
                      "'%s' is written with characters other than ASCII and matches %s%s, which "
                      "may not be the name it looks like; write that form",
                      load_show(c, s), wildcard ? "*." : "", name);
            return;
        }
}

static void warn_unicode_host(struct load_ctx *c, int line, const char *s,
                              const struct host_pattern *hp)
{
    warn_unicode_name(c, line, s, hp->kind == PATTERN_WILDCARD, hp->name);
}

static void rule_host(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = load_get_name(c, v);
    if (s == NULL)
        return;
    struct host_pattern hp;
    const char *why = NULL;
    if (host_pattern_parse(s, &hp, &why) != 0) {
        load_err(c, v->line, "invalid host pattern '%s': %s", load_show(c, s),
                 why ? why : "invalid");
        return;
    }
    warn_unicode_host(c, v->line, s, &hp);
    if (host_pattern_over_private_suffix(&hp))
        load_warn(c, v->line,
                  "*.%s: names under %s are registered by anyone (Public Suffix List, private "
                  "section): the wildcard lets the agent reach any of them; name the hosts",
                  hp.name, hp.name);
    r->kind = hp.kind == PATTERN_WILDCARD ? RULE_WILDCARD : RULE_EXACT;
    free(r->pattern);
    r->pattern = hp.kind == PATTERN_WILDCARD ? xasprintf("*.%s", hp.name) : xstrdup(hp.name);
    load_set_str(&r->host, hp.name);
    r->pattern_line = v->line;
}

static void rule_cidr(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = load_get_str(c, v);
    if (s == NULL || load_parse_cidr_node(c, v, s, &r->cidr) != 0)
        return;
    char buf[IPADDR_STRLEN + 8];
    r->kind = RULE_CIDR;
    load_set_str(&r->pattern, cidr_format(&r->cidr, buf, sizeof(buf)));
    load_set_str(&r->host, NULL);
    r->pattern_line = v->line;
}

struct port_item {
    uint16_t port;
    int line;
    size_t pos;
};

static int cmp_port_item(const void *a, const void *b)
{
    const struct port_item *x = a, *y = b;
    if (x->port != y->port)
        return x->port < y->port ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static void rule_ports(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    if (load_want_nonempty_list(c, v) != 0)
        return;
    struct port_item *items = xcalloc(v->count, sizeof(*items));
    size_t n = 0, i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        uint64_t port;
        if (load_get_uint_sat(c, it, &port) == 0) {
            if (port < 1 || port > 65535)
                load_err(c, it->line, "port %s is outside 1-65535", load_show(c, it->str));
            else
                items[n++] = (struct port_item){(uint16_t)port, it->line, i};
        }
        load_field_pop(c, m);
    }
    qsort(items, n, sizeof(*items), cmp_port_item);
    free(r->ports);
    r->ports = xcalloc(n, sizeof(*r->ports));
    r->nports = 0;
    for (size_t k = 0, first = 0; k < n; k++) {
        if (k > 0 && items[k].port == items[first].port) {
            size_t m = load_field_push(c, "[%zu]", items[k].pos);
            load_warn(c, items[k].line, "port %u is listed twice (line %d)",
                      (unsigned)items[k].port, items[first].line);
            load_field_pop(c, m);
            continue;
        }
        first = k;
        r->ports[r->nports++] = items[k].port;
    }
    free(items);
}

static void rule_tier(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    uint64_t t;
    if (load_get_uint_sat(c, v, &t) != 0)
        return;
    if (t > TIER_3) {
        load_err(c, v->line, "tier %s is outside 0-3", load_show(c, v->str));
        return;
    }
    r->tier = (enum tier)t;
}

static void rule_methods(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    if (load_want_nonempty_list(c, v) != 0)
        return;
    unsigned mask = 0;
    int first_line[10] = {0}; /* by bit number: the line a method is first listed at */
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        const char *s = load_get_str(c, it);
        unsigned bit = s ? method_bit(s) : 0;
        int *first = bit != 0 ? &first_line[__builtin_ctz(bit)] : NULL;
        if (bit == METHOD_CONNECT)
            load_err(c, it->line,
                     "CONNECT is decided by the host rule; leave methods out to allow tunnels");
        else if (bit == METHOD_OTHER)
            load_err(
                c, it->line,
                "unknown method '%s' (expected GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS or "
                "TRACE, in upper case)",
                load_show(c, s));
        else if (bit != 0 && (mask & bit) != 0)
            load_warn(c, it->line, "method %s is listed twice (line %d)", s, *first);
        else if (first != NULL)
            *first = it->line;
        mask |= bit == METHOD_CONNECT || bit == METHOD_OTHER ? 0 : bit;
        load_field_pop(c, m);
    }
    r->methods = mask;
}

/* The length of a character at <p> (UTF-8) that prints as nothing though
 * Unicode counts it neither a space nor a zero-width one: the Hangul
 * fillers (U+115F, U+1160, U+3164, U+FFA0; U+3164 is a well-known "blank"
 * user name), the Braille blank (U+2800), the combining grapheme joiner
 * (U+034F), the Khmer inherent vowels (U+17B4, U+17B5), the Mongolian
 * variation selectors (U+180B-U+180D, U+180F), the invisible operators
 * (U+2061-U+2064), the deprecated format characters (U+206A-U+206F), the
 * variation selectors (U+FE00-U+FE0F) and the plane-14 tags and
 * variation selectors (U+E0000-U+E01FF). 0 for anything else. */
static size_t blank_other_len(const unsigned char *p)
{
    if (p[0] == 0xcd && p[1] == 0x8f)
        return 2;
    if (p[0] == 0xe1 && ((p[1] == 0x85 && (p[2] == 0x9f || p[2] == 0xa0)) ||
                         (p[1] == 0x9e && (p[2] == 0xb4 || p[2] == 0xb5)) ||
                         (p[1] == 0xa0 && ((p[2] >= 0x8b && p[2] <= 0x8d) || p[2] == 0x8f))))
        return 3;
    if (p[0] == 0xe2 && p[1] == 0x81 &&
        ((p[2] >= 0xa1 && p[2] <= 0xa4) || (p[2] >= 0xaa && p[2] <= 0xaf)))
        return 3;
    if ((p[0] == 0xe2 && p[1] == 0xa0 && p[2] == 0x80) ||
        (p[0] == 0xe3 && p[1] == 0x85 && p[2] == 0xa4) ||
        (p[0] == 0xef && p[1] == 0xb8 && p[2] >= 0x80 && p[2] <= 0x8f) ||
        (p[0] == 0xef && p[1] == 0xbe && p[2] == 0xa0))
        return 3;
    if (p[0] == 0xf3 && p[1] == 0xa0 && p[2] >= 0x80 && p[2] <= 0x87 && p[3] >= 0x80 &&
        p[3] <= 0xbf)
        return 4;
    return 0;
}

/* The length of the blank at <p> (UTF-8): an ASCII space, tab or line end;
 * one of Unicode's other White_Space characters (U+0085, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000); one of the
 * zero-width characters, which print as nothing (U+180E, U+200B-U+200D,
 * U+2060, U+FEFF); or one of the other characters that print as nothing
 * (blank_other_len()). 0 for anything else. */
static size_t blank_other_len(const unsigned char *p);

static size_t blank_len(const unsigned char *p)
{
    size_t n = blank_other_len(p);
    if (n != 0)
        return n;
    if (p[0] == ' ' || p[0] == '\t' || p[0] == '\r' || p[0] == '\n')
        return 1;
    if (p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0))
        return 2;
    if (p[0] == 0xe1 && ((p[1] == 0x9a && p[2] == 0x80) || (p[1] == 0xa0 && p[2] == 0x8e)))
        return 3;
    if (p[0] == 0xe2 && p[1] == 0x80 &&
        ((p[2] >= 0x80 && p[2] <= 0x8d) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
        return 3;
    if (p[0] == 0xe2 && p[1] == 0x81 && (p[2] == 0x9f || p[2] == 0xa0))
        return 3;
    if ((p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80) ||
        (p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf))
        return 3;
    return 0;
}

/* The length of the blank at <p> (blank_len()) but for the zero-width
 * joiner and non-joiner (U+200C, U+200D), which a name in an Indic script
 * may end with (a chillu written with a virama and a joiner). */
static size_t edge_blank_len(const unsigned char *p)
{
    if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0x8c || p[2] == 0x8d))
        return 0;
    return blank_len(p);
}

/* True when <s> starts or ends with a blank (edge_blank_len()): a space,
 * a no-break one. A blank's first byte is never a UTF-8 continuation
 * byte, so a byte-wise scan meets only whole characters. */
static bool blank_at_edge(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s);
    if (edge_blank_len(p) != 0)
        return true;
    for (size_t i = 0; i < len; i++) {
        size_t n = edge_blank_len(p + i);
        if (n != 0 && i + n == len)
            return true;
    }
    return false;
}

/* True when <s> holds a character other than a blank (above): an owner of
 * no-break or zero-width spaces is as blank as one of spaces. */
static bool has_visible_char(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t n; *p != '\0'; p += n)
        if ((n = blank_len(p)) == 0)
            return true;
    return false;
}

/* The length of the bidirectional formatting character at <p> (UTF-8), or
 * 0: the embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069)
 * and the marks (U+061C, U+200E, U+200F). An override in an owner reverses
 * the rest of the line check prints it in: the expiry date after it too. */
static size_t bidi_len(const unsigned char *p)
{
    if (p[0] == 0xd8 && p[1] == 0x9c)
        return 2;
    if (p[0] == 0xe2 && p[1] == 0x80 &&
        (p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xaa && p[2] <= 0xae)))
        return 3;
    if (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9)
        return 3;
    return 0;
}

/* The length of the invisible character at <p> (UTF-8), or 0: the soft
 * hyphen and the zero-width characters no name needs (U+00AD, U+180E,
 * U+200B, U+2060, U+FEFF). "al" + U+200B + "ice" prints as alice and is
 * not found by a search for it. The zero-width joiner and non-joiner
 * (U+200C, U+200D) are allowed: Persian and Indic names are written with
 * them. */
static size_t invisible_len(const unsigned char *p)
{
    if (p[0] == 0xc2 && p[1] == 0xad)
        return 2;
    if ((p[0] == 0xe1 && p[1] == 0xa0 && p[2] == 0x8e) ||
        (p[0] == 0xe2 && p[1] == 0x80 && p[2] == 0x8b) ||
        (p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0xa0) ||
        (p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf))
        return 3;
    return 0;
}

/* The longest owner: a person's name, with room to spare. Every decision
 * line and grant metric under the rule carries it, and one over the
 * decision log's line cap (16 MiB) had the log drop the line of every
 * request the grant let through. */
#define OWNER_MAX_BYTES 1024

static void rule_owner(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *boolean = load_yaml_boolean(v);
    if (boolean != NULL) {
        /* "owner: no" or "owner: false" signs a tier-3 grant with a
         * word that says no one does, and YAML tools read it as false */
        load_err(c, v->line,
                 "'%s' is YAML's boolean %s, not a person's name: name the person who signs "
                 "for the rule (in quotes, if that is what they are called)",
                 v->str, boolean);
        return;
    }
    if (load_yaml_number(v)) {
        /* "owner: 0x1F" or "owner: 1e3" names no one, and YAML tools read
         * it as 31 or 1000.0: a number, as a boolean above */
        load_err(c, v->line,
                 "'%s' is a number to YAML, not a person's name: name the person who signs for "
                 "the rule (in quotes, if that is what they are called)",
                 load_show(c, v->str));
        return;
    }
    /* null ("owner:") is as blank as "": both say what an owner must be */
    const char *s = v->kind == YNODE_SCALAR && ynode_is_null(v) ? "" : load_get_str(c, v);
    if (s == NULL)
        return;
    if (!has_visible_char(s)) {
        /* " " would pass for a tier-3 grant's signature */
        load_err(c, v->line, "must name a person, not be blank");
        return;
    }
    if (strlen(s) > OWNER_MAX_BYTES) {
        load_err(c, v->line,
                 "is %zu bytes long: a person's name is at most %d bytes (each decision line "
                 "under the rule carries it)",
                 strlen(s), OWNER_MAX_BYTES);
        return;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        if (*p < 0x20 || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) ||
            (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))) {
            /* A line end would let an owner write lines of its own into
             * check's report and serve's expiry warnings ("result: 0
             * errors"). The C1 controls too (U+0080 to U+009F, the text
             * being UTF-8): terminals take NEL (YAML's "\N") as a line end
             * and CSI as the start of an escape sequence. And the line and
             * paragraph separators (U+2028, U+2029, YAML's "\L" and "\P"),
             * which editors and viewers of a saved report break lines at. */
            load_err(c, v->line, "must be a name on one line, without control characters");
            return;
        }
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        if (bidi_len(p) != 0) {
            load_err(c, v->line,
                     "must not hold bidirectional formatting characters (U+202A-U+202E, "
                     "U+2066-U+2069, U+200E, U+200F, U+061C): they reorder the line it is "
                     "printed in");
            return;
        }
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        if (invisible_len(p) != 0) {
            load_err(c, v->line,
                     "must not hold invisible characters (U+00AD, U+180E, U+200B, U+2060, "
                     "U+FEFF): a name with one prints as another and escapes a search for it");
            return;
        }
    if (blank_at_edge(s)) {
        /* " alice " is not trimmed: the loaded owner would not be what the
         * file says, and kept, it is another owner than "alice" to a
         * search of the log, a metric's label and a review of the report,
         * which shows no difference */
        load_err(c, v->line,
                 "'%s' starts or ends with a blank: write the person's name without blanks "
                 "around it",
                 load_show(c, s));
        return;
    }
    /* The contract's owner is "a person, not a team alias": a team signs
     * for nothing when the grant is questioned. Only '/' is judged, GitHub's
     * @org/team and a GitLab group's org/team: a person's name has none,
     * where a handle (@chaysen), dots, quotes and hyphens are a person's
     * too. A warning: a team still names someone to ask. */
    if (strchr(s, '/') != NULL)
        load_warn(c, v->line,
                  "'%s' names a team or a group (it holds '/', as GitHub's @org/team does), "
                  "not a person: name the person who signs for the rule",
                  load_show(c, s));
    load_set_str(&r->owner, s);
}

static void rule_expires(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return;
    int got = parse_date(s, &r->expires);
    if (got == -2) {
        load_err(c, v->line,
                 "%s is before 1970-01-01, the earliest date sluice reads (dates count "
                 "days from it)",
                 load_show(c, s));
        return;
    }
    if (got == -3) {
        load_err(c, v->line, "%s is not a day of the calendar", load_show(c, s));
        return;
    }
    if (got != 0) {
        load_err(c, v->line, "invalid date '%s' (expected YYYY-MM-DD)", load_show(c, s));
        return;
    }
    r->has_expires = true;
    r->expires_line = v->line;
}

struct agent_ref {
    const char *id;
    int line;
    size_t pos;
};

static int cmp_agent_ref(const void *a, const void *b)
{
    const struct agent_ref *x = a, *y = b;
    int r = strcmp(x->id, y->id);
    return r != 0 ? r : (x->pos < y->pos ? -1 : x->pos > y->pos);
}

/* Reads one entry of a rule's agents list into <refs>. Returns 1 when kept. */
static int rule_agent_item(struct load_ctx *c, const struct ynode *it, struct agent_ref *ref)
{
    const char *s = load_get_name(c, it);
    if (s == NULL)
        return 0;
    if (!policy_valid_agent_id(s)) {
        load_err(c, it->line, "invalid agent id '%s' (use 1-64 of a-z, 0-9, '.', '_', '-')",
                 load_show(c, s));
        return 0;
    }
    if (!agent_defined(c, s))
        load_warn(c, it->line,
                  "agent '%s' is not defined in agents (it can still be named by `sluice run "
                  "--agent`)",
                  s);
    ref->id = s;
    ref->line = it->line;
    return 1;
}

static void rule_agents(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    if (load_want_nonempty_list(c, v) != 0)
        return;
    struct agent_ref *refs = xcalloc(v->count, sizeof(*refs));
    size_t n = 0, i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        refs[n].pos = i;
        n += (size_t)rule_agent_item(c, it, &refs[n]);
        load_field_pop(c, m);
    }
    qsort(refs, n, sizeof(*refs), cmp_agent_ref);
    r->agents = xcalloc(n, sizeof(*r->agents));
    for (size_t k = 0, first = 0; k < n; k++) {
        if (k > 0 && strcmp(refs[k].id, refs[first].id) == 0) {
            size_t m = load_field_push(c, "[%zu]", refs[k].pos);
            load_warn(c, refs[k].line, "agent '%s' is listed twice (line %d)", refs[k].id,
                      refs[first].line);
            load_field_pop(c, m);
            continue;
        }
        first = k;
        r->agents[r->nagents++] = xstrdup(refs[k].id);
    }
    free(refs);
}

static void rule_rate(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    load_rate_spec(c, v, &r->rate);
}

enum { RK_HOST, RK_CIDR, RK_PORTS, RK_TIER, RK_METHODS, RK_OWNER, RK_EXPIRES };

static const struct key_handler rule_keys[] = {
    {"host", rule_host},       {"cidr", rule_cidr},       {"ports", rule_ports},
    {"tier", rule_tier},       {"methods", rule_methods}, {"owner", rule_owner},
    {"expires", rule_expires}, {"agents", rule_agents},   {"rate", rule_rate},
};

/* Reads rules[i]. Returns true when it has no error (a candidate for the
 * duplicate check). */
static bool rule_item(struct load_ctx *c, const struct ynode *item, struct rule *r)
{
    r->line = item->line;
    r->tier = TIER_NONE;
    if (load_want_map(c, item) != 0)
        return false;
    /* Counted by load_err(): past the cap, an error no longer reaches the
     * diag, and a rule without a host would go to the duplicate check. */
    size_t errors = load_error_count(c);
    const struct ynode *vals[NKEYS(rule_keys)];
    load_walk_map(c, item, rule_keys, NKEYS(rule_keys), r, vals);
    if (vals[RK_HOST] != NULL && vals[RK_CIDR] != NULL)
        load_err(c, item->line, "give exactly one of host and cidr, not both");
    else if (vals[RK_HOST] == NULL && vals[RK_CIDR] == NULL)
        load_err(c, item->line, "needs a host or a cidr");
    if (vals[RK_PORTS] == NULL) {
        r->ports = xcalloc(2, sizeof(*r->ports));
        r->ports[0] = 80;
        r->ports[1] = 443;
        r->nports = 2;
    }
    load_require_key(c, vals, RK_TIER, rule_keys, item->line);
    if (r->tier == TIER_3 && vals[RK_OWNER] == NULL)
        load_err_at_key(c, "owner", item->line,
                        "tier-3 rule needs an owner (the person who signs for it)");
    if (r->tier == TIER_3 && vals[RK_EXPIRES] == NULL)
        load_err_at_key(c, "expires", item->line, "tier-3 rule needs an expiry date");
    return load_error_count(c) == errors;
}

/* Orders rules by (pattern, methods, agents); equal keys are candidates. */
static int cmp_rule_key(const struct rule *x, const struct rule *y)
{
    int r = strcmp(x->pattern, y->pattern);
    if (r != 0)
        return r;
    if (x->methods != y->methods)
        return x->methods < y->methods ? -1 : 1;
    if (x->nagents != y->nagents)
        return x->nagents < y->nagents ? -1 : 1;
    for (size_t i = 0; i < x->nagents; i++)
        if ((r = strcmp(x->agents[i], y->agents[i])) != 0)
            return r;
    return 0;
}

static int cmp_rule_ptr(const void *a, const void *b)
{
    const struct rule *x = *(const struct rule *const *)a;
    const struct rule *y = *(const struct rule *const *)b;
    int r = cmp_rule_key(x, y);
    return r != 0 ? r : (x->index < y->index ? -1 : x->index > y->index);
}

/* Within a group of rules with the same key, in file order, reports each
 * rule that shares a port with an earlier one. <owner> maps a port to the
 * first rule that claimed it; it is left all PORT_NONE again. */
static void duplicate_group(struct load_ctx *c, const struct rule **g, size_t n, uint32_t *owner)
{
    for (size_t i = 0; i < n; i++) {
        const struct rule *r = g[i];
        uint32_t first = PORT_NONE;
        for (size_t k = 0; k < r->nports && first == PORT_NONE; k++)
            first = owner[r->ports[k]];
        if (first != PORT_NONE) {
            size_t m = load_field_push(c, "[%zu]", r->index);
            load_err(c, r->line,
                     "duplicates rules[%" PRIu32 "] (line %d): same host, methods and agents, and "
                     "overlapping ports",
                     first, c->p->rules[first].line);
            load_field_pop(c, m);
        }
        for (size_t k = 0; k < r->nports; k++)
            if (owner[r->ports[k]] == PORT_NONE)
                owner[r->ports[k]] = (uint32_t)r->index;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < g[i]->nports; k++)
            owner[g[i]->ports[k]] = PORT_NONE;
}

/* Rules of one host pattern checked against each other at most: a group
 * larger than this (a hostile file) is not checked, which keeps the check
 * linear in the file. */
#define OUTRANK_GROUP_MAX 64

/* Warns about each tier-3 rule of group <g> (<n> rules of one pattern,
 * any order) that a lower-tier rule of the same pattern outranks: both
 * name a method, or both name none (among rules that name the method, and
 * among those that name none, the lower tier wins, then file order; see
 * match.c), for a port and an agent in common. Those
 * requests then go through at the lower tier, without the grant's owner,
 * its tier3_write alert or its expiry, while check lists the grant as
 * signed for them. */
static void outranked_grants(struct load_ctx *c, const struct rule **g, size_t n)
{
    if (n > OUTRANK_GROUP_MAX)
        return;
    for (size_t i = 0; i < n; i++) {
        const struct rule *t = g[i], *by = NULL;
        if (t->tier != TIER_3)
            continue;
        /* Both naming a method, or both naming none (their agents differ,
         * else they are duplicates): the lower tier wins. A lower rule that
         * names methods under a grant that names none is a read carved
         * out, and one that names none under a grant that names them loses. */
        for (size_t k = 0; k < n; k++) {
            const struct rule *l = g[k];
            bool meet = t->methods == 0 ? l->methods == 0 : (l->methods & t->methods) != 0;
            if (l->tier < t->tier && meet && load_ports_meet(t, l) && load_agents_meet(t, l) &&
                (by == NULL || l->index < by->index))
                by = l;
        }
        if (by == NULL)
            continue;
        if (t->methods == 0) {
            size_t m = load_field_push(c, "[%zu]", t->index);
            load_warn(c, t->line,
                      "this tier-3 grant does not decide the plain requests it shares with "
                      "rules[%zu] (line %d), which covers this host too without naming methods "
                      "either, at tier %d, for a port and an agent in common: the lower tier "
                      "wins, so those requests go through at tier %d, without this grant's "
                      "owner, expiry or tier3_write alert (only a CONNECT and an extension "
                      "method take tier 3)",
                      by->index, by->line, (int)by->tier, (int)by->tier);
            load_field_pop(c, m);
            continue;
        }
        char names[96] = "";
        size_t o = 0;
        for (unsigned bit = METHOD_GET; bit <= METHOD_TRACE && o < sizeof(names); bit <<= 1)
            if (t->methods & by->methods & bit)
                o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s", o ? " " : "",
                                      method_name(bit));
        size_t m = load_field_push(c, "[%zu]", t->index);
        load_warn(c, t->line,
                  "this tier-3 grant does not decide %s: rules[%zu] (line %d) names it too for "
                  "this host, with a port and an agent in common, at tier %d, and the lower tier "
                  "wins; those requests go through at tier %d, without this grant's owner, "
                  "expiry or tier3_write alert",
                  names, by->index, by->line, (int)by->tier, (int)by->tier);
        load_field_pop(c, m);
    }
}

static void rules_duplicates(struct load_ctx *c, const bool *ok)
{
    struct policy *p = c->p;
    const struct rule **v = xcalloc(p->nrules, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < p->nrules; i++)
        if (ok[i])
            v[n++] = &p->rules[i];
    qsort(v, n, sizeof(*v), cmp_rule_ptr);
    uint32_t *owner = xcalloc(65536, sizeof(*owner));
    for (size_t i = 0; i < 65536; i++)
        owner[i] = PORT_NONE;
    for (size_t start = 0, end; start < n; start = end) {
        end = start + 1;
        while (end < n && cmp_rule_key(v[start], v[end]) == 0)
            end++;
        if (end - start > 1)
            duplicate_group(c, v + start, end - start, owner);
    }
    for (size_t start = 0, end; start < n; start = end) {
        end = start + 1;
        while (end < n && strcmp(v[start]->pattern, v[end]->pattern) == 0)
            end++;
        if (end - start > 1)
            outranked_grants(c, v + start, end - start);
    }
    free(owner);
    free(v);
}

static void sec_rules(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    if (load_want_list(c, v) != 0)
        return;
    if (v->count > POLICY_MAX_RULES) {
        load_err(c, v->line, "too many rules (at most %u)", POLICY_MAX_RULES);
        return;
    }
    if (v->count == 0)
        load_warn(c, v->line, "no rules: every request will be denied");
    p->rules = xcalloc(v->count, sizeof(*p->rules));
    p->nrules = v->count;
    bool *ok = xcalloc(v->count, sizeof(*ok));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        p->rules[i].index = i;
        ok[i] = rule_item(c, it, &p->rules[i]);
        load_field_pop(c, m);
    }
    rules_duplicates(c, ok);
    free(ok);
}

/* ---- deny, network ------------------------------------------------------ */

static int cmp_pattern_key(const void *a, const void *b)
{
    const struct host_pattern *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void show_pattern_key(const void *key, char *buf, size_t size)
{
    const struct host_pattern *p = key;
    snprintf(buf, size, "%s%s", p->kind == PATTERN_WILDCARD ? "*." : "", p->name);
}

static void sec_deny(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    if (load_want_list(c, v) != 0)
        return;
    /* Each entry holds a whole pattern (some 260 bytes, against the 4 of
     * "a.b,"): a 16 MiB list would take over 1 GB. */
    if (v->count > POLICY_MAX_DENY) {
        load_err(c, v->line, "too many deny entries (at most %u)", POLICY_MAX_DENY);
        return;
    }
    p->deny = xcalloc(v->count, sizeof(*p->deny));
    struct load_entry *seen = xcalloc(v->count != 0 ? v->count : 1, sizeof(*seen));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        const char *s = load_get_name(c, it);
        const char *why = NULL;
        struct deny_entry *d = &p->deny[p->ndeny];
        if (s != NULL && host_pattern_parse(s, &d->pattern, &why) != 0)
            load_err(c, it->line, "invalid host pattern '%s': %s", load_show(c, s),
                     why ? why : "invalid");
        else if (s != NULL) {
            warn_unicode_host(c, it->line, s, &d->pattern);
            seen[p->ndeny] = (struct load_entry){&d->pattern, it->line, i, 0, false};
            p->deny[p->ndeny++].line = it->line;
        }
        load_field_pop(c, m);
    }
    /* a pattern listed twice, as normalised ("Gist.example.com." is
     * gist.example.com): told at its second line, naming the first's */
    load_warn_repeats(c, seen, p->ndeny, cmp_pattern_key, show_pattern_key);
    free(seen);
}

static void net_deny_ranges(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct network_cfg *n = obj;
    if (v->kind == YNODE_SCALAR && strcmp(v->str, "default") == 0) {
        n->default_deny_ranges = true;
        return;
    }
    if (v->kind != YNODE_SEQUENCE) {
        load_err(c, v->line, "expected \"default\" or a list of CIDRs");
        return;
    }
    n->default_deny_ranges = false;
    load_cidr_list(c, v, "default", &n->default_deny_ranges, &n->deny_ranges, &n->ndeny_ranges);
    if (!n->default_deny_ranges)
        load_warn(c, v->line,
                  "deny_ranges does not include \"default\": loopback, RFC 1918, link-local "
                  "(169.254.169.254, cloud metadata) and the other default ranges are not denied "
                  "unless listed; add \"default\" to the list to keep them");
}

static void net_allow_ranges(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct network_cfg *n = obj;
    if (load_want_list(c, v) != 0)
        return;
    load_cidr_list(c, v, NULL, NULL, &n->allow_ranges, &n->nallow_ranges);
    /* A range wide enough to hold it ("0.0.0.0/0", "169.254.0.0/16") most
     * likely was not meant to open it. */
    struct ipaddr metadata;
    ipaddr_from_v4(&metadata, ADDR_GUARD_METADATA_V4);
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        struct cidr r;
        struct ipaddr form;
        if (it->kind != YNODE_SCALAR || cidr_parse(it->str, &r) != 0 ||
            load_cidr_covers_ipv4(it->str, &r))
            continue; /* the last has its own warning */
        size_t m = load_field_push(c, "[%zu]", i);
        if (cidr_contains(&r, &metadata)) {
            load_warn(c, it->line,
                      "'%s' exempts 169.254.169.254, the cloud metadata address (the host's "
                      "credentials), from deny_ranges; list a narrower range",
                      load_show(c, it->str));
        } else if (addr_guard_translated_in(&r, &metadata, &form)) {
            /* The guard denies 64:ff9b::a9fe:a9fe as the metadata address
             * (a translator connects to it); exempted, it is reached. */
            char text[IPADDR_STRLEN];
            ipaddr_format(&form, text, sizeof(text));
            load_warn(c, it->line,
                      "'%s' holds %s, which a NAT64 or SIIT translator connects to "
                      "169.254.169.254, the cloud metadata address (the host's credentials): it "
                      "exempts that from deny_ranges; list a narrower range",
                      load_show(c, it->str), text);
        }
        load_field_pop(c, m);
    }
}

static void net_encrypted_hello(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct network_cfg *n = obj;
    bool allow;
    if (load_ech_choice(c, v, &allow) != 0)
        return;
    n->allow_encrypted_hello = allow;
    if (allow)
        load_warn(c, v->line,
                  ECH_ALLOWED_WHY "an agent reaches any site behind an allowed name; it holds for "
                                  "every agent of the policy: allow it only when all of them are "
                                  "trusted (or for one agent, in its own entry), or turn ECH off "
                                  "in the clients");
}

static const struct key_handler network_keys[] = {
    {"deny_ranges", net_deny_ranges},
    {"allow_ranges", net_allow_ranges},
    {"encrypted_client_hello", net_encrypted_hello},
};

static void sec_network(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    const struct ynode *vals[NKEYS(network_keys)];
    if (load_want_map(c, v) == 0)
        load_walk_map(c, v, network_keys, NKEYS(network_keys), &p->network, vals);
}

/* ---- dns ---------------------------------------------------------------- */

static bool ip_text(const char *s, size_t len, bool v6, struct ipaddr *out)
{
    char buf[INET6_ADDRSTRLEN + 1];
    unsigned char raw[16];
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (inet_pton(v6 ? AF_INET6 : AF_INET, buf, raw) != 1)
        return false;
    if (out != NULL && v6)
        memcpy(out->b, raw, 16);
    else if (out != NULL)
        ipaddr_from_v4(out, (uint32_t)raw[0] << 24 | (uint32_t)raw[1] << 16 |
                                (uint32_t)raw[2] << 8 | raw[3]);
    return true;
}

static bool port_text(const char *s)
{
    uint64_t port;
    return load_all_digits(s) && parse_uint(s, 65535, &port) == 0 && port >= 1;
}

/* "IP", "IPv4:PORT" or "[IPv6]:PORT"; the address into <ip>. */
static bool valid_dns_server(const char *s, struct ipaddr *ip)
{
    size_t n = strlen(s);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        return close != NULL && ip_text(s + 1, (size_t)(close - s - 1), true, ip) &&
               close[1] == ':' && port_text(close + 2);
    }
    const char *colon = strchr(s, ':');
    if (colon == NULL)
        return ip_text(s, n, false, ip);
    if (strchr(colon + 1, ':') != NULL)
        return ip_text(s, n, true, ip);
    return ip_text(s, (size_t)(colon - s), false, ip) && port_text(colon + 1);
}

/* True for an address on this host or a local network (loopback, RFC 1918,
 * CGNAT, link-local, ULA): a resolver there is not reached across networks
 * the operator does not control. */
static bool local_network_address(const struct ipaddr *a)
{
    const uint8_t *b = a->b;
    if (ipaddr_is_v4(a)) {
        uint8_t x = b[12], y = b[13];
        return x == 127 || x == 10 || (x == 172 && (y & 0xf0) == 16) || (x == 192 && y == 168) ||
               (x == 100 && (y & 0xc0) == 64) || (x == 169 && y == 254);
    }
    static const uint8_t loopback6[16] = {[15] = 1};
    return memcmp(b, loopback6, 16) == 0 || (b[0] & 0xfe) == 0xfc ||
           (b[0] == 0xfe && (b[1] & 0xc0) == 0x80);
}

static void dns_servers(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct dns_cfg *d = obj;
    if (load_want_list(c, v) != 0)
        return;
    if (v->count > POLICY_MAX_DNS_SERVERS) {
        load_err(c, v->line, "too many DNS servers (at most %d)", POLICY_MAX_DNS_SERVERS);
        return;
    }
    d->servers = xcalloc(v->count, sizeof(*d->servers));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        const char *s = load_get_str(c, it);
        struct ipaddr ip;
        if (s != NULL && !valid_dns_server(s, &ip)) {
            load_err(c, it->line, "invalid DNS server '%s' (expected IP, IP:PORT or [IPv6]:PORT)",
                     load_show(c, s));
        } else if (s != NULL) {
            if (!local_network_address(&ip))
                load_warn(c, it->line,
                          "DNS server %s is neither on this host nor on a local network: its "
                          "answers come over plain UDP, where a forged one needs only a 16-bit "
                          "ID; prefer a resolver on this host or on a network you trust",
                          load_show(c, s));
            d->servers[d->nservers++] = xstrdup(s);
        }
        load_field_pop(c, m);
    }
}

/* One "name: IP" entry of dns.static. Returns 1 when <out> was filled. */
static int dns_static_entry(struct load_ctx *c, const struct ynode *k, const struct ynode *v,
                            struct dns_static *out)
{
    struct host h;
    const char *why = NULL;
    if (load_refuse_yaml_word(c, k) != 0)
        return 0;
    /* As a host pattern's: a name pasted with its port or as a URL is
     * told so, not as an "invalid IP literal". */
    enum name_extra extra = host_name_extra(k->str, k->len);
    if (extra == NAME_EXTRA_URL)
        why = "a dns.static name is a name, not a URL: write the name alone, without scheme, "
              "port or path";
    else if (extra == NAME_EXTRA_PORT)
        why = "a dns.static name holds no port: write the name alone (its address serves every "
              "port)";
    else if (extra == NAME_EXTRA_BRACKETS)
        why = "brackets hold an IPv6 literal only, and a dns.static name holds no port: write the "
              "name alone";
    if (why != NULL || host_normalise(k->str, k->len, &h, &why) != 0) {
        load_err(c, k->line, "invalid name '%s': %s", load_show(c, k->str), why ? why : "invalid");
        return 0;
    }
    if (h.kind != HOST_NAME) {
        load_err(c, k->line, "'%s' is an IP address, not a name", load_show(c, k->str));
        return 0;
    }
    /* As for a rule's host: "ａpi.github.com" (a full-width "a") pins the
     * real api.github.com to the address, and a search for that name in
     * the file does not find it. */
    warn_unicode_name(c, k->line, k->str, false, h.name);
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return 0;
    char canon[IPADDR_STRLEN];
    bool v6 = strchr(s, ':') != NULL;
    if (!ip_text(s, v->len, v6, &out->addr) ||
        strcmp(ipaddr_format(&out->addr, canon, sizeof(canon)), s) != 0) {
        load_err(c, v->line,
                 "invalid IP address '%s' (write it canonically, e.g. 127.0.0.2 or ::1)",
                 load_show(c, s));
        return 0;
    }
    out->name = xstrdup(h.name);
    out->line = k->line;
    return 1;
}

/* Sorts dns.static by name (so lookups may bsearch: dns_static_find()) and
 * drops repeats. */
static void dns_static_dedup(struct load_ctx *c, struct dns_cfg *d)
{
    qsort(d->statics, d->nstatics, sizeof(*d->statics), dns_static_cmp);
    size_t out = 0, first = 0;
    for (size_t i = 0; i < d->nstatics; i++) {
        if (i > 0 && strcmp(d->statics[i].name, d->statics[first].name) == 0) {
            size_t m = load_field_push(c, ".%s", d->statics[i].name);
            load_err(c, d->statics[i].line, "duplicate key '%s' (first at line %d)",
                     d->statics[i].name, d->statics[first].line);
            load_field_pop(c, m);
            free(d->statics[i].name);
            continue;
        }
        first = i;
        d->statics[out++] = d->statics[i];
    }
    d->nstatics = out;
}

static void dns_static(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct dns_cfg *d = obj;
    if (load_want_map(c, v) != 0)
        return;
    d->statics = xcalloc(v->count / 2, sizeof(*d->statics));
    for (const struct ynode *k = ynode_first(v); k != NULL; k = ynode_next(v, k)) {
        const struct ynode *val = ynode_next(v, k);
        if (val == NULL)
            break;
        if (k->kind != YNODE_SCALAR) {
            load_err(c, k->line, "expected a string key");
        } else {
            size_t m = load_field_push(c, ".%s", load_show(c, k->str));
            d->nstatics += (size_t)dns_static_entry(c, k, val, &d->statics[d->nstatics]);
            load_field_pop(c, m);
        }
        k = val;
    }
    dns_static_dedup(c, d);
}

static const struct key_handler dns_keys[] = {
    {"servers", dns_servers},
    {"static", dns_static},
};

static void sec_dns(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    const struct ynode *vals[NKEYS(dns_keys)];
    if (load_want_map(c, v) == 0)
        load_walk_map(c, v, dns_keys, NKEYS(dns_keys), &p->dns, vals);
}

/* ---- the whole file ----------------------------------------------------- */

static void sec_version(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    uint64_t n;
    if (load_get_uint_sat(c, v, &n) != 0)
        return;
    if (n != 1) {
        load_err(c, v->line, "unsupported version %s (this sluice reads version 1)",
                 load_show(c, v->str));
        return;
    }
    p->version = 1;
}

/* In this order: agents are known before rules name them. */
static const struct key_handler root_keys[] = {
    {"version", sec_version},    {"agents", sec_agents},      {"rules", sec_rules},
    {"deny", sec_deny},          {"network", sec_network},    {"dns", sec_dns},
    {"limits", load_sec_limits}, {"alerts", load_sec_alerts},
};

static struct policy *policy_new(const char *name)
{
    struct policy *p = xcalloc(1, sizeof(*p));
    p->path = xstrdup(name);
    p->network.default_deny_ranges = true;
    p->limits.header_bytes = DEFAULT_HEADER_BYTES;
    p->limits.idle_timeout_ms = DEFAULT_IDLE_MS;
    return p;
}

/* A host rule whose every name the deny list covers never applies (the
 * deny list is checked first), though check's report would list it in the
 * reach of every agent it names. Needs the index (one lookup per label). */
static void warn_denied_rules(struct load_ctx *c)
{
    const struct policy *p = c->p;
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        int64_t d = index_deny_covering(p->index, r);
        if (d < 0 || (size_t)d >= p->ndeny)
            continue;
        size_t m = load_field_push(c, "rules[%zu].host", i);
        load_warn(c, r->pattern_line,
                  "%s is denied by deny[%" PRId64 "] (line %d): the deny list is checked first, "
                  "so this rule never applies",
                  r->pattern, d, p->deny[d].line);
        load_field_pop(c, m);
    }
}

/* A cidr: rule's IP literals skip deny_ranges (src/gate/conn.c), so a rule
 * wider than a denied range it holds opens that range, which its author
 * most likely did not mean: "2000::/3" looks public and holds 6to4's
 * 2002::/16, where 2002:a9fe:a9fe:: is 169.254.169.254. A rule that names a
 * denied range, or lies inside one ("10.1.2.0/24"), means it. */
static void warn_cidr_rules(struct load_ctx *c, const struct addr_guard *g)
{
    const struct policy *p = c->p;
    struct guard_openings *o = addr_guard_openings_new(g);
    if (o == NULL) {
        diag_error(c->diag, 0, "", "out of memory while checking the cidr rules");
        return;
    }
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (r->kind != RULE_CIDR)
            continue;
        struct guard_opening op;
        /* A prefix over all of IPv4 has its own warning (load_parse_cidr_node()). */
        addr_guard_opened_by(o, &r->cidr, load_cidr_covers_ipv4(r->pattern, &r->cidr), &op);
        if (op.count == 0)
            continue;
        char denied[IPADDR_STRLEN + 8], more[64] = "";
        cidr_format(&op.first, denied, sizeof(denied));
        if (op.count > 1)
            snprintf(more, sizeof(more), " and %zu other denied range%s", op.count - 1,
                     op.count > 2 ? "s" : "");
        const char *why = op.embeds && op.metadata ? ", whose addresses embed IPv4 ones such as "
                                                     "169.254.169.254, the cloud metadata address"
                          : op.embeds              ? ", whose addresses embed IPv4 ones"
                          : op.metadata ? ", with 169.254.169.254, the cloud metadata address"
                                        : "";
        size_t m = load_field_push(c, "rules[%zu].cidr", i);
        load_warn(c, r->pattern_line,
                  "'%s' holds %s (%s%s)%s: an IP literal this rule allows skips deny_ranges, so "
                  "the rule opens it; name a narrower range, or the denied range itself if you "
                  "mean it",
                  r->pattern, denied, op.name, why, more);
        load_field_pop(c, m);
    }
    addr_guard_openings_free(o);
}

/* A dns.static pin is a name's only address, and an address the guard
 * denies is refused for a name whatever rule allows it (only an IP
 * literal's cidr: rule exempts one, src/gate/conn.c): a pin into
 * deny_ranges that no allow_ranges entry holds makes every request for
 * its name private_address, at run time, where check could have said so. */
static void warn_denied_pins(struct load_ctx *c, const struct addr_guard *g)
{
    const struct policy *p = c->p;
    for (size_t i = 0; i < p->dns.nstatics; i++) {
        const struct dns_static *s = &p->dns.statics[i];
        const char *name = NULL;
        struct cidr range;
        if (!addr_guard_denies_in(g, &s->addr, &name, &range))
            continue;
        char addr[IPADDR_STRLEN], denied[IPADDR_STRLEN + 8];
        ipaddr_format(&s->addr, addr, sizeof(addr));
        cidr_format(&range, denied, sizeof(denied));
        size_t m = load_field_push(c, "dns.static.%s", s->name);
        load_warn(c, s->line,
                  "%s is pinned to %s, which deny_ranges deny (%s, %s) and no allow_ranges "
                  "entry holds: every request for it is refused as private_address; list the "
                  "address in network.allow_ranges, or pin the name elsewhere",
                  s->name, addr, denied, name);
        load_field_pop(c, m);
    }
}

/* The findings about the address guard a policy builds: the cidr: rules
 * that open a range it denies, the pins into one. */
static void warn_guarded_addresses(struct load_ctx *c)
{
    struct addr_guard *g = addr_guard_new(&c->p->network);
    if (g == NULL) {
        diag_error(c->diag, 0, "", "out of memory while checking the cidr rules and pins");
        return;
    }
    warn_cidr_rules(c, g);
    warn_denied_pins(c, g);
    addr_guard_free(g);
}

static void load_root(struct load_ctx *c, const struct ynode *root)
{
    if (root == NULL || ynode_is_null(root)) {
        load_err(c, 0, "the policy is empty (expected a mapping with version: 1)");
        return;
    }
    if (load_want_map(c, root) != 0)
        return;
    const struct ynode *vals[NKEYS(root_keys)];
    load_walk_map(c, root, root_keys, NKEYS(root_keys), c->p, vals);
    load_require_key(c, vals, 0, root_keys, root->line);
    load_warn_quarantine_unused(c);
    if (vals[2] == NULL) {
        size_t m = load_field_key(c, "rules");
        load_warn(c, root->line, "no rules: every request will be denied");
        load_field_pop(c, m);
    }
}

struct policy *policy_load_buffer(const char *name, const char *buf, size_t len, struct diag *diag)
{
    return policy_load_buffer_flags(name, buf, len, 0, diag);
}

struct policy *policy_load_buffer_flags(const char *name, const char *buf, size_t len,
                                        unsigned flags, struct diag *diag)
{
    if (diag->file == NULL)
        diag->file = name;
    struct load_ctx c = {.diag = diag, .flags = flags};
    if (len > POLICY_MAX_BYTES) {
        diag_error(diag, 0, "",
                   "the policy is larger than " POLICY_MAX_BYTES_TEXT
                   " (%u bytes), the most sluice loads",
                   POLICY_MAX_BYTES);
        return NULL;
    }
    struct ytree t;
    if (ytree_parse(&t, buf, len, POLICY_MAX_DEPTH, diag) != 0) {
        ytree_free(&t);
        return NULL;
    }
    c.p = policy_new(name);
    if (RAND_bytes(c.p->token_key, (int)sizeof(c.p->token_key)) != 1)
        diag_error(diag, 0, "", "no random bytes for the key the agents' tokens are held under");
    else
        load_root(&c, ytree_root(&t));
    if (!diag_has_errors(diag)) {
        if (policy_index_build(c.p) != 0)
            diag_error(diag, 0, "", "out of memory while indexing the policy");
        else {
            warn_denied_rules(&c);
            load_warn_outranking_rules(&c);
            load_warn_tunnel_limits(&c);
        }
        if (!diag_has_errors(diag))
            warn_guarded_addresses(&c);
    }
    load_findings_close(&c);
    ytree_free(&t);
    free(c.agent_ids);
    if (diag_has_errors(diag) && !(flags & POLICY_LOAD_KEEP_PARTIAL)) {
        policy_free(c.p);
        return NULL;
    }
    return c.p;
}

/* How long a FIFO's (or pipe's) writer has for its first bytes, and for
 * each write after them, before the load gives up: open() of a FIFO no one
 * writes to would wait for ever, at start and on the reload thread (which
 * the stop waits for). SLUICE_TEST_POLICY_FIFO_WAIT_S shortens it, test-only. */
#define FIFO_WAIT_S 10u

/* Why reading a FIFO timed out. */
enum fifo_silence { FIFO_READ, FIFO_NO_WRITER, FIFO_WRITER_SILENT };

/* Set by policy_load_stop(), read by the reload thread's fifo_wait(). */
static atomic_bool load_stopping;

/* Loads past their read, parsing (policy_load_fd()): policy_load_stop()
 * waits for them. Raised before <load_stopping> is looked at, and the stop
 * sets that before it looks at this (both sequentially consistent): a load
 * either sees the stop and is not parsed, or is waited for. */
static atomic_uint loads_parsing;

void policy_load_stop(void)
{
    atomic_store(&load_stopping, true);
    /* A parse uses OpenSSL (RAND_bytes(), the tokens' HMAC), which exit()
     * tears down: one under way when the stop comes is waited for, not
     * left to its thread. It reads nothing (no file system can hold it)
     * and is bounded by the policy's caps: 0.45 s for the largest, -O3. */
    while (atomic_load(&loads_parsing) > 0)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
}

unsigned policy_loads_parsing(void)
{
    return atomic_load(&loads_parsing);
}

/* Waits up to <wait_s> for the FIFO <fd> to have bytes or an end, in
 * slices of POLICY_STOP_CHECK_MS so that a stop is seen. Returns 1 when it
 * has, 0 when the time ran out, -1 (errno set) on failure, ECANCELED once
 * policy_load_stop() was called. */
static int fifo_wait(int fd, unsigned wait_s)
{
    uint64_t deadline = monotonic_ms() + (uint64_t)wait_s * 1000;
    for (;;) {
        if (atomic_load(&load_stopping)) {
            errno = ECANCELED;
            return -1;
        }
        uint64_t now = monotonic_ms();
        uint64_t left = now < deadline ? deadline - now : 0;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)(left < POLICY_STOP_CHECK_MS ? left : POLICY_STOP_CHECK_MS));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (n == 0 && left <= POLICY_STOP_CHECK_MS)
            return 0;
    }
}

/* Reads <fd> into a new buffer until its end or until it holds more than
 * POLICY_MAX_BYTES (a last read can bring it to twice that), which
 * policy_load_buffer_flags() then refuses. A FIFO (<wait_s> > 0, <fd>
 * O_NONBLOCK) is read once poll() says it has bytes or an end (a
 * non-blocking read before a writer came reads an end); when nothing comes
 * within <wait_s>, NULL with errno ETIMEDOUT and *why set: an end read
 * without a hang-up means no writer came (Linux reports POLLHUP only once
 * a writer has come and gone), EAGAIN one that wrote nothing. */
static char *read_all(int fd, unsigned wait_s, size_t *len, enum fifo_silence *why)
{
    size_t cap = 64 * 1024, n = 0;
    char *buf = xmalloc(cap);
    bool failed = false;
    while (n <= POLICY_MAX_BYTES && !failed) {
        if (n == cap) {
            cap *= 2;
            buf = xreallocarray(buf, cap, 1);
        }
        int ready = wait_s > 0 ? fifo_wait(fd, wait_s) : 1;
        ssize_t r = ready < 0 ? -1 : read(fd, buf + n, cap - n);
        if (ready >= 0 && r < 0 && errno == EINTR)
            continue;
        if (ready == 0 && (r == 0 || (r < 0 && errno == EAGAIN))) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            if (r == 0 && poll(&pfd, 1, 0) == 1)
                break; /* the writer left just now */
            *why = r == 0 ? FIFO_NO_WRITER : FIFO_WRITER_SILENT;
            errno = ETIMEDOUT;
            failed = true;
        } else if (r < 0 && ready > 0 && errno == EAGAIN) {
            continue;
        } else if (r <= 0) {
            failed = r < 0;
            break;
        } else {
            n += (size_t)r;
        }
    }
    if (failed) {
        int e = errno;
        free(buf);
        errno = e;
        return NULL;
    }
    *len = n;
    return buf;
}

/* Whether another process has the regular file <fd> open for writing,
 * asked of the kernel: a read lease is refused (EAGAIN) while any
 * descriptor of the file is open for writing. Taken and given back at
 * once; a writer that opens the file meanwhile waits for the give-back,
 * and the lease's break is told by SIGURG, ignored by default, not SIGIO,
 * which would end the process. 1 written to, 0 not, -1 cannot tell (the
 * file is another user's and sluice has no CAP_LEASE, as under --user; a
 * file system without leases; leases off by sysctl). */
static int open_for_writing(int fd)
{
    if (fcntl(fd, F_SETSIG, SIGURG) != 0)
        return -1;
    if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
        (void)fcntl(fd, F_SETLEASE, F_UNLCK);
        return 0;
    }
    return errno == EAGAIN ? 1 : -1;
}

/* Waits up to <wait_s> for the file <fd> to be open for writing nowhere
 * (the kernel tells: open_for_writing()), in slices of
 * POLICY_STOP_CHECK_MS so that a stop is seen: a policy written in place
 * ("cat new > policy.yaml", an editor that writes over the file) is read
 * once its writer closes it, not between two of its writes, where the
 * rules written so far are valid YAML more often than not, and a policy
 * that lost its deny list or a rule's agents. Returns 0 when no one writes
 * it (or that cannot be told), -1 with errno ETIMEDOUT when a writer kept
 * it open all that time, ECANCELED once policy_load_stop() was called. */
static int wait_for_writers(int fd, unsigned wait_s)
{
    uint64_t deadline = monotonic_ms() + (uint64_t)wait_s * 1000;
    while (open_for_writing(fd) == 1) {
        if (atomic_load(&load_stopping)) {
            errno = ECANCELED;
            return -1;
        }
        if (monotonic_ms() >= deadline) {
            errno = ETIMEDOUT;
            return -1;
        }
        nanosleep(&(struct timespec){.tv_nsec = (long)POLICY_STOP_CHECK_MS * 1000000 / 4}, NULL);
    }
    return 0;
}

/* True when the regular file <fd> holds other bytes than the <len> of
 * <buf>, read again from its start (pread(): the descriptor's offset is
 * the reader's), in slices; a read that fails counts as a change. Bounded
 * by <len>: a file that grows meanwhile differs at its first byte past. */
static bool content_differs(int fd, const char *buf, size_t len)
{
    char slice[4096];
    size_t off = 0;
    for (;;) {
        ssize_t r = pread(fd, slice, sizeof(slice), (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 || off != len;
        if ((size_t)r > len - off || memcmp(slice, buf + off, (size_t)r) != 0)
            return true;
        off += (size_t)r;
    }
}

/* True when the regular file that <fd> reads changed while it was read
 * into the <len> bytes of <buf>: its size or modification time after the
 * read against those fstat() gave before (not the bytes read against the
 * size: a file of /proc, or of a FUSE file system that computes its
 * contents, says 0 or 4096 whatever it holds). An editor or a "cat new >
 * policy.yaml" that writes the file in place while a reload reads it would
 * otherwise load what was there so far: YAML whose end is cut is often
 * still valid, a policy that lost its deny list or a rule's agents.
 * (A writer paused between its writes, before the read, is not seen: the
 * README tells to write another file and rename it over the policy.) */
static bool changed_while_read(int fd, const struct stat *before, const char *buf, size_t len)
{
    struct stat after;
    if (fstat(fd, &after) != 0)
        return true;
    if (after.st_size != before->st_size || after.st_mtim.tv_sec != before->st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != before->st_mtim.tv_nsec)
        return true;
    /* The change time moves too when the file gains or loses a name
     * without a byte of it changing: a new policy renamed over it (mv, as
     * the README asks), a hard link made to it, a rename of it elsewhere
     * (an editor's backup). It moves as well for a writer that put the
     * modification time back (cp -p, touch -d, utimensat()), which the
     * size and that time cannot tell: the bytes are read again and
     * compared with those read. Before, any move of it refused the load,
     * or let through all but a name lost (the link count), both guesses. */
    bool ctime_moved = after.st_ctim.tv_sec != before->st_ctim.tv_sec ||
                       after.st_ctim.tv_nsec != before->st_ctim.tv_nsec;
    return ctime_moved && content_differs(fd, buf, len);
}

struct policy *policy_load(const char *path, struct diag *diag)
{
    return policy_load_flags(path, 0, diag);
}

/* Why a file of <st>'s kind is not read as a policy, or NULL when it is
 * read: a regular file, or a FIFO or pipe (read as its writer writes it).
 * A character device is refused: /dev/zero or /dev/urandom would be read
 * up to the byte cap for nothing, and a terminal no one types into would
 * hold the start, or the reload thread and with it the stop, for ever. */
static const char *unreadable_kind(const struct stat *st)
{
    if (S_ISREG(st->st_mode) || S_ISFIFO(st->st_mode))
        return NULL;
    if (S_ISDIR(st->st_mode))
        return strerror(EISDIR);
    if (S_ISCHR(st->st_mode))
        return "a character device, not a file: a policy is a regular file, a FIFO or a pipe";
    if (S_ISBLK(st->st_mode))
        return "a block device, not a file: a policy is a regular file, a FIFO or a pipe";
    return "not a regular file, a FIFO or a pipe";
}

/* Reads the policy file <fd> (named diag->file, <st> its fstat()) whole into a
 * new buffer the caller frees, its size in *len: a regular file at once,
 * refusing one that changed while it was read, a FIFO as its writer
 * writes it, for a bounded time. Returns NULL after reporting to <diag>. */
static char *read_policy_file(int fd, const struct stat *st, size_t *len, struct diag *diag)
{
    unsigned wait_s = 0;
    int e = 0;
    unsigned fifo_wait_s =
        (unsigned)env_number("SLUICE_TEST_POLICY_FIFO_WAIT_S", FIFO_WAIT_S, FIFO_WAIT_S);
    if (S_ISFIFO(st->st_mode))
        wait_s = fifo_wait_s;
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        e = errno;
    else if (wait_for_writers(fd, fifo_wait_s) != 0)
        e = errno;          /* ETIMEDOUT, or ECANCELED: the stop */
    struct stat seen = *st; /* what a change while it is read is told against */
    if (e == 0 && S_ISREG(st->st_mode) && fstat(fd, &seen) != 0)
        e = errno; /* after the wait: its writer changed it meanwhile */
    if (e == ETIMEDOUT) {
        diag_error(diag, 0, "",
                   "cannot read %s: another process kept it open for writing for %u s (is it "
                   "still being written?); write the new policy to another file in its folder "
                   "and rename it over %s",
                   diag->file, fifo_wait_s, diag->file);
        return NULL;
    }
    enum fifo_silence why = FIFO_READ;
    char *buf = e == 0 ? read_all(fd, wait_s, len, &why) : NULL;
    if (e == 0 && buf == NULL)
        e = errno;
    if (buf != NULL && S_ISREG(st->st_mode) && changed_while_read(fd, &seen, buf, *len)) {
        free(buf);
        diag_error(diag, 0, "",
                   "cannot read %s: it changed while it was read (is it still being written?); "
                   "write the new policy to another file in its folder and rename it over %s",
                   diag->file, diag->file);
        return NULL;
    }
    if (why == FIFO_NO_WRITER)
        diag_error(diag, 0, "", "cannot read %s: a FIFO no one writes to (waited %u s)", diag->file,
                   wait_s);
    else if (why == FIFO_WRITER_SILENT)
        diag_error(diag, 0, "", "cannot read %s: a FIFO whose writer wrote nothing for %u s",
                   diag->file, wait_s);
    else if (buf == NULL && e == ECANCELED)
        diag_error(diag, 0, "",
                   "cannot read %s: the gateway is stopping: it waits no longer for %s", diag->file,
                   S_ISFIFO(st->st_mode) ? "the FIFO's writer"
                                         : "the process that has it open for writing");
    else if (buf == NULL)
        diag_error(diag, 0, "", "cannot read %s: %s", diag->file, strerror(e));
    return buf;
}

struct policy *policy_load_fd(int fd, const char *path, unsigned flags, struct diag *diag)
{
    if (diag->file == NULL)
        diag->file = path;
    struct stat st;
    const char *refused = fstat(fd, &st) != 0 ? strerror(errno) : unreadable_kind(&st);
    if (refused != NULL) {
        diag_error(diag, 0, "", "cannot read %s: %s", diag->file, refused);
        return NULL;
    }
    if (S_ISREG(st.st_mode) && st.st_size > (off_t)POLICY_MAX_BYTES) {
        /* refused unread (a FIFO's reading stops past the cap) */
        diag_error(diag, 0, "",
                   "the policy is %jd bytes, larger than " POLICY_MAX_BYTES_TEXT
                   " (%u bytes), the most sluice loads",
                   (intmax_t)st.st_size, POLICY_MAX_BYTES);
        return NULL;
    }
    size_t len = 0;
    char *buf = read_policy_file(fd, &st, &len, diag);
    if (buf == NULL)
        return NULL;
    atomic_fetch_add(&loads_parsing, 1);
    struct policy *p = NULL;
    if (atomic_load(&load_stopping)) {
        /* A load left at the stop (a reload, the start-up load), whose file
         * system answered at last: the process is exiting, and parsing now
         * would use OpenSSL while exit() may be tearing it down. */
        diag_error(diag, 0, "", "cannot load %s: the gateway is stopping: it is not parsed",
                   diag->file);
    } else {
        p = policy_load_buffer_flags(path, buf, len, flags, diag);
    }
    atomic_fetch_sub(&loads_parsing, 1);
    free(buf);
    /* After the parse: it reads the file system, which may not answer, and
     * a stop waits for a parse (policy_load_stop()), not for this. */
    if (p != NULL)
        policy_check_exec_programs(p, diag);
    return p;
}

int policy_open(const char *path)
{
    /* Not blocked in open() by a FIFO no one writes to: read_all() waits
     * for its writer, a bounded time. (A lease another process holds makes
     * a non-blocking open fail: that wait is bounded by the kernel.) A
     * terminal, refused once open, never becomes the controlling one. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == EWOULDBLOCK)
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    return fd;
}

struct policy *policy_load_flags(const char *path, unsigned flags, struct diag *diag)
{
    if (diag->file == NULL)
        diag->file = path;
    int fd = policy_open(path);
    if (fd < 0) {
        diag_error(diag, 0, "", "cannot read %s: %s", diag->file, strerror(errno));
        return NULL;
    }
    struct policy *p = policy_load_fd(fd, path, flags, diag);
    close(fd);
    return p;
}

void policy_report_load(const struct diag *d, const struct policy *p, const char *prefix)
{
    if (p == NULL) {
        char msg[1024];
        const struct diag_entry *e = diag_first_error(d);
        if (e != NULL)
            diag_format(d, e, msg, sizeof(msg));
        else
            snprintf(msg, sizeof(msg), "%s: cannot load the policy", d->file);
        fprintf(stderr, "%s%s\n", prefix, msg);
    } else if (d->warnings > 0) {
        char text[POLICY_WARNINGS_TEXT];
        diag_format_warnings(d, text, sizeof(text));
        fputs(text, stderr);
    }
}

struct policy *policy_load_reporting(const char *path, unsigned flags, const char *prefix)
{
    struct diag d;
    char *shown = text_shown(path); /* standard error's name of the file */
    diag_init(&d, shown);
    struct policy *p = policy_load_flags(path, flags, &d);
    policy_report_load(&d, p, prefix);
    diag_free(&d);
    free(shown);
    return p;
}
