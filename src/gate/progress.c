/* progress: upload progress events (see progress.h). */
#include "gate/progress.h"

#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "gate/conn.h"
#include "gate/gateway.h"
#include "gate/tunnel.h"
#include "util/units.h"
#include "watch/bus.h"

static void publish(struct conn *c, uint64_t total, const struct timespec *now)
{
    struct exchange *ex = &c->ex;
    struct egress_event ev;
    if (total <= ex->up_reported)
        return;
    memset(&ev, 0, sizeof(ev));
    ev.kind = EVENT_EGRESS_PROGRESS;
    clock_gettime(CLOCK_REALTIME, &ev.ts);
    ev.id = ex->id;
    ev.agent = ex->agent_id;
    ev.agent_hash = ex->agent_hash;
    ev.method = ex->method[0] != '\0' ? ex->method : NULL;
    ev.method_bit = ex->mbit;
    ev.scheme = !ex->have_target ? NULL : ex->is_connect ? "https" : "http";
    ev.host = ex->have_target ? ex->target.name : NULL;
    ev.port = ex->have_target ? ex->port : 0;
    ev.tier = ex->dec.tier;
    ev.rule = ex->dec.rule;
    ev.owner = ex->dec.owner;
    ev.grant = ex->dec.grant;
    ev.verdict = ex->verdict;
    ev.reason = ex->reason;
    ev.ip = ex->ip[0] != '\0' ? ex->ip : NULL;
    ev.bytes_up = total - ex->up_reported;
    ex->up_reported = total;
    ex->up_note_at = *now;
    bus_publish(&c->gw->bus, &ev);
}

static void on_progress_due(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    progress_note(arg);
}

/* Bytes held back (under PROGRESS_BYTES, within PROGRESS_MS of the last
 * event) are published once PROGRESS_MS has passed even when no more come:
 * else an agent that sends just under PROGRESS_BYTES on each of its
 * tunnels and then keeps them quiet kept those bytes out of upload_bytes,
 * the baseline and the metrics until the tunnels ended, as late as it
 * liked. The timer is assigned in the connection's own memory
 * (conn_progress_mem()) the first time. Returns false when it cannot be
 * armed. */
static bool due_later(struct conn *c, int64_t waited_ms)
{
    if (c->progress_timer == NULL) {
        struct event *ev = conn_progress_mem(c);
        if (evtimer_assign(ev, c->gw->base, on_progress_due, c) < 0)
            return false;
        c->progress_timer = ev;
    }
    if (!evtimer_pending(c->progress_timer, NULL)) {
        struct timeval tv = timeval_of_ms((uint64_t)(PROGRESS_MS - waited_ms));
        if (evtimer_add(c->progress_timer, &tv) != 0)
            return false;
    }
    return true;
}

void progress_note(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct timespec now;
    uint64_t total = ex->bytes_up + (c->tunnel != NULL ? tunnel_bytes_up(c->tunnel) : 0);
    if (!ex->active || total <= ex->up_reported)
        return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(now.tv_sec - ex->up_note_at.tv_sec) * 1000 +
                 (now.tv_nsec - ex->up_note_at.tv_nsec) / 1000000;
    if (total - ex->up_reported >= PROGRESS_BYTES || ms >= PROGRESS_MS || ms < 0 ||
        !due_later(c, ms))
        publish(c, total, &now);
}

void progress_on_tunnel(void *arg)
{
    progress_note(arg);
}

void progress_flush(struct conn *c)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    publish(c, c->ex.bytes_up, &now);
}
