/* flip_names: preloaded into sluice by test_listen_addr_lookups.py, a
 * name that gives another address at each lookup, as a /etc/hosts edited
 * between two lookups would: getaddrinfo() of a name ending in
 * ".flip.test" answers 127.0.0.1 the first time, 127.0.0.2 the second,
 * and so on (up to 127.0.0.200), for each name on its own. Every other
 * lookup is the C library's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#define NAMES_MAX 8

static char names[NAMES_MAX][256];
static unsigned looked[NAMES_MAX];

/* How many lookups of <name> came before this one. */
static unsigned lookups_before(const char *name)
{
    for (int i = 0; i < NAMES_MAX; i++) {
        if (names[i][0] == '\0')
            snprintf(names[i], sizeof(names[i]), "%s", name);
        if (strcmp(names[i], name) == 0)
            return looked[i]++;
    }
    return 0;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    if (real == NULL)
        real = (int (*)(const char *, const char *, const struct addrinfo *,
                        struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
    size_t n = node != NULL ? strlen(node) : 0;
    if (n > 10 && strcmp(node + n - 10, ".flip.test") == 0) {
        unsigned before = lookups_before(node);
        char addr[16];
        snprintf(addr, sizeof(addr), "127.0.0.%u", before < 200 ? before + 1 : 200);
        struct addrinfo h = hints != NULL ? *hints : (struct addrinfo){0};
        h.ai_family = AF_INET;
        h.ai_flags |= AI_NUMERICHOST;
        return real(addr, service, &h, res);
    }
    return real(node, service, hints, res);
}
