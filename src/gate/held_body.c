/* held_body: the body's end looked for among the bytes left (held_body.h). */
#include "gate/held_body.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <event2/buffer.h>

#include "gate/chunked.h"
#include "gate/conn.h"

/* Feeds every byte of <in> to <ck>, consuming none of them; returns the
 * framer's last result. */
static int feed_buffer(struct chunked *ck, struct evbuffer *in)
{
    struct evbuffer_ptr at;
    struct evbuffer_iovec v;
    size_t left = evbuffer_get_length(in);
    if (left == 0 || evbuffer_ptr_set(in, &at, 0, EVBUFFER_PTR_SET) < 0)
        return CHUNKED_MORE;
    while (left > 0 && evbuffer_peek(in, -1, &at, &v, 1) > 0 && v.iov_len > 0) {
        size_t len = v.iov_len < left ? v.iov_len : left, used;
        int rc = chunked_feed(ck, v.iov_base, len, &used);
        if (rc != CHUNKED_MORE)
            return rc;
        left -= len;
        if (left > 0 && evbuffer_ptr_set(in, &at, len, EVBUFFER_PTR_ADD) < 0)
            break;
    }
    return CHUNKED_MORE;
}

/* Feeds the <queued> bytes on socket <fd> to <ck>, read with MSG_PEEK
 * (they stay queued); HELD_BODY_UNKNOWN when they cannot all be looked at. */
static enum held_body feed_queue(struct chunked *ck, int fd, size_t queued)
{
    if (queued > HELD_PEEK_MAX)
        return HELD_BODY_UNKNOWN;
    char *buf = malloc(queued);
    if (buf == NULL)
        return HELD_BODY_UNKNOWN;
    ssize_t got = recv(fd, buf, queued, MSG_PEEK | MSG_DONTWAIT);
    size_t used;
    int rc = got > 0 ? chunked_feed(ck, buf, (size_t)got, &used) : CHUNKED_MORE;
    free(buf);
    if (rc != CHUNKED_MORE)
        return HELD_BODY_ENDS;
    return got == (ssize_t)queued ? HELD_BODY_SHORT : HELD_BODY_UNKNOWN;
}

enum held_body held_body_check(const struct exchange *ex, struct evbuffer *in, int fd)
{
    int queued = 0;
    if (ioctl(fd, FIONREAD, &queued) < 0 || queued < 0)
        return HELD_BODY_UNKNOWN;
    if (ex->req_body == BODY_LENGTH) {
        uint64_t held = evbuffer_get_length(in) + (uint64_t)queued;
        return held < ex->req_left ? HELD_BODY_SHORT : HELD_BODY_ENDS;
    }
    if (ex->req_body != BODY_CHUNKED)
        return HELD_BODY_UNKNOWN;
    struct chunked ck = ex->req_chunked; /* a copy: the body's own framer reads on */
    if (feed_buffer(&ck, in) != CHUNKED_MORE)
        return HELD_BODY_ENDS;
    return queued == 0 ? HELD_BODY_SHORT : feed_queue(&ck, fd, (size_t)queued);
}
