/* fuzz_client_hello: the ClientHello SNI parser. Invariants: a found name
 * fits the caller's buffer, is NUL-terminated with no NUL inside and at most
 * SNI_NAME_MAX bytes; the result of every prefix is either NEED_MORE or the
 * result of the whole input (so a prefix of a FOUND input is never
 * MALFORMED), and NEED_MORE is never returned for an input that could not
 * be completed; a FOUND or ABSENT input cut after the <used> bytes of its
 * records parses alike, and says alike whether it carries an encrypted
 * ClientHello (never said of any other result). The same input read as a server's answer
 * (sni_server_reply): every prefix is NEED_MORE or the whole input's answer.
 * sni_parse_missing: bytes said missing only on NEED_MORE, and never more
 * than a FOUND or ABSENT input's records have beyond the prefix.
 * sni_parse() answers as sni_parse_missing() does, name, used bytes and all.
 * sni_skip_ccs: the change_cipher_spec record skipped when it is there,
 * NEED_MORE exactly for a start of one. A well-formed ClientHello built
 * around a name taken from the input (1 to SNI_NAME_MAX bytes), cut into
 * handshake records of a size the input chooses, is FOUND with that very
 * name over all its bytes (MALFORMED when the name holds a NUL, or when
 * the list holds a second entry: another host_name or another type). */
#include <stdbool.h>
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

static size_t last_used;    /* <used> of the last parse_copy() */
static bool last_encrypted; /* <encrypted> of the last parse_copy() */
static size_t last_missing; /* <missing> of the last parse_copy() */

static enum sni_reply reply_copy(const uint8_t *data, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    check(b != NULL);
    memcpy(b, data, n);
    enum sni_reply r = sni_server_reply(b, n);
    free(b);
    return r;
}

static enum sni_result parse_copy(const uint8_t *data, size_t n, char *name, size_t cap,
                                  size_t *len)
{
    uint8_t *b = malloc(n ? n : 1); /* exact size, for ASan */
    check(b != NULL);
    memcpy(b, data, n);
    size_t used = 0, missing = 0;
    bool encrypted = true;
    enum sni_result r = sni_parse_missing(b, n, name, cap, len, &used, &encrypted, &missing);
    /* sni_parse(), the gateway's other entry: the same answer. */
    char *pname = malloc(cap ? cap : 1);
    check(pname != NULL);
    size_t plen = 1, pused = 1;
    bool penc = !encrypted;
    check(sni_parse(b, n, pname, cap, &plen, &pused, &penc) == r);
    check(plen == *len && pused == used && penc == encrypted);
    check(r != SNI_FOUND || memcmp(pname, name, *len + 1) == 0);
    free(pname);
    if (r == SNI_FOUND || r == SNI_ABSENT)
        check(used >= 9 && used <= n);
    else
        check(used == 0 && !encrypted);
    check(r == SNI_NEED_MORE ? missing >= 1 : missing == 0);
    last_missing = missing;
    last_used = used;
    last_encrypted = encrypted;
    free(b);
    return r;
}

/* sni_skip_ccs() on the first 0 to 7 bytes: the 6 of a change_cipher_spec
 * record (20 3 x 0 1 1) skipped when they are there, <need_more> exactly
 * for 1 to 5 bytes that start one, nothing skipped otherwise. */
static void check_skip_ccs(const uint8_t *data, size_t size)
{
    static const uint8_t ccs[6] = {20, 3, 0, 0, 1, 1};
    size_t k = 0; /* the leading bytes that match */
    while (k < size && k < sizeof(ccs) && (k == 2 || data[k] == ccs[k]))
        k++;
    for (size_t n = 0; n <= size && n <= 7; n++) {
        uint8_t *b = malloc(n ? n : 1); /* exact size, for ASan */
        check(b != NULL);
        memcpy(b, data, n);
        bool more = true;
        size_t skip = sni_skip_ccs(b, n, &more);
        free(b);
        check(skip == (n >= 6 && k == 6 ? 6 : 0));
        check(more == (n > 0 && n < 6 && k >= n));
    }
}

static size_t put16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return 2;
}

/* A ClientHello (TLS 1.2 style: one cipher suite, null compression, one
 * extension) naming data[1..] (at most SNI_NAME_MAX bytes), in records of
 * 1 to 64 bytes (data[0] below 192) or one record. <twice>: its
 * server_name_list holds a second entry, of the same name, a host_name
 * (data[0] even) or of type data[0]: MALFORMED whatever the name, as a
 * server may serve the second. */
static void check_built_hello(const uint8_t *data, size_t size, bool twice)
{
    if (size < 2)
        return;
    size_t n = size - 1 > SNI_NAME_MAX ? SNI_NAME_MAX : size - 1;
    const uint8_t *nm = data + 1;
    uint8_t msg[1024], rec[sizeof(msg) * 6]; /* records of one byte at worst */
    size_t m = 4;                            /* the handshake header, filled in below */
    msg[m++] = 3;
    msg[m++] = 3;
    memset(msg + m, 0x5a, 32); /* random */
    m += 32;
    msg[m++] = 0;                /* session id */
    m += put16(msg + m, 2);      /* cipher suites */
    m += put16(msg + m, 0x1301); /* TLS_AES_128_GCM_SHA256 */
    msg[m++] = 1;                /* compression methods: null */
    msg[m++] = 0;
    size_t entries = twice ? 2 : 1;
    m += put16(msg + m, 4 + 2 + entries * (3 + n)); /* extensions */
    m += put16(msg + m, 0);                         /* server_name */
    m += put16(msg + m, 2 + entries * (3 + n));
    m += put16(msg + m, entries * (3 + n)); /* server_name_list */
    for (size_t e = 0; e < entries; e++) {
        msg[m++] = e == 0 || data[0] % 2 == 0 ? 0 : data[0]; /* host_name, or another */
        m += put16(msg + m, n);
        memcpy(msg + m, nm, n);
        m += n;
    }
    msg[0] = 1; /* client_hello */
    msg[1] = 0;
    put16(msg + 2, m - 4);
    size_t frag = data[0] < 192 ? 1 + (size_t)data[0] % 64 : m, r = 0;
    for (size_t at = 0; at < m; at += frag) {
        size_t k = m - at < frag ? m - at : frag;
        rec[r++] = 22;
        rec[r++] = 3;
        rec[r++] = 1;
        r += put16(rec + r, k);
        memcpy(rec + r, msg + at, k);
        r += k;
    }
    char name[SNI_NAME_MAX + 1];
    size_t len = 0;
    enum sni_result res = parse_copy(rec, r, name, sizeof(name), &len);
    if (twice || memchr(nm, 0, n) != NULL) {
        check(res == SNI_MALFORMED);
        return;
    }
    check(res == SNI_FOUND && len == n && memcmp(name, nm, n) == 0);
    check(last_used == r && !last_encrypted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 70000)
        return 0;
    char name[SNI_NAME_MAX + 1];
    size_t len = 0;
    enum sni_result full = parse_copy(data, size, name, sizeof(name), &len);
    check(full >= SNI_FOUND && full <= SNI_MALFORMED);
    size_t used = last_used;
    bool encrypted = last_encrypted;
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
    if (full == SNI_FOUND || full == SNI_ABSENT) {
        char uname[SNI_NAME_MAX + 1];
        size_t ulen = 0;
        check(parse_copy(data, used, uname, sizeof(uname), &ulen) == full);
        check(last_used == used && ulen == len && last_encrypted == encrypted);
    }
    check_skip_ccs(data, size);
    check_built_hello(data, size, false);
    check_built_hello(data, size, true);
    enum sni_reply reply = reply_copy(data, size);
    /* Prefixes: all of them for small inputs, a spread for large ones. */
    size_t step = size <= 600 ? 1 : size / 97 + 1;
    for (size_t n = 0; n < size; n += step) {
        char pname[SNI_NAME_MAX + 1];
        size_t plen = 0;
        enum sni_result r = parse_copy(data, n, pname, sizeof(pname), &plen);
        check(r == SNI_NEED_MORE || r == full);
        if (r == SNI_FOUND || r == SNI_ABSENT)
            check(last_encrypted == encrypted);
        if (r == SNI_FOUND)
            check(plen == len && memcmp(pname, name, len) == 0);
        /* The bytes said missing are never more than the hello lacks. */
        if (r == SNI_NEED_MORE && (full == SNI_FOUND || full == SNI_ABSENT))
            check(n + last_missing <= used);
        enum sni_reply pr = reply_copy(data, n);
        check(pr == SNI_REPLY_NEED_MORE || pr == reply);
    }
    return 0;
}
