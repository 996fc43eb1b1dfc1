/* Unit tests for box/relay.c: the relay of `sluice run`'s box, on a free
 * loopback port of the test's own, towards a unix listener the test plays
 * the gateway on. Bytes both ways, and above all that a connection whose
 * one side is over while the other stays open does not keep waking the
 * relay: poll() reports a hang-up whatever it was asked, and a relay that
 * polled such a side would spin a core for as long as the client kept its
 * socket (an idle connection in an agent's pool does, for minutes). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "blocked_in.h"
#include "box/box_int.h"

/* How long a connection is watched in a state where nothing moves. A relay
 * that sleeps wakes up at most once or twice in it; one that spins, tens of
 * thousands of times. */
#define QUIET_MS          200
#define QUIET_WAKEUPS_MAX 4

struct world {
    char dir[64];
    char path[96];
    int gw_listen; /* the test's "gateway" */
    int stop[2];   /* a byte here ends relay_run() */
    unsigned short port;
    struct relay *relay;
    pthread_t thread;
    atomic_bool drain;        /* relay_drain() once relay_run() is over */
    bool thread_done;         /* joined by the test */
    _Atomic pid_t tid;        /* the relay's thread, once it runs */
    atomic_bool drain_begins; /* relay_run() is over, relay_drain() next */
    atomic_bool ended;        /* and relay_drain() too: the thread ends */
    int task;                 /* blocked_in_open() of the relay's thread */
};

static int on_stop(void *arg)
{
    (void)arg;
    return 1;
}

static void *run_relay(void *arg)
{
    struct world *w = arg;
    atomic_store(&w->tid, blocked_in_self());
    relay_run(w->relay, w->stop[0], on_stop, NULL);
    if (atomic_load(&w->drain)) {
        atomic_store(&w->drain_begins, true);
        relay_drain(w->relay);
    }
    atomic_store(&w->ended, true);
    return NULL;
}

/* The relay's thread has told its id. */
static bool relay_thread_runs(void *arg)
{
    const struct world *w = arg;
    return atomic_load(&w->tid) != 0;
}

/* The relay's thread blocked in its poll(): it has done all it could with
 * what came so far, and waits for more. */
static bool relay_asleep(void *arg)
{
    const struct world *w = arg;
#ifdef SYS_poll
    return blocked_in(w->task, SYS_poll, SYS_ppoll);
#else
    return blocked_in(w->task, SYS_ppoll, -1);
#endif
}

/* A relay's wake-up count before the test gave it something to take. */
struct wake_after {
    struct world *w;
    unsigned long before;
};

/* The relay woke since <before> (read first) and is back asleep (read
 * after): it took in full what woke it. */
static bool relay_took(void *arg)
{
    const struct wake_after *a = arg;
    return relay_wakeups(a->w->relay) != a->before && relay_asleep(a->w);
}

/* Waits until the relay, whose wake-ups numbered <before> when the test gave
 * it something to take, has taken it and gone back to its poll(). Nothing
 * else may wake it meanwhile. Returns false when it never did. */
static bool relay_took_within_10s(struct world *w, unsigned long before)
{
    struct wake_after a = {w, before};
    return waited_until(relay_took, &a);
}

/* relay_drain() has begun (its listeners closed) and waits in its poll(),
 * or has ended already (nothing left to carry). */
static bool relay_draining(void *arg)
{
    struct world *w = arg;
    return atomic_load(&w->drain_begins) && (relay_asleep(w) || atomic_load(&w->ended));
}

/* A port that was free on 127.0.0.1 a moment ago. */
static unsigned short free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    assert_true(fd >= 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    return ntohs(sin.sin_port);
}

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof(*w));
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    char err[256] = "";
    assert_non_null(w);
    snprintf(w->dir, sizeof(w->dir), "/tmp/sluice-relay-XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->path, sizeof(w->path), "%s/gw.sock", w->dir);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", w->path);
    w->gw_listen = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(w->gw_listen >= 0);
    assert_int_equal(bind(w->gw_listen, (struct sockaddr *)&sun, sizeof(sun)), 0);
    assert_int_equal(listen(w->gw_listen, 8), 0);
    for (int tries = 0; tries < 20 && w->relay == NULL; tries++) {
        w->port = free_port();
        w->relay = relay_new(w->path, w->port, err, sizeof(err));
    }
    if (w->relay == NULL)
        fail_msg("relay_new: %s", err);
    assert_int_equal(pipe(w->stop), 0);
    assert_int_equal(pthread_create(&w->thread, NULL, run_relay, w), 0);
    wait_until(relay_thread_runs, w, "the relay's thread to run");
    w->task = blocked_in_open(atomic_load(&w->tid));
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    assert_int_equal(write(w->stop[1], "x", 1), 1);
    if (!w->thread_done)
        pthread_join(w->thread, NULL);
    relay_free(w->relay);
    close(w->task);
    close(w->stop[0]);
    close(w->stop[1]);
    close(w->gw_listen);
    unlink(w->path);
    rmdir(w->dir);
    free(w);
    return 0;
}

/* A client in the "box" connected to the relay's port (the connect()
 * completes in the relay's listen queue, accepted or not), blocking. */
static int connect_client(struct world *w)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(w->port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int client = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(client >= 0);
    assert_int_equal(connect(client, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return client;
}

/* connect_client() with only <spare> new descriptors left to the process
 * (RLIMIT_NOFILE lowered: the relay's thread shares it, as the box's init
 * inherits run's); the limit it had in <old>, for the caller to restore. */
static int connect_client_short_of_descriptors(struct world *w, int spare, struct rlimit *old)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(w->port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int client = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(client >= 0);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, old), 0);
    int lowest_free = dup(0);
    assert_true(lowest_free >= 0);
    close(lowest_free);
    struct rlimit low = *old;
    low.rlim_cur = (rlim_t)(lowest_free + spare);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    assert_int_equal(connect(client, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return client;
}

/* A client in the "box" connected through the relay, and the gateway's end
 * of that connection. Both blocking, with a 5 s receive timeout. */
static void connect_through(struct world *w, int *client, int *gateway)
{
    struct timeval tv = {.tv_sec = 5};
    *client = connect_client(w);
    struct pollfd p = {.fd = w->gw_listen, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    *gateway = accept(w->gw_listen, NULL, NULL);
    assert_true(*gateway >= 0);
    setsockopt(*client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(*gateway, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static void send_all(int fd, const char *s)
{
    assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

static void expect(int fd, const char *s)
{
    char buf[64];
    size_t n = strlen(s), got = 0;
    while (got < n) {
        ssize_t k = recv(fd, buf + got, n - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
    }
    assert_memory_equal(buf, s, n);
}

static void expect_end(int fd)
{
    char c;
    assert_int_equal(recv(fd, &c, 1, 0), 0);
}

/* A new client's request reaches the gateway (within 5 s). */
static void a_new_client_gets_through(struct world *w)
{
    int client, gateway;
    connect_through(w, &client, &gateway);
    send_all(client, "request");
    expect(gateway, "request");
    close(client);
    close(gateway);
}

/* The gateway's end of the next connection the relay makes (within 5 s),
 * blocking, with a 5 s receive timeout. */
static int accept_gateway(struct world *w)
{
    struct pollfd p = {.fd = w->gw_listen, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    int gateway = accept(w->gw_listen, NULL, NULL);
    assert_true(gateway >= 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(gateway, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return gateway;
}

/* <client>, which sent "request" and waited while the relay could not
 * reach the gateway: the request reaches the gateway now and the answer
 * comes back. Closes both ends. */
static void waited_request_gets_through(struct world *w, int client)
{
    int gateway = accept_gateway(w);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    expect(gateway, "request");
    send_all(gateway, "answer");
    expect(client, "answer");
    close(client);
    close(gateway);
}

/* Fills the gateway's listen backlog with connections nothing accepts
 * (at most <max>, in <fillers>), until a non-blocking connect() fails with
 * EAGAIN. Returns how many it took. */
static size_t fill_gateway_backlog(struct world *w, int *fillers, size_t max)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", w->path);
    size_t nfill = 0;
    for (; nfill < max; nfill++) {
        fillers[nfill] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(fillers[nfill] >= 0);
        if (connect(fillers[nfill], (struct sockaddr *)&sun, sizeof(sun)) < 0) {
            assert_int_equal(errno, EAGAIN);
            close(fillers[nfill]);
            break;
        }
    }
    assert_true(nfill > 0 && nfill < max);
    return nfill;
}

/* The gateway takes the <nfill> connections fill_gateway_backlog() made. */
static void free_gateway_backlog(struct world *w, const int *fillers, size_t nfill)
{
    for (size_t i = 0; i < nfill; i++) {
        int a = accept(w->gw_listen, NULL, NULL);
        assert_true(a >= 0);
        close(a);
        close(fillers[i]);
    }
}

/* Raises RLIMIT_NOFILE for a test that fills every one of the relay's
 * slots (the test skipped when the hard limit does not allow it); the
 * limit it had in <old>, for the caller to restore. */
static void descriptors_for_every_slot(struct rlimit *old)
{
    struct rlimit more;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, old), 0);
    more = *old;
    if (more.rlim_cur < 4 * RELAY_MAX_CONNS && more.rlim_max >= 4 * RELAY_MAX_CONNS)
        more.rlim_cur = 4 * RELAY_MAX_CONNS;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &more), 0);
    if (more.rlim_cur < 4 * RELAY_MAX_CONNS)
        skip();
}

/* The relay's wake-ups while nothing moves, per QUIET_MS (rounded up) of
 * the time they were counted over. The sleep of QUIET_MS lasts longer on a
 * loaded machine, and a relay that rests between its tries (accept() paused
 * RELAY_ACCEPT_PAUSE_MS, a connect() retried) wakes the more often the
 * longer it is watched: counted whole, 1.5 s gave 12 wake-ups where 4 are
 * allowed. A relay that spins wakes thousands of times in any of them. */
static unsigned long quiet_wakeups(struct world *w)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    unsigned long before = relay_wakeups(w->relay);
    usleep(QUIET_MS * 1000);
    unsigned long n = relay_wakeups(w->relay) - before;
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    if (ms < QUIET_MS)
        ms = QUIET_MS;
    return (n * QUIET_MS + (unsigned long)ms - 1) / (unsigned long)ms;
}

/* The gateway answers and closes (a refusal, `Connection: close`, or an
 * idle kept-alive connection timed out); the client reads the end but
 * keeps its socket open. */
static void test_gateway_closed_client_open_is_quiet(void **state)
{
    struct world *w = *state;
    int client, gateway;
    connect_through(w, &client, &gateway);
    send_all(client, "request");
    expect(gateway, "request");
    send_all(gateway, "answer");
    close(gateway);
    expect(client, "answer");
    expect_end(client);
    unsigned long n = quiet_wakeups(w);
    if (n > QUIET_WAKEUPS_MAX)
        fail_msg("the relay woke up %lu times per %d ms with nothing to move", n, QUIET_MS);
    close(client);
}

/* The client ends its side, then drops the connection with a reset while
 * the gateway is still working on its answer. */
static void test_client_reset_after_its_end_is_quiet(void **state)
{
    struct world *w = *state;
    int client, gateway;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    connect_through(w, &client, &gateway);
    send_all(client, "request");
    assert_int_equal(shutdown(client, SHUT_WR), 0);
    expect(gateway, "request");
    expect_end(gateway);
    assert_int_equal(setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(client); /* a reset */
    unsigned long n = quiet_wakeups(w);
    if (n > QUIET_WAKEUPS_MAX)
        fail_msg("the relay woke up %lu times per %d ms with nothing to move", n, QUIET_MS);
    /* the answer finds the client gone: the relay closes the pair */
    send_all(gateway, "answer");
    char c;
    ssize_t k = recv(gateway, &c, 1, 0);
    assert_true(k == 0 || (k < 0 && errno == ECONNRESET));
    close(gateway);
}

/* One side (the client, or the gateway: <client_first>) ends its side
 * with a half-close, then the other sends and ends its own: the bytes
 * after the first end get through. */
static void half_close_then_the_other_side(struct world *w, bool client_first)
{
    int client, gateway;
    connect_through(w, &client, &gateway);
    int first = client_first ? client : gateway, second = client_first ? gateway : client;
    send_all(first, "before its end");
    assert_int_equal(shutdown(first, SHUT_WR), 0);
    expect(second, "before its end");
    expect_end(second);
    /* the relay passed the first end on, and looks again: the bytes after
     * it come to a relay that waits in poll() with its half-closed state */
    wait_until(relay_asleep, w, "the relay to wait again after the first end");
    send_all(second, "after the other's end");
    assert_int_equal(shutdown(second, SHUT_WR), 0);
    expect(first, "after the other's end");
    expect_end(first);
    close(client);
    close(gateway);
}

/* Half-closes both ways, bytes both ways after the client's end. */
static void test_half_close_both_ways(void **state)
{
    half_close_then_the_other_side(*state, true);
}

/* TCP urgent data from the client (MSG_OOB) reaches the gateway as a plain
 * byte in its place: read() would skip it, and the stream lose it unseen. */
static void test_urgent_byte_is_carried_inline(void **state)
{
    struct world *w = *state;
    int client, gateway;
    connect_through(w, &client, &gateway);
    send_all(client, "before");
    assert_int_equal(send(client, "X", 1, MSG_OOB), 1);
    send_all(client, "after");
    assert_int_equal(shutdown(client, SHUT_WR), 0);
    expect(gateway, "beforeXafter");
    expect_end(gateway);
    close(client);
    close(gateway);
}

/* Out of descriptors (a low RLIMIT_NOFILE, which the box's init inherits
 * from run): accept() fails with EMFILE and leaves the client in the
 * backlog, so the listener stays readable. The relay pauses its listeners
 * instead of retrying at once, which would spin a core for as long as the
 * client waited; once a descriptor is free again the client gets through. */
static void test_out_of_descriptors_pauses_accepting(void **state)
{
    struct world *w = *state;
    struct rlimit old;
    /* no new descriptor at all: the client stays in the backlog */
    unsigned long before = relay_wakeups(w->relay);
    int client = connect_client_short_of_descriptors(w, 0, &old);
    bool tried = relay_took_within_10s(w, before); /* accept() failed, the relay rests */
    unsigned long n = tried ? quiet_wakeups(w) : 0;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    if (!tried)
        fail_msg("waited 10 s for the relay to try accept() and rest");
    if (n > QUIET_WAKEUPS_MAX)
        fail_msg("the relay woke up %lu times per %d ms while accept() failed", n, QUIET_MS);
    int gateway = accept_gateway(w);
    send_all(client, "late");
    expect(gateway, "late");
    close(client);
    close(gateway);
}

/* One descriptor short: accept() takes the last one and the relay's
 * socket() towards the gateway fails with EMFILE. The client waits, as one
 * left in the backlog does when accept() itself fails, instead of being
 * closed with nothing sent on; once descriptors are free again its request
 * gets through. */
static void test_no_descriptor_for_the_gateway_keeps_the_client_waiting(void **state)
{
    struct world *w = *state;
    struct rlimit old;
    /* one descriptor: the accepted client's */
    unsigned long before = relay_wakeups(w->relay);
    int client = connect_client_short_of_descriptors(w, 1, &old);
    send_all(client, "request");
    /* accepted, no descriptor for the gateway: the relay rests */
    bool tried = relay_took_within_10s(w, before);
    unsigned long n = tried ? quiet_wakeups(w) : 0;
    struct pollfd cp = {.fd = client, .events = POLLIN | POLLRDHUP};
    int ended = poll(&cp, 1, 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    if (!tried)
        fail_msg("waited 10 s for the relay to accept and rest");
    assert_int_equal(ended, 0);
    if (n > 40)
        fail_msg("the relay woke up %lu times per %d ms without descriptors", n, QUIET_MS);
    waited_request_gets_through(w, client);
}

/* The gateway's listen backlog is full (a shared gateway, --proxy, busy
 * with a burst of clients): a non-blocking unix connect() fails with
 * EAGAIN at once, where a TCP client of a gateway would wait in its SYN
 * queue. The relay keeps the client waiting and tries again, quietly (no
 * spin), instead of closing it with nothing sent on; once the gateway
 * takes its backlog the client's request gets through and its answer back. */
static void test_full_gateway_backlog_keeps_the_client_waiting(void **state)
{
    struct world *w = *state;
    int fillers[64];
    size_t nfill = fill_gateway_backlog(w, fillers, sizeof(fillers) / sizeof(fillers[0]));
    int client = connect_client(w);
    send_all(client, "request");
    /* the relay takes the client and finds the backlog full: the client
     * must not see its connection end */
    unsigned long n = quiet_wakeups(w);
    struct pollfd cp = {.fd = client, .events = POLLIN | POLLRDHUP};
    assert_int_equal(poll(&cp, 1, 0), 0);
    if (n > 40)
        fail_msg("the relay woke up %lu times per %d ms waiting for the gateway", n, QUIET_MS);
    free_gateway_backlog(w, fillers, nfill);
    waited_request_gets_through(w, client);
}

/* The gateway's backlog stays full past the wait (shortened here from
 * 10 s): every waiting client, RELAY_MAX_CONNS of them so that the relay
 * has no slot left, sees its connection closed (not held for ever), the
 * relay sleeps between its tries and after, and the slots are free again:
 * once the gateway takes its backlog a new client gets through. */
static void test_waiting_clients_are_closed_when_the_wait_is_over(void **state)
{
    struct world *w = *state;
    struct rlimit old;
    descriptors_for_every_slot(&old);
    relay_set_waits(w->relay, 500, 10000);
    int fillers[64];
    size_t nfill = fill_gateway_backlog(w, fillers, sizeof(fillers) / sizeof(fillers[0]));
    int clients[RELAY_MAX_CONNS];
    for (size_t i = 0; i < RELAY_MAX_CONNS; i++) {
        clients[i] = connect_client(w);
        send_all(clients[i], "request");
    }
    unsigned long before = relay_wakeups(w->relay);
    struct timeval tv = {.tv_sec = 5};
    for (size_t i = 0; i < RELAY_MAX_CONNS; i++) {
        char c;
        setsockopt(clients[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t k = recv(clients[i], &c, 1, 0);
        if (!(k == 0 || (k < 0 && errno == ECONNRESET)))
            fail_msg("client %zu: recv gave %zd (%s), not the connection's end", i, k,
                     k < 0 ? strerror(errno) : "a byte");
        close(clients[i]);
    }
    /* 500 ms of tries 10 to 200 ms apart (a relay that spun would wake up
     * tens of thousands of times) */
    unsigned long n = relay_wakeups(w->relay) - before;
    if (n > 2000)
        fail_msg("the relay woke up %lu times while its clients waited", n);
    n = quiet_wakeups(w);
    if (n > QUIET_WAKEUPS_MAX)
        fail_msg("the relay woke up %lu times per %d ms after its clients' wait", n, QUIET_MS);
    free_gateway_backlog(w, fillers, nfill);
    a_new_client_gets_through(w);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/* A socket end that <n> bytes are to reach, unread. */
struct unread {
    int fd;
    int n;
};

static bool holds_unread(void *arg)
{
    const struct unread *u = arg;
    int n = 0;
    assert_int_equal(ioctl(u->fd, FIONREAD, &n), 0);
    return n == u->n;
}

/* The command's end as the box's init sees it: relay_run() returns and
 * relay_drain() carries on what is left. */
static void stop_and_drain(struct world *w)
{
    atomic_store(&w->drain, true);
    assert_int_equal(write(w->stop[1], "x", 1), 1);
}

/* The relay's own end of the connection whose other end is the test's TCP
 * socket <fd>: the socket in this process named as <fd>'s peer and whose
 * peer <fd> is. */
static int relay_end_of(int fd)
{
    struct sockaddr_in me, peer, a, b;
    socklen_t len = sizeof(me);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &len), 0);
    len = sizeof(peer);
    assert_int_equal(getpeername(fd, (struct sockaddr *)&peer, &len), 0);
    for (int i = 0; i < 4096; i++) {
        socklen_t la = sizeof(a), lb = sizeof(b);
        if (i == fd || getsockname(i, (struct sockaddr *)&a, &la) != 0 ||
            getpeername(i, (struct sockaddr *)&b, &lb) != 0 || la != sizeof(a) ||
            a.sin_family != AF_INET)
            continue;
        if (a.sin_port == peer.sin_port && a.sin_addr.s_addr == peer.sin_addr.s_addr &&
            b.sin_port == me.sin_port && b.sin_addr.s_addr == me.sin_addr.s_addr)
            return i;
    }
    fail_msg("no socket of the relay's is the peer of %d", fd);
    return -1;
}

/* A side of a connection the test sends on, as send_until_full() waits on
 * it. <relay_end>: the relay's end of a TCP <sender>; -1 for a unix
 * socket, whose unread bytes its own send queue counts. */
struct sending {
    struct world *w;
    int sender;
    int relay_end;
};

static bool writable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    assert_true(poll(&p, 1, 0) >= 0);
    return (p.revents & POLLOUT) != 0;
}

/* The relay's end holds bytes of <s>'s unread, and nothing more is on its
 * way there: for TCP, nothing sent and not acknowledged (what is unsent
 * waits for the relay to read); a unix socket's send queue is what its
 * peer has not read. */
static bool relay_end_holds_unread(const struct sending *s)
{
    int unread = 0, outq = 0, unsent = 0;
    assert_int_equal(ioctl(s->sender, SIOCOUTQ, &outq), 0);
    if (s->relay_end < 0)
        return outq > 0;
    assert_int_equal(ioctl(s->relay_end, FIONREAD, &unread), 0);
    assert_int_equal(ioctl(s->sender, SIOCOUTQNSD, &unsent), 0);
    return unread > 0 && outq == unsent;
}

/* The path from <s>'s sender is full: the relay sleeps in its poll()
 * (before and after the queues are read, not woken between) while bytes
 * wait unread in its end, which it reads while its buffer towards the
 * other side has room and writes that buffer out until the other side's
 * socket takes no more: so the buffer is full, and so is that socket;
 * and the sender's own socket takes no more. */
static bool path_full(const struct sending *s)
{
    unsigned long before = relay_wakeups(s->w->relay);
    if (!relay_asleep(s->w))
        return false;
    bool full = relay_end_holds_unread(s) && !writable(s->sender);
    return full && relay_asleep(s->w) && relay_wakeups(s->w->relay) == before;
}

/* The sender can send again, or the path is full. */
static bool sender_can_go_on(void *arg)
{
    const struct sending *s = arg;
    return writable(s->sender) || path_full(s);
}

/* Sends <sender> (made non-blocking) as many bytes of a counting pattern
 * as the path through the relay takes until it is full (path_full()),
 * up to <max>. Returns how many. */
static size_t send_until_full(struct world *w, int sender, size_t max)
{
    static char chunk[16384];
    size_t sent = 0;
    int domain = 0;
    socklen_t len = sizeof(domain);
    assert_int_equal(getsockopt(sender, SOL_SOCKET, SO_DOMAIN, &domain, &len), 0);
    struct sending s = {w, sender, domain == AF_INET ? relay_end_of(sender) : -1};
    int fl = fcntl(sender, F_GETFL);
    assert_int_equal(fcntl(sender, F_SETFL, fl | O_NONBLOCK), 0);
    while (sent < max) {
        for (size_t i = 0; i < sizeof(chunk); i++)
            chunk[i] = (char)((sent + i) % 251);
        size_t want = max - sent < sizeof(chunk) ? max - sent : sizeof(chunk);
        ssize_t k = send(sender, chunk, want, MSG_NOSIGNAL);
        if (k > 0) {
            sent += (size_t)k;
            continue;
        }
        assert_true(k < 0 && errno == EAGAIN);
        wait_until(sender_can_go_on, &s, "the path through the relay to take more or be full");
        if (path_full(&s))
            break;
    }
    return sent;
}

/* Reads <fd> to its end (5 s receive timeout); returns the bytes read,
 * checking that they follow send_until_full()'s pattern. <slowly>: 16 KiB
 * a read, a millisecond between reads, so that the relay has bytes for it
 * waiting in its buffer when the other side fails. */
static size_t read_to_end(int fd, bool slowly)
{
    static char buf[65536];
    size_t got = 0;
    for (;;) {
        ssize_t k = recv(fd, buf, slowly ? 16384 : sizeof(buf), 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            return got;
        assert_true(k > 0);
        for (ssize_t i = 0; i < k; i++)
            if (buf[i] != (char)((got + (size_t)i) % 251))
                fail_msg("byte %zu differs", got + (size_t)i);
        got += (size_t)k;
        if (slowly)
            usleep(1000);
    }
}

/* The command writes an upload and exits: what it wrote, in the relay's
 * buffer and still in its socket, reaches the gateway, then the end. The
 * relay ended with the command and cut it. */
static void test_drain_carries_what_the_client_sent(void **state)
{
    struct world *w = *state;
    int client, gateway;
    connect_through(w, &client, &gateway);
    size_t sent = send_until_full(w, client, 64u << 20);
    close(client);
    stop_and_drain(w);
    assert_int_equal(read_to_end(gateway, false), sent);
    close(gateway);
}

/* A gateway that takes nothing more: the drain gives up after its time
 * (shortened here) and closes the connection, rather than holding the
 * box's end for ever. */
static void test_drain_is_bounded(void **state)
{
    struct world *w = *state;
    int client, gateway;
    relay_set_waits(w->relay, 10000, 200);
    connect_through(w, &client, &gateway);
    size_t sent = send_until_full(w, client, 64u << 20);
    close(client);
    stop_and_drain(w);
    pthread_join(w->thread, NULL);
    w->thread_done = true;
    relay_free(w->relay); /* the box's init exits: what is left is closed */
    w->relay = NULL;
    assert_true(read_to_end(gateway, false) < sent);
    close(gateway);
}

/* The gateway answers after the client's end and keeps its end open: no
 * one is left to read the answer, so the drain does not wait for the
 * gateway to close. */
static void test_drain_does_not_wait_for_the_answer(void **state)
{
    struct world *w = *state;
    int client, gateway;
    connect_through(w, &client, &gateway);
    send_all(client, "request");
    close(client);
    expect(gateway, "request");
    stop_and_drain(w);
    expect_end(gateway);
    /* an answer (which may find the relay's end closed already) */
    ssize_t k = send(gateway, "answer", 6, MSG_NOSIGNAL);
    assert_true(k == 6 || (k < 0 && (errno == EPIPE || errno == ECONNRESET)));
    /* the relay closes its end (a hang-up; its end alone was a half-close) */
    struct pollfd p = {.fd = gateway, .events = 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_true(p.revents & POLLHUP);
    close(gateway);
}

/* A client that waits for the gateway's full backlog when the command
 * ends: once the gateway takes the backlog, its request gets there. */
static void test_drain_carries_a_waiting_client(void **state)
{
    struct world *w = *state;
    int fillers[64];
    size_t nfill = fill_gateway_backlog(w, fillers, sizeof(fillers) / sizeof(fillers[0]));
    unsigned long before = relay_wakeups(w->relay);
    int client = connect_client(w);
    send_all(client, "request");
    close(client);
    if (!relay_took_within_10s(w, before))
        fail_msg("waited 10 s for the relay to take the client and find the backlog full");
    stop_and_drain(w);
    wait_until(relay_draining, w, "the relay's drain to wait for the gateway");
    free_gateway_backlog(w, fillers, nfill);
    int gateway = accept_gateway(w);
    expect(gateway, "request");
    expect_end(gateway);
    close(gateway);
}

/* The client sends 256 KiB, which the relay's side takes (acknowledged),
 * then resets the connection, while the gateway reads slowly: every byte
 * the client sent before its reset reaches the gateway, then the end (a
 * unix socket has no reset). The relay met the reset with bytes still in
 * its buffer and dropped them. */
static void test_client_reset_delivers_what_it_sent_before(void **state)
{
    struct world *w = *state;
    int client, gateway;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    connect_through(w, &client, &gateway);
    size_t sent = send_until_full(w, client, 256u << 10);
    assert_int_equal(sent, 256u << 10);
    int outq = 1;
    for (int i = 0; i < 500 && outq != 0; i++) {
        assert_int_equal(ioctl(client, SIOCOUTQ, &outq), 0);
        if (outq != 0)
            usleep(10 * 1000);
    }
    assert_int_equal(outq, 0);
    assert_int_equal(setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(client); /* a reset */
    assert_int_equal(read_to_end(gateway, true), sent);
    close(gateway);
}

/* The gateway sends what the path to the client takes while the client
 * does not read (the relay's buffer full), and closes with
 * the client's request unread (a unix socket's reset: the relay reads
 * ECONNRESET once it has read the rest): every byte the gateway sent still
 * reaches the client, then the end. The relay dropped what its buffer
 * held for the client. */
static void test_gateway_reset_delivers_what_it_sent_before(void **state)
{
    struct world *w = *state;
    int gateway, mss = 536, rcvbuf = 4096;
    struct timeval tv = {.tv_sec = 5};
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(w->port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* small segments and a small window: the relay's socket towards the
     * client holds little, and its buffer the rest */
    int client = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(client >= 0);
    assert_int_equal(setsockopt(client, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)), 0);
    assert_int_equal(setsockopt(client, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    assert_int_equal(connect(client, (struct sockaddr *)&sin, sizeof(sin)), 0);
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    gateway = accept_gateway(w);
    static const char unread[] = "request the gateway leaves unread";
    send_all(client, unread);
    /* the request waits in the gateway's end: its close is a reset */
    struct unread u = {gateway, sizeof(unread) - 1};
    wait_until(holds_unread, &u, "the request to wait unread in the gateway's end");
    size_t sent = send_until_full(w, gateway, 64u << 20);
    close(gateway); /* unread bytes: the relay reads ECONNRESET after the rest */
    assert_int_equal(read_to_end(client, true), sent);
    close(client);
}

/* RELAY_MAX_CONNS connections the gateway answered and closed (a
 * `Connection: close`, an idle kept-alive connection timed out), each kept
 * open by its client after it read the end (an agent's pool holds such
 * connections until it next looks at them): the gateway takes nothing
 * more on them, so they are over, and a new client still gets through.
 * The relay kept each in its slot for as long as its client kept its
 * end, and once every slot was so taken, new clients waited in the
 * listen queue for ever. */
static void test_connections_the_gateway_closed_free_their_slots(void **state)
{
    struct world *w = *state;
    struct rlimit old;
    descriptors_for_every_slot(&old);
    int clients[RELAY_MAX_CONNS];
    for (size_t i = 0; i < RELAY_MAX_CONNS; i++) {
        int gateway;
        connect_through(w, &clients[i], &gateway);
        send_all(clients[i], "request");
        expect(gateway, "request");
        send_all(gateway, "answer");
        close(gateway);
        expect(clients[i], "answer");
        expect_end(clients[i]);
    }
    unsigned long n = quiet_wakeups(w);
    if (n > QUIET_WAKEUPS_MAX)
        fail_msg("the relay woke up %lu times per %d ms with nothing to move", n, QUIET_MS);
    a_new_client_gets_through(w);
    for (size_t i = 0; i < RELAY_MAX_CONNS; i++)
        close(clients[i]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/* The gateway ends its side first with a half-close, not a close: the
 * client may still send, and what it sends reaches the gateway. */
static void test_gateway_half_close_keeps_the_client_side(void **state)
{
    half_close_then_the_other_side(*state, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gateway_closed_client_open_is_quiet, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_reset_after_its_end_is_quiet, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_close_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_urgent_byte_is_carried_inline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_descriptors_pauses_accepting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_descriptor_for_the_gateway_keeps_the_client_waiting,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_gateway_backlog_keeps_the_client_waiting, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_waiting_clients_are_closed_when_the_wait_is_over,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_carries_what_the_client_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_does_not_wait_for_the_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain_carries_a_waiting_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_reset_delivers_what_it_sent_before, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gateway_reset_delivers_what_it_sent_before, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_connections_the_gateway_closed_free_their_slots, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gateway_half_close_keeps_the_client_side, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
