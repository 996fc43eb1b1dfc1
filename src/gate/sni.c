/* sni: the server name of a TLS ClientHello (see sni.h).
 *
 * RFC 8446 4.1.2 / RFC 5246 7.4.1.2, RFC 6066 3:
 *   record      = type(1)=22 version(2)=3.x (any x; the first record also
 *                 0.x to 15.x, as Go's crypto/tls takes) length(2) fragment
 *   handshake   = msg_type(1)=1 length(3) ClientHello
 *   ClientHello = legacy_version(2) random(32) session_id<0..32>
 *                 cipher_suites<2..2^16-2> compression_methods<1..2^8-1>
 *                 [extensions<..2^16-1>]
 *   server_name = server_name_list<1..2^16-1> of name_type(1) HostName<1..2^16-1>
 * The handshake message is gathered from the records into a local buffer,
 * then walked with a cursor that tells "past the declared length"
 * (malformed) from "past the bytes received so far" (need more). */
#include "gate/sni.h"

#include <stdbool.h>
#include <string.h>

#define TLS_RECORD_HEADER      5
#define TLS_MAX_FRAGMENT       16384
#define TLS_CHANGE_CIPHER_SPEC 20
#define TLS_ALERT              21
#define TLS_HANDSHAKE          22
#define TLS_HEARTBEAT          24
#define TLS_CLIENT_HELLO       1
#define TLS_SERVER_HELLO       2
#define TLS_FIRST_MAJOR_MAX    16 /* first records: majors below it may be TLS */
#define EXT_SERVER_NAME        0
#define EXT_ECH                0xfe0d /* encrypted_client_hello */
#define EXT_ECH_DRAFT_FIRST    0xfe08 /* drafts 8 to 12 of ECH */
#define EXT_ECH_DRAFT_LAST     0xfe0c
#define EXT_ECH_DRAFT7         0xff02 /* ECH in draft 7 */
#define EXT_ESNI               0xffce /* encrypted_server_name, the drafts before ECH */
#define NAME_TYPE_HOSTNAME     0

struct cursor {
    const uint8_t *b;
    size_t pos;
    size_t avail; /* bytes of b received so far */
};

/* Claims <n> bytes at the cursor within <end>: 0, or an sni_result. */
static int take(struct cursor *c, size_t end, size_t n, size_t *at)
{
    if (n > end - c->pos)
        return SNI_MALFORMED;
    if (c->pos + n > c->avail)
        return SNI_NEED_MORE;
    *at = c->pos;
    c->pos += n;
    return -1;
}

#define TAKE(c, end, n, at)                                                                        \
    do {                                                                                           \
        int rc_ = take((c), (end), (n), (at));                                                     \
        if (rc_ >= 0)                                                                              \
            return (enum sni_result)rc_;                                                           \
    } while (0)

static size_t be16(const uint8_t *p)
{
    return ((size_t)p[0] << 8) | p[1];
}

/* Walks the server_name extension body [c->pos, end). */
static enum sni_result parse_server_name(struct cursor *c, size_t end, size_t *name_at,
                                         size_t *name_len)
{
    size_t at;
    TAKE(c, end, 2, &at);
    size_t list_len = be16(c->b + at);
    if (list_len == 0 || list_len != end - c->pos)
        return SNI_MALFORMED;
    bool found = false;
    while (c->pos < end) {
        TAKE(c, end, 3, &at);
        uint8_t type = c->b[at];
        size_t n = be16(c->b + at + 1);
        if (n == 0)
            return SNI_MALFORMED;
        TAKE(c, end, n, &at);
        /* RFC 6066 defines host_name alone. A server that takes the
         * first entry whatever its type would serve another name than the
         * one checked: an entry of another type is refused, as a second
         * host_name is. */
        if (type != NAME_TYPE_HOSTNAME || found || n > SNI_NAME_MAX ||
            memchr(c->b + at, 0, n) != NULL)
            return SNI_MALFORMED;
        found = true;
        *name_at = at;
        *name_len = n;
    }
    return found ? SNI_FOUND : SNI_ABSENT;
}

bool sni_encrypted_extension(unsigned type)
{
    return type == EXT_ECH || type == EXT_ESNI || type == EXT_ECH_DRAFT7 ||
           (type >= EXT_ECH_DRAFT_FIRST && type <= EXT_ECH_DRAFT_LAST);
}

/* Walks the ClientHello body of the handshake message in c->b; sets
 * <*encrypted> when an extension carries an encrypted hello or name. */
static enum sni_result parse_client_hello(struct cursor *c, size_t end, size_t *name_at,
                                          size_t *name_len, bool *encrypted)
{
    size_t at;
    TAKE(c, end, 2 + 32, &at); /* legacy_version, random */
    if (c->b[at] != 3)
        return SNI_MALFORMED;
    TAKE(c, end, 1, &at);
    size_t n = c->b[at];
    if (n > 32)
        return SNI_MALFORMED;
    TAKE(c, end, n, &at);
    TAKE(c, end, 2, &at);
    n = be16(c->b + at);
    if (n < 2 || n % 2 != 0)
        return SNI_MALFORMED;
    TAKE(c, end, n, &at);
    TAKE(c, end, 1, &at);
    n = c->b[at];
    if (n < 1)
        return SNI_MALFORMED;
    TAKE(c, end, n, &at);
    if (c->pos == end)
        return SNI_ABSENT; /* no extensions at all (TLS 1.0 style) */
    TAKE(c, end, 2, &at);
    if (be16(c->b + at) != end - c->pos)
        return SNI_MALFORMED;
    bool seen = false; /* a server_name extension */
    bool found = false;
    while (c->pos < end) {
        TAKE(c, end, 4, &at);
        size_t type = be16(c->b + at);
        size_t ext_end_len = be16(c->b + at + 2);
        if (ext_end_len > end - c->pos)
            return SNI_MALFORMED;
        size_t ext_end = c->pos + ext_end_len;
        if (sni_encrypted_extension((unsigned)type))
            *encrypted = true;
        if (type != EXT_SERVER_NAME) {
            TAKE(c, end, ext_end_len, &at);
            continue;
        }
        if (seen)
            return SNI_MALFORMED; /* a second server_name extension */
        seen = true;
        enum sni_result r = parse_server_name(c, ext_end, name_at, name_len);
        if (r != SNI_FOUND && r != SNI_ABSENT)
            return r;
        found = r == SNI_FOUND;
    }
    return found ? SNI_FOUND : SNI_ABSENT;
}

/* A record content type of TLS: change_cipher_spec (20), alert (21),
 * handshake (22), application_data (23), heartbeat (24). */
static bool tls_content_type(uint8_t t)
{
    return t >= TLS_CHANGE_CIPHER_SPEC && t <= TLS_HEARTBEAT;
}

/* Whether a first record of type <t> with major version <major> is one a
 * TLS server takes: any TLS content type with major version 3 (any minor:
 * servers accept legacy record versions they do not know), and a handshake
 * or alert record with any major version below 16 (Go's crypto/tls takes a
 * first record of any version below 0x1000, and skips a warning alert). */
static bool tls_first_record(uint8_t t, uint8_t major)
{
    if (major == 3)
        return tls_content_type(t);
    return major < TLS_FIRST_MAJOR_MAX && (t == TLS_HANDSHAKE || t == TLS_ALERT);
}

/* Checks the record header bytes present at <p> (<n> < 5 allowed). The
 * first record is TLS when a server would take it (tls_first_record); then
 * it must be a handshake record, and so must every later one, whose major
 * version must be 3. Anything else as the first record is not TLS. */
static enum sni_result check_record_header(const uint8_t *p, size_t n, bool first)
{
    if (first) {
        if (n >= 1 && !tls_content_type(p[0]))
            return SNI_NOT_TLS;
        if (n >= 2 && !tls_first_record(p[0], p[1]))
            return SNI_NOT_TLS;
        if (n >= 2 && p[0] != TLS_HANDSHAKE)
            return SNI_MALFORMED; /* e.g. an alert before the ClientHello */
    } else {
        if (n >= 1 && p[0] != TLS_HANDSHAKE)
            return SNI_MALFORMED;
        if (n >= 2 && p[1] != 3)
            return SNI_MALFORMED;
    }
    if (n >= 5) {
        size_t rlen = be16(p + 3);
        if (rlen == 0 || rlen > TLS_MAX_FRAGMENT)
            return SNI_MALFORMED;
    }
    return SNI_NEED_MORE;
}

enum sni_result sni_parse(const uint8_t *buf, size_t len, char *name, size_t name_cap,
                          size_t *name_len, size_t *used, bool *encrypted)
{
    size_t missing;
    return sni_parse_missing(buf, len, name, name_cap, name_len, used, encrypted, &missing);
}

/* sni_parse_missing(), which sets <*missing> only on its last NEED_MORE. */
static enum sni_result parse_records(const uint8_t *buf, size_t len, char *name, size_t name_cap,
                                     size_t *name_len, size_t *used, bool *encrypted,
                                     size_t *missing)
{
    uint8_t hs[SNI_MAX_HELLO];
    size_t have = 0; /* handshake bytes gathered */
    size_t need = 0; /* 4 + message length, once known */
    size_t pos = 0;
    size_t end = 0; /* past the record the message ends in, once it has */
    bool first = true;

    *name_len = 0;
    *used = 0;
    *encrypted = false;
    if (len == 0)
        return SNI_NEED_MORE;
    while (need == 0 || have < need) {
        size_t left = len - pos;
        enum sni_result r = check_record_header(buf + pos, left, first);
        if (r != SNI_NEED_MORE)
            return r;
        if (left < TLS_RECORD_HEADER)
            break;
        first = false;
        size_t rlen = be16(buf + pos + 3);
        const uint8_t *frag = buf + pos + TLS_RECORD_HEADER;
        size_t flen = left - TLS_RECORD_HEADER < rlen ? left - TLS_RECORD_HEADER : rlen;
        size_t i = 0;
        while (i < flen && (need == 0 || have < need)) {
            if (need == 0) {
                hs[have++] = frag[i++];
                if (have == 1 && hs[0] != TLS_CLIENT_HELLO)
                    return SNI_MALFORMED;
                if (have == 4) {
                    size_t msg = ((size_t)hs[1] << 16) | ((size_t)hs[2] << 8) | hs[3];
                    if (msg > SNI_MAX_HELLO - 4)
                        return SNI_MALFORMED;
                    need = 4 + msg;
                }
                continue;
            }
            size_t n = need - have < flen - i ? need - have : flen - i;
            memcpy(hs + have, frag + i, n);
            have += n;
            i += n;
        }
        if (need != 0 && have >= need) {
            /* The ClientHello ends on a record boundary (RFC 8446 5.1):
             * nothing rides behind it unread. */
            if (i != rlen)
                return SNI_MALFORMED;
            end = pos + TLS_RECORD_HEADER + rlen;
            break;
        }
        if (flen < rlen)
            break; /* a partial record: everything received is in hs */
        pos += TLS_RECORD_HEADER + rlen;
    }
    if (need == 0)
        return SNI_NEED_MORE; /* handshake header incomplete, valid so far */

    struct cursor c = {.b = hs, .pos = 4, .avail = have};
    size_t at = 0, n = 0;
    bool ech = false;
    enum sni_result r = parse_client_hello(&c, need, &at, &n, &ech);
    if (r == SNI_NEED_MORE && have < need)
        *missing = need - have;
    if (r == SNI_ABSENT) {
        *used = end;
        *encrypted = ech;
    }
    if (r != SNI_FOUND)
        return r;
    if (n + 1 > name_cap)
        return SNI_MALFORMED;
    memcpy(name, hs + at, n);
    name[n] = '\0';
    *name_len = n;
    *used = end;
    *encrypted = ech;
    return SNI_FOUND;
}

enum sni_result sni_parse_missing(const uint8_t *buf, size_t len, char *name, size_t name_cap,
                                  size_t *name_len, size_t *used, bool *encrypted, size_t *missing)
{
    *missing = 1;
    enum sni_result r = parse_records(buf, len, name, name_cap, name_len, used, encrypted, missing);
    if (r != SNI_NEED_MORE)
        *missing = 0;
    return r;
}

size_t sni_skip_ccs(const uint8_t *buf, size_t len, bool *need_more)
{
    static const uint8_t ccs[] = {TLS_CHANGE_CIPHER_SPEC, 3, 0, 0, 1, 1};
    *need_more = false;
    for (size_t i = 0; i < sizeof(ccs) && i < len; i++)
        if (i != 2 && buf[i] != ccs[i])
            return 0;
    if (len < sizeof(ccs)) {
        *need_more = len > 0;
        return 0;
    }
    return sizeof(ccs);
}

/* True when the handshake records at the start of <buf> carry <need>
 * bytes of handshake message, or when a record that is not a handshake
 * record comes first (nothing more to wait for). */
static bool whole_message(const uint8_t *buf, size_t len, size_t need)
{
    size_t pos = 0, got = 0;
    while (got < need) {
        if (len - pos >= 1 && buf[pos] != TLS_HANDSHAKE)
            return true;
        if (len - pos < TLS_RECORD_HEADER)
            return false;
        size_t rlen = be16(buf + pos + 3);
        size_t avail = len - pos - TLS_RECORD_HEADER < rlen ? len - pos - TLS_RECORD_HEADER : rlen;
        got += avail;
        if (avail < rlen)
            return got >= need;
        pos += TLS_RECORD_HEADER + rlen;
    }
    return true;
}

enum sni_reply sni_server_reply(const uint8_t *buf, size_t len)
{
    /* The random of a HelloRetryRequest: SHA-256("HelloRetryRequest"). */
    static const uint8_t hrr_random[32] = {
        0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c,
        0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb,
        0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
    };
    uint8_t hs[4 + 2 + 32]; /* handshake header, legacy_version, random */
    size_t have = 0, pos = 0;
    while (have < sizeof(hs)) {
        size_t left = len - pos;
        if (left >= 1 && buf[pos] != TLS_HANDSHAKE)
            return SNI_REPLY_OTHER;
        if (left >= 2 && buf[pos + 1] != 3)
            return SNI_REPLY_OTHER;
        if (left < TLS_RECORD_HEADER)
            return SNI_REPLY_NEED_MORE;
        size_t rlen = be16(buf + pos + 3);
        if (rlen == 0 || rlen > TLS_MAX_FRAGMENT)
            return SNI_REPLY_OTHER;
        size_t flen = left - TLS_RECORD_HEADER < rlen ? left - TLS_RECORD_HEADER : rlen;
        size_t n = sizeof(hs) - have < flen ? sizeof(hs) - have : flen;
        memcpy(hs + have, buf + pos + TLS_RECORD_HEADER, n);
        have += n;
        if (have >= 1 && hs[0] != TLS_SERVER_HELLO)
            return SNI_REPLY_OTHER;
        if (have < sizeof(hs) && flen < rlen)
            return SNI_REPLY_NEED_MORE;
        pos += TLS_RECORD_HEADER + rlen;
    }
    if (memcmp(hs + 6, hrr_random, sizeof(hrr_random)) != 0)
        return SNI_REPLY_OTHER;
    /* The client answers a HelloRetryRequest only once it has all of it. */
    size_t need = 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
    return whole_message(buf, len, need) ? SNI_REPLY_RETRY : SNI_REPLY_NEED_MORE;
}
