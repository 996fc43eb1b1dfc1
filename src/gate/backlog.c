#include "gate/backlog.h"

static size_t held;                                     /* backlog_held() */
static size_t budget = 4096 * (size_t)BACKLOG_PER_CONN; /* backlog_budget_for_conns() */

void backlog_budget_for_conns(unsigned conns)
{
    size_t b = (size_t)conns * BACKLOG_PER_CONN;
    budget = b > BACKLOG_FLOOR ? b : BACKLOG_FLOOR;
}

/* Every change to a tracked buffer: bytes added by the gateway, drained
 * by libevent's writes to the socket. */
static void on_change(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    (void)out;
    (void)arg;
    held += info->n_added;
    held -= info->n_deleted <= held ? info->n_deleted : held;
}

struct evbuffer_cb_entry *backlog_track(struct evbuffer *out)
{
    struct evbuffer_cb_entry *e = evbuffer_add_cb(out, on_change, NULL);
    if (e != NULL)
        held += evbuffer_get_length(out);
    return e;
}

void backlog_untrack(struct evbuffer *out, struct evbuffer_cb_entry *e)
{
    if (e == NULL)
        return;
    size_t n = evbuffer_get_length(out);
    held -= n <= held ? n : held;
    evbuffer_remove_cb_entry(out, e);
}

size_t backlog_held(void)
{
    return held;
}

size_t backlog_mark(size_t normal)
{
    return held <= budget || normal <= BACKLOG_TIGHT ? normal : BACKLOG_TIGHT;
}

size_t backlog_low_mark(size_t normal)
{
    return held <= budget || normal <= BACKLOG_TIGHT_LOW ? normal : BACKLOG_TIGHT_LOW;
}
