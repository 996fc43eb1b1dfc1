/* fuzz_client_hello: the ClientHello SNI parser. Invariants: a found name
 * fits the caller's buffer, is NUL-terminated with no NUL inside and at most
 * SNI_NAME_MAX bytes; the result of every prefix is either NEED_MORE or the
 * result of the whole input (so a prefix of a FOUND input is never
 * MALFORMED), and NEED_MORE is never returned for an input that could not
 * be completed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate/sni.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
    if (!cond)
        abort();
}

static enum sni_result parse_copy(const uint8_t *data, size_t n, char *name, size_t cap,
                                  size_t *len)
{
    uint8_t *b = malloc(n ? n : 1); /* exact size, for ASan */
    check(b != NULL);
    memcpy(b, data, n);
    enum sni_result r = sni_parse(b, n, name, cap, len);
    free(b);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 70000)
        return 0;
    char name[SNI_NAME_MAX + 1];
    size_t len = 0;
    enum sni_result full = parse_copy(data, size, name, sizeof(name), &len);
    check(full >= SNI_FOUND && full <= SNI_MALFORMED);
    if (full == SNI_FOUND) {
        check(len >= 1 && len <= SNI_NAME_MAX && len < sizeof(name));
        check(name[len] == '\0' && strlen(name) == len);
        /* A smaller buffer: found and equal, or refused. */
        char small[16];
        size_t slen = 0;
        enum sni_result r = parse_copy(data, size, small, sizeof(small), &slen);
        if (len < sizeof(small))
            check(r == SNI_FOUND && slen == len && memcmp(small, name, len + 1) == 0);
        else
            check(r == SNI_MALFORMED);
    } else {
        check(len == 0);
    }
    /* Prefixes: all of them for small inputs, a spread for large ones. */
    size_t step = size <= 600 ? 1 : size / 97 + 1;
    for (size_t n = 0; n < size; n += step) {
        char pname[SNI_NAME_MAX + 1];
        size_t plen = 0;
        enum sni_result r = parse_copy(data, n, pname, sizeof(pname), &plen);
        check(r == SNI_NEED_MORE || r == full);
        if (r == SNI_FOUND)
            check(plen == len && memcmp(pname, name, len) == 0);
    }
    return 0;
}
