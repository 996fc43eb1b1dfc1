/* fuzz_held_body: held_body_check() on the bytes left of a request body
 * whose client ended its side: some already read by the body's framer,
 * some held in the client's input buffer (in chains the input chooses),
 * some still queued on its socket (sent in pieces the input chooses).
 *
 * The first byte chooses the body's kind (bit 0: chunked, else
 * Content-Length) and how many chains (bits 1-3) and sends (bits 4-6) the
 * bytes are cut into. Chunked: the next three bytes cut the rest into what
 * the framer read, what is held and what is queued. Content-Length: the
 * next two cut it into what is held and what is queued, the six after them
 * are the body's bytes left (modulo 2^20).
 * Invariants: nothing is consumed (the buffer's bytes, the socket's queue
 * and the body's framer are as they were); a Content-Length body is SHORT
 * exactly when the bytes left are fewer than the body's, else ENDS; a
 * chunked body ENDS exactly when a copy of its framer, fed every byte left
 * at once, finds its end or an error, and is SHORT otherwise (the queue is
 * well below HELD_PEEK_MAX: it is always looked at whole). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "gate/chunked.h"
#include "gate/conn.h"
#include "gate/held_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Queues fit in a socketpair's buffer without blocking, far below
 * HELD_PEEK_MAX. */
#define QUEUE_MAX (32u * 1024)

static void check(int cond)
{
    if (!cond)
        abort();
}

static size_t cut(const uint8_t *b, size_t len)
{
    return len == 0 ? 0 : ((size_t)b[0] << 8 | b[1]) % (len + 1);
}

/* Holds <n> bytes of <p> in the buffer <in>, in <chains> chains of their
 * own (evbuffer_add_reference(): evbuffer_add() would fill the last). */
static void hold(struct evbuffer *in, const char *p, size_t n, unsigned chains)
{
    size_t each = chains > 1 ? n / chains + 1 : n;
    for (size_t off = 0; off < n; off += each) {
        size_t k = n - off < each ? n - off : each;
        check(evbuffer_add_reference(in, p + off, k, NULL, NULL) == 0);
    }
}

/* Sends <n> bytes of <p> on <fd> in <sends> pieces, then ends that side. */
static void queue(int fd, const char *p, size_t n, unsigned sends)
{
    size_t each = sends > 1 ? n / sends + 1 : n;
    for (size_t off = 0; off < n; off += each) {
        size_t k = n - off < each ? n - off : each;
        check(send(fd, p + off, k, 0) == (ssize_t)k);
    }
    check(shutdown(fd, SHUT_WR) == 0);
}

static int queued(int fd)
{
    int n = -1;
    check(ioctl(fd, FIONREAD, &n) == 0);
    return n;
}

/* The bytes of <rest> (<len>) cut at <sent> and <held>: the first read by
 * the framer of <ex> (a chunked body) already, the next held, the rest
 * queued. Returns -1 when the framer was done already (held_body_check()
 * is asked of a body not done only). */
static int run(struct exchange *ex, const char *rest, size_t len, size_t sent, size_t held,
               unsigned chains, unsigned sends)
{
    size_t used;
    if (ex->req_body == BODY_CHUNKED &&
        chunked_feed(&ex->req_chunked, rest, sent, &used) != CHUNKED_MORE)
        return -1;
    struct chunked before = ex->req_chunked;
    struct evbuffer *in = evbuffer_new();
    int sv[2];
    check(in != NULL);
    check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    hold(in, rest + sent, held, chains);
    queue(sv[1], rest + sent + held, len - sent - held, sends);

    enum held_body r = held_body_check(ex, in, sv[0]);

    check(evbuffer_get_length(in) == held);
    check(queued(sv[0]) == (int)(len - sent - held));
    check(memcmp(&before, &ex->req_chunked, sizeof(before)) == 0);
    if (ex->req_body == BODY_LENGTH) {
        check(r == (len - sent < ex->req_left ? HELD_BODY_SHORT : HELD_BODY_ENDS));
    } else {
        struct chunked ref = before;
        int rc = chunked_feed(&ref, rest + sent, len - sent, &used);
        check(r == (rc != CHUNKED_MORE ? HELD_BODY_ENDS : HELD_BODY_SHORT));
    }
    evbuffer_free(in);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    unsigned mode = data[0];
    unsigned chains = 1 + ((mode >> 1) & 7), sends = 1 + ((mode >> 4) & 7);
    struct exchange ex;
    memset(&ex, 0, sizeof(ex));
    size_t head;
    if (mode & 1) {
        ex.req_body = BODY_CHUNKED;
        chunked_init_request(&ex.req_chunked);
        head = 4;
    } else {
        if (size < 9)
            return 0;
        ex.req_body = BODY_LENGTH;
        for (size_t i = 3; i < 9; i++)
            ex.req_left = ex.req_left << 8 | data[i];
        ex.req_left %= 1u << 20;
        head = 9;
    }
    const char *rest = (const char *)data + head;
    size_t len = size - head;
    if (len > QUEUE_MAX)
        return 0;
    size_t sent = ex.req_body == BODY_CHUNKED ? cut(data + 1, len) : 0;
    size_t held = ex.req_body == BODY_CHUNKED ? data[3] * (len - sent) / 255
                                              : ((size_t)data[1] * 256 + data[2]) % (len + 1);
    (void)run(&ex, rest, len, sent, held, chains, sends);
    return 0;
}
