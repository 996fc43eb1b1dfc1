/* agent_hash: the hash of an agent's id that the watchers find it by.
 *
 * One SipHash key for the process, drawn at the first call: the gate
 * hashes an exchange's agent once (egress_event.agent_hash) and the
 * detectors and the metrics look the agent up with that hash, where each
 * hashed the id again under a key of its own for every event (four events
 * a CONNECT, eight hashes). The key stays one that no one outside the
 * process knows: no one can aim agent ids at one bucket. */
#ifndef SLUICE_WATCH_AGENT_HASH_H
#define SLUICE_WATCH_AGENT_HASH_H

#include <stdint.h>

struct egress_event;

/* SipHash-1-3 of the NUL-terminated <id> under the process's key. */
uint64_t agent_hash(const char *id);

/* The hash of <ev>'s agent (not NULL): the one the event carries, or, for
 * an event made without it (0), its agent's hashed now. */
uint64_t agent_hash_of_event(const struct egress_event *ev);

#endif
