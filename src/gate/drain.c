/* drain: a client's progress at its write timeouts (see drain.h). */
#include "gate/drain.h"

#include <stddef.h>

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <event2/buffer.h>

void drain_reset(struct drain *d)
{
    d->stalled_ms = 0;
    d->queue = -1;
    d->moved = false;
}

uint64_t drain_step_ms(uint64_t idle_ms)
{
    /* Rounded up: DRAIN_STEPS steps always make idle_timeout. */
    uint64_t step = idle_ms / DRAIN_STEPS + (idle_ms % DRAIN_STEPS != 0);
    return step > 0 ? step : 1;
}

bool drain_keeps(struct drain *d, int64_t queue, uint64_t step_ms, uint64_t idle_ms)
{
    /* A first reading has nothing to compare with: the client may have
     * taken bytes since the timeout was set, so it is not held against it
     * (this step is the "plus one step" of the bound), unless nothing is
     * in flight at all (an empty queue: there was nothing to take). */
    bool progress = d->moved || (queue >= 0 && d->queue >= 0 && queue < d->queue) ||
                    (queue > 0 && d->queue < 0);
    d->moved = false;
    d->queue = queue;
    if (progress) {
        d->stalled_ms = 0;
        return true;
    }
    d->stalled_ms += step_ms;
    return d->stalled_ms < idle_ms;
}

int64_t drain_send_queue(evutil_socket_t fd)
{
    int n = 0;
    return ioctl(fd, SIOCOUTQ, &n) == 0 && n >= 0 ? n : -1;
}

int64_t drain_unsent(evutil_socket_t fd)
{
    int n = 0;
    return ioctl(fd, SIOCOUTQNSD, &n) == 0 && n >= 0 ? n : -1;
}

uint64_t drain_in_flight(uint64_t sent, uint64_t retrans, uint64_t acked, bool connected)
{
    /* Sent once at least (a retransmission is counted again in bytes_sent
     * and once in bytes_retrans) and not acknowledged. */
    uint64_t first_sent = sent > retrans ? sent - retrans : 0;
    /* a connect()ed socket's bytes_acked has its SYN's sequence number */
    uint64_t acked_data = connected && acked > 0 ? acked - 1 : acked;
    return first_sent > acked_data ? first_sent - acked_data : 0;
}

int64_t drain_never_left(evutil_socket_t fd, bool connected)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int64_t queue = drain_send_queue(fd);
    if (queue < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof(ti.tcpi_bytes_retrans))
        return -1;
    uint64_t in_flight =
        drain_in_flight(ti.tcpi_bytes_sent, ti.tcpi_bytes_retrans, ti.tcpi_bytes_acked, connected);
    return (uint64_t)queue > in_flight ? queue - (int64_t)in_flight : 0;
}

void drain_on_write(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *drain)
{
    (void)buf;
    if (info->n_deleted > 0)
        drain_note_progress(drain);
}

void drain_note_progress(struct drain *d)
{
    d->moved = true;
}
