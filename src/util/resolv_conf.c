/* resolv_conf: a resolv.conf's name servers (see resolv_conf.h). */
#include "util/resolv_conf.h"

#include <errno.h>

#include <event2/dns.h>
#include <event2/event.h>

int resolv_conf_addrs(struct event_base *base, const char *path, struct sockaddr_storage *ss,
                      socklen_t *len, size_t cap, size_t *count)
{
    size_t n = 0;
    *count = 0;
    struct evdns_base *conf = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (conf == NULL) {
        errno = ENOMEM;
        return -1;
    }
    errno = 0;
    (void)evdns_base_resolv_conf_parse(
        conf, DNS_OPTION_NAMESERVERS | DNS_OPTION_NAMESERVERS_NO_DEFAULT, path);
    int e = errno;
    if (e == EMFILE || e == ENFILE || e == ENOMEM) {
        evdns_base_free(conf, 0);
        errno = e;
        return -1;
    }
    /* evdns keeps its servers in a ring where each one added goes right
     * after the first (libevent 2.1's evdns_nameserver_add_impl_()): lines
     * A, B, C are listed A, C, B. They are taken in the order of the lines,
     * so that the next server asked is the next line's, as the C library
     * does, and the first <cap> lines are those kept. */
    int all = evdns_base_count_nameservers(conf);
    for (int k = 0; k < all && n < cap; k++) {
        int i = k == 0 ? 0 : all - k;
        int l = evdns_base_get_nameserver_addr(conf, i, (struct sockaddr *)&ss[n], sizeof(ss[n]));
        if (l > 0 && (size_t)l <= sizeof(ss[n]))
            len[n++] = (socklen_t)l;
    }
    evdns_base_free(conf, 0);
    *count = n;
    return 0;
}
