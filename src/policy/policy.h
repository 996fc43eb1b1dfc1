/* policy: loading and freeing a policy file.
 *
 * policy_load() reads SPEC.md's YAML with libyaml, validates every key
 * (unknown keys are errors), parses sizes, periods, dates, CIDRs and host
 * patterns, resolves env: tokens, checks tier-3 grants for owner and
 * expiry and rejects duplicate rules. Every problem is reported to <diag>
 * as "file:line: field: message"; loading goes on after an error so that
 * `sluice check` lists all of them. Time-dependent findings (expired and
 * expiring grants) are lint.c's, because they depend on "now". */
#ifndef SLUICE_POLICY_POLICY_H
#define SLUICE_POLICY_POLICY_H

#include <stddef.h>

#include "policy/model.h"
#include "util/diag.h"

/* Hard caps on hostile policy input. A policy is kilobytes; loading one
 * costs up to some 25 times its size (every scalar a YAML node, every rule
 * its pattern, ports and index entries: 760,000 rules of the shortest kind
 * in 16 MiB peak at 380 MB in serve), and a reload holds the new policy
 * beside the one in force, so the byte cap is what bounds the gateway's
 * memory there. A regular file over it is refused unread.
 * POLICY_MAX_BYTES_TEXT: the cap as messages name it. */
#define POLICY_MAX_BYTES      (16u * 1024 * 1024)
#define POLICY_MAX_BYTES_TEXT "16 MiB"
#define POLICY_MAX_RULES      1000000u
#define POLICY_MAX_DENY       1000000u
#define POLICY_MAX_AGENTS     1000000u
#define POLICY_MAX_DEPTH      16

/* Returns a new policy parsed from <path>, indexed and ready for
 * policy_decide(); the caller frees it with policy_free(). Returns NULL when
 * <diag> holds at least one error (or the file cannot be read), after
 * reporting every problem found. Warnings do not make it fail. */
struct policy *policy_load(const char *path, struct diag *diag);

/* Same, from a buffer; <name> is used in messages (borrowed). */
struct policy *policy_load_buffer(const char *name, const char *buf, size_t len, struct diag *diag);

enum policy_load_flags {
    /* An env: token whose variable is unset or empty is a warning, not an
     * error, and the agent gets no secret: for `sluice check`, which audits
     * a policy where the secrets are not present. Never for serving. */
    POLICY_LOAD_SECRETS_OPTIONAL = 1u << 0,
    /* When <diag> holds errors, return the policy as far as it was built
     * instead of NULL: not indexed (p->index is NULL, so policy_decide()
     * denies everything), and a rule that had errors may lack fields (its
     * pattern NULL when the host or cidr was bad). Still NULL when nothing
     * could be built (unreadable file, YAML syntax error, over the size
     * cap). For `sluice check`, which lints the rules that did parse.
     * Never for serving. */
    POLICY_LOAD_KEEP_PARTIAL = 1u << 1,
    /* An env: token whose variable is unset or empty is no error and no
     * warning, and the agent gets no secret (its token_ref is kept): for
     * `sluice run`'s gateway, where every client is --agent
     * (gateway_config.forced_agent) and no secret is ever compared. Never
     * for a gateway that identifies clients. */
    POLICY_LOAD_SECRETS_UNUSED = 1u << 2,
};

/* policy_load() and policy_load_buffer() with <flags> (enum policy_load_flags). */
struct policy *policy_load_flags(const char *path, unsigned flags, struct diag *diag);
struct policy *policy_load_buffer_flags(const char *name, const char *buf, size_t len,
                                        unsigned flags, struct diag *diag);

/* Opens the policy file <path> to read as policy_load() does: without
 * waiting for a FIFO's writer (O_NONBLOCK; policy_load_fd() waits a bounded
 * time), never as the controlling terminal. Returns the descriptor, which
 * the caller closes, or -1 with errno set. */
int policy_open(const char *path);

/* From now on, every load waiting for a FIFO's writer (policy_load_fd())
 * gives up within POLICY_STOP_CHECK_MS, and every later one at once, its
 * error "cannot read FILE: the gateway is stopping: ...". For a stop: the
 * reload thread it waits for would otherwise wait as long as a writer
 * keeps writing (each write resets the wait). Safe from any thread. */
#define POLICY_STOP_CHECK_MS 100
/* A load that has read its file and is parsing when it is called is waited
 * for (it reads nothing more; bounded by the policy's caps): it uses
 * OpenSSL, which the exit that follows a stop tears down. */
void policy_load_stop(void);

/* The loads parsing now (policy_load_fd(), past their read). */
unsigned policy_loads_parsing(void);

/* policy_load_flags() from <fd>, which policy_open() opened on <path>
 * (borrowed; the caller closes <fd>): the file's kind and size are judged
 * by fstat() on <fd>, so that a caller that judged them too (`sluice
 * check`, regular files only) judged the file that is read, not one put at
 * the path since. */
struct policy *policy_load_fd(int fd, const char *path, unsigned flags, struct diag *diag);

/* policy_load_flags() for commands that serve: on failure prints
 * "<prefix>file:line: field: message" (the first error) on standard error and
 * returns NULL; on success prints the loader's warnings there, each as
 * "warning: file:line: field: message" (diag_format_warnings()). Expiry is
 * not among them: gateway_print_grant_warnings() covers it. The file is
 * named shown \ooo (text_shown()): the operator's path may hold a line end
 * or a terminal escape, which would forge lines of standard error. */
struct policy *policy_load_reporting(const char *path, unsigned flags, const char *prefix);

/* What policy_load_reporting() prints for a load into <d> whose result is
 * <p>, the file named as <d> names it: for a load made elsewhere (serve's
 * start-up load, on a thread). */
void policy_report_load(const struct diag *d, const struct policy *p, const char *prefix);

/* The room a server gives a policy's warnings on standard error. */
#define POLICY_WARNINGS_TEXT 8192

/* Frees <p> and everything it owns. Accepts NULL. */
void policy_free(struct policy *p);

/* The longest agent id. */
#define AGENT_ID_MAX 64

/* True when <s> is an agent id a policy can name: 1 to AGENT_ID_MAX of
 * a-z, 0-9, '.', '_' and '-'. */
bool policy_valid_agent_id(const char *s);

/* Returns the agent with <id>, or NULL. */
const struct agent *policy_find_agent(const struct policy *p, const char *id);

/* Whether a ClientHello that carries an encrypted one is let through for
 * agent <a> (NULL: an agent without an entry): its own
 * encrypted_client_hello, else network.encrypted_client_hello. */
bool policy_allows_encrypted_hello(const struct policy *p, const struct agent *a);

#endif
