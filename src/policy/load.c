/* load: SPEC.md's policy YAML -> struct policy, with "file:line: field:
 * message" diagnostics.
 *
 * The file is first turned into a bounded tree (yaml_tree.c). Each section
 * is then read by a small function; every mapping goes through walk_map(),
 * which rejects unknown and duplicate keys and calls one handler per known
 * key, in the table's order (so agents are known before rules name them).
 * Reading goes on after an error so that every problem is reported. */
#include "policy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/index.h"
#include "policy/yaml_tree.h"
#include "util/units.h"
#include "util/xalloc.h"

#define FIELD_MAX            384
#define SHOW_MAX             64
#define KEYS_MAX             16
#define AGENT_ID_MAX         64
#define ENV_NAME_MAX         128
#define TZ_MAX               128
#define ZONEINFO_DIR         "/usr/share/zoneinfo/"
#define PORT_NONE            UINT32_MAX
#define DEFAULT_HEADER_BYTES (32u * 1024)
#define DEFAULT_IDLE_MS      60000u
#define DEFAULT_WARN_DAYS    14

struct load_ctx {
    struct diag *diag;
    struct policy *p;
    char field[FIELD_MAX]; /* the dotted path of the value being read */
    size_t flen;
    char show[2][SHOW_MAX * 4 + 8];
    int show_slot;
    const char **agent_ids; /* sorted ids of the agents section, for lookups */
    size_t nagent_ids;
    unsigned flags; /* enum policy_load_flags */
};

typedef void (*value_fn)(struct load_ctx *c, const struct ynode *v, void *obj);

struct key_handler {
    const char *name;
    value_fn fn;
};

#define NKEYS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- field paths and messages ------------------------------------------ */

__attribute__((format(printf, 2, 3))) static size_t field_push(struct load_ctx *c, const char *fmt,
                                                               ...)
{
    size_t mark = c->flen;
    size_t room = sizeof(c->field) - c->flen;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->field + c->flen, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        c->flen += (size_t)n < room ? (size_t)n : room - 1;
    return mark;
}

static void field_pop(struct load_ctx *c, size_t mark)
{
    c->flen = mark;
    c->field[mark] = '\0';
}

static size_t field_key(struct load_ctx *c, const char *key)
{
    return field_push(c, c->flen > 0 ? ".%s" : "%s", key);
}

/* Hostile text made fit for a message: printable ASCII only, bounded. Two
 * slots rotate so that one message may show two values. */
static const char *show(struct load_ctx *c, const char *s)
{
    char *out = c->show[c->show_slot];
    c->show_slot ^= 1;
    size_t o = 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        if (i == SHOW_MAX) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        out[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    out[o] = '\0';
    return out;
}

__attribute__((format(printf, 3, 4))) static void err(struct load_ctx *c, int line, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    diag_error(c->diag, line, c->field, "%s", msg);
    free(msg);
}

__attribute__((format(printf, 3, 4))) static void warn(struct load_ctx *c, int line,
                                                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    diag_warning(c->diag, line, c->field, "%s", msg);
    free(msg);
}

/* Reports <msg> about the key <key> below the current path. */
static void err_at_key(struct load_ctx *c, const char *key, int line, const char *msg)
{
    size_t m = field_key(c, key);
    err(c, line, "%s", msg);
    field_pop(c, m);
}

/* ---- typed scalars ------------------------------------------------------ */

static int want_list(struct load_ctx *c, const struct ynode *n)
{
    if (n->kind == YNODE_SEQUENCE)
        return 0;
    err(c, n->line, "expected a list");
    return -1;
}

static int want_map(struct load_ctx *c, const struct ynode *n)
{
    if (n->kind == YNODE_MAPPING)
        return 0;
    err(c, n->line, "expected a mapping");
    return -1;
}

static int want_nonempty_list(struct load_ctx *c, const struct ynode *n)
{
    if (want_list(c, n) != 0)
        return -1;
    if (n->count > 0)
        return 0;
    err(c, n->line, "must not be empty");
    return -1;
}

static const char *get_str(struct load_ctx *c, const struct ynode *n)
{
    if (n->kind == YNODE_SCALAR && !ynode_is_null(n))
        return n->str;
    err(c, n->line, "expected a string");
    return NULL;
}

static const char *get_nonempty_str(struct load_ctx *c, const struct ynode *n)
{
    const char *s = get_str(c, n);
    if (s == NULL || *s != '\0')
        return s;
    err(c, n->line, "must not be empty");
    return NULL;
}

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A plain decimal integer within <lo>..<hi>. Returns 0 or -1 (reported). */
static int get_uint(struct load_ctx *c, const struct ynode *n, uint64_t lo, uint64_t hi,
                    uint64_t *out)
{
    if (n->kind != YNODE_SCALAR || ynode_is_null(n)) {
        err(c, n->line, "expected an integer");
        return -1;
    }
    if (n->quoted) {
        err(c, n->line, "expected an integer, not a quoted string");
        return -1;
    }
    uint64_t v;
    if (parse_uint(n->str, UINT64_MAX, &v) != 0) {
        if (all_digits(n->str)) /* only overflow makes digits fail */
            err(c, n->line, "%s is too large (at most %" PRIu64 ")", show(c, n->str), hi);
        else
            err(c, n->line, "expected an integer, got '%s'", show(c, n->str));
        return -1;
    }
    if (v < lo) {
        err(c, n->line, "must be at least %" PRIu64, lo);
        return -1;
    }
    if (v > hi) {
        err(c, n->line, "%" PRIu64 " is too large (at most %" PRIu64 ")", v, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int get_bool(struct load_ctx *c, const struct ynode *n, bool *out)
{
    if (n->kind == YNODE_SCALAR && !n->quoted) {
        if (strcmp(n->str, "true") == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(n->str, "false") == 0) {
            *out = false;
            return 0;
        }
    }
    err(c, n->line, "expected true or false");
    return -1;
}

/* A period; <min_ms> is 0 or 1 ("greater than 0") or a larger floor. */
static int get_period(struct load_ctx *c, const struct ynode *n, uint64_t min_ms, uint64_t *out)
{
    const char *s = get_str(c, n);
    if (s == NULL)
        return -1;
    uint64_t ms;
    if (parse_period_ms(s, &ms) != 0) {
        err(c, n->line, "invalid period '%s' (expected e.g. 30s, 5m, 1h)", show(c, s));
        return -1;
    }
    if (ms < min_ms) {
        if (min_ms == 1)
            err(c, n->line, "must be greater than 0");
        else
            err(c, n->line, "must be at least %" PRIu64 "s", min_ms / 1000);
        return -1;
    }
    *out = ms;
    return 0;
}

/* A size; with <per_second>, an optional "/s" suffix is accepted. */
static int get_size(struct load_ctx *c, const struct ynode *n, bool per_second, uint64_t *out)
{
    const char *s = get_str(c, n);
    if (s == NULL)
        return -1;
    char tmp[64];
    size_t len = n->len;
    if (per_second && len > 2 && strcmp(s + len - 2, "/s") == 0)
        len -= 2;
    if (len < sizeof(tmp)) {
        memcpy(tmp, s, len);
        tmp[len] = '\0';
        if (parse_size(tmp, out) == 0)
            return 0;
    }
    err(c, n->line, "invalid size '%s' (expected e.g. 512KiB, 10MiB%s)", show(c, s),
        per_second ? ", 1MiB/s" : "");
    return -1;
}

/* ---- mappings and lists ------------------------------------------------- */

static void expected_keys(const struct key_handler *keys, size_t nkeys, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < nkeys && o < len; i++) {
        int n = snprintf(out + o, len - o, "%s%s", i ? ", " : "", keys[i].name);
        if (n < 0)
            break;
        o += (size_t)n;
    }
}

/* Checks every key of <map> against <keys>, reports unknown and duplicate
 * ones, then calls the handler of each key present, in table order, with
 * the path extended by the key. Fills <vals> (nkeys entries) with the value
 * nodes found, NULL for absent keys. */
static void walk_map(struct load_ctx *c, const struct ynode *map, const struct key_handler *keys,
                     size_t nkeys, void *obj, const struct ynode **vals)
{
    const struct ynode *kn[KEYS_MAX] = {0};
    for (size_t i = 0; i < nkeys; i++)
        vals[i] = NULL;
    for (const struct ynode *k = ynode_first(map); k != NULL; k = ynode_next(map, k)) {
        const struct ynode *v = ynode_next(map, k);
        if (v == NULL)
            break; /* libyaml always pairs keys with values */
        size_t i = 0;
        while (i < nkeys && !(k->kind == YNODE_SCALAR && strcmp(k->str, keys[i].name) == 0))
            i++;
        if (k->kind != YNODE_SCALAR) {
            err(c, k->line, "expected a string key");
        } else if (i == nkeys) {
            char list[256];
            expected_keys(keys, nkeys, list, sizeof(list));
            err(c, k->line, "unknown key '%s' (expected one of %s)", show(c, k->str), list);
        } else if (kn[i] != NULL) {
            err(c, k->line, "duplicate key '%s' (first at line %d)", keys[i].name, kn[i]->line);
        } else {
            kn[i] = k;
            vals[i] = v;
        }
        k = v;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (vals[i] == NULL || keys[i].fn == NULL)
            continue;
        size_t m = field_key(c, keys[i].name);
        keys[i].fn(c, vals[i], obj);
        field_pop(c, m);
    }
}

/* Requires key <idx> of a walk_map() result; reports it missing at <line>. */
static bool require_key(struct load_ctx *c, const struct ynode **vals, size_t idx,
                        const struct key_handler *keys, int line)
{
    if (vals[idx] != NULL)
        return true;
    err_at_key(c, keys[idx].name, line, "is required");
    return false;
}

/* Parses a CIDR with the messages every section shares. */
static int parse_cidr_node(struct load_ctx *c, const struct ynode *n, const char *s,
                           struct cidr *out)
{
    int rc = cidr_parse(s, out);
    if (rc == 0)
        return 0;
    if (rc == -2)
        err(c, n->line, "invalid CIDR '%s': host bits set below the prefix", show(c, s));
    else
        err(c, n->line, "invalid CIDR '%s'", show(c, s));
    return -1;
}

/* Reads a list of CIDRs into a new array; the word <word> (when not NULL)
 * sets <*saw_word> instead. */
static void cidr_list(struct load_ctx *c, const struct ynode *list, const char *word,
                      bool *saw_word, struct cidr **out, size_t *nout)
{
    free(*out);
    *out = xcalloc(list->count, sizeof(**out));
    *nout = 0;
    size_t i = 0;
    for (const struct ynode *it = ynode_first(list); it != NULL; it = ynode_next(list, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        const char *s = get_str(c, it);
        if (s != NULL && word != NULL && strcmp(s, word) == 0)
            *saw_word = true;
        else if (s != NULL && parse_cidr_node(c, it, s, &(*out)[*nout]) == 0)
            (*nout)++;
        field_pop(c, m);
    }
}

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? xstrdup(s) : NULL;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool valid_agent_id(const char *s)
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

/* ---- agents ------------------------------------------------------------- */

static void agent_id(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    if (!valid_agent_id(s)) {
        err(c, v->line, "invalid agent id '%s' (use 1-64 of a-z, 0-9, '.', '_', '-')", show(c, s));
        return;
    }
    set_str(&a->id, s);
}

static void agent_sources(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    if (want_nonempty_list(c, v) == 0)
        cidr_list(c, v, "unix", &a->unix_source, &a->sources, &a->nsources);
}

static bool valid_env_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > ENV_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return false;
    }
    return true;
}

static void agent_token(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    if (*s == '\0') {
        err(c, v->line, "must not be empty (write env:NAME)");
        return;
    }
    if (strncmp(s, "env:", 4) != 0) {
        /* never echo what may be a secret */
        err(c, v->line, "write the secret as env:NAME, never in the policy file");
        return;
    }
    const char *name = s + 4;
    if (!valid_env_name(name)) {
        err(c, v->line, "invalid environment variable name '%s'", show(c, name));
        return;
    }
    const char *value = getenv(name);
    if ((value == NULL || *value == '\0') && (c->flags & POLICY_LOAD_SECRETS_OPTIONAL)) {
        warn(c, v->line, "environment variable %s is %s here; serve refuses to start without it",
             name, value == NULL ? "not set" : "empty");
        set_str(&a->token_ref, s);
        return;
    }
    if (value == NULL) {
        err(c, v->line, "environment variable %s is not set", name);
        return;
    }
    if (*value == '\0') {
        err(c, v->line, "environment variable %s is empty", name);
        return;
    }
    set_str(&a->token_ref, s);
    set_str(&a->token, value);
}

static void agent_mode(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct agent *a = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    if (strcmp(s, "enforce") == 0)
        a->mode = AGENT_ENFORCE;
    else if (strcmp(s, "report") == 0)
        a->mode = AGENT_REPORT;
    else
        err(c, v->line, "unknown mode '%s' (expected enforce or report)", show(c, s));
}

static const struct key_handler agent_keys[] = {
    {"id", agent_id},
    {"sources", agent_sources},
    {"token", agent_token},
    {"mode", agent_mode},
};

static void agent_item(struct load_ctx *c, const struct ynode *item, struct agent *a)
{
    a->line = item->line;
    if (want_map(c, item) != 0)
        return;
    const struct ynode *vals[NKEYS(agent_keys)];
    walk_map(c, item, agent_keys, NKEYS(agent_keys), a, vals);
    require_key(c, vals, 0, agent_keys, item->line);
    require_key(c, vals, 1, agent_keys, item->line);
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
            size_t m = field_push(c, "[%zu].id", (size_t)(v[i] - p->agents));
            err(c, v[i]->line, "duplicate agent id '%s' (first at line %d)", v[i]->id,
                v[first]->line);
            field_pop(c, m);
            continue;
        }
        first = i;
        c->agent_ids[c->nagent_ids++] = v[i]->id;
    }
    free(v);
}

static void sec_agents(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    if (want_list(c, v) != 0)
        return;
    p->agents = xcalloc(v->count, sizeof(*p->agents));
    p->nagents = v->count;
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        agent_item(c, it, &p->agents[i]);
        field_pop(c, m);
    }
    agents_index(c);
}

static bool agent_defined(const struct load_ctx *c, const char *id)
{
    if (c->nagent_ids == 0)
        return false;
    return bsearch(&id, c->agent_ids, c->nagent_ids, sizeof(*c->agent_ids), cmp_str_ptr) != NULL;
}

/* ---- rate specs (rules and limits) -------------------------------------- */

static void rate_requests(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    get_uint(c, v, 0, UINT64_MAX, &r->requests);
}

static void rate_per(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    get_period(c, v, 1, &r->per_ms);
}

static void rate_burst(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    get_uint(c, v, 0, UINT64_MAX, &r->burst);
}

static void rate_bandwidth(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    get_size(c, v, true, &r->bandwidth);
}

static const struct key_handler rate_keys[] = {
    {"requests", rate_requests},
    {"per", rate_per},
    {"burst", rate_burst},
    {"bandwidth", rate_bandwidth},
};

static void rate_spec(struct load_ctx *c, const struct ynode *v, struct rate_spec *r)
{
    if (want_map(c, v) != 0)
        return;
    r->per_ms = 1000;
    r->set = true;
    r->line = v->line;
    const struct ynode *vals[NKEYS(rate_keys)];
    walk_map(c, v, rate_keys, NKEYS(rate_keys), r, vals);
    if (vals[0] == NULL && vals[3] == NULL)
        err(c, v->line, "needs requests or bandwidth");
}

/* ---- rules -------------------------------------------------------------- */

static void rule_host(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    struct host_pattern hp;
    const char *why = NULL;
    if (host_pattern_parse(s, &hp, &why) != 0) {
        err(c, v->line, "invalid host pattern '%s': %s", show(c, s), why ? why : "invalid");
        return;
    }
    r->kind = hp.kind == PATTERN_WILDCARD ? RULE_WILDCARD : RULE_EXACT;
    free(r->pattern);
    r->pattern = hp.kind == PATTERN_WILDCARD ? xasprintf("*.%s", hp.name) : xstrdup(hp.name);
    set_str(&r->host, hp.name);
}

static void rule_cidr(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = get_str(c, v);
    if (s == NULL || parse_cidr_node(c, v, s, &r->cidr) != 0)
        return;
    char buf[IPADDR_STRLEN + 8];
    r->kind = RULE_CIDR;
    set_str(&r->pattern, cidr_format(&r->cidr, buf, sizeof(buf)));
    set_str(&r->host, NULL);
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
    if (want_nonempty_list(c, v) != 0)
        return;
    struct port_item *items = xcalloc(v->count, sizeof(*items));
    size_t n = 0, i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        uint64_t port;
        if (get_uint(c, it, 0, UINT64_MAX, &port) == 0) {
            if (port < 1 || port > 65535)
                err(c, it->line, "port %" PRIu64 " is outside 1-65535", port);
            else
                items[n++] = (struct port_item){(uint16_t)port, it->line, i};
        }
        field_pop(c, m);
    }
    qsort(items, n, sizeof(*items), cmp_port_item);
    free(r->ports);
    r->ports = xcalloc(n, sizeof(*r->ports));
    r->nports = 0;
    for (size_t k = 0; k < n; k++) {
        if (k > 0 && items[k].port == items[k - 1].port) {
            size_t m = field_push(c, "[%zu]", items[k].pos);
            warn(c, items[k].line, "port %u is listed twice", (unsigned)items[k].port);
            field_pop(c, m);
            continue;
        }
        r->ports[r->nports++] = items[k].port;
    }
    free(items);
}

static void rule_tier(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    uint64_t t;
    if (get_uint(c, v, 0, UINT64_MAX, &t) != 0)
        return;
    if (t > TIER_3) {
        err(c, v->line, "tier %" PRIu64 " is outside 0-3", t);
        return;
    }
    r->tier = (enum tier)t;
}

static void rule_methods(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    if (want_nonempty_list(c, v) != 0)
        return;
    unsigned mask = 0;
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        const char *s = get_str(c, it);
        unsigned bit = s ? method_bit(s) : 0;
        if (bit == METHOD_CONNECT)
            err(c, it->line,
                "CONNECT is decided by the host rule; leave methods out to allow tunnels");
        else if (bit == METHOD_OTHER)
            err(c, it->line,
                "unknown method '%s' (expected GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS or "
                "TRACE, in upper case)",
                show(c, s));
        else if (bit != 0 && (mask & bit) != 0)
            warn(c, it->line, "method %s is listed twice", s);
        mask |= bit == METHOD_CONNECT || bit == METHOD_OTHER ? 0 : bit;
        field_pop(c, m);
    }
    r->methods = mask;
}

static void rule_owner(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = get_nonempty_str(c, v);
    if (s != NULL)
        set_str(&r->owner, s);
}

static void rule_expires(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    if (parse_date(s, &r->expires) != 0) {
        err(c, v->line, "invalid date '%s' (expected YYYY-MM-DD)", show(c, s));
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
    const char *s = get_str(c, it);
    if (s == NULL)
        return 0;
    if (!valid_agent_id(s)) {
        err(c, it->line, "invalid agent id '%s' (use 1-64 of a-z, 0-9, '.', '_', '-')", show(c, s));
        return 0;
    }
    if (!agent_defined(c, s))
        warn(c, it->line,
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
    if (want_nonempty_list(c, v) != 0)
        return;
    struct agent_ref *refs = xcalloc(v->count, sizeof(*refs));
    size_t n = 0, i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        refs[n].pos = i;
        n += (size_t)rule_agent_item(c, it, &refs[n]);
        field_pop(c, m);
    }
    qsort(refs, n, sizeof(*refs), cmp_agent_ref);
    r->agents = xcalloc(n, sizeof(*r->agents));
    for (size_t k = 0; k < n; k++) {
        if (k > 0 && strcmp(refs[k].id, refs[k - 1].id) == 0) {
            size_t m = field_push(c, "[%zu]", refs[k].pos);
            warn(c, refs[k].line, "agent '%s' is listed twice", refs[k].id);
            field_pop(c, m);
            continue;
        }
        r->agents[r->nagents++] = xstrdup(refs[k].id);
    }
    free(refs);
}

static void rule_rate(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rule *r = obj;
    rate_spec(c, v, &r->rate);
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
    if (want_map(c, item) != 0)
        return false;
    size_t errors = c->diag->errors;
    const struct ynode *vals[NKEYS(rule_keys)];
    walk_map(c, item, rule_keys, NKEYS(rule_keys), r, vals);
    if (vals[RK_HOST] != NULL && vals[RK_CIDR] != NULL)
        err(c, item->line, "give exactly one of host and cidr, not both");
    else if (vals[RK_HOST] == NULL && vals[RK_CIDR] == NULL)
        err(c, item->line, "needs a host or a cidr");
    if (vals[RK_PORTS] == NULL) {
        r->ports = xcalloc(2, sizeof(*r->ports));
        r->ports[0] = 80;
        r->ports[1] = 443;
        r->nports = 2;
    }
    require_key(c, vals, RK_TIER, rule_keys, item->line);
    if (r->tier == TIER_3 && vals[RK_OWNER] == NULL)
        err_at_key(c, "owner", item->line,
                   "tier-3 rule needs an owner (the person who signs for it)");
    if (r->tier == TIER_3 && vals[RK_EXPIRES] == NULL)
        err_at_key(c, "expires", item->line, "tier-3 rule needs an expiry date");
    return c->diag->errors == errors;
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
            size_t m = field_push(c, "[%zu]", r->index);
            err(c, r->line,
                "duplicates rules[%" PRIu32 "] (line %d): same host, methods and agents, and "
                "overlapping ports",
                first, c->p->rules[first].line);
            field_pop(c, m);
        }
        for (size_t k = 0; k < r->nports; k++)
            if (owner[r->ports[k]] == PORT_NONE)
                owner[r->ports[k]] = (uint32_t)r->index;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < g[i]->nports; k++)
            owner[g[i]->ports[k]] = PORT_NONE;
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
    free(owner);
    free(v);
}

static void sec_rules(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    if (want_list(c, v) != 0)
        return;
    if (v->count > POLICY_MAX_RULES) {
        err(c, v->line, "too many rules (at most %u)", POLICY_MAX_RULES);
        return;
    }
    if (v->count == 0)
        warn(c, v->line, "no rules: every request will be denied");
    p->rules = xcalloc(v->count, sizeof(*p->rules));
    p->nrules = v->count;
    bool *ok = xcalloc(v->count, sizeof(*ok));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        p->rules[i].index = i;
        ok[i] = rule_item(c, it, &p->rules[i]);
        field_pop(c, m);
    }
    rules_duplicates(c, ok);
    free(ok);
}

/* ---- deny, network ------------------------------------------------------ */

static void sec_deny(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    if (want_list(c, v) != 0)
        return;
    p->deny = xcalloc(v->count, sizeof(*p->deny));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        const char *s = get_str(c, it);
        const char *why = NULL;
        struct deny_entry *d = &p->deny[p->ndeny];
        if (s != NULL && host_pattern_parse(s, &d->pattern, &why) != 0)
            err(c, it->line, "invalid host pattern '%s': %s", show(c, s), why ? why : "invalid");
        else if (s != NULL)
            p->deny[p->ndeny++].line = it->line;
        field_pop(c, m);
    }
}

static void net_deny_ranges(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct network_cfg *n = obj;
    if (v->kind == YNODE_SCALAR && strcmp(v->str, "default") == 0) {
        n->default_deny_ranges = true;
        return;
    }
    if (v->kind != YNODE_SEQUENCE) {
        err(c, v->line, "expected \"default\" or a list of CIDRs");
        return;
    }
    n->default_deny_ranges = false;
    cidr_list(c, v, "default", &n->default_deny_ranges, &n->deny_ranges, &n->ndeny_ranges);
}

static void net_allow_ranges(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct network_cfg *n = obj;
    if (want_list(c, v) == 0)
        cidr_list(c, v, NULL, NULL, &n->allow_ranges, &n->nallow_ranges);
}

static const struct key_handler network_keys[] = {
    {"deny_ranges", net_deny_ranges},
    {"allow_ranges", net_allow_ranges},
};

static void sec_network(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    const struct ynode *vals[NKEYS(network_keys)];
    if (want_map(c, v) == 0)
        walk_map(c, v, network_keys, NKEYS(network_keys), &p->network, vals);
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
    return all_digits(s) && parse_uint(s, 65535, &port) == 0 && port >= 1;
}

/* "IP", "IPv4:PORT" or "[IPv6]:PORT". */
static bool valid_dns_server(const char *s)
{
    size_t n = strlen(s);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        return close != NULL && ip_text(s + 1, (size_t)(close - s - 1), true, NULL) &&
               close[1] == ':' && port_text(close + 2);
    }
    const char *colon = strchr(s, ':');
    if (colon == NULL)
        return ip_text(s, n, false, NULL);
    if (strchr(colon + 1, ':') != NULL)
        return ip_text(s, n, true, NULL);
    return ip_text(s, (size_t)(colon - s), false, NULL) && port_text(colon + 1);
}

static void dns_servers(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct dns_cfg *d = obj;
    if (want_list(c, v) != 0)
        return;
    d->servers = xcalloc(v->count, sizeof(*d->servers));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        const char *s = get_str(c, it);
        if (s != NULL && !valid_dns_server(s))
            err(c, it->line, "invalid DNS server '%s' (expected IP, IP:PORT or [IPv6]:PORT)",
                show(c, s));
        else if (s != NULL)
            d->servers[d->nservers++] = xstrdup(s);
        field_pop(c, m);
    }
}

/* One "name: IP" entry of dns.static. Returns 1 when <out> was filled. */
static int dns_static_entry(struct load_ctx *c, const struct ynode *k, const struct ynode *v,
                            struct dns_static *out)
{
    struct host h;
    const char *why = NULL;
    if (host_normalise(k->str, k->len, &h, &why) != 0) {
        err(c, k->line, "invalid name '%s': %s", show(c, k->str), why ? why : "invalid");
        return 0;
    }
    if (h.kind != HOST_NAME) {
        err(c, k->line, "'%s' is an IP address, not a name", show(c, k->str));
        return 0;
    }
    const char *s = get_str(c, v);
    if (s == NULL)
        return 0;
    char canon[IPADDR_STRLEN];
    bool v6 = strchr(s, ':') != NULL;
    if (!ip_text(s, v->len, v6, &out->addr) ||
        strcmp(ipaddr_format(&out->addr, canon, sizeof(canon)), s) != 0) {
        err(c, v->line, "invalid IP address '%s' (write it canonically, e.g. 127.0.0.2 or ::1)",
            show(c, s));
        return 0;
    }
    out->name = xstrdup(h.name);
    out->line = k->line;
    return 1;
}

static int cmp_static(const void *a, const void *b)
{
    const struct dns_static *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r != 0 ? r : (x->line < y->line ? -1 : x->line > y->line);
}

/* Sorts dns.static by name (so lookups may bsearch) and drops repeats. */
static void dns_static_dedup(struct load_ctx *c, struct dns_cfg *d)
{
    qsort(d->statics, d->nstatics, sizeof(*d->statics), cmp_static);
    size_t out = 0, first = 0;
    for (size_t i = 0; i < d->nstatics; i++) {
        if (i > 0 && strcmp(d->statics[i].name, d->statics[first].name) == 0) {
            size_t m = field_push(c, ".%s", d->statics[i].name);
            err(c, d->statics[i].line, "duplicate key '%s' (first at line %d)", d->statics[i].name,
                d->statics[first].line);
            field_pop(c, m);
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
    if (want_map(c, v) != 0)
        return;
    d->statics = xcalloc(v->count / 2, sizeof(*d->statics));
    for (const struct ynode *k = ynode_first(v); k != NULL; k = ynode_next(v, k)) {
        const struct ynode *val = ynode_next(v, k);
        if (val == NULL)
            break;
        if (k->kind != YNODE_SCALAR) {
            err(c, k->line, "expected a string key");
        } else {
            size_t m = field_push(c, ".%s", show(c, k->str));
            d->nstatics += (size_t)dns_static_entry(c, k, val, &d->statics[d->nstatics]);
            field_pop(c, m);
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
    if (want_map(c, v) == 0)
        walk_map(c, v, dns_keys, NKEYS(dns_keys), &p->dns, vals);
}

/* ---- limits ------------------------------------------------------------- */

static void lim_rate(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    rate_spec(c, v, &l->rate);
}

static void lim_max_conn(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    uint64_t n;
    if (get_uint(c, v, 1, UINT32_MAX, &n) == 0)
        l->max_connections_per_agent = (uint32_t)n;
}

static void lim_quarantine(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    get_period(c, v, 0, &l->quarantine_ms);
}

static void lim_header_bytes(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    uint64_t n;
    if (get_size(c, v, false, &n) != 0)
        return;
    if (n < 1024 || n > 1024 * 1024) {
        err(c, v->line, "%s is outside 1KiB-1MiB", show(c, v->str));
        return;
    }
    l->header_bytes = n;
}

static void lim_idle_timeout(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    get_period(c, v, 1000, &l->idle_timeout_ms);
}

static const struct key_handler limits_keys[] = {
    {"rate", lim_rate},
    {"max_connections_per_agent", lim_max_conn},
    {"quarantine", lim_quarantine},
    {"header_bytes", lim_header_bytes},
    {"idle_timeout", lim_idle_timeout},
};

static void sec_limits(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    const struct ynode *vals[NKEYS(limits_keys)];
    if (want_map(c, v) == 0)
        walk_map(c, v, limits_keys, NKEYS(limits_keys), &p->limits, vals);
}

/* ---- alerts ------------------------------------------------------------- */

static void th_max_count(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct threshold *t = obj;
    get_uint(c, v, 1, UINT64_MAX, &t->max);
}

static void th_max_bytes(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct threshold *t = obj;
    uint64_t n;
    if (get_size(c, v, false, &n) != 0)
        return;
    if (n == 0) {
        err(c, v->line, "must be at least 1B");
        return;
    }
    t->max = n;
}

static void th_per(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct threshold *t = obj;
    get_period(c, v, 1, &t->per_ms);
}

static const struct key_handler count_keys[] = {{"max", th_max_count}, {"per", th_per}};
static const struct key_handler bytes_keys[] = {{"max", th_max_bytes}, {"per", th_per}};

static void threshold(struct load_ctx *c, const struct ynode *v, struct threshold *t, bool bytes)
{
    if (want_map(c, v) != 0)
        return;
    const struct key_handler *keys = bytes ? bytes_keys : count_keys;
    const struct ynode *vals[2];
    t->per_ms = 60000;
    t->line = v->line;
    walk_map(c, v, keys, 2, t, vals);
    if (require_key(c, vals, 0, keys, v->line))
        t->set = true;
}

static void al_first_contact(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = obj;
    get_bool(c, v, &a->first_contact);
}

static void al_write_burst(struct load_ctx *c, const struct ynode *v, void *obj)
{
    threshold(c, v, &((struct alerts_cfg *)obj)->write_burst, false);
}

static void al_upload_bytes(struct load_ctx *c, const struct ynode *v, void *obj)
{
    threshold(c, v, &((struct alerts_cfg *)obj)->upload_bytes, true);
}

static void al_denied_burst(struct load_ctx *c, const struct ynode *v, void *obj)
{
    threshold(c, v, &((struct alerts_cfg *)obj)->denied_burst, false);
}

static bool valid_tz(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > TZ_MAX || s[0] == '/' || strstr(s, "..") != NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '/' || ch == '_' || ch == '+' || ch == '-'))
            return false;
    }
    return true;
}

static void oh_tz(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct off_hours_cfg *o = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    if (strcmp(s, "UTC") != 0) {
        if (!valid_tz(s)) {
            err(c, v->line, "invalid time zone '%s'", show(c, s));
            return;
        }
        char path[sizeof(ZONEINFO_DIR) + TZ_MAX];
        struct stat st;
        snprintf(path, sizeof(path), "%s%s", ZONEINFO_DIR, s);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            err(c, v->line, "unknown time zone '%s' (no such file under %s)", s, ZONEINFO_DIR);
            return;
        }
    }
    set_str(&o->tz, s);
}

/* "HH:MM" at <s>; "24:00" only when <end>. Returns minutes or -1. */
static int hhmm(const char *s, bool end)
{
    for (int i = 0; i < 5; i++)
        if (i == 2 ? s[i] != ':' : (s[i] < '0' || s[i] > '9'))
            return -1;
    int h = (s[0] - '0') * 10 + (s[1] - '0');
    int m = (s[3] - '0') * 10 + (s[4] - '0');
    if (m > 59 || h > 24 || (h == 24 && (!end || m != 0)))
        return -1;
    return h * 60 + m;
}

static void oh_hours(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct off_hours_cfg *o = obj;
    const char *s = get_str(c, v);
    if (s == NULL)
        return;
    int start = -1, end = -1;
    if (v->len == 11 && s[5] == '-') {
        start = hhmm(s, false);
        end = hhmm(s + 6, true);
    }
    if (start < 0 || end < 0) {
        err(c, v->line, "invalid hours '%s' (expected HH:MM-HH:MM, e.g. 08:00-19:00)", show(c, s));
        return;
    }
    if (start == end) {
        err(c, v->line, "start and end of '%s' are the same", s);
        return;
    }
    o->start_min = start;
    o->end_min = end;
}

static int day_index(const char *s, size_t len)
{
    static const char *const names[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
    for (int i = 0; i < 7; i++)
        if (len == 3 && memcmp(s, names[i], 3) == 0)
            return i;
    return -1;
}

/* "Mon", "Mon-Fri" (may wrap, "Fri-Mon"), or a comma list of those.
 * Returns the mask, or 0 when <s> is not valid. */
static uint8_t days_mask(const char *s)
{
    uint8_t mask = 0;
    while (true) {
        while (*s == ' ')
            s++;
        size_t len = strcspn(s, ",");
        while (len > 0 && s[len - 1] == ' ')
            len--;
        int a = day_index(s, len < 3 ? len : 3), b = a;
        if (len == 7 && s[3] == '-')
            b = day_index(s + 4, 3);
        else if (len != 3)
            a = -1;
        if (a < 0 || b < 0)
            return 0;
        for (int d = a;; d = (d + 1) % 7) {
            mask |= (uint8_t)(1u << d);
            if (d == b)
                break;
        }
        s += strcspn(s, ",");
        if (*s == '\0')
            return mask;
        s++;
    }
}

static void oh_days(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct off_hours_cfg *o = obj;
    if (v->kind == YNODE_SCALAR && !ynode_is_null(v)) {
        o->days_mask = days_mask(v->str);
        if (o->days_mask == 0)
            err(c, v->line,
                "invalid days '%s' (expected e.g. Mon-Fri, Mon,Wed,Fri or a list of Mon..Sun)",
                show(c, v->str));
        return;
    }
    if (want_nonempty_list(c, v) != 0)
        return;
    size_t i = 0;
    o->days_mask = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        const char *s = get_str(c, it);
        uint8_t d = s ? days_mask(s) : 0;
        if (s != NULL && d == 0)
            err(c, it->line, "invalid day '%s' (expected Mon, Tue, Wed, Thu, Fri, Sat or Sun)",
                show(c, s));
        o->days_mask |= d;
        field_pop(c, m);
    }
}

static const struct key_handler off_hours_keys[] = {
    {"tz", oh_tz},
    {"hours", oh_hours},
    {"days", oh_days},
};

static void al_off_hours(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct off_hours_cfg *o = &((struct alerts_cfg *)obj)->off_hours;
    if (want_map(c, v) != 0)
        return;
    const struct ynode *vals[NKEYS(off_hours_keys)];
    o->line = v->line;
    o->days_mask = 0x1f; /* Mon-Fri unless days says otherwise */
    walk_map(c, v, off_hours_keys, NKEYS(off_hours_keys), o, vals);
    if (o->tz == NULL)
        o->tz = xstrdup("UTC");
    if (require_key(c, vals, 1, off_hours_keys, v->line))
        o->set = true;
}

static void bl_factor(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = obj;
    /* digits, optionally one '.' and digits: no signs, exponents, inf or nan */
    const char *s = v->kind == YNODE_SCALAR && !v->quoted ? v->str : "";
    size_t int_digits = strspn(s, "0123456789");
    size_t frac = s[int_digits] == '.' ? strspn(s + int_digits + 1, "0123456789") : 0;
    size_t len = int_digits + (s[int_digits] == '.' ? 1 + frac : 0);
    if (int_digits == 0 || int_digits > 9 || len != strlen(s) ||
        (s[int_digits] == '.' && frac == 0)) {
        err(c, v->line, "expected a number such as 4 or 2.5");
        return;
    }
    double f = strtod(s, NULL);
    if (!(f > 1.0)) {
        err(c, v->line, "must be greater than 1");
        return;
    }
    b->factor = f;
}

static void bl_floor(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = obj;
    get_uint(c, v, 0, UINT64_MAX, &b->floor);
}

static void bl_learn(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = obj;
    get_period(c, v, 1, &b->learn_ms);
}

static const struct key_handler baseline_keys[] = {
    {"factor", bl_factor},
    {"floor", bl_floor},
    {"learn", bl_learn},
};

static void al_baseline(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = &((struct alerts_cfg *)obj)->baseline;
    if (want_map(c, v) != 0)
        return;
    const struct ynode *vals[NKEYS(baseline_keys)];
    b->line = v->line;
    b->learn_ms = 24 * 3600 * 1000;
    walk_map(c, v, baseline_keys, NKEYS(baseline_keys), b, vals);
    if (require_key(c, vals, 0, baseline_keys, v->line))
        b->set = true;
}

static void al_expiry_warn_days(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = obj;
    uint64_t n;
    if (get_uint(c, v, 0, 3650, &n) != 0)
        return;
    a->expiry_warn_days = (int)n;
    a->expiry_warn_days_set = true;
}

static bool has_space_or_control(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* One sink: a single-key mapping {exec: /path} or {webhook: URL}.
 * Returns 1 when <out> was filled. */
static int sink_item(struct load_ctx *c, const struct ynode *it, struct sink *out)
{
    const struct ynode *k = ynode_first(it);
    if (it->kind != YNODE_MAPPING || it->count != 2 || k->kind != YNODE_SCALAR) {
        err(c, it->line, "expected a mapping with one key, exec or webhook");
        return 0;
    }
    const struct ynode *v = ynode_next(it, k);
    bool exec = strcmp(k->str, "exec") == 0;
    if (!exec && strcmp(k->str, "webhook") != 0) {
        err(c, k->line, "unknown key '%s' (expected one of exec, webhook)", show(c, k->str));
        return 0;
    }
    const char *s = get_str(c, v);
    if (s == NULL)
        return 0;
    if (exec && (s[0] != '/' || has_space_or_control(s))) {
        err(c, v->line, "exec needs an absolute path, got '%s'", show(c, s));
        return 0;
    }
    size_t scheme = strncmp(s, "http://", 7) == 0 ? 7 : strncmp(s, "https://", 8) == 0 ? 8 : 0;
    if (!exec &&
        (scheme == 0 || s[scheme] == '\0' || s[scheme] == '/' || has_space_or_control(s))) {
        err(c, v->line, "webhook needs an http:// or https:// URL, got '%s'", show(c, s));
        return 0;
    }
    out->kind = exec ? SINK_EXEC : SINK_WEBHOOK;
    out->target = xstrdup(s);
    out->line = it->line;
    return 1;
}

static void al_sinks(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = obj;
    if (want_list(c, v) != 0)
        return;
    a->sinks = xcalloc(v->count, sizeof(*a->sinks));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = field_push(c, "[%zu]", i);
        a->nsinks += (size_t)sink_item(c, it, &a->sinks[a->nsinks]);
        field_pop(c, m);
    }
}

static const struct key_handler alerts_keys[] = {
    {"first_contact", al_first_contact},
    {"write_burst", al_write_burst},
    {"upload_bytes", al_upload_bytes},
    {"denied_burst", al_denied_burst},
    {"off_hours", al_off_hours},
    {"baseline", al_baseline},
    {"expiry_warn_days", al_expiry_warn_days},
    {"sinks", al_sinks},
};

static void sec_alerts(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = &((struct policy *)obj)->alerts;
    a->present = true;
    a->expiry_warn_days = DEFAULT_WARN_DAYS;
    const struct ynode *vals[NKEYS(alerts_keys)];
    if (want_map(c, v) == 0)
        walk_map(c, v, alerts_keys, NKEYS(alerts_keys), a, vals);
}

/* ---- the whole file ----------------------------------------------------- */

static void sec_version(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    uint64_t n;
    if (get_uint(c, v, 0, UINT64_MAX, &n) != 0)
        return;
    if (n != 1) {
        err(c, v->line, "unsupported version %" PRIu64 " (this sluice reads version 1)", n);
        return;
    }
    p->version = 1;
}

/* In this order: agents are known before rules name them. */
static const struct key_handler root_keys[] = {
    {"version", sec_version}, {"agents", sec_agents},   {"rules", sec_rules},
    {"deny", sec_deny},       {"network", sec_network}, {"dns", sec_dns},
    {"limits", sec_limits},   {"alerts", sec_alerts},
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

static void load_root(struct load_ctx *c, const struct ynode *root)
{
    if (root == NULL || ynode_is_null(root)) {
        err(c, 0, "the policy is empty (expected a mapping with version: 1)");
        return;
    }
    if (want_map(c, root) != 0)
        return;
    const struct ynode *vals[NKEYS(root_keys)];
    walk_map(c, root, root_keys, NKEYS(root_keys), c->p, vals);
    require_key(c, vals, 0, root_keys, root->line);
    if (vals[2] == NULL) {
        size_t m = field_key(c, "rules");
        warn(c, root->line, "no rules: every request will be denied");
        field_pop(c, m);
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
        diag_error(diag, 0, "", "the policy is larger than %u bytes", POLICY_MAX_BYTES);
        return NULL;
    }
    struct ytree t;
    if (ytree_parse(&t, buf, len, POLICY_MAX_DEPTH, diag) != 0) {
        ytree_free(&t);
        return NULL;
    }
    c.p = policy_new(name);
    load_root(&c, ytree_root(&t));
    ytree_free(&t);
    free(c.agent_ids);
    if (!diag_has_errors(diag) && policy_index_build(c.p) != 0)
        diag_error(diag, 0, "", "out of memory while indexing the policy");
    if (diag_has_errors(diag)) {
        policy_free(c.p);
        return NULL;
    }
    return c.p;
}

/* Reads at most POLICY_MAX_BYTES + 1 bytes of <fd> into a new buffer. */
static char *read_all(int fd, size_t *len)
{
    size_t cap = 64 * 1024, n = 0;
    char *buf = xmalloc(cap);
    while (n <= POLICY_MAX_BYTES) {
        if (n == cap) {
            cap *= 2;
            buf = xreallocarray(buf, cap, 1);
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *len = n;
    return buf;
}

struct policy *policy_load(const char *path, struct diag *diag)
{
    return policy_load_flags(path, 0, diag);
}

struct policy *policy_load_flags(const char *path, unsigned flags, struct diag *diag)
{
    if (diag->file == NULL)
        diag->file = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int e = 0;
    if (fd < 0)
        e = errno;
    else if (fstat(fd, &st) != 0)
        e = errno;
    else if (S_ISDIR(st.st_mode))
        e = EISDIR;
    size_t len = 0;
    char *buf = e == 0 ? read_all(fd, &len) : NULL;
    if (e == 0 && buf == NULL)
        e = errno;
    if (fd >= 0)
        close(fd);
    if (e != 0) {
        diag_error(diag, 0, "", "cannot read %s: %s", path, strerror(e));
        return NULL;
    }
    struct policy *p = policy_load_buffer_flags(path, buf, len, flags, diag);
    free(buf);
    return p;
}
