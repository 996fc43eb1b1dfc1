/* sni: the server name a TLS client asks for, read from its ClientHello.
 *
 * Used on the first bytes of a CONNECT tunnel, before they are forwarded, to
 * refuse a tunnel whose SNI names another host than the CONNECT target
 * (sni_mismatch). Pure: no allocation, no TLS library. Reassembles a
 * ClientHello fragmented over several handshake records (record version 3.x,
 * any minor: servers accept legacy record versions they do not know),
 * bounded to SNI_MAX_HELLO bytes of handshake message, and bounds-checks
 * every length it walks. The input is TLS as soon as its first record
 * header is one a TLS server takes: a TLS content type (20 to 24) with major
 * version 3, or a handshake (22) or alert (21) record with any major version
 * below 16 (Go's crypto/tls takes those): from then on it is a ClientHello
 * or MALFORMED (a leading alert or any other non-handshake record included),
 * never NOT_TLS. */
#ifndef SLUICE_GATE_SNI_H
#define SLUICE_GATE_SNI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SNI_NAME_MAX  255         /* bytes in a server name */
#define SNI_MAX_HELLO (16384 + 4) /* handshake header + ClientHello body */

enum sni_result {
    SNI_FOUND,     /* <name> holds the host_name */
    SNI_ABSENT,    /* a valid ClientHello without a server_name extension */
    SNI_NEED_MORE, /* the bytes so far are a valid prefix of a ClientHello */
    SNI_NOT_TLS,   /* the first record header is not a TLS record (SSLv2 too) */
    SNI_MALFORMED, /* TLS records, but not a valid ClientHello in handshake records */
};

/* Parses the ClientHello at the start of <buf> (<len> bytes). On SNI_FOUND
 * copies the host_name bytes, raw (the caller normalises them; never a NUL,
 * 1 to SNI_NAME_MAX bytes), into <name> followed by a NUL, and sets
 * <*name_len> (without the NUL). A name that does not fit <name_cap> - 1 is
 * SNI_MALFORMED: pass SNI_NAME_MAX + 1 bytes. NEED_MORE is only returned for
 * a prefix that is valid so far: a prefix of a FOUND/ABSENT input is never
 * MALFORMED. The ClientHello must end where its last record ends (RFC 8446
 * 5.1; else MALFORMED); on FOUND and ABSENT <*used> is the length of the
 * records that carry it (0 otherwise). Bytes after them are ignored.
 * <*encrypted> is set on FOUND and ABSENT when the ClientHello carries an
 * Encrypted Client Hello extension (see sni_encrypted_extension()): its
 * server_name is then an outer one, and the name the server serves may be
 * another, hidden from the gateway. */
enum sni_result sni_parse(const uint8_t *buf, size_t len, char *name, size_t name_cap,
                          size_t *name_len, size_t *used, bool *encrypted);

/* sni_parse(), and on SNI_NEED_MORE sets <*missing> to the number of bytes
 * that must still come before the result can be FOUND or ABSENT: the
 * handshake bytes the ClientHello lacks once its length is known (the
 * record headers that will carry them not counted), else 1; 0 on any other
 * result. Fewer bytes may still show the hello MALFORMED. A caller fed a
 * hello in pieces can wait for that many before it parses again, so that a
 * hello trickled in small records is not parsed from its start at every
 * read. */
enum sni_result sni_parse_missing(const uint8_t *buf, size_t len, char *name, size_t name_cap,
                                  size_t *name_len, size_t *used, bool *encrypted, size_t *missing);

/* True for an extension type that carries an encrypted ClientHello or
 * server name: encrypted_client_hello (0xfe0d, draft-ietf-tls-esni), the code points
 * of its drafts 8 to 12 (0xfe08 to 0xfe0c) and of draft 7 (0xff02), and the
 * ESNI extension of the drafts before them (0xffce, which Firefox shipped).
 * Any other type is false on purpose: a shared front decrypts an inner
 * hello only under a code point its TLS stack knows (IANA registers 0xfe0d
 * alone for it; 0xfd00, ech_outer_extensions, is valid inside the encrypted
 * inner hello only), and refusing unknown types would refuse GREASE (RFC 8701) and
 * every new extension. */
bool sni_encrypted_extension(unsigned type);

/* The length of the change_cipher_spec record (20 3.x 0 1 1) at the start
 * of <buf>, which a TLS 1.3 client may send before its second ClientHello
 * (RFC 8446 D.4); 0 when there is none, with <*need_more> set when the
 * <len> bytes may be the start of one. */
size_t sni_skip_ccs(const uint8_t *buf, size_t len, bool *need_more);

enum sni_reply {
    SNI_REPLY_NEED_MORE, /* a prefix of a ServerHello record */
    SNI_REPLY_RETRY,     /* a HelloRetryRequest: a second ClientHello follows */
    SNI_REPLY_OTHER,     /* a ServerHello, or anything else */
};

/* Tells whether the first bytes a server answered a ClientHello with are a
 * HelloRetryRequest (RFC 8446 4.1.3: a ServerHello whose random is
 * SHA-256("HelloRetryRequest")), gathered over handshake records. RETRY
 * only once the whole message is there (NEED_MORE before: the client
 * sends its second ClientHello only after all of it), or a record that is
 * not a handshake record follows what there is of it. */
enum sni_reply sni_server_reply(const uint8_t *buf, size_t len);

#endif
