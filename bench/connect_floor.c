/* connect_floor: the least any CONNECT proxy has to do, as a yardstick.
 *
 * It reads a CONNECT head, connects to the target, answers 200 and relays
 * bytes both ways with recv/send: no policy, no log, no DNS, no SNI check,
 * no timeouts, one thread, epoll. bench/floor puts it through the same
 * harness as sluice, and bench/connect_ab runs it in alternating rounds
 * with direct and sluice, so that sluice's CONNECT figures can be read against
 * what the CONNECT exchange itself costs in this layout (curl sends
 * CONNECT, waits for the 200, and only then starts its TLS handshake),
 * rather than against a direct connection only.
 *
 * It is a benchmark tool, not a proxy: it accepts targets in 127.0.0.0/8
 * given as IPv4 literals only (the project's network rule: benchmarks talk
 * to loopback), answers anything else with 403, and listens on loopback.
 *
 *   connect_floor 127.0.0.1:3129
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 4096
#define BUF_SIZE 65536
#define BATCH    64

struct relay;

/* One socket's registration: what epoll hands back. */
struct end {
    struct relay *r;
    int fd;
    int idx;         /* 0 client, 1 upstream */
    uint32_t events; /* registered with epoll */
};

/* One direction: bytes read from src wait in buf until dst takes them. */
struct flow {
    char *buf; /* BUF_SIZE, allocated on first use */
    size_t off, len;
    bool eof;  /* src ended */
    bool shut; /* dst was shut down for writing */
};

struct relay {
    struct end e[2];
    struct flow f[2]; /* f[0]: client -> upstream; f[1]: upstream -> client */
    bool tunnel;      /* past the head */
    bool dead;
    char head[HEAD_MAX + 1];
    size_t hlen;
    struct relay *next_dead;
};

static int ep;
static struct relay *graveyard; /* freed after the batch that killed them */

static void kill_relay(struct relay *r)
{
    if (r->dead)
        return;
    r->dead = true;
    for (int i = 0; i < 2; i++)
        if (r->e[i].fd >= 0)
            close(r->e[i].fd); /* also leaves the epoll set */
    r->next_dead = graveyard;
    graveyard = r;
}

static void bury(void)
{
    while (graveyard != NULL) {
        struct relay *r = graveyard;
        graveyard = r->next_dead;
        free(r->f[0].buf);
        free(r->f[1].buf);
        free(r);
    }
}

/* Registers <want> for end <e>, with one epoll_ctl() only when it changes. */
static int watch(struct end *e, uint32_t want)
{
    if (want == e->events)
        return 0;
    struct epoll_event ev = {.events = want, .data.ptr = e};
    int op = e->events == 0 ? EPOLL_CTL_ADD : want == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    e->events = want;
    return epoll_ctl(ep, op, e->fd, &ev);
}

/* One non-blocking send: a status line fits any socket buffer. */
static void send_text(int fd, const char *s)
{
    (void)send(fd, s, strlen(s), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Moves what it can for flow <i>; returns -1 on error. */
static int pump(struct relay *r, int i)
{
    struct flow *f = &r->f[i];
    int src = r->e[i].fd, dst = r->e[1 - i].fd;
    for (;;) {
        if (f->len > 0) {
            ssize_t w = send(dst, f->buf + f->off, f->len, MSG_NOSIGNAL);
            if (w < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
            if (w <= 0)
                return -1;
            f->off += (size_t)w;
            f->len -= (size_t)w;
            if (f->len > 0)
                continue;
        }
        if (f->eof) {
            if (!f->shut)
                shutdown(dst, SHUT_WR);
            f->shut = true;
            return 0;
        }
        if (f->buf == NULL && (f->buf = malloc(BUF_SIZE)) == NULL)
            return -1;
        ssize_t n = recv(src, f->buf, BUF_SIZE, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (n < 0)
            return -1;
        if (n == 0)
            f->eof = true;
        f->off = 0;
        f->len = (size_t)n;
    }
}

/* Sets both ends' interest from the flows' state: read src while its flow
 * is empty and open, wait for dst while the flow holds bytes. */
static int rewatch(struct relay *r)
{
    for (int k = 0; k < 2; k++) {
        const struct flow *in = &r->f[k], *out = &r->f[1 - k];
        uint32_t want = 0;
        if (in->len == 0 && !in->eof)
            want |= EPOLLIN;
        if (out->len > 0)
            want |= EPOLLOUT;
        if (watch(&r->e[k], want) < 0)
            return -1;
    }
    return 0;
}

static void relay_io(struct relay *r)
{
    for (int i = 0; i < 2; i++)
        if (pump(r, i) < 0) {
            kill_relay(r);
            return;
        }
    if (r->f[0].shut && r->f[1].shut) {
        kill_relay(r);
        return;
    }
    if (rewatch(r) < 0)
        kill_relay(r);
}

/* Parses "CONNECT a.b.c.d:port HTTP/1.x"; 0 when it names a loopback
 * IPv4 target, -1 otherwise. */
static int parse_target(const char *head, struct sockaddr_in *sin)
{
    char host[16];
    unsigned port;
    char sp;
    if (sscanf(head, "CONNECT %15[0-9.]:%5u%c", host, &port, &sp) != 3 || sp != ' ' || port == 0 ||
        port > 65535)
        return -1;
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
        return -1;
    return (ntohl(sin->sin_addr.s_addr) >> 24) == 127 ? 0 : -1;
}

/* Connects to the target and answers 200 once the connection is up. On
 * loopback the handshake completes inside connect(); otherwise a zero
 * poll tells, and a target that is not up at once is refused (502): this
 * tool never waits on anything but the two sockets it relays. */
static void open_tunnel(struct relay *r)
{
    struct sockaddr_in sin;
    if (parse_target(r->head, &sin) < 0) {
        send_text(r->e[0].fd, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        kill_relay(r);
        return;
    }
    int u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u < 0) {
        kill_relay(r);
        return;
    }
    r->e[1].fd = u;
    int one = 1;
    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bool up = connect(u, (struct sockaddr *)&sin, sizeof(sin)) == 0;
    if (!up && errno == EINPROGRESS) {
        struct pollfd p = {.fd = u, .events = POLLOUT};
        up = poll(&p, 1, 0) == 1 && p.revents == POLLOUT;
    }
    if (!up) {
        send_text(r->e[0].fd, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        kill_relay(r);
        return;
    }
    /* as sluice's (connect.c): curl reads the reply a byte at a time */
    send_text(r->e[0].fd, "HTTP/1.1 200 OK\r\n\r\n");
    r->tunnel = true;
    relay_io(r);
}

static void read_head(struct relay *r)
{
    ssize_t n = recv(r->e[0].fd, r->head + r->hlen, HEAD_MAX - r->hlen, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        kill_relay(r);
        return;
    }
    r->hlen += (size_t)n;
    r->head[r->hlen] = '\0';
    char *end = strstr(r->head, "\r\n\r\n");
    if (end == NULL) {
        if (r->hlen == HEAD_MAX) {
            send_text(r->e[0].fd, "HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n");
            kill_relay(r);
        }
        return;
    }
    /* bytes behind the head belong to the tunnel */
    size_t rest = r->hlen - (size_t)(end + 4 - r->head);
    if (rest > 0) {
        if ((r->f[0].buf = malloc(BUF_SIZE)) == NULL) {
            kill_relay(r);
            return;
        }
        memcpy(r->f[0].buf, end + 4, rest);
        r->f[0].len = rest;
    }
    open_tunnel(r);
}

static void accept_all(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or out of descriptors: the next wakeup retries */
        struct relay *r = calloc(1, sizeof(*r));
        if (r == NULL) {
            close(fd);
            continue;
        }
        for (int i = 0; i < 2; i++) {
            r->e[i].r = r;
            r->e[i].idx = i;
            r->e[i].fd = -1;
        }
        r->e[0].fd = fd;
        if (watch(&r->e[0], EPOLLIN) < 0)
            kill_relay(r);
    }
}

static int listen_on(const char *spec)
{
    char host[16];
    unsigned port;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    if (sscanf(spec, "%15[0-9.]:%5u", host, &port) != 2 || port == 0 || port > 65535 ||
        inet_pton(AF_INET, host, &sin.sin_addr) != 1 || (ntohl(sin.sin_addr.s_addr) >> 24) != 127) {
        fprintf(stderr, "connect_floor: give a loopback IPv4 ADDR:PORT, not '%s'\n", spec);
        return -1;
    }
    sin.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 4096) < 0) {
        perror("connect_floor: listen");
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: connect_floor 127.0.0.1:PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int lfd = listen_on(argv[1]);
    if (lfd < 0)
        return 1;
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct end listener = {.fd = lfd, .idx = -1};
    if (ep < 0 || watch(&listener, EPOLLIN) < 0) {
        perror("connect_floor: epoll");
        return 1;
    }
    struct epoll_event evs[BATCH];
    for (;;) {
        int n = epoll_wait(ep, evs, BATCH, -1);
        if (n < 0 && errno != EINTR) {
            perror("connect_floor: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e == &listener)
                accept_all(lfd);
            else if (!e->r->dead && !e->r->tunnel)
                read_head(e->r);
            else if (!e->r->dead)
                relay_io(e->r);
        }
        bury();
    }
}
