/* load_alerts: the limits and alerts sections of the policy (SPEC.md),
 * read with the toolkit of load_ctx.h. */
#include "policy/load_ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "policy/zone.h"
#include "util/env.h"
#include "util/ipaddr.h"
#include "util/units.h"
#include "util/weburl.h"
#include "util/xalloc.h"

#define TZ_MAX            128
#define ZONEINFO_DIR      POLICY_ZONEINFO_DIR
#define DEFAULT_WARN_DAYS 14

/* ---- limits ------------------------------------------------------------- */

static void lim_rate(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    load_rate_spec(c, v, &l->rate);
}

static void lim_max_conn(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    uint64_t n;
    if (load_get_uint(c, v, 1, UINT32_MAX, &n) == 0)
        l->max_connections_per_agent = (uint32_t)n;
}

static void lim_quarantine(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    if (load_get_period(c, v, 0, &l->quarantine_ms) == 0)
        l->quarantine_line = v->line;
}

static void lim_header_bytes(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    uint64_t n;
    if (load_get_size_sat(c, v, false, &n) != 0)
        return;
    if (n < 1024 || n > 1024 * 1024) {
        load_err(c, v->line, "%s is outside 1KiB-1MiB", load_show(c, v->str));
        return;
    }
    l->header_bytes = n;
}

static void lim_idle_timeout(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct limits_cfg *l = obj;
    load_get_period(c, v, 1000, &l->idle_timeout_ms);
}

static const struct key_handler limits_keys[] = {
    {"rate", lim_rate},
    {"max_connections_per_agent", lim_max_conn},
    {"quarantine", lim_quarantine},
    {"header_bytes", lim_header_bytes},
    {"idle_timeout", lim_idle_timeout},
};

void load_sec_limits(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct policy *p = obj;
    const struct ynode *vals[NKEYS(limits_keys)];
    if (load_want_map(c, v) == 0)
        load_walk_map(c, v, limits_keys, NKEYS(limits_keys), &p->limits, vals);
}

/* ---- alerts ------------------------------------------------------------- */

/* A quarantine starts when alerts.denied_burst trips (src/shape/quota.c
 * counts the denials only then): limits.quarantine without it never does,
 * though the file reads as if it did. Warned of at the quarantine's line. */
void load_warn_quarantine_unused(struct load_ctx *c)
{
    const struct policy *p = c->p;
    if (p->limits.quarantine_ms == 0 || p->alerts.denied_burst.set)
        return;
    char len[32];
    format_period_ms(p->limits.quarantine_ms, len, sizeof(len));
    size_t m = load_field_push(c, "limits.quarantine");
    load_warn(c, p->limits.quarantine_line,
              "%s never starts: a quarantine starts when alerts.denied_burst trips, and the "
              "policy has no alerts.denied_burst; add one (e.g. denied_burst: {max: 10, per: "
              "1m}) or remove quarantine",
              len);
    load_field_pop(c, m);
}

static void th_max_count(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct threshold *t = obj;
    load_get_uint(c, v, 1, UINT64_MAX, &t->max);
}

static void th_max_bytes(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct threshold *t = obj;
    uint64_t n;
    if (load_get_size(c, v, false, &n) != 0)
        return;
    if (n == 0) {
        load_err(c, v->line, "must be at least 1B");
        return;
    }
    t->max = n;
}

static void th_per(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct threshold *t = obj;
    load_get_period(c, v, 1, &t->per_ms);
}

static const struct key_handler count_keys[] = {{"max", th_max_count}, {"per", th_per}};
static const struct key_handler bytes_keys[] = {{"max", th_max_bytes}, {"per", th_per}};

static void threshold(struct load_ctx *c, const struct ynode *v, struct threshold *t, bool bytes)
{
    if (load_want_map(c, v) != 0)
        return;
    const struct key_handler *keys = bytes ? bytes_keys : count_keys;
    const struct ynode *vals[2];
    t->per_ms = 1000; /* SPEC: "`per` defaults to 1s", here as in a rate */
    t->line = v->line;
    load_walk_map(c, v, keys, 2, t, vals);
    if (load_require_key(c, vals, 0, keys, v->line))
        t->set = true;
}

static void al_first_contact(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = obj;
    load_get_bool(c, v, &a->first_contact);
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

static void al_auth_failures(struct load_ctx *c, const struct ynode *v, void *obj)
{
    threshold(c, v, &((struct alerts_cfg *)obj)->auth_failures, false);
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

/* True when <path> is a compiled zone (it starts with "TZif"). The zone
 * database holds other files too (leapseconds; zone.tab and tzdata.zi
 * have a dot, which valid_tz() refuses): glibc cannot read one as a zone
 * and takes its name for a POSIX TZ string, which is UTC, so off-hours
 * alerts would go by UTC without a word. */
static bool tzif_file(const char *path)
{
    char magic[4];
    FILE *f = fopen(path, "rbe");
    if (f == NULL)
        return false;
    bool ok = fread(magic, 1, sizeof(magic), f) == sizeof(magic) &&
              memcmp(magic, "TZif", sizeof(magic)) == 0;
    fclose(f);
    return ok;
}

static void oh_tz(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct off_hours_cfg *o = obj;
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return;
    if (strcmp(s, "UTC") != 0) {
        if (!valid_tz(s)) {
            load_err(c, v->line, "invalid time zone '%s'", load_show(c, s));
            return;
        }
        char path[sizeof(ZONEINFO_DIR) + TZ_MAX];
        struct stat st;
        snprintf(path, sizeof(path), "%s%s", ZONEINFO_DIR, s);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            load_err(c, v->line, "unknown time zone '%s' (no such file under %s)", s, ZONEINFO_DIR);
            return;
        }
        if (!tzif_file(path)) {
            load_err(c, v->line, "unknown time zone '%s' (%s is not a time zone file)", s, path);
            return;
        }
        struct tm tm;
        if (zone_localtime_file(path, time(NULL), &tm) == 1) {
            /* "TZif" and then not what glibc reads (cut short): UTC */
            load_err(c, v->line,
                     "unknown time zone '%s' (%s cannot be read as a time zone: the C library "
                     "would go by UTC)",
                     s, path);
            return;
        }
        if (strncmp(s, "right/", 6) == 0) {
            /* A "right" zone counts leap seconds, which the system clock
             * (POSIX time) leaves out: glibc would read every minute some
             * 27 s late. posix/ holds the plain zones, and is fine. */
            load_err(c, v->line,
                     "'%s' counts leap seconds, which would put off-hours boundaries some 27 s "
                     "late; write '%s'",
                     s, s + 6);
            return;
        }
    }
    load_set_str(&o->tz, s);
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
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return;
    int start = -1, end = -1;
    if (v->len == 11 && s[5] == '-') {
        start = hhmm(s, false);
        end = hhmm(s + 6, true);
    }
    if (start < 0 || end < 0) {
        load_err(c, v->line, "invalid hours '%s' (expected HH:MM-HH:MM, e.g. 08:00-19:00)",
                 load_show(c, s));
        return;
    }
    if (start == end) {
        load_err(c, v->line, "start and end of '%s' are the same", s);
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
            load_err(c, v->line,
                     "invalid days '%s' (expected e.g. Mon-Fri, Mon,Wed,Fri or a list of Mon..Sun)",
                     load_show(c, v->str));
        return;
    }
    if (load_want_nonempty_list(c, v) != 0)
        return;
    size_t i = 0;
    o->days_mask = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        const char *s = load_get_str(c, it);
        uint8_t d = s ? days_mask(s) : 0;
        if (s != NULL && d == 0)
            load_err(c, it->line, "invalid day '%s' (expected Mon, Tue, Wed, Thu, Fri, Sat or Sun)",
                     load_show(c, s));
        o->days_mask |= d;
        load_field_pop(c, m);
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
    if (load_want_map(c, v) != 0)
        return;
    const struct ynode *vals[NKEYS(off_hours_keys)];
    o->line = v->line;
    o->days_mask = 0x1f; /* Mon-Fri unless days says otherwise */
    load_walk_map(c, v, off_hours_keys, NKEYS(off_hours_keys), o, vals);
    if (o->tz == NULL)
        o->tz = xstrdup("UTC");
    if (load_require_key(c, vals, 1, off_hours_keys, v->line))
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
        load_err(c, v->line, "expected a number such as 4 or 2.5");
        return;
    }
    double f = strtod(s, NULL);
    if (!(f > 1.0)) {
        load_err(c, v->line, "must be greater than 1");
        return;
    }
    b->factor = f;
}

static void bl_floor(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = obj;
    load_get_uint(c, v, 0, UINT64_MAX, &b->floor);
}

static void bl_learn(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = obj;
    load_get_period(c, v, 1, &b->learn_ms);
}

static const struct key_handler baseline_keys[] = {
    {"factor", bl_factor},
    {"floor", bl_floor},
    {"learn", bl_learn},
};

static void al_baseline(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct baseline_cfg *b = &((struct alerts_cfg *)obj)->baseline;
    if (load_want_map(c, v) != 0)
        return;
    const struct ynode *vals[NKEYS(baseline_keys)];
    b->line = v->line;
    b->learn_ms = 24 * 3600 * 1000;
    load_walk_map(c, v, baseline_keys, NKEYS(baseline_keys), b, vals);
    if (load_require_key(c, vals, 0, baseline_keys, v->line))
        b->set = true;
}

static void al_expiry_warn_days(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = obj;
    uint64_t n;
    if (load_get_uint(c, v, 0, 3650, &n) != 0)
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

/* Whether the host of a webhook URL (<h>, <hl> bytes, without brackets) is
 * this machine's loopback: localhost, 127.0.0.0/8 or [::1]. */
static bool url_host_is_loopback(const char *h, size_t hl)
{
    if (hl == strlen("localhost") && strncasecmp(h, "localhost", hl) == 0)
        return true;
    struct ipaddr ip;
    enum ip_literal_kind kind = ip_literal_parse(h, hl, &ip);
    return (kind == IP_LITERAL_V4 || kind == IP_LITERAL_V6) && ipaddr_is_loopback(&ip);
}

/* A webhook URL as messages show it: its label (weburl.h), never the URL,
 * whose user:password@, path or query may be a secret. Valid as
 * load_show()'s result. */
static const char *show_webhook(struct load_ctx *c, const char *url)
{
    char *label = weburl_label(url);
    const char *shown = load_show(c, label != NULL ? label : "(a webhook)");
    free(label);
    return shown;
}

/* Checks the webhook URL <s> as the sink will parse it (weburl.h), so that
 * `check` refuses what `serve` could not use; warns about http:// off this
 * machine. Every message names the URL by its label; one read from a
 * variable (<ref>, "env:NAME"; NULL for a URL written inline) by that
 * reference too, and by it alone when the value is no URL: it may be the
 * secret itself (a token set without its URL, the wrong variable named),
 * which a label shows whole, or up to its first '/'. Returns 0 when it
 * loads. */
static int webhook_url(struct load_ctx *c, const struct ynode *v, const char *s, const char *ref)
{
    size_t scheme = strncmp(s, "http://", 7) == 0 ? 7 : strncmp(s, "https://", 8) == 0 ? 8 : 0;
    if (scheme == 0 || s[scheme] == '\0' || s[scheme] == '/' || has_space_or_control(s)) {
        if (ref != NULL)
            load_err(c, v->line,
                     "webhook %s: environment variable %s does not hold an http:// or https:// "
                     "URL (its value is not shown: it may be a secret)",
                     ref, ref + 4);
        else
            load_err(c, v->line, "webhook needs an http:// or https:// URL, got '%s'",
                     show_webhook(c, s));
        return -1;
    }
    struct weburl u;
    const char *why = NULL;
    if (weburl_parse(s, &u, &why) < 0) {
        if (ref != NULL)
            load_err(c, v->line, "webhook %s (%s): %s", ref, show_webhook(c, s), why);
        else
            load_err(c, v->line, "webhook %s: %s", show_webhook(c, s), why);
        return -1;
    }
    if (scheme == 7 && !url_host_is_loopback(u.host, u.host_len))
        load_warn(c, v->line,
                  "webhook to %.*s over http://: every alert, and the URL with any secret in "
                  "it, would cross the network in clear text; use https://",
                  (int)u.hostport_len, u.hostport); /* parsed: at most 263 bytes, no controls */
    return 0;
}

/* A webhook's URL written `env:NAME` (<name>): read from the variable, so
 * that the secret its path or query often is (Slack's, Discord's) is in no
 * file, the policy being readable where its tokens' values are not (run's
 * box reads it). Returns a copy of the value (the caller frees it), or NULL
 * when it is not set or empty: an error, or for `check`, which audits a
 * policy where the secrets are not present, a warning (the sink is left
 * out), counted as an unset token's is. */
static char *webhook_env_url(struct load_ctx *c, const struct ynode *v, const char *name)
{
    if (!load_env_name_ok(name)) {
        load_err(c, v->line, "webhook: invalid environment variable name '%s'", load_show(c, name));
        return NULL;
    }
    char *value = env_dup(name);
    if (value != NULL && *value != '\0')
        return value;
    const char *why = value == NULL ? "not set" : "empty";
    free(value);
    if (c->flags & POLICY_LOAD_SECRETS_OPTIONAL) {
        size_t before = c->diag->warnings, dropped = c->warnings_dropped;
        load_warn(c, v->line,
                  "webhook env:%s: environment variable %s is %s here; serve refuses to start "
                  "without it",
                  name, name, why);
        c->diag->unset_secrets += c->diag->warnings - before;      /* listed */
        c->unset_secrets_dropped += c->warnings_dropped - dropped; /* past the listed cap */
    } else {
        load_err(c, v->line, "webhook env:%s: environment variable %s is %s", name, name, why);
    }
    return NULL;
}

/* One sink: a single-key mapping {exec: /path} or {webhook: URL}.
 * Returns 1 when <out> was filled. */
static int sink_item(struct load_ctx *c, const struct ynode *it, struct sink *out)
{
    const struct ynode *k = ynode_first(it);
    if (it->kind != YNODE_MAPPING || it->count != 2 || k->kind != YNODE_SCALAR) {
        load_err(c, it->line, "expected a mapping with one key, exec or webhook");
        return 0;
    }
    const struct ynode *v = ynode_next(it, k);
    bool exec = strcmp(k->str, "exec") == 0;
    if (!exec && strcmp(k->str, "webhook") != 0) {
        load_err(c, k->line, "unknown key '%s' (expected one of exec, webhook)",
                 load_show(c, k->str));
        return 0;
    }
    const char *s = load_get_str(c, v);
    if (s == NULL)
        return 0;
    if (exec && (s[0] != '/' || has_space_or_control(s))) {
        load_err(c, v->line, "exec needs an absolute path, got '%s'", load_show(c, s));
        return 0;
    }
    char *url = NULL; /* the variable's, for env:NAME */
    if (!exec && strncmp(s, "env:", 4) == 0 && (url = webhook_env_url(c, v, s + 4)) == NULL)
        return 0;
    if (!exec && webhook_url(c, v, url != NULL ? url : s, url != NULL ? s : NULL) < 0) {
        free(url);
        return 0;
    }
    out->kind = exec ? SINK_EXEC : SINK_WEBHOOK;
    out->target = url != NULL ? url : xstrdup(s);
    out->env_ref = url != NULL ? xstrdup(s) : NULL;
    out->line = it->line;
    return 1;
}

/* A sink listed twice gets every alert twice (and a webhook two series of
 * the same name in /metrics): warned about, named by its label, with the
 * line of its first listing. The sinks are sorted by what they name (n
 * log n comparisons: before POLICY_MAX_SINKS, a hostile list of a million
 * cost the reload thread hours at n^2), and the warnings still come in
 * file order. */
struct sink_ref {
    const struct sink *s;
    size_t first; /* the sorted group's first listing, when a repeat */
    bool repeat;
};

static int cmp_sink_ref(const void *a, const void *b)
{
    const struct sink_ref *x = a, *y = b;
    if (x->s->kind != y->s->kind)
        return x->s->kind < y->s->kind ? -1 : 1;
    int r = strcmp(x->s->target, y->s->target);
    if (r != 0)
        return r;
    return x->s->index < y->s->index ? -1 : x->s->index > y->s->index;
}

static int cmp_sink_ref_pos(const void *a, const void *b)
{
    const struct sink_ref *x = a, *y = b;
    return x->s->index < y->s->index ? -1 : x->s->index > y->s->index;
}

static void warn_repeated_sinks(struct load_ctx *c, const struct alerts_cfg *a)
{
    size_t n = a->nsinks;
    if (n < 2)
        return;
    struct sink_ref *v = xcalloc(n, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = (struct sink_ref){&a->sinks[i], i, false};
    qsort(v, n, sizeof(*v), cmp_sink_ref);
    for (size_t i = 1, first = 0; i < n; i++) {
        if (v[i].s->kind == v[first].s->kind && strcmp(v[i].s->target, v[first].s->target) == 0) {
            v[i].repeat = true;
            v[i].first = (size_t)(v[first].s - a->sinks);
        } else {
            first = i;
        }
    }
    qsort(v, n, sizeof(*v), cmp_sink_ref_pos);
    for (size_t i = 0; i < n; i++) {
        if (!v[i].repeat)
            continue;
        const struct sink *s = v[i].s;
        int first_line = a->sinks[v[i].first].line;
        size_t m = load_field_push(c, "[%zu]", s->index);
        if (s->kind == SINK_EXEC)
            load_warn(c, s->line,
                      "exec %s is listed twice (line %d): every alert would run it twice",
                      load_show(c, s->target), first_line);
        else
            load_warn(c, s->line,
                      "webhook %s is listed twice (line %d): every alert would be sent twice",
                      show_webhook(c, s->target), first_line);
        load_field_pop(c, m);
    }
    free(v);
}

static void al_sinks(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = obj;
    if (load_want_list(c, v) != 0)
        return;
    if (v->count > POLICY_MAX_SINKS) {
        load_err(c, v->line, "too many alert sinks (at most %d)", POLICY_MAX_SINKS);
        return;
    }
    a->sinks = xcalloc(v->count, sizeof(*a->sinks));
    size_t i = 0;
    for (const struct ynode *it = ynode_first(v); it != NULL; it = ynode_next(v, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        if (sink_item(c, it, &a->sinks[a->nsinks]) == 1)
            a->sinks[a->nsinks++].index = i;
        load_field_pop(c, m);
    }
    warn_repeated_sinks(c, a);
}

static const struct key_handler alerts_keys[] = {
    {"first_contact", al_first_contact},
    {"write_burst", al_write_burst},
    {"upload_bytes", al_upload_bytes},
    {"denied_burst", al_denied_burst},
    {"auth_failures", al_auth_failures},
    {"off_hours", al_off_hours},
    {"baseline", al_baseline},
    {"expiry_warn_days", al_expiry_warn_days},
    {"sinks", al_sinks},
};

void load_sec_alerts(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct alerts_cfg *a = &((struct policy *)obj)->alerts;
    a->present = true;
    a->expiry_warn_days = DEFAULT_WARN_DAYS;
    const struct ynode *vals[NKEYS(alerts_keys)];
    if (load_want_map(c, v) == 0)
        load_walk_map(c, v, alerts_keys, NKEYS(alerts_keys), a, vals);
}
