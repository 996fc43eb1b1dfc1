/* agent_hash: one key for the process, an agent hashed once (agent_hash.h). */
#include "watch/agent_hash.h"

#include <pthread.h>
#include <string.h>

#include "util/siphash.h"
#include "watch/event.h"

static struct siphash_key key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void draw_key(void)
{
    siphash_random_key(&key, &key);
}

uint64_t agent_hash(const char *id)
{
    pthread_once(&key_once, draw_key);
    return siphash13(&key, id, strlen(id));
}

uint64_t agent_hash_of_event(const struct egress_event *ev)
{
    return ev->agent_hash != 0 ? ev->agent_hash : agent_hash(ev->agent);
}
