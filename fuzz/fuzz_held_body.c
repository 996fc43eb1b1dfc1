/* fuzz_held_body: held_body_check() on the bytes left of a request body
 * whose client ended its side: some already read by the body's framer,
 * some held in the client's input buffer (in chains the input chooses),
 * some still queued on its socket (sent in pieces the input chooses).
 *
 * The first byte chooses where the queue is (bits 0-1: 0 or 1 a socket,
 * 2 a pipe, which cannot be peeked, 3 no descriptor at all), bit 2 pads
 * the queue with copies of its last byte to HELD_PEEK_MAX - 1 + bits 5-6
 * bytes (either side of the most that is looked at), bit 3 makes the body
 * neither chunked nor Content-Length, bit 4 copies the first held chain
 * behind bytes drained from it (a buffer read into, not only referenced).
 * The second byte chooses the body's kind (bit 0: chunked, else
 * Content-Length) and how many chains (bits 1-3) and sends (bits 4-6) the
 * bytes are cut into. Chunked: the next three bytes cut the rest into what
 * the framer read, what is held and what is queued. Content-Length: the
 * next two cut it into what is held and what is queued, the six after them
 * are the body's bytes left (modulo 2^20).
 * Invariants: nothing is consumed (the buffer's bytes, the socket's queue
 * and the body's framer are as they were), and asking again gives the same
 * answer; without a descriptor, or of a body of another kind, it is
 * UNKNOWN; a Content-Length body is SHORT exactly when the bytes left are
 * fewer than the body's, else ENDS; a chunked body ENDS when a copy of its
 * framer, fed every byte left at once, finds its end or an error among
 * the held bytes, or among the queued ones when they are looked at: a
 * socket's queue of at most HELD_PEEK_MAX bytes. It is SHORT when the
 * framer finds neither and they were all looked at, UNKNOWN otherwise. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <fcntl.h>

#include "gate/chunked.h"
#include "gate/conn.h"
#include "gate/held_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input's own queue: far below HELD_PEEK_MAX, which padding crosses. */
#define QUEUE_MAX (32u * 1024)
/* Room for a padded queue: a socket's or pipe's buffer takes it without
 * blocking. */
#define PAD_ROOM  (HELD_PEEK_MAX + 4)
#define PIPE_ROOM (512 * 1024)

enum queue_kind { Q_SOCKET, Q_PIPE, Q_NONE };

struct options {
    enum queue_kind where;
    size_t pad_to; /* the queue's length after padding, or 0: none */
    bool other;    /* a body neither chunked nor Content-Length */
    bool drained;  /* the first chain copied behind drained bytes */
    unsigned chains, sends;
};

static void check(int cond)
{
    if (!cond)
        abort();
}

static size_t cut(const uint8_t *b, size_t len)
{
    return len == 0 ? 0 : ((size_t)b[0] << 8 | b[1]) % (len + 1);
}

/* Bytes drained from the front of a copied first chain: its data starts
 * past the chain's own start, as after a read the gateway consumed. */
#define DRAINED 7

/* Holds <n> bytes of <p> in the buffer <in>, in <chains> chains of their
 * own (evbuffer_add_reference(): evbuffer_add() would fill the last), the
 * first copied behind DRAINED bytes drained when <drained>. */
static void hold(struct evbuffer *in, const char *p, size_t n, unsigned chains, bool drained)
{
    size_t each = chains > 1 ? n / chains + 1 : n;
    for (size_t off = 0; off < n; off += each) {
        size_t k = n - off < each ? n - off : each;
        if (off == 0 && drained) {
            check(evbuffer_add(in, "drained", DRAINED) == 0);
            check(evbuffer_add(in, p, k) == 0);
            check(evbuffer_drain(in, DRAINED) == 0);
        } else {
            check(evbuffer_add_reference(in, p + off, k, NULL, NULL) == 0);
        }
    }
}

/* Writes <n> bytes of <p> on <fd> in <sends> pieces, then ends that side
 * (a socket's; a pipe's writer is closed by the caller). */
static void queue(int fd, const char *p, size_t n, unsigned sends, enum queue_kind where)
{
    size_t each = sends > 1 ? n / sends + 1 : n;
    for (size_t off = 0; off < n; off += each) {
        size_t k = n - off < each ? n - off : each;
        check(write(fd, p + off, k) == (ssize_t)k);
    }
    if (where == Q_SOCKET)
        check(shutdown(fd, SHUT_WR) == 0);
}

static int queued(int fd)
{
    int n = -1;
    check(ioctl(fd, FIONREAD, &n) == 0);
    return n;
}

/* A queue's two ends: [0] read, [1] written; room for PAD_ROOM bytes.
 * Returns -1 when the system would not give them. */
static int open_queue(enum queue_kind where, int fd[2])
{
    if (where == Q_PIPE) {
        if (pipe2(fd, O_NONBLOCK) < 0)
            return -1;
        if (fcntl(fd[1], F_SETPIPE_SZ, PIPE_ROOM) < 0) {
            close(fd[0]);
            close(fd[1]);
            return -1;
        }
        return 0;
    }
    check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd) == 0);
    int room = 2 * PAD_ROOM;
    check(setsockopt(fd[1], SOL_SOCKET, SO_SNDBUF, &room, sizeof(room)) == 0);
    return 0;
}

/* What held_body_check() must answer (the header's invariants) for the
 * body of <ex> whose framer is <before>, with <held> bytes at <h> held and
 * <nq> at <q> queued on a queue of kind <where>. */
static enum held_body expected(const struct exchange *ex, const struct chunked *before,
                               const char *h, size_t held, const char *q, size_t nq,
                               enum queue_kind where, bool other)
{
    if (where == Q_NONE || other)
        return HELD_BODY_UNKNOWN;
    if (ex->req_body == BODY_LENGTH)
        return held + nq < ex->req_left ? HELD_BODY_SHORT : HELD_BODY_ENDS;
    struct chunked ref = *before;
    size_t used;
    if (chunked_feed(&ref, h, held, &used) != CHUNKED_MORE)
        return HELD_BODY_ENDS;
    if (nq == 0)
        return HELD_BODY_SHORT;
    if (where != Q_SOCKET || nq > HELD_PEEK_MAX)
        return HELD_BODY_UNKNOWN;
    return chunked_feed(&ref, q, nq, &used) != CHUNKED_MORE ? HELD_BODY_ENDS : HELD_BODY_SHORT;
}

/* The queue: the input's <n> bytes at <p>, padded to <pad_to> bytes with
 * copies of its last ('x' when none); <*len> its length. */
static const char *padded(const char *p, size_t n, size_t pad_to, size_t *len)
{
    static char buf[PAD_ROOM];
    if (pad_to <= n) {
        *len = n;
        return p;
    }
    memcpy(buf, p, n);
    memset(buf + n, n > 0 ? p[n - 1] : 'x', pad_to - n);
    *len = pad_to;
    return buf;
}

/* The bytes of <rest> (<len>) cut at <sent> and <held>: the first read by
 * the framer of <ex> (a chunked body) already, the next held, the rest
 * queued. Returns -1 when the framer was done already (held_body_check()
 * is asked of a body not done only) or the system gave no queue. */
static int run(struct exchange *ex, const char *rest, size_t len, size_t sent, size_t held,
               const struct options *o)
{
    size_t used;
    if (ex->req_body == BODY_CHUNKED &&
        chunked_feed(&ex->req_chunked, rest, sent, &used) != CHUNKED_MORE)
        return -1;
    struct chunked before = ex->req_chunked;
    int fd[2] = {-1, -1};
    if (o->where != Q_NONE && open_queue(o->where, fd) < 0)
        return -1;
    struct evbuffer *in = evbuffer_new();
    check(in != NULL);
    hold(in, rest + sent, held, o->chains, o->drained);
    size_t nq;
    const char *q = padded(rest + sent + held, len - sent - held, o->pad_to, &nq);
    if (o->where != Q_NONE)
        queue(fd[1], q, nq, o->sends, o->where);
    enum body_kind kind = ex->req_body;
    if (o->other)
        ex->req_body = kind == BODY_CHUNKED ? BODY_NONE : BODY_UNTIL_CLOSE;

    enum held_body r = held_body_check(ex, in, fd[0]);

    check(evbuffer_get_length(in) == held);
    if (o->where != Q_NONE)
        check(queued(fd[0]) == (int)nq);
    check(memcmp(&before, &ex->req_chunked, sizeof(before)) == 0);
    check(held_body_check(ex, in, fd[0]) == r);
    ex->req_body = kind;
    check(r == expected(ex, &before, rest + sent, held, q, nq, o->where, o->other));
    evbuffer_free(in);
    if (o->where != Q_NONE) {
        close(fd[0]);
        close(fd[1]);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    unsigned opts = data[0], mode = data[1];
    static const enum queue_kind kinds[4] = {Q_SOCKET, Q_SOCKET, Q_PIPE, Q_NONE};
    struct options o = {
        .where = kinds[opts & 3],
        .pad_to = opts & 4 ? HELD_PEEK_MAX - 1 + ((opts >> 5) & 3) : 0,
        .other = (opts & 8) != 0,
        .drained = (opts & 16) != 0,
        .chains = 1 + ((mode >> 1) & 7),
        .sends = 1 + ((mode >> 4) & 7),
    };
    data++;
    size--;
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
    (void)run(&ex, rest, len, sent, held, &o);
    return 0;
}
