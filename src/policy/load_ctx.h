/* load_ctx: the policy loader's reading toolkit. INTERNAL to the policy
 * loader (load.c, load_ctx.c, load_alerts.c, load_outrank.c, load_tunnel_limits.c): nothing outside
 * src/policy/ includes it; the gate and the CLI use policy.h.
 *
 * A struct load_ctx carries the policy being filled, the diagnostics and
 * the dotted field path of the value being read ("rules[3].ports[0]").
 * Every reader reports through load_err()/load_warn() as
 * "file:line: field: message" and returns 0 / -1 (or NULL) after reporting;
 * reading goes on after an error so that every problem is reported.
 * Mappings go through load_walk_map(), which rejects unknown and duplicate
 * keys and calls one value_fn per known key, in the table's order. */
#ifndef SLUICE_POLICY_LOAD_CTX_H
#define SLUICE_POLICY_LOAD_CTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"
#include "policy/yaml_tree.h"

#define FIELD_MAX 384 /* bytes of a field path, NUL included */
#define SHOW_MAX  64  /* characters of hostile text a message shows */
#define KEYS_MAX  16  /* entries of a key_handler table, at most */
/* Errors, and warnings, a load lists at most; the rest are counted in one
 * closing finding. Each costs a few hundred bytes: a 4 MB list of bad
 * ports made two million of them (294 MB in serve, 2.2 GB in check), so a
 * 16 MiB policy could take the gateway's memory from its reload thread. */
#define LOAD_FINDINGS_MAX 1000

struct load_ctx {
    struct diag *diag;
    struct policy *p;
    char field[FIELD_MAX]; /* the dotted path of the value being read */
    size_t flen;
    char show[2][SHOW_MAX * 4 + 8];
    int show_slot;
    const char **agent_ids; /* sorted ids of the agents section, for lookups */
    size_t nagent_ids;
    unsigned flags;                          /* enum policy_load_flags */
    size_t errors_listed, warnings_listed;   /* by load_err(), load_warn() */
    size_t errors_dropped, warnings_dropped; /* over LOAD_FINDINGS_MAX */
    size_t unset_secrets_dropped;            /* of warnings_dropped: diag's unset_secrets */
};

/* Reads the value <v> of one key into <obj> (the handler knows its type). */
typedef void (*value_fn)(struct load_ctx *c, const struct ynode *v, void *obj);

struct key_handler {
    const char *name;
    value_fn fn;
};

#define NKEYS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- field paths and messages ---- */

/* Appends printf(<fmt>) to the field path (truncated at FIELD_MAX) and
 * returns the mark that load_field_pop() restores. */
__attribute__((format(printf, 2, 3))) size_t load_field_push(struct load_ctx *c, const char *fmt,
                                                             ...);
void load_field_pop(struct load_ctx *c, size_t mark);
/* Appends ".<key>" (or "<key>" at the root); returns the mark. */
size_t load_field_key(struct load_ctx *c, const char *key);
/* Hostile text made fit for a message: printable ASCII only, at most
 * SHOW_MAX characters. Returns one of two buffers in <c> that rotate, so one
 * message may show two values; valid until the next call but one. */
const char *load_show(struct load_ctx *c, const char *s);
/* An error or a warning at <line> about the current field path; beyond
 * LOAD_FINDINGS_MAX of its kind, only counted (load_findings_close()). */
__attribute__((format(printf, 3, 4))) void load_err(struct load_ctx *c, int line, const char *fmt,
                                                    ...);
__attribute__((format(printf, 3, 4))) void load_warn(struct load_ctx *c, int line, const char *fmt,
                                                     ...);
/* Adds the closing finding that counts what load_err() and load_warn()
 * left out, if they left anything out. */
void load_findings_close(struct load_ctx *c);
/* The errors load_err() was given so far, listed or not: what tells
 * whether a part of the file had one (the diag holds at most
 * LOAD_FINDINGS_MAX of them). */
size_t load_error_count(const struct load_ctx *c);
/* Reports <msg> about the key <key> below the current path. */
void load_err_at_key(struct load_ctx *c, const char *key, int line, const char *msg);

/* ---- typed values: 0 (or a string owned by the tree) on success, -1 (or
 * NULL) after reporting ---- */

int load_want_list(struct load_ctx *c, const struct ynode *n);
int load_want_map(struct load_ctx *c, const struct ynode *n);
int load_want_nonempty_list(struct load_ctx *c, const struct ynode *n);
/* A string: a scalar that is not YAML's null ("", "~", "null"), else NULL
 * after reporting. A field with a fixed set of values (mode, refuse|allow)
 * reads it so and names its values when it gets another ("yes"). */
const char *load_get_str(struct load_ctx *c, const struct ynode *n);
/* A name the policy gives (a host pattern, an agent id): as
 * load_get_str(), and not a plain word YAML reads as a boolean ("host:
 * no"), which no one means as a name and YAML 1.1 tools read as false. */
const char *load_get_name(struct load_ctx *c, const struct ynode *n);
/* "true" or "false" when <n> is a plain scalar YAML reads as a boolean:
 * YAML 1.2's core schema and YAML 1.1's, y and n included (PyYAML, and so
 * many a reviewer's script or CI check, reads all but those two so); NULL
 * for anything else, a quoted or !!str-tagged scalar included. */
const char *load_yaml_boolean(const struct ynode *n);
/* True when <n> is a plain scalar YAML 1.2's core schema or YAML 1.1
 * reads as a number (0x1F, 1e3, .nan, 12:30, 1_000, 017); false for
 * anything else, a quoted or !!str-tagged scalar included. */
bool load_yaml_number(const struct ynode *n);
/* Reports a plain YAML boolean (yes, no, on, off, ...) or a null written
 * as a word (~, null) where a string is wanted: -1 after reporting, else
 * 0. For strings read without load_get_str(), such as mapping keys. */
int load_refuse_yaml_word(struct load_ctx *c, const struct ynode *n);
/* True when <s> (NUL-terminated) is one or more ASCII digits. */
bool load_all_digits(const char *s);
/* A plain decimal integer within <lo>..<hi>. */
int load_get_uint(struct load_ctx *c, const struct ynode *n, uint64_t lo, uint64_t hi,
                  uint64_t *out);
/* A plain decimal integer, one too large for 64 bits read as UINT64_MAX: for
 * a field that checks its own range and names it, showing the number as
 * written (n->str), however large. */
int load_get_uint_sat(struct load_ctx *c, const struct ynode *n, uint64_t *out);
int load_get_bool(struct load_ctx *c, const struct ynode *n, bool *out);
/* A period; <min_ms> is 0 or 1 ("greater than 0") or a larger floor. */
int load_get_period(struct load_ctx *c, const struct ynode *n, uint64_t min_ms, uint64_t *out);
/* A size; with <per_second>, an optional "/s" suffix is accepted. */
int load_get_size(struct load_ctx *c, const struct ynode *n, bool per_second, uint64_t *out);
/* As load_get_size(), one too large for 64 bits read as UINT64_MAX: for a
 * field that checks its own range and names it, showing the size as
 * written. */
int load_get_size_sat(struct load_ctx *c, const struct ynode *n, bool per_second, uint64_t *out);

/* ---- entries listed twice (load_repeats.c) ---- */

/* One entry of a list for load_warn_repeats(). */
struct load_entry {
    const void *key; /* what entries compare on (a normal form), the caller's */
    int line;
    size_t pos;     /* its index in the list, for the field path */
    int first_line; /* set by load_warn_repeats(): the first listing's line */
    bool repeat;    /* set by load_warn_repeats() */
};
/* The longest text a <show> callback writes, NUL included. */
#define LOAD_ENTRY_SHOW_MAX 320
/* Warns at each entry of <v> whose key an earlier entry has (<cmp> says 0),
 * in file order: "FIELD[pos]: KEY is listed twice (line L)", L the first
 * listing's line, KEY as <show> writes it. <v> is in file order. */
void load_warn_repeats(struct load_ctx *c, struct load_entry *v, size_t n,
                       int (*cmp)(const void *a, const void *b),
                       void (*show)(const void *key, char *buf, size_t size));

/* ---- mappings and lists ---- */

/* Checks every key of <map> against <keys> (<nkeys> <= KEYS_MAX), reports
 * unknown and duplicate ones, then calls the handler of each key present, in
 * table order, with the path extended by the key. Fills <vals> (nkeys
 * entries) with the value nodes found, NULL for absent keys. */
void load_walk_map(struct load_ctx *c, const struct ynode *map, const struct key_handler *keys,
                   size_t nkeys, void *obj, const struct ynode **vals);
/* Requires key <idx> of a load_walk_map() result; reports it missing at
 * <line>. */
bool load_require_key(struct load_ctx *c, const struct ynode **vals, size_t idx,
                      const struct key_handler *keys, int line);
/* True when the CIDR <r>, written <s>, is an IPv6 prefix that holds
 * ::ffff:0:0/96 ("::/0", "::/1"): it covers every IPv4 address too, which
 * load_parse_cidr_node() warns of. */
bool load_cidr_covers_ipv4(const char *s, const struct cidr *r);
/* Parses the CIDR <s> (the text of <n>) with the messages every section
 * shares. */
int load_parse_cidr_node(struct load_ctx *c, const struct ynode *n, const char *s,
                         struct cidr *out);
/* Reads a list of CIDRs into a new array <*out> (freeing the old one); the
 * word <word> (when not NULL) sets <*saw_word> instead. */
void load_cidr_list(struct load_ctx *c, const struct ynode *list, const char *word, bool *saw_word,
                    struct cidr **out, size_t *nout);
/* Replaces <*dst> (freed) with a copy of <s>, or NULL. */
void load_set_str(char **dst, const char *s);

/* ---- sections shared or kept in their own file ---- */

/* A rate: {requests, per, burst, bandwidth} (rules and limits). */
void load_rate_spec(struct load_ctx *c, const struct ynode *v, struct rate_spec *r);
/* The limits and alerts sections (load_alerts.c); <obj> is the policy. */
void load_sec_limits(struct load_ctx *c, const struct ynode *v, void *obj);
void load_sec_alerts(struct load_ctx *c, const struct ynode *v, void *obj);
/* Warns of a limits.quarantine that cannot start: the policy has no
 * alerts.denied_burst, which starts it (load_alerts.c). */
void load_warn_quarantine_unused(struct load_ctx *c);

/* True when the sorted port lists of rules <a> and <b> share a port
 * (load_outrank.c). */
bool load_ports_meet(const struct rule *a, const struct rule *b);
/* True when an agent may be served by both <a> and <b> (agents: sorted). */
bool load_agents_meet(const struct rule *a, const struct rule *b);
/* Warns of each rule below tier 3 that decides, its pattern being more
 * specific, requests a tier-3 grant of a less specific pattern covers
 * (load_outrank.c). Needs the index. */
void load_warn_outranking_rules(struct load_ctx *c);
/* Warns of each rule whose rate a tunnel (CONNECT, extension method) it
 * covers is not held to: more than DECISION_LIMITS_MAX others with a rate
 * cover the same name, agent and port (load_tunnel_limits.c). Needs the
 * index. */
void load_warn_tunnel_limits(struct load_ctx *c);

/* The longest NAME an `env:NAME` (a token, a webhook URL) may name. */
#define LOAD_ENV_NAME_MAX 128

/* Whether <s> is a variable name an `env:NAME` may give: 1 to
 * LOAD_ENV_NAME_MAX letters, digits and '_', not starting with a digit. */
bool load_env_name_ok(const char *s);

#endif
