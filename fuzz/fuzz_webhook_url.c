/* fuzz_webhook_url: a webhook URL from a policy (http:// or https://), as
 * the sink parses it and as standard error and metrics show it.
 * Invariants: a parsed URL has a host of 1..253 bytes without '@', a port
 * in 1..65535 (443 or 80 when none is written), a path that starts with
 * '/', a Host header that is the URL's authority; https is the scheme
 * written. Its label is either the URL itself (a path of at most one
 * segment, no query or fragment) or the URL cut after its first path
 * segment followed by "/...#" and 8 hex digits; the same URL always gets
 * the same label. Includes the .c to reach parse_url(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/watch/sink_webhook.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_parsed(const char *url, const struct webhook *w, bool https)
{
    size_t hl = strlen(w->host);
    if (hl == 0 || hl > 253 || strchr(w->hosthdr, '@') != NULL)
        abort();
    if (w->port == 0 || (https != (strncmp(url, "https://", 8) == 0)))
        abort();
    if (w->path[0] != '/')
        abort();
    const char *auth = url + (https ? 8 : 7);
    size_t al = strcspn(auth, "/?#");
    if (strlen(w->hosthdr) != al || memcmp(w->hosthdr, auth, al) != 0)
        abort();
    if (memchr(auth, ':', al) == NULL && auth[0] != '[' && w->port != (https ? 443 : 80))
        abort();
}

static void check_label(const char *url)
{
    char *a = webhook_label_of(url), *b = webhook_label_of(url);
    if (a == NULL || b == NULL || strcmp(a, b) != 0)
        abort();
    size_t al = strlen(a), ul = strlen(url);
    if (strcmp(a, url) != 0) {
        static const char tail[] = "/...#";
        if (al < 13 || memcmp(a + al - 13, tail, 5) != 0)
            abort();
        for (size_t i = al - 8; i < al; i++)
            if (strchr("0123456789abcdef", a[i]) == NULL || a[i] == '\0')
                abort();
        size_t prefix = al - 13;
        if (prefix > ul || memcmp(a, url, prefix) != 0)
            abort();
        /* the cut hides everything after the first path segment */
        const char *p = strstr(url, "://");
        p = p != NULL ? p + 3 : url;
        const char *rest = p + strcspn(p, "/?#");
        size_t keep = *rest == '/' ? 1 + strcspn(rest + 1, "/?#") : 0;
        if (prefix != (size_t)(rest - url) + keep || rest[keep] == '\0')
            abort();
    }
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *url = malloc(size + 1);
    if (url == NULL)
        return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    struct webhook w;
    memset(&w, 0, sizeof(w));
    bool https = false;
    const char *why = NULL;
    if (parse_url(&w, url, &https, &why) == 0)
        check_parsed(url, &w, https);
    else if (why == NULL || why[0] == '\0')
        abort();
    free(w.host);
    free(w.path);
    free(w.hosthdr);
    check_label(url);
    free(url);
    return 0;
}
