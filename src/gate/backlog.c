#include "gate/backlog.h"

#include <stdbool.h>

static size_t held[2];                                  /* backlog_held(), by enum backlog_way */
static size_t budget = 4096 * (size_t)BACKLOG_PER_CONN; /* backlog_budget_for_conns() */

void backlog_budget_for_conns(unsigned conns)
{
    size_t b = (size_t)conns * BACKLOG_PER_CONN;
    budget = b > BACKLOG_FLOOR ? b : BACKLOG_FLOOR;
}

static void take_off(size_t *sum, size_t n)
{
    *sum -= n <= *sum ? n : *sum;
}

/* Every change to a tracked buffer: bytes added by the gateway, drained
 * by libevent's writes to the socket. <arg> is the sum it counts in. */
static void on_change(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    size_t *sum = arg;
    (void)out;
    *sum += info->n_added;
    take_off(sum, info->n_deleted);
}

struct evbuffer_cb_entry *backlog_track(struct evbuffer *out, enum backlog_way way)
{
    struct evbuffer_cb_entry *e = evbuffer_add_cb(out, on_change, &held[way]);
    if (e != NULL)
        held[way] += evbuffer_get_length(out);
    return e;
}

void backlog_untrack(struct evbuffer *out, struct evbuffer_cb_entry *e, enum backlog_way way)
{
    if (e == NULL)
        return;
    take_off(&held[way], evbuffer_get_length(out));
    evbuffer_remove_cb_entry(out, e);
}

size_t backlog_held(enum backlog_way way)
{
    return held[way];
}

static bool within_budget(void)
{
    return held[BACKLOG_TO_CLIENT] + held[BACKLOG_TO_UPSTREAM] <= budget;
}

size_t backlog_mark(size_t normal)
{
    return within_budget() || normal <= BACKLOG_TIGHT ? normal : BACKLOG_TIGHT;
}

size_t backlog_low_mark(size_t normal)
{
    return within_budget() || normal <= BACKLOG_TIGHT_LOW ? normal : BACKLOG_TIGHT_LOW;
}
