/* Unit tests for gate/stream.c's stream_read_more() on real socket
 * bufferevents (whose input libevent keeps frozen at its end): it reads
 * past libevent's 4 KiB up to what it is asked, never past the read high
 * watermark, leaves the end of the peer's side for the bufferevent's next
 * read, reports a reset as an error, and reads nothing without a socket;
 * stream_read_rest() reads past the watermark, up to what it is asked,
 * and takes what came before a reset.
 *
 * stream_own_reads(): each case runs on a bufferevent libevent reads and
 * on one whose reads were taken over, and both must see the same: what a
 * read event takes, the read and event callbacks (end, reset, read
 * timeout), the watermarks, the priority, a bufferevent freed from its own
 * callback; and only the taken one reads without ioctl(FIONREAD), counted
 * by this program's ioctl(), which libevent's calls reach first.
 *
 * stream_read_soon(): a read in the loop round under way, no poll first. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "gate/stream.h"

struct fixture {
    struct event_base *base;
    struct bufferevent *bev; /* on sv[0], which it closes */
    int sv[2];
};

static int setup(void **state)
{
    static struct fixture f;
    f.base = event_base_new();
    assert_non_null(f.base);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, f.sv), 0);
    f.bev = bufferevent_socket_new(f.base, f.sv[0], BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(f.bev);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    bufferevent_free(f->bev);
    if (f->sv[1] >= 0)
        close(f->sv[1]);
    event_base_free(f->base);
    return 0;
}

/* Writes <n> bytes (a pattern) to <fd>; the socket must take them all. */
static void put(int fd, size_t n)
{
    char buf[4096];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)i;
    while (n > 0) {
        size_t k = n < sizeof(buf) ? n : sizeof(buf);
        assert_int_equal(write(fd, buf, k), (ssize_t)k);
        n -= k;
    }
}

static size_t input_length(const struct fixture *f)
{
    return evbuffer_get_length(bufferevent_get_input(f->bev));
}

/* The input holds <n> bytes of put()'s pattern, in order. */
static void input_is_the_pattern(const struct fixture *f, size_t n)
{
    assert_int_equal(input_length(f), n);
    const unsigned char *p = evbuffer_pullup(bufferevent_get_input(f->bev), -1);
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i % 4096))
            fail_msg("byte %zu out of order", i);
}

static void reads_up_to_what_it_is_asked(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 100000);
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 65536);
    assert_int_equal(input_length(f), 65536);
    /* the input already holds that much: nothing more */
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 0);
    /* the rest, and then the socket has no more (EAGAIN is not an error) */
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 200000), 100000 - 65536);
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 200000), 0);
    assert_int_equal(input_length(f), 100000);
    input_is_the_pattern(f, 100000);
}

static void stops_at_the_read_high_watermark(void **state)
{
    struct fixture *f = *state;
    bufferevent_setwatermark(f->bev, EV_READ, 0, 10000);
    put(f->sv[1], 50000);
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 10000);
    assert_int_equal(input_length(f), 10000);
}

static void leaves_the_end_for_the_bufferevent(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 1000);
    close(f->sv[1]);
    f->sv[1] = -1;
    assert_int_equal(stream_read_more(f->bev, f->sv[0], 65536), 1000);
    char c;
    assert_int_equal(read(f->sv[0], &c, 1), 0); /* the end is still there to be read */
}

static void reads_nothing_without_a_socket(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 1000);
    assert_int_equal(stream_read_more(f->bev, -1, 65536), 0);
    assert_int_equal(input_length(f), 0);
}

/* A connected pair of loopback TCP sockets: *a non-blocking, *b blocking. */
static void tcp_pair(int *l, int *a, int *b)
{
    *l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    assert_int_equal(bind(*l, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(*l, 1), 0);
    assert_int_equal(getsockname(*l, (struct sockaddr *)&sin, &len), 0);
    *a = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(*a, (struct sockaddr *)&sin, sizeof(sin)) != 0)
        assert_int_equal(errno, EINPROGRESS);
    *b = accept(*l, NULL, NULL);
    assert_true(*b >= 0);
}

/* Waits until the reset of <fd>'s peer has reached <fd>: the kernel marks
 * the socket in error and hung up (POLLERR, POLLHUP, which poll() reports
 * unasked); an end of the peer's side alone (a FIN) is neither. Bounded:
 * 10 s, then the test fails, not a read of a socket still up. */
static void wait_reset(int fd)
{
    struct pollfd p = {.fd = fd, .events = 0};
    int n;
    do
        n = poll(&p, 1, 10000);
    while (n < 0 && errno == EINTR);
    if (n != 1 || !(p.revents & POLLERR) || !(p.revents & POLLHUP))
        fail_msg("no reset reached the socket (poll %d, revents 0x%x)", n, (unsigned)p.revents);
}

static void reports_a_reset(void **state)
{
    (void)state;
    int l, a, b;
    tcp_pair(&l, &a, &b);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(b); /* a reset */
    wait_reset(a);
    struct event_base *base = event_base_new();
    struct bufferevent *bev = bufferevent_socket_new(base, a, BEV_OPT_CLOSE_ON_FREE);
    errno = 0;
    assert_int_equal(stream_read_more(bev, a, 65536), -1);
    assert_int_equal(errno, ECONNRESET);
    bufferevent_free(bev);
    event_base_free(base);
    close(l);
}

static void rest_reads_past_the_watermark(void **state)
{
    struct fixture *f = *state;
    put(f->sv[1], 150000);
    bufferevent_setwatermark(f->bev, EV_READ, 0, 10000);
    assert_int_equal(stream_read_rest(f->bev, f->sv[0], 140000), 140000);
    /* the rest, and then the socket has no more */
    assert_int_equal(stream_read_rest(f->bev, f->sv[0], 1 << 20), 10000);
    assert_int_equal(stream_read_rest(f->bev, f->sv[0], 1 << 20), 0);
    input_is_the_pattern(f, 150000);
}

static void rest_takes_what_came_before_a_reset(void **state)
{
    (void)state;
    int l, a, b;
    tcp_pair(&l, &a, &b);
    put(b, 30000);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(b); /* a reset, behind the bytes */
    wait_reset(a);
    struct event_base *base = event_base_new();
    struct bufferevent *bev = bufferevent_socket_new(base, a, BEV_OPT_CLOSE_ON_FREE);
    /* what a write meeting the reset consumes: the error, not the bytes */
    assert_int_equal(send(a, "x", 1, MSG_NOSIGNAL), -1);
    assert_int_equal(stream_read_rest(bev, a, 1 << 20), 30000);
    assert_int_equal(evbuffer_get_length(bufferevent_get_input(bev)), 30000);
    bufferevent_free(bev);
    event_base_free(base);
    close(l);
}

/* FIONREADs asked of the kernel in this process. libevent's calls to
 * ioctl() resolve to this program's: it counts them and passes them on. */
static unsigned fionreads;

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (request == FIONREAD)
        fionreads++;
    return (int)syscall(SYS_ioctl, fd, request, arg);
}

/* What a bufferevent's callbacks saw. */
struct seen {
    int reads;         /* read callbacks */
    size_t len;        /* the input's length at the last one */
    short what;        /* the event callback's <what>; 0 none */
    int err;           /* errno at the event callback */
    bool free_on_read; /* the read callback frees the bufferevent */
};

static void seen_read(struct bufferevent *bev, void *arg)
{
    struct seen *s = arg;
    s->reads++;
    s->len = evbuffer_get_length(bufferevent_get_input(bev));
    if (s->free_on_read)
        bufferevent_free(bev);
}

static void seen_event(struct bufferevent *bev, short what, void *arg)
{
    struct seen *s = arg;
    (void)bev;
    s->what = what;
    s->err = errno;
}

/* A bufferevent on <fd> in <base> that reports to <s>, read by libevent or,
 * with <own>, by stream_own_reads(). Reading is not enabled yet. */
static struct bufferevent *watched(struct event_base *base, int fd, bool own, struct seen *s)
{
    struct bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(bev);
    bufferevent_setcb(bev, seen_read, NULL, seen_event, s);
    if (own)
        assert_int_equal(stream_own_reads(bev), 0);
    return bev;
}

/* A socketpair's two ends, sv[0] for the bufferevent. */
static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}

/* A watched() bufferevent on one end of a socketpair, in a base of its
 * own; the rig stays where it is made (the callbacks hold &s). */
struct rig {
    struct event_base *base;
    struct bufferevent *bev; /* NULL once freed */
    int peer;                /* the other end; -1 once closed */
    struct seen s;
};

static void rig_open(struct rig *r, bool own)
{
    int sv[2];
    pair(sv);
    memset(r, 0, sizeof(*r));
    r->base = event_base_new();
    assert_non_null(r->base);
    r->bev = watched(r->base, sv[0], own, &r->s);
    r->peer = sv[1];
}

/* Frees what <r> holds; returns what its callbacks saw. */
static struct seen rig_close(struct rig *r)
{
    if (r->bev != NULL)
        bufferevent_free(r->bev);
    if (r->peer >= 0)
        close(r->peer);
    event_base_free(r->base);
    return r->s;
}

static size_t rig_input(const struct rig *r)
{
    return evbuffer_get_length(bufferevent_get_input(r->bev));
}

/* Runs <r>'s loop for <n> turns that do not wait. */
static void turns(struct rig *r, int n)
{
    for (int i = 0; i < n; i++)
        event_base_loop(r->base, EVLOOP_NONBLOCK);
}

/* Runs <base>'s loop, waiting, until <s> saw an event (a hang guard of
 * 500 turns). */
static void until_event(struct event_base *base, const struct seen *s)
{
    for (int i = 0; i < 500 && s->what == 0; i++)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_not_equal(s->what, 0);
}

/* Enables <r>'s reads and runs its loop until its event callback is
 * called, which must find reading off; frees <r>. */
static struct seen until_reads_stop(struct rig *r)
{
    bufferevent_enable(r->bev, EV_READ);
    until_event(r->base, &r->s);
    assert_int_equal(bufferevent_get_enabled(r->bev) & EV_READ, 0);
    return rig_close(r);
}

/* Runs <scenario> read by libevent, then by stream_own_reads(): both must
 * see the same callbacks, the event one with <what> (0: not called).
 * Returns what the second saw. */
static struct seen seen_alike(struct seen (*scenario)(bool own), short what)
{
    struct seen a = scenario(false);
    struct seen b = scenario(true);
    assert_int_equal(a.what, what);
    assert_int_equal(b.what, a.what);
    assert_int_equal(b.err, a.err);
    assert_int_equal(b.reads, a.reads);
    assert_int_equal(b.len, a.len);
    return b;
}

/* One read event takes 4 KiB of what waits, then the read callback runs;
 * the next takes the next 4 KiB. */
static struct seen one_event_reads(bool own)
{
    struct rig r;
    rig_open(&r, own);
    put(r.peer, 10000);
    bufferevent_enable(r.bev, EV_READ);
    event_base_loop(r.base, EVLOOP_ONCE);
    assert_int_equal(r.s.reads, 1);
    assert_int_equal(r.s.len, 4096);
    event_base_loop(r.base, EVLOOP_ONCE);
    assert_int_equal(r.s.len, 8192);
    return rig_close(&r);
}

static void own_reads_take_what_libevent_takes(void **state)
{
    (void)state;
    struct seen a = one_event_reads(false);
    struct seen b = one_event_reads(true);
    assert_int_equal(a.reads, b.reads);
    assert_int_equal(a.len, b.len);
}

/* The peer sends 100 bytes and ends its side. */
static struct seen end_of_peer(bool own)
{
    struct rig r;
    rig_open(&r, own);
    put(r.peer, 100);
    close(r.peer);
    r.peer = -1;
    return until_reads_stop(&r);
}

static void own_reads_report_the_end_as_libevent(void **state)
{
    (void)state;
    struct seen s = seen_alike(end_of_peer, BEV_EVENT_READING | BEV_EVENT_EOF);
    assert_int_equal(s.len, 100);
}

/* The peer resets the connection (TCP: a socketpair has no reset). */
static struct seen reset_by_peer(bool own)
{
    struct seen s = {0};
    int l, a, b;
    tcp_pair(&l, &a, &b);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(b);
    struct event_base *base = event_base_new();
    struct bufferevent *bev = watched(base, a, own, &s);
    bufferevent_enable(bev, EV_READ);
    until_event(base, &s);
    assert_int_equal(bufferevent_get_enabled(bev) & EV_READ, 0);
    bufferevent_free(bev);
    event_base_free(base);
    close(l);
    return s;
}

static void own_reads_report_a_reset_as_libevent(void **state)
{
    (void)state;
    struct seen s = seen_alike(reset_by_peer, BEV_EVENT_READING | BEV_EVENT_ERROR);
    assert_int_equal(s.err, ECONNRESET);
}

/* Nothing comes within the read timeout. */
static struct seen read_timeout(bool own)
{
    struct rig r;
    rig_open(&r, own);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 20000};
    bufferevent_set_timeouts(r.bev, &tv, NULL);
    return until_reads_stop(&r);
}

static void own_reads_keep_the_read_timeout(void **state)
{
    (void)state;
    struct seen s = seen_alike(read_timeout, BEV_EVENT_READING | BEV_EVENT_TIMEOUT);
    assert_int_equal(s.reads, 0);
}

/* Input lengths: after reading under a high watermark of 5000 (no read
 * callback takes any), after draining it, after setting the watermark to
 * what the input holds, after draining 1000 from there, after raising it
 * to 6000, and with none. */
struct marks {
    size_t at_high, after_drain, at_equal, after_equal_drain, after_raise, uncapped;
};

static int libevent_cap(struct bufferevent *bev, size_t high)
{
    bufferevent_setwatermark(bev, EV_READ, 0, high);
    return 0;
}

/* high_watermark() with the watermark set by <cap>. */
static struct marks high_watermark_by(bool own, int (*cap)(struct bufferevent *, size_t))
{
    struct rig r;
    struct marks m;
    rig_open(&r, own);
    /* No read callback: libevent calls one again and again while the
     * input stays at the high watermark (bufferevent_inbuf_wm_check()). */
    bufferevent_setcb(r.bev, NULL, NULL, seen_event, &r.s);
    struct evbuffer *in = bufferevent_get_input(r.bev);
    assert_int_equal(cap(r.bev, 5000), 0);
    put(r.peer, 20000);
    bufferevent_enable(r.bev, EV_READ);
    turns(&r, 10);
    m.at_high = rig_input(&r);
    evbuffer_drain(in, 5000);
    turns(&r, 10);
    m.after_drain = rig_input(&r);
    evbuffer_drain(in, 2000); /* 3000 left */
    assert_int_equal(cap(r.bev, 3000), 0);
    turns(&r, 10);
    m.at_equal = rig_input(&r);
    evbuffer_drain(in, 1000);
    turns(&r, 10);
    m.after_equal_drain = rig_input(&r);
    assert_int_equal(cap(r.bev, 6000), 0);
    turns(&r, 10);
    m.after_raise = rig_input(&r);
    assert_int_equal(cap(r.bev, 0), 0);
    turns(&r, 10);
    m.uncapped = rig_input(&r);
    rig_close(&r);
    return m;
}

static struct marks high_watermark(bool own)
{
    return high_watermark_by(own, libevent_cap);
}

static void own_reads_keep_the_high_watermark(void **state)
{
    (void)state;
    struct marks a = high_watermark(false);
    struct marks b = high_watermark(true);
    assert_int_equal(a.at_high, 5000);
    assert_int_equal(a.after_drain, 5000);
    assert_int_equal(a.at_equal, 3000);
    assert_int_equal(a.after_equal_drain, 3000);
    assert_int_equal(a.after_raise, 6000);
    assert_int_equal(a.uncapped, 12000); /* all that is left of the 20000 */
    assert_memory_equal(&a, &b, sizeof(a));
}

/* stream_set_read_cap() holds the input where libevent's read high
 * watermark does: on reads of this file's, with a callback of its own
 * (which acts only as the input reaches the cap and leaves it), and on
 * libevent's (bufferevent_setwatermark()). */
static void read_cap_keeps_the_high_watermark(void **state)
{
    (void)state;
    struct marks a = high_watermark_by(false, libevent_cap);
    struct marks b = high_watermark_by(true, stream_set_read_cap);
    struct marks c = high_watermark_by(false, stream_set_read_cap);
    assert_int_equal(b.at_high, 5000);
    assert_int_equal(b.after_raise, 6000);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_memory_equal(&a, &c, sizeof(a));
}

/* evbuffer_add_cb() fails (NULL, as out of memory) the next
 * <add_cb_failures> times it is called. stream.c's calls reach this
 * program's definition, as do libevent's own (bufferevent_setwatermark()
 * adds its watermark callback with it). */
static int add_cb_failures;

struct evbuffer_cb_entry *evbuffer_add_cb(struct evbuffer *buf, evbuffer_cb_func cb, void *arg)
{
    if (add_cb_failures > 0) {
        add_cb_failures--;
        return NULL;
    }
    struct evbuffer_cb_entry *(*real)(struct evbuffer *, evbuffer_cb_func, void *) =
        (struct evbuffer_cb_entry * (*)(struct evbuffer *, evbuffer_cb_func, void *))
            dlsym(RTLD_NEXT, "evbuffer_add_cb");
    return real(buf, cb, arg);
}

/* The read cap of <bev> (bufferevent_getwatermark()'s high). */
static size_t read_cap(struct bufferevent *bev)
{
    size_t high = 1;
    bufferevent_getwatermark(bev, EV_READ, NULL, &high);
    return high;
}

/* stream_set_read_cap() as high_watermark_by() calls it, with the first
 * cap out of memory for the input's callback: that call must fail and
 * leave <bev> as it was (no cap, reads untouched), so that the same cap
 * set again (here: the connection is closed) makes a stream like any
 * other. */
static int cap_first_out_of_memory(struct bufferevent *bev, size_t cap)
{
    static bool failed;
    if (!failed) {
        failed = true;
        add_cb_failures = 1;
        assert_int_equal(stream_set_read_cap(bev, cap), -1);
        assert_int_equal(add_cb_failures, 0);
        assert_int_equal(read_cap(bev), 0);
    }
    return stream_set_read_cap(bev, cap);
}

/* Out of memory for the input's callback at a stream's first cap: the cap
 * used to fall back to libevent's read watermark for that call, while the
 * later calls, finding a cap set, took this file's way. libevent's
 * callback kept the reads suspended at the cap, and this file's
 * bufferevent_enable() on a raise or a clearing of the cap did nothing on
 * a suspended read: raised to 6000 the input stayed at 3000, and with no
 * cap at all it still did (12000 expected). */
static void read_cap_out_of_memory_changes_nothing(void **state)
{
    (void)state;
    struct marks a = high_watermark_by(false, libevent_cap);
    struct marks b = high_watermark_by(true, cap_first_out_of_memory);
    assert_int_equal(b.after_raise, 6000);
    assert_int_equal(b.uncapped, 12000);
    assert_memory_equal(&a, &b, sizeof(a));
}

/* Out of memory everywhere (libevent's own evbuffer_add_cb() fails too):
 * the call fails and changes nothing. The fallback to
 * bufferevent_setwatermark() crashed there: libevent 2.1 sets the flags
 * of the callback it failed to add, a NULL. */
static void read_cap_out_of_memory_everywhere_fails(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r, true);
    bufferevent_setcb(r.bev, NULL, NULL, seen_event, &r.s);
    put(r.peer, 20000);
    add_cb_failures = 1000;
    assert_int_equal(stream_set_read_cap(r.bev, 5000), -1);
    add_cb_failures = 0;
    assert_int_equal(read_cap(r.bev), 0);
    bufferevent_enable(r.bev, EV_READ);
    turns(&r, 10);
    assert_int_equal(rig_input(&r), 20000); /* nothing capped it */
    /* and there is no cap to clear */
    assert_int_equal(stream_set_read_cap(r.bev, 0), 0);
    assert_int_equal(read_cap(r.bev), 0);
    rig_close(&r);
}

/* A read callback that takes at most <take> bytes a call. */
struct taker {
    size_t take;
    int calls;
    size_t taken, most; /* bytes taken; the most the input held at a call */
    short what;         /* the event callback's <what>; 0 none */
};

static void taker_read(struct bufferevent *bev, void *arg)
{
    struct taker *t = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in), n = len < t->take ? len : t->take;
    t->calls++;
    if (len > t->most)
        t->most = len;
    evbuffer_drain(in, n);
    t->taken += n;
}

static void taker_event(struct bufferevent *bev, short what, void *arg)
{
    struct taker *t = arg;
    (void)bev;
    t->what = what;
}

/* A consumer slower than the peer (300 bytes a read callback), under a cap
 * of 1000: the input never holds more than the cap, and everything sent is
 * read (the read goes on each time the input is drained below the cap)
 * before the peer's end is seen. */
static struct taker capped_consumer(bool own, int (*cap)(struct bufferevent *, size_t))
{
    struct rig r;
    struct taker t = {.take = 300};
    rig_open(&r, own);
    bufferevent_setcb(r.bev, taker_read, NULL, taker_event, &t);
    assert_int_equal(cap(r.bev, 1000), 0);
    put(r.peer, 10000);
    close(r.peer);
    r.peer = -1;
    bufferevent_enable(r.bev, EV_READ);
    for (int i = 0; i < 500 && t.what == 0; i++)
        event_base_loop(r.base, EVLOOP_ONCE);
    assert_int_equal(t.what, BEV_EVENT_READING | BEV_EVENT_EOF);
    assert_int_equal(t.taken + rig_input(&r), 10000);
    assert_true(t.most <= 1000);
    rig_close(&r);
    return t;
}

static void read_cap_goes_on_after_each_drain(void **state)
{
    (void)state;
    struct taker a = capped_consumer(false, libevent_cap);
    struct taker b = capped_consumer(true, stream_set_read_cap);
    assert_int_equal(a.most, 1000);
    assert_int_equal(b.most, a.most);
    assert_int_equal(b.calls, a.calls);
    assert_int_equal(b.taken, a.taken);
}

/* Under a low watermark of 200, 100 bytes call nothing; 200 do. */
static struct seen low_watermark(bool own)
{
    struct rig r;
    rig_open(&r, own);
    bufferevent_setwatermark(r.bev, EV_READ, 200, 0);
    put(r.peer, 100);
    bufferevent_enable(r.bev, EV_READ);
    turns(&r, 5);
    assert_int_equal(r.s.reads, 0);
    put(r.peer, 100);
    turns(&r, 5);
    return rig_close(&r);
}

static void own_reads_keep_the_low_watermark(void **state)
{
    (void)state;
    struct seen s = seen_alike(low_watermark, 0); /* no event */
    assert_int_equal(s.reads, 1);
    assert_int_equal(s.len, 200);
}

static void own_reads_keep_the_priority(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r, false);
    assert_int_equal(event_base_priority_init(r.base, 3), 0);
    assert_int_equal(bufferevent_priority_set(r.bev, 0), 0);
    assert_int_equal(stream_own_reads(r.bev), 0);
    assert_int_equal(bufferevent_get_priority(r.bev), 0);
    /* and it can be moved as before */
    assert_int_equal(bufferevent_priority_set(r.bev, 2), 0);
    assert_int_equal(bufferevent_get_priority(r.bev), 2);
    put(r.peer, 10);
    bufferevent_enable(r.bev, EV_READ);
    event_base_loop(r.base, EVLOOP_ONCE);
    assert_int_equal(r.s.reads, 1);
    rig_close(&r);
}

/* A read callback that frees its bufferevent: the read event that called
 * it touches nothing after (the sanitizers would tell). */
static void own_reads_survive_a_free_in_the_read_callback(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r, true);
    r.s.free_on_read = true;
    put(r.peer, 10);
    bufferevent_enable(r.bev, EV_READ);
    event_base_loop(r.base, EVLOOP_ONCE);
    assert_int_equal(r.s.reads, 1);
    r.bev = NULL;
    turns(&r, 2); /* libevent finalizes the freed bufferevent */
    rig_close(&r);
}

static void own_reads_refused_while_reading(void **state)
{
    (void)state;
    struct rig r;
    rig_open(&r, false);
    bufferevent_enable(r.bev, EV_READ);
    assert_int_equal(stream_own_reads(r.bev), -1);
    put(r.peer, 10);
    event_base_loop(r.base, EVLOOP_ONCE); /* libevent reads on */
    assert_int_equal(r.s.reads, 1);
    rig_close(&r);
}

static enum bufferevent_filter_result pass(struct evbuffer *src, struct evbuffer *dst,
                                           ev_ssize_t limit, enum bufferevent_flush_mode mode,
                                           void *arg)
{
    (void)limit;
    (void)mode;
    (void)arg;
    evbuffer_add_buffer(dst, src);
    return BEV_OK;
}

/* Only a socket bufferevent's reads are taken: a TLS one reads its
 * socket through OpenSSL (its read event has the socket and the
 * bufferevent too), and a filter over a socket one has a read event of
 * its own, unused (descriptor 0 in it). */
static void own_reads_refused_to_other_bufferevents(void **state)
{
    (void)state;
    int sv[2], tv[2];
    pair(sv);
    pair(tv);
    struct event_base *base = event_base_new();
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    assert_non_null(ctx);
    struct bufferevent *tls = bufferevent_openssl_socket_new(
        base, tv[0], SSL_new(ctx), BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(tls);
    assert_int_equal(stream_own_reads(tls), -1);
    struct bufferevent *under = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    struct bufferevent *filter =
        bufferevent_filter_new(under, pass, pass, BEV_OPT_CLOSE_ON_FREE, NULL, NULL);
    assert_non_null(filter);
    assert_int_equal(stream_own_reads(filter), -1);
    assert_int_equal(stream_own_reads(under), 0);
    assert_int_equal(stream_own_reads(under), 0); /* taken already */
    bufferevent_free(filter);
    bufferevent_free(tls);
    SSL_CTX_free(ctx);
    close(sv[1]);
    close(tv[1]);
    event_base_free(base);
}

/* FIONREADs over 20 read events of 100 bytes each. */
static unsigned fionreads_for_reads(bool own)
{
    struct rig r;
    rig_open(&r, own);
    bufferevent_enable(r.bev, EV_READ);
    unsigned before = fionreads;
    for (int i = 0; i < 20; i++) {
        put(r.peer, 100);
        event_base_loop(r.base, EVLOOP_ONCE);
    }
    assert_int_equal(r.s.reads, 20);
    assert_int_equal(r.s.len, 2000);
    unsigned n = fionreads - before;
    rig_close(&r);
    return n;
}

static void own_reads_ask_no_fionread(void **state)
{
    (void)state;
    assert_int_equal(fionreads_for_reads(false), 20); /* libevent: one a read */
    assert_int_equal(fionreads_for_reads(true), 0);
}

/* stream_read_soon(), called from a callback as the gateway's accept is:
 * <write> bytes reach the peer's end after the loop polled (as a client's
 * head right behind its connect), then reads are enabled and read soon. */
struct soon {
    struct rig *r;
    size_t write;
};

static void accept_like(evutil_socket_t fd, short what, void *arg)
{
    struct soon *a = arg;
    (void)fd;
    (void)what;
    static const char head[] = "CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n";
    if (a->write > 0)
        assert_int_equal(write(a->r->peer, head, a->write), (ssize_t)a->write);
    bufferevent_enable(a->r->bev, EV_READ);
    stream_read_soon(a->r->bev);
}

/* Opens <r> (reads its own), then one loop round that runs accept_like()
 * with <write> bytes. */
static void accept_round(struct rig *r, size_t write)
{
    rig_open(r, true);
    struct soon a = {r, write};
    struct event *ev = event_new(r->base, -1, 0, accept_like, &a);
    assert_non_null(ev);
    event_active(ev, EV_READ, 1);
    event_base_loop(r->base, EVLOOP_ONCE);
    event_free(ev);
}

/* What waits is read in the round that enabled the reads, with no poll
 * between: the loop polled before the bytes came, so only the read made
 * active can have taken them. */
static void read_soon_reads_in_the_round_under_way(void **state)
{
    (void)state;
    struct rig r;
    accept_round(&r, 20);
    assert_int_equal(r.s.reads, 1);
    assert_int_equal(rig_input(&r), 20);
    assert_int_equal(r.s.what, 0);
    rig_close(&r);
}

/* Nothing there: the read meets EAGAIN, no callback, and the event waits
 * as before, reading what comes later. */
static void read_soon_with_nothing_there_waits(void **state)
{
    (void)state;
    struct rig r;
    accept_round(&r, 0);
    assert_int_equal(r.s.reads, 0);
    assert_int_equal(r.s.what, 0);
    assert_int_equal(bufferevent_get_enabled(r.bev) & EV_READ, EV_READ);
    assert_int_equal(write(r.peer, "later", 5), 5);
    for (int i = 0; i < 500 && r.s.reads == 0; i++)
        event_base_loop(r.base, EVLOOP_ONCE);
    assert_int_equal(r.s.reads, 1);
    assert_int_equal(rig_input(&r), 5);
    rig_close(&r);
}

/* A bufferevent libevent reads, or whose reads are off, is left alone:
 * nothing is made active. */
static void read_soon_leaves_others_alone(void **state)
{
    (void)state;
    for (int libevent_reads = 1; libevent_reads >= 0; libevent_reads--) {
        struct rig r;
        rig_open(&r, !libevent_reads);
        if (libevent_reads) /* else its reads stay off */
            bufferevent_enable(r.bev, EV_READ);
        stream_read_soon(r.bev);
        assert_int_equal(event_base_get_num_events(r.base, EVENT_BASE_COUNT_ACTIVE), 0);
        rig_close(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(reads_up_to_what_it_is_asked, setup, teardown),
        cmocka_unit_test_setup_teardown(stops_at_the_read_high_watermark, setup, teardown),
        cmocka_unit_test_setup_teardown(leaves_the_end_for_the_bufferevent, setup, teardown),
        cmocka_unit_test_setup_teardown(reads_nothing_without_a_socket, setup, teardown),
        cmocka_unit_test(reports_a_reset),
        cmocka_unit_test_setup_teardown(rest_reads_past_the_watermark, setup, teardown),
        cmocka_unit_test(rest_takes_what_came_before_a_reset),
        cmocka_unit_test(own_reads_take_what_libevent_takes),
        cmocka_unit_test(own_reads_report_the_end_as_libevent),
        cmocka_unit_test(own_reads_report_a_reset_as_libevent),
        cmocka_unit_test(own_reads_keep_the_read_timeout),
        cmocka_unit_test(own_reads_keep_the_high_watermark),
        cmocka_unit_test(read_cap_keeps_the_high_watermark),
        cmocka_unit_test(read_cap_goes_on_after_each_drain),
        cmocka_unit_test(read_cap_out_of_memory_changes_nothing),
        cmocka_unit_test(read_cap_out_of_memory_everywhere_fails),
        cmocka_unit_test(own_reads_keep_the_low_watermark),
        cmocka_unit_test(own_reads_keep_the_priority),
        cmocka_unit_test(own_reads_survive_a_free_in_the_read_callback),
        cmocka_unit_test(own_reads_refused_while_reading),
        cmocka_unit_test(own_reads_refused_to_other_bufferevents),
        cmocka_unit_test(own_reads_ask_no_fionread),
        cmocka_unit_test(read_soon_reads_in_the_round_under_way),
        cmocka_unit_test(read_soon_with_nothing_there_waits),
        cmocka_unit_test(read_soon_leaves_others_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
