/* Unit tests for gate/sni.c: real ClientHellos captured from openssl
 * s_client, curl and Python on loopback (tests/unit/data/clienthello_*.bin),
 * re-fragmented over several records and truncated at every length, plus
 * hand-built edge cases for every error path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate/sni.h"

#define BUF_CAP 40000

struct bytes {
    uint8_t b[BUF_CAP];
    size_t n;
};

static void put(struct bytes *o, const void *p, size_t n)
{
    assert_true(o->n + n <= BUF_CAP);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put8(struct bytes *o, unsigned v)
{
    uint8_t b = (uint8_t)v;
    put(o, &b, 1);
}

static void put16(struct bytes *o, size_t v)
{
    put8(o, (unsigned)(v >> 8) & 0xff);
    put8(o, (unsigned)v & 0xff);
}

static void put24(struct bytes *o, size_t v)
{
    put8(o, (unsigned)(v >> 16) & 0xff);
    put16(o, v & 0xffff);
}

static size_t last_used;    /* sni_parse's <used> in the last run() */
static bool last_encrypted; /* sni_parse's <encrypted> in the last run() */
static size_t last_missing; /* sni_parse_missing's <missing> in the last run() */

/* Runs sni_parse_missing on an exact-size copy of <b>, and sni_parse, which
 * must agree with it. */
static enum sni_result run(const uint8_t *b, size_t n, char *name, size_t cap, size_t *len)
{
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, b, n);
    last_encrypted = true;
    enum sni_result r =
        sni_parse_missing(c, n, name, cap, len, &last_used, &last_encrypted, &last_missing);
    size_t used2 = 0, len2 = 0;
    bool encrypted2 = true;
    char name2[SNI_NAME_MAX + 1];
    assert_int_equal(sni_parse(c, n, name2, cap < sizeof(name2) ? cap : sizeof(name2), &len2,
                               &used2, &encrypted2),
                     r);
    assert_int_equal(used2, last_used);
    free(c);
    if (r == SNI_NEED_MORE)
        assert_true(last_missing >= 1);
    else
        assert_int_equal(last_missing, 0);
    if (r != SNI_FOUND && r != SNI_ABSENT) {
        assert_int_equal(last_used, 0);
        assert_false(last_encrypted);
    } else
        assert_true(last_used > 0 && last_used <= n);
    return r;
}

static enum sni_result parse(const struct bytes *b, char *name)
{
    size_t len;
    return run(b->b, b->n, name, SNI_NAME_MAX + 1, &len);
}

static void load(const char *file, struct bytes *out)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/unit/data/%s", SRCDIR, file);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    out->n = fread(out->b, 1, BUF_CAP, f);
    fclose(f);
    assert_true(out->n > 5);
}

/* The handshake message of a capture (it fits one record). */
static void message_of(const struct bytes *rec, struct bytes *msg)
{
    size_t rlen = ((size_t)rec->b[3] << 8) | rec->b[4];
    assert_true(rlen + 5 <= rec->n);
    msg->n = 0;
    put(msg, rec->b + 5, rlen);
}

/* Wraps <msg> in handshake records of at most <frag> bytes each. */
static void records(const struct bytes *msg, size_t frag, struct bytes *out)
{
    out->n = 0;
    for (size_t off = 0; off < msg->n; off += frag) {
        size_t n = msg->n - off < frag ? msg->n - off : frag;
        put8(out, 22);
        put16(out, 0x0301);
        put16(out, n);
        put(out, msg->b + off, n);
    }
}

/* Builds a ClientHello handshake message with extensions <ext> (NULL: no
 * extensions block at all). */
static void hello(const struct bytes *ext, struct bytes *msg)
{
    struct bytes body = {.n = 0};
    put16(&body, 0x0303);
    for (int i = 0; i < 32; i++)
        put8(&body, (unsigned)i);
    put8(&body, 32); /* session id */
    for (int i = 0; i < 32; i++)
        put8(&body, 0xaa);
    put16(&body, 4); /* cipher suites */
    put16(&body, 0x1301);
    put16(&body, 0xc02f);
    put8(&body, 1); /* compression methods */
    put8(&body, 0);
    if (ext != NULL) {
        put16(&body, ext->n);
        put(&body, ext->b, ext->n);
    }
    msg->n = 0;
    put8(msg, 1);
    put24(msg, body.n);
    put(msg, body.b, body.n);
}

/* Appends a server_name extension with one host_name <name> (<n> bytes). */
static void ext_sni(struct bytes *ext, const char *name, size_t n)
{
    put16(ext, 0);
    put16(ext, n + 5);
    put16(ext, n + 3);
    put8(ext, 0);
    put16(ext, n);
    put(ext, name, n);
}

static void ext_other(struct bytes *ext, unsigned type, size_t n)
{
    put16(ext, type);
    put16(ext, n);
    for (size_t i = 0; i < n; i++)
        put8(ext, 0x5a);
}

static void build(const struct bytes *ext, struct bytes *rec)
{
    static struct bytes msg;
    hello(ext, &msg);
    records(&msg, 16384, rec);
}

/* Every strict prefix of <b> is NEED_MORE. */
static void prefixes_need_more(const struct bytes *b)
{
    char name[SNI_NAME_MAX + 1];
    size_t len;
    for (size_t n = 0; n < b->n; n++) {
        enum sni_result r = run(b->b, n, name, sizeof(name), &len);
        if (r != SNI_NEED_MORE)
            fail_msg("prefix %zu of %zu: result %d", n, b->n, r);
    }
}

static void expect_found(const struct bytes *b, const char *want)
{
    char name[SNI_NAME_MAX + 1];
    size_t len = 0;
    enum sni_result r = run(b->b, b->n, name, sizeof(name), &len);
    if (r != SNI_FOUND)
        fail_msg("result %d, want FOUND %s", r, want);
    assert_int_equal(len, strlen(want));
    assert_string_equal(name, want);
}

static void expect_result(const struct bytes *b, enum sni_result want)
{
    char name[SNI_NAME_MAX + 1];
    enum sni_result r = parse(b, name);
    if (r != want)
        fail_msg("result %d, want %d", r, want);
}

/* ---------------------------------------------------------------------- */

static struct bytes in, msg, out, ext;

static void test_captures(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        const char *name; /* NULL: no SNI */
    } caps[] = {
        {"clienthello_openssl.bin", "api.github.com"},
        {"clienthello_openssl_tls12.bin", "api.github.com"},
        {"clienthello_curl.bin", "api.github.com"},
        {"clienthello_python.bin", "pypi.org"},
        {"clienthello_openssl_nosni.bin", NULL},
    };
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        load(caps[i].file, &in);
        if (caps[i].name != NULL)
            expect_found(&in, caps[i].name);
        else
            expect_result(&in, SNI_ABSENT);
        assert_false(last_encrypted);
        prefixes_need_more(&in);

        /* The same message over records of 1, 7 and 100 bytes. */
        message_of(&in, &msg);
        static const size_t frags[] = {1, 7, 100};
        for (size_t f = 0; f < 3; f++) {
            records(&msg, frags[f], &out);
            if (caps[i].name != NULL)
                expect_found(&out, caps[i].name);
            else
                expect_result(&out, SNI_ABSENT);
            if (frags[f] == 100)
                prefixes_need_more(&out);
        }

        /* Trailing bytes (another record, garbage) are ignored. */
        static const char tail[] = "\x17\x03\x03\x00\x01X garbage";
        put(&in, tail, sizeof(tail) - 1);
        if (caps[i].name != NULL)
            expect_found(&in, caps[i].name);
        else
            expect_result(&in, SNI_ABSENT);
    }
}

/* An outer ECHClientHello (draft-ietf-tls-esni 5): type outer, HPKE
 * suite, config_id, enc and payload, as extension <type>. */
static void ext_ech(struct bytes *e, unsigned type)
{
    struct bytes body = {.n = 0};
    put8(&body, 0);    /* ECHClientHelloType outer */
    put16(&body, 1);   /* kdf_id HKDF-SHA256 */
    put16(&body, 1);   /* aead_id AES-128-GCM */
    put8(&body, 0x2a); /* config_id */
    put16(&body, 32);  /* enc: an X25519 public key */
    for (int i = 0; i < 32; i++)
        put8(&body, 0x11);
    put16(&body, 200); /* payload: the encrypted inner ClientHello */
    for (int i = 0; i < 200; i++)
        put8(&body, 0x22);
    put16(e, type);
    put16(e, body.n);
    put(e, body.b, body.n);
}

static void test_encrypted_hello(void **state)
{
    (void)state;
    static const struct {
        unsigned type;
        bool encrypted;
    } types[] = {
        {0xfe0d, true},
        {0xfe08, true},
        {0xfe0a, true},
        {0xfe0c, true},
        {0xffce, true},
        {0xff02, true}, /* draft 7's encrypted_client_hello */
        {0xfe07, false},
        {0xfe0e, false},
        {0xffcd, false},
        {0xffcf, false},
        {0x000d, false},
        {0xff01, false}, /* renegotiation_info */
        {0xff03, false},
        /* Not refused: ech_outer_extensions (0xfd00), valid only inside
         * the encrypted inner hello (draft-ietf-tls-esni 5.1: it carries
         * nothing to decrypt in an outer one), GREASE (RFC 8701:
         * Chromium and BoringSSL send such values to every host) and a code
         * point of the private use range: no shared front decrypts an inner
         * hello under a code point its TLS stack does not know, and a
         * server that does is the agent's own, which needs no inner hello
         * to be told anything. */
        {0xfd00, false},
        {0x0a0a, false},
        {0xfafa, false},
        {0xff00, false},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        assert_int_equal(sni_encrypted_extension(types[i].type), types[i].encrypted);
        /* The outer name is found as any other, with the flag beside it,
         * wherever the extension stands. */
        ext.n = 0;
        ext_other(&ext, 10, 4);
        ext_ech(&ext, types[i].type);
        ext_sni(&ext, "public.example", 14);
        build(&ext, &out);
        expect_found(&out, "public.example");
        assert_int_equal(last_encrypted, types[i].encrypted);
        prefixes_need_more(&out);
        ext.n = 0;
        ext_sni(&ext, "public.example", 14);
        ext_ech(&ext, types[i].type);
        build(&ext, &out);
        expect_found(&out, "public.example");
        assert_int_equal(last_encrypted, types[i].encrypted);
        /* Without a server_name. */
        ext.n = 0;
        ext_ech(&ext, types[i].type);
        build(&ext, &out);
        expect_result(&out, SNI_ABSENT);
        assert_int_equal(last_encrypted, types[i].encrypted);
        /* Over records of 7 bytes. */
        message_of(&out, &msg);
        records(&msg, 7, &in);
        expect_result(&in, SNI_ABSENT);
        assert_int_equal(last_encrypted, types[i].encrypted);
    }
    /* A malformed hello says nothing of ECH, even with the extension in it. */
    ext.n = 0;
    ext_ech(&ext, 0xfe0d);
    ext_sni(&ext, "public.example", 14);
    build(&ext, &out);
    out.b[9] = 2; /* legacy_version 2.3 */
    expect_result(&out, SNI_MALFORMED);
    assert_false(last_encrypted);
    /* Nor does one whose name does not fit the caller's buffer. */
    build(&ext, &out);
    char small[8];
    size_t len = 0;
    assert_int_equal(run(out.b, out.n, small, sizeof(small), &len), SNI_MALFORMED);
    assert_false(last_encrypted);
}

static void test_not_tls(void **state)
{
    (void)state;
    static const struct {
        const char *b;
        size_t n;
    } cases[] = {
        {"GET / HTTP/1.1\r\n", 16},
        {"CONNECT", 7},
        {"\x80\x2e\x01\x03\x01\x00\x15", 7}, /* SSLv2 ClientHello */
        {"\x13\x03\x03\x00\x01X", 6},        /* type 19: not a TLS type */
        {"\x19\x03\x03\x00\x01X", 6},        /* type 25 */
        {"\x17\x02", 2},                     /* application_data, version 2.x */
        {"\x14\x00", 2},                     /* change_cipher_spec, version 0.x */
        {"\x18\x0f", 2},                     /* heartbeat, version 15.x */
        {"\x15\x10\x03\x00\x02\x02\x28", 7}, /* an alert, version 16.3 */
        {"\x16\x10", 2},                     /* a handshake, version 16.x */
        {"\x16\xff", 2},
    };
    char name[SNI_NAME_MAX + 1];
    size_t len;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(run((const uint8_t *)cases[i].b, cases[i].n, name, sizeof(name), &len),
                         SNI_NOT_TLS);
    assert_int_equal(run((const uint8_t *)"\x16", 1, name, sizeof(name), &len), SNI_NEED_MORE);
    assert_int_equal(run((const uint8_t *)"\x16\x03\x00\x00", 4, name, sizeof(name), &len),
                     SNI_NEED_MORE);
    assert_int_equal(run((const uint8_t *)"", 0, name, sizeof(name), &len), SNI_NEED_MORE);
    /* Any record version 3.x is TLS: a prefix of a handshake record is
     * NEED_MORE, never NOT_TLS (a server accepts the hello in it). */
    assert_int_equal(run((const uint8_t *)"\x16\x03\x05", 3, name, sizeof(name), &len),
                     SNI_NEED_MORE);
    assert_int_equal(run((const uint8_t *)"\x16\x03\xff\x00", 4, name, sizeof(name), &len),
                     SNI_NEED_MORE);
    /* The other TLS record types first are TLS, not a ClientHello: MALFORMED
     * (an alert before the hello, which some servers skip, included). One
     * byte of them is still NEED_MORE. */
    static const struct {
        const char *b;
        size_t n;
    } other[] = {
        {"\x14\x03\x03\x00\x01\x01", 6},         /* change_cipher_spec */
        {"\x15\x03\x03\x00\x02\x02\x28", 7},     /* fatal alert */
        {"\x15\x03\x01\x00\x02\x01\x5a", 7},     /* warning alert */
        {"\x15\x03", 2},                         /* an alert's header, cut */
        {"\x17\x03\x03\x00\x01X", 6},            /* application_data */
        {"\x18\x03\x07\x00\x03\x01\x00\x00", 8}, /* heartbeat, version 3.7 */
        {"\x15\x04\x03\x00\x02\x02\x28", 7},     /* an alert, version 4.3 (Go takes it) */
        {"\x15\x00\x00\x00\x02\x01\x5a", 7},     /* a warning alert, version 0.0 */
        {"\x16\x02\x00\x00\x00", 5},             /* a zero-length handshake, version 2.0 */
    };
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        assert_int_equal(run((const uint8_t *)other[i].b, other[i].n, name, sizeof(name), &len),
                         SNI_MALFORMED);
    for (uint8_t t = 20; t <= 24; t++)
        assert_int_equal(run(&t, 1, name, sizeof(name), &len), SNI_NEED_MORE);
}

/* A ClientHello in records of any version 3.x (the first record also 0.x to
 * 15.x, as Go takes) is parsed and its name found;
 * a hello behind a leading alert record is MALFORMED, not skipped. */
static void test_record_versions(void **state)
{
    (void)state;
    ext.n = 0;
    ext_sni(&ext, "evil.test", 9);
    hello(&ext, &msg);
    static const unsigned minors[] = {0, 1, 3, 4, 5, 9, 0xff};
    for (size_t i = 0; i < sizeof(minors) / sizeof(minors[0]); i++) {
        records(&msg, 16384, &out);
        out.b[2] = (uint8_t)minors[i];
        expect_found(&out, "evil.test");
        prefixes_need_more(&out);
        /* Fragmented, every record with that version. */
        records(&msg, 50, &out);
        for (size_t off = 0; off < out.n; off += 5 + 50)
            out.b[off + 2] = (uint8_t)minors[i];
        expect_found(&out, "evil.test");
    }
    /* Go's crypto/tls takes a first handshake record of any version below
     * 0x1000: such a record is TLS and its name found, not NOT_TLS. Later
     * records must still be 3.x. */
    static const unsigned majors[] = {0, 1, 2, 4, 9, 15};
    for (size_t i = 0; i < sizeof(majors) / sizeof(majors[0]); i++) {
        records(&msg, 16384, &out);
        out.b[1] = (uint8_t)majors[i];
        out.b[2] = 1;
        expect_found(&out, "evil.test");
        prefixes_need_more(&out);
        records(&msg, 50, &out);
        out.b[1] = (uint8_t)majors[i];
        expect_found(&out, "evil.test");
        out.b[5 + 50 + 1] = (uint8_t)majors[i];
        expect_result(&out, SNI_MALFORMED);
    }
    /* The captured real hello behind a warning alert, and behind a
     * change_cipher_spec record. */
    load("clienthello_python.bin", &in);
    static const uint8_t alert[] = {21, 3, 1, 0, 2, 1, 90};
    static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1};
    out.n = 0;
    put(&out, alert, sizeof(alert));
    put(&out, in.b, in.n);
    expect_result(&out, SNI_MALFORMED);
    out.n = 0;
    put(&out, ccs, sizeof(ccs));
    put(&out, in.b, in.n);
    expect_result(&out, SNI_MALFORMED);
}

static void test_built_found_and_absent(void **state)
{
    (void)state;
    char name[SNI_NAME_MAX + 1];

    ext.n = 0;
    ext_other(&ext, 10, 4);
    ext_sni(&ext, "Example.COM.", 12);
    ext_other(&ext, 0xff01, 1);
    build(&ext, &out);
    expect_found(&out, "Example.COM.");
    prefixes_need_more(&out);

    /* No extensions block at all; an empty one; no server_name. */
    build(NULL, &out);
    expect_result(&out, SNI_ABSENT);
    prefixes_need_more(&out);
    ext.n = 0;
    build(&ext, &out);
    expect_result(&out, SNI_ABSENT);
    ext_other(&ext, 10, 4);
    build(&ext, &out);
    expect_result(&out, SNI_ABSENT);

    /* server_name with only a non-host_name entry: RFC 6066 defines
     * host_name alone, and a lax server could take that entry as the name
     * (was ABSENT, the entry skipped). */
    ext.n = 0;
    put16(&ext, 0);
    put16(&ext, 2 + 3 + 2);
    put16(&ext, 3 + 2);
    put8(&ext, 7);
    put16(&ext, 2);
    put(&ext, "ab", 2);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);

    /* A name of SNI_NAME_MAX bytes fits; it needs SNI_NAME_MAX + 1 of room. */
    char big[SNI_NAME_MAX + 2];
    memset(big, 'a', sizeof(big));
    ext.n = 0;
    ext_sni(&ext, big, SNI_NAME_MAX);
    build(&ext, &out);
    assert_int_equal(parse(&out, name), SNI_FOUND);
    assert_int_equal(strlen(name), SNI_NAME_MAX);
    size_t len;
    assert_int_equal(run(out.b, out.n, name, SNI_NAME_MAX, &len), SNI_MALFORMED);
    assert_int_equal(run(out.b, out.n, name, 0, &len), SNI_MALFORMED);

    /* The largest ClientHello: a 16384-byte message body over two records. */
    ext.n = 0;
    ext_sni(&ext, "big.test", 8);
    hello(&ext, &msg);
    size_t pad = 16384 + 4 - msg.n - 4; /* padding extension (21) data length */
    ext_other(&ext, 21, pad);
    hello(&ext, &msg);
    assert_int_equal(msg.n, 16384 + 4);
    records(&msg, 16384, &out);
    expect_found(&out, "big.test");
    /* One byte more is refused. */
    ext.n = 0;
    ext_sni(&ext, "big.test", 8);
    ext_other(&ext, 21, pad + 1);
    hello(&ext, &msg);
    records(&msg, 16384, &out);
    expect_result(&out, SNI_MALFORMED);
}

/* Builds a valid message, lets <mutate> damage it, and expects MALFORMED. */
static void test_malformed(void **state)
{
    (void)state;
    char name[SNI_NAME_MAX + 1];

    /* Record layer. */
    ext.n = 0;
    ext_sni(&ext, "a.test", 6);
    hello(&ext, &msg);
    records(&msg, 16384, &out);
    expect_found(&out, "a.test");
    struct bytes m = out;
    m.b[3] = 0;
    m.b[4] = 0; /* zero-length record */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[3] = 0x40;
    m.b[4] = 0x01; /* 16385-byte record */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[5] = 2; /* ServerHello */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[6] = 0x01; /* message length 65536 + ... > 16384 */
    expect_result(&m, SNI_MALFORMED);

    /* A second record of another type, or bad version, mid-message. */
    records(&msg, 10, &out);
    m = out;
    m.b[15] = 23;
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[16] = 2;
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[16] = 4; /* major version 4 */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[15] = 21; /* an alert between the fragments */
    expect_result(&m, SNI_MALFORMED);

    /* ClientHello body fields; offsets in the one-record form:
     * 5 record header, 4 handshake header, 9 legacy_version, 11 random,
     * 43 session id length, 44 session id, 76 cipher suites length,
     * 78 suites, 82 compression length, 83 method, 84 extensions length. */
    records(&msg, 16384, &out);
    m = out;
    m.b[9] = 2; /* legacy_version 2.x */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[43] = 33; /* session id too long */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[77] = 3; /* odd cipher suites length */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[77] = 0; /* no cipher suites */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[82] = 0; /* no compression method */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[85]++; /* extensions length longer than the message */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[85]--; /* shorter: trailing bytes */
    expect_result(&m, SNI_MALFORMED);
    /* Extension lengths: 86 type, 88 ext len, 90 list len, 92 name type,
     * 93 name len, 95 name. */
    m = out;
    m.b[89]++;
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[91]--; /* list length mismatch */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[94]++; /* name runs past the list */
    expect_result(&m, SNI_MALFORMED);
    m = out;
    m.b[96] = 0; /* NUL in the name */
    expect_result(&m, SNI_MALFORMED);
    assert_int_equal(parse(&m, name), SNI_MALFORMED);

    /* Duplicate server_name extensions; two host_names in one list. */
    ext.n = 0;
    ext_sni(&ext, "a.test", 6);
    ext_sni(&ext, "b.test", 6);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);
    ext.n = 0;
    put16(&ext, 0);
    put16(&ext, 2 + 2 * (3 + 6));
    put16(&ext, 2 * (3 + 6));
    put8(&ext, 0);
    put16(&ext, 6);
    put(&ext, "a.test", 6);
    put8(&ext, 0);
    put16(&ext, 6);
    put(&ext, "b.test", 6);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);

    /* A host_name beside an entry of another type, before or after it:
     * a server that takes the first entry whatever its type would serve
     * the other name, not the one checked. */
    static const unsigned other_types[] = {1, 7, 255};
    for (size_t t = 0; t < sizeof(other_types) / sizeof(other_types[0]); t++)
        for (int other_first = 0; other_first < 2; other_first++) {
            ext.n = 0;
            put16(&ext, 0);
            put16(&ext, 2 + 2 * (3 + 6));
            put16(&ext, 2 * (3 + 6));
            put8(&ext, other_first ? other_types[t] : 0);
            put16(&ext, 6);
            put(&ext, other_first ? "b.test" : "a.test", 6);
            put8(&ext, other_first ? 0 : other_types[t]);
            put16(&ext, 6);
            put(&ext, other_first ? "a.test" : "b.test", 6);
            build(&ext, &out);
            expect_result(&out, SNI_MALFORMED);
        }

    /* Empty name, empty list, empty extension, name over 255 bytes. */
    ext.n = 0;
    ext_sni(&ext, "", 0);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);
    ext.n = 0;
    put16(&ext, 0);
    put16(&ext, 2);
    put16(&ext, 0);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);
    ext.n = 0;
    put16(&ext, 0);
    put16(&ext, 0);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);
    char big[SNI_NAME_MAX + 1];
    memset(big, 'a', sizeof(big));
    ext.n = 0;
    ext_sni(&ext, big, SNI_NAME_MAX + 1);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);

    /* An extension header cut by the end of the block. */
    ext.n = 0;
    ext_sni(&ext, "a.test", 6);
    put8(&ext, 0);
    put8(&ext, 10);
    build(&ext, &out);
    expect_result(&out, SNI_MALFORMED);
    /* A truncated message body whose declared end is inside a field. */
    build(NULL, &out);
    m = out;
    m.b[8] -= 1; /* message one byte shorter than its compression methods */
    m.b[4] -= 1;
    m.n -= 1;
    expect_result(&m, SNI_MALFORMED);
}

/* The records a ClientHello takes are its <used>; a hello that does not end
 * where its record ends is MALFORMED (RFC 8446 5.1: nothing may ride
 * behind it, such as a second ClientHello). */
static void test_used_and_record_boundary(void **state)
{
    (void)state;
    char name[SNI_NAME_MAX + 1];
    size_t len;
    ext.n = 0;
    ext_sni(&ext, "a.test", 6);
    hello(&ext, &msg);
    records(&msg, 16384, &out);
    size_t whole = out.n;
    static const char tail[] = "\x14\x03\x03\x00\x01\x01\x16\x03\x01";
    put(&out, tail, sizeof(tail) - 1);
    expect_found(&out, "a.test");
    assert_int_equal(last_used, whole);
    records(&msg, 7, &out);
    whole = out.n;
    put(&out, tail, sizeof(tail) - 1);
    expect_found(&out, "a.test");
    assert_int_equal(last_used, whole);
    build(NULL, &out);
    assert_int_equal(run(out.b, out.n, name, sizeof(name), &len), SNI_ABSENT);
    assert_int_equal(last_used, out.n);

    /* One more byte in the hello's record, whole or cut after the hello. */
    records(&msg, 16384, &out);
    out.b[4]++;
    put8(&out, 0x01);
    expect_result(&out, SNI_MALFORMED);
    out.n--;
    expect_result(&out, SNI_MALFORMED);
    /* A second ClientHello in the same record. */
    struct bytes two = {.n = 0};
    put(&two, msg.b, msg.n);
    put(&two, msg.b, msg.n);
    records(&two, 16384, &out);
    expect_result(&out, SNI_MALFORMED);
}

/* What sni_parse_missing() says is missing from a prefix of a hello is
 * never more than what the hello lacks: the records that carry it are
 * <whole> bytes, so a prefix of <n> bytes lacks at least <missing> of them.
 * Within one record it is exact, once the handshake header is in. */
static void missing_within(const struct bytes *b, bool one_record)
{
    char name[SNI_NAME_MAX + 1];
    size_t len;
    assert_true(run(b->b, b->n, name, sizeof(name), &len) != SNI_NEED_MORE);
    size_t whole = last_used;
    for (size_t n = 0; n < whole; n++) {
        assert_int_equal(run(b->b, n, name, sizeof(name), &len), SNI_NEED_MORE);
        if (n + last_missing > whole)
            fail_msg("prefix %zu of %zu: %zu missing", n, whole, last_missing);
        if (one_record && n >= 9)
            assert_int_equal(n + last_missing, whole);
    }
}

/* The reads of a hello arriving a byte at a time that a caller waiting for
 * <missing> bytes parses at (connect.c's peek): the hello is decided at its
 * last byte, parsing a few times, not once per byte. */
static size_t parses_when_trickled(const struct bytes *b)
{
    char name[SNI_NAME_MAX + 1];
    size_t len, wait = 0, parses = 0;
    for (size_t n = 1; n <= b->n; n++) {
        if (n < wait)
            continue;
        parses++;
        enum sni_result r = run(b->b, n, name, sizeof(name), &len);
        if (r != SNI_NEED_MORE) {
            assert_int_equal(n, b->n);
            return parses;
        }
        wait = n + last_missing;
    }
    fail_msg("never decided");
    return 0;
}

static void test_missing_bytes(void **state)
{
    (void)state;
    static const char *const files[] = {"clienthello_curl.bin", "clienthello_openssl.bin",
                                        "clienthello_python.bin", "clienthello_openssl_nosni.bin"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        load(files[i], &in);
        message_of(&in, &msg);
        records(&msg, 16384, &out);
        missing_within(&out, true);
        size_t one = parses_when_trickled(&out);
        records(&msg, 1, &out); /* 1-byte records: 6 bytes each */
        missing_within(&out, false);
        size_t tiny = parses_when_trickled(&out);
        records(&msg, 100, &out);
        missing_within(&out, false);
        /* One record: the header bytes one by one, then the whole rest. In
         * 1-byte records each parse waits for a sixth of what is left at
         * least: a few dozen parses for thousands of reads. */
        assert_true(one <= 10);
        if (tiny > 120)
            fail_msg("%s in 1-byte records (%zu bytes): %zu parses", files[i], out.n, tiny);
    }
    /* A hello longer than its first records: still never over. */
    ext.n = 0;
    ext_sni(&ext, "a.test", 6);
    ext_other(&ext, 0x0015, 12000);
    hello(&ext, &msg);
    records(&msg, 4000, &out);
    missing_within(&out, false);
}

static void test_skip_ccs(void **state)
{
    (void)state;
    bool more;
    static const uint8_t ccs[] = {20, 3, 3, 0, 1, 1, 22, 3, 1};
    assert_int_equal(sni_skip_ccs(ccs, sizeof(ccs), &more), 6);
    assert_false(more);
    for (size_t n = 1; n < 6; n++) {
        assert_int_equal(sni_skip_ccs(ccs, n, &more), 0);
        assert_true(more);
    }
    assert_int_equal(sni_skip_ccs(ccs, 0, &more), 0);
    assert_false(more);
    static const uint8_t others[][6] = {
        {22, 3, 1, 0, 1, 1}, /* a handshake record */
        {20, 3, 3, 0, 2, 1}, /* a longer change_cipher_spec */
        {20, 3, 3, 0, 1, 2}, /* another value */
        {20, 2, 3, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        assert_int_equal(sni_skip_ccs(others[i], 6, &more), 0);
        assert_false(more);
    }
}

/* A server's answer: a HelloRetryRequest, whole or over records of 1 and 5
 * bytes, is RETRY and every prefix NEED_MORE (the client answers only the
 * whole message), unless a record that is not a handshake record cuts it;
 * a ServerHello, an alert or anything else is OTHER. */
static void test_server_reply(void **state)
{
    (void)state;
    static const uint8_t hrr_random[32] = {
        0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c,
        0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb,
        0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
    };
    struct bytes sh = {.n = 0}, body = {.n = 0};
    put16(&body, 0x0303);
    put(&body, hrr_random, 32);
    put8(&body, 0);
    put16(&body, 0x1301);
    put8(&body, 0);
    put16(&body, 6);
    put16(&body, 51); /* key_share: x25519 */
    put16(&body, 2);
    put16(&body, 0x001d);
    put8(&sh, 2);
    put24(&sh, body.n);
    put(&sh, body.b, body.n);
    static const size_t frags[] = {1, 5, 16384};
    for (size_t f = 0; f < 3; f++) {
        records(&sh, frags[f], &out);
        assert_int_equal(sni_server_reply(out.b, out.n), SNI_REPLY_RETRY);
        for (size_t n = 0; n < out.n; n++)
            assert_int_equal(sni_server_reply(out.b, n), SNI_REPLY_NEED_MORE);
    }
    struct bytes m = out; /* one record: cut after the random, then an alert */
    size_t cut = 5 + 38;
    m.b[3] = 0;
    m.b[4] = 38;
    static const uint8_t alert_rec[] = {21, 3, 3, 0, 2, 2, 40};
    memcpy(m.b + cut, alert_rec, sizeof(alert_rec));
    assert_int_equal(sni_server_reply(m.b, cut), SNI_REPLY_NEED_MORE);
    assert_int_equal(sni_server_reply(m.b, cut + 1), SNI_REPLY_RETRY);
    m = out;
    m.b[5 + 4 + 2 + 31] ^= 1; /* another random: a ServerHello */
    assert_int_equal(sni_server_reply(m.b, m.n), SNI_REPLY_OTHER);
    m = out;
    m.b[5] = 1; /* not a ServerHello */
    assert_int_equal(sni_server_reply(m.b, m.n), SNI_REPLY_OTHER);
    m = out;
    m.b[1] = 2; /* record version 2.x */
    assert_int_equal(sni_server_reply(m.b, m.n), SNI_REPLY_OTHER);
    static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 40};
    assert_int_equal(sni_server_reply(alert, sizeof(alert)), SNI_REPLY_OTHER);
    assert_int_equal(sni_server_reply((const uint8_t *)"SSH-2.0-x\r\n", 11), SNI_REPLY_OTHER);
    static const uint8_t empty[] = {22, 3, 3, 0, 0, 2};
    assert_int_equal(sni_server_reply(empty, sizeof(empty)), SNI_REPLY_OTHER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_captures),        cmocka_unit_test(test_not_tls),
        cmocka_unit_test(test_record_versions), cmocka_unit_test(test_built_found_and_absent),
        cmocka_unit_test(test_malformed),       cmocka_unit_test(test_used_and_record_boundary),
        cmocka_unit_test(test_skip_ccs),        cmocka_unit_test(test_server_reply),
        cmocka_unit_test(test_encrypted_hello), cmocka_unit_test(test_missing_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
