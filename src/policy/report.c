/* report: the audit on paper that `sluice check` prints (see report.h).
 *
 * Written as it is made: a rule's JSON is built when the rule is written
 * and freed once it is, in the grant list and in every reach list it is
 * in, so the report holds one rule at a time whatever the policy's size.
 * Built whole first, one jansson object per rule shared by the reach
 * lists, it took a policy of 720,000 rules (16 MiB, the most a policy may
 * be) to 1.5 GB; a CI check of a big policy should not need a gigabyte. */
#include "policy/report.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/index.h"
#include "policy/lint.h"
#include "policy/policy.h"
#include "util/env.h"
#include "util/units.h"
#include "util/text_json.h"
#include "util/xalloc.h"

/* One finding as the report lists it: file, line, field, message and the
 * whole text. */
static json_t *finding_json(const struct diag *d, const struct diag_entry *e)
{
    const char *file = d->file ? d->file : "-";
    /* The whole text, however long: a fixed buffer could cut it in the
     * middle of a UTF-8 character (a long owner's name). */
    size_t room = strlen(file) + strlen(e->field) + strlen(e->message) + 32;
    char *text = xmalloc(room);
    diag_format(d, e, text, room);
    json_t *o = json_object();
    json_object_set_new(o, "file", text_json(file));
    json_object_set_new(o, "line", json_integer(e->line));
    json_object_set_new(o, "field", text_json(e->field));
    json_object_set_new(o, "message", text_json(e->message));
    json_object_set_new(o, "text", text_json(text));
    free(text);
    return o;
}

static json_t *ports_json(const struct rule *r)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < r->nports; i++)
        json_array_append_new(arr, json_integer(r->ports[i]));
    return arr;
}

static json_t *methods_json(const struct rule *r)
{
    if (r->methods == 0)
        return json_null();
    json_t *arr = json_array();
    for (unsigned bit = 1; bit <= METHOD_OTHER; bit <<= 1)
        if (r->methods & bit)
            json_array_append_new(arr, json_string(method_name(bit)));
    return arr;
}

static json_t *strings_json(char *const *v, size_t n)
{
    if (n == 0)
        return json_null();
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_string(v[i]));
    return arr;
}

static json_t *date_json(const struct rule *r)
{
    if (!r->has_expires)
        return json_null();
    char date[16];
    format_date(r->expires, date, sizeof(date));
    return json_string(date);
}

/* The one JSON shape of a rule, used in the grant list and in each agent's
 * reach. Its state: "denied" when the deny list covers every name it
 * matches (it never applies, whatever its date), else "expired" or "live". */
static json_t *rule_json(const struct policy *p, const struct rule *r, int32_t today)
{
    char name[32];
    snprintf(name, sizeof(name), "rules[%zu]", r->index);
    json_t *o = json_pack("{s:s, s:i, s:s, s:o, s:o, s:i}", "rule", name, "line", r->line, "host",
                          r->pattern, "ports", ports_json(r), "methods", methods_json(r), "tier",
                          (int)r->tier);
    json_object_set_new(o, "owner", r->owner ? json_string(r->owner) : json_null());
    json_object_set_new(o, "expires", date_json(r));
    json_object_set_new(o, "days_left",
                        r->has_expires ? json_integer(lint_days_left(r, today)) : json_null());
    json_object_set_new(o, "agents", strings_json(r->agents, r->nagents));
    int64_t denied_by = index_deny_covering(p->index, r);
    bool expired = r->has_expires && lint_days_left(r, today) < 0;
    json_object_set_new(o, "state",
                        json_string(denied_by >= 0 ? "denied"
                                    : expired      ? "expired"
                                                   : "live"));
    if (denied_by >= 0) {
        char deny[32];
        snprintf(deny, sizeof(deny), "deny[%" PRId64 "]", denied_by);
        json_object_set_new(o, "denied_by", json_string(deny));
    }
    return o;
}

static void print_list(FILE *out, const json_t *arr, const char *sep)
{
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (i > 0)
            fputs(sep, out);
        if (json_is_integer(v))
            fprintf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else
            fputs(json_string_value(v), out);
    }
}

static void print_rule_line(FILE *out, const json_t *rule, bool with_tier)
{
    fputs("    ", out);
    if (with_tier)
        fprintf(out, "tier %" JSON_INTEGER_FORMAT "  ",
                json_integer_value(json_object_get(rule, "tier")));
    fprintf(out, "%-10s %s:", json_string_value(json_object_get(rule, "rule")),
            json_string_value(json_object_get(rule, "host")));
    print_list(out, json_object_get(rule, "ports"), ",");
    const json_t *methods = json_object_get(rule, "methods");
    if (json_is_array(methods)) {
        fputs(" [", out);
        print_list(out, methods, " ");
        fputc(']', out);
    }
    const json_t *owner = json_object_get(rule, "owner");
    if (json_is_string(owner))
        fprintf(out, "  owner %s", json_string_value(owner));
    const json_t *expires = json_object_get(rule, "expires");
    if (json_is_string(expires)) {
        json_int_t left = json_integer_value(json_object_get(rule, "days_left"));
        if (left < 0)
            fprintf(out, "  EXPIRED %s (%" JSON_INTEGER_FORMAT " day%s ago)",
                    json_string_value(expires), -left, left == -1 ? "" : "s");
        else
            fprintf(out, "  expires %s (%" JSON_INTEGER_FORMAT " day%s left)",
                    json_string_value(expires), left, left == 1 ? "" : "s");
    }
    const json_t *denied_by = json_object_get(rule, "denied_by");
    if (json_is_string(denied_by))
        fprintf(out, "  DENIED by %s: never applies", json_string_value(denied_by));
    const json_t *agents = json_object_get(rule, "agents");
    if (json_is_array(agents) && !with_tier) {
        fputs("  agents ", out);
        print_list(out, agents, ",");
    }
    fputc('\n', out);
}

/* ---- the JSON writer ---- */

/* Writes a document in json_dumpf()'s JSON_INDENT(2) | JSON_PRESERVE_ORDER
 * layout, one member at a time: the containers with many members (the
 * report, its lists, an agent and its reach) are opened and closed here,
 * and each member is a value jansson dumps, indented to the depth it is
 * written at. What it writes is, byte for byte, what json_dumpf() writes
 * of the whole document built first. */
#define JW_DEPTH_MAX 8 /* the report nests 4 deep: itself, agents, an agent, its reach */
#define JW_FLAGS     (JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)

struct jw {
    FILE *out;
    int depth;                /* containers open */
    bool empty[JW_DEPTH_MAX]; /* [i]: container i + 1 has no member yet */
};

/* Starts a member of the innermost container: the separator, the line
 * break and indent, and "KEY": in an object (<key> NULL in a list). The
 * keys are the report's own words: nothing in them to escape. */
static void jw_member(struct jw *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->empty[w->depth - 1])
            fputc(',', w->out);
        w->empty[w->depth - 1] = false;
        fprintf(w->out, "\n%*s", 2 * w->depth, "");
    }
    if (key != NULL)
        fprintf(w->out, "\"%s\": ", key);
}

/* Opens the container <open> ('{' or '[') as the member <key>. */
static void jw_open(struct jw *w, const char *key, char open)
{
    jw_member(w, key);
    fputc(open, w->out);
    w->empty[w->depth++] = true;
}

/* Closes the innermost container with <close>: "[]" when it stayed empty,
 * as jansson writes one. */
static void jw_close(struct jw *w, char close)
{
    w->depth--;
    if (!w->empty[w->depth])
        fprintf(w->out, "\n%*s", 2 * w->depth, "");
    fputc(close, w->out);
}

/* json_dump_callback()'s writer: jansson's text, each line break followed
 * by the indent of the depth the value is written at. */
static int jw_indented(const char *buf, size_t size, void *arg)
{
    const struct jw *w = arg;
    const char *end = buf + size;
    while (buf < end) {
        const char *nl = memchr(buf, '\n', (size_t)(end - buf));
        size_t n = nl != NULL ? (size_t)(nl - buf) + 1 : (size_t)(end - buf);
        fwrite(buf, 1, n, w->out);
        if (nl != NULL)
            fprintf(w->out, "%*s", 2 * w->depth, "");
        buf += n;
    }
    return 0;
}

/* Writes the member <key> (NULL in a list) of value <v>, a reference it
 * takes; none when <v> is NULL (jansson out of memory), as a document
 * built first would have had none. */
static void jw_put(struct jw *w, const char *key, json_t *v)
{
    if (v == NULL)
        return;
    jw_member(w, key);
    json_dump_callback(v, jw_indented, w, JW_FLAGS);
    json_decref(v);
}

/* Writes the members <keys> (NULL-terminated) of <o>, in that order: the
 * order the document has them in, whatever order jansson keeps. */
static void jw_put_members(struct jw *w, const json_t *o, const char *const *keys)
{
    for (; *keys != NULL; keys++)
        jw_put(w, *keys, json_incref(json_object_get(o, *keys)));
}

/* ---- which rules each agent reaches ---- */

/* Found once, as pairs of a rule and an agent it names (<id> NULL: the
 * rule has no agents:, it is every agent's), sorted: every agent's first,
 * then by agent id, each part in file order. An agent's reach is its pairs
 * merged with every agent's, one rule at a time. 16 bytes a pair, and no
 * rule's JSON: that is made as the rule is written. When every agent
 * walked every rule, a policy of 40,000 rules each naming an agent of its
 * own took check 3 minutes. */
struct reach_pair {
    const char *id; /* borrowed from the rule; NULL: every agent */
    uint32_t rule;
};

struct reach_index {
    const struct policy *p;
    struct reach_pair *pairs;
    size_t npairs;
    size_t neveryone;     /* the first <neveryone> pairs are every agent's */
    const char **defined; /* the agents entries' ids, sorted */
};

static int pair_cmp(const void *a, const void *b)
{
    const struct reach_pair *x = a, *y = b;
    if (x->id == NULL || y->id == NULL) {
        if (x->id != y->id)
            return x->id == NULL ? -1 : 1;
    } else {
        int r = strcmp(x->id, y->id);
        if (r != 0)
            return r;
    }
    return (x->rule > y->rule) - (x->rule < y->rule);
}

static int id_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void reach_index_init(struct reach_index *x, const struct policy *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->nrules; i++)
        n += p->rules[i].nagents != 0 ? p->rules[i].nagents : 1;
    x->p = p;
    x->pairs = xcalloc(n ? n : 1, sizeof(*x->pairs));
    x->npairs = 0;
    x->neveryone = 0;
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        if (r->nagents == 0) {
            x->pairs[x->npairs++] = (struct reach_pair){NULL, (uint32_t)i};
            x->neveryone++;
        }
        for (size_t j = 0; j < r->nagents; j++)
            x->pairs[x->npairs++] = (struct reach_pair){r->agents[j], (uint32_t)i};
    }
    qsort(x->pairs, x->npairs, sizeof(*x->pairs), pair_cmp);
    x->defined = xcalloc(p->nagents ? p->nagents : 1, sizeof(*x->defined));
    for (size_t i = 0; i < p->nagents; i++)
        x->defined[i] = p->agents[i].id;
    qsort(x->defined, p->nagents, sizeof(*x->defined), id_cmp);
}

static void reach_index_free(struct reach_index *x)
{
    free(x->pairs);
    free(x->defined);
}

/* The first pair naming <id> or an id after it (<upper>: the first naming
 * an id after it), among the named ones. */
static size_t pair_bound(const struct reach_index *x, const char *id, bool upper)
{
    size_t lo = x->neveryone, hi = x->npairs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(x->pairs[mid].id, id);
        if (c < 0 || (upper && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* True when the report lists <id> among the agents entries (or as
 * "default", the one agent of a policy without any). */
static bool agent_listed(const struct reach_index *x, const char *id)
{
    if (x->p->nagents == 0)
        return strcmp(id, "default") == 0;
    return bsearch(&id, x->defined, x->p->nagents, sizeof(*x->defined), id_cmp) != NULL;
}

/* The rules one agent reaches, in file order: every agent's and its own. */
struct reach_walk {
    const struct reach_index *x;
    size_t every, own, own_end;
};

static void reach_walk_init(struct reach_walk *it, const struct reach_index *x, const char *id)
{
    it->x = x;
    it->every = 0;
    it->own = pair_bound(x, id, false);
    it->own_end = pair_bound(x, id, true);
}

static bool reach_walk_empty(const struct reach_walk *it)
{
    return it->x->neveryone == 0 && it->own == it->own_end;
}

/* The next rule, or NULL. A rule is every agent's or names agents, never
 * both, and names an agent once (the loader drops a repeat). */
static const struct rule *reach_walk_next(struct reach_walk *it)
{
    const struct reach_pair *e = it->x->pairs;
    size_t next;
    if (it->every < it->x->neveryone &&
        (it->own == it->own_end || e[it->every].rule < e[it->own].rule))
        next = e[it->every++].rule;
    else if (it->own < it->own_end)
        next = e[it->own++].rule;
    else
        return NULL;
    return &it->x->p->rules[next];
}

/* The reach entries the report lists: every listed agent (the agents
 * entries, or "default", and the agents only rules name) reaches every
 * rule without agents:, and each the rules that name it. */
static uint64_t reach_total(const struct reach_index *x)
{
    uint64_t listed = x->p->nagents != 0 ? x->p->nagents : 1;
    for (size_t i = x->neveryone; i < x->npairs; i++)
        if ((i == x->neveryone || strcmp(x->pairs[i].id, x->pairs[i - 1].id) != 0) &&
            !agent_listed(x, x->pairs[i].id))
            listed++;
    return listed * x->neveryone + (x->npairs - x->neveryone);
}

uint64_t report_reach_max(void)
{
    return env_number("SLUICE_TEST_REPORT_REACH_MAX", REPORT_REACH_MAX, REPORT_REACH_MAX);
}

void report_note_reach(const struct policy *p, struct diag *d)
{
    struct reach_index x;
    reach_index_init(&x, p);
    uint64_t total = reach_total(&x), max = report_reach_max();
    if (total > max)
        diag_warning(d, 0, "",
                     "the reach per agent is %" PRIu64 " entries (an agent and a rule it "
                     "reaches; every agent reaches each of the %zu rules without agents:), more "
                     "than the %" PRIu64 " the report lists: each agent past them is listed with "
                     "how many of its rules are not; name the agents in those rules' agents:, or "
                     "split the policy",
                     total, x.neveryone, max);
    reach_index_free(&x);
}

/* ---- the report, written as it is made ---- */

struct writer {
    FILE *out;
    enum report_format format;
    struct jw jw; /* REPORT_JSON */
    const struct policy *p;
    int32_t today;
    uint64_t reach_left; /* reach entries still to list (report_reach_max()) */
};

/* The findings of <level>: JSON's errors or warnings, the text's
 * "error: " or "warning: " lines. Returns how many. */
static size_t write_findings(struct writer *w, const struct diag *d, enum diag_level level)
{
    bool json = w->format == REPORT_JSON;
    size_t n = 0;
    if (json)
        jw_open(&w->jw, level == DIAG_ERROR ? "errors" : "warnings", '[');
    for (size_t i = 0; i < d->count; i++) {
        const struct diag_entry *e = &d->entries[i];
        if (e->level != level)
            continue;
        json_t *o = finding_json(d, e);
        n++;
        if (json) {
            jw_put(&w->jw, NULL, o);
            continue;
        }
        char *text = text_shown(json_string_value(json_object_get(o, "text")));
        fprintf(w->out, "%s: %s\n", level == DIAG_ERROR ? "error" : "warning", text);
        free(text);
        json_decref(o);
    }
    if (json)
        jw_close(&w->jw, ']');
    return n;
}

/* The counts: rules, agents, deny entries, rules per tier. Takes <summary>. */
static void write_summary(struct writer *w, const json_t *head, json_t *summary)
{
    if (w->format == REPORT_JSON) {
        jw_put(&w->jw, "summary", summary);
        return;
    }
    FILE *out = w->out;
    const json_t *tiers = json_object_get(summary, "tiers");
    /* the file's name is the caller's, not checked as the policy's
     * contents are: a name holding a line end could forge lines */
    char *file = text_shown(json_string_value(json_object_get(head, "file")));
    json_int_t rules = json_integer_value(json_object_get(summary, "rules"));
    json_int_t agents = json_integer_value(json_object_get(summary, "agents"));
    json_int_t deny = json_integer_value(json_object_get(summary, "deny"));
    fprintf(out,
            "%s: %" JSON_INTEGER_FORMAT " rule%s, %" JSON_INTEGER_FORMAT
            " agent%s, %" JSON_INTEGER_FORMAT " deny entr%s (as of %s)\n",
            file, rules, rules == 1 ? "" : "s", agents, agents == 1 ? "" : "s", deny,
            deny == 1 ? "y" : "ies", json_string_value(json_object_get(head, "today")));
    free(file);
    fputs("rules per tier:", out);
    static const char *const names[4] = {"0 unauthenticated read", "1 authenticated read",
                                         "2 write to own systems", "3 public write"};
    for (int t = 0; t < 4; t++) {
        char key[2] = {(char)('0' + t), '\0'};
        fprintf(out, "%s tier %s: %" JSON_INTEGER_FORMAT, t ? "," : "", names[t],
                json_integer_value(json_object_get(tiers, key)));
    }
    fputc('\n', out);
    json_decref(summary);
}

/* Every tier-3 grant, <ngrants> of them, each signed by a person. */
static void write_grants(struct writer *w, size_t ngrants)
{
    const struct policy *p = w->p;
    bool json = w->format == REPORT_JSON;
    if (json) {
        jw_open(&w->jw, "tier3_grants", '[');
    } else {
        fprintf(w->out, "\ntier-3 grants (%zu), each signed by a person:\n", ngrants);
        if (ngrants == 0)
            fputs("    none: nothing irreversible is allowed\n", w->out);
    }
    for (size_t i = 0; i < p->nrules; i++) {
        if (p->rules[i].tier != TIER_3)
            continue;
        json_t *o = rule_json(p, &p->rules[i], w->today);
        if (json) {
            jw_put(&w->jw, NULL, o);
        } else {
            print_rule_line(w->out, o, false);
            json_decref(o);
        }
    }
    if (json)
        jw_close(&w->jw, ']');
}

/* The deny list, checked before any rule. */
static void write_deny(struct writer *w)
{
    const struct policy *p = w->p;
    bool json = w->format == REPORT_JSON;
    if (json)
        jw_open(&w->jw, "deny", '[');
    else if (p->ndeny > 0)
        fputs("\ndenied before any rule: ", w->out);
    for (size_t i = 0; i < p->ndeny; i++) {
        const struct host_pattern *hp = &p->deny[i].pattern;
        char text[HOST_MAX + 3];
        snprintf(text, sizeof(text), "%s%s", hp->kind == PATTERN_WILDCARD ? "*." : "", hp->name);
        json_t *v = json_string(text);
        if (json) {
            jw_put(&w->jw, NULL, v);
        } else {
            if (i > 0)
                fputs(", ", w->out);
            fputs(json_string_value(v), w->out);
            json_decref(v);
        }
    }
    if (json)
        jw_close(&w->jw, ']');
    else if (p->ndeny > 0)
        fputc('\n', w->out);
}

/* dns.static: the names the gateway resolves itself, each with the
 * address it connects to for them, whatever DNS says: a reviewer must see
 * that api.example.com goes to 10.1.2.3. The text lists them when there
 * are any (names and addresses are validated: nothing in them to show as
 * \ooo). */
static void write_dns_static(struct writer *w)
{
    const struct policy *p = w->p;
    bool json = w->format == REPORT_JSON;
    if (json)
        jw_open(&w->jw, "dns_static", '[');
    else if (p->dns.nstatics > 0)
        fputs("\nresolved by the gateway itself (dns.static), before any DNS server:\n", w->out);
    for (size_t i = 0; i < p->dns.nstatics; i++) {
        const struct dns_static *s = &p->dns.statics[i];
        char addr[IPADDR_STRLEN];
        json_t *v = json_pack("{s:s, s:s, s:i}", "name", s->name, "address",
                              ipaddr_format(&s->addr, addr, sizeof(addr)), "line", s->line);
        if (json) {
            jw_put(&w->jw, NULL, v);
            continue;
        }
        fprintf(w->out, "    %s -> %s  (line %" JSON_INTEGER_FORMAT ")\n",
                json_string_value(json_object_get(v, "name")),
                json_string_value(json_object_get(v, "address")),
                json_integer_value(json_object_get(v, "line")));
        json_decref(v);
    }
    if (json)
        jw_close(&w->jw, ']');
}

/* The agent's encrypted_client_hello as it holds: its own, else the
 * network's (<a> NULL: an agent with no entry). */
static json_t *ech_json(const struct policy *p, const struct agent *a)
{
    return json_string(policy_allows_encrypted_hello(p, a) ? "allow" : "refuse");
}

/* An agents entry as the report lists it, but its reach. */
static json_t *agent_json(const struct policy *p, const struct agent *a)
{
    json_t *sources = json_array();
    for (size_t i = 0; i < a->nsources; i++) {
        char text[64];
        json_array_append_new(sources,
                              json_string(cidr_format(&a->sources[i], text, sizeof(text))));
    }
    if (a->unix_source)
        json_array_append_new(sources, json_string("unix"));
    json_t *o = json_pack("{s:s, s:b, s:s, s:o}", "id", a->id, "defined", 1, "mode",
                          a->mode == AGENT_REPORT ? "report" : "enforce", "sources", sources);
    json_object_set_new(o, "token", a->token_ref ? json_string(a->token_ref) : json_null());
    json_object_set_new(o, "encrypted_client_hello", ech_json(p, a));
    return o;
}

/* The text's line about an agent, and what its reach says before its
 * rules. An agent in report mode is let through where the policy denies
 * it, so that list is not its limit: said first, in place of "every
 * request is denied" when the list is empty. */
static void print_agent(FILE *out, const json_t *v, bool reaches_nothing)
{
    fprintf(out, "  %s (%s%s", json_string_value(json_object_get(v, "id")),
            json_string_value(json_object_get(v, "mode")),
            json_is_true(json_object_get(v, "defined")) ? "" : ", named by rules only");
    const json_t *sources = json_object_get(v, "sources");
    if (json_is_array(sources)) {
        fputs("; sources ", out);
        print_list(out, sources, " ");
    }
    const json_t *token = json_object_get(v, "token");
    if (json_is_string(token))
        fprintf(out, "; token %s", json_string_value(token));
    const char *ech = json_string_value(json_object_get(v, "encrypted_client_hello"));
    if (ech != NULL && strcmp(ech, "allow") == 0)
        fputs("; Encrypted Client Hello let through", out);
    fputs("):\n", out);
    const char *mode = json_string_value(json_object_get(v, "mode"));
    if (mode != NULL && strcmp(mode, "report") == 0)
        fprintf(out,
                "    REPORT MODE: what the policy denies is let through, logged as report "
                "(the address guard still refuses: private_address, self_request); enforce "
                "would allow %s\n",
                reaches_nothing ? "nothing" : "these:");
    else if (reaches_nothing)
        fputs("    nothing: every request is denied\n", out);
}

/* One agent: <agent> (agent_json(), taken) and the rules <id> reaches,
 * each rule's JSON made, written and freed in turn. */
static void write_agent(struct writer *w, const struct reach_index *x, json_t *agent,
                        const char *id)
{
    bool json = w->format == REPORT_JSON;
    struct reach_walk it;
    reach_walk_init(&it, x, id);
    if (json) {
        static const char *const keys[] = {
            "id", "defined", "mode", "sources", "token", "encrypted_client_hello", NULL};
        jw_open(&w->jw, NULL, '{');
        jw_put_members(&w->jw, agent, keys);
        jw_open(&w->jw, "reach", '[');
    } else {
        print_agent(w->out, agent, reach_walk_empty(&it));
    }
    const struct rule *r;
    while (w->reach_left > 0 && (r = reach_walk_next(&it)) != NULL) {
        w->reach_left--;
        json_t *o = rule_json(w->p, r, w->today);
        if (json) {
            jw_put(&w->jw, NULL, o);
        } else {
            print_rule_line(w->out, o, true);
            json_decref(o);
        }
    }
    /* Past the bound, counted, not walked: the walk is what is bounded. */
    size_t cut = (x->neveryone - it.every) + (it.own_end - it.own);
    if (json) {
        jw_close(&w->jw, ']');
        jw_put(&w->jw, "reach_not_listed", json_integer((json_int_t)cut));
        jw_close(&w->jw, '}');
    } else if (cut > 0) {
        fprintf(w->out,
                "    ... %zu more not listed (the report lists at most %" PRIu64 " entries in "
                "all)\n",
                cut, report_reach_max());
    }
    json_decref(agent);
}

/* Every agent and what it reaches: the agents entries (or "default", the
 * one agent of a policy without any), then the agents that rules name but
 * no entry defines (the id given to `sluice run --agent`, say), so that
 * their reach is on paper too, in the order the rules first name them. */
static void write_agents(struct writer *w)
{
    const struct policy *p = w->p;
    struct reach_index x;
    reach_index_init(&x, p);
    if (w->format == REPORT_JSON)
        jw_open(&w->jw, "agents", '[');
    else
        fputs("\nreach per agent:\n", w->out);
    if (p->nagents == 0) {
        json_t *o = json_pack("{s:s, s:b, s:s, s:[s], s:n}", "id", "default", "defined", 1, "mode",
                              "enforce", "sources", "any", "token");
        json_object_set_new(o, "encrypted_client_hello", ech_json(p, NULL));
        write_agent(w, &x, o, "default");
    }
    for (size_t i = 0; i < p->nagents; i++)
        write_agent(w, &x, agent_json(p, &p->agents[i]), p->agents[i].id);
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        for (size_t j = 0; j < r->nagents; j++) {
            const char *id = r->agents[j];
            /* listed already, or named by an earlier rule (its first pair) */
            if (agent_listed(&x, id) || x.pairs[pair_bound(&x, id, false)].rule != i)
                continue;
            json_t *o = json_pack("{s:s, s:b, s:s, s:n, s:n}", "id", id, "defined", 0, "mode",
                                  "enforce", "sources", "token");
            json_object_set_new(o, "encrypted_client_hello", ech_json(p, NULL));
            write_agent(w, &x, o, id);
        }
    }
    if (w->format == REPORT_JSON)
        jw_close(&w->jw, ']');
    reach_index_free(&x);
}

void report_write(FILE *out, enum report_format format, const char *file, const struct policy *p,
                  const struct diag *d, int32_t today, int warn_days, bool strict)
{
    bool ok = !diag_has_errors(d) && !(strict && diag_fails_strict(d));
    char date[16];
    format_date(today, date, sizeof(date));
    json_t *head = json_object();
    json_object_set_new(head, "file", text_json(file));
    json_object_set_new(head, "ok", json_boolean(ok));
    json_object_set_new(head, "today", json_string(date));
    json_object_set_new(head, "warn_days", json_integer(warn_days));
    json_object_set_new(head, "strict", json_boolean(strict));
    struct writer w = {.out = out,
                       .format = format,
                       .jw = {.out = out},
                       .p = p,
                       .today = today,
                       .reach_left = report_reach_max()};
    bool json = format == REPORT_JSON;
    if (json) {
        static const char *const keys[] = {"file", "ok", "today", "warn_days", "strict", NULL};
        jw_open(&w.jw, NULL, '{');
        jw_put_members(&w.jw, head, keys);
    }
    size_t nerrors = write_findings(&w, d, DIAG_ERROR);
    size_t nwarnings = write_findings(&w, d, DIAG_WARNING);

    if (p != NULL) {
        /* a blank line between the findings and the report, none above a
         * report that has no findings before it */
        if (!json && nerrors + nwarnings > 0)
            fputc('\n', out);
        json_int_t per_tier[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < p->nrules; i++) {
            const struct rule *rule = &p->rules[i];
            if (rule->tier >= TIER_0 && rule->tier <= TIER_3)
                per_tier[rule->tier]++;
        }
        write_summary(&w, head,
                      json_pack("{s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}}", "rules",
                                (json_int_t)p->nrules, "agents", (json_int_t)p->nagents, "deny",
                                (json_int_t)p->ndeny, "tiers", "0", per_tier[0], "1", per_tier[1],
                                "2", per_tier[2], "3", per_tier[3]));
        write_grants(&w, (size_t)per_tier[3]);
        write_deny(&w);
        write_dns_static(&w);
        write_agents(&w);
    }

    if (json) {
        jw_close(&w.jw, '}');
        fputc('\n', out);
    } else {
        /* every finding, those past a cap that one closing line counts too */
        size_t errors = diag_total(d, DIAG_ERROR), warnings = diag_total(d, DIAG_WARNING);
        fprintf(out, "\nresult: %zu error%s, %zu warning%s", errors, errors == 1 ? "" : "s",
                warnings, warnings == 1 ? "" : "s");
        /* said only where the warnings alone failed it: errors fail any check */
        if (strict && nerrors == 0 && !ok)
            fputs(": failed, warnings fail the check under --strict", out);
        fputc('\n', out);
    }
    json_decref(head);
}
