#include "shape/admit.h"

#include <limits.h>
#include <string.h>

#include <event2/bufferevent.h>

#include "gate/conn.h"
#include "gate/gateway.h"
#include "shape/quota.h"

#define NS_PER_S 1000000000ull

unsigned shape_retry_after(uint64_t ns)
{
    uint64_t s = ns / NS_PER_S + (ns % NS_PER_S != 0);
    if (s == 0)
        s = 1;
    return s > UINT_MAX ? UINT_MAX : (unsigned)s; /* a period (87600h at most) fits */
}

/* Refuses with <reason>, or lets a report-mode agent through. */
static bool refuse(struct conn *c, enum deny_reason reason, uint64_t wait_ns)
{
    struct exchange *ex = &c->ex;
    if (ex->mode == AGENT_REPORT) {
        if (ex->verdict == VERDICT_ALLOW) {
            ex->verdict = VERDICT_REPORT;
            ex->reason = reason;
        }
        return false;
    }
    ex->retry_after = shape_retry_after(wait_ns);
    conn_refuse(c, reason, NULL, true);
    return true;
}

bool shape_check_quarantine(struct conn *c)
{
    struct quota *q = c->gw->quota;
    if (q == NULL || c->ex.agent_id == NULL)
        return false;
    uint64_t left = quota_quarantine_left(q, c->ex.agent_id, quota_now());
    return left > 0 && refuse(c, REASON_QUARANTINED, left);
}

bool shape_check_rate(struct conn *c)
{
    struct exchange *ex = &c->ex;
    struct quota *q = c->gw->quota;
    if (q == NULL || ex->agent_id == NULL)
        return false;
    const struct policy *p = ex->pol->policy;
    uint64_t now = quota_now(), wait = 0;
    const struct decision *d = &ex->dec;
    if (quota_admit(q, p, ex->agent_id, d->rule, d->limits, d->nlimits, now, &wait) < 0 &&
        refuse(c, REASON_RATE_LIMITED, wait))
        return true;
    if (ex->flow == NULL && (ex->flow = quota_flow_open(q, p, ex->agent_id, d->rule, d->limits,
                                                        d->nlimits, now)) == NULL) {
        /* Out of memory: its bytes may not go unmetered (a flow is opened
         * where no limit applies too, for a reload to bring one). */
        conn_refuse(c, REASON_GATEWAY_OVERLOADED, "out of memory", true);
        return true;
    }
    return false;
}

int shape_name_waits(struct conn *c, const char *name, void (*resume)(void *arg))
{
    struct quota_flow *f = c->ex.flow;
    if (f == NULL || !quota_flow_metered(f))
        return 0;
    size_t n = strlen(name), allowed;
    uint64_t now = quota_now();
    if (quota_flow_allow_or_pause(f, n, now, resume, c, &allowed) < 0)
        return -1;
    if (allowed == 0)
        return 1;
    quota_flow_take(f, n, now);
    return 0;
}

static void on_upload_refill(void *arg)
{
    struct conn *c = arg;
    if (c->state != CS_FORWARD || c->ex.req_done)
        return;
    bufferevent_enable(c->client, EV_READ);
    forward_on_client_read(c);
}

int shape_meter_upload(struct conn *c, size_t want, size_t *n)
{
    struct exchange *ex = &c->ex;
    if (quota_flow_allow_or_pause(ex->flow, want, quota_now(), on_upload_refill, c, n) < 0)
        return -1;
    if (*n == 0) {
        bufferevent_disable(c->client, EV_READ);
        conn_watch_hangup(c); /* its reset or end, during a wait a debt may make long */
    }
    return 0;
}
