/* load_ctx: the policy loader's reading toolkit (see load_ctx.h): field
 * paths and messages, typed scalars, mappings through load_walk_map(), CIDR
 * lists and rate specs. */
#include "policy/load_ctx.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/units.h"
#include "util/xalloc.h"

/* ---- field paths and messages ------------------------------------------ */

size_t load_field_push(struct load_ctx *c, const char *fmt, ...)
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

void load_field_pop(struct load_ctx *c, size_t mark)
{
    c->flen = mark;
    c->field[mark] = '\0';
}

size_t load_field_key(struct load_ctx *c, const char *key)
{
    return load_field_push(c, c->flen > 0 ? ".%s" : "%s", key);
}

/* Hostile text made fit for a message: printable ASCII only, bounded. Two
 * slots rotate so that one message may show two values. */
const char *load_show(struct load_ctx *c, const char *s)
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

void load_err(struct load_ctx *c, int line, const char *fmt, ...)
{
    if (c->errors_listed >= LOAD_FINDINGS_MAX) {
        c->errors_dropped++;
        return;
    }
    c->errors_listed++;
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    diag_error(c->diag, line, c->field, "%s", msg);
    free(msg);
}

void load_warn(struct load_ctx *c, int line, const char *fmt, ...)
{
    if (c->warnings_listed >= LOAD_FINDINGS_MAX) {
        c->warnings_dropped++;
        return;
    }
    c->warnings_listed++;
    va_list ap;
    va_start(ap, fmt);
    char *msg = xvasprintf(fmt, ap);
    va_end(ap);
    diag_warning(c->diag, line, c->field, "%s", msg);
    free(msg);
}

void load_findings_close(struct load_ctx *c)
{
    char tail[80];
    if (c->errors_dropped > 0) {
        snprintf(tail, sizeof(tail), " (the first %d are): fix those and check again",
                 LOAD_FINDINGS_MAX);
        diag_unlisted(c->diag, DIAG_ERROR, c->errors_dropped, tail);
    }
    if (c->warnings_dropped > 0) {
        snprintf(tail, sizeof(tail), " (the first %d are)", LOAD_FINDINGS_MAX);
        diag_unlisted(c->diag, DIAG_WARNING, c->warnings_dropped, tail);
        /* Warnings that do not fail check --strict (a secret's variable
         * not set where the file is checked) do not fail it unlisted
         * either: a CI job without the secrets of 1001 agents passed with
         * 1000 and failed on the finding that counts the last. */
        if (c->unset_secrets_dropped == c->warnings_dropped)
            c->diag->unset_secrets++;
    }
}

size_t load_error_count(const struct load_ctx *c)
{
    return c->errors_listed + c->errors_dropped;
}

/* Reports <msg> about the key <key> below the current path. */
void load_err_at_key(struct load_ctx *c, const char *key, int line, const char *msg)
{
    size_t m = load_field_key(c, key);
    load_err(c, line, "%s", msg);
    load_field_pop(c, m);
}

/* ---- typed scalars ------------------------------------------------------ */

int load_want_list(struct load_ctx *c, const struct ynode *n)
{
    if (n->kind == YNODE_SEQUENCE)
        return 0;
    load_err(c, n->line, "expected a list");
    return -1;
}

int load_want_map(struct load_ctx *c, const struct ynode *n)
{
    if (n->kind == YNODE_MAPPING)
        return 0;
    load_err(c, n->line, "expected a mapping");
    return -1;
}

int load_want_nonempty_list(struct load_ctx *c, const struct ynode *n)
{
    if (load_want_list(c, n) != 0)
        return -1;
    if (n->count > 0)
        return 0;
    load_err(c, n->line, "must not be empty");
    return -1;
}

const char *load_yaml_boolean(const struct ynode *n)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                      "on",   "On",   "ON",   "y",   "Y"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO",
                                     "off",   "Off",   "OFF",   "n",  "N"};
    if (n->kind != YNODE_SCALAR || n->quoted)
        return NULL;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(n->str, yes[i]) == 0)
            return "true";
        if (strcmp(n->str, no[i]) == 0)
            return "false";
    }
    return NULL;
}

/* Past a run of the characters of <set> in <s>. */
static const char *skip(const char *s, const char *set)
{
    return s + strspn(s, set);
}

/* The plain scalars YAML reads as numbers, YAML 1.2's core schema and
 * YAML 1.1's (as PyYAML reads them) together: .nan, [-+].inf, [-+]0x and
 * 0b (1.1, with '_'), 0o (1.2), and decimals: [-+] digits ('_' after the
 * first), then 1.1's base-60 ":[0-5]?[0-9]" parts, then a '.' and digits,
 * or a '.' and a digit first, then an exponent [eE][-+]digits. */
bool load_yaml_number(const struct ynode *n)
{
    if (n->kind != YNODE_SCALAR || n->quoted)
        return false;
    const char *s = n->str;
    if (strcmp(s, ".nan") == 0 || strcmp(s, ".NaN") == 0 || strcmp(s, ".NAN") == 0)
        return true;
    if (s[0] == '0' && s[1] == 'o')
        return s[2] != '\0' && *skip(s + 2, "01234567") == '\0';
    if (s[0] == '-' || s[0] == '+')
        s++;
    if (strcmp(s, ".inf") == 0 || strcmp(s, ".Inf") == 0 || strcmp(s, ".INF") == 0)
        return true;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'b'))
        return s[2] != '\0' &&
               *skip(s + 2, s[1] == 'x' ? "0123456789abcdefABCDEF_" : "01_") == '\0';
    if (s[0] >= '0' && s[0] <= '9') {
        s = skip(s, "0123456789_");
        while (s[0] == ':' && s[1] >= '0' && s[1] <= '9') {
            const char *e = skip(s + 1, "0123456789");
            if (e - s > 3 || (e - s == 3 && s[1] > '5'))
                return false;
            s = e;
        }
        if (s[0] == '.')
            s = skip(s + 1, "0123456789_");
    } else if (s[0] == '.' && s[1] >= '0' && s[1] <= '9') {
        s = skip(s + 1, "0123456789_");
    } else {
        return false;
    }
    if (s[0] == 'e' || s[0] == 'E') {
        s += (s[1] == '-' || s[1] == '+') ? 2 : 1;
        if (s[0] < '0' || s[0] > '9')
            return false;
        s = skip(s, "0123456789");
    }
    return s[0] == '\0';
}

int load_refuse_yaml_word(struct load_ctx *c, const struct ynode *n)
{
    const char *boolean = load_yaml_boolean(n);
    if (boolean != NULL) {
        /* "host: no" is no host anyone meant, and PyYAML (a reviewer's
         * script, a policy generator) reads it as False: the file would
         * say one thing to them and another to the gateway */
        load_err(c, n->line,
                 "'%s' is YAML's boolean %s, not a string: write it in quotes (\"%s\") if that "
                 "is what you mean",
                 n->str, boolean, n->str);
        return -1;
    }
    if (ynode_is_null(n) && n->len > 0) {
        load_err(c, n->line, "expected a string, not YAML's null '%s'", n->str);
        return -1;
    }
    return 0;
}

const char *load_get_str(struct load_ctx *c, const struct ynode *n)
{
    if (n->kind == YNODE_SCALAR && !ynode_is_null(n))
        return n->str;
    if (n->kind == YNODE_SCALAR && n->len > 0)
        load_err(c, n->line, "expected a string, not YAML's null '%s'", n->str);
    else
        load_err(c, n->line, "expected a string");
    return NULL;
}

const char *load_get_name(struct load_ctx *c, const struct ynode *n)
{
    return load_refuse_yaml_word(c, n) == 0 ? load_get_str(c, n) : NULL;
}

bool load_all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A plain scalar of digits with a leading zero (0443) is refused: YAML 1.1
 * tools (PyYAML, and so many a policy generator or reviewer's script) read
 * it as octal 291, and the file would say one thing to them and another
 * to the gateway. Returns 0, or -1 (reported). */
static int refuse_leading_zero(struct load_ctx *c, const struct ynode *n)
{
    const char *s = n->str;
    if (n->kind != YNODE_SCALAR || n->quoted || s[0] != '0' || s[1] == '\0' || !load_all_digits(s))
        return 0;
    const char *v = s;
    while (v[0] == '0' && v[1] != '\0')
        v++;
    load_err(c, n->line, "'%s' has a leading zero, which YAML 1.1 tools read as octal; write %s",
             load_show(c, s), v);
    return -1;
}

/* A plain decimal integer; one too large for 64 bits sets <*huge> and
 * returns -1 unreported. Returns 0 or -1. */
static int get_uint(struct load_ctx *c, const struct ynode *n, uint64_t *out, bool *huge)
{
    *huge = false;
    if (n->kind != YNODE_SCALAR || ynode_is_null(n)) {
        load_err(c, n->line, "expected an integer");
        return -1;
    }
    if (n->quoted) {
        load_err(c, n->line, "expected an integer, not a quoted string");
        return -1;
    }
    if (parse_uint(n->str, UINT64_MAX, out) != 0) {
        if (load_all_digits(n->str)) /* only overflow makes digits fail */
            *huge = true;
        else
            load_err(c, n->line, "expected an integer, got '%s'", load_show(c, n->str));
        return -1;
    }
    return refuse_leading_zero(c, n);
}

/* An integer for a field that checks and names its own range: one too
 * large for 64 bits reads as UINT64_MAX, past any such range, and the
 * caller's message shows n->str, the number as written. */
int load_get_uint_sat(struct load_ctx *c, const struct ynode *n, uint64_t *out)
{
    bool huge;
    if (get_uint(c, n, out, &huge) == 0)
        return 0;
    if (!huge)
        return -1;
    *out = UINT64_MAX;
    return 0;
}

/* A plain decimal integer within <lo>..<hi>. Returns 0 or -1 (reported). */
int load_get_uint(struct load_ctx *c, const struct ynode *n, uint64_t lo, uint64_t hi,
                  uint64_t *out)
{
    uint64_t v;
    bool huge;
    if (get_uint(c, n, &v, &huge) != 0) {
        if (huge)
            load_err(c, n->line, "%s is too large (at most %" PRIu64 ")", load_show(c, n->str), hi);
        return -1;
    }
    if (v < lo) {
        load_err(c, n->line, "must be at least %" PRIu64, lo);
        return -1;
    }
    if (v > hi) {
        load_err(c, n->line, "%" PRIu64 " is too large (at most %" PRIu64 ")", v, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int load_get_bool(struct load_ctx *c, const struct ynode *n, bool *out)
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
    load_err(c, n->line, "expected true or false");
    return -1;
}

/* A size or period written as bare digits ("10", quoted or not) has no
 * unit: SPEC.md gives sizes and periods with theirs only, and `bandwidth:
 * 10` meant as 10 MiB/s would throttle to 10 bytes a second without a word
 * (units.c reads bare digits as bytes or seconds, for the command line).
 * 0 is the same in every unit, and stays. <what> names the kind, <units>
 * the suffixes, each after the number. Returns 0, or -1 (reported). */
static int refuse_bare_number(struct load_ctx *c, const struct ynode *n, const char *digits,
                              const char *what, const char *const *units, size_t nunits)
{
    if (!load_all_digits(digits) || strcmp(digits, "0") == 0)
        return 0;
    const char *num = load_show(c, digits);
    char forms[SHOW_MAX * 4 * 4 + 64];
    size_t o = 0;
    for (size_t i = 0; i < nunits && o < sizeof(forms); i++) {
        int w = snprintf(forms + o, sizeof(forms) - o, "%s%s%s",
                         i == 0            ? ""
                         : i + 1 == nunits ? " or "
                                           : ", ",
                         num, units[i]);
        if (w < 0)
            break;
        o += (size_t)w;
    }
    load_err(c, n->line, "'%s' has no unit, and a %s needs one: write %s", num, what, forms);
    return -1;
}

static const char *const period_units[] = {"s", "m", "h"};
static const char *const size_units[] = {"B", "KiB", "MiB", "GiB"};
static const char *const rate_units[] = {"B/s", "KiB/s", "MiB/s", "GiB/s"};

/* The longest period a policy may give: 87600h (3650 days, as for
 * expiry_warn_days). The watch adds periods to clocks in milliseconds,
 * which one of billions of hours overflowed. */
#define PERIOD_MAX_MS (3650ull * 24 * 3600 * 1000)

/* A period; <min_ms> is 0 or 1 ("greater than 0") or a larger floor. */
int load_get_period(struct load_ctx *c, const struct ynode *n, uint64_t min_ms, uint64_t *out)
{
    const char *s = load_get_str(c, n);
    if (s == NULL || refuse_leading_zero(c, n) != 0 ||
        refuse_bare_number(c, n, s, "period", period_units, NKEYS(period_units)) != 0)
        return -1;
    uint64_t ms;
    int got = parse_period_ms(s, &ms);
    if (got == -2) /* past 64 bits of milliseconds: past the cap below */
        ms = UINT64_MAX;
    else if (got != 0) {
        load_err(c, n->line, "invalid period '%s' (expected e.g. 30s, 5m, 1h)", load_show(c, s));
        return -1;
    }
    if (ms < min_ms) {
        if (min_ms == 1)
            load_err(c, n->line, "must be greater than 0");
        else
            load_err(c, n->line, "must be at least %" PRIu64 "s", min_ms / 1000);
        return -1;
    }
    if (ms > PERIOD_MAX_MS) {
        load_err(c, n->line, "%s is too long (at most 87600h, 3650 days)", load_show(c, s));
        return -1;
    }
    *out = ms;
    return 0;
}

/* A size; with <per_second>, an optional "/s" suffix is accepted. One too
 * large for 64 bits sets <*huge> and returns -1 unreported. */
static int get_size(struct load_ctx *c, const struct ynode *n, bool per_second, uint64_t *out,
                    bool *huge)
{
    *huge = false;
    const char *s = load_get_str(c, n);
    if (s == NULL || refuse_leading_zero(c, n) != 0)
        return -1;
    char tmp[64];
    size_t len = n->len;
    if (per_second && len > 2 && strcmp(s + len - 2, "/s") == 0)
        len -= 2;
    if (len < sizeof(tmp)) {
        memcpy(tmp, s, len);
        tmp[len] = '\0';
        if (per_second ? refuse_bare_number(c, n, tmp, "bandwidth", rate_units, NKEYS(rate_units))
                       : refuse_bare_number(c, n, tmp, "size", size_units, NKEYS(size_units)))
            return -1;
        int got = parse_size(tmp, out);
        if (got == 0)
            return 0;
        if (got == -2) {
            *huge = true;
            return -1;
        }
    }
    load_err(c, n->line, "invalid size '%s' (expected e.g. 512KiB, 10MiB%s)", load_show(c, s),
             per_second ? ", 1MiB/s" : "");
    return -1;
}

/* A size; with <per_second>, an optional "/s" suffix is accepted. */
int load_get_size(struct load_ctx *c, const struct ynode *n, bool per_second, uint64_t *out)
{
    bool huge;
    if (get_size(c, n, per_second, out, &huge) == 0)
        return 0;
    if (huge)
        load_err(c, n->line, "'%s' is too large (at most %" PRIu64 " bytes, 1 byte under 16 EiB)",
                 load_show(c, n->str), UINT64_MAX);
    return -1;
}

/* As load_get_size(), for a field that checks and names its own range: one
 * too large for 64 bits reads as UINT64_MAX. */
int load_get_size_sat(struct load_ctx *c, const struct ynode *n, bool per_second, uint64_t *out)
{
    bool huge;
    if (get_size(c, n, per_second, out, &huge) == 0)
        return 0;
    if (!huge)
        return -1;
    *out = UINT64_MAX;
    return 0;
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
void load_walk_map(struct load_ctx *c, const struct ynode *map, const struct key_handler *keys,
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
            load_err(c, k->line, "expected a string key");
        } else if (i == nkeys) {
            char list[256];
            expected_keys(keys, nkeys, list, sizeof(list));
            load_err(c, k->line, "unknown key '%s' (expected one of %s)", load_show(c, k->str),
                     list);
        } else if (kn[i] != NULL) { /* named by its own field: rules[0].host */
            size_t m = load_field_key(c, keys[i].name);
            load_err(c, k->line, "duplicate key '%s' (first at line %d)", keys[i].name,
                     kn[i]->line);
            load_field_pop(c, m);
        } else {
            kn[i] = k;
            vals[i] = v;
        }
        k = v;
    }
    for (size_t i = 0; i < nkeys; i++) {
        if (vals[i] == NULL || keys[i].fn == NULL)
            continue;
        size_t m = load_field_key(c, keys[i].name);
        keys[i].fn(c, vals[i], obj);
        load_field_pop(c, m);
    }
}

/* Requires key <idx> of a load_walk_map() result; reports it missing at <line>. */
bool load_require_key(struct load_ctx *c, const struct ynode **vals, size_t idx,
                      const struct key_handler *keys, int line)
{
    if (vals[idx] != NULL)
        return true;
    load_err_at_key(c, keys[idx].name, line, "is required");
    return false;
}

bool load_cidr_covers_ipv4(const char *s, const struct cidr *r)
{
    struct ipaddr v4;
    ipaddr_from_v4(&v4, 0);
    return strchr(s, ':') != NULL && r->prefix < 96 && cidr_contains(r, &v4);
}

/* A CIDR written without a prefix length is the one address (/32, /128):
 * warned of when that address looks like a network's, an IPv4 one ending
 * in .0 or an IPv6 one whose last 64 bits are zero, most likely written
 * without the length its author meant ("cidr: 192.168.10.0" allows one
 * address, not the /24). */
static void warn_bare_network(struct load_ctx *c, const struct ynode *n, const char *s,
                              const struct cidr *r)
{
    static const uint8_t zero[8];
    const uint8_t *b = r->addr.b;
    bool v6 = strchr(s, ':') != NULL;
    if (strchr(s, '/') != NULL || (v6 ? memcmp(b + 8, zero, 8) != 0 : b[15] != 0))
        return;
    int guess = v6 ? 64 : b[14] != 0 ? 24 : b[13] != 0 ? 16 : 8;
    load_warn(c, n->line,
              "'%s' has no prefix length: it is the one address %s/%d, not the network it "
              "looks like; write the network with its length (%s/%d, say), or %s/%d for the one "
              "address",
              load_show(c, s), s, v6 ? 128 : 32, s, guess, s, v6 ? 128 : 32);
}

/* Parses a CIDR with the messages every section shares. */
int load_parse_cidr_node(struct load_ctx *c, const struct ynode *n, const char *s, struct cidr *out)
{
    int rc = cidr_parse(s, out);
    if (rc == 0) {
        warn_bare_network(c, n, s, out);
        /* IPv4 is matched in its v4-mapped form, ::ffff:0:0/96: an IPv6
         * prefix that holds it ("::/0", "::/1") covers every IPv4 address
         * too, 169.254.169.254 and RFC 1918 included, which its author
         * most likely did not mean. */
        if (load_cidr_covers_ipv4(s, out))
            load_warn(c, n->line,
                      "'%s' also covers every IPv4 address (IPv4 is matched as "
                      "::ffff:0:0/96); list IPv4 ranges on their own, or use a narrower "
                      "IPv6 prefix such as 2000::/3",
                      load_show(c, s));
        return 0;
    }
    if (rc == -2)
        load_err(c, n->line, "invalid CIDR '%s': host bits set below the prefix", load_show(c, s));
    else
        load_err(c, n->line, "invalid CIDR '%s'", load_show(c, s));
    return -1;
}

static int cmp_cidr_key(const void *a, const void *b)
{
    const struct cidr *x = a, *y = b;
    if (x->prefix != y->prefix)
        return x->prefix < y->prefix ? -1 : 1;
    return memcmp(x->addr.b, y->addr.b, sizeof(x->addr.b));
}

static void show_cidr_key(const void *key, char *buf, size_t size)
{
    cidr_format(key, buf, size);
}

/* Reads a list of CIDRs into a new array; the word <word> (when not NULL)
 * sets <*saw_word> instead. A range listed twice (as parsed: 10.0.0.0/8
 * and 10.0.0.0/8, ::1 and ::1/128), or the word, is warned about at its
 * second line, naming the first's. */
void load_cidr_list(struct load_ctx *c, const struct ynode *list, const char *word, bool *saw_word,
                    struct cidr **out, size_t *nout)
{
    free(*out);
    *out = xcalloc(list->count, sizeof(**out));
    *nout = 0;
    struct load_entry *seen = xcalloc(list->count != 0 ? list->count : 1, sizeof(*seen));
    int word_line = 0;
    size_t i = 0;
    for (const struct ynode *it = ynode_first(list); it != NULL; it = ynode_next(list, it), i++) {
        size_t m = load_field_push(c, "[%zu]", i);
        const char *s = load_get_str(c, it);
        if (s != NULL && word != NULL && strcmp(s, word) == 0) {
            *saw_word = true;
            if (word_line != 0)
                load_warn(c, it->line, "%s is listed twice (line %d)", word, word_line);
            else
                word_line = it->line;
        } else if (s != NULL && load_parse_cidr_node(c, it, s, &(*out)[*nout]) == 0) {
            seen[*nout] = (struct load_entry){&(*out)[*nout], it->line, i, 0, false};
            (*nout)++;
        }
        load_field_pop(c, m);
    }
    load_warn_repeats(c, seen, *nout, cmp_cidr_key, show_cidr_key);
    free(seen);
}

void load_set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? xstrdup(s) : NULL;
}

/* ---- rate specs (rules and limits) -------------------------------------- */

/* What a rate of 0 is told: a bucket of size 0 is off (src/shape/quota.c),
 * so "requests: 0" or "bandwidth: 0B" (none at all, as read) would let
 * everything through unshaped. */
#define RATE_ZERO_TAIL                                                                             \
    "a bucket of size 0 is off, so it would let every %s through; what should get nothing "        \
    "needs no rule (what no rule allows is denied) or a deny entry, and a rate that limits %s "    \
    "only leaves %s out"

static void rate_requests(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    if (load_get_uint(c, v, 0, UINT64_MAX, &r->requests) == 0 && r->requests == 0)
        load_err(c, v->line, "0 is not no requests: " RATE_ZERO_TAIL, "request", "bandwidth",
                 "requests");
}

static void rate_per(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    load_get_period(c, v, 1, &r->per_ms);
}

static void rate_burst(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    load_get_uint(c, v, 0, UINT64_MAX, &r->burst);
}

static void rate_bandwidth(struct load_ctx *c, const struct ynode *v, void *obj)
{
    struct rate_spec *r = obj;
    if (load_get_size(c, v, true, &r->bandwidth) == 0 && r->bandwidth == 0)
        load_err(c, v->line, "%s is not no bytes: " RATE_ZERO_TAIL, load_show(c, v->str), "byte",
                 "requests", "bandwidth");
}

static const struct key_handler rate_keys[] = {
    {"requests", rate_requests},
    {"per", rate_per},
    {"burst", rate_burst},
    {"bandwidth", rate_bandwidth},
};

void load_rate_spec(struct load_ctx *c, const struct ynode *v, struct rate_spec *r)
{
    if (load_want_map(c, v) != 0)
        return;
    r->per_ms = 1000;
    r->set = true;
    r->line = v->line;
    const struct ynode *vals[NKEYS(rate_keys)];
    load_walk_map(c, v, rate_keys, NKEYS(rate_keys), r, vals);
    /* a requests or bandwidth of 0 is refused at its line (above) */
    if (vals[0] == NULL && vals[3] == NULL)
        load_err(c, v->line, "needs requests or bandwidth");
    /* per paces requests only; the bandwidth bucket refills in a second.
     * {requests: 600, per: 1m, bandwidth: 60MiB} reads as 60MiB a minute
     * and would let 60 times that through: without /s, a bandwidth next
     * to another per is refused. */
    const struct ynode *bw = vals[3];
    if (bw != NULL && r->bandwidth > 0 && r->per_ms != 1000 &&
        !(bw->len > 2 && strcmp(bw->str + bw->len - 2, "/s") == 0)) {
        char per[32];
        format_period_ms(r->per_ms, per, sizeof(per));
        size_t m = load_field_key(c, "bandwidth");
        load_err(c, bw->line,
                 "%s is bytes a second, not per %s: per paces requests only; write %s/s if a "
                 "second is meant",
                 load_show(c, bw->str), per, load_show(c, bw->str));
        load_field_pop(c, m);
    }
}

bool load_env_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > LOAD_ENV_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return false;
    }
    return true;
}
