/* fuzz_resolv_conf: resolv_conf_addrs() on any resolv.conf. The first
 * byte chooses how many servers are asked for (1 to 4); the rest is the
 * file, read from a memfd (no disk, nothing sent: evdns only opens a
 * socket for each server it adds).
 *
 * The reference reads the file as evdns does: up to its first NUL, lines
 * cut at LF, words at blanks and tabs, a server the second word of a line
 * whose first is "nameserver", read by evutil_parse_sockaddr_port() (port
 * 53 when none), its repeats dropped. Invariants: it returns 0 (or -1 with
 * errno when out of descriptors or memory); the servers it gives are at
 * most the number asked for, each with the length of its family's address,
 * and are servers of the reference in the order of their lines (evdns may
 * still drop one it cannot open a socket for); when every server of the
 * reference is a loopback address (which always gets its socket), they
 * are the first of the reference, as many as asked for or as there are.
 * Inputs naming "bind-to" are skipped: evdns would bind its sockets to the
 * address that option names, which is another session's business. */
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/util.h>

#include "util/resolv_conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP_MAX  4
#define FILE_MAX 65535 /* evdns refuses a larger file */
#define REF_MAX  (FILE_MAX / 12 + 1)

static void check(int cond)
{
    if (!cond)
        abort();
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    check(a->ss_family == AF_INET6);
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
}

static bool loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr);
}

struct ref {
    struct sockaddr_storage ss[REF_MAX];
    size_t n;
    bool all_loopback;
};

/* The servers of <text> (NUL-terminated), as evdns reads them, in <r>. */
static void reference(char *text, struct ref *r)
{
    r->n = 0;
    r->all_loopback = true;
    for (char *line = text, *next; line != NULL; line = next) {
        char *lf = strchr(line, '\n');
        next = lf != NULL ? lf + 1 : NULL;
        if (lf != NULL)
            *lf = '\0';
        char *st;
        const char *first = strtok_r(line, " \t", &st);
        if (first == NULL || strcmp(first, "nameserver") != 0)
            continue;
        const char *server = strtok_r(NULL, " \t", &st);
        struct sockaddr_storage ss;
        int len = (int)sizeof(ss);
        memset(&ss, 0, sizeof(ss));
        if (server == NULL || evutil_parse_sockaddr_port(server, (struct sockaddr *)&ss, &len) != 0)
            continue;
        if (ss.ss_family == AF_INET && ((struct sockaddr_in *)&ss)->sin_port == 0)
            ((struct sockaddr_in *)&ss)->sin_port = htons(53);
        if (ss.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&ss)->sin6_port == 0)
            ((struct sockaddr_in6 *)&ss)->sin6_port = htons(53);
        bool repeat = false;
        for (size_t i = 0; i < r->n && !repeat; i++)
            repeat = same_addr(&r->ss[i], &ss);
        if (repeat)
            continue;
        check(r->n < REF_MAX);
        r->all_loopback = r->all_loopback && loopback(&ss);
        r->ss[r->n++] = ss;
    }
}

/* evdns warns of every line it cannot read: not news here. */
static void quiet(int severity, const char *msg)
{
    (void)severity;
    (void)msg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct event_base *base;
    static int fd = -1;
    static char path[64];
    static struct ref ref;
    if (base == NULL) {
        event_set_log_callback(quiet);
        base = event_base_new();
        fd = memfd_create("resolv.conf", MFD_CLOEXEC);
        check(base != NULL && fd >= 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    if (size < 1 || size - 1 > FILE_MAX || memmem(data, size, "bind-to", 7) != NULL)
        return 0;
    size_t cap = 1 + data[0] % CAP_MAX, flen = size - 1;
    check(ftruncate(fd, 0) == 0);
    check(pwrite(fd, data + 1, flen, 0) == (ssize_t)flen);

    struct sockaddr_storage ss[CAP_MAX];
    socklen_t len[CAP_MAX];
    size_t n = 99;
    errno = 0;
    int rc = resolv_conf_addrs(base, path, ss, len, cap, &n);
    if (rc < 0) {
        check(errno == EMFILE || errno == ENFILE || errno == ENOMEM);
        return 0;
    }
    check(rc == 0 && n <= cap);

    char *text = malloc(flen + 1);
    check(text != NULL);
    memcpy(text, data + 1, flen);
    text[flen] = '\0';
    reference(text, &ref);
    free(text);

    size_t at = 0; /* the next server of the reference that may come */
    for (size_t i = 0; i < n; i++) {
        check(len[i] == (ss[i].ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                    : sizeof(struct sockaddr_in6)));
        while (at < ref.n && !same_addr(&ref.ss[at], &ss[i]))
            at++;
        check(at < ref.n);
        if (ref.all_loopback)
            check(at == i);
        at++;
    }
    if (ref.all_loopback)
        check(n == (ref.n < cap ? ref.n : cap));
    return 0;
}
