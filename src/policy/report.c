#include "policy/report.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "policy/index.h"
#include "policy/lint.h"
#include "policy/policy.h"
#include "util/units.h"
#include "util/text_json.h"
#include "util/xalloc.h"

static json_t *diag_entries_json(const struct diag *d, enum diag_level level)
{
    json_t *arr = json_array();
    const char *file = d->file ? d->file : "-";
    for (size_t i = 0; i < d->count; i++) {
        const struct diag_entry *e = &d->entries[i];
        if (e->level != level)
            continue;
        /* The whole text, however long: a fixed buffer could cut it in
         * the middle of a UTF-8 character (a long owner's name). */
        size_t room = strlen(file) + strlen(e->field) + strlen(e->message) + 32;
        char *text = xmalloc(room);
        diag_format(d, e, text, room);
        json_t *o = json_object();
        json_object_set_new(o, "file", text_json(file));
        json_object_set_new(o, "line", json_integer(e->line));
        json_object_set_new(o, "field", text_json(e->field));
        json_object_set_new(o, "message", text_json(e->message));
        json_object_set_new(o, "text", text_json(text));
        json_array_append_new(arr, o);
        free(text);
    }
    return arr;
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

/* Which rules each agent reaches, found once: the rules without agents:
 * (every agent's) and, per agent id the rules name, the rules that name
 * it. Each rule's JSON is built once and shared by every reach list. When
 * every agent walked every rule, a policy of 40,000 rules each naming an
 * agent of its own took check 3 minutes. */
struct reach_index {
    json_t **rules;   /* rule_json() of each rule */
    size_t *everyone; /* numbers of the rules without agents:, ascending */
    size_t neveryone;
    json_t *named; /* agent id -> [rule number, ...], ascending */
};

static void reach_index_init(struct reach_index *x, const struct policy *p, int32_t today)
{
    x->rules = xcalloc(p->nrules ? p->nrules : 1, sizeof(*x->rules));
    x->everyone = xcalloc(p->nrules ? p->nrules : 1, sizeof(*x->everyone));
    x->neveryone = 0;
    x->named = json_object();
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        x->rules[i] = rule_json(p, r, today);
        if (r->nagents == 0)
            x->everyone[x->neveryone++] = i;
        for (size_t j = 0; j < r->nagents; j++) {
            json_t *list = json_object_get(x->named, r->agents[j]);
            if (list == NULL) {
                list = json_array();
                json_object_set_new(x->named, r->agents[j], list);
            }
            size_t n = json_array_size(list);
            if (n == 0 || (size_t)json_integer_value(json_array_get(list, n - 1)) != i)
                json_array_append_new(list, json_integer((json_int_t)i));
        }
    }
}

static void reach_index_free(struct reach_index *x, const struct policy *p)
{
    for (size_t i = 0; i < p->nrules; i++)
        json_decref(x->rules[i]);
    free(x->rules);
    free(x->everyone);
    json_decref(x->named);
}

/* The rules <agent_id> reaches, in file order: every agent's and its own. */
static json_t *reach_json(const struct reach_index *x, const char *agent_id)
{
    json_t *arr = json_array();
    const json_t *own = json_object_get(x->named, agent_id);
    size_t nown = json_array_size(own), a = 0, b = 0;
    while (a < x->neveryone || b < nown) {
        size_t next;
        if (b == nown || (a < x->neveryone &&
                          x->everyone[a] < (size_t)json_integer_value(json_array_get(own, b))))
            next = x->everyone[a++];
        else
            next = (size_t)json_integer_value(json_array_get(own, b++));
        json_array_append(arr, x->rules[next]);
    }
    return arr;
}

/* The agent's encrypted_client_hello as it holds: its own, else the
 * network's (<a> NULL: an agent with no entry). */
static json_t *ech_json(const struct policy *p, const struct agent *a)
{
    return json_string(policy_allows_encrypted_hello(p, a) ? "allow" : "refuse");
}

static json_t *agent_json(const struct policy *p, const struct agent *a,
                          const struct reach_index *x)
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
    json_object_set_new(o, "reach", reach_json(x, a->id));
    return o;
}

/* Agents that rules name but no agents entry defines (e.g. the id given to
 * `sluice run --agent`): listed so their reach is on paper too, in the
 * order the rules first name them. <listed> holds the ids already listed. */
static void add_undefined_agents(const struct policy *p, json_t *agents, json_t *listed,
                                 const struct reach_index *x)
{
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *r = &p->rules[i];
        for (size_t j = 0; j < r->nagents; j++) {
            const char *id = r->agents[j];
            if (json_object_get(listed, id) != NULL)
                continue;
            json_object_set_new(listed, id, json_true());
            json_t *o = json_pack("{s:s, s:b, s:s, s:n, s:n}", "id", id, "defined", 0, "mode",
                                  "enforce", "sources", "token");
            json_object_set_new(o, "encrypted_client_hello", ech_json(p, NULL));
            json_object_set_new(o, "reach", reach_json(x, id));
            json_array_append_new(agents, o);
        }
    }
}

static json_t *agents_json(const struct policy *p, int32_t today)
{
    struct reach_index x;
    reach_index_init(&x, p, today);
    json_t *agents = json_array();
    json_t *listed = json_object(); /* ids in <agents> */
    if (p->nagents == 0) {
        json_t *o = json_pack("{s:s, s:b, s:s, s:[s], s:n}", "id", "default", "defined", 1, "mode",
                              "enforce", "sources", "any", "token");
        json_object_set_new(o, "encrypted_client_hello", ech_json(p, NULL));
        json_object_set_new(o, "reach", reach_json(&x, "default"));
        json_array_append_new(agents, o);
        json_object_set_new(listed, "default", json_true());
    }
    for (size_t i = 0; i < p->nagents; i++) {
        json_array_append_new(agents, agent_json(p, &p->agents[i], &x));
        json_object_set_new(listed, p->agents[i].id, json_true());
    }
    add_undefined_agents(p, agents, listed, &x);
    json_decref(listed);
    reach_index_free(&x, p);
    return agents;
}

/* dns.static: the names the gateway resolves itself, each with the
 * address it connects to for them, whatever DNS says: a reviewer must see
 * that api.example.com goes to 10.1.2.3. */
static json_t *dns_static_json(const struct policy *p)
{
    json_t *pins = json_array();
    for (size_t i = 0; i < p->dns.nstatics; i++) {
        const struct dns_static *s = &p->dns.statics[i];
        char addr[IPADDR_STRLEN];
        json_array_append_new(pins, json_pack("{s:s, s:s, s:i}", "name", s->name, "address",
                                              ipaddr_format(&s->addr, addr, sizeof(addr)), "line",
                                              s->line));
    }
    return pins;
}

json_t *report_build(const char *file, const struct policy *p, const struct diag *d, int32_t today,
                     int warn_days, bool strict)
{
    bool ok = !diag_has_errors(d) && !(strict && diag_fails_strict(d));
    char date[16];
    format_date(today, date, sizeof(date));
    json_t *r = json_object();
    json_object_set_new(r, "file", text_json(file));
    json_object_set_new(r, "ok", json_boolean(ok));
    json_object_set_new(r, "today", json_string(date));
    json_object_set_new(r, "warn_days", json_integer(warn_days));
    json_object_set_new(r, "strict", json_boolean(strict));
    json_object_set_new(r, "errors", diag_entries_json(d, DIAG_ERROR));
    json_object_set_new(r, "warnings", diag_entries_json(d, DIAG_WARNING));
    if (p == NULL)
        return r;

    json_int_t per_tier[4] = {0, 0, 0, 0};
    json_t *grants = json_array();
    for (size_t i = 0; i < p->nrules; i++) {
        const struct rule *rule = &p->rules[i];
        if (rule->tier >= TIER_0 && rule->tier <= TIER_3)
            per_tier[rule->tier]++;
        if (rule->tier == TIER_3)
            json_array_append_new(grants, rule_json(p, rule, today));
    }
    json_t *deny = json_array();
    for (size_t i = 0; i < p->ndeny; i++) {
        const struct host_pattern *hp = &p->deny[i].pattern;
        char text[HOST_MAX + 3];
        snprintf(text, sizeof(text), "%s%s", hp->kind == PATTERN_WILDCARD ? "*." : "", hp->name);
        json_array_append_new(deny, json_string(text));
    }
    json_object_set_new(r, "summary",
                        json_pack("{s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}}", "rules",
                                  (json_int_t)p->nrules, "agents", (json_int_t)p->nagents, "deny",
                                  (json_int_t)p->ndeny, "tiers", "0", per_tier[0], "1", per_tier[1],
                                  "2", per_tier[2], "3", per_tier[3]));
    json_object_set_new(r, "tier3_grants", grants);
    json_object_set_new(r, "deny", deny);
    json_object_set_new(r, "dns_static", dns_static_json(p));
    json_object_set_new(r, "agents", agents_json(p, today));
    return r;
}

/* ---- text rendering ---- */

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

static void print_findings(FILE *out, const json_t *arr, const char *label)
{
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        char *text = text_shown(json_string_value(json_object_get(v, "text")));
        fprintf(out, "%s: %s\n", label, text);
        free(text);
    }
}

/* An agent's reach: the rules it can use. An agent in report mode is let
 * through where the policy denies it, so that list is not its limit: said
 * first, in place of "every request is denied" when the list is empty. */
static void print_reach(FILE *out, const json_t *agent)
{
    const json_t *reach = json_object_get(agent, "reach");
    const char *mode = json_string_value(json_object_get(agent, "mode"));
    if (mode != NULL && strcmp(mode, "report") == 0)
        fprintf(out,
                "    REPORT MODE: what the policy denies is let through, logged as report "
                "(the address guard still refuses: private_address, self_request); enforce "
                "would allow %s\n",
                json_array_size(reach) == 0 ? "nothing" : "these:");
    else if (json_array_size(reach) == 0)
        fputs("    nothing: every request is denied\n", out);
    size_t i;
    const json_t *rule;
    json_array_foreach(reach, i, rule)
    {
        print_rule_line(out, rule, true);
    }
}

/* The names pinned by dns.static, when there are any (names and
 * addresses are validated: nothing in them to show as \ooo). */
static void print_dns_static(FILE *out, const json_t *pins)
{
    if (json_array_size(pins) == 0)
        return;
    fputs("\nresolved by the gateway itself (dns.static), before any DNS server:\n", out);
    size_t i;
    const json_t *v;
    json_array_foreach(pins, i, v)
    {
        fprintf(out, "    %s -> %s  (line %" JSON_INTEGER_FORMAT ")\n",
                json_string_value(json_object_get(v, "name")),
                json_string_value(json_object_get(v, "address")),
                json_integer_value(json_object_get(v, "line")));
    }
}

void report_print_text(const json_t *report, FILE *out)
{
    const json_t *errors = json_object_get(report, "errors");
    const json_t *warnings = json_object_get(report, "warnings");
    print_findings(out, errors, "error");
    print_findings(out, warnings, "warning");

    const json_t *summary = json_object_get(report, "summary");
    if (summary != NULL) {
        const json_t *tiers = json_object_get(summary, "tiers");
        /* the file's name is the caller's, not checked as the policy's
         * contents are: a name holding a line end could forge lines */
        char *file = text_shown(json_string_value(json_object_get(report, "file")));
        fprintf(out,
                "\n%s: %" JSON_INTEGER_FORMAT " rules, %" JSON_INTEGER_FORMAT
                " agents, %" JSON_INTEGER_FORMAT " deny entries (as of %s)\n",
                file, json_integer_value(json_object_get(summary, "rules")),
                json_integer_value(json_object_get(summary, "agents")),
                json_integer_value(json_object_get(summary, "deny")),
                json_string_value(json_object_get(report, "today")));
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

        const json_t *grants = json_object_get(report, "tier3_grants");
        fprintf(out, "\ntier-3 grants (%zu), each signed by a person:\n", json_array_size(grants));
        if (json_array_size(grants) == 0)
            fputs("    none: nothing irreversible is allowed\n", out);
        size_t i;
        const json_t *v;
        json_array_foreach(grants, i, v)
        {
            print_rule_line(out, v, false);
        }

        const json_t *deny = json_object_get(report, "deny");
        if (json_array_size(deny) > 0) {
            fputs("\ndenied before any rule: ", out);
            print_list(out, deny, ", ");
            fputc('\n', out);
        }

        print_dns_static(out, json_object_get(report, "dns_static"));

        fputs("\nreach per agent:\n", out);
        json_array_foreach(json_object_get(report, "agents"), i, v)
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
            print_reach(out, v);
        }
    }
    fprintf(out, "\nresult: %zu error%s, %zu warning%s", json_array_size(errors),
            json_array_size(errors) == 1 ? "" : "s", json_array_size(warnings),
            json_array_size(warnings) == 1 ? "" : "s");
    /* said only where the warnings alone failed it: errors fail any check */
    if (json_is_true(json_object_get(report, "strict")) && json_array_size(errors) == 0 &&
        json_is_false(json_object_get(report, "ok")))
        fputs(": failed, warnings fail the check under --strict", out);
    fputc('\n', out);
}
