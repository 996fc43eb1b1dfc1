/* name_server_addr: a name server's address in text (see name_server_addr.h). */
#include "util/name_server_addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

void name_server_addr_format(const struct sockaddr *sa, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        char zone[16] = "";
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        if (s6->sin6_scope_id != 0)
            snprintf(zone, sizeof(zone), "%%%u", (unsigned)s6->sin6_scope_id);
        snprintf(out, cap, "[%s%s]:%u", ip, zone, (unsigned)ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        snprintf(out, cap, "%s:%u", ip, (unsigned)ntohs(s4->sin_port));
    }
}
